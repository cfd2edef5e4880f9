//! `cargo xtask soak`: the long runs that CI cannot afford. The same tests as `cargo test`, with
//! many more property cases, crash iterations and stress rounds, plus the loom model checks of
//! the sequence allocator (which need `--cfg loom` and their own target directory).

use std::process::Command;

use anyhow::Result;

use crate::cmd;

/// Property cases per proptest when `--cases` is not given (CI runs a few hundred).
pub(crate) const DEFAULT_CASES: u32 = 5_000;

/// Options of `cargo xtask soak`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SoakArgs {
    /// Cases per property test (`TUPLEKV_PROPTEST_CASES`).
    pub(crate) cases: u32,
    /// Leave out the loom model checks (they rebuild the sequence crate with `--cfg loom`).
    pub(crate) skip_loom: bool,
}

impl Default for SoakArgs {
    fn default() -> Self {
        SoakArgs {
            cases: DEFAULT_CASES,
            skip_loom: false,
        }
    }
}

/// The commands `soak` runs, in order.
fn steps(args: &SoakArgs) -> Vec<Command> {
    let mut steps = Vec::new();

    // The whole suite in release with the long settings: every proptest reads
    // TUPLEKV_PROPTEST_CASES, the crash test TUPLEKV_CRASH_ITERATIONS, the engine's stress
    // tests TUPLEKV_STRESS and the sequence hammer SEQUENCE_HAMMER_PER_THREAD.
    let mut tests = cmd::cargo();
    tests
        .args(["test", "--workspace", "--release"])
        .env("TUPLEKV_PROPTEST_CASES", args.cases.to_string())
        .env("TUPLEKV_CRASH_ITERATIONS", "200")
        .env("TUPLEKV_STRESS", "10")
        .env("SEQUENCE_HAMMER_PER_THREAD", "20000");
    steps.push(tests);

    if !args.skip_loom {
        // A separate target directory, so the `--cfg loom` build does not evict the normal one.
        let mut loom = cmd::cargo();
        loom.args([
            "test",
            "-p",
            "tuplekv-sequence",
            "--test",
            "loom",
            "--release",
        ])
        .env("RUSTFLAGS", "--cfg loom")
        .env(
            "CARGO_TARGET_DIR",
            cmd::workspace_root().join("target").join("loom"),
        );
        steps.push(loom);
    }
    steps
}

/// Runs the soak steps, stopping at the first failure.
pub(crate) fn run(args: &SoakArgs) -> Result<()> {
    for mut step in steps(args) {
        cmd::run(&mut step)?;
    }
    eprintln!(
        "xtask: soak passed ({} property cases per test)",
        args.cases
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_runs_the_suite_with_long_settings_then_loom() {
        let steps = steps(&SoakArgs::default());
        assert_eq!(steps.len(), 2);
        let suite = cmd::display(&steps[0]);
        assert!(suite.contains("TUPLEKV_PROPTEST_CASES=5000"), "{suite}");
        assert!(suite.contains("--release"), "{suite}");
        let loom = cmd::display(&steps[1]);
        assert!(loom.contains("RUSTFLAGS='--cfg loom'"), "{loom}");
        assert!(loom.contains("--test loom"), "{loom}");
    }

    #[test]
    fn skip_loom_leaves_only_the_suite() {
        let args = SoakArgs {
            cases: 10,
            skip_loom: true,
        };
        let steps = steps(&args);
        assert_eq!(steps.len(), 1);
        assert!(cmd::display(&steps[0]).contains("TUPLEKV_PROPTEST_CASES=10"));
    }
}
