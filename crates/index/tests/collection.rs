//! Collections: every operation, every index kind, the errors, and building, verifying and
//! repairing indexes.
#![allow(clippy::unwrap_used, reason = "tests")]

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, ListOptions, key};
use tuplekv_index::{Collection, Duplicate, Error, Problem};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
    color: String,
    city: String,
    age: u32,
    tags: Vec<String>,
    nickname: Option<String>,
    bio: String,
}

fn user(id: u64, email: &str, color: &str) -> User {
    User {
        id,
        email: email.into(),
        color: color.into(),
        city: if id.is_multiple_of(2) { "Oslo" } else { "Lima" }.into(),
        age: 20 + (id as u32 % 5),
        tags: vec![format!("t{}", id % 3), "all".into()],
        nickname: id.is_multiple_of(2).then(|| format!("nick{id}")),
        bio: String::new(),
    }
}

fn users(db: Database) -> Collection<User, Database> {
    Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color.clone()]))
        .index("city_age", |u| Some(key![u.city.clone(), u.age]))
        .multi("tags", |u| u.tags.iter().map(|t| key![t.clone()]).collect())
        .unique("nickname", |u| u.nickname.clone().map(|n| key![n]))
        .covering()
        .open(db)
        .unwrap()
}

fn ids(page: &tuplekv_index::Page<User>) -> Vec<u64> {
    page.items.iter().map(|(_, u)| u.id).collect()
}

#[test]
fn insert_get_and_every_index_kind_answer_queries() {
    let c = users(Database::in_memory());
    for (id, email, color) in [(1, "a@x", "green"), (2, "b@x", "blue"), (3, "c@x", "green")] {
        c.insert(&user(id, email, color)).unwrap();
    }
    assert_eq!(c.get(&key![2]).unwrap().unwrap().email, "b@x");
    assert_eq!(c.get_by("email", &key!["c@x"]).unwrap().unwrap().0, key![3]);
    assert_eq!(c.get_by("email", &key!["nobody@x"]).unwrap(), None);
    // Non-unique, exact value.
    assert_eq!(
        ids(&c
            .list_by("color", &key!["green"], ListOptions::default())
            .unwrap()),
        [1, 3]
    );
    // Compound: by the leading field, and by both.
    assert_eq!(
        ids(&c
            .list_by("city_age", &key!["Lima"], ListOptions::default())
            .unwrap()),
        [1, 3]
    );
    assert_eq!(
        ids(&c
            .list_by("city_age", &key!["Lima", 23u32], ListOptions::default())
            .unwrap()),
        [3]
    );
    // Multi-entry: every user has "all"; t1 only user 1.
    assert_eq!(c.count("tags", &key!["all"]).unwrap(), 3);
    assert_eq!(
        ids(&c
            .list_by("tags", &key!["t1"], ListOptions::default())
            .unwrap()),
        [1]
    );
    // Optional + covering: only even ids have a nickname.
    assert_eq!(
        c.count("nickname", &tuplekv_engine::Key::empty()).unwrap(),
        1
    );
    assert_eq!(
        c.get_by("nickname", &key!["nick2"]).unwrap().unwrap().1.id,
        2
    );
    // Value range.
    let range = c
        .list_range("color", &key!["a"], &key!["c"], ListOptions::default())
        .unwrap();
    assert_eq!(ids(&range), [2]);
    assert_eq!(c.list(ListOptions::default()).unwrap().items.len(), 3);
}

#[test]
fn pagination_by_cursor_and_reverse_cover_every_entry_once() {
    let c = users(Database::in_memory());
    for id in 0..10u64 {
        c.insert(&user(id, &format!("{id}@x"), "green")).unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = c
            .list_by(
                "color",
                &key!["green"],
                ListOptions {
                    limit: Some(3),
                    reverse: true,
                    cursor: cursor.clone(),
                    ..ListOptions::default()
                },
            )
            .unwrap();
        seen.extend(ids(&page));
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, (0..10).rev().collect::<Vec<u64>>());
}

/// Pages through a query one entry at a time and returns the ids seen; asserts that the loop
/// ends (one page per match, plus at most one empty one) and that the pages, together, equal
/// the query unpaged.
fn check_paging_one_at_a_time(
    query: impl Fn(ListOptions) -> Result<tuplekv_index::Page<User>, Error>,
    reverse: bool,
) {
    let all = ids(&query(ListOptions {
        reverse,
        ..ListOptions::default()
    })
    .unwrap());
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..=all.len() + 1 {
        let page = query(ListOptions {
            limit: Some(1),
            reverse,
            cursor: cursor.clone(),
            ..ListOptions::default()
        })
        .unwrap();
        seen.extend(ids(&page));
        cursor = page.cursor;
        if cursor.is_none() {
            assert_eq!(seen, all, "reverse: {reverse}");
            return;
        }
    }
    panic!("paging did not end after {} pages: {seen:?}", all.len() + 2);
}

