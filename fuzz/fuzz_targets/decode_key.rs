//! Fuzz target `decode_key`: arbitrary bytes never panic the key decoders, an accepted input is
//! canonical (re-encodes to the same bytes), and the owned, borrowed and validating decoders
//! agree on every input. The body is `tuplekv_testkit::fuzz::decode_key_target`, so tests can
//! replay the corpus and `fuzz/regressions/decode_key/` without libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tuplekv_testkit::fuzz::decode_key_target(data));
