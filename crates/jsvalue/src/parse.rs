//! Reading the literal grammar `print.rs` writes (a subset of JavaScript expressions, plus
//! anchors `&n` and aliases `*n`), building the value JavaScript would build, so that
//! [`crate::encode`] writes what Deno writes for the same source: object properties in
//! JavaScript's order, `Map` and `Set` entries deduplicated as JavaScript does, holey array
//! literals as holey arrays, typed array elements converted as the typed array converts them.
//!
//! [`parse_json`] reads JSON text (strictly: double-quoted strings and keys, no trailing
//! commas) as `JSON.parse` does, where `"__proto__"` is an ordinary key.

use std::collections::HashMap;
use std::fmt;

use crate::decode::{key_of_number, key_of_string};
use crate::print::REGEXP_FLAGS;
use crate::time::{TIME_MAX_MS, parse_iso};
use crate::{
    BIGINT_BYTES_MAX, BigInt, DEPTH_MAX, INPUT_MAX, JsString, Number, PropKey, Value, ViewKind,
    canonical_props, normalize_anchors,
};

/// Why text is not a value literal, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based column (in characters) where the problem is.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Reads a value literal (the grammar `Value`'s `Display` prints).
///
/// # Errors
/// A [`ParseError`] naming the column: text that is not the grammar, text past
/// [`INPUT_MAX`] bytes, nesting past [`DEPTH_MAX`], a bigint past [`BIGINT_BYTES_MAX`], or a
/// value JavaScript would refuse to build (`new Uint16Array(new ArrayBuffer(3))`).
pub fn parse(text: &str) -> Result<Value, ParseError> {
    parse_with(text, false)
}

/// Reads JSON text into the value `JSON.parse` gives.
///
/// # Errors
/// As [`parse`], for text that is not JSON.
pub fn parse_json(text: &str) -> Result<Value, ParseError> {
    parse_with(text, true)
}

fn parse_with(text: &str, json: bool) -> Result<Value, ParseError> {
    if text.len() > INPUT_MAX {
        return Err(ParseError {
            column: 1,
            message: format!("text of {} bytes is over {INPUT_MAX}", text.len()),
        });
    }
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
        json,
        labels: HashMap::new(),
    };
    p.ws();
    let mut value = p.value()?;
    p.ws();
    if p.pos < p.chars.len() {
        return p.fail("unexpected text after the value");
    }
    normalize_anchors(&mut value);
    Ok(value)
}

/// What an anchor labels, once read: a buffer's length if it is an `ArrayBuffer`.
#[derive(Clone, Copy)]
enum Label {
    Open,
    Buffer(usize),
    Other,
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    json: bool,
    labels: HashMap<u32, Label>,
}

/// A number's text, as a JavaScript numeric literal: decimal, `.5`, exponents, `0x`/`0o`/`0b`.
pub(crate) fn parse_number_text(text: &str) -> Option<f64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let x = match body {
        "Infinity" => f64::INFINITY,
        "NaN" => f64::NAN,
        _ => {
            if let Some((radix, digits)) = radix_of(body) {
                let n = u128::from_str_radix(digits, radix).ok()?;
                #[allow(clippy::cast_precision_loss, reason = "rounds as JavaScript does")]
                let x = n as f64;
                x
            } else {
                let ok = body
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
                if !ok || body.is_empty() {
                    return None;
                }
                body.parse::<f64>().ok()?
            }
        }
    };
    Some(if negative { -x } else { x })
}

fn radix_of(body: &str) -> Option<(u32, &str)> {
    let lower = body.get(..2)?.to_ascii_lowercase();
    let radix = match lower.as_str() {
        "0x" => 16,
        "0o" => 8,
        "0b" => 2,
        _ => return None,
    };
    let digits = &body[2..];
    (!digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))).then_some((radix, digits))
}

/// JavaScript's `SameValueZero`, for `Map` keys and `Set` values; objects are the same only
/// when one anchor names both.
fn same_value_zero(a: &Value, b: &Value) -> bool {
    let identity = |v: &Value| match v {
        Value::Anchor(n, _) | Value::Alias(n) => Some(*n),
        _ => None,
    };
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.0 == y.0 || (x.0.is_nan() && y.0.is_nan()),
        _ if a.is_object() || b.is_object() || matches!(a, Value::Alias(_)) => {
            identity(a).is_some() && identity(a) == identity(b)
        }
        _ => a == b,
    }
}

