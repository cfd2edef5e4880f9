//! Workloads and peer drivers shared by the criterion benches in `benches/benches/`: each group
//! file builds its inputs from here so that ours and the peers run on the same data.
//!
//! Conventions `cargo xtask bench` relies on to write its report:
//! - a criterion group is named `<area>/<workload>`; a parameter (thread count, committers)
//!   goes in the benchmark id's parameter;
//! - our implementation's function id is `tuplekv` (variants: `tuplekv_<variant>`); every other
//!   id is a peer;
//! - a peer that cannot run here is reported with [`skip`], never faked.

pub mod denokv;
pub mod orchestrate;
pub mod redis;
pub mod workloads;

use std::io::Write;

/// Records that `peer` could not be measured in `group`, and why: printed, and appended to the
/// file `cargo xtask bench` names in `TUPLEKV_BENCH_SKIPPED` so the report lists it.
pub fn skip(group: &str, peer: &str, reason: &str) {
    eprintln!("skipped {group} / {peer}: {reason}");
    if let Some(path) = std::env::var_os("TUPLEKV_BENCH_SKIPPED")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let reason = reason.replace(['\t', '\n'], " ");
        let _ = writeln!(file, "{group}\t{peer}\t{reason}");
    }
}

/// Threads per load process unless `--threads` says otherwise.
pub const THREADS_DEFAULT: usize = 4;
/// Most threads one load process may run.
pub const THREADS_MAX: usize = 256;
/// Measured seconds unless `--seconds` says otherwise.
pub const SECONDS_DEFAULT: f64 = 5.0;
/// Unmeasured seconds before the window unless `--warmup` says otherwise.
pub const WARMUP_DEFAULT: f64 = 0.5;
/// Shortest window `--seconds` may ask for.
pub const SECONDS_MIN: f64 = 0.1;
/// Longest window `--seconds` or `--warmup` may ask for.
pub const SECONDS_MAX: f64 = 600.0;

/// `value` as a number in `min..=max`, for a load binary's clap value parsers.
///
/// # Errors
/// A message naming the range, for a value that is not a number in it.
pub fn in_range<T>(value: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    match value.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("needs a number from {min} to {max}, not `{value}`")),
    }
}

/// A thread count in `1..=`[`THREADS_MAX`] (a clap value parser).
///
/// # Errors
/// As [`in_range`].
pub fn thread_count(value: &str) -> Result<usize, String> {
    in_range(value, 1, THREADS_MAX)
}

/// A measured window in [`SECONDS_MIN`]`..=`[`SECONDS_MAX`] seconds (a clap value parser).
///
/// # Errors
/// As [`in_range`].
pub fn measured_seconds(value: &str) -> Result<f64, String> {
    in_range(value, SECONDS_MIN, SECONDS_MAX)
}

/// A warm-up in `0..=`[`SECONDS_MAX`] seconds (a clap value parser).
///
/// # Errors
/// As [`in_range`].
pub fn warmup_seconds(value: &str) -> Result<f64, String> {
    in_range(value, 0.0, SECONDS_MAX)
}

/// Ends the process with a usage error of `A`'s command line (exit status 2, as clap's own),
/// for a rule its options cannot say by themselves.
pub fn refuse<A: clap::CommandFactory>(message: &str) -> ! {
    A::command()
        .error(clap::error::ErrorKind::InvalidValue, message)
        .exit()
}

/// A server's base URL without trailing slashes (a clap value parser).
///
/// # Errors
/// Never; the `Result` is what clap asks of a value parser.
pub fn base_url(value: &str) -> Result<String, String> {
    Ok(value.trim_end_matches('/').to_owned())
}

/// The `q`-quantile of sorted latencies (nearest rank); 0 when there are none.
pub fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((sorted.len() as f64) * q).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_taken_only_inside_their_range() {
        assert_eq!(thread_count("1"), Ok(1));
        assert_eq!(thread_count("256"), Ok(THREADS_MAX));
        for bad in ["0", "257", "-1", "x", ""] {
            assert!(thread_count(bad).is_err(), "{bad}");
        }
        assert_eq!(measured_seconds("0.1"), Ok(SECONDS_MIN));
        assert_eq!(measured_seconds("600"), Ok(SECONDS_MAX));
        assert_eq!(warmup_seconds("0"), Ok(0.0));
        for bad in ["0.09", "600.1", "NaN", "inf", "-1"] {
            assert!(measured_seconds(bad).is_err(), "{bad}");
        }
        assert!(warmup_seconds("-0.5").is_err());
        assert_eq!(base_url("http://a:1//"), Ok("http://a:1".to_owned()));
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&sorted, 0.5), 50);
        assert_eq!(quantile(&sorted, 0.99), 99);
        assert_eq!(quantile::<u32>(&[], 0.5), 0);
        assert_eq!(quantile(&[7u64], 0.99), 7);
    }
}