/// An exact unique value is a key itself, so a cursor relative to the query's range was `""`
/// ("from the start") and paging it with `limit: Some(1)` never ended.
#[test]
fn paging_one_entry_at_a_time_ends_and_returns_every_match_once() {
    let c = users(Database::in_memory());
    for id in 0..6u64 {
        let color = if id < 4 { "green" } else { "blue" };
        c.insert(&user(id, &format!("{id}@x"), color)).unwrap();
    }
    for reverse in [false, true] {
        // Unique: an exact value with a match, one without, a range, everything.
        check_paging_one_at_a_time(|o| c.list_by("email", &key!["3@x"], o), reverse);
        check_paging_one_at_a_time(|o| c.list_by("email", &key!["9@x"], o), reverse);
        check_paging_one_at_a_time(
            |o| c.list_range("email", &key!["1@x"], &key!["4@x"], o),
            reverse,
        );
        check_paging_one_at_a_time(|o| c.list_by("email", &key![], o), reverse);
        // Covering unique, exact.
        check_paging_one_at_a_time(|o| c.list_by("nickname", &key!["nick2"], o), reverse);
        // Non-unique: exact values, a compound prefix, a range.
        check_paging_one_at_a_time(|o| c.list_by("color", &key!["green"], o), reverse);
        check_paging_one_at_a_time(|o| c.list_by("color", &key!["blue"], o), reverse);
        check_paging_one_at_a_time(|o| c.list_by("city_age", &key!["Oslo", 20u32], o), reverse);
        check_paging_one_at_a_time(
            |o| c.list_range("color", &key!["a"], &key!["h"], o),
            reverse,
        );
    }
    // A cursor from another query's keyspace is refused, not silently restarted.
    let page = c
        .list_by(
            "color",
            &key!["green"],
            ListOptions {
                limit: Some(1),
                ..ListOptions::default()
            },
        )
        .unwrap();
    assert!(matches!(
        c.list_by(
            "color",
            &key!["blue"],
            ListOptions {
                cursor: page.cursor,
                ..ListOptions::default()
            }
        ),
        Err(Error::Store(tuplekv_engine::Error::Selector(
            tuplekv_engine::codec::SelectorError::CursorOutOfBounds
        )))
    ));
}

#[test]
fn a_unique_violation_names_the_index_value_and_holder_and_writes_nothing() {
    let c = users(Database::in_memory());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let before = c.verify().unwrap();
    let err = c.insert(&user(2, "ada@x", "red")).unwrap_err();
    assert_eq!(
        err,
        Error::UniqueViolation {
            index: "email".into(),
            value: key!["ada@x"],
            existing_primary_key: key![1],
        }
    );
    assert!(
        err.to_string().contains("unique index `email` already has"),
        "{err}"
    );
    assert_eq!(c.get(&key![2]).unwrap(), None);
    assert_eq!(c.count("color", &key!["red"]).unwrap(), 0);
    assert_eq!(c.verify().unwrap(), before);
    assert!(matches!(
        c.insert(&user(1, "other@x", "red")),
        Err(Error::AlreadyExists { .. })
    ));
}

