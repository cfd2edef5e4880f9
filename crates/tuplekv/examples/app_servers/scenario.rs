//! The three roles of the app-servers scenario (parent, server, app) and the checks the
//! parent runs on the store afterwards. Shared by `examples/app_servers/main.rs` and
//! `tests/app_servers.rs`: each process is the same binary started again with `--role`.
//!
//! How an app server handles a write whose outcome is unknown (the server died while it was
//! in flight, `Error::OutcomeUnknown`), without ever counting anything twice:
//! - a fast code: the sequence reserves a new block for the next code (the old one is skipped,
//!   a gap fast mode allows); recording a code re-reads its log key, which names the app;
//! - a gapless code: every request carries an idempotency key (`["inv_req", app, thread, i]`)
//!   checked absent in the same commit and holding the number, so a resend of a commit that
//!   did land is refused, and the key says which number the request got;
//! - a user: user ids are unique per request, so reading the user by id says whether it
//!   landed; a unique violation naming our own id is our own earlier attempt.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::{Deserialize, Serialize};
use tuplekv::engine::ListIter;
use tuplekv::index::{self, Collection};
use tuplekv::sequence::{self, FastSequence, GaplessSequence, Mode, Record, SequenceOptions};
use tuplekv::{Database, Key, ListOptions, Options, RemoteStore, Selector, Store, key};
use tuplekv_server::{CommitMode, ServerConfig};

/// The environment variable that carries the access token to the child processes.
const TOKEN_ENV: &str = "TUPLEKV_ACCESS_TOKEN";
/// The fast sequences every app issues from, in turn.
const FAST_PREFIXES: [&str; 3] = ["INFO", "WARN", "ERR"];
/// The gapless sequence (invoice numbers: an auditor counts them).
const GAPLESS_PREFIX: &str = "INV";
/// Digits of the gapless codes.
const GAPLESS_WIDTH: usize = 5;
/// One user in this many takes an email every app also tries to take.
const SHARED_EMAIL_EVERY: usize = 3;
/// How long the server stays dead before it is started again.
const DOWN_PAUSE: Duration = Duration::from_millis(500);
/// How long a restarted server retries binding its old port.
const BIND_RETRY_FOR: Duration = Duration::from_secs(5);
/// How long one operation may keep meeting faults before the app gives up.
const OPERATION_RETRY_FOR: Duration = Duration::from_secs(60);
/// How long the parent waits for the apps (a hung app fails the run rather than the CI job).
const APPS_TIMEOUT: Duration = Duration::from_secs(120);
/// The line an app prints when half of its work is done.
const HALFWAY: &str = "halfway";

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    /// App-server processes.
    apps: usize,
    /// Threads per app process.
    threads: usize,
    /// Loop iterations per thread (each issues one fast code, every second a gapless code,
    /// every third a user).
    iterations: usize,
}

impl Config {
    /// The example's run: four app servers.
    #[allow(dead_code, reason = "the test uses the small configuration")]
    pub(crate) const EXAMPLE: Config = Config {
        apps: 4,
        threads: 4,
        iterations: 200,
    };
    /// The CI test's run: two app servers, still with the kill and restart.
    #[allow(dead_code, reason = "the example uses the full configuration")]
    pub(crate) const SMALL: Config = Config {
        apps: 2,
        threads: 2,
        iterations: 40,
    };
}

