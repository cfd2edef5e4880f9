//! `numbered_load`: gapless codes from P processes (app servers) of T threads each, every
//! process on one `EtcdStore`, against a running etcd cluster; prints codes/s and the store's
//! retries, then checks that the codes are exactly `1..=n`, each with its record.
//!
//! ```text
//! cargo run --release -p tuplekv-etcd --example numbered_load -- \
//!     numbered|checked --endpoints URL[,URL...] [--processes 4] [--threads 4] \
//!     [--seconds 5] [--warmup 1]
//! ```
//! Each code is one commit of its record `["codes", "C<12 digits>"]` (value: the code) and the
//! uniqueness key `["used", n]`, checked absent and set:
//! - `numbered`: the store takes the number from counter `["next", "C"]` in the commit
//!   (`AtomicWrite::numbering`): nothing is read first, and nothing refused reaches the
//!   caller.
//! - `checked`: the caller reads the counter, commits with a check of its versionstamp and
//!   the counter's new value, and on a conflict reads again and retries (how the sequence
//!   layer numbered gapless codes before store numbering).
//!
//! The parent starts the P processes (itself, with `--worker`), sums their lines and checks
//! the store. A cluster to run it against: `cargo xtask etcd-cluster` (or the test kit's
//! `etcd_cluster` binary).

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::numbering::{CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Key, KeyBytes, KeyPart, ListOptions, ReadView, Selector, Store,
    Value, key,
};
use tuplekv_etcd::EtcdStore;

/// Digits of a code: a run never widens them.
const WIDTH: u8 = 12;
/// A thread stops after this many errors.
const ERRORS_MAX: u64 = 100;
/// Longest `--seconds` or `--warmup`.
const SECONDS_MAX: f64 = 600.0;
/// Most processes or threads.
const PARALLEL_MAX: usize = 64;

const USAGE: &str = "usage: numbered_load numbered|checked --endpoints URL[,URL...] \
[--processes P] [--threads T] [--seconds S] [--warmup S]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Numbered,
    Checked,
}

#[derive(Debug, Clone)]
struct Args {
    workload: Workload,
    endpoints: Vec<String>,
    processes: usize,
    threads: usize,
    seconds: f64,
    warmup: f64,
    prefix: String,
    worker: bool,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut it = argv.iter();
    let workload = match it.next().map(String::as_str) {
        Some("numbered") => Workload::Numbered,
        Some("checked") => Workload::Checked,
        other => return Err(format!("no workload {other:?}\n{USAGE}")),
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut args = Args {
        workload,
        endpoints: Vec::new(),
        processes: 4,
        threads: 4,
        seconds: 5.0,
        warmup: 1.0,
        prefix: format!("numbered-load/{}/{nanos}/", std::process::id()),
        worker: false,
    };
    while let Some(flag) = it.next() {
        if flag == "--worker" {
            args.worker = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))?;
        let count = |v: &str| match v.parse::<usize>() {
            Ok(n) if (1..=PARALLEL_MAX).contains(&n) => Ok(n),
            _ => Err(format!("`{flag}` takes 1 to {PARALLEL_MAX}, not `{v}`")),
        };
        let seconds = |v: &str| match v.parse::<f64>() {
            Ok(s) if (0.0..=SECONDS_MAX).contains(&s) => Ok(s),
            _ => Err(format!(
                "`{flag}` takes 0 to {SECONDS_MAX} seconds, not `{v}`"
            )),
        };
        match flag.as_str() {
            "--endpoints" => args.endpoints = value.split(',').map(str::to_owned).collect(),
            "--processes" => args.processes = count(value)?,
            "--threads" => args.threads = count(value)?,
            "--seconds" => args.seconds = seconds(value)?,
            "--warmup" => args.warmup = seconds(value)?,
            "--prefix" => args.prefix.clone_from(value),
            other => return Err(format!("unknown flag `{other}`\n{USAGE}")),
        }
    }
    if args.endpoints.is_empty() {
        return Err(format!("`--endpoints` is required\n{USAGE}"));
    }
    Ok(args)
}

fn counter() -> Key {
    key!["next", "C"]
}

fn code_key(n: u64) -> Key {
    let code = format!("C{n:0width$}", width = usize::from(WIDTH));
    key!["codes", code.as_str()]
}

/// Where `needle` starts in `hay`.
fn offset(hay: &[u8], needle: &[u8]) -> u32 {
    let at = hay.windows(needle.len()).position(|w| w == needle);
    u32::try_from(at.unwrap_or(0)).unwrap_or(0)
}

