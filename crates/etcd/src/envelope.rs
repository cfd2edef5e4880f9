//! How a tuplekv value is stored in an etcd value: an envelope holding its deadline, its
//! encoding and its bytes, or a tombstone.
//!
//! Layout: the deadline (Unix ms, 8 bytes big-endian, [`NO_DEADLINE`] when the value does
//! not expire), one tag byte, then the payload. The deadline comes first so that etcd can
//! compare it: a value is live at `now` exactly when its bytes are greater than
//! `(now + 1)` as 8 big-endian bytes ([`live_after`]), which lets a transaction's comparison
//! refuse a value that expired between the read and the commit. A tombstone has deadline 0,
//! so it is never live: deletions stay in etcd as keys, and a range comparison sees them.
//!
//! A value written by a commit with a versionstamped key carries that commit's versionstamp
//! (see `commit`), which is not its etcd revision: the tag then has [`STAMPED`] set and the 10
//! stamp bytes come between the tag and the payload. A value written by a numbered commit
//! that shared its etcd transaction with others (see `commit`) carries the last two bytes of
//! its stamp, its revision being the `mod_revision`: the tag then has [`RELATIVE`] set and the
//! 2 bytes follow the payload, so that the envelope of a counter's number begins with the
//! same bytes whatever commit wrote it ([`number_floor`]: a transaction can compare a
//! counter's number whatever the suffix). Any other value's versionstamp is its
//! `mod_revision`.

use bytes::Bytes;
use tuplekv_engine::{Error, Value, Versionstamp};

/// The deadline of a value that never expires.
pub(crate) const NO_DEADLINE: u64 = u64::MAX;

/// Bytes of the deadline and the tag.
const HEADER_LEN: usize = 9;

const TAG_TOMBSTONE: u8 = 0;
const TAG_BYTES: u8 = 1;
const TAG_U64: u8 = 2;
const TAG_V8: u8 = 3;
/// Set in the tag of a value that carries its versionstamp.
const STAMPED: u8 = 0x80;
/// Set in the tag of a value that carries the last two bytes of its versionstamp, after the
/// payload.
const RELATIVE: u8 = 0x40;

/// Where a value's versionstamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// The value's `mod_revision`, followed by two zero bytes.
    Revision,
    /// The stamp in the envelope (a claimed one).
    Claimed(Versionstamp),
    /// The value's `mod_revision`, followed by these two bytes.
    Relative(u16),
}

/// What one etcd value holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The value, `None` for a tombstone.
    pub(crate) value: Option<Value>,
    /// The deadline (Unix ms); [`NO_DEADLINE`] when it does not expire, 0 for a tombstone.
    pub(crate) deadline: u64,
    /// Where the value's versionstamp comes from.
    pub(crate) stamp: Stamp,
}

impl Stored {
    /// The value, if it is live at `now` (not a tombstone, not past its deadline).
    pub(crate) fn live(&self, now: u64) -> Option<&Value> {
        self.value.as_ref().filter(|_| self.deadline > now)
    }

    /// The versionstamp of the value whose etcd `mod_revision` is `mod_revision`.
    pub(crate) fn versionstamp(&self, mod_revision: i64) -> Versionstamp {
        let revision = Versionstamp::from_version(u64::try_from(mod_revision).unwrap_or(0));
        match self.stamp {
            Stamp::Revision => revision,
            Stamp::Claimed(stamp) => stamp,
            Stamp::Relative(suffix) => with_suffix(revision, suffix),
        }
    }

    /// The number a numbered commit left in a counter: a `U64` in the relative form without
    /// a deadline (what [`number_floor`] and [`number_ceiling`] bracket).
    pub(crate) fn number(&self) -> Option<u64> {
        match (&self.value, self.stamp) {
            (Some(Value::U64(n)), Stamp::Relative(_)) if self.deadline == NO_DEADLINE => Some(*n),
            _ => None,
        }
    }

    /// The deadline as an entry shows it.
    pub(crate) fn expires_at(&self) -> Option<u64> {
        (self.deadline != NO_DEADLINE).then_some(self.deadline)
    }
}

/// `revision` (a revision's stamp) with `suffix` as its last two bytes.
pub(crate) fn with_suffix(revision: Versionstamp, suffix: u16) -> Versionstamp {
    let mut bytes = *revision.as_bytes();
    bytes[8..].copy_from_slice(&suffix.to_be_bytes());
    Versionstamp::from_bytes(bytes)
}

