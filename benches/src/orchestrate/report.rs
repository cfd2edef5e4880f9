//! The benchmark report: reads criterion's results under `target/criterion/`, keeps the ones
//! measured in this run, and writes `target/bench-report/report.md` (one table per group: ours,
//! each peer, the ratio) and `target/bench-report/ratios.svg` (a bar chart of the ratios).
//!
//! Conventions the benches follow (see `benches/src/lib.rs`):
//! - a criterion group is named `<area>/<workload>[/<variant>]`;
//! - inside it, our implementation's function id starts with `tuplekv` (the one named exactly
//!   `tuplekv`, else the first, is the reference for ratios) and every other id is a peer;
//! - a peer that cannot run here is not faked: the bench writes one line
//!   `<group>\t<peer>\t<reason>` to the file named by `TUPLEKV_BENCH_SKIPPED`, and the report
//!   lists it as skipped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde_json::Value;
use tuplekv_harness::cmd;

use super::doc::Table;

/// One measured benchmark.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measurement {
    /// Criterion group id, e.g. `engine/get`.
    pub(crate) group: String,
    /// Implementation, e.g. `tuplekv` or `btreemap_rwlock`.
    pub(crate) function: String,
    /// Parameter (e.g. thread count), if any.
    pub(crate) param: Option<String>,
    /// Median time per iteration, in nanoseconds.
    pub(crate) median_ns: f64,
    /// Elements per iteration, when the bench declared a throughput.
    pub(crate) elements: Option<u64>,
}

impl Measurement {
    /// Operations per second, if the bench declared elements per iteration.
    fn ops_per_sec(&self) -> Option<f64> {
        self.elements.map(|n| n as f64 / (self.median_ns * 1e-9))
    }
}

/// A peer the benches could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub(crate) group: String,
    pub(crate) peer: String,
    pub(crate) reason: String,
}

/// Whether `function` is one of ours.
fn is_ours(function: &str) -> bool {
    function.starts_with("tuplekv")
}

/// Reads every `new/benchmark.json` under `criterion_dir` written at or after `since`.
pub(crate) fn collect(criterion_dir: &Path, since: SystemTime) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let mut stack = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "report") {
                    continue;
                }
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "benchmark.json")
                && path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "new")
            {
                let fresh = fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since);
                if fresh && let Some(m) = read_one(&path)? {
                    out.push(m);
                }
            }
        }
    }
    out.sort_by(|a, b| {
        (&a.group, &a.param, !is_ours(&a.function), &a.function).cmp(&(
            &b.group,
            &b.param,
            !is_ours(&b.function),
            &b.function,
        ))
    });
    Ok(out)
}

/// Reads one benchmark's description and estimates.
fn read_one(benchmark_json: &Path) -> Result<Option<Measurement>> {
    let read = |p: &Path| -> Result<Value> {
        let text = fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    };
    let bench = read(benchmark_json)?;
    let estimates = read(&benchmark_json.with_file_name("estimates.json"))?;
    let (Some(group), Some(function), Some(median_ns)) = (
        bench["group_id"].as_str(),
        bench["function_id"].as_str(),
        estimates["median"]["point_estimate"].as_f64(),
    ) else {
        return Ok(None);
    };
    Ok(Some(Measurement {
        group: group.to_owned(),
        function: function.to_owned(),
        param: bench["value_str"].as_str().map(str::to_owned),
        median_ns,
        elements: bench["throughput"]["Elements"].as_u64(),
    }))
}

/// Reads the skipped-peers file (missing file: nothing skipped).
pub(crate) fn read_skipped(path: &Path) -> Vec<Skipped> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out: Vec<Skipped> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            Some(Skipped {
                group: parts.next()?.to_owned(),
                peer: parts.next()?.to_owned(),
                reason: parts.next()?.to_owned(),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.group, &a.peer).cmp(&(&b.group, &b.peer)));
    out.dedup();
    out
}

/// A ratio row for the chart: label and peer-time / our-time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ratio {
    pub(crate) label: String,
    pub(crate) ratio: f64,
}

fn human_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn human_rate(ops: f64) -> String {
    if ops >= 1e6 {
        format!("{:.2} M/s", ops / 1e6)
    } else if ops >= 1e3 {
        format!("{:.1} k/s", ops / 1e3)
    } else {
        format!("{ops:.0} /s")
    }
}

