//! `service-load`: the example service's load benchmark (`cargo xtask bench service`).
//!
//! For each store (embedded in memory, embedded durable with `Durability::Sync`, remote
//! through an in-process `tuplekv serve` on loopback) and each handler mode (blocking in
//! `spawn_blocking`, async), starts the service in this process on a runtime of its own
//! (2 workers) and drives it with 64 HTTP/1.1 keep-alive clients, each scenario for a few
//! seconds: `users` (`POST /users`, every email new), `invoices` (`POST /invoices`, gapless),
//! `orders` (`POST /orders`), `reads` (`GET /users/by-email/…` and `GET /invoices/…`
//! alternately). Prints a markdown table: requests/s, p50, p99 and errors (transport
//! failures and unexpected statuses).
//!
//! ```text
//! service-load [--seconds S] [--clients N] [--stores memory,dir,remote] [--modes blocking,async]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;
use tuplekv_engine::{Database, Durability, Options};
use tuplekv_example_service::client::Client;
use tuplekv_example_service::kv::{KvServer, TOKEN};
use tuplekv_example_service::{App, Mode, RunningService, ServiceStore};
use tuplekv_remote::{RemoteOptions, RemoteStore};

const USAGE: &str = "usage: service-load [--seconds S] [--clients N] \
    [--stores memory,dir,remote] [--modes blocking,async]";

/// The service runtime's workers.
const SERVICE_WORKERS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Dir,
    Remote,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "embedded, memory",
            StoreKind::Dir => "embedded, dir (sync)",
            StoreKind::Remote => "remote (tuplekv serve)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Users,
    Invoices,
    Orders,
    Reads,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::Users,
        Scenario::Invoices,
        Scenario::Orders,
        Scenario::Reads,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Users => "POST /users",
            Scenario::Invoices => "POST /invoices",
            Scenario::Orders => "POST /orders",
            Scenario::Reads => "GET user / invoice",
        }
    }
}

