//! `cargo xtask bench remote`: code sequences through one `tuplekv serve` from several client
//! processes, beside Redis `INCR` and PostgreSQL `nextval`, and what the network adds to a
//! get and a commit.
//!
//! Builds `tuplekv` and the load process `remote_codes` with the bench profile, starts `tuplekv serve
//! --durability sync` on a free loopback port in a scratch directory, and runs
//! [`PROCESSES`] processes of `remote_codes` at once per workload (fast mode, gapless mode),
//! each with [`THREADS`] threads; their rates are summed. The same for Redis `INCR`
//! (unpipelined, a `redis-server` started for the run as the criterion benches do) and, when
//! PostgreSQL is installed, `SELECT nextval(...)` through `pgbench` processes against a
//! throw-away cluster. Last, one `remote_codes latency` process measures sequential get and
//! commit latency through the server and against an in-process durable `Database`. The
//! markdown report goes to standard output and `target/bench-reports/remote.md`.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

use tuplekv_harness::cmd;
use tuplekv_harness::redis::Redis;
use tuplekv_harness::server::{Running, Stderr, generate_token, scratch_dir};

use super::doc::{Doc, Table, publish, rate_cell, ratio_cell};
use super::fleet::{Measured, NO_TOKEN, run_at_once, run_client, sum_rates};
use super::{
    CLI_BIN, CLI_PACKAGE, Durations, LOAD_PACKAGE, PROCESSES, THREADS, build_bin, command_line,
    load_average, load_note,
};

/// The name `cargo xtask bench` routes here.
pub(crate) const GROUP: &str = "remote";
/// The load process.
const LOAD_BIN: &str = "remote_codes";
/// Threads per process of the rows that show a busy app server (many requests in flight at
/// once), where gapless mode's batches fill: gapless mode and Redis again, at this many.
const THREADS_BUSY: usize = 64;
/// Goal: fast mode's codes/s over Redis `INCR`'s.
const GOAL_FAST: f64 = 10.0;
/// Goal: gapless mode's codes/s over Redis `INCR`'s.
const GOAL_GAPLESS: f64 = 1.0;
/// The prefix of the fast sequence.
const PREFIX_FAST: &str = "FAST";
/// Prefix of the busy gapless row (a sequence of its own, so its numbers start at 1).
const PREFIX_GAPLESS_BUSY: &str = "BUSY";
/// Prefix of the row of the old mode (the handle checks the counter's versionstamp).
const PREFIX_GAPLESS_CHECKED: &str = "CHECKED";
/// The process counts of the scaling rows (each with [`THREADS`] threads), and the prefix
/// of each one's gapless sequence (a prefix may not end with a digit).
const SCALING: [(usize, &str); 3] = [(1, "ONE"), (4, "FOUR"), (16, "SIXTEEN")];
/// The labels of the gapless scaling rows, as [`SCALING`].
const GAPLESS_LABELS: [&str; 3] = [
    "tuplekv gapless, numbered in the store, 1 process",
    "tuplekv gapless, numbered in the store, 4 processes",
    "tuplekv gapless, numbered in the store, 16 processes",
];
/// The Redis rows the scaling rows compare with, as [`SCALING`].
const REDIS_LABELS: [&str; 3] = [
    "Redis `INCR`, unpipelined, 1 process",
    "Redis `INCR`, unpipelined, 4 processes",
    "Redis `INCR`, unpipelined, 16 processes",
];
/// The Redis row the busy rows compare with.
const REDIS_BUSY: &str = "Redis `INCR`, unpipelined, 4 processes x 64 connections";
/// The rows of the latency table: label, the remote series, the in-process series.
const LATENCY_ROWS: [(&str, &str, &str); 3] = [
    ("get", "get", "get"),
    ("commit", "commit", "commit"),
    (
        "commit; in process through `commit_async`, the path `tuplekv serve` commits by",
        "commit",
        "commit_async",
    ),
];
/// The user of the throw-away PostgreSQL cluster.
const PG_USER: &str = "bench";
/// The system user PostgreSQL runs as when the bench runs as root (it refuses to run as root).
const PG_SYSTEM_USER: &str = "postgres";
/// The script each pgbench connection repeats.
const PG_SCRIPT: &str = "SELECT nextval('codes');\n";

/// One row of the rate table.
#[derive(Debug, Clone, PartialEq)]
struct RateRow {
    label: &'static str,
    /// The label of the Redis row its ratio is over (the same concurrency).
    versus: &'static str,
    /// Summed codes/s, or why there is none.
    result: Result<Measured, String>,
    /// Goal over Redis `INCR`, if the row has one.
    goal: Option<f64>,
}

