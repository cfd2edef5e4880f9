//! `kvconnect_load`: a KV Connect load generator. It speaks the protocol's HTTP/2 with prior
//! knowledge (h2c) to any KV Connect server (`tuplekv serve`, `denokv`), multiplexing many
//! concurrent requests over one or a few connections as Deno's client does, and measures, for
//! a fixed time per point, point reads (`snapshot_read` of one key) and durable single-set
//! atomic writes at several concurrency levels.
//!
//! It prints one JSON line per point on standard output (what `cargo xtask bench server`
//! reads) and a human table on standard error. With `--server-pid` it also reads the server's
//! CPU time from `/proc` around each point, which says how much of a request the server itself
//! spends on the CPU (the rest is waiting: for the disk, the network or the client).
//!
//! ```text
//! kvconnect_load --url http://127.0.0.1:4512 [--token T] [--seconds 2] [--warmup 0.3]
//!                [--concurrency 1,16,64] [--ops get,write] [--connections 1] [--threads 1]
//!                [--keys 10000] [--server-pid PID] [--label NAME]
//! ```
//! The token defaults to `DENO_KV_ACCESS_TOKEN`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use denokv_proto::datapath::{
    AtomicWrite, AtomicWriteOutput, AtomicWriteStatus, KvValue, Mutation, MutationType, ReadRange,
    SnapshotRead, SnapshotReadOutput, SnapshotReadStatus, ValueEncoding,
};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tuplekv_benches::{base_url, in_range, measured_seconds, quantile, warmup_seconds};
use tuplekv_codec::{encode_key, key};

/// The protocol versions offered in the metadata exchange (the data path is the same for both).
const PROTOCOL_VERSIONS: [u32; 2] = [2, 3];
/// Measured time per point, in seconds, unless `--seconds` says otherwise.
const SECONDS_DEFAULT: f64 = 2.0;
/// Unmeasured warm-up before each point, in seconds, unless `--warmup` says otherwise.
const WARMUP_SECONDS_DEFAULT: f64 = 0.3;
/// Concurrent requests per point, unless `--concurrency` says otherwise.
const CONCURRENCY_DEFAULT: [usize; 3] = [1, 16, 64];
/// Most concurrent requests one point may use: far below the HTTP/2 stream limits of the
/// servers measured (hyper's default is 200 per connection) times a few connections.
const CONCURRENCY_MAX: usize = 1024;
/// Most HTTP/2 connections the requests are spread over.
const CONNECTIONS_MAX: usize = 64;
/// Keys preloaded for the reads, unless `--keys` says otherwise.
const KEYS_DEFAULT: u32 = 10_000;
/// Most keys `--keys` may ask for (they are preloaded before the first point).
const KEYS_MAX: u32 = 10_000_000;
/// Sets per `atomic_write` while preloading: half of the protocol's 1000 mutations.
const PRELOAD_BATCH: usize = 500;
/// Bytes of each value written.
const VALUE_SIZE: usize = 100;
/// A request slower than this counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to open a TCP connection and finish the HTTP/2 handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Clock ticks per second of `/proc/<pid>/stat`'s CPU times (Linux's fixed `USER_HZ`).
const USER_HZ: u64 = 100;

/// One measured operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Op {
    /// `snapshot_read` of one preloaded key: the range `[k, k ++ 0x00)`, limit 1.
    Get,
    /// `atomic_write` of one set of a `VALUE_SIZE`-byte value to a key never written before.
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Write => "write",
        }
    }
}

