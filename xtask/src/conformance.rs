//! `cargo xtask conformance`: the KV Connect conformance scripts in `conformance/`, run with the
//! real Deno and Node clients against `tuplekv serve`, against denokv, or against both with
//! their case lines compared.
//!
//! Each run starts the server on a free loopback port with a generated token, runs the Deno
//! script, the Node script, then the cross-client value checks (Node writes and Deno reads,
//! which must match; Deno writes and Node reads, which Node 20 cannot decode and is only
//! recorded), and stops the server. The differences between the two servers that are there on
//! purpose are listed in `conformance/expected-differences.txt`.
//!
//! With `--etcd` the tuplekv server is `tuplekv serve --etcd` on a fresh local etcd cluster
//! (module `etcd_cluster`); it must answer every case as `tuplekv serve` does.
//!
//! With `--tls` it is `tuplekv serve --tls-cert --tls-key` with a certificate for `localhost`
//! signed by a throwaway CA (module `test_ca`), and the clients connect to
//! `https://localhost:PORT` trusting that CA (`DENO_CERT`, `NODE_EXTRA_CA_CERTS`): Deno over
//! HTTP/2, Node over HTTP/1.1, every case as over plain HTTP.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::etcd_cluster::{EtcdCluster, MEMBERS_DEFAULT};
use crate::server_process::{Running, Stderr, generate_token, scratch_dir};
use crate::{clients, cmd, test_ca};

/// What `cargo xtask conformance --help` says beside the options.
pub(crate) const ABOUT: &str = "\
Runs the KV Connect conformance scripts of conformance/ with the real clients: Deno 2.9.6
(`deno run -A --unstable-kv conformance/deno.ts`) and Node's @deno/kv 0.14.0
(`node conformance/node.mjs`), installed when missing into $TUPLEKV_TOOLS_DIR (default
target/tools). For each server: starts it on a free 127.0.0.1 port with a generated access
token, runs the Deno script, the Node script, the cross-client values (Node writes, Deno reads;
then Deno writes and Node reads, recorded only: Node 20 cannot read Deno 2.9's V8 values),
and stops it. Any failing script fails the command.";

/// The file listing the cases where tuplekv differs from denokv on purpose.
const EXPECTED_DIFFERENCES: &str = "conformance/expected-differences.txt";
/// Which server(s) a run is against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Against {
    /// `tuplekv serve`, built with `cargo build -p tuplekv-cli`.
    #[default]
    Tuplekv,
    /// denokv 0.14.0 (`cargo install`ed into the tool cache the first time, which takes
    /// minutes).
    Denokv,
    /// Both servers, then their case lines compared: a difference fails unless
    /// conformance/expected-differences.txt lists the case.
    Both,
}

/// Options of `cargo xtask conformance`.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub(crate) struct ConformanceArgs {
    /// The server(s) under test.
    #[arg(long, value_enum, default_value_t = Against::Tuplekv)]
    pub(crate) against: Against,
    /// Write each script's output to DIR/SERVER-SCRIPT.txt.
    #[arg(long, value_name = "DIR")]
    pub(crate) keep_output: Option<PathBuf>,
    /// Use this tuplekv binary instead of building tuplekv-cli.
    #[arg(long, value_name = "PATH")]
    pub(crate) tuplekv_bin: Option<PathBuf>,
    /// Run tuplekv as `tuplekv serve --etcd` on a fresh 3-member etcd cluster on loopback
    /// (`etcd` must be installed; see `cargo xtask etcd-cluster`); its outputs are named
    /// tuplekv-etcd. Not with `--against denokv`.
    #[arg(long, conflicts_with = "tls")]
    pub(crate) etcd: bool,
    /// Run tuplekv as `tuplekv serve --tls-cert --tls-key` with a certificate from a throwaway
    /// CA (made with the `openssl` command), the clients on https://localhost:PORT trusting it
    /// through DENO_CERT and NODE_EXTRA_CA_CERTS; its outputs are named tuplekv-tls. Not with
    /// `--against denokv` or `--etcd`.
    #[arg(long)]
    pub(crate) tls: bool,
}

