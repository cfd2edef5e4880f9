//! How many replaced values may be alive while writes go on, without the background thread:
//! a bound that follows from the design of the writers' retirement, checked in a process of
//! its own.
//!
//! A replaced version list waits in the writers' retirement until the epoch collector has
//! seen every thread that was pinned when its batch was sealed unpin, then the next seal frees
//! it (see [`RETIRE_BATCH`]). So how long it waits depends on every thread of the process that
//! pins: in a test binary shared with other tests, any of them pinned for a while (or
//! descheduled while pinned, on a loaded machine) holds back freeing, and the peak varied with
//! timing (10,994 values once, against a limit of 10,000). Alone in its process, the writer
//! is the only thread that pins, the epoch moves on at each seal in a new pin, and the peak is
//! the same on every run: the lists of the last commit plus a few batches.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::atomic::{AtomicUsize, Ordering};

use tuplekv_engine::limits::RETIRE_BATCH;
use tuplekv_engine::{Database, Value, key};
use tuplekv_testkit::counted::counted_bytes;
use tuplekv_testkit::db::options;

/// Values alive (those created by [`counted`] and not dropped yet).
static LIVE_VALUES: AtomicUsize = AtomicUsize::new(0);

/// A counted value's bytes: longer than the engine's inline limit
/// (`version::VALUE_INLINE_MAX`, 32 bytes), so a key's version list holds the counted buffer
/// itself rather than a copy of it.
static LARGE: [u8; 300] = [7; 300];

/// Keys set, then deleted, in one commit each per round.
const KEYS: u64 = 1000;
/// Single-key overwrites of one hot key per round.
const HOT_WRITES: usize = 500;
/// Rounds of the workload.
const ROUNDS: usize = 100;

/// A value that counts itself in [`LIVE_VALUES`] while alive.
fn counted() -> Value {
    Value::Bytes(counted_bytes(&LIVE_VALUES, &LARGE))
}

/// Large deletes and hot overwrites, round after round: every value they replace is freed as
/// the writes go on. A value is alive in the live key's list, in a replaced list waiting in
/// the retirement (one value each: no snapshot is open, so a list keeps at most its newest
/// version), or in a deleted key's node whose destruction the epoch collector has not run yet
/// (at most the last commit's `KEYS`: the collector runs expired work at every seal). The
/// lists waiting are at most the last commit's `KEYS` plus three batches: the open one and two
/// sealed since the epoch last moved on twice. 150k values are written in all; the run is
/// the same every time (about 300 values alive at the peak, some 130 lists waiting).
#[test]
fn replaced_values_alive_stay_within_the_last_commit_and_three_retire_batches() {
    let db = Database::with_options(options());
    let waiting_max = KEYS as usize + 3 * RETIRE_BATCH;
    let (mut peak_alive, mut peak_waiting) = (0, 0);
    for round in 0..ROUNDS {
        let mut a = db.atomic();
        for i in 0..KEYS {
            a = a.set(&key!["k", i], counted());
        }
        assert!(a.commit().unwrap().is_committed());
        for _ in 0..HOT_WRITES {
            db.set(&key!["hot"], counted()).unwrap();
        }
        let mut a = db.atomic();
        for i in 0..KEYS {
            a = a.delete(&key!["k", i]);
        }
        assert!(a.commit().unwrap().is_committed());
        let alive = LIVE_VALUES.load(Ordering::SeqCst);
        let waiting = db.stats().retired_lists;
        assert!(
            alive <= 1 + waiting + KEYS as usize,
            "round {round}: {alive} values alive, {waiting} lists waiting"
        );
        assert!(
            waiting <= waiting_max,
            "round {round}: {waiting} replaced lists waiting, the design allows {waiting_max}"
        );
        peak_alive = peak_alive.max(alive);
        peak_waiting = peak_waiting.max(waiting);
    }
    println!("peak: {peak_alive} values alive, {peak_waiting} lists waiting (bound {waiting_max})");
    assert_eq!(
        db.get(&key!["hot"]).unwrap().map(|e| e.value.size()),
        Some(LARGE.len())
    );
    // Once the writes stop, a reclamation pass or two frees everything replaced: nothing
    // else in this process pins, so no retry for other threads is needed.
    for _ in 0..4 {
        db.reclaim_now();
    }
    assert_eq!(
        LIVE_VALUES.load(Ordering::SeqCst),
        1,
        "only the hot key's value is left"
    );
    assert_eq!(db.stats().retired_lists, 0, "{:?}", db.stats());
}