/// A KV Connect load generator: one JSON line per point on stdout, a table on stderr.
#[derive(Debug, Parser)]
#[command(name = "kvconnect_load")]
struct Args {
    /// The server, an http:// URL (h2c).
    #[arg(long, value_parser = h2c_url)]
    url: String,
    /// The access token.
    #[arg(long, env = "DENO_KV_ACCESS_TOKEN", hide_env_values = true)]
    token: String,
    /// Measured time per point, in seconds.
    #[arg(long, default_value_t = SECONDS_DEFAULT, value_parser = measured_seconds)]
    seconds: f64,
    /// Unmeasured warm-up before each point, in seconds.
    #[arg(long, default_value_t = WARMUP_SECONDS_DEFAULT, value_parser = warmup_seconds)]
    warmup: f64,
    /// Concurrent requests per point, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = CONCURRENCY_DEFAULT,
        value_parser = concurrency,
    )]
    concurrency: Vec<usize>,
    /// The operations to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Op::Get, Op::Write])]
    ops: Vec<Op>,
    /// HTTP/2 connections the requests share.
    #[arg(long, default_value_t = 1, value_parser = connections)]
    connections: usize,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1, value_parser = worker_threads)]
    threads: usize,
    /// Keys preloaded for the reads.
    #[arg(long, default_value_t = KEYS_DEFAULT, value_parser = key_count)]
    keys: u32,
    /// The server's process id, to read its CPU time around each point.
    #[arg(long)]
    server_pid: Option<u32>,
    /// The server's name in the table and the JSON lines.
    #[arg(long, default_value = "server")]
    label: String,
}

/// An `http://` URL without trailing slashes: h2c only.
fn h2c_url(value: &str) -> Result<String, String> {
    if !value.starts_with("http://") {
        return Err(format!("must be an http:// URL (h2c), not `{value}`"));
    }
    base_url(value)
}

/// A concurrency level in `1..=CONCURRENCY_MAX`.
fn concurrency(value: &str) -> Result<usize, String> {
    in_range(value, 1, CONCURRENCY_MAX)
}

/// A connection count in `1..=CONNECTIONS_MAX`.
fn connections(value: &str) -> Result<usize, String> {
    in_range(value, 1, CONNECTIONS_MAX)
}

/// A worker thread count of at least 1.
fn worker_threads(value: &str) -> Result<usize, String> {
    in_range(value, 1, usize::MAX)
}

/// A key count in `1..=KEYS_MAX`.
fn key_count(value: &str) -> Result<u32, String> {
    in_range(value, 1, KEYS_MAX)
}

/// Where the data path lives and how to call it, from the metadata exchange.
#[derive(Debug, Clone)]
struct DataPath {
    /// Absolute URL of the endpoint, without a trailing slash (`http://host:port/v2`).
    endpoint: String,
    /// The token for data path requests (`Authorization: Bearer …`).
    token: String,
    database_id: String,
    version: u32,
}

/// HTTP/2 connections to one server, and the data path to call over them.
struct Client {
    senders: Vec<SendRequest<Full<Bytes>>>,
    data_path: DataPath,
}

/// `host:port` of an `http://` URL.
fn authority(url: &str) -> Result<&str, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http:// URL: `{url}`"))?;
    Ok(rest.split('/').next().unwrap_or(rest))
}

/// Opens one h2c connection (HTTP/2 prior knowledge) and drives it on the runtime.
async fn connect(authority: &str) -> Result<SendRequest<Full<Bytes>>, String> {
    let open = async {
        let tcp = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        tcp.set_nodelay(true)
            .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP/2 handshake with {authority}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                eprintln!("kvconnect_load: connection to server closed: {e}");
            }
        });
        Ok(sender)
    };
    tokio::time::timeout(CONNECT_TIMEOUT, open)
        .await
        .map_err(|_| format!("connecting to {authority} took over {CONNECT_TIMEOUT:?}"))?
}

