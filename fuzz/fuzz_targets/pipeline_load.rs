#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fracflow_fuzzing::pipeline_load(data));
