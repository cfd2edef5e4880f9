//! Leader failover under load: four app processes issue fast and gapless codes and insert
//! users with unique emails (some emails wanted by every process) through [`EtcdStore`] on a
//! 3-member etcd cluster; the etcd leader is killed with SIGKILL while they work, and
//! restarted on its data a little later. Then, read from the store: no code handed out twice,
//! the gapless numbers exactly `1..=n`, every write an app was told had committed present,
//! no email held twice and the collection's `verify()` clean. The run prints its figures:
//! codes, users, and the outage, measured three ways:
//! - without a leader: from the kill until a running member reports itself leader
//!   (`Cluster::leader()` polls every 50 ms);
//! - without a commit, for the apps: from the kill until the first operation any app got
//!   acknowledged (the apps report when each was, in Unix milliseconds);
//! - for one client: from the kill until the parent's probe, which commits every
//!   [`PROBE_INTERVAL`], gets an acknowledgement. A request that a follower accepted while
//!   there was no leader waits for etcd's own request timeout (about 7 s on 3.4: 5 s plus
//!   two election timeouts) before it fails, so this one can be much longer.
//!
//! This binary has no libtest harness (`harness = false` in Cargo.toml): the parent starts
//! this very binary again with `--role app` for each app process. Arguments cargo or a
//! runner passes (filters, `--test-threads`) are ignored, except `--list`, answered as
//! libtest would.
//!
//! How an app settles a write whose outcome it does not know (`Error::OutcomeUnknown`: the
//! member that had the transaction died; `Error::Unavailable`: no member answered):
//! - a fast code: a reservation that may have landed is simply redone (the next block lies
//!   above it, so nothing is issued twice); recording a code re-reads its log key, which
//!   names the app;
//! - a gapless code: each request writes an idempotency key, checked absent in the same
//!   commit and holding the number, so the key says whether (and with which number) the
//!   request landed, and a resend of one that did is refused;
//! - a user: ids are unique per request, so reading the user by id says whether it landed,
//!   and a unique violation naming our own id is our own earlier attempt.
//!
//! The user record, these operations, the report lines and the checks are
//! `tuplekv_testkit::app_servers`, which the tuplekv app-servers example shares: it runs the
//! same scenario through `RemoteStore` against a tuplekv server that is killed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tuplekv_engine::{Store, key};
use tuplekv_etcd::EtcdStore;
use tuplekv_testkit::etcd::Cluster;

use tuplekv_testkit::app_servers::{self as shared, App, Reported, User};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// The wall clock in Unix milliseconds, which the processes share (an `Instant` is not).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Returns early with an error made of a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => { return Err(format!($($arg)*).into()) };
}

