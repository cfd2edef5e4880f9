//! `cargo xtask bench etcd`: tuplekv on a 3-member etcd cluster on loopback, beside the raw
//! etcd transaction rate through the same client crate and beside Redis `INCR`.
//!
//! Builds the load process `etcd_load` (and `remote_codes`, whose `redis-incr` workload is the
//! Redis peer) with the bench profile, starts the cluster with the test kit's harness (the
//! same members and flags as the etcd tests; its `leader_within` names the leader), and runs
//! `PROCESSES` load processes at once per workload, each with `THREADS` threads; their rates
//! are summed:
//! - checked commits through `EtcdStore` (one key check and one set each) and raw etcd
//!   transactions (one `mod_revision` comparison and one put each), alternating for
//!   [`ROUNDS`] rounds so that drift in the machine's load hits both alike; the ratio of
//!   their means is our layer's overhead (goal: at least [`GOAL_OF_RAW`]);
//! - codes/s in fast and gapless mode through `Sequences<EtcdStore>`: gapless numbered in
//!   the store at 1, `PROCESSES` and 16 processes, and in the old checked mode, each row with
//!   its commits and the ones refused by the counter (checks the handle's old mode lost,
//!   plus etcd transactions the store resent after a moved counter refused them);
//! - unpipelined Redis `INCR` (a `redis-server` without persistence started for the run).
//!
//! Around each workload it reads every member's `/metrics` and reports the leader's WAL
//! fsyncs (`etcd_disk_wal_fsync_duration_seconds`), its backend commits and the peer round
//! trip, which is where a Raft commit's time goes. The markdown report goes to standard
//! output and `target/bench-reports/etcd.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use tuplekv_harness::redis::Redis;
use tuplekv_testkit::etcd::{Cluster as EtcdCluster, READY_TIMEOUT};

use super::doc::{Doc, Table, latency, publish, rate_cell, ratio_cell};
use super::fleet::{Measured, NO_TOKEN, run_at_once, sum_rates};
use super::{
    Durations, LOAD_PACKAGE, PROCESSES, THREADS, build_bin, command_line, load_average, load_note,
};

/// The name `cargo xtask bench` routes here.
pub(crate) const GROUP: &str = "etcd";
/// The load process of the etcd workloads.
const LOAD_BIN: &str = "etcd_load";
/// The load process whose `redis-incr` workload is the Redis peer.
const REDIS_BIN: &str = "remote_codes";
/// Members of the cluster.
const MEMBERS: usize = 3;
/// Rounds of the alternating checked / raw pair.
const ROUNDS: usize = 2;
/// Goal: checked commits/s through `EtcdStore` over raw etcd transactions/s.
const GOAL_OF_RAW: f64 = 0.8;
/// The full load: [`PROCESSES`] processes of [`THREADS`] threads.
const LOADED: (usize, usize) = (PROCESSES, THREADS);
/// One process of one thread: a commit's latency with nothing else in flight.
const SEQUENTIAL: (usize, usize) = (1, 1);
/// Longest wait for one `/metrics` answer.
const METRICS_TIMEOUT: Duration = Duration::from_secs(3);
/// The etcd metrics the report reads: histogram sums and counts, summed over their labels.
const WAL_FSYNC: &str = "etcd_disk_wal_fsync_duration_seconds";
const BACKEND_COMMIT: &str = "etcd_disk_backend_commit_duration_seconds";
const PEER_RTT: &str = "etcd_network_peer_round_trip_time_seconds";
const PROPOSALS: &str = "etcd_server_proposals_committed_total";

/// A summed rate of one workload, with what the leader's metrics moved by.
#[derive(Debug, Clone, PartialEq, Default)]
struct WithLeader {
    /// The fleet's summed rate.
    rate: Measured,
    /// What the leader's metrics moved by during the workload.
    leader: Option<Delta>,
}

/// The change of the leader's metrics over one workload (warm-up included).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Delta {
    fsyncs: f64,
    fsync_seconds: f64,
    backend_commits: f64,
    backend_seconds: f64,
    proposals: f64,
}

