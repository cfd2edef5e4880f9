//! The main example, run by the README's first command.
//!
//! It opens with what an application comes for, on a durable store in a temporary directory:
//! 1. users in a typed collection (`tuplekv::index`) with a unique email and a colour index,
//!    written with their index entries in one commit: a second account with the same email
//!    is refused, naming who has it;
//! 2. codes from sequences: four threads, each with its own handles (as four app servers
//!    would have), issue `INFO`/`WARN` codes (fast mode) and `ERR` codes (gapless mode, each
//!    committed with the record that uses it) at once, and not one code repeats;
//! 3. a restart: the store is closed and opened again from its directory; the users are
//!    there, the indexes verify clean, and the codes continue above every one handed out.
//!
//! Then what is underneath:
//! 4. the same users application written by hand on the raw store, as Deno's secondary-index
//!    guide does: atomic commits with checks, the failed checks of a conflicting insert, a
//!    snapshot, a transaction and a counter;
//! 5. a tour of the key space: the store's byte order (the tuple order, with Deno's own
//!    quirks, as a hex dump), selectors, cursors and bad input.
//!
//! `cargo run -p tuplekv --example demo -- 50000` issues 50000 codes per thread in part 2
//! instead of 2000 (a long run prints its progress every second).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tuplekv::index::{Collection, Error as IndexError};
use tuplekv::sequence::{Mode, Record, SequenceOptions, Sequences};
use tuplekv::{
    CommitResult, Database, Key, KeyPart, ListOptions, Options, ReadView, Selector, Value,
    decode_key, encode_key, key,
};

/// Codes each thread issues in part 2 unless the command line says otherwise.
const CODES_PER_THREAD_DEFAULT: u64 = 2_000;

fn main() -> Result<()> {
    let per_thread = match std::env::args().nth(1) {
        None => CODES_PER_THREAD_DEFAULT,
        Some(arg) => arg
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("usage: demo [CODES_PER_THREAD > 0], not `{arg}`"))?,
    };
    let dir = std::env::temp_dir().join(format!("tuplekv-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    println!("data directory: {}", dir.display());
    let db = Database::open(&dir, Options::default())?;
    users_collection(&db)?;
    let codes = concurrent_codes(&db, 4, per_thread)?;
    restart(&dir, db, &codes)?;
    std::fs::remove_dir_all(&dir)?;
    users_application()?;
    key_space_tour()
}

fn key_space_tour() -> Result<()> {
    println!("\n== 5. under the hood: the key space\n");

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
    println!("\n== 4. under the hood: the same users by hand, on the raw store\n");
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

/// A user of the typed collection in part 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct User {
    id: u64,
    name: String,
    email: String,
    color: String,
}

/// The users collection: a unique email and a non-unique colour index.
/// Audits the users' indexes, prints the report, and fails with `drifted` unless it is clean.
fn verify(users: &Collection<User, Database>, drifted: &'static str) -> Result<()> {
    let report = users.verify()?;
    println!(
        "  verify: {} records, {} index entries, clean: {}",
        report.records,
        report.entries,
        report.is_clean()
    );
    anyhow::ensure!(report.is_clean(), drifted);
    Ok(())
}

fn users(db: &Database) -> Result<Collection<User, Database>> {
    Ok(Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color.clone()]))
        .open(db.clone())?)
}

/// Part 1: users in a typed collection (`tuplekv::index`), which writes the index entries in
/// the record's own commit by construction.
fn users_collection(db: &Database) -> Result<()> {
    println!("\n== 1. users with a unique email (tuplekv::index)\n");
    let users = users(db)?;
    let user = |id, name: &str, email: &str, color: &str| User {
        id,
        name: name.into(),
        email: email.into(),
        color: color.into(),
    };
    users.insert(&user(1, "Ada", "ada@example.com", "green"))?;
    users.insert(&user(2, "Grace", "grace@example.org", "blue"))?;
    users.insert(&user(3, "Linus", "linus@example.net", "green"))?;
    match users.insert(&user(4, "Imposter", "ada@example.com", "red")) {
        Err(e @ IndexError::UniqueViolation { .. }) => println!("  insert user 4: rejected: {e}"),
        other => anyhow::bail!("a duplicate email was accepted: {other:?}"),
    }
    let green: Vec<String> = users
        .list_by("color", &key!["green"], ListOptions::default())?
        .items
        .into_iter()
        .map(|(_, u)| u.name)
        .collect();
    println!("  users who like green: {green:?}");
    verify(&users, "an index drifted")?;
    Ok(())
}

/// Defines the three sequences of the story (idempotent: every server may do it at start-up).
fn define_sequences(seqs: &Sequences<Database>) -> Result<()> {
    seqs.create("INFO", SequenceOptions::default())?;
    seqs.create("WARN", SequenceOptions::default())?;
    seqs.create(
        "ERR",
        SequenceOptions {
            mode: Mode::Gapless,
            ..SequenceOptions::default()
        },
    )?;
    Ok(())
}

