//! The build chain is incremental per accelerator: each step is a pure
//! function of its inputs, and editing one unit's C++ changes its plugin,
//! its partials and the full image, nothing else.  The device still loads
//! only plugins the programmed full image allows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fracflow_emulator::build::{
    PLUGIN_FILE, UNIT_RECORD_FILE, bypass_image, full_image, partials_for_unit, weave,
    weave_sources, write_design,
};
use fracflow_emulator::{
    CompiledUnit, DesignManifest, Device, DeviceConfig, Error, FullImage, MemoryLog, build_design,
    load_partial, probe,
};
use fracflow_proto::{ErrorCode, Unit};

use crate::common::{built, compiler, copy_tree, files, hw_dir, localhost, wait_for_log};

/// An edit of top_k.cpp that changes the object code but not what the unit
/// answers: a string the plugin must keep (`used`), never read.
const TOP_K_EDIT: &str = "\n// Edited by the incremental build test.\n\
extern \"C\" __attribute__((used, visibility(\"hidden\"))) const char \
frac_incremental_test_marker[] = \"edited by the incremental build test\";\n";

fn path(s: &str) -> PathBuf {
    PathBuf::from(s)
}

#[test]
fn editing_top_k_changes_only_its_plugin_partials_and_full_image() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hw = tmp.path().join("hw");
    copy_tree(&hw_dir(), &hw);
    let before_dir = tmp.path().join("before");
    let after_dir = tmp.path().join("after");
    let (_, design_before, set_before) =
        build_design(&hw, &before_dir, &compiler()).expect("first build");

    let source = hw.join("accelerators/top_k/top_k.cpp");
    let mut text = std::fs::read_to_string(&source).expect("read top_k.cpp");
    text.push_str(TOP_K_EDIT);
    std::fs::write(&source, text).expect("edit top_k.cpp");
    let (units_after, design_after, set_after) =
        build_design(&hw, &after_dir, &compiler()).expect("second build");
    let top_k = units_after
        .iter()
        .find(|u| u.spec.name == "top_k")
        .expect("top_k compiled");
    assert!(
        top_k.diagnostics.trim().is_empty(),
        "the edit compiles cleanly: {}",
        top_k.diagnostics
    );

    // The static shell is the same: same manifest, same build id.
    assert_eq!(design_before, design_after);
    assert_eq!(set_before.build_id, set_after.build_id);
    // The allowlist differs in top_k's entry only.
    for (unit, hash) in &set_before.allowlist {
        assert_eq!(
            hash != &set_after.allowlist[unit],
            unit == "top_k",
            "allowlist entry of {unit}"
        );
    }

    let before = files(&before_dir);
    let after = files(&after_dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same files are written"
    );
    let changed: BTreeSet<PathBuf> = before
        .iter()
        .filter(|(path, bytes)| after[*path] != **bytes)
        .map(|(path, _)| path.clone())
        .collect();
    let expected: BTreeSet<PathBuf> = [
        "plugins/top_k/plugin.so",
        "plugins/top_k/unit.json",
        "bitstreams/icap/c00_f00.bin",
        "bitstreams/icap/c01_f03.bin",
        "bitstreams/icap/c02_f10.bin",
        "bitstreams/icap/c03_f15.bin",
        "bitstreams/jtag/frac.bit",
    ]
    .into_iter()
    .map(path)
    .collect();
    assert_eq!(changed, expected, "exactly these files change");
    // Spelled out: what must stay byte-identical.
    let unchanged: Vec<&PathBuf> = before.keys().filter(|p| !changed.contains(*p)).collect();
    for must in [
        "bitstreams/design.json",
        "bitstreams/bypass/frac.bit",
        "bitstreams/icap/c00_f07.bin",
        "bitstreams/icap/c02_f20.bin",
        "plugins/cnn/plugin.so",
    ] {
        assert!(unchanged.contains(&&path(must)), "{must} is unchanged");
    }
    // 6 units x 2 files, 21 partials, full, bypass, design.json.
    assert_eq!(before.len(), 12 + 21 + 3);
    assert_eq!(unchanged.len(), before.len() - 7);

    // The device: programmed with the first build's full image, it refuses
    // the edited top_k partial (same build id, plugin not allowlisted) and
    // takes the partials the edit did not touch.
    let log = MemoryLog::new(10_000);
    let mut config = DeviceConfig::new(localhost());
    config.image = Some(set_before.full.clone());
    config.log = log.sink();
    let dev = Device::start_with(config).expect("device starts");
    let partial_of = |set: &fracflow_emulator::BitstreamSet, slot: u8, unit: &str| {
        set.partials
            .iter()
            .find(|p| p.cell == slot && p.unit == unit)
            .map(|p| p.path.clone())
            .expect("partial exists")
    };
    load_partial(
        dev.addr(),
        1,
        &partial_of(&set_after, 1, "pattern_slot"),
        256,
        0x1000_4000,
    )
    .expect("an untouched partial of the new build loads into the old image");
    match load_partial(
        dev.addr(),
        1,
        &partial_of(&set_after, 1, "top_k"),
        256,
        0x1000_4000,
    ) {
        Err(Error::Controller {
            op: "RECONF_ICAP",
            code: ErrorCode::Icap,
        }) => {}
        other => panic!("the edited top_k partial must be refused, got {other:?}"),
    }
    let line = wait_for_log(&log, "is not the top_k plugin the programmed image allows");
    assert!(line.contains("c01_f03.bin"), "{line}");
    let slot1 =
        |dev: &fracflow_emulator::RunningDevice| probe(dev.addr(), &[1]).expect("probe")[0].unit;
    assert_eq!(slot1(&dev), Some(Unit::Pattern), "the slot kept its module");

    // Programmed with the second build's full image, the edited top_k
    // partial loads and the first build's one is refused.
    let image = std::fs::read(&set_after.full).expect("read full image");
    dev.program(&image).expect("programs");
    load_partial(
        dev.addr(),
        1,
        &partial_of(&set_after, 1, "pattern_slot"),
        256,
        0x1000_4000,
    )
    .expect("pattern_slot loads");
    load_partial(
        dev.addr(),
        1,
        &partial_of(&set_after, 1, "top_k"),
        256,
        0x1000_4000,
    )
    .expect("the edited top_k partial loads into the edited image");
    assert_eq!(slot1(&dev), Some(Unit::TopK), "and answers as top_k");
    let old = load_partial(
        dev.addr(),
        2,
        &partial_of(&set_before, 2, "top_k"),
        256,
        0x1000_4000,
    );
    assert!(old.is_err(), "the old top_k partial is refused: {old:?}");
    dev.stop();
}

