#![no_main]
libfuzzer_sys::fuzz_target!(
    // libfuzzer-sys's hook aborts at every panic, also at one fracflow's readers catch by design.
    init: fracflow_fuzzing::let_parquet_panics_unwind(),
    |data: &[u8]| fracflow_fuzzing::samples_parquet(data)
);
