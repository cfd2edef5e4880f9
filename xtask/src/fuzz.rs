//! `cargo xtask fuzz`: runs the cargo-fuzz targets of `fuzz/` on stable Rust, and turns a crash
//! into a minimised, committed regression input.
//!
//! cargo-fuzz builds targets with unstable `-Z` flags, which stable rustc refuses unless
//! `RUSTC_BOOTSTRAP=1` is set. This module sets it on the `cargo fuzz` child processes only,
//! never in the xtask's own environment. It also passes [`SANITIZER_ARGS`]; see there for why.
//!
//! Layout under `fuzz/` (the first three are git-ignored, apart from `corpus/*/seed-*`):
//! - `corpus/<target>/`: the corpus libFuzzer reads and grows; `seed-*` files are committed.
//! - `artifacts/<target>/`: where libFuzzer writes a crashing input (`crash-<sha1>` and kin).
//! - `target/`: the fuzz build.
//! - `regressions/<target>/`: minimised crashing inputs, committed so `cargo test` replays them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// Default fuzzing time per target, in seconds.
pub(crate) const DEFAULT_SECONDS: u64 = 30;

/// Sanitizer flags for every `cargo fuzz run` and `cargo fuzz tmin`.
///
/// cargo-fuzz defaults to AddressSanitizer (`-Zsanitizer=address`), which also works on stable
/// with `RUSTC_BOOTSTRAP=1` because the ASan runtime ships with the stable toolchain. We turn it
/// off anyway: the fuzzed code is `#![forbid(unsafe_code)]` Rust, so every bug the targets can
/// find shows up as a panic (a failed assertion, an out-of-bounds index, an overflow under the
/// `-Cdebug-assertions` cargo-fuzz always enables), which libFuzzer catches without ASan; and
/// without ASan's instrumentation the target runs several times more inputs per second. Pass
/// `--sanitizer address` to `cargo fuzz` by hand to hunt memory errors in dependencies.
const SANITIZER_ARGS: [&str; 2] = ["--sanitizer", "none"];

/// Which targets `cargo xtask fuzz` should act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Print the target names.
    List,
    /// Fuzz every target in turn.
    All,
    /// Fuzz one target.
    One(String),
}

/// Options of `cargo xtask fuzz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FuzzArgs {
    /// The targets to act on.
    pub(crate) selection: Selection,
    /// Fuzzing time per target, in seconds (libFuzzer's `-max_total_time`).
    pub(crate) seconds: u64,
}

/// The command line of `cargo xtask fuzz`: one target, `--all` or `--list`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(group(clap::ArgGroup::new("targets").required(true).args(["target", "all", "list"])))]
pub(crate) struct FuzzCli {
    /// The target to fuzz (a `[[bin]]` of fuzz/Cargo.toml).
    target: Option<String>,
    /// Fuzz every target in fuzz/Cargo.toml, one after another.
    #[arg(long)]
    all: bool,
    /// Print the targets and exit.
    #[arg(long, conflicts_with = "seconds")]
    list: bool,
    /// Fuzzing time per target, in seconds.
    #[arg(
        long,
        default_value_t = DEFAULT_SECONDS,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    seconds: u64,
}

impl From<FuzzCli> for FuzzArgs {
    fn from(cli: FuzzCli) -> Self {
        let selection = match (cli.list, cli.all, cli.target) {
            (true, _, _) => Selection::List,
            (false, true, _) => Selection::All,
            (false, false, Some(target)) => Selection::One(target),
            // The argument group asks for one of the three.
            (false, false, None) => Selection::List,
        };
        FuzzArgs {
            selection,
            seconds: cli.seconds,
        }
    }
}

/// What one fuzzing run ended with.
#[derive(Debug)]
enum Outcome {
    /// The time ran out without a failure.
    Clean,
    /// libFuzzer found a failing input.
    Crash {
        /// The input as libFuzzer wrote it, under `fuzz/artifacts/<target>/`.
        artifact: PathBuf,
        /// The minimised input, copied to `fuzz/regressions/<target>/`.
        regression: PathBuf,
    },
}

/// The cargo-fuzz crate.
fn fuzz_dir() -> PathBuf {
    cmd::workspace_root().join("fuzz")
}

