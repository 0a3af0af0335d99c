//! Fuzz target: `fuzz_checks::segment_recovery` (core/tests/common/fuzz_checks.rs).
#![no_main]

#[path = "../../core/tests/common/fuzz_checks.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::segment_recovery(data));