/// Parses etcd's Prometheus text: every sample of the metrics the report reads, summed over
/// their labels, by name (`<histogram>_sum`, `<histogram>_count`, `<counter>`).
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or(name_labels);
        let wanted = [WAL_FSYNC, BACKEND_COMMIT, PEER_RTT]
            .iter()
            .any(|h| name == format!("{h}_sum") || name == format!("{h}_count"))
            || name == PROPOSALS;
        if let (true, Ok(v)) = (wanted, value.trim().parse::<f64>()) {
            *out.entry(name.to_owned()).or_insert(0.0) += v;
        }
    }
    out
}

/// A member's `/metrics`, parsed; `None` if it does not answer.
fn metrics(client_url: &str) -> Option<BTreeMap<String, f64>> {
    let addr = client_url.strip_prefix("http://")?;
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&addr, METRICS_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(METRICS_TIMEOUT)).ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| parse_metrics(body))
}

/// What the metrics moved by from `before` to `after`.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Delta {
    let d = |name: String| {
        after.get(&name).copied().unwrap_or(0.0) - before.get(&name).copied().unwrap_or(0.0)
    };
    Delta {
        fsyncs: d(format!("{WAL_FSYNC}_count")),
        fsync_seconds: d(format!("{WAL_FSYNC}_sum")),
        backend_commits: d(format!("{BACKEND_COMMIT}_count")),
        backend_seconds: d(format!("{BACKEND_COMMIT}_sum")),
        proposals: d(PROPOSALS.to_owned()),
    }
}

/// The test kit's cluster (the same members and flags as the etcd tests) and which member
/// leads it.
struct Cluster {
    members: EtcdCluster,
    urls: Vec<String>,
    leader: usize,
}

impl Cluster {
    /// Starts [`MEMBERS`] members and asks them which one leads.
    fn start() -> Result<Cluster> {
        let members = EtcdCluster::try_start(MEMBERS)
            .map_err(|why| anyhow::anyhow!("starting a {MEMBERS}-member etcd cluster: {why}"))?;
        let leader = members.leader_within(READY_TIMEOUT).with_context(|| {
            format!("no member of the etcd cluster named a leader within {READY_TIMEOUT:?}")
        })?;
        let urls = members.client_urls();
        Ok(Cluster {
            members,
            urls,
            leader,
        })
    }

    fn leader_metrics(&self) -> Option<BTreeMap<String, f64>> {
        metrics(self.urls.get(self.leader)?)
    }

    /// Stops the members and removes their data.
    fn stop(self) {
        drop(self.members);
    }
}

/// [`PROCESSES`] `etcd_load WORKLOAD` processes against the cluster, summed, with the
/// leader's metrics around them.
fn etcd_workload(
    load: &Path,
    cluster: &Cluster,
    workload: &str,
    prefix: &str,
    d: Durations,
    (processes, threads): (usize, usize),
) -> Result<WithLeader> {
    eprintln!("\n[bench etcd] {workload}, {processes} x {threads}");
    let before = cluster.leader_metrics();
    let commands = (0..processes)
        .map(|_| {
            let mut c = Command::new(load);
            c.args([workload, "--endpoints", &cluster.urls.join(",")])
                .args(["--threads", &threads.to_string()])
                .args(["--seconds", &d.seconds.to_string()])
                .args(["--warmup", &d.warmup.to_string()])
                .args(["--prefix", prefix]);
            c
        })
        .collect();
    let mut measured = WithLeader {
        rate: sum_rates(&run_at_once(commands, NO_TOKEN)?)?,
        leader: None,
    };
    if let (Some(before), Some(after)) = (before, cluster.leader_metrics()) {
        measured.leader = Some(delta(&before, &after));
    }
    Ok(measured)
}