/// Splits a benchmark parameter into its setting and round: `"1 thread(s), round 2"` is
/// `("1 thread(s)", 2)` and `"round 3"` is `("", 3)`; `None` without a round.
fn split_round(param: &str) -> Option<(&str, u32)> {
    let (setting, round) = param.rsplit_once(", ").unwrap_or(("", param));
    let n = round.strip_prefix("round ")?.parse().ok()?;
    Some((setting, n))
}

/// The median of `values` (`None` if empty).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    let upper = *values.get(mid)?;
    Some(if values.len() % 2 == 1 {
        upper
    } else {
        (values[mid - 1] + upper) / 2.0
    })
}

/// The store size a setting names: `"10k records"` is 10,000, `"2M records"` 2,000,000.
fn records_in(setting: &str) -> Option<f64> {
    let count = setting.strip_suffix(" records")?;
    let (digits, scale) = match count.as_bytes().last()? {
        b'k' => (&count[..count.len() - 1], 1e3),
        b'M' => (&count[..count.len() - 1], 1e6),
        _ => (count, 1.0),
    };
    Some(digits.parse::<f64>().ok()? * scale)
}

/// For a group measured on stores of several sizes (settings `"<n> records"`), one row per
/// implementation: its time on the largest store over its time on the smallest, round by
/// round (the median over rounds). Near 1 means a commit costs the same whatever the store
/// holds; a cost that grows with the store shows at once, in one run.
fn growth_rows(table: &mut Table, rows: &[&Measurement]) {
    /// One measurement on a sized store: records, setting, median ns.
    type Sized<'a> = (f64, &'a str, f64);
    let mut sized: BTreeMap<(&str, u32), Vec<Sized<'_>>> = BTreeMap::new();
    for m in rows {
        let Some((setting, round)) = m.param.as_deref().and_then(split_round) else {
            continue;
        };
        if let Some(records) = records_in(setting) {
            sized
                .entry((m.function.as_str(), round))
                .or_default()
                .push((records, setting, m.median_ns));
        }
    }
    // function -> (smallest setting, largest setting, per-round ratios)
    let mut growth: BTreeMap<&str, (&str, &str, Vec<f64>)> = BTreeMap::new();
    for ((function, _), mut sizes) in sized {
        sizes.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (Some(small), Some(large)) = (sizes.first(), sizes.last()) else {
            continue;
        };
        if small.0 < large.0 {
            let entry = growth
                .entry(function)
                .or_insert((small.1, large.1, Vec::new()));
            entry.2.push(large.2 / small.2);
        }
    }
    for (function, (small, large, per_round)) in growth {
        let rounds = per_round.len();
        if let Some(ratio) = median(per_round) {
            table.row([
                function.to_owned(),
                format!("growth: time at {large} / at {small}, median of {rounds} round(s)"),
                "-".to_owned(),
                "-".to_owned(),
                format!("{ratio:.2}x"),
            ]);
        }
    }
}

