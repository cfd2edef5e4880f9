//! A fleet of load processes run at once, and their summed result: what the `etcd` and
//! `remote` comparisons share, and the one runner of a client process ([`run_client`]). Each
//! process prints one JSON result line (the benches crate's load binaries: `ops_per_sec`, and
//! where they know them `p50_us`, `p99_us`, `errors`, `first_error`, `commits`,
//! `conflicts`).

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tuplekv_harness::cmd;
use tuplekv_harness::server::wait_with_deadline;

/// What [`run_at_once`] hides from the commands it shows when there is no secret to hide.
pub(crate) const NO_TOKEN: &str = "\0";

/// What one workload measured over a fleet of load processes: the one result type of the
/// comparisons (each report's rows hold one).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Measured {
    /// Operations per second, summed over the processes.
    pub(crate) per_sec: f64,
    /// The slowest process's p50 per operation, µs (where reported).
    pub(crate) p50_us: Option<f64>,
    /// The slowest process's p99 per operation, µs (where reported).
    pub(crate) p99_us: Option<f64>,
    /// Failed operations, summed.
    pub(crate) errors: u64,
    /// The first error any process reported.
    pub(crate) first_error: Option<String>,
    /// Store commits, summed, where the processes reported them.
    pub(crate) commits: Option<u64>,
    /// Refused commits, summed, where the processes reported them.
    pub(crate) conflicts: Option<u64>,
    /// Store transactions a moved counter refused (each resent by the store, no conflict
    /// reaching the caller), summed, where the processes reported them (`EtcdStore`'s
    /// numbering counts).
    pub(crate) counter_retries: Option<u64>,
}

impl Measured {
    /// The report's notes on this workload, the row `label`: its first error, and the store
    /// commits (and refused ones) where the processes counted them.
    pub(crate) fn notes(&self, label: &str) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(e) = &self.first_error {
            notes.push(format!("{label}: {} errors, the first: {e}", self.errors));
        }
        if let Some(commits) = self.commits {
            let mut note =
                format!("{label}: {commits} store commits over the run, warm-up included");
            if let Some(conflicts) = self.conflicts {
                note.push_str(&format!(", {conflicts} refused by a check (conflicts)"));
            }
            if let Some(retries) = self.counter_retries {
                note.push_str(&format!(
                    ", {retries} store transactions refused by a moved counter and resent"
                ));
            }
            note.push('.');
            notes.push(note);
        }
        notes
    }
}

/// `a + b` where either is known.
fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// The larger of `a` and `b` where either is known.
fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Sums the JSON result lines of the load processes.
///
/// # Errors
/// An output without a result line, or a line without `ops_per_sec`.
pub(crate) fn sum_rates(outputs: &[String]) -> Result<Measured> {
    let mut total = Measured::default();
    for out in outputs {
        let line = out
            .lines()
            .find(|l| l.starts_with('{'))
            .context("a load process printed no result line")?;
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("result line `{line}`"))?;
        total.per_sec += v["ops_per_sec"]
            .as_f64()
            .with_context(|| format!("no `ops_per_sec` in `{line}`"))?;
        total.p50_us = max(total.p50_us, v["p50_us"].as_f64());
        total.p99_us = max(total.p99_us, v["p99_us"].as_f64());
        total.errors += v["errors"].as_u64().unwrap_or(0);
        if total.first_error.is_none() {
            total.first_error = v["first_error"].as_str().map(str::to_owned);
        }
        total.commits = add(total.commits, v["commits"].as_u64());
        total.conflicts = add(total.conflicts, v["conflicts"].as_u64());
        total.counter_retries = add(
            total.counter_retries,
            v["numbering"]["counter_retries"].as_u64(),
        );
    }
    Ok(total)
}