/// The mean of the rounds' rates (the first round's other fields, errors summed).
fn mean(rounds: Vec<WithLeader>) -> Option<WithLeader> {
    let n = rounds.len() as f64;
    let mut it = rounds.into_iter();
    let mut out = it.next()?;
    for r in it {
        out.rate.per_sec += r.rate.per_sec;
        out.rate.errors += r.rate.errors;
        out.rate.first_error = out.rate.first_error.or(r.rate.first_error);
        out.rate.p50_us = out.rate.p50_us.zip(r.rate.p50_us).map(|(a, b)| a.max(b));
        out.rate.p99_us = out.rate.p99_us.zip(r.rate.p99_us).map(|(a, b)| a.max(b));
        if let (Some(a), Some(b)) = (&mut out.leader, r.leader) {
            a.fsyncs += b.fsyncs;
            a.fsync_seconds += b.fsync_seconds;
            a.backend_commits += b.backend_commits;
            a.backend_seconds += b.backend_seconds;
            a.proposals += b.proposals;
        }
    }
    out.rate.per_sec /= n;
    if let Some(l) = &mut out.leader {
        l.fsyncs /= n;
        l.fsync_seconds /= n;
        l.backend_commits /= n;
        l.backend_seconds /= n;
        l.proposals /= n;
    }
    Some(out)
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    label: &'static str,
    result: Result<WithLeader, String>,
}

/// Labels of the rows (the report and the goal find them by these).
const CHECKED: &str = "checked commit through `EtcdStore` (1 check + 1 set)";
const RAW: &str = "raw etcd txn, `etcd-client` (1 compare + 1 put)";
const SEQ_CHECKED: &str = "checked commit through `EtcdStore`, 1 process x 1 thread";
const SEQ_RAW: &str = "raw etcd txn, 1 process x 1 thread";
const FAST: &str = "codes, fast mode, `Sequences<EtcdStore>`";
const GAPLESS: &str = "codes, gapless mode, `Sequences<EtcdStore>`, numbered in the store";
const GAPLESS_ONE: &str = "codes, gapless mode, numbered in the store, 1 process x 4 threads";
const GAPLESS_SIXTEEN: &str =
    "codes, gapless mode, numbered in the store, 16 processes x 4 threads";
const GAPLESS_CHECKED: &str = "codes, gapless mode, checked counter (the old mode)";
/// Process counts of the gapless rows beside the loaded one, with their labels and store
/// prefixes (each row a sequence of its own).
const GAPLESS_SCALING: [(usize, &str, &str); 2] = [
    (1, GAPLESS_ONE, "gapless-one/"),
    (16, GAPLESS_SIXTEEN, "gapless-sixteen/"),
];
const REDIS: &str = "Redis `INCR`, unpipelined, no persistence";

/// Everything one run measured.
struct Results {
    rows: Vec<Row>,
    /// The leader's mean peer round trip as etcd's prober saw it, ms, if its metrics said.
    peer_rtt_ms: Option<f64>,
    /// Seconds one workload's metrics delta covers (its window and warm-up), per round.
    window_seconds: f64,
}