/// p50 and p99 in µs of one op on one store.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Latency {
    p50: f64,
    p99: f64,
}

/// [`PROCESSES`] `remote_codes WORKLOAD` processes against `url`, summed.
#[allow(
    clippy::too_many_arguments,
    reason = "one call per row, each argument named there"
)]
fn codes(
    load: &Path,
    workload: &str,
    url: &str,
    extra: &[&str],
    token: &str,
    d: Durations,
    processes: usize,
    threads: usize,
) -> Result<Measured> {
    let commands = (0..processes)
        .map(|_| {
            let mut c = Command::new(load);
            c.args([workload, "--url", url])
                .args(["--threads", &threads.to_string()])
                .args(["--seconds", &d.seconds.to_string()])
                .args(["--warmup", &d.warmup.to_string()])
                .args(extra)
                .env("DENO_KV_ACCESS_TOKEN", token);
            c
        })
        .collect();
    sum_rates(&run_at_once(commands, token)?)
}

/// Parses the latency lines: (store, op) to p50/p99.
fn parse_latency(output: &str) -> Result<Vec<(String, String, Latency)>> {
    output
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("latency line `{line}`"))?;
            let text = |k: &str| {
                v[k].as_str()
                    .map(str::to_owned)
                    .with_context(|| format!("no `{k}` in `{line}`"))
            };
            let num = |k: &str| {
                v[k].as_f64()
                    .with_context(|| format!("no `{k}` in `{line}`"))
            };
            Ok((
                text("store")?,
                text("op")?,
                Latency {
                    p50: num("p50_us")?,
                    p99: num("p99_us")?,
                },
            ))
        })
        .collect()
}

/// A throw-away PostgreSQL cluster on a free loopback port; stopped when dropped.
struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Run the server's commands as [`PG_SYSTEM_USER`] (the bench runs as root).
    as_postgres: bool,
}

