//! Crash test: a child process (this test binary, re-run in child mode) runs several
//! committer threads with `Durability::Sync`, so commits share syncs (group commit), and
//! reports every acknowledged commit on a pipe; the parent kills it with SIGKILL at a random
//! moment (sometimes before anything is acknowledged, while the child starts up and recovers;
//! sometimes after), reopens the directory, and checks that every acknowledged commit is
//! there with its stamp, that no commit is half applied, that each thread's commits have no
//! holes, and that stamps keep increasing. Repeated on one directory, so recovery also meets
//! checkpoints and logs left by earlier crashes.
//!
//! Iterations: `TUPLEKV_CRASH_ITERATIONS` (default 30); seed: `TUPLEKV_CRASH_SEED` (printed).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use tuplekv_engine::{ByteRange, Database, Key, Options, ReadView, Value, Versionstamp, key};

const DIR_ENV: &str = "TUPLEKV_CRASH_DIR";
/// Committer threads in the child.
const THREADS: u64 = 4;

fn options() -> Options {
    Options {
        // Small, so checkpoints (and crashes during them) happen within a few iterations.
        checkpoint_after_bytes: 32 << 10,
        ..Options::default()
    }
}

/// An acknowledged commit: thread, its index in that thread, stamp.
type Ack = (u64, u64, Versionstamp);

/// The child: each thread `t` commits `["a", t, i]`, `["b", t, i]` and a shared counter in
/// one atomic, forever, printing `ACK <t> <i> <stamp>` after each acknowledged commit. Does
/// nothing unless run by the parent.
#[test]
fn crash_child_process() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let db = Database::open(&dir, options()).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let db = db.clone();
            s.spawn(move || {
                let start = entries(&db, &key!["a", t]).len() as u64;
                for i in start.. {
                    let res = db
                        .atomic()
                        .check(&key!["a", t, i], None)
                        .set(&key!["a", t, i], i)
                        .set(&key!["b", t, i], i)
                        .sum(&key!["count"], 1)
                        .commit()
                        .unwrap();
                    let stamp = res.versionstamp().unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {t} {i} {stamp}").unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
}

/// The `(i, stamp)` of every entry under `prefix`, in key order.
fn entries(db: &Database, prefix: &Key) -> Vec<(u64, Versionstamp)> {
    let range = tuplekv_engine::Selector::prefix(prefix)
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

/// When the parent kills the child.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// This long after starting it, acknowledged or not (start-up, recovery, first commits).
    AfterStart(Duration),
    /// This long after its first acknowledgement.
    AfterFirstAck(Duration),
}

/// Runs the child (`exe`), kills it as `kill` says, and returns the acknowledged commits.
fn run_child_and_kill(exe: &Path, dir: &Path, kill: Kill) -> Vec<Ack> {
    let mut child =
        tuplekv_testkit::config::spawn_crash_child(exe, "crash_child_process", DIR_ENV, dir)
            .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("ACK ") {
                let mut parts = rest.split(' ');
                let mut next = || parts.next().unwrap();
                let ack = (
                    next().parse::<u64>().unwrap(),
                    next().parse::<u64>().unwrap(),
                    next().parse::<Versionstamp>().unwrap(),
                );
                if tx.send(ack).is_err() {
                    break;
                }
            }
        }
    });
    let mut acks = Vec::new();
    match kill {
        Kill::AfterStart(after) => std::thread::sleep(after),
        Kill::AfterFirstAck(after) => {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(ack) => acks.push(ack),
                Err(e) => {
                    let _ = child.kill();
                    panic!("child never acknowledged a commit: {e}");
                }
            }
            std::thread::sleep(after);
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    reader.join().unwrap();
    acks.extend(rx.try_iter());
    acks
}

/// Checks the recovered database against everything acknowledged so far.
fn check_recovered(db: &Database, acknowledged: &[Ack], context: &str) {
    let mut total = 0;
    let mut newest = Versionstamp::ZERO;
    for t in 0..THREADS {
        let a = entries(db, &key!["a", t]);
        let b = entries(db, &key!["b", t]);
        // Atomicity: the two halves of every commit are both there with one stamp.
        assert_eq!(a, b, "{context}: a half-applied commit of thread {t}");
        // A thread's commits are numbered 0.. without holes, in stamp order: one was
        // acknowledged (so durable) before the next began.
        for (j, (i, _)) in a.iter().enumerate() {
            assert_eq!(*i, j as u64, "{context}: hole in the commits of thread {t}");
        }
        assert!(
            a.windows(2).all(|w| w[0].1 < w[1].1),
            "{context}: stamps of thread {t} not increasing"
        );
        // Durability: every acknowledged commit is present with the stamp it was given.
        for &(_, i, stamp) in acknowledged.iter().filter(|x| x.0 == t) {
            assert_eq!(
                a.get(i as usize),
                Some(&(i, stamp)),
                "{context}: acknowledged commit {i} of thread {t} lost"
            );
        }
        total += a.len() as u64;
        newest = newest.max(a.last().map_or(Versionstamp::ZERO, |x| x.1));
    }
    let count = match db.get(&key!["count"]).unwrap().map(|e| e.value) {
        Some(Value::U64(n)) => n,
        None => 0,
        other => panic!("count is {other:?}"),
    };
    assert_eq!(
        count, total,
        "{context}: the counter disagrees with the commits"
    );
    // New stamps are above everything recovered.
    assert!(db.set(&key!["probe"], b"x").unwrap() > newest, "{context}");
    db.delete(&key!["probe"]).unwrap();
}

#[test]
fn every_acknowledged_commit_survives_sigkill_and_none_is_half_applied() {
    let iterations = tuplekv_testkit::config::crash_iterations(30);
    let seed = tuplekv_testkit::config::crash_seed("crash test");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    // A private copy of this binary: a build running meanwhile may replace the original.
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("crash-child");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    let mut acknowledged: Vec<Ack> = Vec::new();
    let mut from_checkpoint = 0;
    let mut early = 0;
    for round in 0..iterations {
        let kill = if rng.u32(0..3) == 0 {
            early += 1;
            Kill::AfterStart(Duration::from_millis(rng.u64(0..40)))
        } else {
            Kill::AfterFirstAck(Duration::from_millis(rng.u64(0..60)))
        };
        acknowledged.extend(run_child_and_kill(&exe, dir.path(), kill));
        let db = Database::open(dir.path(), options()).unwrap();
        if db.recovery_report().unwrap().checkpoint.is_some() {
            from_checkpoint += 1;
        }
        let context = format!("round {round}, {kill:?} (seed {seed})");
        check_recovered(&db, &acknowledged, &context);
        db.close().unwrap();
    }
    assert!(!acknowledged.is_empty());
    println!(
        "{} commits acknowledged over {iterations} crashes ({early} killed early); \
         {from_checkpoint} recoveries started from a checkpoint",
        acknowledged.len()
    );
}