/// Runs `commands` at once, each with its output captured (`token` hidden where they are
/// shown), and returns the outputs in order.
///
/// # Errors
/// The first command that failed, or a panicked client thread.
pub(crate) fn run_at_once(commands: Vec<Command>, token: &str) -> Result<Vec<String>> {
    std::thread::scope(|scope| {
        let running: Vec<_> = commands
            .into_iter()
            .map(|mut c| scope.spawn(move || run_client(&mut c, token)))
            .collect();
        running
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client thread panicked")))
            })
            .collect()
    })
}

/// Time one client run (the load generator, and the clients of other benches) may take before
/// it is killed.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(240);

/// Runs a client with its standard output captured (standard error inherited), killing it
/// after `CLIENT_TIMEOUT`; fails unless it exits successfully.
pub(crate) fn run_client(command: &mut Command, token: &str) -> Result<String> {
    let run = run_client_keeping_output(command, token, CLIENT_TIMEOUT)?;
    match run.failure {
        Some(failure) => bail!("{failure}"),
        None => Ok(run.stdout),
    }
}

/// What a client printed, and why it failed if it did.
pub(crate) struct ClientRun {
    /// What it printed on standard output.
    pub(crate) stdout: String,
    /// Set when the client was killed at its deadline or exited unsuccessfully.
    pub(crate) failure: Option<String>,
}

/// Runs a client like [`run_client`], killing it after `timeout`, and keeps what it printed
/// even when it fails: a client that reports one line per op leaves the lines it finished.
pub(crate) fn run_client_keeping_output(
    command: &mut Command,
    token: &str,
    timeout: Duration,
) -> Result<ClientRun> {
    let shown = cmd::display(command).replace(token, "<token>");
    eprintln!("$ {shown}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let mut stdout = child.stdout.take().context("stdout not captured")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let failure = match wait_with_deadline(&mut child, timeout)? {
        Some(status) if status.success() => None,
        Some(status) => Some(format!("`{shown}` failed ({status})")),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Some(format!("`{shown}` took over {timeout:?} and was killed"))
        }
    };
    let stdout = reader.join().unwrap_or_default();
    Ok(ClientRun { stdout, failure })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(per_sec: f64, p99: f64, commits: Option<u64>) -> String {
        let mut v = serde_json::json!({
            "ops_per_sec": per_sec, "p50_us": p99 / 2.0, "p99_us": p99, "errors": 1,
            "first_error": "boom",
        });
        if let Some(c) = commits {
            v["commits"] = c.into();
        }
        format!("log line\n{v}\n")
    }

    #[test]
    fn rates_add_up_and_latencies_take_the_slowest_process() {
        let total = sum_rates(&[line(100.0, 50.0, Some(3)), line(50.5, 70.0, None)]).expect("sums");
        assert_eq!(total.per_sec, 150.5);
        assert_eq!(total.p99_us, Some(70.0));
        assert_eq!(total.p50_us, Some(35.0));
        assert_eq!(total.errors, 2);
        assert_eq!(total.first_error.as_deref(), Some("boom"));
        assert_eq!(total.commits, Some(3));
        assert_eq!(total.conflicts, None);
        assert!(sum_rates(&["no json".to_owned()]).is_err());
        assert!(sum_rates(&["{\"errors\": 0}".to_owned()]).is_err());
    }

    #[test]
    fn keeps_a_failed_clients_output() {
        let run = run_client_keeping_output(
            Command::new("sh").args(["-c", "echo '{\"op\":\"set\"}'; exit 3"]),
            "secret",
            Duration::from_secs(30),
        )
        .expect("runs");
        assert_eq!(run.stdout.trim(), "{\"op\":\"set\"}");
        assert!(run.failure.is_some_and(|f| f.contains("failed")));
        let slow = run_client_keeping_output(
            Command::new("sh").args(["-c", "echo early; exec sleep 30"]),
            "secret",
            Duration::from_millis(300),
        )
        .expect("runs");
        assert_eq!(slow.stdout.trim(), "early");
        assert!(slow.failure.is_some_and(|f| f.contains("killed")));
    }
}
