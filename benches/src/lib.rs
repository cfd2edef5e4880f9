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
    fn quantiles_use_the_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&sorted, 0.5), 50);
        assert_eq!(quantile(&sorted, 0.99), 99);
        assert_eq!(quantile::<u32>(&[], 0.5), 0);
        assert_eq!(quantile(&[7u64], 0.99), 7);
    }
}
