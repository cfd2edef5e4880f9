//! The main example, run by the README's first command.
//!
//! Part 1 tours the key space: the keys of a small users application, the store's byte order
//! (which is the tuple order, with Deno's own quirks), selectors, cursors and bad input.
//! Part 2 runs the users application of Deno's secondary-index guide on the embedded
//! in-memory store: a unique email index written in the user's own commit, a conflicting
//! insert rejected with the checks that failed, a non-unique favourite-colour index, a
//! snapshot, a transaction and a counter. Later issues grow it: typed indexes, concurrent code
//! generation, and a restart from disk.

use anyhow::{Context, Result};
use tuplekv::{
    CommitResult, Database, Key, KeyPart, ListOptions, ReadView, Selector, Value, decode_key,
    encode_key, key,
};

fn main() -> Result<()> {
    key_space_tour()?;
    users_application()
}

fn key_space_tour() -> Result<()> {
    println!("== 1. the key space\n");

    // Keys of a users application, as Deno's secondary-index guide lays them out.
    let mut keys: Vec<Key> = vec![
        key!["users", 2],
        key!["users", 1],
        key!["users_by_email", "ada@example.com"],
        key!["users_by_email", "grace@example.org"],
        key!["users_by_color", "green", 1],
        key!["users_by_color", "blue", 2],
        key!["users"],
    ];
    // Every type in one key space, to show the order between types.
    keys.extend([
        key![b"\x01"],
        key!["a"],
        key![1],
        key![1.0],
        key![-0.0],
        key![0.0],
        key![f64::NAN],
        key![false],
        key![true],
        key!["a\0"],
        key!["a", "z"],
    ]);

    // The store sorts encoded bytes; the tuple order must be the same.
    let mut by_bytes: Vec<(Vec<u8>, &Key)> = keys.iter().map(|k| (encode_key(k), k)).collect();
    by_bytes.sort();
    let mut by_tuple: Vec<&Key> = keys.iter().collect();
    by_tuple.sort();
    anyhow::ensure!(
        by_bytes
            .iter()
            .map(|(_, k)| *k)
            .eq(by_tuple.iter().copied()),
        "byte order and tuple order disagree"
    );

    println!(
        "{} keys in store order (byte order = tuple order):",
        keys.len()
    );
    for (bytes, k) in &by_bytes {
        println!("  {:<40} {}", k.to_string(), hex(bytes));
    }
    println!(
        "\nNote: bigint 1n sorts before number 1, -0 before 0, NaN after every number,\n\
         and [\"a\\0\"] after every [\"a\", ...] key, exactly as in real Deno.\n"
    );

    // A list selector is a byte range; a cursor resumes after a key.
    let users = Selector::prefix(&key!["users_by_color"]);
    let range = users.byte_range()?;
    let listed: Vec<&Key> = by_bytes
        .iter()
        .filter(|(b, _)| range.contains(b))
        .map(|(_, k)| *k)
        .collect();
    println!("list prefix [\"users_by_color\"] -> {listed:?}");
    let first = encode_key(listed.first().copied().unwrap_or(&Key::empty()));
    let cursor = users.cursor_for(&first)?;
    let rest = users.resume(&cursor, false)?;
    let after: Vec<&Key> = by_bytes
        .iter()
        .filter(|(b, _)| rest.contains(b))
        .map(|(_, k)| *k)
        .collect();
    println!("  cursor after the first entry: {cursor:?}; resuming lists {after:?}\n");

    // Bad input is an error that says where and why, never a panic.
    println!("bad input:");
    for bad in [&b"\x02abc"[..], b"\x03", b"\x02\xff\x00", b"\x15\x00"] {
        match decode_key(bad) {
            Ok(k) => println!("  {:<12} decoded to {k} (unexpected)", hex(bad)),
            Err(e) => println!("  {:<12} {e}", hex(bad)),
        }
    }
    let huge = KeyPart::BigInt(tuplekv::codec::BigInt::from(1u8) << 2048u32);
    match Key::new(vec![huge]) {
        Ok(_) => println!("  2^2048n accepted (unexpected)"),
        Err(e) => println!("  2^2048n      {e}"),
    }
    Ok(())
}