/// Measures every workload.
fn measure(load: &Path, redis_load: &Path, d: Durations) -> Result<Results> {
    let cluster = Cluster::start()?;
    eprintln!(
        "\n[bench etcd] {MEMBERS} members at {}; leader {}",
        cluster.urls.join(","),
        cluster.leader
    );
    let err = |r: Result<WithLeader>| r.map_err(|e| format!("{e:#}"));
    let (mut checked, mut raw) = (Vec::new(), Vec::new());
    let mut pair_error = None;
    for round in 0..ROUNDS {
        for (workload, into) in [("raw-txn", &mut raw), ("checked", &mut checked)] {
            let prefix = format!("bench{round}/");
            match etcd_workload(load, &cluster, workload, &prefix, d, LOADED) {
                Ok(m) => into.push(m),
                Err(e) => pair_error = Some(format!("{e:#}")),
            }
        }
    }
    let pair = |v: Vec<WithLeader>| {
        mean(v).ok_or_else(|| pair_error.clone().unwrap_or_else(|| "not run".to_owned()))
    };
    let (checked, raw) = (pair(checked), pair(raw));
    let seq_checked = err(etcd_workload(
        load, &cluster, "checked", "seq/", d, SEQUENTIAL,
    ));
    let seq_raw = err(etcd_workload(
        load, &cluster, "raw-txn", "seq/", d, SEQUENTIAL,
    ));
    let fast = err(etcd_workload(load, &cluster, "fast", "codes/", d, LOADED));
    let gapless = err(etcd_workload(
        load, &cluster, "gapless", "gapless/", d, LOADED,
    ));
    let scaling: Vec<Row> = GAPLESS_SCALING
        .iter()
        .map(|&(processes, label, prefix)| Row {
            label,
            result: err(etcd_workload(
                load,
                &cluster,
                "gapless",
                prefix,
                d,
                (processes, THREADS),
            )),
        })
        .collect();
    let gapless_checked = err(etcd_workload(
        load,
        &cluster,
        "gapless-checked",
        "gapless-checked/",
        d,
        LOADED,
    ));
    // etcd probes its peers every few seconds: the cumulative mean since the start.
    let peer_rtt_ms = cluster.leader_metrics().and_then(|m| {
        let count = m.get(&format!("{PEER_RTT}_count"))?;
        let sum = m.get(&format!("{PEER_RTT}_sum"))?;
        (*count > 0.0).then(|| sum / count * 1000.0)
    });
    cluster.stop();
    let redis = match Redis::start() {
        Ok(redis) => {
            eprintln!("\n[bench etcd] redis-server at {}", redis.url());
            let commands = (0..PROCESSES)
                .map(|_| {
                    let mut c = Command::new(redis_load);
                    c.args(["redis-incr", "--url", redis.url()])
                        .args(["--threads", &THREADS.to_string()])
                        .args(["--seconds", &d.seconds.to_string()])
                        .args(["--warmup", &d.warmup.to_string()]);
                    c
                })
                .collect();
            err(run_at_once(commands, NO_TOKEN)
                .and_then(|o| sum_rates(&o))
                .map(|rate| WithLeader { rate, leader: None }))
        }
        Err(reason) => Err(reason),
    };
    let mut rows = vec![
        Row {
            label: CHECKED,
            result: checked,
        },
        Row {
            label: RAW,
            result: raw,
        },
        Row {
            label: SEQ_CHECKED,
            result: seq_checked,
        },
        Row {
            label: SEQ_RAW,
            result: seq_raw,
        },
        Row {
            label: FAST,
            result: fast,
        },
        Row {
            label: GAPLESS,
            result: gapless,
        },
    ];
    rows.extend(scaling);
    rows.push(Row {
        label: GAPLESS_CHECKED,
        result: gapless_checked,
    });
    rows.push(Row {
        label: REDIS,
        result: redis,
    });
    Ok(Results {
        rows,
        peer_rtt_ms,
        window_seconds: d.seconds + d.warmup,
    })
}

/// The rate of the row `label`, if it was measured.
fn rate_of(results: &Results, label: &str) -> Option<f64> {
    results
        .rows
        .iter()
        .find(|r| r.label == label)
        .and_then(|r| r.result.as_ref().ok())
        .map(|m| m.rate.per_sec)
        .filter(|r| *r > 0.0)
}

/// The raw etcd row that row `label` is compared with (the same concurrency), if any.
fn raw_peer(label: &str) -> Option<&'static str> {
    match label {
        CHECKED | RAW => Some(RAW),
        SEQ_CHECKED | SEQ_RAW => Some(SEQ_RAW),
        _ => None,
    }
}

