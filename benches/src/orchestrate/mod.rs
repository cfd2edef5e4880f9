//! The bench orchestrator behind `cargo xtask bench`: it runs the criterion groups with their
//! peers' servers (`criterion`, reported by `report`), and the comparisons that start real
//! processes — KV Connect servers side by side (`server`), code sequences over KV Connect
//! (`remote`), tuplekv on an etcd cluster (`etcd`) and the example service under load
//! (`service`). Load processes run as one fleet (`fleet`); every table (the criterion
//! report's included) goes through one renderer's `Table`, every comparison's report is a
//! `Doc` of that renderer (`doc`), published to `target/bench-reports/`.
//!
//! xtask builds the orchestrator (the `bench` binary of this crate), runs it, and publishes
//! what it measured into `docs/performance.md`. The orchestrator links the test kit (the etcd
//! cluster harness) and the harness crate (server processes, real clients, Redis).

mod criterion;
mod doc;
mod etcd;
mod fleet;
mod handoff;
mod remote;
mod report;
mod server;
mod service;

use std::path::PathBuf;

use anyhow::Result;
use tuplekv_harness::{benches, cmd};

/// How long each measured workload of a comparison runs: one pace for every group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Durations {
    /// Measured seconds per workload (a Deno op stops at its operation count or here).
    pub seconds: f64,
    /// Unmeasured seconds before each workload.
    pub warmup: f64,
    /// Measured operations per sequential series (a Deno op, a latency series); a tenth as
    /// many run unmeasured first.
    pub ops: u32,
}

impl Durations {
    /// A full run.
    pub const FULL: Durations = Durations {
        seconds: 4.0,
        warmup: 0.5,
        ops: 2000,
    };
    /// `--quick`: a smoke run.
    pub const QUICK: Durations = Durations {
        seconds: 0.5,
        warmup: 0.1,
        ops: 200,
    };

    /// The pace of a run, quick or full.
    pub fn of(quick: bool) -> Durations {
        if quick {
            Durations::QUICK
        } else {
            Durations::FULL
        }
    }

    /// [`Durations::seconds`] rounded up to whole seconds (for tools that take no fraction,
    /// such as pgbench's `-T`), at least one.
    pub fn whole_seconds(self) -> u32 {
        // The paces above are a few seconds; the cast cannot truncate.
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = self.seconds.ceil().max(1.0) as u32;
        whole
    }

    /// The unmeasured operations before a series of [`Durations::ops`].
    pub fn warmup_ops(self) -> u32 {
        self.ops / 10
    }
}

/// Client processes per loaded workload of a comparison, run at once (the workloads' "4
/// processes" shape).
pub(crate) const PROCESSES: usize = 4;
/// Threads (connections, for Redis and PostgreSQL) per process of a loaded workload.
pub(crate) const THREADS: usize = 4;

/// The package of the tuplekv server.
pub(crate) const CLI_PACKAGE: &str = "tuplekv-cli";
/// Its binary.
pub(crate) const CLI_BIN: &str = "tuplekv";
/// The package of the load processes.
pub(crate) const LOAD_PACKAGE: &str = benches::PACKAGE;

/// What runs one comparison: given whether the run is quick, it measures, publishes its
/// report and fails when ours failed.
pub type Comparison = fn(bool) -> Result<()>;

/// The comparisons that are not criterion groups, by name, with what runs them.
pub const COMPARISONS: [(&str, Comparison); 4] = [
    (server::GROUP, server::run),
    (remote::GROUP, remote::run),
    (etcd::GROUP, etcd::run),
    (service::GROUP, service::run),
];

/// What a run of `groups` does: the criterion groups to run (`None`: none; an empty list: every
/// one), then the comparisons, in the order asked.
fn split(groups: &[String]) -> (Option<Vec<String>>, Vec<&'static str>) {
    let mut criterion_groups = Vec::new();
    let mut comparisons = Vec::new();
    for group in groups {
        match COMPARISONS.iter().find(|(name, _)| name == group) {
            Some((name, _)) => comparisons.push(*name),
            None => criterion_groups.push(group.clone()),
        }
    }
    let criterion =
        (!criterion_groups.is_empty() || comparisons.is_empty()).then_some(criterion_groups);
    (criterion, comparisons)
}

/// Runs the criterion groups among `groups` (all of them when `groups` is empty), then each
/// comparison it names, stopping at the first failure.
pub fn run(quick: bool, groups: &[String]) -> Result<()> {
    let (criterion_groups, comparisons) = split(groups);
    if let Some(criterion_groups) = criterion_groups {
        criterion::run(quick, &criterion_groups)?;
    }
    for name in comparisons {
        if let Some((_, run)) = COMPARISONS.iter().find(|(n, _)| *n == name) {
            run(quick)?;
        }
    }
    Ok(())
}

/// Builds binary `bin` of `package` with the bench profile (as `cargo bench` builds, so the
/// groups and the comparisons share one build) and returns its path.
pub(crate) fn build_bin(package: &str, bin: &str) -> Result<PathBuf> {
    cmd::run(&mut benches::build_command(package, bin))?;
    Ok(benches::binary(bin))
}

/// The one-minute load average from `/proc/loadavg`, or `?`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The report's note on the machine's load: the one-minute load average `before` the run
/// and now.
pub(crate) fn load_note(before: &str) -> String {
    format!(
        "Load average (1 min): {before} before, {} after; above the core count, other work \
         competed with this run.",
        load_average()
    )
}

/// The command line that reruns `group`, as the reports quote it.
pub(crate) fn command_line(group: &str, quick: bool) -> String {
    if quick {
        format!("cargo xtask bench --quick {group}")
    } else {
        format!("cargo xtask bench {group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paces_round_up_to_whole_seconds_and_warm_up_a_tenth() {
        assert_eq!(Durations::FULL.whole_seconds(), 4);
        assert_eq!(Durations::QUICK.whole_seconds(), 1);
        assert_eq!(Durations::of(true), Durations::QUICK);
        assert_eq!(Durations::FULL.warmup_ops(), 200);
    }

    #[test]
    fn a_run_does_the_criterion_groups_first_and_then_the_comparisons_asked() {
        let names =
            |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
        assert_eq!(
            split(&[]),
            (Some(vec![]), vec![]),
            "nothing asked: every group"
        );
        assert_eq!(
            split(&names("remote codec etcd engine")),
            (Some(names("codec engine")), vec!["remote", "etcd"])
        );
        assert_eq!(
            split(&names("server service")),
            (None, vec!["server", "service"])
        );
    }

    #[test]
    fn comparisons_are_named_once_and_are_not_criterion_groups() {
        let names: Vec<&str> = COMPARISONS.iter().map(|(n, _)| *n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        let groups = criterion::all_groups().expect("benches/benches is readable");
        assert!(names.iter().all(|n| !groups.iter().any(|g| g == n)));
    }
}
