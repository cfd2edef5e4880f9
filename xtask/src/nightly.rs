//! The nightly toolchain, which Miri and the ThreadSanitizer build need: running its cargo, and
//! installing it or its components where they are missing. A machine may have no nightly and
//! no way to fetch one; callers decide what to do then ([`ensure`] fails, saying why).

use std::process::Command;

use anyhow::Result;

use crate::cmd;

/// `cargo` of the nightly toolchain, run from the workspace root: `rustup run nightly cargo`
/// rather than `cargo +nightly`, which works only when the `cargo` on the `PATH` is rustup's
/// proxy.
pub(crate) fn cargo() -> Command {
    let mut cargo = Command::new("rustup");
    cargo
        .args(["run", "nightly", "cargo"])
        .current_dir(cmd::workspace_root());
    cargo
}

/// Makes sure the nightly toolchain has `components`: adds the missing ones, or installs the
/// toolchain with them when there is no nightly at all. `rustup component add` does nothing,
/// and needs no network, for components already there.
pub(crate) fn ensure(components: &[&str]) -> Result<()> {
    let toolchains = cmd::output(Command::new("rustup").args(["toolchain", "list"]))?;
    cmd::run(&mut install_command(has_nightly(&toolchains), components))
}

/// The rustup command that brings `components` to the nightly toolchain.
fn install_command(nightly_present: bool, components: &[&str]) -> Command {
    let mut rustup = Command::new("rustup");
    if nightly_present {
        rustup
            .args(["component", "add", "--toolchain", "nightly"])
            .args(components);
    } else {
        rustup.args(["toolchain", "install", "nightly", "--profile", "minimal"]);
        for component in components {
            rustup.args(["--component", component]);
        }
    }
    rustup
}

/// Whether `rustup toolchain list` printed a nightly toolchain.
fn has_nightly(toolchains: &str) -> bool {
    toolchains.lines().any(|line| line.starts_with("nightly-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nightly_toolchain_is_found_in_rustups_list() {
        let list = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                    nightly-x86_64-unknown-linux-gnu\n";
        assert!(has_nightly(list));
        assert!(!has_nightly("stable-x86_64-unknown-linux-gnu (default)\n"));
    }

    #[test]
    fn missing_components_are_added_and_a_missing_nightly_is_installed_with_them() {
        let add = cmd::display(&install_command(true, &["miri", "rust-src"]));
        assert_eq!(
            add,
            "rustup component add --toolchain nightly miri rust-src"
        );
        let install = cmd::display(&install_command(false, &["miri", "rust-src"]));
        assert_eq!(
            install,
            "rustup toolchain install nightly --profile minimal --component miri \
             --component rust-src"
        );
    }
}
