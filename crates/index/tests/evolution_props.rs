//! Random evolutions of a record struct, checked against what the collection promises: each
//! one either reads every stored record correctly or is refused at `open`, never misread.
//!
//! A record type cannot be random at compile time, so the records here are `Dyn<V>`: a list of
//! typed values whose serde shape (field names, order, types, defaults) is the `V`th entry of a
//! thread-local table of schemas. A case starts with a schema (an `id: u64` key and one to four
//! fields) and a store holding records written by it, then applies up to four random
//! evolutions: a field added at the end (with or without a default) or in the middle, removed,
//! swapped with another, retyped or renamed (with or without `.renamed(..)`), each with or
//! without a new `.version(..)` (whose `.migrate(..)` converts by logical field, as an
//! application would). After each accepted open, every record written by every earlier
//! version must read back, through `get`, `list` and `upsert` and after `migrate_records`, as
//! the oracle says: fields follow their logical identity through renames, widening keeps the
//! value, added fields take their default, migrations convert. A refused open must leave the
//! store as it was, and the next evolution starts from the last accepted struct.
//!
//! A second test runs fixed evolutions so the property cannot pass by refusing everything:
//! the safe ones open, the unsafe ones are refused.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{self, SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use tuplekv_engine::{ByteRange, Database, Entry, ListOptions, ReadView, key};
use tuplekv_index::{Collection, CollectionBuilder, Error};
use tuplekv_testkit::config::proptest_config;

/// The most evolution steps of a case; `Dyn<0>` .. `Dyn<STEPS_MAX>` are dispatched by hand.
const STEPS_MAX: usize = 4;

/// The collection every case writes.
const COLLECTION: &str = "recs";

// ---------------------------------------------------------------------------------------------
// The dynamic record type.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    U32,
    U64,
    Str,
    Bool,
}

impl Ty {
    const ALL: [Ty; 4] = [Ty::U32, Ty::U64, Ty::Str, Ty::Bool];

    fn zero(self) -> Val {
        match self {
            Ty::U32 => Val::U32(0),
            Ty::U64 => Val::U64(0),
            Ty::Str => Val::Str(String::new()),
            Ty::Bool => Val::Bool(false),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Ty::U32 => "u32",
            Ty::U64 => "u64",
            Ty::Str => "str",
            Ty::Bool => "bool",
        }
    }

    /// The next type in a fixed rotation (a retype that is not a widening).
    fn next(self) -> Ty {
        match self {
            Ty::U32 => Ty::Bool,
            Ty::U64 => Ty::Str,
            Ty::Str => Ty::U64,
            Ty::Bool => Ty::U32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    U32(u32),
    U64(u64),
    Str(String),
    Bool(bool),
}

impl Val {
    fn ty(&self) -> Ty {
        match self {
            Val::U32(_) => Ty::U32,
            Val::U64(_) => Ty::U64,
            Val::Str(_) => Ty::Str,
            Val::Bool(_) => Ty::Bool,
        }
    }
}

impl Serialize for Val {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Val::U32(x) => s.serialize_u32(*x),
            Val::U64(x) => s.serialize_u64(*x),
            Val::Str(x) => s.serialize_str(x),
            Val::Bool(x) => s.serialize_bool(*x),
        }
    }
}

/// One field of a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldDef {
    /// The field's logical identity: kept through renames and retypes.
    id: usize,
    name: &'static str,
    ty: Ty,
    /// Whether the field reads as its type's zero when a stored record ends before it (what
    /// `#[serde(default)]` does).
    default: bool,
}

type Schema = Vec<FieldDef>;

fn show_schema(s: &Schema) -> String {
    let fields: Vec<String> = s
        .iter()
        .map(|f| {
            format!(
                "{}#{}: {}{}",
                f.name,
                f.id,
                f.ty.name(),
                if f.default { " = default" } else { "" }
            )
        })
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

thread_local! {
    /// The schema of `Dyn<V>`, by `V` (the step that declared it).
    static SCHEMAS: RefCell<Vec<Schema>> = const { RefCell::new(Vec::new()) };
    /// Leaked names, so that the same name is leaked once.
    static NAMES: RefCell<HashMap<String, &'static str>> = RefCell::new(HashMap::new());
    /// Leaked field lists (`deserialize_struct` wants `&'static [&'static str]`).
    static FIELD_LISTS: RefCell<HashMap<Vec<&'static str>, &'static [&'static str]>> =
        RefCell::new(HashMap::new());
}

fn intern(name: String) -> &'static str {
    NAMES.with(|n| {
        *n.borrow_mut()
            .entry(name.clone())
            .or_insert_with(|| Box::leak(name.into_boxed_str()))
    })
}

fn field_list(s: &Schema) -> &'static [&'static str] {
    let names: Vec<&'static str> = s.iter().map(|f| f.name).collect();
    FIELD_LISTS.with(|l| {
        *l.borrow_mut()
            .entry(names.clone())
            .or_insert_with(|| Box::leak(names.into_boxed_slice()))
    })
}

fn set_schema(v: usize, s: &Schema) {
    SCHEMAS.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() <= v {
            t.resize(v + 1, Vec::new());
        }
        t[v] = s.clone();
    });
}

