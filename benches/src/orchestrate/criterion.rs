//! The criterion bench groups of `tuplekv-benches`, run with their peers' servers, then the
//! report (`report.rs`) of what this run measured.
//!
//! A bench group is one file `benches/benches/<group>.rs`, i.e. one `[[bench]]` target of this
//! package. Peers that need a server get it here: when `redis-server` is on the `PATH`, one is
//! started on a free loopback port for the run (and stopped after it), and its address is
//! passed in `TUPLEKV_REDIS_URL`; otherwise the benches report Redis as skipped.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

use tuplekv_harness::redis::Redis;

use tuplekv_harness::{benches, cmd};

use super::{handoff, report};

/// The directory holding one `<group>.rs` per bench group.
fn groups_dir() -> PathBuf {
    cmd::workspace_root().join("benches").join("benches")
}

/// Every bench group, sorted: the stems of `benches/benches/*.rs`.
pub(crate) fn all_groups() -> Result<Vec<String>> {
    let dir = groups_dir();
    let mut groups = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            groups.push(stem.to_owned());
        }
    }
    groups.sort();
    Ok(groups)
}

/// The groups asked for (every one when none is), checked against the ones that exist.
pub(crate) fn plan(groups: &[String]) -> Result<Vec<String>> {
    let all = all_groups()?;
    if groups.is_empty() {
        if all.is_empty() {
            bail!("no bench groups in {}", cmd::relative(&groups_dir()));
        }
        return Ok(all);
    }
    for group in groups {
        if !all.contains(group) {
            bail!("unknown bench group `{group}` (known: {})", all.join(", "));
        }
    }
    Ok(groups.to_vec())
}

/// The `cargo bench` command for one group.
fn bench_command(group: &str, quick: bool) -> Command {
    let mut cmd = cmd::cargo();
    cmd.args(["bench", "-p", benches::PACKAGE, "--bench", group]);
    if quick {
        // criterion 0.8 supports `--quick`: stop sampling once the estimate is tight enough.
        // Shorter warm-up and measurement: about 5 minutes in all for some 270 results
        // (most of it the engine and index groups), once the benches are built.
        cmd.args([
            "--",
            "--quick",
            "--warm-up-time",
            "0.3",
            "--measurement-time",
            "1",
        ]);
    }
    cmd
}

/// Runs one bench group and returns how long it took.
fn run_group(group: &str, quick: bool, env: &[(String, String)]) -> Result<Duration> {
    let started = Instant::now();
    let mut command = bench_command(group, quick);
    for (k, v) in env {
        command.env(k, v);
    }
    cmd::run(&mut command).with_context(|| format!("bench group `{group}` failed"))?;
    Ok(started.elapsed())
}

/// Runs the requested criterion groups (every one when `groups` is empty) in order, stopping
/// at the first failure, then writes the report of what this run measured to
/// `target/bench-report/` (`report.md`, `ratios.svg`).
pub(crate) fn run(quick: bool, groups: &[String]) -> Result<()> {
    let asked = groups;
    let groups = plan(asked)?;
    let started_at = SystemTime::now();
    let out_dir = benches::criterion_report_dir();
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    // What an earlier run left to publish is not this run's.
    for stale in [benches::to_publish(), benches::to_publish_stamp()] {
        let _ = std::fs::remove_file(stale);
    }
    let skipped_file = out_dir.join("skipped.tsv");
    std::fs::write(&skipped_file, "")
        .with_context(|| format!("writing {}", skipped_file.display()))?;
    let mut env = vec![(
        "TUPLEKV_BENCH_SKIPPED".to_owned(),
        skipped_file.display().to_string(),
    )];
    let redis = match Redis::start() {
        Ok(redis) => {
            eprintln!("bench: started redis-server at {}", redis.url());
            env.push(("TUPLEKV_REDIS_URL".to_owned(), redis.url().to_owned()));
            Some(redis)
        }
        Err(reason) => {
            eprintln!("bench: Redis peer skipped: {reason}");
            env.push(("TUPLEKV_REDIS_SKIPPED".to_owned(), reason));
            None
        }
    };
    let mut timings = Vec::new();
    let mut handoffs = Vec::new();
    for group in &groups {
        eprintln!("\n[bench] {group}");
        let before = handoff::handoff_ns();
        timings.push((group, run_group(group, quick, &env)?));
        handoffs.push((group.clone(), before, handoff::handoff_ns()));
    }
    drop(redis);
    eprintln!("\nbench summary:");
    for (group, elapsed) in timings {
        eprintln!("  {group:<12} {:>7.1}s", elapsed.as_secs_f64());
    }
    let measurements = report::collect(&cmd::target_dir().join("criterion"), started_at)?;
    let skipped = report::read_skipped(&skipped_file);
    let command = super::command_line(&asked.join(" "), quick);
    let command = command.trim_end();
    let notes: Vec<String> = handoff::report_line(&handoffs).into_iter().collect();
    let path = report::write(&out_dir, &measurements, &skipped, command, &notes)?;
    // The memory group measures bytes, not time: it writes its own table, appended here when
    // this run wrote it.
    let memory = out_dir.join("memory.md");
    if std::fs::metadata(&memory)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= started_at)
    {
        let table = std::fs::read_to_string(&memory)
            .with_context(|| format!("reading {}", memory.display()))?;
        let mut text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.push('\n');
        text.push_str(&table);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "report: {} ({} results, {} skipped peers), chart: {}",
        cmd::relative(&path),
        measurements.len(),
        skipped.len(),
        cmd::relative(&out_dir.join("ratios.svg"))
    );
    // A full run that measured something leaves its report for xtask to publish into
    // docs/performance.md, with the stamp the doc gives its tables.
    if !quick && !measurements.is_empty() {
        std::fs::copy(&path, benches::to_publish())
            .with_context(|| format!("copying {}", cmd::relative(&path)))?;
        let stamp = format!("{} by `{command}`", cmd::utc_date(started_at));
        std::fs::write(benches::to_publish_stamp(), stamp).context("writing the publish stamp")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_group_exists() {
        let groups = all_groups().expect("benches/benches is readable");
        assert!(groups.iter().any(|g| g == "codec"), "{groups:?}");
    }

    #[test]
    fn unknown_group_is_rejected() {
        assert!(plan(&["no-such-group".to_owned()]).is_err());
    }

    #[test]
    fn quick_passes_criterion_flag() {
        let shown = cmd::display(&bench_command("codec", true));
        assert!(
            shown.contains("bench -p tuplekv-benches --bench codec -- --quick"),
            "{shown}"
        );
    }
}
