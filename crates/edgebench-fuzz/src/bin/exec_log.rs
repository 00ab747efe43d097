//! libFuzzer entry point of [`edgebench::fuzz::exec_log`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgebench::fuzz::exec_log(data));