fn schema(v: usize) -> Schema {
    SCHEMAS
        .with(|t| t.borrow().get(v).cloned())
        .unwrap_or_else(|| panic!("no schema {v} in this thread's table"))
}

/// A record of schema `V`: the fields' names and values, in schema order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dyn<const V: usize> {
    fields: Vec<(String, Val)>,
}

impl<const V: usize> Dyn<V> {
    fn new(values: Vec<Val>) -> Self {
        let s = schema(V);
        assert_eq!(
            s.len(),
            values.len(),
            "a record of schema {V} has one value a field"
        );
        Dyn {
            fields: s.iter().map(|f| f.name.to_owned()).zip(values).collect(),
        }
    }

    fn id(&self) -> u64 {
        match self.fields.first() {
            Some((_, Val::U64(id))) => *id,
            other => panic!("a record of schema {V} starts with {other:?}, not its u64 id"),
        }
    }
}

impl<const V: usize> Serialize for Dyn<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let schema = schema(V);
        if schema.len() != self.fields.len()
            || schema
                .iter()
                .zip(&self.fields)
                .any(|(f, (_, v))| f.ty != v.ty())
        {
            return Err(ser::Error::custom(format!(
                "record {:?} does not fit schema {V} {}",
                self.fields,
                show_schema(&schema)
            )));
        }
        let mut st = s.serialize_struct("Rec", self.fields.len())?;
        for (f, (_, v)) in schema.iter().zip(&self.fields) {
            st.serialize_field(f.name, v)?;
        }
        st.end()
    }
}

impl<'de, const V: usize> Deserialize<'de> for Dyn<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let schema = schema(V);
        let names = field_list(&schema);
        d.deserialize_struct("Rec", names, DynVisitor::<V> { schema })
    }
}

struct DynVisitor<const V: usize> {
    schema: Schema,
}

impl<'de, const V: usize> Visitor<'de> for DynVisitor<V> {
    type Value = Dyn<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "struct Rec of schema {V} {}", show_schema(&self.schema))
    }

    /// What serde's derive does: each field in order; a sequence that ends early fills the
    /// fields with a default and fails on the first without one.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dyn<V>, A::Error> {
        let mut fields = Vec::with_capacity(self.schema.len());
        for (i, f) in self.schema.iter().enumerate() {
            let v = match f.ty {
                Ty::U32 => seq.next_element::<u32>()?.map(Val::U32),
                Ty::U64 => seq.next_element::<u64>()?.map(Val::U64),
                Ty::Str => seq.next_element::<String>()?.map(Val::Str),
                Ty::Bool => seq.next_element::<bool>()?.map(Val::Bool),
            };
            let v = match v {
                Some(v) => v,
                None if f.default => f.ty.zero(),
                None => return Err(de::Error::invalid_length(i, &self)),
            };
            fields.push((f.name.to_owned(), v));
        }
        Ok(Dyn { fields })
    }
}

// ---------------------------------------------------------------------------------------------
// Conversions (what every migration of a case does) and the oracle's reading model.

/// Converts one value to `to`, as a migration would; `Err` when it cannot.
fn conv(v: &Val, to: Ty) -> Result<Val, String> {
    Ok(match (v, to) {
        (Val::U32(x), Ty::U32) => Val::U32(*x),
        (Val::U32(x), Ty::U64) => Val::U64(u64::from(*x)),
        (Val::U32(x), Ty::Str) => Val::Str(x.to_string()),
        (Val::U32(x), Ty::Bool) => Val::Bool(*x != 0),
        (Val::U64(x), Ty::U32) => {
            Val::U32(u32::try_from(*x).map_err(|_| format!("{x} does not fit a u32"))?)
        }
        (Val::U64(x), Ty::U64) => Val::U64(*x),
        (Val::U64(x), Ty::Str) => Val::Str(x.to_string()),
        (Val::U64(x), Ty::Bool) => Val::Bool(*x != 0),
        (Val::Str(s), Ty::U32) => Val::U32(s.parse().map_err(|_| format!("{s:?} is not a u32"))?),
        (Val::Str(s), Ty::U64) => Val::U64(s.parse().map_err(|_| format!("{s:?} is not a u64"))?),
        (Val::Str(s), Ty::Str) => Val::Str(s.clone()),
        (Val::Str(s), Ty::Bool) => {
            Val::Bool(s.parse().map_err(|_| format!("{s:?} is not a bool"))?)
        }
        (Val::Bool(b), Ty::U32) => Val::U32(u32::from(*b)),
        (Val::Bool(b), Ty::U64) => Val::U64(u64::from(*b)),
        (Val::Bool(b), Ty::Str) => Val::Str(b.to_string()),
        (Val::Bool(b), Ty::Bool) => Val::Bool(*b),
    })
}

/// A migration from records of schema `from` (values in its order) to schema `to`, by logical
/// field: converted when the field is in both, its type's zero when it is new.
fn convert(from: &Schema, values: &[Val], to: &Schema) -> Result<Vec<Val>, String> {
    to.iter()
        .map(|f| match from.iter().position(|o| o.id == f.id) {
            Some(i) => conv(&values[i], f.ty),
            None => Ok(f.ty.zero()),
        })
        .collect()
}

