//! Crash test on the durable engine: a child process (this test binary, re-run in child mode)
//! opens a `Durability::Sync` database and issues codes from two threads, each alternating a
//! fast and a gapless one, printing every number on a pipe as soon as it is handed out. The
//! parent SIGKILLs it after a seeded random number of lines (mid-commit, mid-fsync,
//! mid-refill: wherever it happens to be), reopens the directory and checks:
//! - in both modes, every number handed out after the restart is strictly above every number
//!   handed out before it, and no number is handed out twice;
//! - fast: each thread's numbers increase, and the stored counter is above every number;
//! - gapless: the committed numbers (their uniqueness keys and records) are exactly `1..=n`,
//!   every number handed out is among them, and at most one batch committed unacknowledged.
//!
//! Repeated on one directory, so each round recovers what the earlier crashes left.
//! Iterations: `TUPLEKV_CRASH_ITERATIONS` (default 20); seed: `TUPLEKV_CRASH_SEED` (printed).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Arc;

use tuplekv_engine::{Database, Options, ReadView, key};
use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

const DIR_ENV: &str = "TUPLEKV_SEQUENCE_CRASH_DIR";
const THREADS: u64 = 2;

fn create(seqs: &Sequences<Database>) {
    seqs.create("F", SequenceOptions::default()).unwrap();
    let gapless = SequenceOptions {
        mode: Mode::Gapless,
        ..Default::default()
    };
    seqs.create("G", gapless).unwrap();
}

/// The child: issues codes until killed, printing `F <thread> <n>` for each fast number and
/// `G <thread> <n>` for each acknowledged gapless one. Does nothing unless run by the parent.
#[test]
fn crash_child_process() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    // `Options::default()` is `Durability::Sync`: what fast mode needs across machine crashes.
    let db = Database::open(&dir, Options::default()).unwrap();
    let seqs = Sequences::new(db.clone());
    create(&seqs);
    let fast = Arc::new(seqs.fast("F").unwrap());
    let gapless = Arc::new(seqs.gapless("G").unwrap());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fast, gapless) = (Arc::clone(&fast), Arc::clone(&gapless));
            std::thread::spawn(move || {
                for _ in 0..u64::MAX {
                    let n = fast.next().unwrap().number();
                    say(&format!("F {t} {n}"));
                    let issued = gapless
                        .next_with(|issued, record| {
                            record.set(
                                &key!["invoices", issued.number()],
                                issued.code().into_bytes(),
                            );
                        })
                        .unwrap();
                    say(&format!("G {t} {}", issued.number()));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// What one child handed out before it died, in the order printed.
#[derive(Debug, Default)]
struct Round {
    /// `(thread, number)`.
    fast: Vec<(u64, u64)>,
    gapless: Vec<u64>,
}

/// Runs a child on `dir` and kills it with SIGKILL once it has printed `lines` lines.
fn run_child_and_kill(dir: &Path, lines: usize) -> Round {
    let exe = std::env::current_exe().unwrap();
    let mut child =
        tuplekv_testkit::config::spawn_crash_child(&exe, "crash_child_process", DIR_ENV, dir)
            .unwrap();
    let mut round = Round::default();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    // Whether `line` is a number (the test harness prints its own lines too).
    let mut parse = |line: &str| {
        let mut words = line.split(' ');
        let mode = words.next();
        let (Some(t), Some(n)) = (words.next(), words.next()) else {
            return false;
        };
        let (Ok(t), Ok(n)) = (t.parse::<u64>(), n.parse::<u64>()) else {
            return false;
        };
        match mode {
            Some("F") => round.fast.push((t, n)),
            Some("G") => round.gapless.push(n),
            _ => return false,
        }
        true
    };
    let mut seen = 0;
    while seen < lines {
        match out.next() {
            Some(line) => seen += usize::from(parse(&line.unwrap())),
            None => panic!("the child exited after {seen} of {lines} numbers"),
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    // What it printed before it died was handed out too.
    for line in out {
        let Ok(line) = line else { break };
        parse(&line);
    }
    round
}

#[test]
fn numbers_after_a_sigkill_are_above_all_before_and_gapless_stays_gapless() {
    let iterations = tuplekv_testkit::config::crash_iterations(20);
    let seed = tuplekv_testkit::config::crash_seed("sequence crash test");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let (mut fast_seen, mut gapless_seen) = (HashSet::new(), HashSet::new());
    let (mut fast_max, mut gapless_max) = (0, 0);
    for round in 0..iterations {
        let at = format!("round {round} (seed {seed})");
        let r = run_child_and_kill(dir.path(), rng.usize(1..400));

        // Both modes: after the restart, strictly above everything before; never twice.
        let fast_min = r.fast.iter().map(|&(_, n)| n).min();
        assert!(
            fast_min.is_none_or(|n| n > fast_max),
            "{at}: fast {fast_min:?} after {fast_max}"
        );
        let gapless_min = r.gapless.iter().min();
        assert!(
            gapless_min.is_none_or(|&n| n > gapless_max),
            "{at}: gapless {gapless_min:?} after {gapless_max}"
        );
        for &(_, n) in &r.fast {
            assert!(fast_seen.insert(n), "{at}: fast {n} handed out twice");
        }
        for &n in &r.gapless {
            assert!(gapless_seen.insert(n), "{at}: gapless {n} handed out twice");
        }
        for t in 0..THREADS {
            let mine: Vec<u64> = r.fast.iter().filter(|x| x.0 == t).map(|x| x.1).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "{at}: thread {t}: {mine:?}"
            );
        }
        fast_max = fast_max.max(r.fast.iter().map(|x| x.1).max().unwrap_or(0));
        gapless_max = gapless_max.max(r.gapless.iter().copied().max().unwrap_or(0));

        // What recovery finds.
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let seqs = Sequences::new(db.clone());
        let snapshot = db.snapshot();
        let counter = |prefix: &str| {
            let key = seqs.counter_key(prefix).unwrap();
            let entry = snapshot.get_raw(&key).unwrap();
            entry.map_or(1, |e| e.value.as_u64().unwrap())
        };
        assert!(
            counter("F") > fast_max,
            "{at}: fast counter is not above {fast_max}"
        );
        // Gapless: committed numbers are exactly 1..=n, each with its record.
        let n = counter("G") - 1;
        for number in 1..=n + THREADS + 1 {
            let used = snapshot
                .get_raw(&seqs.used_key("G", number).unwrap())
                .unwrap();
            let record = snapshot.get(&key!["invoices", number]).unwrap();
            let committed = number <= n;
            assert_eq!(
                used.is_some(),
                committed,
                "{at}: uniqueness key of {number} (n = {n})"
            );
            assert_eq!(
                record.is_some(),
                committed,
                "{at}: record of {number} (n = {n})"
            );
        }
        assert!(
            gapless_max <= n,
            "{at}: acknowledged {gapless_max} is lost (n = {n})"
        );
        assert!(
            n <= gapless_max + THREADS,
            "{at}: {n} committed, {gapless_max} acknowledged"
        );
        gapless_max = n;
        drop(snapshot);
        db.close().unwrap();
    }
    assert!(
        fast_max > 0 && gapless_max > 0,
        "seed {seed}: nothing was handed out"
    );
    println!(
        "{} fast and {} gapless numbers over {iterations} crashes; fast reached {fast_max}",
        fast_seen.len(),
        gapless_seen.len()
    );
}
