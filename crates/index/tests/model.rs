//! Property test: a single-threaded sequence of inserts, upserts, updates and deletes, each
//! checked against a `BTreeMap` reference model that says what the operation must return
//! (including `UniqueViolation`, `AlreadyExists` and `NotFound` with their keys), and after each
//! operation every query (`get`, `get_by`, `list_by`, `count`, `list`, paging one or two at a
//! time both ways) compared with the model. A write that is dropped, or applied when it should
//! have failed, shows up at once. Cases: `TUPLEKV_PROPTEST_CASES`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, Key, ListOptions, key};
use tuplekv_index::{Collection, Error, Page};
use tuplekv_testkit::config::proptest_config;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    id: u8,
    code: u8,
    color: u8,
    tags: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Item),
    Upsert(Item),
    Recolor(u8, u8),
    Recode(u8, u8),
    Delete(u8),
}

const IDS: u8 = 6;
const CODES: u8 = 4;
const COLORS: u8 = 3;
const TAGS: u8 = 3;

fn item() -> impl Strategy<Value = Item> {
    // Few ids, codes and colours: operations collide on records and unique values.
    (
        0..IDS,
        0..CODES,
        0..COLORS,
        prop::collection::vec(0..TAGS, 0..3),
    )
        .prop_map(|(id, code, color, tags)| Item {
            id,
            code,
            color,
            tags,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        item().prop_map(Op::Insert),
        item().prop_map(Op::Upsert),
        (0..IDS, 0..COLORS).prop_map(|(id, c)| Op::Recolor(id, c)),
        (0..IDS, 0..CODES).prop_map(|(id, c)| Op::Recode(id, c)),
        (0..IDS).prop_map(Op::Delete),
    ]
}

fn collection() -> Collection<Item, Database> {
    Collection::builder("items", |i: &Item| key![i.id])
        .unique("code", |i| Some(key![i.code]))
        .index("color", |i| Some(key![i.color]))
        .covering()
        .multi("tags", |i| i.tags.iter().map(|t| key![*t]).collect())
        .open(Database::in_memory())
        .unwrap()
}

/// What an operation returns: the record it reports (old or new), or the error.
type Outcome = Result<Option<Item>, Error>;

/// The reference: records by id, and what each operation must do to them.
#[derive(Default)]
struct Model {
    records: BTreeMap<u8, Item>,
}

impl Model {
    /// The error a write of `code` by record `id` must fail with, if another record has it.
    fn clash(&self, id: u8, code: u8) -> Option<Error> {
        self.records
            .values()
            .find(|i| i.id != id && i.code == code)
            .map(|holder| Error::UniqueViolation {
                index: "code".into(),
                value: key![code],
                existing_primary_key: key![holder.id],
            })
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Insert(i) => {
                if self.records.contains_key(&i.id) {
                    return Err(Error::AlreadyExists {
                        primary_key: key![i.id],
                    });
                }
                self.put(i.clone()).map(|_| None)
            }
            Op::Upsert(i) => self.put(i.clone()),
            Op::Recolor(id, color) => self.change(*id, |i| i.color = *color),
            Op::Recode(id, code) => self.change(*id, |i| i.code = *code),
            Op::Delete(id) => Ok(self.records.remove(id)),
        }
    }

    /// Stores `i` unless its code is taken; returns the record it replaced.
    fn put(&mut self, i: Item) -> Outcome {
        if let Some(e) = self.clash(i.id, i.code) {
            return Err(e);
        }
        Ok(self.records.insert(i.id, i))
    }

    fn change(&mut self, id: u8, f: impl Fn(&mut Item)) -> Outcome {
        let Some(mut i) = self.records.get(&id).cloned() else {
            return Err(Error::NotFound {
                primary_key: key![id],
            });
        };
        f(&mut i);
        self.put(i.clone())?;
        Ok(Some(i))
    }
}

fn run(c: &Collection<Item, Database>, op: &Op) -> Outcome {
    let recode = |id: u8, f: &dyn Fn(&mut Item)| {
        c.update(&key![id], |mut i| {
            f(&mut i);
            i
        })
        .map(Some)
    };
    match op {
        Op::Insert(i) => c.insert(i).map(|()| None),
        Op::Upsert(i) => c.upsert(i),
        Op::Recolor(id, color) => recode(*id, &|i| i.color = *color),
        Op::Recode(id, code) => recode(*id, &|i| i.code = *code),
        Op::Delete(id) => c.delete(&key![*id]),
    }
}

