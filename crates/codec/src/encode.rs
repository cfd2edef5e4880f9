//! The encoder: [`Key`] → order-preserving bytes.
//!
//! Layout per part (a key is the plain concatenation of its parts, the empty key is empty):
//! - bytes `01 payload 00`, string `02 utf8 00`, where a data `00` is written `00 ff`;
//! - bigint `14` for zero, `14±n` + magnitude for `n` ≤ 8 magnitude bytes, `1d n` + magnitude
//!   or `0b (n^ff)` + magnitude for longer ones; negative magnitudes are ones'-complemented;
//! - number `21` + 8 bytes: IEEE bits with NaN canonicalised, sign bit flipped for positive
//!   numbers and all bits flipped for negative ones, big-endian;
//! - `false` `26`, `true` `27`.

use memchr::memchr;
use num_bigint::{BigInt, Sign};
use thiserror::Error;

use crate::BIGINT_MAGNITUDE_MAX_BYTES;
use crate::key::Key;
use crate::part::KeyPart;
use crate::tags::{
    BYTES, DOUBLE, ESCAPE, FALSE, INT_SHORT_MAX, INT_ZERO, NEG_INT_LONG, NUL, POS_INT_LONG, STRING,
    TRUE, canonical_bits, double_to_ordered,
};

/// Why a key part cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A bigint's magnitude needs more bytes than the encoding can express.
    #[error(
        "bigint magnitude needs {bytes} bytes, max is {max}",
        max = BIGINT_MAGNITUDE_MAX_BYTES
    )]
    BigIntTooLarge {
        /// The number of bytes the magnitude needs.
        bytes: usize,
    },
}

/// The number of bytes needed for a bigint's magnitude (0 for zero).
fn magnitude_len(i: &BigInt) -> usize {
    usize::try_from(i.bits().div_ceil(8)).unwrap_or(usize::MAX)
}

