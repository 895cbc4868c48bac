//! `let_parquet_panics_unwind` under a stand-in for libfuzzer-sys's aborting hook (one that counts instead of
//! aborting): its own test binary, since it replaces the process's panic hook.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

static REACHED_THE_FUZZERS_HOOK: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_panic_inside_parquet_unwinds_to_the_guard_and_any_other_reaches_the_fuzzers_hook() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        REACHED_THE_FUZZERS_HOOK.fetch_add(1, Ordering::SeqCst);
        print(info);
    }));
    fracflow_fuzzing::let_parquet_panics_unwind();

    // parquet's column decoder panics on this file (a dictionary-encoded page without a dictionary page) when
    // aggregate reads it; the readers' guard makes the panic the file's error, so the target returns.
    let input = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/regressions/samples_parquet/dictionary_page_missing"),
    )
    .expect("the committed regression input");
    assert!(
        aggregate_error(&input).contains(fracflow_record::samples::MALFORMED_PAGE),
        "parquet no longer panics on the input; pick one it panics on"
    );
    fracflow_fuzzing::samples_parquet(&input);
    // The target made the process's scratch project; nothing else here needs it.
    fracflow_fuzzing::remove_scratch();
    assert_eq!(REACHED_THE_FUZZERS_HOOK.load(Ordering::SeqCst), 0);

    let outside_parquet = catch_unwind(AssertUnwindSafe(|| panic!("an invariant of the target")));
    assert!(outside_parquet.is_err());
    assert_eq!(REACHED_THE_FUZZERS_HOOK.load(Ordering::SeqCst), 1);
}

/// What aggregate's exact path reports for `input` as a point's samples file (as the `samples_parquet` target reads
/// an input of even length).
fn aggregate_error(input: &[u8]) -> String {
    use fracflow_aggregate::{AggregateSpec, Cell, PointSource, aggregate};

    let scratch = tempfile::tempdir().expect("a scratch directory");
    let point = scratch.path().join("point");
    std::fs::create_dir(&point).expect("the point's directory");
    std::fs::write(point.join(fracflow_record::SAMPLES_FILE), input).expect("the samples file");
    let spec: AggregateSpec = serde_json::from_str(
        r#"{"stats": "samples", "skip_s": 0, "latency": "last_piece", "exact_max_samples": 1048576}"#,
    )
    .expect("the spec");
    let points = [PointSource {
        labels: BTreeMap::from([("series".to_owned(), Cell::Text("fuzz".to_owned()))]),
        dir: point,
        member: None,
    }];
    match aggregate(&spec, &points, scratch.path()) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}
