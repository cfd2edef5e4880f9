//! A [`Value`] as a JavaScript literal, in the grammar `parse.rs` reads back.
//!
//! `{ name: "Ada", 1: true, "two words": null }`, `[1, 2]`, holey arrays `[1, , 3]` (or
//! `Object.assign(new Array(5000), { 4999: 1 })` when mostly holes), extra array properties
//! `Object.assign([1], { note: "x" })`, `new Date("1970-01-01T00:00:00.000Z")`, `/a.c/gi`,
//! `new Map([[1, "a"]])`, `new Set(["a"])`, `new Uint8Array([1, 2]).buffer`,
//! `new Float64Array([1.5, NaN])`, `new Uint8Array(*1, 2, 3)` (a view over part of a shared
//! buffer), `new Number(1)`, `Object(1n)`, and anchors `&1 { self: *1 }`.

use std::fmt::{self, Write};

use crate::number::write_number;
use crate::{JsString, PropKey, Value, ViewKind};

/// V8's regexp flag bits with their letters, in the order `RegExp.prototype.flags` lists
/// them.
pub(crate) const REGEXP_FLAGS: [(char, u32); 8] = [
    ('d', 128),
    ('g', 1),
    ('i', 2),
    ('m', 4),
    ('s', 32),
    ('u', 16),
    ('v', 256),
    ('y', 8),
];
/// Every flag bit [`REGEXP_FLAGS`] names.
pub(crate) const REGEXP_FLAGS_KNOWN: u32 = 128 | 1 | 2 | 4 | 32 | 16 | 256 | 8;

impl fmt::Display for Value {
    /// The value as a JavaScript literal (see the module summary of `print.rs`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_value(&mut out, self);
        f.write_str(&out)
    }
}

/// Appends `s` as a double-quoted JavaScript string literal.
pub(crate) fn write_string(out: &mut String, s: &JsString) {
    out.push('"');
    let units = s.units();
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        i += 1;
        let c = match u {
            0xd800..=0xdbff if units.get(i).is_some_and(|n| (0xdc00..=0xdfff).contains(n)) => {
                let low = units[i];
                i += 1;
                char::from_u32(
                    0x10000 + ((u32::from(u) - 0xd800) << 10) + (u32::from(low) - 0xdc00),
                )
            }
            _ => char::from_u32(u32::from(u)),
        };
        match c {
            None => {
                let _ = write!(out, "\\u{u:04X}");
            }
            Some('"') => out.push_str("\\\""),
            Some('\\') => out.push_str("\\\\"),
            Some('\n') => out.push_str("\\n"),
            Some('\r') => out.push_str("\\r"),
            Some('\t') => out.push_str("\\t"),
            Some('\u{8}') => out.push_str("\\b"),
            Some('\u{c}') => out.push_str("\\f"),
            Some('\u{b}') => out.push_str("\\v"),
            Some(c @ ('\0'..='\u{1f}' | '\u{7f}'..='\u{9f}')) => {
                let _ = write!(out, "\\x{:02X}", u32::from(c));
            }
            Some(c @ ('\u{2028}' | '\u{2029}' | '\u{feff}')) => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            Some(c) => out.push(c),
        }
    }
    out.push('"');
}

/// Whether `s` is written bare as a property name: an ASCII identifier.
fn is_identifier(s: &JsString) -> bool {
    let u = s.units();
    let start = |c: u16| {
        c == u16::from(b'_')
            || c == u16::from(b'$')
            || (c < 0x80 && (c as u8).is_ascii_alphabetic())
    };
    let part = |c: u16| start(c) || (c < 0x80 && (c as u8).is_ascii_digit());
    u.first().is_some_and(|&c| start(c)) && u.iter().all(|&c| part(c))
}

fn write_key(out: &mut String, key: &PropKey) {
    match key {
        PropKey::Index(i) => {
            let _ = write!(out, "{i}");
        }
        // A bare or quoted `__proto__:` would set the prototype; a computed key is a property.
        PropKey::Name(s) if s.units() == JsString::from("__proto__").units() => {
            out.push('[');
            write_string(out, s);
            out.push(']');
        }
        PropKey::Name(s) if is_identifier(s) => out.push_str(&s.to_string_lossy()),
        PropKey::Name(s) => write_string(out, s),
    }
}

