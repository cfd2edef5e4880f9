//! `cargo xtask ci`: formatting, lints, tests, the docs build, the model test on the reference
//! key map, and the engine's `unsafe` code checked by AddressSanitizer and Miri (`miri.rs`), in
//! that order, stopping at the first failure, with a timing summary at the end.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::{cmd, deps, miri};

/// Options of `cargo xtask ci`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub(crate) struct CiArgs {
    /// Leave out `cargo test --workspace` (`.ci/run` runs it before calling this).
    #[arg(long)]
    pub(crate) skip_tests: bool,
    /// Leave out Miri (a few minutes; CI runs it).
    #[arg(long)]
    pub(crate) skip_miri: bool,
}

/// One CI step: a label for the summary and what it runs.
struct Step {
    /// Short name shown in the summary.
    name: &'static str,
    action: Action,
}

/// What a step runs.
enum Action {
    /// A command, already set up to run from the workspace root.
    Command(Command),
    /// `cargo xtask miri` without its fallback (the `asan` step ran the same tests).
    Miri,
    /// The embedded facade's dependency check ([`deps::check_embedded`]).
    DepsEmbedded,
}

impl Step {
    fn command(name: &'static str, command: Command) -> Self {
        Step {
            name,
            action: Action::Command(command),
        }
    }

    fn run(self) -> Result<()> {
        match self.action {
            Action::Command(mut command) => cmd::run(&mut command),
            Action::Miri => miri::run(miri::Fallback::AlreadyChecked),
            Action::DepsEmbedded => deps::check_embedded(),
        }
    }
}

/// The facade's optional features (`remote`, `etcd`), as a workspace-wide `--features` value.
const FACADE_FEATURES: &str = "tuplekv/remote,tuplekv/etcd";

/// The steps `ci` runs, in order.
fn steps(args: &CiArgs) -> Vec<Step> {
    let mut steps = Vec::new();

    let mut fmt = cmd::cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    steps.push(Step::command("fmt", fmt));

    // The facade's features too: nothing else in the workspace turns them on.
    let mut clippy = cmd::cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        FACADE_FEATURES,
        "--",
        "-D",
        "warnings",
    ]);
    steps.push(Step::command("clippy", clippy));

    if !args.skip_tests {
        let mut test = cmd::cargo();
        test.args(["test", "--workspace"]);
        steps.push(Step::command("test", test));
    }
    // The facade with its features (`remote`: the app-servers scenario and the README's
    // examples; `etcd`: its etcd test), which `cargo test --workspace` leaves off (so also
    // with `--skip-tests`, which skips that command only).
    {
        let mut facade = cmd::cargo();
        facade.args(["test", "-p", "tuplekv", "--all-features"]);
        steps.push(Step::command("facade-features", facade));
    }
    // And without them: the embedded facade builds no runtime or network crate.
    steps.push(Step {
        name: "deps-embedded",
        action: Action::DepsEmbedded,
    });

    let mut doc = cmd::cargo();
    doc.args([
        "doc",
        "--workspace",
        "--no-deps",
        "--features",
        FACADE_FEATURES,
    ])
    .env("RUSTDOCFLAGS", "-D warnings");
    steps.push(Step::command("doc", doc));

    // The model test again, with the engine on crossbeam's SkipMap instead of its own
    // skiplist: a case failing only on the skiplist points at it. Rebuilds only the engine,
    // the testkit and the one test.
    let mut ref_map = cmd::cargo();
    ref_map.args([
        "test",
        "-p",
        "tuplekv-engine",
        "--features",
        "reference-keymap",
        "--test",
        "model",
    ]);
    steps.push(Step::command("ref-map", ref_map));

    // The real clients (Deno from npm, Node's @deno/kv) against `tuplekv serve`: installs
    // them when missing, a minute or two the first time.
    let mut conformance = cmd::cargo();
    conformance.args(["xtask", "conformance", "--against", "tuplekv"]);
    steps.push(Step::command("clients", conformance));
    // The same scripts over TLS: `serve --tls-cert --tls-key` with a throwaway CA's
    // certificate, Deno on HTTP/2 and Node on HTTP/1.1 at https://localhost.
    let mut conformance_tls = cmd::cargo();
    conformance_tls.args(["xtask", "conformance", "--against", "tuplekv", "--tls"]);
    steps.push(Step::command("clients-tls", conformance_tls));
    // The same scripts against `tuplekv serve --etcd` on a fresh 3-member etcd cluster.
    let mut conformance_etcd = cmd::cargo();
    conformance_etcd.args(["xtask", "conformance", "--against", "tuplekv", "--etcd"]);
    steps.push(Step::command("clients-etcd", conformance_etcd));

    // The unsafe modules' unit tests, full size, under AddressSanitizer (a minute with its
    // build), then scaled down under Miri: real threads on real hardware, then every access
    // checked against the aliasing and data-race rules.
    steps.push(Step::command("asan", miri::asan_tests()));
    if !args.skip_miri {
        steps.push(Step {
            name: "miri",
            action: Action::Miri,
        });
    }

    steps
}