impl ConformanceArgs {
    /// The combinations the options cannot say by themselves: `--etcd` and `--tls` serve
    /// tuplekv, so neither goes with `--against denokv`.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.etcd && self.against == Against::Denokv {
            return Err(
                "`--etcd` runs `tuplekv serve --etcd`; it does not go with `--against denokv`"
                    .into(),
            );
        }
        if self.tls && self.against == Against::Denokv {
            return Err(
                "`--tls` runs `tuplekv serve` over TLS; it does not go with `--against denokv`"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The server implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Tuplekv,
    /// `tuplekv serve --etcd` on a fresh etcd cluster.
    TuplekvEtcd,
    /// `tuplekv serve --tls-cert --tls-key`, reached at `https://localhost:PORT`.
    TuplekvTls,
    Denokv,
}

impl Server {
    /// The name the scripts get in `CONFORMANCE_SERVER` and the output files carry.
    fn name(self) -> &'static str {
        match self {
            Server::Tuplekv => "tuplekv",
            Server::TuplekvEtcd => "tuplekv-etcd",
            Server::TuplekvTls => "tuplekv-tls",
            Server::Denokv => "denokv",
        }
    }

    /// The implementation the scripts are told they talk to (`CONFORMANCE_SERVER`).
    fn script_name(self) -> &'static str {
        match self {
            Server::Tuplekv | Server::TuplekvEtcd | Server::TuplekvTls => "tuplekv",
            Server::Denokv => "denokv",
        }
    }
}

/// The scripts of one run, in order: (output name, client, mode, strict).
const SCRIPTS: [(&str, Client, &str, bool); 5] = [
    ("deno", Client::Deno, "cases", true),
    ("node", Client::Node, "cases", true),
    ("cross-node-write", Client::Node, "cross-write", true),
    ("cross-deno-read", Client::Deno, "cross-read", true),
    ("cross-deno-write", Client::Deno, "cross-write", true),
];
/// The operator checks against `tuplekv serve` only: (output name, client, file).
const OPERATOR_SCRIPTS: [(&str, Client, &str); 2] = [
    ("operator-deno", Client::Deno, "operator.ts"),
    ("operator-node", Client::Node, "operator_node.mjs"),
];
/// The last script: Node reading Deno's values, recorded but never strict.
const NODE_READS_DENO: (&str, Client, &str, bool) =
    ("cross-node-read", Client::Node, "cross-read", false);

/// A KV Connect client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Deno,
    Node,
}

/// The installed clients.
struct Clients {
    deno: PathBuf,
    node_kv_dir: PathBuf,
}

/// Runs `cargo xtask conformance`.
pub(crate) fn run(args: &ConformanceArgs) -> Result<()> {
    let clients = Clients {
        deno: clients::deno()?,
        node_kv_dir: clients::node_kv_dir()?,
    };
    let ours = if args.etcd {
        Server::TuplekvEtcd
    } else if args.tls {
        Server::TuplekvTls
    } else {
        Server::Tuplekv
    };
    let servers: &[Server] = match args.against {
        Against::Tuplekv => &[ours],
        Against::Denokv => &[Server::Denokv],
        Against::Both => &[Server::Denokv, ours],
    };
    let mut outputs = BTreeMap::new();
    let mut failures = Vec::new();
    for &server in servers {
        let binary = match server {
            Server::Tuplekv | Server::TuplekvEtcd | Server::TuplekvTls => {
                tuplekv_binary(args.tuplekv_bin.as_deref())?
            }
            Server::Denokv => clients::denokv()?,
        };
        let run = run_against(server, &binary, &clients)?;
        for (script, out) in &run.outputs {
            if let Some(dir) = &args.keep_output {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!("{}-{script}.txt", server.name()));
                fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
            }
        }
        failures.extend(
            run.failures
                .iter()
                .map(|f| format!("{}: {f}", server.name())),
        );
        outputs.insert(server.name(), run.outputs);
    }
    if args.against == Against::Both {
        let expected = read_expected_differences(EXPECTED_DIFFERENCES)?;
        let unexpected = compare(&outputs["denokv"], &outputs[ours.name()], &expected);
        failures.extend(unexpected);
    }
    if !failures.is_empty() {
        bail!("conformance failed:\n  {}", failures.join("\n  "));
    }
    eprintln!("xtask: conformance passed");
    Ok(())
}

