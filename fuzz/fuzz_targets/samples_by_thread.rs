#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fracflow_fuzzing::samples_by_thread(data));