fn ids(page: &Page<Item>) -> Vec<u8> {
    page.items.iter().map(|(_, i)| i.id).collect()
}

/// Every page of `query`, `limit` at a time, concatenated; at most one page per entry plus one.
fn paged(
    query: impl Fn(ListOptions) -> Result<Page<Item>, Error>,
    limit: usize,
    reverse: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..=IDS as usize * 3 + 1 {
        let page = query(ListOptions {
            limit: Some(limit),
            reverse,
            cursor,
            ..ListOptions::default()
        })
        .unwrap();
        out.extend(ids(&page));
        cursor = page.cursor;
        if cursor.is_none() {
            return out;
        }
    }
    panic!("paging by {limit} did not end: {out:?}");
}

/// Every query the collection answers equals what the model says.
fn check_queries(c: &Collection<Item, Database>, model: &Model) -> Result<(), TestCaseError> {
    for id in 0..IDS {
        prop_assert_eq!(c.get(&key![id]).unwrap(), model.records.get(&id).cloned());
    }
    let all: Vec<(Key, Item)> = model
        .records
        .values()
        .map(|i| (key![i.id], i.clone()))
        .collect();
    prop_assert_eq!(c.list(ListOptions::default()).unwrap().items, all);
    for code in 0..CODES {
        let want = model.records.values().find(|i| i.code == code);
        prop_assert_eq!(
            c.get_by("code", &key![code]).unwrap(),
            want.map(|i| (key![i.id], i.clone()))
        );
        let want: Vec<u8> = want.map(|i| i.id).into_iter().collect();
        for reverse in [false, true] {
            prop_assert_eq!(
                paged(|o| c.list_by("code", &key![code], o), 1, reverse),
                want.clone()
            );
        }
    }
    let mut by_code: Vec<&Item> = model.records.values().collect();
    by_code.sort_by_key(|i| i.code);
    let by_code: Vec<u8> = by_code.iter().map(|i| i.id).collect();
    prop_assert_eq!(
        paged(|o| c.list_by("code", &key![], o), 1, false),
        by_code.clone()
    );
    let reversed: Vec<u8> = by_code.iter().rev().copied().collect();
    prop_assert_eq!(paged(|o| c.list_by("code", &key![], o), 2, true), reversed);
    for color in 0..COLORS {
        // Entries of one value are ordered by primary key.
        let want: Vec<u8> = model
            .records
            .values()
            .filter(|i| i.color == color)
            .map(|i| i.id)
            .collect();
        let unpaged = ids(&c
            .list_by("color", &key![color], ListOptions::default())
            .unwrap());
        prop_assert_eq!(&unpaged, &want);
        prop_assert_eq!(c.count("color", &key![color]).unwrap(), want.len());
        prop_assert_eq!(
            paged(|o| c.list_by("color", &key![color], o), 1, false),
            want.clone()
        );
        let reversed: Vec<u8> = want.iter().rev().copied().collect();
        prop_assert_eq!(
            paged(|o| c.list_by("color", &key![color], o), 2, true),
            reversed
        );
    }
    for tag in 0..TAGS {
        let want: Vec<u8> = model
            .records
            .values()
            .filter(|i| i.tags.iter().collect::<BTreeSet<_>>().contains(&tag))
            .map(|i| i.id)
            .collect();
        prop_assert_eq!(c.count("tags", &key![tag]).unwrap(), want.len());
        prop_assert_eq!(paged(|o| c.list_by("tags", &key![tag], o), 1, false), want);
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(64, "model.txt"))]

    #[test]
    fn every_operation_and_query_matches_a_reference_model(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let c = collection();
        let mut model = Model::default();
        for op in &ops {
            let want = model.apply(op);
            let got = run(&c, op);
            prop_assert_eq!(got, want, "{:?}", op);
            check_queries(&c, &model)?;
        }
        let report = c.verify().unwrap();
        prop_assert!(report.is_clean(), "{:?}", report);
    }
}