/// Why the oracle has no expected value for a record.
#[derive(Clone, Debug)]
enum NoExpectation {
    /// A migration fails on it: the open's dry run must refuse.
    MigrationFails(String),
    /// No correct reading of its bytes exists without a migration (a type changed, a field
    /// without a default is new): the open must refuse.
    Unreadable(String),
}

impl fmt::Display for NoExpectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoExpectation::MigrationFails(why) => write!(f, "its migration fails: {why}"),
            NoExpectation::Unreadable(why) => write!(f, "it cannot be read unconverted: {why}"),
        }
    }
}

/// Values written by schema `written` as read, without a migration, by schema `reader` of the
/// same version: every accepted change keeps each field's position and bytes (a declared
/// rename, a widened integer, a defaulted field added at the end), so values follow their
/// logical field.
fn read_as(written: &Schema, values: &[Val], reader: &Schema) -> Result<Vec<Val>, NoExpectation> {
    reader
        .iter()
        .map(|f| match written.iter().position(|w| w.id == f.id) {
            Some(i) => match (&values[i], f.ty) {
                (v, t) if v.ty() == t => Ok(v.clone()),
                (Val::U32(x), Ty::U64) => Ok(Val::U64(u64::from(*x))),
                (v, t) => Err(NoExpectation::Unreadable(format!(
                    "field `{}` was written as {v:?} and is read as {}",
                    f.name,
                    t.name()
                ))),
            },
            None if f.default => Ok(f.ty.zero()),
            None => Err(NoExpectation::Unreadable(format!(
                "field `{}` is new, has no default, and the record was written without it",
                f.name
            ))),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Cases.

/// One evolution. Positions are picks, resolved against the schema they apply to (`1 + pick %
/// fields`, so the key `id` at position 0 never moves).
#[derive(Clone, Debug)]
enum Op {
    AddEnd {
        ty: Ty,
        default: bool,
    },
    /// `ty: None`: the type of the field it is inserted before (the hardest to tell apart).
    AddMiddle {
        at: u8,
        ty: Option<Ty>,
        default: bool,
    },
    Remove {
        at: u8,
    },
    Swap {
        a: u8,
        b: u8,
    },
    /// `to: None`: widen a `u32` to `u64`, else the next type in the rotation.
    Retype {
        at: u8,
        to: Option<Ty>,
    },
    Rename {
        at: u8,
        declared: bool,
    },
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    /// Declares a new version (the step's number) with a migration from each older one.
    bump: bool,
    /// Inserted at this version once it opens.
    new_records: usize,
    /// Rewrites one existing record with new values at this version.
    upsert: bool,
    /// Runs `migrate_records` after the writes.
    migrate_records: bool,
    /// Opens the same definition again at the end (a restart of the same build) and reads
    /// everything through it.
    reopen: bool,
}

#[derive(Clone, Debug)]
struct Case {
    /// The fields after `id: u64`: type and whether they take a default.
    initial: Vec<(Ty, bool)>,
    initial_records: usize,
    steps: Vec<Step>,
    /// Candidate primary keys, used in order (repeats skipped).
    ids: Vec<u64>,
    /// Seeds the record values.
    seed: u64,
}

fn ty_strategy() -> impl Strategy<Value = Ty> {
    prop::sample::select(Ty::ALL.to_vec())
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (ty_strategy(), any::<bool>()).prop_map(|(ty, default)| Op::AddEnd { ty, default }),
        (any::<u8>(), prop::option::of(ty_strategy()), any::<bool>())
            .prop_map(|(at, ty, default)| Op::AddMiddle { at, ty, default }),
        any::<u8>().prop_map(|at| Op::Remove { at }),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Swap { a, b }),
        (any::<u8>(), prop::option::of(ty_strategy())).prop_map(|(at, to)| Op::Retype { at, to }),
        (any::<u8>(), any::<bool>()).prop_map(|(at, declared)| Op::Rename { at, declared }),
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (
        op_strategy(),
        any::<bool>(),
        2usize..=3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(op, bump, new_records, upsert, migrate_records, reopen)| Step {
                op,
                bump,
                new_records,
                upsert,
                migrate_records,
                reopen,
            },
        )
}

/// Primary keys, many of them starting with the envelope tag's byte 0xE7 as varints (231, 359,
/// ... are `103 + 128 k`), which plain records must keep apart from envelopes.
fn id_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (1u64..2000).prop_map(|k| 103 + 128 * k),
        1 => prop::sample::select(vec![231u64, 359, 0, 1, 127, 128, u64::MAX]),
        1 => 0u64..300,
        1 => any::<u64>(),
    ]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((ty_strategy(), any::<bool>()), 1..=4),
        3usize..=6,
        prop::collection::vec(step_strategy(), 1..=STEPS_MAX),
        prop::collection::vec(id_strategy(), 24),
        any::<u64>(),
    )
        .prop_map(|(initial, initial_records, steps, ids, seed)| Case {
            initial,
            initial_records,
            steps,
            ids,
            seed,
        })
}

/// What one step did to the schema.
struct Applied {
    schema: Schema,
    /// The kind, for the counts: e.g. "rename (undeclared)".
    kind: String,
    renames: Vec<(String, String)>,
    /// Whether the layer promises to accept it without a new version.
    safe: bool,
    /// What happened, for messages.
    text: String,
}