/// Members of the cluster.
const MEMBERS: usize = 3;
/// App processes.
const APPS: usize = 4;
/// Threads per app process.
const THREADS: usize = 2;
/// The etcd key prefix of the store.
const STORE_PREFIX: &[u8] = b"failover/";
/// The fast sequences each thread issues from, in turn.
const FAST_PREFIXES: [&str; 2] = ["LOG", "ERR"];
/// The gapless sequence (invoice numbers: an auditor counts them).
const GAPLESS_PREFIX: &str = "INV";
/// Digits of the gapless codes.
const GAPLESS_WIDTH: usize = 6;
/// One user in this many takes an email every app also tries to take.
const SHARED_EMAIL_EVERY: u64 = 3;
/// How long the apps work before the leader is killed.
const BEFORE_KILL: Duration = Duration::from_millis(1500);
/// How long the killed member stays down (the apps go on with two members).
const DOWN_FOR: Duration = Duration::from_secs(2);
/// How long the apps go on after the member is back.
const AFTER_RESTART: Duration = Duration::from_millis(1500);
/// How often the parent's probe commits, to time the outage as a client sees it.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// How long one operation may keep meeting faults before the app gives up.
const OPERATION_RETRY_FOR: Duration = Duration::from_secs(30);
/// Longest an app runs if the parent never tells it to stop.
const APP_RUN_MAX: Duration = Duration::from_secs(50);
/// Longest wait for an app to start, or to finish once told to stop.
const APP_TIMEOUT: Duration = Duration::from_secs(40);
/// Longest wait, once the apps are done, for the probe's first commit after the kill.
const PROBE_WAIT_MAX: Duration = Duration::from_secs(20);
/// How many of the probe's errors are printed.
const PROBE_ERRORS_KEPT: usize = 3;
/// How many times the checks run when a read fails.
const CHECK_ATTEMPTS: u32 = 5;
/// The pause before the checks run again.
const CHECK_PAUSE: Duration = Duration::from_millis(500);
/// The line an app prints once each of its threads has committed something.
const READY: &str = "ready";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        println!("failover: test");
        return ExitCode::SUCCESS;
    }
    let outcome = match arg(&args, "--role") {
        None => parent(),
        Some("app") => app(&args),
        Some(other) => Err(format!("unknown role {other:?}").into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

fn required<T: std::str::FromStr>(args: &[String], name: &str) -> Result<T> {
    let Some(text) = arg(args, name) else {
        bail!("missing {name}")
    };
    match text.parse() {
        Ok(v) => Ok(v),
        Err(_) => bail!("bad {name} {text:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// What the processes share

/// The user thread `thread` of `app` inserts at its `i`th user: a unique id, and an email
/// every app wants for one user in [`SHARED_EMAIL_EVERY`].
fn user_for(app: u64, thread: u64, i: u64) -> User {
    let id = app * 100_000_000 + thread * 1_000_000 + i;
    let email = if i.is_multiple_of(SHARED_EMAIL_EVERY) {
        format!("shared{}@example.com", i / SHARED_EMAIL_EVERY)
    } else {
        format!("a{app}t{thread}u{i}@example.com")
    };
    User { id, email }
}

// ---------------------------------------------------------------------------------------
// The app role

/// What an app's threads share: its operations (settled as the module doc says), and the
/// parent's word to stop.
struct AppCtx {
    ops: App<EtcdStore>,
    stop: AtomicBool,
}

/// Connects, then works on [`THREADS`] threads until stdin closes; writes the report file.
fn app(args: &[String]) -> Result<()> {
    let app: u64 = required(args, "--id")?;
    let endpoints: String = required(args, "--endpoints")?;
    let report: PathBuf = required(args, "--report")?;
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    let store = EtcdStore::connect(&endpoints, STORE_PREFIX)?;
    let ctx = AppCtx {
        ops: App::open(
            store,
            app,
            &FAST_PREFIXES,
            GAPLESS_PREFIX,
            OPERATION_RETRY_FOR,
        )?,
        stop: AtomicBool::new(false),
    };
    let ready = AtomicU64::new(0);
    let lines: Vec<Vec<String>> = std::thread::scope(|s| {
        s.spawn(|| {
            // EOF on stdin: the parent says stop (or is gone).
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            ctx.stop.store(true, Ordering::Relaxed);
        });
        let workers: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let (ctx, ready) = (&ctx, &ready);
                s.spawn(move || work(ctx, t, ready))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect::<Result<_>>()
    })?;
    let mut out = std::fs::File::create(&report)?;
    for line in lines.iter().flatten() {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "{}", ctx.ops.faults.line())?;
    out.sync_all()?;
    Ok(())
}

/// One thread's loop: a fast code each round, a gapless code every second round, a user
/// every third; each acknowledged result becomes a report line.
fn work(ctx: &AppCtx, thread: u64, ready: &AtomicU64) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    // When each operation was acknowledged (Unix ms), for the outage as the apps saw it.
    let mut acks = Vec::new();
    let started = Instant::now();
    let mut last_ack = Instant::now();
    let mut i: u64 = 0;
    while !ctx.stop.load(Ordering::Relaxed) && started.elapsed() < APP_RUN_MAX {
        let ops = &ctx.ops;
        let seq = &ops.fast[(i as usize) % ops.fast.len()];
        let n = ops.issue_fast(seq)?;
        lines.push(shared::fast_line(seq.prefix(), n));
        acks.push(unix_ms());
        if i.is_multiple_of(2) {
            let n = ops.issue_gapless(thread, i)?;
            lines.push(shared::gapless_line(GAPLESS_PREFIX, n));
            acks.push(unix_ms());
        }
        if i.is_multiple_of(3) {
            let user = user_for(ops.app, thread, i / 3);
            let inserted = ops.insert_user(&user)?;
            lines.push(shared::user_line(&user, inserted));
            acks.push(unix_ms());
        }
        ops.faults.waited(last_ack.elapsed());
        last_ack = Instant::now();
        if i == 0 && ready.fetch_add(1, Ordering::Relaxed) + 1 == THREADS as u64 {
            println!("{READY}");
            let _ = std::io::stdout().flush();
        }
        i += 1;
    }
    let acks: Vec<String> = acks.iter().map(u64::to_string).collect();
    lines.push(format!("acks {}", acks.join(" ")));
    Ok(lines)
}

// ---------------------------------------------------------------------------------------
// The parent

/// An app process, killed and reaped when dropped so a failed run leaves none.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    report: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_app(
    id: usize,
    endpoints: &str,
    dir: &Path,
    lines: &mpsc::Sender<(usize, String)>,
) -> Result<Proc> {
    let report = dir.join(format!("app{id}.txt"));
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--role", "app", "--id", &id.to_string()])
        .args(["--endpoints", endpoints, "--report"])
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take();
    let Some(stdout) = child.stdout.take() else {
        bail!("no stdout for app {id}")
    };
    let lines = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send((id, line));
        }
    });
    Ok(Proc {
        child,
        stdin,
        report,
    })
}

