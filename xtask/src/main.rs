//! Project automation, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! Commands: `ci` (formatting, lints, tests, docs, Miri), `miri` (the engine's `unsafe` code
//! under Miri), `fuzz` (cargo-fuzz targets on stable Rust), `bench` (criterion groups),
//! `soak` (long property, crash, sanitizer and loom runs) and `conformance` (the KV Connect
//! scripts with the real Deno and Node clients). `cargo xtask --help` lists their
//! options. Only std and anyhow are used; arguments are parsed by hand in [`parse`].

mod bench;
mod bench_etcd;
mod bench_remote;
mod bench_server;
mod bench_service;
mod ci;
mod clients;
mod cmd;
mod conformance;
mod deps;
mod etcd_cluster;
mod fuzz;
mod handoff;
mod miri;
mod nightly;
mod perf_doc;
mod remote_denokv;
mod report;
mod sanitizer;
mod server_process;
mod soak;
mod test_ca;

use std::process::ExitCode;

use bench::BenchArgs;
use ci::CiArgs;
use fuzz::{FuzzArgs, Selection};
use soak::SoakArgs;

/// Overview printed by `cargo xtask --help`.
const HELP: &str = "\
Project automation for tuplekv.

USAGE:
    cargo xtask <COMMAND> [OPTIONS]

COMMANDS:
    ci [--skip-tests] [--skip-miri]
                                  fmt --check, clippy -D warnings, tests, docs with -D warnings,
                                  the model test on the reference key map, the real Deno and
                                  Node clients against `tuplekv serve`, the unsafe code's
                                  tests under AddressSanitizer and miri
    miri                          the engine's unsafe code under Miri (or, where Miri cannot
                                  be installed, under AddressSanitizer)
    fuzz <TARGET> [--seconds N]   run one cargo-fuzz target for N seconds (default 30)
    fuzz --all [--seconds N]      run every fuzz target, N seconds each
    fuzz --list                   print the fuzz targets
    bench [--quick] [GROUP...]    run criterion bench groups (default: all of them);
                                  the group `server` compares KV Connect servers,
                                  `remote` code sequences through `RemoteStore`,
                                  `etcd` tuplekv on a 3-member etcd cluster,
                                  `service` the example axum service under 64 clients
    soak [--cases N] [--skip-asan] [--skip-tsan] [--skip-loom]
                                  long runs: many property cases, crash and stress rounds,
                                  the engine under AddressSanitizer and ThreadSanitizer, loom
    conformance [--against tuplekv|denokv|both] [--etcd | --tls] [--keep-output DIR]
                                  KV Connect conformance scripts with the real Deno and Node
                                  clients against tuplekv serve (--etcd: on an etcd cluster;
                                  --tls: over https) and/or denokv
    etcd-cluster [--members N]    a local etcd cluster for `tuplekv serve --etcd`, until Ctrl-C
    remote-denokv                 RemoteStore's denokv tests (crates/remote/tests/denokv.rs)
                                  against a real denokv started for the run
    help [COMMAND]                print this help, or a command's

Run `cargo xtask <COMMAND> --help` for details.";

/// Help for `cargo xtask ci`.
const CI_HELP: &str = "\
cargo xtask ci [--skip-tests] [--skip-miri]

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
then prints how long each step took.

OPTIONS:
    --skip-tests    leave out `cargo test` (.ci/run runs it before calling this)
    --skip-miri     leave out Miri (a few minutes; CI runs it)";

/// Help for `cargo xtask miri`.
const MIRI_HELP: &str = "\
cargo xtask miri

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

/// Help for `cargo xtask fuzz`.
const FUZZ_HELP: &str = "\
cargo xtask fuzz <TARGET> [--seconds N]
cargo xtask fuzz --all [--seconds N]
cargo xtask fuzz --list

Runs `cargo fuzz run --sanitizer none <TARGET> corpus/<TARGET> -- -max_total_time=N` in fuzz/,
with RUSTC_BOOTSTRAP=1 for that command only (cargo-fuzz needs unstable rustc flags). Installs
cargo-fuzz with `cargo install cargo-fuzz --locked` when `cargo fuzz` is missing.

When the fuzzer fails, the input it wrote to fuzz/artifacts/<TARGET>/ is minimised with
`cargo fuzz tmin` and copied to fuzz/regressions/<TARGET>/ (commit it: the tests replay it),
and the command exits non-zero naming that file.

