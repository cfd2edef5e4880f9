//! The code-generation article's scenario, run for real: one durable tuplekv server process,
//! four app-server processes issuing `INFO001`, `WARN001`, `ERR001` (fast), `INV00001`
//! (gapless) and inserting users with a unique email, and a `kill -9` of the server half way
//! through, restarted on the same port and data directory. Afterwards the store itself is
//! checked: no code twice, no gap in the gapless numbers, no email twice, the index clean.
//!
//! `cargo run --release -p tuplekv --features remote --example app_servers`
//!
//! The processes are this binary run again with `--role server` or `--role app` (see
//! `scenario.rs`, which `tests/app_servers.rs` runs too, in a smaller configuration).

mod scenario;

fn main() -> std::process::ExitCode {
    scenario::main(scenario::Config::EXAMPLE)
}