/// Sends one POST and returns the body of a 200 reply; any other status is an error carrying
/// the status and the body's text.
async fn post(
    sender: &SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<Bytes, String> {
    let mut sender = sender.clone();
    let call = async {
        sender
            .ready()
            .await
            .map_err(|e| format!("connection not ready: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the reply: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(format!(
                "status {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        Ok(body)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .map_err(|_| format!("no reply within {REQUEST_TIMEOUT:?}"))?
}

/// The metadata exchange: `POST <url>` with the versions we speak and the access token.
async fn metadata(
    sender: &SendRequest<Full<Bytes>>,
    url: &str,
    token: &str,
) -> Result<DataPath, String> {
    let body = serde_json::json!({ "supportedVersions": PROTOCOL_VERSIONS }).to_string();
    let uri = if url.matches('/').count() == 2 {
        format!("{url}/")
    } else {
        url.to_owned()
    };
    let request = Request::builder()
        .method(Method::POST)
        .uri(&uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("user-agent", "tuplekv-kvconnect-load")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("building the metadata request: {e}"))?;
    let reply = post(sender, request)
        .await
        .map_err(|e| format!("metadata exchange with {uri}: {e}"))?;
    let json: serde_json::Value = serde_json::from_slice(&reply)
        .map_err(|e| format!("metadata reply is not JSON ({e}): {reply:?}"))?;
    let field = |name: &str| {
        json.get(name)
            .ok_or_else(|| format!("metadata reply has no `{name}`: {json}"))
    };
    let version = field("version")?
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| PROTOCOL_VERSIONS.contains(v))
        .ok_or_else(|| format!("metadata reply has an unsupported version: {json}"))?;
    let database_id = field("databaseId")?
        .as_str()
        .ok_or_else(|| format!("`databaseId` is not a string: {json}"))?
        .to_owned();
    let token = field("token")?
        .as_str()
        .ok_or_else(|| format!("`token` is not a string: {json}"))?
        .to_owned();
    let endpoint = field("endpoints")?
        .as_array()
        .and_then(|list| {
            list.iter().find(|e| {
                e.get("consistency").and_then(serde_json::Value::as_str) == Some("strong")
            })
        })
        .and_then(|e| e.get("url"))
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| format!("metadata reply has no strong endpoint: {json}"))?;
    let endpoint = if endpoint.starts_with("http://") {
        endpoint.to_owned()
    } else if let Some(path) = endpoint.strip_prefix('/') {
        format!("http://{}/{path}", authority(url)?)
    } else {
        return Err(format!(
            "endpoint URL `{endpoint}` is neither absolute nor /path"
        ));
    };
    Ok(DataPath {
        endpoint,
        token,
        database_id,
        version,
    })
}

impl Client {
    /// Connects `connections` times to `url` and does the metadata exchange on the first.
    async fn open(url: &str, token: &str, connections: usize) -> Result<Client, String> {
        let server = authority(url)?;
        let mut senders = Vec::with_capacity(connections);
        for _ in 0..connections {
            senders.push(connect(server).await?);
        }
        let first = senders
            .first()
            .ok_or_else(|| "no connection opened".to_owned())?;
        let data_path = metadata(first, url, token).await?;
        if authority(&data_path.endpoint)? != server {
            return Err(format!(
                "the data path is on another server ({}), which this generator does not follow",
                data_path.endpoint
            ));
        }
        Ok(Client { senders, data_path })
    }

    /// Calls the data path method `method` with a protobuf `body` over connection `conn`.
    async fn call(&self, conn: usize, method: &str, body: Bytes) -> Result<Bytes, String> {
        let d = &self.data_path;
        let sender = &self.senders[conn % self.senders.len()];
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/{method}", d.endpoint))
            .header("authorization", format!("Bearer {}", d.token))
            .header("content-type", "application/x-protobuf")
            .header("user-agent", "tuplekv-kvconnect-load")
            .header("x-denokv-database-id", d.database_id.as_str())
            .header("x-denokv-version", d.version.to_string())
            .body(Full::new(body))
            .map_err(|e| format!("building a {method} request: {e}"))?;
        post(sender, request)
            .await
            .map_err(|e| format!("{method}: {e}"))
    }

    /// An `atomic_write`; fails unless the server answers `AW_SUCCESS` with a versionstamp.
    async fn atomic_write(&self, conn: usize, write: &AtomicWrite) -> Result<(), String> {
        let reply = self
            .call(conn, "atomic_write", Bytes::from(write.encode_to_vec()))
            .await?;
        let out = AtomicWriteOutput::decode(reply)
            .map_err(|e| format!("atomic_write reply does not decode: {e}"))?;
        if out.status != AtomicWriteStatus::AwSuccess as i32 || out.versionstamp.len() != 10 {
            return Err(format!(
                "atomic_write answered status {} with a {}-byte versionstamp",
                out.status,
                out.versionstamp.len()
            ));
        }
        Ok(())
    }

    /// A `snapshot_read` of one range; fails unless it returns exactly one entry.
    async fn get(&self, conn: usize, request: Bytes) -> Result<(), String> {
        let reply = self.call(conn, "snapshot_read", request).await?;
        let out = SnapshotReadOutput::decode(reply)
            .map_err(|e| format!("snapshot_read reply does not decode: {e}"))?;
        let status_ok = out.status == SnapshotReadStatus::SrSuccess as i32
            || (self.data_path.version < 3 && !out.read_disabled);
        let found = out.ranges.first().map_or(0, |r| r.values.len());
        if !status_ok || found != 1 {
            return Err(format!(
                "snapshot_read answered status {} with {found} entries (expected 1)",
                out.status
            ));
        }
        Ok(())
    }
}

/// The encoded key `["bench", space, n]`.
fn bench_key(space: &str, n: u64) -> Vec<u8> {
    // Key numbers stay far below 2^53, where f64 is exact.
    encode_key(&key!["bench", space, n as f64])
}

/// An atomic write of one set per key, of a `VALUE_SIZE`-byte value.
fn sets(keys: impl IntoIterator<Item = Vec<u8>>) -> AtomicWrite {
    AtomicWrite {
        checks: Vec::new(),
        mutations: keys
            .into_iter()
            .map(|key| Mutation {
                key,
                value: Some(KvValue {
                    data: vec![0x5a; VALUE_SIZE],
                    encoding: ValueEncoding::VeBytes as i32,
                }),
                mutation_type: MutationType::MSet as i32,
                expire_at_ms: 0,
                ..Mutation::default()
            })
            .collect(),
        enqueues: Vec::new(),
    }
}

/// The `snapshot_read` request for one key: `[key, key ++ 0x00)`, limit 1.
fn get_request(key: Vec<u8>) -> Bytes {
    let mut end = key.clone();
    end.push(0);
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: key,
            end,
            limit: 1,
            reverse: false,
        }],
    };
    Bytes::from(read.encode_to_vec())
}

