//! Random operation sequences run on `Database` and on the [`Reference`] model side by side:
//! atomic commits with fresh, stale and absence checks and every mutation kind (including type
//! mismatches, and sets that expire at once or much later), reads, lists of all four selector
//! kinds with every option (limit or none, reverse, batch size, a starting cursor) followed by
//! the continuation from the page's cursor, cursor pagination, snapshots read later and
//! dropped, reclamation, and transactions. Shared by the engine's model property test and the
//! `engine_ops` fuzz target, which decodes its input bytes into the same operations.

use std::time::Duration;

use proptest::prelude::*;
use tuplekv_codec::{Key, Selector, encode_key, key};
use tuplekv_engine::{
    AtomicWrite, Check, Database, Entry, Expiry, ListCursor, ListOptions, Mutation, MutationKind,
    ReadView, Snapshot, Store, Value, Versionstamp,
};

use crate::reference::Reference;

/// Keys the operations touch: a small space, so they collide.
pub const KEYS: u8 = 8;

/// The `i`-th key: `["k", i]` for the first six, then one nested key and one outside `["k"]`.
pub fn op_key(i: u8) -> Key {
    match i % KEYS {
        6 => key!["k", 2, "x"],
        7 => key!["j"],
        n => key!["k", n],
    }
}

/// How a check names the versionstamp it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckSpec {
    /// The key must be absent.
    Absent,
    /// The key's current stamp (passes unless an earlier check or op changed things).
    Current,
    /// A stamp the key has never had.
    Stale,
}

/// A mutation, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutSpec {
    /// Set a one-byte `Bytes` value.
    SetBytes(u8),
    /// Set a `U64`.
    SetU64(u64),
    /// Delete.
    Delete,
    /// `sum`.
    Sum(u64),
    /// `min`.
    Min(u64),
    /// `max`.
    Max(u64),
    /// Set a one-byte value with a zero expiry: invisible from the commit on.
    SetExpired(u8),
    /// Set a one-byte value that expires in an hour (long after the test).
    SetExpiresLater(u8),
}

/// Which of Deno's four selector kinds a list uses; bounds are key indexes (see [`op_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorSpec {
    /// `{prefix: ["k"]}`.
    Prefix,
    /// `{start, end}`.
    Range {
        /// Start key index (inclusive).
        start: u8,
        /// End key index (exclusive).
        end: u8,
    },
    /// `{prefix: ["k"], start}`.
    PrefixStart(u8),
    /// `{prefix: ["k"], end}`.
    PrefixEnd(u8),
}

/// A list: a selector with every option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListSpec {
    /// The selector.
    pub selector: SelectorSpec,
    /// Most entries (`None`: all).
    pub limit: Option<u8>,
    /// Direction.
    pub reverse: bool,
    /// Entries per batch (`None`: the default).
    pub batch_size: Option<u8>,
    /// Resume after this key index (its cursor for the selector, when it has one).
    pub cursor: Option<u8>,
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// An atomic commit.
    Atomic {
        /// Checks, by key index.
        checks: Vec<(u8, CheckSpec)>,
        /// Mutations, by key index.
        mutations: Vec<(u8, MutSpec)>,
    },
    /// A single-key read.
    Get(u8),
    /// A `get_many`.
    GetMany(Vec<u8>),
    /// A list, then, if it stopped at its limit, the rest from its cursor.
    List(ListSpec),
    /// List a selector page by page through cursors.
    Paginate {
        /// The selector.
        selector: SelectorSpec,
        /// Page size, at least 1.
        page: u8,
        /// Direction.
        reverse: bool,
        /// Entries per batch.
        batch_size: Option<u8>,
    },
    /// Take a snapshot (kept for later reads).
    Snapshot,
    /// Read every key of an earlier snapshot.
    ReadSnapshot(u8),
    /// Drop an earlier snapshot (the others must read as before).
    DropSnapshot(u8),
    /// Reclaim everything reclaimable (nothing visible may change).
    Reclaim,
    /// A transaction: read one key, write another from it (`n + 1`, or 1).
    Transaction {
        /// Key read.
        read: u8,
        /// Key written.
        write: u8,
    },
}

fn check_spec() -> impl Strategy<Value = CheckSpec> {
    prop_oneof![
        Just(CheckSpec::Absent),
        Just(CheckSpec::Current),
        Just(CheckSpec::Stale)
    ]
}

