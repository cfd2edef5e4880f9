//! One place that decides how hard the property tests work and where their failures are kept.
//!
//! Every proptest in the workspace takes its configuration from [`proptest_config`], so
//! - the number of cases is modest by default (CI runs on two cores) and can be raised for a
//!   long run with `TUPLEKV_PROPTEST_CASES=20000 cargo test` (what `cargo xtask` soak runs do);
//! - a failure is saved, seed and all, to `proptest-regressions/<name>.txt` under the crate
//!   being tested (cargo runs tests from the crate's directory), and replayed first on every
//!   later run. Commit those files.

use proptest::test_runner::{Config, FileFailurePersistence};

/// Environment variable that overrides every property test's case count.
pub const CASES_ENV: &str = "TUPLEKV_PROPTEST_CASES";

/// A proptest configuration running `default_cases` cases (or `$TUPLEKV_PROPTEST_CASES`) and
/// persisting failures to `proptest-regressions/<file>` relative to the crate under test.
///
/// `file` must be a literal such as `"order.txt"`, one per test file.
pub fn proptest_config(default_cases: u32, file: &'static str) -> Config {
    let cases = std::env::var(CASES_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    // `Direct` paths are relative to the working directory, which `cargo test` sets to the
    // crate's manifest directory. Leak one small string per test function: the config lives
    // for the whole test anyway.
    let path: &'static str = Box::leak(format!("proptest-regressions/{file}").into_boxed_str());
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(path))),
        ..Config::default()
    }
}

/// Environment variable that sets how many kill-and-recover rounds the crash tests run.
pub const CRASH_ITERATIONS_ENV: &str = "TUPLEKV_CRASH_ITERATIONS";
/// Environment variable that fixes the crash tests' seed, to repeat a failing run.
pub const CRASH_SEED_ENV: &str = "TUPLEKV_CRASH_SEED";

/// How many rounds a crash test runs: `$TUPLEKV_CRASH_ITERATIONS`, else `default` (modest, for
/// CI; `cargo xtask soak` raises it).
pub fn crash_iterations(default: u32) -> u32 {
    std::env::var(CRASH_ITERATIONS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed of a crash test: `$TUPLEKV_CRASH_SEED`, else a fresh random one. Printed, with the
/// variable that repeats it, so a failure can be replayed.
pub fn crash_seed(test: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let seed = std::env::var(CRASH_SEED_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
    println!("{test} seed: {seed} (set {CRASH_SEED_ENV}={seed} to repeat)");
    seed
}

/// Starts this test binary (`exe`) again as a crash-test child: it runs only the test named
/// `child_test`, with `dir_env` set to `dir`, its stdout piped back (the child reports what
/// was acknowledged there) and its stderr discarded. The caller kills it with SIGKILL.
///
/// # Errors
/// If the process cannot be started.
pub fn spawn_crash_child(
    exe: &std::path::Path,
    child_test: &str,
    dir_env: &str,
    dir: &std::path::Path,
) -> std::io::Result<std::process::Child> {
    std::process::Command::new(exe)
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(dir_env, dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
}
