//! Golden vectors recorded from the real Deno binary, kept in this crate's `data/` directory:
//! `keys.jsonl` (key → encoded hex), `order.jsonl` (the same keys in Deno's list order) and the
//! `semantics-*.json` behaviour records.
//!
//! Typed parts look like `{"t":"bytes","v":"<hex>"}`, `{"t":"string","v":"…"}`,
//! `{"t":"number","v":"NaN"|"Infinity"|"-Infinity"|"-0"|<JS decimal>}`,
//! `{"t":"bigint","v":"<decimal>"}` and `{"t":"bool","v":true}`.

use std::path::PathBuf;

use num_bigint::BigInt;
use serde_json::Value;
use tuplekv_codec::{Key, KeyPart};

/// One line of `keys.jsonl` or `order.jsonl`.
#[derive(Debug, Clone)]
pub struct KeyVector {
    /// 1-based line number in the file, for messages.
    pub line: usize,
    /// The key as Deno saw it.
    pub key: Key,
    /// The original JSON of the key, for messages.
    pub json: String,
    /// The encoding Deno wrote.
    pub bytes: Vec<u8>,
}

/// The path of a file in the vectors directory.
pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

/// Reads and parses one of the JSON behaviour records.
///
/// # Panics
/// If the file is missing or not JSON (a broken checkout).
pub fn load_json(name: &str) -> Value {
    let text = std::fs::read_to_string(data_path(name)).expect("vector file is readable");
    serde_json::from_str(&text).expect("vector file is JSON")
}

/// Reads `keys.jsonl` or `order.jsonl`.
///
/// # Panics
/// If the file is missing or a line is malformed (a broken checkout).
pub fn load_key_vectors(name: &str) -> Vec<KeyVector> {
    let text = std::fs::read_to_string(data_path(name)).expect("vector file is readable");
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: Value = serde_json::from_str(l).expect("vector line is JSON");
            KeyVector {
                line: i + 1,
                key: key_from_json(&v["key"]),
                json: v["key"].to_string(),
                bytes: hex::decode(v["hex"].as_str().expect("hex is a string"))
                    .expect("hex is valid"),
            }
        })
        .collect()
}

/// Converts a typed JSON key (an array of typed parts) to a [`Key`].
///
/// # Panics
/// On a malformed part.
pub fn key_from_json(v: &Value) -> Key {
    let parts = v
        .as_array()
        .expect("a key is an array")
        .iter()
        .map(part_from_json)
        .collect();
    Key::new(parts).expect("vector keys are encodable")
}

/// Converts one typed JSON part to a [`KeyPart`].
///
/// # Panics
/// On a malformed part.
pub fn part_from_json(v: &Value) -> KeyPart {
    let t = v["t"].as_str().expect("part has a type");
    let val = &v["v"];
    match t {
        "bytes" => KeyPart::Bytes(hex::decode(val.as_str().expect("hex")).expect("valid hex")),
        "string" => KeyPart::String(val.as_str().expect("string").to_owned()),
        "bigint" => KeyPart::BigInt(
            val.as_str()
                .expect("decimal")
                .parse::<BigInt>()
                .expect("bigint"),
        ),
        "bool" => KeyPart::Bool(val.as_bool().expect("bool")),
        "number" => KeyPart::Number(parse_js_number(val.as_str().expect("number as text"))),
        other => panic!("unknown part type {other}"),
    }
}

/// Parses a number as JavaScript prints it.
///
/// # Panics
/// On text that is not a number.
pub fn parse_js_number(s: &str) -> f64 {
    match s {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        "-Infinity" => f64::NEG_INFINITY,
        _ => s.parse().expect("decimal number"),
    }
}
