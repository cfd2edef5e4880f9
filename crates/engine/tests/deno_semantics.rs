//! Behaviours recorded from the real Deno binary (`semantics-*.json` in testkit's data),
//! checked against the engine: u64 arithmetic, type errors, versionstamp rules, and every
//! recorded `list()` on Deno's 50-key dataset (keys, order, per-entry cursors, final cursor,
//! pagination). Where we deliberately do better than Deno (all-or-nothing commits), the test
//! asserts our behaviour and says what Deno does.
#![allow(
    clippy::unwrap_used,
    reason = "a malformed vector should fail the test loudly"
)]

use serde_json::Value as Json;
use tuplekv_engine::{
    CommitResult, Database, Error, Key, KeyBytes, ListCursor, ListOptions, Selector, Value,
    Versionstamp, key,
};
use tuplekv_testkit::vectors::{key_from_json, load_json};

fn u64_of(v: &Json) -> u64 {
    v["$u64"].as_str().unwrap().parse().unwrap()
}

fn get_u64(db: &Database, k: &Key) -> Option<u64> {
    db.get(k).unwrap().and_then(|e| e.value.as_u64())
}

#[test]
fn sum_min_max_match_deno_results() {
    let rec = load_json("semantics-u64.json");
    let db = Database::in_memory();
    let k = key!["sum"];
    let sum = |n: u64| db.atomic().sum(&k, n).commit().unwrap();
    let _ = sum(5);
    assert_eq!(get_u64(&db, &k), Some(u64_of(&rec["sum"]["on_absent_5"])));
    let _ = sum(7);
    assert_eq!(get_u64(&db, &k), Some(u64_of(&rec["sum"]["add_7"])));
    let _ = sum(0);
    assert_eq!(get_u64(&db, &k), Some(u64_of(&rec["sum"]["add_0"])));
    db.set(&k, u64::MAX).unwrap();
    let _ = sum(1);
    assert_eq!(
        get_u64(&db, &k),
        Some(u64_of(&rec["sum"]["max_plus_1_wraps"]))
    );
    db.set(&k, u64::MAX).unwrap();
    let _ = sum(u64::MAX);
    assert_eq!(get_u64(&db, &k), Some(u64_of(&rec["sum"]["max_plus_max"])));
    db.set(&k, 1u64 << 63).unwrap();
    let _ = sum(1 << 63);
    assert_eq!(get_u64(&db, &k), Some(u64_of(&rec["sum"]["2^63 + 2^63"])));

    let m = key!["min"];
    let _ = db.atomic().min(&m, 7).commit().unwrap();
    assert_eq!(get_u64(&db, &m), Some(u64_of(&rec["min"]["on_absent_7"])));
    let _ = db.atomic().min(&m, 3).commit().unwrap();
    assert_eq!(get_u64(&db, &m), Some(u64_of(&rec["min"]["with_3"])));
    let _ = db.atomic().min(&m, 10).commit().unwrap();
    assert_eq!(get_u64(&db, &m), Some(u64_of(&rec["min"]["with_10"])));
    let _ = db.atomic().min(&m, 0).commit().unwrap();
    assert_eq!(get_u64(&db, &m), Some(u64_of(&rec["min"]["with_0"])));

    let x = key!["max"];
    let _ = db.atomic().max(&x, 7).commit().unwrap();
    assert_eq!(get_u64(&db, &x), Some(u64_of(&rec["max"]["on_absent_7"])));
    let _ = db.atomic().max(&x, 3).commit().unwrap();
    assert_eq!(get_u64(&db, &x), Some(u64_of(&rec["max"]["with_3"])));
    let _ = db.atomic().max(&x, 10).commit().unwrap();
    assert_eq!(get_u64(&db, &x), Some(u64_of(&rec["max"]["with_10"])));
    let _ = db.atomic().max(&x, u64::MAX).commit().unwrap();
    assert_eq!(get_u64(&db, &x), Some(u64_of(&rec["max"]["with_max"])));
}