/// The markdown report.
fn render(results: &Results, command: &str, started: SystemTime, notes: &[String]) -> String {
    let mut doc = Doc::new(
        "tuplekv on a 3-member etcd cluster",
        command,
        started,
        &format!(
            "etcd {MEMBERS} members on loopback (the test kit's harness), {PROCESSES} client \
             processes at once, {THREADS} threads each (the `1 x 1` rows: one process of one \
             thread, a commit with nothing else in flight); the loaded checked and raw rows \
             alternate for {ROUNDS} rounds (mean shown), and `vs raw etcd txn` compares with the \
             raw row at the same concurrency. One run; ops/s summed over the processes; latency \
             is the worst process's p50 / p99 per operation."
        ),
    );
    let raw = rate_of(results, RAW);
    let redis = rate_of(results, REDIS);
    let mut table = Table::new([
        "workload",
        "ops/s",
        "p50 / p99",
        "vs raw etcd txn",
        "vs Redis `INCR`",
        "leader WAL fsyncs/s (mean ms)",
        "Raft proposals per leader fsync",
        "commits (refused by the counter)",
    ]);
    for row in &results.rows {
        let rate = row
            .result
            .as_ref()
            .map(|m| m.rate.clone())
            .map_err(Clone::clone);
        let Ok(m) = &row.result else {
            table.row([row.label.to_owned(), rate_cell(&rate)]);
            continue;
        };
        let latency = match (m.rate.p50_us, m.rate.p99_us) {
            (Some(a), Some(b)) => format!("{} / {}", latency(a), latency(b)),
            _ => "—".to_owned(),
        };
        let ratio = |peer: Option<f64>| ratio_cell(peer.map(|p| m.rate.per_sec / p));
        let (fsync, per_fsync) = match m.leader {
            Some(l) if l.fsyncs > 0.0 => (
                format!(
                    "{:.0} ({:.2})",
                    l.fsyncs / results.window_seconds,
                    l.fsync_seconds / l.fsyncs * 1000.0
                ),
                format!("{:.1}", l.proposals / l.fsyncs),
            ),
            _ => ("—".to_owned(), "—".to_owned()),
        };
        let refused = m.rate.conflicts.unwrap_or(0) + m.rate.counter_retries.unwrap_or(0);
        let commits = m
            .rate
            .commits
            .map_or_else(|| "—".to_owned(), |c| format!("{c} ({refused})"));
        table.row([
            row.label.to_owned(),
            rate_cell(&rate),
            latency,
            ratio(raw_peer(row.label).and_then(|peer| rate_of(results, peer))),
            ratio(redis),
            fsync,
            per_fsync,
            commits,
        ]);
    }
    doc.table(&table);
    let mut out = String::new();
    let goal = match (rate_of(results, CHECKED), raw) {
        (Some(c), Some(r)) if c / r >= GOAL_OF_RAW => {
            format!("{:.2} of raw, goal ≥ {GOAL_OF_RAW}: **met**", c / r)
        }
        (Some(c), Some(r)) => format!("{:.2} of raw, goal ≥ {GOAL_OF_RAW}: not met", c / r),
        _ => format!("goal ≥ {GOAL_OF_RAW} of raw: not measured"),
    };
    let _ = writeln!(out, "\nOur layer's overhead: checked commits {goal}.");
    doc.text(&out);
    let mut all_notes = notes.to_vec();
    if let Some(rtt) = results.peer_rtt_ms {
        all_notes.push(format!(
            "Leader's mean peer round trip (etcd's own periodic probe, `{PEER_RTT}`, so not \
             under the bench's load): {rtt:.2} ms."
        ));
    }
    for row in &results.rows {
        match &row.result {
            Ok(m) => {
                all_notes.extend(m.rate.notes(row.label));
                if let Some(l) = m.leader.filter(|l| l.backend_commits > 0.0) {
                    all_notes.push(format!(
                        "{}: the leader committed {:.0} Raft proposals, {:.0} WAL fsyncs \
                         ({:.2} ms mean) and {:.0} backend commits ({:.2} ms mean), warm-up \
                         included (per round).",
                        row.label,
                        l.proposals,
                        l.fsyncs,
                        l.fsync_seconds / l.fsyncs.max(1.0) * 1000.0,
                        l.backend_commits,
                        l.backend_seconds / l.backend_commits * 1000.0
                    ));
                }
            }
            Err(e) => all_notes.push(format!("{}: not measured: {e}", row.label)),
        }
    }
    all_notes.push(
        "Where the time goes: every etcd write is a Raft proposal; the leader appends it to its \
         WAL and fsyncs, sends it to the followers, who fsync theirs, and answers once a \
         majority has it. Concurrent proposals share fsyncs (proposals per leader fsync above \
         1). All three members share the machine's one disk."
            .to_owned(),
    );
    doc.finish(all_notes)
}

