//! `fracflow device check`: what each slot of a live emulated device computes, against Rust references.

use crate::fpga::reconfigured_device;
use crate::support::{frac_project, text};

#[test]
fn device_check_passes_right_units_names_a_wrong_one_and_refuses_an_unknown_unit() {
    let sandbox = frac_project();
    // top_k in every slot but 1, which holds log.
    let (_stop, addr) = reconfigured_device(&sandbox);

    let passing = sandbox.run(&[
        "device",
        "check",
        "--addr",
        &addr,
        "--expect",
        "0=top_k,1=log,2=top_k,3=top_k",
    ]);
    let shown = text(&passing);
    assert!(passing.status.success(), "{shown}");
    assert!(
        shown.contains("slot 0: top_k, 3/3 checks passed"),
        "{shown}"
    );
    assert!(shown.contains("slot 1: log, 1/1 checks passed"), "{shown}");
    assert!(
        shown.contains("slot 3: top_k, 3/3 checks passed"),
        "{shown}"
    );

    let wrong = sandbox.run(&[
        "device", "check", "--addr", &addr, "--slots", "1", "--expect", "1=top_k",
    ]);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("error: slot 1 answers as log, expected top_k"),
        "{}",
        text(&wrong)
    );

    let unknown = sandbox.run(&["device", "check", "--addr", &addr, "--expect", "0=fft"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(
        text(&unknown).contains("`fft` is not a unit"),
        "{}",
        text(&unknown)
    );

    let outside = sandbox.run(&[
        "device", "check", "--addr", &addr, "--slots", "0", "--expect", "2=top_k",
    ]);
    assert_eq!(outside.status.code(), Some(2), "{}", text(&outside));
    assert!(
        text(&outside).contains("not among the checked slots"),
        "{}",
        text(&outside)
    );

    // top_k back into slot 1: every slot answers as top_k and computes right.
    let top_k = sandbox
        .results("frac-reconfigure")
        .join("latest/nodes/partials[unit=top_k]/icap/c01_f03.bin");
    let path = top_k.to_str().expect("path");
    let loaded = sandbox.run(&["device", "load", "--addr", &addr, "--slot", "1", path]);
    assert!(loaded.status.success(), "{}", text(&loaded));
    let every = "0=top_k,1=top_k,2=top_k,3=top_k";
    let all_top_k = sandbox.run(&["device", "check", "--addr", &addr, "--expect", every]);
    let shown = text(&all_top_k);
    assert!(all_top_k.status.success(), "{shown}");
    assert_eq!(
        shown.matches(": top_k, 3/3 checks passed").count(),
        4,
        "{shown}"
    );

    // The cnn in slot 2: its ten scores for a fixed image match the Rust reference.
    let cnn = sandbox
        .results("frac-reconfigure")
        .join("latest/nodes/partials[unit=cnn]/icap/c02_f20.bin");
    let path = cnn.to_str().expect("path");
    let loaded = sandbox.run(&["device", "load", "--addr", &addr, "--slot", "2", path]);
    assert!(loaded.status.success(), "{}", text(&loaded));
    let checked = sandbox.run(&[
        "device", "check", "--addr", &addr, "--slots", "2", "--expect", "2=cnn",
    ]);
    let shown = text(&checked);
    assert!(checked.status.success(), "{shown}");
    assert!(shown.contains("slot 2: cnn, 1/1 checks passed"), "{shown}");
}