fn field_at(s: &Schema, pick: u8) -> usize {
    1 + usize::from(pick) % (s.len() - 1)
}

fn apply(base: &Schema, op: &Op, step: usize, next_id: &mut usize) -> Applied {
    let mut s = base.clone();
    let mut new_field = |ty: Ty, default: bool| {
        let id = *next_id;
        *next_id += 1;
        FieldDef {
            id,
            name: intern(format!("f{id}")),
            ty,
            default,
        }
    };
    let others = base.len() - 1; // fields but the key
    let add_end = |s: &mut Schema, f: FieldDef| {
        let text = format!("added `{}: {}` at the end", f.name, f.ty.name());
        let kind = if f.default {
            "add at end (default)"
        } else {
            "add at end (no default)"
        };
        let safe = f.default;
        s.push(f);
        (kind.to_owned(), safe, text)
    };
    let (kind, renames, safe, text) = match *op {
        Op::AddEnd { ty, default } => {
            let (kind, safe, text) = add_end(&mut s, new_field(ty, default));
            (kind, vec![], safe, text)
        }
        Op::AddMiddle { at, ty, default } if others >= 1 => {
            let i = field_at(base, at);
            let ty = ty.unwrap_or(base[i].ty);
            let f = new_field(ty, default);
            let text = format!(
                "inserted `{}: {}` before `{}`",
                f.name,
                ty.name(),
                base[i].name
            );
            s.insert(i, f);
            ("add in middle".to_owned(), vec![], false, text)
        }
        Op::Remove { at } if others >= 1 => {
            let i = field_at(base, at);
            let f = s.remove(i);
            let kind = if i == base.len() - 1 {
                "remove (last)"
            } else {
                "remove (not last)"
            };
            (
                kind.to_owned(),
                vec![],
                false,
                format!("removed `{}`", f.name),
            )
        }
        Op::Swap { a, b } if others >= 2 => {
            let i = field_at(base, a);
            let mut j = field_at(base, b);
            if i == j {
                j = 1 + (j % others);
            }
            s.swap(i, j);
            let kind = if base[i].ty == base[j].ty {
                "swap (same type)"
            } else {
                "swap (different types)"
            };
            (
                kind.to_owned(),
                vec![],
                false,
                format!("swapped `{}` and `{}`", base[i].name, base[j].name),
            )
        }
        Op::Retype { at, to } if others >= 1 => {
            let i = field_at(base, at);
            let from = base[i].ty;
            let to = match to {
                Some(t) if t != from => t,
                None if from == Ty::U32 => Ty::U64,
                _ => from.next(),
            };
            s[i].ty = to;
            let widen = from == Ty::U32 && to == Ty::U64;
            let kind = if widen {
                "retype u32 -> u64 (widen)".to_owned()
            } else {
                format!("retype {} -> {}", from.name(), to.name())
            };
            (
                kind,
                vec![],
                widen,
                format!(
                    "retyped `{}` from {} to {}",
                    base[i].name,
                    from.name(),
                    to.name()
                ),
            )
        }
        Op::Rename { at, declared } if others >= 1 => {
            let i = field_at(base, at);
            let old = base[i].name;
            let new = intern(format!("{}_r{step}", old.split('_').next().unwrap_or(old)));
            s[i].name = new;
            let renames = if declared {
                vec![(old.to_owned(), new.to_owned())]
            } else {
                vec![]
            };
            let kind = if declared {
                "rename (declared)"
            } else {
                "rename (undeclared)"
            };
            (
                kind.to_owned(),
                renames,
                declared,
                format!(
                    "renamed `{old}` to `{new}`{}",
                    if declared { " (declared)" } else { "" }
                ),
            )
        }
        // Not applicable to so few fields: add a defaulted field at the end instead.
        _ => {
            let (kind, safe, text) = add_end(&mut s, new_field(Ty::Str, true));
            (
                kind,
                vec![],
                safe,
                format!("{text} (the op does not apply)"),
            )
        }
    };
    Applied {
        schema: s,
        kind,
        renames,
        safe,
        text,
    }
}

// ---------------------------------------------------------------------------------------------
// Running a case.

/// A stored record as the oracle knows it.
#[derive(Clone, Debug)]
struct Rec {
    /// The version it was written at.
    version: u32,
    /// The schema (step) that wrote it.
    written: usize,
    /// Its values, in that schema's order.
    values: Vec<Val>,
}

struct World {
    db: Database,
    /// The last accepted schema and its version.
    cur: usize,
    cur_version: u32,
    /// The last accepted schema of each version opened.
    version_schema: BTreeMap<u32, usize>,
    records: BTreeMap<u64, Rec>,
    ids: Vec<u64>,
    used: BTreeSet<u64>,
    rng: fastrand::Rng,
    /// Strings are decimal `u32`s (so migrations to numbers succeed).
    numeric_strings: bool,
    history: Vec<String>,
}

impl World {
    fn fresh_id(&mut self) -> u64 {
        loop {
            let id = if self.ids.is_empty() {
                self.rng.u64(..)
            } else {
                self.ids.remove(0)
            };
            if self.used.insert(id) {
                return id;
            }
        }
    }

