//! libFuzzer entry point of [`edgebench::fuzz::store_row`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgebench::fuzz::store_row(data));