/// Checks that a part can be encoded.
pub(crate) fn check_part(part: &KeyPart) -> Result<(), EncodeError> {
    match part {
        KeyPart::BigInt(i) => {
            let bytes = magnitude_len(i);
            if bytes > BIGINT_MAGNITUDE_MAX_BYTES {
                return Err(EncodeError::BigIntTooLarge { bytes });
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Encodes a key into a new vector.
///
/// ```
/// use tuplekv_codec::{encode_key, key};
///
/// assert_eq!(encode_key(&key!["hello"]), b"\x02hello\x00");
/// assert_eq!(encode_key(&key![]), b"");
/// ```
pub fn encode_key(key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(estimated_len(key));
    encode_parts(key, &mut out);
    out
}

/// Appends the encoding of `key` to `out`, so a caller can reuse one buffer or build an
/// encoded prefix and extend it.
///
/// ```
/// use tuplekv_codec::{encode_key, encode_key_into, key};
///
/// let mut buf = encode_key(&key!["users"]);
/// encode_key_into(&key![42], &mut buf);
/// assert_eq!(buf, encode_key(&key!["users", 42]));
/// ```
pub fn encode_key_into(key: &Key, out: &mut Vec<u8>) {
    out.reserve(estimated_len(key));
    encode_parts(key, out);
}

/// The exact length of `key`'s encoding, computed without encoding it.
///
/// ```
/// use tuplekv_codec::{encode_key, encoded_len, key};
///
/// let k = key!["a\0b", 300, 1.5];
/// assert_eq!(encoded_len(&k), encode_key(&k).len());
/// ```
pub fn encoded_len(key: &Key) -> usize {
    key.parts().iter().map(part_len).sum()
}

/// Appends the encoding of one part to `out` (for building keys directly in bytes).
///
/// # Errors
/// [`EncodeError::BigIntTooLarge`] for a bigint whose magnitude needs more than 255 bytes;
/// `out` is left unchanged.
pub fn encode_part_into(part: &KeyPart, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    check_part(part)?;
    write_part(part, out);
    Ok(())
}

fn part_len(part: &KeyPart) -> usize {
    match part {
        KeyPart::Bytes(b) => 2 + b.len() + nul_count(b),
        KeyPart::String(s) => 2 + s.len() + nul_count(s.as_bytes()),
        KeyPart::Number(_) => 9,
        KeyPart::Bool(_) => 1,
        KeyPart::BigInt(i) => match magnitude_len(i) {
            0 => 1,
            n if n <= INT_SHORT_MAX => 1 + n,
            n => 2 + n,
        },
    }
}

fn nul_count(b: &[u8]) -> usize {
    memchr::memchr_iter(NUL, b).count()
}

/// Capacity to reserve: exact except for escaped NULs, which are rare and found while copying.
fn estimated_len(key: &Key) -> usize {
    key.parts()
        .iter()
        .map(|part| match part {
            KeyPart::Bytes(b) => 2 + b.len(),
            KeyPart::String(s) => 2 + s.len(),
            KeyPart::BigInt(i) => 2 + magnitude_len(i),
            KeyPart::Number(_) => 9,
            KeyPart::Bool(_) => 1,
        })
        .sum()
}

fn encode_parts(key: &Key, out: &mut Vec<u8>) {
    for part in key.parts() {
        // `Key` guarantees every part passed `check_part`.
        write_part(part, out);
    }
}

fn write_part(part: &KeyPart, out: &mut Vec<u8>) {
    match part {
        KeyPart::Bytes(b) => write_escaped(out, BYTES, b),
        KeyPart::String(s) => write_escaped(out, STRING, s.as_bytes()),
        KeyPart::BigInt(i) => write_bigint(out, i),
        KeyPart::Number(x) => {
            out.push(DOUBLE);
            out.extend_from_slice(&double_to_ordered(canonical_bits(*x)).to_be_bytes());
        }
        KeyPart::Bool(false) => out.push(FALSE),
        KeyPart::Bool(true) => out.push(TRUE),
    }
}

/// `tag payload 00`, each data `00` written `00 ff`. Copies runs between NULs in bulk.
fn write_escaped(out: &mut Vec<u8>, tag: u8, mut data: &[u8]) {
    out.push(tag);
    while let Some(i) = memchr(NUL, data) {
        let (run, rest) = data.split_at(i + 1);
        out.extend_from_slice(run);
        out.push(ESCAPE);
        data = rest;
    }
    out.extend_from_slice(data);
    out.push(NUL);
}

/// Writes a bigint without allocating: the magnitude's big-endian bytes come straight from
/// its 64-bit digits. Callers have checked the magnitude fits in 255 bytes.
fn write_bigint(out: &mut Vec<u8>, i: &BigInt) {
    let n = magnitude_len(i);
    if n == 0 {
        out.push(INT_ZERO);
        return;
    }
    let negative = i.sign() == Sign::Minus;
    // `n` is at most 255 here (see `check_part`), so these casts cannot truncate.
    let n8 = u8::try_from(n).unwrap_or(u8::MAX);
    match (n <= INT_SHORT_MAX, negative) {
        (true, false) => out.push(INT_ZERO + n8),
        (true, true) => out.push(INT_ZERO - n8),
        (false, false) => out.extend_from_slice(&[POS_INT_LONG, n8]),
        (false, true) => out.extend_from_slice(&[NEG_INT_LONG, !n8]),
    }
    // Negative magnitudes are stored as their ones' complement so that larger magnitudes sort
    // lower.
    let mask: u64 = if negative { u64::MAX } else { 0 };
    let mut digits = i.iter_u64_digits().rev();
    // The most significant digit contributes only its significant bytes.
    let top_bytes = n - 8 * (digits.len().saturating_sub(1));
    if let Some(top) = digits.next() {
        let be = top.to_be_bytes();
        let (_, significant) = be.split_at(8 - top_bytes);
        out.extend(significant.iter().map(|b| b ^ mask.to_be_bytes()[0]));
    }
    for digit in digits {
        out.extend((digit ^ mask).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key;

    #[test]
    fn bigint_at_the_magnitude_limit_encodes_and_one_byte_more_is_an_error() {
        let max: BigInt = (BigInt::from(1u8) << (8 * BIGINT_MAGNITUDE_MAX_BYTES)) - 1u8;
        let key = Key::new(vec![KeyPart::BigInt(max.clone())]).unwrap();
        let bytes = encode_key(&key);
        assert_eq!(bytes.len(), 2 + BIGINT_MAGNITUDE_MAX_BYTES);
        assert_eq!(&bytes[..2], &[POS_INT_LONG, 0xff]);

        let too_big = max + 1u8;
        let err = Key::new(vec![KeyPart::BigInt(-too_big.clone())]).unwrap_err();
        assert_eq!(err, EncodeError::BigIntTooLarge { bytes: 256 });
        assert_eq!(
            err.to_string(),
            "bigint magnitude needs 256 bytes, max is 255"
        );

        let mut out = vec![7];
        assert!(encode_part_into(&KeyPart::BigInt(too_big), &mut out).is_err());
        assert_eq!(out, [7], "a failed encode leaves the buffer unchanged");
    }

    #[test]
    #[should_panic(expected = "bigint magnitude needs 256 bytes")]
    fn key_macro_panics_on_oversized_bigint_with_a_clear_message() {
        let _ = key![BigInt::from(1u8) << (8 * BIGINT_MAGNITUDE_MAX_BYTES)];
    }

    #[test]
    fn push_of_oversized_bigint_leaves_key_unchanged() {
        let mut k = key!["a"];
        assert!(k.push(BigInt::from(1u8) << 4096u32).is_err());
        assert_eq!(k, key!["a"]);
    }

    #[test]
    fn multi_digit_negative_bigints_use_ones_complement() {
        // -(2^64) needs 9 bytes: 0b, 9^ff, then the complement of 01 00 … 00.
        let k = key![-(BigInt::from(1u8) << 64u32)];
        assert_eq!(encode_key(&k), hex("0bf6feffffffffffffffff"));
        assert_eq!(encoded_len(&k), 11);
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
