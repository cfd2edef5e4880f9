//! Sanitizer builds of the engine's tests, shared by `soak` and by `miri`'s fallback. Each
//! sanitizer gets its own target directory ([`own_target_dir`]): its `RUSTFLAGS` would
//! otherwise make cargo rebuild the normal build from scratch, and evict it.

use std::path::PathBuf;
use std::process::Command;

use crate::{cmd, nightly};

/// The target the sanitizer builds name explicitly (x86-64 Linux). With `--target`, build
/// scripts and proc macros are built for the host without the sanitizer's flags.
pub(crate) const HOST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// `target/<name>`: a build with its own `RUSTFLAGS` gets its own directory.
pub(crate) fn own_target_dir(name: &str) -> PathBuf {
    cmd::workspace_root().join("target").join(name)
}

/// `cargo test -p tuplekv-engine --target x86_64-unknown-linux-gnu` under AddressSanitizer on
/// the current (stable) toolchain; the caller adds the test selection.
///
/// `-Zsanitizer` is unstable: `RUSTC_BOOTSTRAP=1` for this command only. The standard library
/// stays uninstrumented (rebuilding it needs the `rust-src` component, which a stable
/// toolchain here lacks); AddressSanitizer still sees every heap access of the engine's own
/// code and of crossbeam's. Leak checking is off: the epoch collector does not run its last
/// deferred frees before the process exits.
pub(crate) fn address() -> Command {
    let mut asan = cmd::cargo();
    asan.args(["test", "-p", "tuplekv-engine", "--target", HOST_TARGET])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", "-Zsanitizer=address")
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .env("CARGO_TARGET_DIR", own_target_dir("asan"));
    asan
}

/// `cargo test -p tuplekv-engine` under ThreadSanitizer on the nightly toolchain, with the
/// standard library rebuilt instrumented (`-Zbuild-std`, which needs nightly's `rust-src`);
/// the caller adds the test selection.
///
/// Why nightly and `-Zbuild-std`: `-Zsanitizer=thread` changes the ABI, and rustc refuses to
/// link crates built with it against a standard library built without ("mixing `-Zsanitizer`
/// will cause an ABI mismatch"); an uninstrumented standard library would also hide the
/// synchronisation of its own locks and `Once`s from ThreadSanitizer. Rebuilding it needs
/// the `rust-src` component, which the stable toolchain here lacks and cannot fetch.
///
/// `--cfg crossbeam_sanitize_thread` makes crossbeam-epoch replace its fences, which
/// ThreadSanitizer does not model, with the equivalent atomic accesses.
pub(crate) fn thread() -> Command {
    let mut tsan = nightly::cargo();
    tsan.args([
        "test",
        "-Zbuild-std",
        "-p",
        "tuplekv-engine",
        "--target",
        HOST_TARGET,
    ])
    .env(
        "RUSTFLAGS",
        "-Zsanitizer=thread --cfg crossbeam_sanitize_thread",
    )
    .env("CARGO_TARGET_DIR", own_target_dir("tsan"));
    tsan
}
