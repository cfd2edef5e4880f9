//! Shows whether a commit's cost grows with the size of the store: inserts records as the
//! secondary-index guide writes them by hand (one commit checks `["users", i]` absent and sets
//! the record, its colour entry and its email entry: three keys in three ranges far apart),
//! and prints the mean cost per commit over each further 10,000 records.
//!
//! ```text
//! cargo run --release -p tuplekv-engine --example multi_range_commit -- [--records N] [--threads T] [--shape S]
//! ```
//! `--records` is how many records to insert in all (default 100,000), `--threads` on how many
//! threads at once (default 1). `--shape pair` commits
//! the engine bench's shape instead: two neighbouring fresh keys (`["acct", i, "a"]` and
//! `["acct", i, "b"]`), both checked absent. A flat column means each commit's key lookups
//! cost the same whatever the store holds, as they should.
#![allow(
    clippy::unwrap_used,
    reason = "a measurement tool; any failure should stop it"
)]

use std::time::Instant;

use tuplekv_engine::{Database, key};

const COLORS: [&str; 4] = ["green", "blue", "red", "black"];
const STEP: u64 = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = args
        .iter()
        .position(|a| a == "--records")
        .and_then(|i| args.get(i + 1))
        .map_or(100_000, |v| v.parse().unwrap());
    let pair = args
        .iter()
        .position(|a| a == "--shape")
        .and_then(|i| args.get(i + 1))
        .is_some_and(|s| s == "pair");
    let threads: u64 = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |v| v.parse().unwrap());
    let db = Database::in_memory();
    println!("| records already stored | ns per commit (mean of the next {STEP}, all threads) |");
    println!("|---|---|");
    let mut i = 0u64;
    while i < records {
        let started = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let db = &db;
                s.spawn(move || {
                    for j in (i + t..i + STEP).step_by(threads as usize) {
                        commit(db, j, pair);
                    }
                });
            }
        });
        i += STEP;
        let per = started.elapsed() / STEP as u32;
        println!("| {} | {} |", i - STEP, per.as_nanos());
    }
}

/// Commits record `i` in the chosen shape.
fn commit(db: &Database, i: u64, pair: bool) {
    let color = COLORS[(i % 4) as usize];
    let res = if pair {
        let (a, b) = (key!["acct", i, "a"], key!["acct", i, "b"]);
        let value = format!("user {i}").into_bytes();
        db.atomic()
            .check(&a, None)
            .check(&b, None)
            .set(&a, value.clone())
            .set(&b, value)
            .commit()
    } else {
        db.atomic()
            .check(&key!["users", i], None)
            .set(&key!["users", i], format!("user {i}").into_bytes())
            .set(&key!["users_by_color", color, i], i)
            .set(&key!["users_by_email", format!("user{i}@example.com")], i)
            .commit()
    }
    .unwrap();
    assert!(res.is_committed());
}