    fn value(&mut self, ty: Ty) -> Val {
        let r = &mut self.rng;
        match ty {
            Ty::U32 => Val::U32(match r.u8(0..8) {
                0 => 0,
                1 => 1,
                2 => 127,
                3 => 128,
                4 => 231,
                5 => u32::MAX,
                _ => r.u32(..),
            }),
            Ty::U64 => Val::U64(match r.u8(0..8) {
                0 => 0,
                1 => 231,
                2 => u64::from(u32::MAX),
                3 => u64::from(u32::MAX) + 1,
                4 => u64::MAX,
                5 => r.u64(..1000),
                _ => r.u64(..),
            }),
            Ty::Str if self.numeric_strings => Val::Str(r.u32(..).to_string()),
            Ty::Str => Val::Str(match r.u8(0..10) {
                0 => String::new(),
                1 => "ada".to_owned(),
                2 => "é🙂".to_owned(),
                3 => "true".to_owned(),
                4 => "18446744073709551615".to_owned(),
                5 => "4294967296".to_owned(),
                _ => r.u32(..).to_string(),
            }),
            Ty::Bool => Val::Bool(r.bool()),
        }
    }

    /// Fresh values of schema `s` for the record `id`.
    fn values(&mut self, s: &Schema, id: u64) -> Vec<Val> {
        s.iter()
            .map(|f| {
                if f.id == 0 {
                    Val::U64(id)
                } else {
                    self.value(f.ty)
                }
            })
            .collect()
    }

    /// What `rec` must read as through schema `to` of `version`.
    fn expect(&self, rec: &Rec, to: usize, version: u32) -> Result<Vec<Val>, NoExpectation> {
        let target = schema(to);
        if rec.version == version {
            return read_as(&schema(rec.written), &rec.values, &target);
        }
        let old = self.version_schema[&rec.version];
        let values = read_as(&schema(rec.written), &rec.values, &schema(old))?;
        convert(&schema(old), &values, &target).map_err(NoExpectation::MigrationFails)
    }
}

/// Every entry of the store.
fn dump(db: &Database) -> Vec<Entry> {
    let everything = ByteRange {
        start: Vec::new(),
        end: vec![0xff; 16],
    };
    db.snapshot().scan(&everything, false, usize::MAX).unwrap()
}

/// What the caller of a step plans.
struct Plan {
    step: usize,
    version: u32,
    renames: Vec<(String, String)>,
    new_records: usize,
    upsert: bool,
    migrate_records: bool,
    reopen: bool,
    /// The op's kind and whether the layer promises to accept it without a version.
    kind: String,
    safe: bool,
}

/// What a step's open did.
#[derive(Clone, Debug)]
struct Outcome {
    kind: String,
    bumped: bool,
    /// The oracle's prediction: the change is one the layer promises to accept, and every
    /// migration succeeds on the stored records.
    predicted: bool,
    /// `None`: opened; else the error's variant and message.
    refused: Option<(&'static str, String)>,
}

fn variant(e: &Error) -> Option<&'static str> {
    match e {
        Error::Schema { .. } => Some("Schema"),
        Error::Definition(_) => Some("Definition"),
        Error::Incompatible { .. } => Some("Incompatible"),
        _ => None,
    }
}

fn add_migration<const K: usize>(
    b: CollectionBuilder<Dyn<K>>,
    from: u32,
    old: usize,
    to: &Schema,
) -> CollectionBuilder<Dyn<K>> {
    let from_schema = schema(old);
    let to = to.clone();
    macro_rules! arm {
        ($j:literal) => {
            b.migrate(from, move |r: Dyn<$j>| {
                let values: Vec<Val> = r.fields.into_iter().map(|(_, v)| v).collect();
                Ok(Dyn::<K> {
                    fields: to
                        .iter()
                        .map(|f| f.name.to_owned())
                        .zip(convert(&from_schema, &values, &to)?)
                        .collect(),
                })
            })
        };
    }
    match old {
        0 => arm!(0),
        1 => arm!(1),
        2 => arm!(2),
        3 => arm!(3),
        4 => arm!(4),
        _ => panic!("schema {old} is past STEPS_MAX"),
    }
}

/// Checks that every record the oracle knows reads as expected through `coll` (schema `K`).
fn check_all<const K: usize>(
    w: &World,
    coll: &Collection<Dyn<K>, Database>,
    version: u32,
    when: &str,
) -> Result<(), String> {
    let mut expected = BTreeMap::new();
    for (id, rec) in &w.records {
        let got = coll.get(&key![*id]);
        let want = match w.expect(rec, K, version) {
            Ok(values) => Dyn::<K>::new(values),
            Err(why) => {
                return Err(format!(
                    "{when}: the open was accepted, but record {id} ({rec:?}) has no correct \
                     reading: {why}; get returned {got:?}"
                ));
            }
        };
        match got {
            Ok(Some(d)) if d == want => {}
            other => {
                return Err(format!(
                    "{when}: record {id} (stored {rec:?}) misread by get: expected {want:?}, \
                     got {other:?}"
                ));
            }
        }
        expected.insert(*id, want);
    }
    let page = coll
        .list(ListOptions::default())
        .map_err(|e| format!("{when}: list failed after an accepted open: {e:?}"))?;
    let listed: BTreeMap<u64, Dyn<K>> = page.items.into_iter().map(|(_, d)| (d.id(), d)).collect();
    if listed != expected {
        return Err(format!(
            "{when}: list misread: expected {expected:?}, got {listed:?}"
        ));
    }
    Ok(())
}

