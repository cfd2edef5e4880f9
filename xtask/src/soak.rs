//! `cargo xtask soak`: the long runs that CI cannot afford. The same tests as `cargo test`, with
//! many more property cases, crash iterations and stress rounds; the engine's tests under
//! AddressSanitizer, and the unit tests of its `unsafe` modules (the skiplist, `keymap.rs`,
//! and the version-list pointer, `chain_cell.rs`) under ThreadSanitizer, full size where CI's
//! Miri run is scaled down; and the loom model checks of the sequence allocator. The
//! sanitizer and loom builds need their own flags and target directories
//! ([`sanitizer::own_target_dir`]).
//!
//! ThreadSanitizer needs the nightly toolchain with `rust-src`, to rebuild the standard library
//! instrumented ([`sanitizer::thread`] says why): the stable toolchain here has no `rust-src`,
//! and a machine that cannot fetch a toolchain may have no nightly. There the step is skipped
//! with a banner saying so, and the soak's last line repeats it.

use std::process::Command;

use anyhow::Result;

use crate::{cmd, miri, nightly, sanitizer};

/// Property cases per proptest when `--cases` is not given (CI runs a few hundred).
pub(crate) const DEFAULT_CASES: u32 = 5_000;

/// Options of `cargo xtask soak`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct SoakArgs {
    /// Cases per property test (`TUPLEKV_PROPTEST_CASES`).
    #[arg(
        long,
        default_value_t = DEFAULT_CASES,
        value_parser = clap::value_parser!(u32).range(1..),
    )]
    pub(crate) cases: u32,
    /// Leave out the loom model checks (they rebuild the sequence crate with `--cfg loom`).
    #[arg(long)]
    pub(crate) skip_loom: bool,
    /// Leave out the AddressSanitizer run of the engine's tests (it rebuilds the engine).
    #[arg(long)]
    pub(crate) skip_asan: bool,
    /// Leave out the ThreadSanitizer run (it rebuilds the standard library and the engine).
    #[arg(long)]
    pub(crate) skip_tsan: bool,
}

impl Default for SoakArgs {
    fn default() -> Self {
        SoakArgs {
            cases: DEFAULT_CASES,
            skip_loom: false,
            skip_asan: false,
            skip_tsan: false,
        }
    }
}

/// One soak step.
struct Step {
    command: Command,
    /// Runs on the nightly toolchain and needs its `rust-src` (ThreadSanitizer).
    nightly: bool,
}

impl Step {
    fn stable(command: Command) -> Self {
        Step {
            command,
            nightly: false,
        }
    }
}

/// The steps `soak` runs, in order.
fn steps(args: &SoakArgs) -> Vec<Step> {
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
    steps.push(Step::stable(tests));

    if !args.skip_asan {
        let mut asan = sanitizer::address();
        asan.args(["--lib", "--tests"])
            .env(
                "TUPLEKV_PROPTEST_CASES",
                (args.cases / 5).max(1).to_string(),
            )
            .env("TUPLEKV_STRESS", "5");
        steps.push(Step::stable(asan));
    }

    if !args.skip_tsan {
        let mut tsan = sanitizer::thread();
        tsan.args(["--lib", "--"])
            .args(miri::TEST_FILTERS)
            .env("TUPLEKV_STRESS", "5");
        steps.push(Step {
            command: tsan,
            nightly: true,
        });
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
        .env("CARGO_TARGET_DIR", sanitizer::own_target_dir("loom"));
        steps.push(Step::stable(loom));
    }
    steps
}

/// Runs the soak steps, stopping at the first failure; skips, loudly, a nightly step on a
/// machine where nightly's `rust-src` cannot be installed.
pub(crate) fn run(args: &SoakArgs) -> Result<()> {
    let mut skipped = None;
    for mut step in steps(args) {
        if step.nightly
            && let Err(why) = nightly::ensure(&["rust-src"])
        {
            let why = format!("{why:#}");
            eprintln!("{}", tsan_skipped_banner(&why));
            skipped = Some(why);
            continue;
        }
        cmd::run(&mut step.command)?;
    }
    eprintln!(
        "xtask: soak passed ({} property cases per test)",
        args.cases
    );
    if let Some(why) = skipped {
        eprintln!("xtask: but ThreadSanitizer was SKIPPED: {why}");
    }
    Ok(())
}

/// What the soak prints when ThreadSanitizer cannot run, framed to stand out in a long log.
fn tsan_skipped_banner(why: &str) -> String {
    let rule = "=".repeat(78);
    format!(
        "\n{rule}\n\
         THREADSANITIZER SKIPPED: {why}\n\
         It needs the nightly toolchain with rust-src, to rebuild the standard library\n\
         instrumented. To run it: rustup toolchain install nightly --component rust-src\n\
         {rule}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(steps: &[Step]) -> Vec<String> {
        steps.iter().map(|s| cmd::display(&s.command)).collect()
    }

    #[test]
    fn soak_runs_the_suite_with_long_settings_then_both_sanitizers_then_loom() {
        let steps = steps(&SoakArgs::default());
        let nightly: Vec<bool> = steps.iter().map(|s| s.nightly).collect();
        assert_eq!(nightly, [false, false, true, false]);
        let [suite, asan, tsan, loom] = &shown(&steps)[..] else {
            panic!("four steps");
        };
        assert!(suite.contains("TUPLEKV_PROPTEST_CASES=5000"), "{suite}");
        assert!(suite.contains("--release"), "{suite}");
        assert!(asan.contains("-Zsanitizer=address"), "{asan}");
        assert!(asan.contains("RUSTC_BOOTSTRAP=1"), "{asan}");
        assert!(asan.contains("-p tuplekv-engine"), "{asan}");
        assert!(asan.contains("--target x86_64-unknown-linux-gnu"), "{asan}");
        assert!(asan.contains("TUPLEKV_PROPTEST_CASES=1000"), "{asan}");
        assert!(tsan.contains("-Zsanitizer=thread"), "{tsan}");
        assert!(
            tsan.contains("rustup run nightly cargo test -Zbuild-std"),
            "{tsan}"
        );
        assert!(
            tsan.contains("-- keymap::tests:: chain_cell::tests::"),
            "{tsan}"
        );
        assert!(tsan.contains("target/tsan"), "{tsan}");
        assert!(loom.contains("RUSTFLAGS='--cfg loom'"), "{loom}");
        assert!(loom.contains("--test loom"), "{loom}");
    }

    #[test]
    fn skipping_loom_and_both_sanitizers_leaves_only_the_suite() {
        let args = SoakArgs {
            cases: 10,
            skip_loom: true,
            skip_asan: true,
            skip_tsan: true,
        };
        let steps = shown(&steps(&args));
        assert_eq!(steps.len(), 1);
        assert!(steps[0].contains("TUPLEKV_PROPTEST_CASES=10"));
    }

    #[test]
    fn skipping_the_sanitizers_keeps_the_suite_and_loom() {
        let args = SoakArgs {
            skip_asan: true,
            skip_tsan: true,
            ..SoakArgs::default()
        };
        let steps = shown(&steps(&args));
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| !s.contains("sanitizer")), "{steps:?}");
        assert!(steps[1].contains("--cfg loom"), "{steps:?}");
        assert!(steps[1].contains("target/loom"), "{steps:?}");
    }

    #[test]
    fn the_skipped_banner_names_the_reason_and_what_tsan_needs() {
        let banner = tsan_skipped_banner("toolchain 'nightly' is not installed");
        assert!(banner.contains("THREADSANITIZER SKIPPED: toolchain 'nightly'"));
        assert!(banner.contains("rust-src"));
    }
}
