//! Fuzz target `decode_v8`: arbitrary bytes never panic the V8 value decoder, and a value it
//! accepts encodes and decodes back to itself. The body is
//! `tuplekv_jsvalue::fuzz_decode_target`, so `crates/jsvalue/tests/fuzz_corpus.rs` replays
//! the corpus without libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tuplekv_jsvalue::fuzz_decode_target(data));