/// Opens schema `K` as `plan` says and checks it: refused with the store unchanged, or every
/// record read correctly, written, upserted and migrated.
fn run_step<const K: usize>(w: &mut World, plan: &Plan) -> Result<Outcome, String> {
    let current = schema(K);
    let version = plan.version;
    let migrations: Vec<(u32, usize)> = w
        .version_schema
        .iter()
        .filter(|(v, _)| **v < version)
        .map(|(v, j)| (*v, *j))
        .collect();
    let build = || {
        let mut b = Collection::builder(COLLECTION, |r: &Dyn<K>| key![r.id()]);
        if version > 0 {
            b = b.version(version);
        }
        for (old, new) in &plan.renames {
            b = b.renamed(old, new);
        }
        for &(from, old) in &migrations {
            b = add_migration::<K>(b, from, old, &current);
        }
        b
    };
    let migrations_ok = w.records.values().all(|r| {
        !matches!(
            w.expect(r, K, version),
            Err(NoExpectation::MigrationFails(_))
        )
    });
    let predicted = (plan.safe || version != w.cur_version || plan.step == 0) && migrations_ok;
    let what = format!(
        "step {} ({}): schema {} at version {version}, renames {:?}, migrations from \
         (version, schema) {migrations:?}",
        plan.step,
        plan.kind,
        show_schema(&current),
        plan.renames
    );
    let before = dump(&w.db);
    let coll = match build().open(w.db.clone()) {
        Ok(c) => c,
        Err(e) => {
            let Some(v) = variant(&e) else {
                return Err(format!(
                    "{what}: open failed with an unexpected error {e:?}"
                ));
            };
            if dump(&w.db) != before {
                return Err(format!("{what}: the refused open ({e}) changed the store"));
            }
            w.history.push(format!("{what}: refused ({v}): {e}"));
            return Ok(Outcome {
                kind: plan.kind.clone(),
                bumped: version != w.cur_version,
                predicted,
                refused: Some((v, e.to_string())),
            });
        }
    };
    w.history.push(format!("{what}: opened"));
    let when = format!("{what}, after open");
    check_all(w, &coll, version, &when)?;
    let bumped = version != w.cur_version;
    w.cur = K;
    w.cur_version = version;
    w.version_schema.insert(version, K);
    let mut inserted = Vec::new();
    for _ in 0..plan.new_records {
        let id = w.fresh_id();
        let values = w.values(&current, id);
        coll.insert(&Dyn::<K>::new(values.clone()))
            .map_err(|e| format!("{what}: insert of record {id} failed: {e:?}"))?;
        w.records.insert(
            id,
            Rec {
                version,
                written: K,
                values,
            },
        );
        inserted.push(id);
    }
    w.history.push(format!("  inserted {inserted:?}"));
    if plan.upsert {
        let ids: Vec<u64> = w.records.keys().copied().collect();
        let id = ids[w.rng.usize(..ids.len())];
        let old = w
            .expect(&w.records[&id], K, version)
            .map_err(|e| format!("{what}: no expectation for record {id}: {e}"))?;
        let values = w.values(&current, id);
        let got = coll.upsert(&Dyn::<K>::new(values.clone()));
        let want = Dyn::<K>::new(old);
        match got {
            Ok(Some(d)) if d == want => {}
            other => {
                return Err(format!(
                    "{what}: upsert of record {id} returned {other:?}, expected the old record \
                     {want:?}"
                ));
            }
        }
        w.records.insert(
            id,
            Rec {
                version,
                written: K,
                values,
            },
        );
        w.history.push(format!("  upserted {id}"));
    }
    check_all(w, &coll, version, &format!("{what}, after writes"))?;
    if plan.migrate_records {
        let older: Vec<u64> = w
            .records
            .iter()
            .filter(|(_, r)| r.version != version)
            .map(|(id, _)| *id)
            .collect();
        let report = coll
            .migrate_records(2, |_| {})
            .map_err(|e| format!("{what}: migrate_records failed: {e:?}"))?;
        if report.migrated != older.len() as u64 {
            return Err(format!(
                "{what}: migrate_records rewrote {} records, expected {} ({older:?}): \
                 {report:?}",
                report.migrated,
                older.len()
            ));
        }
        for id in &older {
            let values = w
                .expect(&w.records[id], K, version)
                .map_err(|e| format!("{what}: no expectation for record {id}: {e}"))?;
            w.records.insert(
                *id,
                Rec {
                    version,
                    written: K,
                    values,
                },
            );
        }
        w.history.push(format!("  migrated {older:?}"));
        check_all(w, &coll, version, &format!("{what}, after migrate_records"))?;
    }
    if plan.reopen {
        drop(coll);
        let again = build()
            .open(w.db.clone())
            .map_err(|e| format!("{what}: the same definition does not open again: {e:?}"))?;
        w.history.push("  reopened".to_owned());
        check_all(w, &again, version, &format!("{what}, reopened"))?;
    }
    Ok(Outcome {
        kind: plan.kind.clone(),
        bumped,
        predicted,
        refused: None,
    })
}