/// JavaScript's conversion of a number to a typed array element's bytes.
fn element_bytes(kind: ViewKind, x: f64, out: &mut Vec<u8>) {
    let modular = |bits: u32| -> u64 {
        if !x.is_finite() {
            return 0;
        }
        let t = x.trunc();
        let m = 2f64.powi(bits as i32);
        let r = t.rem_euclid(m);
        #[allow(clippy::cast_possible_truncation, reason = "in 0..2^32")]
        let r = r as u64;
        r
    };
    match kind {
        ViewKind::Int8Array | ViewKind::Uint8Array => out.push(modular(8) as u8),
        ViewKind::Uint8ClampedArray => {
            let c = if x.is_nan() { 0.0 } else { x.clamp(0.0, 255.0) };
            out.push(c.round_ties_even() as u8);
        }
        ViewKind::Int16Array | ViewKind::Uint16Array => {
            out.extend_from_slice(&(modular(16) as u16).to_le_bytes());
        }
        ViewKind::Int32Array | ViewKind::Uint32Array => {
            out.extend_from_slice(&(modular(32) as u32).to_le_bytes());
        }
        ViewKind::Float32Array => out.extend_from_slice(&(x as f32).to_le_bytes()),
        ViewKind::Float64Array => out.extend_from_slice(&x.to_le_bytes()),
        ViewKind::BigInt64Array | ViewKind::BigUint64Array | ViewKind::DataView => {}
    }
}

/// A bigint's low 64 bits in two's complement (what `BigInt64Array` stores).
fn bigint_low64(n: &BigInt) -> u64 {
    let mut b = [0u8; 8];
    let m = n.magnitude();
    let len = m.len().min(8);
    b[..len].copy_from_slice(&m[..len]);
    let low = u64::from_le_bytes(b);
    if n.is_negative() {
        low.wrapping_neg()
    } else {
        low
    }
}

