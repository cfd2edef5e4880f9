//! The app-servers scenario (`examples/app_servers`) in a small configuration: a durable
//! server process and two app processes issuing fast and gapless codes and inserting users
//! with shared emails, the server killed with SIGKILL half way and restarted on the same port
//! and data directory; then no duplicate code, no gapless gap, no duplicate email, a clean
//! index.
//!
//! This binary has no libtest harness (`harness = false` in Cargo.toml): it starts itself
//! again with `--role server` or `--role app`, which `scenario::main` dispatches on, exactly
//! as the example does. A libtest binary would need a hidden test selected by a filter for
//! each role instead. Arguments cargo or a runner passes (filters, `--test-threads`) are
//! ignored, except `--list`, answered as libtest would so test runners can enumerate it.

#[path = "../examples/app_servers/scenario.rs"]
mod scenario;

fn main() -> std::process::ExitCode {
    if std::env::args().any(|a| a == "--list") {
        println!("app_servers: test");
        return std::process::ExitCode::SUCCESS;
    }
    scenario::main(scenario::Config::SMALL)
}