/// What one server's run produced.
struct Run {
    /// Output (stdout) of each script, by output name.
    outputs: BTreeMap<&'static str, String>,
    /// The scripts that failed, with their exit status.
    failures: Vec<String>,
}

/// Starts `server`, runs every script against it and stops it.
fn run_against(server: Server, binary: &Path, clients: &Clients) -> Result<Run> {
    let token = generate_token()?;
    let second_token = generate_token()?;
    let scratch = scratch_dir(&format!("conformance-{}", server.name()))?;
    // Held until the server has stopped.
    let (running, cluster, ca) = match start_server(server, binary, &token, &second_token, &scratch)
    {
        Ok(started) => started,
        Err(e) => {
            let _ = fs::remove_dir_all(&scratch);
            return Err(e);
        }
    };
    // Over TLS, the name the certificate is for, as a user would type it.
    let url = match &ca {
        Some(_) => format!("https://localhost:{}", running.addr().port()),
        None => running.url(),
    };
    eprintln!("xtask: {} listening at {url}", server.name());
    let cross_prefix = format!("cross-{}", generate_token()?);
    let mut run = Run {
        outputs: BTreeMap::new(),
        failures: Vec::new(),
    };
    let result = (|| -> Result<()> {
        for (name, client, mode, strict) in SCRIPTS.into_iter().chain([NODE_READS_DENO]) {
            let mut command = script_command(client, clients);
            command
                .env("CONFORMANCE_URL", &url)
                .env("CONFORMANCE_TOKEN", &token)
                .env("CONFORMANCE_SERVER", server.script_name())
                .env("CONFORMANCE_MODE", mode)
                .env("CONFORMANCE_CROSS_PREFIX", &cross_prefix)
                .env("CONFORMANCE_CROSS_STRICT", if strict { "1" } else { "0" });
            trust_ca(&mut command, ca.as_deref());
            let (ok, stdout) = run_script(&mut command, server, name)?;
            if !ok {
                run.failures.push(format!("{name} script failed"));
            }
            run.outputs.insert(name, stdout);
        }
        if matches!(server, Server::Tuplekv | Server::TuplekvTls) {
            // A database per path and two tokens at once (the server runs with
            // `--create-databases` and a second token).
            for (name, client, file) in OPERATOR_SCRIPTS {
                let mut command = script_file_command(client, clients, file);
                command
                    .env("CONFORMANCE_URL", &url)
                    .env("CONFORMANCE_TOKEN", &token)
                    .env("CONFORMANCE_TOKEN2", &second_token)
                    .env("CONFORMANCE_RUN", &cross_prefix);
                trust_ca(&mut command, ca.as_deref());
                let (ok, stdout) = run_script(&mut command, server, name)?;
                if !ok {
                    run.failures.push(format!("{name} script failed"));
                }
                run.outputs.insert(name, stdout);
            }
        }
        if matches!(
            server,
            Server::Tuplekv | Server::TuplekvEtcd | Server::TuplekvTls
        ) {
            let mut command = Command::new(&clients.deno);
            command
                .args(["run", "-A", "--unstable-kv", "--no-lock", CLI_VALUES_SCRIPT])
                .current_dir(cmd::workspace_root().join("conformance"))
                .env("NO_COLOR", "1")
                .env("CONFORMANCE_URL", &url)
                .env("CONFORMANCE_TOKEN", &token)
                .env("DENO_KV_ACCESS_TOKEN", &token)
                .env("TUPLEKV_BIN", binary);
            // Over TLS the CLI trusts the test CA through DENO_CERT, as Deno does.
            trust_ca(&mut command, ca.as_deref());
            let (ok, stdout) = run_script(&mut command, server, CLI_VALUES_STEP)?;
            if !ok {
                run.failures
                    .push(format!("{CLI_VALUES_STEP} script failed"));
            }
            run.outputs.insert(CLI_VALUES_STEP, stdout);
        }
        let readme_url = match &ca {
            Some(_) => url.clone(),
            None => format!("http://{}", running.addr()),
        };
        if let Err(e) = run_readme_example(clients, &scratch, &readme_url, ca.as_deref(), &token) {
            eprintln!(
                "xtask: [{}] the README's Deno program FAILED: {e:#}",
                server.name()
            );
            run.failures
                .push(format!("the README's Deno program: {e:#}"));
        }
        Ok(())
    })();
    let stopped = running.stop();
    let _ = fs::remove_dir_all(&scratch);
    let cluster_stopped = cluster.map_or(Ok(()), EtcdCluster::stop);
    result?;
    cluster_stopped?;
    let status = stopped?;
    eprintln!("xtask: {} stopped ({status})", server.name());
    Ok(run)
}

