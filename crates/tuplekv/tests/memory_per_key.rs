//! The README's memory claim: a small record (an 11-byte key, a 16-byte value) costs at most
//! 110 bytes of resident memory, key and value included. The test reads the process's resident
//! memory before and after inserting many such keys into an in-memory store, so the number in
//! the README cannot drift from the engine. Resident memory is what capacity planning needs: it
//! counts the allocator's own overhead.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "tests")]

use tuplekv::{Database, Options, key};

/// Keys inserted: enough (some 20 MB) that page granularity and per-store constants vanish.
const KEYS: u64 = 200_000;
/// Each value's length.
const VALUE_LEN: usize = 16;
/// What the README promises per key, value included.
const PER_KEY_MAX: u64 = 110;
/// Below this the measurement itself is broken (the key and value alone are 27 bytes).
const PER_KEY_MIN: u64 = 27;
/// Linux's page size on the machines we run on (`/proc/self/statm` counts pages).
const PAGE: u64 = 4096;

/// The process's resident memory in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * PAGE
}

#[test]
fn a_small_record_costs_at_most_110_resident_bytes_value_included() {
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
    let per_key = after.saturating_sub(before) / KEYS;
    println!("resident memory per key with its {VALUE_LEN}-byte value: {per_key} bytes");
    assert!(
        (PER_KEY_MIN..=PER_KEY_MAX).contains(&per_key),
        "a key costs {per_key} bytes with its value; the README says at most {PER_KEY_MAX}"
    );
}