/// The Markdown report and the ratios for the chart.
pub(crate) fn render(
    measurements: &[Measurement],
    skipped: &[Skipped],
    machine: &str,
    date: &str,
    command: &str,
    notes: &[String],
) -> (String, Vec<Ratio>) {
    let mut md = String::new();
    let mut ratios = Vec::new();
    let _ = writeln!(md, "# tuplekv benchmark report\n");
    let _ = writeln!(
        md,
        "- date: {date}\n- machine: {machine}\n- command: `{command}`"
    );
    for note in notes {
        let _ = writeln!(md, "- {note}");
    }
    let _ = writeln!(
        md,
        "- ratio = peer's median time / ours (above 1: we are faster). Medians from criterion; \
         this machine is shared, so read ratios within a table, not absolute numbers across runs.\n"
    );
    let mut groups: BTreeMap<&str, Vec<&Measurement>> = BTreeMap::new();
    for m in measurements {
        groups.entry(m.group.as_str()).or_default().push(m);
    }
    if groups.is_empty() {
        let _ = writeln!(md, "No results were measured in this run.\n");
    }
    for (group, rows) in &groups {
        let _ = writeln!(md, "## {group}\n");
        let mut table = Table::new([
            "implementation",
            "parameter",
            "median time",
            "throughput",
            "ratio",
        ]);
        let reference_of = |m: &Measurement| {
            rows.iter()
                .copied()
                .filter(|r| r.param == m.param && is_ours(&r.function))
                .min_by_key(|r| (r.function != "tuplekv", r.function.clone()))
        };
        for m in rows {
            let reference = reference_of(m);
            let ratio = match reference {
                Some(ours) if !is_ours(&m.function) => {
                    let r = m.median_ns / ours.median_ns;
                    let param = m
                        .param
                        .as_deref()
                        .map_or(String::new(), |p| format!(" [{p}]"));
                    ratios.push(Ratio {
                        label: format!("{group}{param}: vs {}", m.function),
                        ratio: r,
                    });
                    format!("{r:.2}x")
                }
                Some(ours) if ours.function == m.function => "reference".to_owned(),
                Some(ours) => format!("{:.2}x", m.median_ns / ours.median_ns),
                None => "no tuplekv row".to_owned(),
            };
            let name = if is_ours(&m.function) {
                format!("**{}**", m.function)
            } else {
                m.function.clone()
            };
            table.row([
                name,
                m.param.as_deref().unwrap_or("-").to_owned(),
                human_time(m.median_ns),
                m.ops_per_sec().map_or("-".to_owned(), human_rate),
                ratio,
            ]);
        }
        // A row measured in alternating rounds (`round 1`, `round 2`, ...) against the
        // reference: the median of its per-round ratios, which the machine's drift moves far
        // less than any one round's. One median per row name and setting (`1 thread(s), round
        // 2` is round 2 of the setting `1 thread(s)`). Our own variants (such as a reader
        // with no writer beside it) get one too.
        let mut by_round: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
        for m in rows.iter() {
            let Some((setting, _)) = m.param.as_deref().and_then(split_round) else {
                continue;
            };
            if let Some(ours) = reference_of(m).filter(|r| r.function != m.function) {
                by_round
                    .entry((m.function.as_str(), setting))
                    .or_default()
                    .push(m.median_ns / ours.median_ns);
            }
        }
        for ((peer, setting), per_round) in by_round.into_iter().filter(|(_, r)| r.len() >= 2) {
            let rounds = per_round.len();
            let Some(median) = median(per_round) else {
                continue;
            };
            let setting = if setting.is_empty() {
                String::new()
            } else {
                format!("{setting}, ")
            };
            table.row([
                peer.to_owned(),
                format!("{setting}median of {rounds} rounds"),
                "-".to_owned(),
                "-".to_owned(),
                format!("{median:.2}x"),
            ]);
        }
        growth_rows(&mut table, rows);
        for s in skipped.iter().filter(|s| s.group == *group) {
            table.row([&s.peer, "-", "skipped", "-", &s.reason]);
        }
        md.push_str(&table.render());
        md.push('\n');
    }
    let orphans: Vec<&Skipped> = skipped
        .iter()
        .filter(|s| !groups.contains_key(s.group.as_str()))
        .collect();
    if !orphans.is_empty() {
        let _ = writeln!(md, "## Skipped peers\n");
        for s in orphans {
            let _ = writeln!(md, "- {} / {}: {}", s.group, s.peer, s.reason);
        }
        md.push('\n');
    }
    let _ = writeln!(md, "![ratios](ratios.svg)");
    (md, ratios)
}

