//! The three roles of the app-servers scenario (parent, server, app); the parent checks the
//! store afterwards with `tuplekv_testkit::app_servers`. Shared by `examples/app_servers/main.rs` and
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
//!
//! The user record, these operations (an app re-reads until the store answers, and retries
//! for [`OPERATION_RETRY_FOR`]), the report lines and the checks live in
//! `tuplekv_testkit::app_servers`, which the etcd leader-failover test (`crates/etcd/tests/failover.rs`) runs too, on an
//! `EtcdStore`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use tuplekv::{Database, Options, RemoteStore};
use tuplekv_server::{CommitMode, ServerConfig};

use tuplekv_testkit::app_servers::{self as shared, App, User};

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
    /// The CI test's run: four app servers of four threads (the shape whose gapless commits
    /// must never refuse each other), fewer iterations, still with the kill and restart.
    #[allow(dead_code, reason = "the example uses the full configuration")]
    pub(crate) const SMALL: Config = Config {
        apps: 4,
        threads: 4,
        iterations: 20,
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

/// What an app's threads share: its operations, settled as the module doc says.
type AppCtx = App<RemoteStore>;

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
    let ctx = App::open(
        store,
        app as u64,
        &FAST_PREFIXES,
        GAPLESS_PREFIX,
        OPERATION_RETRY_FOR,
    )
    .map_err(|e| anyhow!(e))?;
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
    writeln!(out, "{}", ctx.faults.line())?;
    writeln!(out, "{}", shared::gapless_stats_line(&ctx.gapless.stats()))?;
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
        let round = Instant::now();
        let seq = &ctx.fast[i % ctx.fast.len()];
        let n = ctx.issue_fast(seq).map_err(|e| anyhow!(e))?;
        lines.push(shared::fast_line(seq.prefix(), n));
        if i.is_multiple_of(2) {
            let n = ctx
                .issue_gapless(thread as u64, i as u64)
                .map_err(|e| anyhow!(e))?;
            lines.push(shared::gapless_line(GAPLESS_PREFIX, n));
        }
        if i.is_multiple_of(3) {
            let user = user_for(ctx.app, thread, i);
            let inserted = ctx.insert_user(&user).map_err(|e| anyhow!(e))?;
            lines.push(shared::user_line(&user, inserted));
        }
        ctx.faults.waited(round.elapsed());
        tick();
    }
    Ok(lines)
}

/// The user thread `thread` of `app` inserts at iteration `i`: a unique id, and an email
/// that every app wants for one user in [`SHARED_EMAIL_EVERY`].
fn user_for(app: u64, thread: usize, i: usize) -> User {
    let id = app * 1_000_000 + (thread as u64) * 10_000 + i as u64;
    let email = if (i / 3).is_multiple_of(SHARED_EMAIL_EVERY) {
        format!("shared{}@example.com", i / 3)
    } else {
        format!("app{app}.t{thread}.i{i}@example.com")
    };
    User { id, email }
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
    shared::set_up(&store, &FAST_PREFIXES, GAPLESS_PREFIX, GAPLESS_WIDTH)
        .map_err(|e| anyhow!(e))?;

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
    let reported = shared::parse_reports(&reports).map_err(|e| anyhow!(e))?;
    println!("{}", reported.summary());
    let mut failures =
        shared::check(&store, &reported, &FAST_PREFIXES, GAPLESS_PREFIX).map_err(|e| anyhow!(e))?;
    // `tuplekv serve` numbers gapless commits itself: however many apps and threads, none
    // is refused because another moved the counter.
    if reported.counter_conflicts != 0 || reported.store_numbered == 0 {
        failures.push(format!(
            "gapless: {} commits refused by the counter, {} numbered by the store; expected \
             none refused and every commit numbered by the store",
            reported.counter_conflicts, reported.store_numbered
        ));
    }
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