/// Runs the CI steps. Prints a timing summary whether or not they all pass.
pub(crate) fn run(args: &CiArgs) -> Result<()> {
    let steps = steps(args);
    let total = steps.len();
    let started = Instant::now();
    let mut timings: Vec<(&str, Duration, bool)> = Vec::new();
    let mut failure = None;

    for (i, step) in steps.into_iter().enumerate() {
        let name = step.name;
        eprintln!("\n[ci {}/{total}] {name}", i + 1);
        let t = Instant::now();
        let result = step.run();
        timings.push((name, t.elapsed(), result.is_ok()));
        if let Err(e) = result {
            failure = Some((name, e));
            break;
        }
    }

    eprintln!("\nci summary:");
    for (name, elapsed, ok) in &timings {
        let verdict = if *ok { "ok" } else { "FAILED" };
        eprintln!("  {name:<12} {verdict:<7} {:>7.1}s", elapsed.as_secs_f64());
    }
    if args.skip_tests {
        eprintln!("  {:<12} skipped", "test");
    }
    if args.skip_miri {
        eprintln!("  {:<12} skipped", "miri");
    }
    eprintln!(
        "  {:<12} {:<7} {:>7.1}s",
        "total",
        "",
        started.elapsed().as_secs_f64()
    );

    match failure {
        Some((name, e)) => bail!("ci step `{name}` failed: {e:#}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &CiArgs) -> Vec<&'static str> {
        steps(args).iter().map(|s| s.name).collect()
    }

    fn command_of(steps: &[Step], name: &str) -> String {
        match &steps.iter().find(|s| s.name == name).expect("step").action {
            Action::Command(command) => cmd::display(command),
            Action::Miri => "cargo xtask miri".to_owned(),
            Action::DepsEmbedded => "deps-embedded".to_owned(),
        }
    }

    #[test]
    fn runs_fmt_clippy_test_facade_deps_doc_ref_map_clients_tls_etcd_asan_miri_in_order() {
        assert_eq!(
            names(&CiArgs::default()),
            [
                "fmt",
                "clippy",
                "test",
                "facade-features",
                "deps-embedded",
                "doc",
                "ref-map",
                "clients",
                "clients-tls",
                "clients-etcd",
                "asan",
                "miri"
            ]
        );
        let skipping = CiArgs {
            skip_tests: true,
            skip_miri: true,
        };
        assert_eq!(
            names(&skipping),
            [
                "fmt",
                "clippy",
                "facade-features",
                "deps-embedded",
                "doc",
                "ref-map",
                "clients",
                "clients-tls",
                "clients-etcd",
                "asan"
            ]
        );
    }

    #[test]
    fn the_facade_step_tests_every_feature() {
        let steps = steps(&CiArgs::default());
        assert_eq!(
            command_of(&steps, "facade-features"),
            "cargo test -p tuplekv --all-features"
        );
        assert!(command_of(&steps, "clippy").contains("tuplekv/remote,tuplekv/etcd"));
    }

    #[test]
    fn doc_step_denies_warnings() {
        let steps = steps(&CiArgs::default());
        assert!(command_of(&steps, "doc").contains("RUSTDOCFLAGS='-D warnings'"));
    }

    #[test]
    fn ref_map_step_runs_the_model_test_on_the_reference_key_map() {
        let steps = steps(&CiArgs::default());
        assert_eq!(
            command_of(&steps, "ref-map"),
            "cargo test -p tuplekv-engine --features reference-keymap --test model"
        );
    }
}
