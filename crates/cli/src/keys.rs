//! Key literals as Deno code writes them, parsed into [`Key`]s and printed back.
//!
//! A key is a JavaScript array of parts: `["users", 1n]`. The parts:
//!
//! | literal | part |
//! |---|---|
//! | `"text"`, `'text'` (JavaScript escapes: `\n`, `\t`, `\xHH`, `\uHHHH`, `\u{H…}`, …) | string |
//! | `1`, `-2.5`, `1e21`, `.5`, `0x1f`, `Infinity`, `-Infinity`, `NaN`, `-0` | number (`f64`) |
//! | `1n`, `-42n`, `0xffn` | bigint |
//! | `true`, `false` | boolean |
//! | `new Uint8Array([1, 2])`, `new Uint8Array()` | bytes |
//! | `b"\x01\x02ab"` | bytes, the short form (printable ASCII as is, other bytes `\xHH`) |
//!
//! Two extensions to JavaScript, both so that every key can be printed and read back:
//! `b"…"` (bytes; it is how [`Key`]'s `Display` prints them) and `-NaN` (a NaN with its sign
//! bit set, a different key from `NaN`; JavaScript has no literal for it). A trailing comma
//! is allowed, as in JavaScript. A malformed literal is one [`KeyError`] naming the column.
//!
//! [`format_key`] prints a key in this syntax, and reading its output gives the same key.

use std::fmt::{self, Write};

use tuplekv_engine::codec::BigInt;
use tuplekv_engine::{Key, KeyPart};

/// Why a key literal could not be read: what was wrong and where (a 1-based column, in
/// characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyError {
    /// The 1-based character column of the problem.
    pub(crate) column: usize,
    /// What is wrong there.
    pub(crate) message: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed key at column {}: {}",
            self.column, self.message
        )
    }
}

impl std::error::Error for KeyError {}

/// The longest hex/octal/binary literal for a *number* part: it must fit a `u64`.
const RADIX_NUMBER_BITS_MAX: u32 = 64;
const _: () = assert!(u64::BITS == RADIX_NUMBER_BITS_MAX);

/// Parses a key literal such as `["users", 1n]`.
///
/// # Errors
/// A [`KeyError`] naming the column of the first problem (including a bigint too large for
/// a key).
pub(crate) fn parse_key(text: &str) -> Result<Key, KeyError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
    };
    p.skip_ws();
    p.expect('[', "a key starts with `[`")?;
    let mut parts = Vec::new();
    loop {
        p.skip_ws();
        if p.eat(']') {
            break;
        }
        parts.push(p.part()?);
        p.skip_ws();
        if p.eat(',') {
            continue;
        }
        p.expect(']', "expected `,` or `]` after a key part")?;
        break;
    }
    p.skip_ws();
    if p.pos < p.chars.len() {
        return Err(p.error("unexpected text after the closing `]`"));
    }
    Key::new(parts).map_err(|e| KeyError {
        column: 1,
        message: e.to_string(),
    })
}

/// Prints a key in the literal syntax [`parse_key`] reads. Equal to [`Key`]'s `Display`
/// except where that cannot be read back: a negative NaN prints `-NaN`, and a NUL before a
/// digit in a string prints `\x00` (JavaScript reads `"\01"` as an octal escape).
pub(crate) fn format_key(key: &Key) -> String {
    let mut out = String::from("[");
    for (i, part) in key.parts().iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        format_part(&mut out, part);
    }
    out.push(']');
    out
}

