//! The engine error behind a refusal, as a tuplekv server sends it beside the refusal's text:
//! [`ERROR_HEADER`] names the error with a stable code and its fields, so tuplekv's client
//! gives the same [`Error`] a local store gives, without reading the text (which is denokv's,
//! written for people, and free to change).
//!
//! A value is the code, then `name=value` fields, one space apart: keys and versionstamps in
//! lower-case hex, numbers in decimal, names from a closed set. Only the errors a client can
//! rebuild whole have a code; the rest travel as text only, and a client that meets an
//! unknown code (from a newer server) falls back to the status and text.

use tuplekv_engine::{Error, KeyBytes, SumError};

/// The response header that carries a refusal's engine error ([`error_header`] writes it,
/// [`error_from_header`] reads it). Deno's and Node's clients ignore it.
pub const ERROR_HEADER: &str = "x-tuplekv-error";

/// The operations of [`Error::NotU64`], as the engine names them.
const U64_OPS: [&str; 3] = ["sum", "min", "max"];

/// The kinds [`SumError::KindMismatch`] names.
const SUM_KINDS: [&str; 3] = ["BigInt", "Number", "KvU64"];

/// The [`ERROR_HEADER`] value for `e`; `None` for an error without a code, which a client
/// knows only by its status and text. A [`Error::NotU64`] goes without its key: the client
/// has it, in the write it sent, at the index the header gives.
pub fn error_header(e: &Error) -> Option<String> {
    let (code, fields): (&str, Vec<(&str, String)>) = match e {
        Error::KeyTooLargeForWrite { size } => {
            ("key-too-large-for-write", vec![("size", size.to_string())])
        }
        Error::KeyTooLargeForRead { size } => {
            ("key-too-large-for-read", vec![("size", size.to_string())])
        }
        Error::EmptyKey => ("empty-key", vec![]),
        Error::ValueTooLarge { size } => ("value-too-large", vec![("size", size.to_string())]),
        Error::TooManyChecks { count } => ("too-many-checks", vec![("count", count.to_string())]),
        Error::TooManyMutations { count } => {
            ("too-many-mutations", vec![("count", count.to_string())])
        }
        Error::TotalMutationSizeTooLarge { size } => (
            "total-mutation-size-too-large",
            vec![("size", size.to_string())],
        ),
        Error::TotalKeySizeTooLarge { size } => {
            ("total-key-size-too-large", vec![("size", size.to_string())])
        }
        Error::TooManyRanges { count } => ("too-many-ranges", vec![("count", count.to_string())]),
        Error::TooManyWatchedKeys { count } => {
            ("too-many-watched-keys", vec![("count", count.to_string())])
        }
        Error::TooManyEntries { count } => ("too-many-entries", vec![("count", count.to_string())]),
        Error::ZeroLimit => ("zero-limit", vec![]),
        Error::ZeroBatchSize => ("zero-batch-size", vec![]),
        Error::ExpireInTooLarge { ms } => ("expire-in-too-large", vec![("ms", ms.to_string())]),
        Error::NotU64 { op, index, .. } => (
            "not-u64",
            vec![("op", (*op).to_owned()), ("index", index.to_string())],
        ),
        Error::Sum(sum) => sum_fields(sum)?,
        Error::CounterNotU64 { key } => ("counter-not-u64", vec![("key", hex(key))]),
        Error::CounterExhausted {
            key,
            next,
            count,
            max,
        } => (
            "counter-exhausted",
            vec![
                ("key", hex(key)),
                ("next", next.to_string()),
                ("count", count.to_string()),
                ("max", max.to_string()),
            ],
        ),
        Error::NumberTooWide { number, width } => (
            "number-too-wide",
            vec![("number", number.to_string()), ("width", width.to_string())],
        ),
        Error::SnapshotExpired { versionstamp } if is_versionstamp(versionstamp) => (
            "snapshot-expired",
            vec![("versionstamp", versionstamp.clone())],
        ),
        _ => return None,
    };
    let mut value = code.to_owned();
    for (name, field) in fields {
        value.push(' ');
        value.push_str(name);
        value.push('=');
        value.push_str(&field);
    }
    Some(value)
}

