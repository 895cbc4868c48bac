//! The emulated HLS → weave → bitstream chain: determinism, errors, layout.

use std::path::Path;

use fracflow_emulator::build::{build_design, compile_unit, compiler_version, weave_shell};
use fracflow_emulator::spec::ShellSpec;
use fracflow_emulator::{Error, FullImage, PartialImage};

use crate::common::{built, compiler, copy_tree, files, hw_dir};

#[test]
fn same_sources_give_the_same_bytes_anywhere() {
    // Two copies of hw/ at different depths and names, built into different
    // output directories, must give byte-identical plugins and images, equal
    // to the shared build from the repository's own hw/.
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let b = tmp.path().join("somewhere/else/entirely");
    copy_tree(&hw_dir(), &a.join("hw"));
    copy_tree(&hw_dir(), &b.join("hw"));
    let (_, design_a, _) =
        build_design(&a.join("hw"), &a.join("out"), &compiler()).expect("build a");
    let (_, design_b, _) =
        build_design(&b.join("hw"), &b.join("out"), &compiler()).expect("build b");
    assert_eq!(design_a, design_b);
    assert_eq!(design_a, built().design);
    let fa = files(&a.join("out"));
    let fb = files(&b.join("out"));
    let shared = files(&built().dir);
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (path, bytes) in &fa {
        assert!(
            fb[path] == *bytes,
            "{} differs between builds",
            path.display()
        );
        assert!(
            shared[path] == *bytes,
            "{} differs from the shared build",
            path.display()
        );
        // No path of the build may leak into an artefact.
        for leak in [a.as_os_str(), tmp.path().as_os_str()] {
            let needle = leak.as_encoded_bytes();
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} contains the build path",
                path.display()
            );
        }
    }
    assert!(fa.contains_key(Path::new("bitstreams/jtag/frac.bit")));
    assert!(fa.contains_key(Path::new("bitstreams/bypass/frac.bit")));
    assert!(fa.contains_key(Path::new("bitstreams/icap/c02_f20.bin")));
    assert!(fa.contains_key(Path::new("bitstreams/design.json")));
}

#[test]
fn images_decode_to_the_design() {
    let set = &built().set;
    let full = FullImage::decode(&std::fs::read(&set.full).expect("read")).expect("decodes");
    let FullImage::Design {
        manifest,
        allowlist,
        cells,
    } = full
    else {
        panic!("a design image");
    };
    assert_eq!(manifest, built().design);
    // One allowlisted plugin per unit, by name, each the unit's compile.
    assert_eq!(
        allowlist
            .iter()
            .map(|a| (a.unit.clone(), a.hash.to_hex()))
            .collect::<std::collections::BTreeMap<_, _>>(),
        set.allowlist
    );
    assert_eq!(allowlist.len(), 6);
    for unit in &built().units {
        assert_eq!(set.allowlist[&unit.spec.name], unit.plugin_hash);
    }
    assert_eq!(cells.len(), 4);
    assert!(cells.iter().all(|c| c.unit == "top_k"));
    assert_eq!(
        cells.iter().map(|c| c.rm_id).collect::<Vec<_>>(),
        vec![0, 3, 10, 15]
    );
    for p in &set.partials {
        let partial =
            PartialImage::decode(&std::fs::read(&p.path).expect("read")).expect("decodes");
        assert_eq!(partial.cell, p.cell);
        assert_eq!(partial.rm_id, p.rm_id);
        assert_eq!(partial.unit, p.unit);
        assert_eq!(partial.build_id.to_hex(), set.build_id);
        assert_eq!(
            partial.file_name(),
            p.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
        );
    }
    let bypass = FullImage::decode(&std::fs::read(&set.bypass).expect("read")).expect("decodes");
    assert_eq!(bypass, FullImage::Bypass);
    assert!(
        built()
            .units
            .iter()
            .all(|u| u.compiler_version == built().units[0].compiler_version)
    );
    assert!(
        built()
            .units
            .iter()
            .all(|u| u.diagnostics.trim().is_empty()),
        "units compile cleanly"
    );
}

#[test]
fn compiler_version_is_one_line() {
    let version = compiler_version(&compiler()).expect("the compiler runs");
    assert!(!version.is_empty() && !version.contains('\n'));
    assert!(version.chars().any(|c| c.is_ascii_digit()), "{version}");
    assert!(matches!(
        compiler_version(Path::new("/nonexistent/c++")),
        Err(Error::Io { .. })
    ));
}

#[test]
fn compile_errors_carry_the_compiler_output() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let acc = tmp.path().join("accelerators");
    copy_tree(&hw_dir().join("accelerators/or_slot"), &acc.join("or_slot"));
    std::fs::copy(
        hw_dir().join("accelerators/frac_kernel.h"),
        acc.join("frac_kernel.h"),
    )
    .expect("copy");
    std::fs::write(acc.join("or_slot/or_slot.cpp"), "int broken( {\n").expect("write");
    match compile_unit(&acc.join("or_slot"), &tmp.path().join("out"), &compiler()) {
        Err(Error::Compile { unit, stderr, .. }) => {
            assert_eq!(unit, "or_slot");
            assert!(stderr.contains("error"), "{stderr}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    // A unit.yaml whose name differs from its directory.
    std::fs::rename(acc.join("or_slot"), acc.join("renamed")).expect("rename");
    assert!(matches!(
        compile_unit(&acc.join("renamed"), &tmp.path().join("out"), &compiler()),
        Err(Error::Spec { .. })
    ));
}

#[test]
fn weave_checks_placement() {
    let mut shell = ShellSpec::load(&hw_dir().join("shell.yaml")).expect("shell");
    // The CNN may only go into C02.
    shell.cells[0].rms.push(fracflow_emulator::spec::RmSpec {
        id: 30,
        unit: "cnn".into(),
    });
    let specs: Vec<_> = built().units.iter().map(|u| u.spec.clone()).collect();
    let err = weave_shell(&shell, &specs).expect_err("cnn in C00");
    assert!(
        err.to_string().contains("may not be placed in cell C00"),
        "{err}"
    );
    shell.cells[0].rms.pop();
    shell.cells[1].rms.push(fracflow_emulator::spec::RmSpec {
        id: 31,
        unit: "nonesuch".into(),
    });
    let err = weave_shell(&shell, &specs).expect_err("unknown unit");
    assert!(err.to_string().contains("not declared"), "{err}");
    shell.cells[1].rms.pop();
    // RM ids are global.
    shell.cells[1].rms[0].id = 0;
    let err = weave_shell(&shell, &specs).expect_err("duplicate id");
    assert!(err.to_string().contains("used twice"), "{err}");
}
