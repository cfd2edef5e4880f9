//! `cargo xtask bench`: runs the criterion bench groups of `tuplekv-benches`.
//!
//! A bench group is one file `benches/benches/<group>.rs`, i.e. one `[[bench]]` target of the
//! `tuplekv-benches` package. For now this module only plans ([`plan`]) and runs
//! ([`run_group`]) the groups; criterion leaves its results under `target/criterion/`, which is
//! where report generation can later pick them up, as a step after the loop in [`run`].

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The package holding the benches.
const PACKAGE: &str = "tuplekv-benches";

/// Options of `cargo xtask bench`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BenchArgs {
    /// Pass criterion's `--quick` (a short statistical run, for smoke tests and CI).
    pub(crate) quick: bool,
    /// Groups to run; empty means every group.
    pub(crate) groups: Vec<String>,
}

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

/// The groups `args` asks for, checked against the ones that exist.
pub(crate) fn plan(args: &BenchArgs) -> Result<Vec<String>> {
    let all = all_groups()?;
    if args.groups.is_empty() {
        if all.is_empty() {
            bail!("no bench groups in {}", cmd::relative(&groups_dir()));
        }
        return Ok(all);
    }
    for group in &args.groups {
        if !all.contains(group) {
            bail!("unknown bench group `{group}` (known: {})", all.join(", "));
        }
    }
    Ok(args.groups.clone())
}

/// The `cargo bench` command for one group.
fn bench_command(group: &str, quick: bool) -> Command {
    let mut cmd = cmd::cargo();
    cmd.args(["bench", "-p", PACKAGE, "--bench", group]);
    if quick {
        // criterion 0.8 supports `--quick`: stop sampling once the estimate is tight enough.
        cmd.args(["--", "--quick"]);
    }
    cmd
}

/// Runs one bench group and returns how long it took.
pub(crate) fn run_group(group: &str, quick: bool) -> Result<Duration> {
    let started = Instant::now();
    cmd::run(&mut bench_command(group, quick))
        .with_context(|| format!("bench group `{group}` failed"))?;
    Ok(started.elapsed())
}

/// Runs the requested bench groups in order, stopping at the first failure.
pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    let groups = plan(args)?;
    let mut timings = Vec::new();
    for group in &groups {
        eprintln!("\n[bench] {group}");
        timings.push((group, run_group(group, args.quick)?));
    }
    eprintln!("\nbench summary:");
    for (group, elapsed) in timings {
        eprintln!("  {group:<12} {:>7.1}s", elapsed.as_secs_f64());
    }
    eprintln!("results: target/criterion/");
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
        let args = BenchArgs {
            quick: false,
            groups: vec!["no-such-group".into()],
        };
        assert!(plan(&args).is_err());
    }

    #[test]
    fn quick_passes_criterion_flag() {
        let shown = cmd::display(&bench_command("codec", true));
        assert!(
            shown.ends_with("bench -p tuplekv-benches --bench codec -- --quick"),
            "{shown}"
        );
    }
}