/// Runs the role named by `--role` (none: the parent); failures are printed, and make the
/// exit code non-zero.
pub(crate) fn main(config: Config) -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let outcome = match arg(&args, "--role") {
        None => parent(config),
        Some("server") => server(&args),
        Some("app") => app(&args),
        Some(other) => Err(anyhow!("unknown role {other:?}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

fn required<T: std::str::FromStr>(args: &[String], name: &str) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let text = arg(args, name).with_context(|| format!("missing {name}"))?;
    text.parse().with_context(|| format!("bad {name} {text:?}"))
}

// ---------------------------------------------------------------------------------------
// The server role

/// Serves a durable database on `127.0.0.1:--port` until its stdin closes (the parent went
/// away) or it is killed.
fn server(args: &[String]) -> Result<()> {
    let path: PathBuf = required(args, "--path")?;
    let port: u16 = required(args, "--port")?;
    let token = std::env::var(TOKEN_ENV).with_context(|| format!("{TOKEN_ENV} is not set"))?;
    // Sync durability (the default): a commit is acknowledged once it is on disk, so a
    // SIGKILL loses nothing any app was told about.
    let db = Database::open(&path, Options::default())
        .with_context(|| format!("opening the store at {}", path.display()))?;
    let config = ServerConfig::new(token)
        .map_err(|e| anyhow!("{e:?}"))?
        .with_commit_mode(CommitMode::Inline);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        // EOF on stdin: the parent is gone, so stop rather than linger.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = closed_tx.send(());
    });
    runtime.block_on(async move {
        let listener = bind(port).await?;
        println!("listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let options = config.serve_options();
        let router = tuplekv_server::router(Arc::new(db), config);
        let shutdown = async move {
            let _ = closed_rx.await;
        };
        tuplekv_server::serve_with(listener, router, options, shutdown).await?;
        Ok(())
    })
}

/// Binds `127.0.0.1:port`, retrying for a while: the killed server's port may take a moment
/// to be free.
async fn bind(port: u16) -> Result<tokio::net::TcpListener> {
    let started = Instant::now();
    loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => return Ok(l),
            Err(e) if started.elapsed() < BIND_RETRY_FOR => {
                eprintln!("server: binding port {port}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("binding 127.0.0.1:{port}")),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The app role

/// A user of the unique-email collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
}

/// The collection every process declares the same way.
fn users(store: &RemoteStore) -> Result<Collection<User, RemoteStore>> {
    Ok(Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(store.clone())?)
}

/// What an app's threads share.
struct AppCtx {
    app: usize,
    store: RemoteStore,
    fast: Vec<FastSequence<RemoteStore>>,
    gapless: GaplessSequence<RemoteStore>,
    users: Collection<User, RemoteStore>,
    faults: Faults,
}

/// Writes whose outcome was unknown, and how they turned out.
#[derive(Default)]
struct Faults {
    /// Writes answered `Error::OutcomeUnknown` (sent, then the connection failed).
    unknown: AtomicU64,
    /// Other errors that say "try again" (unavailable, contention).
    transient: AtomicU64,
    /// Writes found committed by a re-read or by the resend's refusal (one lost answer can
    /// stand for several of them: a gapless batch, an index write retried inside the
    /// collection).
    landed: AtomicU64,
}

impl Faults {
    fn note(&self, what: &str, e: &dyn std::fmt::Display, unknown: bool) {
        let counter = if unknown {
            &self.unknown
        } else {
            &self.transient
        };
        if counter.fetch_add(1, Ordering::Relaxed) < 2 {
            eprintln!("  app: {what}: {e} (handled)");
        }
    }
}

/// What one thread got, as report lines.
type Lines = Vec<String>;

/// Connects, issues codes and inserts users on `--threads` threads, writes the report file.
fn app(args: &[String]) -> Result<()> {
    let app: usize = required(args, "--id")?;
    let url: String = required(args, "--url")?;
    let threads: usize = required(args, "--threads")?;
    let iterations: usize = required(args, "--iterations")?;
    let report: PathBuf = required(args, "--report")?;
    let token = std::env::var(TOKEN_ENV).with_context(|| format!("{TOKEN_ENV} is not set"))?;
    let store = RemoteStore::connect(&url, &token)?;
    let seqs = sequence::Sequences::new(store.clone());
    let fast = FAST_PREFIXES
        .iter()
        .map(|p| seqs.fast(p))
        .collect::<Result<Vec<_>, _>>()?;
    let ctx = AppCtx {
        app,
        fast,
        gapless: seqs.gapless(GAPLESS_PREFIX)?,
        users: users(&store)?,
        store,
        faults: Faults::default(),
    };
    let done = AtomicU64::new(0);
    let half = (threads * iterations / 2) as u64;
    let lines: Vec<Lines> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (ctx, done) = (&ctx, &done);
                s.spawn(move || work(ctx, t, iterations, || tick(done, half)))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| anyhow!("a worker panicked"))?)
            .collect::<Result<_>>()
    })?;
    let mut out = std::fs::File::create(&report)?;
    for line in lines.iter().flatten() {
        writeln!(out, "{line}")?;
    }
    let faults = &ctx.faults;
    writeln!(
        out,
        "faults {} {} {}",
        faults.unknown.load(Ordering::Relaxed),
        faults.transient.load(Ordering::Relaxed),
        faults.landed.load(Ordering::Relaxed)
    )?;
    out.sync_all()?;
    Ok(())
}

