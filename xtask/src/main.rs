//! Project automation, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! Commands: `ci` (formatting, lints, tests, docs, Miri), `miri` (the engine's `unsafe` code
//! under Miri), `fuzz` (cargo-fuzz targets on stable Rust), `bench` (criterion groups),
//! `soak` (long property, crash, sanitizer and loom runs) and `conformance` (the KV Connect
//! scripts with the real Deno and Node clients). `cargo xtask --help` lists them, and
//! `cargo xtask <COMMAND> --help` each one's options; clap parses the command line ([`Cli`]).

mod bench;
mod ci;
mod conformance;
mod deps;
mod etcd_cluster;
mod fuzz;
mod miri;
mod nightly;
mod perf_doc;
mod remote_denokv;
mod sanitizer;
mod soak;
mod test_ca;

use std::process::ExitCode;

use tuplekv_harness::{clients, cmd, server as server_process};

use bench::BenchArgs;
use ci::CiArgs;
use clap::{CommandFactory, Parser, Subcommand};
use conformance::ConformanceArgs;
use etcd_cluster::EtcdClusterArgs;
use fuzz::FuzzCli;
use soak::SoakArgs;

/// What `cargo xtask ci --help` says beside the options.
const CI_ABOUT: &str = "\
Runs, from the workspace root, stopping at the first failure:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --features tuplekv/remote,tuplekv/etcd -- -D warnings
    cargo test --workspace                      (left out with --skip-tests)
    cargo test -p tuplekv --all-features        (the facade's remote and etcd features)
    cargo tree -p tuplekv -e normal,build --prefix none
                                                (deps-embedded: fails if the default facade
                                                 builds tokio, hyper, h2, rustls, prost, ...)
    RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps --features tuplekv/remote,tuplekv/etcd
    cargo test -p tuplekv-engine --features reference-keymap --test model
    cargo xtask conformance --against tuplekv   (the real Deno and Node clients)
    cargo xtask conformance --against tuplekv --tls    (the same, over TLS)
    cargo xtask conformance --against tuplekv --etcd   (the same, on `serve --etcd`)
    RUSTC_BOOTSTRAP=1 RUSTFLAGS=-Zsanitizer=address ... cargo test -p tuplekv-engine \\
        --target x86_64-unknown-linux-gnu --lib -- keymap::tests:: chain_cell::tests::
    cargo xtask miri                            (left out with --skip-miri; where Miri
                                                 cannot be installed, a banner says so)
then prints how long each step took.";

/// What `cargo xtask miri --help` says.
const MIRI_ABOUT: &str = "\
Checks the engine's unsafe code (crates/engine/src/keymap.rs, chain_cell.rs) by running
their unit tests, scaled down under cfg(miri), under Miri:
    rustup component add --toolchain nightly miri rust-src
        (rustup toolchain install nightly ... when there is no nightly toolchain)
    rustup run nightly cargo miri setup
    MIRIFLAGS='-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks' \\
        rustup run nightly cargo miri test -p tuplekv-engine --lib -- keymap::tests:: \\
        chain_cell::tests::
xtask/src/miri.rs says why each flag. When the first two commands fail (a machine that can
fetch no toolchain), prints a banner saying so and runs the same tests, full size, under
AddressSanitizer instead:
    RUSTC_BOOTSTRAP=1 RUSTFLAGS=-Zsanitizer=address ASAN_OPTIONS=detect_leaks=0 \\
        CARGO_TARGET_DIR=target/asan cargo test -p tuplekv-engine \\
        --target x86_64-unknown-linux-gnu --lib -- keymap::tests:: chain_cell::tests::
A failure of the tests themselves, under either, fails the command.";

/// What `cargo xtask fuzz --help` says beside the options.
const FUZZ_ABOUT: &str = "\
Runs `cargo fuzz run --sanitizer none <TARGET> corpus/<TARGET> -- -max_total_time=N` in fuzz/,
with RUSTC_BOOTSTRAP=1 for that command only (cargo-fuzz needs unstable rustc flags). Installs
cargo-fuzz with `cargo install cargo-fuzz --locked` when `cargo fuzz` is missing.

When the fuzzer fails, the input it wrote to fuzz/artifacts/<TARGET>/ is minimised with
`cargo fuzz tmin` and copied to fuzz/regressions/<TARGET>/ (commit it: the tests replay it),
and the command exits non-zero naming that file.";

/// What `cargo xtask bench --help` says beside the options.
const BENCH_ABOUT: &str = "\
Builds the bench orchestrator (`cargo build --profile bench -p tuplekv-benches --bin bench`,
module benches/src/orchestrate/), runs it with these options, and merges into
docs/performance.md the criterion report a full run that measured something left to publish.
Every comparison below measures each workload for 4 s after 0.5 s of warm-up (`--quick`: 0.5 s
after 0.1 s; pgbench and service-load take whole seconds, so 1 s). The orchestrator:

Runs `cargo bench -p tuplekv-benches --bench <GROUP>` for each group; a group is a file
benches/benches/<GROUP>.rs, and by default every one runs. Starts a loopback redis-server for
the Redis peer when one is installed (else that peer is reported as skipped). Then writes
target/bench-report/report.md (one table per benchmark: ours, each peer, the ratio; the machine
and the date) and target/bench-report/ratios.svg (a bar chart of the ratios), from the results
of this run only.

The group `server` (never run by default) is not a criterion group: it builds `tuplekv` and
the load generator `kvconnect_load` with the bench profile, installs Deno 2.9.6 and denokv
0.14.0 into $TUPLEKV_TOOLS_DIR (default target/tools) when missing, and runs the Deno client bench
(bench/server/deno_bench.ts) and the load generator against denokv, `tuplekv serve
--durability sync` and `tuplekv serve` in memory, one at a time on loopback. It prints a
side-by-side table with the goals of issue 22 marked met or not, and writes it to
target/bench-reports/server.md (`--quick` is a smoke run).
TUPLEKV_BENCH_SERVER_BIN=<path> uses that `tuplekv` binary instead of building one.

The group `remote` (never run by default) builds `tuplekv` and the load process
`remote_codes` with the bench profile, starts `tuplekv serve --durability sync` on loopback and
runs 4 processes x 4 threads issuing codes through `RemoteStore` (fast mode, then gapless mode),
then the same for Redis `INCR` (unpipelined; a redis-server is started for it when installed)
and PostgreSQL `nextval` through pgbench (a throw-away cluster, when PostgreSQL is installed),
and the sequential get and commit latency of `RemoteStore` against an in-process `Database`.
It prints a table with the goals (fast >= 10x Redis, gapless >= Redis) marked met or not and
writes it to target/bench-reports/remote.md.

The group `etcd` (never run by default) builds the load process `etcd_load` with the bench
profile, starts a 3-member etcd cluster on loopback (the test kit's harness) and runs 4 processes x 4
threads of checked commits through `EtcdStore` beside raw etcd transactions with the same
client (the overhead ratio, goal >= 0.8), codes in fast and gapless mode, and Redis `INCR`;
with the leader's WAL fsyncs from etcd's /metrics. Report: target/bench-reports/etcd.md.

The group `service` (never run by default) builds the load generator `service-load` of the
example service (examples/service) with the bench profile and runs it: the service in process
on an embedded in-memory database, an embedded durable one (sync) and an in-process `tuplekv serve`
through `RemoteStore`, each with blocking handlers (in `spawn_blocking`) and async ones, under
64 HTTP/1.1 keep-alive clients per scenario (users, invoices, orders, reads). Report:
target/bench-reports/service.md.";

/// What `cargo xtask soak --help` says beside the options.
const SOAK_ABOUT: &str = "\
The long runs CI cannot afford, stopping at the first failure:
    TUPLEKV_PROPTEST_CASES=N TUPLEKV_CRASH_ITERATIONS=200 TUPLEKV_STRESS=10 \\
        SEQUENCE_HAMMER_PER_THREAD=20000 cargo test --workspace --release
    RUSTC_BOOTSTRAP=1 RUSTFLAGS='-Zsanitizer=address' ASAN_OPTIONS=detect_leaks=0 \\
        TUPLEKV_PROPTEST_CASES=N/5 TUPLEKV_STRESS=5 CARGO_TARGET_DIR=target/asan \\
        cargo test -p tuplekv-engine --target x86_64-unknown-linux-gnu --lib --tests
    RUSTFLAGS='-Zsanitizer=thread --cfg crossbeam_sanitize_thread' TUPLEKV_STRESS=5 \\
        CARGO_TARGET_DIR=target/tsan rustup run nightly cargo test -Zbuild-std \\
        -p tuplekv-engine --target x86_64-unknown-linux-gnu --lib -- keymap::tests:: \\
        chain_cell::tests::
        (after `rustup component add --toolchain nightly rust-src`; skipped, with a
        banner saying why, where nightly's rust-src cannot be installed)
    RUSTFLAGS='--cfg loom' CARGO_TARGET_DIR=target/loom \\
        cargo test -p tuplekv-sequence --test loom --release
A failing property case is saved under the crate's proptest-regressions/ (commit it).";

/// The command line of `cargo xtask`.
#[derive(Debug, Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "Project automation for tuplekv.",
    arg_required_else_help = true
)]
struct Cli {
    /// What to run.
    #[command(subcommand)]
    task: Task,
}