/// Commits a small write every [`PROBE_INTERVAL`] until `stop`, noting when each one was
/// acknowledged; returns how many commits failed and the first [`PROBE_ERRORS_KEPT`] errors
/// with when they came back.
fn probe(
    store: EtcdStore,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Instant>>>,
) -> (u64, Vec<(Instant, String)>) {
    let mut i: u64 = 0;
    let mut failed = 0;
    let mut errors = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        match store.atomic().set(&key!["probe"], i).commit() {
            Ok(_) => acks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(Instant::now()),
            Err(e) => {
                failed += 1;
                if errors.len() < PROBE_ERRORS_KEPT {
                    errors.push((Instant::now(), e.to_string()));
                }
            }
        }
        std::thread::sleep(PROBE_INTERVAL);
    }
    (failed, errors)
}

fn parent() -> Result<()> {
    let started = Instant::now();
    let cluster = Cluster::start(MEMBERS);
    let endpoints = cluster.client_urls().join(",");
    println!("etcd: {MEMBERS} members at {endpoints}");
    let store = EtcdStore::connect(&cluster.client_urls(), STORE_PREFIX)?;
    shared::set_up(&store, &FAST_PREFIXES, GAPLESS_PREFIX, GAPLESS_WIDTH)?;

    let dir = scratch_dir()?;
    let (tx, rx) = mpsc::channel();
    let mut apps = (1..=APPS)
        .map(|id| start_app(id, &endpoints, &dir, &tx))
        .collect::<Result<Vec<_>>>()?;
    drop(tx);
    let mut ready = 0;
    while ready < APPS {
        match rx.recv_timeout(APP_TIMEOUT) {
            Ok((_, line)) if line == READY => ready += 1,
            Ok((id, line)) => println!("app {id}: {line}"),
            Err(e) => bail!("only {ready} of {APPS} apps got going: {e}"),
        }
    }
    println!("apps: {APPS} processes x {THREADS} threads at work");

    let stop_probe = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let prober = {
        let (store, stop, acks) = (store.clone(), stop_probe.clone(), acks.clone());
        std::thread::spawn(move || probe(store, stop, acks))
    };
    std::thread::sleep(BEFORE_KILL);

    let leader = cluster.leader();
    let killed_unix_ms = unix_ms();
    let killed_at = Instant::now();
    cluster.kill(leader);
    let next = cluster.leader();
    let leaderless = killed_at.elapsed();
    println!(
        "etcd: killed leader m{leader} (SIGKILL); m{next} leads after {} ms",
        leaderless.as_millis()
    );
    std::thread::sleep(DOWN_FOR.saturating_sub(killed_at.elapsed()));
    cluster.restart(leader);
    println!(
        "etcd: m{leader} restarted and healthy {} ms after the kill",
        killed_at.elapsed().as_millis()
    );
    std::thread::sleep(AFTER_RESTART);

    // Closing their stdin tells the apps to finish the round they are in and report.
    let stopped_unix_ms = unix_ms();
    for app in &mut apps {
        app.stdin = None;
    }
    for (i, app) in apps.iter_mut().enumerate() {
        wait_app(i + 1, &mut app.child)?;
    }
    // The probe runs until it has committed after the kill (its one request may still be
    // held by a follower), or for PROBE_WAIT_MAX.
    let probe_wait = Instant::now();
    while probe_wait.elapsed() < PROBE_WAIT_MAX
        && !acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|t| *t > killed_at)
    {
        std::thread::sleep(PROBE_INTERVAL);
    }
    stop_probe.store(true, Ordering::Relaxed);
    let Ok((probe_failed, probe_errors)) = prober.join() else {
        bail!("the probe thread panicked");
    };
    let (outage, longest_gap) = outage(&acks, killed_at)?;
    println!(
        "probe: first commit after the kill {} ms after it; longest gap between probe \
         commits {} ms; {probe_failed} commits failed",
        outage.as_millis(),
        longest_gap.as_millis()
    );
    for (at, e) in &probe_errors {
        let after = at.saturating_duration_since(killed_at).as_millis();
        println!("  probe error {after} ms after the kill: {e}");
    }

    let reports = apps
        .iter()
        .map(|a| std::fs::read_to_string(&a.report))
        .collect::<Result<Vec<_>, _>>()?;
    let (reported, failures) = check_settled(&store, &reports)?;
    let (gap_from, gap_to) = apps_gap(&reported.acks, killed_unix_ms, stopped_unix_ms)?;
    let apps_outage = gap_to - gap_from;
    let tail = reported
        .acks
        .last()
        .map_or(0, |t| t.saturating_sub(stopped_unix_ms));
    println!(
        "apps: the longest stretch with no acknowledgement to any app while they worked: \
         {apps_outage} ms, from {gap_from} ms to {gap_to} ms after the kill; the last \
         operation in flight when they were told to stop ended {tail} ms later"
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "time without a leader: {} ms (kill until a member reports itself leader); without \
         a commit: {apps_outage} ms for the apps (longest stretch without an \
         acknowledgement to any), {} ms for the probe (kill until its first acknowledged \
         commit; one request a follower held until etcd's request timeout can make this \
         about 7 s)",
        leaderless.as_millis(),
        outage.as_millis()
    );
    println!("elapsed: {} ms", started.elapsed().as_millis());
    if failures.is_empty() {
        println!("all checks passed");
        Ok(())
    } else {
        bail!(
            "{} check(s) failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        )
    }
}

