//! Values and versionstamps: what a key maps to, and the stamp of the commit that wrote it.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use thiserror::Error;

/// A stored value.
///
/// Deno KV stores three encodings: raw bytes (a `Uint8Array`), a 64-bit unsigned integer
/// (`Deno.KvU64`, the only type `sum`/`min`/`max` work on), and V8-serialised JavaScript values,
/// which this store keeps as opaque bytes so values written by Deno clients round-trip.
///
/// Values are reference-counted buffers, so reading one does not copy it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// Raw bytes.
    Bytes(Bytes),
    /// An unsigned 64-bit integer (Deno's `KvU64`).
    U64(u64),
    /// A V8-serialised JavaScript value, kept opaque.
    V8(Bytes),
}

impl Value {
    /// The size the value counts for in the limits: its byte length, or 8 for a `U64`.
    pub fn size(&self) -> usize {
        match self {
            Value::Bytes(b) | Value::V8(b) => b.len(),
            Value::U64(_) => 8,
        }
    }

    /// The bytes of a `Bytes` value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The number in a `U64` value.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(n) => Some(*n),
            _ => None,
        }
    }
}

impl Value {
    /// The value borrowed: what a borrowing scan ([`ReadView::scan_with`](crate::ReadView::scan_with))
    /// hands its visitor.
    pub fn as_value_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Bytes(b) => ValueRef::Bytes(b),
            Value::U64(n) => ValueRef::U64(*n),
            Value::V8(b) => ValueRef::V8(b),
        }
    }
}

/// A stored value borrowed from the store for the length of a call, as a borrowing scan
/// ([`ReadView::scan_with`](crate::ReadView::scan_with)) hands it out: the same three
/// encodings as [`Value`], with no copy and no reference count taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueRef<'a> {
    /// Raw bytes.
    Bytes(&'a [u8]),
    /// An unsigned 64-bit integer (Deno's `KvU64`).
    U64(u64),
    /// A V8-serialised JavaScript value, kept opaque.
    V8(&'a [u8]),
}

impl ValueRef<'_> {
    /// The size the value counts for in the limits, as [`Value::size`].
    pub fn size(&self) -> usize {
        match self {
            ValueRef::Bytes(b) | ValueRef::V8(b) => b.len(),
            ValueRef::U64(_) => 8,
        }
    }

    /// The bytes of a `Bytes` value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            ValueRef::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The number in a `U64` value.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            ValueRef::U64(n) => Some(*n),
            _ => None,
        }
    }

    /// An owned copy of the value.
    pub fn to_value(&self) -> Value {
        match self {
            ValueRef::Bytes(b) => Value::Bytes(Bytes::copy_from_slice(b)),
            ValueRef::U64(n) => Value::U64(*n),
            ValueRef::V8(b) => Value::V8(Bytes::copy_from_slice(b)),
        }
    }
}

impl PartialEq<Value> for ValueRef<'_> {
    fn eq(&self, other: &Value) -> bool {
        *self == other.as_value_ref()
    }
}

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Self {
        Value::Bytes(b)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Bytes(Bytes::from(b))
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Value::Bytes(Bytes::copy_from_slice(b))
    }
}

impl<const N: usize> From<&[u8; N]> for Value {
    fn from(b: &[u8; N]) -> Self {
        Value::Bytes(Bytes::copy_from_slice(b))
    }
}

impl From<&str> for Value {
    /// A string is stored as its UTF-8 bytes.
    fn from(s: &str) -> Self {
        Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Value::U64(n)
    }
}

/// The 10-byte stamp of a commit: an 8-byte big-endian commit version and a 2-byte index
/// (always zero here, as in Deno's SQLite backend).
///
/// Stamps are strictly increasing across commits, every mutation of one commit carries the
/// same stamp, and a failed commit consumes none. They are shown as 20 lowercase hex digits,
/// whose string order equals their numeric order, and parsed in either case (as Deno does).
///
/// ```
/// use tuplekv_engine::Versionstamp;
///
/// let vs: Versionstamp = "00000000000000050000".parse()?;
/// assert_eq!(vs.version(), 5);
/// assert_eq!(vs.to_string(), "00000000000000050000");
/// assert!(Versionstamp::ZERO < vs);
/// # Ok::<(), tuplekv_engine::InvalidVersionstamp>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Versionstamp([u8; 10]);

impl Versionstamp {
    /// The stamp below every commit's, `00000000000000000000`.
    pub const ZERO: Versionstamp = Versionstamp([0; 10]);

    /// The stamp of commit version `version`.
    pub fn from_version(version: u64) -> Versionstamp {
        let mut b = [0u8; 10];
        b[..8].copy_from_slice(&version.to_be_bytes());
        Versionstamp(b)
    }

    /// The commit version (the first 8 bytes).
    pub fn version(&self) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(v)
    }

    /// The raw 10 bytes.
    pub fn as_bytes(&self) -> &[u8; 10] {
        &self.0
    }

    /// Builds a stamp from its raw 10 bytes.
    pub fn from_bytes(bytes: [u8; 10]) -> Versionstamp {
        Versionstamp(bytes)
    }
}

impl fmt::Display for Versionstamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Versionstamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Versionstamp({self})")
    }
}

/// Text that is not 20 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid versionstamp {0:?}: expected 20 hex digits")]
pub struct InvalidVersionstamp(pub String);

impl FromStr for Versionstamp {
    type Err = InvalidVersionstamp;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidVersionstamp(s.to_owned());
        let digits = s.as_bytes();
        if digits.len() != 20 {
            return Err(invalid());
        }
        // Upper case is accepted, as Deno's `faster_hex` decoding does.
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let mut out = [0u8; 10];
        for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
            let (hi, lo) = (pair.first().copied(), pair.get(1).copied());
            match (hi.and_then(nibble), lo.and_then(nibble)) {
                (Some(h), Some(l)) => *byte = (h << 4) | l,
                _ => return Err(invalid()),
            }
        }
        Ok(Versionstamp(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versionstamp_parsing_rejects_what_deno_rejects_and_accepts_upper_case() {
        // Deno's recording (semantics-versionstamp.json, check_invalid_versionstamp): too
        // short, 21 characters, non-hex and empty fail with "Invalid check"; an upper-case
        // stamp is accepted (the check then simply does not match).
        for bad in [
            "",
            "0000000000000000000",
            "000000000000000000000",
            "0000000000000000000g",
        ] {
            assert!(bad.parse::<Versionstamp>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "00000000000000AB0000".parse::<Versionstamp>(),
            "00000000000000ab0000".parse::<Versionstamp>()
        );
        assert!("00000000000000AB0000".parse::<Versionstamp>().is_ok());
        let vs = Versionstamp::from_version(0x0102_0304_0506_0708);
        assert_eq!(vs.to_string(), "01020304050607080000");
        assert_eq!(vs.to_string().parse::<Versionstamp>(), Ok(vs));
    }

    #[test]
    fn u64_values_count_as_eight_bytes() {
        assert_eq!(Value::U64(1).size(), 8);
        assert_eq!(Value::from(&b"abc"[..]).size(), 3);
    }
}
