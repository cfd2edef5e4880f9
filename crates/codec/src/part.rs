//! [`KeyPart`], one element of a key tuple, with its total order and its conversions from
//! Rust types.
//!
//! The order here is written from the rules of the key space, not from the encoding, so that
//! it can serve as the model the encoder is tested against.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use num_bigint::BigInt;

use crate::tags::canonical_bits;

/// One element of a key tuple.
///
/// The variants mirror the JavaScript types Deno KV accepts in keys: `Uint8Array`, `string`,
/// `number`, `bigint` and `boolean`.
///
/// # Order
/// Parts of different types order by type: **bytes < string < bigint < number < false < true**
/// (real Deno puts bigint before number, although its manual says otherwise). Within a type:
/// bytes and strings compare bytewise (strings by their UTF-8 bytes), bigints numerically,
/// numbers by [`f64::total_cmp`] after NaN canonicalisation, so
/// `-NaN < -∞ < … < -0.0 < +0.0 < … < +∞ < +NaN` and all NaNs of one sign are equal.
///
/// # Conversions
/// `From` is implemented for the common Rust types:
///
/// | Rust type | part |
/// |---|---|
/// | `&str`, `String`, `&String`, `char` | [`KeyPart::String`] |
/// | `&[u8]`, `Vec<u8>`, `&[u8; N]`, `[u8; N]` | [`KeyPart::Bytes`] |
/// | `i8` … `i128`, `u8` … `u128`, `isize`, `usize`, `BigInt` | [`KeyPart::BigInt`] (exact, like a JS `42n`) |
/// | `f64`, `f32` | [`KeyPart::Number`] (like a JS `42`) |
/// | `bool` | [`KeyPart::Bool`] |
///
/// Every Rust integer type becomes a bigint because that keeps the value exact; a JavaScript
/// `number` key such as `[1]` is written `1.0_f64` (and `[1n] < [1]`).
///
/// ```
/// use tuplekv_codec::KeyPart;
///
/// assert_eq!(KeyPart::from(7_u8), KeyPart::BigInt(7.into()));
/// assert_eq!(KeyPart::from(7.0), KeyPart::Number(7.0));
/// assert!(KeyPart::from(7) < KeyPart::from(7.0)); // bigint sorts before number
/// assert_eq!(KeyPart::Number(f64::NAN), KeyPart::Number(-(-f64::NAN))); // NaNs compare equal
/// assert_ne!(KeyPart::Number(0.0), KeyPart::Number(-0.0));
/// ```
#[derive(Clone)]
pub enum KeyPart {
    /// A byte string (a JavaScript `Uint8Array`).
    Bytes(Vec<u8>),
    /// A Unicode string.
    String(String),
    /// A JavaScript `number`. Encoded as a double even when it is integral.
    Number(f64),
    /// A JavaScript `bigint`; its magnitude may use at most
    /// [`BIGINT_MAGNITUDE_MAX_BYTES`](crate::BIGINT_MAGNITUDE_MAX_BYTES) bytes.
    BigInt(BigInt),
    /// A boolean.
    Bool(bool),
}

impl KeyPart {
    /// The position of this part's type in the order between types.
    fn type_rank(&self) -> u8 {
        match self {
            KeyPart::Bytes(_) => 0,
            KeyPart::String(_) => 1,
            KeyPart::BigInt(_) => 2,
            KeyPart::Number(_) => 3,
            KeyPart::Bool(false) => 4,
            KeyPart::Bool(true) => 5,
        }
    }
}

impl PartialEq for KeyPart {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for KeyPart {}

impl PartialOrd for KeyPart {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyPart {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (KeyPart::Bytes(a), KeyPart::Bytes(b)) => a.cmp(b),
            (KeyPart::String(a), KeyPart::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (KeyPart::BigInt(a), KeyPart::BigInt(b)) => a.cmp(b),
            (KeyPart::Number(a), KeyPart::Number(b)) => {
                f64::from_bits(canonical_bits(*a)).total_cmp(&f64::from_bits(canonical_bits(*b)))
            }
            _ => self.type_rank().cmp(&other.type_rank()),
        }
    }
}

impl Hash for KeyPart {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.type_rank().hash(state);
        match self {
            KeyPart::Bytes(b) => b.hash(state),
            KeyPart::String(s) => s.hash(state),
            KeyPart::BigInt(i) => i.hash(state),
            // Equal numbers have equal canonical bits (total order), so hashing them agrees
            // with `Eq`, including for NaNs with different payloads.
            KeyPart::Number(x) => canonical_bits(*x).hash(state),
            KeyPart::Bool(_) => {}
        }
    }
}

impl From<&str> for KeyPart {
    fn from(s: &str) -> Self {
        KeyPart::String(s.to_owned())
    }
}

impl From<String> for KeyPart {
    fn from(s: String) -> Self {
        KeyPart::String(s)
    }
}

impl From<&String> for KeyPart {
    fn from(s: &String) -> Self {
        KeyPart::String(s.clone())
    }
}

impl From<char> for KeyPart {
    fn from(c: char) -> Self {
        KeyPart::String(c.to_string())
    }
}

impl From<&[u8]> for KeyPart {
    fn from(b: &[u8]) -> Self {
        KeyPart::Bytes(b.to_vec())
    }
}

impl From<Vec<u8>> for KeyPart {
    fn from(b: Vec<u8>) -> Self {
        KeyPart::Bytes(b)
    }
}

impl<const N: usize> From<&[u8; N]> for KeyPart {
    fn from(b: &[u8; N]) -> Self {
        KeyPart::Bytes(b.to_vec())
    }
}

impl<const N: usize> From<[u8; N]> for KeyPart {
    fn from(b: [u8; N]) -> Self {
        KeyPart::Bytes(b.to_vec())
    }
}

impl From<f64> for KeyPart {
    fn from(x: f64) -> Self {
        KeyPart::Number(x)
    }
}

impl From<f32> for KeyPart {
    fn from(x: f32) -> Self {
        KeyPart::Number(f64::from(x))
    }
}

impl From<bool> for KeyPart {
    fn from(b: bool) -> Self {
        KeyPart::Bool(b)
    }
}

impl From<BigInt> for KeyPart {
    fn from(i: BigInt) -> Self {
        KeyPart::BigInt(i)
    }
}

impl From<&BigInt> for KeyPart {
    fn from(i: &BigInt) -> Self {
        KeyPart::BigInt(i.clone())
    }
}

macro_rules! integer_parts {
    ($($t:ty),*) => {$(
        impl From<$t> for KeyPart {
            /// Integers become exact bigints.
            fn from(i: $t) -> Self {
                KeyPart::BigInt(BigInt::from(i))
            }
        }
    )*};
}

integer_parts!(
    i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);

impl std::fmt::Debug for KeyPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for KeyPart {
    /// Shows the part the way it is written in JavaScript: `"text"`, `42n`, `3.14`, `true`;
    /// bytes as a Rust byte string `b"\x01ab"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPart::Bytes(b) => crate::fmt::write_bytes(f, b),
            KeyPart::String(s) => crate::fmt::write_string(f, s),
            KeyPart::Number(x) => crate::fmt::write_number(f, *x),
            KeyPart::BigInt(i) => write!(f, "{i}n"),
            KeyPart::Bool(b) => write!(f, "{b}"),
        }
    }
}
