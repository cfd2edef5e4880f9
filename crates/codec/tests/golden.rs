//! Golden vectors recorded from the real Deno binary: every key encodes to exactly the bytes
//! Deno wrote and decodes back to the same key, Deno's list order is both our tuple order and
//! our byte order, and numbers print as JavaScript prints them.
#![allow(
    clippy::unwrap_used,
    reason = "a malformed vector should fail the test loudly"
)]

use num_bigint::BigInt;
use tuplekv_codec::{Key, KeyPart, decode_key, encode_key, encoded_len, key};
use tuplekv_testkit::vectors::{KeyVector, load_json, load_key_vectors};

/// The property every golden line must satisfy.
fn check_vector(v: &KeyVector) {
    let encoded = encode_key(&v.key);
    assert_eq!(
        hex::encode(&encoded),
        hex::encode(&v.bytes),
        "line {}: {} encodes differently",
        v.line,
        v.json
    );
    assert_eq!(encoded_len(&v.key), v.bytes.len(), "line {}", v.line);
    let decoded = decode_key(&v.bytes).unwrap_or_else(|e| panic!("line {}: {e}", v.line));
    assert_eq!(decoded, v.key, "line {}: decodes to another key", v.line);
}

#[test]
fn every_deno_key_vector_encodes_to_its_bytes_and_back() {
    let vectors = load_key_vectors("keys.jsonl");
    assert_eq!(vectors.len(), 1206, "the whole file is read");
    vectors.iter().for_each(check_vector);
}

#[test]
fn deno_list_order_is_tuple_order_and_byte_order() {
    let ordered = load_key_vectors("order.jsonl");
    assert_eq!(ordered.len(), 1206);
    ordered.iter().for_each(check_vector);
    for pair in ordered.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.key < b.key,
            "lines {} and {}: {} !< {}",
            a.line,
            b.line,
            a.key,
            b.key
        );
        assert!(
            a.bytes < b.bytes,
            "lines {} and {}: bytes out of order",
            a.line,
            b.line
        );
    }
    let mut from_keys: Vec<Key> = load_key_vectors("keys.jsonl")
        .into_iter()
        .map(|v| v.key)
        .collect();
    from_keys.sort();
    let listed: Vec<Key> = ordered.into_iter().map(|v| v.key).collect();
    assert_eq!(
        from_keys, listed,
        "sorting keys.jsonl by Ord gives Deno's list"
    );
}