/// Counts one finished iteration; tells the parent when half are done.
fn tick(done: &AtomicU64, half: u64) {
    if done.fetch_add(1, Ordering::Relaxed) + 1 == half {
        println!("{HALFWAY}");
        let _ = std::io::stdout().flush();
    }
}

/// One thread's loop.
fn work(ctx: &AppCtx, thread: usize, iterations: usize, tick: impl Fn()) -> Result<Lines> {
    let mut lines = Vec::new();
    for i in 0..iterations {
        let seq = &ctx.fast[i % ctx.fast.len()];
        let n = issue_fast(ctx, seq)?;
        lines.push(format!("fast {} {n}", seq.prefix()));
        if i.is_multiple_of(2) {
            let n = issue_gapless(ctx, thread, i)?;
            lines.push(format!("gapless {GAPLESS_PREFIX} {n}"));
        }
        if i.is_multiple_of(3) {
            let user = user_for(ctx.app, thread, i);
            let inserted = insert_user(ctx, &user)?;
            let verdict = if inserted { "inserted" } else { "refused" };
            lines.push(format!("user {} {verdict} {}", user.id, user.email));
        }
        tick();
    }
    Ok(lines)
}

/// The user thread `thread` of `app` inserts at iteration `i`: a unique id, and an email
/// that every app wants for one user in [`SHARED_EMAIL_EVERY`].
fn user_for(app: usize, thread: usize, i: usize) -> User {
    let id = (app as u64) * 1_000_000 + (thread as u64) * 10_000 + i as u64;
    let email = if (i / 3).is_multiple_of(SHARED_EMAIL_EVERY) {
        format!("shared{}@example.com", i / 3)
    } else {
        format!("app{app}.t{thread}.i{i}@example.com")
    };
    User { id, email }
}

/// Whether a sequence error says "nothing is known to have happened; look, then retry".
fn maybe(e: &sequence::Error) -> bool {
    match e {
        sequence::Error::Store(e) => engine_maybe(e),
        sequence::Error::Contention { .. } | sequence::Error::CommitPanicked { .. } => true,
        _ => false,
    }
}

fn unknown(e: &sequence::Error) -> bool {
    matches!(
        e,
        sequence::Error::Store(tuplekv::Error::OutcomeUnknown { .. })
            | sequence::Error::CommitPanicked { .. }
    )
}

fn engine_maybe(e: &tuplekv::Error) -> bool {
    e.is_transient()
        || matches!(
            e,
            tuplekv::Error::OutcomeUnknown { .. } | tuplekv::Error::TransactionConflict { .. }
        )
}

/// Fails an operation that kept meeting faults for too long.
fn deadline(started: Instant, what: &str) -> Result<()> {
    ensure!(
        started.elapsed() < OPERATION_RETRY_FOR,
        "{what}: still failing after {OPERATION_RETRY_FOR:?}"
    );
    Ok(())
}

/// The latest value of `key`, read outside any transaction.
fn read(store: &RemoteStore, key: &Key) -> Result<Option<tuplekv::Value>> {
    Ok(store
        .get_latest_raw(&tuplekv::encode_key(key))?
        .map(|e| e.value))
}

