//! Network faults under load: several clients (threads, each with its own `RemoteStore`) issue
//! fast and gapless codes and insert users with unique emails while
//! - a TCP proxy between them and the server cuts every connection after a random number of
//!   bytes (seeded; the seed is printed, and `TUPLEKV_FAULT_SEED` replays one), or
//! - the server is dropped mid-run and a new one is started on the same port over the same
//!   durable directory.
//!
//! A write whose answer was lost (`Error::OutcomeUnknown`) is resolved by the client as an app
//! would: by re-reading (an idempotency key per gapless request, the user's id, the log key of
//! a fast code). Afterwards the store must hold no code twice, gapless numbers exactly `1..=n`,
//! no email twice and an index that `verify` finds clean, and every write a client counted
//! must be there exactly once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Entry, Error, Key, KeyBytes, ListOptions, Options,
    Selector, Store, Versionstamp, key,
};
use tuplekv_index::Collection;
use tuplekv_remote::{RemoteOptions, RemoteStore};
use tuplekv_sequence::{FastSequence, GaplessSequence, Mode, Record, SequenceOptions, Sequences};
use tuplekv_server::{CommitMode, ServerConfig};
use tuplekv_testkit::rng::SplitMix64;
use tuplekv_testkit::server::{TOKEN, TestServer};

/// The fast sequences the clients issue from, in turn.
const FAST: [&str; 2] = ["INFO", "WARN"];
/// The gapless sequence.
const GAPLESS: &str = "INV";
/// The seed used unless `TUPLEKV_FAULT_SEED` names another.
const SEED_DEFAULT: u64 = 0x7e57_c0de_0f0a_u64;
/// The fewest and most bytes (both directions together) a proxied connection carries before
/// it is cut: small enough that most connections die with requests in flight, large enough
/// that a connection gets a few requests through.
const CUT_AFTER_MIN: u64 = 300;
/// See [`CUT_AFTER_MIN`].
const CUT_AFTER_MAX: u64 = 6_000;
/// How long one operation may keep meeting faults before the test fails.
const OPERATION_RETRY_FOR: Duration = Duration::from_secs(20);

// -------------------------------------------------------------------------------------------
// Seeded randomness (testkit's SplitMix64: enough for cut points)

