//! Fuzz target `recovery`: the input builds a database directory (a real history whose log
//! segments and checkpoints it then edits, or segments and checkpoints made from its bytes
//! with valid checksums) and opens it. Recovery must not panic; it fails with `Corrupt` or
//! `Io`, or recovers a state a prefix of the history left; and a database it opens takes a
//! commit and opens again with it. The body is `tuplekv_testkit::fuzz::recovery_target`,
//! replayed by `cargo test`. It writes to a scratch directory per input: point `TMPDIR` at a
//! tmpfs (e.g. `TMPDIR=/dev/shm`) to keep the syncs off a real disk.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tuplekv_testkit::fuzz::recovery_target(data));
