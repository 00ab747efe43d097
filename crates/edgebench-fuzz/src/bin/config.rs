//! libFuzzer entry point of [`edgebench::fuzz::config`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgebench::fuzz::config(data));