fn write_props(out: &mut String, props: &[(PropKey, Value)]) {
    if props.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{ ");
    for (i, (k, v)) in props.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_key(out, k);
        out.push_str(": ");
        write_value(out, v);
    }
    out.push_str(" }");
}

fn write_list<'a>(out: &mut String, items: impl IntoIterator<Item = &'a Value>) {
    out.push('[');
    for (i, v) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(out, v);
    }
    out.push(']');
}

/// Whether a holey array is printed as an array literal with holes, rather than as
/// `new Array(length)` with its elements assigned: when holes are not most of it.
fn holes_fit_a_literal(length: u32, present: usize) -> bool {
    (length as usize) < present * 2 + 8
}

fn write_sparse(out: &mut String, length: u32, props: &[(PropKey, Value)]) {
    let (indices, names): (Vec<_>, Vec<_>) = props
        .iter()
        .partition(|(k, _)| matches!(k, PropKey::Index(_)));
    let has_hole = indices.len() < length as usize;
    let names: Vec<(PropKey, Value)> = names.into_iter().cloned().collect();
    if has_hole && holes_fit_a_literal(length, indices.len()) {
        let mut literal = String::from("[");
        let mut next = indices.iter().peekable();
        for i in 0..length {
            if i > 0 {
                literal.push_str(", ");
            }
            if let Some((PropKey::Index(at), v)) = next.peek()
                && *at == i
            {
                write_value(&mut literal, v);
                next.next();
            }
        }
        // A trailing hole needs its own comma: `[1, ,]` has length 2.
        if matches!(indices.last(), Some((PropKey::Index(last), _)) if last + 1 < length)
            || indices.is_empty()
        {
            literal.push(',');
        }
        literal.push(']');
        if names.is_empty() {
            out.push_str(&literal);
        } else {
            let _ = write!(out, "Object.assign({literal}, ");
            write_props(out, &names);
            out.push(')');
        }
    } else if props.is_empty() {
        let _ = write!(out, "new Array({length})");
    } else {
        let _ = write!(out, "Object.assign(new Array({length}), ");
        write_props(out, props);
        out.push(')');
    }
}

/// The elements of a view over `bytes`, printed, if each reads back to the same bytes.
fn elements(kind: ViewKind, bytes: &[u8]) -> Option<String> {
    // A DataView has no elements: it is written over its buffer, even when empty.
    if kind == ViewKind::DataView {
        return None;
    }
    let size = kind.element_size();
    let mut out = String::from("[");
    for (i, e) in bytes.chunks_exact(size).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let mut b8 = [0u8; 8];
        b8[..size].copy_from_slice(e);
        match kind {
            ViewKind::Int8Array => write!(out, "{}", e[0] as i8),
            ViewKind::Uint8Array | ViewKind::Uint8ClampedArray => write!(out, "{}", e[0]),
            ViewKind::Int16Array => write!(out, "{}", i16::from_le_bytes([e[0], e[1]])),
            ViewKind::Uint16Array => write!(out, "{}", u16::from_le_bytes([e[0], e[1]])),
            ViewKind::Int32Array => write!(out, "{}", i32::from_le_bytes([e[0], e[1], e[2], e[3]])),
            ViewKind::Uint32Array => {
                write!(out, "{}", u32::from_le_bytes([e[0], e[1], e[2], e[3]]))
            }
            ViewKind::BigInt64Array => write!(out, "{}n", i64::from_le_bytes(b8)),
            ViewKind::BigUint64Array => write!(out, "{}n", u64::from_le_bytes(b8)),
            ViewKind::Float32Array => {
                let x = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                let text = f32_text(x);
                let back = crate::parse::parse_number_text(&text)? as f32;
                if back.to_bits() != x.to_bits() {
                    return None;
                }
                out.push_str(&text);
                Ok(())
            }
            ViewKind::Float64Array => {
                let x = f64::from_le_bytes(b8);
                if x.is_nan() && x.to_bits() != f64::NAN.to_bits() {
                    return None;
                }
                write_number(&mut out, x);
                Ok(())
            }
            ViewKind::DataView => return None,
        }
        .ok()?;
    }
    out.push(']');
    Some(out)
}

