//! Child processes: where the workspace is, which cargo to run, and running a command with its
//! command line echoed first.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

/// The workspace root: two levels above this crate's directory (`crates/harness`). Every
/// command runs cargo from here (or from a directory below it).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .nth(2)
        .unwrap_or(manifest_dir)
        .to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR` (relative to the workspace root when
/// relative), else the workspace's `target`.
pub fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    if target.is_relative() {
        workspace_root().join(target)
    } else {
        target
    }
}

/// A `cargo` command run from the workspace root. Uses the `CARGO` environment variable (set
/// by `cargo run`, so the xtask uses the toolchain that started it) and falls back to `cargo`
/// on the `PATH`.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs `cmd` with inherited stdio after printing its command line to stderr, and fails when
/// it cannot be started or exits unsuccessfully.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = run_status(cmd)?;
    if !status.success() {
        bail!("`{}` failed ({status})", display(cmd));
    }
    Ok(())
}

/// Runs `cmd` like [`run`] but hands back its exit status instead of judging it.
pub fn run_status(cmd: &mut Command) -> Result<ExitStatus> {
    eprintln!("$ {}", display(cmd));
    cmd.status()
        .with_context(|| format!("could not start `{}`", display(cmd)))
}

/// Runs `cmd` with its standard output captured (standard error inherited, the command line
/// echoed first) and returns that output; fails like [`run`].
pub fn output(cmd: &mut Command) -> Result<String> {
    eprintln!("$ {}", display(cmd));
    let output = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{}`", display(cmd)))?;
    if !output.status.success() {
        bail!("`{}` failed ({})", display(cmd), output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `cmd` with all output discarded and says whether it started and exited successfully.
/// For probes such as `cargo fuzz --version`.
pub fn succeeds_quietly(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A shell-like rendering of `cmd` for logs: environment overrides, a `cd` when it runs away
/// from the workspace root, the program's file name (not the full `$CARGO` path) and its
/// arguments, quoted where needed.
pub fn display(cmd: &Command) -> String {
    let mut parts = Vec::new();
    if let Some(dir) = cmd.get_current_dir() {
        let root = workspace_root();
        if dir != root {
            let shown = dir.strip_prefix(&root).unwrap_or(dir);
            parts.push(format!("cd {} &&", quote(shown.as_os_str())));
        }
    }
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            parts.push(format!("{}={}", key.to_string_lossy(), quote(value)));
        }
    }
    let program = Path::new(cmd.get_program());
    parts.push(quote(program.file_name().unwrap_or(program.as_os_str())));
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

/// `arg` as a shell word: unchanged when it is plain, single-quoted otherwise.
fn quote(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The files directly in `dir` with their modification times; empty when `dir` does not exist.
/// Taking this before and after a child process shows which files it created or rewrote.
pub fn snapshot(dir: &Path) -> Result<BTreeMap<PathBuf, Option<SystemTime>>> {
    let mut files = BTreeMap::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let meta = entry.metadata()?;
        if meta.is_file() {
            files.insert(entry.path(), meta.modified().ok());
        }
    }
    Ok(files)
}

/// The files of `after` that are not in `before` or have changed modification time since.
pub fn changed_files(
    before: &BTreeMap<PathBuf, Option<SystemTime>>,
    after: &BTreeMap<PathBuf, Option<SystemTime>>,
) -> Vec<PathBuf> {
    after
        .iter()
        .filter(|(path, mtime)| before.get(*path) != Some(*mtime))
        .map(|(path, _)| path.clone())
        .collect()
}

/// `path` relative to the workspace root when it lies below it, for messages.
pub fn relative(path: &Path) -> String {
    let root = workspace_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `now` as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_date(now: SystemTime) -> String {
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since the Unix epoch (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_env_dir_and_quotes() {
        let mut cmd = Command::new("/usr/local/bin/cargo");
        cmd.current_dir(workspace_root().join("fuzz"))
            .env("RUSTDOCFLAGS", "-D warnings")
            .args(["doc", "--workspace", "it's"]);
        assert_eq!(
            display(&cmd),
            r"cd fuzz && RUSTDOCFLAGS='-D warnings' cargo doc --workspace 'it'\''s'"
        );
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        let manifest = fs::read_to_string(workspace_root().join("Cargo.toml"))
            .expect("root manifest is readable");
        assert!(manifest.contains("[workspace]"));
    }

    #[test]
    fn utc_dates_are_civil_dates() {
        let at = |secs| utc_date(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        // The expected texts are built from their fields: a test input, not a date anything
        // was measured on.
        let civil = |(y, m, d): (u32, u32, u32), (h, min): (u32, u32)| {
            format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02} UTC")
        };
        assert_eq!(at(0), civil((1970, 1, 1), (0, 0)));
        assert_eq!(at(951_782_400), civil((2000, 2, 29), (0, 0)), "a leap day");
        assert_eq!(at(1_000_000_000), civil((2001, 9, 9), (1, 46)));
    }
}