/// Writes the keys the reads look up, `PRELOAD_BATCH` per atomic write.
async fn preload(client: &Client, keys: u32) -> Result<(), String> {
    let all: Vec<u64> = (0..u64::from(keys)).collect();
    for chunk in all.chunks(PRELOAD_BATCH) {
        let write = sets(chunk.iter().map(|&n| bench_key("get", n)));
        client
            .atomic_write(0, &write)
            .await
            .map_err(|e| format!("preloading: {e}"))?;
    }
    Ok(())
}

/// What one worker saw during the measured window.
#[derive(Default)]
struct WorkerResult {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

/// The shared state of the workers of one point.
struct Workload {
    client: Client,
    get_requests: Vec<Bytes>,
    next_write: AtomicU64,
}

impl Workload {
    async fn once(&self, op: Op, conn: usize, rng: &mut u64) -> Result<(), String> {
        match op {
            Op::Get => {
                // xorshift64: a cheap uniform pick of a preloaded key.
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                let len = self.get_requests.len() as u64;
                let i = usize::try_from(*rng % len).unwrap_or(0);
                let request = self.get_requests[i].clone();
                self.client.get(conn, request).await
            }
            Op::Write => {
                let n = self.next_write.fetch_add(1, Ordering::Relaxed);
                self.client
                    .atomic_write(conn, &sets([bench_key("write", n)]))
                    .await
            }
        }
    }
}

/// One worker: issues `op` back to back until `end`, recording the operations that complete
/// inside `[measure_from, end]`.
async fn worker(
    workload: Arc<Workload>,
    op: Op,
    index: usize,
    measure_from: Instant,
    end: Instant,
) -> WorkerResult {
    let mut result = WorkerResult::default();
    let mut rng =
        0x9e37_79b9_7f4a_7c15_u64 ^ (index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    loop {
        let started = Instant::now();
        if started >= end {
            break;
        }
        let outcome = workload.once(op, index, &mut rng).await;
        let done = Instant::now();
        if done < measure_from || done > end {
            continue;
        }
        match outcome {
            Ok(()) => {
                let us = done.duration_since(started).as_micros();
                result
                    .latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert(e);
            }
        }
    }
    result
}

/// CPU time (user + system) that process `pid` has used so far, in microseconds, from
/// `/proc/<pid>/stat`; `None` where that cannot be read.
fn cpu_time_us(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing ')' are fixed.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the file, i.e. 11 and 12 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / USER_HZ)
}

/// One measured point.
struct Point {
    op: Op,
    concurrency: usize,
    seconds: f64,
    ops: u64,
    errors: u64,
    p50_us: u32,
    p99_us: u32,
    server_cpu_us_per_op: Option<f64>,
    client_cpu_us_per_op: Option<f64>,
    first_error: Option<String>,
}

impl Point {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.seconds
    }