fn dispatch(k: usize, w: &mut World, plan: &Plan) -> Result<Outcome, String> {
    match k {
        0 => run_step::<0>(w, plan),
        1 => run_step::<1>(w, plan),
        2 => run_step::<2>(w, plan),
        3 => run_step::<3>(w, plan),
        4 => run_step::<4>(w, plan),
        _ => Err(format!("step {k} is past STEPS_MAX")),
    }
}

/// Runs a case; `Err` says what was misread (or what else broke the promise), with the
/// case's history.
fn run_case(case: &Case) -> Result<Vec<Outcome>, String> {
    assert!(case.steps.len() <= STEPS_MAX);
    SCHEMAS.with(|t| t.borrow_mut().clear());
    let mut next_id = 1;
    let mut s0 = vec![FieldDef {
        id: 0,
        name: "id",
        ty: Ty::U64,
        default: false,
    }];
    for &(ty, default) in &case.initial {
        s0.push(FieldDef {
            id: next_id,
            name: intern(format!("f{next_id}")),
            ty,
            default,
        });
        next_id += 1;
    }
    set_schema(0, &s0);
    let mut w = World {
        db: Database::in_memory(),
        cur: 0,
        cur_version: 0,
        version_schema: BTreeMap::new(),
        records: BTreeMap::new(),
        ids: case.ids.clone(),
        used: BTreeSet::new(),
        rng: fastrand::Rng::with_seed(case.seed),
        numeric_strings: case.seed.is_multiple_of(2),
        history: Vec::new(),
    };
    let fail = |w: &World, e: String| format!("{e}\nhistory:\n{}", w.history.join("\n"));
    let first = dispatch(
        0,
        &mut w,
        &Plan {
            step: 0,
            version: 0,
            renames: Vec::new(),
            new_records: case.initial_records,
            upsert: false,
            migrate_records: false,
            reopen: false,
            kind: "initial".into(),
            safe: true,
        },
    )
    .map_err(|e| fail(&w, e))?;
    if let Some(why) = first.refused {
        return Err(fail(
            &w,
            format!("the first open on an empty store failed: {why:?}"),
        ));
    }
    let mut outcomes = Vec::new();
    for (i, st) in case.steps.iter().enumerate() {
        let k = i + 1;
        let base = schema(w.cur);
        let applied = apply(&base, &st.op, k, &mut next_id);
        set_schema(k, &applied.schema);
        w.history.push(format!(
            "step {k}: from {} {}",
            show_schema(&base),
            applied.text
        ));
        let version = if st.bump {
            u32::try_from(k).unwrap()
        } else {
            w.cur_version
        };
        let plan = Plan {
            step: k,
            version,
            renames: applied.renames,
            new_records: st.new_records,
            upsert: st.upsert,
            migrate_records: st.migrate_records,
            reopen: st.reopen,
            kind: applied.kind,
            safe: applied.safe,
        };
        outcomes.push(dispatch(k, &mut w, &plan).map_err(|e| fail(&w, e))?);
    }
    Ok(outcomes)
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[derive(Default)]
struct Counts {
    accepted: usize,
    refused: usize,
    /// Refused although the oracle predicted it opens (allowed, reported).
    refused_unpredicted: usize,
    /// Opened (and read correctly) although the layer does not promise it.
    accepted_unpredicted: usize,
    refusals_by_variant: BTreeMap<&'static str, usize>,
}

#[test]
fn no_struct_evolution_reads_wrong_values() {
    let mut config = proptest_config(48, "evolution_props.txt");
    if let Some(cases) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.cases = cases;
    }
    config.source_file = Some(file!());
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    let counts: RefCell<BTreeMap<String, Counts>> = RefCell::new(BTreeMap::new());
    let started = Instant::now();
    let result = runner.run(&case_strategy(), |case| {
        let outcomes =
            run_case(&case).map_err(|e| TestCaseError::fail(format!("{e}\ncase: {case:#?}")))?;
        let mut counts = counts.borrow_mut();
        for o in outcomes {
            let label = format!("{}{}", o.kind, if o.bumped { " + version" } else { "" });
            let c = counts.entry(label).or_default();
            match o.refused {
                None => {
                    c.accepted += 1;
                    c.accepted_unpredicted += usize::from(!o.predicted);
                }
                Some((v, _)) => {
                    c.refused += 1;
                    c.refused_unpredicted += usize::from(o.predicted);
                    *c.refusals_by_variant.entry(v).or_default() += 1;
                }
            }
        }
        Ok(())
    });
    eprintln!(
        "{cases} cases in {:.1?}; per evolution (accepted / refused; refused though predicted \
         to open; opened though not promised; refusals by error):",
        started.elapsed()
    );
    for (label, c) in counts.borrow().iter() {
        eprintln!(
            "  {label:36} {:3} / {:3}   {:3}   {:3}   {:?}",
            c.accepted,
            c.refused,
            c.refused_unpredicted,
            c.accepted_unpredicted,
            c.refusals_by_variant
        );
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, case)) => {
            panic!(
                "a struct evolution broke the promise: {reason}\nminimal failing case: {case:#?}"
            )
        }
        Err(e) => panic!("{e}"),
    }
}

