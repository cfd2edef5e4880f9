//! `cargo xtask bench service`: the example service (`examples/service`) under 64 HTTP/1.1
//! keep-alive clients, embedded (in memory, durable with sync commits) and through an
//! in-process `tuplekv serve`, with its handlers calling tuplekv's blocking API in
//! `spawn_blocking` and its async API.
//!
//! Builds the load generator `service-load` with the bench profile and runs it; it starts the
//! service (and the KV server) in its own process, so nothing else needs installing. The
//! markdown table goes to standard output and `target/bench-reports/service.md`. Each scenario
//! runs the pace's whole seconds (`Durations::whole_seconds`: 4, `--quick` 1).

use std::process::Command;
use std::time::SystemTime;

use anyhow::Result;

use tuplekv_harness::cmd;

use super::doc::{Doc, publish};
use super::{Durations, build_bin, command_line, load_average, load_note};

/// The name `cargo xtask bench` routes here.
pub(crate) const GROUP: &str = "service";
/// The package of the example service.
const PACKAGE: &str = "tuplekv-example-service";
/// Its load generator.
const LOAD_BIN: &str = "service-load";

/// Runs `cargo xtask bench service` (with `--quick`: a smoke run).
pub(crate) fn run(quick: bool) -> Result<()> {
    let started = SystemTime::now();
    let load = build_bin(PACKAGE, LOAD_BIN)?;
    let load_before = load_average();
    let d = Durations::of(quick);
    let table =
        cmd::output(Command::new(&load).args(["--seconds", &d.whole_seconds().to_string()]))?;
    let mut doc = Doc::new(
        "The example service under load",
        &command_line(GROUP, quick),
        started,
        &format!("`{LOAD_BIN}` (examples/service/src/bin/service-load.rs)."),
    );
    doc.text(&table);
    publish(&doc.finish([load_note(&load_before)]), GROUP, started)
}
