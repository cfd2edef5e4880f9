//! A fleet of load processes run at once, and their summed result: what the `etcd` and
//! `remote` bench groups share. Each process prints one JSON result line (the benches
//! crate's load binaries: `ops_per_sec`, and where they know them `p50_us`, `p99_us`,
//! `errors`, `first_error`, `commits`, `conflicts`).

use std::process::Command;

use anyhow::{Context, Result};

use crate::bench_server::run_client;

/// What [`run_at_once`] hides from the commands it shows when there is no secret to hide.
pub(crate) const NO_TOKEN: &str = "\0";

/// The summed rate of one workload over a fleet of load processes.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Rate {
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
pub(crate) fn sum_rates(outputs: &[String]) -> Result<Rate> {
    let mut total = Rate::default();
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
}