    fn json(&self, label: &str) -> String {
        serde_json::json!({
            "label": label,
            "op": self.op.name(),
            "concurrency": self.concurrency,
            "seconds": self.seconds,
            "ops": self.ops,
            "ops_per_sec": (self.ops_per_sec() * 10.0).round() / 10.0,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "errors": self.errors,
            "server_cpu_us_per_op": self.server_cpu_us_per_op.map(|v| (v * 10.0).round() / 10.0),
            "client_cpu_us_per_op": self.client_cpu_us_per_op.map(|v| (v * 10.0).round() / 10.0),
            "first_error": self.first_error,
        })
        .to_string()
    }
}

/// Runs one point: `concurrency` workers issuing `op` for the warm-up and then `seconds`.
async fn run_point(
    workload: &Arc<Workload>,
    args: &Args,
    op: Op,
    concurrency: usize,
) -> Result<Point, String> {
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.seconds);
    let handles: Vec<_> = (0..concurrency)
        .map(|i| tokio::spawn(worker(Arc::clone(workload), op, i, measure_from, end)))
        .collect();
    // Sample the CPU clocks when the measured window opens and closes.
    let server_pid = args.server_pid.map(|p| p.to_string());
    tokio::time::sleep_until(measure_from.into()).await;
    let server_before = server_pid.as_deref().and_then(cpu_time_us);
    let client_before = cpu_time_us("self");
    tokio::time::sleep_until(end.into()).await;
    let server_after = server_pid.as_deref().and_then(cpu_time_us);
    let client_after = cpu_time_us("self");
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for handle in handles {
        let r = handle
            .await
            .map_err(|e| format!("a {} worker failed: {e}", op.name()))?;
        latencies.extend(r.latencies_us);
        errors += r.errors;
        if first_error.is_none() {
            first_error = r.first_error;
        }
    }
    latencies.sort_unstable();
    let ops = latencies.len() as u64;
    let per_op = |before: Option<u64>, after: Option<u64>| match (before, after) {
        (Some(b), Some(a)) if ops > 0 => Some(a.saturating_sub(b) as f64 / ops as f64),
        _ => None,
    };
    Ok(Point {
        op,
        concurrency,
        seconds: args.seconds,
        ops,
        errors,
        p50_us: quantile(&latencies, 0.50),
        p99_us: quantile(&latencies, 0.99),
        server_cpu_us_per_op: per_op(server_before, server_after),
        client_cpu_us_per_op: per_op(client_before, client_after),
        first_error,
    })
}

