//! `cargo xtask bench server`: tuplekv's KV Connect server against denokv, side by side.
//!
//! Builds `tuplekv` (crate `tuplekv-cli`) and the load generator `kvconnect_load` (crate
//! `tuplekv-benches`) with the bench profile, gets the Deno binary and denokv through
//! `tuplekv_harness::clients`, then starts, one at a time, each server on a loopback port with a fresh
//! random token and a fresh data directory: denokv (SQLite on disk, its defaults: every commit
//! synced on its own), `tuplekv serve --durability sync`, and `tuplekv serve` in memory (which
//! separates the protocol's cost from the fsync's). Against each it runs the Deno client bench
//! (`bench/server/deno_bench.ts`) and the load generator, then stops it with SIGTERM. The
//! side-by-side table, with the goals of issue 22 marked met or not, then the Deno client's
//! writes by value size, in flight and shape (issue 31's goals), go to standard output and to
//! `target/bench-reports/server.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use tuplekv_harness::clients::{self, DENO_VERSION, DENOKV_VERSION};
use tuplekv_harness::cmd;
use tuplekv_harness::server::{Running, Stderr, generate_token, scratch_dir};

use super::doc::{Doc, Table, publish, rate};
use super::fleet::{run_client, run_client_keeping_output};
use super::{
    CLI_BIN, CLI_PACKAGE, Durations, LOAD_PACKAGE, build_bin, command_line, load_average, load_note,
};

/// The name `cargo xtask bench` routes here.
pub(crate) const GROUP: &str = "server";
/// The load generator of this bench.
const LOAD_BIN: &str = "kvconnect_load";
/// The Deno client bench, relative to the workspace root.
const DENO_SCRIPT: &str = "bench/server/deno_bench.ts";
/// Set to a `tuplekv` binary to use it instead of building one (for trying another branch's).
const SERVER_BIN_ENV: &str = "TUPLEKV_BENCH_SERVER_BIN";
/// Time the Deno bench may take before it is killed: its ops are bounded by count and time,
/// but against a server that takes 44 ms a write each op runs out its time, and the large
/// concurrent writes may each wait out their own 60 s timeout.
const DENO_CLIENT_TIMEOUT: Duration = Duration::from_secs(600);
/// Goal: tuplekv durable over denokv on each sequential Deno op.
const GOAL_SEQUENTIAL: f64 = 2.0;
/// Goal: tuplekv durable over denokv on 32 concurrent durable sets from Deno.
const GOAL_CONCURRENT_SETS: f64 = 10.0;
/// Goal: tuplekv durable over denokv at 64 concurrent writes from the load generator.
const GOAL_LOAD_WRITES: f64 = 10.0;
/// Concurrency of the load generator's goal point.
const GOAL_LOAD_CONCURRENCY: u64 = 64;
/// Goal: tuplekv durable over denokv on sequential `set`s of a 2 KiB object from Deno.
const GOAL_OBJECT_2K: f64 = 50.0;
/// Goal: the p50 latency of a sequential 16 KiB object `set` over a 100 B one's, at most, on
/// each tuplekv server.
const GOAL_SIZE_LATENCY_RATIO: f64 = 3.0;
/// The object sizes of the size goal: (the larger, the smaller).
const GOAL_SIZE_PAIR: (u64, u64) = (16384, 100);
/// The object size of the 50x goal.
const GOAL_OBJECT_SIZE: u64 = 2048;
/// Goal: this many concurrent ~600 kB writes over one connection complete on each tuplekv
/// server.
const GOAL_LARGE_WRITES: u64 = 200;
/// The nominal object sizes the Deno bench writes (`set_obj_<size>_...`), smallest first.
const OBJECT_SIZES: [u64; 6] = [100, 1024, 2048, 4096, 16384, 65536];
/// Object sizes written only sequentially (the 50x goal's size, not a point of the curve).
const SEQUENTIAL_ONLY_SIZES: [u64; 1] = [2048];
/// Ops in flight of the object writes: sequential, then batches of 32 and 256.
const OBJECT_IN_FLIGHT: [u64; 3] = [1, 32, 256];
/// The large concurrent writes' counts (`large_concurrent_<count>`).
const LARGE_COUNTS: [u64; 2] = [100, 200];
/// The app-shaped insert's op.
const APP_INSERT_OP: &str = "app_insert_2k";
/// The Deno ops in table order: (op name printed by the script, row label).
const DENO_OPS: [(&str, &str); 4] = [
    ("set", "Deno: sequential set"),
    ("get", "Deno: sequential get"),
    ("cas", "Deno: sequential get + check + set"),
    ("set_concurrent_32", "Deno: 32 concurrent sets"),
];

/// The servers compared, in run order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Server {
    Denokv,
    TuplekvDurable,
    TuplekvMemory,
}

impl Server {
    const ALL: [Server; 3] = [
        Server::Denokv,
        Server::TuplekvDurable,
        Server::TuplekvMemory,
    ];

    fn label(self) -> &'static str {
        match self {
            Server::Denokv => "denokv",
            Server::TuplekvDurable => "tuplekv durable",
            Server::TuplekvMemory => "tuplekv in memory",
        }
    }
}

/// The binaries a run needs.
struct Binaries {
    tuplekv: PathBuf,
    /// Set when `tuplekv` came from `SERVER_BIN_ENV` rather than this workspace's bench-profile build.
    tuplekv_note: Option<String>,
    load: PathBuf,
    deno: PathBuf,
    denokv: PathBuf,
}

