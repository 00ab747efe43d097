//! libFuzzer entry point of [`edgebench::fuzz::metrics_http`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgebench::fuzz::metrics_http(data));
