//! What the app-servers scenario (`crates/tuplekv/examples/app_servers`: `RemoteStore` against a
//! tuplekv server that is killed) and the etcd leader-failover test
//! (`crates/etcd/tests/failover.rs`: `EtcdStore` on a cluster whose leader is killed) share, so
//! both run the same checks: the user record and its collection, the keys an app writes beside
//! its codes, how a store error is told apart, the fault counters and report lines an app
//! writes, and the checks the parent runs on the store afterwards.
//!
//! Everything is generic over the [`Store`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{Entry, Key, ListIter, ListOptions, Selector, Store, Value, key};
use tuplekv_index::Collection;
use tuplekv_sequence::{self as sequence, FastSequence, GaplessSequence, Mode, Record};
use tuplekv_sequence::{SequenceOptions, Sequences};

/// An error of the shared code (each caller turns it into its own).
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The key root of a fast code's log: `[LOG_ROOT, code] = log_tag(app, code)`.
pub const LOG_ROOT: &str = "logs";
/// The key root of a gapless request's idempotency key: `[REQUEST_ROOT, app, thread, i]`
/// holds the number the request got.
pub const REQUEST_ROOT: &str = "inv_req";
/// The key root of the invoices: `[INVOICE_ROOT, code]`, one per gapless number.
pub const INVOICE_ROOT: &str = "invoices";
/// The pause before an app retries an operation that met a fault.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------------------------------
// The record, the collection and the store

/// A user of the unique-email collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// Unique per request, so a read by id says whether an insert landed.
    pub id: u64,
    /// Unique over the collection (its `email` index).
    pub email: String,
}

/// The collection, declared the same way by every process.
pub fn users<S: Store + Clone>(store: &S) -> Result<Collection<User, S>, tuplekv_index::Error> {
    Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(store.clone())
}

/// Creates the sequences and the collection once, before any app starts.
pub fn set_up<S: Store + Clone>(
    store: &S,
    fast: &[&str],
    gapless: &str,
    gapless_width: usize,
) -> Result<(), Error> {
    let seqs = Sequences::new(store.clone());
    for p in fast {
        seqs.create(p, SequenceOptions::default())?;
    }
    seqs.create(
        gapless,
        SequenceOptions {
            mode: Mode::Gapless,
            width: gapless_width,
            ..SequenceOptions::default()
        },
    )?;
    users(store)?;
    Ok(())
}

/// What a fast code's log key holds: the app that recorded it, and the code.
pub fn log_tag(app: u64, code: &str) -> String {
    format!("A{app}:{code}")
}

/// The latest value of `key`, read outside any snapshot.
pub fn read<S: Store>(store: &S, key: &Key) -> Result<Option<Value>, tuplekv_engine::Error> {
    Ok(store.get_latest_raw(&encode_key(key))?.map(|e| e.value))
}

/// Every entry under `prefix`, from one snapshot.
pub fn list<S: Store>(store: &S, prefix: &Key) -> Result<Vec<Entry>, tuplekv_engine::Error> {
    ListIter::new(
        store.snapshot(),
        Selector::prefix(prefix),
        ListOptions::default(),
    )?
    .read_all()
}

// ---------------------------------------------------------------------------------------
// Faults

/// Whether a store error says "nothing is known to have happened: look, then retry".
pub fn engine_maybe(e: &tuplekv_engine::Error) -> bool {
    e.is_transient()
        || matches!(
            e,
            tuplekv_engine::Error::OutcomeUnknown { .. }
                | tuplekv_engine::Error::TransactionConflict { .. }
        )
}

/// [`engine_maybe`] for a sequence error.
pub fn seq_maybe(e: &sequence::Error) -> bool {
    match e {
        sequence::Error::Store(e) => engine_maybe(e),
        sequence::Error::OutcomeUnknown { .. }
        | sequence::Error::Contention { .. }
        | sequence::Error::CommitPanicked { .. } => true,
        _ => false,
    }
}

/// Whether a sequence error says the write was sent and its outcome is unknown.
pub fn seq_unknown(e: &sequence::Error) -> bool {
    matches!(
        e,
        sequence::Error::Store(tuplekv_engine::Error::OutcomeUnknown { .. })
            | sequence::Error::OutcomeUnknown { .. }
            | sequence::Error::CommitPanicked { .. }
    )
}