impl Parser {
    fn fail<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        self.fail_at(self.pos, message)
    }

    fn fail_at<T>(&self, pos: usize, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            column: pos + 1,
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            self.fail(format!("expected `{c}`"))
        }
    }

    /// The identifier-like word at the cursor (letters, digits, `_`, `$`, `.`), not consumed.
    fn word(&self) -> String {
        self.chars[self.pos..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
            .collect()
    }

    fn eat_word(&mut self, w: &str) -> bool {
        self.ws();
        let word = self.word();
        if word == w {
            self.pos += w.chars().count();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        if self.depth >= DEPTH_MAX {
            return self.fail(format!("the value nests deeper than {DEPTH_MAX}"));
        }
        self.depth += 1;
        let result = self.value_inner();
        self.depth -= 1;
        result
    }

    fn js_only(&self, what: &str) -> Result<(), ParseError> {
        if self.json {
            self.fail(format!("{what} is not JSON"))
        } else {
            Ok(())
        }
    }

    fn value_inner(&mut self) -> Result<Value, ParseError> {
        self.ws();
        let start = self.pos;
        let Some(c) = self.peek() else {
            return self.fail("expected a value, found the end");
        };
        match c {
            '"' => Ok(Value::String(self.string()?)),
            '\'' => {
                self.js_only("a single-quoted string")?;
                Ok(Value::String(self.string()?))
            }
            '{' => self.object(),
            '[' => self.array(),
            '/' => {
                self.js_only("a regular expression")?;
                self.regexp()
            }
            '&' => {
                self.js_only("an anchor")?;
                self.anchor()
            }
            '*' => {
                self.js_only("an alias")?;
                self.pos += 1;
                let n = self.label_number()?;
                match self.labels.get(&n) {
                    Some(_) => Ok(Value::Alias(n)),
                    None => self.fail_at(start, format!("*{n} names no anchor &{n} before it")),
                }
            }
            '-' | '.' | '0'..='9' => self.number(),
            _ => {
                let word = self.word();
                match word.as_str() {
                    "null" => {
                        self.pos += 4;
                        Ok(Value::Null)
                    }
                    "true" | "false" => {
                        self.pos += word.len();
                        Ok(Value::Bool(word == "true"))
                    }
                    "undefined" => {
                        self.js_only("undefined")?;
                        self.pos += word.len();
                        Ok(Value::Undefined)
                    }
                    "NaN" | "Infinity" => self.number(),
                    "new" => {
                        self.js_only("`new`")?;
                        self.pos += 3;
                        self.construct(start)
                    }
                    "Object.assign" => {
                        self.js_only("Object.assign")?;
                        self.pos += word.len();
                        self.assign()
                    }
                    "Object" => {
                        self.js_only("Object(…)")?;
                        self.pos += word.len();
                        self.expect('(')?;
                        let at = self.pos;
                        let inner = self.value()?;
                        self.expect(')')?;
                        match inner {
                            Value::BigInt(_) => Ok(Value::Boxed(Box::new(inner))),
                            _ => self.fail_at(at, "Object(…) takes a bigint here (Object(1n))"),
                        }
                    }
                    "__proto__" => self.fail("__proto__ is not a value"),
                    _ => self.fail(format!("unexpected `{c}`: expected a value")),
                }
            }
        }
    }

    fn label_number(&mut self) -> Result<u32, ParseError> {
        let digits: String = self.chars[self.pos..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        match digits.parse::<u32>() {
            Ok(n) => {
                self.pos += digits.len();
                Ok(n)
            }
            Err(_) => self.fail("expected an anchor number"),
        }
    }

    fn anchor(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let n = self.label_number()?;
        if self.labels.contains_key(&n) {
            return self.fail_at(start, format!("anchor &{n} is given twice"));
        }
        self.labels.insert(n, Label::Open);
        self.ws();
        let at = self.pos;
        let inner = self.value_inner()?;
        if !inner.is_object() || matches!(inner, Value::Anchor(..)) {
            return self.fail_at(at, format!("&{n} must be on an object, not a primitive"));
        }
        let label = match &inner {
            Value::ArrayBuffer(b) => Label::Buffer(b.len()),
            _ => Label::Other,
        };
        self.labels.insert(n, label);
        Ok(Value::Anchor(n, Box::new(inner)))
    }

    fn string(&mut self) -> Result<JsString, ParseError> {
        let start = self.pos;
        let Some(quote) = self.peek() else {
            return self.fail("expected a string");
        };
        self.pos += 1;
        let mut units: Vec<u16> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return self.fail_at(start, "unterminated string");
            };
            self.pos += 1;
            match c {
                c if c == quote => return Ok(JsString(units)),
                '\\' => self.escape(&mut units)?,
                '\n' | '\r' => return self.fail_at(self.pos - 1, "a line break inside a string"),
                c if self.json && (c as u32) < 0x20 => {
                    return self.fail_at(self.pos - 1, "a control character inside a JSON string");
                }
                c => {
                    let mut buf = [0u16; 2];
                    units.extend_from_slice(c.encode_utf16(&mut buf));
                }
            }
        }
    }

    fn hex(&mut self, n: usize) -> Result<u32, ParseError> {
        let digits: String = self.chars[self.pos..].iter().take(n).collect();
        if digits.len() != n || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return self.fail(format!("expected {n} hex digits"));
        }
        self.pos += n;
        u32::from_str_radix(&digits, 16).or_else(|_| self.fail("bad hex digits"))
    }

    fn escape(&mut self, units: &mut Vec<u16>) -> Result<(), ParseError> {
        let at = self.pos - 1;
        let Some(c) = self.peek() else {
            return self.fail_at(at, "unterminated escape");
        };
        self.pos += 1;
        let json_ok = matches!(c, '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u');
        if self.json && !json_ok {
            return self.fail_at(at, format!("`\\{c}` is not a JSON escape"));
        }
        let unit = match c {
            'n' => 0x0a,
            'r' => 0x0d,
            't' => 0x09,
            'b' => 0x08,
            'f' => 0x0c,
            'v' => 0x0b,
            '0' if !self.peek().is_some_and(|d| d.is_ascii_digit()) => 0,
            '1'..='9' | '0' => return self.fail_at(at, "octal escapes are not allowed"),
            'x' => self.hex(2)?,
            'u' if self.peek() == Some('{') && !self.json => {
                self.pos += 1;
                let digits: String = self.chars[self.pos..]
                    .iter()
                    .take_while(|c| c.is_ascii_hexdigit())
                    .collect();
                self.pos += digits.len();
                let code = u32::from_str_radix(&digits, 16)
                    .ok()
                    .filter(|&n| n <= 0x10ffff);
                let (Some(code), true) = (code, self.eat('}')) else {
                    return self.fail_at(at, "bad \\u{…} escape");
                };
                if code > 0xffff {
                    let c = code - 0x10000;
                    units.push(0xd800 + (c >> 10) as u16);
                    units.push(0xdc00 + (c & 0x3ff) as u16);
                    return Ok(());
                }
                code
            }
            'u' => self.hex(4)?,
            '\n' => return Ok(()),
            '\r' => {
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                return Ok(());
            }
            other => {
                let mut buf = [0u16; 2];
                units.extend_from_slice(other.encode_utf16(&mut buf));
                return Ok(());
            }
        };
        units.push(u16::try_from(unit).unwrap_or(0xfffd));
        Ok(())
    }

    /// A number or bigint literal, with an optional `-`.
    fn number(&mut self) -> Result<Value, ParseError> {
        self.ws();
        let start = self.pos;
        let negative = self.peek() == Some('-');
        if negative {
            self.pos += 1;
        }
        let body: String = self.chars[self.pos..]
            .iter()
            .enumerate()
            .take_while(|&(i, c)| {
                c.is_ascii_alphanumeric()
                    || *c == '.'
                    || ((*c == '+' || *c == '-')
                        && i > 0
                        && matches!(self.chars.get(self.pos + i - 1), Some('e' | 'E')))
            })
            .map(|(_, c)| *c)
            .collect();
        self.pos += body.chars().count();
        if let Some(digits) = body.strip_suffix('n') {
            if self.json {
                return self.fail_at(start, "a bigint is not JSON");
            }
            return self.bigint(start, negative, digits);
        }
        let json_number = |b: &str| {
            let int_end = b.find(['.', 'e', 'E']).unwrap_or(b.len());
            let int = &b[..int_end];
            let rest = &b[int_end..];
            let int_ok = int == "0"
                || (!int.is_empty()
                    && !int.starts_with('0')
                    && int.chars().all(|c| c.is_ascii_digit()));
            let frac_ok = match rest.strip_prefix('.') {
                Some(f) => {
                    let d = f.find(['e', 'E']).unwrap_or(f.len());
                    d > 0 && f[..d].chars().all(|c| c.is_ascii_digit())
                }
                None => true,
            };
            int_ok && frac_ok
        };
        let legacy_octal = body.len() > 1
            && body.starts_with('0')
            && body[1..].starts_with(|c: char| c.is_ascii_digit());
        if legacy_octal || (self.json && !json_number(&body)) {
            return self.fail_at(start, format!("`{body}` is not a number literal"));
        }
        let text = if negative {
            format!("-{body}")
        } else {
            body.clone()
        };
        match parse_number_text(&text) {
            Some(x) if !(negative && x.is_nan()) => Ok(Value::number(x)),
            _ => self.fail_at(start, format!("`{text}` is not a number literal")),
        }
    }

    fn bigint(&mut self, start: usize, negative: bool, digits: &str) -> Result<Value, ParseError> {
        let (radix, digits) = radix_of(digits).unwrap_or((10, digits));
        let ok = !digits.is_empty()
            && digits.chars().all(|c| c.is_digit(radix))
            && (radix != 10 || digits == "0" || !digits.starts_with('0'));
        if !ok {
            return self.fail_at(start, "not a bigint literal");
        }
        // Thousandths of a bit per digit (rounded down) bound the size before converting.
        let millibits_per_digit = match radix {
            2 => 1000,
            8 => 3000,
            10 => 3321,
            _ => 4000,
        };
        let significant = digits.trim_start_matches('0').len();
        if significant.saturating_mul(millibits_per_digit) / 1000 > BIGINT_BYTES_MAX * 8 {
            return self.fail_at(start, format!("a bigint over {BIGINT_BYTES_MAX} bytes"));
        }
        match BigInt::parse_digits(negative, digits, radix) {
            Some(n) if n.magnitude().len() <= BIGINT_BYTES_MAX => Ok(Value::BigInt(n)),
            Some(_) => self.fail_at(start, format!("a bigint over {BIGINT_BYTES_MAX} bytes")),
            None => self.fail_at(start, "not a bigint literal"),
        }
    }

    fn key(&mut self) -> Result<PropKey, ParseError> {
        self.ws();
        let at = self.pos;
        match self.peek() {
            Some('"') => {
                let s = self.string()?;
                if !self.json && s.units() == JsString::from("__proto__").units() {
                    return self.proto_error(at);
                }
                Ok(key_of_string(s))
            }
            _ if self.json => self.fail("expected a double-quoted key"),
            Some('\'') => {
                let s = self.string()?;
                if s.units() == JsString::from("__proto__").units() {
                    return self.proto_error(at);
                }
                Ok(key_of_string(s))
            }
            Some('[') => {
                self.pos += 1;
                self.ws();
                if !matches!(self.peek(), Some('"' | '\'')) {
                    return self.fail("a computed key must be a string: [\"name\"]");
                }
                let s = self.string()?;
                self.expect(']')?;
                Ok(key_of_string(s))
            }
            Some('0'..='9' | '.') => match self.number()? {
                Value::Number(n) => Ok(key_of_number(n.0)),
                _ => self.fail_at(at, "a bigint key"),
            },
            _ => {
                let word: String = self.chars[self.pos..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$'))
                    .collect();
                if word.is_empty() || word.starts_with(|c: char| c.is_ascii_digit()) {
                    return self.fail("expected a property name");
                }
                if word == "__proto__" {
                    return self.proto_error(at);
                }
                self.pos += word.len();
                Ok(PropKey::Name(JsString::from(word.as_str())))
            }
        }
    }

    fn proto_error<T>(&self, at: usize) -> Result<T, ParseError> {
        self.fail_at(
            at,
            "`__proto__:` would set the prototype; write [\"__proto__\"]: for a property",
        )
    }

    fn object(&mut self) -> Result<Value, ParseError> {
        self.expect('{')?;
        let mut props = Vec::new();
        loop {
            if self.eat('}') {
                break;
            }
            let key = self.key()?;
            self.expect(':')?;
            let value = self.value()?;
            props.push((key, value));
            if self.eat(',') {
                if self.json {
                    self.ws();
                    if self.peek() == Some('}') {
                        return self.fail("a trailing comma is not JSON");
                    }
                }
                continue;
            }
            self.expect('}')?;
            break;
        }
        Ok(Value::Object(canonical_props(props)))
    }

    /// An array literal's elements, `None` for a hole.
    fn elements(&mut self) -> Result<Vec<Option<Value>>, ParseError> {
        self.expect('[')?;
        let mut items = Vec::new();
        loop {
            if self.eat(']') {
                break;
            }
            if self.eat(',') {
                self.js_only("a hole")?;
                items.push(None);
                continue;
            }
            items.push(Some(self.value()?));
            if self.eat(',') {
                if self.json {
                    self.ws();
                    if self.peek() == Some(']') {
                        return self.fail("a trailing comma is not JSON");
                    }
                }
                continue;
            }
            self.expect(']')?;
            break;
        }
        Ok(items)
    }

    fn array(&mut self) -> Result<Value, ParseError> {
        let at = self.pos;
        let items = self.elements()?;
        let Ok(length) = u32::try_from(items.len()) else {
            return self.fail_at(at, "array too long");
        };
        if items.iter().all(Option::is_some) {
            return Ok(Value::Array(
                items.into_iter().flatten().collect(),
                Vec::new(),
            ));
        }
        let props = items
            .into_iter()
            .zip(0u32..)
            .filter_map(|(v, i)| Some((PropKey::Index(i), v?)))
            .collect();
        Ok(Value::SparseArray(length, props))
    }

    /// `Object.assign(array, { … })`: the array with the properties assigned in order.
    fn assign(&mut self) -> Result<Value, ParseError> {
        self.expect('(')?;
        self.ws();
        let at = self.pos;
        let target = self.value()?;
        self.expect(',')?;
        self.ws();
        let Value::Object(source) = self.object()? else {
            return self.fail("Object.assign's second argument must be an object literal");
        };
        self.expect(')')?;
        match target {
            Value::Array(mut items, mut props) => {
                let mut sparse: Option<(u32, Vec<(PropKey, Value)>)> = None;
                for (k, v) in source {
                    match (&mut sparse, k) {
                        (Some((length, all)), PropKey::Index(i)) => {
                            *length = (*length).max(i.saturating_add(1));
                            all.push((PropKey::Index(i), v));
                        }
                        (Some((_, all)), name) => all.push((name, v)),
                        (None, PropKey::Index(i)) if (i as usize) < items.len() => {
                            items[i as usize] = v;
                        }
                        (None, PropKey::Index(i)) if i as usize == items.len() => items.push(v),
                        (None, PropKey::Index(i)) => {
                            // A hole appears: from here on a holey array.
                            let mut all: Vec<(PropKey, Value)> = std::mem::take(&mut items)
                                .into_iter()
                                .zip(0u32..)
                                .map(|(v, i)| (PropKey::Index(i), v))
                                .collect();
                            all.append(&mut props);
                            all.push((PropKey::Index(i), v));
                            sparse = Some((i.saturating_add(1), all));
                        }
                        (None, name) => props.push((name, v)),
                    }
                }
                Ok(match sparse {
                    Some((length, all)) => Value::SparseArray(length, canonical_props(all)),
                    None => Value::Array(items, canonical_props(props)),
                })
            }
            Value::SparseArray(mut length, mut props) => {
                for (k, v) in source {
                    if let PropKey::Index(i) = k {
                        length = length.max(i.saturating_add(1));
                    }
                    props.push((k, v));
                }
                Ok(Value::SparseArray(length, canonical_props(props)))
            }
            _ => self.fail_at(at, "Object.assign's first argument must be an array"),
        }
    }

    fn regexp(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut body = String::new();
        let mut in_class = false;
        loop {
            let Some(c) = self.peek() else {
                return self.fail_at(start, "unterminated regular expression");
            };
            self.pos += 1;
            match c {
                '\n' | '\r' | '\u{2028}' | '\u{2029}' => {
                    return self.fail_at(self.pos - 1, "a line break inside a regular expression");
                }
                '/' if !in_class => break,
                '\\' => {
                    body.push(c);
                    match self.peek() {
                        Some('\n' | '\r' | '\u{2028}' | '\u{2029}') | None => {
                            return self.fail_at(start, "unterminated regular expression");
                        }
                        Some(next) => {
                            body.push(next);
                            self.pos += 1;
                        }
                    }
                    continue;
                }
                '[' => in_class = true,
                ']' => in_class = false,
                _ => {}
            }
            body.push(c);
        }
        if body.is_empty() || body.starts_with('*') {
            return self.fail_at(start, "not a regular expression literal");
        }
        let mut flags = 0u32;
        while let Some(c) = self.peek().filter(char::is_ascii_alphabetic) {
            let Some(&(_, bit)) = REGEXP_FLAGS.iter().find(|(l, _)| *l == c) else {
                return self.fail(format!("unknown regular expression flag `{c}`"));
            };
            if flags & bit != 0 {
                return self.fail(format!("regular expression flag `{c}` given twice"));
            }
            flags |= bit;
            self.pos += 1;
        }
        Ok(Value::RegExp(JsString::from(body.as_str()), flags))
    }

    /// After `new`: a constructor call.
    fn construct(&mut self, start: usize) -> Result<Value, ParseError> {
        self.ws();
        let name = self.word();
        self.pos += name.len();
        self.expect('(')?;
        let value = match name.as_str() {
            "Date" => {
                self.ws();
                let at = self.pos;
                let ms = match self.value()? {
                    Value::String(s) => match parse_iso(&s.to_string_lossy()) {
                        Some(ms) => ms,
                        None => {
                            return self.fail_at(
                                at,
                                "a date string must be YYYY-MM-DDTHH:MM:SS.sssZ (or give ms)",
                            );
                        }
                    },
                    Value::Number(n) => n.0,
                    _ => return self.fail_at(at, "new Date takes an ISO string or a number"),
                };
                // TimeClip.
                let ms = if !ms.is_finite() || ms.abs() > TIME_MAX_MS {
                    f64::NAN
                } else {
                    ms.trunc() + 0.0
                };
                Value::Date(Number(ms))
            }
            "Map" => {
                let mut entries: Vec<(Value, Value)> = Vec::new();
                if !self.peek_close() {
                    self.ws();
                    let at = self.pos;
                    self.expect('[')?;
                    loop {
                        if self.eat(']') {
                            break;
                        }
                        self.ws();
                        let entry_at = self.pos;
                        let Value::Array(mut pair, props) = self.value()? else {
                            return self.fail_at(entry_at, "a Map entry must be [key, value]");
                        };
                        if pair.len() != 2 || !props.is_empty() {
                            return self.fail_at(entry_at, "a Map entry must be [key, value]");
                        }
                        let v = pair.pop().unwrap_or(Value::Undefined);
                        let mut k = pair.pop().unwrap_or(Value::Undefined);
                        if let Value::Number(n) = &mut k
                            && n.0 == 0.0
                        {
                            n.0 = 0.0;
                        }
                        match entries.iter_mut().find(|(e, _)| same_value_zero(e, &k)) {
                            Some(slot) => slot.1 = v,
                            None => entries.push((k, v)),
                        }
                        if !self.eat(',') {
                            self.expect(']')?;
                            break;
                        }
                    }
                    let _ = at;
                }
                Value::Map(entries)
            }
            "Set" => {
                let mut items: Vec<Value> = Vec::new();
                if !self.peek_close() {
                    self.ws();
                    let at = self.pos;
                    for item in self.elements()? {
                        let Some(mut v) = item else {
                            return self.fail_at(at, "a Set of an array with holes");
                        };
                        if let Value::Number(n) = &mut v
                            && n.0 == 0.0
                        {
                            n.0 = 0.0;
                        }
                        if !items.iter().any(|e| same_value_zero(e, &v)) {
                            items.push(v);
                        }
                    }
                }
                Value::Set(items)
            }
            "Array" => {
                self.ws();
                let at = self.pos;
                match self.value()? {
                    Value::Number(n)
                        if n.0 >= 0.0 && n.0 <= f64::from(u32::MAX) && n.0.fract() == 0.0 =>
                    {
                        #[allow(clippy::cast_possible_truncation, reason = "checked in range")]
                        let length = n.0 as u32;
                        Value::SparseArray(length, Vec::new())
                    }
                    _ => return self.fail_at(at, "new Array takes one length (0 ..= 2^32 - 1)"),
                }
            }
            "ArrayBuffer" => {
                self.ws();
                let at = self.pos;
                let len = self.length_arg(at)?;
                Value::ArrayBuffer(vec![0; len])
            }
            "Number" | "String" | "Boolean" => {
                self.ws();
                let at = self.pos;
                let inner = self.value()?;
                let fits = matches!(
                    (name.as_str(), &inner),
                    ("Number", Value::Number(_))
                        | ("String", Value::String(_))
                        | ("Boolean", Value::Bool(_))
                );
                if !fits {
                    return self.fail_at(
                        at,
                        format!("new {name} takes a {} literal", name.to_lowercase()),
                    );
                }
                Value::Boxed(Box::new(inner))
            }
            other => match ViewKind::ALL.into_iter().find(|k| k.name() == other) {
                Some(kind) => self.view(kind)?,
                None => {
                    return self.fail_at(start, format!("`new {other}` is not a value this reads"));
                }
            },
        };
        self.expect(')')?;
        if matches!(value, Value::View { .. })
            && self.eat_word(".buffer")
            && let Value::View { buffer, .. } = value
        {
            return Ok(*buffer);
        }
        Ok(value)
    }

    fn peek_close(&mut self) -> bool {
        self.ws();
        self.peek() == Some(')')
    }

    fn length_arg(&mut self, at: usize) -> Result<usize, ParseError> {
        match self.value()? {
            Value::Number(n) if n.0 >= 0.0 && n.0.fract() == 0.0 && n.0 <= INPUT_MAX as f64 => {
                #[allow(clippy::cast_possible_truncation, reason = "checked in range")]
                let len = n.0 as usize;
                Ok(len)
            }
            _ => self.fail_at(at, format!("expected a length (0 ..= {INPUT_MAX})")),
        }
    }

    /// The arguments of `new <TypedArray or DataView>(…)`, up to the `)`.
    fn view(&mut self, kind: ViewKind) -> Result<Value, ParseError> {
        let size = kind.element_size();
        let whole = |bytes: Vec<u8>| {
            let byte_length = bytes.len();
            Value::View {
                kind,
                buffer: Box::new(Value::ArrayBuffer(bytes)),
                byte_offset: 0,
                byte_length,
            }
        };
        if self.peek_close() {
            if kind == ViewKind::DataView {
                return self.fail("new DataView needs a buffer");
            }
            return Ok(whole(Vec::new()));
        }
        self.ws();
        let at = self.pos;
        if self.peek() == Some('[') {
            if kind == ViewKind::DataView {
                return self.fail("new DataView takes a buffer, not an array");
            }
            let mut bytes = Vec::new();
            for item in self.elements()? {
                match (kind, item) {
                    (
                        ViewKind::BigInt64Array | ViewKind::BigUint64Array,
                        Some(Value::BigInt(n)),
                    ) => {
                        bytes.extend_from_slice(&bigint_low64(&n).to_le_bytes());
                    }
                    (ViewKind::BigInt64Array | ViewKind::BigUint64Array, _) => {
                        return self
                            .fail_at(at, format!("{} elements must be bigints", kind.name()));
                    }
                    (_, Some(Value::Number(n))) => element_bytes(kind, n.0, &mut bytes),
                    _ => {
                        return self
                            .fail_at(at, format!("{} elements must be numbers", kind.name()));
                    }
                }
                if bytes.len() > INPUT_MAX {
                    return self.fail_at(at, "typed array too long");
                }
            }
            return Ok(whole(bytes));
        }
        if matches!(self.peek(), Some('0'..='9')) {
            if kind == ViewKind::DataView {
                return self.fail("new DataView takes a buffer, not a length");
            }
            let len = self.length_arg(at)?;
            let Some(bytes) = len.checked_mul(size).filter(|&b| b <= INPUT_MAX) else {
                return self.fail_at(at, "typed array too long");
            };
            return Ok(whole(vec![0; bytes]));
        }
        // A buffer: same depth as the view, as the decoder counts it.
        self.depth -= 1;
        let buffer = self.value();
        self.depth += 1;
        let buffer = buffer?;
        let buffer_len = match &buffer {
            Value::ArrayBuffer(b) => b.len(),
            Value::Anchor(_, inner) => match &**inner {
                Value::ArrayBuffer(b) => b.len(),
                _ => return self.fail_at(at, "expected an ArrayBuffer"),
            },
            Value::Alias(n) => match self.labels.get(n) {
                Some(Label::Buffer(len)) => *len,
                _ => return self.fail_at(at, format!("*{n} is not an ArrayBuffer")),
            },
            _ => return self.fail_at(at, "expected an ArrayBuffer, an array or a length"),
        };
        let mut byte_offset = 0;
        let mut byte_length = None;
        if self.eat(',') {
            self.ws();
            let off_at = self.pos;
            byte_offset = self.length_arg(off_at)?;
            if self.eat(',') {
                self.ws();
                let len_at = self.pos;
                let count = self.length_arg(len_at)?;
                byte_length = Some(count.saturating_mul(size));
            }
        }
        let byte_length = match byte_length {
            Some(b) => b,
            None if byte_offset <= buffer_len && (buffer_len - byte_offset) % size == 0 => {
                buffer_len - byte_offset
            }
            None => {
                return self.fail_at(at, format!(
                    "the buffer's {buffer_len} bytes after offset {byte_offset} are not whole {} elements",
                    kind.name()
                ));
            }
        };
        if byte_offset % size != 0
            || byte_offset
                .checked_add(byte_length)
                .is_none_or(|end| end > buffer_len)
        {
            return self.fail_at(at, format!(
                "a {} of {byte_length} bytes at offset {byte_offset} does not fit the {buffer_len}-byte buffer",
                kind.name()
            ));
        }
        Ok(Value::View {
            kind,
            buffer: Box::new(buffer),
            byte_offset,
            byte_length,
        })
    }
}

/// Whether `source` (a regexp's `source` as V8 keeps it) prints as a literal that reads back.
pub(crate) fn regexp_source_prints(source: &JsString) -> bool {
    let Ok(text) = String::from_utf16(source.units()) else {
        return false;
    };
    let printed = format!("/{text}/");
    matches!(parse(&printed), Ok(Value::RegExp(s, 0)) if &s == source)
}