struct Args {
    seconds: f64,
    clients: usize,
    stores: Vec<StoreKind>,
    modes: Vec<Mode>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        seconds: 3.0,
        clients: 64,
        stores: vec![StoreKind::Memory, StoreKind::Dir, StoreKind::Remote],
        modes: Mode::ALL.to_vec(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => parsed.seconds = value()?.parse().map_err(|e| format!("{arg}: {e}"))?,
            "--clients" => parsed.clients = value()?.parse().map_err(|e| format!("{arg}: {e}"))?,
            "--stores" => {
                parsed.stores = value()?
                    .split(',')
                    .map(|s| match s {
                        "memory" => Ok(StoreKind::Memory),
                        "dir" => Ok(StoreKind::Dir),
                        "remote" => Ok(StoreKind::Remote),
                        other => Err(format!("unknown store `{other}`")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--modes" => {
                parsed.modes = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if !(parsed.seconds > 0.0 && parsed.seconds.is_finite()) || parsed.clients == 0 {
        return Err(format!("--seconds and --clients must be positive\n{USAGE}"));
    }
    Ok(parsed)
}

/// One scenario's measurements.
struct Measured {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

impl Measured {
    fn quantile(&self, q: f64) -> Duration {
        if self.latencies_us.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        Duration::from_micros(u64::from(self.latencies_us[i]))
    }
}

/// What one client needs to know of the earlier scenarios, for `reads`.
#[derive(Clone, Default)]
struct Created {
    /// Users created by each client in `users`.
    users: Vec<usize>,
    /// Invoices issued in `invoices`.
    invoices: usize,
}

fn email(client: usize, i: usize) -> String {
    format!("load-{client}-{i}@example.com")
}

/// One client for `duration`: its latencies, its errors, and how many it created.
async fn client_loop(
    addr: SocketAddr,
    scenario: Scenario,
    c: usize,
    duration: Duration,
    created: Arc<Created>,
) -> (Vec<u32>, usize, usize) {
    let mut latencies = Vec::new();
    let mut errors = 0;
    let Ok(mut client) = Client::connect(addr).await else {
        return (latencies, 1, 0);
    };
    let deadline = Instant::now() + duration;
    let mut i = 0usize;
    while Instant::now() < deadline {
        let started = Instant::now();
        let (reply, want) = match scenario {
            Scenario::Users => (
                client
                    .post("/users", &json!({ "email": email(c, i), "name": "load" }))
                    .await,
                StatusCode::CREATED,
            ),
            Scenario::Invoices => (
                client
                    .post(
                        "/invoices",
                        &json!({ "customer": format!("c{c}"), "amount": i }),
                    )
                    .await,
                StatusCode::CREATED,
            ),
            Scenario::Orders => (
                client
                    .post("/orders", &json!({ "customer": format!("c{c}") }))
                    .await,
                StatusCode::CREATED,
            ),
            Scenario::Reads => {
                let users = created.users.get(c).copied().unwrap_or(0);
                let path = if i.is_multiple_of(2) && users > 0 {
                    format!("/users/by-email/{}", email(c, (i / 2) % users))
                } else {
                    let n = created.invoices.max(1);
                    format!("/invoices/{}", 1 + (c * 7919 + i) % n)
                };
                (client.get(&path).await, StatusCode::OK)
            }
        };
        let took = started.elapsed();
        match reply {
            Ok(reply) if reply.status == want => {
                latencies.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
            }
            Ok(_) => errors += 1,
            Err(_) => {
                errors += 1;
                match Client::connect(addr).await {
                    Ok(again) => client = again,
                    Err(_) => break,
                }
            }
        }
        i += 1;
    }
    let ok = latencies.len();
    (latencies, errors, ok)
}

async fn measure(
    addr: SocketAddr,
    scenario: Scenario,
    clients: usize,
    duration: Duration,
    created: &mut Created,
) -> Measured {
    let shared = Arc::new(created.clone());
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            tokio::spawn(client_loop(
                addr,
                scenario,
                c,
                duration,
                Arc::clone(&shared),
            ))
        })
        .collect();
    let mut measured = Measured {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies_us: Vec::new(),
    };
    let mut per_client = Vec::with_capacity(clients);
    for task in tasks {
        let (latencies, errors, ok) = task.await.unwrap_or((Vec::new(), 1, 0));
        measured.requests += latencies.len() + errors;
        measured.errors += errors;
        measured.latencies_us.extend(latencies);
        per_client.push(ok);
    }
    measured.elapsed = started.elapsed();
    measured.latencies_us.sort_unstable();
    match scenario {
        Scenario::Users => created.users = per_client,
        Scenario::Invoices => created.invoices = per_client.iter().sum(),
        Scenario::Orders | Scenario::Reads => {}
    }
    measured
}

/// Runs every scenario on `store` in `mode`; one table row each.
fn run_on<S: ServiceStore>(
    store: S,
    kind: StoreKind,
    mode: Mode,
    args: &Args,
    clients_rt: &tokio::runtime::Runtime,
    rows: &mut Vec<String>,
) -> Result<(), String> {
    let app = App::open(store, mode).map_err(|e| e.to_string())?;
    let service = RunningService::start(app, ([127, 0, 0, 1], 0).into(), SERVICE_WORKERS)
        .map_err(|e| e.to_string())?;
    measure_all(&service, kind, mode, args, clients_rt, rows);
    service.stop();
    Ok(())
}

/// Every scenario against the running `service`; one table row each.
fn measure_all(
    service: &RunningService,
    kind: StoreKind,
    mode: Mode,
    args: &Args,
    clients_rt: &tokio::runtime::Runtime,
    rows: &mut Vec<String>,
) {
    let duration = Duration::from_secs_f64(args.seconds);
    let mut created = Created::default();
    for scenario in Scenario::ALL {
        let m = clients_rt.block_on(measure(
            service.addr(),
            scenario,
            args.clients,
            duration,
            &mut created,
        ));
        let rate = m.requests.saturating_sub(m.errors) as f64 / m.elapsed.as_secs_f64();
        let row = format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |",
            kind.name(),
            mode.name(),
            scenario.name(),
            rate,
            m.quantile(0.50).as_secs_f64() * 1e3,
            m.quantile(0.99).as_secs_f64() * 1e3,
            m.errors
        );
        eprintln!("{row}");
        rows.push(row);
    }
}

fn scratch_dir(kind: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "tuplekv-service-load-{kind}-{}-{nanos}",
        std::process::id()
    ))
}

fn run(args: &Args) -> Result<Vec<String>, String> {
    let clients_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("load-clients")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for &kind in &args.stores {
        for &mode in &args.modes {
            match kind {
                StoreKind::Memory => {
                    run_on(
                        Database::in_memory(),
                        kind,
                        mode,
                        args,
                        &clients_rt,
                        &mut rows,
                    )?;
                }
                StoreKind::Dir => {
                    let dir = scratch_dir(mode.name());
                    let options = Options {
                        durability: Durability::Sync,
                        ..Options::default()
                    };
                    let db = Database::open(&dir, options).map_err(|e| e.to_string())?;
                    let result = run_on(db.clone(), kind, mode, args, &clients_rt, &mut rows);
                    let _ = db.close();
                    let _ = std::fs::remove_dir_all(&dir);
                    result?;
                }
                StoreKind::Remote => {
                    let kv =
                        KvServer::start(Database::in_memory(), 0).map_err(|e| e.to_string())?;
                    if mode == Mode::Async {
                        // On the service's runtime, as an async service's `main` connects.
                        let url = kv.url();
                        let open = async move {
                            let store =
                                RemoteStore::connect_async(&url, TOKEN, RemoteOptions::default())
                                    .await
                                    .map_err(|e| e.to_string())?;
                            tokio::task::spawn_blocking(move || App::open(store, mode))
                                .await
                                .map_err(|e| e.to_string())?
                                .map_err(|e| e.to_string())
                        };
                        let service = RunningService::start_opening(
                            open,
                            ([127, 0, 0, 1], 0).into(),
                            SERVICE_WORKERS,
                        )
                        .map_err(|e| e.to_string())?;
                        measure_all(&service, kind, mode, args, &clients_rt, &mut rows);
                    } else {
                        let store =
                            RemoteStore::connect_with(&kv.url(), TOKEN, RemoteOptions::default())
                                .map_err(|e| e.to_string())?;
                        run_on(store, kind, mode, args, &clients_rt, &mut rows)?;
                    }
                    kv.kill();
                }
            }
        }
    }
    Ok(rows)
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
    let rows = match run(&args) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("service-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "{} HTTP/1.1 keep-alive clients, {:.1} s per scenario; the service on {SERVICE_WORKERS} \
         runtime workers, clients and (remote) server in the same process; {cores} cores.\n",
        args.clients, args.seconds
    );
    println!("| store | mode | scenario | requests/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---:|---:|---:|---:|");
    for row in rows {
        println!("{row}");
    }
    ExitCode::SUCCESS
}
