//! Property tests: a value encodes and decodes back to itself, and prints and parses back to
//! itself. Failing cases are kept in `proptest-regressions/` and the seed is printed.

use proptest::prelude::*;
use tuplekv_jsvalue::{BigInt, JsString, PropKey, Value, ViewKind, decode, encode, parse};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Undefined),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| Value::number(f64::from(n))),
        any::<f64>().prop_map(|x| Value::number(if x.is_nan() { f64::NAN } else { x })),
        any::<i128>().prop_map(|n| Value::BigInt(BigInt::from_i128(n))),
        any::<String>().prop_map(|s| Value::string(&s)),
        proptest::collection::vec(any::<u16>(), 0..8).prop_map(|u| Value::String(JsString(u))),
        (-8.64e15f64..8.64e15)
            .prop_map(|ms| Value::Date(tuplekv_jsvalue::Number(ms.trunc() + 0.0))),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Value::ArrayBuffer),
        (
            0usize..ViewKind::ALL.len(),
            proptest::collection::vec(any::<u8>(), 0..4)
        )
            .prop_map(|(k, seed)| {
                let kind = ViewKind::ALL[k];
                let bytes: Vec<u8> = seed
                    .iter()
                    .flat_map(|&b| vec![b; kind.element_size()])
                    .collect();
                let byte_length = bytes.len();
                Value::View {
                    kind,
                    buffer: Box::new(Value::ArrayBuffer(bytes)),
                    byte_offset: 0,
                    byte_length,
                }
            }),
        "[a-z]{1,3}".prop_map(|s| Value::RegExp(JsString::from(s.as_str()), 1)),
        any::<f64>().prop_map(|x| Value::Boxed(Box::new(Value::number(if x.is_nan() {
            f64::NAN
        } else {
            x
        })))),
    ]
}

fn key() -> impl Strategy<Value = PropKey> {
    prop_oneof![
        (0u32..100).prop_map(PropKey::Index),
        "[a-z ]{0,4}".prop_map(|s| PropKey::Name(JsString::from(s.as_str()))),
    ]
}

/// Object properties in JavaScript's order, each key once.
fn canonical(props: Vec<(PropKey, Value)>) -> Vec<(PropKey, Value)> {
    let mut seen = Vec::new();
    let mut out: Vec<(PropKey, Value)> = Vec::new();
    for (k, v) in props {
        if k == PropKey::Name(JsString::from("__proto__")) || seen.contains(&k) {
            continue;
        }
        seen.push(k.clone());
        out.push((k, v));
    }
    out.sort_by_key(|(k, _)| match k {
        PropKey::Index(i) => (0, *i),
        PropKey::Name(_) => (1, 0),
    });
    out
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec((key(), inner.clone()), 0..5)
                .prop_map(|p| Value::Object(canonical(p))),
            proptest::collection::vec(inner.clone(), 0..5).prop_map(|items| {
                // As V8 would keep it: a packed array of numbers with a non-Smi holds
                // doubles, which is the same value.
                Value::Array(items, Vec::new())
            }),
            (
                proptest::collection::vec((0u32..10, inner.clone()), 0..4),
                0u32..3
            )
                .prop_map(|(items, extra)| {
                    let props = canonical(
                        items
                            .into_iter()
                            .map(|(i, v)| (PropKey::Index(i), v))
                            .collect(),
                    );
                    let len = props
                        .iter()
                        .map(|(k, _)| match k {
                            PropKey::Index(i) => i + 1,
                            PropKey::Name(_) => 0,
                        })
                        .max()
                        .unwrap_or(0)
                        + extra
                        + 1;
                    Value::SparseArray(len, props)
                }),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|items| {
                // Distinct strings as keys, as a Map keeps them.
                Value::Map(
                    items
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| (Value::string(&i.to_string()), v))
                        .collect(),
                )
            }),
            proptest::collection::vec(any::<i16>(), 0..4).prop_map(|mut items| {
                items.sort_unstable();
                items.dedup();
                Value::Set(
                    items
                        .into_iter()
                        .map(|n| Value::number(f64::from(n)))
                        .collect(),
                )
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn decode_of_encode_is_the_value(v in value()) {
        let bytes = encode(&v).expect("encodes");
        prop_assert_eq!(decode(&bytes).expect("decodes"), v);
    }

    #[test]
    fn parse_of_print_is_the_value(v in value()) {
        let text = v.to_string();
        prop_assert_eq!(parse(&text).map_err(|e| format!("{e} in {text}")), Ok(v));
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut input = vec![0xff, 0x10];
        input.extend(bytes);
        let _ = decode(&input);
    }
}