/// The step where the tuplekv CLI writes the V8 samples (`tuplekv set --url … --js @FILE`)
/// and Deno reads them back, comparing each deeply with the same value written in JavaScript.
const CLI_VALUES_STEP: &str = "cli-values-deno-read";
/// Its script, in `conformance/`.
const CLI_VALUES_SCRIPT: &str = "v8_readback.ts";

/// The README's five-line Deno program (kept word for word in `conformance/`; a unit test
/// checks the README shows exactly it).
const README_EXAMPLE: &str = "conformance/readme_example.ts";
/// What it prints against a fresh server.
const README_EXAMPLE_EXPECTED: &str = "conformance/readme_example.expected";
/// The URL the README's program connects to, replaced by the test server's.
const README_EXAMPLE_URL: &str = "http://127.0.0.1:4512";

/// Runs the README's Deno program against the server at `url` (trusting the CA at `ca`, if
/// any) and compares what it prints.
fn run_readme_example(
    clients: &Clients,
    scratch: &Path,
    url: &str,
    ca: Option<&Path>,
    token: &str,
) -> Result<()> {
    let root = cmd::workspace_root();
    let program = fs::read_to_string(root.join(README_EXAMPLE))?;
    let expected = fs::read_to_string(root.join(README_EXAMPLE_EXPECTED))?;
    if !program.contains(README_EXAMPLE_URL) {
        bail!("{README_EXAMPLE} does not open {README_EXAMPLE_URL}");
    }
    let file = scratch.join("readme_example.ts");
    fs::write(&file, program.replace(README_EXAMPLE_URL, url))?;
    let mut command = Command::new(&clients.deno);
    trust_ca(&mut command, ca);
    let output = command
        .args([
            "run",
            "--unstable-kv",
            "--allow-net",
            "--allow-env",
            "--no-lock",
        ])
        .arg(&file)
        .env("NO_COLOR", "1")
        .env("DENO_KV_ACCESS_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .context("running the README's Deno program")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || stdout != expected {
        bail!(
            "exit {}, printed:\n{stdout}{}\nexpected:\n{expected}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    eprintln!("xtask: the README's Deno program printed what the README says");
    Ok(())
}

/// Makes the clients run by `command` trust the CA certificate at `ca` as well as their own
/// roots: Deno through `DENO_CERT`, Node through `NODE_EXTRA_CA_CERTS`.
fn trust_ca(command: &mut Command, ca: Option<&Path>) {
    if let Some(ca) = ca {
        command.env("DENO_CERT", ca).env("NODE_EXTRA_CA_CERTS", ca);
    }
}

/// The command that runs a client's script.
fn script_command(client: Client, clients: &Clients) -> Command {
    match client {
        Client::Deno => script_file_command(client, clients, "deno.ts"),
        Client::Node => script_file_command(client, clients, "node.mjs"),
    }
}

/// The command that runs `file` of `conformance/` with `client`.
fn script_file_command(client: Client, clients: &Clients, file: &str) -> Command {
    let dir = cmd::workspace_root().join("conformance");
    match client {
        Client::Deno => {
            let mut c = Command::new(&clients.deno);
            c.args(["run", "-A", "--unstable-kv", "--no-lock", file])
                .env("NO_COLOR", "1");
            c.current_dir(dir);
            c
        }
        Client::Node => {
            let mut c = Command::new("node");
            c.arg(file)
                .env("NODE_KV_DIR", &clients.node_kv_dir)
                .current_dir(dir);
            c
        }
    }
}

/// Runs one script with stderr shown and stdout both shown and captured; returns whether it
/// passed and its stdout.
fn run_script(command: &mut Command, server: Server, name: &str) -> Result<(bool, String)> {
    eprintln!(
        "xtask: [{}] {name}: $ {}",
        server.name(),
        cmd::display(command)
    );
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd::display(command)))?;
    let mut stdout = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("reading the script's output")?;
            println!("[{}/{name}] {line}", server.name());
            stdout.push_str(&line);
            stdout.push('\n');
        }
    }
    let status = child.wait().context("waiting for the script")?;
    if !status.success() {
        eprintln!("xtask: [{}] {name} FAILED ({status})", server.name());
    }
    Ok((status.success(), stdout))
}