/// A float32 as the shortest decimal that reads back to it.
fn f32_text(x: f32) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else if x == 0.0 && x.is_sign_negative() {
        "-0".into()
    } else {
        format!("{x}")
    }
}

fn write_buffer(out: &mut String, buffer: &Value) {
    match buffer {
        Value::ArrayBuffer(bytes) if bytes.iter().all(|&b| b == 0) => {
            let _ = write!(out, "new ArrayBuffer({})", bytes.len());
        }
        Value::ArrayBuffer(bytes) => {
            out.push_str("new Uint8Array(");
            out.push_str(&elements(ViewKind::Uint8Array, bytes).unwrap_or_default());
            out.push_str(").buffer");
        }
        other => write_value(out, other),
    }
}

fn write_view(out: &mut String, kind: ViewKind, buffer: &Value, offset: usize, length: usize) {
    let name = kind.name();
    if let Value::ArrayBuffer(bytes) = buffer
        && offset == 0
        && length == bytes.len()
    {
        if let Some(list) = elements(kind, bytes) {
            let _ = write!(out, "new {name}({list})");
        } else {
            let _ = write!(out, "new {name}(");
            write_buffer(out, buffer);
            out.push(')');
        }
        return;
    }
    let _ = write!(out, "new {name}(");
    write_buffer(out, buffer);
    let _ = write!(out, ", {offset}, {})", length / kind.element_size());
}

/// Appends `value` as a literal.
pub(crate) fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Undefined => out.push_str("undefined"),
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n.0),
        Value::BigInt(n) => {
            let _ = write!(out, "{n}n");
        }
        Value::String(s) => write_string(out, s),
        Value::Boxed(inner) => match &**inner {
            Value::Number(_) => {
                out.push_str("new Number(");
                write_value(out, inner);
                out.push(')');
            }
            Value::String(_) => {
                out.push_str("new String(");
                write_value(out, inner);
                out.push(')');
            }
            Value::Bool(_) => {
                out.push_str("new Boolean(");
                write_value(out, inner);
                out.push(')');
            }
            other => {
                out.push_str("Object(");
                write_value(out, other);
                out.push(')');
            }
        },
        Value::Object(props) => write_props(out, props),
        Value::Array(items, props) if props.is_empty() => write_list(out, items),
        Value::Array(items, props) => {
            out.push_str("Object.assign(");
            write_list(out, items);
            out.push_str(", ");
            write_props(out, props);
            out.push(')');
        }
        Value::SparseArray(length, props) => write_sparse(out, *length, props),
        Value::Date(ms) => match crate::time::iso_of(ms.0) {
            Some(iso) => {
                let _ = write!(out, "new Date(\"{iso}\")");
            }
            None => {
                out.push_str("new Date(");
                write_number(out, ms.0);
                out.push(')');
            }
        },
        Value::RegExp(source, flags) => {
            out.push('/');
            out.push_str(&source.to_string_lossy());
            out.push('/');
            for (letter, bit) in REGEXP_FLAGS {
                if flags & bit != 0 {
                    out.push(letter);
                }
            }
        }
        Value::Map(entries) if entries.is_empty() => out.push_str("new Map()"),
        Value::Map(entries) => {
            out.push_str("new Map([");
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push('[');
                write_value(out, k);
                out.push_str(", ");
                write_value(out, v);
                out.push(']');
            }
            out.push_str("])");
        }
        Value::Set(items) if items.is_empty() => out.push_str("new Set()"),
        Value::Set(items) => {
            out.push_str("new Set(");
            write_list(out, items);
            out.push(')');
        }
        Value::ArrayBuffer(_) => write_buffer(out, value),
        Value::View {
            kind,
            buffer,
            byte_offset,
            byte_length,
        } => write_view(out, *kind, buffer, *byte_offset, *byte_length),
        Value::Anchor(n, inner) => {
            let _ = write!(out, "&{n} ");
            write_value(out, inner);
        }
        Value::Alias(n) => {
            let _ = write!(out, "*{n}");
        }
    }
}