/// Inserts a user with its unique email index entry and its favourite-colour index entry in
/// one commit that first checks that neither the user nor the email exists.
fn insert_user(
    db: &Database,
    id: u64,
    name: &str,
    email: &str,
    color: &str,
) -> Result<CommitResult> {
    let user = key!["users", id];
    let by_email = key!["users_by_email", email];
    Ok(db
        .atomic()
        .check(&user, None)
        .check(&by_email, None)
        .set(&user, format!("{name} <{email}> likes {color}").as_str())
        .set(&by_email, id)
        .set(&key!["users_by_color", color, id], id)
        .commit()?)
}

fn users_application() -> Result<()> {
    println!("\n== 2. users with secondary indexes, on the embedded in-memory store\n");
    let db = Database::in_memory();
    let people = [
        (1, "Ada", "ada@example.com", "green"),
        (2, "Grace", "grace@example.org", "blue"),
        (3, "Linus", "linus@example.net", "green"),
    ];
    for (id, name, email, color) in people {
        let res = insert_user(&db, id, name, email, color)?;
        println!(
            "  insert user {id} ({email}): committed at {}",
            res.versionstamp().context("committed")?
        );
    }

    // Another user with Ada's email: the email check fails and nothing is written.
    match insert_user(&db, 4, "Imposter", "ada@example.com", "red")? {
        CommitResult::Committed { .. } => anyhow::bail!("a duplicate email was accepted"),
        CommitResult::Conflict(conflict) => {
            for failed in &conflict.failed_checks {
                let owner = db.get(&failed.key()?)?.and_then(|e| e.value.as_u64());
                println!(
                    "  insert user 4 (ada@example.com): rejected, check {} failed: {} already exists (user {})",
                    failed.index,
                    failed.key()?,
                    owner.map_or("?".into(), |o| o.to_string()),
                );
            }
        }
    }
    anyhow::ensure!(
        db.get(&key!["users", 4])?.is_none(),
        "rejected insert left a record"
    );

    // The non-unique index answers "who likes green?" with one prefix list.
    let green = Selector::prefix(&key!["users_by_color", "green"]);
    let ids: Vec<u64> = db
        .list(&green, ListOptions::default())?
        .map(|e| e.map(|e| e.value.as_u64().unwrap_or_default()))
        .collect::<Result<_, _>>()?;
    println!("  users who like green: {ids:?}");

    // A snapshot keeps reading the state it was taken at.
    let snapshot = db.snapshot();
    // The user and its index entries go in one commit, so the indexes never point at nothing.
    let _ = db
        .atomic()
        .delete(&key!["users", 3])
        .delete(&key!["users_by_email", "linus@example.net"])
        .delete(&key!["users_by_color", "green", 3])
        .commit()?;
    let then = snapshot.get(&key!["users", 3])?.is_some();
    let now = db.get(&key!["users", 3])?.is_some();
    println!(
        "  user 3 deleted with its index entries: present in the earlier snapshot: {then}, present now: {now}"
    );

    // A transaction moves points between users; reads are checked at commit, retries are automatic.
    db.set(&key!["points", 1], 10u64)?;
    db.transaction(|tx| {
        let from = tx
            .get(&key!["points", 1])?
            .and_then(|e| e.value.as_u64())
            .unwrap_or(0);
        tx.set(&key!["points", 1], from.saturating_sub(4));
        tx.sum(&key!["points", 2], 4);
        Ok::<_, tuplekv::Error>(())
    })?;
    let points: Vec<Option<Value>> = db
        .get_many(&[key!["points", 1], key!["points", 2]])?
        .into_iter()
        .map(|e| e.map(|e| e.value))
        .collect();
    println!("  points after a transfer of 4: {points:?}");
    println!("  last commit: {}", db.current_versionstamp());
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
