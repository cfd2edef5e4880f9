//! The example service under 64 concurrent clients, embedded and remote, in both handler
//! modes: the invariants hold (invoice numbers exactly `1..=n`, one `201` per email, distinct
//! order codes), and `/health` keeps answering while the remote server is gone.
//!
//! Nothing here asserts a duration; the outage test compares two it measures (the slowest
//! health probe against the fastest store request that waited for the server).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tuplekv_engine::Database;
use tuplekv_example_service::client::Client;
use tuplekv_example_service::kv::{KvServer, TOKEN};
use tuplekv_example_service::{App, Invoice, Mode, RunningService, ServiceStore, User};
use tuplekv_remote::{RemoteOptions, RemoteStore};

/// Concurrent clients, each on its own kept-alive connection.
const CLIENTS: usize = 64;
/// Rounds per client: each round posts a user, an invoice and an order.
const ROUNDS: usize = 4;
/// Clients sharing each email (so every email is posted by this many clients at once).
const SHARING: usize = 4;
/// How long the remote store retries an unreachable server before failing.
const RETRY_FOR: Duration = Duration::from_secs(2);

/// The tests take turns: each measures how the service responds, and two at once on two
/// cores would measure each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn start<S: ServiceStore>(store: S, mode: Mode) -> RunningService {
    let app = App::open(store, mode).expect("the service opens its collection and sequences");
    RunningService::start(app, ([127, 0, 0, 1], 0).into(), 2).expect("the service starts")
}

fn remote(kv: &KvServer) -> RemoteStore {
    let options = RemoteOptions {
        retry_for: RETRY_FOR,
        ..RemoteOptions::default()
    };
    RemoteStore::connect_with(&kv.url(), TOKEN, options).expect("the remote store connects")
}

/// What one client saw.
#[derive(Default)]
struct Seen {
    /// email -> (status, id if 201)
    users: Vec<(String, StatusCode, Option<u64>)>,
    /// (number, code, customer, amount)
    invoices: Vec<(u64, String, String, u64)>,
    orders: Vec<String>,
}

async fn client_run(addr: SocketAddr, c: usize) -> Seen {
    let mut client = Client::connect(addr).await.expect("connects");
    let mut seen = Seen::default();
    for round in 0..ROUNDS {
        let email = format!("user{}-{round}@example.com", c % (CLIENTS / SHARING));
        let reply = client
            .post(
                "/users",
                &json!({ "email": email, "name": format!("client {c}") }),
            )
            .await
            .expect("POST /users");
        let id = (reply.status == StatusCode::CREATED).then(|| {
            reply.json::<Value>().expect("json")["id"]
                .as_u64()
                .expect("an id")
        });
        seen.users.push((email, reply.status, id));

        let (customer, amount) = (format!("customer {c}"), (c * 1000 + round) as u64);
        let reply = client
            .post(
                "/invoices",
                &json!({ "customer": customer, "amount": amount }),
            )
            .await
            .expect("POST /invoices");
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        let body: Value = reply.json().expect("json");
        let code = body["code"].as_str().expect("a code").to_owned();
        let number = body["number"].as_u64().expect("a number");
        seen.invoices.push((number, code, customer, amount));

        let reply = client
            .post("/orders", &json!({ "customer": format!("customer {c}") }))
            .await
            .expect("POST /orders");
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        let body: Value = reply.json().expect("json");
        seen.orders
            .push(body["code"].as_str().expect("a code").to_owned());
    }
    seen
}