/// The code and fields of a [`SumError`]: `sum reason=...`, with the kinds of a mismatch;
/// `None` for a kind this crate does not know yet.
fn sum_fields(sum: &SumError) -> Option<(&'static str, Vec<(&'static str, String)>)> {
    let reason = |r: &str| vec![("reason", r.to_owned())];
    let fields = match sum {
        SumError::InvalidParameters => reason("invalid-parameters"),
        SumError::BoundsOfAnotherKind => reason("bounds-of-another-kind"),
        SumError::UnsupportedStoredValue => reason("unsupported-stored-value"),
        SumError::InvalidStoredValue => reason("invalid-stored-value"),
        SumError::BoundsOnU64 => reason("bounds-on-u64"),
        SumError::OutOfRange => reason("out-of-range"),
        SumError::KindMismatch { stored, operand } => vec![
            ("reason", "kind-mismatch".to_owned()),
            ("stored", (*stored).to_owned()),
            ("operand", (*operand).to_owned()),
        ],
        _ => return None,
    };
    Some(("sum", fields))
}

/// The engine error an [`ERROR_HEADER`] value names; `None` unless it is exactly one that
/// [`error_header`] writes (a known code with exactly its fields, each well formed).
pub fn error_from_header(value: &str) -> Option<Error> {
    let mut words = value.split(' ');
    let code = words.next()?;
    let fields = Fields(
        words
            .map(|w| w.split_once('='))
            .collect::<Option<Vec<_>>>()?,
    );
    let e = match code {
        "key-too-large-for-write" => Error::KeyTooLargeForWrite {
            size: fields.only_decimal("size")?,
        },
        "key-too-large-for-read" => Error::KeyTooLargeForRead {
            size: fields.only_decimal("size")?,
        },
        "empty-key" if fields.are(&[]) => Error::EmptyKey,
        "value-too-large" => Error::ValueTooLarge {
            size: fields.only_decimal("size")?,
        },
        "too-many-checks" => Error::TooManyChecks {
            count: fields.only_decimal("count")?,
        },
        "too-many-mutations" => Error::TooManyMutations {
            count: fields.only_decimal("count")?,
        },
        "total-mutation-size-too-large" => Error::TotalMutationSizeTooLarge {
            size: fields.only_decimal("size")?,
        },
        "total-key-size-too-large" => Error::TotalKeySizeTooLarge {
            size: fields.only_decimal("size")?,
        },
        "too-many-ranges" => Error::TooManyRanges {
            count: fields.only_decimal("count")?,
        },
        "too-many-watched-keys" => Error::TooManyWatchedKeys {
            count: fields.only_decimal("count")?,
        },
        "too-many-entries" => Error::TooManyEntries {
            count: fields.only_decimal("count")?,
        },
        "zero-limit" if fields.are(&[]) => Error::ZeroLimit,
        "zero-batch-size" if fields.are(&[]) => Error::ZeroBatchSize,
        "expire-in-too-large" => Error::ExpireInTooLarge {
            ms: fields.only_decimal("ms")?,
        },
        "not-u64" if fields.are(&["op", "index"]) => Error::NotU64 {
            op: one_of(&U64_OPS, fields.get("op")?)?,
            index: decimal(fields.get("index")?)?,
            key: KeyBytes::default(),
        },
        "sum" => Error::Sum(sum_from(&fields)?),
        "counter-not-u64" if fields.are(&["key"]) => Error::CounterNotU64 {
            key: fields.key("key")?,
        },
        "counter-exhausted" if fields.are(&["key", "next", "count", "max"]) => {
            Error::CounterExhausted {
                key: fields.key("key")?,
                next: decimal(fields.get("next")?)?,
                count: decimal(fields.get("count")?)?,
                max: decimal(fields.get("max")?)?,
            }
        }
        "number-too-wide" if fields.are(&["number", "width"]) => Error::NumberTooWide {
            number: decimal(fields.get("number")?)?,
            width: decimal(fields.get("width")?)?,
        },
        "snapshot-expired" if fields.are(&["versionstamp"]) => {
            let versionstamp = fields.get("versionstamp")?;
            if !is_versionstamp(versionstamp) {
                return None;
            }
            Error::SnapshotExpired {
                versionstamp: versionstamp.to_owned(),
            }
        }
        _ => return None,
    };
    Some(e)
}

