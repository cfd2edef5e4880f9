//! Random operation sequences run on `Database` and on the [`Reference`] model side by side:
//! atomic commits with fresh, stale and absence checks and every mutation kind (including type
//! mismatches), reads, lists with limits and reverse, cursor pagination, snapshots read later,
//! and transactions. Shared by the engine's model property test and the `engine_ops` fuzz
//! target, which decodes its input bytes into the same operations.

use proptest::prelude::*;
use tuplekv_codec::{Key, Selector, encode_key, key};
use tuplekv_engine::{
    AtomicWrite, Check, Database, Entry, ListOptions, Mutation, MutationKind, ReadView, Snapshot,
    Store, Value, Versionstamp,
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
    /// A list of the prefix `["k"]` with a limit.
    List {
        /// Limit, at least 1.
        limit: u8,
        /// Direction.
        reverse: bool,
    },
    /// A list between two keys.
    Range {
        /// Start key index.
        start: u8,
        /// End key index.
        end: u8,
    },
    /// A list of the prefix `["k"]` from a start key, or up to an end key.
    Bounded {
        /// Key index of the bound.
        bound: u8,
        /// `true`: the bound is the start (inclusive); `false`: the end (exclusive).
        is_start: bool,
        /// Limit, at least 1.
        limit: u8,
        /// Direction.
        reverse: bool,
    },
    /// List the prefix `["k"]` page by page through cursors.
    Paginate {
        /// Page size, at least 1.
        page: u8,
        /// Direction.
        reverse: bool,
    },
    /// Take a snapshot (kept for later reads).
    Snapshot,
    /// Read every key of an earlier snapshot.
    ReadSnapshot(u8),
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
    ]
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
        2 => (1u8..8, any::<bool>()).prop_map(|(limit, reverse)| Op::List { limit, reverse }),
        1 => (k(), k()).prop_map(|(start, end)| Op::Range { start, end }),
        1 => (1u8..4, any::<bool>()).prop_map(|(page, reverse)| Op::Paginate { page, reverse }),
        1 => (k(), any::<bool>(), 1u8..8, any::<bool>()).prop_map(|(bound, is_start, limit, reverse)| {
            Op::Bounded { bound, is_start, limit, reverse }
        }),
        1 => Just(Op::Snapshot),
        1 => any::<u8>().prop_map(Op::ReadSnapshot),
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
            6 => Op::List {
                limit: arg % 8 + 1,
                reverse: arg & 0x80 != 0,
            },
            7 if arg & 0x40 != 0 => Op::Bounded {
                bound: next().unwrap_or(0),
                is_start: arg & 0x20 != 0,
                limit: arg % 8 + 1,
                reverse: arg & 0x80 != 0,
            },
            7 => Op::Paginate {
                page: arg % 3 + 1,
                reverse: arg & 0x80 != 0,
            },
            8 => match arg % 3 {
                0 => Op::Snapshot,
                1 => Op::ReadSnapshot(arg),
                _ => Op::Range {
                    start: arg >> 2,
                    end: next().unwrap_or(0),
                },
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
                                    expire_in: None,
                                },
                                MutSpec::SetU64(n) => MutationKind::Set {
                                    value: Value::U64(*n),
                                    expire_in: None,
                                },
                                MutSpec::Delete => MutationKind::Delete,
                                MutSpec::Sum(n) => MutationKind::Sum(*n),
                                MutSpec::Min(n) => MutationKind::Min(*n),
                                MutSpec::Max(n) => MutationKind::Max(*n),
                            },
                        })
                        .collect(),
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
            Op::List { limit, reverse } => {
                let selector = Selector::prefix(&key!["k"]);
                let options = ListOptions {
                    limit: Some(usize::from(*limit)),
                    reverse: *reverse,
                    ..ListOptions::default()
                };
                let got = rows(
                    db.list(&selector, options)
                        .map_err(|e| fail(e.to_string()))?
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| fail(e.to_string()))?,
                );
                let range = selector.byte_range().map_err(|e| fail(e.to_string()))?;
                let want = model.scan(&range.start, &range.end, *reverse, usize::from(*limit));
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
            Op::Range { start, end } => {
                let (s, e) = (op_key(*start), op_key(*end));
                let (sb, eb) = (encode_key(&s), encode_key(&e));
                let selector = Selector::range(&s, &e);
                let got = match db.list(&selector, ListOptions::default()) {
                    Ok(it) => Ok(rows(
                        it.collect::<Result<Vec<_>, _>>()
                            .map_err(|e| fail(e.to_string()))?,
                    )),
                    Err(e) => Err(e),
                };
                match got {
                    // Deno rejects a start after the end; an empty range lists nothing.
                    Err(_) if sb > eb => {}
                    Ok(got) => {
                        let want = model.scan(&sb, &eb, false, usize::MAX);
                        if got != want {
                            return Err(fail(format!("engine {got:?}, model {want:?}")));
                        }
                    }
                    Err(e) => return Err(fail(e.to_string())),
                }
            }
            Op::Bounded {
                bound,
                is_start,
                limit,
                reverse,
            } => {
                let prefix = key!["k"];
                let b = op_key(*bound);
                let selector = if *is_start {
                    Selector::prefix_start(&prefix, &b)
                } else {
                    Selector::prefix_end(&prefix, &b)
                };
                let options = ListOptions {
                    limit: Some(usize::from(*limit)),
                    reverse: *reverse,
                    ..ListOptions::default()
                };
                let under = b.starts_with(&prefix) && b.len() > prefix.len();
                match db.list(&selector, options) {
                    Err(_) if !under => {} // Deno: the bound must be under the prefix
                    Err(e) => return Err(fail(e.to_string())),
                    Ok(_) if !under => {
                        return Err(fail("bound outside the prefix accepted".into()));
                    }
                    Ok(it) => {
                        let got = rows(
                            it.collect::<Result<Vec<_>, _>>()
                                .map_err(|e| fail(e.to_string()))?,
                        );
                        let all = Selector::prefix(&prefix)
                            .byte_range()
                            .map_err(|e| fail(e.to_string()))?;
                        let bb = encode_key(&b);
                        let (start, end) = if *is_start {
                            (bb, all.end)
                        } else {
                            (all.start, bb)
                        };
                        let want = model.scan(&start, &end, *reverse, usize::from(*limit));
                        if got != want {
                            return Err(fail(format!("engine {got:?}, model {want:?}")));
                        }
                    }
                }
            }
            Op::Paginate { page, reverse } => {
                let selector = Selector::prefix(&key!["k"]);
                let mut got = Vec::new();
                let mut cursor = None;
                for _ in 0..=usize::from(KEYS) {
                    let mut it = db
                        .list(
                            &selector,
                            ListOptions {
                                limit: Some(usize::from(*page)),
                                reverse: *reverse,
                                cursor: cursor.clone(),
                                batch_size: None,
                            },
                        )
                        .map_err(|e| fail(e.to_string()))?;
                    let batch: Vec<Entry> = it
                        .by_ref()
                        .collect::<Result<_, _>>()
                        .map_err(|e| fail(e.to_string()))?;
                    let done = batch.len() < usize::from(*page);
                    got.extend(rows(batch));
                    let next = it.cursor().as_deno_str().to_owned();
                    if done || next.is_empty() {
                        break;
                    }
                    cursor = Some(next);
                }
                let range = selector.byte_range().map_err(|e| fail(e.to_string()))?;
                let want = model.scan(&range.start, &range.end, *reverse, usize::MAX);
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
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
                                expire_in: None,
                            },
                        }],
                    })
                    .map(|_| n);
                if got != want {
                    return Err(fail(format!("engine {got:?}, model {want:?}")));
                }
            }
        }
    }
    // The end states agree entirely.
    let got = all_of(&db)?;
    let want = model.scan(&[], &[0xff], false, usize::MAX);
    if got != want {
        return Err(format!("final state: engine {got:?}, model {want:?}"));
    }
    Ok(())
}
