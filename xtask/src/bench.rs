//! `cargo xtask bench`: builds the bench orchestrator (the `bench` binary of
//! `tuplekv-benches`, module `tuplekv_benches::orchestrate`) in release mode, runs it with the
//! same options, and publishes what a full criterion run measured into `docs/performance.md`
//! ([`perf_doc`]). What runs, against which peers, and how each report is written, is the
//! orchestrator's.

use std::path::PathBuf;
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, Result};

use crate::{cmd, perf_doc};

/// The package holding the benches and their orchestrator.
const PACKAGE: &str = "tuplekv-benches";
/// The orchestrator's binary.
const ORCHESTRATOR: &str = "bench";
/// Options of `cargo xtask bench`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub(crate) struct BenchArgs {
    /// Criterion's `--quick` with short warm-up and measurement: a smoke run of about 5
    /// minutes on a 2-vCPU machine once the benches are built (engine about 2.5, index about
    /// 1.2); building them first takes 7 minutes or more (much more on a busy machine, and
    /// more with the bench profile's debug info).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Groups to run (files benches/benches/GROUP.rs, or `server`, `remote`, `etcd`,
    /// `service`); none means every criterion group.
    #[arg(value_name = "GROUP")]
    pub(crate) groups: Vec<String>,
}

impl BenchArgs {
    /// The command line that reruns this run, as the published stamp quotes it.
    fn command_line(&self) -> String {
        let mut line = String::from("cargo xtask bench");
        if self.quick {
            line.push_str(" --quick");
        }
        for group in &self.groups {
            line.push(' ');
            line.push_str(group);
        }
        line
    }

    /// The orchestrator's command for this run.
    fn orchestrator(&self, binary: PathBuf) -> Command {
        let mut command = Command::new(binary);
        command.current_dir(cmd::workspace_root());
        if self.quick {
            command.arg("--quick");
        }
        command.args(&self.groups);
        command
    }
}

/// Builds and runs the orchestrator, then publishes its criterion report.
pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    let started = SystemTime::now();
    cmd::run(cmd::cargo().args(["build", "--release", "-p", PACKAGE, "--bin", ORCHESTRATOR]))?;
    let binary = cmd::target_dir().join("release").join(ORCHESTRATOR);
    cmd::run(&mut args.orchestrator(binary))?;
    // A full run publishes the criterion report the orchestrator wrote, if it ran criterion
    // groups (a run of only the comparisons writes none).
    if args.quick {
        return Ok(());
    }
    let report = cmd::target_dir().join("bench-report").join("report.md");
    let written_now = std::fs::metadata(&report)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= started);
    if written_now {
        let doc = cmd::workspace_root().join("docs").join("performance.md");
        let stamp = format!("{} by `{}`", cmd::utc_date(started), args.command_line());
        perf_doc::update(&doc, &report, &stamp)
            .with_context(|| format!("publishing {}", cmd::relative(&report)))?;
        eprintln!("updated {}", cmd::relative(&doc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(quick: bool, groups: &[&str]) -> BenchArgs {
        BenchArgs {
            quick,
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn the_orchestrator_gets_the_same_options() {
        let shown = cmd::display(&args(true, &["codec", "remote"]).orchestrator("bench".into()));
        assert!(shown.ends_with("bench --quick codec remote"), "{shown}");
        assert_eq!(
            args(true, &["codec"]).command_line(),
            "cargo xtask bench --quick codec"
        );
    }
}
