//! The engine against the reference model (`tuplekv_testkit::reference`): random sequences of
//! atomic commits (fresh, stale and absence checks; every mutation kind, type mismatches and
//! sets expiring at once or much later included), reads, lists of all four selector kinds with
//! every option and a starting cursor, each page's continuation from its cursor, pagination,
//! snapshots read later and dropped, reclamation, and transactions must give the same
//! results, stamps and cursors included, on both. More cases: `TUPLEKV_PROPTEST_CASES`.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use tuplekv_testkit::config::proptest_config;
use tuplekv_testkit::engine_ops::{CheckSpec, ListSpec, MutSpec, Op, SelectorSpec, op, run_ops};

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
        Op::List(ListSpec {
            selector: SelectorSpec::Prefix,
            limit: Some(8),
            reverse: false,
            batch_size: None,
            cursor: None,
        }),
    ];
    run_ops(&ops).unwrap();
}

#[test]
fn a_value_set_to_expire_at_once_is_gone_for_the_rest_of_its_commit() {
    let ops = [
        Op::Atomic {
            checks: vec![],
            mutations: vec![(0, MutSpec::SetExpired(1)), (0, MutSpec::Sum(2))],
        },
        Op::Get(0),
        Op::Atomic {
            checks: vec![(1, CheckSpec::Absent)],
            mutations: vec![(1, MutSpec::SetExpired(1)), (1, MutSpec::Max(3))],
        },
    ];
    run_ops(&ops).unwrap();
}

#[test]
fn a_page_of_every_selector_kind_continues_from_its_cursor() {
    let fill = Op::Atomic {
        checks: vec![],
        mutations: (0..6).map(|k| (k, MutSpec::SetU64(u64::from(k)))).collect(),
    };
    let selectors = [
        SelectorSpec::Prefix,
        SelectorSpec::Range { start: 1, end: 6 },
        SelectorSpec::PrefixStart(1),
        SelectorSpec::PrefixEnd(5),
    ];
    for selector in selectors {
        for reverse in [false, true] {
            for cursor in [None, Some(2)] {
                let list = Op::List(ListSpec {
                    selector,
                    limit: Some(2),
                    reverse,
                    batch_size: Some(1),
                    cursor,
                });
                run_ops(&[fill.clone(), list]).unwrap();
            }
        }
    }
}
