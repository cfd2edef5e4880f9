//! What a mutation leaves at its key: the one definition every backend applies.
//!
//! The engine's commit pipeline, a [`Transaction`](crate::Transaction) reading its own buffered
//! writes, and other stores built on the engine's types (`EtcdStore`) all call [`apply`], so a
//! mutation means the same thing wherever it runs. The test kit's reference model stays
//! independent on purpose: it is the oracle this function is checked against.

use crate::atomic::{Expiry, MutationKind};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::sum::sum_numbers;
use crate::value::Value;

/// What a mutation leaves at its key: a value with its expiry deadline (Unix milliseconds),
/// or nothing (the key is deleted).
pub type Staged = Option<(Value, Option<u64>)>;

/// Applies `kind`, mutation number `index` of its commit (on `key`), to the key's `current`
/// live value.
///
/// `now` is asked for the time, in Unix milliseconds, only when an [`Expiry::In`] needs it;
/// a commit passes one clock reading to all its mutations, so values set together expire
/// together. The function is pure otherwise: it reads nothing else and writes nothing.
///
/// # Errors
/// [`Error::NotU64`] for `sum`, `min` or `max` on a value that is not a `U64`, naming `index`
/// and `key`; a bounded sum's errors (mixed number types, a bound of the wrong type, a result
/// out of bounds without clamping).
pub fn apply(
    kind: MutationKind,
    current: Option<&Value>,
    now: impl FnOnce() -> u64,
    index: usize,
    key: &KeyBytes,
) -> Result<Staged, Error> {
    let u64_op = |op: &'static str, n: u64, f: fn(u64, u64) -> u64| match current {
        None => Ok(Some((Value::U64(n), None))),
        Some(Value::U64(old)) => Ok(Some((Value::U64(f(*old, n)), None))),
        Some(_) => Err(Error::NotU64 {
            op,
            index,
            key: key.clone(),
        }),
    };
    match kind {
        MutationKind::Set { value, expiry }
        | MutationKind::SetSuffixVersionstampedKey { value, expiry } => {
            let deadline = expiry.map(|e| match e {
                Expiry::In(d) => {
                    now().saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }
                Expiry::At(deadline) => deadline,
            });
            Ok(Some((value, deadline)))
        }
        MutationKind::Delete => Ok(None),
        MutationKind::Sum(n) => u64_op("sum", n, u64::wrapping_add),
        MutationKind::Min(n) => u64_op("min", n, u64::min),
        MutationKind::Max(n) => u64_op("max", n, u64::max),
        MutationKind::SumBounded(sum) => Ok(Some((
            sum_numbers(
                &sum.operand,
                sum.min.as_ref(),
                sum.max.as_ref(),
                sum.clamp,
                current,
            )?,
            None,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key() -> KeyBytes {
        KeyBytes::from(&b"\x02k\x00"[..])
    }

    #[test]
    fn u64_operations_start_from_their_operand_on_an_absent_key() {
        for kind in [
            MutationKind::Sum(5),
            MutationKind::Min(5),
            MutationKind::Max(5),
        ] {
            let staged = apply(kind, None, || unreachable!(), 0, &key()).unwrap();
            assert_eq!(staged, Some((Value::U64(5), None)));
        }
    }

    #[test]
    fn u64_operations_combine_with_the_current_value() {
        let old = Value::U64(u64::MAX);
        let sum = apply(MutationKind::Sum(2), Some(&old), || 0, 0, &key()).unwrap();
        assert_eq!(sum, Some((Value::U64(1), None)), "sum wraps");
        let min = apply(MutationKind::Min(2), Some(&old), || 0, 0, &key()).unwrap();
        assert_eq!(min, Some((Value::U64(2), None)));
        let max = apply(MutationKind::Max(2), Some(&old), || 0, 0, &key()).unwrap();
        assert_eq!(max, Some((Value::U64(u64::MAX), None)));
    }

    #[test]
    fn u64_operations_on_another_type_name_the_mutation_and_its_key() {
        let err = apply(
            MutationKind::Max(1),
            Some(&Value::Bytes(vec![1].into())),
            || 0,
            3,
            &key(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::NotU64 { op: "max", index: 3, key: k } if *k == key()),
            "{err:?}"
        );
    }

    #[test]
    fn an_expiry_in_a_duration_reads_the_clock_once_and_an_absolute_one_not_at_all() {
        let set = |expiry| MutationKind::Set {
            value: Value::U64(1),
            expiry: Some(expiry),
        };
        let mut reads = 0;
        let staged = apply(
            set(Expiry::In(Duration::from_millis(250))),
            None,
            || {
                reads += 1;
                1_000
            },
            0,
            &key(),
        )
        .unwrap();
        assert_eq!((staged, reads), (Some((Value::U64(1), Some(1_250))), 1));
        let staged = apply(set(Expiry::At(7)), None, || unreachable!(), 0, &key()).unwrap();
        assert_eq!(staged, Some((Value::U64(1), Some(7))));
        let far = apply(set(Expiry::In(Duration::MAX)), None, || 1, 0, &key()).unwrap();
        assert_eq!(
            far,
            Some((Value::U64(1), Some(u64::MAX))),
            "a far deadline saturates"
        );
    }

    #[test]
    fn a_delete_leaves_nothing_whatever_was_there() {
        let staged = apply(MutationKind::Delete, Some(&Value::U64(1)), || 0, 0, &key()).unwrap();
        assert_eq!(staged, None);
    }
}