/// The [`SumError`] of a `sum` code's fields.
fn sum_from(fields: &Fields<'_>) -> Option<SumError> {
    let reason = fields.get("reason")?;
    if reason == "kind-mismatch" {
        if !fields.are(&["reason", "stored", "operand"]) {
            return None;
        }
        return Some(SumError::KindMismatch {
            stored: one_of(&SUM_KINDS, fields.get("stored")?)?,
            operand: one_of(&SUM_KINDS, fields.get("operand")?)?,
        });
    }
    if !fields.are(&["reason"]) {
        return None;
    }
    Some(match reason {
        "invalid-parameters" => SumError::InvalidParameters,
        "bounds-of-another-kind" => SumError::BoundsOfAnotherKind,
        "unsupported-stored-value" => SumError::UnsupportedStoredValue,
        "invalid-stored-value" => SumError::InvalidStoredValue,
        "bounds-on-u64" => SumError::BoundsOnU64,
        "out-of-range" => SumError::OutOfRange,
        _ => return None,
    })
}

/// A header value's `name=value` fields, in the order sent.
struct Fields<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Fields<'a> {
    /// Whether the fields are exactly `names`, in that order (the order [`error_header`]
    /// writes: one text per error).
    fn are(&self, names: &[&str]) -> bool {
        self.0.len() == names.len() && self.0.iter().zip(names).all(|((n, _), name)| n == name)
    }

    /// The value of the field `name`, if it is there once.
    fn get(&self, name: &str) -> Option<&'a str> {
        let mut matching = self.0.iter().filter(|(n, _)| *n == name);
        let (_, value) = matching.next()?;
        matching.next().is_none().then_some(*value)
    }

    /// The one field there is, `name`, as a decimal number.
    fn only_decimal<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        if !self.are(&[name]) {
            return None;
        }
        decimal(self.get(name)?)
    }

    /// The field `name` as a key in hex.
    fn key(&self, name: &str) -> Option<KeyBytes> {
        unhex(self.get(name)?).map(KeyBytes::from)
    }
}

