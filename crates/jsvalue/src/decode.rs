//! Reading V8's serialisation format: the bytes Deno (version 16) and Node (version 15, with
//! its host objects for typed arrays) write.
//!
//! Every object (anything with an identity: objects, arrays, dates, maps, buffers, views…)
//! gets the next id as it is read, a buffer before the view over it, and `^id` refers back to
//! one already read. A value V8 would refuse, a tag this reader does not know, or trailing
//! bytes are a [`DecodeError`]; nothing panics and no length in the input is trusted before
//! the bytes behind it are there.

use std::fmt;

use crate::tags::*;
use crate::{
    ARRAY_INDEX_MAX, BIGINT_BYTES_MAX, BigInt, DEPTH_MAX, FORMAT_VERSION_READ_MAX,
    FORMAT_VERSION_READ_MIN, INPUT_MAX, JsString, Number, PropKey, Value, ViewKind,
    canonical_props, normalize_anchors,
};

/// Why bytes are not a value this reader understands, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The byte offset where reading stopped.
    pub offset: usize,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for DecodeError {}

/// What an id names, as far as reading needs to know: whether a view may follow it.
#[derive(Clone, Copy)]
enum IdKind {
    /// An `ArrayBuffer` of this many bytes.
    Buffer(usize),
    Other,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    version: u8,
    ids: Vec<IdKind>,
    depth: usize,
}

/// Reads one V8-serialised value (with its `FF <version>` header) from `bytes`.
///
/// # Errors
/// A [`DecodeError`] for input past [`INPUT_MAX`], nesting past [`DEPTH_MAX`], a bigint past
/// [`BIGINT_BYTES_MAX`], an unknown version or tag, malformed or truncated data, or bytes left
/// after the value.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    if bytes.len() > INPUT_MAX {
        return Err(DecodeError {
            offset: 0,
            message: format!("input of {} bytes is over {INPUT_MAX}", bytes.len()),
        });
    }
    let mut reader = Reader {
        bytes,
        pos: 0,
        version: 0,
        ids: Vec::new(),
        depth: 0,
    };
    let mut value = reader.read_top()?;
    normalize_anchors(&mut value);
    Ok(value)
}