OPTIONS:
    --all          fuzz every target in fuzz/Cargo.toml, one after another
    --list         print the targets and exit
    --seconds N    fuzzing time per target (default 30)";

/// Help for `cargo xtask bench`.
const BENCH_HELP: &str = "\
cargo xtask bench [--quick] [GROUP...]

Runs `cargo bench -p tuplekv-benches --bench <GROUP>` for each group; a group is a file
benches/benches/<GROUP>.rs, and by default every one runs. Starts a loopback redis-server for
the Redis peer when one is installed (else that peer is reported as skipped). Then writes
target/bench-report/report.md (one table per benchmark: ours, each peer, the ratio; the machine
and the date) and target/bench-report/ratios.svg (a bar chart of the ratios), from the results
of this run only.

The group `server` (never run by default) is not a criterion group: it builds `tuplekv` and
the load generator `kvconnect_load` in release mode, installs Deno 2.9.6 and denokv 0.14.0
into $TUPLEKV_TOOLS_DIR (default target/tools) when missing, and runs the Deno client bench
(bench/server/deno_bench.ts) and the load generator against denokv, `tuplekv serve
--durability sync` and `tuplekv serve` in memory, one at a time on loopback. It prints a
side-by-side table with the goals of issue 22 marked met or not, and writes it to
target/bench-reports/server.md (about 4 minutes; `--quick` is a smoke run of under a minute).
TUPLEKV_BENCH_SERVER_BIN=<path> uses that `tuplekv` binary instead of building one.

The group `remote` (never run by default) builds `tuplekv` and the load process
`remote_codes` in release mode, starts `tuplekv serve --durability sync` on loopback and runs
4 processes x 4 threads issuing codes through `RemoteStore` (fast mode, then gapless mode),
then the same for Redis `INCR` (unpipelined; a redis-server is started for it when installed)
and PostgreSQL `nextval` through pgbench (a throw-away cluster, when PostgreSQL is installed),
and the sequential get and commit latency of `RemoteStore` against an in-process `Database`.
It prints a table with the goals (fast >= 10x Redis, gapless >= Redis) marked met or not and
writes it to target/bench-reports/remote.md (about a minute; `--quick`: 1 s per workload).

