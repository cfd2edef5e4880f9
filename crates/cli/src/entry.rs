//! The JSON form of an entry, shared by `dump`/`load` (one object per line) and by the
//! `--json` output of `get`, `list` and `watch`; and the human form of a value.
//!
//! ```text
//! {"key":"[\"users\", 1n]","parts":[{"string":"users"},{"bigint":"1"}],
//!  "value":{"bytes":"416461"},"versionstamp":"00000000000000010000","expires_at":null}
//! ```
//!
//! - `key`: the key literal (see `keys.rs`); `parts`: the same key as tagged parts
//!   (`{"string": s}`, `{"number": "1.5"}` written as JavaScript prints it, also `"NaN"`,
//!   `"-NaN"`, `"-0"`, `"Infinity"`; `{"bigint": "-12"}`, `{"bytes": hex}`, `{"bool": b}`).
//!   A reader needs only one of them; when both are there they must agree.
//! - `value`: `{"bytes": hex}`, `{"u64": "N"}` (a string: JSON numbers lose precision past
//!   2^53), or `{"v8": hex}` (V8-serialised bytes, kept as they are), with
//!   `"decoded": "<JavaScript literal>"` beside the hex when the bytes decode; a reader ignores
//!   `decoded`, the hex is the value.
//! - `versionstamp`: 20 hex digits; `expires_at`: Unix milliseconds or `null`.

use serde_json::{Map, Value as Json, json};
use tuplekv_engine::codec::BigInt;
use tuplekv_engine::{Entry, Key, KeyPart, Value, Versionstamp};

use crate::keys::{format_key, format_part, parse_key};

/// An entry read back from its JSON form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParsedEntry {
    pub(crate) key: Key,
    pub(crate) value: Value,
    pub(crate) versionstamp: Option<Versionstamp>,
    pub(crate) expires_at: Option<u64>,
}

/// The JSON object of `entry`, whose key is `key` (already decoded).
pub(crate) fn entry_to_json(key: &Key, entry: &Entry) -> Json {
    json!({
        "key": format_key(key),
        "parts": key.parts().iter().map(part_to_json).collect::<Vec<_>>(),
        "value": value_to_json(&entry.value),
        "versionstamp": entry.versionstamp.to_string(),
        "expires_at": entry.expires_at,
    })
}

/// A tagged key part.
pub(crate) fn part_to_json(part: &KeyPart) -> Json {
    match part {
        KeyPart::Bytes(b) => json!({ "bytes": hex::encode(b) }),
        KeyPart::String(s) => json!({ "string": s }),
        KeyPart::BigInt(i) => json!({ "bigint": i.to_string() }),
        KeyPart::Number(_) => {
            let mut text = String::new();
            format_part(&mut text, part);
            json!({ "number": text })
        }
        KeyPart::Bool(b) => json!({ "bool": b }),
    }
}

/// A tagged value.
pub(crate) fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Bytes(b) => json!({ "bytes": hex::encode(b) }),
        Value::U64(n) => json!({ "u64": n.to_string() }),
        Value::V8(b) => match crate::v8::view(b) {
            Some(decoded) => json!({ "v8": hex::encode(b), "decoded": decoded }),
            None => json!({ "v8": hex::encode(b) }),
        },
    }
}

/// Reads an entry from its JSON text.
///
/// # Errors
/// What is wrong, without a position (the caller adds the line).
pub(crate) fn entry_from_json(text: &str) -> Result<ParsedEntry, String> {
    let json: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let object = json.as_object().ok_or("expected a JSON object")?;
    let from_literal = match object.get("key") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(parse_key(s).map_err(|e| format!("\"key\": {e}"))?),
        Some(_) => return Err("\"key\" must be a key literal string".into()),
    };
    let from_parts = match object.get("parts") {
        None | Some(Json::Null) => None,
        Some(Json::Array(parts)) => {
            let parts = parts
                .iter()
                .enumerate()
                .map(|(i, p)| part_from_json(p).map_err(|e| format!("\"parts\"[{i}]: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Key::new(parts).map_err(|e| format!("\"parts\": {e}"))?)
        }
        Some(_) => return Err("\"parts\" must be an array".into()),
    };
    let key = match (from_literal, from_parts) {
        (Some(a), Some(b))
            if tuplekv_engine::codec::encode_key(&a) != tuplekv_engine::codec::encode_key(&b) =>
        {
            return Err(format!(
                "\"key\" {} and \"parts\" {} name different keys",
                format_key(&a),
                format_key(&b)
            ));
        }
        (Some(k), _) | (None, Some(k)) => k,
        (None, None) => return Err("missing \"key\" (or \"parts\")".into()),
    };
    let value = value_from_json(object.get("value").ok_or("missing \"value\"")?)?;
    let versionstamp = match object.get("versionstamp") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(
            s.parse::<Versionstamp>()
                .map_err(|e| format!("\"versionstamp\": {e}"))?,
        ),
        Some(_) => return Err("\"versionstamp\" must be 20 hex digits".into()),
    };
    let expires_at = match object.get("expires_at") {
        None | Some(Json::Null) => None,
        Some(n) => Some(
            n.as_u64()
                .ok_or("\"expires_at\" must be Unix milliseconds (an unsigned integer) or null")?,
        ),
    };
    Ok(ParsedEntry {
        key,
        value,
        versionstamp,
        expires_at,
    })
}

