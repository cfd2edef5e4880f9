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
//! stamp bytes come between the tag and the payload. Any other value's versionstamp is its
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

/// What one etcd value holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The value, `None` for a tombstone.
    pub(crate) value: Option<Value>,
    /// The deadline (Unix ms); [`NO_DEADLINE`] when it does not expire, 0 for a tombstone.
    pub(crate) deadline: u64,
    /// The versionstamp the value was written with, when it is not its `mod_revision`.
    pub(crate) stamp: Option<Versionstamp>,
}

impl Stored {
    /// The value, if it is live at `now` (not a tombstone, not past its deadline).
    pub(crate) fn live(&self, now: u64) -> Option<&Value> {
        self.value.as_ref().filter(|_| self.deadline > now)
    }

    /// The versionstamp of the value whose etcd `mod_revision` is `mod_revision`.
    pub(crate) fn versionstamp(&self, mod_revision: i64) -> Versionstamp {
        self.stamp
            .unwrap_or_else(|| Versionstamp::from_version(u64::try_from(mod_revision).unwrap_or(0)))
    }

    /// The deadline as an entry shows it.
    pub(crate) fn expires_at(&self) -> Option<u64> {
        (self.deadline != NO_DEADLINE).then_some(self.deadline)
    }
}

/// The envelope of `value`, expiring at `deadline` if any, carrying `stamp` if given. A
/// deadline of `u64::MAX` is the same as none.
pub(crate) fn encode(value: &Value, deadline: Option<u64>, stamp: Option<Versionstamp>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 10 + value.size());
    out.extend_from_slice(&deadline.unwrap_or(NO_DEADLINE).to_be_bytes());
    let (tag, payload): (u8, &[u8]) = match value {
        Value::Bytes(b) => (TAG_BYTES, b),
        Value::U64(_) => (TAG_U64, &[]),
        Value::V8(b) => (TAG_V8, b),
    };
    out.push(if stamp.is_some() { tag | STAMPED } else { tag });
    if let Some(stamp) = stamp {
        out.extend_from_slice(stamp.as_bytes());
    }
    match value {
        Value::U64(n) => out.extend_from_slice(&n.to_be_bytes()),
        _ => out.extend_from_slice(payload),
    }
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
    let (tag, stamp, payload) = if tag & STAMPED != 0 && tag != TAG_TOMBSTONE {
        let (stamp, payload) = payload
            .split_first_chunk::<10>()
            .ok_or_else(|| corrupt("a stamped value without its versionstamp".into()))?;
        (
            tag & !STAMPED,
            Some(Versionstamp::from_bytes(*stamp)),
            payload,
        )
    } else {
        (tag, None, payload)
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

    #[test]
    fn values_round_trip_with_and_without_deadline() {
        for value in [
            Value::from(&b"abc"[..]),
            Value::U64(7),
            Value::V8(Bytes::from_static(&[0xff, 0x0f, b'T'])),
            Value::from(&b""[..]),
        ] {
            for deadline in [None, Some(0), Some(1234)] {
                for stamp in [
                    None,
                    Some(Versionstamp::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 0, 1])),
                ] {
                    let stored =
                        decode(b"k", &encode(&value, deadline, stamp)).expect("an envelope");
                    assert_eq!(stored.value.as_ref(), Some(&value));
                    assert_eq!(stored.expires_at(), deadline);
                    assert_eq!(stored.stamp, stamp);
                    let expected = stamp.unwrap_or(Versionstamp::from_version(9));
                    assert_eq!(stored.versionstamp(9), expected);
                }
            }
        }
        let dead = decode(b"k", &tombstone()).expect("an envelope");
        assert_eq!(dead.value, None);
        assert_eq!(dead.live(0), None);
    }

    #[test]
    fn the_byte_comparison_says_whether_a_value_is_live() {
        let value = Value::U64(1);
        let stamp = Some(Versionstamp::from_bytes([9; 10]));
        for (deadline, stamp) in [0u64, 1, 99, 100, 101, 5000]
            .into_iter()
            .flat_map(|d| [(d, None), (d, stamp)])
        {
            let bytes = encode(&value, Some(deadline), stamp);
            let stored = decode(b"k", &bytes).expect("an envelope");
            for now in [0u64, 99, 100, 101] {
                let greater = bytes.as_slice() > live_after(now).as_slice();
                assert_eq!(greater, stored.live(now).is_some(), "{deadline} at {now}");
            }
        }
        assert!(tombstone().as_slice() < live_after(0).as_slice());
        assert!(encode(&value, None, None).as_slice() > live_after(u64::MAX - 1).as_slice());
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
        ] {
            assert!(
                matches!(decode(b"k", bad), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }
}