The group `etcd` (never run by default) builds the load process `etcd_load` in release mode,
starts a 3-member etcd cluster on loopback (the test kit's harness) and runs 4 processes x 4
threads of checked commits through `EtcdStore` beside raw etcd transactions with the same
client (the overhead ratio, goal >= 0.8), codes in fast and gapless mode, and Redis `INCR`;
with the leader's WAL fsyncs from etcd's /metrics. Report: target/bench-reports/etcd.md
(about 1.5 minutes once built).

The group `service` (never run by default) builds the load generator `service-load` of the
example service (examples/service) in release mode and runs it: the service in process on an
embedded in-memory database, an embedded durable one (sync) and an in-process `tuplekv serve`
through `RemoteStore`, each with blocking handlers (in `spawn_blocking`) and async ones, under
64 HTTP/1.1 keep-alive clients per scenario (users, invoices, orders, reads). Report:
target/bench-reports/service.md (about a minute; `--quick`: 1 s per scenario).

OPTIONS:
    --quick    criterion's `--quick` with short warm-up/measurement: a smoke run of about 5
               minutes on a 2-vCPU machine once the benches are built (engine about 2.5,
               index about 1.2); building them first takes 7 minutes or more (much more
               on a busy machine, and more with the bench profile's debug info)";

/// Help for `cargo xtask soak`.
const SOAK_HELP: &str = "\
cargo xtask soak [--cases N] [--skip-asan] [--skip-tsan] [--skip-loom]

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
A failing property case is saved under the crate's proptest-regressions/ (commit it).

OPTIONS:
    --cases N      cases per property test (default 5000)
    --skip-asan    leave out the AddressSanitizer run of the engine's tests
    --skip-tsan    leave out the ThreadSanitizer run of the unsafe modules' tests
    --skip-loom    leave out the loom model checks";

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
enum Task {
    /// Print a help text.
    Help(&'static str),
    /// `cargo xtask ci`.
    Ci(CiArgs),
    /// `cargo xtask miri`.
    Miri,
    /// `cargo xtask fuzz`.
    Fuzz(FuzzArgs),
    /// `cargo xtask bench`.
    Bench(BenchArgs),
    /// `cargo xtask soak`.
    Soak(SoakArgs),
    /// `cargo xtask conformance`.
    Conformance(conformance::ConformanceArgs),
    /// `cargo xtask remote-denokv`.
    RemoteDenokv,
    /// `cargo xtask etcd-cluster`, with its member count.
    EtcdCluster(usize),
}

/// A command line that does not parse; the message says why.
#[derive(Debug, PartialEq, Eq)]
struct UsageError(String);

/// Shorthand for a [`UsageError`] result.
fn usage<T>(message: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(message.into()))
}

/// Parses the arguments after `cargo xtask`.
fn parse(args: &[String]) -> Result<Task, UsageError> {
    let Some((command, rest)) = args.split_first() else {
        return Ok(Task::Help(HELP));
    };
    match command.as_str() {
        "-h" | "--help" => Ok(Task::Help(HELP)),
        "help" => match rest {
            [] => Ok(Task::Help(HELP)),
            [topic] => Ok(Task::Help(help_for(topic)?)),
            _ => usage("`help` takes at most one command name"),
        },
        "ci" => parse_ci(rest),
        "miri" => parse_miri(rest),
        "fuzz" => parse_fuzz(rest),
        "bench" => parse_bench(rest),
        "soak" => parse_soak(rest),
        "conformance" => match conformance::parse(rest) {
            Ok(Some(args)) => Ok(Task::Conformance(args)),
            Ok(None) => Ok(Task::Help(conformance::HELP)),
            Err(message) => usage(message),
        },
        "etcd-cluster" => match etcd_cluster::parse(rest) {
            Ok(Some(members)) => Ok(Task::EtcdCluster(members)),
            Ok(None) => Ok(Task::Help(etcd_cluster::HELP)),
            Err(message) => usage(message),
        },
        "remote-denokv" => match rest {
            [] => Ok(Task::RemoteDenokv),
            [a] if is_help(a) => Ok(Task::Help(remote_denokv::HELP)),
            [other, ..] => usage(format!("`remote-denokv` does not take `{other}`")),
        },
        other => usage(format!("unknown command `{other}`")),
    }
}

/// The help text for the command `topic`.
fn help_for(topic: &str) -> Result<&'static str, UsageError> {
    match topic {
        "ci" => Ok(CI_HELP),
        "miri" => Ok(MIRI_HELP),
        "fuzz" => Ok(FUZZ_HELP),
        "bench" => Ok(BENCH_HELP),
        "soak" => Ok(SOAK_HELP),
        "conformance" => Ok(conformance::HELP),
        "remote-denokv" => Ok(remote_denokv::HELP),
        "etcd-cluster" => Ok(etcd_cluster::HELP),
        other => usage(format!("unknown command `{other}`")),
    }
}

/// Whether `arg` asks for help.
fn is_help(arg: &str) -> bool {
    arg == "-h" || arg == "--help"
}

/// Parses the options of `ci`.
fn parse_ci(args: &[String]) -> Result<Task, UsageError> {
    let mut ci = CiArgs::default();
    for arg in args {
        match arg.as_str() {
            a if is_help(a) => return Ok(Task::Help(CI_HELP)),
            "--skip-tests" => ci.skip_tests = true,
            "--skip-miri" => ci.skip_miri = true,
            other => return usage(format!("`ci` does not take `{other}`")),
        }
    }
    Ok(Task::Ci(ci))
}

/// Parses the options of `miri` (there are none).
fn parse_miri(args: &[String]) -> Result<Task, UsageError> {
    match args {
        [] => Ok(Task::Miri),
        [a] if is_help(a) => Ok(Task::Help(MIRI_HELP)),
        [other, ..] => usage(format!("`miri` does not take `{other}`")),
    }
}

/// Parses the options of `fuzz`.
fn parse_fuzz(args: &[String]) -> Result<Task, UsageError> {
    let mut all = false;
    let mut list = false;
    let mut seconds = None;
    let mut targets = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            a if is_help(a) => return Ok(Task::Help(FUZZ_HELP)),
            "--all" => all = true,
            "--list" => list = true,
            "--seconds" => {
                let Some(value) = args.next() else {
                    return usage("`--seconds` needs a value");
                };
                seconds = Some(parse_seconds(value)?);
            }
            a if a.starts_with("--seconds=") => {
                seconds = Some(parse_seconds(&a["--seconds=".len()..])?);
            }
            a if a.starts_with('-') => return usage(format!("`fuzz` does not take `{a}`")),
            target => targets.push(target.to_owned()),
        }
    }
    let selection = match (list, all, targets.as_slice()) {
        (true, false, []) if seconds.is_none() => Selection::List,
        (true, _, _) => return usage("`fuzz --list` takes no other arguments"),
        (false, true, []) => Selection::All,
        (false, true, _) => return usage("give either `--all` or a target, not both"),
        (false, false, [target]) => Selection::One(target.clone()),
        (false, false, []) => {
            return usage("`fuzz` needs a target, `--all` or `--list`");
        }
        (false, false, _) => return usage("`fuzz` takes one target (or `--all`)"),
    };
    Ok(Task::Fuzz(FuzzArgs {
        selection,
        seconds: seconds.unwrap_or(fuzz::DEFAULT_SECONDS),
    }))
}