/// The human table of all points.
fn table(label: &str, points: &[Point]) -> String {
    let mut out = format!(
        "{label}: KV Connect load\n{:<6} {:>5} {:>11} {:>9} {:>9} {:>7} {:>13} {:>13}\n",
        "op", "conc", "ops/s", "p50 µs", "p99 µs", "errors", "srv cpu µs/op", "cli cpu µs/op"
    );
    let cpu = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    for p in points {
        let _ = writeln!(
            out,
            "{:<6} {:>5} {:>11.0} {:>9} {:>9} {:>7} {:>13} {:>13}",
            p.op.name(),
            p.concurrency,
            p.ops_per_sec(),
            p.p50_us,
            p.p99_us,
            p.errors,
            cpu(p.server_cpu_us_per_op),
            cpu(p.client_cpu_us_per_op),
        );
    }
    out
}

async fn run(args: Args) -> Result<(), String> {
    let client = Client::open(&args.url, &args.token, args.connections).await?;
    eprintln!(
        "kvconnect_load: {} speaks protocol version {}; data path {}",
        args.url, client.data_path.version, client.data_path.endpoint
    );
    if args.ops.contains(&Op::Get) {
        preload(&client, args.keys).await?;
    }
    let workload = Arc::new(Workload {
        client,
        get_requests: (0..u64::from(args.keys))
            .map(|n| get_request(bench_key("get", n)))
            .collect(),
        next_write: AtomicU64::new(0),
    });
    let mut points = Vec::new();
    for &op in &args.ops {
        for &concurrency in &args.concurrency {
            let point = run_point(&workload, &args, op, concurrency).await?;
            println!("{}", point.json(&args.label));
            if let Some(e) = &point.first_error {
                eprintln!(
                    "kvconnect_load: {} errors at {} x{}; first: {e}",
                    point.errors,
                    op.name(),
                    concurrency
                );
            }
            points.push(point);
        }
    }
    eprint!("{}", table(&args.label, &points));
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.token.is_empty() {
        tuplekv_benches::refuse::<Args>(
            "no access token: pass --token or set DENO_KV_ACCESS_TOKEN",
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kvconnect_load: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvconnect_load: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(line: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("kvconnect_load").chain(line.split_whitespace()))
    }

    #[test]
    fn parses_a_full_command_line() {
        let args = parse_args(
            "--url http://127.0.0.1:4512/ --token abcdefabcdef --seconds 1 --concurrency 1,64 \
             --ops write --connections 2 --server-pid 7",
        )
        .expect("valid");
        assert_eq!(args.url, "http://127.0.0.1:4512");
        assert_eq!(args.concurrency, vec![1, 64]);
        assert_eq!(args.ops, vec![Op::Write]);
        assert_eq!(args.server_pid, Some(7));
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            "--url https://x --token t",
            "--url http://x --token t --concurrency 0",
            "--url http://x --token t --concurrency 2000",
            "--url http://x --token t --ops scan",
            "--url http://x --token t --seconds -1",
            "--url http://x --token t --keys",
            "--url http://x --token t --connections 0",
            "--url http://x --token t --connections 65",
            "--url http://x --token t --keys 0",
            "--url http://x --token t --keys 10000001",
            "--url http://x --token t --threads 0",
        ] {
            assert!(parse_args(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn takes_each_limit_at_its_edge() {
        let args = parse_args(&format!(
            "--url http://x --token t --concurrency 1,{CONCURRENCY_MAX} \
             --connections {CONNECTIONS_MAX} --keys {KEYS_MAX} --seconds 600 --warmup 0"
        ))
        .expect("every value at its limit");
        assert_eq!(args.concurrency, vec![1, CONCURRENCY_MAX]);
        assert_eq!((args.connections, args.keys), (CONNECTIONS_MAX, KEYS_MAX));
        assert!(
            parse_args(&format!(
                "--url http://x --token t --concurrency {}",
                CONCURRENCY_MAX + 1
            ))
            .is_err()
        );
    }

    #[test]
    fn bench_keys_are_tuple_encodings() {
        let key = bench_key("get", 1);
        assert!(key.starts_with(b"\x02bench\x00\x02get\x00"), "{key:?}");
        assert!(bench_key("get", 1) < bench_key("get", 2));
    }

    #[test]
    fn reads_this_process_cpu_time() {
        assert!(cpu_time_us("self").is_some());
    }
}
