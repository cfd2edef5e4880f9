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

/// The `--flag value` pairs of a load binary's command line, in order.
///
/// # Errors
/// `usage` for `-h` or `--help`; a flag without a value names the flag, then `usage`.
pub fn flag_pairs<'a>(argv: &'a [String], usage: &str) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut pairs = Vec::new();
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(usage.to_owned());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value\n{usage}"))?;
        pairs.push((flag.as_str(), value.as_str()));
    }
    Ok(pairs)
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
    fn flags_come_in_pairs() {
        let argv: Vec<String> = ["--a", "1", "--b", "x"].map(String::from).to_vec();
        assert_eq!(
            flag_pairs(&argv, "usage"),
            Ok(vec![("--a", "1"), ("--b", "x")])
        );
        let lone = vec!["--a".to_owned()];
        assert_eq!(
            flag_pairs(&lone, "usage"),
            Err("`--a` needs a value\nusage".into())
        );
        assert_eq!(flag_pairs(&["-h".to_owned()], "usage"), Err("usage".into()));
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