/// A command of `cargo xtask`.
#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Task {
    /// fmt --check, clippy -D warnings, tests, docs with -D warnings, the model test on the
    /// reference key map, the real Deno and Node clients against `tuplekv serve`, the unsafe
    /// code's tests under AddressSanitizer and Miri.
    #[command(long_about = CI_ABOUT)]
    Ci(CiArgs),
    /// The engine's unsafe code under Miri (or, where Miri cannot be installed, under
    /// AddressSanitizer).
    #[command(long_about = MIRI_ABOUT)]
    Miri,
    /// Run one cargo-fuzz target, or every one, for N seconds each; or list them.
    #[command(long_about = FUZZ_ABOUT)]
    Fuzz(FuzzCli),
    /// Run criterion bench groups (default: all of them), or the `server`, `remote`, `etcd`
    /// and `service` comparisons.
    #[command(long_about = BENCH_ABOUT)]
    Bench(BenchArgs),
    /// Long runs: many property cases, crash and stress rounds, the engine under
    /// AddressSanitizer and ThreadSanitizer, loom.
    #[command(long_about = SOAK_ABOUT)]
    Soak(SoakArgs),
    /// KV Connect conformance scripts with the real Deno and Node clients against `tuplekv
    /// serve` (on etcd, over TLS) and/or denokv.
    #[command(long_about = conformance::ABOUT)]
    Conformance(ConformanceArgs),
    /// A local etcd cluster for `tuplekv serve --etcd`, until Ctrl-C.
    #[command(long_about = etcd_cluster::ABOUT)]
    EtcdCluster(EtcdClusterArgs),
    /// RemoteStore's denokv tests (crates/remote/tests/denokv.rs) against a real denokv
    /// started for the run.
    #[command(long_about = remote_denokv::ABOUT)]
    RemoteDenokv,
}

