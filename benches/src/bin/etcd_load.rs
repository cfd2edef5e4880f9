//! `etcd_load`: one process of `cargo xtask bench etcd`. It drives one workload against an
//! etcd cluster (which the bench orchestrator starts with the test kit's harness) from T
//! threads for D seconds and prints one JSON line with the rate and the per-operation latency.
//!
//! ```text
//! etcd_load checked|raw-txn|fast|gapless|gapless-checked --endpoints URL[,URL…] [--threads 4]
//!           [--seconds 5] [--warmup 0.5] [--prefix BENCH]
//! ```
//! - `checked`: commits through an `EtcdStore`, each with one key check and one set of a
//!   100-byte value, every thread on a key of its own (so no check fails).
//! - `raw-txn`: the same through the `etcd-client` crate directly: a transaction with one
//!   `mod_revision` comparison and one put, on a runtime of the same size as `EtcdStore`'s.
//! - `fast`, `gapless`: codes of one sequence through `Sequences<EtcdStore>`; gapless ones
//!   numbered by the store, whose numbering counts (etcd transactions, the ones a moved
//!   counter refused) the line carries as `numbering`.
//! - `gapless-checked`: gapless codes in the old mode, the handle checking the counter's
//!   versionstamp (refused commits are `conflicts`).
//!
//! The bench orchestrator runs several of these processes at once and sums their rates; each
//! process measures its own window after its warm-up.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, KvClient, Txn, TxnOp};
use tuplekv_benches::{
    SECONDS_DEFAULT, THREADS_DEFAULT, WARMUP_DEFAULT, measured_seconds, quantile, thread_count,
    warmup_seconds,
};
use tuplekv_engine::{CommitResult, Store, Versionstamp, key};
use tuplekv_etcd::{CONNECT_TIMEOUT, EtcdStore, REQUEST_TIMEOUT};
use tuplekv_sequence::{Mode, Numbering, SequenceOptions, Sequences};

/// Key prefix (of the store, and of the raw keys) unless `--prefix` says otherwise.
const PREFIX_DEFAULT: &str = "BENCH";
/// Digits of the codes: wide enough that a run never widens them.
const CODE_WIDTH: usize = 12;
/// A thread stops after this many failed operations (a broken cluster must not spin).
const ERRORS_MAX: u64 = 100;
/// Bytes of the value each checked commit (and each raw put) writes.
const VALUE_SIZE: usize = 100;
/// Worker threads of the raw workload's runtime: as many as `EtcdStore` runs its client on,
/// so the two rows differ by our layer only.
const RAW_IO_THREADS: usize = 2;

/// What this process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// Commits through an `EtcdStore`, each with one key check and one set.
    Checked,
    /// The same through the `etcd-client` crate directly.
    RawTxn,
    /// Codes of one fast sequence.
    Fast,
    /// Codes of one gapless sequence, numbered by the store.
    Gapless,
    /// Gapless codes with the handle checking the counter's versionstamp (the old mode).
    GaplessChecked,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Checked => "checked",
            Workload::RawTxn => "raw-txn",
            Workload::Fast => "fast",
            Workload::Gapless => "gapless",
            Workload::GaplessChecked => "gapless-checked",
        }
    }
}

/// One process of `cargo xtask bench etcd`; prints JSON lines on stdout.
#[derive(Debug, Parser)]
#[command(name = "etcd_load")]
struct Args {
    /// The workload to drive.
    #[arg(value_enum)]
    workload: Workload,
    /// The cluster's client URLs, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// Threads in this process.
    #[arg(long, default_value_t = THREADS_DEFAULT, value_parser = thread_count)]
    threads: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = SECONDS_DEFAULT, value_parser = measured_seconds)]
    seconds: f64,
    /// Unmeasured seconds before the window.
    #[arg(long, default_value_t = WARMUP_DEFAULT, value_parser = warmup_seconds)]
    warmup: f64,
    /// Key prefix (of the store, and of the raw keys).
    #[arg(long, default_value = PREFIX_DEFAULT)]
    prefix: String,
}

