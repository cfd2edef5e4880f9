//! External clients and servers the conformance runs and benches use: the Deno binary, Node's
//! `@deno/kv` package and the `denokv` server, each installed once, at a pinned version, into
//! [`tools_dir`].
//!
//! Every installer checks the version of what is already there and installs only when it is
//! missing or different. An install goes to a temporary directory first and is renamed into
//! place, so two processes installing at once never see half an install.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The Deno version the conformance scripts and benches run.
pub const DENO_VERSION: &str = "2.9.6";
/// The npm package that ships the Linux x86-64 Deno binary.
const DENO_NPM_PACKAGE: &str = "@deno/linux-x64-glibc";
/// Node's KV Connect client package, and the version pinned in `conformance/package.json`.
pub const NODE_KV_PACKAGE: &str = "@deno/kv";
/// The pinned version of [`NODE_KV_PACKAGE`].
pub const NODE_KV_VERSION: &str = "0.14.0";
/// The denokv server version the differential runs compare against.
pub const DENOKV_VERSION: &str = "0.14.0";
/// The environment variable that names the shared tool cache.
const TOOLS_DIR_ENV: &str = "TUPLEKV_TOOLS_DIR";

/// Where external tools are installed: `$TUPLEKV_TOOLS_DIR`, else `<workspace root>/target/tools`.
pub fn tools_dir() -> PathBuf {
    match std::env::var_os(TOOLS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => cmd::workspace_root().join("target").join("tools"),
    }
}

/// The environment variable naming a Deno binary to use instead of the pinned install (the
/// tests that read what real Deno wrote).
pub const DENO_ENV: &str = "TUPLEKV_DENO";

/// The pinned Deno where [`deno`] installs it (or `$TUPLEKV_DENO`), if it is there; installs
/// nothing. For tests that run real Deno when a machine has it and say so when it does not.
pub fn installed_deno() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(DENO_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let binary = tools_dir()
        .join(format!("deno-{DENO_VERSION}"))
        .join("package")
        .join("deno");
    binary.is_file().then_some(binary)
}

/// The Deno 2.9.6 binary from npm `@deno/linux-x64-glibc@2.9.6` (npm pack into tools_dir, then
/// the binary inside the package; chmod +x).
pub fn deno() -> Result<PathBuf> {
    let dir = tools_dir().join(format!("deno-{DENO_VERSION}"));
    let binary = dir.join("package").join("deno");
    if deno_version_matches(&binary) {
        return Ok(binary);
    }
    eprintln!(
        "installing Deno {DENO_VERSION} from npm into {}",
        dir.display()
    );
    install_atomically(&dir, |tmp| {
        let spec = format!("{DENO_NPM_PACKAGE}@{DENO_VERSION}");
        let packed = cmd::output(
            Command::new("npm")
                .args(["pack", "--silent", &spec, "--pack-destination"])
                .arg(tmp),
        )?;
        let tarball = tmp.join(packed.trim());
        cmd::run(
            Command::new("tar")
                .arg("xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(tmp),
        )?;
        fs::remove_file(&tarball).with_context(|| format!("removing {}", tarball.display()))?;
        make_executable(&tmp.join("package").join("deno"))
    })?;
    if !deno_version_matches(&binary) {
        bail!("{} does not report Deno {DENO_VERSION}", binary.display());
    }
    Ok(binary)
}

/// A directory with `node_modules/@deno/kv` (0.14.0) installed, where node scripts run. The
/// install is `npm ci` from `conformance/package.json` and its lockfile.
pub fn node_kv_dir() -> Result<PathBuf> {
    let dir = tools_dir().join(format!("node-kv-{NODE_KV_VERSION}"));
    if node_kv_version(&dir).as_deref() == Some(NODE_KV_VERSION) {
        return Ok(dir);
    }
    eprintln!(
        "installing {NODE_KV_PACKAGE} {NODE_KV_VERSION} into {}",
        dir.display()
    );
    let manifests = cmd::workspace_root().join("conformance");
    install_atomically(&dir, |tmp| {
        for file in ["package.json", "package-lock.json"] {
            fs::copy(manifests.join(file), tmp.join(file))
                .with_context(|| format!("copying conformance/{file}"))?;
        }
        cmd::run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(tmp),
        )
    })?;
    match node_kv_version(&dir) {
        Some(v) if v == NODE_KV_VERSION => Ok(dir),
        other => bail!(
            "{} holds {NODE_KV_PACKAGE} {other:?}, expected {NODE_KV_VERSION} (is conformance/package-lock.json pinned?)",
            dir.display()
        ),
    }
}

