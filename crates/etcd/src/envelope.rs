//! How a tuplekv value is stored in an etcd value: an envelope holding its deadline, its
//! encoding and its bytes, or a tombstone.
//!
//! Layout: the deadline (Unix ms, 8 bytes big-endian, [`NO_DEADLINE`] when the value does
//! not expire), one tag byte, then the payload. The deadline comes first so that etcd can
//! compare it: a value is live at `now` exactly when its bytes are greater than
//! `(now + 1)` as 8 big-endian bytes ([`live_after`]), which lets a transaction's comparison
//! refuse a value that expired between the read and the commit. A tombstone has deadline 0,
//! so it is never live: deletions stay in etcd as keys, and a range comparison sees them.

use bytes::Bytes;
use tuplekv_engine::{Error, Value};

/// The deadline of a value that never expires.
pub(crate) const NO_DEADLINE: u64 = u64::MAX;

/// Bytes of the deadline and the tag.
const HEADER_LEN: usize = 9;

const TAG_TOMBSTONE: u8 = 0;
const TAG_BYTES: u8 = 1;
const TAG_U64: u8 = 2;
const TAG_V8: u8 = 3;

/// What one etcd value holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The value, `None` for a tombstone.
    pub(crate) value: Option<Value>,
    /// The deadline (Unix ms); [`NO_DEADLINE`] when it does not expire, 0 for a tombstone.
    pub(crate) deadline: u64,
}

impl Stored {
    /// The value, if it is live at `now` (not a tombstone, not past its deadline).
    pub(crate) fn live(&self, now: u64) -> Option<&Value> {
        self.value.as_ref().filter(|_| self.deadline > now)
    }

    /// The deadline as an entry shows it.
    pub(crate) fn expires_at(&self) -> Option<u64> {
        (self.deadline != NO_DEADLINE).then_some(self.deadline)
    }
}

/// The envelope of `value`, expiring at `deadline` if any. A deadline of `u64::MAX` is the
/// same as none.
pub(crate) fn encode(value: &Value, deadline: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + value.size());
    out.extend_from_slice(&deadline.unwrap_or(NO_DEADLINE).to_be_bytes());
    match value {
        Value::Bytes(b) => {
            out.push(TAG_BYTES);
            out.extend_from_slice(b);
        }
        Value::U64(n) => {
            out.push(TAG_U64);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Value::V8(b) => {
            out.push(TAG_V8);
            out.extend_from_slice(b);
        }
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
    Ok(Stored { value, deadline })
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
                let stored = decode(b"k", &encode(&value, deadline)).expect("an envelope");
                assert_eq!(stored.value.as_ref(), Some(&value));
                assert_eq!(stored.expires_at(), deadline);
            }
        }
        let dead = decode(b"k", &tombstone()).expect("an envelope");
        assert_eq!(dead.value, None);
        assert_eq!(dead.live(0), None);
    }

    #[test]
    fn the_byte_comparison_says_whether_a_value_is_live() {
        let value = Value::U64(1);
        for deadline in [0u64, 1, 99, 100, 101, 5000] {
            let bytes = encode(&value, Some(deadline));
            let stored = decode(b"k", &bytes).expect("an envelope");
            for now in [0u64, 99, 100, 101] {
                let greater = bytes.as_slice() > live_after(now).as_slice();
                assert_eq!(greater, stored.live(now).is_some(), "{deadline} at {now}");
            }
        }
        assert!(tombstone().as_slice() < live_after(0).as_slice());
        assert!(encode(&value, None).as_slice() > live_after(u64::MAX - 1).as_slice());
    }

    #[test]
    fn foreign_bytes_are_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"1234567",
            b"12345678",
            b"\0\0\0\0\0\0\0\x01\x09",
            b"\0\0\0\0\0\0\0\x01\x02abc",
        ] {
            assert!(
                matches!(decode(b"k", bad), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }
}