/// A fresh scratch directory for the apps' reports.
fn scratch_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tuplekv-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// From the probe's acknowledgements: how long after the kill the first commit came back,
/// and the longest gap between two acknowledgements.
fn outage(acks: &Mutex<Vec<Instant>>, killed_at: Instant) -> Result<(Duration, Duration)> {
    let acks = acks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(first) = acks.iter().find(|t| **t > killed_at) else {
        bail!("the probe never committed after the kill")
    };
    let longest = acks
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();
    Ok((first.duration_since(killed_at), longest))
}

/// From the apps' acknowledgement times (sorted): the longest stretch in which no app got
/// one while they were still starting operations (until `stopped_unix_ms`, which ends the
/// last stretch), as its start and end in milliseconds after the kill (the start may be
/// before it). After the stop only operations already in flight end, which says nothing
/// about the cluster.
fn apps_gap(acks: &[u64], killed_unix_ms: u64, stopped_unix_ms: u64) -> Result<(i64, i64)> {
    let mut times: Vec<u64> = acks
        .iter()
        .copied()
        .filter(|t| *t <= stopped_unix_ms)
        .collect();
    if !times.iter().any(|t| *t >= killed_unix_ms) {
        bail!("no app got an acknowledgement between the kill and the stop");
    }
    times.push(stopped_unix_ms);
    let (from, to) = times
        .windows(2)
        .map(|w| (w[0], w[1]))
        .max_by_key(|(a, b)| b - a)
        .unwrap_or((stopped_unix_ms, stopped_unix_ms));
    let signed = |t: u64| i64::try_from(t).unwrap_or(i64::MAX);
    Ok((
        signed(from) - signed(killed_unix_ms),
        signed(to) - signed(killed_unix_ms),
    ))
}

fn wait_app(id: usize, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + APP_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("app {id} failed: {status}");
            }
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("app {id} still running {APP_TIMEOUT:?} after it was told to stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// The checks, against the store itself

/// [`check`], run again after a pause when a read fails (the checks only read, so a rerun is
/// sound): the client may still meet a member it saw go down a moment ago.
fn check_settled(store: &EtcdStore, reports: &[String]) -> Result<(Reported, Vec<String>)> {
    let mut attempt = 1;
    loop {
        match check(store, reports) {
            Ok(done) => return Ok(done),
            Err(e) if attempt < CHECK_ATTEMPTS => {
                println!("checks: a read failed ({e}); checking again");
                attempt += 1;
                std::thread::sleep(CHECK_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Every check; returns what the apps reported, and what failed.
fn check(store: &EtcdStore, reports: &[String]) -> Result<(Reported, Vec<String>)> {
    let reported = shared::parse_reports(reports)?;
    println!("{}", reported.summary());
    let failures = shared::check(store, &reported, &FAST_PREFIXES, GAPLESS_PREFIX)?;
    Ok((reported, failures))
}