/// denokv 0.14.0, `cargo install denokv --version 0.14.0 --locked --root <tools>/denokv`
/// (several minutes the first time; prints that it is building).
pub fn denokv() -> Result<PathBuf> {
    let root = tools_dir().join("denokv");
    let binary = root.join("bin").join("denokv");
    if binary.is_file() && denokv_installed_version(&root).as_deref() == Some(DENOKV_VERSION) {
        return Ok(binary);
    }
    eprintln!(
        "building denokv {DENOKV_VERSION} with `cargo install` into {} \
         (several minutes the first time)",
        root.display()
    );
    install_atomically(&root, |tmp| {
        cmd::run(
            cmd::cargo()
                .args([
                    "install",
                    "denokv",
                    "--version",
                    DENOKV_VERSION,
                    "--locked",
                    "--root",
                ])
                .arg(tmp),
        )
    })?;
    if denokv_installed_version(&root).as_deref() != Some(DENOKV_VERSION) || !binary.is_file() {
        bail!(
            "{} holds no denokv {DENOKV_VERSION} after the install",
            root.display()
        );
    }
    Ok(binary)
}

/// Whether `binary` runs and reports the pinned Deno version.
fn deno_version_matches(binary: &Path) -> bool {
    if !binary.is_file() {
        return false;
    }
    let Ok(out) = Command::new(binary).arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.success() && text.starts_with(&format!("deno {DENO_VERSION} "))
}

/// The version of `@deno/kv` installed under `dir`, if any.
fn node_kv_version(dir: &Path) -> Option<String> {
    let manifest = dir
        .join("node_modules")
        .join("@deno")
        .join("kv")
        .join("package.json");
    let text = fs::read_to_string(manifest).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("version")?.as_str().map(str::to_owned)
}

/// The denokv version `cargo install` recorded in `root/.crates.toml`, if any.
fn denokv_installed_version(root: &Path) -> Option<String> {
    let text = fs::read_to_string(root.join(".crates.toml")).ok()?;
    // Lines look like `"denokv 0.14.0 (registry+https://...)" = ["denokv"]`.
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("\"denokv ")?;
        rest.split_whitespace().next().map(str::to_owned)
    })
}

/// Runs `install` on a fresh temporary sibling of `dir`, then renames it to `dir` (replacing
/// an outdated `dir`). When another process finished the same install first, its copy stays.
fn install_atomically(dir: &Path, install: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = dir
        .parent()
        .with_context(|| format!("{} has no parent directory", dir.display()))?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(
        ".{}.partial-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = install(&tmp);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dir.exists() {
        let old = parent.join(format!(
            ".{}.old-{}",
            dir.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        fs::rename(dir, &old).with_context(|| format!("moving {} aside", dir.display()))?;
        let _ = fs::remove_dir_all(&old);
    }
    if let Err(e) = fs::rename(&tmp, dir) {
        let _ = fs::remove_dir_all(&tmp);
        if !dir.exists() {
            return Err(e).with_context(|| format!("moving the install into {}", dir.display()));
        }
    }
    Ok(())
}

/// Sets the executable bits of `path`.
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .permissions();
    perms.set_mode(perms.mode() | 0o755);
    fs::set_permissions(path, perms)
        .with_context(|| format!("making {} executable", path.display()))
}