#[test]
fn steps_run_from_files_give_the_build_designs_bytes() {
    // The engine runs each step as its own node and passes files: compile
    // directories, design.json.  Run that way, the steps reproduce the
    // shared build byte for byte.
    let shared = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    let hw = hw_dir();

    let inputs = weave_sources(&hw.join("shell.yaml"), &hw.join("accelerators")).expect("inputs");
    assert_eq!(inputs[0], hw.join("shell.yaml"));
    assert_eq!(inputs.len(), 1 + 6);
    assert!(inputs[1..].iter().all(|p| p.ends_with("unit.yaml")));

    let design = weave(&hw.join("shell.yaml"), &hw.join("accelerators")).expect("weaves");
    assert_eq!(design, shared.design);
    let design_json = write_design(&design, tmp.path()).expect("writes design.json");
    let design = DesignManifest::load(&design_json).expect("reads design.json");
    assert_eq!(design, shared.design);

    let units: Vec<CompiledUnit> = shared
        .units
        .iter()
        .map(|u| {
            let dir = u.plugin.parent().expect("plugin dir");
            assert!(dir.join(UNIT_RECORD_FILE).is_file());
            assert!(u.plugin.ends_with(PLUGIN_FILE));
            let loaded = CompiledUnit::load(dir).expect("loads back");
            assert_eq!(loaded.spec, u.spec);
            assert_eq!(loaded.plugin, u.plugin);
            assert_eq!(loaded.plugin_hash, u.plugin_hash);
            assert_eq!(loaded.plugin_len, u.plugin_len);
            assert_eq!(loaded.compiler_version, u.compiler_version);
            assert_eq!(loaded.diagnostics, u.diagnostics);
            loaded
        })
        .collect();

    let out = tmp.path().join("bits");
    let mut written = Vec::new();
    for unit in &units {
        let partials = partials_for_unit(&design, unit, &out).expect("partials");
        assert!(!partials.is_empty());
        assert!(partials.iter().all(|p| p.unit == unit.spec.name));
        written.extend(partials);
    }
    written.sort_by_key(|p| (p.cell, p.rm_id));
    let mut expected = shared.set.partials.clone();
    expected.sort_by_key(|p| (p.cell, p.rm_id));
    assert_eq!(written.len(), expected.len());
    for (w, e) in written.iter().zip(&expected) {
        assert_eq!((w.cell, w.rm_id, &w.unit), (e.cell, e.rm_id, &e.unit));
        assert_eq!(
            std::fs::read(&w.path).expect("read"),
            std::fs::read(&e.path).expect("read"),
            "{}",
            w.path.display()
        );
    }
    let full = full_image(&design, &units, &out).expect("full image");
    assert_eq!(full.build_id, design.build_id);
    assert_eq!(full.allowlist, shared.set.allowlist);
    assert_eq!(
        std::fs::read(&full.path).expect("read"),
        std::fs::read(&shared.set.full).expect("read")
    );
    let bypass = bypass_image(&out).expect("bypass");
    assert_eq!(
        std::fs::read(bypass).expect("read"),
        std::fs::read(&shared.set.bypass).expect("read")
    );
    let FullImage::Design { allowlist, .. } =
        FullImage::decode(&std::fs::read(&full.path).expect("read")).expect("decodes")
    else {
        panic!("a design image");
    };
    assert_eq!(allowlist.len(), design.units.len());
    for entry in allowlist {
        let unit = units
            .iter()
            .find(|u| u.spec.name == entry.unit)
            .expect("unit");
        assert_eq!(entry.hash.to_hex(), unit.plugin_hash);
    }
}

