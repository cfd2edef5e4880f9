//! Deno's recorded `list()` results (`semantics-list.json`, from the real binary) replayed
//! through [`Selector`]: on Deno's 50-key dataset every selector yields exactly Deno's keys in
//! Deno's order, every per-entry cursor is Deno's cursor, and paginating with Deno's cursors
//! yields Deno's pages. A sorted vector stands in for the store.
#![allow(
    clippy::unwrap_used,
    reason = "a malformed vector should fail the test loudly"
)]

use serde_json::Value;
use tuplekv_codec::{ByteRange, Key, Selector, SelectorError, encode_key, key};
use tuplekv_testkit::vectors::{key_from_json, load_json};

struct Dataset {
    /// Encoded key, key, value (the dataset index), sorted by encoded key.
    rows: Vec<(Vec<u8>, Key, u64)>,
}

impl Dataset {
    fn load(record: &Value) -> Dataset {
        let mut rows: Vec<_> = record["dataset"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let k = key_from_json(&e["key"]);
                (encode_key(&k), k, e["value"].as_u64().unwrap())
            })
            .collect();
        rows.sort();
        Dataset { rows }
    }

    /// What a list over `range` returns: at most `limit` rows, from the far end when reversed.
    fn list(&self, range: &ByteRange, reverse: bool, limit: usize) -> Vec<&(Vec<u8>, Key, u64)> {
        let inside = self.rows.iter().filter(|r| range.contains(&r.0));
        if reverse {
            inside.rev().take(limit).collect()
        } else {
            inside.take(limit).collect()
        }
    }
}

/// The selectors the recording used, by the names it gives them. Numbers under "a" are JS
/// numbers; `n` marks bigints.
fn selector(name: &str) -> Selector {
    let a = key!["a"];
    match name {
        "prefix ['']" => Selector::prefix(&key![""]),
        "prefix []" => Selector::prefix(&key![]),
        "prefix [a,1] (exact key exists, no children)" => Selector::prefix(&key!["a", 1.0]),
        "prefix [a]" => Selector::prefix(&a),
        "prefix [a] end [a,5]" => Selector::prefix_end(&a, &key!["a", 5.0]),
        "prefix [a] start [a,5]" => Selector::prefix_start(&a, &key!["a", 5.0]),
        "prefix [a] start [a] (start == prefix)" => Selector::prefix_start(&a, &a),
        "prefix [ab]" => Selector::prefix(&key!["ab"]),
        "prefix [b,c]" => Selector::prefix(&key!["b", "c"]),
        "prefix [users]" => Selector::prefix(&key!["users"]),
        "prefix [users] start [users,0n] (start before first)" => {
            Selector::prefix_start(&key!["users"], &key!["users", 0])
        }
        "prefix [zzz] (no match)" => Selector::prefix(&key!["zzz"]),
        "start [1] end [true]" => Selector::range(&key![1.0], &key![true]),
        "start [] end [a]" => Selector::range(&key![], &a),
        "start [a,3] end [a,7]" => Selector::range(&key!["a", 3.0], &key!["a", 7.0]),
        "start [a,5] end [a,5] (empty range)" => Selector::range(&key!["a", 5.0], &key!["a", 5.0]),
        "start [a] end [a,y]" => Selector::range(&a, &key!["a", "y"]),
        "start [a] end [b]" => Selector::range(&a, &key!["b"]),
        "start [users,3n] end [users,7n]" => Selector::range(&key!["users", 3], &key!["users", 7]),
        "start [a,3] end [users,5n]" => Selector::range(&key!["a", 3.0], &key!["users", 5]),
        other => panic!("selector {other:?} is not in the table"),
    }
}

fn json_keys(v: &Value) -> Vec<Key> {
    v.as_array().unwrap().iter().map(key_from_json).collect()
}

