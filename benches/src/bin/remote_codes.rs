//! `remote_codes`: one process of `cargo xtask bench remote`. It issues codes through a
//! `RemoteStore` (fast or gapless mode), or Redis `INCR`s, from T threads for D seconds and
//! prints one JSON line with the rate; or it measures the sequential latency of a get and a
//! commit through a `RemoteStore` and against an in-process durable `Database`.
//!
//! ```text
//! remote_codes fast|gapless|gapless-checked --url http://HOST:PORT [--threads 4] [--seconds 5] [--warmup 0.5]
//!                           [--prefix BENCH]
//! remote_codes redis-incr --url redis://HOST:PORT [--threads 4] [--seconds 5] [--warmup 0.5]
//! remote_codes latency --url http://HOST:PORT --data-dir DIR [--ops 2000]
//! ```
//! The KV Connect token is `$DENO_KV_ACCESS_TOKEN`. The bench orchestrator runs several of
//! these processes at once and sums their rates; each process measures its own window after
//! its warm-up.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use tuplekv_benches::redis::Redis;
use tuplekv_benches::{
    SECONDS_DEFAULT, THREADS_DEFAULT, WARMUP_DEFAULT, base_url, in_range, measured_seconds,
    quantile, thread_count, warmup_seconds,
};
use tuplekv_engine::{Database, Options, Store, key};
use tuplekv_remote::RemoteStore;
use tuplekv_sequence::{Mode, Numbering, SequenceOptions, Sequences};

/// Operations per latency series unless `--ops` says otherwise.
const LATENCY_OPS_DEFAULT: usize = 2000;
/// Most operations per latency series.
const LATENCY_OPS_MAX: usize = 1_000_000;
/// Sequence prefix unless `--prefix` says otherwise (the bench orchestrator gives each mode its own).
const PREFIX_DEFAULT: &str = "BENCH";
/// Digits of the codes: wide enough that a run never widens them.
const CODE_WIDTH: usize = 12;
/// A thread stops after this many failed operations (a broken server must not spin).
const ERRORS_MAX: u64 = 100;
/// Bytes of the value each latency commit writes.
const VALUE_SIZE: usize = 100;

/// What this process measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// Fast codes through a `RemoteStore`.
    Fast,
    /// Gapless codes, numbered by the server.
    Gapless,
    /// Gapless with the handle checking the counter's versionstamp (the old mode).
    GaplessChecked,
    /// Redis `INCR`s (`--url redis://HOST:PORT`).
    RedisIncr,
    /// The sequential latency of a get and a commit, remote and in process (needs
    /// `--data-dir`).
    Latency,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Fast => "fast",
            Workload::Gapless => "gapless",
            Workload::GaplessChecked => "gapless-checked",
            Workload::RedisIncr => "redis-incr",
            Workload::Latency => "latency",
        }
    }
}

/// One process of `cargo xtask bench remote`; prints JSON lines on stdout.
#[derive(Debug, Parser)]
#[command(name = "remote_codes")]
struct Args {
    /// The workload to run.
    #[arg(value_enum)]
    workload: Workload,
    /// The server: `http://HOST:PORT` (KV Connect), or `redis://HOST:PORT` for `redis-incr`.
    #[arg(long, value_parser = base_url)]
    url: String,
    /// The KV Connect access token.
    #[arg(
        long,
        env = "DENO_KV_ACCESS_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    token: String,
    /// Threads in this process.
    #[arg(long, default_value_t = THREADS_DEFAULT, value_parser = thread_count)]
    threads: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = SECONDS_DEFAULT, value_parser = measured_seconds)]
    seconds: f64,
    /// Unmeasured seconds before the window.
    #[arg(long, default_value_t = WARMUP_DEFAULT, value_parser = warmup_seconds)]
    warmup: f64,
    /// Sequence prefix (the bench orchestrator gives each mode its own).
    #[arg(long, default_value = PREFIX_DEFAULT)]
    prefix: String,
    /// Where `latency` opens its in-process durable database.
    #[arg(long, required_if_eq("workload", "latency"))]
    data_dir: Option<String>,
    /// Operations per latency series.
    #[arg(long, default_value_t = LATENCY_OPS_DEFAULT, value_parser = latency_ops)]
    ops: usize,
}

