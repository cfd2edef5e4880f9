//! What `cargo xtask bench` and the bench orchestrator agree on: the package and binary of the
//! orchestrator, the profile every bench binary is built with, and where the orchestrator
//! leaves the criterion report that xtask publishes into `docs/performance.md`.

use std::path::PathBuf;

use crate::cmd;

/// The package holding the benches, the load binaries and the orchestrator.
pub const PACKAGE: &str = "tuplekv-benches";
/// The orchestrator's binary.
pub const ORCHESTRATOR_BIN: &str = "bench";
/// The cargo profile every bench binary is built with: `cargo bench`'s own (release, with
/// debug info for profilers), so the orchestrator, the load binaries, the servers they load
/// and the criterion groups share one build of their dependencies.
pub const PROFILE: &str = "bench";

/// `cargo build --profile bench -p PACKAGE --bin BIN`, run from the workspace root.
pub fn build_command(package: &str, bin: &str) -> std::process::Command {
    let mut command = cmd::cargo();
    command.args(["build", "--profile", PROFILE, "-p", package, "--bin", bin]);
    command
}

/// Where a binary built with [`PROFILE`] lands (the bench profile's folder is `release`).
pub fn binary(name: &str) -> PathBuf {
    cmd::target_dir().join("release").join(name)
}

/// The folder of the criterion report (`report.md`, `ratios.svg`).
pub fn criterion_report_dir() -> PathBuf {
    cmd::target_dir().join("bench-report")
}

/// The folder of the comparisons' reports (`<group>.md`).
pub fn comparison_reports_dir() -> PathBuf {
    cmd::target_dir().join("bench-reports")
}

/// The criterion report of a full run that measured something, left for xtask to publish
/// (and remove): the orchestrator writes it only then.
pub fn to_publish() -> PathBuf {
    criterion_report_dir().join("publish.md")
}

/// Beside [`to_publish`]: when and by which command its tables were measured, as the
/// published doc stamps them (the UTC date and time, then `by` and the command).
pub fn to_publish_stamp() -> PathBuf {
    criterion_report_dir().join("publish.stamp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_orchestrator_is_built_with_the_bench_profile_where_cargo_bench_builds() {
        let shown = cmd::display(&build_command(PACKAGE, ORCHESTRATOR_BIN));
        assert!(
            shown.ends_with("build --profile bench -p tuplekv-benches --bin bench"),
            "{shown}"
        );
        assert!(binary("bench").ends_with("release/bench"));
        assert!(to_publish().starts_with(criterion_report_dir()));
    }
}
