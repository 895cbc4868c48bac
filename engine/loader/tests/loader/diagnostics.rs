//! The bad-input catalogue: every file in `tests/bad/` is a broken pipeline whose exact diagnostics are
//! snapshotted. Header comments set load options: `# test-only: K=V1,V2`, `# test-variant: NAME`,
//! `# test-set: NAME=VALUE`.

use std::path::{Path, PathBuf};

use fracflow_loader::{LoadOptions, load, parse_only, parse_set};

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// Loads `bad/NAME.yaml` with the options its header asks for and returns the rendered diagnostics.
fn rendered(name: &str) -> String {
    let root = fixture_root();
    let entry = Path::new("bad").join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(root.join(&entry)).expect("fixture exists");
    let mut opts = LoadOptions {
        root: root.clone(),
        ..LoadOptions::default()
    };
    for line in text.lines() {
        if let Some(only) = line.strip_prefix("# test-only: ") {
            opts.only
                .push(parse_only(only).expect("valid --only in fixture header"));
        } else if let Some(variant) = line.strip_prefix("# test-variant: ") {
            opts.variant = Some(variant.to_owned());
        } else if let Some(set) = line.strip_prefix("# test-set: ") {
            let (name, value) = parse_set(set).expect("valid --set in fixture header");
            opts.set.insert(name, value);
        }
    }
    match load(&entry, &opts, &fracflow_executors::Registry::builtin()) {
        Ok(_) => panic!("bad/{name}.yaml loaded without errors"),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty());
            diagnostics.to_string()
        }
    }
}

macro_rules! catalogue {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                insta::assert_snapshot!(stringify!($name), rendered(stringify!($name)));
            }
        )*
        const CATALOGUE: &[&str] = &[$(stringify!($name)),*];
    };
}

catalogue! {
    yaml_syntax,
    tab_indent,
    bad_indent,
    duplicate_yaml_key,
    unknown_top_key,
    unknown_node_key,
    unknown_kind,
    kind_key_of_other_kind,
    wrong_type,
    missing_run,
    duplicate_across_uses,
    undefined_dep,
    cycle3,
    base_cycle,
    template_unclosed,
    template_unknown_name,
    division_by_zero,
    param_and_sweep,
    param_cycle,
    missing_input,
    inputs_outside,
    base_outside,
    uses_outside,
    only_bad_key,
    only_bad_value,
    swept_without_foreach,
    foreach_not_swept,
    bad_resource,
    bad_duration,
    output_outside,
    target_unknown_node,
    two_errors,
    unknown_variant,
    set_unknown_param,
    not_a_pipeline,
    uses_missing_file,
    uses_broken_set,
    metric_typo,
    unquoted_template,
    foreach_local_is_swept,
    foreach_sweep_not_swept,
    foreach_bad_axis,
    local_axis_unmatched_dep,
    fpga_bad_values,
    fpga_missing_sources,
    effect_with_outputs,
}

#[test]
fn every_fixture_is_in_the_catalogue() {
    let mut files: Vec<String> = std::fs::read_dir(fixture_root().join("bad"))
        .expect("tests/bad exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    files.sort();
    let mut listed: Vec<String> = CATALOGUE.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(
        files, listed,
        "each tests/bad/*.yaml needs a line in catalogue! (and the other way round)"
    );
    assert!(CATALOGUE.len() >= 18);
}

#[test]
fn three_node_cycle_names_every_member_with_its_position() {
    let text = rendered("cycle3");
    for (name, line) in [("a", 3), ("b", 7), ("c", 11)] {
        assert!(
            text.contains(&format!("`{name}` is declared at bad/cycle3.yaml:{line}:3")),
            "{text}"
        );
    }
}

#[test]
fn all_errors_of_a_file_are_reported_together() {
    let text = rendered("two_errors");
    assert_eq!(text.matches("error: ").count(), 2, "{text}");
}