/// An operation count in `1..=LATENCY_OPS_MAX` (a clap value parser).
fn latency_ops(value: &str) -> Result<usize, String> {
    in_range(value, 1, LATENCY_OPS_MAX)
}

/// What the threads of one rate run counted.
#[derive(Debug, Default)]
struct Tally {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    /// Store commits and refused commits over the whole run (warm-up included), where the
    /// workload knows them: a fast handle's block reservations, a gapless handle's stats.
    commits: Option<u64>,
    conflicts: Option<u64>,
}

/// Runs `op` on `threads` threads: unmeasured for the warm-up, then counted for `seconds`.
/// Each thread gets its own state from `setup` (a connection, a handle).
fn run_rate<S, E: std::fmt::Display>(
    args: &Args,
    setup: impl Fn() -> Result<S, String> + Sync,
    op: impl Fn(&mut S) -> Result<(), E> + Sync,
) -> Result<(Tally, f64), String> {
    let tally = Mutex::new(Tally::default());
    let barrier = Barrier::new(args.threads);
    let failed = AtomicBool::new(false);
    let warmup = Duration::from_secs_f64(args.warmup);
    let window = Duration::from_secs_f64(args.seconds);
    let setup_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..args.threads {
            scope.spawn(|| {
                let state = setup();
                if let Err(e) = &state {
                    failed.store(true, Ordering::Relaxed);
                    *setup_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
                }
                barrier.wait();
                let Ok(mut state) = state else { return };
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let measure_from = Instant::now() + warmup;
                let until = measure_from + window;
                let mut mine = Tally::default();
                loop {
                    let now = Instant::now();
                    if now >= until || mine.errors >= ERRORS_MAX {
                        break;
                    }
                    let result = op(&mut state);
                    if now < measure_from {
                        continue;
                    }
                    match result {
                        Ok(()) => mine.ops += 1,
                        Err(e) => {
                            mine.errors += 1;
                            mine.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                let mut total = tally.lock().unwrap_or_else(PoisonError::into_inner);
                total.ops += mine.ops;
                total.errors += mine.errors;
                if total.first_error.is_none() {
                    total.first_error = mine.first_error;
                }
            });
        }
    });
    if let Some(e) = setup_error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(e);
    }
    Ok((
        tally.into_inner().unwrap_or_else(PoisonError::into_inner),
        args.seconds,
    ))
}

/// Connects to the KV Connect server of `args`.
fn connect(args: &Args) -> Result<RemoteStore, String> {
    RemoteStore::connect(&args.url, &args.token).map_err(|e| format!("connect {}: {e}", args.url))
}

/// Issues codes of one sequence (created if missing) from every thread; one handle per
/// process, shared by its threads, as a server would.
fn codes(args: &Args) -> Result<(Tally, f64), String> {
    let store = connect(args)?;
    let mode = match args.workload {
        Workload::Gapless | Workload::GaplessChecked => Mode::Gapless,
        _ => Mode::Fast,
    };
    let seqs = Sequences::new(store);
    let options = SequenceOptions {
        mode,
        width: CODE_WIDTH,
        ..SequenceOptions::default()
    };
    seqs.create(&args.prefix, options)
        .map_err(|e| format!("creating sequence {}: {e}", args.prefix))?;
    if mode == Mode::Fast {
        let seq = seqs.fast(&args.prefix).map_err(|e| e.to_string())?;
        let (mut tally, seconds) =
            run_rate(args, || Ok(()), |_: &mut ()| seq.next_number().map(drop))?;
        tally.commits = Some(seq.reservations());
        Ok((tally, seconds))
    } else {
        let numbering = if args.workload == Workload::GaplessChecked {
            Numbering::Checked
        } else {
            Numbering::Store
        };
        let seq = seqs
            .gapless(&args.prefix)
            .map_err(|e| e.to_string())?
            .with_numbering(numbering);
        let (mut tally, seconds) = run_rate(args, || Ok(()), |_: &mut ()| seq.next().map(drop))?;
        let stats = seq.stats();
        (tally.commits, tally.conflicts) = (Some(stats.commits), Some(stats.conflicts));
        Ok((tally, seconds))
    }
}