/// The numbered commit of one code: placeholders in the record's key and value and in the
/// uniqueness key (checked absent, then set).
fn numbered_write() -> AtomicWrite {
    let zeros = "0".repeat(usize::from(WIDTH));
    let record = code_key(0);
    let value = format!("C{zeros}");
    let used = encode_key(&key!["used"]);
    let bytes = |k: &[u8]| KeyBytes::from(k);
    let mut write = AtomicWrite::default();
    write.checks.push(tuplekv_engine::Check {
        key: bytes(&used),
        versionstamp: None,
    });
    let set = |key: KeyBytes, value: &[u8]| tuplekv_engine::Mutation {
        key,
        kind: tuplekv_engine::MutationKind::Set {
            value: Value::from(value),
            expiry: None,
        },
    };
    let record_bytes = encode_key(&record);
    write
        .mutations
        .push(set(bytes(&record_bytes), value.as_bytes()));
    write.mutations.push(set(bytes(&used), b"1"));
    let used_len = u32::try_from(used.len()).unwrap_or(0);
    let slot = |target, offset, form| NumberSlot {
        counter: 0,
        ordinal: 0,
        target,
        offset,
        form,
    };
    write.numbering = Numbering {
        counters: vec![CounterClaim {
            key: bytes(&encode_key(&counter())),
            start: 1,
            count: 1,
            max: 10u64.pow(u32::from(WIDTH)) - 1,
        }],
        slots: vec![
            slot(
                SlotTarget::MutationKey(0),
                offset(&record_bytes, zeros.as_bytes()),
                NumberForm::Digits {
                    width: WIDTH,
                    widen: true,
                },
            ),
            slot(
                SlotTarget::MutationValue(0),
                1,
                NumberForm::Digits {
                    width: WIDTH,
                    widen: false,
                },
            ),
            slot(SlotTarget::CheckKey(0), used_len, NumberForm::KeyPart),
            slot(SlotTarget::MutationKey(1), used_len, NumberForm::KeyPart),
        ],
    };
    write
}

/// What one worker counted.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Codes committed in the measured window.
    measured: u64,
    /// Codes committed in all (warm-up included).
    codes: u64,
    /// Commits refused (checked: the counter's check; numbered: never expected).
    refused: u64,
    errors: u64,
    transactions: u64,
    counter_retries: u64,
    later_guesses: u64,
    guesses: u64,
    combined: u64,
}

/// One code: whether it committed, and how many commits were refused on the way.
fn one_code(store: &EtcdStore, workload: Workload, template: &AtomicWrite) -> Result<u64, String> {
    match workload {
        Workload::Numbered => match store.commit(template.clone()) {
            Ok(CommitResult::Committed { .. }) => Ok(0),
            Ok(CommitResult::Conflict(c)) => Err(format!("a numbered commit conflicted: {c:?}")),
            Err(e) => Err(e.to_string()),
        },
        Workload::Checked => {
            let mut refused = 0;
            loop {
                let seen = store
                    .snapshot()
                    .get(&counter())
                    .map_err(|e| e.to_string())?;
                let n = seen.as_ref().and_then(|e| e.value.as_u64()).unwrap_or(1);
                let code = format!("C{n:0width$}", width = usize::from(WIDTH));
                let result = store
                    .atomic()
                    .check(&counter(), seen.map(|e| e.versionstamp))
                    .check(&key!["used", n], None)
                    .set(&counter(), n + 1)
                    .set(&code_key(n), code.as_bytes())
                    .set(&key!["used", n], b"1")
                    .commit();
                match result {
                    Ok(CommitResult::Committed { .. }) => return Ok(refused),
                    Ok(CommitResult::Conflict(_)) => refused += 1,
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    }
}

fn worker(args: &Args) -> Result<Counts, String> {
    let store = EtcdStore::connect(&args.endpoints, args.prefix.as_bytes())
        .map_err(|e| format!("connecting: {e}"))?;
    let template = numbered_write();
    let total = Mutex::new(Counts::default());
    let barrier = Barrier::new(args.threads);
    let first_error = Mutex::new(None::<String>);
    let start = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..args.threads {
            let (store, template, total, barrier) = (&store, &template, &total, &barrier);
            let (first_error, start) = (&first_error, &start);
            s.spawn(move || {
                barrier.wait();
                start.fetch_add(1, Ordering::Relaxed);
                let from = Instant::now() + Duration::from_secs_f64(args.warmup);
                let until = from + Duration::from_secs_f64(args.seconds);
                let mut mine = Counts::default();
                while Instant::now() < until && mine.errors < ERRORS_MAX {
                    match one_code(store, args.workload, template) {
                        Ok(refused) => {
                            mine.codes += 1;
                            mine.refused += refused;
                            // Counted when it finished inside the window.
                            let now = Instant::now();
                            if now >= from && now < until {
                                mine.measured += 1;
                            }
                        }
                        Err(e) => {
                            mine.errors += 1;
                            first_error
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert(e);
                        }
                    }
                }
                let mut t = total.lock().unwrap_or_else(PoisonError::into_inner);
                t.measured += mine.measured;
                t.codes += mine.codes;
                t.refused += mine.refused;
                t.errors += mine.errors;
            });
        }
    });
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        eprintln!("numbered_load worker {}: {e}", std::process::id());
    }
    let mut counts = total.into_inner().unwrap_or_else(PoisonError::into_inner);
    let stats = store.numbering_stats();
    counts.transactions = stats.transactions;
    counts.counter_retries = stats.counter_retries;
    counts.later_guesses = stats.later_guesses;
    counts.guesses = stats.guesses;
    counts.combined = stats.combined;
    Ok(counts)
}

