//! JavaScript values as Deno KV stores them: V8's `ValueSerializer` format, without V8.
//!
//! - [`decode`] reads the bytes Deno (format version 16, header `FF 10`) and Node's
//!   `v8.serialize` (version 15, `FF 0F`, typed arrays as Node's host objects) write, into a
//!   [`Value`].
//! - [`encode`] writes a [`Value`] as Deno 2.9 writes the same JavaScript value: the same
//!   header, and the same tag V8 picks (a Smi or a double, a one-byte or a two-byte string with
//!   its padding, the property counts after objects and arrays, packed arrays as dense and
//!   holey ones as sparse, a typed array as its buffer then a view).
//! - [`Value`]'s `Display` prints a JavaScript literal (`{ name: "Ada", at: new
//!   Date("1970-01-01T00:00:00.000Z") }`) and [`parse`] reads that grammar back:
//!   `parse(&v.to_string()) == Ok(v)`. [`parse_json`] reads JSON text as `JSON.parse` would.
//!
//! Two additions to JavaScript make every value printable: an object that is referenced more
//! than once (a shared or cyclic reference, V8's back-references) is printed once with an
//! anchor, `&1 { self: *1 }`, and later occurrences as the alias `*1`, as YAML writes them.
//!
//! Everything is bounded: input sizes ([`INPUT_MAX`]), nesting ([`DEPTH_MAX`]) and bigints
//! ([`BIGINT_BYTES_MAX`]); past a bound the functions return an error, never panic.

mod bigint;
mod decode;
mod encode;
mod number;
mod parse;
mod print;
mod tags;
mod time;

pub use bigint::BigInt;
pub use decode::{DecodeError, decode};
pub use encode::{EncodeError, encode};
pub use parse::{ParseError, parse, parse_json};

/// The format version [`encode`] writes: what Deno 2.9.6 (V8 15.0) writes.
pub const FORMAT_VERSION: u8 = 16;
/// The oldest format version [`decode`] reads (array buffer views carry flags from 14 on;
/// 13 has the same layout without them).
pub const FORMAT_VERSION_READ_MIN: u8 = 13;
/// The newest format version [`decode`] reads; a newer one may lay values out differently.
pub const FORMAT_VERSION_READ_MAX: u8 = 16;
/// The longest input [`decode`] reads, in bytes, and [`parse`] reads, in bytes of text. Deno
/// KV values are at most 64 KiB; a literal of one (a typed array, say) is a few times that.
pub const INPUT_MAX: usize = 4 << 20;
/// How deeply values may nest (an array in an object in a map…): deeper input is refused by
/// [`decode`], [`parse`] and [`encode`] alike, so none of them can run out of stack.
pub const DEPTH_MAX: usize = 128;
/// The largest bigint magnitude, in bytes, that [`decode`], [`parse`] and [`encode`] accept
/// (converting a bigint to decimal takes time quadratic in its size).
pub const BIGINT_BYTES_MAX: usize = 8192;

/// A JavaScript number, compared by its bits, so `NaN == NaN` and `-0 != 0` as values go.
#[derive(Debug, Clone, Copy)]
pub struct Number(pub f64);

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

/// A JavaScript string: UTF-16 code units, which may hold lone surrogates as JavaScript
/// strings may.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsString(pub Vec<u16>);

impl JsString {
    /// Its code units.
    pub fn units(&self) -> &[u16] {
        &self.0
    }

    /// Whether every unit is at most U+00FF, so that V8 stores it as a one-byte string.
    pub fn is_one_byte(&self) -> bool {
        self.0.iter().all(|&u| u <= 0xff)
    }

    /// The text, with any lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf16_lossy(&self.0)
    }
}

impl From<&str> for JsString {
    fn from(s: &str) -> Self {
        JsString(s.encode_utf16().collect())
    }
}

/// The key of an object property: an array index (`0 ..= 2^32 - 2`, which JavaScript orders
/// first, ascending) or any other name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropKey {
    /// An integer index, written `1:`.
    Index(u32),
    /// A string name, written `name:` or `"two words":`.
    Name(JsString),
}

/// The largest array index: `2^32 - 2`.
pub const ARRAY_INDEX_MAX: u32 = u32::MAX - 1;

/// The kind of a typed array or `DataView`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each variant is the JavaScript class of its name"
)]
pub enum ViewKind {
    Int8Array,
    Uint8Array,
    Uint8ClampedArray,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
    BigInt64Array,
    BigUint64Array,
    DataView,
}

impl ViewKind {
    /// Every kind.
    pub const ALL: [ViewKind; 12] = [
        ViewKind::Int8Array,
        ViewKind::Uint8Array,
        ViewKind::Uint8ClampedArray,
        ViewKind::Int16Array,
        ViewKind::Uint16Array,
        ViewKind::Int32Array,
        ViewKind::Uint32Array,
        ViewKind::Float32Array,
        ViewKind::Float64Array,
        ViewKind::BigInt64Array,
        ViewKind::BigUint64Array,
        ViewKind::DataView,
    ];

