//! The handoff probe: how long one cache line takes to move from one thread to another.
//!
//! On the shared VM the benches run on, the host sometimes places the two vCPUs on one
//! physical core (SMT siblings: a line moves in about 25 ns) and sometimes on two cores
//! (about 200 ns), and it moves them while a run goes on. Every result with two threads, and
//! every single-thread result that meets another thread's writes, depends on that placement:
//! two-thread commits ran at about half their usual rate in the rounds measured on two cores,
//! peers included. `cargo xtask bench` probes before and after each group and prints the
//! numbers in the report, so a reader can tell which placement a run had.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Round trips per probe: a few milliseconds at either placement.
const ROUND_TRIPS: u64 = 50_000;

/// Spins before a waiting thread yields its CPU: should the two threads ever share one vCPU,
/// each handoff then costs a reschedule instead of a whole time slice.
const SPINS_BEFORE_YIELD: u32 = 10_000;

/// Probes per measurement; their median is reported.
const PROBES: usize = 5;

/// A counter alone on its cache line (128 bytes covers adjacent-line prefetch too).
#[repr(align(128))]
struct Line(AtomicU64);

/// Nanoseconds per one-way handoff of one cache line between two threads: the median of
/// [`PROBES`] probes.
pub(crate) fn handoff_ns() -> f64 {
    let mut probes: Vec<f64> = (0..PROBES).map(|_| probe()).collect();
    probes.sort_by(f64::total_cmp);
    probes[PROBES / 2]
}

/// One probe: two threads take turns incrementing one counter, each waiting for the other's
/// increment before its own.
fn probe() -> f64 {
    let line = Line(AtomicU64::new(0));
    let total = 2 * ROUND_TRIPS;
    let started = Instant::now();
    std::thread::scope(|s| {
        for parity in 0..2u64 {
            let line = &line;
            s.spawn(move || {
                let mut next = parity;
                while next < total {
                    let mut spins = 0;
                    while line.0.load(Ordering::Acquire) != next {
                        spins += 1;
                        if spins < SPINS_BEFORE_YIELD {
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    line.0.store(next + 1, Ordering::Release);
                    next += 2;
                }
            });
        }
    });
    started.elapsed().as_secs_f64() * 1e9 / total as f64
}

/// The report's line for the probes taken around each group: `(group, before, after)`.
pub(crate) fn report_line(probes: &[(String, f64, f64)]) -> Option<String> {
    if probes.is_empty() {
        return None;
    }
    let each: Vec<String> = probes
        .iter()
        .map(|(group, before, after)| format!("{group} {before:.0} ns before, {after:.0} ns after"))
        .collect();
    Some(format!(
        "vCPU handoff (one cache line passed between two threads; about 25 ns: SMT siblings \
         on one core, about 200 ns: two cores): {}",
        each.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_measures_a_positive_finite_handoff() {
        let ns = handoff_ns();
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }

    #[test]
    fn the_report_line_names_each_group_with_both_probes() {
        assert_eq!(report_line(&[]), None);
        let line = report_line(&[("engine".into(), 24.6, 197.2), ("index".into(), 25.0, 25.4)])
            .expect("probes were taken");
        assert!(
            line.ends_with("engine 25 ns before, 197 ns after; index 25 ns before, 25 ns after"),
            "{line}"
        );
    }
}