/// Parses the value of `--seconds`: a whole number of seconds, at least 1.
fn parse_seconds(value: &str) -> Result<u64, UsageError> {
    match value.parse::<u64>() {
        Ok(0) | Err(_) => usage(format!(
            "`--seconds` needs a whole number of seconds of at least 1, not `{value}`"
        )),
        Ok(n) => Ok(n),
    }
}

/// Parses the options of `bench`.
fn parse_bench(args: &[String]) -> Result<Task, UsageError> {
    let mut bench = BenchArgs::default();
    for arg in args {
        match arg.as_str() {
            a if is_help(a) => return Ok(Task::Help(BENCH_HELP)),
            "--quick" => bench.quick = true,
            a if a.starts_with('-') => return usage(format!("`bench` does not take `{a}`")),
            group => bench.groups.push(group.to_owned()),
        }
    }
    Ok(Task::Bench(bench))
}

/// Parses the options of `soak`.
fn parse_soak(args: &[String]) -> Result<Task, UsageError> {
    let mut soak = SoakArgs::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            a if is_help(a) => return Ok(Task::Help(SOAK_HELP)),
            "--skip-loom" => soak.skip_loom = true,
            "--skip-asan" => soak.skip_asan = true,
            "--skip-tsan" => soak.skip_tsan = true,
            "--cases" => {
                let value = args.next().map(String::as_str).unwrap_or_default();
                soak.cases = match value.parse::<u32>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return usage(format!(
                            "`--cases` needs a whole number of at least 1, not `{value}`"
                        ));
                    }
                };
            }
            other => return usage(format!("`soak` does not take `{other}`")),
        }
    }
    Ok(Task::Soak(soak))
}

