//! `sum` on JavaScript numbers and bigints ([`MutationKind::SumBounded`](crate::MutationKind)):
//! Deno KV's "sum of V8 values", with optional bounds that either fail the commit or clamp.
//!
//! Values written by Deno are V8-serialised; this module reads and writes only the few V8
//! forms a sum needs (a number as an int32, uint32 or double; a bigint), and keeps every other
//! value opaque. The rules, and the error texts, are Deno KV's:
//! - the operand is a `U64` (Deno's `KvU64`), or a V8 number or bigint; optional `min`/`max`
//!   are V8 values of the operand's kind;
//! - an absent key becomes the operand, unbounded;
//! - bigint + bigint is exact, number + number is an `f64` sum, `U64` + `U64` wraps at 2^64;
//!   a bigint operand in `0..=u64::MAX` on a `U64` (without bounds) counts as a `U64`;
//! - a result below `min` or above `max` fails the commit, or is clamped with `clamp`.

use bytes::Bytes;
use thiserror::Error;
use tuplekv_codec::BigInt;

use crate::value::Value;

/// Why a sum of numbers failed. The text is Deno KV's, word for word (KV Connect clients
/// show it to users as is).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SumError {
    /// The operand, `min` or `max` is not a V8 number or bigint (or a `U64` operand).
    #[error("Some of the parameters are not valid V8 values")]
    InvalidParameters,
    /// `min` or `max` is of another kind than the operand.
    #[error("Min/max parameters have different types than the operand")]
    BoundsOfAnotherKind,
    /// The stored value is V8 but not a number or bigint, or is raw bytes.
    #[error("unsupported value type")]
    UnsupportedStoredValue,
    /// The stored V8 value does not parse.
    #[error("invalid v8 value")]
    InvalidStoredValue,
    /// Bounds on a sum of two `U64`s.
    #[error("Cannot use min/max parameters with KvU64 operands")]
    BoundsOnU64,
    /// The stored value and the operand are of different kinds.
    #[error("Cannot sum {stored} with {operand}")]
    KindMismatch {
        /// The stored value's kind: `BigInt`, `Number` or `KvU64`.
        stored: &'static str,
        /// The operand's kind.
        operand: &'static str,
    },
    /// The result is outside `[min, max]` and `clamp` was not asked for.
    #[error("The result of a Sum operation would exceed its range limit")]
    OutOfRange,
}

/// A number a sum works on.
#[derive(Debug, Clone, PartialEq)]
enum Num {
    BigInt(BigInt),
    Number(f64),
    U64(u64),
}

impl Num {
    fn kind(&self) -> &'static str {
        match self {
            Num::BigInt(_) => "BigInt",
            Num::Number(_) => "Number",
            Num::U64(_) => "KvU64",
        }
    }

    fn same_kind(&self, other: &Num) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    fn into_value(self) -> Value {
        match self {
            Num::U64(n) => Value::U64(n),
            Num::Number(x) => {
                let mut out = V8_HEADER.to_vec();
                out.push(TAG_DOUBLE);
                out.extend_from_slice(&x.to_le_bytes());
                Value::V8(Bytes::from(out))
            }
            Num::BigInt(n) => {
                let (sign, magnitude) = n.to_bytes_le();
                let mut digits = if magnitude == [0] {
                    Vec::new()
                } else {
                    magnitude
                };
                // V8 stores 64-bit digits.
                digits.resize(digits.len().div_ceil(8) * 8, 0);
                let negative = sign == num_bigint::Sign::Minus;
                let bitfield = ((digits.len() as u64) << 1) | u64::from(negative);
                let mut out = V8_HEADER.to_vec();
                out.push(TAG_BIGINT);
                write_varint(&mut out, bitfield);
                out.extend_from_slice(&digits);
                Value::V8(Bytes::from(out))
            }
        }
    }
}

/// What V8's serializer writes first: `FF`, then format version 15.
const V8_HEADER: [u8; 2] = [0xff, 0x0f];
const TAG_INT32: u8 = b'I';
const TAG_UINT32: u8 = b'U';
const TAG_DOUBLE: u8 = b'N';
const TAG_BIGINT: u8 = b'Z';
/// Padding V8 may write before a tag.
const TAG_PADDING: u8 = 0;

