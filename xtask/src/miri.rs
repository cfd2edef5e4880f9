//! `cargo xtask miri`: the engine's `unsafe` code checked by machine, on every CI run. Miri
//! runs the unit tests of the two modules that hold it, the key map's skiplist (`keymap.rs`)
//! and the version-list pointer (`chain_cell.rs`), scaled down under `cfg(miri)`. Miri needs
//! the nightly toolchain with its `miri` and `rust-src` components; this command installs
//! what is missing first. Where that cannot be done (a machine that can fetch no toolchain),
//! it says so loudly and runs the same tests under AddressSanitizer instead, which sees fewer
//! kinds of bug but still fails on a use after free or a double free. (`cargo xtask ci` runs
//! them under AddressSanitizer in a step of their own, full size, whether Miri runs or not.)

use std::process::Command;

use anyhow::{Result, bail};

use crate::{cmd, nightly, sanitizer};

/// The tests checked: every unit test of the two modules with `unsafe` code (libtest filters).
pub(crate) const TEST_FILTERS: [&str; 2] = ["keymap::tests::", "chain_cell::tests::"];

/// Miri's flags, each for a reason:
/// - `-Zmiri-tree-borrows`: the aliasing model checked. Under the default, Stacked Borrows,
///   Miri stops in crossbeam-epoch before reaching our code: the epoch collector's intrusive
///   list turns an entry's pointer into a reference to its container (`IsElement::element_of`),
///   which Stacked Borrows rejects and Tree Borrows accepts (crossbeam runs its own Miri
///   checks under Tree Borrows for that reason). Our code is checked under Tree Borrows:
///   nodes and lists are freed through the pointers they were allocated with.
/// - `-Zmiri-permissive-provenance`: crossbeam-epoch stores pointers as integers (its
///   `Atomic`, its bags of deferred functions). Miri accepts that but warns at every cast;
///   this silences the warnings. Our own pointers (`AtomicPtr` links and lists) never pass
///   through integers, so Miri tracks their provenance exactly.
/// - `-Zmiri-ignore-leaks`: the epoch collector's global queue still holds deferred frees (our
///   nodes among them) when the process exits, and nothing makes it run them; the sanitizer
///   builds turn leak checking off for the same reason. That every version list is freed
///   exactly once is counted by `chain_cell`'s own test.
pub(crate) const MIRIFLAGS: &str =
    "-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks";

/// What to do when Miri cannot be installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// Run the tests under AddressSanitizer instead (`cargo xtask miri`).
    AddressSanitizer,
    /// Only say so: the caller runs them under AddressSanitizer anyway (`cargo xtask ci`).
    AlreadyChecked,
}

/// Runs the tests under Miri; when Miri cannot be installed, prints a banner saying so and
/// does what `fallback` says.
pub(crate) fn run(fallback: Fallback) -> Result<()> {
    let selected = check_selection()?;
    eprintln!("xtask: {selected} unit tests selected by {TEST_FILTERS:?}");
    match prepare() {
        Ok(()) => cmd::run(&mut miri_tests()),
        Err(why) => {
            eprintln!("{}", fallback_banner(&format!("{why:#}"), fallback));
            match fallback {
                Fallback::AddressSanitizer => cmd::run(&mut asan_tests()),
                Fallback::AlreadyChecked => Ok(()),
            }
        }
    }
}

/// Installs the nightly toolchain's `miri` and `rust-src` components if missing (the
/// toolchain too, if there is none), then Miri's own standard library (`cargo miri setup`).
fn prepare() -> Result<()> {
    nightly::ensure(&["miri", "rust-src"])?;
    let mut setup = nightly::cargo();
    setup.args(["miri", "setup"]);
    cmd::run(&mut setup)
}

/// `cargo miri test` of the unit tests with unsafe code.
fn miri_tests() -> Command {
    let mut miri = nightly::cargo();
    miri.args(["miri", "test", "-p", "tuplekv-engine", "--lib", "--"])
        .args(TEST_FILTERS)
        .env("MIRIFLAGS", MIRIFLAGS);
    miri
}

/// The same tests, full size, under AddressSanitizer.
pub(crate) fn asan_tests() -> Command {
    let mut asan = sanitizer::address();
    asan.args(["--lib", "--"]).args(TEST_FILTERS);
    asan
}

/// What the fallback prints, framed so that it stands out in a CI log.
fn fallback_banner(why: &str, fallback: Fallback) -> String {
    let rule = "=".repeat(78);
    let instead = match fallback {
        Fallback::AddressSanitizer => "is checked by AddressSanitizer instead",
        Fallback::AlreadyChecked => "was checked only by the AddressSanitizer step",
    };
    format!(
        "\n{rule}\n\
         MIRI COULD NOT BE INSTALLED: {why}\n\
         The engine's unsafe code (keymap.rs, chain_cell.rs) {instead}:\n\
         it catches a use after free, a double free or an overflow as they happen on x86,\n\
         but not the aliasing rules, data races or uninitialised reads that Miri checks.\n\
         To run Miri: rustup toolchain install nightly --component miri --component rust-src\n\
         {rule}\n"
    )
}

/// Fails unless the filters select some tests: one that matched nothing (a module renamed)
/// would make both runs pass without checking anything. Lists them natively, which costs
/// little after `cargo test` has built the tests.
fn check_selection() -> Result<usize> {
    let mut list = cmd::cargo();
    list.args(["test", "-p", "tuplekv-engine", "--lib", "--", "--list"])
        .args(TEST_FILTERS);
    let selected = count_listed(&cmd::output(&mut list)?);
    if selected == 0 {
        bail!(
            "no unit test matches {TEST_FILTERS:?}: were keymap.rs's or chain_cell.rs's tests \
             renamed?"
        );
    }
    Ok(selected)
}

/// The tests in libtest's `--list` output (one `name: test` line each).
fn count_listed(list: &str) -> usize {
    list.lines().filter(|line| line.ends_with(": test")).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miri_runs_the_unsafe_modules_unit_tests_under_tree_borrows() {
        let miri = cmd::display(&miri_tests());
        assert!(
            miri.contains("rustup run nightly cargo miri test"),
            "{miri}"
        );
        assert!(miri.contains("-p tuplekv-engine --lib -- keymap::tests:: chain_cell::tests::"));
        assert!(miri.contains("-Zmiri-tree-borrows"), "{miri}");
    }

    #[test]
    fn the_fallback_runs_the_same_tests_under_address_sanitizer() {
        let asan = cmd::display(&asan_tests());
        assert!(asan.contains("RUSTFLAGS=-Zsanitizer=address"), "{asan}");
        assert!(asan.contains("--target x86_64-unknown-linux-gnu"), "{asan}");
        assert!(
            asan.contains("--lib -- keymap::tests:: chain_cell::tests::"),
            "{asan}"
        );
    }

    #[test]
    fn the_fallback_banner_names_the_reason_and_the_weaker_check() {
        let why = "toolchain 'nightly' is not installed";
        let banner = fallback_banner(why, Fallback::AddressSanitizer);
        assert!(banner.contains("MIRI COULD NOT BE INSTALLED: toolchain 'nightly'"));
        assert!(banner.contains("checked by AddressSanitizer instead"));
        let banner = fallback_banner(why, Fallback::AlreadyChecked);
        assert!(banner.contains("checked only by the AddressSanitizer step"));
    }

    #[test]
    fn listed_tests_are_counted_and_benchmarks_are_not() {
        let list = "keymap::tests::a: test\nchain_cell::tests::b: test\nx: benchmark\n\n\
                    2 tests, 0 benchmarks\n";
        assert_eq!(count_listed(list), 2);
    }
}
