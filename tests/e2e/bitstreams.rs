//! `fracflow bitstreams import|verify` on a generated artifact `example/` tree: real-looking Xilinx headers
//! are pinned with their roles and hashes, tampering and deletion are named (exit 4), and an emulated
//! container or garbage is refused at import (exit 2).

use std::path::Path;

use fracflow_proto::bitstream::{make_bin_file, make_bit_file};
use fracflow_record::prebuilt::{ImageRole, PrebuiltManifest};

use crate::support::{Sandbox, text};

fn put(root: &Path, relative: &str, bytes: &[u8]) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

/// An artifact checkout with the `example/` layout of docs/frac.md §4.2.
fn fake_artifact(checkout: &Path) {
    let part = "xcu280-fsvh2892-2L-e";
    let full = make_bit_file(
        "frac",
        part,
        "2024/05/01",
        "10:00:00",
        &make_bin_file(&[7; 64]),
    );
    put(checkout, "example/frac/jtag/frac.bit", &full);
    for (name, fill) in [("c00_f01.bin", 1u8), ("c02_f20.bin", 2)] {
        put(
            checkout,
            &format!("example/frac/icap/{name}"),
            &make_bin_file(&[fill; 96]),
        );
    }
    let bypass = make_bit_file(
        "bypass",
        part,
        "2024/04/01",
        "09:00:00",
        &make_bin_file(&[9; 32]),
    );
    put(checkout, "example/bypass/frac.bit", &bypass);
    put(
        checkout,
        "example/RUN",
        b"job: 4242\npayload: 5e1f\nvivado: 2022.1\nrepo_commit: 243eb1b\ncpus: 16\n",
    );
    put(
        checkout,
        "example/frac/icap/c00_f01.prm",
        b"report, not an image",
    );
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn import_pins_the_example_tree_and_verify_names_tampered_and_missing_files() {
    let sandbox = Sandbox::new();
    let checkout = tempfile::tempdir().expect("tempdir");
    fake_artifact(checkout.path());

    let imported = sandbox.run(&["bitstreams", "import", &checkout.path().to_string_lossy()]);
    assert_eq!(imported.status.code(), Some(0), "{}", text(&imported));

    let manifest_text =
        std::fs::read_to_string(sandbox.path().join("bitstreams/frac-example.yaml"))
            .expect("manifest written under the default name");
    let manifest = PrebuiltManifest::from_yaml(&manifest_text).expect("manifest parses");
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "bypass/frac.bit",
            "frac/icap/c00_f01.bin",
            "frac/icap/c02_f20.bin",
            "frac/jtag/frac.bit"
        ]
    );
    let by_path = |p: &str| manifest.files.iter().find(|f| f.path == p).expect(p);
    assert_eq!(by_path("bypass/frac.bit").role, ImageRole::Bypass);
    assert_eq!(by_path("frac/jtag/frac.bit").role, ImageRole::Full);
    let partial = by_path("frac/icap/c02_f20.bin");
    assert_eq!(
        (partial.role, partial.cell, partial.rm),
        (ImageRole::Partial, Some(2), Some(20))
    );
    let on_disk = checkout.path().join("example/frac/icap/c02_f20.bin");
    assert_eq!(
        partial.size,
        std::fs::metadata(&on_disk).expect("stat").len()
    );
    let run = manifest.provenance.get("RUN").expect("RUN provenance");
    assert_eq!(run.job.as_deref(), Some("4242"));
    assert_eq!(run.vivado.as_deref(), Some("2022.1"));
    assert_eq!(run.fields.get("cpus").map(String::as_str), Some("16"));

    let verified = sandbox.run(&["bitstreams", "verify"]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
    assert!(
        stdout(&verified).contains("all 4 image(s)"),
        "{}",
        text(&verified)
    );

    // One flipped byte in a partial, and the bypass image gone.
    let mut bytes = std::fs::read(&on_disk).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&on_disk, bytes).expect("tamper");
    std::fs::remove_file(checkout.path().join("example/bypass/frac.bit")).expect("delete");

    let broken = sandbox.run(&["bitstreams", "verify", "frac-example"]);
    assert_eq!(broken.status.code(), Some(4), "{}", text(&broken));
    let out = stdout(&broken);
    assert!(out.contains("changed: frac/icap/c02_f20.bin"), "{out}");
    assert!(out.contains("missing: bypass/frac.bit"), "{out}");
    assert!(
        !out.contains("frac/jtag/frac.bit"),
        "an intact file is not named: {out}"
    );

    // Another root given with --artifact is checked instead of the recorded one.
    let copy = tempfile::tempdir().expect("tempdir");
    fake_artifact(copy.path());
    let elsewhere = copy.path().join("example");
    let moved = sandbox.run(&[
        "bitstreams",
        "verify",
        "--artifact",
        &elsewhere.to_string_lossy(),
    ]);
    assert_eq!(moved.status.code(), Some(0), "{}", text(&moved));
}

#[test]
fn import_refuses_emulated_containers_and_garbage_naming_each() {
    let sandbox = Sandbox::new();
    let checkout = tempfile::tempdir().expect("tempdir");
    fake_artifact(checkout.path());
    put(
        checkout.path(),
        "example/frac/icap/c01_f04.bin",
        b"FRACPART\x01\x00\x00\x00rest",
    );
    put(
        checkout.path(),
        "example/frac/jtag/c03_f15.bit",
        b"definitely not a bitstream",
    );

    let refused = sandbox.run(&["bitstreams", "import", &checkout.path().to_string_lossy()]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("frac/icap/c01_f04.bin: an emulated partial container"),
        "{err}"
    );
    assert!(
        err.contains("frac/jtag/c03_f15.bit: not a Xilinx bitstream"),
        "{err}"
    );
    assert!(
        !sandbox.path().join("bitstreams/frac-example.yaml").exists(),
        "nothing is pinned when a file is refused"
    );
}

#[test]
fn verify_without_a_manifest_says_how_to_make_one() {
    let sandbox = Sandbox::new();
    let missing = sandbox.run(&["bitstreams", "verify", "frac-example"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("fracflow bitstreams import DIR --name frac-example"),
        "{}",
        text(&missing)
    );
    let bad_name = sandbox.run(&["bitstreams", "verify", "../x"]);
    assert_eq!(bad_name.status.code(), Some(2), "{}", text(&bad_name));
    assert!(
        text(&bad_name).contains("not a plain file name"),
        "{}",
        text(&bad_name)
    );
}

#[test]
fn import_refuses_a_file_a_missing_folder_and_a_tree_without_images() {
    let sandbox = Sandbox::new();
    let empty = tempfile::tempdir().expect("tempdir");
    put(empty.path(), "notes.txt", b"no images here");
    let no_images = sandbox.run(&["bitstreams", "import", &empty.path().to_string_lossy()]);
    assert_eq!(no_images.status.code(), Some(2), "{}", text(&no_images));
    assert!(
        text(&no_images).contains("no .bit or .bin images under"),
        "{}",
        text(&no_images)
    );

    let file = empty.path().join("notes.txt");
    let not_dir = sandbox.run(&["bitstreams", "import", &file.to_string_lossy()]);
    assert_eq!(not_dir.status.code(), Some(2), "{}", text(&not_dir));
    assert!(
        text(&not_dir).contains("is not a directory"),
        "{}",
        text(&not_dir)
    );

    let gone = empty.path().join("nowhere");
    let missing = sandbox.run(&["bitstreams", "import", &gone.to_string_lossy()]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(text(&missing).contains("nowhere"), "{}", text(&missing));
}