/// Parses the command line and runs the task. Exit codes: 0 on success, 1 when the task
/// fails, 2 for a command line that does not parse.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = match parse(&args) {
        Ok(task) => task,
        Err(UsageError(message)) => {
            eprintln!("xtask: error: {message}\nrun `cargo xtask --help` for usage");
            return ExitCode::from(2);
        }
    };
    let result = match &task {
        Task::Help(text) => {
            println!("{text}");
            Ok(())
        }
        Task::Ci(args) => ci::run(args),
        Task::Miri => miri::run(miri::Fallback::AddressSanitizer),
        Task::Fuzz(args) => fuzz::run(args),
        Task::Bench(args) => bench::run(args),
        Task::Soak(args) => soak::run(args),
        Task::Conformance(args) => conformance::run(args),
        Task::RemoteDenokv => remote_denokv::run(),
        Task::EtcdCluster(members) => etcd_cluster::run(*members),
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
    use super::*;

    fn parse_str(line: &str) -> Result<Task, UsageError> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        parse(&args)
    }

    #[test]
    fn help() {
        assert_eq!(parse_str(""), Ok(Task::Help(HELP)));
        assert_eq!(parse_str("--help"), Ok(Task::Help(HELP)));
        assert_eq!(parse_str("help fuzz"), Ok(Task::Help(FUZZ_HELP)));
        assert_eq!(parse_str("bench --quick -h"), Ok(Task::Help(BENCH_HELP)));
        assert!(parse_str("help nope").is_err());
    }

    #[test]
    fn ci() {
        assert_eq!(parse_str("ci"), Ok(Task::Ci(CiArgs::default())));
        assert_eq!(
            parse_str("ci --skip-tests"),
            Ok(Task::Ci(CiArgs {
                skip_tests: true,
                skip_miri: false,
            }))
        );
        assert_eq!(
            parse_str("ci --skip-miri --skip-tests"),
            Ok(Task::Ci(CiArgs {
                skip_tests: true,
                skip_miri: true,
            }))
        );
        assert!(parse_str("ci --fast").is_err());
    }

    #[test]
    fn miri() {
        assert_eq!(parse_str("miri"), Ok(Task::Miri));
        assert_eq!(parse_str("miri --help"), Ok(Task::Help(MIRI_HELP)));
        assert_eq!(parse_str("help miri"), Ok(Task::Help(MIRI_HELP)));
        assert!(parse_str("miri --fast").is_err());
    }

    #[test]
    fn fuzz() {
        let fuzz = |selection, seconds| Ok(Task::Fuzz(FuzzArgs { selection, seconds }));
        assert_eq!(
            parse_str("fuzz decode_key"),
            fuzz(Selection::One("decode_key".into()), 30)
        );
        assert_eq!(
            parse_str("fuzz decode_key --seconds 20"),
            fuzz(Selection::One("decode_key".into()), 20)
        );
        assert_eq!(parse_str("fuzz --seconds=5 --all"), fuzz(Selection::All, 5));
        assert_eq!(parse_str("fuzz --list"), fuzz(Selection::List, 30));
        for bad in [
            "fuzz",
            "fuzz a b",
            "fuzz --all a",
            "fuzz --list a",
            "fuzz a --seconds",
            "fuzz a --seconds 0",
            "fuzz a --seconds x",
            "fuzz a --fast",
        ] {
            assert!(parse_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bench() {
        assert_eq!(parse_str("bench"), Ok(Task::Bench(BenchArgs::default())));
        assert_eq!(
            parse_str("bench --quick codec engine"),
            Ok(Task::Bench(BenchArgs {
                quick: true,
                groups: vec!["codec".into(), "engine".into()],
            }))
        );
        assert!(parse_str("bench --slow").is_err());
    }

    #[test]
    fn soak() {
        assert_eq!(parse_str("soak"), Ok(Task::Soak(SoakArgs::default())));
        assert_eq!(
            parse_str("soak --cases 100 --skip-loom"),
            Ok(Task::Soak(SoakArgs {
                cases: 100,
                skip_loom: true,
                ..SoakArgs::default()
            }))
        );
        assert_eq!(
            parse_str("soak --skip-tsan"),
            Ok(Task::Soak(SoakArgs {
                skip_tsan: true,
                ..SoakArgs::default()
            }))
        );
        assert_eq!(
            parse_str("soak --skip-asan"),
            Ok(Task::Soak(SoakArgs {
                skip_asan: true,
                ..SoakArgs::default()
            }))
        );
        assert_eq!(parse_str("help soak"), Ok(Task::Help(SOAK_HELP)));
        for bad in [
            "soak --cases",
            "soak --cases 0",
            "soak --cases x",
            "soak --fast",
        ] {
            assert!(parse_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn remote_denokv() {
        assert_eq!(parse_str("remote-denokv"), Ok(Task::RemoteDenokv));
        assert_eq!(
            parse_str("help remote-denokv"),
            Ok(Task::Help(remote_denokv::HELP))
        );
        assert!(parse_str("remote-denokv --fast").is_err());
    }

    #[test]
    fn etcd_cluster() {
        assert_eq!(parse_str("etcd-cluster"), Ok(Task::EtcdCluster(3)));
        assert_eq!(
            parse_str("etcd-cluster --members 5"),
            Ok(Task::EtcdCluster(5))
        );
        assert_eq!(
            parse_str("help etcd-cluster"),
            Ok(Task::Help(etcd_cluster::HELP))
        );
        assert!(parse_str("etcd-cluster --members 0").is_err());
    }

    #[test]
    fn unknown_command() {
        assert!(parse_str("deploy").is_err());
    }
}