fn mut_spec() -> impl Strategy<Value = MutSpec> {
    prop_oneof![
        any::<u8>().prop_map(MutSpec::SetBytes),
        prop_oneof![Just(0), Just(u64::MAX), 0u64..10].prop_map(MutSpec::SetU64),
        Just(MutSpec::Delete),
        prop_oneof![Just(u64::MAX), 0u64..10].prop_map(MutSpec::Sum),
        (0u64..10).prop_map(MutSpec::Min),
        (0u64..10).prop_map(MutSpec::Max),
        any::<u8>().prop_map(MutSpec::SetExpired),
        any::<u8>().prop_map(MutSpec::SetExpiresLater),
    ]
}

fn selector_spec() -> impl Strategy<Value = SelectorSpec> {
    let k = || 0..KEYS;
    prop_oneof![
        Just(SelectorSpec::Prefix),
        (k(), k()).prop_map(|(start, end)| SelectorSpec::Range { start, end }),
        k().prop_map(SelectorSpec::PrefixStart),
        k().prop_map(SelectorSpec::PrefixEnd),
    ]
}

fn list_spec() -> impl Strategy<Value = ListSpec> {
    (
        selector_spec(),
        prop::option::of(1u8..8),
        any::<bool>(),
        prop::option::of(1u8..4),
        prop::option::weighted(0.3, 0..KEYS),
    )
        .prop_map(|(selector, limit, reverse, batch_size, cursor)| ListSpec {
            selector,
            limit,
            reverse,
            batch_size,
            cursor,
        })
}

/// A random operation.
pub fn op() -> impl Strategy<Value = Op> {
    let k = || 0..KEYS;
    prop_oneof![
        6 => (
            prop::collection::vec((k(), check_spec()), 0..3),
            prop::collection::vec((k(), mut_spec()), 0..4)
        )
            .prop_map(|(checks, mutations)| Op::Atomic { checks, mutations }),
        2 => k().prop_map(Op::Get),
        1 => prop::collection::vec(k(), 0..4).prop_map(Op::GetMany),
        4 => list_spec().prop_map(Op::List),
        1 => (selector_spec(), 1u8..4, any::<bool>(), prop::option::of(1u8..4)).prop_map(
            |(selector, page, reverse, batch_size)| Op::Paginate { selector, page, reverse, batch_size }
        ),
        1 => Just(Op::Snapshot),
        1 => any::<u8>().prop_map(Op::ReadSnapshot),
        1 => any::<u8>().prop_map(Op::DropSnapshot),
        1 => Just(Op::Reclaim),
        1 => (k(), k()).prop_map(|(read, write)| Op::Transaction { read, write }),
    ]
}

/// Decodes arbitrary bytes into operations (for the fuzz target): every input means something.
pub fn ops_from_bytes(data: &[u8]) -> Vec<Op> {
    let mut bytes = data.iter().copied();
    let mut next = move || bytes.next();
    let mut ops = Vec::new();
    while let Some(tag) = next() {
        let arg = next().unwrap_or(0);
        let op = match tag % 10 {
            0..=3 => {
                let checks = (0..arg % 3)
                    .map(|_| {
                        let b = next().unwrap_or(0);
                        let spec = match b >> 6 {
                            0 => CheckSpec::Absent,
                            1 | 2 => CheckSpec::Current,
                            _ => CheckSpec::Stale,
                        };
                        (b, spec)
                    })
                    .collect();
                let mutations = (0..(arg >> 2) % 5)
                    .map(|_| {
                        let b = next().unwrap_or(0);
                        let n = u64::from(next().unwrap_or(0));
                        let n = if n == 255 { u64::MAX } else { n % 10 };
                        let spec = match b >> 5 {
                            0 if n % 4 == 1 => MutSpec::SetExpired(b),
                            1 if n % 4 == 1 => MutSpec::SetExpiresLater(b),
                            0 | 1 => MutSpec::SetBytes(b),
                            2 => MutSpec::SetU64(n),
                            3 => MutSpec::Delete,
                            4 | 5 => MutSpec::Sum(n),
                            6 => MutSpec::Min(n),
                            _ => MutSpec::Max(n),
                        };
                        (b, spec)
                    })
                    .collect();
                Op::Atomic { checks, mutations }
            }
            4 => Op::Get(arg),
            5 => Op::GetMany((0..arg % 5).map(|_| next().unwrap_or(0)).collect()),
            6 => Op::List(ListSpec {
                selector: selector_from_byte(arg, &mut next),
                limit: (arg & 0x08 != 0).then(|| next().unwrap_or(0) % 8 + 1),
                reverse: arg & 0x80 != 0,
                batch_size: (arg & 0x10 != 0).then(|| next().unwrap_or(0) % 3 + 1),
                cursor: (arg & 0x20 != 0).then(|| next().unwrap_or(0)),
            }),
            7 => Op::Paginate {
                selector: selector_from_byte(arg, &mut next),
                page: (arg >> 3) % 3 + 1,
                reverse: arg & 0x80 != 0,
                batch_size: (arg & 0x40 != 0).then(|| next().unwrap_or(0) % 3 + 1),
            },
            8 => match arg % 5 {
                0 => Op::Snapshot,
                1 => Op::ReadSnapshot(arg),
                2 => Op::DropSnapshot(arg),
                3 => Op::Reclaim,
                _ => Op::Snapshot,
            },
            _ => Op::Transaction {
                read: arg,
                write: next().unwrap_or(0),
            },
        };
        ops.push(op);
    }
    ops
}