fn line(c: &Counts) -> String {
    format!(
        "counts {} {} {} {} {} {} {} {} {}",
        c.measured,
        c.codes,
        c.refused,
        c.errors,
        c.transactions,
        c.counter_retries,
        c.later_guesses,
        c.guesses,
        c.combined
    )
}

fn parse_line(line: &str) -> Option<Counts> {
    let mut it = line
        .strip_prefix("counts ")?
        .split(' ')
        .map(str::parse::<u64>);
    let mut next = || it.next()?.ok();
    Some(Counts {
        measured: next()?,
        codes: next()?,
        refused: next()?,
        errors: next()?,
        transactions: next()?,
        counter_retries: next()?,
        later_guesses: next()?,
        guesses: next()?,
        combined: next()?,
    })
}

/// Checks the store after a run: the codes are exactly `1..=codes`, each record holding its
/// code and its uniqueness key set, and the counter holds the next.
fn verify(args: &Args, codes: u64) -> Result<(), String> {
    let store = EtcdStore::connect(&args.endpoints, args.prefix.as_bytes())
        .map_err(|e| format!("connecting: {e}"))?;
    let mut numbers = Vec::new();
    for entry in store
        .list(&Selector::prefix(&key!["codes"]), ListOptions::default())
        .map_err(|e| e.to_string())?
    {
        let entry = entry.map_err(|e| e.to_string())?;
        let k = entry.decoded_key().map_err(|e| e.to_string())?;
        let Some(KeyPart::String(code)) = k.parts().get(1) else {
            return Err(format!("a record key {k:?}"));
        };
        if entry.value != Value::from(code.as_bytes()) {
            return Err(format!("record {code} holds {:?}", entry.value));
        }
        let n: u64 = code[1..].parse().map_err(|e| format!("{code}: {e}"))?;
        numbers.push(n);
    }
    let used = store
        .list(&Selector::prefix(&key!["used"]), ListOptions::default())
        .map_err(|e| e.to_string())?
        .count();
    let snapshot = store.snapshot();
    numbers.sort_unstable();
    let contiguous = numbers.iter().copied().eq(1..=codes);
    let next = snapshot
        .get(&counter())
        .map_err(|e| e.to_string())?
        .and_then(|e| e.value.as_u64());
    if !contiguous || used as u64 != codes || next != Some(codes + 1) {
        return Err(format!(
            "{} records (first {:?}, last {:?}), {used} uniqueness keys, counter {next:?}, \
             for {codes} committed codes",
            numbers.len(),
            numbers.first(),
            numbers.last()
        ));
    }
    println!("verified: codes 1..={codes}, each with its record and uniqueness key");
    Ok(())
}

fn parent(args: &Args, argv: &[String]) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for _ in 0..args.processes {
        let child = Command::new(&me)
            .args(argv)
            .args(["--prefix", &args.prefix, "--worker"])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting a worker: {e}"))?;
        children.push(child);
    }
    let mut sum = Counts::default();
    for mut child in children {
        let stdout = child.stdout.take().ok_or("a worker without stdout")?;
        let mut counts = None;
        for l in BufReader::new(stdout).lines() {
            counts = counts.or_else(|| parse_line(&l.unwrap_or_default()));
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let c = counts.ok_or_else(|| format!("a worker reported nothing ({status})"))?;
        sum.measured += c.measured;
        sum.codes += c.codes;
        sum.refused += c.refused;
        sum.errors += c.errors;
        sum.transactions += c.transactions;
        sum.counter_retries += c.counter_retries;
        sum.later_guesses += c.later_guesses;
        sum.guesses += c.guesses;
        sum.combined += c.combined;
    }
    let rate = sum.measured as f64 / args.seconds.max(f64::MIN_POSITIVE);
    let workload = match args.workload {
        Workload::Numbered => "numbered",
        Workload::Checked => "checked",
    };
    println!(
        "{workload} {} processes x {} threads: {rate:.0} codes/s ({} in {} s; {} in all), \
         errors {}",
        args.processes, args.threads, sum.measured, args.seconds, sum.codes, sum.errors
    );
    match args.workload {
        Workload::Numbered => println!(
            "  etcd transactions {} ({:.2} codes, {:.1} guesses each), counter-guard retries {}, \
             landed on a later guess {}, commits sharing a transaction {}",
            sum.transactions,
            sum.codes as f64 / (sum.transactions.max(1) as f64),
            sum.guesses as f64 / (sum.transactions.max(1) as f64),
            sum.counter_retries,
            sum.later_guesses,
            sum.combined
        ),
        Workload::Checked => println!(
            "  refused commits {} ({:.2} per code)",
            sum.refused,
            sum.refused as f64 / (sum.codes.max(1) as f64)
        ),
    }
    verify(args, sum.codes)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = if args.worker {
        worker(&args).map(|c| println!("{}", line(&c)))
    } else {
        parent(&args, &argv)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numbered_load: {e}");
            ExitCode::FAILURE
        }
    }
}
