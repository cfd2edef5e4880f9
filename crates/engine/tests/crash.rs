//! Crash test: a child process (this test binary, re-run in child mode) commits in a loop
//! with `Durability::Sync` and reports every acknowledged commit on a pipe; the parent kills
//! it with SIGKILL at a random moment, reopens the directory, and checks that every
//! acknowledged commit is there with its stamp, that no commit is half applied, and that
//! stamps keep increasing. Repeated on one directory, so recovery also meets checkpoints and
//! logs left by earlier crashes.
//!
//! Iterations: `TUPLEKV_CRASH_ITERATIONS` (default 12); seed: `TUPLEKV_CRASH_SEED` (printed).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tuplekv_engine::{ByteRange, Database, Options, ReadView, Value, Versionstamp, key};

const DIR_ENV: &str = "TUPLEKV_CRASH_DIR";

fn options() -> Options {
    Options {
        // Small, so checkpoints (and crashes during them) happen within a few iterations.
        checkpoint_after_bytes: 32 << 10,
        ..Options::default()
    }
}

/// The child: commits `["a", i]`, `["b", i]` and a counter in one atomic, forever, printing
/// `ACK <i> <stamp>` after each acknowledged commit. Does nothing unless run by the parent.
#[test]
fn crash_child_process() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let db = Database::open(&dir, options()).unwrap();
    let start = match db.get(&key!["count"]).unwrap() {
        Some(e) => match e.value {
            Value::U64(n) => n,
            other => panic!("count is {other:?}"),
        },
        None => 0,
    };
    let out = std::io::stdout();
    for i in start..start + 1_000_000 {
        let res = db
            .atomic()
            .check(&key!["a", i], None)
            .set(&key!["a", i], i)
            .set(&key!["b", i], i)
            .sum(&key!["count"], 1)
            .commit()
            .unwrap();
        let stamp = res.versionstamp().unwrap();
        let mut out = out.lock();
        writeln!(out, "ACK {i} {stamp}").unwrap();
        out.flush().unwrap();
    }
}

fn entries(db: &Database, prefix: &str) -> Vec<(u64, Versionstamp)> {
    let range = tuplekv_engine::Selector::prefix(&key![prefix])
        .byte_range()
        .unwrap();
    let range = ByteRange {
        start: range.start,
        end: range.end,
    };
    db.snapshot()
        .scan(&range, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| match e.value {
            Value::U64(n) => (n, e.versionstamp),
            other => panic!("unexpected value {other:?}"),
        })
        .collect()
}

/// Runs the child until it has acknowledged something, kills it after `extra` more, and
/// returns the acknowledged `(i, stamp)` pairs.
fn run_child_and_kill(dir: &Path, extra: Duration) -> Vec<(u64, Versionstamp)> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (i, stamp) = rest.split_once(' ').unwrap();
                let ack = (
                    i.parse::<u64>().unwrap(),
                    stamp.parse::<Versionstamp>().unwrap(),
                );
                if tx.send(ack).is_err() {
                    break;
                }
            }
        }
    });
    let mut acks = Vec::new();
    // Wait for the first acknowledgement (the child has opened and recovered), then let it
    // run a little longer.
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(ack) => acks.push(ack),
        Err(e) => {
            let _ = child.kill();
            panic!("child never acknowledged a commit: {e}");
        }
    }
    std::thread::sleep(extra);
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    reader.join().unwrap();
    acks.extend(rx.try_iter());
    acks
}

#[test]
fn every_acknowledged_commit_survives_sigkill_and_none_is_half_applied() {
    let iterations: u32 = std::env::var("TUPLEKV_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("TUPLEKV_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("crash test seed: {seed} (set TUPLEKV_CRASH_SEED to repeat)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged: Vec<(u64, Versionstamp)> = Vec::new();
    let mut from_checkpoint = 0;
    for round in 0..iterations {
        let extra = Duration::from_millis(rng.u64(0..60));
        acknowledged.extend(run_child_and_kill(dir.path(), extra));

        let db = Database::open(dir.path(), options()).unwrap();
        if db.recovery_report().unwrap().checkpoint.is_some() {
            from_checkpoint += 1;
        }
        let a = entries(&db, "a");
        let b = entries(&db, "b");
        // Atomicity: the two halves of every commit are both there with one stamp.
        assert_eq!(a, b, "round {round} (seed {seed}): a half-applied commit");
        let count = match db.get(&key!["count"]).unwrap().map(|e| e.value) {
            Some(Value::U64(n)) => n,
            other => panic!("count is {other:?}"),
        };
        assert_eq!(count, a.len() as u64, "round {round} (seed {seed})");
        // Commits are numbered 0.. without holes, in stamp order.
        for (j, (i, _)) in a.iter().enumerate() {
            assert_eq!(
                *i, j as u64,
                "round {round} (seed {seed}): hole in the commits"
            );
        }
        assert!(
            a.windows(2).all(|w| w[0].1 < w[1].1),
            "stamps not increasing"
        );
        // Durability: every acknowledged commit is present with the stamp it was given.
        for (i, stamp) in &acknowledged {
            assert_eq!(
                a.get(*i as usize),
                Some(&(*i, *stamp)),
                "round {round} (seed {seed}): acknowledged commit {i} lost"
            );
        }
        // New stamps are above everything recovered.
        let max = a.last().map_or(Versionstamp::ZERO, |x| x.1);
        assert!(db.set(&key!["probe"], b"x").unwrap() > max);
        db.delete(&key!["probe"]).unwrap();
        db.close().unwrap();
    }
    assert!(!acknowledged.is_empty());
    println!(
        "{} commits acknowledged over {iterations} crashes; {from_checkpoint} recoveries started from a checkpoint",
        acknowledged.len()
    );
}