/// What one app met: writes whose outcome was unknown, and how they turned out.
pub struct Faults {
    /// The app, for the messages.
    app: u64,
    /// Writes answered `OutcomeUnknown` (sent, then the connection or the member failed).
    unknown: AtomicU64,
    /// Other errors that say "try again" (unavailable, contention).
    transient: AtomicU64,
    /// Writes found committed by a re-read or by the resend's refusal (one lost answer can
    /// stand for several of them: a gapless batch, an index write retried inside the
    /// collection).
    landed: AtomicU64,
    /// The longest a thread waited for one round of acknowledged operations, in ms.
    stall_ms: AtomicU64,
}

impl Faults {
    /// No faults yet, for app `app`.
    pub fn new(app: u64) -> Faults {
        Faults {
            app,
            unknown: AtomicU64::new(0),
            transient: AtomicU64::new(0),
            landed: AtomicU64::new(0),
            stall_ms: AtomicU64::new(0),
        }
    }

    /// Counts a handled error (`unknown`: its outcome is unknown); prints the first two of
    /// each kind.
    pub fn note(&self, what: &str, e: &dyn std::fmt::Display, unknown: bool) {
        let counter = if unknown {
            &self.unknown
        } else {
            &self.transient
        };
        if counter.fetch_add(1, Ordering::Relaxed) < 2 {
            eprintln!("  app {}: {what}: {e} (handled)", self.app);
        }
    }

