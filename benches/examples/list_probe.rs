//! Runs `N` lists of 100 entries from the engine bench's world (100k keys `["users", n]` with
//! 100-byte values, the random starts of `engine/list_100`) through `for entry in db.list(..)`,
//! through `Database::for_each`, or as a borrowed range of a `BTreeMap` behind a `RwLock`, for
//! instruction counts that do not drift with the machine:
//!
//! ```text
//! cargo build --profile bench -p tuplekv-benches --example list_probe
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/list_probe list 5000
//! ```
//!
//! Subtract the count of `N = 0` (the preload) and divide by `100 N` for a count per entry.
//! With `--time N`, it prints ns per entry for the three, over 41 alternating rounds of `N`
//! lists each, and the medians of the per-round ratios to the B-tree.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::{Bound, ControlFlow};
use std::process::ExitCode;
use std::time::Instant;

use parking_lot::RwLock;
use tuplekv_benches::workloads::{
    ENGINE_KEYS, key_indexes, prefix_end, preloaded_database, user_key, user_keys_encoded,
    user_value,
};
use tuplekv_engine::{Database, ListOptions, Selector, key};

/// How many alternating rounds `--time` measures.
const ROUNDS: usize = 41;
/// Entries per list.
const ENTRIES: usize = 100;

type Locked = RwLock<BTreeMap<Vec<u8>, (Vec<u8>, u64)>>;

/// The world and the scans' starts.
struct World {
    db: Database,
    map: Locked,
    keys: Vec<Vec<u8>>,
    picks: Vec<usize>,
    selectors: Vec<Selector>,
    end: Vec<u8>,
}

impl World {
    fn new() -> World {
        let keys = user_keys_encoded();
        let db = preloaded_database(&keys);
        let map = RwLock::new(
            keys.iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), (user_value(i as u64), 1)))
                .collect(),
        );
        let picks = key_indexes(ENGINE_KEYS - ENTRIES as u64, 1 << 12, 7);
        let prefix = key!["users", "by_id"];
        let selectors = picks
            .iter()
            .map(|&i| Selector::prefix_start(&prefix, &user_key(i as u64)))
            .collect();
        World {
            db,
            map,
            keys,
            picks,
            selectors,
            end: prefix_end(&prefix),
        }
    }
}

fn touch(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + usize::from(value.last().copied().unwrap_or(0))
}

fn options() -> ListOptions {
    ListOptions {
        limit: Some(ENTRIES),
        ..ListOptions::default()
    }
}

fn run_list(w: &World, n: usize) {
    for i in 0..n {
        let mut acc = 0;
        let list = w.db.list(&w.selectors[i & 0xfff], options()).expect("list");
        for entry in list {
            let e = entry.expect("entry");
            acc += touch(&e.key, e.value.as_bytes().unwrap_or_default());
        }
        black_box(acc);
    }
}

fn run_for_each(w: &World, n: usize) {
    for i in 0..n {
        let mut acc = 0;
        let seen = w.db.for_each(&w.selectors[i & 0xfff], options(), |e| {
            acc += touch(e.key, e.value.as_bytes().unwrap_or_default());
            ControlFlow::Continue(())
        });
        assert_eq!(seen.ok(), Some(ENTRIES));
        black_box(acc);
    }
}

fn run_btree(w: &World, n: usize) {
    for i in 0..n {
        let start = &w.keys[w.picks[i & 0xfff]];
        let guard = w.map.read();
        let mut acc = 0;
        let range = (
            Bound::Included(start.as_slice()),
            Bound::Excluded(w.end.as_slice()),
        );
        for (k, (v, _)) in guard.range::<[u8], _>(range).take(ENTRIES) {
            acc += touch(k, v);
        }
        black_box(acc);
    }
}

/// ns per entry of `run` over `n` lists.
fn timed(w: &World, n: usize, run: fn(&World, usize)) -> f64 {
    let t = Instant::now();
    run(w, n);
    t.elapsed().as_nanos() as f64 / (n * ENTRIES) as f64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<usize>())) else {
        eprintln!("usage: list_probe (list|for_each|btree|--time) N");
        return ExitCode::FAILURE;
    };
    let w = World::new();
    match mode.as_str() {
        "list" => run_list(&w, n),
        "for_each" => run_for_each(&w, n),
        "btree" => run_btree(&w, n),
        "--time" => {
            let (mut list, mut each) = (Vec::new(), Vec::new());
            let mut totals = [0.0; 3];
            for _ in 0..ROUNDS {
                let a = timed(&w, n, run_list);
                let b = timed(&w, n, run_for_each);
                let c = timed(&w, n, run_btree);
                list.push(a / c);
                each.push(b / c);
                for (t, x) in totals.iter_mut().zip([a, b, c]) {
                    *t += x;
                }
            }
            list.sort_by(f64::total_cmp);
            each.sort_by(f64::total_cmp);
            let r = ROUNDS as f64;
            println!(
                "ns/entry: list {:.1}  for_each {:.1}  btree {:.1}; median ratios to btree: \
                 list {:.3} ({:.3}..{:.3})  for_each {:.3}",
                totals[0] / r,
                totals[1] / r,
                totals[2] / r,
                list[ROUNDS / 2],
                list[ROUNDS / 4],
                list[3 * ROUNDS / 4],
                each[ROUNDS / 2],
            );
        }
        _ => {
            eprintln!("usage: list_probe (list|for_each|btree|--time) N");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
