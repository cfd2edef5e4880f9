//! `tuplekv`: the command line. `main` only parses arguments and dispatches; each subcommand
//! lives in its own module.

mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// tuplekv: an ordered, transactional key-value store in the style of Deno KV.
#[derive(Debug, Parser)]
#[command(name = "tuplekv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a store over KV Connect (`Deno.openKv("http://…")`, Node's `@deno/kv`).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tuplekv: {message}");
            ExitCode::FAILURE
        }
    }
}