/// A case of one step on a store of four records, each written and read through the oracle.
fn one_step(initial: &[(Ty, bool)], op: Op, bump: bool) -> Outcome {
    let case = Case {
        initial: initial.to_vec(),
        initial_records: 4,
        steps: vec![Step {
            op: op.clone(),
            bump,
            new_records: 2,
            upsert: true,
            migrate_records: true,
            reopen: true,
        }],
        ids: vec![231, 359, 7, 100_000],
        seed: 3,
    };
    let mut outcomes = run_case(&case).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    outcomes.pop().unwrap()
}

#[test]
fn safe_evolutions_open_and_unsafe_ones_are_refused() {
    use Ty::{Bool, Str, U32, U64};
    let two_strings = [(Str, false), (Str, false)];
    let mixed = [(U32, false), (Str, false), (Bool, false), (U64, false)];
    let safe = [
        (
            &mixed[..],
            Op::AddEnd {
                ty: Str,
                default: true,
            },
        ),
        (
            &mixed[..],
            Op::AddEnd {
                ty: U64,
                default: true,
            },
        ),
        (
            &mixed[..],
            Op::Rename {
                at: 1,
                declared: true,
            },
        ),
        (
            &mixed[..],
            Op::Rename {
                at: 3,
                declared: true,
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 0,
                to: Some(U64),
            },
        ),
    ];
    for (initial, op) in safe {
        let o = one_step(initial, op.clone(), false);
        assert_eq!(
            o.refused, None,
            "{op:?} on {initial:?} should open without a version"
        );
        assert!(o.predicted);
    }
    let unsafe_ops = [
        (&two_strings[..], Op::Swap { a: 0, b: 1 }),
        (&mixed[..], Op::Swap { a: 0, b: 3 }),
        (
            &mixed[..],
            Op::Rename {
                at: 1,
                declared: false,
            },
        ),
        (
            &mixed[..],
            Op::Rename {
                at: 3,
                declared: false,
            },
        ),
        (
            &mixed[..],
            Op::AddEnd {
                ty: Str,
                default: false,
            },
        ),
        (
            &mixed[..],
            Op::AddEnd {
                ty: Bool,
                default: false,
            },
        ),
        (&mixed[..], Op::Remove { at: 1 }),
        (&mixed[..], Op::Remove { at: 3 }),
        (
            &two_strings[..],
            Op::AddMiddle {
                at: 1,
                ty: Some(Str),
                default: true,
            },
        ),
        (
            &mixed[..],
            Op::AddMiddle {
                at: 0,
                ty: Some(U32),
                default: false,
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 3,
                to: Some(Str),
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 1,
                to: Some(U64),
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 2,
                to: Some(U32),
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 3,
                to: Some(U32),
            },
        ),
        (
            &mixed[..],
            Op::Retype {
                at: 0,
                to: Some(Bool),
            },
        ),
    ];
    for (initial, op) in unsafe_ops {
        let o = one_step(initial, op.clone(), false);
        match &o.refused {
            Some(("Schema", _)) => {}
            other => panic!("{op:?} on {initial:?} should be refused at open, got {other:?}"),
        }
        // With a new version and a migration, the same change opens and reads correctly, unless
        // the migration fails on a stored record (a number that does not fit a `u32`): then
        // the open's dry run refuses it.
        let o = one_step(initial, op.clone(), true);
        match (&o.refused, o.predicted) {
            (None, true) | (Some(("Incompatible", _)), false) => {}
            other => panic!("{op:?} on {initial:?} with a new version: {other:?}"),
        }
    }
}

#[test]
fn a_chain_of_evolutions_reads_every_earlier_version() {
    use Ty::{Bool, Str, U32};
    let case = Case {
        initial: vec![(U32, false), (Str, false), (Bool, true)],
        initial_records: 5,
        steps: vec![
            // Version 0 grows a defaulted field, version 2 swaps two fields with a migration
            // and then renames one in place, and version 4 removes one.
            Step {
                op: Op::AddEnd {
                    ty: Str,
                    default: true,
                },
                bump: false,
                new_records: 2,
                upsert: true,
                migrate_records: false,
                reopen: true,
            },
            Step {
                op: Op::Swap { a: 0, b: 1 },
                bump: true,
                new_records: 2,
                upsert: false,
                migrate_records: false,
                reopen: true,
            },
            Step {
                op: Op::Rename {
                    at: 0,
                    declared: true,
                },
                bump: false,
                new_records: 2,
                upsert: true,
                migrate_records: false,
                reopen: true,
            },
            Step {
                op: Op::Remove { at: 2 },
                bump: true,
                new_records: 3,
                upsert: true,
                migrate_records: true,
                reopen: true,
            },
        ],
        ids: vec![
            231, 359, 487, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ],
        seed: 11,
    };
    let outcomes = run_case(&case).unwrap_or_else(|e| panic!("{e}"));
    for o in &outcomes {
        assert_eq!(o.refused, None, "{o:?}");
    }
}
