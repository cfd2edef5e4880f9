//! `cargo xtask soak`: the long runs that CI cannot afford. The same tests as `cargo test`, with
//! many more property cases, crash iterations and stress rounds; the engine's tests under
//! AddressSanitizer (the engine's soundness rests on its own skiplist, `keymap.rs`, and on how
//! it drives crossbeam's epochs: guard-scoped borrows of nodes and version lists, counted
//! handles whose last release defers the node's free, and the `unsafe` of `chain_cell.rs`,
//! which frees replaced version lists once the epoch has moved past every reader; a use after
//! free there would otherwise go unseen); and the
//! loom model checks of the sequence allocator. The sanitizer and loom builds need their own
//! flags and target directories ([`own_target_dir`]).

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
    /// Leave out the AddressSanitizer run of the engine's tests (it rebuilds the engine).
    pub(crate) skip_asan: bool,
}

impl Default for SoakArgs {
    fn default() -> Self {
        SoakArgs {
            cases: DEFAULT_CASES,
            skip_loom: false,
            skip_asan: false,
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

    if !args.skip_asan {
        // `-Zsanitizer` is unstable: RUSTC_BOOTSTRAP for this command only. An explicit
        // `--target` keeps build scripts and proc macros uninstrumented. Leak checking is off:
        // the epoch collector does not run the last deferred frees before the process exits.
        let mut asan = cmd::cargo();
        asan.args([
            "test",
            "-p",
            "tuplekv-engine",
            "--target",
            HOST_TARGET,
            "--lib",
            "--tests",
        ])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", "-Zsanitizer=address")
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .env(
            "TUPLEKV_PROPTEST_CASES",
            (args.cases / 5).max(1).to_string(),
        )
        .env("TUPLEKV_STRESS", "5")
        .env("CARGO_TARGET_DIR", own_target_dir("asan"));
        steps.push(asan);
    }

    if !args.skip_loom {
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
        .env("CARGO_TARGET_DIR", own_target_dir("loom"));
        steps.push(loom);
    }
    steps
}

/// `target/<name>`: a build with its own `RUSTFLAGS` gets its own directory, so it does not
/// evict the normal build (cargo rebuilds everything when the flags change).
fn own_target_dir(name: &str) -> std::path::PathBuf {
    cmd::workspace_root().join("target").join(name)
}

/// The target the sanitizer build names explicitly (AddressSanitizer on x86-64 Linux).
const HOST_TARGET: &str = "x86_64-unknown-linux-gnu";

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
    fn soak_runs_the_suite_with_long_settings_then_the_sanitizer_then_loom() {
        let steps = steps(&SoakArgs::default());
        assert_eq!(steps.len(), 3);
        let suite = cmd::display(&steps[0]);
        assert!(suite.contains("TUPLEKV_PROPTEST_CASES=5000"), "{suite}");
        assert!(suite.contains("--release"), "{suite}");
        let asan = cmd::display(&steps[1]);
        assert!(asan.contains("-Zsanitizer=address"), "{asan}");
        assert!(asan.contains("RUSTC_BOOTSTRAP=1"), "{asan}");
        assert!(asan.contains("-p tuplekv-engine"), "{asan}");
        assert!(asan.contains("--target x86_64-unknown-linux-gnu"), "{asan}");
        assert!(asan.contains("TUPLEKV_PROPTEST_CASES=1000"), "{asan}");
        let loom = cmd::display(&steps[2]);
        assert!(loom.contains("RUSTFLAGS='--cfg loom'"), "{loom}");
        assert!(loom.contains("--test loom"), "{loom}");
    }

    #[test]
    fn skip_loom_and_skip_asan_leave_only_the_suite() {
        let args = SoakArgs {
            cases: 10,
            skip_loom: true,
            skip_asan: true,
        };
        let steps = steps(&args);
        assert_eq!(steps.len(), 1);
        assert!(cmd::display(&steps[0]).contains("TUPLEKV_PROPTEST_CASES=10"));
    }

    #[test]
    fn skip_asan_alone_keeps_the_suite_and_loom() {
        let args = SoakArgs {
            skip_asan: true,
            ..SoakArgs::default()
        };
        let steps: Vec<String> = steps(&args).iter().map(cmd::display).collect();
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| !s.contains("sanitizer")), "{steps:?}");
        assert!(steps[1].contains("--cfg loom"), "{steps:?}");
        assert!(steps[1].contains("target/loom"), "{steps:?}");
    }
}
