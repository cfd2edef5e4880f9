//! What a collection knows about its records' shapes: the serde shape of each declared version
//! of the record struct (traced with `serde-reflection`), stored with the collection, compared
//! with the struct at `open`, and the collection's record layout (plain postcard, converting to
//! envelopes, enveloped).
//!
//! Postcard writes no field names or tags, so the bytes of a record only mean something
//! against the shape that wrote them. The layer keeps that shape in `[coll, "meta",
//! "schema"]` and refuses, at `open`, a struct whose fields no longer line up with it:
//! a reorder, a removal, a type change, a field inserted before the end, a trailing field
//! without a default. It says which fields and what to declare.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_reflection::{
    ContainerFormat, Format, Named, Registry, Samples, Tracer, TracerConfig, VariantFormat,
};
use tuplekv_engine::Versionstamp;

/// The shape of a record struct: the format of its root and of every container it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Shape {
    pub(crate) root: Format,
    pub(crate) registry: Registry,
}

fn tracer() -> Tracer {
    Tracer::new(
        TracerConfig::default()
            .record_samples_for_structs(true)
            .record_samples_for_newtype_structs(true)
            .record_samples_for_tuple_structs(true),
    )
}

fn finish<T: DeserializeOwned>(mut tracer: Tracer, samples: &Samples) -> Result<Shape, String> {
    let (root, _) = tracer.trace_type::<T>(samples).map_err(|e| e.to_string())?;
    let registry = tracer.registry().map_err(|e| e.to_string())?;
    Ok(Shape { root, registry })
}

/// A traced shape kept by a handle, as JSON text: [`Shape`] itself holds `Rc`s (the tracer's
/// variables), so it is not `Send`.
pub(crate) type ShapeText = Result<String, String>;

/// `shape` as text.
pub(crate) fn to_text(shape: Result<Shape, String>) -> ShapeText {
    shape.and_then(|s| serde_json::to_string(&s).map_err(|e| e.to_string()))
}

/// The shape back from its text.
pub(crate) fn from_text(text: &ShapeText) -> Result<Shape, String> {
    let text = text.as_ref().map_err(Clone::clone)?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Traces `T`'s serde shape: field names, order and types, through its `Deserialize`
/// implementation fed made-up values.
pub(crate) fn trace<T: DeserializeOwned>() -> Result<Shape, String> {
    finish::<T>(tracer(), &Samples::new())
}

/// [`trace`] with a real record as a sample, for types whose deserialisation validates its
/// input (a date parsed from a string, a checked newtype), which made-up values would fail.
pub(crate) fn trace_sample<T: DeserializeOwned + Serialize>(sample: &T) -> Result<Shape, String> {
    let mut tracer = tracer();
    let mut samples = Samples::new();
    tracer
        .trace_value(&mut samples, sample)
        .map_err(|e| e.to_string())?;
    finish::<T>(tracer, &samples)
}

/// How a struct's shape relates to the stored shape of its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Field for field the same bytes (names may differ by declared renames, integers may be
    /// wider).
    Same,
    /// The same, plus these fields at the end of the top-level struct. Stored records lack
    /// them; they must take `#[serde(default)]`.
    Extended(Vec<String>),
}

/// Renames the user declared: `(old name, new name)`, for fields and enum variants.
pub(crate) type Renames = [(String, String)];

/// Compares the stored shape (what records were written with) with `current` (what will read
/// them). `Err` lists every problem found, each naming the field and what to declare.
pub(crate) fn compare(
    stored: &Shape,
    current: &Shape,
    renames: &Renames,
) -> Result<Fit, Vec<String>> {
    let mut cmp = Compare {
        stored,
        current,
        renames,
        problems: Vec::new(),
        seen: BTreeSet::new(),
        added: Vec::new(),
    };
    cmp.format(&stored.root, &current.root, "", true);
    if !cmp.problems.is_empty() {
        return Err(cmp.problems);
    }
    Ok(if cmp.added.is_empty() {
        Fit::Same
    } else {
        Fit::Extended(cmp.added)
    })
}

