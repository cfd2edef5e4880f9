//! The bench orchestrator `cargo xtask bench` builds and runs: the criterion groups of this
//! crate with their peers' servers, and the comparisons that start real processes (`server`,
//! `remote`, `etcd`, `service`). See `tuplekv_benches::orchestrate`.

use std::process::ExitCode;

use clap::Parser;
use tuplekv_benches::orchestrate;

/// The command line of the orchestrator (what `cargo xtask bench` passes on).
#[derive(Debug, Parser)]
#[command(name = "bench", about = "Runs tuplekv's bench groups and comparisons.")]
struct Cli {
    /// A smoke run: criterion's `--quick` with short warm-up and measurement, and the
    /// comparisons at their quick pace.
    #[arg(long)]
    quick: bool,
    /// Groups to run: files benches/benches/GROUP.rs, or `server`, `remote`, `etcd`,
    /// `service`; none means every criterion group.
    #[arg(value_name = "GROUP")]
    groups: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match orchestrate::run(cli.quick, &cli.groups) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_takes_quick_and_groups() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["bench", "--quick", "codec", "remote"]).expect("parses");
        assert!(cli.quick);
        assert_eq!(cli.groups, ["codec", "remote"]);
        assert!(Cli::try_parse_from(["bench", "--slow"]).is_err());
    }
}