/// A selector kind from the low two bits of `arg`, its bounds from the following bytes.
fn selector_from_byte(arg: u8, next: &mut impl FnMut() -> Option<u8>) -> SelectorSpec {
    match arg % 4 {
        0 => SelectorSpec::Prefix,
        1 => SelectorSpec::Range {
            start: next().unwrap_or(0),
            end: next().unwrap_or(0),
        },
        2 => SelectorSpec::PrefixStart(next().unwrap_or(0)),
        _ => SelectorSpec::PrefixEnd(next().unwrap_or(0)),
    }
}

type Row = (Vec<u8>, Value, Versionstamp);

fn rows(entries: Vec<Entry>) -> Vec<Row> {
    entries
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value, e.versionstamp))
        .collect()
}

fn all_of(db: &impl ReadView) -> Result<Vec<Row>, String> {
    let all = tuplekv_codec::ByteRange {
        start: vec![],
        end: vec![0xff],
    };
    db.scan(&all, false, usize::MAX)
        .map(rows)
        .map_err(|e| e.to_string())
}

/// Runs `ops` on a fresh `Database` and a fresh [`Reference`]; returns the first disagreement.
///
/// # Errors
/// A description of the first operation whose outcome differs.
pub fn run_ops(ops: &[Op]) -> Result<(), String> {
    let db = Database::in_memory();
    let mut model = Reference::new();
    let mut snapshots: Vec<(Snapshot, Reference)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let fail = |what: String| format!("step {step} {op:?}: {what}");
        match op {
            Op::Atomic { checks, mutations } => {
                let write = AtomicWrite {
                    checks: checks
                        .iter()
                        .map(|(k, spec)| {
                            let key = encode_key(&op_key(*k));
                            let versionstamp = match spec {
                                CheckSpec::Absent => None,
                                CheckSpec::Current => model.get(&key).map(|(_, vs)| vs),
                                CheckSpec::Stale => Some(Versionstamp::from_version(
                                    model.versionstamp().version() + 1000,
                                )),
                            };
                            Check {
                                key: key.into(),
                                versionstamp,
                            }
                        })
                        .collect(),
                    range_checks: vec![],
                    mutations: mutations
                        .iter()
                        .map(|(k, spec)| Mutation {
                            key: encode_key(&op_key(*k)).into(),
                            kind: match spec {
                                MutSpec::SetBytes(b) => MutationKind::Set {
                                    value: Value::from(vec![*b]),
                                    expiry: None,
                                },
                                MutSpec::SetU64(n) => MutationKind::Set {
                                    value: Value::U64(*n),
                                    expiry: None,
                                },
                                MutSpec::Delete => MutationKind::Delete,
                                MutSpec::Sum(n) => MutationKind::Sum(*n),
                                MutSpec::Min(n) => MutationKind::Min(*n),
                                MutSpec::Max(n) => MutationKind::Max(*n),
                                MutSpec::SetExpired(b) => MutationKind::Set {
                                    value: Value::from(vec![*b]),
                                    expiry: Some(Expiry::In(Duration::ZERO)),
                                },
                                MutSpec::SetExpiresLater(b) => MutationKind::Set {
                                    value: Value::from(vec![*b]),
                                    expiry: Some(Expiry::In(Duration::from_secs(3600))),
                                },
                            },
                        })
                        .collect(),
                    numbering: Default::default(),
                };
                let got = Store::commit(&db, write.clone());
                let want = model.commit(&write);
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
            Op::Get(k) => {
                let got = db
                    .get(&op_key(*k))
                    .map_err(|e| fail(e.to_string()))?
                    .map(|e| (e.value, e.versionstamp));
                let want = model.get(&encode_key(&op_key(*k)));
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
            Op::GetMany(ks) => {
                let keys: Vec<Key> = ks.iter().map(|k| op_key(*k)).collect();
                let got: Vec<_> = db
                    .get_many(&keys)
                    .map_err(|e| fail(e.to_string()))?
                    .into_iter()
                    .map(|e| e.map(|e| (e.value, e.versionstamp)))
                    .collect();
                let want: Vec<_> = keys.iter().map(|k| model.get(&encode_key(k))).collect();
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
            Op::List(spec) => check_list(&db, &model, spec).map_err(fail)?,
            Op::Paginate {
                selector,
                page,
                reverse,
                batch_size,
            } => check_paginate(&db, &model, *selector, *page, *reverse, *batch_size)
                .map_err(fail)?,
            Op::Snapshot => snapshots.push((db.snapshot(), model.clone())),
            Op::ReadSnapshot(i) => {
                if snapshots.is_empty() {
                    continue;
                }
                let (snap, then) = &snapshots[usize::from(*i) % snapshots.len()];
                let got = all_of(snap).map_err(fail)?;
                let want = then.scan(&[], &[0xff], false, usize::MAX);
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
            Op::DropSnapshot(i) => {
                if !snapshots.is_empty() {
                    drop(snapshots.remove(usize::from(*i) % snapshots.len()));
                }
            }
            Op::Reclaim => db.reclaim_now(),
            Op::Transaction { read, write } => {
                let (r, w) = (op_key(*read), op_key(*write));
                let got = db.transaction(|tx| {
                    let n = match tx.get(&r)?.map(|e| e.value) {
                        Some(Value::U64(n)) => n.wrapping_add(1),
                        _ => 1,
                    };
                    tx.set(&w, Value::U64(n));
                    Ok::<_, tuplekv_engine::Error>(n)
                });
                let n = match model.get(&encode_key(&r)).map(|(v, _)| v) {
                    Some(Value::U64(n)) => n.wrapping_add(1),
                    _ => 1,
                };
                let want = model
                    .commit(&AtomicWrite {
                        checks: vec![],
                        range_checks: vec![],
                        mutations: vec![Mutation {
                            key: encode_key(&w).into(),
                            kind: MutationKind::Set {
                                value: Value::U64(n),
                                expiry: None,
                            },
                        }],
                        numbering: Default::default(),
                    })
                    .map(|_| n);
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
        }
    }
    // Every snapshot still open reads as it did, and the end states agree entirely.
    for (i, (snap, then)) in snapshots.iter().enumerate() {
        let got = all_of(snap)?;
        let want = then.scan(&[], &[0xff], false, usize::MAX);
        if got != want {
            return Err(format!(
                "snapshot {i} at the end: engine {got:?}, model {want:?}"
            ));
        }
    }
    let got = all_of(&db)?;
    let want = model.scan(&[], &[0xff], false, usize::MAX);
    if got != want {
        return Err(format!("final state: engine {got:?}, model {want:?}"));
    }
    Ok(())
}

/// A selector as the engine gets it, and as the model sees it: its byte range, which bounds
/// were given explicitly (Deno checks a cursor only against those), and whether Deno accepts
/// it at all (a start or end must lie under the prefix; a start must not follow the end).
struct ModelSelector {
    selector: Selector,
    start: Vec<u8>,
    end: Vec<u8>,
    has_start: bool,
    has_end: bool,
    valid: bool,
}

fn model_selector(spec: SelectorSpec) -> ModelSelector {
    let prefix = key!["k"];
    let p = encode_key(&prefix);
    let (mut all_start, mut all_end) = (p.clone(), p.clone());
    all_start.push(0x00);
    all_end.push(0xff);
    let under = |b: &[u8]| b.starts_with(&p) && b.len() > p.len();
    match spec {
        SelectorSpec::Prefix => ModelSelector {
            selector: Selector::prefix(&prefix),
            start: all_start,
            end: all_end,
            has_start: false,
            has_end: false,
            valid: true,
        },
        SelectorSpec::Range { start, end } => {
            let (s, e) = (encode_key(&op_key(start)), encode_key(&op_key(end)));
            ModelSelector {
                selector: Selector::range(&op_key(start), &op_key(end)),
                valid: s <= e,
                start: s,
                end: e,
                has_start: true,
                has_end: true,
            }
        }
        SelectorSpec::PrefixStart(b) => {
            let s = encode_key(&op_key(b));
            ModelSelector {
                selector: Selector::prefix_start(&prefix, &op_key(b)),
                valid: under(&s),
                start: s,
                end: all_end,
                has_start: true,
                has_end: false,
            }
        }
        SelectorSpec::PrefixEnd(b) => {
            let e = encode_key(&op_key(b));
            ModelSelector {
                selector: Selector::prefix_end(&prefix, &op_key(b)),
                valid: under(&e),
                start: all_start,
                end: e,
                has_start: false,
                has_end: true,
            }
        }
    }
}

impl ModelSelector {
    /// The range left after the entry at `after` (Deno's cursor rule): forward from just
    /// after it to the end, backward from the start to just before it. `None` when that
    /// leaves an explicit bound ("cursor out of bounds").
    fn resume(&self, after: &[u8], reverse: bool) -> Option<(Vec<u8>, Vec<u8>)> {
        if reverse {
            let last = after.to_vec();
            (!(self.has_end && last > self.end)).then(|| (self.start.clone(), last))
        } else {
            let mut first = after.to_vec();
            first.push(0x00);
            (!(self.has_start && first < self.start)).then(|| (first, self.end.clone()))
        }
    }
}

/// Lists `options` from the database: the rows, and the iterator's cursor before the first
/// entry and after the last.
/// One list through the iterator: its rows, and its cursor before and after iterating. The
/// same list read with `read_all` must agree (rows and final cursor); the outer error says it
/// did not, the inner one is the engine's.
type Listed = Result<(Vec<Row>, ListCursor, ListCursor), tuplekv_engine::Error>;

fn engine_list(db: &Database, selector: &Selector, options: ListOptions) -> Result<Listed, String> {
    let listed = (|| {
        let mut it = db.list(selector, options.clone())?;
        let before = it.cursor();
        let entries = it.by_ref().collect::<Result<Vec<_>, _>>()?;
        let mut all = db.list(selector, options.clone())?;
        let read = all.read_all()?;
        Ok((entries, read, before, it.cursor(), all.cursor()))
    })();
    match listed {
        Err(e) => Ok(Err(e)),
        Ok((entries, read, ..)) if read != entries => Err(format!(
            "read_all {read:?} and iterating {entries:?} disagree ({options:?})"
        )),
        Ok((.., after, read_after)) if read_after != after => Err(format!(
            "read_all leaves cursor {read_after:?}, iterating {after:?} ({options:?})"
        )),
        Ok((entries, _, before, after, _)) => Ok(Ok((rows(entries), before, after))),
    }
}

/// One list with every option, compared with the model, then the continuation from its
/// cursor when it stopped at its limit.
fn check_list(db: &Database, model: &Reference, spec: &ListSpec) -> Result<(), String> {
    let ms = model_selector(spec.selector);
    let limit = spec.limit.map(usize::from);
    let start_after = spec.cursor.map(|c| encode_key(&op_key(c)));
    let cursor = match &start_after {
        Some(k) if ms.valid => ms.selector.cursor_for(k).ok(),
        _ => None,
    };
    // A key equal to the selector's common prefix has the cursor "", which Deno reads as
    // "no cursor": the list starts over.
    let want_range = match (&cursor, &start_after) {
        _ if !ms.valid => None,
        (Some(c), Some(k)) if !c.is_empty() => ms.resume(k, spec.reverse),
        _ => Some((ms.start.clone(), ms.end.clone())),
    };
    let options = ListOptions {
        limit,
        reverse: spec.reverse,
        cursor: cursor.clone(),
        batch_size: spec.batch_size.map(usize::from),
    };
    let got = engine_list(db, &ms.selector, options.clone())?;
    let (rows, before, after) = match (got, &want_range) {
        (Err(_), None) => return Ok(()), // Deno rejects the selector or the cursor too
        (Ok(_), None) => return Err("an invalid selector or cursor was accepted".into()),
        (Err(e), Some(_)) => return Err(e.to_string()),
        (Ok(got), Some(_)) => got,
    };
    let (start, end) = want_range.unwrap_or_default();
    let want = model.scan(&start, &end, spec.reverse, limit.unwrap_or(usize::MAX));
    if rows != want {
        return Err(format!("engine {rows:?}, model {want:?}"));
    }
    let want_before = cursor
        .filter(|c| !c.is_empty())
        .map_or(ListCursor::NotStarted, ListCursor::After);
    if before != want_before {
        return Err(format!(
            "cursor before iterating: {before:?}, expected {want_before:?}"
        ));
    }
    // Stopped at the limit: the cursor names the last entry; otherwise the range is done.
    let last = rows.last().map(|(k, _, _)| k.clone());
    let want_after = match (&last, limit) {
        (Some(k), Some(l)) if rows.len() == l => ListCursor::After(
            ms.selector
                .cursor_for(k)
                .map_err(|e| format!("cursor for {k:?}: {e}"))?,
        ),
        _ => ListCursor::Exhausted,
    };
    if after != want_after {
        return Err(format!(
            "cursor after the page: {after:?}, expected {want_after:?}"
        ));
    }
    let (ListCursor::After(next), Some(last)) = (after, last) else {
        return Ok(());
    };
    let (start, end) = if next.is_empty() {
        (ms.start.clone(), ms.end.clone()) // Deno's quirk: "" starts over
    } else {
        ms.resume(&last, spec.reverse)
            .ok_or("continuation out of bounds")?
    };
    let (rest, _, _) = engine_list(
        db,
        &ms.selector,
        ListOptions {
            cursor: Some(next),
            ..options
        },
    )?
    .map_err(|e| format!("continuation: {e}"))?;
    let want = model.scan(&start, &end, spec.reverse, limit.unwrap_or(usize::MAX));
    if rest != want {
        return Err(format!("continuation: engine {rest:?}, model {want:?}"));
    }
    Ok(())
}

/// Pages through a selector with cursors; the pages together are the whole range.
fn check_paginate(
    db: &Database,
    model: &Reference,
    selector: SelectorSpec,
    page: u8,
    reverse: bool,
    batch_size: Option<u8>,
) -> Result<(), String> {
    let ms = model_selector(selector);
    let page = usize::from(page.max(1));
    let mut got = Vec::new();
    let mut cursor = None;
    for _ in 0..=usize::from(KEYS) + 1 {
        let options = ListOptions {
            limit: Some(page),
            reverse,
            cursor: cursor.clone(),
            batch_size: batch_size.map(usize::from),
        };
        let (rows, _, after) = match engine_list(db, &ms.selector, options)? {
            Err(_) if !ms.valid => return Ok(()),
            Err(e) => return Err(e.to_string()),
            Ok(_) if !ms.valid => return Err("an invalid selector was accepted".into()),
            Ok(got) => got,
        };
        let full = rows.len() == page;
        got.extend(rows);
        match after {
            // The last key equals the selector's common prefix: its cursor "" would start
            // over (as in Deno), so pagination ends here; what it read so far must agree.
            ListCursor::After(next) if full && next.is_empty() => {
                let want = model.scan(&ms.start, &ms.end, reverse, got.len());
                if got != want {
                    return Err(format!("engine {got:?}, model {want:?}"));
                }
                return Ok(());
            }
            ListCursor::After(next) if full => cursor = Some(next),
            ListCursor::Exhausted if !full => break,
            other => return Err(format!("page of {page}: cursor {other:?}")),
        }
    }
    let want = model.scan(&ms.start, &ms.end, reverse, usize::MAX);
    if got != want {
        return Err(format!("engine {got:?}, model {want:?}"));
    }
    Ok(())
}