#[test]
fn every_recorded_list_matches_keys_order_and_cursors() {
    let record = load_json("semantics-list.json");
    let data = Dataset::load(&record);
    assert_eq!(data.rows.len(), 50);
    let mut checked = 0;
    for case in record["lists"].as_array().unwrap() {
        let name = format!("{} / {}", case["selector"], case["options"]);
        let sel = selector(case["selector"].as_str().unwrap());
        let opts = &case["optionsValue"];
        let reverse = opts["reverse"].as_bool().unwrap_or(false);
        let limit = opts["limit"].as_u64().map_or(usize::MAX, |l| l as usize);
        let result = &case["result"];
        let range = match sel.byte_range() {
            Ok(range) => range,
            Err(e) => {
                assert_eq!(result["ok"], false, "{name}: Deno accepted it, we said {e}");
                assert_eq!(result["error"]["message"], e.to_string(), "{name}");
                continue;
            }
        };
        assert_eq!(result["ok"], true, "{name}: Deno failed, we did not");
        let ours = data.list(&range, reverse, limit);
        let entries = result["entries"].as_array().unwrap();
        assert_eq!(ours.len(), entries.len(), "{name}: entry count");
        for (row, entry) in ours.iter().zip(entries) {
            assert_eq!(row.1, key_from_json(&entry["key"]), "{name}");
            assert_eq!(row.2, entry["value"].as_u64().unwrap(), "{name}");
            assert_eq!(
                sel.cursor_for(&row.0).unwrap(),
                entry["cursor"],
                "{name}: cursor of {}",
                row.1
            );
        }
        // After the last entry the cursor stays on it if the limit stopped the list, and is
        // empty if the range ran out.
        let final_cursor = match ours.last() {
            Some(last) if ours.len() == limit => sel.cursor_for(&last.0).unwrap(),
            _ => String::new(),
        };
        assert_eq!(result["finalCursor"], final_cursor, "{name}: final cursor");
        checked += 1;
    }
    assert!(checked > 100, "only {checked} lists checked");
}

#[test]
fn paginating_with_deno_cursors_yields_deno_pages() {
    let record = load_json("semantics-list.json");
    let data = Dataset::load(&record);
    for (name, pages) in record["pagination"].as_object().unwrap() {
        // "<selector> limit N[ reverse]"
        let reverse = name.ends_with(" reverse");
        let head = name.trim_end_matches(" reverse");
        let (sel_name, limit) = head.rsplit_once(" limit ").unwrap();
        let limit: usize = limit.parse().unwrap();
        let sel = selector(sel_name);
        for page in pages.as_array().unwrap() {
            let cursor = page["cursorIn"].as_str().unwrap_or("");
            let range = sel.resume(cursor, reverse).unwrap();
            let ours = data.list(&range, reverse, limit);
            let keys: Vec<Key> = ours.iter().map(|r| r.1.clone()).collect();
            assert_eq!(keys, json_keys(&page["keys"]), "{name} from {cursor:?}");
            let out = match ours.last() {
                Some(last) if ours.len() == limit => sel.cursor_for(&last.0).unwrap(),
                _ => String::new(),
            };
            assert_eq!(page["cursorOut"], out, "{name} from {cursor:?}");
        }
    }
}

#[test]
fn recorded_selector_and_cursor_errors_have_deno_messages() {
    let record = load_json("semantics-list.json");
    let invalid = &record["invalid"];
    let msg = |case: &str| {
        invalid[case]["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let a = key!["a"];
    let cases: Vec<(&str, SelectorError)> = vec![
        (
            "cursor garbage '!!!'",
            Selector::prefix(&a).resume("!!!", false).unwrap_err(),
        ),
        (
            "cursor 'AA' (single 0x00 byte)",
            Selector::prefix(&a).resume("AA", false).unwrap_err(),
        ),
        (
            "start > end",
            Selector::range(&key!["b"], &a).byte_range().unwrap_err(),
        ),
        (
            "prefix [a] + start [b]",
            Selector::prefix_start(&a, &key!["b"])
                .byte_range()
                .unwrap_err(),
        ),
        (
            "prefix [a] + end [b]",
            Selector::prefix_end(&a, &key!["b"])
                .byte_range()
                .unwrap_err(),
        ),
        (
            "prefix [a] + start [a,5] + end [a,7]",
            Selector::from_options(Some(&a), Some(&key!["a", 5.0]), Some(&key!["a", 7.0]))
                .unwrap_err(),
        ),
        (
            "only start",
            Selector::from_options(None, Some(&a), None).unwrap_err(),
        ),
        (
            "only end",
            Selector::from_options(None, None, Some(&a)).unwrap_err(),
        ),
        (
            "empty selector {}",
            Selector::from_options(None, None, None).unwrap_err(),
        ),
    ];
    for (case, err) in cases {
        assert_eq!(err.to_string(), msg(case), "{case}");
    }
    // An empty cursor restarts the list (Deno treats "" as no cursor).
    let sel = Selector::prefix(&a);
    assert_eq!(sel.resume("", false), sel.byte_range());
    // The cursor after the third entry of prefix ["a"].
    let data = Dataset::load(&record);
    let third = data.list(&sel.byte_range().unwrap(), false, 3)[2];
    assert_eq!(
        record["cursor_of_prefix_a_after_3"],
        sel.cursor_for(&third.0).unwrap()
    );
}