    /// Counts a write found committed after its answer was lost.
    pub fn landed(&self) {
        self.landed.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes how long one round took.
    pub fn waited(&self, round: Duration) {
        let ms = u64::try_from(round.as_millis()).unwrap_or(u64::MAX);
        self.stall_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The report line of the counts.
    pub fn line(&self) -> String {
        format!(
            "faults {} {} {} {}",
            self.unknown.load(Ordering::Relaxed),
            self.transient.load(Ordering::Relaxed),
            self.landed.load(Ordering::Relaxed),
            self.stall_ms.load(Ordering::Relaxed)
        )
    }
}

// ---------------------------------------------------------------------------------------
// An app's operations

/// What an app's threads share: the store, the sequences, the collection, the counts.
pub struct App<S: Store> {
    /// The app's number (1, 2, …), in its log tags and request keys.
    pub app: u64,
    store: S,
    /// The fast sequences, in the order the threads take turns with them.
    pub fast: Vec<FastSequence<S>>,
    /// The gapless sequence the invoices take their codes from.
    pub gapless: GaplessSequence<S>,
    users: Collection<User, S>,
    /// What the app met on the way: faults, retries, waits.
    pub faults: Faults,
    /// How long one operation may keep meeting faults before the app gives up.
    retry_for: Duration,
}

impl<S: Store + Clone + 'static> App<S> {
    /// App `app` on `store`, issuing from the fast sequences `fast` and the gapless one.
    pub fn open(
        store: S,
        app: u64,
        fast: &[&str],
        gapless: &str,
        retry_for: Duration,
    ) -> Result<App<S>, Error> {
        let seqs = Sequences::new(store.clone());
        let fast = fast
            .iter()
            .map(|p| seqs.fast(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(App {
            app,
            fast,
            gapless: seqs.gapless(gapless)?,
            users: users(&store)?,
            store,
            faults: Faults::new(app),
            retry_for,
        })
    }

    /// Fails an operation that kept meeting faults for too long; else pauses a moment.
    fn deadline(&self, started: Instant, what: &str) -> Result<(), Error> {
        if started.elapsed() >= self.retry_for {
            return Err(format!("{what}: still failing after {:?}", self.retry_for).into());
        }
        std::thread::sleep(RETRY_PAUSE);
        Ok(())
    }

    /// The value of `key`, re-read until the store answers.
    fn settle(&self, key: &Key, what: &str) -> Result<Option<Value>, Error> {
        let started = Instant::now();
        loop {
            match read(&self.store, key) {
                Ok(v) => return Ok(v),
                Err(e) => self.faults.note(what, &e, false),
            }
            self.deadline(started, what)?;
        }
    }

    /// The next code of `seq`, recorded with the sequence's uniqueness key and a log key
    /// `[LOG_ROOT, code] = log_tag(app, code)`.
    pub fn issue_fast(&self, seq: &FastSequence<S>) -> Result<u64, Error> {
        let started = Instant::now();
        let n = loop {
            match seq.next_number() {
                Ok(n) => break n,
                // A reservation that may have landed: the next call reserves a new block
                // above it, so no number is handed out twice.
                Err(e) if seq_maybe(&e) => {
                    self.faults.note("fast reservation", &e, seq_unknown(&e));
                }
                Err(e) => return Err(e.into()),
            }
            self.deadline(started, "reserving a block")?;
        };
        let code = seq.format().format(n);
        let log = key![LOG_ROOT, code.as_str()];
        let tag = log_tag(self.app, &code);
        let is_ours = || -> Result<bool, Error> {
            let v = self.settle(&log, "re-reading a log key")?;
            Ok(v.is_some_and(|v| v.as_bytes() == Some(tag.as_bytes())))
        };
        loop {
            let mut record = Record::new();
            record.set(&log, tag.as_bytes());
            let landed = match seq.record(n, record) {
                Ok(_) => return Ok(n),
                // Recorded already: by our own earlier attempt, or a real duplicate (the log
                // then names another app, and the run fails).
                Err(e @ sequence::Error::Duplicate { .. }) => {
                    if is_ours()? {
                        true
                    } else {
                        return Err(e.into());
                    }
                }
                Err(e) if seq_maybe(&e) => {
                    self.faults.note("fast record", &e, seq_unknown(&e));
                    is_ours()?
                }
                Err(e) => return Err(e.into()),
            };
            if landed {
                self.faults.landed();
                return Ok(n);
            }
            self.deadline(started, "recording a code")?;
        }
    }

    /// The next gapless number for request `i` of `thread`, committed with the request's
    /// idempotency key (checked absent in the same commit, so a resend of a commit that
    /// landed is refused, and the key says which number the request got) and an invoice.
    pub fn issue_gapless(&self, thread: u64, i: u64) -> Result<u64, Error> {
        let started = Instant::now();
        let request = key![REQUEST_ROOT, self.app, thread, i];
        let tag = format!("A{}:T{thread}:I{i}", self.app);
        loop {
            let (req, tag) = (request.clone(), tag.clone());
            // The store writes the number into the code in both keys and the request's
            // value, inside the commit: no app's commit waits on another's.
            let outcome = self.gapless.next_coded(move |code, record| {
                record
                    .check(&req, None)
                    .set(&req, code)
                    .set(&key![INVOICE_ROOT, code], tag.as_bytes());
            });
            let err = match outcome {
                Ok(issued) => return Ok(issued.number()),
                Err(e @ sequence::Error::Rejected(_)) => e,
                Err(e) if seq_maybe(&e) => {
                    self.faults.note("gapless", &e, seq_unknown(&e));
                    e
                }
                Err(e) => return Err(e.into()),
            };
            match self.settle(&request, "re-reading a request key")? {
                Some(v) => {
                    self.faults.landed();
                    return code_of(&v)
                        .and_then(|c| self.gapless.parse(c).ok())
                        .ok_or_else(|| "an idempotency key that is not a code".into());
                }
                None if matches!(err, sequence::Error::Rejected(_)) => {
                    return Err(
                        format!("gapless request refused, but its key is absent: {err}").into(),
                    );
                }
                None => self.deadline(started, "a gapless code")?,
            }
        }
    }

    /// Whether `user` is stored as is, re-read until the store answers.
    fn user_landed(&self, user: &User) -> Result<bool, Error> {
        let started = Instant::now();
        loop {
            match self.users.get(&key![user.id]) {
                Ok(found) => return Ok(found.as_ref() == Some(user)),
                Err(e) => self.faults.note("re-reading a user", &e, false),
            }
            self.deadline(started, "re-reading a user")?;
        }
    }

    /// Inserts `user`; `false` when another user holds its email.
    pub fn insert_user(&self, user: &User) -> Result<bool, Error> {
        let started = Instant::now();
        let pk = key![user.id];
        loop {
            let found = match self.users.insert(user) {
                Ok(()) => return Ok(true),
                Err(tuplekv_index::Error::UniqueViolation {
                    existing_primary_key,
                    ..
                }) => {
                    if existing_primary_key != pk {
                        return Ok(false);
                    }
                    // Our own earlier attempt, whose answer was lost, holds it.
                    true
                }
                Err(tuplekv_index::Error::AlreadyExists { .. }) => {
                    if !self.user_landed(user)? {
                        return Err(format!("user {} exists with other data", user.id).into());
                    }
                    true
                }
                // The collection re-read the record and did not find what it wrote (or could
                // not read): look; a resend of a write that did land meets our own record.
                Err(e @ tuplekv_index::Error::OutcomeUnknown { .. }) => {
                    self.faults.note("user insert", &e, true);
                    self.user_landed(user)?
                }
                Err(tuplekv_index::Error::Store(e)) if engine_maybe(&e) => {
                    let unknown = matches!(e, tuplekv_engine::Error::OutcomeUnknown { .. });
                    self.faults.note("user insert", &e, unknown);
                    self.user_landed(user)?
                }
                Err(e) => return Err(e.into()),
            };
            if found {
                self.faults.landed();
                return Ok(true);
            }
            self.deadline(started, "inserting a user")?;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The report lines

/// The report line of a fast code.
pub fn fast_line(prefix: &str, n: u64) -> String {
    format!("fast {prefix} {n}")
}

/// The report line of a gapless number.
pub fn gapless_line(prefix: &str, n: u64) -> String {
    format!("gapless {prefix} {n}")
}

/// The report line of a gapless handle's counts: commits refused because the counter moved,
/// and commits the store numbered.
pub fn gapless_stats_line(stats: &sequence::GaplessStats) -> String {
    format!(
        "gapless_stats {} {}",
        stats.counter_conflicts, stats.store_numbered
    )
}

/// The code a request key holds.
fn code_of(value: &Value) -> Option<&str> {
    std::str::from_utf8(value.as_bytes()?).ok()
}

/// The report line of a user insert (`false`: refused, another user holds the email).
pub fn user_line(user: &User, inserted: bool) -> String {
    let verdict = if inserted { "inserted" } else { "refused" };
    format!("user {} {verdict} {}", user.id, user.email)
}

/// What the apps said they got.
#[derive(Default)]
pub struct Reported {
    /// Per prefix, every number handed out, with the app that got it.
    codes: BTreeMap<String, Vec<(u64, usize)>>,
    /// User id → (email, inserted).
    users: BTreeMap<u64, (String, bool)>,
    unknown: u64,
    transient: u64,
    landed: u64,
    stall_ms: u64,
    /// Gapless commits refused because the counter moved, and commits the store numbered,
    /// over every app.
    pub counter_conflicts: u64,
    /// Gapless commits the store numbered itself, over every app.
    pub store_numbered: u64,
    /// Every acknowledgement time of every app (Unix ms), sorted; from `acks` lines, which
    /// only the failover test's apps write.
    pub acks: Vec<u64>,
}

impl Reported {
    /// The apps' fault counts, as a line to print.
    pub fn summary(&self) -> String {
        format!(
            "apps: {} writes with an unknown outcome, {} other retried errors; {} writes found \
             committed after their answer was lost; longest wait for one round: {} ms; gapless \
             commits refused by the counter: {}",
            self.unknown, self.transient, self.landed, self.stall_ms, self.counter_conflicts
        )
    }
}

/// Reads the apps' reports, app `i + 1`'s at `reports[i]`.
pub fn parse_reports(reports: &[String]) -> Result<Reported, Error> {
    let mut r = Reported::default();
    for (i, text) in reports.iter().enumerate() {
        let app = i + 1;
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["fast" | "gapless", prefix, n] => r
                    .codes
                    .entry((*prefix).to_owned())
                    .or_default()
                    .push((n.parse()?, app)),
                ["gapless_stats", conflicts, numbered] => {
                    r.counter_conflicts += conflicts.parse::<u64>()?;
                    r.store_numbered += numbered.parse::<u64>()?;
                }
                ["user", id, verdict, email] => {
                    let inserted = *verdict == "inserted";
                    if r.users
                        .insert(id.parse()?, ((*email).to_owned(), inserted))
                        .is_some()
                    {
                        return Err(format!("user {id} reported twice").into());
                    }
                }
                ["faults", unknown, transient, landed, stall] => {
                    r.unknown += unknown.parse::<u64>()?;
                    r.transient += transient.parse::<u64>()?;
                    r.landed += landed.parse::<u64>()?;
                    r.stall_ms = r.stall_ms.max(stall.parse()?);
                }
                ["acks", times @ ..] => {
                    for t in times.iter().filter(|t| !t.is_empty()) {
                        r.acks.push(t.parse()?);
                    }
                }
                _ => return Err(format!("app {app} wrote {line:?}").into()),
            }
        }
    }
    r.acks.sort_unstable();
    Ok(r)
}

// ---------------------------------------------------------------------------------------
// The checks, against the store itself

/// Every check of the store against the reports, for the fast sequences `fast` and the
/// gapless one; prints the figures, returns what failed.
pub fn check<S: Store + Clone>(
    store: &S,
    reported: &Reported,
    fast: &[&str],
    gapless: &str,
) -> Result<Vec<String>, Error> {
    let mut failures = Vec::new();
    let seqs = Sequences::new(store.clone());
    for prefix in fast {
        check_fast(store, &seqs, prefix, reported, &mut failures)?;
    }
    check_gapless(store, &seqs, gapless, reported, &mut failures)?;
    check_users(store, reported, &mut failures)?;
    Ok(failures)
}

/// Numbers reported more than once.
fn duplicates(numbers: &[(u64, usize)]) -> usize {
    numbers.len()
        - numbers
            .iter()
            .map(|(n, _)| n)
            .collect::<BTreeSet<_>>()
            .len()
}

/// The numbers a sequence's uniqueness keys hold (their values are the codes).
fn recorded<S: Store>(
    store: &S,
    prefix: &str,
    parse: impl Fn(&str) -> Result<u64, sequence::Error>,
) -> Result<Vec<u64>, Error> {
    list(store, &key![sequence::DEFAULT_ROOT, "used", prefix])?
        .iter()
        .map(|e| {
            let code = e
                .value
                .as_bytes()
                .ok_or("a uniqueness key without a code")?;
            Ok(parse(std::str::from_utf8(code)?)?)
        })
        .collect()
}

/// No fast code twice, every acknowledged code stored and every stored one acknowledged,
/// each logged for the app that reported it.
fn check_fast<S: Store + Clone>(
    store: &S,
    seqs: &Sequences<S>,
    prefix: &str,
    reported: &Reported,
    failures: &mut Vec<String>,
) -> Result<(), Error> {
    let seq = seqs.fast(prefix)?;
    let got = reported.codes.get(prefix).cloned().unwrap_or_default();
    let dups = duplicates(&got);
    let stored: BTreeSet<u64> = recorded(store, prefix, |c| seq.parse(c))?
        .into_iter()
        .collect();
    let handed: BTreeSet<u64> = got.iter().map(|(n, _)| *n).collect();
    let missing = handed.difference(&stored).count();
    let unreported = stored.difference(&handed).count();
    let first = handed.first().map(|n| seq.format().format(*n));
    let last = handed.last().map(|n| seq.format().format(*n));
    // Each code's log names the app that reported it.
    let logs: BTreeMap<String, String> = list(store, &key![LOG_ROOT])?
        .iter()
        .filter_map(|e| {
            let text = std::str::from_utf8(e.value.as_bytes()?).ok()?;
            let (_, code) = text.split_once(':')?;
            Some((code.to_owned(), text.to_owned()))
        })
        .collect();
    let wrong = got
        .iter()
        .filter(|(n, app)| {
            let code = seq.format().format(*n);
            logs.get(&code) != Some(&log_tag(*app as u64, &code))
        })
        .count();
    println!(
        "{prefix}: {} codes, first {}, last {}, duplicates: {dups}, recorded in the store: {}, \
         acknowledged but missing: {missing}, stored but not acknowledged: {unreported}, \
         logged for another app: {wrong}",
        got.len(),
        first.as_deref().unwrap_or("-"),
        last.as_deref().unwrap_or("-"),
        stored.len()
    );
    if dups > 0 {
        failures.push(format!("{prefix}: {dups} duplicate codes"));
    }
    if missing > 0 {
        failures.push(format!(
            "{prefix}: {missing} acknowledged codes not in the store"
        ));
    }
    if unreported > 0 {
        failures.push(format!(
            "{prefix}: {unreported} stored codes no app reported"
        ));
    }
    if wrong > 0 {
        failures.push(format!("{prefix}: {wrong} codes logged for another app"));
    }
    Ok(())
}

/// The gapless numbers: exactly `1..=n` in the store, the counter at `n + 1`, one request key
/// and one invoice per number, and every number acknowledged to an app (an app gives up on
/// no request, so every number issued was acknowledged to one).
fn check_gapless<S: Store + Clone>(
    store: &S,
    seqs: &Sequences<S>,
    prefix: &str,
    reported: &Reported,
    failures: &mut Vec<String>,
) -> Result<(), Error> {
    let seq = seqs.gapless(prefix)?;
    let got = reported.codes.get(prefix).cloned().unwrap_or_default();
    let dups = duplicates(&got);
    let mut stored = recorded(store, prefix, |c| seq.parse(c))?;
    stored.sort_unstable();
    let n = stored.len() as u64;
    let expected: Vec<u64> = (1..=n).collect();
    let gaps = expected.len() - stored.iter().filter(|k| (1..=n).contains(*k)).count();
    let counter = store
        .get_latest_raw(&seqs.counter_key(prefix)?)?
        .and_then(|e| e.value.as_u64());
    let mut by_request: Vec<u64> = list(store, &key![REQUEST_ROOT])?
        .iter()
        .filter_map(|e| code_of(&e.value).and_then(|c| seq.parse(c).ok()))
        .collect();
    by_request.sort_unstable();
    let invoices = list(store, &key![INVOICE_ROOT])?.len();
    let handed: Vec<u64> = got
        .iter()
        .map(|(n, _)| *n)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    println!(
        "{prefix}: {} codes, first {}, last {}, duplicates: {dups}, gaps: {gaps} (the store \
         holds exactly 1..={n}: {}), counter {counter:?}, invoices {invoices}, acknowledged \
         == stored: {}",
        got.len(),
        seq.format().format(1),
        seq.format().format(n),
        stored == expected,
        handed == expected
    );
    if dups > 0 {
        failures.push(format!("{prefix}: {dups} duplicate numbers"));
    }
    if stored != expected {
        failures.push(format!(
            "{prefix}: the store's numbers are not 1..={n} ({gaps} gaps)"
        ));
    }
    if counter != Some(n + 1) {
        failures.push(format!(
            "{prefix}: the counter is {counter:?}, expected {}",
            n + 1
        ));
    }
    if by_request != expected || invoices as u64 != n {
        failures.push(format!(
            "{prefix}: {} requests and {invoices} invoices, expected one per number 1..={n}",
            by_request.len()
        ));
    }
    if handed != expected {
        failures.push(format!(
            "{prefix}: the apps got {} distinct numbers, the store has 1..={n}",
            handed.len()
        ));
    }
    Ok(())
}

/// No email held twice, every inserted user stored and every stored one reported inserted,
/// every refusal explained by another holder, at least one refusal, the index clean.
fn check_users<S: Store + Clone>(
    store: &S,
    reported: &Reported,
    failures: &mut Vec<String>,
) -> Result<(), Error> {
    let users = users(store)?;
    let page = users.list(ListOptions::default())?;
    let mut holders: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, u) in &page.items {
        holders.entry(u.email.as_str()).or_default().push(u.id);
    }
    let dup_emails = holders.values().filter(|ids| ids.len() > 1).count();
    let stored: BTreeSet<u64> = page.items.iter().map(|(_, u)| u.id).collect();
    let inserted: BTreeSet<u64> = reported
        .users
        .iter()
        .filter(|(_, (_, ok))| *ok)
        .map(|(id, _)| *id)
        .collect();
    let refused = reported.users.len() - inserted.len();
    let missing = inserted.difference(&stored).count();
    let unreported = stored.difference(&inserted).count();
    // A refused user's email is held by another user.
    let unexplained = reported
        .users
        .iter()
        .filter(|(id, (email, ok))| {
            !*ok && holders
                .get(email.as_str())
                .is_none_or(|ids| ids.contains(id))
        })
        .count();
    let report = users.verify()?;
    println!(
        "users: {} inserted, {refused} refused (email taken, across processes), duplicate \
         emails: {dup_emails}, acknowledged but missing: {missing}, stored but not \
         acknowledged: {unreported}, verify clean: {}",
        stored.len(),
        report.is_clean()
    );
    if dup_emails > 0 {
        failures.push(format!("users: {dup_emails} emails held by several users"));
    }
    if missing > 0 || unreported > 0 {
        failures.push(format!(
            "users: {missing} acknowledged users missing, {unreported} stored unreported"
        ));
    }
    if unexplained > 0 {
        failures.push(format!(
            "users: {unexplained} refused without another holder"
        ));
    }
    if refused == 0 {
        failures.push("users: no shared email was refused: the run proves nothing".into());
    }
    if !report.is_clean() {
        failures.push(format!("users: verify found {report:?}"));
    }
    Ok(())
}