struct Compare<'a> {
    stored: &'a Shape,
    current: &'a Shape,
    renames: &'a Renames,
    problems: Vec<String>,
    /// Container pairs compared already (recursive types end here).
    seen: BTreeSet<(String, String)>,
    /// Fields added at the end of the top-level struct.
    added: Vec<String>,
}

/// A varint integer's rank: a wider one of the same sign reads every value of a narrower one
/// byte for byte (postcard writes `u16`..`u128` and `i16`..`i128` as the same varints).
fn varint_rank(f: &Format) -> Option<(bool, u8)> {
    Some(match f {
        Format::U16 => (false, 1),
        Format::U32 => (false, 2),
        Format::U64 => (false, 3),
        Format::U128 => (false, 4),
        Format::I16 => (true, 1),
        Format::I32 => (true, 2),
        Format::I64 => (true, 3),
        Format::I128 => (true, 4),
        _ => return None,
    })
}

/// A short name of a format, for messages.
fn describe(f: &Format) -> String {
    match f {
        Format::TypeName(n) => n.clone(),
        Format::Option(inner) => format!("Option<{}>", describe(inner)),
        Format::Seq(inner) => format!("Vec<{}>", describe(inner)),
        Format::Map { key, value } => format!("Map<{}, {}>", describe(key), describe(value)),
        Format::Tuple(parts) => format!(
            "({})",
            parts.iter().map(describe).collect::<Vec<_>>().join(", ")
        ),
        Format::TupleArray { content, size } => format!("[{}; {size}]", describe(content)),
        Format::Str => "String".into(),
        Format::Bytes => "bytes".into(),
        Format::Unit => "()".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn at(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

impl Compare<'_> {
    fn renamed(&self, old: &str, new: &str) -> bool {
        self.renames.iter().any(|(o, n)| o == old && n == new)
    }

    fn problem(&mut self, path: &str, what: String) {
        let place = if path.is_empty() {
            "the record".to_owned()
        } else {
            format!("`{path}`")
        };
        self.problems.push(format!("{place}: {what}"));
    }

    fn format(&mut self, s: &Format, c: &Format, path: &str, top: bool) {
        match (s, c) {
            (Format::TypeName(a), Format::TypeName(b)) => {
                if !self.seen.insert((a.clone(), b.clone())) {
                    return;
                }
                let (Some(sa), Some(cb)) =
                    (self.stored.registry.get(a), self.current.registry.get(b))
                else {
                    self.problem(path, format!("the shape of `{a}` or `{b}` is unknown"));
                    return;
                };
                self.container(sa, cb, path, top);
            }
            (Format::Option(a), Format::Option(b)) | (Format::Seq(a), Format::Seq(b)) => {
                self.format(a, b, path, false)
            }
            (Format::Map { key: ka, value: va }, Format::Map { key: kb, value: vb }) => {
                self.format(ka, kb, &at(path, "<key>"), false);
                self.format(va, vb, &at(path, "<value>"), false);
            }
            (Format::Tuple(a), Format::Tuple(b)) if a.len() == b.len() => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    self.format(x, y, &at(path, &i.to_string()), false);
                }
            }
            (
                Format::TupleArray {
                    content: a,
                    size: n,
                },
                Format::TupleArray {
                    content: b,
                    size: m,
                },
            ) if n == m => self.format(a, b, path, false),
            (a, b) if a == b => {}
            (a, b) => match (varint_rank(a), varint_rank(b)) {
                (Some((sa, ra)), Some((sb, rb))) if sa == sb && ra <= rb => {}
                _ => self.problem(
                    path,
                    format!(
                        "its type changed from {} to {}; declare a new `.version(..)` with a \
                         `.migrate(..)` that converts it",
                        describe(a),
                        describe(b)
                    ),
                ),
            },
        }
    }

    fn container(&mut self, s: &ContainerFormat, c: &ContainerFormat, path: &str, top: bool) {
        match (s, c) {
            (ContainerFormat::UnitStruct, ContainerFormat::UnitStruct) => {}
            (ContainerFormat::NewTypeStruct(a), ContainerFormat::NewTypeStruct(b)) => {
                self.format(a, b, path, false)
            }
            (ContainerFormat::TupleStruct(a), ContainerFormat::TupleStruct(b)) => {
                self.tuple(a, b, path)
            }
            (ContainerFormat::Struct(a), ContainerFormat::Struct(b)) => {
                self.fields(a, b, path, top)
            }
            (ContainerFormat::Enum(a), ContainerFormat::Enum(b)) => self.variants(a, b, path),
            _ => self.problem(
                path,
                "it changed kind (struct, tuple struct, enum); declare a new `.version(..)` \
                 with a `.migrate(..)`"
                    .into(),
            ),
        }
    }

    fn tuple(&mut self, a: &[Format], b: &[Format], path: &str) {
        if a.len() != b.len() {
            self.problem(
                path,
                format!(
                    "it had {} unnamed fields and has {}; declare a new `.version(..)` with a \
                     `.migrate(..)`",
                    a.len(),
                    b.len()
                ),
            );
            return;
        }
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            self.format(x, y, &at(path, &i.to_string()), false);
        }
    }

    fn fields(&mut self, s: &[Named<Format>], c: &[Named<Format>], path: &str, top: bool) {
        let declare = "declare a new `.version(..)` with a `.migrate(..)` from the old struct";
        for (i, (sf, cf)) in s.iter().zip(c).enumerate() {
            if sf.name != cf.name && !self.renamed(&sf.name, &cf.name) {
                let moved_from = s.iter().position(|f| f.name == cf.name);
                let moved_to = c.iter().position(|f| f.name == sf.name);
                let what = match (moved_from, moved_to) {
                    (Some(j), _) => format!(
                        "field `{}` moved from position {} to {} (postcard reads fields by \
                         position, so the values would land in the wrong fields); put it back \
                         or {declare}",
                        cf.name,
                        j + 1,
                        i + 1
                    ),
                    (None, Some(j)) => format!(
                        "field `{}` moved from position {} to {}; put it back or {declare}",
                        sf.name,
                        i + 1,
                        j + 1
                    ),
                    (None, None) => format!(
                        "field {} was `{}` and is `{}`: if it was renamed, declare \
                         `.renamed(\"{}\", \"{}\")`; if a field was inserted or removed, add \
                         new fields at the end with `#[serde(default)]` or {declare}",
                        i + 1,
                        sf.name,
                        cf.name,
                        sf.name,
                        cf.name
                    ),
                };
                self.problem(path, what);
                return;
            }
            self.format(&sf.value, &cf.value, &at(path, &cf.name), false);
        }
        if s.len() > c.len() {
            let gone: Vec<String> = s[c.len()..]
                .iter()
                .map(|f| format!("`{}`", f.name))
                .collect();
            self.problem(
                path,
                format!(
                    "field(s) {} are stored but not in the struct (removed, or this is an older \
                     build than one that added them): stored records would not read; {declare}",
                    gone.join(", ")
                ),
            );
        } else if c.len() > s.len() {
            let added: Vec<String> = c[s.len()..].iter().map(|f| at(path, &f.name)).collect();
            if top {
                self.added.extend(added);
            } else {
                self.problem(
                    path,
                    format!(
                        "field(s) {} were added inside a nested struct, where postcard cannot \
                         tell that a stored record lacks them; {declare}",
                        added
                            .iter()
                            .map(|a| format!("`{a}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
    }

    fn variants(
        &mut self,
        s: &BTreeMap<u32, Named<VariantFormat>>,
        c: &BTreeMap<u32, Named<VariantFormat>>,
        path: &str,
    ) {
        for (index, sv) in s {
            let Some(cv) = c.get(index) else {
                self.problem(
                    path,
                    format!(
                        "variant `{}` (number {index}) was removed; declare a new `.version(..)` \
                         with a `.migrate(..)`",
                        sv.name
                    ),
                );
                continue;
            };
            if sv.name != cv.name && !self.renamed(&sv.name, &cv.name) {
                let what = if s.values().any(|v| v.name == cv.name) {
                    format!(
                        "variant `{}` moved to number {index} (postcard stores a variant's \
                         number); keep variants in order, add new ones at the end",
                        cv.name
                    )
                } else {
                    format!(
                        "variant {index} was `{}` and is `{}`: if it was renamed, declare \
                         `.renamed(\"{}\", \"{}\")`; add new variants at the end",
                        sv.name, cv.name, sv.name, cv.name
                    )
                };
                self.problem(path, what);
                continue;
            }
            let p = at(path, &cv.name);
            match (&sv.value, &cv.value) {
                (VariantFormat::Unit, VariantFormat::Unit) => {}
                (VariantFormat::NewType(a), VariantFormat::NewType(b)) => {
                    self.format(a, b, &p, false)
                }
                (VariantFormat::Tuple(a), VariantFormat::Tuple(b)) => self.tuple(a, b, &p),
                (VariantFormat::Struct(a), VariantFormat::Struct(b)) => {
                    self.fields(a, b, &p, false)
                }
                _ => self.problem(
                    &p,
                    "the variant's content changed kind; declare a new `.version(..)` with a \
                     `.migrate(..)`"
                        .into(),
                ),
            }
        }
    }
}

/// The postcard bytes of a record of `shape` whose every field holds its simplest value
/// (zero, empty, `None`, the first variant): what an old record looks like to a reader that
/// only checks which fields it has. `None` if the shape recurses without an end in sight.
pub(crate) fn zero_record(shape: &Shape) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    zero(shape, &shape.root, &mut out, 0).then_some(out)
}

/// Deepest nesting [`zero_record`] follows.
const ZERO_DEPTH_MAX: usize = 32;

fn zero(shape: &Shape, f: &Format, out: &mut Vec<u8>, depth: usize) -> bool {
    if depth > ZERO_DEPTH_MAX {
        return false;
    }
    match f {
        Format::Variable(_) => false,
        Format::Unit => true,
        Format::F32 => {
            out.extend_from_slice(&[0; 4]);
            true
        }
        Format::F64 => {
            out.extend_from_slice(&[0; 8]);
            true
        }
        // A char is a string of one character in postcard.
        Format::Char => {
            out.extend_from_slice(&[1, b'a']);
            true
        }
        // Integers (raw or varint), bool, and the zero length of a string, bytes, a sequence
        // or a map, and `None`: all one zero byte.
        Format::Bool
        | Format::I8
        | Format::I16
        | Format::I32
        | Format::I64
        | Format::I128
        | Format::U8
        | Format::U16
        | Format::U32
        | Format::U64
        | Format::U128
        | Format::Str
        | Format::Bytes
        | Format::Option(_)
        | Format::Seq(_)
        | Format::Map { .. } => {
            out.push(0);
            true
        }
        Format::Tuple(parts) => parts.iter().all(|p| zero(shape, p, out, depth + 1)),
        Format::TupleArray { content, size } => {
            (0..*size).all(|_| zero(shape, content, out, depth + 1))
        }
        Format::TypeName(name) => match shape.registry.get(name) {
            None => false,
            Some(ContainerFormat::UnitStruct) => true,
            Some(ContainerFormat::NewTypeStruct(inner)) => zero(shape, inner, out, depth + 1),
            Some(ContainerFormat::TupleStruct(parts)) => {
                parts.iter().all(|p| zero(shape, p, out, depth + 1))
            }
            Some(ContainerFormat::Struct(fields)) => {
                fields.iter().all(|f| zero(shape, &f.value, out, depth + 1))
            }
            Some(ContainerFormat::Enum(variants)) => {
                // A unit variant ends a recursive enum soonest.
                let pick = variants
                    .iter()
                    .find(|(_, v)| matches!(v.value, VariantFormat::Unit))
                    .or_else(|| variants.iter().next());
                let Some((index, variant)) = pick else {
                    return false;
                };
                let Ok(out2) = postcard::to_extend(index, std::mem::take(out)) else {
                    return false;
                };
                *out = out2;
                match &variant.value {
                    VariantFormat::Unit => true,
                    VariantFormat::NewType(inner) => zero(shape, inner, out, depth + 1),
                    VariantFormat::Tuple(parts) => {
                        parts.iter().all(|p| zero(shape, p, out, depth + 1))
                    }
                    VariantFormat::Struct(fields) => {
                        fields.iter().all(|f| zero(shape, &f.value, out, depth + 1))
                    }
                    VariantFormat::Variable(_) => false,
                }
            }
        },
    }
}

/// How a collection's records are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Layout {
    /// Plain postcard, no envelopes: the collection has never been versioned.
    Plain,
    /// Becoming enveloped: records written before the conversion began (a versionstamp below
    /// the marker's) are plain, later ones are envelopes.
    Converting,
    /// Every record is an envelope.
    Enveloped,
}

/// What one declared version of the struct stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VersionShape {
    /// The shape its records were written with (the latest seen; a later build of the same
    /// version may add trailing defaulted fields). `None` for a JSON version whose struct
    /// does not trace (JSON reads fields by name).
    #[serde(default)]
    pub(crate) shape: Option<Shape>,
    /// Whether some of its records may be postcard (whose fields are read by position).
    pub(crate) postcard: bool,
}

/// The collection's schema, stored as JSON in `[coll, "meta", "schema"]`. Every write checks
/// that it has not changed since the handle read it, so no handle writes on a stale view of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Schema {
    /// How records are laid out.
    pub(crate) layout: Layout,
    /// Where the conversion to envelopes began: records with an older versionstamp were
    /// plain when it began (and have been rewritten if the layout is enveloped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) converted_at: Option<String>,
    /// The newest version declared; handles of older versions cannot write.
    pub(crate) current: u32,
    /// Versions whose records may still be stored.
    pub(crate) present: BTreeSet<u32>,
    /// Each declared version's shape.
    pub(crate) versions: BTreeMap<u32, VersionShape>,
}

impl Schema {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        // A schema is plain data (strings, numbers, maps): serialising it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Schema, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("the stored schema does not read: {e}"))
    }

    pub(crate) fn boundary(&self) -> Option<Versionstamp> {
        let hex = self.converted_at.as_deref()?;
        let bytes: [u8; 10] = hex::decode(hex).ok()?.try_into().ok()?;
        Some(Versionstamp::from_bytes(bytes))
    }
}