    /// The JavaScript class name.
    pub fn name(self) -> &'static str {
        match self {
            ViewKind::Int8Array => "Int8Array",
            ViewKind::Uint8Array => "Uint8Array",
            ViewKind::Uint8ClampedArray => "Uint8ClampedArray",
            ViewKind::Int16Array => "Int16Array",
            ViewKind::Uint16Array => "Uint16Array",
            ViewKind::Int32Array => "Int32Array",
            ViewKind::Uint32Array => "Uint32Array",
            ViewKind::Float32Array => "Float32Array",
            ViewKind::Float64Array => "Float64Array",
            ViewKind::BigInt64Array => "BigInt64Array",
            ViewKind::BigUint64Array => "BigUint64Array",
            ViewKind::DataView => "DataView",
        }
    }

    /// Bytes per element (1 for a `DataView`).
    pub fn element_size(self) -> usize {
        match self {
            ViewKind::Int8Array
            | ViewKind::Uint8Array
            | ViewKind::Uint8ClampedArray
            | ViewKind::DataView => 1,
            ViewKind::Int16Array | ViewKind::Uint16Array => 2,
            ViewKind::Int32Array | ViewKind::Uint32Array | ViewKind::Float32Array => 4,
            ViewKind::Float64Array | ViewKind::BigInt64Array | ViewKind::BigUint64Array => 8,
        }
    }

    /// V8's sub-tag for the view.
    pub(crate) fn subtag(self) -> u8 {
        match self {
            ViewKind::Int8Array => b'b',
            ViewKind::Uint8Array => b'B',
            ViewKind::Uint8ClampedArray => b'C',
            ViewKind::Int16Array => b'w',
            ViewKind::Uint16Array => b'W',
            ViewKind::Int32Array => b'd',
            ViewKind::Uint32Array => b'D',
            ViewKind::Float32Array => b'f',
            ViewKind::Float64Array => b'F',
            ViewKind::BigInt64Array => b'q',
            ViewKind::BigUint64Array => b'Q',
            ViewKind::DataView => b'?',
        }
    }

    pub(crate) fn from_subtag(tag: u8) -> Option<ViewKind> {
        ViewKind::ALL.into_iter().find(|k| k.subtag() == tag)
    }

    /// The kind Node's `v8.serialize` numbers `index` in its host objects (10 is Node's
    /// `Buffer`, a `Uint8Array`).
    pub(crate) fn from_node_index(index: u64) -> Option<ViewKind> {
        Some(match index {
            0 => ViewKind::Int8Array,
            1 | 10 => ViewKind::Uint8Array,
            2 => ViewKind::Uint8ClampedArray,
            3 => ViewKind::Int16Array,
            4 => ViewKind::Uint16Array,
            5 => ViewKind::Int32Array,
            6 => ViewKind::Uint32Array,
            7 => ViewKind::Float32Array,
            8 => ViewKind::Float64Array,
            9 => ViewKind::DataView,
            11 => ViewKind::BigInt64Array,
            12 => ViewKind::BigUint64Array,
            _ => return None,
        })
    }
}

/// A JavaScript value, as V8 serialises it.
///
/// Objects, arrays, maps and sets keep their entries in JavaScript's order. [`decode`] and
/// [`parse`] give objects their canonical property order (indices ascending, then names in
/// insertion order, each key once) and number anchors `1, 2, …` in the order they appear,
/// keeping only those some alias names; values built by hand should do the same to compare
/// equal to decoded ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `undefined`.
    Undefined,
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A bigint.
    BigInt(BigInt),
    /// A string.
    String(JsString),
    /// A primitive wrapper object: `new Number(1)`, `new String("a")`, `new Boolean(true)`,
    /// `Object(1n)`; holds a [`Value::Number`], [`Value::String`], [`Value::Bool`] or
    /// [`Value::BigInt`].
    Boxed(Box<Value>),
    /// A plain object's own enumerable properties.
    Object(Vec<(PropKey, Value)>),
    /// A packed array (every index `0..len` present), written `[1, 2]`, and its other
    /// (non-index) properties.
    Array(Vec<Value>, Vec<(PropKey, Value)>),
    /// A holey or sparse array: its length and its properties, indices and names alike.
    SparseArray(u32, Vec<(PropKey, Value)>),
    /// A `Date`, by its time value in milliseconds since the epoch (`NaN` for an invalid date).
    Date(Number),
    /// A `RegExp`: its `source` and its flags (V8's bits: see `print.rs`).
    RegExp(JsString, u32),
    /// A `Map`'s entries.
    Map(Vec<(Value, Value)>),
    /// A `Set`'s values.
    Set(Vec<Value>),
    /// An `ArrayBuffer`'s bytes.
    ArrayBuffer(Vec<u8>),
    /// A typed array or `DataView` over `buffer` (an [`Value::ArrayBuffer`], possibly anchored,
    /// or an alias of one), from `byte_offset`, `byte_length` bytes long.
    View {
        /// Its class.
        kind: ViewKind,
        /// The buffer it views.
        buffer: Box<Value>,
        /// Where it starts in the buffer.
        byte_offset: usize,
        /// Its length in bytes.
        byte_length: usize,
    },
    /// An object that some [`Value::Alias`] refers to: `&n value`.
    Anchor(u32, Box<Value>),
    /// Another reference to the object anchored `n`: `*n`.
    Alias(u32),
}

