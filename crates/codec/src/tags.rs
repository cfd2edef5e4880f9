//! Type codes of the encoding and the bit tricks for doubles, shared by encoder and decoder.

/// Terminator of a bytes/string payload; inside a payload a data `0x00` is written `00 ff`.
pub(crate) const NUL: u8 = 0x00;
/// Follows a data `0x00` inside a bytes or string payload.
pub(crate) const ESCAPE: u8 = 0xff;
pub(crate) const BYTES: u8 = 0x01;
pub(crate) const STRING: u8 = 0x02;
/// Negative bigint whose magnitude needs more than 8 bytes (length byte follows, inverted).
pub(crate) const NEG_INT_LONG: u8 = 0x0b;
/// `0n`; `INT_ZERO ± n` is a bigint with an `n`-byte magnitude, `n` in 1..=8.
pub(crate) const INT_ZERO: u8 = 0x14;
/// Positive bigint whose magnitude needs more than 8 bytes (length byte follows).
pub(crate) const POS_INT_LONG: u8 = 0x1d;
pub(crate) const DOUBLE: u8 = 0x21;
pub(crate) const FALSE: u8 = 0x26;
pub(crate) const TRUE: u8 = 0x27;

/// Magnitudes up to this many bytes carry their length in the type code.
pub(crate) const INT_SHORT_MAX: usize = 8;

const SIGN_BIT: u64 = 1 << 63;
/// Bits of the NaN every positive NaN is written as.
pub(crate) const CANONICAL_NAN_POS: u64 = 0x7ff8_0000_0000_0000;
/// Bits of the NaN every negative NaN is written as.
pub(crate) const CANONICAL_NAN_NEG: u64 = 0xfff8_0000_0000_0000;

/// The bits of `x` with NaN payloads canonicalised (sign kept), as Deno does before encoding.
pub(crate) fn canonical_bits(x: f64) -> u64 {
    if x.is_nan() {
        if x.is_sign_negative() {
            CANONICAL_NAN_NEG
        } else {
            CANONICAL_NAN_POS
        }
    } else {
        x.to_bits()
    }
}

/// Maps IEEE-754 bits to an unsigned integer with the same order as `f64::total_cmp`:
/// negative numbers have all bits flipped, positive numbers only the sign bit.
pub(crate) fn double_to_ordered(bits: u64) -> u64 {
    if bits & SIGN_BIT != 0 {
        !bits
    } else {
        bits ^ SIGN_BIT
    }
}

/// Inverse of [`double_to_ordered`].
pub(crate) fn ordered_to_double(u: u64) -> u64 {
    if u & SIGN_BIT != 0 { u ^ SIGN_BIT } else { !u }
}