/// Escapes text for SVG.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart of the ratios on a log scale, 1x in the middle.
pub(crate) fn svg(ratios: &[Ratio]) -> String {
    let row = 22.0;
    let label_w = 560.0;
    let chart_w = 420.0;
    let top = 40.0;
    let height = top + row * ratios.len().max(1) as f64 + 40.0;
    let width = label_w + chart_w + 80.0;
    // log10 scale, clamped to [1/100, 100].
    let span = 2.0;
    let x_of = |r: f64| {
        let l = if r.is_nan() {
            0.0
        } else {
            r.clamp(1e-2, 1e2).log10()
        };
        label_w + chart_w / 2.0 + l / span * (chart_w / 2.0)
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14">peer time / tuplekv time (log scale; right of 1x: tuplekv faster)</text>"#
    );
    for (tick, label) in [
        (0.01, "0.01x"),
        (0.1, "0.1x"),
        (1.0, "1x"),
        (10.0, "10x"),
        (100.0, "100x"),
    ] {
        let x = x_of(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{}" stroke="{}" />"##,
            height - 30.0,
            if tick == 1.0 { "#333" } else { "#ddd" }
        );
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle">{label}</text>"#,
            height - 15.0
        );
    }
    for (i, r) in ratios.iter().enumerate() {
        let y = top + row * i as f64;
        let (x0, x1) = (x_of(1.0), x_of(r.ratio));
        let (left, w) = if x1 >= x0 {
            (x0, x1 - x0)
        } else {
            (x1, x0 - x1)
        };
        let colour = if r.ratio >= 1.0 { "#2a7ab9" } else { "#d9534f" };
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            label_w - 8.0,
            y + 15.0,
            xml(&r.label)
        );
        let _ = writeln!(
            s,
            r#"<rect x="{left:.1}" y="{}" width="{:.1}" height="{}" fill="{colour}"/>"#,
            y + 4.0,
            w.max(1.0),
            row - 8.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}">{:.2}x</text>"#,
            left + w.max(1.0) + 4.0,
            y + 15.0,
            r.ratio
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The CPU model and core count, for the report.
pub(crate) fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cpu}, {cores} cores available, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Writes the report files; returns the report's path.
pub(crate) fn write(
    out_dir: &Path,
    measurements: &[Measurement],
    skipped: &[Skipped],
    command: &str,
    notes: &[String],
) -> Result<PathBuf> {
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let (md, ratios) = render(
        measurements,
        skipped,
        &machine(),
        &cmd::utc_date(SystemTime::now()),
        command,
        notes,
    );
    let report = out_dir.join("report.md");
    fs::write(&report, md).with_context(|| format!("writing {}", report.display()))?;
    let chart = out_dir.join("ratios.svg");
    fs::write(&chart, svg(&ratios)).with_context(|| format!("writing {}", chart.display()))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(group: &str, function: &str, param: Option<&str>, ns: f64) -> Measurement {
        Measurement {
            group: group.into(),
            function: function.into(),
            param: param.map(Into::into),
            median_ns: ns,
            elements: Some(1),
        }
    }

    #[test]
    fn ratios_compare_each_peer_with_ours_at_the_same_parameter() {
        let rows = [
            m("engine/get", "tuplekv", Some("1"), 100.0),
            m("engine/get", "btreemap_rwlock", Some("1"), 50.0),
            m("engine/get", "tuplekv", Some("2"), 100.0),
            m("engine/get", "btreemap_rwlock", Some("2"), 300.0),
        ];
        let skipped = [Skipped {
            group: "engine/get".into(),
            peer: "denokv_sqlite".into(),
            reason: "could not build".into(),
        }];
        let (md, ratios) = render(&rows, &skipped, "cpu", "the date", "cargo xtask bench", &[]);
        assert_eq!(
            ratios,
            [
                Ratio {
                    label: "engine/get [1]: vs btreemap_rwlock".into(),
                    ratio: 0.5
                },
                Ratio {
                    label: "engine/get [2]: vs btreemap_rwlock".into(),
                    ratio: 3.0
                },
            ]
        );
        assert!(
            md.contains("| **tuplekv** | 1 | 100.0 ns | 10.00 M/s | reference |"),
            "{md}"
        );
        assert!(
            md.contains("| denokv_sqlite | - | skipped | - | could not build |"),
            "{md}"
        );
        let chart = svg(&ratios);
        assert_eq!(chart.matches("<rect x=").count(), 2);
    }

    #[test]
    fn alternating_rounds_get_the_median_of_their_per_round_ratios() {
        let rows = [
            m("index/get", "tuplekv", Some("round 1"), 100.0),
            m("index/get", "hand_engine", Some("round 1"), 70.0),
            m("index/get", "tuplekv", Some("round 2"), 100.0),
            m("index/get", "hand_engine", Some("round 2"), 110.0),
            m("index/get", "tuplekv", Some("round 3"), 100.0),
            m("index/get", "hand_engine", Some("round 3"), 95.0),
            m("index/get", "denokv_sqlite", Some("round 1"), 9000.0),
        ];
        let (md, ratios) = render(&rows, &[], "cpu", "the date", "cargo xtask bench", &[]);
        assert_eq!(ratios.len(), 4, "one chart bar per round and peer");
        assert!(
            md.contains("| hand_engine | median of 3 rounds | - | - | 0.95x |"),
            "{md}"
        );
        assert!(
            !md.contains("denokv_sqlite | median"),
            "a peer measured once has no median row: {md}"
        );
    }

    #[test]
    fn notes_follow_the_header_one_line_each() {
        let rows = [m("engine/get", "tuplekv", None, 100.0)];
        let notes = ["vCPU handoff: engine 25 ns before, 197 ns after".to_owned()];
        let (md, _) = render(&rows, &[], "cpu", "the date", "cargo xtask bench", &notes);
        assert!(
            md.contains(
                "- command: `cargo xtask bench`\n- vCPU handoff: engine 25 ns before, 197 ns after\n"
            ),
            "{md}"
        );
    }

    #[test]
    fn our_own_variant_in_rounds_gets_a_median_of_its_ratios_to_the_reference() {
        let mut rows = Vec::new();
        for (round, alone) in [(1, 80.0), (2, 95.0), (3, 70.0)] {
            let p = format!("round {round}");
            rows.push(m("engine/get_under_write", "tuplekv", Some(&p), 100.0));
            rows.push(m(
                "engine/get_under_write",
                "tuplekv_alone",
                Some(&p),
                alone,
            ));
        }
        let (md, ratios) = render(&rows, &[], "cpu", "the date", "cargo xtask bench", &[]);
        assert!(
            md.contains("| tuplekv_alone | median of 3 rounds | - | - | 0.80x |"),
            "{md}"
        );
        assert!(
            !md.contains("| tuplekv | median"),
            "the reference has no ratio to itself: {md}"
        );
        assert!(ratios.is_empty(), "the chart shows peers only");
    }

    #[test]
    fn rounds_of_each_setting_get_their_own_median() {
        let mut rows = Vec::new();
        for (round, peer_1t, peer_2t) in
            [(1, 2000.0, 900.0), (2, 2600.0, 1100.0), (3, 2400.0, 1000.0)]
        {
            let p = |t: u32| format!("{t} thread(s), round {round}");
            rows.push(m("engine/get", "tuplekv", Some(&p(1)), 100.0));
            rows.push(m("engine/get", "denokv_sqlite", Some(&p(1)), peer_1t));
            rows.push(m("engine/get", "tuplekv", Some(&p(2)), 50.0));
            rows.push(m("engine/get", "denokv_sqlite", Some(&p(2)), peer_2t));
        }
        let (md, _) = render(&rows, &[], "cpu", "the date", "cargo xtask bench", &[]);
        assert!(
            md.contains("| denokv_sqlite | 1 thread(s), median of 3 rounds | - | - | 24.00x |"),
            "{md}"
        );
        assert!(
            md.contains("| denokv_sqlite | 2 thread(s), median of 3 rounds | - | - | 20.00x |"),
            "{md}"
        );
        assert_eq!(split_round("round 3"), Some(("", 3)));
        assert_eq!(
            split_round("2 thread(s), round 1"),
            Some(("2 thread(s)", 1))
        );
        assert_eq!(split_round("2 thread(s)"), None);
        assert_eq!(split_round("2 thread(s), round x"), None);
    }

    #[test]
    fn stores_of_two_sizes_get_a_growth_row_per_implementation() {
        let mut rows = Vec::new();
        for (round, small, large) in [(1, 100.0, 110.0), (2, 100.0, 300.0), (3, 100.0, 120.0)] {
            let p = |size: &str| format!("{size} records, round {round}");
            rows.push(m("index/insert", "tuplekv", Some(&p("10k")), small));
            rows.push(m("index/insert", "tuplekv", Some(&p("100k")), large));
            rows.push(m("index/insert", "hand_engine", Some(&p("10k")), small));
            rows.push(m(
                "index/insert",
                "hand_engine",
                Some(&p("100k")),
                5.0 * small,
            ));
        }
        rows.push(m(
            "index/insert",
            "denokv_sqlite",
            Some("10k records, round 1"),
            900.0,
        ));
        let (md, _) = render(&rows, &[], "cpu", "the date", "cargo xtask bench", &[]);
        assert!(
            md.contains(
                "| tuplekv | growth: time at 100k records / at 10k records, median of 3 round(s) | - | - | 1.20x |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| hand_engine | growth: time at 100k records / at 10k records, median of 3 round(s) | - | - | 5.00x |"),
            "{md}"
        );
        assert!(
            !md.contains("| denokv_sqlite | growth"),
            "one size has no growth: {md}"
        );
        assert_eq!(records_in("10k records"), Some(10_000.0));
        assert_eq!(records_in("2M records"), Some(2_000_000.0));
        assert_eq!(records_in("500 records"), Some(500.0));
        assert_eq!(records_in("1 thread(s)"), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