/// Unpipelined `INCR` on one key, one connection per thread.
fn redis_incr(args: &Args) -> Result<(Tally, f64), String> {
    run_rate(
        args,
        || Redis::connect(&args.url),
        |conn| conn.incr("bench:codes").map(drop),
    )
}

/// Operations per turn when the two stores' latency series alternate, so that drift in the
/// machine's load (a shared disk's fsync time moves a lot) hits both alike.
const LATENCY_TURN: usize = 100;

/// The nanoseconds of sequential calls `op(i)` for `i` in `range`, appended to `nanos`.
fn time_calls<E: std::fmt::Display>(
    range: std::ops::Range<usize>,
    nanos: &mut Vec<u64>,
    mut op: impl FnMut(usize) -> Result<(), E>,
) -> Result<(), String> {
    for i in range {
        let started = Instant::now();
        op(i).map_err(|e| e.to_string())?;
        nanos.push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    Ok(())
}

/// p50 and p99 in µs (to the nanosecond) of `nanos`.
fn quantiles_us(mut nanos: Vec<u64>) -> (f64, f64) {
    nanos.sort_unstable();
    let us = |q| quantile(&nanos, q) as f64 / 1000.0;
    (us(0.50), us(0.99))
}

/// `0..ops` in turns of [`LATENCY_TURN`].
fn turns(ops: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..ops)
        .step_by(LATENCY_TURN)
        .map(move |from| from..(from + LATENCY_TURN).min(ops))
}

/// The latency keys: a hundred keys written over and over.
fn latency_key(i: usize) -> tuplekv_engine::Key {
    key!["bench_latency", (i % LATENCY_TURN) as u64]
}

/// One turn of `range` commits (a 100-byte set each) on `store`.
fn commit_turn<S: Store>(
    store: &S,
    range: std::ops::Range<usize>,
    nanos: &mut Vec<u64>,
) -> Result<(), String> {
    let value = vec![7u8; VALUE_SIZE];
    time_calls(range, nanos, |i| {
        store
            .atomic()
            .set(&latency_key(i), value.clone())
            .commit()
            .map(drop)
    })
}

/// [`commit_turn`] through [`Store::commit_async`], awaited on `runtime`: the path
/// `tuplekv serve` commits by (its commit mode `Inline`).
fn commit_async_turn(
    db: &Database,
    runtime: &tokio::runtime::Runtime,
    range: std::ops::Range<usize>,
    nanos: &mut Vec<u64>,
) -> Result<(), String> {
    let value = vec![7u8; VALUE_SIZE];
    time_calls(range, nanos, |i| {
        let write = db
            .atomic()
            .set(&latency_key(i), value.clone())
            .as_write()
            .clone();
        runtime.block_on(db.commit_async(write)).map(drop)
    })
}

