//! How a record's bytes are laid out and read back across versions of its struct: the plain
//! postcard form (every collection's records before versioning), the versioned envelope, the
//! lenient postcard read that fills trailing `#[serde(default)]` fields, and user migrations.

use std::cell::Cell;
use std::rc::Rc;

use serde::Serialize;
use serde::de::{DeserializeOwned, DeserializeSeed, SeqAccess, Visitor};

/// The first byte of a versioned record: [`ENVELOPE_TAG`], a [`RecordFormat`] byte, the
/// struct's version as a postcard varint, then the body in that format.
///
/// A plain postcard record (one written before its collection was versioned) may start with
/// this byte too; the collection never tells them apart by their bytes: its stored layout
/// says which records are envelopes (see the crate's *Record evolution* section).
pub const ENVELOPE_TAG: u8 = 0xE7;

/// How a collection serialises its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFormat {
    /// [postcard](https://docs.rs/postcard): compact, no field names. A field added at the end
    /// of the struct with `#[serde(default)]` reads from older records; any other change
    /// (a field removed, reordered, added in the middle, a type changed) needs a migration
    /// ([`crate::CollectionBuilder::migrate`]) and may not be detected without one.
    #[default]
    Postcard,
    /// JSON through `serde_json`: self-describing, about twice the size of postcard and
    /// slower to read. Fields can be added anywhere (with `#[serde(default)]`), removed
    /// (unknown fields are skipped unless the struct denies them) and renamed
    /// (`#[serde(alias)]`) without a migration.
    Json,
}

impl RecordFormat {
    fn byte(self) -> u8 {
        match self {
            RecordFormat::Postcard => 0,
            RecordFormat::Json => 1,
        }
    }

    fn from_byte(b: u8) -> Option<RecordFormat> {
        match b {
            0 => Some(RecordFormat::Postcard),
            1 => Some(RecordFormat::Json),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            RecordFormat::Postcard => "postcard",
            RecordFormat::Json => "json",
        }
    }
}

/// A stored record, split into what its bytes say.
pub(crate) struct Stored<'b> {
    pub(crate) format: RecordFormat,
    /// 0 for a plain postcard record (no envelope).
    pub(crate) version: u32,
    pub(crate) body: &'b [u8],
}

/// Splits `bytes` into envelope and body. `tagged` says whether the collection writes
/// envelopes (its marker is set); without it every record is plain postcard.
pub(crate) fn split(bytes: &[u8], tagged: bool) -> Result<Stored<'_>, String> {
    match bytes.split_first() {
        Some((&ENVELOPE_TAG, rest)) if tagged => {
            let (&format, rest) = rest
                .split_first()
                .ok_or("the envelope ends before its format byte")?;
            let format = RecordFormat::from_byte(format)
                .ok_or_else(|| format!("the envelope names an unknown format {format}"))?;
            let (version, body) = postcard::take_from_bytes::<u32>(rest)
                .map_err(|e| format!("the envelope's version does not decode: {e}"))?;
            Ok(Stored {
                format,
                version,
                body,
            })
        }
        _ => Ok(Stored {
            format: RecordFormat::Postcard,
            version: 0,
            body: bytes,
        }),
    }
}

/// The envelope of version 0 in postcard around the plain record `plain`, byte for byte: what
/// the conversion to envelopes makes of a plain record that starts with [`ENVELOPE_TAG`].
pub(crate) fn wrap_plain(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain.len() + 3);
    out.extend_from_slice(&[ENVELOPE_TAG, RecordFormat::Postcard.byte(), 0]);
    out.extend_from_slice(plain);
    out
}

/// Serialises `record`: plain postcard when `envelope` is `None`, else the envelope of
/// `(format, version)` and the body.
pub(crate) fn encode<T: Serialize>(
    record: &T,
    envelope: Option<(RecordFormat, u32)>,
) -> Result<Vec<u8>, String> {
    let Some((format, version)) = envelope else {
        return postcard::to_stdvec(record).map_err(|e| e.to_string());
    };
    let mut out = Vec::with_capacity(64);
    out.push(ENVELOPE_TAG);
    out.push(format.byte());
    let out = postcard::to_extend(&version, out).map_err(|e| e.to_string())?;
    match format {
        RecordFormat::Postcard => postcard::to_extend(record, out).map_err(|e| e.to_string()),
        RecordFormat::Json => {
            let mut out = out;
            serde_json::to_writer(&mut out, record).map_err(|e| e.to_string())?;
            Ok(out)
        }
    }
}

/// Reads a body in `format` as `T`. Postcard is read strictly first (all bytes used); a record
/// that ends early is read again leniently, so trailing fields it lacks take their
/// `#[serde(default)]`.
pub(crate) fn decode_body<T: DeserializeOwned>(
    format: RecordFormat,
    body: &[u8],
) -> Result<T, String> {
    match format {
        RecordFormat::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        RecordFormat::Postcard => match postcard::take_from_bytes::<T>(body) {
            Ok((value, [])) => Ok(value),
            Ok((_, rest)) => Err(format!(
                "{} bytes are left over after the struct's last field (a field was removed or \
                 changed type)",
                rest.len()
            )),
            Err(postcard::Error::DeserializeUnexpectedEnd) => {
                lenient_postcard(body).map_err(|e| match e {
                    // serde's "missing field" reaches postcard as a custom error it does not
                    // keep the text of.
                    postcard::Error::DeserializeUnexpectedEnd | postcard::Error::SerdeDeCustom => {
                        "the record ends before a field this struct requires (a field was added \
                         without `#[serde(default)]`, or not at the end)"
                            .to_owned()
                    }
                    other => other.to_string(),
                })
            }
            Err(e) => Err(e.to_string()),
        },
    }
}

