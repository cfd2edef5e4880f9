//! Each bound of the crate, at and just past it; and malformed input that is refused.

use tuplekv_jsvalue::{
    BIGINT_BYTES_MAX, BigInt, DEPTH_MAX, INPUT_MAX, Value, decode, encode, parse, parse_json,
};

fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn nesting_is_read_and_written_up_to_depth_max() {
    let at = parse(&nested_arrays(DEPTH_MAX)).expect("at the limit");
    let bytes = encode(&at).expect("encodes at the limit");
    assert_eq!(decode(&bytes), Ok(at));
    let past = parse(&nested_arrays(DEPTH_MAX + 1)).expect_err("past the limit");
    assert!(past.message.contains("deeper than 128"), "{past}");
    // Bytes nested one deeper: an extra dense array of one element around the value.
    let mut deeper = vec![0xff, 0x10];
    deeper.extend(std::iter::repeat_n([b'A', 1], DEPTH_MAX).flatten());
    deeper.push(b'0');
    deeper.extend(std::iter::repeat_n([b'$', 0, 1], DEPTH_MAX).flatten());
    assert!(
        decode(&deeper)
            .expect_err("past")
            .message
            .contains("deeper")
    );
    let mut value = Value::Null;
    for _ in 0..DEPTH_MAX {
        value = Value::Array(vec![value], Vec::new());
    }
    assert!(encode(&value).expect_err("past").0.contains("deeper"));
}