#[test]
fn upsert_update_and_delete_move_and_remove_entries() {
    let c = users(Database::in_memory());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    // Changing the email frees the old value.
    let mut changed = user(1, "ada@new", "blue");
    changed.tags = vec!["solo".into()];
    let old = c.upsert(&changed).unwrap().unwrap();
    assert_eq!(old.email, "ada@x");
    assert_eq!(c.get_by("email", &key!["ada@x"]).unwrap(), None);
    c.insert(&user(2, "ada@x", "green")).unwrap();
    assert_eq!(c.count("tags", &key!["all"]).unwrap(), 1);
    // Read-modify-write.
    let updated = c
        .update(&key![1], |mut u| {
            u.color = "red".into();
            u
        })
        .unwrap();
    assert_eq!(updated.color, "red");
    assert_eq!(
        ids(&c
            .list_by("color", &key!["red"], ListOptions::default())
            .unwrap()),
        [1]
    );
    assert_eq!(c.count("color", &key!["blue"]).unwrap(), 0);
    assert_eq!(
        c.update(&key![1], |mut u| {
            u.id = 9;
            u
        }),
        Err(Error::PrimaryKeyChanged {
            from: key![1],
            to: key![9]
        })
    );
    assert_eq!(c.get(&key![9]).unwrap(), None);
    assert!(matches!(
        c.update(&key![7], |u| u),
        Err(Error::NotFound { .. })
    ));
    // Delete takes every entry with it.
    assert_eq!(c.delete(&key![1]).unwrap().unwrap().id, 1);
    assert_eq!(c.delete(&key![1]).unwrap(), None);
    assert_eq!(c.get_by("email", &key!["ada@new"]).unwrap(), None);
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_record_over_the_value_limit_or_with_too_many_entries_writes_nothing() {
    let c = users(Database::in_memory());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let before = c.verify().unwrap();
    let mut big = user(1, "ada@x", "green");
    big.bio = "x".repeat(tuplekv_engine::limits::VALUE_SIZE_MAX + 1);
    assert!(matches!(
        c.upsert(&big),
        Err(Error::Store(tuplekv_engine::Error::ValueTooLarge { .. }))
    ));
    // Replacing user 1's tags (t1, all) by n new ones is one commit of 2 deletes, 2 + n
    // entry sets (color, city_age, the tags; the email entry is unchanged, so it is checked,
    // not rewritten) and the record: 1001 for 996 tags.
    let with_tags = |n: usize| {
        let mut many = user(1, "ada@x", "green");
        many.tags = (0..n).map(|i| format!("tag{i}")).collect();
        many
    };
    let max = tuplekv_engine::limits::MUTATIONS_MAX;
    assert_eq!(
        c.upsert(&with_tags(max - 4)),
        Err(Error::Store(tuplekv_engine::Error::TooManyMutations {
            count: max + 1
        }))
    );
    assert_eq!(c.get(&key![1]).unwrap().unwrap(), user(1, "ada@x", "green"));
    assert_eq!(c.verify().unwrap(), before);
    // Exactly the limit commits.
    c.upsert(&with_tags(max - 5)).unwrap();
    assert_eq!(c.count("tags", &key!["all"]).unwrap(), 0);
    assert_eq!(c.count("tags", &key!["tag994"]).unwrap(), 1);
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_record_of_exactly_the_value_limit_is_stored_and_one_byte_more_is_refused() {
    let c = users(Database::in_memory());
    // User 1 has no nickname, so no covering entry: the record itself meets the limit.
    let sized = |extra: usize| {
        let mut u = user(1, "ada@x", "green");
        let base = postcard::to_stdvec(&u).unwrap().len();
        // The bio's length prefix grows from 1 to 3 bytes once it passes 127.
        u.bio = "x".repeat(tuplekv_engine::limits::VALUE_SIZE_MAX - base - 2 + extra);
        assert_eq!(
            postcard::to_stdvec(&u).unwrap().len(),
            tuplekv_engine::limits::VALUE_SIZE_MAX + extra
        );
        u
    };
    assert_eq!(
        c.insert(&sized(1)),
        Err(Error::Store(tuplekv_engine::Error::ValueTooLarge {
            size: tuplekv_engine::limits::VALUE_SIZE_MAX + 1
        }))
    );
    assert_eq!(c.get(&key![1]).unwrap(), None);
    assert_eq!(c.count("color", &key!["green"]).unwrap(), 0);
    c.insert(&sized(0)).unwrap();
    assert_eq!(c.get(&key![1]).unwrap().unwrap(), sized(0));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn unknown_indexes_are_named_in_the_error() {
    let c = users(Database::in_memory());
    let err = c
        .list_by("colour", &key!["green"], ListOptions::default())
        .unwrap_err();
    assert_eq!(err.to_string(), "collection `users` has no index `colour`");
    assert!(matches!(
        c.get_by("color", &key!["green"]),
        Err(Error::UnknownIndex { .. })
    ));
    let dup = Collection::builder("users", |u: &User| key![u.id])
        .index("a", |u| Some(key![u.color.clone()]))
        .index("a", |u| Some(key![u.city.clone()]))
        .open(Database::in_memory());
    assert!(matches!(dup, Err(Error::Definition(_))));
    // covering() with no index before it would cover nothing: refused, not ignored.
    let nothing = Collection::builder("users", |u: &User| key![u.id])
        .covering()
        .index("a", |u| Some(key![u.color.clone()]))
        .open(Database::in_memory());
    let Err(Error::Definition(message)) = nothing else {
        panic!("covering() before any index was accepted");
    };
    assert!(message.contains("covering() must follow"), "{message}");
}

/// Decoding a covering entry indexed its bytes directly behind a length guard; a damaged
/// entry is now a codec error that gives the sizes.
#[test]
fn a_damaged_covering_entry_is_a_codec_error_with_its_sizes() {
    let db = Database::in_memory();
    let c = users(db.clone());
    c.insert(&user(2, "b@x", "green")).unwrap();
    let at = key!["users", "u", "nickname", "nick2"];
    for (bytes, says) in [
        (vec![1u8, 9, 0], "3 bytes, shorter than its 5-byte header"),
        (
            vec![1u8, 200, 0, 0, 0, 0x15],
            "200-byte primary key but has 1 bytes left",
        ),
    ] {
        db.set(&at, bytes).unwrap();
        match c.get_by("nickname", &key!["nick2"]) {
            Err(Error::Codec { message, .. }) => assert!(message.contains(says), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_index_added_to_existing_records_is_built_online_and_reports_duplicates() {
    let db = Database::in_memory();
    let plain = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    for id in 0..50u64 {
        // Ids 10 and 20 share a city-wide "email" to make a duplicate for the unique index.
        let email = if id == 20 {
            "10@x".to_owned()
        } else {
            format!("{id}@x")
        };
        plain
            .insert(&user(
                id,
                &email,
                if id.is_multiple_of(2) {
                    "green"
                } else {
                    "blue"
                },
            ))
            .unwrap();
    }
    let c = users(db.clone());
    assert!(matches!(
        c.list_by("color", &key!["green"], ListOptions::default()),
        Err(Error::IndexNotReady { .. })
    ));
    // Writes during the build are indexed at once.
    c.insert(&user(100, "100@x", "green")).unwrap();
    let mut reports = Vec::new();
    let report = c.backfill(7, |p| reports.push(p.clone())).unwrap();
    assert!(!reports.is_empty());
    assert!(
        reports
            .windows(2)
            .all(|w| w[0].index != w[1].index || w[0].records < w[1].records)
    );
    assert_eq!(report.duplicates.len(), 1, "{report:?}");
    let dup = &report.duplicates[0];
    assert_eq!((dup.index.as_str(), &dup.value), ("email", &key!["10@x"]));
    assert!(report.completed.contains(&"color".to_owned()));
    assert!(!report.completed.contains(&"email".to_owned()));
    // The complete indexes answer; the one with a duplicate still refuses.
    assert_eq!(c.count("color", &key!["green"]).unwrap(), 26);
    assert!(matches!(
        c.get_by("email", &key!["3@x"]),
        Err(Error::IndexNotReady { .. })
    ));
    // Resolve the duplicate, run again: the unique index goes live. Record 20 gives up
    // `10@x`, whose entry record 10 holds: the entry stays with its holder.
    c.upsert(&user(20, "20@x", "green")).unwrap();
    // A pointer to an integer primary key is stored as that integer.
    assert_eq!(
        db.get(&key!["users", "u", "email", "10@x"])
            .unwrap()
            .map(|e| e.value),
        Some(tuplekv_engine::Value::U64(10))
    );
    let report = c.backfill(7, |_| {}).unwrap();
    assert_eq!(report.completed, ["email"]);
    assert_eq!(
        c.get_by("email", &key!["20@x"]).unwrap().unwrap().0,
        key![20]
    );
    assert!(c.verify().unwrap().is_clean(), "{:?}", c.verify().unwrap());
}

#[test]
fn verify_finds_and_repair_fixes_missing_dangling_and_wrong_entries() {
    let db = Database::in_memory();
    let c = users(db.clone());
    for id in 0..5u64 {
        c.insert(&user(id, &format!("{id}@x"), "green")).unwrap();
    }
    assert!(c.verify().unwrap().is_clean());
    let entry = |k: tuplekv_engine::Key| tuplekv_engine::codec::encode_key(&k);
    // Missing: delete user 1's color entry behind the collection's back.
    db.delete(&key!["users", "i", "color", "green", 1]).unwrap();
    // Dangling: an entry for a user that does not exist.
    db.set(&key!["users", "i", "color", "pink", 99], vec![0u8])
        .unwrap();
    // Wrong: user 2's email entry points at user 3.
    let mut to_three = vec![0u8];
    to_three.extend(entry(key![3]));
    db.set(&key!["users", "u", "email", "2@x"], to_three)
        .unwrap();
    let report = c.verify().unwrap();
    let mut problems: Vec<Problem> = report.findings.iter().map(|f| f.problem.clone()).collect();
    problems.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(
        problems,
        [Problem::Dangling, Problem::Missing, Problem::Wrong],
        "{report:?}"
    );
    let fixed = c.repair().unwrap();
    assert_eq!(fixed.findings.len(), 3);
    assert!(c.verify().unwrap().is_clean(), "{:?}", c.verify().unwrap());
    assert_eq!(c.get_by("email", &key!["2@x"]).unwrap().unwrap().0, key![2]);
    assert_eq!(c.count("color", &key!["green"]).unwrap(), 5);
}

/// `repair` used to decide duplicates: verify expected the lowest primary key to own a
/// contested unique entry, reported the entry as wrong when another record held it, and repair
/// gave it to the lowest key. It also named that key as the holder, whatever the entry said.
#[test]
fn repair_leaves_duplicates_alone_and_names_the_record_the_entry_points_at() {
    let db = Database::in_memory();
    let c = users(db.clone());
    c.insert(&user(1, "a@x", "green")).unwrap();
    c.insert(&user(2, "b@x", "green")).unwrap();
    // Behind the indexes' back, record 1 takes record 2's email.
    let plain = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    plain.upsert(&user(1, "b@x", "green")).unwrap();
    let report = c.verify().unwrap();
    let duplicate = Duplicate {
        index: "email".into(),
        value: key!["b@x"],
        holder: Some(key![2]),
        other: key![1],
    };
    assert_eq!(
        report.duplicates,
        std::slice::from_ref(&duplicate),
        "{report:?}"
    );
    // Only record 1's old entry is a finding; the contested one is not.
    assert_eq!(report.findings.len(), 1, "{report:?}");
    assert_eq!(report.findings[0].key, key!["users", "u", "email", "a@x"]);
    assert_eq!(report.findings[0].problem, Problem::Dangling);
    c.repair().unwrap();
    let after = c.verify().unwrap();
    assert!(after.findings.is_empty(), "{after:?}");
    assert_eq!(after.duplicates, [duplicate]);
    assert_eq!(c.get_by("email", &key!["b@x"]).unwrap().unwrap().0, key![2]);
    // With no entry at all, the duplicate has no holder and repair writes none.
    db.delete(&key!["users", "u", "email", "b@x"]).unwrap();
    c.repair().unwrap();
    let none = c.verify().unwrap();
    assert!(none.findings.is_empty(), "{none:?}");
    let others: Vec<(Option<tuplekv_engine::Key>, tuplekv_engine::Key)> = none
        .duplicates
        .iter()
        .map(|d| (d.holder.clone(), d.other.clone()))
        .collect();
    assert_eq!(others, [(None, key![1]), (None, key![2])]);
    assert_eq!(c.get_by("email", &key!["b@x"]).unwrap(), None);
}

/// An index removed from the definition and declared again was found *ready* and answered from
/// entries that writes without it had left stale. `drop_index` deletes them and its state.
#[test]
fn a_removed_index_is_dropped_and_built_afresh_when_declared_again() {
    let db = Database::in_memory();
    let v2 = users(db.clone());
    c_insert_three(&v2);
    // Version 3 no longer declares any index and changes records.
    let v3 = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    v3.upsert(&user(1, "a@new", "red")).unwrap();
    v3.delete(&key![2]).unwrap();
    // Declared again without a drop, the index is stale (verify says so).
    assert!(!users(db.clone()).verify().unwrap().is_clean());
    // Dropped by the handle that no longer declares them: every entry of every index.
    let dropped: u64 = ["email", "color", "city_age", "tags", "nickname"]
        .iter()
        .map(|i| v3.drop_index(i).unwrap())
        .sum();
    // 3 records x (email, color, city_age, 2 tags) + 1 nickname (user 2).
    assert_eq!(dropped, 16);
    assert_eq!(v3.drop_index("email").unwrap(), 0);
    let v4 = users(db.clone());
    assert_eq!(
        v4.get_by("email", &key!["a@x"]),
        Err(Error::IndexNotReady {
            index: "email".into()
        })
    );
    let report = v4.backfill(2, |_| {}).unwrap();
    assert_eq!(report.completed.len(), 5, "{report:?}");
    assert_eq!(v4.get_by("email", &key!["a@x"]).unwrap(), None);
    assert_eq!(
        v4.get_by("email", &key!["a@new"]).unwrap().unwrap().0,
        key![1]
    );
    assert_eq!(v4.count("color", &key!["green"]).unwrap(), 1);
    assert!(v4.verify().unwrap().is_clean());
    // On a handle that declares it, drop_index rebuilds: building until backfill.
    assert_eq!(v4.drop_index("color").unwrap(), 2);
    assert!(matches!(
        v4.count("color", &key!["red"]),
        Err(Error::IndexNotReady { .. })
    ));
    assert_eq!(v4.backfill(2, |_| {}).unwrap().completed, ["color"]);
    assert_eq!(v4.count("color", &key!["red"]).unwrap(), 1);
    assert!(v4.verify().unwrap().is_clean());
}

fn c_insert_three(c: &Collection<User, Database>) {
    for (id, email, color) in [(1, "a@x", "green"), (2, "b@x", "blue"), (3, "c@x", "green")] {
        c.insert(&user(id, email, color)).unwrap();
    }
}

#[test]
fn an_unchanged_unique_entry_is_checked_not_rewritten() {
    let db = Database::in_memory();
    let c = users(db.clone());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let email = key!["users", "u", "email", "ada@x"];
    let stamp = |k: &tuplekv_engine::Key| db.get(k).unwrap().map(|e| e.versionstamp);
    let before = stamp(&email);
    assert!(before.is_some());
    c.update(&key![1], |mut u| {
        u.color = "red".into();
        u
    })
    .unwrap();
    assert_eq!(stamp(&email), before);
    // A changed value moves the entry.
    c.update(&key![1], |mut u| {
        u.email = "ada@new".into();
        u
    })
    .unwrap();
    assert_eq!(stamp(&email), None);
    assert!(stamp(&key!["users", "u", "email", "ada@new"]).is_some());
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn an_insert_in_the_way_of_a_record_or_a_unique_value_fails_as_before() {
    let c = users(Database::in_memory());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let before = c.verify().unwrap();
    assert!(matches!(
        c.insert(&user(1, "other@x", "blue")),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        c.insert(&user(2, "ada@x", "blue")),
        Err(Error::UniqueViolation { existing_primary_key, .. }) if existing_primary_key == key![1]
    ));
    assert_eq!(c.verify().unwrap(), before);
    assert_eq!(c.count("color", &key!["blue"]).unwrap(), 0);
}

/// A handle that saw the unique email index built, and another that dropped and rebuilt it
/// meanwhile: record 1 (not backfilled yet, so without an entry) has `a@x`, and record 2 took
/// `a@x` through the rebuilding handle. Returns both handles and the value of record 2's entry.
fn stale_handle_and_a_taken_address(
    db: &Database,
) -> (
    Collection<User, Database>,
    Collection<User, Database>,
    tuplekv_engine::Value,
) {
    let stale = users(db.clone());
    stale.insert(&user(1, "a@x", "green")).unwrap();
    let fresh = users(db.clone());
    assert_eq!(fresh.drop_index("email").unwrap(), 1);
    fresh.insert(&user(2, "a@x", "blue")).unwrap();
    let holder = db.get(&taken_entry()).unwrap().unwrap().value;
    (stale, fresh, holder)
}

/// Record 2's entry for `a@x`.
fn taken_entry() -> tuplekv_engine::Key {
    key!["users", "u", "email", "a@x"]
}

/// After the rebuild finishes, the index is complete and `email` leads to record `id`.
fn assert_rebuilt(fresh: &Collection<User, Database>, email: &str, id: u64) {
    assert!(fresh.backfill(10, |_| {}).unwrap().duplicates.is_empty());
    assert_eq!(
        fresh.get_by("email", &key![email]).unwrap().unwrap().0,
        key![id]
    );
    assert!(fresh.verify().unwrap().is_clean());
}

/// A delete without a transaction removes a record's unique entries only after reading them:
/// the stale handle's delete of record 1 must leave record 2's entry alone.
#[test]
fn a_stale_handle_leaves_a_unique_entry_another_record_took_during_a_rebuild() {
    let db = Database::in_memory();
    let (stale, fresh, holder) = stale_handle_and_a_taken_address(&db);
    assert!(stale.delete(&key![1]).unwrap().is_some());
    assert_eq!(
        db.get(&taken_entry()).unwrap().map(|e| e.value),
        Some(holder)
    );
    assert_rebuilt(&fresh, "a@x", 2);
}

/// The same for an update that gives the value up.
#[test]
fn a_stale_handle_updating_away_from_a_value_leaves_the_new_holders_entry() {
    let db = Database::in_memory();
    let (stale, fresh, holder) = stale_handle_and_a_taken_address(&db);
    stale
        .update(&key![1], |mut u| {
            u.email = "b@x".into();
            u
        })
        .unwrap();
    assert_eq!(
        db.get(&taken_entry()).unwrap().map(|e| e.value),
        Some(holder)
    );
    assert_rebuilt(&fresh, "b@x", 1);
}

/// And for an update that keeps a value of a covering unique index: the entry's copy of the
/// record changes, and the stale handle must not overwrite another record's entry with it.
#[test]
fn a_stale_handle_keeping_a_covered_value_does_not_overwrite_the_new_holders_entry() {
    let db = Database::in_memory();
    let stale = users(db.clone());
    stale.insert(&user(2, "b@x", "blue")).unwrap();
    let fresh = users(db.clone());
    fresh.drop_index("nickname").unwrap();
    let mut taker = user(4, "d@x", "red");
    taker.nickname = Some("nick2".into());
    fresh.insert(&taker).unwrap();
    let entry = key!["users", "u", "nickname", "nick2"];
    let holder = db.get(&entry).unwrap().unwrap().value;
    let result = stale.update(&key![2], |mut u| {
        u.color = "green".into();
        u
    });
    assert!(
        matches!(&result, Err(Error::UniqueViolation { existing_primary_key, .. }) if *existing_primary_key == key![4]),
        "{result:?}"
    );
    assert_eq!(db.get(&entry).unwrap().map(|e| e.value), Some(holder));
}

mod first_attempt {
    //! The first attempt of an update or delete commits without a transaction; these check it
    //! writes what the transaction would, and that an update's closure runs once per version.
    use std::cell::Cell;

    use serde::{Deserialize, Serialize};
    use tuplekv_engine::{Database, key};
    use tuplekv_index::{Collection, Error};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Member {
        id: u64,
        email: String,
    }

    fn plain(db: &Database) -> Collection<Member, Database> {
        Collection::builder("m", |m: &Member| key![m.id])
            .open(db.clone())
            .unwrap()
    }

    fn by_email(db: &Database) -> Collection<Member, Database> {
        Collection::builder("m", |m: &Member| key![m.id])
            .unique("email", |m| Some(key![m.email.clone()]))
            .open(db.clone())
            .unwrap()
    }

    fn member(id: u64, email: &str) -> Member {
        Member {
            id,
            email: email.into(),
        }
    }

    #[test]
    fn an_update_changing_a_unique_value_of_a_building_index_runs_its_closure_once() {
        let db = Database::in_memory();
        plain(&db).insert(&member(1, "a")).unwrap();
        let building = by_email(&db);
        let calls = Cell::new(0);
        building
            .update(&key![1], |mut m| {
                calls.set(calls.get() + 1);
                m.email = "b".into();
                m
            })
            .unwrap();
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn an_update_refused_for_a_taken_unique_value_runs_its_closure_once() {
        let db = Database::in_memory();
        let c = by_email(&db);
        c.insert(&member(1, "a")).unwrap();
        c.insert(&member(2, "b")).unwrap();
        let calls = Cell::new(0);
        let result = c.update(&key![1], |mut m| {
            calls.set(calls.get() + 1);
            m.email = "b".into();
            m
        });
        assert!(
            matches!(&result, Err(Error::UniqueViolation { existing_primary_key, .. }) if *existing_primary_key == key![2]),
            "{result:?}"
        );
        assert_eq!(calls.get(), 1);
    }

    /// A handle that does not declare the index (an older version of the application) moves a
    /// record's value without maintaining the entry, so the record's old entry ends up held by
    /// another record. Updating the record away must leave that holder's entry alone.
    #[test]
    fn an_update_away_from_a_value_another_record_holds_leaves_its_entry() {
        let db = Database::in_memory();
        let current = by_email(&db);
        let old_version = plain(&db);
        current.insert(&member(1, "a")).unwrap();
        old_version
            .update(&key![1], |mut m| {
                m.email = "b".into();
                m
            })
            .unwrap();
        current.insert(&member(2, "b")).unwrap();
        current
            .update(&key![1], |mut m| {
                m.email = "c".into();
                m
            })
            .unwrap();
        let result = current.insert(&member(3, "b"));
        assert!(
            matches!(&result, Err(Error::UniqueViolation { existing_primary_key, .. }) if *existing_primary_key == key![2]),
            "{result:?}"
        );
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Doc {
        id: u64,
        tags: Vec<u32>,
    }

    /// Backfill resumes inside a record whose entries did not fit one transaction, trusting
    /// that a writer who changed the record wrote all its new entries. An update must then
    /// write every non-unique entry, unchanged ones included, as the transaction does.
    #[test]
    fn an_update_during_a_backfill_split_inside_its_record_leaves_the_index_complete() {
        let long = |t: u32| format!("{t:0>1500}");
        let db = Database::in_memory();
        Collection::builder("d", |d: &Doc| key![d.id])
            .open(db.clone())
            .unwrap()
            .insert(&Doc {
                id: 1,
                tags: (0..80).collect(),
            })
            .unwrap();
        let indexed = Collection::builder("d", |d: &Doc| key![d.id])
            .multi("tags", move |d| {
                d.tags.iter().map(|t| key![long(*t)]).collect()
            })
            .open(db.clone())
            .unwrap();
        let mut first = true;
        indexed
            .backfill(10, |progress| {
                if std::mem::take(&mut first) {
                    let written = u32::try_from(progress.entries).unwrap();
                    assert!(
                        written > 0 && written < 80,
                        "the record is split: {written}"
                    );
                    indexed
                        .update(&key![1], |mut d| {
                            d.tags.retain(|t| *t >= written);
                            d
                        })
                        .unwrap();
                }
            })
            .unwrap();
        let report = indexed.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
}

/// An update's first attempt declines past the engine's mutation limit, so the transaction
/// reports the limit with the count as before; exactly the limit commits.
#[test]
fn an_update_past_the_mutation_limit_writes_nothing_and_one_at_it_commits() {
    let c = users(Database::in_memory());
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let before = c.verify().unwrap();
    let max = tuplekv_engine::limits::MUTATIONS_MAX;
    // As in the upsert case: 2 tag deletes, color, city_age, n tags and the record.
    let retag = |n: usize| {
        c.update(&key![1], |mut u| {
            u.tags = (0..n).map(|i| format!("tag{i}")).collect();
            u
        })
    };
    assert_eq!(
        retag(max - 4).map(|_| ()),
        Err(Error::Store(tuplekv_engine::Error::TooManyMutations {
            count: max + 1
        }))
    );
    assert_eq!(c.get(&key![1]).unwrap().unwrap(), user(1, "ada@x", "green"));
    assert_eq!(c.verify().unwrap(), before);
    retag(max - 5).unwrap();
    assert_eq!(c.count("tags", &key!["tag994"]).unwrap(), 1);
    assert!(c.verify().unwrap().is_clean());
}

/// Entries written before integer primary keys were stored as a `U64` hold `0x00` + the encoded
/// key as bytes. A collection must read them, find nothing wrong with them, and replace or
/// remove them on write like entries in the new form.
#[test]
fn entries_in_the_earlier_bytes_form_still_read_verify_and_update() {
    use tuplekv_engine::{ByteRange, ReadView, Selector, Value, codec::encode_key};

    let db = Database::in_memory();
    let c = users(db.clone());
    for (id, email, color) in [(1, "a@x", "green"), (2, "b@x", "blue"), (3, "c@x", "green")] {
        c.insert(&user(id, email, color)).unwrap();
    }
    // Rewrite every integer pointer into the bytes form, as an earlier build stored it.
    let range: ByteRange = Selector::prefix(&key!["users"]).byte_range().unwrap();
    let mut rewritten = 0;
    for e in db.snapshot().scan(&range, false, usize::MAX).unwrap() {
        if let Value::U64(id) = e.value {
            let mut old = vec![0u8];
            old.extend(encode_key(&key![id]));
            db.set_raw(&e.key, old).unwrap();
            rewritten += 1;
        }
    }
    assert!(
        rewritten >= 9,
        "every record has pointer entries: {rewritten}"
    );

    assert!(
        c.verify().unwrap().findings.is_empty(),
        "the bytes form is not wrong"
    );
    assert_eq!(c.get_by("email", &key!["b@x"]).unwrap().unwrap().0, key![2]);
    assert_eq!(
        ids(&c
            .list_by("color", &key!["green"], ListOptions::default())
            .unwrap()),
        [1, 3]
    );
    assert_eq!(c.count("tags", &key!["all"]).unwrap(), 3);

    // An update that gives up and claims values, and a delete, over bytes-form entries.
    c.update(&key![1], |mut u| {
        u.email = "z@x".into();
        u.color = "blue".into();
        u
    })
    .unwrap();
    c.delete(&key![3]).unwrap();
    assert_eq!(c.get_by("email", &key!["a@x"]).unwrap(), None);
    assert_eq!(c.get_by("email", &key!["z@x"]).unwrap().unwrap().0, key![1]);
    assert_eq!(
        ids(&c
            .list_by("color", &key!["blue"], ListOptions::default())
            .unwrap()),
        [1, 2]
    );
    assert_eq!(c.count("color", &key!["green"]).unwrap(), 0);
    let report = c.verify().unwrap();
    assert!(report.findings.is_empty(), "{report:?}");
    assert!(
        c.insert(&user(4, "a@x", "green")).is_ok(),
        "the given-up email is free"
    );
}