/// The next code of a fast sequence, recorded as `["logs", code] = "A<app>:<code>"` with
/// the sequence's uniqueness backstop.
fn issue_fast(ctx: &AppCtx, seq: &FastSequence<RemoteStore>) -> Result<u64> {
    let started = Instant::now();
    let n = loop {
        match seq.next_number() {
            Ok(n) => break n,
            // A reservation that may have landed: the next call reserves a new block above
            // it, so no number is handed out twice.
            Err(e) if maybe(&e) => ctx.faults.note("fast reservation", &e, unknown(&e)),
            Err(e) => return Err(e.into()),
        }
        deadline(started, "reserving a block")?;
    };
    let code = seq.format().format(n);
    let log = key!["logs", code.as_str()];
    let tag = format!("A{}:{code}", ctx.app);
    loop {
        let mut record = Record::new();
        record.set(&log, tag.as_bytes());
        let landed = match seq.record(n, record) {
            Ok(_) => return Ok(n),
            // The number is recorded already: by our own earlier attempt, or it is a real
            // duplicate (the log then names someone else).
            Err(e @ sequence::Error::Duplicate { .. }) => {
                if is_ours(ctx, &log, &tag)? {
                    true
                } else {
                    return Err(e.into());
                }
            }
            Err(e) if maybe(&e) => {
                ctx.faults.note("fast record", &e, unknown(&e));
                is_ours(ctx, &log, &tag)?
            }
            Err(e) => return Err(e.into()),
        };
        if landed {
            ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        deadline(started, "recording a code")?;
    }
}

fn is_ours(ctx: &AppCtx, log: &Key, tag: &str) -> Result<bool> {
    Ok(read(&ctx.store, log)?.is_some_and(|v| v.as_bytes() == Some(tag.as_bytes())))
}

/// The next gapless number, committed with the request's idempotency key and an invoice.
fn issue_gapless(ctx: &AppCtx, thread: usize, i: usize) -> Result<u64> {
    let started = Instant::now();
    let request = key!["inv_req", ctx.app as u64, thread as u64, i as u64];
    let tag = format!("A{}:T{thread}:I{i}", ctx.app);
    loop {
        let (req, tag) = (request.clone(), tag.clone());
        let outcome = ctx.gapless.next_with(move |issued, record| {
            record
                .check(&req, None)
                .set(&req, issued.number())
                .set(&key!["invoices", issued.number()], tag.as_bytes());
        });
        let err = match outcome {
            Ok(issued) => return Ok(issued.number()),
            Err(e @ sequence::Error::Rejected(_)) => e,
            Err(e) if maybe(&e) => {
                ctx.faults.note("gapless", &e, unknown(&e));
                e
            }
            Err(e) => return Err(e.into()),
        };
        // The idempotency key says whether (and with which number) the request landed.
        match read(&ctx.store, &request)? {
            Some(v) => {
                ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
                return v
                    .as_u64()
                    .context("an idempotency key that is not a number");
            }
            None if matches!(err, sequence::Error::Rejected(_)) => {
                bail!("gapless request refused, but its key is absent: {err}")
            }
            None => deadline(started, "a gapless code")?,
        }
    }
}

/// Inserts `user`; `false` when another user holds its email.
fn insert_user(ctx: &AppCtx, user: &User) -> Result<bool> {
    let started = Instant::now();
    let pk = key![user.id];
    loop {
        match ctx.users.insert(user) {
            Ok(()) => return Ok(true),
            Err(index::Error::UniqueViolation {
                existing_primary_key,
                ..
            }) => {
                if existing_primary_key != pk {
                    return Ok(false);
                }
                // Our own earlier attempt, whose answer was lost, holds it.
                ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
                return Ok(true);
            }
            Err(index::Error::AlreadyExists { .. }) => {
                ensure!(
                    ctx.users.get(&pk)?.as_ref() == Some(user),
                    "user {} exists with other data",
                    user.id
                );
                ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
                return Ok(true);
            }
            // The collection re-read the record and did not find what it wrote (or could
            // not read): resend; a resend of a write that did land meets our own record.
            Err(e @ index::Error::OutcomeUnknown { .. }) => {
                ctx.faults.note("user insert", &e, true);
                if ctx.users.get(&pk)?.as_ref() == Some(user) {
                    ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
                    return Ok(true);
                }
            }
            Err(index::Error::Store(e)) if engine_maybe(&e) => {
                ctx.faults.note(
                    "user insert",
                    &e,
                    matches!(e, tuplekv::Error::OutcomeUnknown { .. }),
                );
                if ctx.users.get(&pk)?.as_ref() == Some(user) {
                    ctx.faults.landed.fetch_add(1, Ordering::Relaxed);
                    return Ok(true);
                }
            }
            Err(e) => return Err(e.into()),
        }
        deadline(started, "inserting a user")?;
    }
}

// ---------------------------------------------------------------------------------------
// The parent

/// A child process killed (SIGKILL) and reaped when dropped, so a failed run leaves none.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the server role on `port` (0: a free one) and waits for its address.
fn start_server(dir: &Path, port: u16, token: &str) -> Result<(Proc, std::net::SocketAddr)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--role", "server", "--port", &port.to_string(), "--path"])
        .arg(dir)
        .env(TOKEN_ENV, token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the server process")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let proc = Proc(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("the server said {line:?}"))?
        .parse()?;
    Ok((proc, addr))
}

/// Starts app `id`; its stdout lines arrive on `lines`.
fn start_app(
    id: usize,
    config: Config,
    url: &str,
    token: &str,
    report: &Path,
    lines: &mpsc::Sender<(usize, String)>,
) -> Result<Proc> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--role", "app", "--id", &id.to_string(), "--url", url])
        .args(["--threads", &config.threads.to_string()])
        .args(["--iterations", &config.iterations.to_string(), "--report"])
        .arg(report)
        .env(TOKEN_ENV, token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting an app process")?;
    let stdout = child.stdout.take().context("the app's stdout")?;
    let lines = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send((id, line));
        }
    });
    Ok(Proc(child))
}