/// Starts `server` on a free loopback port and waits until it listens; for
/// [`Server::TuplekvEtcd`], on a fresh etcd cluster, returned with it; for
/// [`Server::TuplekvTls`], with a certificate from a CA made in `scratch`, whose certificate
/// file is returned with it.
fn start_server(
    server: Server,
    binary: &Path,
    token: &str,
    second_token: &str,
    scratch: &Path,
) -> Result<(Running, Option<EtcdCluster>, Option<PathBuf>)> {
    match server {
        Server::Tuplekv => {
            let args = [
                "--create-databases".into(),
                "--access-token".into(),
                second_token.into(),
            ];
            Ok((
                Running::tuplekv(binary, &args, token, Stderr::Inherit)?,
                None,
                None,
            ))
        }
        Server::TuplekvTls => {
            let files = test_ca::make(scratch)?;
            eprintln!(
                "xtask: a throwaway CA {} signed {} for localhost and 127.0.0.1",
                files.ca.display(),
                files.cert.display()
            );
            let args = [
                "--tls-cert".into(),
                files.cert.clone().into(),
                "--tls-key".into(),
                files.key.clone().into(),
                "--create-databases".into(),
                "--access-token".into(),
                second_token.into(),
            ];
            let running = Running::tuplekv(binary, &args, token, Stderr::Inherit)?;
            Ok((running, None, Some(files.ca)))
        }
        Server::TuplekvEtcd => {
            let cluster = EtcdCluster::start(MEMBERS_DEFAULT)?;
            eprintln!("xtask: etcd cluster at {}", cluster.urls().join(","));
            let args = [
                "--etcd".into(),
                cluster.urls().join(",").into(),
                "--etcd-prefix".into(),
                "conformance/".into(),
            ];
            let running = Running::tuplekv(binary, &args, token, Stderr::Inherit)?;
            Ok((running, Some(cluster), None))
        }
        Server::Denokv => Ok((
            Running::denokv(binary, scratch, token, Stderr::Inherit)?,
            None,
            None,
        )),
    }
}