/// The `&'static` name among `names` that equals `s`.
fn one_of(names: &[&'static str], s: &str) -> Option<&'static str> {
    names.iter().copied().find(|n| *n == s)
}

/// Whether `s` is a versionstamp as `Versionstamp`'s `Display` writes it: 20 lower-case hex
/// digits.
fn is_versionstamp(s: &str) -> bool {
    s.len() == 20 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A number in plain decimal digits (no sign, no leading zero), in range for `T`.
pub(crate) fn decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lower-case hex `s`; `None` if it is not that.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every error that has a code, with arbitrary fields.
    fn coded_error() -> impl Strategy<Value = Error> {
        let size = any::<usize>();
        let key = proptest::collection::vec(any::<u8>(), 0..64).prop_map(KeyBytes::from);
        let sum = prop_oneof![
            Just(SumError::InvalidParameters),
            Just(SumError::BoundsOfAnotherKind),
            Just(SumError::UnsupportedStoredValue),
            Just(SumError::InvalidStoredValue),
            Just(SumError::BoundsOnU64),
            Just(SumError::OutOfRange),
            (0..3usize, 0..3usize).prop_map(|(s, o)| SumError::KindMismatch {
                stored: SUM_KINDS[s],
                operand: SUM_KINDS[o],
            }),
        ];
        prop_oneof![
            size.prop_map(|size| Error::KeyTooLargeForWrite { size }),
            size.prop_map(|size| Error::KeyTooLargeForRead { size }),
            Just(Error::EmptyKey),
            size.prop_map(|size| Error::ValueTooLarge { size }),
            size.prop_map(|count| Error::TooManyChecks { count }),
            size.prop_map(|count| Error::TooManyMutations { count }),
            size.prop_map(|size| Error::TotalMutationSizeTooLarge { size }),
            size.prop_map(|size| Error::TotalKeySizeTooLarge { size }),
            size.prop_map(|count| Error::TooManyRanges { count }),
            size.prop_map(|count| Error::TooManyWatchedKeys { count }),
            size.prop_map(|count| Error::TooManyEntries { count }),
            Just(Error::ZeroLimit),
            Just(Error::ZeroBatchSize),
            any::<u128>().prop_map(|ms| Error::ExpireInTooLarge { ms }),
            (0..3usize, size).prop_map(|(op, index)| Error::NotU64 {
                op: U64_OPS[op],
                index,
                key: KeyBytes::default(),
            }),
            sum.prop_map(Error::Sum),
            key.clone().prop_map(|key| Error::CounterNotU64 { key }),
            (key, any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(key, next, count, max)| {
                Error::CounterExhausted {
                    key,
                    next,
                    count,
                    max,
                }
            }),
            (any::<u64>(), any::<u8>())
                .prop_map(|(number, width)| Error::NumberTooWide { number, width }),
            any::<[u8; 10]>().prop_map(|b| Error::SnapshotExpired {
                versionstamp: hex(&b),
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn every_coded_error_reads_back_as_itself(e in coded_error()) {
            let value = error_header(&e).expect("a code");
            prop_assert!(value.bytes().all(|b| b.is_ascii_graphic() || b == b' '), "{value}");
            prop_assert_eq!(error_from_header(&value), Some(e));
        }

        #[test]
        fn any_text_reads_as_an_error_that_writes_it_back_or_as_none(value in "\\PC{0,80}") {
            if let Some(e) = error_from_header(&value) {
                prop_assert_eq!(error_header(&e), Some(value));
            }
        }

        #[test]
        fn a_coded_value_with_a_field_dropped_or_doubled_reads_as_none(
            e in coded_error(),
            doubled in any::<bool>(),
        ) {
            let value = error_header(&e).expect("a code");
            let Some((code, rest)) = value.split_once(' ') else {
                return Ok(());
            };
            let first = rest.split(' ').next().expect("a field");
            let changed = if doubled {
                format!("{value} {first}")
            } else {
                let others: Vec<_> = rest.split(' ').skip(1).collect();
                if others.is_empty() { code.to_owned() } else { format!("{code} {}", others.join(" ")) }
            };
            prop_assert_eq!(error_from_header(&changed), None, "{}", changed);
        }
    }

    #[test]
    fn numbering_errors_round_trip_through_their_header() {
        let key = KeyBytes::from(vec![2, b'n', 0, 0xff]);
        for e in [
            Error::CounterNotU64 { key: key.clone() },
            Error::CounterExhausted {
                key: key.clone(),
                next: u64::MAX,
                count: u32::MAX,
                max: 7,
            },
            Error::CounterExhausted {
                key: KeyBytes::default(),
                next: 0,
                count: 1,
                max: 0,
            },
            Error::NumberTooWide {
                number: 100_000,
                width: u8::MAX,
            },
        ] {
            let header = error_header(&e).expect("a numbering error");
            assert!(header.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
            assert_eq!(error_from_header(&header), Some(e));
        }
        assert_eq!(error_header(&Error::Closed), None);
    }

    #[test]
    fn a_error_header_that_is_not_exactly_one_is_none() {
        for bad in [
            "",
            "counter-not-u64",
            "counter-not-u64 key=0",
            "counter-not-u64 key=zz",
            "counter-not-u64 key=02 key=02",
            "counter-not-u64 key=02 extra=1",
            "number-too-wide number=1 width=256",
            "number-too-wide number=+1 width=2",
            "number-too-wide number=1",
            "counter-exhausted key=02 next=1 count=4294967296 max=1",
            "something-else key=02",
        ] {
            assert_eq!(error_from_header(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn errors_a_client_cannot_rebuild_have_no_code() {
        for e in [
            Error::Closed,
            Error::TransactionConflict { attempts: 3 },
            Error::InvalidNumbering {
                reason: "two claims on one counter".into(),
            },
            Error::SnapshotExpired {
                versionstamp: "unknown".into(),
            },
            Error::Remote {
                status: 500,
                message: "x".into(),
            },
        ] {
            assert_eq!(error_header(&e), None, "{e:?}");
        }
    }

    #[test]
    fn unknown_codes_names_and_malformed_fields_read_as_none() {
        for value in [
            "",
            "no-such-code",
            "value-too-large",
            "value-too-large size=",
            "value-too-large size=-1",
            "value-too-large size=1x",
            "value-too-large count=1",
            "value-too-large size=1 size=1",
            "value-too-large  size=1",
            "value-too-large size=99999999999999999999999",
            "not-u64 op=add index=0",
            "counter-not-u64 key=ABCD",
            "counter-not-u64 key=abc",
            "sum reason=kind-mismatch stored=String operand=Number",
            "sum reason=out-of-range stored=Number",
            "snapshot-expired versionstamp=0011",
            "empty-key size=0",
            "value-too-large size=01",
            "number-too-wide width=2 number=1",
        ] {
            assert_eq!(error_from_header(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_value_names_its_code_first_and_its_fields_by_name() {
        let e = Error::CounterExhausted {
            key: KeyBytes::from(vec![0x02, b'a', 0x00]),
            next: 9,
            count: 2,
            max: 10,
        };
        assert_eq!(
            error_header(&e).as_deref(),
            Some("counter-exhausted key=026100 next=9 count=2 max=10")
        );
    }
}
