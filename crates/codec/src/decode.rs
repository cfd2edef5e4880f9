//! The decoder: bytes → key parts, owned ([`decode_key`]) or borrowed ([`decode_parts`]), and
//! an allocation-free validator ([`validate_key`]).
//!
//! The decoder accepts exactly the canonical encodings, so that every key has one byte form
//! and `Key` equality is byte equality. Real Deno also reads a few non-canonical forms (a
//! bigint with a leading zero byte, a long-form bigint that fits the short form, a NaN with a
//! payload) as values whose re-encoding differs from the stored bytes; this decoder rejects
//! them with [`DecodeErrorKind::NonCanonical`].
//!
//! Decoding never indexes a slice directly and never panics, whatever the input.

use std::borrow::Cow;
use std::fmt;

use memchr::memchr;
use num_bigint::{BigInt, BigUint, Sign};
use thiserror::Error;

use crate::BIGINT_MAGNITUDE_MAX_BYTES;
use crate::key::Key;
use crate::part::KeyPart;
use crate::tags::{
    BYTES, CANONICAL_NAN_NEG, CANONICAL_NAN_POS, DOUBLE, ESCAPE, FALSE, INT_SHORT_MAX, INT_ZERO,
    NEG_INT_LONG, NUL, POS_INT_LONG, STRING, TRUE, ordered_to_double,
};

/// A byte string that is not the canonical encoding of a key.
///
/// `offset` is the position in the input where the problem is: the type code of a truncated
/// or non-canonical part, the first invalid byte of a string, or an unknown type code.
///
/// ```
/// use tuplekv_codec::{DecodeErrorKind, decode_key};
///
/// let err = decode_key(b"\x02abc").unwrap_err();
/// assert_eq!(err.offset(), 0);
/// assert_eq!(err.to_string(), "invalid key at byte 0: input ends inside a string part");
/// assert_eq!(decode_key(b"\x03").unwrap_err().kind(), &DecodeErrorKind::UnknownTypeCode(3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid key at byte {offset}: {kind}")]
pub struct DecodeError {
    offset: usize,
    kind: DecodeErrorKind,
}

impl DecodeError {
    fn new(offset: usize, kind: DecodeErrorKind) -> Self {
        DecodeError { offset, kind }
    }

    /// The byte offset in the input where decoding failed.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Why decoding failed.
    pub fn kind(&self) -> &DecodeErrorKind {
        &self.kind
    }
}

/// The reason a byte string is not a key.
///
/// The grammar leaves no room for some failures one might expect: a stray `00` after a part is
/// read as a type code (so a missing `ff` escape shows up as `UnknownTypeCode(0)`), there are
/// no trailing bytes because every byte after a part starts the next part, and a bigint
/// longer than 255 bytes cannot be expressed because its length is one byte.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ends inside a part of this type (no terminator, or fewer payload bytes than
    /// the type code or length byte announce).
    Truncated(PartType),
    /// A byte where a type code belongs is not one of `01 02 0b..=1d 21 26 27`.
    UnknownTypeCode(u8),
    /// A string part's payload is not valid UTF-8.
    InvalidUtf8,
    /// The part is well-formed but not in the one canonical form this codec writes.
    NonCanonical(NonCanonical),
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeErrorKind::Truncated(t) => write!(f, "input ends inside a {t} part"),
            DecodeErrorKind::UnknownTypeCode(0) => f.write_str(
                "unexpected byte 0x00 where a type code belongs \
                 (a NUL inside a bytes or string part must be escaped as 00 ff)",
            ),
            DecodeErrorKind::UnknownTypeCode(t) => write!(f, "unknown type code 0x{t:02x}"),
            DecodeErrorKind::InvalidUtf8 => f.write_str("string part is not valid UTF-8"),
            DecodeErrorKind::NonCanonical(n) => write!(f, "non-canonical encoding: {n}"),
        }
    }
}