/// The tuplekv binary: `explicit`, or `tuplekv` from `cargo build -p tuplekv-cli`.
fn tuplekv_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--tuplekv-bin {} is not a file", path.display());
        }
        return Ok(path.to_path_buf());
    }
    cmd::run(cmd::cargo().args(["build", "-p", "tuplekv-cli", "--bin", "tuplekv"]))?;
    let binary = cmd::target_dir().join("debug").join("tuplekv");
    if !binary.is_file() {
        bail!("cargo built no {}", binary.display());
    }
    Ok(binary)
}

/// The case names of an expected-differences file (`file`, from the workspace root) with
/// their reasons.
fn read_expected_differences(file: &str) -> Result<BTreeMap<String, String>> {
    let path = cmd::workspace_root().join(file);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_expected_differences(&text))
}

/// Parses `name  reason` lines; `#` starts a comment line, blank lines are skipped.
fn parse_expected_differences(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((name, reason)) => (name.to_owned(), reason.trim().to_owned()),
            None => (l.to_owned(), String::new()),
        })
        .collect()
}

/// The `case: json` lines of a script's output, by case name.
fn case_lines(output: &str) -> BTreeMap<&str, &str> {
    output.lines().filter_map(|l| l.split_once(": ")).collect()
}

/// Compares the case lines of the denokv run with the tuplekv run, printing every difference;
/// returns the differences `expected` does not list.
fn compare(
    denokv: &BTreeMap<&'static str, String>,
    tuplekv: &BTreeMap<&'static str, String>,
    expected: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut unexpected = Vec::new();
    let mut differed = std::collections::BTreeSet::new();
    eprintln!("xtask: comparing denokv's and tuplekv's case lines");
    for (script, theirs) in denokv {
        let Some(ours) = tuplekv.get(script) else {
            continue;
        };
        let (theirs, ours) = (case_lines(theirs), case_lines(ours));
        let names: std::collections::BTreeSet<&str> =
            theirs.keys().chain(ours.keys()).copied().collect();
        for name in names {
            let (a, b) = (theirs.get(name), ours.get(name));
            if a == b {
                continue;
            }
            differed.insert(name.to_owned());
            let show = |v: Option<&&str>| v.map_or("(missing)".to_owned(), |s| (*s).to_owned());
            match expected.get(name) {
                Some(reason) => eprintln!(
                    "  expected difference {script}/{name} ({reason}):\n    denokv:  {}\n    tuplekv: {}",
                    show(a),
                    show(b)
                ),
                None => {
                    eprintln!(
                        "  UNEXPECTED difference {script}/{name}:\n    denokv:  {}\n    tuplekv: {}",
                        show(a),
                        show(b)
                    );
                    unexpected.push(format!("{script}/{name} differs from denokv"));
                }
            }
        }
    }
    for name in expected.keys().filter(|n| !differed.contains(*n)) {
        eprintln!("  note: the expected differences list {name}, which did not differ this run");
    }
    unexpected
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_shows_the_deno_program_the_conformance_run_executes() {
        let root = super::cmd::workspace_root();
        let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
        let program = std::fs::read_to_string(root.join(super::README_EXAMPLE)).expect("program");
        assert!(
            readme.contains(&format!("```ts\n{program}```")),
            "README.md must show {} word for word in a ```ts block",
            super::README_EXAMPLE
        );
    }

    use super::*;

    #[test]
    fn compares_case_lines() {
        let mk = |s: &str| BTreeMap::from([("deno", s.to_owned())]);
        let denokv = mk("a: 1\nb: 2\nc: 3\n");
        let tuplekv = mk("a: 1\nb: 9\nc: 4\n");
        let expected = parse_expected_differences("# comment\nb  exact expiry\n\n");
        assert_eq!(expected["b"], "exact expiry");
        assert_eq!(
            compare(&denokv, &tuplekv, &expected),
            vec!["deno/c differs from denokv".to_owned()]
        );
    }
}
