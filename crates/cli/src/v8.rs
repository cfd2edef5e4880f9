//! V8-serialised values for the command line, through `tuplekv-jsvalue`: the JavaScript
//! literal view of stored bytes (`get`, `list`, `watch`, and `decoded` in JSON), and the
//! bytes Deno writes for a literal (`set --js`, `--json-value`, `--string`).

use tuplekv_jsvalue::{JsString, Value as JsValue};

/// The V8 serialisation of the JavaScript string `s`, as Deno's `kv.set(key, "text")` writes
/// it.
pub(crate) fn write_string(s: &str) -> Vec<u8> {
    // A string encodes whatever it holds; an error is impossible but not worth a panic.
    tuplekv_jsvalue::encode(&JsValue::String(JsString::from(s))).unwrap_or_default()
}

/// The JavaScript literal of V8-serialised `bytes`, or `None` when they are not a value the
/// decoder reads (an unknown tag, malformed bytes): the caller shows hex then.
pub(crate) fn view(bytes: &[u8]) -> Option<String> {
    tuplekv_jsvalue::decode(bytes).ok().map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_serialise_as_deno_2_9_writes_them() {
        // What Deno 2.9.6 wrote for `kv.set(["str"], "héllo")` and a two-byte string.
        assert_eq!(hex::encode(write_string("héllo")), "ff10220568e96c6c6f");
        assert_eq!(
            hex::encode(write_string("a😮b")),
            "ff10630861003dd82ede6200"
        );
        assert_eq!(view(&write_string("a😮b")).as_deref(), Some("\"a😮b\""));
        // Version 15 (older Deno, Node) reads too.
        assert_eq!(
            view(&hex::decode("ff0f2203626172").expect("hex")).as_deref(),
            Some("\"bar\"")
        );
        assert_eq!(view(b"\xff\x0f\x5a\x00\x01"), None);
    }
}