/// Drives the service with [`CLIENTS`] clients at once, then checks what they got against
/// what the service serves.
async fn drive_and_check(addr: SocketAddr, context: &str) {
    let mut tasks = JoinSet::new();
    for c in 0..CLIENTS {
        tasks.spawn(client_run(addr, c));
    }
    let mut all = Vec::new();
    while let Some(seen) = tasks.join_next().await {
        all.push(seen.expect("a client panicked"));
    }
    let mut client = Client::connect(addr).await.expect("connects");

    // Unique emails: exactly one 201 per email, every other post a 409; the one stored is it.
    let mut by_email: BTreeMap<String, Vec<(StatusCode, Option<u64>)>> = BTreeMap::new();
    for (email, status, id) in all.iter().flat_map(|s| s.users.iter().cloned()) {
        by_email.entry(email).or_default().push((status, id));
    }
    assert_eq!(by_email.len(), CLIENTS / SHARING * ROUNDS, "{context}");
    for (email, posts) in &by_email {
        assert_eq!(posts.len(), SHARING, "{context}: {email}");
        let created: Vec<u64> = posts.iter().filter_map(|(_, id)| *id).collect();
        assert_eq!(created.len(), 1, "{context}: {email} got {posts:?}");
        assert!(
            posts
                .iter()
                .all(|(s, _)| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
            "{context}: {email} got {posts:?}"
        );
        let reply = client
            .get(&format!("/users/by-email/{email}"))
            .await
            .expect("GET user");
        assert_eq!(reply.status, StatusCode::OK, "{context}: {email}");
        let user: User = reply.json().expect("a user");
        assert_eq!((user.id, &user.email), (created[0], email), "{context}");
    }

    // Gapless invoices: the numbers are exactly 1..=n, each stored with its own record.
    let invoices: Vec<_> = all
        .iter()
        .flat_map(|s| s.invoices.iter().cloned())
        .collect();
    let n = invoices.len() as u64;
    let numbers: Vec<u64> = {
        let mut v: Vec<u64> = invoices.iter().map(|i| i.0).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        numbers,
        (1..=n).collect::<Vec<_>>(),
        "{context}: invoice numbers"
    );
    for (number, code, customer, amount) in &invoices {
        let reply = client
            .get(&format!("/invoices/{number}"))
            .await
            .expect("GET invoice");
        assert_eq!(reply.status, StatusCode::OK, "{context}: invoice {number}");
        let stored: Invoice = reply.json().expect("an invoice");
        assert_eq!(
            (&stored.code, &stored.customer, stored.amount),
            (code, customer, *amount),
            "{context}: invoice {number}"
        );
    }
    let past = client
        .get(&format!("/invoices/{}", n + 1))
        .await
        .expect("GET invoice");
    assert_eq!(
        past.status,
        StatusCode::NOT_FOUND,
        "{context}: no invoice past n"
    );

    // Order codes: all distinct.
    let orders: Vec<&String> = all.iter().flat_map(|s| &s.orders).collect();
    let distinct: HashSet<&String> = orders.iter().copied().collect();
    assert_eq!(orders.len(), CLIENTS * ROUNDS, "{context}");
    assert_eq!(
        distinct.len(),
        orders.len(),
        "{context}: an order code repeated"
    );

    let health = client.get("/health").await.expect("GET /health");
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_with_64_clients_embedded_and_remote_in_both_modes() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for mode in Mode::ALL {
        let service = start(Database::in_memory(), mode);
        drive_and_check(service.addr(), &format!("memory, {}", mode.name())).await;
        service.stop();

        let kv = KvServer::start(Database::in_memory(), 0).expect("the KV server starts");
        // Two instances share the server, as two app servers behind a load balancer.
        let one = start(remote(&kv), mode);
        let two = start(remote(&kv), mode);
        drive_two(one.addr(), two.addr(), &format!("remote, {}", mode.name())).await;
        one.stop();
        two.stop();
        kv.kill();
    }
}

/// [`drive_and_check`] with the clients split between two instances on one store: half
/// talk to `one`, half to `two`, and the checks read from `one`.
async fn drive_two(one: SocketAddr, two: SocketAddr, context: &str) {
    // The checks compare every client's replies with what one instance serves, so drive
    // through a tiny balancer: even clients to `one`, odd ones to `two`.
    let balancer = Balancer::start(one, two).await;
    drive_and_check(balancer.addr, context).await;
}

/// A TCP balancer on loopback: connection `i` goes to `one` if `i` is even, else `two`.
struct Balancer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    async fn start(one: SocketAddr, two: SocketAddr) -> Balancer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            let mut i = 0usize;
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = if i.is_multiple_of(2) { one } else { two };
                i += 1;
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Balancer { addr, task }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One store request during the outage: what it answered and how long it took.
async fn store_request(addr: SocketAddr, i: usize) -> (String, StatusCode, Duration) {
    let mut client = Client::connect(addr).await.expect("connects");
    let started = Instant::now();
    let (what, reply) = match i % 4 {
        0 => (
            "POST /users",
            client
                .post(
                    "/users",
                    &json!({ "email": format!("outage{i}@example.com"), "name": "x" }),
                )
                .await,
        ),
        1 => (
            "POST /invoices",
            client
                .post("/invoices", &json!({ "customer": "outage", "amount": 1 }))
                .await,
        ),
        2 => (
            "POST /orders",
            client
                .post("/orders", &json!({ "customer": "outage" }))
                .await,
        ),
        _ => ("GET /invoices/1", client.get("/invoices/1").await),
    };
    let reply = reply.expect("the service answers");
    (what.to_owned(), reply.status, started.elapsed())
}

async fn health_answers_while_the_store_is_unreachable(mode: Mode) {
    const STORE_REQUESTS: usize = 32;
    let context = mode.name();
    let db = Database::in_memory();
    let kv = KvServer::start(db.clone(), 0).expect("the KV server starts");
    let port = kv.addr().port();
    let service = start(remote(&kv), mode);
    let addr = service.addr();
    let mut client = Client::connect(addr).await.expect("connects");
    let first = client
        .post("/invoices", &json!({ "customer": "before", "amount": 1 }))
        .await
        .expect("POST /invoices");
    assert_eq!(first.status, StatusCode::CREATED, "{context}");
    assert_eq!(
        first.json::<Value>().expect("json")["number"],
        1,
        "{context}"
    );

    // The server goes away: its connections are dropped and its port refuses new ones.
    kv.kill();

    let mut requests = JoinSet::new();
    for i in 0..STORE_REQUESTS {
        requests.spawn(store_request(addr, i));
    }
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(false);
    let prober = tokio::spawn(async move {
        let mut probe = Client::connect(addr).await.expect("connects");
        let mut times = Vec::new();
        while !*done_rx.borrow_and_update() {
            let started = Instant::now();
            let reply = probe.get("/health").await.expect("GET /health");
            times.push(started.elapsed());
            assert_eq!(reply.status, StatusCode::OK);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = done_rx.changed() => {}
            }
        }
        times
    });
    let mut answers = Vec::new();
    while let Some(answer) = requests.join_next().await {
        answers.push(answer.expect("a store request panicked"));
    }
    let _ = done_tx.send(true);
    let probes = prober.await.expect("the prober panicked");

    for (what, status, _) in &answers {
        assert_eq!(
            *status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{context}: {what} while the store is unreachable"
        );
    }
    let fastest_failure = answers.iter().map(|a| a.2).min().expect("requests ran");
    let slowest_probe = probes.iter().copied().max().expect("health was probed");
    eprintln!(
        "{context}: {} health probes, slowest {slowest_probe:?}; {STORE_REQUESTS} store \
         requests failed after {fastest_failure:?} at the earliest",
        probes.len()
    );
    assert!(
        probes.len() >= 3,
        "{context}: only {} health probes answered while store requests waited {fastest_failure:?}",
        probes.len()
    );
    assert!(
        slowest_probe * 10 < fastest_failure,
        "{context}: the slowest health probe took {slowest_probe:?}, more than a tenth of \
         the {fastest_failure:?} the store requests waited"
    );

    // The server comes back on its port, over the same data: the service recovers, and the
    // invoices stay gapless (the failed requests used no number).
    let kv = KvServer::start(db, port).expect("the KV server restarts on its port");
    let mut statuses = HashMap::new();
    let mut number = None;
    for _ in 0..5 {
        let reply = client
            .post("/invoices", &json!({ "customer": "after", "amount": 2 }))
            .await
            .expect("POST /invoices");
        *statuses.entry(reply.status).or_insert(0) += 1;
        if reply.status == StatusCode::CREATED {
            number = reply.json::<Value>().expect("json")["number"].as_u64();
            break;
        }
    }
    assert_eq!(
        number,
        Some(2),
        "{context}: after the restart: {statuses:?}"
    );
    for path in ["/users/by-email/nobody@example.com", "/invoices/3"] {
        let reply = client.get(path).await.expect("GET");
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{context}: {path}");
    }
    let reply = client
        .post(
            "/users",
            &json!({ "email": "after@example.com", "name": "after" }),
        )
        .await
        .expect("POST /users");
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "{context}: a user after the restart"
    );
    drop(client);
    service.stop();
    kv.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_the_remote_store_is_unreachable_async() {
    let _turn = ONE_AT_A_TIME.lock().await;
    health_answers_while_the_store_is_unreachable(Mode::Async).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_the_remote_store_is_unreachable_blocking() {
    let _turn = ONE_AT_A_TIME.lock().await;
    health_answers_while_the_store_is_unreachable(Mode::Blocking).await;
}
