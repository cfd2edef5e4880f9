//! Measures what criterion cannot: the machine's raw `fdatasync` latency, recovery speed on a
//! large log, and how long a checkpoint holds commits up. Numbers go to stdout as a table.
//!
//! ```text
//! cargo run --release -p tuplekv-engine --example wal_probe -- [--dir D] [--log-mib N]
//! ```
//! `--dir` picks the file system to measure (default: the system temp dir); `--log-mib`
//! sizes the log recovered (default 1024).
#![allow(
    clippy::unwrap_used,
    reason = "a measurement tool; any failure should stop it"
)]

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tuplekv_engine::{Database, Durability, Options, key};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Writes measured by [`report_syncs`].
const SYNC_ROUNDS: usize = 300;

/// Writes 100 bytes and `fdatasync`s them [`SYNC_ROUNDS`] times at `f`'s position, and prints
/// the latency percentiles under `label`.
fn report_syncs(label: &str, f: &mut std::fs::File) {
    let mut lat = Vec::new();
    for _ in 0..SYNC_ROUNDS {
        let t = Instant::now();
        f.write_all(&[7u8; 100]).unwrap();
        f.sync_data().unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "{label}: p50 {:?}  p99 {:?}  => at most {:.0} syncs/s in series",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        1.0 / percentile(&lat, 0.5).as_secs_f64()
    );
}

fn main() {
    let base: PathBuf = arg("--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let log_mib: u64 = arg("--log-mib").map_or(1024, |v| v.parse().unwrap());
    let dir = tempfile::Builder::new()
        .prefix("tuplekv-wal-probe")
        .tempdir_in(&base)
        .unwrap();
    println!("directory: {}", dir.path().display());

    // 1. Raw fdatasync latency of a 100-byte write: appended, and over zeros already on disk
    //    (as the log writes its preallocated segments).
    let path = dir.path().join("fsync-probe");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    report_syncs("raw append+fdatasync (100 B)", &mut f);
    let path = dir.path().join("fsync-probe-prealloc");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all(&[0u8; SYNC_ROUNDS * 100]).unwrap();
    f.sync_all().unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    report_syncs(
        "raw overwrite+fdatasync of preallocated zeros (100 B)",
        &mut f,
    );

    // 2. Group commit: Sync commits/s of a 2-check-2-set atomic with 1, 4 and 16 committers.
    let gc = dir.path().join("group-commit");
    let db = Database::open(&gc, Options::default()).unwrap();
    for t in [1u64, 4, 16] {
        let per = 4000 / t;
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for th in 0..t {
                let db = db.clone();
                s.spawn(move || {
                    for i in 0..per {
                        let (a, b) = (key!["acct", th, i, "a"], key!["acct", th, i, "b"]);
                        let res = db
                            .atomic()
                            .check(&a, None)
                            .check(&b, None)
                            .set(&a, vec![1u8; 100])
                            .set(&b, vec![1u8; 100])
                            .commit()
                            .unwrap();
                        assert!(res.is_committed());
                    }
                });
            }
        });
        let rate = (per * t) as f64 / t0.elapsed().as_secs_f64();
        println!("Sync 2check2set, {t:>2} committers: {rate:>8.0} commits/s");
        for th in 0..t {
            for i in 0..per {
                let a = db
                    .atomic()
                    .delete(&key!["acct", th, i, "a"])
                    .delete(&key!["acct", th, i, "b"]);
                assert!(a.commit().unwrap().is_committed());
            }
        }
    }
    db.close().unwrap();

    // 3. Checkpoint stall: commit latency while a checkpoint of 200k entries runs.
    let ck = dir.path().join("checkpoint");
    let db = Database::open(
        &ck,
        Options {
            durability: Durability::Buffered {
                interval: Duration::from_millis(10),
            },
            checkpoint_after_bytes: u64::MAX,
            ..Options::default()
        },
    )
    .unwrap();
    for chunk in 0..200u64 {
        let a = (0..1000u64).fold(db.atomic(), |a, i| {
            a.set(&key!["users", chunk * 1000 + i, "profile"], vec![1u8; 100])
        });
        assert!(a.commit().unwrap().is_committed());
    }
    let measure = |db: &Database, n: u64| {
        let mut lat = Vec::with_capacity(n as usize);
        for i in 0..n {
            let t = Instant::now();
            db.set(&key!["hot", i % 1000], vec![2u8; 100]).unwrap();
            lat.push(t.elapsed());
        }
        lat.sort();
        lat
    };
    let quiet = measure(&db, 20_000);
    let stalled = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let t = Instant::now();
            db.checkpoint().unwrap();
            t.elapsed()
        });
        let lat = measure(&db, 20_000);
        (writer.join().unwrap(), lat)
    });
    println!(
        "checkpoint of 200k entries took {:?}; commit latency during it: p50 {:?} p99 {:?} max {:?} (without: p50 {:?} p99 {:?} max {:?})",
        stalled.0,
        percentile(&stalled.1, 0.5),
        percentile(&stalled.1, 0.99),
        stalled.1.last().unwrap(),
        percentile(&quiet, 0.5),
        percentile(&quiet, 0.99),
        quiet.last().unwrap(),
    );
    db.close().unwrap();

    // 4. Recovery of a large log (no checkpoint): 1000-mutation commits over 10k keys.
    let rec = dir.path().join("recovery");
    let opts = Options {
        durability: Durability::Buffered {
            interval: Duration::from_millis(50),
        },
        checkpoint_after_bytes: u64::MAX,
        background_reclaim: false,
        ..Options::default()
    };
    let db = Database::open(&rec, opts.clone()).unwrap();
    let t = Instant::now();
    let target = log_mib << 20;
    let mut written = 0u64;
    let mut round = 0u64;
    while written < target {
        let a = (0..500u64).fold(db.atomic(), |a, i| {
            a.set(&key!["k", (round * 500 + i) % 10_000], vec![3u8; 200])
        });
        assert!(a.commit().unwrap().is_committed());
        written += 500 * 230;
        round += 1;
    }
    db.close().unwrap();
    let bytes: u64 = std::fs::read_dir(&rec)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "wrote {:.0} MiB of log in {:?}",
        bytes as f64 / (1 << 20) as f64,
        t.elapsed()
    );
    // Dropping the page cache needs root, so both figures are warm: plain reads of the same
    // files first (the disk-read-speed reference), then recovery.
    let t = Instant::now();
    let mut raw = 0usize;
    for e in std::fs::read_dir(&rec).unwrap() {
        raw += std::fs::read(e.unwrap().path()).unwrap().len();
    }
    let raw_took = t.elapsed();
    println!(
        "plain read of the same files: {:.0} MiB/s",
        raw as f64 / (1 << 20) as f64 / raw_took.as_secs_f64()
    );
    let t = Instant::now();
    let db = Database::open(&rec, opts).unwrap();
    let took = t.elapsed();
    let report = db.recovery_report().unwrap().clone();
    println!(
        "recovered {} records ({:.0} MiB) in {:?}: {:.0} MiB/s (page cache warm)",
        report.records_replayed,
        report.bytes_read as f64 / (1 << 20) as f64,
        took,
        report.bytes_read as f64 / (1 << 20) as f64 / took.as_secs_f64()
    );
    db.close().unwrap();
}
