//! `tuplekv`: the command line. `main` only parses arguments and dispatches; each subcommand
//! lives in its own module.

mod backup;
mod data;
mod data_dir;
mod dump;
mod entry;
mod import_deno;
mod keys;
mod progress;
mod restore;
mod serve;
mod target;
mod v8;

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
    /// Print the entry at a key, e.g. `tuplekv get --path DIR '["users", 1n]'`.
    Get(data::GetArgs),
    /// Set a key to a value (`--bytes`, `--u64`, `--string` or `--v8-hex`).
    Set(data::SetArgs),
    /// Delete a key.
    Delete(data::DeleteArgs),
    /// List entries by prefix or range, in key order (or reversed).
    List(data::ListArgs),
    /// Print the current state of keys, then each change, until Ctrl-C.
    Watch(data::WatchArgs),
    /// Count a database's entries and bytes.
    Stats(data::StatsArgs),
    /// Write every entry as newline-delimited JSON.
    Dump(dump::DumpArgs),
    /// Write the entries of a `dump` file; checks the whole file first.
    Load(dump::LoadArgs),
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
        Command::Get(args) => data::get(args),
        Command::Set(args) => data::set(args),
        Command::Delete(args) => data::delete(args),
        Command::List(args) => data::list(args),
        Command::Watch(args) => data::watch(args),
        Command::Stats(args) => data::stats(args),
        Command::Dump(args) => dump::dump(args),
        Command::Load(args) => dump::load(args),
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
