#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fracflow_fuzzing::trace_csv(data));
