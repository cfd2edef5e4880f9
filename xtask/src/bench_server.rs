//! `cargo xtask bench server`: tuplekv's KV Connect server against denokv, side by side.
//!
//! Builds `tuplekv` (crate `tuplekv-cli`) and the load generator `kvconnect_load` (crate
//! `tuplekv-benches`) in release mode, gets the Deno binary and denokv through
//! [`crate::clients`], then starts, one at a time, each server on a loopback port with a fresh
//! random token and a fresh data directory: denokv (SQLite on disk, its defaults: every commit
//! synced on its own), `tuplekv serve --durability sync`, and `tuplekv serve` in memory (which
//! separates the protocol's cost from the fsync's). Against each it runs the Deno client bench
//! (`bench/server/deno_bench.ts`) and the load generator, then stops it with SIGTERM. The
//! side-by-side table, with the goals of issue 22 marked met or not, goes to standard output
//! and to `target/bench-reports/server.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use crate::server_process::{Running, Stderr, generate_token, scratch_dir, wait_with_deadline};
use crate::{bench, clients, cmd, report};

/// The name `cargo xtask bench` routes here.
pub(crate) const GROUP: &str = "server";
/// The package and binary of the tuplekv server.
pub(crate) const CLI_PACKAGE: &str = "tuplekv-cli";
pub(crate) const CLI_BIN: &str = "tuplekv";
/// The package of the load generators.
pub(crate) const LOAD_PACKAGE: &str = "tuplekv-benches";
/// The load generator of this bench.
const LOAD_BIN: &str = "kvconnect_load";
/// The Deno client bench, relative to the workspace root.
const DENO_SCRIPT: &str = "bench/server/deno_bench.ts";
/// The Deno and denokv versions `clients` installs, shown in the report.
const DENO_VERSION: &str = "2.9.6";
const DENOKV_VERSION: &str = "0.14.0";
/// Set to a `tuplekv` binary to use it instead of building one (for trying another branch's).
const SERVER_BIN_ENV: &str = "TUPLEKV_BENCH_SERVER_BIN";
/// Time one client run (the Deno bench or the load generator) may take before it is killed.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(240);
/// Goal: tuplekv durable over denokv on each sequential Deno op.
const GOAL_SEQUENTIAL: f64 = 2.0;
/// Goal: tuplekv durable over denokv on 32 concurrent durable sets from Deno.
const GOAL_CONCURRENT_SETS: f64 = 10.0;
/// Goal: tuplekv durable over denokv at 64 concurrent writes from the load generator.
const GOAL_LOAD_WRITES: f64 = 10.0;
/// Concurrency of the load generator's goal point.
const GOAL_LOAD_CONCURRENCY: u64 = 64;
/// The Deno ops in table order: (op name printed by the script, row label).
const DENO_OPS: [(&str, &str); 4] = [
    ("set", "Deno: sequential set"),
    ("get", "Deno: sequential get"),
    ("cas", "Deno: sequential get + check + set"),
    ("set_concurrent_32", "Deno: 32 concurrent sets"),
];

/// How long each client measures.
#[derive(Debug, Clone, Copy)]
struct Durations {
    /// Measured operations per Deno op.
    deno_ops: u32,
    /// Unmeasured operations before each Deno op.
    deno_warmup: u32,
    /// Measured seconds per load generator point.
    load_seconds: f64,
    /// Unmeasured seconds before each load generator point.
    load_warmup: f64,
}

/// A full run: about a minute per server.
const FULL: Durations = Durations {
    deno_ops: 2000,
    deno_warmup: 200,
    load_seconds: 3.0,
    load_warmup: 0.5,
};

/// `--quick`: a smoke run of a few seconds per server.
const QUICK: Durations = Durations {
    deno_ops: 200,
    deno_warmup: 20,
    load_seconds: 0.5,
    load_warmup: 0.1,
};

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
    /// Set when `tuplekv` came from `SERVER_BIN_ENV` rather than this workspace's release build.
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

