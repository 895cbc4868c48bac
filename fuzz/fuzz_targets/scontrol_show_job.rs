#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fracflow_fuzzing::scontrol_show_job(data));
