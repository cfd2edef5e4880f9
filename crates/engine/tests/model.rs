//! The engine against the reference model (`tuplekv_testkit::reference`): random sequences of
//! atomic commits (fresh, stale and absence checks; every mutation kind, type mismatches
//! included), reads, lists, cursor pagination, snapshots read later, and transactions must
//! give the same results, stamps included, on both. More cases: `TUPLEKV_PROPTEST_CASES`.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use tuplekv_testkit::config::proptest_config;
use tuplekv_testkit::engine_ops::{CheckSpec, MutSpec, Op, op, run_ops};

proptest! {
    #![proptest_config(proptest_config(256, "model.txt"))]

    #[test]
    fn engine_agrees_with_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        if let Err(disagreement) = run_ops(&ops) {
            prop_assert!(false, "{}", disagreement);
        }
    }
}

#[test]
fn a_type_mismatch_after_a_set_leaves_both_untouched() {
    let ops = [
        Op::Atomic {
            checks: vec![],
            mutations: vec![(0, MutSpec::SetBytes(1))],
        },
        Op::Atomic {
            checks: vec![(0, CheckSpec::Current)],
            mutations: vec![(1, MutSpec::SetU64(5)), (0, MutSpec::Sum(1))],
        },
        Op::Get(1),
        Op::List {
            limit: 8,
            reverse: false,
        },
    ];
    run_ops(&ops).unwrap();
}