/// Creates the sequences and the collection once, before any app starts.
fn set_up(store: &RemoteStore) -> Result<()> {
    let seqs = sequence::Sequences::new(store.clone());
    for p in FAST_PREFIXES {
        seqs.create(p, SequenceOptions::default())?;
    }
    seqs.create(
        GAPLESS_PREFIX,
        SequenceOptions {
            mode: Mode::Gapless,
            width: GAPLESS_WIDTH,
            ..SequenceOptions::default()
        },
    )?;
    users(store)?;
    Ok(())
}

/// Runs the scenario, then checks the store; `Err` if any check failed.
fn parent(config: Config) -> Result<()> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let token = format!("app-servers-{}-{:?}", std::process::id(), started);
    let (mut server, addr) = start_server(&data, 0, &token)?;
    let url = format!("http://{addr}");
    println!(
        "server: pid {}, {url}, data in {}",
        server.0.id(),
        data.display()
    );
    let store = RemoteStore::connect(&url, &token)?;
    set_up(&store)?;

    let (tx, rx) = mpsc::channel();
    let mut apps = Vec::new();
    for id in 1..=config.apps {
        let report = dir.path().join(format!("app{id}.txt"));
        apps.push((start_app(id, config, &url, &token, &report, &tx)?, report));
    }
    drop(tx);
    println!(
        "apps: {} processes x {} threads x {} iterations",
        config.apps, config.threads, config.iterations
    );

    // Half way through the first app's work: kill -9, wait, restart on the same port.
    wait_for_halfway(&rx)?;
    println!("server: kill -9 (pid {})", server.0.id());
    let killed = Instant::now();
    // `Child::kill` is SIGKILL on Unix: no shutdown, no final sync.
    server.0.kill().context("killing the server")?;
    server.0.wait()?;
    std::thread::sleep(DOWN_PAUSE);
    let (restarted, again) = start_server(&data, addr.port(), &token)?;
    let down = killed.elapsed();
    ensure!(again == addr, "the server came back on {again}, not {addr}");
    server = restarted;
    println!(
        "server: restarted (pid {}), down for {} ms",
        server.0.id(),
        down.as_millis()
    );

    for (id, (proc, _)) in apps.iter_mut().enumerate() {
        wait_app(id + 1, proc)?;
    }
    let reports = apps
        .iter()
        .map(|(_, path)| std::fs::read_to_string(path).context("an app's report"))
        .collect::<Result<Vec<_>>>()?;
    let failures = check(&store, &reports)?;
    drop(server);
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

fn wait_for_halfway(rx: &mpsc::Receiver<(usize, String)>) -> Result<()> {
    loop {
        match rx.recv_timeout(APPS_TIMEOUT) {
            Ok((id, line)) if line == HALFWAY => {
                println!("app {id}: half way");
                return Ok(());
            }
            Ok((id, line)) => println!("app {id}: {line}"),
            Err(e) => bail!("no app got half way: {e}"),
        }
    }
}