/// Runs `cargo xtask bench etcd` (with `--quick`: a smoke run).
pub(crate) fn run(quick: bool) -> Result<()> {
    let started = SystemTime::now();
    let d = Durations::of(quick);
    let load: PathBuf = build_bin(LOAD_PACKAGE, LOAD_BIN)?;
    let redis_load: PathBuf = build_bin(LOAD_PACKAGE, REDIS_BIN)?;
    let load_before = load_average();
    let results = measure(&load, &redis_load, d)?;
    let command = command_line(GROUP, quick);
    let notes = [load_note(&load_before)];
    publish(&render(&results, &command, started, &notes), GROUP, started)?;
    let ours_failed = results
        .rows
        .iter()
        .any(|r| r.label != REDIS && r.result.is_err());
    if ours_failed {
        bail!("the etcd bench failed; see the notes of the report");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_histograms_summed_over_labels() {
        let text = "# HELP x\n\
            etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 3\n\
            etcd_disk_wal_fsync_duration_seconds_sum 0.25\n\
            etcd_disk_wal_fsync_duration_seconds_count 100\n\
            etcd_network_peer_round_trip_time_seconds_sum{To=\"a\"} 0.5\n\
            etcd_network_peer_round_trip_time_seconds_sum{To=\"b\"} 0.25\n\
            etcd_server_proposals_committed_total 42\n\
            etcd_server_is_leader 1\n\
            go_goroutines 7\n";
        let m = parse_metrics(text);
        assert_eq!(
            m.get("etcd_disk_wal_fsync_duration_seconds_count"),
            Some(&100.0)
        );
        assert_eq!(
            m.get("etcd_network_peer_round_trip_time_seconds_sum"),
            Some(&0.75)
        );
        assert_eq!(m.get("etcd_server_proposals_committed_total"), Some(&42.0));
        assert!(!m.contains_key("go_goroutines"));
        let mut after = m.clone();
        after.insert("etcd_disk_wal_fsync_duration_seconds_count".into(), 150.0);
        assert_eq!(delta(&m, &after).fsyncs, 50.0);
    }

    #[test]
    fn report_gives_the_ratio_to_raw_and_the_goal() {
        let ok = |per_sec| {
            Ok(WithLeader {
                rate: Measured {
                    per_sec,
                    p50_us: Some(1500.0),
                    p99_us: Some(4000.0),
                    ..Measured::default()
                },
                leader: Some(Delta {
                    fsyncs: 1100.0,
                    fsync_seconds: 1.1,
                    proposals: 4950.0,
                    ..Delta::default()
                }),
            })
        };
        let results = Results {
            rows: vec![
                Row {
                    label: CHECKED,
                    result: ok(900.0),
                },
                Row {
                    label: RAW,
                    result: ok(1000.0),
                },
                Row {
                    label: FAST,
                    result: ok(50_000.0),
                },
                Row {
                    label: GAPLESS,
                    result: Err("boom".into()),
                },
                Row {
                    label: REDIS,
                    result: ok(20_000.0),
                },
            ],
            peer_rtt_ms: Some(0.2),
            window_seconds: 5.5,
        };
        let report = render(&results, "cargo xtask bench etcd", SystemTime::now(), &[]);
        assert!(
            report.contains(&format!(
                "| {CHECKED} | 900 | 1.50 ms / 4.00 ms | 0.90x | 0.04x | 200 (1.00) | 4.5 | — |"
            )),
            "{report}"
        );
        assert!(
            report.contains("0.90 of raw, goal ≥ 0.8: **met**"),
            "{report}"
        );
        assert!(
            report.contains(&format!("| {GAPLESS} | — (boom) |")),
            "{report}"
        );
        assert!(report.contains("0.20 ms"), "{report}");
        assert_eq!(latency(0.03), "0.03 µs");
    }
}
