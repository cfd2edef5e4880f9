//! The bytes real Deno 2.9.6 and Node 20 wrote for the samples of
//! `conformance/v8_samples.mjs` (`fixtures/v8_golden.json`, made by
//! `conformance/v8_golden.ts`): each decodes to the expected literal, and each literal encodes
//! to exactly Deno's bytes.

use serde_json::Value as Json;
use tuplekv_jsvalue::{decode, encode, parse};

struct Sample {
    name: String,
    literal: String,
    literal_node: String,
    deno: Vec<u8>,
    node: Vec<u8>,
}

fn samples() -> Vec<Sample> {
    let text = include_str!("fixtures/v8_golden.json");
    let json: Json = serde_json::from_str(text).expect("the fixture is JSON");
    assert_eq!(
        json["deno"], "2.9.6",
        "made with the Deno this project pins"
    );
    let field = |s: &Json, k: &str| s[k].as_str().map(str::to_owned);
    let samples: Vec<Sample> = json["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            let literal = field(s, "literal").expect("literal");
            Sample {
                name: field(s, "name").expect("name"),
                literal_node: field(s, "literal_node").unwrap_or_else(|| literal.clone()),
                literal,
                deno: hex::decode(field(s, "deno").expect("deno")).expect("hex"),
                node: hex::decode(field(s, "node").expect("node")).expect("hex"),
            }
        })
        .collect();
    assert!(samples.len() >= 80, "every sample is there");
    samples
}

#[test]
fn deno_bytes_decode_to_the_expected_literal() {
    for s in samples() {
        assert_eq!(
            &s.deno[..2],
            &[0xff, 0x10],
            "{}: Deno writes version 16",
            s.name
        );
        let value = decode(&s.deno).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(value.to_string(), s.literal, "{}", s.name);
    }
}

#[test]
fn node_bytes_decode_to_the_expected_literal() {
    for s in samples() {
        assert_eq!(
            &s.node[..2],
            &[0xff, 0x0f],
            "{}: Node 20 writes version 15",
            s.name
        );
        let value = decode(&s.node).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(value.to_string(), s.literal_node, "{}", s.name);
    }
}

#[test]
fn literals_encode_to_exactly_denos_bytes() {
    for s in samples() {
        let value = parse(&s.literal).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        let bytes = encode(&value).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(hex::encode(&bytes), hex::encode(&s.deno), "{}", s.name);
    }
}

#[test]
fn literals_read_back_as_the_value_they_print() {
    for s in samples() {
        let value = decode(&s.deno).expect("decodes");
        assert_eq!(parse(&value.to_string()), Ok(value), "{}", s.name);
        let node = decode(&s.node).expect("decodes");
        assert_eq!(parse(&node.to_string()), Ok(node), "{}", s.name);
    }
}