/// What the threads of one rate run counted.
#[derive(Debug, Default)]
struct Tally {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    /// Nanoseconds of each measured successful operation.
    nanos: Vec<u64>,
    /// Store commits and refused commits over the whole run (warm-up included), where the
    /// workload knows them.
    commits: Option<u64>,
    conflicts: Option<u64>,
    /// The store's numbering counts (gapless: etcd transactions, counter-guard retries,
    /// guesses, combined commits), as JSON.
    numbering: Option<serde_json::Value>,
}

/// Runs `op` on `args.threads` threads: unmeasured for the warm-up, then counted for the
/// window. Each thread gets its own state from `setup(thread index)`.
fn run_rate<S, E: std::fmt::Display>(
    args: &Args,
    setup: impl Fn(usize) -> Result<S, String> + Sync,
    op: impl Fn(&mut S) -> Result<(), E> + Sync,
) -> Result<Tally, String> {
    let tally = Mutex::new(Tally::default());
    let barrier = Barrier::new(args.threads);
    let failed = AtomicBool::new(false);
    let warmup = Duration::from_secs_f64(args.warmup);
    let window = Duration::from_secs_f64(args.seconds);
    let setup_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for index in 0..args.threads {
            let (tally, barrier, failed, setup_error) = (&tally, &barrier, &failed, &setup_error);
            let (setup, op) = (&setup, &op);
            scope.spawn(move || {
                let state = setup(index);
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
                        Ok(()) => {
                            mine.ops += 1;
                            mine.nanos
                                .push(u64::try_from(now.elapsed().as_nanos()).unwrap_or(u64::MAX));
                        }
                        Err(e) => {
                            mine.errors += 1;
                            mine.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                let mut total = tally.lock().unwrap_or_else(PoisonError::into_inner);
                total.ops += mine.ops;
                total.errors += mine.errors;
                total.nanos.append(&mut mine.nanos);
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
    Ok(tally.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// Connects an `EtcdStore` under `args.prefix`; one per process, shared by its threads, as
/// a server would.
fn connect(args: &Args) -> Result<EtcdStore, String> {
    EtcdStore::connect(&args.endpoints, args.prefix.as_bytes())
        .map_err(|e| format!("connecting to {}: {e}", args.endpoints.join(",")))
}

/// Checked commits: each thread checks its own key's last versionstamp and sets it.
fn checked(args: &Args) -> Result<Tally, String> {
    let store = connect(args)?;
    let pid = u64::from(std::process::id());
    let value = vec![7u8; VALUE_SIZE];
    let conflicts = std::sync::atomic::AtomicU64::new(0);
    let mut tally = run_rate(
        args,
        |thread| Ok((key!["bench_checked", pid, thread as u64], None)),
        |(key, last): &mut (tuplekv_engine::Key, Option<Versionstamp>)| match store
            .atomic()
            .check(key, *last)
            .set(key, value.clone())
            .commit()
        {
            Ok(CommitResult::Committed { versionstamp, .. }) => {
                *last = Some(versionstamp);
                Ok(())
            }
            Ok(CommitResult::Conflict(_)) => {
                conflicts.fetch_add(1, Ordering::Relaxed);
                Err("a check failed on a key no other thread writes".to_owned())
            }
            Err(e) => Err(e.to_string()),
        },
    )?;
    tally.conflicts = Some(conflicts.into_inner());
    Ok(tally)
}

/// The raw client: a runtime like `EtcdStore`'s and a KV client on it.
struct Raw {
    runtime: tokio::runtime::Runtime,
    kv: KvClient,
}

impl Raw {
    fn connect(endpoints: &[String]) -> Result<Raw, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RAW_IO_THREADS)
            .thread_name("etcd-load-raw")
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for the raw client: {e}"))?;
        let options = ConnectOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(CONNECT_TIMEOUT);
        let endpoints = endpoints.to_vec();
        let client = runtime
            .block_on(Client::connect(endpoints, Some(options)))
            .map_err(|e| format!("connecting the raw client: {e}"))?;
        Ok(Raw {
            kv: client.kv_client(),
            runtime,
        })
    }

    /// One transaction: put `value` at `key` if its `mod_revision` is `last`; returns the new
    /// revision. Spawned on the runtime and waited for on this thread, as `EtcdStore` does.
    fn checked_put(&self, key: &[u8], last: i64, value: &[u8]) -> Result<i64, String> {
        let mut kv = self.kv.clone();
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, last)])
            .and_then([TxnOp::put(key, value, None)]);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = tx.send(kv.txn(txn).await);
        });
        let response = rx
            .recv()
            .map_err(|_| "the raw client's runtime stopped".to_owned())?
            .map_err(|e| e.to_string())?;
        if !response.succeeded() {
            return Err("a comparison failed on a key no other thread writes".to_owned());
        }
        response
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| "a transaction answer without a header".to_owned())
    }
}