/// A V8 value read as a number: `Ok(Some)` for a number or bigint, `Ok(None)` for any other
/// well-formed start of a value, `Err` for bytes that are not a V8 value.
fn parse_v8(bytes: &[u8]) -> Result<Option<Num>, ()> {
    let mut r = Reader(bytes);
    if r.byte()? != 0xff {
        return Err(());
    }
    r.varint()?;
    let mut tag = r.byte()?;
    while tag == TAG_PADDING {
        tag = r.byte()?;
    }
    let num = match tag {
        TAG_INT32 => {
            let z = r.varint()?;
            let n =
                i32::try_from(z >> 1).map_err(|_| ())? ^ -i32::try_from(z & 1).map_err(|_| ())?;
            Num::Number(f64::from(n))
        }
        TAG_UINT32 => Num::Number(f64::from(u32::try_from(r.varint()?).map_err(|_| ())?)),
        TAG_DOUBLE => {
            let b: [u8; 8] = r.take(8)?.try_into().map_err(|_| ())?;
            Num::Number(f64::from_le_bytes(b))
        }
        TAG_BIGINT => {
            let bitfield = r.varint()?;
            let len = usize::try_from(bitfield >> 1).map_err(|_| ())?;
            let digits = r.take(len)?;
            let sign = if bitfield & 1 == 1 {
                num_bigint::Sign::Minus
            } else {
                num_bigint::Sign::Plus
            };
            Num::BigInt(BigInt::from_bytes_le(sign, digits))
        }
        _ => return Ok(None),
    };
    if !r.0.is_empty() {
        // A number is the whole value; anything after it is not V8's.
        return Err(());
    }
    Ok(Some(num))
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, ()> {
        let (&b, rest) = self.0.split_first().ok_or(())?;
        self.0 = rest;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], ()> {
        if self.0.len() < n {
            return Err(());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn varint(&mut self) -> Result<u64, ()> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(())
    }
}

fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// An operand or bound: a `U64`, or a V8 number or bigint.
fn parameter(value: &Value) -> Result<Num, SumError> {
    match value {
        Value::U64(n) => Ok(Num::U64(*n)),
        Value::V8(b) => parse_v8(b)
            .ok()
            .flatten()
            .ok_or(SumError::InvalidParameters),
        Value::Bytes(_) => Err(SumError::InvalidParameters),
    }
}

/// A bound: `None` when absent or empty.
fn bound(value: Option<&Bytes>) -> Result<Option<Num>, SumError> {
    match value {
        Some(b) if !b.is_empty() => parse_v8(b)
            .ok()
            .flatten()
            .map(Some)
            .ok_or(SumError::InvalidParameters),
        _ => Ok(None),
    }
}

/// `sum` held to `min`, then to `max` (in Deno's order, so `min > max` clamps to `max`):
/// clamped with `clamp`, else out of range is an error.
fn bounded<T: PartialOrd>(
    mut sum: T,
    min: Option<T>,
    max: Option<T>,
    clamp: bool,
) -> Result<T, SumError> {
    if let Some(lo) = min
        && sum < lo
    {
        sum = if clamp {
            lo
        } else {
            return Err(SumError::OutOfRange);
        };
    }
    if let Some(hi) = max
        && sum > hi
    {
        sum = if clamp {
            hi
        } else {
            return Err(SumError::OutOfRange);
        };
    }
    Ok(sum)
}

/// A bound that is a bigint (bounds were checked to be of the operand's kind).
fn as_bigint(bound: Option<Num>) -> Option<BigInt> {
    match bound {
        Some(Num::BigInt(n)) => Some(n),
        _ => None,
    }
}

/// A bound that is a number.
fn as_number(bound: Option<Num>) -> Option<f64> {
    match bound {
        Some(Num::Number(x)) => Some(x),
        _ => None,
    }
}

/// The value at a key after `sum(operand, min, max, clamp)` on its `current` value (see the
/// module's rules): what [`MutationKind::SumBounded`](crate::MutationKind) writes.
///
/// ```
/// use tuplekv_engine::{Value, sum_numbers};
///
/// // 1n and 2n as Deno serialises them.
/// let one = Value::V8(vec![0xff, 0x0f, b'Z', 0x10, 1, 0, 0, 0, 0, 0, 0, 0].into());
/// let two = sum_numbers(&one, None, None, false, Some(&one))?;
/// assert_eq!(two, Value::V8(vec![0xff, 0x0f, b'Z', 0x10, 2, 0, 0, 0, 0, 0, 0, 0].into()));
/// # Ok::<(), tuplekv_engine::SumError>(())
/// ```
///
/// # Errors
/// A [`SumError`] naming what was wrong, in Deno's words.
pub fn sum_numbers(
    operand: &Value,
    min: Option<&Bytes>,
    max: Option<&Bytes>,
    clamp: bool,
    current: Option<&Value>,
) -> Result<Value, SumError> {
    let operand = parameter(operand)?;
    let min = bound(min)?;
    let max = bound(max)?;
    if [&min, &max]
        .into_iter()
        .flatten()
        .any(|b| !b.same_kind(&operand))
    {
        return Err(SumError::BoundsOfAnotherKind);
    }
    let Some(current) = current else {
        return Ok(operand.into_value());
    };
    let current = match current {
        Value::U64(n) => Num::U64(*n),
        Value::V8(b) => match parse_v8(b) {
            Ok(Some(n)) => n,
            Ok(None) => return Err(SumError::UnsupportedStoredValue),
            Err(()) => return Err(SumError::InvalidStoredValue),
        },
        Value::Bytes(_) => return Err(SumError::UnsupportedStoredValue),
    };
    let unbounded = min.is_none() && max.is_none() && !clamp;
    let operand = match (&current, operand) {
        // A bigint that fits counts as a KvU64 on a KvU64, as older Deno clients sent it.
        (Num::U64(_), Num::BigInt(n)) if unbounded => match u64::try_from(&n) {
            Ok(n) => Num::U64(n),
            Err(_) => Num::BigInt(n),
        },
        (_, operand) => operand,
    };
    let result = match (current, operand) {
        (Num::BigInt(a), Num::BigInt(b)) => {
            let (lo, hi) = (as_bigint(min), as_bigint(max));
            Num::BigInt(bounded(a + b, lo, hi, clamp)?)
        }
        (Num::Number(a), Num::Number(b)) => {
            let (lo, hi) = (as_number(min), as_number(max));
            Num::Number(bounded(a + b, lo, hi, clamp)?)
        }
        (Num::U64(a), Num::U64(b)) => {
            if min.is_some() || max.is_some() {
                return Err(SumError::BoundsOnU64);
            }
            Num::U64(a.wrapping_add(b))
        }
        (current, operand) => {
            return Err(SumError::KindMismatch {
                stored: current.kind(),
                operand: operand.kind(),
            });
        }
    };
    Ok(result.into_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v8(bytes: &[u8]) -> Value {
        Value::V8(Bytes::copy_from_slice(bytes))
    }

    fn big(n: i64) -> Value {
        Num::BigInt(BigInt::from(n)).into_value()
    }

    fn num(x: f64) -> Value {
        Num::Number(x).into_value()
    }

    #[test]
    fn deno_vectors_parse_and_bigints_encode_as_deno_writes_them() {
        // From the spec: 0n, 1n; and a Smi 1 and -1 as int32 (zigzag 2 and 1).
        assert_eq!(
            parse_v8(&[0xff, 0x0f, 0x5a, 0x00]),
            Ok(Some(Num::BigInt(0.into())))
        );
        let one = [0xff, 0x0f, 0x5a, 0x10, 1, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(parse_v8(&one), Ok(Some(Num::BigInt(1.into()))));
        assert_eq!(big(1), v8(&one));
        assert_eq!(big(0), v8(&[0xff, 0x0f, 0x5a, 0x00]));
        assert_eq!(parse_v8(&[0xff, 0x0f, b'I', 2]), Ok(Some(Num::Number(1.0))));
        assert_eq!(
            parse_v8(&[0xff, 0x0f, b'I', 1]),
            Ok(Some(Num::Number(-1.0)))
        );
        assert_eq!(parse_v8(&[0xff, 0x0f, b'U', 5]), Ok(Some(Num::Number(5.0))));
        // A string ("bar") is V8 but not a number; a bad header is not V8.
        assert_eq!(parse_v8(&[0xff, 0x0f, 0x22, 3, b'b', b'a', b'r']), Ok(None));
        assert_eq!(parse_v8(&[0x00, 0x0f, b'I', 2]), Err(()));
        assert_eq!(
            parse_v8(&[0xff, 0x0f, b'N', 1, 2]),
            Err(()),
            "truncated double"
        );
        for n in [-(1i64 << 62), -300, -1, 0, 1, 255, 1 << 40, i64::MAX] {
            let Value::V8(b) = big(n) else { panic!() };
            assert_eq!(parse_v8(&b), Ok(Some(Num::BigInt(n.into()))), "{n}");
        }
    }

    #[test]
    fn sums_follow_deno_for_each_pair_of_kinds() {
        assert_eq!(
            sum_numbers(&big(2), None, None, false, Some(&big(3))),
            Ok(big(5))
        );
        assert_eq!(
            sum_numbers(&num(0.5), None, None, false, Some(&num(1.0))),
            Ok(num(1.5))
        );
        assert_eq!(
            sum_numbers(
                &Value::U64(2),
                None,
                None,
                false,
                Some(&Value::U64(u64::MAX))
            ),
            Ok(Value::U64(1))
        );
        assert_eq!(
            sum_numbers(&big(7), None, None, false, Some(&Value::U64(1))),
            Ok(Value::U64(8)),
            "a bigint that fits counts as a KvU64"
        );
        assert_eq!(
            sum_numbers(&num(1.0), None, None, false, Some(&Value::U64(1))),
            Err(SumError::KindMismatch {
                stored: "KvU64",
                operand: "Number"
            })
        );
        assert_eq!(
            sum_numbers(&num(1.0), None, None, false, Some(&big(1))).map_err(|e| e.to_string()),
            Err("Cannot sum BigInt with Number".to_string())
        );
        assert_eq!(
            sum_numbers(&num(4.0), None, None, false, None),
            Ok(num(4.0))
        );
        assert_eq!(
            sum_numbers(&Value::from(b"x"), None, None, false, None),
            Err(SumError::InvalidParameters)
        );
        assert_eq!(
            sum_numbers(&num(1.0), None, None, false, Some(&Value::from(b"x"))),
            Err(SumError::UnsupportedStoredValue)
        );
        assert_eq!(
            sum_numbers(&num(1.0), None, None, false, Some(&v8(&[1, 2]))),
            Err(SumError::InvalidStoredValue)
        );
    }

    #[test]
    fn bounds_fail_or_clamp_and_must_match_the_operand() {
        let bytes = |v: Value| match v {
            Value::V8(b) => b,
            _ => Bytes::new(),
        };
        let hi = bytes(big(10));
        assert_eq!(
            sum_numbers(&big(5), None, Some(&hi), false, Some(&big(6))),
            Err(SumError::OutOfRange)
        );
        assert_eq!(
            sum_numbers(&big(5), None, Some(&hi), true, Some(&big(6))),
            Ok(big(10))
        );
        let lo = bytes(num(0.0));
        assert_eq!(
            sum_numbers(&num(-5.0), Some(&lo), None, true, Some(&num(1.0))),
            Ok(num(0.0))
        );
        assert_eq!(
            sum_numbers(&big(5), Some(&lo), None, true, Some(&big(1))),
            Err(SumError::BoundsOfAnotherKind)
        );
        assert_eq!(
            sum_numbers(&big(50), None, Some(&hi), false, None),
            Ok(big(50)),
            "an absent key becomes the operand, unbounded"
        );
        let lo = bytes(big(20));
        assert_eq!(
            sum_numbers(&big(1), Some(&lo), Some(&hi), true, Some(&big(1))),
            Ok(big(10)),
            "min, then max, as Deno applies them"
        );
        let empty = Bytes::new();
        assert_eq!(
            sum_numbers(&big(1), Some(&empty), Some(&empty), false, Some(&big(1))),
            Ok(big(2)),
            "empty bounds are none"
        );
    }
}