impl Value {
    /// A string value.
    pub fn string(s: &str) -> Value {
        Value::String(JsString::from(s))
    }

    /// A number value.
    pub fn number(x: f64) -> Value {
        Value::Number(Number(x))
    }

    /// Whether V8 gives this value an object identity (something an alias can name).
    pub fn is_object(&self) -> bool {
        !matches!(
            self,
            Value::Undefined
                | Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::BigInt(_)
                | Value::String(_)
                | Value::Alias(_)
        )
    }
}

/// Puts properties in JavaScript's order: array indices ascending first, then names in the
/// order first seen; a key given twice keeps its first place and its last value.
pub(crate) fn canonical_props(props: Vec<(PropKey, Value)>) -> Vec<(PropKey, Value)> {
    let mut indices: Vec<(u32, Value)> = Vec::new();
    let mut names: Vec<(JsString, Value)> = Vec::new();
    for (key, value) in props {
        match key {
            PropKey::Index(i) => match indices.iter_mut().find(|(k, _)| *k == i) {
                Some(slot) => slot.1 = value,
                None => indices.push((i, value)),
            },
            PropKey::Name(n) => match names.iter_mut().find(|(k, _)| *k == n) {
                Some(slot) => slot.1 = value,
                None => names.push((n, value)),
            },
        }
    }
    indices.sort_by_key(|(i, _)| *i);
    indices
        .into_iter()
        .map(|(i, v)| (PropKey::Index(i), v))
        .chain(names.into_iter().map(|(n, v)| (PropKey::Name(n), v)))
        .collect()
}

/// Renumbers anchors `1, 2, …` in the order they appear, drops those no alias names, and
/// points every alias at its new number. Aliases to no anchor are left as they are (the
/// encoder refuses them).
pub(crate) fn normalize_anchors(value: &mut Value) {
    let mut named = std::collections::HashSet::new();
    collect_aliases(value, &mut named);
    let mut renumbered = std::collections::HashMap::new();
    renumber(value, &named, &mut renumbered);
}

fn children_mut(value: &mut Value) -> Vec<&mut Value> {
    match value {
        Value::Boxed(inner) | Value::Anchor(_, inner) => vec![inner.as_mut()],
        Value::View { buffer, .. } => vec![buffer.as_mut()],
        Value::Object(props) | Value::SparseArray(_, props) => {
            props.iter_mut().map(|(_, v)| v).collect()
        }
        Value::Array(items, props) => items
            .iter_mut()
            .chain(props.iter_mut().map(|(_, v)| v))
            .collect(),
        Value::Map(entries) => entries.iter_mut().flat_map(|(k, v)| [k, v]).collect(),
        Value::Set(items) => items.iter_mut().collect(),
        _ => Vec::new(),
    }
}

fn collect_aliases(value: &mut Value, named: &mut std::collections::HashSet<u32>) {
    if let Value::Alias(n) = value {
        named.insert(*n);
    }
    for child in children_mut(value) {
        collect_aliases(child, named);
    }
}

fn renumber(
    value: &mut Value,
    named: &std::collections::HashSet<u32>,
    renumbered: &mut std::collections::HashMap<u32, u32>,
) {
    match value {
        Value::Anchor(n, inner) if !named.contains(n) => {
            let inner = std::mem::replace(inner.as_mut(), Value::Undefined);
            *value = inner;
            renumber(value, named, renumbered);
            return;
        }
        Value::Anchor(n, _) => {
            let next = u32::try_from(renumbered.len() + 1).unwrap_or(u32::MAX);
            renumbered.insert(*n, next);
            *n = next;
        }
        Value::Alias(n) => {
            if let Some(&m) = renumbered.get(n) {
                *n = m;
            }
        }
        _ => {}
    }
    for child in children_mut(value) {
        renumber(child, named, renumbered);
    }
}

/// The body of the `decode_v8` fuzz target (and of the test that replays its corpus):
/// arbitrary bytes never panic [`decode`], and a value it accepts encodes, decodes back to
/// itself, and prints.
#[allow(clippy::expect_used, reason = "a fuzz target fails by panicking")]
pub fn fuzz_decode_target(data: &[u8]) {
    if let Ok(value) = decode(data) {
        let bytes = encode(&value).expect("a decoded value encodes");
        assert_eq!(decode(&bytes).as_ref(), Ok(&value), "re-decodes to itself");
        let _ = value.to_string();
    }
}