fn copy_unit(from: &CompiledUnit, to: &Path) -> CompiledUnit {
    std::fs::create_dir_all(to).expect("mkdir");
    let dir = from.plugin.parent().expect("dir");
    for name in [PLUGIN_FILE, UNIT_RECORD_FILE] {
        std::fs::copy(dir.join(name), to.join(name)).expect("copy");
    }
    CompiledUnit::load(to).expect("loads")
}

#[test]
fn steps_refuse_inconsistent_inputs() {
    let shared = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let norm = shared
        .units
        .iter()
        .find(|u| u.spec.name == "norm")
        .expect("norm");

    // A plugin edited after its compile.
    let edited = copy_unit(norm, &tmp.path().join("edited"));
    let mut bytes = std::fs::read(&edited.plugin).expect("read");
    bytes.push(0);
    std::fs::write(&edited.plugin, &bytes).expect("write");
    let err = CompiledUnit::load(&tmp.path().join("edited")).expect_err("stale plugin");
    assert!(err.to_string().contains("its compile recorded"), "{err}");
    let err = partials_for_unit(&shared.design, &edited, &out).expect_err("stale plugin");
    assert!(err.to_string().contains("its compile recorded"), "{err}");

    // A record that points elsewhere, or is not one.
    let elsewhere = tmp.path().join("elsewhere");
    copy_unit(norm, &elsewhere);
    let record = elsewhere.join(UNIT_RECORD_FILE);
    let text = std::fs::read_to_string(&record).expect("read");
    std::fs::write(&record, text.replace("\"plugin.so\"", "\"../x.so\"")).expect("write");
    assert!(matches!(
        CompiledUnit::load(&elsewhere),
        Err(Error::Spec { .. })
    ));
    std::fs::write(&record, "{}").expect("write");
    assert!(matches!(
        CompiledUnit::load(&elsewhere),
        Err(Error::Spec { .. })
    ));
    assert!(matches!(
        CompiledUnit::load(&tmp.path().join("missing")),
        Err(Error::Io { .. })
    ));

    // A unit compiled from another unit.yaml than the woven one.
    let mut other = norm.clone();
    other.spec.version += 1;
    let err = partials_for_unit(&shared.design, &other, &out).expect_err("other unit.yaml");
    assert!(
        err.to_string().contains("differs from the woven one"),
        "{err}"
    );
    let mut units = shared.units.clone();
    for unit in &mut units {
        if unit.spec.name == "norm" {
            unit.spec.version += 1;
        }
    }
    let err = full_image(&shared.design, &units, &out).expect_err("other unit.yaml");
    assert!(
        err.to_string().contains("differs from the woven one"),
        "{err}"
    );

    // Every unit of the design is needed for the full image, each once.
    let without_log: Vec<CompiledUnit> = shared
        .units
        .iter()
        .filter(|u| u.spec.name != "log")
        .cloned()
        .collect();
    let err = full_image(&shared.design, &without_log, &out).expect_err("no log");
    assert!(
        err.to_string().contains("no compiled unit given for log"),
        "{err}"
    );
    let mut twice = shared.units.clone();
    twice.push(norm.clone());
    let err = full_image(&shared.design, &twice, &out).expect_err("twice");
    assert!(err.to_string().contains("given twice"), "{err}");

    // A design.json edited by hand (its build id no longer matches).
    let design_json = write_design(&shared.design, tmp.path()).expect("writes");
    let text = std::fs::read_to_string(&design_json).expect("read");
    std::fs::write(&design_json, text.replace("\"frac\"", "\"edited\"")).expect("write");
    let err = DesignManifest::load(&design_json).expect_err("edited manifest");
    assert!(err.to_string().contains("hashes to"), "{err}");
    assert!(!out.join("icap").exists(), "nothing was written");
}