#[test]
fn u64_ops_on_other_values_fail_with_deno_message_and_write_nothing() {
    let rec = load_json("semantics-u64.json");
    let db = Database::in_memory();
    let num = key!["num"];
    db.set(&num, b"not a u64").unwrap();
    for (op, case) in [
        ("sum", "sum on num"),
        ("min", "min on num"),
        ("max", "max on num"),
    ] {
        let a = db.atomic();
        let a = match op {
            "sum" => a.sum(&num, 1),
            "min" => a.min(&num, 1),
            _ => a.max(&num, 1),
        };
        let err = a.commit().unwrap_err();
        assert_eq!(
            err,
            Error::NotU64 {
                op,
                index: 0,
                key: KeyBytes::from(num.encode())
            }
        );
        // Deno's message, then which mutation failed.
        let deno = rec["type_mismatch"][case]["error"]["message"]
            .as_str()
            .unwrap();
        assert_eq!(
            err.to_string(),
            format!("{deno}: mutation 0 of the operation, key [\"num\"]")
        );
    }

    // Deno keeps the mutations before the failing one ("side_effect_value": "x"); we write
    // nothing and use no versionstamp.
    assert_eq!(
        rec["type_mismatch_atomic_all_or_nothing"]["side_effect_value"],
        "x"
    );
    let before = db.current_versionstamp();
    let side = key!["side"];
    let err = db
        .atomic()
        .set(&side, b"x")
        .delete(&key!["other"])
        .sum(&num, 1)
        .commit();
    assert!(matches!(
        err,
        Err(Error::NotU64 {
            op: "sum",
            index: 2,
            ..
        })
    ));
    assert_eq!(
        db.get(&side).unwrap(),
        None,
        "earlier mutation must not persist"
    );
    assert_eq!(
        db.current_versionstamp(),
        before,
        "a failed commit uses no versionstamp"
    );
    assert_eq!(
        db.get(&num).unwrap().unwrap().value,
        Value::from(b"not a u64")
    );
}

#[test]
fn versionstamp_rules_match_deno() {
    let rec = load_json("semantics-versionstamp.json");
    let db = Database::in_memory();
    // Strictly increasing, 20 lowercase hex digits ending in 0000.
    let mut prev = Versionstamp::ZERO;
    for i in 0..200 {
        let vs = db.set(&key!["seq", i], b"v").unwrap();
        let text = vs.to_string();
        assert_eq!(text.len(), 20);
        assert!(text.ends_with("0000"));
        assert!(vs > prev && text > prev.to_string());
        prev = vs;
    }
    assert_eq!(rec["sequential"]["strictly_increasing_lexicographic"], true);

    // All mutations of one commit share its stamp, which list and get report.
    let res = db
        .atomic()
        .set(&key!["s", 1], b"a")
        .set(&key!["s", 2], b"b")
        .commit()
        .unwrap();
    let vs = res.versionstamp().unwrap();
    for e in db
        .list(&Selector::prefix(&key!["s"]), ListOptions::default())
        .unwrap()
    {
        assert_eq!(e.unwrap().versionstamp, vs);
    }
    assert_eq!(rec["list_versionstamps_equal_atomic"], true);

    // Failed checks use no version; empty and check-only commits do.
    let before = db.current_versionstamp();
    for _ in 0..5 {
        let r = db
            .atomic()
            .check(&key!["s", 1], Some(Versionstamp::ZERO))
            .set(&key!["x"], b"x")
            .commit();
        assert!(!r.unwrap().is_committed());
    }
    assert_eq!(db.current_versionstamp(), before);
    let empty = db.atomic().commit().unwrap().versionstamp().unwrap();
    assert!(empty > before);
    let checks_only = db.atomic().check(&key!["s", 1], Some(vs)).commit().unwrap();
    assert!(checks_only.versionstamp().unwrap() > empty);

    // Order inside one commit: later mutations see earlier ones.
    let k = key!["dup"];
    let _ = db.atomic().set(&k, b"1").set(&k, b"2").commit().unwrap();
    assert_eq!(db.get(&k).unwrap().unwrap().value, Value::from(b"2"));
    let c = key!["dupsum"];
    let _ = db.atomic().sum(&c, 1).sum(&c, 2).commit().unwrap();
    assert_eq!(
        get_u64(&db, &c),
        Some(u64_of(&rec["duplicate_sum_in_atomic"]["value"]))
    );
    let _ = db.atomic().set(&k, b"3").delete(&k).commit().unwrap();
    assert_eq!(db.get(&k).unwrap(), None);
    let _ = db.atomic().delete(&k).set(&k, b"4").commit().unwrap();
    assert!(db.get(&k).unwrap().is_some());
    // The same check twice is fine.
    let cur = db.get(&k).unwrap().unwrap().versionstamp;
    assert!(
        db.atomic()
            .check(&k, Some(cur))
            .check(&k, Some(cur))
            .commit()
            .unwrap()
            .is_committed()
    );
}