/// Which format's name a body was read with, for messages.
pub(crate) fn format_name(format: RecordFormat) -> &'static str {
    format.name()
}

/// Reads postcard `body` as `T`, ending the top-level struct where the bytes end: fields past
/// that point take their `#[serde(default)]` (serde's derive asks for them in order and uses
/// the default when the sequence has no more).
fn lenient_postcard<T: DeserializeOwned>(body: &[u8]) -> Result<T, postcard::Error> {
    let left = Rc::new(Cell::new(body.len()));
    let mut de = postcard::Deserializer::from_flavor(Counted {
        inner: postcard::de_flavors::Slice::new(body),
        left: Rc::clone(&left),
    });
    let value = T::deserialize(TopLevel { de: &mut de, left })?;
    Ok(value)
}

/// A postcard input that keeps count of the bytes not read yet, where [`Trailing`] can see it.
struct Counted<'de> {
    inner: postcard::de_flavors::Slice<'de>,
    left: Rc<Cell<usize>>,
}

impl<'de> postcard::de_flavors::Flavor<'de> for Counted<'de> {
    type Remainder = &'de [u8];
    type Source = &'de [u8];

    fn pop(&mut self) -> postcard::Result<u8> {
        let b = self.inner.pop()?;
        self.left.set(self.left.get().saturating_sub(1));
        Ok(b)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left.get())
    }

    fn try_take_n(&mut self, ct: usize) -> postcard::Result<&'de [u8]> {
        let taken = self.inner.try_take_n(ct)?;
        self.left.set(self.left.get().saturating_sub(ct));
        Ok(taken)
    }

    fn finalize(self) -> postcard::Result<&'de [u8]> {
        self.inner.finalize()
    }
}

type CountedDe<'de> = postcard::Deserializer<'de, Counted<'de>>;

/// The record's own struct: read field by field until the bytes end.
struct TopLevel<'a, 'de> {
    de: &'a mut CountedDe<'de>,
    left: Rc<Cell<usize>>,
}

impl<'de> serde::Deserializer<'de> for TopLevel<'_, 'de> {
    type Error = postcard::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        // Only a struct can end early; anything else keeps postcard's own error.
        Err(postcard::Error::DeserializeUnexpectedEnd)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_seq(Trailing {
            de: self.de,
            left: self.left,
            fields: fields.len(),
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The fields of the top-level struct; `None` (so: the field's default) once the bytes end.
struct Trailing<'a, 'de> {
    de: &'a mut CountedDe<'de>,
    left: Rc<Cell<usize>>,
    fields: usize,
}

impl<'de> SeqAccess<'de> for Trailing<'_, 'de> {
    type Error = postcard::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        if self.fields == 0 || self.left.get() == 0 {
            return Ok(None);
        }
        self.fields -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize)]
    struct V1 {
        id: u64,
        name: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct V2 {
        id: u64,
        name: String,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default)]
        score: u32,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct V2Required {
        id: u64,
        name: String,
        score: u32,
    }

    #[test]
    fn trailing_default_fields_fill_in() {
        let old = postcard::to_stdvec(&V1 {
            id: 7,
            name: "ada".into(),
        })
        .unwrap();
        let new: V2 = decode_body(RecordFormat::Postcard, &old).unwrap();
        assert_eq!(
            new,
            V2 {
                id: 7,
                name: "ada".into(),
                tags: vec![],
                score: 0
            }
        );
    }

    #[test]
    fn a_required_new_field_is_an_error() {
        let old = postcard::to_stdvec(&V1 {
            id: 7,
            name: "ada".into(),
        })
        .unwrap();
        let err = decode_body::<V2Required>(RecordFormat::Postcard, &old).unwrap_err();
        assert!(err.contains("a field this struct requires"), "{err}");
    }

    #[test]
    fn envelope_round_trips() {
        for format in [RecordFormat::Postcard, RecordFormat::Json] {
            let bytes = encode(
                &V1 {
                    id: 1,
                    name: "x".into(),
                },
                Some((format, 300)),
            )
            .unwrap();
            let stored = split(&bytes, true).unwrap();
            assert_eq!(stored.version, 300);
            assert_eq!(stored.format, format);
            let back: V2 = decode_body(stored.format, stored.body).unwrap();
            assert_eq!(back.id, 1);
        }
    }

    #[test]
    fn damaged_envelopes_are_errors() {
        assert!(split(&[ENVELOPE_TAG], true).is_err());
        assert!(split(&[ENVELOPE_TAG, 9, 0], true).is_err());
        assert!(split(&[ENVELOPE_TAG, 0, 0x80], true).is_err());
        // Untagged collections read the same bytes as plain postcard.
        assert_eq!(split(&[ENVELOPE_TAG, 9], false).unwrap().version, 0);
    }
}
