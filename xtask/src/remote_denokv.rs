//! `cargo xtask remote-denokv`: `RemoteStore` against denokv, a KV Connect server without
//! tuplekv's extension.
//!
//! Installs denokv into the tool cache when missing ([`clients::denokv`]), starts it on a free
//! loopback port with a fresh token and a scratch SQLite file, runs `crates/remote/tests/
//! denokv.rs` with `TUPLEKV_DENOKV_URL` and `TUPLEKV_DENOKV_TOKEN` set, and stops it. Without
//! those variables the same tests skip with a notice, so plain `cargo test` (and `.ci/run`)
//! needs no denokv.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::server_process::{Running, Stderr, generate_token, log_tail, scratch_dir};
use crate::{clients, cmd};

/// Help for `cargo xtask remote-denokv`.
pub(crate) const ABOUT: &str = "\
Runs crates/remote/tests/denokv.rs against a real denokv 0.14.0: installs it when missing
(`cargo install denokv --version 0.14.0 --locked` into $TUPLEKV_TOOLS_DIR/denokv, default
target/tools; several minutes the first time), starts it on a free 127.0.0.1 port with a
generated token and a scratch SQLite file, runs
    TUPLEKV_DENOKV_URL=http://127.0.0.1:PORT TUPLEKV_DENOKV_TOKEN=<token> \\
        cargo test -p tuplekv-remote --test denokv -- --nocapture
and stops denokv. The tests check that the index write path and both sequence modes work on
plain KV Connect, and that the operations needing tuplekv's extension (a second read of one
snapshot, lists past one batch, transactions that list, Collection::verify/repair/list_by
on a pointer index) fail with Error::Unsupported. Not part of `cargo xtask ci`.";

/// The variables the tests read.
const URL_ENV: &str = "TUPLEKV_DENOKV_URL";
const TOKEN_ENV: &str = "TUPLEKV_DENOKV_TOKEN";

/// The test command, with the server's address and token.
fn test_command(url: &str, token: &str) -> Command {
    let mut c = cmd::cargo();
    c.args(["test", "-p", "tuplekv-remote", "--test", "denokv"])
        .args(["--", "--nocapture"])
        .env(URL_ENV, url)
        .env(TOKEN_ENV, token);
    c
}

/// Runs `cargo xtask remote-denokv`.
pub(crate) fn run() -> Result<()> {
    let denokv = clients::denokv()?;
    let dir = scratch_dir("remote-denokv")?;
    let result = run_in(&denokv, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(denokv: &std::path::Path, dir: &std::path::Path) -> Result<()> {
    let token = generate_token()?;
    let log = dir.join("denokv.log");
    let running = Running::denokv(denokv, dir, &token, Stderr::Log(log.clone()))?;
    eprintln!("xtask: denokv at {}", running.url());
    let mut tests = test_command(&running.url(), &token);
    eprintln!("$ {}", cmd::display(&tests).replace(&token, "<token>"));
    let status = tests.status();
    let stopped = running.stop();
    let status = status.context("could not start the denokv tests")?;
    eprintln!("xtask: denokv stopped ({})", stopped?);
    if !status.success() {
        bail!(
            "the tests against denokv failed ({status}); the end of denokv's log:\n{}",
            log_tail(&log)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tests_get_the_servers_address_and_token() {
        let c = test_command("http://127.0.0.1:1", "secret");
        let shown = cmd::display(&c);
        assert!(
            shown.contains("test -p tuplekv-remote --test denokv -- --nocapture"),
            "{shown}"
        );
        let envs: Vec<_> = c.get_envs().collect();
        assert!(envs.contains(&(URL_ENV.as_ref(), Some("http://127.0.0.1:1".as_ref()))));
        assert!(envs.contains(&(TOKEN_ENV.as_ref(), Some("secret".as_ref()))));
    }
}