#[test]
fn failed_checks_are_all_reported_with_expected_and_actual() {
    let db = Database::in_memory();
    let a = key!["a"];
    let vs = db.set(&a, b"1").unwrap();
    let res = db
        .atomic()
        .check(&a, None) // fails: present
        .check(&key!["b"], None) // holds
        .check(&key!["c"], Some(vs)) // fails: absent
        .set(&key!["d"], b"x")
        .commit()
        .unwrap();
    let CommitResult::Conflict(conflict) = res else {
        panic!("expected a conflict")
    };
    let failed: Vec<_> = conflict
        .failed_checks
        .iter()
        .map(|f| (f.index, f.expected, f.actual))
        .collect();
    assert_eq!(failed, vec![(0, None, Some(vs)), (2, Some(vs), None)]);
    assert_eq!(conflict.failed_checks[0].key().unwrap(), a);
    assert_eq!(db.get(&key!["d"]).unwrap(), None);
}

/// Deno's 50-key list dataset loaded into a database; values are the dataset indexes.
fn dataset_db(record: &Json) -> Database {
    let db = Database::in_memory();
    for e in record["dataset"].as_array().unwrap() {
        db.set(&key_from_json(&e["key"]), e["value"].as_u64().unwrap())
            .unwrap();
    }
    db
}

/// The selectors of the recording, by name (numbers under "a" are JS numbers).
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

fn options(v: &Json) -> ListOptions {
    ListOptions {
        limit: v["limit"].as_u64().map(|l| l as usize),
        reverse: v["reverse"].as_bool().unwrap_or(false),
        batch_size: v["batchSize"].as_u64().map(|b| b as usize),
        cursor: None,
    }
}

#[test]
fn every_recorded_list_on_the_50_key_dataset_matches_deno() {
    let record = load_json("semantics-list.json");
    let db = dataset_db(&record);
    let mut checked = 0;
    for case in record["lists"].as_array().unwrap() {
        let name = format!("{} / {}", case["selector"], case["options"]);
        let result = &case["result"];
        let iter = db.list(
            &selector(case["selector"].as_str().unwrap()),
            options(&case["optionsValue"]),
        );
        let mut iter = match iter {
            Ok(iter) => iter,
            Err(e) => {
                assert_eq!(result["ok"], false, "{name}: {e}");
                assert_eq!(result["error"]["message"], e.to_string(), "{name}");
                continue;
            }
        };
        assert_eq!(iter.cursor(), ListCursor::NotStarted, "{name}");
        for expected in result["entries"].as_array().unwrap() {
            let entry = iter.next().unwrap().unwrap();
            assert_eq!(
                entry.decoded_key().unwrap(),
                key_from_json(&expected["key"]),
                "{name}"
            );
            assert_eq!(
                entry.value,
                Value::U64(expected["value"].as_u64().unwrap()),
                "{name}"
            );
            assert_eq!(
                iter.cursor(),
                ListCursor::After(expected["cursor"].as_str().unwrap().into())
            );
        }
        assert!(iter.next().is_none(), "{name}: more entries than Deno");
        assert_eq!(
            iter.cursor().as_deno_str(),
            result["finalCursor"],
            "{name}: final cursor"
        );
        checked += 1;
    }
    assert!(checked > 100);
}

