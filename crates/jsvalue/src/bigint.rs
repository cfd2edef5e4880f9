//! Bigints as V8 stores them: a sign and a little-endian magnitude.

use std::fmt;

use num_bigint::BigUint;

/// A JavaScript bigint: a sign and a magnitude of at most [`crate::BIGINT_BYTES_MAX`] bytes
/// (little-endian, without high zero bytes; zero is never negative).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BigInt {
    negative: bool,
    magnitude: Vec<u8>,
}

impl BigInt {
    /// The bigint `-magnitude` or `magnitude` (little-endian bytes), normalised.
    pub fn from_le_bytes(negative: bool, magnitude: &[u8]) -> BigInt {
        let len = magnitude.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let magnitude = magnitude[..len].to_vec();
        BigInt {
            negative: negative && !magnitude.is_empty(),
            magnitude,
        }
    }

    /// The bigint of an `i128`.
    pub fn from_i128(n: i128) -> BigInt {
        BigInt::from_le_bytes(n < 0, &n.unsigned_abs().to_le_bytes())
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The magnitude, little-endian, without high zero bytes.
    pub fn magnitude(&self) -> &[u8] {
        &self.magnitude
    }

    /// Reads digits in `radix` (2, 8, 10 or 16), with no sign and no prefix.
    pub(crate) fn parse_digits(negative: bool, digits: &str, radix: u32) -> Option<BigInt> {
        let n = BigUint::parse_bytes(digits.as_bytes(), radix)?;
        Some(BigInt::from_le_bytes(negative, &n.to_bytes_le()))
    }

    /// The value as an `i64`, when it fits.
    pub fn to_i64(&self) -> Option<i64> {
        let m = self.magnitude_u64()?;
        if self.negative {
            0i64.checked_sub_unsigned(m)
        } else {
            i64::try_from(m).ok()
        }
    }

    /// The magnitude as a `u64`, when it fits.
    pub fn magnitude_u64(&self) -> Option<u64> {
        if self.magnitude.len() > 8 {
            return None;
        }
        let mut bytes = [0u8; 8];
        bytes[..self.magnitude.len()].copy_from_slice(&self.magnitude);
        Some(u64::from_le_bytes(bytes))
    }
}

impl fmt::Display for BigInt {
    /// Decimal, with a `-` when negative (no `n` suffix).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        write!(f, "{}", BigUint::from_bytes_le(&self.magnitude))
    }
}
