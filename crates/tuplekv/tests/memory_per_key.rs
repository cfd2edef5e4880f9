//! The README's memory claim: a key costs about 210 bytes of memory besides its value's
//! buffer. The test reads the process's resident memory before and after inserting many short
//! keys into an in-memory store, so the number in the README cannot drift from the engine.
//! Resident memory is what capacity planning needs: it counts the allocator's own overhead.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "tests")]

use tuplekv::{Database, Options, key};

/// Keys inserted: enough (some 50 MB) that page granularity and per-store constants vanish.
const KEYS: u64 = 200_000;
/// Each value's length; its buffer is what the claim leaves out.
const VALUE_LEN: usize = 16;
/// What the README says, with the spread seen between runs and allocator layouts: outside
/// it the README is wrong.
const PER_KEY_EXPECTED: std::ops::RangeInclusive<u64> = 170..=270;
/// Linux's page size on the machines we run on (`/proc/self/statm` counts pages).
const PAGE: u64 = 4096;

/// The process's resident memory in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * PAGE
}

#[test]
fn a_key_costs_about_210_bytes_besides_its_value() {
    let db = Database::with_options(Options {
        background_reclaim: false,
        ..Options::default()
    });
    db.set(&key!["warm"], vec![0u8; VALUE_LEN]).unwrap();
    let before = resident();
    for i in 0..KEYS {
        // ["users", 0n ... 199999n]: 9 to 13 encoded bytes, a typical short key.
        db.set(&key!["users", i], vec![7u8; VALUE_LEN]).unwrap();
    }
    let after = resident();
    assert_eq!(db.stats().keys, KEYS as usize + 1);
    // The value's buffer: its bytes, rounded up to malloc's 16-byte chunks, plus the chunk's
    // 8-byte header.
    let value_buffer = (VALUE_LEN as u64 + 8).div_ceil(16) * 16;
    let per_key = (after.saturating_sub(before) / KEYS).saturating_sub(value_buffer);
    println!("resident memory per key besides its {VALUE_LEN}-byte value: {per_key} bytes");
    assert!(
        PER_KEY_EXPECTED.contains(&per_key),
        "a key costs {per_key} bytes besides its value; the README says about 210"
    );
}
