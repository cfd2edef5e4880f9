//! `cargo xtask bench`: builds the bench orchestrator (the `bench` binary of
//! `tuplekv-benches`, module `tuplekv_benches::orchestrate`) with the bench profile, runs it
//! with the same options, and publishes into `docs/performance.md` ([`perf_doc`]) the
//! criterion report a full run left to publish (`tuplekv_harness::benches::to_publish`, with
//! its stamp). What runs, against which peers, and how each report is written, is the
//! orchestrator's.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use tuplekv_harness::benches;

use crate::{cmd, perf_doc};

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

/// Builds and runs the orchestrator, then publishes the criterion report it left.
pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    cmd::run(&mut benches::build_command(
        benches::PACKAGE,
        benches::ORCHESTRATOR_BIN,
    ))?;
    cmd::run(&mut args.orchestrator(benches::binary(benches::ORCHESTRATOR_BIN)))?;
    let report = benches::to_publish();
    if !report.exists() {
        // A quick run, a run of only the comparisons, or one that measured nothing.
        return Ok(());
    }
    let stamp_file = benches::to_publish_stamp();
    let stamp = std::fs::read_to_string(&stamp_file)
        .with_context(|| format!("reading {}", cmd::relative(&stamp_file)))?;
    let doc = cmd::workspace_root().join("docs").join("performance.md");
    perf_doc::update(&doc, &report, stamp.trim())
        .with_context(|| format!("publishing {}", cmd::relative(&report)))?;
    // Published once: a later run that measures nothing must not publish it again.
    for published in [&report, &benches::to_publish_stamp()] {
        let _ = std::fs::remove_file(published);
    }
    eprintln!("updated {}", cmd::relative(&doc));
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
    }
}
