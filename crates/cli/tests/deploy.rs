//! The systemd unit in `deploy/`: every flag its `ExecStart` passes is one `tuplekv serve`
//! takes, and `systemd-analyze verify` accepts the unit where systemd is installed.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");
const UNIT: &str = include_str!("../../../deploy/tuplekv.service");
/// Where the unit expects the binary.
const INSTALLED_BIN: &str = "/usr/local/bin/tuplekv";

/// `ExecStart`'s words, continuation lines joined.
fn exec_start() -> Vec<String> {
    let joined = UNIT.replace("\\\n", " ");
    let line = joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart line");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_unit_starts_serve_with_flags_serve_takes() {
    let words = exec_start();
    assert_eq!(words[0], INSTALLED_BIN);
    assert_eq!(words[1], "serve");
    let help = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run tuplekv serve --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: Vec<_> = words.iter().filter(|w| w.starts_with("--")).collect();
    assert!(flags.len() >= 4, "{flags:?}");
    for flag in flags {
        assert!(
            help.contains(flag.as_str()),
            "serve takes no {flag}:\n{help}"
        );
    }
}

#[test]
fn systemd_analyze_verifies_the_unit_where_it_is_installed() {
    let probe = Command::new("systemd-analyze").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("note: systemd-analyze is not installed here; only the flags are checked");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = dir.path().join("tuplekv.service");
    std::fs::write(&unit, UNIT.replace(INSTALLED_BIN, BIN)).expect("write the unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("run systemd-analyze");
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