/// The fuzz targets: the `[[bin]]` names in `fuzz/Cargo.toml`, which is also what
/// `cargo fuzz list` prints (reading them here works before cargo-fuzz is installed).
pub(crate) fn targets() -> Result<Vec<String>> {
    let manifest = fuzz_dir().join("Cargo.toml");
    let text =
        fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let names = bin_names(&text);
    if names.is_empty() {
        bail!("no [[bin]] targets in {}", cmd::relative(&manifest));
    }
    Ok(names)
}

/// The `name` of every `[[bin]]` table in a Cargo manifest. A deliberately small reader for
/// the plain layout `cargo fuzz add` writes, not a TOML parser.
fn bin_names(manifest: &str) -> Vec<String> {
    let mut in_bin = false;
    let mut names = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_bin = line
                .split('#')
                .next()
                .is_some_and(|h| h.trim() == "[[bin]]");
            continue;
        }
        if !in_bin {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "name" {
            let value = value.trim();
            if let Some(name) = value
                .strip_prefix('"')
                .and_then(|v| v.split_once('"'))
                .map(|(name, _)| name)
            {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Makes sure `cargo fuzz` works, installing cargo-fuzz with `cargo install --locked` if not.
fn ensure_cargo_fuzz() -> Result<()> {
    let mut probe = cmd::cargo();
    probe.args(["fuzz", "--version"]);
    if cmd::succeeds_quietly(&mut probe) {
        return Ok(());
    }
    eprintln!(
        "xtask: `cargo fuzz --version` failed; installing cargo-fuzz with `cargo install cargo-fuzz --locked`"
    );
    let mut install = cmd::cargo();
    install.args(["install", "cargo-fuzz", "--locked"]);
    cmd::run(&mut install).context("installing cargo-fuzz")?;
    if !cmd::succeeds_quietly(&mut probe) {
        bail!(
            "cargo-fuzz was installed but `cargo fuzz --version` still fails; is ~/.cargo/bin on PATH?"
        );
    }
    Ok(())
}

/// A `cargo fuzz <subcommand> <target>` command run in `fuzz/`, with `RUSTC_BOOTSTRAP=1` (for
/// this child only) and the sanitizer choice.
fn cargo_fuzz(subcommand: &str, target: &str) -> Command {
    let mut cmd = cmd::cargo();
    cmd.current_dir(fuzz_dir())
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", subcommand])
        .args(SANITIZER_ARGS)
        .arg(target);
    cmd
}

/// Runs the selected targets. A crash in one target does not stop the others; the command
/// fails at the end, naming every saved regression input.
pub(crate) fn run(args: &FuzzArgs) -> Result<()> {
    let targets = targets()?;
    let chosen = match &args.selection {
        Selection::List => {
            for target in &targets {
                println!("{target}");
            }
            return Ok(());
        }
        Selection::All => targets,
        Selection::One(target) => {
            if !targets.contains(target) {
                bail!(
                    "unknown fuzz target `{target}` (known: {})",
                    targets.join(", ")
                );
            }
            vec![target.clone()]
        }
    };
    if args.seconds == 0 {
        bail!("--seconds must be at least 1 (libFuzzer reads 0 as `no limit`)");
    }
    ensure_cargo_fuzz()?;

    let mut results = Vec::new();
    for target in &chosen {
        eprintln!("\n[fuzz] {target} for {}s", args.seconds);
        let started = Instant::now();
        let outcome = run_target(target, args.seconds)?;
        results.push((target, outcome, started.elapsed()));
    }

    eprintln!("\nfuzz summary:");
    let mut crashes = Vec::new();
    for (target, outcome, elapsed) in &results {
        let secs = elapsed.as_secs_f64();
        match outcome {
            Outcome::Clean => eprintln!("  {target:<16} ok      {secs:>7.1}s"),
            Outcome::Crash {
                artifact,
                regression,
            } => {
                eprintln!("  {target:<16} CRASH   {secs:>7.1}s");
                crashes.push(format!(
                    "{target}: minimised input saved to {} (raw: {})",
                    cmd::relative(regression),
                    cmd::relative(artifact)
                ));
            }
        }
    }
    if !crashes.is_empty() {
        bail!(
            "fuzzing found {} failing input(s):\n  {}\nreplay with `cargo test` once the fix is in, and commit the regression file(s)",
            crashes.len(),
            crashes.join("\n  ")
        );
    }
    Ok(())
}

/// Fuzzes one target for `seconds`, and on a crash minimises it into `fuzz/regressions/`.
fn run_target(target: &str, seconds: u64) -> Result<Outcome> {
    let dir = fuzz_dir();
    let corpus = dir.join("corpus").join(target);
    fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let artifacts = dir.join("artifacts").join(target);

    let before = cmd::snapshot(&artifacts)?;
    let mut fuzz = cargo_fuzz("run", target);
    fuzz.arg(Path::new("corpus").join(target))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"));
    let status = cmd::run_status(&mut fuzz)?;
    if status.success() {
        return Ok(Outcome::Clean);
    }

    let after = cmd::snapshot(&artifacts)?;
    let Some(artifact) = cmd::changed_files(&before, &after)
        .into_iter()
        .find(|p| !file_name(p).starts_with("minimized-from-"))
    else {
        bail!(
            "`{}` failed ({status}) without writing an input to {}/; see its output above",
            cmd::display(&fuzz),
            cmd::relative(&artifacts)
        );
    };
    eprintln!(
        "xtask: {target} failed on {}; minimising it",
        cmd::relative(&artifact)
    );
    let minimised = minimise(target, &artifact, &artifacts)?;
    let regression = save_regression(target, &artifact, &minimised)?;
    Ok(Outcome::Crash {
        artifact,
        regression,
    })
}

/// Runs `cargo fuzz tmin` on `artifact` and returns the minimised file it wrote into
/// `artifacts`, or `artifact` itself (with a warning) when it produced none.
fn minimise(target: &str, artifact: &Path, artifacts: &Path) -> Result<PathBuf> {
    let before = cmd::snapshot(artifacts)?;
    let mut tmin = cargo_fuzz("tmin", target);
    tmin.arg(artifact);
    let status = cmd::run_status(&mut tmin)?;
    let after = cmd::snapshot(artifacts)?;
    let minimised = cmd::changed_files(&before, &after)
        .into_iter()
        .filter(|p| file_name(p).starts_with("minimized-from-"))
        .max_by_key(|p| after.get(p).copied().flatten());
    match minimised {
        Some(path) => Ok(path),
        None => {
            eprintln!(
                "xtask: warning: `cargo fuzz tmin` ({status}) wrote no minimised input; keeping the original"
            );
            Ok(artifact.to_path_buf())
        }
    }
}

/// Copies `minimised` to `fuzz/regressions/<target>/`, named after libFuzzer's `artifact`
/// (`crash-<sha1>` and the like) so the log line naming the artifact also finds it.
fn save_regression(target: &str, artifact: &Path, minimised: &Path) -> Result<PathBuf> {
    let dir = fuzz_dir().join("regressions").join(target);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dest = dir.join(file_name(artifact));
    fs::copy(minimised, &dest)
        .with_context(|| format!("copying {} to {}", minimised.display(), dest.display()))?;
    Ok(dest)
}

/// The file name of `path` as text (empty when it has none).
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bin_names() {
        let manifest = r#"
[package]
name = "tuplekv-fuzz"

[dependencies]
libfuzzer-sys = "0.4"

[[bin]]
name = "decode_key"
path = "fuzz_targets/decode_key.rs"

[[bin]] # another
name="encode" # trailing
test = false

[workspace]
name = "not-a-bin"
"#;
        assert_eq!(bin_names(manifest), ["decode_key", "encode"]);
    }

    #[test]
    fn fuzz_crate_has_decode_key() {
        let targets = targets().expect("fuzz/Cargo.toml is readable");
        assert!(targets.iter().any(|t| t == "decode_key"), "{targets:?}");
    }

    #[test]
    fn cargo_fuzz_sets_bootstrap_on_the_child_only() {
        let shown = cmd::display(&cargo_fuzz("run", "decode_key"));
        assert_eq!(
            shown,
            "cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none decode_key"
        );
    }
}