impl<'a> Reader<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, DecodeError> {
        Err(DecodeError {
            offset: self.pos,
            message: message.into(),
        })
    }

    fn read_top(&mut self) -> Result<Value, DecodeError> {
        if self.byte()? != TAG_VERSION {
            return self.err("no version header (FF)");
        }
        let version = self.varint()?;
        if !(u64::from(FORMAT_VERSION_READ_MIN)..=u64::from(FORMAT_VERSION_READ_MAX))
            .contains(&version)
        {
            return self.err(format!("format version {version} is not read"));
        }
        self.version = u8::try_from(version).unwrap_or(0);
        let value = self.value()?;
        if self.pos != self.bytes.len() {
            return self.err("bytes after the value");
        }
        Ok(value)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => self.err("unexpected end of input"),
        }
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], DecodeError> {
        let left = self.bytes.len() - self.pos;
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let out = &self.bytes[self.pos..self.pos + n];
                self.pos += n;
                Ok(out)
            }
            _ => self.err(format!("{n} bytes announced, {left} left")),
        }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        self.err("varint longer than 64 bits")
    }

    fn varint32(&mut self) -> Result<u32, DecodeError> {
        let n = self.varint()?;
        match u32::try_from(n) {
            Ok(n) => Ok(n),
            Err(_) => self.err(format!("{n} does not fit 32 bits")),
        }
    }

    fn double(&mut self) -> Result<f64, DecodeError> {
        let raw = self.take(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(raw);
        Ok(f64::from_le_bytes(b))
    }

    /// The next tag, skipping padding.
    fn tag(&mut self) -> Result<u8, DecodeError> {
        loop {
            let t = self.byte()?;
            if t != TAG_PADDING {
                return Ok(t);
            }
        }
    }

    fn peek_tag(&self) -> Option<u8> {
        self.bytes[self.pos..]
            .iter()
            .copied()
            .find(|&b| b != TAG_PADDING)
    }

    fn new_id(&mut self, kind: IdKind) -> u32 {
        self.ids.push(kind);
        u32::try_from(self.ids.len() - 1).unwrap_or(u32::MAX)
    }

    fn value(&mut self) -> Result<Value, DecodeError> {
        if self.depth >= DEPTH_MAX {
            return self.err(format!("nested deeper than {DEPTH_MAX}"));
        }
        self.depth += 1;
        let result = self.value_inner();
        self.depth -= 1;
        let value = result?;
        // A buffer (read now or referred to) followed by a view tag is the view's buffer.
        let buffer_len = match &value {
            Value::Anchor(id, inner) if matches!(**inner, Value::ArrayBuffer(_)) => {
                self.ids.get(*id as usize).copied()
            }
            Value::Alias(id) => self.ids.get(*id as usize).copied(),
            _ => None,
        };
        if let Some(IdKind::Buffer(len)) = buffer_len
            && self.peek_tag() == Some(TAG_VIEW)
        {
            self.tag()?;
            return self.view(value, len);
        }
        Ok(value)
    }

    fn value_inner(&mut self) -> Result<Value, DecodeError> {
        let at = self.pos;
        let tag = self.tag()?;
        Ok(match tag {
            TAG_VERIFY_COUNT => {
                self.varint()?;
                return self.value_inner();
            }
            TAG_UNDEFINED => Value::Undefined,
            TAG_NULL => Value::Null,
            TAG_TRUE => Value::Bool(true),
            TAG_FALSE => Value::Bool(false),
            TAG_INT32 => {
                let z = self.varint()?;
                // Zigzag: 0, -1, 1, -2, …
                #[allow(clippy::cast_possible_wrap, reason = "zigzag decoding")]
                let n = ((z >> 1) as i64) ^ -((z & 1) as i64);
                match i32::try_from(n) {
                    Ok(n) => Value::number(f64::from(n)),
                    Err(_) => return self.err("int32 out of range"),
                }
            }
            TAG_UINT32 => Value::number(f64::from(self.varint32()?)),
            TAG_DOUBLE => Value::number(self.double()?),
            TAG_BIGINT => Value::BigInt(self.bigint()?),
            TAG_ONE_BYTE_STRING | TAG_TWO_BYTE_STRING | TAG_UTF8_STRING => {
                Value::String(self.string_body(tag)?)
            }
            TAG_OBJECT_REFERENCE => {
                let id = self.varint32()?;
                if id as usize >= self.ids.len() {
                    return self.err(format!("reference to object {id}, not read yet"));
                }
                Value::Alias(id)
            }
            TAG_BEGIN_OBJECT => {
                let id = self.new_id(IdKind::Other);
                let props = self.properties(TAG_END_OBJECT)?;
                let count = self.varint()?;
                if count != props.len() as u64 {
                    return self.err(format!("object of {} properties says {count}", props.len()));
                }
                Value::Anchor(id, Box::new(Value::Object(canonical_props(props))))
            }
            TAG_BEGIN_DENSE_ARRAY => self.dense_array()?,
            TAG_BEGIN_SPARSE_ARRAY => {
                let id = self.new_id(IdKind::Other);
                let length = self.varint32()?;
                let props = self.properties(TAG_END_SPARSE_ARRAY)?;
                self.array_trailer(props.len() as u64, length)?;
                if props
                    .iter()
                    .any(|(k, _)| matches!(k, PropKey::Index(i) if *i >= length))
                {
                    return self.err("a sparse array's index is past its length");
                }
                Value::Anchor(
                    id,
                    Box::new(Value::SparseArray(length, canonical_props(props))),
                )
            }
            TAG_DATE => {
                let id = self.new_id(IdKind::Other);
                let ms = self.double()?;
                let clipped = ms.is_nan() || (ms.fract() == 0.0 && ms.abs() <= 8.64e15);
                if !clipped || (ms == 0.0 && ms.is_sign_negative()) {
                    return self.err("a date's time value is not a whole number of ms in range");
                }
                Value::Anchor(id, Box::new(Value::Date(Number(ms))))
            }
            TAG_TRUE_OBJECT | TAG_FALSE_OBJECT => {
                let id = self.new_id(IdKind::Other);
                let b = Value::Bool(tag == TAG_TRUE_OBJECT);
                Value::Anchor(id, Box::new(Value::Boxed(Box::new(b))))
            }
            TAG_NUMBER_OBJECT => {
                let id = self.new_id(IdKind::Other);
                let n = Value::number(self.double()?);
                Value::Anchor(id, Box::new(Value::Boxed(Box::new(n))))
            }
            TAG_BIGINT_OBJECT => {
                let id = self.new_id(IdKind::Other);
                let n = Value::BigInt(self.bigint()?);
                Value::Anchor(id, Box::new(Value::Boxed(Box::new(n))))
            }
            TAG_STRING_OBJECT => {
                let id = self.new_id(IdKind::Other);
                let s = self.string()?;
                Value::Anchor(id, Box::new(Value::Boxed(Box::new(Value::String(s)))))
            }
            TAG_REGEXP => {
                let id = self.new_id(IdKind::Other);
                let source = self.string()?;
                let flags = self.varint32()?;
                if flags & !crate::print::REGEXP_FLAGS_KNOWN != 0 {
                    return self.err(format!("regexp flags {flags:#x} not known"));
                }
                if !crate::parse::regexp_source_prints(&source) {
                    return self.err("a regexp source that is not a literal's");
                }
                Value::Anchor(id, Box::new(Value::RegExp(source, flags)))
            }
            TAG_BEGIN_MAP => {
                let id = self.new_id(IdKind::Other);
                let mut entries = Vec::new();
                while self.peek_tag() != Some(TAG_END_MAP) {
                    let k = self.value()?;
                    let v = self.value()?;
                    entries.push((k, v));
                }
                self.tag()?;
                let count = self.varint()?;
                if count != 2 * entries.len() as u64 {
                    return self.err("map length does not match its entries");
                }
                Value::Anchor(id, Box::new(Value::Map(entries)))
            }
            TAG_BEGIN_SET => {
                let id = self.new_id(IdKind::Other);
                let mut items = Vec::new();
                while self.peek_tag() != Some(TAG_END_SET) {
                    items.push(self.value()?);
                }
                self.tag()?;
                if self.varint()? != items.len() as u64 {
                    return self.err("set length does not match its values");
                }
                Value::Anchor(id, Box::new(Value::Set(items)))
            }
            TAG_ARRAY_BUFFER => {
                let len = self.varint()?;
                let bytes = self.take(len)?.to_vec();
                let id = self.new_id(IdKind::Buffer(bytes.len()));
                Value::Anchor(id, Box::new(Value::ArrayBuffer(bytes)))
            }
            TAG_HOST_OBJECT => self.node_host_object()?,
            other => {
                self.pos = at;
                return self.err(format!("tag {other:#04x} is not read"));
            }
        })
    }

    fn string(&mut self) -> Result<JsString, DecodeError> {
        let tag = self.tag()?;
        match tag {
            TAG_ONE_BYTE_STRING | TAG_TWO_BYTE_STRING | TAG_UTF8_STRING => self.string_body(tag),
            _ => self.err("expected a string"),
        }
    }

    fn string_body(&mut self, tag: u8) -> Result<JsString, DecodeError> {
        let len = self.varint()?;
        let data = self.take(len)?;
        match tag {
            TAG_ONE_BYTE_STRING => Ok(JsString(data.iter().map(|&b| u16::from(b)).collect())),
            TAG_TWO_BYTE_STRING if data.len() % 2 == 0 => Ok(JsString(
                data.chunks_exact(2)
                    .map(|p| u16::from_le_bytes([p[0], p[1]]))
                    .collect(),
            )),
            TAG_TWO_BYTE_STRING => self.err("two-byte string of an odd byte length"),
            _ => match std::str::from_utf8(data) {
                Ok(s) => Ok(JsString::from(s)),
                Err(_) => self.err("UTF-8 string is not UTF-8"),
            },
        }
    }

    fn bigint(&mut self) -> Result<BigInt, DecodeError> {
        let bitfield = self.varint()?;
        let len = bitfield >> 1;
        if len > BIGINT_BYTES_MAX as u64 {
            return self.err(format!("bigint of {len} bytes is over {BIGINT_BYTES_MAX}"));
        }
        let digits = self.take(len)?;
        Ok(BigInt::from_le_bytes(bitfield & 1 == 1, digits))
    }

    /// Property key-value pairs up to `end` (consumed).
    fn properties(&mut self, end: u8) -> Result<Vec<(PropKey, Value)>, DecodeError> {
        let mut props = Vec::new();
        while self.peek_tag() != Some(end) {
            let key = match self.value()? {
                Value::String(s) => key_of_string(s),
                Value::Number(Number(x)) => key_of_number(x),
                _ => return self.err("a property key is not a string or number"),
            };
            let value = self.value()?;
            props.push((key, value));
        }
        self.tag()?;
        Ok(props)
    }

    fn array_trailer(&mut self, props: u64, length: u32) -> Result<(), DecodeError> {
        let count = self.varint()?;
        let len = self.varint()?;
        if count != props || len != u64::from(length) {
            return self.err("array trailer does not match its contents");
        }
        Ok(())
    }

    fn dense_array(&mut self) -> Result<Value, DecodeError> {
        let id = self.new_id(IdKind::Other);
        let length = self.varint32()?;
        let mut items: Vec<Option<Value>> = Vec::new();
        for _ in 0..length {
            if self.peek_tag() == Some(TAG_THE_HOLE) {
                self.tag()?;
                items.push(None);
            } else {
                items.push(Some(self.value()?));
            }
        }
        let props = self.properties(TAG_END_DENSE_ARRAY)?;
        self.array_trailer(props.len() as u64, length)?;
        let array = if items.iter().all(Option::is_some) {
            let props = canonical_props(props);
            if props.iter().any(|(k, _)| matches!(k, PropKey::Index(_))) {
                // An index among the extra properties: a holey array after all.
                let indexed = items
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, v)| Some((PropKey::Index(u32::try_from(i).ok()?), v?)));
                Value::SparseArray(length, canonical_props(indexed.chain(props).collect()))
            } else {
                Value::Array(items.into_iter().flatten().collect(), props)
            }
        } else {
            // Holes: JavaScript's view of this array is a holey one.
            let indexed = items
                .into_iter()
                .enumerate()
                .filter_map(|(i, v)| Some((PropKey::Index(u32::try_from(i).ok()?), v?)));
            Value::SparseArray(length, canonical_props(indexed.chain(props).collect()))
        };
        Ok(Value::Anchor(id, Box::new(array)))
    }

    /// A view over `buffer` (an anchored buffer or an alias of one, `buffer_len` bytes).
    fn view(&mut self, buffer: Value, buffer_len: usize) -> Result<Value, DecodeError> {
        let sub = self.byte()?;
        let Some(kind) = ViewKind::from_subtag(sub) else {
            return self.err(format!("view sub-tag {sub:#04x} is not read"));
        };
        let offset = self.varint()?;
        let length = self.varint()?;
        if self.version >= 14 {
            let flags = self.varint()?;
            if flags != 0 {
                return self.err("length-tracking or resizable views are not read");
            }
        }
        let (Ok(byte_offset), Ok(byte_length)) = (usize::try_from(offset), usize::try_from(length))
        else {
            return self.err("view out of range");
        };
        let size = kind.element_size();
        if byte_offset
            .checked_add(byte_length)
            .is_none_or(|end| end > buffer_len)
            || byte_offset % size != 0
            || byte_length % size != 0
        {
            return self.err("view out of its buffer's range, or misaligned");
        }
        let id = self.new_id(IdKind::Other);
        Ok(Value::Anchor(
            id,
            Box::new(Value::View {
                kind,
                buffer: Box::new(buffer),
                byte_offset,
                byte_length,
            }),
        ))
    }

    /// Node's `v8.serialize` writes a typed array as a host object: the index of its class,
    /// its byte length, and its bytes.
    fn node_host_object(&mut self) -> Result<Value, DecodeError> {
        let id = self.new_id(IdKind::Other);
        let index = self.varint()?;
        let Some(kind) = ViewKind::from_node_index(index) else {
            return self.err(format!("host object of type {index} is not read"));
        };
        let len = self.varint()?;
        let bytes = self.take(len)?.to_vec();
        if bytes.len() % kind.element_size() != 0 {
            return self.err("typed array of a partial element");
        }
        let byte_length = bytes.len();
        Ok(Value::Anchor(
            id,
            Box::new(Value::View {
                kind,
                buffer: Box::new(Value::ArrayBuffer(bytes)),
                byte_offset: 0,
                byte_length,
            }),
        ))
    }
}

/// The key a string names: an array index when it is one's canonical form.
pub(crate) fn key_of_string(s: JsString) -> PropKey {
    let units = s.units();
    let canonical = !units.is_empty()
        && units.len() <= 10
        && units
            .iter()
            .all(|&u| (u16::from(b'0')..=u16::from(b'9')).contains(&u))
        && (units.len() == 1 || units[0] != u16::from(b'0'));
    if canonical {
        let n = units
            .iter()
            .fold(0u64, |n, &u| n * 10 + u64::from(u - u16::from(b'0')));
        if let Ok(i) = u32::try_from(n)
            && i <= ARRAY_INDEX_MAX
        {
            return PropKey::Index(i);
        }
    }
    PropKey::Name(s)
}

/// The key a number names: an array index, or the name JavaScript converts it to.
pub(crate) fn key_of_number(x: f64) -> PropKey {
    if x >= 0.0 && x <= f64::from(ARRAY_INDEX_MAX) && x.fract() == 0.0 {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "integral and in u32's range"
        )]
        return PropKey::Index(x as u32);
    }
    PropKey::Name(JsString::from(crate::number::number_string(x).as_str()))
}