/// The type of a key part, as named in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartType {
    /// A bytes part.
    Bytes,
    /// A string part.
    String,
    /// A bigint part.
    BigInt,
    /// A number (double) part.
    Number,
}

impl fmt::Display for PartType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartType::Bytes => "bytes",
            PartType::String => "string",
            PartType::BigInt => "bigint",
            PartType::Number => "number",
        })
    }
}

/// A well-formed but non-canonical encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NonCanonical {
    /// A bigint magnitude with a leading zero byte (`15 00` instead of `14`).
    BigIntLeadingZero,
    /// A long-form bigint (`1d`/`0b` with a length byte) whose magnitude fits in 8 bytes.
    BigIntLongForm,
    /// A NaN other than the canonical positive or negative quiet NaN.
    NanPayload,
}

impl fmt::Display for NonCanonical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NonCanonical::BigIntLeadingZero => "bigint magnitude has a leading zero byte",
            NonCanonical::BigIntLongForm => "long-form bigint whose magnitude fits in 8 bytes",
            NonCanonical::NanPayload => "NaN with a non-canonical payload",
        })
    }
}

/// A bigint key part borrowed from encoded bytes, converted on demand.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BigIntRef<'a> {
    negative: bool,
    /// The magnitude as stored: big-endian, ones'-complemented when negative, no leading zero.
    stored: &'a [u8],
}

impl<'a> BigIntRef<'a> {
    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.stored.is_empty()
    }

    /// The number of bytes in the magnitude (0 for zero).
    pub fn magnitude_len(&self) -> usize {
        self.stored.len()
    }

    fn mask(&self) -> u8 {
        if self.negative { 0xff } else { 0x00 }
    }

    /// The magnitude, if it fits in a `u64`.
    fn magnitude_u64(&self) -> Option<u64> {
        if self.stored.len() > INT_SHORT_MAX {
            return None;
        }
        let mask = self.mask();
        Some(
            self.stored
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(b ^ mask)),
        )
    }

    /// The value as an `i64`, if it fits.
    ///
    /// ```
    /// use tuplekv_codec::{KeyPartRef, decode_parts, encode_key, key};
    ///
    /// let bytes = encode_key(&key![-42]);
    /// let Some(Ok(KeyPartRef::BigInt(i))) = decode_parts(&bytes).next() else { panic!() };
    /// assert_eq!(i.to_i64(), Some(-42));
    /// ```
    pub fn to_i64(&self) -> Option<i64> {
        let m = self.magnitude_u64()?;
        if self.negative {
            0i64.checked_sub_unsigned(m)
        } else {
            i64::try_from(m).ok()
        }
    }

    /// The value as a `u64`, if it is non-negative and fits.
    pub fn to_u64(&self) -> Option<u64> {
        if self.negative {
            None
        } else {
            self.magnitude_u64()
        }
    }

    /// The value as an owned [`BigInt`].
    pub fn to_bigint(&self) -> BigInt {
        let sign = if self.negative {
            Sign::Minus
        } else {
            Sign::Plus
        };
        if let Some(m) = self.magnitude_u64() {
            return BigInt::from_biguint(sign, BigUint::from(m));
        }
        let mask = self.mask();
        let mut buf = [0u8; BIGINT_MAGNITUDE_MAX_BYTES];
        for (dst, src) in buf.iter_mut().zip(self.stored) {
            *dst = src ^ mask;
        }
        let magnitude = buf.get(..self.stored.len()).unwrap_or(&[]);
        BigInt::from_biguint(sign, BigUint::from_bytes_be(magnitude))
    }
}

impl fmt::Debug for BigIntRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}n", self.to_bigint())
    }
}

