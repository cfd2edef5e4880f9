//! `tuplekv`: the command line. `main` only parses arguments and dispatches; each subcommand
//! lives in its own module.

mod backup;
mod data;
mod data_dir;
mod databases;
mod db;
mod dump;
mod entry;
mod http;
mod import_deno;
mod keys;
mod logging;
mod progress;
mod remote_stats;
mod restore;
mod serve;
mod target;
mod v8;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

/// The exit code of a bad command line (clap's, and the usual one for a usage error).
const EXIT_USAGE: u8 = 2;

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
    /// Create, list or drop the named databases a server serves at `/NAME`.
    Db(db::DbArgs),
    /// Print the entry at a key, e.g. `tuplekv get --path DIR '["users", 1n]'`; a V8 value is
    /// shown as a JavaScript literal (`v8 { name: "Ada" }`), hex when it cannot be read.
    Get(data::KeyArgs),
    /// Set a key to a value (`--js`, `--json-value`, `--string`, `--bytes`, `--u64` or
    /// `--v8-hex`; `@FILE` reads the value from a file).
    Set(data::SetArgs),
    /// Delete a key.
    Delete(data::KeyArgs),
    /// List entries by prefix or range, in key order (or reversed).
    List(data::ListArgs),
    /// Print the current state of keys, then each change, until Ctrl-C.
    Watch(data::WatchArgs),
    /// Count a database's entries and bytes.
    Stats(data::StatsArgs),
    /// Write every entry as newline-delimited JSON.
    Dump(dump::DumpArgs),
    /// Write the entries of a `dump` file; checks the whole file first.
    ///
    /// Into a missing or empty directory (`--path`) the new database is written all at once
    /// and keeps every entry's versionstamp and deadline, so dump → load → dump gives the
    /// same file. Into an existing database or a server (`--url`) entries get new
    /// versionstamps, in the order of their dumped ones, in commits of at most 1000 entries.
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Db(args) => db::run(args),
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

/// Reports a command line clap refused: help and version print as clap prints them (exit 0);
/// any other error is one line on stderr naming the `--help` to read, and exit 2.
fn usage_error(error: &clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Prints the help or version text and exits as clap does.
        error.exit();
    }
    let help = match subcommand_named(std::env::args().skip(1)) {
        Some(name) => format!("tuplekv {name} --help"),
        None => "tuplekv --help".to_owned(),
    };
    eprintln!(
        "tuplekv: {} (see `{help}`)",
        one_line(&error.render().to_string())
    );
    ExitCode::from(EXIT_USAGE)
}

/// The message of clap's rendered error on one line: its first paragraph (clap puts the
/// missing arguments on lines of their own after the first), without the `error: ` prefix;
/// the tips and the usage block after it are left out.
fn one_line(rendered: &str) -> String {
    let first = rendered.split("\n\n").next().unwrap_or(rendered);
    let joined = first
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    joined
        .strip_prefix("error: ")
        .map_or(joined.clone(), str::to_owned)
}

/// The first of `args` that names a subcommand, if any.
fn subcommand_named(args: impl Iterator<Item = String>) -> Option<String> {
    let cli = Cli::command();
    let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
    args.take_while(|a| a != "--")
        .find(|a| names.contains(&a.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let missing = "error: the following required arguments were not provided:\n  <KEY>\n  \
                       --path <PATH>\n\nUsage: tuplekv get <KEY>\n\nFor more information, try \
                       '--help'.\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: <KEY> --path <PATH>"
        );
        let unknown = "error: unexpected argument '--nope' found\n\n  tip: to pass '--nope' as \
                       a value, use '-- --nope'\n\nUsage: tuplekv get\n";
        assert_eq!(one_line(unknown), "unexpected argument '--nope' found");
    }

    #[test]
    fn the_subcommand_is_the_first_argument_naming_one() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            subcommand_named(args(&["--path", "get", "list"]).into_iter()),
            Some("get".to_owned())
        );
        assert_eq!(subcommand_named(args(&["nope"]).into_iter()), None);
        assert_eq!(subcommand_named(args(&["--", "get"]).into_iter()), None);
    }
}
