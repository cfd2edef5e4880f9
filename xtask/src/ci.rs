//! `cargo xtask ci`: formatting, lints, tests and the docs build, in that order, stopping at
//! the first failure, with a timing summary at the end.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::cmd;

/// Options of `cargo xtask ci`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CiArgs {
    /// Leave out `cargo test --workspace` (`.ci/run` has already run it).
    pub(crate) skip_tests: bool,
}

/// One CI step: a label for the summary and the command it runs.
struct Step {
    /// Short name shown in the summary.
    name: &'static str,
    /// The command, already set up to run from the workspace root.
    command: Command,
}

/// The steps `ci` runs, in order.
fn steps(args: &CiArgs) -> Vec<Step> {
    let mut steps = Vec::new();

    let mut fmt = cmd::cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    steps.push(Step {
        name: "fmt",
        command: fmt,
    });

    let mut clippy = cmd::cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    steps.push(Step {
        name: "clippy",
        command: clippy,
    });

    if !args.skip_tests {
        let mut test = cmd::cargo();
        test.args(["test", "--workspace"]);
        steps.push(Step {
            name: "test",
            command: test,
        });
    }

    let mut doc = cmd::cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    steps.push(Step {
        name: "doc",
        command: doc,
    });

    steps
}

/// Runs the CI steps. Prints a timing summary whether or not they all pass.
pub(crate) fn run(args: &CiArgs) -> Result<()> {
    let steps = steps(args);
    let total = steps.len();
    let started = Instant::now();
    let mut timings: Vec<(&str, Duration, bool)> = Vec::new();
    let mut failure = None;

    for (i, mut step) in steps.into_iter().enumerate() {
        eprintln!("\n[ci {}/{total}] {}", i + 1, step.name);
        let t = Instant::now();
        let result = cmd::run(&mut step.command);
        timings.push((step.name, t.elapsed(), result.is_ok()));
        if let Err(e) = result {
            failure = Some((step.name, e));
            break;
        }
    }

    eprintln!("\nci summary:");
    for (name, elapsed, ok) in &timings {
        let verdict = if *ok { "ok" } else { "FAILED" };
        eprintln!("  {name:<8} {verdict:<7} {:>7.1}s", elapsed.as_secs_f64());
    }
    if args.skip_tests {
        eprintln!("  {:<8} skipped", "test");
    }
    eprintln!(
        "  {:<8} {:<7} {:>7.1}s",
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

    #[test]
    fn runs_fmt_clippy_test_doc_in_order() {
        assert_eq!(names(&CiArgs::default()), ["fmt", "clippy", "test", "doc"]);
        assert_eq!(
            names(&CiArgs { skip_tests: true }),
            ["fmt", "clippy", "doc"]
        );
    }

    #[test]
    fn doc_step_denies_warnings() {
        let steps = steps(&CiArgs::default());
        let doc = steps.iter().find(|s| s.name == "doc").expect("doc step");
        assert!(cmd::display(&doc.command).contains("RUSTDOCFLAGS='-D warnings'"));
    }
}
