//! The dependency direction of engine/ARCHITECTURE.md, read from `cargo metadata`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Which fracflow crates each crate may import (normal and build dependencies).
fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let table: [(&str, &[&str]); 12] = [
        ("fracflow-record", &[]),
        ("fracflow-proto", &[]),
        ("fracflow-core", &["fracflow-record"]),
        ("fracflow-client", &["fracflow-proto", "fracflow-record"]),
        ("fracflow-emulator", &["fracflow-proto", "fracflow-record"]),
        ("fracflow-aggregate", &["fracflow-record"]),
        ("fracflow-plot", &["fracflow-record"]),
        ("fracflow-loader", &["fracflow-core", "fracflow-record"]),
        ("fracflow-remote", &["fracflow-core"]),
        (
            "fracflow-executors",
            &[
                "fracflow-core",
                "fracflow-record",
                "fracflow-proto",
                "fracflow-client",
                "fracflow-emulator",
                "fracflow-aggregate",
                "fracflow-plot",
            ],
        ),
        (
            "fracflow-fuzzing",
            &[
                "fracflow-record",
                "fracflow-loader",
                "fracflow-executors",
                "fracflow-proto",
                "fracflow-client",
                "fracflow-emulator",
                "fracflow-aggregate",
            ],
        ),
        (
            "fracflow-cli",
            &[
                "fracflow-core",
                "fracflow-record",
                "fracflow-loader",
                "fracflow-executors",
                "fracflow-proto",
                "fracflow-client",
                "fracflow-emulator",
                "fracflow-aggregate",
                "fracflow-plot",
                "fracflow-remote",
            ],
        ),
    ];
    table
        .into_iter()
        .map(|(name, deps)| (name, deps.iter().copied().collect()))
        .collect()
}

#[test]
fn crates_import_only_what_the_architecture_allows() {
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace)
        .output()
        .expect("cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("metadata JSON");
    let allowed = allowed();
    let mut violations = Vec::new();
    let packages = metadata["packages"].as_array().expect("packages");
    assert!(packages.len() >= 5, "expected the workspace's crates");
    // The table must stay true: a crate it names that the workspace lacks is stale.
    let present: BTreeSet<&str> = packages
        .iter()
        .filter_map(|package| package["name"].as_str())
        .collect();
    let named: BTreeSet<&str> = allowed
        .iter()
        .flat_map(|(name, deps)| std::iter::once(*name).chain(deps.iter().copied()))
        .collect();
    for name in named {
        if !present.contains(name) {
            violations.push(format!(
                "{name}: in the dependency table of tests/e2e/tidy.rs, but the workspace has no such crate"
            ));
        }
    }
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        let Some(permitted) = allowed.get(name) else {
            violations.push(format!(
                "{name}: not in the dependency table of tests/e2e/tidy.rs and ARCHITECTURE.md"
            ));
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let is_dev = dep["kind"].as_str() == Some("dev");
            if dep_name.starts_with("fracflow-") && !is_dev && !permitted.contains(dep_name) {
                violations.push(format!(
                    "{name} imports {dep_name}, which the architecture forbids"
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the dependency table and the workspace disagree:\n{}",
        violations.join("\n")
    );
}

/// The `fracflow` bin has `test = false` (engine/cli/Cargo.toml: one binary fewer linking polars): unit tests
/// in its one source file, `main.rs`, would silently never run (the library's sources have their own harness).
#[test]
fn the_command_holds_no_unit_tests_that_would_not_run() {
    let main = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs");
    let text = std::fs::read_to_string(&main).expect("engine/cli/src/main.rs");
    assert!(
        !text.contains("#[cfg(test)]"),
        "unit tests in {} do not run: the fracflow bin has `test = false` in engine/cli/Cargo.toml \
         (put them in the library's modules)",
        main.display()
    );
}
