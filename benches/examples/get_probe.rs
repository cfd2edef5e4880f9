//! Runs `N` point reads of the engine bench's world (100k keys `["users", n]` with 100-byte
//! values, the picks of `engine/get`) on tuplekv or on a `BTreeMap` behind a `RwLock`, for
//! instruction and cache-miss counts that do not drift with the machine:
//!
//! ```text
//! cargo build --profile bench -p tuplekv-benches --example get_probe
//! valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=/dev/null \
//!     target/bench/examples/get_probe tuplekv 200000
//! ```
//!
//! Subtract the count of `N = 0` (the preload) and divide by `N`. With `--time`, it prints
//! ns per get for each of the two instead, over 41 alternating rounds of `N` gets each, and
//! the median of the per-round ratios.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use parking_lot::RwLock;
use tuplekv_benches::workloads::{
    ENGINE_KEYS, key_indexes, preloaded_database, user_keys_encoded, user_value,
};
use tuplekv_engine::{Database, ReadView};

/// How many alternating rounds `--time` measures; the median of their ratios is printed.
const ROUNDS: usize = 41;

type Locked = RwLock<BTreeMap<Vec<u8>, (Vec<u8>, u64)>>;

fn btree(keys: &[Vec<u8>]) -> Locked {
    let map: BTreeMap<_, _> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), (user_value(i as u64), 1)))
        .collect();
    RwLock::new(map)
}

fn run_ours(db: &Database, keys: &[Vec<u8>], picks: &[usize], n: usize) {
    for i in 0..n {
        black_box(db.get_raw(&keys[picks[i & 0xffff]]).ok().flatten());
    }
}

fn run_btree(map: &Locked, keys: &[Vec<u8>], picks: &[usize], n: usize) {
    for i in 0..n {
        black_box(
            map.read()
                .get(&keys[picks[i & 0xffff]])
                .map(|(v, _)| v.clone()),
        );
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keys = user_keys_encoded();
    let picks = key_indexes(ENGINE_KEYS, 1 << 16, 42);
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--time", n] => {
            let Ok(n) = n.parse::<usize>() else {
                eprintln!("N must be a number");
                return ExitCode::FAILURE;
            };
            let (db, map) = (preloaded_database(&keys), btree(&keys));
            let mut ratios = Vec::new();
            let (mut total_a, mut total_b) = (0.0, 0.0);
            for _ in 0..ROUNDS {
                let t = Instant::now();
                run_ours(&db, &keys, &picks, n);
                let a = t.elapsed().as_nanos() as f64 / n as f64;
                let t = Instant::now();
                run_btree(&map, &keys, &picks, n);
                let b = t.elapsed().as_nanos() as f64 / n as f64;
                ratios.push(a / b);
                (total_a, total_b) = (total_a + a, total_b + b);
            }
            ratios.sort_by(f64::total_cmp);
            let rounds = ROUNDS as f64;
            println!(
                "tuplekv {:.1} ns  btree {:.1} ns  median ratio {:.3} (quartiles {:.3}..{:.3})",
                total_a / rounds,
                total_b / rounds,
                ratios[ROUNDS / 2],
                ratios[ROUNDS / 4],
                ratios[3 * ROUNDS / 4],
            );
        }
        ["tuplekv", n] | ["btree", n] => {
            let Ok(n) = n.parse::<usize>() else {
                eprintln!("N must be a number");
                return ExitCode::FAILURE;
            };
            if args[0] == "tuplekv" {
                run_ours(&preloaded_database(&keys), &keys, &picks, n);
            } else {
                run_btree(&btree(&keys), &keys, &picks, n);
            }
        }
        _ => {
            eprintln!("usage: get_probe (tuplekv|btree) N | get_probe --time N");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