/// The text form of a versionstamp in the schema.
pub(crate) fn stamp_text(stamp: Versionstamp) -> String {
    hex::encode(stamp.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct A {
        id: u64,
        email: String,
        name: String,
    }
    #[derive(Serialize, Deserialize)]
    struct Swapped {
        id: u64,
        name: String,
        email: String,
    }
    #[derive(Serialize, Deserialize)]
    struct Wider {
        id: u128,
        email: String,
        name: String,
        #[serde(default)]
        extra: Vec<u8>,
    }

    #[test]
    fn a_swap_of_two_strings_is_refused_naming_the_field() {
        let err = compare(&trace::<A>().unwrap(), &trace::<Swapped>().unwrap(), &[]).unwrap_err();
        assert!(
            err[0].contains("`name` moved from position 3 to 2"),
            "{err:?}"
        );
    }

    #[test]
    fn a_wider_integer_and_a_trailing_field_fit() {
        let fit = compare(&trace::<A>().unwrap(), &trace::<Wider>().unwrap(), &[]).unwrap();
        assert_eq!(fit, Fit::Extended(vec!["extra".into()]));
        // The other way round is refused: narrower, and a field is missing.
        assert!(compare(&trace::<Wider>().unwrap(), &trace::<A>().unwrap(), &[]).is_err());
    }

    #[test]
    fn zero_records_decode_as_their_struct() {
        let bytes = zero_record(&trace::<A>().unwrap()).unwrap();
        let a: A = postcard::from_bytes(&bytes).unwrap();
        assert_eq!((a.id, a.email.as_str()), (0, ""));
    }

    #[test]
    fn a_schema_round_trips_through_its_bytes() {
        let schema = Schema {
            layout: Layout::Converting,
            converted_at: Some(stamp_text(Versionstamp::from_version(77))),
            current: 2,
            present: [0, 2].into(),
            versions: [(
                2,
                VersionShape {
                    shape: Some(trace::<Wider>().unwrap()),
                    postcard: true,
                },
            )]
            .into(),
        };
        let back = Schema::from_bytes(&schema.to_bytes()).unwrap();
        assert_eq!(back, schema);
        assert_eq!(back.boundary(), Some(Versionstamp::from_version(77)));
    }
}