fn seed() -> u64 {
    let seed = std::env::var("TUPLEKV_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    eprintln!("fault seed: {seed} (replay with TUPLEKV_FAULT_SEED={seed})");
    seed
}

// -------------------------------------------------------------------------------------------
// The proxy

/// A TCP proxy on a loopback port that cuts each connection after a seeded random number of
/// bytes; stopped (with every connection) when dropped.
struct Proxy {
    addr: SocketAddr,
    cuts: Arc<AtomicU64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    fn start(upstream: SocketAddr, seed: u64) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let cuts = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&cuts);
        runtime.spawn(async move {
            // Budgets are drawn in accept order, so a seed fixes the sequence of cut points.
            let mut rng = SplitMix64::new(seed);
            while let Ok((client, _)) = listener.accept().await {
                let budget = rng.between(CUT_AFTER_MIN, CUT_AFTER_MAX);
                let cuts = Arc::clone(&counted);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await
                        && pipe(client, server, budget).await
                    {
                        cuts.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        Proxy {
            addr,
            cuts,
            runtime: Some(runtime),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Relays both ways until either side closes or `budget` bytes have passed; then drops both
/// connections. Returns whether it cut.
async fn pipe(client: TcpStream, server: TcpStream, budget: u64) -> bool {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let left = AtomicU64::new(budget);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    tokio::select! {
        cut = relay(&mut cr, &mut sw, &left) => cut,
        cut = relay(&mut sr, &mut cw, &left) => cut,
    }
}

async fn relay(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    left: &AtomicU64,
) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n as u64,
        };
        let before = left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                Some(l.saturating_sub(n))
            })
            .unwrap_or(0);
        let pass = n.min(before) as usize;
        if to.write_all(&buf[..pass]).await.is_err() {
            return false;
        }
        if (pass as u64) < n {
            return true;
        }
    }
}

// -------------------------------------------------------------------------------------------
// A store that counts lost answers

/// `S`, counting the commits whose outcome was unknown: what the test must have provoked.
#[derive(Clone)]
struct Observed<S> {
    inner: S,
    unknown: Arc<AtomicU64>,
}

impl<S: Store> Observed<S> {
    fn count(&self, out: &Result<CommitResult, Error>) {
        if matches!(out, Err(Error::OutcomeUnknown { .. })) {
            self.unknown.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<S: Store> Store for Observed<S> {
    type Snapshot = S::Snapshot;
    type Watch = S::Watch;

    fn snapshot(&self) -> S::Snapshot {
        self.inner.snapshot()
    }

    fn transaction_snapshot(&self) -> S::Snapshot {
        self.inner.transaction_snapshot()
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<S::Watch, Error> {
        self.inner.watch_raw(keys)
    }

    fn snapshot_versionstamp(snapshot: &S::Snapshot) -> Versionstamp {
        S::snapshot_versionstamp(snapshot)
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        self.inner.get_latest_raw(key)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        let out = self.inner.commit(write);
        self.count(&out);
        out
    }

    fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error> {
        self.inner.get_many(keys)
    }
}

// -------------------------------------------------------------------------------------------
// Clients

type Remote = Observed<RemoteStore>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
}

fn users<S: Store>(store: S) -> Collection<User, S> {
    Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(store)
        .unwrap()
}

/// One client (an app server): its own connection, sequence handles and collection.
struct Client {
    id: u64,
    store: Remote,
    fast: Vec<FastSequence<Remote>>,
    gapless: GaplessSequence<Remote>,
    users: Collection<User, Remote>,
}

/// What a client got.
#[derive(Default)]
struct Got {
    /// (prefix, number).
    codes: Vec<(String, u64)>,
    /// User id → inserted (false: its email was taken).
    users: BTreeMap<u64, (String, bool)>,
}

fn options() -> RemoteOptions {
    RemoteOptions {
        request_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        retry_for: OPERATION_RETRY_FOR,
        io_threads: 1,
        ..RemoteOptions::default()
    }
}

impl Client {
    fn connect(id: u64, url: &str, unknown: &Arc<AtomicU64>) -> Client {
        let started = Instant::now();
        let remote = loop {
            match RemoteStore::connect_with(url, TOKEN, options()) {
                Ok(r) => break r,
                Err(e) => assert!(started.elapsed() < OPERATION_RETRY_FOR, "connect: {e}"),
            }
        };
        let store = Observed {
            inner: remote,
            unknown: Arc::clone(unknown),
        };
        let seqs = Sequences::new(store.clone());
        Client {
            id,
            fast: FAST.iter().map(|p| retry(|| seqs.fast(p))).collect(),
            gapless: retry(|| seqs.gapless(GAPLESS)),
            users: retry(|| {
                Collection::builder("users", |u: &User| key![u.id])
                    .unique("email", |u| Some(key![u.email.clone()]))
                    .open(store.clone())
            }),
            store,
        }
    }

    /// Runs `iterations` rounds on thread `thread` of this client: a fast code each, a
    /// gapless code every second, a user every third; `tick` after each.
    fn run(&self, thread: u64, iterations: u64, tick: impl Fn()) -> Got {
        let mut got = Got::default();
        for i in 0..iterations {
            let seq = &self.fast[(i % FAST.len() as u64) as usize];
            got.codes
                .push((seq.prefix().to_owned(), self.issue_fast(seq)));
            if i.is_multiple_of(2) {
                got.codes
                    .push((GAPLESS.to_owned(), self.issue_gapless(thread, i)));
            }
            if i.is_multiple_of(3) {
                let user = User {
                    id: self.id * 10_000 + thread * 1_000 + i,
                    // Every second user wants an email every client wants.
                    email: if i.is_multiple_of(2) {
                        format!("shared{i}@example.com")
                    } else {
                        format!("c{}.{thread}.{i}@example.com", self.id)
                    },
                };
                let inserted = self.insert(&user);
                got.users.insert(user.id, (user.email, inserted));
            }
            tick();
        }
        got
    }

    fn read(&self, key: &Key) -> Option<tuplekv_engine::Value> {
        retry(|| {
            self.store
                .get_latest_raw(&tuplekv_engine::codec::encode_key(key))
        })
        .map(|e| e.value)
    }

    fn issue_fast(&self, seq: &FastSequence<Remote>) -> u64 {
        // A reservation whose answer was lost is skipped by the next call.
        let n = retry(|| seq.next_number());
        let code = seq.format().format(n);
        let log = key!["logs", code.as_str()];
        let tag = format!("C{}", self.id);
        let started = Instant::now();
        loop {
            let mut record = Record::new();
            record.set(&log, tag.as_bytes());
            match seq.record(n, record) {
                Ok(_) => return n,
                Err(e) => {
                    // Landed (the log names us), or not sent, or unknown: look, then resend.
                    let ours = self
                        .read(&log)
                        .and_then(|v| v.as_bytes().map(<[u8]>::to_vec));
                    if ours.as_deref() == Some(tag.as_bytes()) {
                        return n;
                    }
                    assert!(
                        maybe(&e) && started.elapsed() < OPERATION_RETRY_FOR,
                        "recording {code}: {e}"
                    );
                }
            }
        }
    }

    fn issue_gapless(&self, thread: u64, i: u64) -> u64 {
        let request = key!["inv_req", self.id, thread, i];
        let started = Instant::now();
        loop {
            let req = request.clone();
            let out = self.gapless.next_with(move |issued, record| {
                record
                    .check(&req, None)
                    .set(&req, issued.number())
                    .set(&key!["invoices", issued.number()], b"x");
            });
            match out {
                Ok(issued) => return issued.number(),
                Err(e) => {
                    // The idempotency key says whether, and with which number, it landed.
                    if let Some(v) = self.read(&request) {
                        return v.as_u64().unwrap();
                    }
                    assert!(
                        maybe(&e) && started.elapsed() < OPERATION_RETRY_FOR,
                        "gapless request {i}: {e}"
                    );
                }
            }
        }
    }

    fn insert(&self, user: &User) -> bool {
        let pk = key![user.id];
        let started = Instant::now();
        loop {
            match self.users.insert(user) {
                Ok(()) => return true,
                Err(tuplekv_index::Error::UniqueViolation {
                    existing_primary_key,
                    ..
                }) => return existing_primary_key == pk,
                Err(tuplekv_index::Error::AlreadyExists { .. }) => {
                    assert_eq!(retry(|| self.users.get(&pk)).as_ref(), Some(user));
                    return true;
                }
                Err(
                    e @ (tuplekv_index::Error::Store(_)
                    | tuplekv_index::Error::OutcomeUnknown { .. }),
                ) => {
                    if retry(|| self.users.get(&pk)).as_ref() == Some(user) {
                        return true;
                    }
                    assert!(
                        e.is_fault() && started.elapsed() < OPERATION_RETRY_FOR,
                        "insert {}: {e}",
                        user.id
                    );
                }
                Err(e) => panic!("insert {}: {e}", user.id),
            }
        }
    }
}

fn maybe(e: &tuplekv_sequence::Error) -> bool {
    use tuplekv_sequence::Error as E;
    match e {
        E::Store(e) => engine_maybe(e),
        E::OutcomeUnknown { .. }
        | E::Contention { .. }
        | E::CommitPanicked { .. }
        | E::Rejected(_) => true,
        _ => false,
    }
}

fn engine_maybe(e: &Error) -> bool {
    e.is_transient()
        || matches!(
            e,
            Error::OutcomeUnknown { .. } | Error::TransactionConflict { .. }
        )
}

/// Runs `f` until it does not fail with a fault ("unknown", "unavailable", contention), for
/// at most [`OPERATION_RETRY_FOR`].
fn retry<T, E: std::fmt::Display + IsFault>(mut f: impl FnMut() -> Result<T, E>) -> T {
    let started = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if e.is_fault() && started.elapsed() < OPERATION_RETRY_FOR => {}
            Err(e) => panic!("{e}"),
        }
    }
}

trait IsFault {
    fn is_fault(&self) -> bool;
}

impl IsFault for Error {
    fn is_fault(&self) -> bool {
        engine_maybe(self)
    }
}

impl IsFault for tuplekv_sequence::Error {
    fn is_fault(&self) -> bool {
        maybe(self)
    }
}

impl IsFault for tuplekv_index::Error {
    fn is_fault(&self) -> bool {
        match self {
            tuplekv_index::Error::Store(e) => engine_maybe(e),
            tuplekv_index::Error::OutcomeUnknown { .. } => true,
            _ => false,
        }
    }
}

// -------------------------------------------------------------------------------------------
// Set-up and checks

fn set_up<S: Store + Clone>(store: &S) {
    let seqs = Sequences::new(store.clone());
    for p in FAST {
        seqs.create(p, SequenceOptions::default()).unwrap();
    }
    let gapless = SequenceOptions {
        mode: Mode::Gapless,
        ..SequenceOptions::default()
    };
    seqs.create(GAPLESS, gapless).unwrap();
    let _ = users(store.clone());
}

/// Threads per client: they share its handles, so gapless requests combine into batches (a
/// lost answer to a batch is the case that needs the idempotency key most).
const THREADS_PER_CLIENT: u64 = 4;

/// Runs `clients` clients, each with [`THREADS_PER_CLIENT`] threads doing `iterations`
/// rounds, against `url`; each thread sends `()` on `progress` after every round. Returns
/// what each thread got and how many lost answers they met.
fn run_clients(
    url: &str,
    clients: u64,
    iterations: u64,
    progress: Option<mpsc::Sender<()>>,
) -> (Vec<Got>, u64) {
    let unknown = Arc::new(AtomicU64::new(0));
    let clients: Vec<Client> = (1..=clients)
        .map(|id| Client::connect(id, url, &unknown))
        .collect();
    let got = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .flat_map(|c| (0..THREADS_PER_CLIENT).map(move |t| (c, t)))
            .map(|(client, thread)| {
                let progress = progress.clone();
                s.spawn(move || {
                    client.run(thread, iterations, || {
                        if let Some(p) = &progress {
                            let _ = p.send(());
                        }
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for c in &clients {
        eprintln!("client {}: gapless {:?}", c.id, c.gapless.stats());
    }
    (got, unknown.load(Ordering::Relaxed))
}

fn list(db: &Database, prefix: &Key) -> Vec<Entry> {
    db.list(&Selector::prefix(prefix), ListOptions::default())
        .unwrap()
        .read_all()
        .unwrap()
}

/// Every property the store must have after the run, against what the clients counted.
fn check(db: &Database, got: &[Got], context: &str) {
    let seqs = Sequences::new(db.clone());
    // Codes: none twice, and exactly the ones the clients got are recorded.
    let mut by_prefix: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (prefix, n) in got.iter().flat_map(|g| &g.codes) {
        by_prefix.entry(prefix.as_str()).or_default().push(*n);
    }
    for (prefix, numbers) in &by_prefix {
        let distinct: BTreeSet<u64> = numbers.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            numbers.len(),
            "{context}: duplicate {prefix} codes"
        );
        let used = list(db, &key![tuplekv_sequence::DEFAULT_ROOT, "used", *prefix]);
        let recorded: BTreeSet<u64> = used
            .iter()
            .map(|e| {
                let code = std::str::from_utf8(e.value.as_bytes().unwrap()).unwrap();
                Sequences::new(db.clone())
                    .fast(prefix)
                    .map(|s| s.parse(code))
                    .or_else(|_| seqs.gapless(prefix).map(|s| s.parse(code)))
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            recorded, distinct,
            "{context}: {prefix}: the store records other codes than the clients got"
        );
    }
    // Gapless: exactly 1..=n, each held by one request.
    let inv = &by_prefix[GAPLESS];
    let n = inv.len() as u64;
    let mut sorted = inv.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (1..=n).collect::<Vec<_>>(),
        "{context}: gapless gaps"
    );
    let mut held: Vec<u64> = list(db, &key!["inv_req"])
        .iter()
        .map(|e| e.value.as_u64().unwrap())
        .collect();
    held.sort_unstable();
    assert_eq!(held, sorted, "{context}: gapless requests");
    let counter = db
        .get_latest_raw(&seqs.counter_key(GAPLESS).unwrap())
        .unwrap()
        .and_then(|e| e.value.as_u64());
    assert_eq!(counter, Some(n + 1), "{context}: gapless counter");
    // Users: no email twice, the store holds exactly the inserted ones, the index is clean.
    let users = users(db.clone());
    let stored = users.list(ListOptions::default()).unwrap().items;
    let emails: BTreeSet<&str> = stored.iter().map(|(_, u)| u.email.as_str()).collect();
    assert_eq!(emails.len(), stored.len(), "{context}: duplicate emails");
    let stored_ids: BTreeSet<u64> = stored.iter().map(|(_, u)| u.id).collect();
    let inserted: BTreeSet<u64> = got
        .iter()
        .flat_map(|g| &g.users)
        .filter(|(_, (_, ok))| *ok)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(stored_ids, inserted, "{context}: users");
    let refused = got.iter().flat_map(|g| &g.users).count() - inserted.len();
    assert!(refused > 0, "{context}: no shared email was refused");
    let report = users.verify().unwrap();
    assert!(report.is_clean(), "{context}: verify: {report:?}");
}

// -------------------------------------------------------------------------------------------
// The tests

#[test]
fn cut_connections_never_duplicate_codes_emails_or_gapless_numbers() {
    let seed = seed();
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    set_up(&*db);
    let proxy = Proxy::start(server.addr, seed);
    let (got, unknown) = run_clients(&proxy.url(), 2, 60, None);
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    drop(proxy);
    let context = format!("seed {seed}, {cuts} cuts, {unknown} lost answers");
    eprintln!("{context}");
    check(&db, &got, &context);
    assert!(
        unknown > 0,
        "{context}: no write met an unknown outcome, so the test proved nothing: lower \
         CUT_AFTER_MAX"
    );
}

/// A server on a given port, dropped abruptly: its runtime and every connection with it.
struct Served {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// Serves `db` on `127.0.0.1:port` (0: a free port); returns the address.
    fn start(db: Database, port: u16) -> (Served, SocketAddr) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(TcpListener::bind(("127.0.0.1", port)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServerConfig::new(TOKEN)
            .unwrap()
            .with_commit_mode(CommitMode::Inline);
        let options = config.serve_options();
        let router = tuplekv_server::router(Arc::new(db), config);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let serve = tuplekv_server::serve_with(
                    listener,
                    router,
                    options,
                    std::future::pending::<()>(),
                );
                tokio::select! {
                    _ = serve => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection's task, mid-request or not.
            drop(runtime);
        });
        let served = Served {
            stop: Some(stop),
            thread: Some(thread),
        };
        (served, addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn a_server_restarted_on_its_port_over_its_directory_loses_nothing() {
    const CLIENTS: u64 = 3;
    const ITERATIONS: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Options::default()).unwrap();
    set_up(&db);
    let (served, addr) = Served::start(db, 0);
    let url = format!("http://{addr}");
    let (tx, rx) = mpsc::channel();
    let restarted = std::thread::scope(|s| {
        let clients = s.spawn(|| run_clients(&url, CLIENTS, ITERATIONS, Some(tx)));
        // A third of the way through, drop the server and its database; open the directory
        // again and serve it on the same port while the clients carry on.
        for _ in 0..CLIENTS * THREADS_PER_CLIENT * ITERATIONS / 3 {
            rx.recv().unwrap();
        }
        drop(served);
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let (again, addr_again) = Served::start(db.clone(), addr.port());
        assert_eq!(addr_again, addr);
        let (got, unknown) = clients.join().unwrap();
        eprintln!("restart: {unknown} lost answers");
        (again, db, got)
    });
    let (again, db, got) = restarted;
    check(&db, &got, "restart");
    drop(again);
}