/// What one server measured.
#[derive(Debug, Default)]
struct Measured {
    /// Deno op name to ops/s (and errors).
    deno: BTreeMap<String, (f64, u64)>,
    load: Vec<LoadPoint>,
    /// Log syncs per acknowledged write, when the server's log says.
    syncs_per_write: Option<f64>,
    /// Why this server's run failed, if it did.
    failure: Option<String>,
}

/// The cargo target directory's release binary `name`.
fn release_bin(name: &str) -> PathBuf {
    bench::target_dir().join("release").join(name)
}

/// Builds binary `bin` of `package` in release mode and returns its path.
pub(crate) fn build_release(package: &str, bin: &str) -> Result<PathBuf> {
    cmd::run(cmd::cargo().args(["build", "--release", "-p", package, "--bin", bin]))?;
    Ok(release_bin(bin))
}

/// Builds what is not given and installs the clients.
fn binaries() -> Result<Binaries> {
    let (tuplekv, tuplekv_note) = match std::env::var_os(SERVER_BIN_ENV) {
        Some(path) => {
            let path = PathBuf::from(path);
            let note = format!(
                "tuplekv was `{}` ({SERVER_BIN_ENV}), not this workspace's release build{}.",
                path.display(),
                if path.components().any(|c| c.as_os_str() == "debug") {
                    ": a debug build, so its numbers say nothing about speed"
                } else {
                    ""
                }
            );
            eprintln!("xtask: {note}");
            (path, Some(note))
        }
        None => (build_release(CLI_PACKAGE, CLI_BIN)?, None),
    };
    Ok(Binaries {
        tuplekv,
        tuplekv_note,
        load: build_release(LOAD_PACKAGE, LOAD_BIN)?,
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

/// Runs a client with its standard output captured (standard error inherited), killing it
/// after `CLIENT_TIMEOUT`; fails unless it exits successfully.
pub(crate) fn run_client(command: &mut Command, token: &str) -> Result<String> {
    let shown = cmd::display(command).replace(token, "<token>");
    eprintln!("$ {shown}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let mut stdout = child.stdout.take().context("stdout not captured")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let status = match wait_with_deadline(&mut child, CLIENT_TIMEOUT)? {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{shown}` took over {CLIENT_TIMEOUT:?} and was killed");
        }
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(text)
}

/// The Deno bench's result lines: op name to (ops/s, errors).
fn parse_deno(output: &str) -> Result<BTreeMap<String, (f64, u64)>> {
    let mut ops = BTreeMap::new();
    for line in output.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("Deno bench line `{line}`"))?;
        let op = v["op"].as_str().context("Deno bench line without `op`")?;
        let rate = v["ops_per_sec"]
            .as_f64()
            .context("line without `ops_per_sec`")?;
        ops.insert(op.to_owned(), (rate, v["errors"].as_u64().unwrap_or(0)));
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
fn measure(server: Server, bins: &Binaries, durations: Durations) -> Result<Measured> {
    let dir = scratch_dir(&format!(
        "bench-server-{}",
        server.label().replace(' ', "-")
    ))?;
    let result = measure_in(server, bins, durations, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_in(server: Server, bins: &Binaries, d: Durations, dir: &Path) -> Result<Measured> {
    let token = generate_token()?;
    let log = dir.join("server.log");
    let running = start(server, bins, dir, &log, &token)?;
    eprintln!("\n[bench server] {} at {}", server.label(), running.url());
    let deno = run_client(
        Command::new(&bins.deno)
            .args(["run", "-A", "--unstable-kv"])
            .arg(cmd::workspace_root().join(DENO_SCRIPT))
            .arg(running.url())
            .arg(d.deno_ops.to_string())
            .arg(d.deno_warmup.to_string())
            .env("DENO_KV_ACCESS_TOKEN", &token)
            .env("DENO_NO_UPDATE_CHECK", "1"),
        &token,
    );
    let load = run_client(
        Command::new(&bins.load)
            .args(["--url", &running.url(), "--label", server.label()])
            .args(["--seconds", &d.load_seconds.to_string()])
            .args(["--warmup", &d.load_warmup.to_string()])
            .args(["--server-pid", &running.pid().to_string()])
            .env("DENO_KV_ACCESS_TOKEN", &token),
        &token,
    );
    let status = running.stop()?;
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!("xtask: {} stopped ({status})", server.label());
    let mut measured = Measured {
        syncs_per_write: syncs_per_write(&log),
        ..Measured::default()
    };
    let mut failures = Vec::new();
    match deno.and_then(|out| parse_deno(&out)) {
        Ok(ops) => measured.deno = ops,
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

/// `rate` ops/s for a table cell: `1.23 k`, `845`.
pub(crate) fn rate(ops_per_sec: f64) -> String {
    if ops_per_sec >= 1000.0 {
        format!("{:.2} k", ops_per_sec / 1000.0)
    } else {
        format!("{ops_per_sec:.0}")
    }
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
fn rows(results: &BTreeMap<Server, Measured>) -> Vec<Row> {
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
                .filter_map(|(s, m)| m.deno.get(op).map(|c| (*s, *c)))
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
fn load_points(results: &BTreeMap<Server, Measured>) -> Vec<(String, u64)> {
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
    results: &BTreeMap<Server, Measured>,
    command: &str,
    started: SystemTime,
    extra_notes: &[String],
) -> String {
    let mut out = String::from("# KV Connect servers, side by side\n\n");
    let _ = writeln!(
        out,
        "`{command}`, {}, {}. Deno {} client; denokv {} (SQLite on disk, its defaults: each \
         commit synced on its own, no write batching); `tuplekv serve --durability sync` \
         (fsync before acknowledging, group commit); tuplekv in memory (no fsync: the \
         protocol's cost alone). Ops/s, one run; ratio = tuplekv durable / denokv.\n",
        report::utc_date(started),
        report::machine(),
        DENO_VERSION,
        DENOKV_VERSION,
    );
    out.push_str("| op | denokv | tuplekv durable | ratio | tuplekv in memory | goal |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for row in rows(results) {
        let ratio = row
            .ratio()
            .map_or_else(|| "—".to_owned(), |r| format!("{r:.1}x"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {ratio} | {} | {} |",
            row.label,
            row.cell(Server::Denokv),
            row.cell(Server::TuplekvDurable),
            row.cell(Server::TuplekvMemory),
            row.goal_cell(),
        );
    }
    out.push_str(&where_time_goes(results));
    out.push_str(&notes(results, extra_notes));
    out
}

/// Latencies and server CPU per operation of the load generator's points, and what they say.
fn where_time_goes(results: &BTreeMap<Server, Measured>) -> String {
    let mut out = String::from(
        "\n## Where the server's time goes (load generator)\n\n\
         p50 / p99 latency in µs, and the server process's CPU time per operation in µs \
         (from /proc; the rest of a request is waiting: for the disk, the network or the \
         client).\n\n| point |",
    );
    for server in Server::ALL {
        let _ = write!(
            out,
            " {} p50 / p99 | {} CPU/op |",
            server.label(),
            server.label()
        );
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|".repeat(Server::ALL.len()));
    out.push('\n');
    let points = load_points(results);
    for (op, concurrency) in &points {
        let _ = write!(out, "| {op}, {concurrency} concurrent |");
        for server in Server::ALL {
            let point = results.get(&server).and_then(|m| {
                m.load
                    .iter()
                    .find(|p| &p.op == op && p.concurrency == *concurrency)
            });
            match point {
                Some(p) => {
                    let cpu = p
                        .server_cpu_us_per_op
                        .map_or_else(|| "—".to_owned(), |c| format!("{c:.0}"));
                    let _ = write!(out, " {} / {} | {cpu} |", p.p50_us, p.p99_us);
                }
                None => out.push_str(" — | — |"),
            }
        }
        out.push('\n');
    }
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
    out
}

/// Sync counts, failures and caveats.
fn notes(results: &BTreeMap<Server, Measured>, extra_notes: &[String]) -> String {
    let mut out = String::from("\n## Notes\n\n");
    for note in extra_notes {
        let _ = writeln!(out, "- {note}");
    }
    match results
        .get(&Server::TuplekvDurable)
        .and_then(|m| m.syncs_per_write)
    {
        Some(s) => {
            let _ = writeln!(
                out,
                "- tuplekv durable: {s:.3} log syncs per acknowledged write over the whole run \
                 (from its shutdown log)."
            );
        }
        None => out.push_str(
            "- fsyncs per acknowledged write: not reported; the server does not expose the \
             engine's log sync count (no `log_syncs=` in its log).\n",
        ),
    }
    for (server, m) in results {
        if let Some(failure) = &m.failure {
            let _ = writeln!(out, "- {} failed: {failure}", server.label());
        }
    }
    out.push_str(
        "- Absolute rates on a shared 2-core machine move ±20–40% between runs; compare within \
         a row. The load generator, the Deno client and the server share the cores.\n",
    );
    out
}

/// The one-minute load average from `/proc/loadavg`, or `?`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Prints `report` and writes it to `target/bench-reports/<name>.md`, saying where and how
/// long the run since `started` took.
pub(crate) fn publish(report: &str, name: &str, started: SystemTime) -> Result<()> {
    println!("{report}");
    let dir = bench::target_dir().join("bench-reports");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.md"));
    std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "report: {} ({:.0} s)",
        cmd::relative(&path),
        started.elapsed().map_or(0.0, |d| d.as_secs_f64())
    );
    Ok(())
}

/// Runs `cargo xtask bench server` (with `--quick`: a smoke run).
pub(crate) fn run(quick: bool) -> Result<()> {
    let started = SystemTime::now();
    let durations = if quick { QUICK } else { FULL };
    let bins = binaries()?;
    let load_before = load_average();
    let mut results = BTreeMap::new();
    for server in Server::ALL {
        let measured = match measure(server, &bins, durations) {
            Ok(m) => m,
            Err(e) => Measured {
                failure: Some(format!("{e:#}")),
                ..Measured::default()
            },
        };
        if let Some(f) = &measured.failure {
            eprintln!("xtask: {} failed: {f}", server.label());
        }
        results.insert(server, measured);
    }
    let command = if quick {
        "cargo xtask bench --quick server"
    } else {
        "cargo xtask bench server"
    };
    let mut extra_notes: Vec<String> = bins.tuplekv_note.iter().cloned().collect();
    extra_notes.push(format!(
        "Load average (1 min) of the machine: {load_before} before the servers ran, {} after; \
         above the core count, other work competed with this run.",
        load_average()
    ));
    publish(
        &render(&results, command, started, &extra_notes),
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

    fn measured(set: f64, write64: f64) -> Measured {
        Measured {
            deno: [("set".to_owned(), (set, 0))].into_iter().collect(),
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
            ..Measured::default()
        }
    }

    #[test]
    fn report_marks_goals() {
        let results: BTreeMap<Server, Measured> = [
            (Server::Denokv, measured(1000.0, 1000.0)),
            (Server::TuplekvDurable, measured(2500.0, 5000.0)),
            (Server::TuplekvMemory, measured(9000.0, 50000.0)),
        ]
        .into_iter()
        .collect();
        let report = render(
            &results,
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
        assert_eq!(deno.get("get"), Some(&(5.0, 0)));
        let load = parse_load(
            "{\"op\":\"write\",\"concurrency\":16,\"ops_per_sec\":10.5,\"p50_us\":3,\
             \"p99_us\":9,\"errors\":1,\"server_cpu_us_per_op\":null}\n",
        )
        .expect("parses");
        assert_eq!(load[0].concurrency, 16);
        assert_eq!(load[0].server_cpu_us_per_op, None);
    }
}
