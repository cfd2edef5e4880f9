//! Writing a [`Value`] as Deno 2.9 (V8's `ValueSerializer`, format version 16) writes the
//! JavaScript value it stands for.
//!
//! V8's choices, made the same way here: a number is a Smi (`I`, zigzag) when it is an
//! integer in `i32`'s range other than `-0`, else a double (`N`); except in a packed array
//! of numbers only, where one non-Smi makes V8 keep every element as a double. A string is
//! one-byte (`"`) when every unit fits a byte, else two-byte (`c`) with a padding byte first
//! when needed to start its data at an even offset. A packed array is dense (`A`), a holey
//! one sparse (`a`); property counts (and lengths) close objects, arrays, maps and sets.
//! A typed array is its buffer (`B`) then the view (`V`), the buffer taking the id before the
//! view's.

use std::collections::HashMap;
use std::fmt;

use crate::tags::*;
use crate::{BIGINT_BYTES_MAX, BigInt, DEPTH_MAX, FORMAT_VERSION, JsString, PropKey, Value};

/// Why a value cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

/// What an anchor's id names, for the views that alias a buffer.
#[derive(Clone, Copy)]
struct Anchored {
    id: u32,
    buffer_len: Option<usize>,
}

struct Writer {
    out: Vec<u8>,
    next_id: u32,
    anchors: HashMap<u32, Anchored>,
    depth: usize,
}

/// The V8 serialisation of `value`, as Deno writes it, header included.
///
/// # Errors
/// An alias with no anchor before it, an anchor on a primitive, a view outside its buffer
/// (or over something that is not a buffer), a bigint over [`BIGINT_BYTES_MAX`], or nesting
/// past [`DEPTH_MAX`].
pub fn encode(value: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer {
        out: vec![TAG_VERSION, FORMAT_VERSION],
        next_id: 0,
        anchors: HashMap::new(),
        depth: 0,
    };
    w.value(value, None)?;
    Ok(w.out)
}

fn err<T>(message: impl Into<String>) -> Result<T, EncodeError> {
    Err(EncodeError(message.into()))
}