#[test]
fn input_is_read_up_to_input_max() {
    // A string literal of exactly INPUT_MAX bytes of text.
    let text = format!("\"{}\"", "x".repeat(INPUT_MAX - 2));
    assert!(matches!(parse(&text), Ok(Value::String(s)) if s.units().len() == INPUT_MAX - 2));
    let text = format!("\"{}\"", "x".repeat(INPUT_MAX - 1));
    assert!(parse(&text).expect_err("past").message.contains("over"));
    // Bytes: an array buffer filling exactly INPUT_MAX bytes.
    let header = [0xff, 0x10, b'B', 0xf8, 0xff, 0xff, 0x01];
    let payload = INPUT_MAX - header.len();
    assert_eq!(payload, 0x3f_fff9);
    let mut bytes = vec![0xff, 0x10, b'B'];
    let mut n = payload;
    while n >= 0x80 {
        bytes.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
    bytes.resize(INPUT_MAX, 7);
    assert!(matches!(decode(&bytes), Ok(Value::ArrayBuffer(b)) if b.len() == payload));
    bytes.push(7);
    assert!(decode(&bytes).expect_err("past").message.contains("over"));
}

#[test]
fn bigints_are_read_and_written_up_to_bigint_bytes_max() {
    let at = BigInt::from_le_bytes(false, &vec![0xff; BIGINT_BYTES_MAX]);
    let bytes = encode(&Value::BigInt(at.clone())).expect("at the limit");
    assert_eq!(decode(&bytes), Ok(Value::BigInt(at.clone())));
    let literal = Value::BigInt(at).to_string();
    assert!(parse(&literal).is_ok(), "a literal at the limit reads");
    let past = BigInt::from_le_bytes(false, &vec![0xff; BIGINT_BYTES_MAX + 1]);
    assert!(encode(&Value::BigInt(past)).is_err());
    let mut bytes = vec![0xff, 0x10, b'Z'];
    let bitfield = ((BIGINT_BYTES_MAX + 8) << 1) as u64;
    let mut n = bitfield;
    while n >= 0x80 {
        bytes.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
    bytes.resize(bytes.len() + BIGINT_BYTES_MAX + 8, 1);
    assert!(decode(&bytes).expect_err("past").message.contains("over"));
    // 2^(8 * BIGINT_BYTES_MAX) needs one byte more.
    let past_literal = format!("0x1{}n", "0".repeat(2 * BIGINT_BYTES_MAX));
    assert!(
        parse(&past_literal)
            .expect_err("past")
            .message
            .contains("over")
    );
}

#[test]
fn malformed_bytes_are_errors_not_panics() {
    for (hex, why) in [
        ("", "empty"),
        ("ff", "no version"),
        ("ff11", "a newer version"),
        ("ff0c30", "an older version"),
        ("ff1022", "a string with no length"),
        ("ff102205616263", "a string shorter than its length"),
        ("ff106f7b01", "an object whose count is wrong"),
        ("ff104101240000", "a dense array with too few elements"),
        ("ff105e00", "a reference to nothing"),
        ("ff1030ff", "bytes after the value"),
        ("ff10420256420003", "a view past its buffer"),
        ("ff1042045657000300", "a misaligned view"),
        ("ff107c", "an unknown tag"),
        ("ff1061014905490240010a", "a sparse index past its length"),
        ("ff105222012f00", "a regexp source that does not print"),
        ("ff104400000000000000f03f7f", "trailing bytes after a date"),
    ] {
        let bytes = hex::decode(hex).expect("hex");
        assert!(decode(&bytes).is_err(), "{why}: {hex}");
    }
}

#[test]
fn bad_literals_say_where() {
    for (text, needle) in [
        ("{ name: }", "column 9"),
        ("[1, 2", "expected `]`"),
        ("*1", "names no anchor"),
        ("&1 5", "must be on an object"),
        ("[&1 {}, &1 {}]", "given twice"),
        ("{ __proto__: 1 }", "prototype"),
        ("new Date(\"yesterday\")", "YYYY-MM-DD"),
        ("new Uint16Array(new ArrayBuffer(3))", "whole"),
        ("new Uint8Array(new ArrayBuffer(4), 2, 3)", "does not fit"),
        ("/a/gg", "twice"),
        ("01", "not a number literal"),
        ("-NaN", "not a number literal"),
        ("new Foo()", "not a value"),
        ("1 2", "after the value"),
        ("new BigInt64Array([1])", "bigints"),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.to_string().contains(needle), "{text}: {e}");
    }
}

#[test]
fn json_is_read_as_json_parse_reads_it() {
    let v = parse_json(r#"{"url":"https://x","__proto__":1,"n":[1,2.5,-0,1e400],"ok":true}"#)
        .expect("JSON");
    assert_eq!(
        v.to_string(),
        r#"{ url: "https://x", ["__proto__"]: 1, n: [1, 2.5, -0, Infinity], ok: true }"#
    );
    for text in [
        "{'a':1}",
        "[1,]",
        "{a:1}",
        "undefined",
        "NaN",
        ".5",
        "1n",
        "[1,,2]",
        "\"\\x41\"",
    ] {
        assert!(parse_json(text).is_err(), "{text} is not JSON");
    }
}

#[test]
fn javascript_builds_maps_sets_and_arrays_as_deno_would() {
    let same =
        |a: &str, b: &str| assert_eq!(parse(a).map(|v| v.to_string()), Ok(b.to_owned()), "{a}");
    same(
        "new Map([[1, \"a\"], [1, \"b\"], [-0, 0], [0, 1], [NaN, 1], [NaN, 2]])",
        "new Map([[1, \"b\"], [0, 1], [NaN, 2]])",
    );
    same("new Set([1, 1, {}, {}])", "new Set([1, {}, {}])");
    same("[&1 {}, new Set([*1, *1])]", "[&1 {}, new Set([*1])]");
    same("{ b: 1, a: 2, b: 3, 7: 0 }", "{ 7: 0, b: 3, a: 2 }");
    same("Object.assign([1], { 1: 2 })", "[1, 2]");
    same("Object.assign([1], { 3: 2 })", "[1, , , 2]");
    same(
        "new Uint8Array([256, -1, 1.9])",
        "new Uint8Array([0, 255, 1])",
    );
    same(
        "new Uint8ClampedArray([300, -5, 1.5, 2.5])",
        "new Uint8ClampedArray([255, 0, 2, 2])",
    );
    same("new Date(1.9)", "new Date(\"1970-01-01T00:00:00.001Z\")");
    same("new Date(9e15)", "new Date(NaN)");
    same("[1, 2, 3, ]", "[1, 2, 3]");
    same(
        "{ 'single': 'quotes', \"0\": 1, 0x10: 2 }",
        "{ 0: 1, 16: 2, single: \"quotes\" }",
    );
    same("\"\\u{1F62E}\\u00e9\\x41\"", "\"😮éA\"");
    same(
        "new Float64Array(new Uint8Array([1, 0, 0, 0, 0, 0, 248, 127]).buffer)",
        "new Float64Array(new Uint8Array([1, 0, 0, 0, 0, 0, 248, 127]).buffer)",
    );
}