/// A key part borrowed from encoded bytes.
///
/// Bytes and strings borrow the input unless their payload contains an escaped NUL, which has
/// to be unescaped into a new buffer.
#[derive(Debug, Clone)]
pub enum KeyPartRef<'a> {
    /// A byte string.
    Bytes(Cow<'a, [u8]>),
    /// A Unicode string.
    String(Cow<'a, str>),
    /// A bigint.
    BigInt(BigIntRef<'a>),
    /// A number.
    Number(f64),
    /// A boolean.
    Bool(bool),
}

impl KeyPartRef<'_> {
    /// Converts into an owned [`KeyPart`].
    pub fn into_owned(self) -> KeyPart {
        match self {
            KeyPartRef::Bytes(b) => KeyPart::Bytes(b.into_owned()),
            KeyPartRef::String(s) => KeyPart::String(s.into_owned()),
            KeyPartRef::BigInt(i) => KeyPart::BigInt(i.to_bigint()),
            KeyPartRef::Number(x) => KeyPart::Number(x),
            KeyPartRef::Bool(b) => KeyPart::Bool(b),
        }
    }
}

/// A part located and validated, but not yet materialised.
enum RawPart<'a> {
    Bytes {
        payload: &'a [u8],
        escaped: bool,
    },
    /// A string without escapes, validated once and borrowed as is.
    Str(&'a str),
    /// A string with escaped NULs, validated run by run; unescaped on materialisation.
    EscapedString(&'a [u8]),
    BigInt(BigIntRef<'a>),
    Number(f64),
    Bool(bool),
}

impl<'a> RawPart<'a> {
    /// Converts straight to an owned part, copying each payload once.
    fn into_part(self) -> KeyPart {
        match self {
            RawPart::Bytes { payload, escaped } => KeyPart::Bytes(if escaped {
                unescape(payload)
            } else {
                payload.to_vec()
            }),
            RawPart::Str(s) => KeyPart::String(s.to_owned()),
            RawPart::BigInt(i) => KeyPart::BigInt(i.to_bigint()),
            RawPart::Number(x) => KeyPart::Number(x),
            RawPart::Bool(b) => KeyPart::Bool(b),
            RawPart::EscapedString(_) => self.materialise().into_owned(),
        }
    }

    fn materialise(self) -> KeyPartRef<'a> {
        match self {
            RawPart::Bytes { payload, escaped } => KeyPartRef::Bytes(if escaped {
                Cow::Owned(unescape(payload))
            } else {
                Cow::Borrowed(payload)
            }),
            RawPart::Str(s) => KeyPartRef::String(Cow::Borrowed(s)),
            RawPart::EscapedString(payload) => {
                // The runs were validated as UTF-8 while parsing, and joining valid runs at
                // NUL boundaries keeps it valid, so the lossy branch never runs.
                let bytes = unescape(payload);
                KeyPartRef::String(Cow::Owned(
                    String::from_utf8(bytes)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                ))
            }
            RawPart::BigInt(i) => KeyPartRef::BigInt(i),
            RawPart::Number(x) => KeyPartRef::Number(x),
            RawPart::Bool(b) => KeyPartRef::Bool(b),
        }
    }
}

/// Decodes encoded key bytes into an owned [`Key`].
///
/// ```
/// use tuplekv_codec::{decode_key, key};
///
/// assert_eq!(decode_key(b"\x02hello\x00\x15\x2a")?, key!["hello", 42]);
/// assert_eq!(decode_key(b"")?, key![]);
/// # Ok::<(), tuplekv_codec::DecodeError>(())
/// ```
///
/// # Errors
/// A [`DecodeError`] naming the offset and the reason if `bytes` is not the canonical
/// encoding of a key. Never panics.
pub fn decode_key(bytes: &[u8]) -> Result<Key, DecodeError> {
    // Most keys have at most four parts; this is also what the first push would reserve.
    let mut parts = Vec::with_capacity(4);
    let mut rest = bytes;
    let mut offset = 0;
    while let Some((&tag, body)) = rest.split_first() {
        let (raw, used) = parse_part(tag, body, offset)?;
        parts.push(raw.into_part());
        rest = body.get(used..).unwrap_or_default();
        offset += 1 + used;
    }
    Ok(Key::from_checked_parts(parts))
}

/// Decodes encoded key bytes into borrowed parts, one at a time, without allocating (except
/// to unescape a bytes or string payload that contains a NUL).
///
/// The iterator yields one `Err` at the first problem and then ends.
///
/// ```
/// use tuplekv_codec::{KeyPartRef, decode_parts, encode_key, key};
/// use std::borrow::Cow;
///
/// let bytes = encode_key(&key!["users", 7]);
/// let mut parts = decode_parts(&bytes);
/// assert!(matches!(parts.next(), Some(Ok(KeyPartRef::String(Cow::Borrowed("users"))))));
/// assert!(matches!(parts.next(), Some(Ok(KeyPartRef::BigInt(i))) if i.to_u64() == Some(7)));
/// assert!(parts.next().is_none());
/// ```
pub fn decode_parts(bytes: &[u8]) -> Parts<'_> {
    Parts {
        rest: bytes,
        offset: 0,
        failed: false,
    }
}

/// Checks that `bytes` is the canonical encoding of a key without allocating, and returns its
/// number of parts.
///
/// ```
/// use tuplekv_codec::validate_key;
///
/// assert_eq!(validate_key(b"\x02a\x00\xff\x00\x27"), Ok(2));
/// assert!(validate_key(b"\x02\xff\x00").is_err());
/// ```
///
/// # Errors
/// As [`decode_key`].
pub fn validate_key(bytes: &[u8]) -> Result<usize, DecodeError> {
    let mut rest = bytes;
    let mut offset = 0;
    let mut count = 0;
    while let Some((&tag, body)) = rest.split_first() {
        let (_, used) = parse_part(tag, body, offset)?;
        rest = body.get(used..).unwrap_or_default();
        offset += 1 + used;
        count += 1;
    }
    Ok(count)
}

/// Iterator over the borrowed parts of an encoded key; see [`decode_parts`].
#[derive(Debug, Clone)]
pub struct Parts<'a> {
    rest: &'a [u8],
    offset: usize,
    failed: bool,
}

