//! The files under `hw/` that users write: testbed profiles, the shell declaration and the units' declarations.

use fracflow_emulator::build::weave_shell;
use fracflow_emulator::spec::{ShellSpec, UnitSpec};
use fracflow_executors::testbed::{TestbedProfile, fingerprint_fields, load_profile};

use crate::Input;
use crate::scratch::scratch;

/// Parses `value`'s YAML rendering back; it must be `value` again.
fn assert_yaml_round_trip<T>(value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let rendered = match serde_saphyr::to_string(value) {
        Ok(rendered) => rendered,
        Err(e) => panic!("a parsed value does not render as YAML: {e}\n{value:?}"),
    };
    match serde_saphyr::from_str::<T>(&rendered) {
        Ok(again) => assert_eq!(
            &again, value,
            "parse → render → parse changed it:\n{rendered}"
        ),
        Err(e) => panic!("its YAML rendering does not parse: {e}\n{rendered}"),
    }
}

/// The first two bytes are a client's `-n` and `-C` (each 1..=256), the rest a testbed profile, loaded through
/// `load_profile` from the scratch project's `hw/testbeds/`. An accepted profile renders to YAML that parses to
/// the same profile, and its adaptation, applied to that client, keeps the total number of connections, uses no
/// more threads than its limit, and never more than the client asked for.
pub fn testbed_profile(data: &[u8]) {
    let mut input = Input::new(data);
    let threads = u32::from(input.byte()) + 1;
    let conns = u32::from(input.byte()) + 1;
    let scratch = scratch();
    let file = scratch.root.join("hw/testbeds/fuzz_input.yaml");
    if std::fs::write(&file, input.rest()).is_err() {
        return;
    }
    let Ok(profile) = load_profile(&scratch.root, "fuzz_input") else {
        return;
    };
    assert_yaml_round_trip::<TestbedProfile>(&profile);
    let fields = fingerprint_fields("fuzz_input", &profile);
    assert_eq!(
        fields.get("kind"),
        Some(&serde_json::json!(profile.kind.as_str()))
    );
    let mut client = fracflow_client::ClientConfig {
        threads,
        conns_per_thread: conns,
        start_cpu: Some(0),
        ..fracflow_client::ClientConfig::default()
    };
    let note = profile.adapt.apply(&mut client);
    assert_eq!(
        client.threads * client.conns_per_thread,
        threads * conns,
        "the adaptation changed the number of connections"
    );
    assert!(client.threads <= threads);
    if let Some(limit) = profile.adapt.client_threads() {
        assert!(client.threads <= limit.max(1));
    }
    assert_eq!(
        note.is_some(),
        client.threads != threads || client.start_cpu.is_none()
    );
}

/// The input as `hw/shell.yaml`, read by `ShellSpec::load`. An accepted shell passes its own check, renders to
/// YAML that parses to the same shell, and weaves with the repository's units or fails with an error.
pub fn hw_shell(data: &[u8]) {
    let scratch = scratch();
    let file = scratch.root.join("hw/fuzz_shell.yaml");
    if std::fs::write(&file, data).is_err() {
        return;
    }
    let Ok(shell) = ShellSpec::load(&file) else {
        return;
    };
    assert_eq!(shell.check(), Ok(()));
    assert_yaml_round_trip::<ShellSpec>(&shell);
    if let Ok(manifest) = weave_shell(&shell, repository_units()) {
        assert_eq!(manifest.cells.len(), shell.cells.len());
    }
}

/// The input as `hw/accelerators/top_k/unit.yaml` of a scratch copy, read by `UnitSpec::load`. An accepted unit
/// is named after its directory, lists a cell, renders to YAML that parses to the same unit, and weaves with the
/// repository's shell and other units or fails with an error.
pub fn hw_unit(data: &[u8]) {
    let scratch = scratch();
    let dir = scratch.root.join("fuzz_units/top_k");
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::write(dir.join("unit.yaml"), data).is_err()
    {
        return;
    }
    let Ok(unit) = UnitSpec::load(&dir) else {
        return;
    };
    assert_eq!(unit.name, "top_k");
    assert!(!unit.cells.is_empty());
    assert_yaml_round_trip::<UnitSpec>(&unit);
    let mut units: Vec<UnitSpec> = repository_units()
        .iter()
        .filter(|u| u.name != unit.name)
        .cloned()
        .collect();
    units.push(unit);
    let shell_path = crate::scratch::repository().join("hw/shell.yaml");
    if let Ok(shell) = ShellSpec::load(&shell_path) {
        let _ = weave_shell(&shell, &units);
    }
}

/// The repository's own unit declarations, read once.
fn repository_units() -> &'static [UnitSpec] {
    static UNITS: std::sync::OnceLock<Vec<UnitSpec>> = std::sync::OnceLock::new();
    UNITS.get_or_init(|| {
        let dir = crate::scratch::repository().join("hw/accelerators");
        let mut units = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let Ok(unit) = UnitSpec::load(&entry.path()) {
                units.push(unit);
            }
        }
        units
    })
}