/// The envelope of `value`, expiring at `deadline` if any, with its versionstamp as `stamp`
/// says. A deadline of `u64::MAX` is the same as none.
pub(crate) fn encode(value: &Value, deadline: Option<u64>, stamp: Stamp) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 10 + value.size());
    out.extend_from_slice(&deadline.unwrap_or(NO_DEADLINE).to_be_bytes());
    let (tag, payload): (u8, &[u8]) = match value {
        Value::Bytes(b) => (TAG_BYTES, b),
        Value::U64(_) => (TAG_U64, &[]),
        Value::V8(b) => (TAG_V8, b),
    };
    out.push(match stamp {
        Stamp::Revision => tag,
        Stamp::Claimed(_) => tag | STAMPED,
        Stamp::Relative(_) => tag | RELATIVE,
    });
    if let Stamp::Claimed(stamp) = stamp {
        out.extend_from_slice(stamp.as_bytes());
    }
    match value {
        Value::U64(n) => out.extend_from_slice(&n.to_be_bytes()),
        _ => out.extend_from_slice(payload),
    }
    if let Stamp::Relative(suffix) = stamp {
        out.extend_from_slice(&suffix.to_be_bytes());
    }
    out
}

/// The first bytes of the envelope a numbered commit writes into a counter holding `n` (a
/// `U64` without deadline, in the relative form): every such envelope, whatever its suffix,
/// is greater than this and less than [`number_ceiling`], and no other envelope is.
pub(crate) fn number_floor(n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 8);
    out.extend_from_slice(&NO_DEADLINE.to_be_bytes());
    out.push(TAG_U64 | RELATIVE);
    out.extend_from_slice(&n.to_be_bytes());
    out
}

/// Above every envelope of the number `n` in the relative form: see [`number_floor`].
pub(crate) fn number_ceiling(n: u64) -> Vec<u8> {
    let mut out = number_floor(n);
    out.extend_from_slice(&[0xff; 3]);
    out
}

/// The envelope of a deletion.
pub(crate) fn tombstone() -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    if let Some(tag) = out.last_mut() {
        *tag = TAG_TOMBSTONE;
    }
    out
}

/// What etcd compares a value with to require it live at `now` (`Greater`): see the module
/// docs.
pub(crate) fn live_after(now: u64) -> Vec<u8> {
    now.saturating_add(1).to_be_bytes().to_vec()
}