/// Runs `threads` threads, each with its own `Sequences` handles (as separate app servers
/// would have), issuing `per_thread` codes spread over INFO, WARN and ERR. Returns every code.
fn issue_codes(db: &Database, threads: u64, per_thread: u64) -> Result<Vec<String>> {
    define_sequences(&Sequences::new(db.clone()))?;
    let issued = AtomicU64::new(0);
    let (done, finished) = mpsc::channel::<()>();
    let results: Vec<Result<Vec<String>>> = std::thread::scope(|s| {
        // Progress once a second for long runs; a short run ends before the first line.
        let issued = &issued;
        s.spawn(move || {
            let total = threads * per_thread;
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                finished.recv_timeout(Duration::from_secs(1))
            {
                let n = issued.load(Ordering::Relaxed);
                println!("  ... {n} of {total} codes issued");
            }
        });
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let db = db.clone();
                s.spawn(move || -> Result<Vec<String>> {
                    let seqs = Sequences::new(db);
                    let (info, warn) = (seqs.fast("INFO")?, seqs.fast("WARN")?);
                    let err = seqs.gapless("ERR")?;
                    let mut codes = Vec::with_capacity(per_thread as usize);
                    for i in 0..per_thread {
                        let code = match i % 10 {
                            0..=5 => info.next()?.code(),
                            6..=8 => warn.next()?.code(),
                            // An error code exists only if its log record commits with it.
                            _ => err
                                .next_with(move |issued, record: &mut Record| {
                                    let entry = key!["errors", issued.code()];
                                    record.check(&entry, None).set(
                                        &entry,
                                        format!("thread {thread}: request {i} failed").as_str(),
                                    );
                                })?
                                .code(),
                        };
                        codes.push(code);
                        issued.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(codes)
                })
            })
            .collect();
        let results = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a thread panicked")))
            })
            .collect();
        drop(done);
        results
    });
    let mut all = Vec::new();
    for codes in results {
        all.extend(codes?);
    }
    Ok(all)
}

/// Prints the counts, first and last code of each prefix, and the number of duplicates.
fn summarise(codes: &[String]) -> Result<()> {
    let distinct: HashSet<&String> = codes.iter().collect();
    for prefix in ["INFO", "WARN", "ERR"] {
        let mut numbers: Vec<(u64, &String)> = codes
            .iter()
            .filter_map(|c| {
                let digits = c.strip_prefix(prefix)?;
                digits.parse().ok().map(|n| (n, c))
            })
            .collect();
        numbers.sort();
        let (Some(first), Some(last)) = (numbers.first(), numbers.last()) else {
            continue;
        };
        println!(
            "  {prefix:<4}: {:>5} codes, first {}, last {}",
            numbers.len(),
            first.1,
            last.1
        );
    }
    let duplicates = codes.len() - distinct.len();
    println!("  duplicates: {duplicates}");
    anyhow::ensure!(duplicates == 0, "a code was handed out twice");
    Ok(())
}

/// Part 2: codes from `threads` threads at once. Returns every code issued.
fn concurrent_codes(db: &Database, threads: u64, per_thread: u64) -> Result<Vec<String>> {
    println!("\n== 2. unique codes from {threads} threads at once\n");
    let started = Instant::now();
    let codes = issue_codes(db, threads, per_thread)?;
    println!(
        "  {} codes in {:.0} ms",
        codes.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    summarise(&codes)?;
    // Gapless: the ERR numbers are exactly 1..=n, each with its committed log record.
    let errs = db
        .list(&Selector::prefix(&key!["errors"]), ListOptions::default())?
        .count();
    let issued = codes.iter().filter(|c| c.starts_with("ERR")).count();
    println!(
        "  ERR records committed: {errs} for {issued} ERR codes (gapless: no number without its record)"
    );
    anyhow::ensure!(errs == issued, "an ERR code without its record");
    Ok(codes)
}

/// The highest number of `prefix` among `codes`.
fn highest(codes: &[String], prefix: &str) -> u64 {
    codes
        .iter()
        .filter_map(|c| c.strip_prefix(prefix)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// Part 3: closes the store, opens it again from `dir`, and checks that the users and their
/// indexes are there and that the codes continue above every one in `before`.
fn restart(dir: &std::path::Path, db: Database, before: &[String]) -> Result<()> {
    println!("\n== 3. a restart from disk\n");
    println!(
        "  before: highest INFO{:03} WARN{:03} ERR{:03}; closing the database",
        highest(before, "INFO"),
        highest(before, "WARN"),
        highest(before, "ERR")
    );
    db.close()?;

    let db = Database::open(dir, Options::default())?;
    let report = db
        .recovery_report()
        .context("a durable database has a recovery report")?;
    println!(
        "  reopened: {} commits replayed from the log in {:.1} ms",
        report.records_replayed,
        report.elapsed.as_secs_f64() * 1e3
    );
    let users = users(&db)?;
    let (_, ada) = users
        .get_by("email", &key!["ada@example.com"])?
        .context("Ada survived the restart")?;
    println!("  ada@example.com is still user {}: {}", ada.id, ada.name);
    verify(&users, "an index drifted across the restart")?;
    let after = issue_codes(&db, 2, 300)?;
    for prefix in ["INFO", "WARN", "ERR"] {
        let (old, new) = (
            highest(before, prefix),
            after
                .iter()
                .filter_map(|c| c.strip_prefix(prefix)?.parse::<u64>().ok())
                .min()
                .unwrap_or(u64::MAX),
        );
        println!("  {prefix:<4}: first number after the restart {new} > highest before {old}");
        anyhow::ensure!(new > old, "{prefix} reused a number after the restart");
    }
    let all: Vec<String> = before.iter().cloned().chain(after).collect();
    summarise(&all)?;
    drop(users);
    db.close()?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
