//! `tuplekv`: the command line. `main` only parses arguments and dispatches; each subcommand
//! lives in its own module.

mod backup;
mod data_dir;
mod import_deno;
mod progress;
mod restore;
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
    /// Write a consistent copy of a database into a new directory (while nothing else has it
    /// open).
    Backup(backup::BackupArgs),
    /// Make a new database directory from a backup (never over an existing database).
    Restore(restore::RestoreArgs),
    /// Import a Deno KV SQLite file (`Deno.openKv(path)`) into a new database, values,
    /// versionstamps and deadlines unchanged.
    ImportDeno(import_deno::ImportDenoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Restore(args) => restore::run(args),
        Command::ImportDeno(args) => import_deno::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tuplekv: {message}");
            ExitCode::FAILURE
        }
    }
}