impl Writer {
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        self.out.push(n as u8);
    }

    fn double(&mut self, x: f64) {
        self.out.push(TAG_DOUBLE);
        self.out.extend_from_slice(&x.to_le_bytes());
    }

    fn smi(&mut self, n: i32) {
        self.out.push(TAG_INT32);
        let zigzag = ((n << 1) ^ (n >> 31)) as u32;
        self.varint(u64::from(zigzag));
    }

    fn number(&mut self, x: f64) {
        match crate::number::as_smi(x) {
            Some(n) => self.smi(n),
            None => self.double(x),
        }
    }

    fn string(&mut self, s: &JsString) {
        if s.is_one_byte() {
            self.out.push(TAG_ONE_BYTE_STRING);
            self.varint(s.units().len() as u64);
            self.out.extend(s.units().iter().map(|&u| u as u8));
        } else {
            let byte_len = s.units().len() as u64 * 2;
            let varint_len = (1..).find(|&n| byte_len >> (7 * n) == 0).unwrap_or(10);
            if (self.out.len() + 1 + varint_len) % 2 == 1 {
                self.out.push(TAG_PADDING);
            }
            self.out.push(TAG_TWO_BYTE_STRING);
            self.varint(byte_len);
            for u in s.units() {
                self.out.extend_from_slice(&u.to_le_bytes());
            }
        }
    }

    fn bigint(&mut self, n: &BigInt) -> Result<(), EncodeError> {
        let magnitude = n.magnitude();
        if magnitude.len() > BIGINT_BYTES_MAX {
            return err(format!(
                "a bigint of {} bytes is over {BIGINT_BYTES_MAX}",
                magnitude.len()
            ));
        }
        let padded = magnitude.len().div_ceil(8) * 8;
        self.varint(((padded as u64) << 1) | u64::from(n.is_negative()));
        self.out.extend_from_slice(magnitude);
        self.out
            .extend(std::iter::repeat_n(0, padded - magnitude.len()));
        Ok(())
    }

    fn key(&mut self, key: &PropKey) {
        match key {
            PropKey::Index(i) => match i32::try_from(*i) {
                Ok(n) => self.smi(n),
                Err(_) => self.double(f64::from(*i)),
            },
            PropKey::Name(s) => self.string(s),
        }
    }

    fn props(&mut self, props: &[(PropKey, Value)]) -> Result<(), EncodeError> {
        for (k, v) in props {
            self.key(k);
            self.value(v, None)?;
        }
        Ok(())
    }

    /// Takes the next object id, and records it under `anchor`.
    fn id(&mut self, anchor: Option<u32>, buffer_len: Option<usize>) {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(label) = anchor {
            self.anchors.insert(label, Anchored { id, buffer_len });
        }
    }

    fn value(&mut self, value: &Value, anchor: Option<u32>) -> Result<(), EncodeError> {
        if self.depth >= DEPTH_MAX {
            return err(format!("the value nests deeper than {DEPTH_MAX}"));
        }
        self.depth += 1;
        let result = self.value_inner(value, anchor);
        self.depth -= 1;
        result
    }

    fn value_inner(&mut self, value: &Value, anchor: Option<u32>) -> Result<(), EncodeError> {
        if anchor.is_some() && !value.is_object() {
            return err("an anchor (&n) must be on an object, not a primitive");
        }
        match value {
            Value::Undefined => self.out.push(TAG_UNDEFINED),
            Value::Null => self.out.push(TAG_NULL),
            Value::Bool(true) => self.out.push(TAG_TRUE),
            Value::Bool(false) => self.out.push(TAG_FALSE),
            Value::Number(n) => self.number(n.0),
            Value::BigInt(n) => {
                self.out.push(TAG_BIGINT);
                self.bigint(n)?;
            }
            Value::String(s) => self.string(s),
            Value::Anchor(label, inner) => {
                if self.anchors.contains_key(label) {
                    return err(format!("anchor &{label} is given twice"));
                }
                if matches!(**inner, Value::Anchor(..)) {
                    return err("an object has two anchors");
                }
                self.value(inner, Some(*label))?;
            }
            Value::Alias(label) => match self.anchors.get(label) {
                Some(a) => {
                    let id = a.id;
                    self.out.push(TAG_OBJECT_REFERENCE);
                    self.varint(u64::from(id));
                }
                None => return err(format!("*{label} names no anchor &{label} before it")),
            },
            Value::Boxed(inner) => {
                self.id(anchor, None);
                match &**inner {
                    Value::Bool(true) => self.out.push(TAG_TRUE_OBJECT),
                    Value::Bool(false) => self.out.push(TAG_FALSE_OBJECT),
                    Value::Number(n) => {
                        self.out.push(TAG_NUMBER_OBJECT);
                        self.out.extend_from_slice(&n.0.to_le_bytes());
                    }
                    Value::BigInt(n) => {
                        self.out.push(TAG_BIGINT_OBJECT);
                        self.bigint(n)?;
                    }
                    Value::String(s) => {
                        self.out.push(TAG_STRING_OBJECT);
                        self.string(s);
                    }
                    _ => return err("only a number, string, boolean or bigint can be boxed"),
                }
            }
            Value::Object(props) => {
                self.id(anchor, None);
                self.out.push(TAG_BEGIN_OBJECT);
                self.props(props)?;
                self.out.push(TAG_END_OBJECT);
                self.varint(props.len() as u64);
            }
            Value::Array(items, props) => {
                self.id(anchor, None);
                self.out.push(TAG_BEGIN_DENSE_ARRAY);
                self.varint(items.len() as u64);
                // V8 keeps an array of numbers only as doubles once one is not a Smi.
                let doubles = items.iter().all(|v| matches!(v, Value::Number(_)))
                    && items.iter().any(
                        |v| matches!(v, Value::Number(n) if crate::number::as_smi(n.0).is_none()),
                    );
                for item in items {
                    match item {
                        Value::Number(n) if doubles => self.double(n.0),
                        _ => self.value(item, None)?,
                    }
                }
                self.props(props)?;
                self.out.push(TAG_END_DENSE_ARRAY);
                self.varint(props.len() as u64);
                self.varint(items.len() as u64);
            }
            Value::SparseArray(length, props) => {
                self.id(anchor, None);
                self.out.push(TAG_BEGIN_SPARSE_ARRAY);
                self.varint(u64::from(*length));
                self.props(props)?;
                self.out.push(TAG_END_SPARSE_ARRAY);
                self.varint(props.len() as u64);
                self.varint(u64::from(*length));
            }
            Value::Date(ms) => {
                self.id(anchor, None);
                self.out.push(TAG_DATE);
                self.out.extend_from_slice(&ms.0.to_le_bytes());
            }
            Value::RegExp(source, flags) => {
                self.id(anchor, None);
                self.out.push(TAG_REGEXP);
                self.string(source);
                self.varint(u64::from(*flags));
            }
            Value::Map(entries) => {
                self.id(anchor, None);
                self.out.push(TAG_BEGIN_MAP);
                for (k, v) in entries {
                    self.value(k, None)?;
                    self.value(v, None)?;
                }
                self.out.push(TAG_END_MAP);
                self.varint(2 * entries.len() as u64);
            }
            Value::Set(items) => {
                self.id(anchor, None);
                self.out.push(TAG_BEGIN_SET);
                for v in items {
                    self.value(v, None)?;
                }
                self.out.push(TAG_END_SET);
                self.varint(items.len() as u64);
            }
            Value::ArrayBuffer(bytes) => {
                self.id(anchor, Some(bytes.len()));
                self.out.push(TAG_ARRAY_BUFFER);
                self.varint(bytes.len() as u64);
                self.out.extend_from_slice(bytes);
            }
            Value::View {
                kind,
                buffer,
                byte_offset,
                byte_length,
            } => {
                let buffer_len = match &**buffer {
                    Value::ArrayBuffer(b) => b.len(),
                    Value::Anchor(_, inner) => match &**inner {
                        Value::ArrayBuffer(b) => b.len(),
                        _ => return err("a view's buffer must be an ArrayBuffer"),
                    },
                    Value::Alias(label) => match self.anchors.get(label) {
                        Some(Anchored {
                            buffer_len: Some(len),
                            ..
                        }) => *len,
                        Some(_) => return err(format!("*{label} is not an ArrayBuffer")),
                        None => {
                            return err(format!("*{label} names no anchor &{label} before it"));
                        }
                    },
                    _ => return err("a view's buffer must be an ArrayBuffer"),
                };
                let size = kind.element_size();
                if byte_offset
                    .checked_add(*byte_length)
                    .is_none_or(|end| end > buffer_len)
                    || byte_offset % size != 0
                    || byte_length % size != 0
                {
                    return err(format!(
                        "a {} of {byte_length} bytes at {byte_offset} does not fit its \
                         {buffer_len}-byte buffer in whole elements",
                        kind.name()
                    ));
                }
                self.value(buffer, None)?;
                self.id(anchor, None);
                self.out.push(TAG_VIEW);
                self.out.push(kind.subtag());
                self.varint(*byte_offset as u64);
                self.varint(*byte_length as u64);
                self.varint(0);
            }
        }
        Ok(())
    }
}