/// Raw etcd transactions: one `mod_revision` comparison and one put each.
fn raw_txn(args: &Args) -> Result<Tally, String> {
    let raw = Raw::connect(&args.endpoints)?;
    let pid = std::process::id();
    let value = vec![7u8; VALUE_SIZE];
    run_rate(
        args,
        |thread| {
            let key = format!("{}raw/{pid}/{thread}", args.prefix).into_bytes();
            Ok((key, 0i64))
        },
        |(key, last): &mut (Vec<u8>, i64)| {
            *last = raw.checked_put(key, *last, &value)?;
            Ok::<(), String>(())
        },
    )
}

/// Codes of one sequence (created if missing) from every thread; one handle per process.
fn codes(args: &Args) -> Result<Tally, String> {
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
    let name = "CODES";
    seqs.create(name, options)
        .map_err(|e| format!("creating sequence {name}: {e}"))?;
    if mode == Mode::Fast {
        let seq = seqs.fast(name).map_err(|e| e.to_string())?;
        let mut tally = run_rate(args, |_| Ok(()), |_: &mut ()| seq.next_number().map(drop))?;
        tally.commits = Some(seq.reservations());
        Ok(tally)
    } else {
        let numbering = if args.workload == Workload::GaplessChecked {
            Numbering::Checked
        } else {
            Numbering::Store
        };
        let seq = seqs
            .gapless(name)
            .map_err(|e| e.to_string())?
            .with_numbering(numbering);
        let mut tally = run_rate(args, |_| Ok(()), |_: &mut ()| seq.next().map(drop))?;
        let stats = seq.stats();
        (tally.commits, tally.conflicts) = (Some(stats.commits), Some(stats.conflicts));
        let n = seqs.store().numbering_stats();
        tally.numbering = Some(serde_json::json!({
            "commits": n.commits,
            "transactions": n.transactions,
            "counter_retries": n.counter_retries,
            "later_guesses": n.later_guesses,
            "guesses": n.guesses,
            "combined": n.combined,
        }));
        Ok(tally)
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    args.endpoints.retain(|e| !e.is_empty());
    if args.endpoints.is_empty() {
        tuplekv_benches::refuse::<Args>("`--endpoints` names no URL");
    }
    let result = match args.workload {
        Workload::Checked => checked(&args),
        Workload::RawTxn => raw_txn(&args),
        Workload::Fast | Workload::Gapless | Workload::GaplessChecked => codes(&args),
    };
    match result {
        Ok(mut tally) => {
            tally.nanos.sort_unstable();
            let us = |q| quantile(&tally.nanos, q) as f64 / 1000.0;
            println!(
                "{}",
                serde_json::json!({
                    "workload": args.workload.name(),
                    "threads": args.threads,
                    "ops": tally.ops,
                    "seconds": args.seconds,
                    "ops_per_sec": tally.ops as f64 / args.seconds,
                    "p50_us": us(0.50),
                    "p99_us": us(0.99),
                    "errors": tally.errors,
                    "first_error": tally.first_error,
                    "commits": tally.commits,
                    "conflicts": tally.conflicts,
                    "numbering": tally.numbering,
                })
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("etcd_load: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(line: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("etcd_load").chain(line.split_whitespace()))
    }

    #[test]
    fn parses_workloads_and_refuses_bad_flags() {
        let args = parse_args("raw-txn --endpoints http://a,http://b --threads 8").expect("parses");
        assert_eq!(args.workload, Workload::RawTxn);
        assert_eq!(args.endpoints, ["http://a", "http://b"]);
        assert_eq!(args.threads, 8);
        for bad in [
            "",
            "slow --endpoints http://x",
            "checked",
            "checked --endpoints http://x --threads 0",
            "fast --endpoints http://x --seconds -1",
            "cluster",
            "gapless --endpoints http://x --nope 1",
        ] {
            assert!(parse_args(bad).is_err(), "{bad}");
        }
    }
}