/// Appends one part in the literal syntax.
pub(crate) fn format_part(out: &mut String, part: &KeyPart) {
    match part {
        KeyPart::Number(x) if x.is_nan() && x.is_sign_negative() => out.push_str("-NaN"),
        KeyPart::String(s) => format_string(out, s),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// Appends a string literal in double quotes.
fn format_string(out: &mut String, s: &str) {
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' if chars.peek().is_some_and(char::is_ascii_digit) => out.push_str("\\x00"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> KeyError {
        self.error_at(self.pos, message)
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> KeyError {
        KeyError {
            column: pos + 1,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_word(&mut self, word: &str) -> bool {
        let n = word.chars().count();
        let matches = self
            .chars
            .get(self.pos..self.pos + n)
            .is_some_and(|s| s.iter().copied().eq(word.chars()));
        // A word must not run on into an identifier (`trueish`).
        let ends = !self
            .chars
            .get(self.pos + n)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '$');
        if matches && ends {
            self.pos += n;
        }
        matches && ends
    }

    fn expect(&mut self, c: char, message: &str) -> Result<(), KeyError> {
        if self.eat(c) {
            Ok(())
        } else if self.peek().is_none() {
            Err(self.error(format!("{message}, found the end of the key")))
        } else {
            Err(self.error(message))
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn part(&mut self) -> Result<KeyPart, KeyError> {
        match self.peek() {
            Some('"' | '\'') => self.string().map(KeyPart::String),
            Some('b') if self.peek_at(1) == Some('"') => self.byte_string().map(KeyPart::Bytes),
            Some('n') => self.uint8array().map(KeyPart::Bytes),
            Some('t') if self.eat_word("true") => Ok(KeyPart::Bool(true)),
            Some('f') if self.eat_word("false") => Ok(KeyPart::Bool(false)),
            Some(c) if c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'I' | 'N') => {
                self.number()
            }
            Some(_) => Err(self.error(
                "expected a key part: a string, number, bigint (`1n`), boolean, \
                 `new Uint8Array([...])` or `b\"...\"`",
            )),
            None => Err(self.error("expected a key part, found the end of the key")),
        }
    }

    fn string(&mut self) -> Result<String, KeyError> {
        let start = self.pos;
        let quote = self.bump().unwrap_or('"');
        let mut out = String::new();
        // A UTF-16 high surrogate waiting for its low half, with its position.
        let mut high: Option<(u16, usize)> = None;
        loop {
            let at = self.pos;
            let Some(c) = self.bump() else {
                return Err(self.error_at(start, "unterminated string"));
            };
            let unit = match c {
                c if c == quote => break,
                '\n' | '\r' => return Err(self.error_at(at, "line break in a string")),
                '\\' => match self.escape(at)? {
                    Escaped::Char(c) => Unit::Char(c),
                    Escaped::Unit(u) => Unit::Utf16(u),
                    Escaped::Nothing => continue,
                },
                c => Unit::Char(c),
            };
            match (high.take(), unit) {
                (Some((h, _)), Unit::Utf16(l)) if (0xdc00..0xe000).contains(&l) => {
                    let code = 0x10000 + ((u32::from(h) - 0xd800) << 10) + (u32::from(l) - 0xdc00);
                    out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                (Some((_, pos)), _) => {
                    return Err(
                        self.error_at(pos, "lone surrogate: a key string must be valid Unicode")
                    );
                }
                (None, Unit::Utf16(u)) if (0xd800..0xdc00).contains(&u) => high = Some((u, at)),
                (None, Unit::Utf16(u)) => match char::from_u32(u32::from(u)) {
                    Some(c) => out.push(c),
                    None => {
                        return Err(
                            self.error_at(at, "lone surrogate: a key string must be valid Unicode")
                        );
                    }
                },
                (None, Unit::Char(c)) => out.push(c),
            }
        }
        if let Some((_, pos)) = high {
            return Err(self.error_at(pos, "lone surrogate: a key string must be valid Unicode"));
        }
        Ok(out)
    }

    /// Reads the escape after a backslash at `at` in a string.
    fn escape(&mut self, at: usize) -> Result<Escaped, KeyError> {
        let Some(c) = self.bump() else {
            return Err(self.error_at(at, "unterminated string"));
        };
        Ok(match c {
            'n' => Escaped::Char('\n'),
            'r' => Escaped::Char('\r'),
            't' => Escaped::Char('\t'),
            'b' => Escaped::Char('\u{8}'),
            'f' => Escaped::Char('\u{c}'),
            'v' => Escaped::Char('\u{b}'),
            // Deno code is an ES module, so strict: there `\01` is a syntax error, never an
            // octal escape. Reading it as NUL then `1` is what `Key`'s `Display` means by it.
            '0' => Escaped::Char('\0'),
            '1'..='9' => {
                return Err(self.error_at(
                    at,
                    "octal escapes are not allowed; write `\\xHH` or `\\u{...}`",
                ));
            }
            'x' => {
                let v = self.hex_digits(2, at)?;
                Escaped::Char(char::from_u32(v).unwrap_or('\0'))
            }
            'u' if self.eat('{') => {
                let begin = self.pos;
                while self.peek().is_some_and(|d| d.is_ascii_hexdigit()) {
                    self.pos += 1;
                }
                let digits: String = self.chars[begin..self.pos].iter().collect();
                if digits.is_empty() || !self.eat('}') {
                    return Err(self.error_at(at, "malformed `\\u{...}` escape"));
                }
                let v = u32::from_str_radix(&digits, 16)
                    .ok()
                    .filter(|v| *v <= 0x10ffff)
                    .ok_or_else(|| self.error_at(at, "`\\u{...}` escape above 10FFFF"))?;
                match u16::try_from(v) {
                    Ok(u) => Escaped::Unit(u),
                    Err(_) => Escaped::Char(char::from_u32(v).unwrap_or('\0')),
                }
            }
            'u' => {
                let v = self.hex_digits(4, at)?;
                Escaped::Unit(u16::try_from(v).unwrap_or(0))
            }
            '\n' => Escaped::Nothing,
            '\r' => {
                self.eat('\n');
                Escaped::Nothing
            }
            c => Escaped::Char(c),
        })
    }

    fn hex_digits(&mut self, n: usize, at: usize) -> Result<u32, KeyError> {
        let digits: String = self
            .chars
            .get(self.pos..self.pos + n)
            .map(|s| s.iter().collect())
            .unwrap_or_default();
        if digits.chars().count() != n || !digits.chars().all(|d| d.is_ascii_hexdigit()) {
            return Err(self.error_at(at, format!("escape needs {n} hex digits")));
        }
        self.pos += n;
        u32::from_str_radix(&digits, 16).map_err(|_| self.error_at(at, "bad hex digits"))
    }

    /// `b"..."`: printable ASCII as is, other bytes as `\xHH` (also `\\`, `\"`, `\n`, `\r`,
    /// `\t`, `\0`).
    fn byte_string(&mut self) -> Result<Vec<u8>, KeyError> {
        let start = self.pos;
        self.pos += 2;
        let mut out = Vec::new();
        loop {
            let at = self.pos;
            let Some(c) = self.bump() else {
                return Err(self.error_at(start, "unterminated byte string"));
            };
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let byte = match self.bump() {
                        Some('x') => self.hex_digits(2, at).map(|v| v as u8)?,
                        Some('n') => b'\n',
                        Some('r') => b'\r',
                        Some('t') => b'\t',
                        Some('0') => 0,
                        Some('\\') => b'\\',
                        Some('"') => b'"',
                        Some('\'') => b'\'',
                        _ => {
                            return Err(
                                self.error_at(at, "unknown escape in a byte string (use `\\xHH`)")
                            );
                        }
                    };
                    out.push(byte);
                }
                c if c.is_ascii() && !c.is_ascii_control() => out.push(c as u8),
                _ => {
                    return Err(self.error_at(
                        at,
                        "a byte string holds printable ASCII; write other bytes as `\\xHH`",
                    ));
                }
            }
        }
    }

    /// `new Uint8Array([1, 2, 3])` or `new Uint8Array()`.
    fn uint8array(&mut self) -> Result<Vec<u8>, KeyError> {
        let start = self.pos;
        if !self.eat_word("new") {
            return Err(self.error("expected a key part"));
        }
        self.skip_ws();
        if !self.eat_word("Uint8Array") {
            return Err(self.error("expected `Uint8Array` after `new`"));
        }
        self.skip_ws();
        self.expect('(', "expected `(` after `new Uint8Array`")?;
        self.skip_ws();
        let mut out = Vec::new();
        if self.eat('[') {
            loop {
                self.skip_ws();
                if self.eat(']') {
                    break;
                }
                let at = self.pos;
                let begin = self.pos;
                while self.peek().is_some_and(|d| d.is_ascii_alphanumeric()) {
                    self.pos += 1;
                }
                let digits: String = self.chars[begin..self.pos].iter().collect();
                let byte = parse_radix_integer(&digits)
                    .and_then(|v| u8::try_from(v).ok())
                    .ok_or_else(|| {
                        self.error_at(at, "a Uint8Array element must be an integer 0..=255")
                    })?;
                out.push(byte);
                self.skip_ws();
                if self.eat(',') {
                    continue;
                }
                self.expect(']', "expected `,` or `]` in the Uint8Array's elements")?;
                break;
            }
            self.skip_ws();
        }
        if !self.eat(')') {
            return Err(self.error_at(start, "expected `new Uint8Array([...])`"));
        }
        Ok(out)
    }

    /// A number or a bigint: an optional sign, then digits, `Infinity` or `NaN`, and `n` for
    /// a bigint.
    fn number(&mut self) -> Result<KeyPart, KeyError> {
        let start = self.pos;
        let negative = match self.peek() {
            Some('-') => {
                self.pos += 1;
                true
            }
            Some('+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let sign = if negative { -1.0 } else { 1.0 };
        if self.eat_word("Infinity") {
            return Ok(KeyPart::Number(sign * f64::INFINITY));
        }
        if self.eat_word("NaN") {
            let nan = if negative { -f64::NAN } else { f64::NAN };
            return Ok(KeyPart::Number(nan));
        }
        let literal = self.scan_numeric();
        let bad = |this: &Self| {
            let text: String = this.chars[start..this.pos].iter().collect();
            this.error_at(start, format!("`{text}` is not a number or bigint"))
        };
        if let Some(int) = literal.strip_suffix('n') {
            let (radix, digits) = radix_of(int).unwrap_or((10, int));
            let value = Some(digits)
                .filter(|d| !d.is_empty() && d.chars().all(|c| c.is_digit(radix)))
                .and_then(|d| BigInt::parse_bytes(d.as_bytes(), radix))
                .ok_or_else(|| bad(self))?;
            return Ok(KeyPart::BigInt(if negative { -value } else { value }));
        }
        if radix_of(&literal).is_some() {
            let v = parse_radix_integer(&literal).ok_or_else(|| {
                self.error_at(
                    start,
                    format!("a hex, octal or binary number must fit {RADIX_NUMBER_BITS_MAX} bits"),
                )
            })?;
            // `as` rounds to the nearest double, as JavaScript does.
            return Ok(KeyPart::Number(sign * v as f64));
        }
        let decimal = literal
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
            && literal.chars().any(|c| c.is_ascii_digit());
        match literal.parse::<f64>() {
            Ok(v) if decimal => Ok(KeyPart::Number(sign * v)),
            _ => Err(bad(self)),
        }
    }

    /// Reads the characters of a numeric literal (after its sign), without `_` separators.
    fn scan_numeric(&mut self) -> String {
        let mut literal = String::new();
        while let Some(c) = self.peek() {
            let exponent_sign = matches!(c, '+' | '-')
                && literal.ends_with(['e', 'E'])
                && radix_of(&literal).is_none();
            if !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || exponent_sign) {
                break;
            }
            if c != '_' {
                literal.push(c);
            }
            self.pos += 1;
        }
        literal
    }
}

/// The radix and digits of a `0x`, `0o` or `0b` literal; `None` for anything else.
fn radix_of(literal: &str) -> Option<(u32, &str)> {
    let radix = match literal.get(..2)? {
        "0x" | "0X" => 16,
        "0o" | "0O" => 8,
        "0b" | "0B" => 2,
        _ => return None,
    };
    Some((radix, literal.get(2..)?))
}

/// A decimal, `0x`, `0o` or `0b` integer that fits a `u64` ([`RADIX_NUMBER_BITS_MAX`] bits).
fn parse_radix_integer(literal: &str) -> Option<u64> {
    let (radix, digits) = radix_of(literal).unwrap_or((10, literal));
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

enum Escaped {
    Char(char),
    Unit(u16),
    Nothing,
}

enum Unit {
    Char(char),
    Utf16(u16),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tuplekv_engine::key;

    fn parsed(text: &str) -> Key {
        parse_key(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn error_of(text: &str) -> String {
        match parse_key(text) {
            Ok(k) => panic!("{text} parsed as {k}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn deno_literals_mean_the_same_key() {
        assert_eq!(parsed(r#"["users", 1n]"#), key!["users", 1]);
        assert_eq!(parsed("['users', 1]"), key!["users", 1.0]);
        assert_eq!(
            parsed("[true, false, -2.5, 1e21]"),
            key![true, false, -2.5, 1e21]
        );
        assert_eq!(
            parsed("[new Uint8Array([1, 2, 0xff])]"),
            key![vec![1u8, 2, 255]]
        );
        assert_eq!(parsed("[new Uint8Array()]"), key![Vec::<u8>::new()]);
        assert_eq!(parsed(r#"[b"\x01a\\"]"#), key![vec![1u8, b'a', b'\\']]);
        assert_eq!(parsed("[-0]"), key![-0.0]);
        assert_ne!(parsed("[-0]"), parsed("[0]"));
        assert_eq!(parsed("[0x10, 0x10n, -42n]"), key![16.0, 16, -42]);
        assert_eq!(
            parsed("[Infinity, -Infinity, .5]"),
            key![f64::INFINITY, f64::NEG_INFINITY, 0.5]
        );
        assert_eq!(parsed(" [ 'a' , ] "), key!["a"]);
        assert_eq!(parsed("[]"), Key::empty());
        assert_eq!(
            parsed("[1_000, 0x1_0, 1e-3, 2E+2, 0b101n, 0o17n]"),
            key![1000.0, 16.0, 1e-3, 200.0, 5, 15]
        );
        assert_eq!(
            parsed(r#"["\ud83d\ude2e \u{1F62E} \x41\u0042"]"#),
            key!["😮 😮 AB"]
        );
    }

    #[test]
    fn malformed_literals_name_their_column() {
        assert_eq!(
            error_of(r#"["a", ]x"#),
            "malformed key at column 8: unexpected text after the closing `]`"
        );
        assert!(error_of("users").starts_with("malformed key at column 1:"));
        assert!(error_of(r#"["a" 1]"#).starts_with("malformed key at column 6:"));
        assert!(error_of(r#"["a"#).contains("column 2: unterminated string"));
        assert!(error_of("[1x]").contains("column 2: `1x` is not a number"));
        assert!(error_of("[new Uint8Array([256])]").contains("0..=255"));
        assert!(error_of(r#"["\ud800"]"#).contains("lone surrogate"));
        assert!(error_of("[undefined]").contains("expected a key part"));
        assert!(error_of("[1.5n]").contains("not a number or bigint"));
        assert!(error_of("[0x1ffffffffffffffff]").contains("must fit 64 bits"));
        assert!(error_of("[0x1gn]").contains("not a number or bigint"));
        assert!(error_of("[1e]").contains("not a number or bigint"));
        assert!(error_of("[.]").contains("not a number or bigint"));
        assert!(error_of("[").contains("found the end"));
        let huge = format!("[{}n]", "9".repeat(700));
        assert!(error_of(&huge).contains("bigint"), "{}", error_of(&huge));
    }

    #[test]
    fn printing_escapes_what_cannot_be_read_back_otherwise() {
        assert_eq!(format_key(&key![-f64::NAN, f64::NAN]), "[-NaN, NaN]");
        assert_eq!(format_key(&key!["\u{0}1\u{0}"]), r#"["\x001\0"]"#);
        assert_eq!(parsed(&format_key(&key!["\u{0}1"])), key!["\u{0}1"]);
        assert_eq!(parsed(&key!["\u{0}1"].to_string()), key!["\u{0}1"]);
    }

    /// `-NaN` is the one part `Display` cannot print distinctly; it becomes `NaN` here.
    fn without_negative_nan(key: Key) -> Key {
        let parts = key
            .into_parts()
            .into_iter()
            .map(|p| match p {
                KeyPart::Number(x) if x.is_nan() => KeyPart::Number(f64::NAN),
                p => p,
            })
            .collect();
        Key::new(parts).expect("same parts")
    }

    proptest! {
        #[test]
        fn parse_of_display_is_the_key(key in tuplekv_testkit::strategies::key().prop_map(without_negative_nan)) {
            prop_assert_eq!(parse_key(&key.to_string()).expect("parses"), key);
        }

        #[test]
        fn parse_of_format_is_the_key(key in tuplekv_testkit::strategies::key()) {
            let text = format_key(&key);
            let back = parse_key(&text).expect("parses");
            // Equal as keys, and the same encoding (so -NaN stays -NaN).
            prop_assert_eq!(tuplekv_engine::codec::encode_key(&back), tuplekv_engine::codec::encode_key(&key));
        }
    }
}