/// The one `"tag": content` pair of a tagged object.
fn single_tag(json: &Json) -> Result<(&str, &Json), String> {
    let object: &Map<String, Json> = json.as_object().ok_or("expected a tagged object")?;
    let mut pairs = object.iter();
    match (pairs.next(), pairs.next()) {
        (Some((tag, content)), None) => Ok((tag.as_str(), content)),
        _ => Err("expected an object with exactly one tag".into()),
    }
}

fn hex_of(content: &Json, what: &str) -> Result<Vec<u8>, String> {
    let text = content
        .as_str()
        .ok_or_else(|| format!("{what} must be a hex string"))?;
    hex::decode(text).map_err(|e| format!("{what}: bad hex: {e}"))
}

/// Reads a tagged value: `{"bytes": hex}`, `{"u64": "N"}` or `{"v8": hex}`.
pub(crate) fn value_from_json(json: &Json) -> Result<Value, String> {
    // `decoded` is the literal view `dump` writes beside V8 hex: informative, ignored.
    let mut json = json.clone();
    if let Some(object) = json.as_object_mut() {
        object.remove("decoded");
    }
    let (tag, content) = single_tag(&json).map_err(|e| format!("\"value\": {e}"))?;
    match tag {
        "bytes" => Ok(Value::from(hex_of(content, "\"value\".bytes")?)),
        "v8" => Ok(Value::V8(hex_of(content, "\"value\".v8")?.into())),
        "u64" => {
            let n = match content {
                Json::String(s) => s.parse::<u64>().ok(),
                Json::Number(n) => n.as_u64(),
                _ => None,
            };
            n.map(Value::U64)
                .ok_or_else(|| "\"value\".u64 must be an integer 0..=18446744073709551615".into())
        }
        other => Err(format!(
            "\"value\": unknown tag {other:?} (expected bytes, u64 or v8)"
        )),
    }
}

fn part_from_json(json: &Json) -> Result<KeyPart, String> {
    let (tag, content) = single_tag(json)?;
    let text = || {
        content
            .as_str()
            .ok_or_else(|| format!("{tag} must be a string"))
    };
    match tag {
        "bytes" => Ok(KeyPart::Bytes(hex_of(content, "bytes")?)),
        "string" => Ok(KeyPart::String(text()?.to_owned())),
        "bigint" => text()?
            .parse::<BigInt>()
            .map(KeyPart::BigInt)
            .map_err(|_| "bigint must be a decimal integer".into()),
        "number" => {
            let literal = format!("[{}]", text()?);
            let key = parse_key(&literal).map_err(|_| "number is not a JavaScript number")?;
            match key.parts() {
                [part @ KeyPart::Number(_)] => Ok(part.clone()),
                _ => Err("number is not a JavaScript number".into()),
            }
        }
        "bool" => content
            .as_bool()
            .map(KeyPart::Bool)
            .ok_or_else(|| "bool must be true or false".into()),
        other => Err(format!(
            "unknown tag {other:?} (expected bytes, string, bigint, number or bool)"
        )),
    }
}

/// A value for people: `b"Ada"` (bytes), `42u64`, or `v8 <JavaScript literal>` (`v8 { name:
/// "Ada" }`), `v8 0x<hex>` for bytes the decoder does not read.
pub(crate) fn value_for_people(value: &Value) -> String {
    match value {
        Value::Bytes(b) => KeyPart::Bytes(b.to_vec()).to_string(),
        Value::U64(n) => format!("{n}u64"),
        Value::V8(b) => match crate::v8::view(b) {
            Some(shown) => format!("v8 {shown}"),
            None => format!("v8 0x{}", hex::encode(b)),
        },
    }
}

/// An entry for people, on one line: key, value, versionstamp and deadline.
pub(crate) fn entry_for_people(key: &Key, entry: &Entry) -> String {
    let mut line = format!(
        "{}  {}  versionstamp {}",
        format_key(key),
        value_for_people(&entry.value),
        entry.versionstamp
    );
    if let Some(at) = entry.expires_at {
        line.push_str(&format!("  expires_at {at}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuplekv_engine::key;

    #[test]
    fn an_entry_reads_back_from_its_json() {
        let key = key!["users", 1, -0.0, true, vec![0u8, 255]];
        let entry = Entry {
            key: tuplekv_engine::codec::encode_key(&key).into(),
            value: Value::U64(u64::MAX),
            versionstamp: Versionstamp::from_version(7),
            expires_at: Some(123),
        };
        let text = entry_to_json(&key, &entry).to_string();
        let back = entry_from_json(&text).expect("reads");
        assert_eq!(back.key, key);
        assert_eq!(back.value, Value::U64(u64::MAX));
        assert_eq!(back.versionstamp, Some(Versionstamp::from_version(7)));
        assert_eq!(back.expires_at, Some(123));
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        let err = |t: &str| entry_from_json(t).expect_err(t);
        assert!(err("{").starts_with("not JSON"));
        assert!(err(r#"{"value":{"u64":"1"}}"#).contains("missing \"key\""));
        assert!(err(r#"{"key":"[1]"}"#).contains("missing \"value\""));
        assert!(err(r#"{"key":"[1]","value":{"text":"a"}}"#).contains("unknown tag"));
        assert!(err(r#"{"key":"[1]","value":{"u64":"-1"}}"#).contains("u64"));
        assert!(err(r#"{"key":"[1","value":{"u64":"1"}}"#).contains("malformed key at column"));
        assert!(
            err(r#"{"key":"[1]","parts":[{"number":"2"}],"value":{"u64":"1"}}"#)
                .contains("different keys")
        );
    }
}