#[test]
fn numbers_display_exactly_as_javascript_prints_them() {
    let mut checked = 0;
    for v in load_key_vectors("keys.jsonl") {
        let json: serde_json::Value = serde_json::from_str(&v.json).unwrap();
        for (part, j) in v.key.parts().iter().zip(json.as_array().unwrap()) {
            if let KeyPart::Number(_) = part {
                assert_eq!(
                    part.to_string(),
                    j["v"].as_str().unwrap(),
                    "line {}",
                    v.line
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "only {checked} numbers checked");
}

/// The table of section 1.9 of the spec (vectors from Deno's own codec tests and by hand).
#[test]
fn spec_table_vectors() {
    let big = |s: &str| BigInt::parse_bytes(s.as_bytes(), 16).unwrap();
    let cases: Vec<(Key, &str)> = vec![
        (key!["hello"], "0268656c6c6f00"),
        (key![vec![1u8, 2, 0, 7, 8]], "01010200ff070800"),
        (
            key!["hello", vec![1u8, 2, 0, 7, 8]],
            "0268656c6c6f0001010200ff070800",
        ),
        (key!["f\0o"], "026600ff6f00"),
        (key![0.0], "218000000000000000"),
        (key![123.456], "21c05edd2f1a9fbe77"),
        (key![-300.0], "213f8d3fffffffffff"),
        (key![false], "26"),
        (key![true], "27"),
        (key![0], "14"),
        (key![-200], "1337"),
        (key![600], "160258"),
        (key![78187493520_i64], "191234567890"),
        (key![0x1122334455667788_u64], "1c1122334455667788"),
        (key![big("112233445566778899")], "1d09112233445566778899"),
        (
            key![big("1122334455667788990011223344556677889900")],
            "1d141122334455667788990011223344556677889900",
        ),
        (
            key![-big("1122334455667788990011223344556677889900")],
            "0bebeeddccbbaa99887766ffeeddccbbaa99887766ff",
        ),
        (key![-1], "13fe"),
        (key![255], "15ff"),
        (key![256], "160100"),
        (key![-255], "1300"),
        (key![-256], "12feff"),
        (key![u64::MAX], "1cffffffffffffffff"),
        (key![BigInt::from(u64::MAX) + 1u8], "1d09010000000000000000"),
        (
            key![-(BigInt::from(u64::MAX) + 1u8)],
            "0bf6feffffffffffffffff",
        ),
        (key![-0.0], "217fffffffffffffff"),
        (key![f64::INFINITY], "21fff0000000000000"),
        (key![f64::NEG_INFINITY], "21000fffffffffffff"),
        (key![f64::NAN], "21fff8000000000000"),
        (key![-f64::NAN], "210007ffffffffffff"),
        (key![""], "0200"),
        (key![Vec::<u8>::new()], "0100"),
        (key!["😮"], "02f09f98ae00"),
        (
            key![1, 1.0, true, vec![1u8, 2, 3], "a"],
            "150121bff0000000000000270101020300026100",
        ),
        (key![], ""),
    ];
    for (k, hex) in cases {
        assert_eq!(hex::encode(encode_key(&k)), hex, "{k}");
        assert_eq!(decode_key(&hex::decode(hex).unwrap()).unwrap(), k);
    }
}

#[test]
fn key_size_examples_from_deno_tests() {
    assert_eq!(encode_key(&key![vec![0x61u8; 2046]]).len(), 2048);
    assert_eq!(encode_key(&key![vec![0x61u8; 2047]]).len(), 2049);
    assert_eq!(encode_key(&key!["a".repeat(1100)]).len(), 1102);
}

/// Deno's oddities record: NaN payloads, signed zeros and typed arrays, as keys.
#[test]
fn key_oddities_from_real_deno() {
    let record = load_json("semantics-key-oddities.json");
    for case in record["results"].as_array().unwrap() {
        let name = case["case"].as_str().unwrap();
        let input = &case["input"].as_array().unwrap()[0];
        if let Some(bits) = input["jsBits"].as_str() {
            let x = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
            if case["input"].as_array().unwrap().len() == 1 {
                let got = hex::encode(encode_key(&key![x]));
                assert_eq!(got, case["encodedHex"].as_str().unwrap(), "{name}");
            }
        }
        if let Some(bytes) = input["bytes"].as_str() {
            let got = hex::encode(encode_key(&key![hex::decode(bytes).unwrap()]));
            assert_eq!(got, case["encodedHex"].as_str().unwrap(), "{name}");
        }
    }
    // JavaScript reads every NaN back as +NaN, so the listed keys lose the sign; take the
    // bytes Deno stored for each listed row instead and check that decoding them keeps the
    // order Deno listed them in.
    let results = record["results"].as_array().unwrap();
    let listed: Vec<(Vec<u8>, Key)> = record["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let owner = e["ownerIndex"].as_u64().unwrap() as usize;
            let bytes = hex::decode(results[owner]["encodedHex"].as_str().unwrap()).unwrap();
            let key = decode_key(&bytes).unwrap();
            (bytes, key)
        })
        .collect();
    assert_eq!(listed.len(), 17);
    for w in listed.windows(2) {
        assert!(w[0].0 < w[1].0, "Deno lists in byte order");
        assert!(w[0].1 < w[1].1, "{} !< {}", w[0].1, w[1].1);
    }
}