impl Postgres {
    /// The directory holding `initdb`, `pg_ctl` and `pgbench`, if PostgreSQL is installed.
    fn find_bin() -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|rd| rd.flatten().map(|e| e.path().join("bin")).collect())
            .unwrap_or_default();
        dirs.sort();
        dirs.reverse();
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        dirs.into_iter().find(|d| {
            ["initdb", "pg_ctl", "pgbench"]
                .iter()
                .all(|b| d.join(b).is_file())
        })
    }

    /// A command running `program` of the cluster's binaries, as the right user.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", PG_SYSTEM_USER, "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// Creates and starts a cluster in `dir` with the sequence `codes`, or says why not.
    fn start(dir: &Path) -> Result<Postgres, String> {
        let bin = Postgres::find_bin().ok_or("not installed (no initdb, pg_ctl and pgbench)")?;
        let as_postgres = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let pg = Postgres {
            bin,
            data: dir.join("pgdata"),
            port,
            as_postgres,
        };
        if as_postgres {
            cmd::run(Command::new("chown").args([PG_SYSTEM_USER]).arg(dir))
                .map_err(|e| format!("chown of the scratch directory failed: {e:#}"))?;
        }
        let quiet = |c: &mut Command| {
            c.stdout(std::process::Stdio::null());
            cmd::run(c).map_err(|e| format!("{e:#}"))
        };
        quiet(
            pg.command("initdb")
                .args(["-A", "trust", "-U", PG_USER, "--no-sync", "-D"])
                .arg(&pg.data),
        )?;
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100",
            dir.display()
        );
        quiet(
            pg.command("pg_ctl")
                .args(["-w", "-D"])
                .arg(&pg.data)
                .args(["-l"])
                .arg(dir.join("postgres.log"))
                .args(["-o", &options, "start"]),
        )?;
        quiet(
            pg.command("psql")
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", PG_USER])
                .args(["-d", "postgres", "-c", "CREATE SEQUENCE codes"]),
        )?;
        Ok(pg)
    }

    /// [`PROCESSES`] pgbench processes of [`THREADS`] connections each, summed.
    fn nextval(&self, dir: &Path, d: Durations) -> Result<Measured> {
        let script = dir.join("nextval.sql");
        std::fs::write(&script, PG_SCRIPT).context("writing the pgbench script")?;
        let commands = (0..PROCESSES)
            .map(|_| {
                let mut c = Command::new(self.bin.join("pgbench"));
                c.args(["-n", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .args(["-U", PG_USER, "-c", &THREADS.to_string()])
                    .args([
                        "-j",
                        &THREADS.to_string(),
                        "-T",
                        &d.whole_seconds().to_string(),
                    ])
                    .arg("-f")
                    .arg(&script)
                    .arg("postgres");
                c
            })
            .collect();
        let mut total = Measured::default();
        // No token to hide: NUL never occurs in an argument.
        for out in run_at_once(commands, NO_TOKEN)? {
            total.per_sec += parse_pgbench_tps(&out)
                .with_context(|| format!("no `tps = ` line in pgbench's output:\n{out}"))?;
        }
        Ok(total)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-w", "-m", "fast", "-D"])
            .arg(&self.data)
            .arg("stop")
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// The rate of a pgbench report's `tps = N (without initial connection time)` line.
fn parse_pgbench_tps(output: &str) -> Option<f64> {
    output.lines().find_map(|l| {
        l.trim()
            .strip_prefix("tps = ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// The rate rows and the latency lines of one run.
struct Results {
    rows: Vec<RateRow>,
    latency: Result<Vec<(String, String, Latency)>, String>,
}

/// Measures everything against the server and the peers.
fn measure(bins: &(PathBuf, PathBuf), dir: &Path, d: Durations) -> Result<Results> {
    let (tuplekv, load) = bins;
    let token = generate_token()?;
    let server_dir = dir.join("server");
    let args = [
        "--path".into(),
        server_dir.join("data").into_os_string(),
        "--durability".into(),
        "sync".into(),
    ];
    std::fs::create_dir_all(&server_dir)?;
    let running = Running::tuplekv(tuplekv, &args, &token, Stderr::Log(dir.join("server.log")))?;
    let url = running.url();
    eprintln!("\n[bench remote] tuplekv serve --durability sync at {url}");
    let fast = codes(
        load,
        "fast",
        &url,
        &["--prefix", PREFIX_FAST],
        &token,
        d,
        PROCESSES,
        THREADS,
    );
    // Gapless rows at each process count, each on a sequence of its own.
    let gapless: Vec<Result<Measured>> = SCALING
        .iter()
        .map(|&(processes, prefix)| {
            codes(
                load,
                "gapless",
                &url,
                &["--prefix", prefix],
                &token,
                d,
                processes,
                THREADS,
            )
        })
        .collect();
    let gapless_checked = codes(
        load,
        "gapless-checked",
        &url,
        &["--prefix", PREFIX_GAPLESS_CHECKED],
        &token,
        d,
        PROCESSES,
        THREADS,
    );
    let gapless_busy = codes(
        load,
        "gapless",
        &url,
        &["--prefix", PREFIX_GAPLESS_BUSY],
        &token,
        d,
        PROCESSES,
        THREADS_BUSY,
    );
    let latency = run_client(
        Command::new(load)
            .args(["latency", "--url", &url, "--ops", &d.ops.to_string()])
            .arg("--data-dir")
            .arg(dir.join("in-process"))
            .env("DENO_KV_ACCESS_TOKEN", &token),
        &token,
    )
    .and_then(|out| parse_latency(&out))
    .map_err(|e| format!("{e:#}"));
    let status = running.stop()?;
    eprintln!("bench: tuplekv stopped ({status})");
    let (redis, redis_busy) = match Redis::start() {
        Ok(redis) => {
            eprintln!("\n[bench remote] redis-server at {}", redis.url());
            let at = |processes, threads| {
                codes(
                    load,
                    "redis-incr",
                    redis.url(),
                    &[],
                    &token,
                    d,
                    processes,
                    threads,
                )
                .map_err(|e| format!("{e:#}"))
            };
            let scaling: Vec<_> = SCALING.iter().map(|&(p, _)| at(p, THREADS)).collect();
            (scaling, at(PROCESSES, THREADS_BUSY))
        }
        Err(reason) => (
            SCALING.iter().map(|_| Err(reason.clone())).collect(),
            Err(reason),
        ),
    };
    let pg_dir = dir.join("postgres");
    std::fs::create_dir_all(&pg_dir)?;
    let postgres = match Postgres::start(&pg_dir) {
        Ok(pg) => {
            eprintln!("\n[bench remote] PostgreSQL on 127.0.0.1:{}", pg.port);
            pg.nextval(&pg_dir, d).map_err(|e| format!("{e:#}"))
        }
        Err(reason) => Err(reason),
    };
    let err = |r: Result<Measured>| r.map_err(|e| format!("{e:#}"));
    let mut rows = vec![RateRow {
        label: "tuplekv fast mode, RemoteStore, 4 processes",
        versus: REDIS_LABELS[1],
        result: err(fast),
        goal: Some(GOAL_FAST),
    }];
    let mut redis = redis.into_iter();
    for (i, g) in gapless.into_iter().enumerate() {
        rows.push(RateRow {
            label: GAPLESS_LABELS[i],
            versus: REDIS_LABELS[i],
            result: err(g),
            goal: Some(GOAL_GAPLESS),
        });
        rows.push(RateRow {
            label: REDIS_LABELS[i],
            versus: REDIS_LABELS[i],
            result: redis.next().unwrap_or_else(|| Err("not run".into())),
            goal: None,
        });
    }
    rows.extend([
        RateRow {
            label: "tuplekv gapless, checked counter (the old mode), 4 processes",
            versus: REDIS_LABELS[1],
            result: err(gapless_checked),
            goal: None,
        },
        RateRow {
            label: "PostgreSQL `nextval`, 4 processes",
            versus: REDIS_LABELS[1],
            result: postgres,
            goal: None,
        },
        RateRow {
            label: "tuplekv gapless, 4 processes x 64 threads",
            versus: REDIS_BUSY,
            result: err(gapless_busy),
            goal: Some(GOAL_GAPLESS),
        },
        RateRow {
            label: REDIS_BUSY,
            versus: REDIS_BUSY,
            result: redis_busy,
            goal: None,
        },
    ]);
    Ok(Results { rows, latency })
}

/// The markdown report.
fn render(results: &Results, command: &str, started: SystemTime, notes: &[String]) -> String {
    let mut doc = Doc::new(
        "Code sequences over KV Connect",
        command,
        started,
        &format!(
            "Client processes at once as each row says (1, 4 or 16), {THREADS} threads (or \
             connections) each ({THREADS_BUSY} in the last two rows, a busy app server's \
             requests in flight), each row compared with Redis at its own concurrency, against \
             one `tuplekv serve --durability sync` (fsync before acknowledging), one \
             `redis-server` (no persistence) and one PostgreSQL cluster, all on loopback. One \
             run; codes/s summed over the processes; store commits and refused commits summed \
             over the processes' handles (warm-up included)."
        ),
    );
    let rate_of = |label: &str| {
        results
            .rows
            .iter()
            .find(|r| r.label == label)
            .and_then(|r| r.result.as_ref().ok())
            .map(|m| m.per_sec)
            .filter(|r| *r > 0.0)
    };
    let mut rates = Table::new([
        "workload",
        "codes/s",
        "vs Redis `INCR`",
        "store commits (refused)",
        "goal",
    ]);
    for row in &results.rows {
        let ratio = row
            .result
            .as_ref()
            .ok()
            .zip(rate_of(row.versus))
            .map(|(m, r)| m.per_sec / r);
        let goal = match (row.goal, ratio) {
            (None, _) => String::new(),
            (Some(g), None) => format!("≥ {g}x Redis: not measured"),
            (Some(g), Some(r)) if r >= g => format!("≥ {g}x Redis: **met**"),
            (Some(g), Some(_)) => format!("≥ {g}x Redis: not met"),
        };
        let commits = match &row.result {
            Ok(Measured {
                commits: Some(c),
                conflicts,
                ..
            }) => format!("{c} ({})", conflicts.unwrap_or(0)),
            _ => "—".to_owned(),
        };
        rates.row([
            row.label.to_owned(),
            rate_cell(&row.result),
            ratio_cell(ratio),
            commits,
            goal,
        ]);
    }
    doc.table(&rates);
    doc.section(
        "What the network costs",
        "Sequential, one thread: a point read (`Store::get_latest_raw`) and a commit of one \
         100-byte set, through `RemoteStore` to the server above, and on an in-process durable \
         `Database` (sync durability, same disk), in alternating turns of 100. µs, p50 / p99.",
    );
    match &results.latency {
        Ok(lines) => {
            let mut latencies = Table::new([
                "op",
                "RemoteStore",
                "in-process Database",
                "added by the network (p50)",
            ]);
            for (label, remote_op, local_op) in LATENCY_ROWS {
                let find = |store: &str, op: &str| {
                    lines
                        .iter()
                        .find(|(s, o, _)| s == store && o == op)
                        .map(|(_, _, l)| *l)
                };
                let cell = |l: Option<Latency>| {
                    l.map_or_else(
                        || "—".to_owned(),
                        |l| format!("{:.1} / {:.1}", l.p50, l.p99),
                    )
                };
                let (remote, local) = (find("remote", remote_op), find("in_process", local_op));
                let added = match (remote, local) {
                    (Some(r), Some(l)) => format!("{:+.1}", r.p50 - l.p50),
                    _ => "—".to_owned(),
                };
                latencies.row([label.to_owned(), cell(remote), cell(local), added]);
            }
            doc.table(&latencies);
        }
        Err(e) => doc.text(&format!("Not measured: {e}\n")),
    }
    let mut all_notes = notes.to_vec();
    for row in &results.rows {
        match &row.result {
            Ok(m) => all_notes.extend(m.notes(row.label)),
            Err(e) => all_notes.push(format!("{}: not measured: {e}", row.label)),
        }
    }
    doc.finish(all_notes)
}

/// Runs `cargo xtask bench remote` (with `--quick`: a smoke run).
pub(crate) fn run(quick: bool) -> Result<()> {
    let started = SystemTime::now();
    let d = Durations::of(quick);
    let bins = (
        build_bin(CLI_PACKAGE, CLI_BIN)?,
        build_bin(LOAD_PACKAGE, LOAD_BIN)?,
    );
    let load_before = load_average();
    let dir = scratch_dir("bench-remote")?;
    let results = measure(&bins, &dir, d);
    let _ = std::fs::remove_dir_all(&dir);
    let results = results?;
    let command = command_line(GROUP, quick);
    let notes = [load_note(&load_before)];
    publish(&render(&results, &command, started, &notes), GROUP, started)?;
    let ours_failed = results.rows.iter().take(2).any(|r| r.result.is_err());
    if ours_failed || results.latency.is_err() {
        bail!("the remote bench failed; see the notes of the report");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_tps() {
        let out = "number of failed transactions: 0 (0.000%)\n\
                   tps = 12345.678901 (without initial connection time)\n";
        assert_eq!(parse_pgbench_tps(out), Some(12345.678901));
        assert_eq!(parse_pgbench_tps("nothing"), None);
    }

    #[test]
    fn report_marks_the_goals_against_redis() {
        let ok = |per_sec| {
            Ok(Measured {
                per_sec,
                commits: Some(7),
                conflicts: Some(2),
                ..Measured::default()
            })
        };
        let results = Results {
            rows: vec![
                RateRow {
                    label: "tuplekv fast mode, RemoteStore",
                    versus: REDIS_LABELS[1],
                    result: ok(200_000.0),
                    goal: Some(GOAL_FAST),
                },
                RateRow {
                    label: "tuplekv gapless mode, RemoteStore",
                    versus: REDIS_LABELS[1],
                    result: ok(5_000.0),
                    goal: Some(GOAL_GAPLESS),
                },
                RateRow {
                    label: REDIS_LABELS[1],
                    versus: REDIS_LABELS[1],
                    result: ok(10_000.0),
                    goal: None,
                },
                RateRow {
                    label: "PostgreSQL `nextval`",
                    versus: REDIS_LABELS[1],
                    result: Err("not installed".into()),
                    goal: None,
                },
                RateRow {
                    label: "tuplekv gapless mode, 64 threads per process",
                    versus: REDIS_BUSY,
                    result: ok(30_000.0),
                    goal: Some(GOAL_GAPLESS),
                },
                RateRow {
                    label: REDIS_BUSY,
                    versus: REDIS_BUSY,
                    result: ok(20_000.0),
                    goal: None,
                },
            ],
            latency: parse_latency(
                "{\"store\":\"remote\",\"op\":\"get\",\"p50_us\":150.5,\"p99_us\":900}\n\
                 {\"store\":\"in_process\",\"op\":\"get\",\"p50_us\":0.5,\"p99_us\":2}\n",
            )
            .map_err(|e| e.to_string()),
        };
        let report = render(&results, "cargo xtask bench remote", SystemTime::now(), &[]);
        assert!(
            report.contains(
                "| tuplekv fast mode, RemoteStore | 200.00 k | 20.00x | 7 (2) | ≥ 10x Redis: **met** |"
            ),
            "{report}"
        );
        assert!(
            report.contains("0.50x | 7 (2) | ≥ 1x Redis: not met |"),
            "{report}"
        );
        // The busy row is compared with Redis at its own concurrency.
        assert!(
            report.contains(
                "| tuplekv gapless mode, 64 threads per process | 30.00 k | 1.50x | 7 (2) | ≥ 1x Redis: **met** |"
            ),
            "{report}"
        );
        assert!(
            report.contains("| PostgreSQL `nextval` | — (not installed) | — | — |"),
            "{report}"
        );
        assert!(
            report.contains("| get | 150.5 / 900.0 | 0.5 / 2.0 | +150.0 |"),
            "{report}"
        );
        assert!(report.contains("| commit | — | — | — |"), "{report}");
        assert!(
            report.contains("| commit; in process through `commit_async`"),
            "{report}"
        );
    }
}