/// Parses the command line and runs the task. Exit codes: 0 on success, 1 when the task
/// fails, 2 for a command line that does not parse (clap's).
fn main() -> ExitCode {
    let task = Cli::parse().task;
    if let Task::Conformance(args) = &task
        && let Err(message) = args.check()
    {
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, message)
            .exit();
    }
    let result = match task {
        Task::Ci(args) => ci::run(&args),
        Task::Miri => miri::run(miri::Fallback::AddressSanitizer),
        Task::Fuzz(args) => fuzz::run(&args.into()),
        Task::Bench(args) => bench::run(&args),
        Task::Soak(args) => soak::run(&args),
        Task::Conformance(args) => conformance::run(&args),
        Task::RemoteDenokv => remote_denokv::run(),
        Task::EtcdCluster(args) => etcd_cluster::run(args.members),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;
    use crate::conformance::Against;
    use crate::fuzz::{FuzzArgs, Selection};

    fn parse(line: &str) -> Result<Task, ErrorKind> {
        Cli::try_parse_from(std::iter::once("xtask").chain(line.split_whitespace()))
            .map(|cli| cli.task)
            .map_err(|e| e.kind())
    }

    fn refused(line: &str) -> bool {
        !matches!(
            parse(line),
            Ok(_) | Err(ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        )
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_is_asked_for_with_help_or_nothing() {
        for line in [
            "--help",
            "help",
            "help fuzz",
            "bench --quick -h",
            "ci --help",
        ] {
            assert_eq!(parse(line).err(), Some(ErrorKind::DisplayHelp), "{line}");
        }
        assert_eq!(
            parse("").err(),
            Some(ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand)
        );
        assert!(refused("help nope"));
        assert!(refused("deploy"));
    }

    #[test]
    fn ci_takes_its_two_skips() {
        assert_eq!(parse("ci"), Ok(Task::Ci(CiArgs::default())));
        assert_eq!(
            parse("ci --skip-miri --skip-tests"),
            Ok(Task::Ci(CiArgs {
                skip_tests: true,
                skip_miri: true,
            }))
        );
        assert!(refused("ci --fast"));
    }

    #[test]
    fn miri_and_remote_denokv_take_nothing() {
        assert_eq!(parse("miri"), Ok(Task::Miri));
        assert_eq!(parse("remote-denokv"), Ok(Task::RemoteDenokv));
        assert!(refused("miri --fast"));
        assert!(refused("remote-denokv --fast"));
    }

    #[test]
    fn fuzz_takes_one_target_all_or_list() {
        let fuzz = |line: &str| match parse(line) {
            Ok(Task::Fuzz(cli)) => Some(FuzzArgs::from(cli)),
            _ => None,
        };
        let args = |selection, seconds| Some(FuzzArgs { selection, seconds });
        assert_eq!(
            fuzz("fuzz decode_key"),
            args(Selection::One("decode_key".into()), fuzz::DEFAULT_SECONDS)
        );
        assert_eq!(
            fuzz("fuzz decode_key --seconds 20"),
            args(Selection::One("decode_key".into()), 20)
        );
        assert_eq!(fuzz("fuzz --seconds=5 --all"), args(Selection::All, 5));
        assert_eq!(
            fuzz("fuzz --list"),
            args(Selection::List, fuzz::DEFAULT_SECONDS)
        );
        for bad in [
            "fuzz",
            "fuzz a b",
            "fuzz --all a",
            "fuzz --list a",
            "fuzz --list --seconds 5",
            "fuzz a --seconds",
            "fuzz a --seconds 0",
            "fuzz a --seconds x",
            "fuzz a --fast",
        ] {
            assert!(refused(bad), "{bad}");
        }
    }

    #[test]
    fn bench_takes_quick_and_groups() {
        assert_eq!(parse("bench"), Ok(Task::Bench(BenchArgs::default())));
        assert_eq!(
            parse("bench --quick codec engine"),
            Ok(Task::Bench(BenchArgs {
                quick: true,
                groups: vec!["codec".into(), "engine".into()],
            }))
        );
        assert!(refused("bench --slow"));
    }

    #[test]
    fn soak_takes_cases_of_at_least_one_and_its_skips() {
        assert_eq!(parse("soak"), Ok(Task::Soak(SoakArgs::default())));
        assert_eq!(
            parse("soak --cases 100 --skip-loom --skip-asan --skip-tsan"),
            Ok(Task::Soak(SoakArgs {
                cases: 100,
                skip_loom: true,
                skip_asan: true,
                skip_tsan: true,
            }))
        );
        for bad in [
            "soak --cases",
            "soak --cases 0",
            "soak --cases x",
            "soak --fast",
        ] {
            assert!(refused(bad), "{bad}");
        }
    }

    #[test]
    fn conformance_takes_a_server_and_etcd_or_tls_but_not_both() {
        let conformance = |line: &str| match parse(line) {
            Ok(Task::Conformance(args)) => Ok(args),
            Ok(other) => panic!("{other:?}"),
            Err(kind) => Err(kind),
        };
        assert_eq!(conformance("conformance"), Ok(ConformanceArgs::default()));
        assert_eq!(
            conformance("conformance --against both --keep-output out"),
            Ok(ConformanceArgs {
                against: Against::Both,
                keep_output: Some("out".into()),
                ..ConformanceArgs::default()
            })
        );
        let etcd = conformance("conformance --etcd --against both").expect("parses");
        assert!(etcd.etcd && etcd.check().is_ok());
        let tls = conformance("conformance --tls --against=both").expect("parses");
        assert!(tls.tls && tls.check().is_ok());
        for bad in ["--etcd --against denokv", "--tls --against denokv"] {
            let args = conformance(&format!("conformance {bad}")).expect("parses");
            assert!(args.check().is_err(), "{bad}");
        }
        for bad in [
            "--against",
            "--against x",
            "--keep-output",
            "--fast",
            "denokv",
            "--etcd=1",
            "--tls --etcd",
            "--tls=yes",
        ] {
            assert!(refused(&format!("conformance {bad}")), "{bad}");
        }
    }

    #[test]
    fn etcd_cluster_takes_one_to_seven_members() {
        let members = |line: &str| match parse(line) {
            Ok(Task::EtcdCluster(args)) => Some(args.members),
            _ => None,
        };
        assert_eq!(members("etcd-cluster"), Some(etcd_cluster::MEMBERS_DEFAULT));
        assert_eq!(members("etcd-cluster --members 5"), Some(5));
        assert_eq!(members("etcd-cluster --members=1"), Some(1));
        assert_eq!(members("etcd-cluster --members 7"), Some(7));
        for bad in [
            "--members",
            "--members 0",
            "--members 8",
            "--members x",
            "3",
        ] {
            assert!(refused(&format!("etcd-cluster {bad}")), "{bad}");
        }
    }
}
