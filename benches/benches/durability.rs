//! Durable commits: the 2-check-2-set atomic with 1, 4 and 16 concurrent committers, ours in
//! `Durability::Sync` (reference) and `Durability::Buffered`, against `denokv_sqlite` on a file
//! (Deno KV's own durable backend: WAL journal, `synchronous=FULL`, one write worker).
//! Everything runs in a temporary directory under `target/`, on the same file system.
//!
//! Read the figures beside the machine's raw `fdatasync` latency, which bounds a lone Sync
//! committer: `cargo run --release -p tuplekv-engine --example wal_probe` prints it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tuplekv_benches::denokv::{self, DenoSqlite};
use tuplekv_benches::skip;
use tuplekv_benches::workloads::{insert_pair, user_value};
use tuplekv_codec::{encode_key, key};
use tuplekv_engine::{Database, Durability, Options};

const GROUP: &str = "durability/commit_2check_2set";

/// Splits `iters` commits over `threads` committers running `commit(thread, n)` with a
/// unique `n` each; returns the wall time.
fn committers(threads: u64, iters: u64, commit: impl Fn(usize, u64) + Sync) -> Duration {
    let next = AtomicU64::new(0);
    let per = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (commit, next) = (&commit, &next);
            s.spawn(move || {
                for _ in 0..per {
                    commit(t as usize, next.fetch_add(1, Ordering::Relaxed));
                }
            });
        }
    });
    // Report time per commit actually made.
    start
        .elapsed()
        .mul_f64(iters as f64 / (per * threads) as f64)
}

fn keys(run: u64, n: u64) -> (Vec<u8>, Vec<u8>) {
    (
        encode_key(&key!["acct", run, n, "a"]),
        encode_key(&key!["acct", run, n, "b"]),
    )
}

fn durability(c: &mut Criterion) {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| std::path::PathBuf::from("../target"), Into::into);
    let _ = std::fs::create_dir_all(&base);
    let dir = match tempfile::tempdir_in(&base) {
        Ok(d) => d,
        Err(e) => {
            skip(GROUP, "all", &format!("no temporary directory: {e}"));
            return;
        }
    };
    let value = user_value(1);
    let run = AtomicU64::new(0);
    let mut g = c.benchmark_group(GROUP);
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);

    let sync = Database::open(dir.path().join("sync"), Options::default());
    let buffered = Database::open(
        dir.path().join("buffered"),
        Options {
            durability: Durability::Buffered {
                interval: Duration::from_millis(10),
            },
            ..Options::default()
        },
    );
    let deno = DenoSqlite::file(&dir.path().join("deno.sqlite"));
    if let Err(e) = &deno {
        skip(GROUP, "denokv_sqlite_file", e);
    }

    for threads in [1u64, 4, 16] {
        let param = format!("{threads} committers");
        for (name, db) in [("tuplekv", &sync), ("tuplekv_buffered", &buffered)] {
            let Ok(db) = db else {
                skip(GROUP, name, "could not open the database");
                continue;
            };
            g.bench_function(BenchmarkId::new(name, &param), |b| {
                b.iter_custom(|iters| {
                    let r = run.fetch_add(1, Ordering::Relaxed);
                    committers(threads, iters, |_, n| {
                        let (ka, kb) = keys(r, n);
                        insert_pair(db, &ka, &kb, &value);
                    })
                })
            });
        }
        if let Ok(deno) = &deno {
            g.bench_function(BenchmarkId::new("denokv_sqlite_file", &param), |b| {
                b.iter_custom(|iters| {
                    let r = run.fetch_add(1, Ordering::Relaxed);
                    let handles = deno.handles(threads as usize);
                    committers(threads, iters, |t, n| {
                        let (ka, kb) = keys(r, n);
                        let ok =
                            handles[t].commit(denokv::two_checks_two_sets(ka, kb, value.clone()));
                        assert_eq!(ok, Ok(true));
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = durability
}
criterion_main!(benches);