/// One turn of `range` point reads of keys written before on `store`.
fn get_turn<S: Store>(
    store: &S,
    range: std::ops::Range<usize>,
    nanos: &mut Vec<u64>,
) -> Result<(), String> {
    time_calls(range, nanos, |i| {
        let k = tuplekv_engine::codec::encode_key(&latency_key(i));
        match store.get_latest_raw(&k) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("a key written before was not found".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    })
}

/// Sequential get and commit latency through the server and against an in-process durable
/// database (sync, as the server's) in `--data-dir`, in alternating turns; one JSON line per
/// store and op.
fn latencies(args: &Args) -> Result<(), String> {
    let remote = connect(args)?;
    let dir = args.data_dir.as_deref().unwrap_or(".");
    let local = Database::open(dir, Options::default())
        .map_err(|e| format!("opening a database in {dir}: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for commit_async: {e}"))?;
    let (mut remote_commit, mut local_commit, mut local_async) = (vec![], vec![], vec![]);
    for turn in turns(args.ops) {
        commit_turn(&remote, turn.clone(), &mut remote_commit)?;
        commit_turn(&local, turn.clone(), &mut local_commit)?;
        commit_async_turn(&local, &runtime, turn, &mut local_async)?;
    }
    let (mut remote_get, mut local_get) = (vec![], vec![]);
    for turn in turns(args.ops) {
        get_turn(&remote, turn.clone(), &mut remote_get)?;
        get_turn(&local, turn, &mut local_get)?;
    }
    for (store, op, nanos) in [
        ("remote", "get", remote_get),
        ("in_process", "get", local_get),
        ("remote", "commit", remote_commit),
        ("in_process", "commit", local_commit),
        ("in_process", "commit_async", local_async),
    ] {
        let ops = nanos.len();
        let (p50, p99) = quantiles_us(nanos);
        println!(
            "{}",
            serde_json::json!({
                "workload": "latency", "store": store, "op": op, "ops": ops,
                "p50_us": p50, "p99_us": p99,
            })
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.workload {
        Workload::Fast | Workload::Gapless | Workload::GaplessChecked => codes(&args),
        Workload::RedisIncr => redis_incr(&args),
        Workload::Latency => {
            return match latencies(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("remote_codes: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result {
        Ok((tally, seconds)) => {
            println!(
                "{}",
                serde_json::json!({
                    "workload": args.workload.name(),
                    "threads": args.threads,
                    "ops": tally.ops,
                    "seconds": seconds,
                    "ops_per_sec": tally.ops as f64 / seconds,
                    "errors": tally.errors,
                    "first_error": tally.first_error,
                    "commits": tally.commits,
                    "conflicts": tally.conflicts,
                })
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("remote_codes: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(line: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("remote_codes").chain(line.split_whitespace()))
    }

    #[test]
    fn parses_workloads_and_refuses_bad_flags() {
        let args = parse_args("gapless --url http://x/ --threads 8").expect("parses");
        assert_eq!(args.workload, Workload::Gapless);
        assert_eq!(args.url, "http://x");
        assert_eq!(args.threads, 8);
        let at_limit = parse_args(&format!(
            "latency --url http://x --data-dir d --ops {LATENCY_OPS_MAX}"
        ))
        .expect("the most ops");
        assert_eq!(at_limit.ops, LATENCY_OPS_MAX);
        for bad in [
            "",
            "slow --url http://x",
            "fast",
            "fast --url http://x --threads 0",
            "fast --url http://x --seconds -1",
            "latency --url http://x",
            "fast --url http://x --nope 1",
            "latency --url http://x --data-dir d --ops 0",
            "latency --url http://x --data-dir d --ops 1000001",
        ] {
            assert!(parse_args(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn latency_reports_quantiles() {
        let mut nanos = Vec::new();
        time_calls(0..10, &mut nanos, |_| Ok::<(), String>(())).expect("runs");
        assert_eq!(nanos.len(), 10);
        let (p50, p99) = quantiles_us(nanos);
        assert!(p50 <= p99);
        assert!(time_calls(0..3, &mut Vec::new(), |_| Err::<(), _>("broken")).is_err());
    }

    #[test]
    fn turns_cover_every_op_once() {
        let all: Vec<_> = turns(250).collect();
        assert_eq!(all, vec![0..100, 100..200, 200..250]);
        assert_eq!(turns(0).count(), 0);
    }

    #[test]
    fn latency_runs_against_an_in_process_store() {
        let db = Database::in_memory();
        let mut commits = Vec::new();
        let mut gets = Vec::new();
        commit_turn(&db, 0..5, &mut commits).expect("commits");
        get_turn(&db, 0..5, &mut gets).expect("reads what it wrote");
        assert!(
            get_turn(&db, 5..6, &mut gets).is_err(),
            "key 5 was never written"
        );
    }
}