fn wait_app(id: usize, proc: &mut Proc) -> Result<()> {
    let deadline = Instant::now() + APPS_TIMEOUT;
    loop {
        if let Some(status) = proc.0.try_wait()? {
            ensure!(status.success(), "app {id} failed: {status}");
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "app {id} still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// The checks

/// What the apps said they got.
#[derive(Default)]
struct Reported {
    /// Per prefix, every number handed out, with the app that got it.
    codes: BTreeMap<String, Vec<(u64, usize)>>,
    /// User id → (email, inserted).
    users: BTreeMap<u64, (String, bool)>,
    unknown: u64,
    transient: u64,
    landed: u64,
}

fn parse_reports(reports: &[String]) -> Result<Reported> {
    let mut r = Reported::default();
    for (i, text) in reports.iter().enumerate() {
        let app = i + 1;
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["fast" | "gapless", prefix, n] => r
                    .codes
                    .entry((*prefix).to_owned())
                    .or_default()
                    .push((n.parse()?, app)),
                ["user", id, verdict, email] => {
                    let again = r
                        .users
                        .insert(id.parse()?, ((*email).to_owned(), *verdict == "inserted"));
                    ensure!(again.is_none(), "user {id} reported twice");
                }
                ["faults", unknown, transient, landed] => {
                    r.unknown += unknown.parse::<u64>()?;
                    r.transient += transient.parse::<u64>()?;
                    r.landed += landed.parse::<u64>()?;
                }
                _ => bail!("app {app} wrote {line:?}"),
            }
        }
    }
    Ok(r)
}

/// Every check, against the store itself; returns what failed.
fn check(store: &RemoteStore, reports: &[String]) -> Result<Vec<String>> {
    let reported = parse_reports(reports)?;
    println!(
        "apps: {} writes with an unknown outcome, {} other retried errors; {} writes found \
         committed after their answer was lost",
        reported.unknown, reported.transient, reported.landed
    );
    let mut failures = Vec::new();
    let seqs = sequence::Sequences::new(store.clone());
    for prefix in FAST_PREFIXES {
        check_fast(store, &seqs, prefix, &reported, &mut failures)?;
    }
    check_gapless(store, &seqs, &reported, &mut failures)?;
    check_users(store, &reported, &mut failures)?;
    Ok(failures)
}

/// Numbers reported more than once.
fn duplicates(numbers: &[(u64, usize)]) -> usize {
    numbers.len()
        - numbers
            .iter()
            .map(|(n, _)| n)
            .collect::<BTreeSet<_>>()
            .len()
}

/// Every entry under `prefix`, from one snapshot.
fn list(store: &RemoteStore, prefix: &Key) -> Result<Vec<tuplekv::Entry>> {
    Ok(ListIter::new(
        store.snapshot(),
        Selector::prefix(prefix),
        ListOptions::default(),
    )?
    .read_all()?)
}

/// The numbers a sequence's uniqueness keys hold (their values are the codes).
fn recorded(
    store: &RemoteStore,
    prefix: &str,
    parse: impl Fn(&str) -> Result<u64, sequence::Error>,
) -> Result<Vec<u64>> {
    let used = key![sequence::DEFAULT_ROOT, "used", prefix];
    list(store, &used)?
        .iter()
        .map(|e| {
            let code = e
                .value
                .as_bytes()
                .context("a uniqueness key without a code")?;
            Ok(parse(std::str::from_utf8(code)?)?)
        })
        .collect()
}

fn check_fast(
    store: &RemoteStore,
    seqs: &sequence::Sequences<RemoteStore>,
    prefix: &str,
    reported: &Reported,
    failures: &mut Vec<String>,
) -> Result<()> {
    let seq = seqs.fast(prefix)?;
    let got = reported.codes.get(prefix).cloned().unwrap_or_default();
    let dups = duplicates(&got);
    let stored: BTreeSet<u64> = recorded(store, prefix, |c| seq.parse(c))?
        .into_iter()
        .collect();
    let handed: BTreeSet<u64> = got.iter().map(|(n, _)| *n).collect();
    let first = handed.first().map(|n| seq.format().format(*n));
    let last = handed.last().map(|n| seq.format().format(*n));
    println!(
        "{prefix}: {} codes, first {}, last {}, duplicates: {dups}, recorded in the store: {}",
        got.len(),
        first.as_deref().unwrap_or("-"),
        last.as_deref().unwrap_or("-"),
        stored.len()
    );
    if dups > 0 {
        failures.push(format!("{prefix}: {dups} duplicate codes"));
    }
    if stored != handed {
        failures.push(format!(
            "{prefix}: the store records {} codes, the apps got {}",
            stored.len(),
            handed.len()
        ));
    }
    // Each code's log names the app that reported it.
    let logs: BTreeMap<String, String> = list(store, &key!["logs"])?
        .iter()
        .filter_map(|e| {
            let text = std::str::from_utf8(e.value.as_bytes()?).ok()?;
            let (app, code) = text.split_once(':')?;
            Some((code.to_owned(), app.to_owned()))
        })
        .collect();
    let wrong = got
        .iter()
        .filter(|(n, app)| logs.get(&seq.format().format(*n)) != Some(&format!("A{app}")))
        .count();
    if wrong > 0 {
        failures.push(format!("{prefix}: {wrong} codes logged for another app"));
    }
    Ok(())
}

fn check_gapless(
    store: &RemoteStore,
    seqs: &sequence::Sequences<RemoteStore>,
    reported: &Reported,
    failures: &mut Vec<String>,
) -> Result<()> {
    let seq = seqs.gapless(GAPLESS_PREFIX)?;
    let got = reported
        .codes
        .get(GAPLESS_PREFIX)
        .cloned()
        .unwrap_or_default();
    let dups = duplicates(&got);
    let stored = recorded(store, GAPLESS_PREFIX, |c| seq.parse(c))?;
    let n = stored.len() as u64;
    let expected: Vec<u64> = (1..=n).collect();
    let gaps = expected.len() - stored.iter().filter(|k| (1..=n).contains(*k)).count();
    let counter = store
        .get_latest_raw(&seqs.counter_key(GAPLESS_PREFIX)?)?
        .and_then(|e| e.value.as_u64());
    let requests = list(store, &key!["inv_req"])?;
    let mut by_request: Vec<u64> = requests.iter().filter_map(|e| e.value.as_u64()).collect();
    by_request.sort_unstable();
    let handed: BTreeSet<u64> = got.iter().map(|(n, _)| *n).collect();
    println!(
        "{GAPLESS_PREFIX}: {} codes, first {}, last {}, duplicates: {dups}, gaps: {gaps} \
         (the store holds exactly 1..={n}: {})",
        got.len(),
        seq.format().format(1),
        seq.format().format(n),
        stored == expected
    );
    if dups > 0 {
        failures.push(format!("{GAPLESS_PREFIX}: {dups} duplicate numbers"));
    }
    if stored != expected {
        failures.push(format!(
            "{GAPLESS_PREFIX}: the store's numbers are not 1..={n} ({gaps} gaps)"
        ));
    }
    if counter != Some(n + 1) {
        failures.push(format!(
            "{GAPLESS_PREFIX}: the counter is {counter:?}, expected {}",
            n + 1
        ));
    }
    if by_request != expected {
        failures.push(format!(
            "{GAPLESS_PREFIX}: {} requests hold numbers, expected one per number 1..={n}",
            by_request.len()
        ));
    }
    if handed.iter().copied().collect::<Vec<_>>() != expected {
        failures.push(format!(
            "{GAPLESS_PREFIX}: the apps got {} distinct numbers, the store has 1..={n}",
            handed.len()
        ));
    }
    Ok(())
}

fn check_users(store: &RemoteStore, reported: &Reported, failures: &mut Vec<String>) -> Result<()> {
    let users = users(store)?;
    let page = users.list(ListOptions::default())?;
    let mut holders: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, u) in &page.items {
        holders.entry(u.email.as_str()).or_default().push(u.id);
    }
    let dup_emails = holders.values().filter(|ids| ids.len() > 1).count();
    let stored: BTreeSet<u64> = page.items.iter().map(|(_, u)| u.id).collect();
    let inserted: BTreeSet<u64> = reported
        .users
        .iter()
        .filter(|(_, (_, ok))| *ok)
        .map(|(id, _)| *id)
        .collect();
    let refused = reported.users.len() - inserted.len();
    // A refused user's email is held by someone else.
    let unexplained = reported
        .users
        .iter()
        .filter(|(id, (email, ok))| {
            !*ok && holders
                .get(email.as_str())
                .is_none_or(|ids| ids.contains(id))
        })
        .count();
    let report = users.verify()?;
    println!(
        "users: {} inserted, {refused} refused (email taken, across processes), \
         duplicate emails: {dup_emails}, verify clean: {}",
        stored.len(),
        report.is_clean()
    );
    if dup_emails > 0 {
        failures.push(format!("users: {dup_emails} emails held by several users"));
    }
    if stored != inserted {
        failures.push(format!(
            "users: the store has {} users, the apps inserted {}",
            stored.len(),
            inserted.len()
        ));
    }
    if unexplained > 0 {
        failures.push(format!(
            "users: {unexplained} refused without another holder"
        ));
    }
    if refused == 0 {
        failures.push("users: no shared email was refused: the run proves nothing".into());
    }
    if !report.is_clean() {
        failures.push(format!("users: verify found {report:?}"));
    }
    Ok(())
}