impl Parts<'_> {
    /// The byte offset of the next part in the input.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl<'a> Iterator for Parts<'a> {
    type Item = Result<KeyPartRef<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let (&tag, body) = self.rest.split_first()?;
        match parse_part(tag, body, self.offset) {
            Ok((raw, used)) => {
                self.rest = body.get(used..).unwrap_or_default();
                self.offset += 1 + used;
                Some(Ok(raw.materialise()))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Parts<'_> {}

/// Parses the part whose type code `tag` is at `offset`; `body` is everything after the type
/// code. Returns the part and the number of body bytes it used.
fn parse_part(tag: u8, body: &[u8], offset: usize) -> Result<(RawPart<'_>, usize), DecodeError> {
    let truncated = |t| DecodeError::new(offset, DecodeErrorKind::Truncated(t));
    let non_canonical = |n| DecodeError::new(offset, DecodeErrorKind::NonCanonical(n));
    match tag {
        BYTES => {
            let (payload, escaped) = split_payload(body).ok_or(truncated(PartType::Bytes))?;
            Ok((RawPart::Bytes { payload, escaped }, payload.len() + 1))
        }
        STRING => {
            let (payload, escaped) = split_payload(body).ok_or(truncated(PartType::String))?;
            let used = payload.len() + 1;
            if escaped {
                check_utf8_runs(payload, offset + 1)?;
                return Ok((RawPart::EscapedString(payload), used));
            }
            let text = std::str::from_utf8(payload).map_err(|e| {
                DecodeError::new(offset + 1 + e.valid_up_to(), DecodeErrorKind::InvalidUtf8)
            })?;
            Ok((RawPart::Str(text), used))
        }
        INT_ZERO => Ok((
            RawPart::BigInt(BigIntRef {
                negative: false,
                stored: &[],
            }),
            0,
        )),
        NEG_INT_LONG..=POS_INT_LONG => {
            let negative = tag < INT_ZERO;
            let (len, header) = match tag {
                NEG_INT_LONG | POS_INT_LONG => {
                    let &len_byte = body.first().ok_or(truncated(PartType::BigInt))?;
                    let len = usize::from(if negative { !len_byte } else { len_byte });
                    if len <= INT_SHORT_MAX {
                        return Err(non_canonical(NonCanonical::BigIntLongForm));
                    }
                    (len, 1)
                }
                _ => (usize::from(tag.abs_diff(INT_ZERO)), 0),
            };
            let stored = body
                .get(header..header + len)
                .ok_or(truncated(PartType::BigInt))?;
            let zero_byte = if negative { 0xff } else { 0x00 };
            if stored.first() == Some(&zero_byte) {
                return Err(non_canonical(NonCanonical::BigIntLeadingZero));
            }
            Ok((
                RawPart::BigInt(BigIntRef { negative, stored }),
                header + len,
            ))
        }
        DOUBLE => {
            let raw: [u8; 8] = body
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or(truncated(PartType::Number))?;
            let bits = ordered_to_double(u64::from_be_bytes(raw));
            let x = f64::from_bits(bits);
            if x.is_nan() && bits != CANONICAL_NAN_POS && bits != CANONICAL_NAN_NEG {
                return Err(non_canonical(NonCanonical::NanPayload));
            }
            Ok((RawPart::Number(x), 8))
        }
        FALSE => Ok((RawPart::Bool(false), 0)),
        TRUE => Ok((RawPart::Bool(true), 0)),
        other => Err(DecodeError::new(
            offset,
            DecodeErrorKind::UnknownTypeCode(other),
        )),
    }
}

/// Splits off an escaped payload up to its terminator: returns the payload (still escaped)
/// and whether it contains an escape, or `None` if there is no terminator.
fn split_payload(body: &[u8]) -> Option<(&[u8], bool)> {
    let mut from = 0;
    let mut escaped = false;
    loop {
        let nul = from + memchr(NUL, body.get(from..)?)?;
        if body.get(nul + 1) == Some(&ESCAPE) {
            escaped = true;
            from = nul + 2;
        } else {
            return Some((body.get(..nul)?, escaped));
        }
    }
}

/// Validates an escaped string payload as UTF-8 without unescaping it. A NUL is a whole
/// character, so the runs between escapes can be validated one by one; `base` is the offset
/// of the payload in the input, for the error.
fn check_utf8_runs(payload: &[u8], base: usize) -> Result<(), DecodeError> {
    let mut start = 0;
    loop {
        let rest = payload.get(start..).unwrap_or_default();
        // Each run ends just after a data NUL, whose escape byte is then skipped.
        let run_len = memchr(NUL, rest).map_or(rest.len(), |i| i + 1);
        let run = rest.get(..run_len).unwrap_or_default();
        if let Err(e) = std::str::from_utf8(run) {
            return Err(DecodeError::new(
                base + start + e.valid_up_to(),
                DecodeErrorKind::InvalidUtf8,
            ));
        }
        if run_len == rest.len() {
            return Ok(());
        }
        start += run_len + 1;
    }
}

/// Removes the escape byte after each NUL. The payload came from [`split_payload`], so every
/// NUL in it is followed by an escape byte.
fn unescape(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    let mut rest = payload;
    while let Some(i) = memchr(NUL, rest) {
        let (run, after) = rest.split_at(i + 1);
        out.extend_from_slice(run);
        rest = after.get(1..).unwrap_or_default();
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(bytes: &[u8]) -> (usize, DecodeErrorKind) {
        let e = decode_key(bytes).unwrap_err();
        assert_eq!(validate_key(bytes), Err(e.clone()), "validator agrees");
        (e.offset(), e.kind().clone())
    }

    #[test]
    fn truncated_parts_name_their_type_and_start() {
        use DecodeErrorKind::Truncated;
        assert_eq!(kind(b"\x02ab"), (0, Truncated(PartType::String)));
        assert_eq!(kind(b"\x27\x01a\x00\xff"), (1, Truncated(PartType::Bytes)));
        assert_eq!(kind(b"\x16\x01"), (0, Truncated(PartType::BigInt)));
        assert_eq!(kind(b"\x1d"), (0, Truncated(PartType::BigInt)));
        assert_eq!(kind(b"\x0b\xf6\xfe"), (0, Truncated(PartType::BigInt)));
        assert_eq!(kind(b"\x21\x80\x00"), (0, Truncated(PartType::Number)));
    }

    #[test]
    fn unknown_type_codes_are_reported_at_their_offset() {
        for tag in [0x00, 0x03, 0x05, 0x20, 0x28, 0xff] {
            assert_eq!(
                kind(&[0x26, tag]),
                (1, DecodeErrorKind::UnknownTypeCode(tag))
            );
        }
        let msg = decode_key(b"\x02a\x00\x00").unwrap_err().to_string();
        assert!(msg.contains("must be escaped as 00 ff"), "{msg}");
    }

    #[test]
    fn invalid_utf8_points_at_the_first_bad_byte_even_after_escapes() {
        assert_eq!(kind(b"\x02ab\xff\x00"), (3, DecodeErrorKind::InvalidUtf8));
        assert_eq!(
            kind(b"\x02a\x00\xffb\xc3\x00"),
            (5, DecodeErrorKind::InvalidUtf8)
        );
    }

    #[test]
    fn non_canonical_forms_are_rejected() {
        use NonCanonical::*;
        let nc = DecodeErrorKind::NonCanonical;
        assert_eq!(kind(b"\x15\x00"), (0, nc(BigIntLeadingZero)));
        assert_eq!(kind(b"\x13\xff"), (0, nc(BigIntLeadingZero)));
        assert_eq!(kind(b"\x1d\x01\x05"), (0, nc(BigIntLongForm)));
        assert_eq!(kind(b"\x0b\xf7\x00"), (0, nc(BigIntLongForm)));
        let mut long_zero = vec![0x1d, 9];
        long_zero.extend([0; 9]);
        assert_eq!(kind(&long_zero), (0, nc(BigIntLeadingZero)));
        // +NaN with payload 1.
        assert_eq!(
            kind(b"\x21\xff\xf8\x00\x00\x00\x00\x00\x01"),
            (0, nc(NanPayload))
        );
    }

    #[test]
    fn borrowed_parts_borrow_unless_escaped() {
        let bytes = b"\x01ab\x00\x02c\x00\xffd\x00";
        let parts: Vec<_> = decode_parts(bytes).collect::<Result<_, _>>().unwrap();
        assert!(matches!(&parts[0], KeyPartRef::Bytes(Cow::Borrowed(b"ab"))));
        assert!(matches!(&parts[1], KeyPartRef::String(Cow::Owned(s)) if s == "c\0d"));
    }

    #[test]
    fn bigint_refs_convert_exactly_at_the_edges() {
        use crate::{encode_key, key};
        for v in [
            0i128,
            1,
            -1,
            255,
            -256,
            i64::MAX.into(),
            i64::MIN.into(),
            u64::MAX.into(),
        ] {
            let bytes = encode_key(&key![v]);
            let Some(Ok(KeyPartRef::BigInt(r))) = decode_parts(&bytes).next() else {
                panic!("not a bigint")
            };
            assert_eq!(r.to_bigint(), BigInt::from(v));
            assert_eq!(r.to_i64(), i64::try_from(v).ok());
            assert_eq!(r.to_u64(), u64::try_from(v).ok());
        }
    }
}