/// One point of the load generator, as its JSON line gives it.
#[derive(Debug, Clone, PartialEq)]
struct LoadPoint {
    op: String,
    concurrency: u64,
    ops_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
    errors: u64,
    server_cpu_us_per_op: Option<f64>,
    client_cpu_us_per_op: Option<f64>,
}

/// One op of the Deno bench, as its JSON line gives it.
#[derive(Debug, Clone, Default, PartialEq)]
struct DenoOp {
    ops_per_sec: f64,
    errors: u64,
    /// Ops measured; for the large writes, the writes issued.
    n: u64,
    /// Seconds the measured ops took together.
    seconds: f64,
    /// Each op's own latency, in µs, when the script reports it.
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    max_us: Option<u64>,
    /// Bytes of each value as Deno serialised it, when the script says.
    value_bytes: Option<u64>,
    /// The large writes: whether they were still unfinished at the script's timeout.
    timed_out: bool,
    /// The large writes: how many finished (all of them unless `timed_out`).
    completed: Option<u64>,
    /// The large writes: not run because a smaller round timed out.
    skipped: bool,
}

impl DenoOp {
    /// Whether every op of a large-write round finished without error.
    fn all_completed(&self) -> bool {
        !self.timed_out
            && !self.skipped
            && self.errors == 0
            && self.completed.unwrap_or(self.n) == self.n
    }
}

/// What one server measured.
#[derive(Debug, Default)]
struct ServerRun {
    /// Deno op name to what it measured.
    deno: BTreeMap<String, DenoOp>,
    load: Vec<LoadPoint>,
    /// Log syncs per acknowledged write, when the server's log says.
    syncs_per_write: Option<f64>,
    /// Why this server's run failed, if it did.
    failure: Option<String>,
}

/// Builds what is not given and installs the clients.
fn binaries() -> Result<Binaries> {
    let (tuplekv, tuplekv_note) = match std::env::var_os(SERVER_BIN_ENV) {
        Some(path) => {
            let path = PathBuf::from(path);
            let note = format!(
                "tuplekv was `{}` ({SERVER_BIN_ENV}), not this workspace's bench-profile build{}.",
                path.display(),
                if path.components().any(|c| c.as_os_str() == "debug") {
                    ": a debug build, so its numbers say nothing about speed"
                } else {
                    ""
                }
            );
            eprintln!("bench: {note}");
            (path, Some(note))
        }
        None => (build_bin(CLI_PACKAGE, CLI_BIN)?, None),
    };
    Ok(Binaries {
        tuplekv,
        tuplekv_note,
        load: build_bin(LOAD_PACKAGE, LOAD_BIN)?,
        deno: clients::deno()?,
        denokv: clients::denokv()?,
    })
}

/// Starts `server` with its data under `dir`, its stderr in `log`, and the access token
/// `token`.
fn start(server: Server, bins: &Binaries, dir: &Path, log: &Path, token: &str) -> Result<Running> {
    let stderr = Stderr::Log(log.to_path_buf());
    let running = match server {
        Server::Denokv => Running::denokv(&bins.denokv, dir, token, stderr),
        Server::TuplekvDurable => {
            let args = [
                "--path".into(),
                dir.join("data").into(),
                "--durability".into(),
                "sync".into(),
            ];
            Running::tuplekv(&bins.tuplekv, &args, token, stderr)
        }
        Server::TuplekvMemory => Running::tuplekv(&bins.tuplekv, &[], token, stderr),
    };
    running.with_context(|| format!("starting {}", server.label()))
}

/// The Deno bench's result lines, by op name. Fields newer than the op's name, rate and
/// errors are optional, so that an older script's lines still parse.
fn parse_deno(output: &str) -> Result<BTreeMap<String, DenoOp>> {
    let mut ops = BTreeMap::new();
    for line in output.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("Deno bench line `{line}`"))?;
        let op = v["op"].as_str().context("Deno bench line without `op`")?;
        let op_result = DenoOp {
            ops_per_sec: v["ops_per_sec"]
                .as_f64()
                .with_context(|| format!("Deno bench line without `ops_per_sec`: {line}"))?,
            errors: v["errors"].as_u64().unwrap_or(0),
            n: v["n"].as_u64().unwrap_or(0),
            seconds: v["seconds"].as_f64().unwrap_or(0.0),
            p50_us: v["p50_us"].as_u64(),
            p99_us: v["p99_us"].as_u64(),
            max_us: v["max_us"].as_u64(),
            value_bytes: v["value_bytes"].as_u64(),
            timed_out: v["timed_out"].as_bool().unwrap_or(false),
            completed: v["completed"].as_u64(),
            skipped: v["skipped"].as_bool().unwrap_or(false),
        };
        ops.insert(op.to_owned(), op_result);
    }
    Ok(ops)
}

/// The load generator's result lines.
fn parse_load(output: &str) -> Result<Vec<LoadPoint>> {
    let mut points = Vec::new();
    for line in output.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("load generator line `{line}`"))?;
        let number = |name: &str| {
            v[name]
                .as_u64()
                .with_context(|| format!("load generator line without `{name}`: {line}"))
        };
        points.push(LoadPoint {
            op: v["op"].as_str().context("line without `op`")?.to_owned(),
            concurrency: number("concurrency")?,
            ops_per_sec: v["ops_per_sec"]
                .as_f64()
                .context("line without `ops_per_sec`")?,
            p50_us: number("p50_us")?,
            p99_us: number("p99_us")?,
            errors: number("errors")?,
            server_cpu_us_per_op: v["server_cpu_us_per_op"].as_f64(),
            client_cpu_us_per_op: v["client_cpu_us_per_op"].as_f64(),
        });
    }
    Ok(points)
}