/// Decodes an envelope read at etcd key `key` (named in the error).
///
/// # Errors
/// [`Error::Corrupt`] if the bytes are not an envelope (a value tuplekv did not write).
pub(crate) fn decode(key: &[u8], bytes: &[u8]) -> Result<Stored, Error> {
    let corrupt = |reason: String| Error::Corrupt {
        path: format!("etcd key {}", String::from_utf8_lossy(key)).into(),
        offset: 0,
        reason,
    };
    let (deadline, rest) = bytes.split_first_chunk::<8>().ok_or_else(|| {
        corrupt(format!(
            "a value of {} bytes holds no envelope",
            bytes.len()
        ))
    })?;
    let deadline = u64::from_be_bytes(*deadline);
    let (&tag, payload) = rest
        .split_first()
        .ok_or_else(|| corrupt("the envelope has no tag".into()))?;
    let (tag, stamp, payload) = if tag & STAMPED != 0 && tag & RELATIVE != 0 {
        return Err(corrupt(format!(
            "value tag {tag} is both stamped and relative"
        )));
    } else if tag & STAMPED != 0 {
        let (stamp, payload) = payload
            .split_first_chunk::<10>()
            .ok_or_else(|| corrupt("a stamped value without its versionstamp".into()))?;
        (
            tag & !STAMPED,
            Stamp::Claimed(Versionstamp::from_bytes(*stamp)),
            payload,
        )
    } else if tag & RELATIVE != 0 {
        let (payload, suffix) = payload
            .split_last_chunk::<2>()
            .ok_or_else(|| corrupt("a relative value without its suffix".into()))?;
        (
            tag & !RELATIVE,
            Stamp::Relative(u16::from_be_bytes(*suffix)),
            payload,
        )
    } else {
        (tag, Stamp::Revision, payload)
    };
    let value = match tag {
        TAG_TOMBSTONE => None,
        TAG_BYTES => Some(Value::Bytes(Bytes::copy_from_slice(payload))),
        TAG_V8 => Some(Value::V8(Bytes::copy_from_slice(payload))),
        TAG_U64 => {
            let n: [u8; 8] = payload
                .try_into()
                .map_err(|_| corrupt(format!("a U64 of {} bytes, not 8", payload.len())))?;
            Some(Value::U64(u64::from_be_bytes(n)))
        }
        other => return Err(corrupt(format!("unknown value tag {other}"))),
    };
    Ok(Stored {
        value,
        deadline,
        stamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stamps a value can be written with.
    fn stamps() -> [Stamp; 4] {
        [
            Stamp::Revision,
            Stamp::Claimed(Versionstamp::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 0, 1])),
            Stamp::Relative(0),
            Stamp::Relative(0x0102),
        ]
    }

    #[test]
    fn values_round_trip_with_and_without_deadline() {
        for value in [
            Value::from(&b"abc"[..]),
            Value::U64(7),
            Value::V8(Bytes::from_static(&[0xff, 0x0f, b'T'])),
            Value::from(&b""[..]),
        ] {
            for deadline in [None, Some(0), Some(1234)] {
                for stamp in stamps() {
                    let stored =
                        decode(b"k", &encode(&value, deadline, stamp)).expect("an envelope");
                    assert_eq!(stored.value.as_ref(), Some(&value));
                    assert_eq!(stored.expires_at(), deadline);
                    assert_eq!(stored.stamp, stamp);
                    let expected = match stamp {
                        Stamp::Revision => Versionstamp::from_version(9),
                        Stamp::Claimed(s) => s,
                        Stamp::Relative(x) => {
                            let mut b = *Versionstamp::from_version(9).as_bytes();
                            b[8..].copy_from_slice(&x.to_be_bytes());
                            Versionstamp::from_bytes(b)
                        }
                    };
                    assert_eq!(stored.versionstamp(9), expected);
                }
            }
        }
        let dead = decode(b"k", &tombstone()).expect("an envelope");
        assert_eq!(dead.value, None);
        assert_eq!(dead.live(0), None);
    }

    #[test]
    fn a_counters_number_lies_between_its_floor_and_ceiling_whatever_its_suffix() {
        for n in [0u64, 1, 255, 256, u64::MAX - 1, u64::MAX] {
            let (floor, ceiling) = (number_floor(n), number_ceiling(n));
            for suffix in [0u16, 1, 0xff, 0xfffe, 0xffff] {
                let bytes = encode(&Value::U64(n), None, Stamp::Relative(suffix));
                assert!(floor.as_slice() < bytes.as_slice(), "{n} {suffix}");
                assert!(bytes.as_slice() < ceiling.as_slice(), "{n} {suffix}");
                let stored = decode(b"k", &bytes).expect("an envelope");
                assert_eq!(stored.number(), Some(n));
            }
            // Any other envelope falls outside: another number, a deadline, another stamp or
            // type, a tombstone.
            let others = [
                encode(&Value::U64(n.wrapping_add(1)), None, Stamp::Relative(0)),
                encode(
                    &Value::U64(n.wrapping_sub(1)),
                    None,
                    Stamp::Relative(0xffff),
                ),
                encode(&Value::U64(n), Some(5), Stamp::Relative(0)),
                encode(&Value::U64(n), None, Stamp::Revision),
                encode(
                    &Value::U64(n),
                    None,
                    Stamp::Claimed(Versionstamp::from_version(3)),
                ),
                encode(&Value::from(&n.to_be_bytes()[..]), None, Stamp::Relative(0)),
                tombstone(),
            ];
            for other in others {
                let inside =
                    floor.as_slice() < other.as_slice() && other.as_slice() < ceiling.as_slice();
                assert!(!inside, "{n}: {other:?}");
                assert_ne!(decode(b"k", &other).expect("an envelope").number(), Some(n));
            }
        }
    }

    #[test]
    fn the_byte_comparison_says_whether_a_value_is_live() {
        let value = Value::U64(1);
        for (deadline, stamp) in [0u64, 1, 99, 100, 101, 5000]
            .into_iter()
            .flat_map(|d| stamps().map(|s| (d, s)))
        {
            let bytes = encode(&value, Some(deadline), stamp);
            let stored = decode(b"k", &bytes).expect("an envelope");
            for now in [0u64, 99, 100, 101] {
                let greater = bytes.as_slice() > live_after(now).as_slice();
                assert_eq!(greater, stored.live(now).is_some(), "{deadline} at {now}");
            }
        }
        assert!(tombstone().as_slice() < live_after(0).as_slice());
        assert!(
            encode(&value, None, Stamp::Revision).as_slice() > live_after(u64::MAX - 1).as_slice()
        );
    }

    #[test]
    fn foreign_bytes_are_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"1234567",
            b"12345678",
            b"\0\0\0\0\0\0\0\x01\x09",
            b"\0\0\0\0\0\0\0\x01\x02abc",
            b"\0\0\0\0\0\0\0\x01\x81short",
            b"\0\0\0\0\0\0\0\x01\x82\0\0\0\0\0\0\0\0\0\x01abc",
            b"\0\0\0\0\0\0\0\x01\x41\x01",
            b"\0\0\0\0\0\0\0\x01\x42\0\0\0\0\0\0\0\x01\0",
            b"\0\0\0\0\0\0\0\x01\xc1\0\0\0\0\0\0\0\0\0\x01ab",
        ] {
            assert!(
                matches!(decode(b"k", bad), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }
}