#[test]
fn paginating_the_dataset_with_cursors_matches_deno() {
    let record = load_json("semantics-list.json");
    let db = dataset_db(&record);
    for (name, pages) in record["pagination"].as_object().unwrap() {
        let reverse = name.ends_with(" reverse");
        let (sel, limit) = name
            .trim_end_matches(" reverse")
            .rsplit_once(" limit ")
            .unwrap();
        for page in pages.as_array().unwrap() {
            let opts = ListOptions {
                limit: Some(limit.parse().unwrap()),
                reverse,
                cursor: page["cursorIn"].as_str().map(str::to_owned),
                batch_size: None,
            };
            let mut iter = db.list(&selector(sel), opts).unwrap();
            // Before the first entry, Deno's `iterator.cursor` is the cursor it was given.
            let given = page["cursorIn"].as_str().filter(|c| !c.is_empty());
            let before = given.map_or(ListCursor::NotStarted, |c| ListCursor::After(c.into()));
            assert_eq!(iter.cursor(), before, "{name} before iterating");
            let keys: Vec<Key> = iter
                .by_ref()
                .map(|e| e.unwrap().decoded_key().unwrap())
                .collect();
            let expected: Vec<Key> = page["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(key_from_json)
                .collect();
            assert_eq!(keys, expected, "{name} from {:?}", page["cursorIn"]);
            assert_eq!(iter.cursor().as_deno_str(), page["cursorOut"], "{name}");
        }
    }
}

#[test]
fn list_option_errors_have_deno_messages() {
    let record = load_json("semantics-list.json");
    let db = dataset_db(&record);
    let invalid = &record["invalid"];
    let msg = |case: &str| {
        invalid[case]["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let all = Selector::prefix(&key![]);
    let with = |o: ListOptions| db.list(&all, o).err().unwrap().to_string();
    assert_eq!(
        with(ListOptions {
            limit: Some(0),
            ..Default::default()
        }),
        msg("limit 0")
    );
    assert_eq!(
        with(ListOptions {
            batch_size: Some(0),
            ..Default::default()
        }),
        msg("batchSize 0")
    );
    assert!(
        with(ListOptions {
            batch_size: Some(1001),
            ..Default::default()
        })
        .starts_with(&msg("batchSize 1001"))
    );
    assert_eq!(
        with(ListOptions {
            cursor: Some("!!!".into()),
            ..Default::default()
        }),
        msg("cursor garbage '!!!'")
    );
    // Large limits and batch sizes at the maximum work.
    for (case, o) in [
        (
            "limit 100000",
            ListOptions {
                limit: Some(100_000),
                ..Default::default()
            },
        ),
        (
            "batchSize 500",
            ListOptions {
                batch_size: Some(500),
                ..Default::default()
            },
        ),
        (
            "batchSize 501",
            ListOptions {
                batch_size: Some(501),
                ..Default::default()
            },
        ),
    ] {
        let sel = Selector::prefix(&key!["users"]);
        let keys: Vec<Key> = db
            .list(&sel, o)
            .unwrap()
            .map(|e| e.unwrap().decoded_key().unwrap())
            .collect();
        let expected: Vec<Key> = invalid[case]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(key_from_json)
            .collect();
        assert_eq!(keys, expected, "{case}");
    }
}

#[test]
fn get_many_returns_request_order_with_missing_entries() {
    let record = load_json("semantics-list.json");
    let db = dataset_db(&record);
    let case = &record["getMany"]["3 keys incl missing, order preserved"];
    let keys: Vec<Key> = case["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| key_from_json(&e["key"]))
        .collect();
    let got = db.get_many(&keys).unwrap();
    for (g, e) in got.iter().zip(case["entries"].as_array().unwrap()) {
        assert_eq!(
            g.as_ref().map(|g| g.value.clone()),
            e["value"].as_u64().map(Value::U64)
        );
    }
    assert_eq!(db.get_many(&[]).unwrap(), vec![]);
    let dup = db.get_many(&[key!["a"], key!["a"]]).unwrap();
    assert_eq!(dup[0], dup[1]);
}
