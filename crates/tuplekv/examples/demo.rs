//! The main example, run by the README's first command: a tour of tuplekv's key space.
//!
//! It builds the keys of a small users application, shows that the store's plain byte order
//! is the tuple order (with Deno's own quirks), turns a list selector into a byte range and a
//! cursor, and shows what happens to bad input. Later issues grow it into the full story:
//! users with secondary indexes, concurrent code generation, and a restart from disk.

use anyhow::Result;
use tuplekv::{Key, KeyPart, Selector, decode_key, encode_key, key};

fn main() -> Result<()> {
    println!("tuplekv key space tour\n");

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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