/// Log syncs per acknowledged write from a server log that reports both `log_syncs=N` and
/// `atomic_write=N` (tuplekv's shutdown line, when it carries the engine's sync count).
fn syncs_per_write(log: &str) -> Option<f64> {
    let last = |name: &str| -> Option<u64> {
        log.rsplit(name)
            .next()
            .filter(|_| log.contains(name))?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let syncs = last("log_syncs=")?;
    let writes = last("atomic_write=")?;
    (writes > 0).then(|| syncs as f64 / writes as f64)
}

/// Runs both clients against one server and stops it.
fn measure(server: Server, bins: &Binaries, durations: Durations) -> Result<ServerRun> {
    let dir = scratch_dir(&format!(
        "bench-server-{}",
        server.label().replace(' ', "-")
    ))?;
    let result = measure_in(server, bins, durations, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_in(server: Server, bins: &Binaries, d: Durations, dir: &Path) -> Result<ServerRun> {
    let token = generate_token()?;
    let log = dir.join("server.log");
    let running = start(server, bins, dir, &log, &token)?;
    eprintln!("\n[bench server] {} at {}", server.label(), running.url());
    let deno = run_client_keeping_output(
        Command::new(&bins.deno)
            .args(["run", "-A", "--unstable-kv"])
            .arg(cmd::workspace_root().join(DENO_SCRIPT))
            .arg(running.url())
            .arg(d.ops.to_string())
            .arg(d.warmup_ops().to_string())
            .arg(d.seconds.to_string())
            .env("DENO_KV_ACCESS_TOKEN", &token)
            .env("DENO_NO_UPDATE_CHECK", "1"),
        &token,
        DENO_CLIENT_TIMEOUT,
    );
    let load = run_client(
        Command::new(&bins.load)
            .args(["--url", &running.url(), "--label", server.label()])
            .args(["--seconds", &d.seconds.to_string()])
            .args(["--warmup", &d.warmup.to_string()])
            .args(["--server-pid", &running.pid().to_string()])
            .env("DENO_KV_ACCESS_TOKEN", &token),
        &token,
    );
    let status = running.stop()?;
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!("bench: {} stopped ({status})", server.label());
    let mut measured = ServerRun {
        syncs_per_write: syncs_per_write(&log),
        ..ServerRun::default()
    };
    let mut failures = Vec::new();
    // The lines the Deno bench printed count even when it failed later: they are what it
    // measured before the failure, which the failure note beside them explains.
    match deno {
        Ok(run) => {
            match parse_deno(&run.stdout) {
                Ok(ops) => measured.deno = ops,
                Err(e) => failures.push(format!("Deno bench: {e:#}")),
            }
            if let Some(failure) = run.failure {
                failures.push(format!("Deno bench: {failure}"));
            }
        }
        Err(e) => failures.push(format!("Deno bench: {e:#}")),
    }
    match load.and_then(|out| parse_load(&out)) {
        Ok(points) => measured.load = points,
        Err(e) => failures.push(format!("load generator: {e:#}")),
    }
    if !failures.is_empty() {
        measured.failure = Some(failures.join("; "));
    }
    Ok(measured)
}

/// One row of the side-by-side table: a rate (and errors) per server.
struct Row {
    label: String,
    cells: BTreeMap<Server, (f64, u64)>,
    goal: Option<f64>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        let ours = self.cells.get(&Server::TuplekvDurable)?.0;
        let theirs = self.cells.get(&Server::Denokv)?.0;
        (theirs > 0.0).then(|| ours / theirs)
    }

    fn cell(&self, server: Server) -> String {
        match self.cells.get(&server) {
            None => "—".to_owned(),
            Some((r, 0)) => rate(*r),
            Some((r, errors)) => format!("{} ({errors} errors)", rate(*r)),
        }
    }

    fn goal_cell(&self) -> String {
        match (self.goal, self.ratio()) {
            (None, _) => String::new(),
            (Some(goal), None) => format!("≥ {goal}x: not measured"),
            (Some(goal), Some(ratio)) if ratio >= goal => format!("≥ {goal}x: **met**"),
            (Some(goal), Some(_)) => format!("≥ {goal}x: not met"),
        }
    }
}

/// The rows of the side-by-side table, Deno ops first, then the load generator's points.
fn rows(results: &BTreeMap<Server, ServerRun>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (op, label) in DENO_OPS {
        let goal = if op == "set_concurrent_32" {
            GOAL_CONCURRENT_SETS
        } else {
            GOAL_SEQUENTIAL
        };
        rows.push(Row {
            label: label.to_owned(),
            cells: results
                .iter()
                .filter_map(|(s, m)| m.deno.get(op).map(|c| (*s, (c.ops_per_sec, c.errors))))
                .collect(),
            goal: Some(goal),
        });
    }
    let points = load_points(results);
    for (op, concurrency) in points {
        let goal =
            (op == "write" && concurrency == GOAL_LOAD_CONCURRENCY).then_some(GOAL_LOAD_WRITES);
        rows.push(Row {
            label: format!("load: {op}, {concurrency} concurrent"),
            cells: results
                .iter()
                .filter_map(|(s, m)| {
                    let p = m
                        .load
                        .iter()
                        .find(|p| p.op == op && p.concurrency == concurrency)?;
                    Some((*s, (p.ops_per_sec, p.errors)))
                })
                .collect(),
            goal,
        });
    }
    rows
}

/// The (op, concurrency) points any server measured: gets before writes, then by concurrency.
fn load_points(results: &BTreeMap<Server, ServerRun>) -> Vec<(String, u64)> {
    let mut points: Vec<(String, u64)> = results
        .values()
        .flat_map(|m| m.load.iter().map(|p| (p.op.clone(), p.concurrency)))
        .collect();
    points.sort_by_key(|(op, concurrency)| (op != "get", op.clone(), *concurrency));
    points.dedup();
    points
}

/// The markdown report: the side-by-side table, where the time goes, and notes.
fn render(
    results: &BTreeMap<Server, ServerRun>,
    durations: Durations,
    command: &str,
    started: SystemTime,
    extra_notes: &[String],
) -> String {
    let mut doc = Doc::new(
        "KV Connect servers, side by side",
        command,
        started,
        &format!(
            "Deno {DENO_VERSION} client; denokv {DENOKV_VERSION} (SQLite on disk, its defaults: \
             each commit synced on its own, no write batching); `tuplekv serve --durability \
             sync` (fsync before acknowledging, group commit); tuplekv in memory (no fsync: the \
             protocol's cost alone). Ops/s, one run; ratio = tuplekv durable / denokv."
        ),
    );
    let mut table = Table::new([
        "op",
        "denokv",
        "tuplekv durable",
        "ratio",
        "tuplekv in memory",
        "goal",
    ]);
    for row in rows(results) {
        let ratio = row
            .ratio()
            .map_or_else(|| "—".to_owned(), |r| format!("{r:.1}x"));
        table.row([
            row.label.clone(),
            row.cell(Server::Denokv),
            row.cell(Server::TuplekvDurable),
            ratio,
            row.cell(Server::TuplekvMemory),
            row.goal_cell(),
        ]);
    }
    doc.table(&table);
    by_value_size(&mut doc, results, durations);
    where_time_goes(&mut doc, results);
    doc.finish(notes(results, extra_notes))
}

/// The Deno object op of `size` nominal bytes with `in_flight` ops at once.
fn object_op(size: u64, in_flight: u64) -> String {
    if in_flight == 1 {
        format!("set_obj_{size}_seq")
    } else {
        format!("set_obj_{size}_c{in_flight}")
    }
}

/// The (size, in flight) rows of the by-size table, in order.
fn object_points() -> Vec<(u64, u64)> {
    OBJECT_SIZES
        .iter()
        .flat_map(|&size| {
            OBJECT_IN_FLIGHT
                .iter()
                .filter(move |&&n| n == 1 || !SEQUENTIAL_ONLY_SIZES.contains(&size))
                .map(move |&n| (size, n))
        })
        .collect()
}

/// A byte count for a label: `100 B`, `16 KiB`.
fn size_label(bytes: u64) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

/// A latency in µs as milliseconds for a cell, with about three significant digits: `0.31`,
/// `4.52`, `44.1`, `1235`.
fn ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

/// The p50 / p99 latency cell of a Deno op, in ms.
fn latency_cell(op: Option<&DenoOp>) -> String {
    match op.map(|o| (o.p50_us, o.p99_us)) {
        Some((Some(p50), Some(p99))) => format!("{} / {}", ms(p50), ms(p99)),
        _ => "—".to_owned(),
    }
}

/// The rate cell of a Deno op: ops/s, and its errors if any.
fn deno_rate_cell(op: Option<&DenoOp>) -> String {
    match op {
        None => "—".to_owned(),
        Some(o) if o.errors == 0 => rate(o.ops_per_sec),
        Some(o) => format!("{} ({} errors)", rate(o.ops_per_sec), o.errors),
    }
}

/// The cell of a large-write round: the time all its writes took, or how it went wrong.
fn large_cell(op: Option<&DenoOp>) -> String {
    match op {
        None => "—".to_owned(),
        Some(o) if o.skipped => "not run: a smaller round stalled".to_owned(),
        Some(o) if o.timed_out => format!(
            "**stalled**: {} of {} done in {:.0} s",
            o.completed.unwrap_or(0),
            o.n,
            o.seconds
        ),
        Some(o) if o.errors > 0 => format!(
            "**failed**: {} of {} writes, {:.2} s",
            o.errors, o.n, o.seconds
        ),
        Some(o) => format!("all in {:.2} s", o.seconds),
    }
}

/// The tuplekv servers of `results` (each judged on its own by the size and large-write
/// goals).
fn tuplekv_servers(results: &BTreeMap<Server, ServerRun>) -> impl Iterator<Item = Server> + '_ {
    results.keys().copied().filter(|s| *s != Server::Denokv)
}

/// Goal: sequential sets of a 2 KiB object, tuplekv durable ≥ `GOAL_OBJECT_2K` x denokv.
fn object_2k_goal(results: &BTreeMap<Server, ServerRun>) -> String {
    let op = object_op(GOAL_OBJECT_SIZE, 1);
    let op_of = |server: Server| results.get(&server)?.deno.get(&op);
    let goal = format!("durable ≥ {GOAL_OBJECT_2K}x denokv");
    match (op_of(Server::TuplekvDurable), op_of(Server::Denokv)) {
        (Some(ours), _) if ours.errors > 0 => format!("{goal}: not met (tuplekv errors)"),
        (Some(ours), Some(theirs)) if theirs.ops_per_sec > 0.0 => {
            if ours.ops_per_sec / theirs.ops_per_sec >= GOAL_OBJECT_2K {
                format!("{goal}: **met**")
            } else {
                format!("{goal}: not met")
            }
        }
        _ => format!("{goal}: not measured"),
    }
}

/// Goal: on each tuplekv server, the p50 of a sequential 16 KiB object set is at most
/// `GOAL_SIZE_LATENCY_RATIO` times a 100 B one's.
fn size_latency_goal(results: &BTreeMap<Server, ServerRun>) -> String {
    let (large, small) = GOAL_SIZE_PAIR;
    let goal = format!(
        "p50 ≤ {GOAL_SIZE_LATENCY_RATIO}x the {} p50, each tuplekv",
        size_label(small)
    );
    let mut ratios = Vec::new();
    let mut met = true;
    for server in tuplekv_servers(results) {
        let p50 = |size: u64| {
            let op = results.get(&server)?.deno.get(&object_op(size, 1))?;
            op.p50_us.filter(|p| *p > 0 && op.errors == 0)
        };
        match (p50(large), p50(small)) {
            (Some(l), Some(s)) => {
                let ratio = l as f64 / s as f64;
                met &= ratio <= GOAL_SIZE_LATENCY_RATIO;
                ratios.push(format!("{} {ratio:.1}x", server.label()));
            }
            _ => return format!("{goal}: not measured ({} missing)", server.label()),
        }
    }
    if ratios.is_empty() {
        return format!("{goal}: not measured");
    }
    let verdict = if met { "**met**" } else { "not met" };
    format!("{goal}: {verdict} ({})", ratios.join(", "))
}

/// Goal: `GOAL_LARGE_WRITES` concurrent ~600 kB writes over one connection all complete on
/// each tuplekv server.
fn large_writes_goal(results: &BTreeMap<Server, ServerRun>) -> String {
    let op = format!("large_concurrent_{GOAL_LARGE_WRITES}");
    let goal = "all complete, each tuplekv";
    let mut measured = false;
    let mut short = Vec::new();
    for server in tuplekv_servers(results) {
        match results.get(&server).and_then(|m| m.deno.get(&op)) {
            Some(o) if o.all_completed() => measured = true,
            Some(o) => {
                measured = true;
                let why = if o.skipped {
                    "not run"
                } else if o.timed_out {
                    "stalled"
                } else {
                    "failed"
                };
                short.push(format!("{} {why}", server.label()));
            }
            None => short.push(format!("{} not measured", server.label())),
        }
    }
    match (measured, short.is_empty()) {
        (false, _) => format!("{goal}: not measured"),
        (true, true) => format!("{goal}: **met**"),
        (true, false) => format!("{goal}: not met ({})", short.join(", ")),
    }
}

/// The Deno client's writes by value size, in flight and shape, with issue 31's goals.
fn by_value_size(doc: &mut Doc, results: &BTreeMap<Server, ServerRun>, d: Durations) {
    doc.section(
        "Deno, by value size",
        &format!(
            "`kv.set` of a JS object (id, name, email, tags, a text body) whose V8 \
             serialisation, as Deno sends and stores it, has the size shown; one at a time or \
             in `Promise.all` batches of 32 or 256 over the one connection `Deno.openKv(url)` \
             opens. ops/s, and each op's own latency (issue to result: in a batch, that \
             includes waiting behind the others) p50 / p99 in ms. Each row: up to {} ops ({} \
             from 16 KiB on, and at least one batch), at most {} s, after a warm-up; with \
             under 100 ops the p99 is about the slowest op. Then the index guide's insert \
             (check the email is free, set a ~2 KiB user and two index keys, one commit), and \
             100 or 200 atomic writes at once of ten 60 000-byte `Uint8Array`s each (~600 kB a \
             write): the time all of them took, or how far they got in 60 s. Ratio = tuplekv \
             durable / denokv ops/s.",
            d.ops,
            (d.ops / 4).max(1),
            d.seconds,
        ),
    );
    let mut header = vec!["value".to_owned(), "in flight".to_owned()];
    for server in Server::ALL {
        header.push(format!("{} ops/s", server.label()));
        header.push(format!("{} p50 / p99 ms", server.label()));
        if server == Server::TuplekvDurable {
            header.push("ratio".to_owned());
        }
    }
    header.push("goal".to_owned());
    let mut table = Table::new(header);
    for row in size_rows(results) {
        table.row(size_cells(results, &row));
    }
    doc.table(&table);
}

/// One row of the by-size table.
struct SizeRow {
    /// What each op writes.
    value: String,
    in_flight: u64,
    /// The Deno op whose lines fill the row.
    op: String,
    /// Whether the row is a large-write round, whose cells say how long all of it took.
    large: bool,
    goal: String,
}

/// The rows of the by-size table: the objects by size and in flight, the app-shaped insert,
/// then the large-write rounds. Rows no server measured are kept, empty, so that a missing op
/// shows.
fn size_rows(results: &BTreeMap<Server, ServerRun>) -> Vec<SizeRow> {
    let mut rows = Vec::new();
    for (size, in_flight) in object_points() {
        let op = object_op(size, in_flight);
        // The serialised size the script measured, when it is not the nominal one (the
        // "64 KiB" object stays under Deno's value limit).
        let bytes = results
            .values()
            .find_map(|m| m.deno.get(&op).and_then(|o| o.value_bytes))
            .filter(|b| *b != size);
        let value = match bytes {
            Some(b) => format!("{} object ({b} B)", size_label(size)),
            None => format!("{} object", size_label(size)),
        };
        let goal = match (size, in_flight) {
            (GOAL_OBJECT_SIZE, 1) => object_2k_goal(results),
            (s, 1) if s == GOAL_SIZE_PAIR.0 => size_latency_goal(results),
            _ => String::new(),
        };
        rows.push(SizeRow {
            value,
            in_flight,
            op,
            large: false,
            goal,
        });
    }
    rows.push(SizeRow {
        value: "index insert: check + ~2 KiB user + 2 index keys".to_owned(),
        in_flight: 1,
        op: APP_INSERT_OP.to_owned(),
        large: false,
        goal: String::new(),
    });
    for count in LARGE_COUNTS {
        rows.push(SizeRow {
            value: "atomic write of 10 × 60 kB".to_owned(),
            in_flight: count,
            op: format!("large_concurrent_{count}"),
            large: true,
            goal: if count == GOAL_LARGE_WRITES {
                large_writes_goal(results)
            } else {
                String::new()
            },
        });
    }
    rows
}

/// The cells of one row of the by-size table.
fn size_cells(results: &BTreeMap<Server, ServerRun>, row: &SizeRow) -> Vec<String> {
    let op_of = |server: Server| results.get(&server).and_then(|m| m.deno.get(&row.op));
    // A large round's rate only compares when both rounds finished: a stalled one's rate is
    // how far it got before the timeout.
    let ratio = match (op_of(Server::TuplekvDurable), op_of(Server::Denokv)) {
        (Some(ours), Some(theirs))
            if theirs.ops_per_sec > 0.0
                && (!row.large || (ours.all_completed() && theirs.all_completed())) =>
        {
            format!("{:.1}x", ours.ops_per_sec / theirs.ops_per_sec)
        }
        _ => "—".to_owned(),
    };
    let mut cells = vec![row.value.clone(), row.in_flight.to_string()];
    for server in Server::ALL {
        let op = op_of(server);
        cells.push(if row.large {
            large_cell(op)
        } else {
            deno_rate_cell(op)
        });
        cells.push(latency_cell(op));
        if server == Server::TuplekvDurable {
            cells.push(ratio.clone());
        }
    }
    cells.push(row.goal.clone());
    cells
}

/// Latencies and server CPU per operation of the load generator's points, and what they say.
fn where_time_goes(doc: &mut Doc, results: &BTreeMap<Server, ServerRun>) {
    doc.section(
        "Where the server's time goes (load generator)",
        "p50 / p99 latency in µs, and the server process's CPU time per operation in µs (from \
         /proc; the rest of a request is waiting: for the disk, the network or the client).",
    );
    let mut header = vec!["point".to_owned()];
    for server in Server::ALL {
        header.push(format!("{} p50 / p99", server.label()));
        header.push(format!("{} CPU/op", server.label()));
    }
    let mut table = Table::new(header);
    for (op, concurrency) in &load_points(results) {
        let mut cells = vec![format!("{op}, {concurrency} concurrent")];
        for server in Server::ALL {
            let point = results.get(&server).and_then(|m| {
                m.load
                    .iter()
                    .find(|p| &p.op == op && p.concurrency == *concurrency)
            });
            match point {
                Some(p) => {
                    cells.push(format!("{} / {}", p.p50_us, p.p99_us));
                    cells.push(
                        p.server_cpu_us_per_op
                            .map_or_else(|| "—".to_owned(), |c| format!("{c:.0}")),
                    );
                }
                None => cells.extend(["—".to_owned(), "—".to_owned()]),
            }
        }
        table.row(cells);
    }
    doc.table(&table);
    let mut out = String::new();
    let rate_of = |server: Server, op: &str, c: u64| {
        results
            .get(&server)?
            .load
            .iter()
            .find(|p| p.op == op && p.concurrency == c)
            .map(|p| p.ops_per_sec)
    };
    out.push('\n');
    for server in Server::ALL {
        for op in ["get", "write"] {
            let point = results.get(&server).and_then(|m| {
                m.load
                    .iter()
                    .find(|p| p.op == op && p.concurrency == GOAL_LOAD_CONCURRENCY)
            });
            let cores = |cpu: Option<f64>, p: &LoadPoint| cpu.map(|c| c * p.ops_per_sec / 1e6);
            if let Some(p) = point
                && let (Some(srv), Some(cli)) = (
                    cores(p.server_cpu_us_per_op, p),
                    cores(p.client_cpu_us_per_op, p),
                )
            {
                let _ = writeln!(
                    out,
                    "- {op}, {GOAL_LOAD_CONCURRENCY} concurrent, {}: the server kept {srv:.2} \
                     cores busy, the load generator {cli:.2} (CPU per op x ops/s, of {} cores).",
                    server.label(),
                    std::thread::available_parallelism().map_or(0, |n| n.get()),
                );
            }
        }
    }
    for c in [1, GOAL_LOAD_CONCURRENCY] {
        if let (Some(durable), Some(memory)) = (
            rate_of(Server::TuplekvDurable, "write", c),
            rate_of(Server::TuplekvMemory, "write", c),
        ) && memory > 0.0
        {
            let _ = writeln!(
                out,
                "- Writes, {c} concurrent: tuplekv durable runs at {:.0}% of its in-memory \
                 rate: the rest is the durable path (log writes and waiting for fsync).",
                100.0 * durable / memory
            );
        }
    }
    doc.text(&out);
}

/// Sync counts, failures and caveats.
fn notes(results: &BTreeMap<Server, ServerRun>, extra_notes: &[String]) -> Vec<String> {
    let mut notes = extra_notes.to_vec();
    notes.push(
        match results
            .get(&Server::TuplekvDurable)
            .and_then(|m| m.syncs_per_write)
        {
            Some(s) => format!(
                "tuplekv durable: {s:.3} log syncs per acknowledged write over the whole run \
                 (from its shutdown log)."
            ),
            None => "fsyncs per acknowledged write: not reported; the server does not expose \
                     the engine's log sync count (no `log_syncs=` in its log)."
                .to_owned(),
        },
    );
    for (server, m) in results {
        if let Some(failure) = &m.failure {
            notes.push(format!("{} failed: {failure}", server.label()));
        }
    }
    notes
}

/// Runs `cargo xtask bench server` (with `--quick`: a smoke run).
pub(crate) fn run(quick: bool) -> Result<()> {
    let started = SystemTime::now();
    let durations = Durations::of(quick);
    let bins = binaries()?;
    let load_before = load_average();
    let mut results = BTreeMap::new();
    for server in Server::ALL {
        let measured = match measure(server, &bins, durations) {
            Ok(m) => m,
            Err(e) => ServerRun {
                failure: Some(format!("{e:#}")),
                ..ServerRun::default()
            },
        };
        if let Some(f) = &measured.failure {
            eprintln!("bench: {} failed: {f}", server.label());
        }
        results.insert(server, measured);
    }
    let command = command_line(GROUP, quick);
    let mut extra_notes: Vec<String> = bins.tuplekv_note.iter().cloned().collect();
    extra_notes.push(load_note(&load_before));
    publish(
        &render(&results, durations, &command, started, &extra_notes),
        GROUP,
        started,
    )?;
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, m)| m.failure.is_some())
        .map(|(s, _)| s.label())
        .collect();
    if !failed.is_empty() {
        bail!("the bench failed against: {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sync_counts_from_a_log() {
        let log = "x\nserver stopped stats=metadata=1 atomic_write=200 log_syncs=20\n";
        assert_eq!(syncs_per_write(log), Some(0.1));
        assert_eq!(syncs_per_write("atomic_write=3"), None);
    }

    fn measured(set: f64, write64: f64) -> ServerRun {
        ServerRun {
            deno: [(
                "set".to_owned(),
                DenoOp {
                    ops_per_sec: set,
                    ..DenoOp::default()
                },
            )]
            .into_iter()
            .collect(),
            load: vec![LoadPoint {
                op: "write".into(),
                concurrency: 64,
                ops_per_sec: write64,
                p50_us: 1,
                p99_us: 2,
                errors: 0,
                server_cpu_us_per_op: Some(3.0),
                client_cpu_us_per_op: Some(1.0),
            }],
            ..ServerRun::default()
        }
    }

    #[test]
    fn report_marks_goals() {
        let results: BTreeMap<Server, ServerRun> = [
            (Server::Denokv, measured(1000.0, 1000.0)),
            (Server::TuplekvDurable, measured(2500.0, 5000.0)),
            (Server::TuplekvMemory, measured(9000.0, 50000.0)),
        ]
        .into_iter()
        .collect();
        let report = render(
            &results,
            Durations::QUICK,
            "cargo xtask bench server",
            SystemTime::now(),
            &["a note".to_owned()],
        );
        assert!(
            report.contains(
                "| Deno: sequential set | 1.00 k | 2.50 k | 2.5x | 9.00 k | ≥ 2x: **met** |"
            ),
            "{report}"
        );
        assert!(
            report.contains(
                "| load: write, 64 concurrent | 1.00 k | 5.00 k | 5.0x | 50.00 k | ≥ 10x: not met |"
            ),
            "{report}"
        );
        assert!(report.contains("10% of its in-memory rate"), "{report}");
    }

    #[test]
    fn parses_client_lines() {
        let deno =
            parse_deno("{\"op\":\"get\",\"n\":5,\"seconds\":1,\"ops_per_sec\":5,\"errors\":0}\n")
                .expect("parses");
        let get = deno.get("get").expect("get parsed");
        assert_eq!((get.ops_per_sec, get.errors, get.p50_us), (5.0, 0, None));
        let load = parse_load(
            "{\"op\":\"write\",\"concurrency\":16,\"ops_per_sec\":10.5,\"p50_us\":3,\
             \"p99_us\":9,\"errors\":1,\"server_cpu_us_per_op\":null}\n",
        )
        .expect("parses");
        assert_eq!(load[0].concurrency, 16);
        assert_eq!(load[0].server_cpu_us_per_op, None);
    }

    #[test]
    fn parses_latencies_and_large_write_outcomes() {
        let deno = parse_deno(
            "Deno says hello\n\
             {\"op\":\"set_obj_2048_seq\",\"n\":20,\"seconds\":0.5,\"ops_per_sec\":40,\
             \"errors\":0,\"p50_us\":310,\"p99_us\":900,\"max_us\":1200,\"in_flight\":1,\
             \"value_bytes\":2048}\n\
             {\"op\":\"large_concurrent_100\",\"n\":100,\"seconds\":60,\"ops_per_sec\":0.6,\
             \"errors\":0,\"p50_us\":1,\"p99_us\":2,\"max_us\":3,\"in_flight\":100,\
             \"value_bytes\":600000,\"timed_out\":true,\"completed\":37}\n\
             {\"op\":\"large_concurrent_200\",\"n\":200,\"seconds\":0,\"ops_per_sec\":0,\
             \"errors\":0,\"skipped\":true,\"timed_out\":false,\"completed\":0}\n",
        )
        .expect("parses");
        let set = &deno["set_obj_2048_seq"];
        assert_eq!(
            (set.p50_us, set.p99_us, set.max_us, set.value_bytes),
            (Some(310), Some(900), Some(1200), Some(2048))
        );
        assert!(!set.timed_out);
        let stalled = &deno["large_concurrent_100"];
        assert!(stalled.timed_out && !stalled.all_completed());
        assert_eq!(stalled.completed, Some(37));
        assert_eq!(
            large_cell(Some(stalled)),
            "**stalled**: 37 of 100 done in 60 s"
        );
        assert_eq!(
            large_cell(deno.get("large_concurrent_200")),
            "not run: a smaller round stalled"
        );
        assert!(parse_deno("{\"op\":\"set\"}").is_err());
    }

    /// A Deno op line with a rate and latencies, as `parse_deno` gives it.
    fn deno_op(ops_per_sec: f64, p50_us: u64, p99_us: u64) -> DenoOp {
        DenoOp {
            ops_per_sec,
            n: 100,
            seconds: 1.0,
            p50_us: Some(p50_us),
            p99_us: Some(p99_us),
            max_us: Some(p99_us),
            ..DenoOp::default()
        }
    }

    /// A large-write round of `count` writes that finished in `seconds`, or stalled.
    fn large(count: u64, seconds: f64, stalled: bool) -> DenoOp {
        DenoOp {
            ops_per_sec: count as f64 / seconds,
            n: count,
            seconds,
            timed_out: stalled,
            completed: Some(if stalled { count / 3 } else { count }),
            ..deno_op(0.0, 1000, 2000)
        }
    }

    /// The by-size ops of one server: (op, result).
    fn object_ops(
        obj_100_p50: u64,
        obj_16k_p50: u64,
        obj_2k_rate: f64,
        large_stalls: bool,
    ) -> ServerRun {
        let deno = [
            (object_op(100, 1), deno_op(3000.0, obj_100_p50, 900)),
            (object_op(16384, 1), deno_op(1000.0, obj_16k_p50, 2000)),
            (object_op(2048, 1), deno_op(obj_2k_rate, 400, 950)),
            (object_op(4096, 256), deno_op(9000.0, 20_000, 45_500)),
            (APP_INSERT_OP.to_owned(), deno_op(1500.0, 600, 1500)),
            ("large_concurrent_100".to_owned(), large(100, 0.71, false)),
            (
                "large_concurrent_200".to_owned(),
                large(200, 60.0, large_stalls),
            ),
        ]
        .into_iter()
        .collect();
        ServerRun {
            deno,
            ..ServerRun::default()
        }
    }

    #[test]
    fn report_marks_value_size_goals() {
        let results: BTreeMap<Server, ServerRun> = [
            (Server::Denokv, object_ops(300, 44_000, 22.0, false)),
            (Server::TuplekvDurable, object_ops(400, 800, 1500.0, false)),
            (Server::TuplekvMemory, object_ops(250, 700, 4000.0, false)),
        ]
        .into_iter()
        .collect();
        let report = render(&results, Durations::QUICK, "c", SystemTime::now(), &[]);
        assert!(report.contains("## Deno, by value size"), "{report}");
        assert!(
            report.contains(
                "| 2 KiB object | 1 | 22 | 0.40 / 0.95 | 1.50 k | 0.40 / 0.95 | 68.2x | 4.00 k \
                 | 0.40 / 0.95 | durable ≥ 50x denokv: **met** |"
            ),
            "{report}"
        );
        assert!(
            report.contains(
                "p50 ≤ 3x the 100 B p50, each tuplekv: **met** (tuplekv durable 2.0x, \
                 tuplekv in memory 2.8x) |"
            ),
            "{report}"
        );
        assert!(
            report.contains("| 4 KiB object | 256 | 9.00 k | 20.0 / 45.5 |"),
            "{report}"
        );
        assert!(
            report.contains("| index insert: check + ~2 KiB user + 2 index keys | 1 | 1.50 k |"),
            "{report}"
        );
        assert!(
            report.contains(
                "| atomic write of 10 × 60 kB | 200 | all in 60.00 s | 1.00 / 2.00 | \
                 all in 60.00 s | 1.00 / 2.00 | 1.0x |"
            ),
            "{report}"
        );
        assert!(
            report.contains("all complete, each tuplekv: **met** |"),
            "{report}"
        );
        // Rows nobody measured are still there, empty.
        assert!(
            report.contains("| 64 KiB object | 32 | — | — | — | — | — | — | — |  |"),
            "{report}"
        );
    }

    #[test]
    fn report_marks_value_size_goals_not_met() {
        let results: BTreeMap<Server, ServerRun> = [
            (Server::Denokv, object_ops(300, 44_000, 22.0, false)),
            (Server::TuplekvDurable, object_ops(400, 1320, 1000.0, true)),
            (Server::TuplekvMemory, object_ops(250, 700, 4000.0, false)),
        ]
        .into_iter()
        .collect();
        let report = render(&results, Durations::QUICK, "c", SystemTime::now(), &[]);
        assert!(
            report.contains("durable ≥ 50x denokv: not met |"),
            "{report}"
        );
        assert!(
            report.contains("each tuplekv: not met (tuplekv durable 3.3x, tuplekv in memory 2.8x)"),
            "{report}"
        );
        assert!(
            report.contains("| **stalled**: 66 of 200 done in 60 s | 1.00 / 2.00 | — |"),
            "{report}"
        );
        assert!(
            report.contains("all complete, each tuplekv: not met (tuplekv durable stalled) |"),
            "{report}"
        );
        // Without denokv's numbers the 50x goal cannot be judged.
        let only_ours: BTreeMap<Server, ServerRun> =
            [(Server::TuplekvDurable, object_ops(400, 800, 1500.0, false))]
                .into_iter()
                .collect();
        assert_eq!(
            object_2k_goal(&only_ours),
            "durable ≥ 50x denokv: not measured"
        );
        // A fast rate with failed writes is not a met goal.
        let mut failing = object_ops(400, 800, 1500.0, false);
        if let Some(op) = failing.deno.get_mut(&object_op(2048, 1)) {
            op.errors = 2;
        }
        let with_errors: BTreeMap<Server, ServerRun> = [
            (Server::Denokv, object_ops(300, 44_000, 22.0, false)),
            (Server::TuplekvDurable, failing),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            object_2k_goal(&with_errors),
            "durable ≥ 50x denokv: not met (tuplekv errors)"
        );
    }
}
