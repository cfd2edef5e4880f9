//! A tuplekv commit as one etcd transaction: checks and range checks become comparisons,
//! mutations become puts (folded per key), and the `else` branch reads what a failed
//! comparison needs to say which check failed.
//!
//! Mutations that read the current value (sum/min/max) are computed here from the last value
//! seen of their key (none at first) and guarded by a `mod_revision` comparison; when the
//! guess was wrong, the `else` branch's reads give the value and the commit is tried again,
//! at most [`COMMIT_ATTEMPTS_MAX`] times. A key check `None` ("absent") compares
//! `mod_revision` with 0, or with the revision of the tombstone or expired value seen there.
//! A check of a versionstamp also compares the value's deadline (see `envelope`), so a value
//! that expired is not taken for the one checked.
//!
//! Every commit also writes the store's marker key, so the marker's `mod_revision` is the
//! revision of the store's last commit. A commit with versionstamped keys cannot know its
//! revision before etcd assigns it, so it does not use it: it reads the current revision `G`
//! and the marker, claims the versionstamp `G` followed by two bytes (`00 01`, or one above
//! the highest suffix the marker names after combined numbered commits, see below: between
//! the stamps of every commit at revision `G` and that of `G + 1`), writes it into its keys
//! and into its values' envelopes, and compares the marker with what it read. The
//! comparison holds only if no commit of the store landed since the read, so every earlier
//! commit has a smaller stamp (a revision of at most `G`), every later one a larger (a
//! revision above `G`), and no two commits claim one stamp. Such a commit conflicts with
//! every commit of the store made meanwhile and is tried again, at most
//! [`STAMPED_COMMIT_ATTEMPTS_MAX`] times. A check of a stamp that is not a revision compares
//! the `mod_revision` read of a value carrying that stamp.
//!
//! A commit with range checks also compares the `mod_revision` of the collection fence
//! (module `collect`) with the state it last saw, and conflicts when the fence's bound is
//! above a range check's snapshot: the collector may have removed a tombstone written after
//! that snapshot, which the range comparison can no longer see.
//!
//! # Numbered commits
//! A commit that takes numbers from counters ([`tuplekv_engine::numbering`]) is resolved
//! here, in the transaction that commits it: the numbers come from the counter's last state
//! seen (the store remembers its counters, at most [`COUNTERS_REMEMBERED_MAX`]),
//! `numbering::resolve` fills the placeholders and appends the counter's new value, and a
//! guard on the counter makes the transaction hold only while the counter holds what was
//! assumed: a counter a numbered commit wrote (a `U64` without deadline, its envelope in the
//! relative form) is compared by value, between `envelope::number_floor` and
//! `number_ceiling`, whatever commit wrote it; an absent one by `mod_revision` (0, or the
//! tombstone's); any other by `mod_revision` and deadline. When the guard fails the `else`
//! branch's reads give the counter, and the commit is resolved again and resent without a
//! conflict reaching the caller, at most [`NUMBERED_COMMIT_ATTEMPTS_MAX`] transactions; then
//! [`Error::TransactionConflict`]. A failure of the caller's own checks at the counter's
//! current value is a [`CommitResult::Conflict`] with the caller's check indexes. A
//! refusal of the numbering itself (`CounterNotU64`, `CounterExhausted`, `NumberTooWide`) is
//! given only from a counter read during the commit, never from a remembered one. Numbers
//! exist exactly when their commit committed: a transaction that may have committed is
//! [`Error::OutcomeUnknown`] and is never resent, and the store then forgets the counter.
//!
//! While other writers move the counter (other processes), one transaction carries several
//! guesses, as nested transactions: the first branch assumes the counter at the last value
//! seen, each other one that value plus a move `m` the store saw the counter make, and each
//! holds its own resolution of the commit; etcd applies the first branch whose comparisons
//! hold (each branch compares the counter first, so a wrong guess costs etcd one or two
//! comparisons). Only the last branch's `else` reads, what every branch needs: a transaction
//! that commits reads nothing. The store keeps the last [`MOVES_KEPT`] moves of each counter
//! between its looks (a landed branch's `m`, or what a refused transaction read) and guesses
//! the moves seen at least twice among them, or once among the last [`MOVES_FRESH`], the most
//! frequent first, at most [`COUNTER_GUESSES_MAX`] branches in all (and [`GUESSES_BYTES_MAX`]
//! bytes of branches, and [`crate::TXN_OPS_MAX`] operations along the nesting, as etcd counts
//! them); with no other writer there is one. Guessing moves seen, not every value up to the
//! largest, follows how the counter moves under load: other stores' batches are mostly full,
//! so it moves by multiples of their size (4 threads each: by 4, 8, 12, …), and a transaction
//! carries a third of the branches a dense range of guesses would for the same hits.
//!
//! Numbered commits of one store (and its clones) that take numbers from one counter (and
//! only that one) queue in that counter's lane and never race each other: one transaction of
//! a lane is in flight at a time. The lane combines the commits queued behind it into that
//! transaction, at most [`COMBINED_COMMITS_MAX`] and [`COMBINED_BYTES_MAX`] bytes (and a
//! quarter of [`crate::TXN_OPS_MAX`] operations), when none writes a key another of them
//! writes or checks, once resolved in every branch; commits with range checks, versionstamped
//! keys or checks of claimed stamps go alone. The combined commits are numbered in queue
//! order, as if committed one after the other, and each gets its own result: at revision `R`
//! the `i`-th one's versionstamp is `R` followed by `i` as two bytes (its values carry the
//! two bytes, see `envelope`), the counter carries the last one's, and the marker holds the
//! highest suffix, which a claim reads to claim above it. When some of their own checks fail,
//! a commit without numbered check keys gets its `Conflict` at once, one with numbered check
//! keys is committed alone afterwards (its conflict then depends on no neighbour's number),
//! and the others are resent together; a commit whose numbering is refused in the group is
//! also committed alone. Commits taking numbers from several counters go straight to etcd.
//! [`NumberingStats`] counts transactions, counter-guard retries and combined commits.
//!
//! What a combined stamp does not promise, beyond what a claimed one does not (crate docs):
//! a snapshot or watch update at revision `R` has the stamp of `R`, below the combined
//! commits' other than the first although it sees them all; and a check of `R`'s stamp
//! compares `mod_revision` with `R`, so it would also pass against a value the `i`-th of
//! them wrote. Only a stamp taken from a snapshot, a watch or the first commit's result can
//! name `R`.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use etcd_client::{
    Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::sync::oneshot;
use tuplekv_engine::mutate::{self, Staged};
use tuplekv_engine::numbering::{self, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, Check, CommitResult, Conflict, Error, FailedCheck, KeyBytes, Mutation,
    MutationKind, Value, Versionstamp, versionstamped_key,
};

use crate::envelope::{self, NO_DEADLINE, Stamp, Stored};
use crate::errors::write_error;
use crate::{Space, TXN_OPS_MAX, now_ms};

/// Most times one commit is sent when its sum/min/max guesses (or the tombstones its checks
/// expected) turn out stale; then [`Error::TransactionConflict`].
pub const COMMIT_ATTEMPTS_MAX: u32 = 16;

/// Most times a commit with versionstamped keys is sent: it is tried again whenever another
/// commit of the store lands between its read of the current revision and its transaction,
/// so under a heavy write load it can give [`Error::TransactionConflict`].
pub const STAMPED_COMMIT_ATTEMPTS_MAX: u32 = 64;

/// Most transactions sent for one numbered commit (or one lane's combined commits) when
/// other writers keep moving its counter past every guess (or its other guesses turn out
/// stale); then [`Error::TransactionConflict`], and no number was taken.
pub const NUMBERED_COMMIT_ATTEMPTS_MAX: u32 = 32;

/// Most guesses of a counter's value (branches) one transaction carries.
pub const COUNTER_GUESSES_MAX: usize = 32;

/// Most numbered commits a counter's lane combines into one transaction.
pub const COMBINED_COMMITS_MAX: usize = 32;

/// Most bytes (keys and values) of the numbered commits combined into one transaction.
pub const COMBINED_BYTES_MAX: usize = 256 * 1024;

/// Most bytes of a transaction's branches beyond the first (its guesses of the counter).
pub const GUESSES_BYTES_MAX: usize = 256 * 1024;

/// Most counters whose last state a store remembers (past it, it forgets them all).
pub const COUNTERS_REMEMBERED_MAX: usize = 1024;

/// How many of a counter's last moves between the store's looks it keeps to guess from.
pub const MOVES_KEPT: usize = 64;

/// A move seen once is guessed while it is among the counter's last this many moves (one
/// seen twice among the [`MOVES_KEPT`], while it stays there).
pub const MOVES_FRESH: usize = 4;

/// Most operations of the numbered commits combined into one transaction: a quarter of what
/// a transaction may hold, leaving the rest to the guesses.
const COMBINED_OPS_MAX: usize = TXN_OPS_MAX / 4;

/// The bytes of etcd's request a comparison or an operation costs beyond its key and value.
const OP_OVERHEAD_BYTES: usize = 16;

/// The last state seen of one etcd key.
#[derive(Debug, Clone)]
struct Observed {
    /// 0 when the key did not exist.
    mod_revision: i64,
    stored: Option<Stored>,
    /// For the marker: the highest stamp suffix of the store's last commit (see the module
    /// docs); 0 for any other key.
    top: u16,
}

impl Observed {
    fn live(&self, now: u64) -> Option<&Value> {
        self.stored.as_ref()?.live(now)
    }

    fn stamp(&self, now: u64) -> Option<Versionstamp> {
        self.live(now)?;
        let stored = self.stored.as_ref()?;
        Some(stored.versionstamp(self.mod_revision))
    }
}

/// What a commit with versionstamped keys claims in one attempt: its versionstamp, and the
/// marker's `mod_revision` that must still hold for the claim to be sound.
#[derive(Debug, Clone, Copy)]
struct Claim {
    stamp: Versionstamp,
    marker_revision: i64,
}

/// The versionstamp claimed when the current revision is `head` and the store's last commit
/// used stamp suffixes up to `top`: the next suffix (`00 01` after a plain commit).
fn claimed_stamp(head: i64, top: u16) -> Versionstamp {
    let revision = Versionstamp::from_version(u64::try_from(head).unwrap_or(0));
    envelope::with_suffix(revision, top.saturating_add(1))
}

/// Whether `stamp` is a revision's (its last two bytes zero), not a claimed one.
fn is_revision(stamp: Versionstamp) -> bool {
    stamp.as_bytes()[8..] == [0, 0]
}

/// The stamp of the commit at position `suffix` of a transaction at `revision`.
fn stamp_at(revision: i64, suffix: u16) -> Versionstamp {
    let revision = Versionstamp::from_version(revision.unsigned_abs());
    envelope::with_suffix(revision, suffix)
}

/// The state of a counter one branch assumes; its comparisons hold exactly then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Absent: never written (`mod_revision` 0), or the tombstone or expired value seen at
    /// this `mod_revision`.
    Absent(i64),
    /// This number, as a numbered commit leaves a counter (compared by value).
    Number(u64),
    /// The live value seen at this `mod_revision`.
    Seen(i64),
}

impl Guard {
    /// The guard that holds for the state `observed` (unknown: absent, never written).
    fn of(observed: Option<&Observed>, now: u64) -> Guard {
        match observed {
            None => Guard::Absent(0),
            Some(o) if o.live(now).is_none() => Guard::Absent(o.mod_revision),
            Some(o) => match o.stored.as_ref().and_then(Stored::number) {
                Some(n) => Guard::Number(n),
                None => Guard::Seen(o.mod_revision),
            },
        }
    }

    /// Whether etcd's comparisons of this guard (made at `now`) held on the state `observed`.
    fn holds(self, observed: Option<&Observed>, now: u64) -> bool {
        match self {
            Guard::Absent(r) => observed.map_or(0, |o| o.mod_revision) == r,
            Guard::Number(n) => {
                observed
                    .and_then(|o| o.stored.as_ref())
                    .and_then(Stored::number)
                    == Some(n)
            }
            Guard::Seen(r) => {
                observed.is_some_and(|o| o.mod_revision == r && o.live(now).is_some())
            }
        }
    }

    fn compares(self, key: &[u8], now: u64) -> Vec<Compare> {
        match self {
            Guard::Absent(r) => vec![Compare::mod_revision(key.to_vec(), CompareOp::Equal, r)],
            Guard::Number(n) => vec![
                Compare::value(key.to_vec(), CompareOp::Greater, envelope::number_floor(n)),
                Compare::value(key.to_vec(), CompareOp::Less, envelope::number_ceiling(n)),
            ],
            Guard::Seen(r) => vec![
                Compare::mod_revision(key.to_vec(), CompareOp::Equal, r),
                Compare::value(key.to_vec(), CompareOp::Greater, envelope::live_after(now)),
            ],
        }
    }
}

/// The commits of one transaction resolved for one guess of their counters: one branch.
struct Level {
    /// The commits' checks and mutations one after another, numbers filled in, and the
    /// counters' new values last.
    write: AtomicWrite,
    /// Per mutation of `write`: the stamp its value carries.
    marks: Vec<Stamp>,
    /// Per commit: its checks in `write.checks`.
    spans: Vec<Range<usize>>,
    /// Per commit: the first number of each of its claims.
    numbers: Vec<Vec<u64>>,
    /// Per counter: what the branch assumes it holds, and the value it leaves.
    guards: Vec<Guard>,
    finals: Vec<u64>,
    /// The highest stamp suffix of the branch's commits.
    top: u16,
    /// How far past the last value seen the branch assumes its one counter moved.
    moved: u64,
}

/// Why a branch could not be built.
enum Refusal {
    /// The commit at this position refused its numbering or another rule (the error).
    Member(usize, Error),
    /// The commit at this position writes a key an earlier one touches, or touches a key an
    /// earlier one writes.
    Overlap(usize),
}

/// Resolves the commits `writes[active]` one after another from the counters' values
/// `current` (per counter of the first commit's claims), stamping position `p`'s values with
/// suffix `p` (or the claim's stamp).
fn combine(
    writes: &[AtomicWrite],
    active: &[usize],
    mut current: Vec<Option<Value>>,
    guards: Vec<Guard>,
    claim: Option<Claim>,
) -> Result<Level, Refusal> {
    let group = active.len() > 1;
    let mut level = Level {
        write: AtomicWrite::default(),
        marks: Vec::new(),
        spans: Vec::with_capacity(active.len()),
        numbers: Vec::with_capacity(active.len()),
        guards,
        finals: Vec::new(),
        top: 0,
        moved: 0,
    };
    let mut written: HashSet<KeyBytes> = HashSet::new();
    let mut touched: HashSet<KeyBytes> = HashSet::new();
    let mut counter_keys: Vec<KeyBytes> = Vec::new();
    for (pos, &i) in active.iter().enumerate() {
        let Some(write) = writes.get(i) else { continue };
        let claims = write.numbering.counters.len();
        if pos == 0 {
            counter_keys = write
                .numbering
                .counters
                .iter()
                .map(|c| c.key.clone())
                .collect();
        }
        let values: Vec<Option<&Value>> = current.iter().map(Option::as_ref).collect();
        let (mut resolved, firsts) =
            numbering::resolve(write.clone(), &values).map_err(|e| Refusal::Member(pos, e))?;
        let keep = resolved.mutations.len().saturating_sub(claims);
        for (k, m) in resolved.mutations.drain(keep..).enumerate() {
            if let (Some(slot), MutationKind::Set { value, .. }) = (current.get_mut(k), m.kind) {
                *slot = Some(value);
            }
        }
        if group {
            let writes_here: HashSet<KeyBytes> =
                resolved.mutations.iter().map(|m| m.key.clone()).collect();
            let overlaps = writes_here.iter().any(|k| touched.contains(k))
                || resolved.checks.iter().any(|c| written.contains(&c.key));
            if overlaps {
                return Err(Refusal::Overlap(pos));
            }
            touched.extend(resolved.checks.iter().map(|c| c.key.clone()));
            touched.extend(writes_here.iter().cloned());
            written.extend(writes_here);
        }
        let suffix = u16::try_from(pos).unwrap_or(u16::MAX);
        let mark = match claim {
            Some(claim) => Stamp::Claimed(claim.stamp),
            None if suffix == 0 => Stamp::Revision,
            None => Stamp::Relative(suffix),
        };
        let start = level.write.checks.len();
        level.write.checks.append(&mut resolved.checks);
        level.spans.push(start..level.write.checks.len());
        level.write.range_checks.append(&mut resolved.range_checks);
        level
            .marks
            .extend(std::iter::repeat_n(mark, resolved.mutations.len()));
        level.write.mutations.append(&mut resolved.mutations);
        level.numbers.push(firsts);
        level.top = suffix;
    }
    // The counters' new values, stamped as the last commit's (the one that left them).
    let mark = match claim {
        Some(claim) => Stamp::Claimed(claim.stamp),
        None => Stamp::Relative(level.top),
    };
    for (key, value) in counter_keys.into_iter().zip(current) {
        let Some(Value::U64(next)) = value else {
            continue;
        };
        level.finals.push(next);
        level.write.mutations.push(Mutation {
            key,
            kind: MutationKind::Set {
                value: Value::U64(next),
                expiry: None,
            },
        });
        level.marks.push(mark);
    }
    Ok(level)
}

/// One branch's transaction parts.
struct Branch {
    /// The counters' guards first: a wrong guess fails at its first comparisons.
    compares: Vec<Compare>,
    puts: Vec<TxnOp>,
    /// The etcd keys it needs read when it fails (those no branch before it needs), in
    /// order.
    reads: Vec<Vec<u8>>,
    /// The counts of the range checks' changes it needs read when it fails.
    range_gets: Vec<TxnOp>,
    /// About how many bytes of the request it takes.
    bytes: usize,
}

/// The transaction of the branches, each nested in the `else` of the one before; the last
/// one's `else` reads what every branch needs (at one revision: only when every branch
/// failed, so a transaction that commits reads nothing). Returns the keys read, in order
/// (the range checks' counts follow them).
fn assemble(branches: Vec<Branch>) -> (Txn, Vec<Vec<u8>>) {
    let mut reads = Vec::new();
    let mut range_gets = Vec::new();
    let mut parts = Vec::with_capacity(branches.len());
    for mut branch in branches {
        reads.append(&mut branch.reads);
        range_gets.append(&mut branch.range_gets);
        parts.push((branch.compares, branch.puts));
    }
    let mut last: Vec<TxnOp> = reads.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
    last.extend(range_gets);
    let mut inner: Option<Txn> = None;
    for (compares, puts) in parts.into_iter().rev() {
        let else_ops = match inner.take() {
            Some(next) => vec![TxnOp::txn(next)],
            None => std::mem::take(&mut last),
        };
        inner = Some(Txn::new().when(compares).and_then(puts).or_else(else_ops));
    }
    (inner.unwrap_or_default(), reads)
}

/// What became of one commit of a group.
enum Outcome {
    /// Its result.
    Done(Result<CommitResult, Error>),
    /// It must be committed alone (its conflict or refusal depended on its neighbours).
    Alone(AtomicWrite),
}

/// A numbered commit waiting in its counter's lane, and where its result goes.
struct Queued {
    write: AtomicWrite,
    reply: oneshot::Sender<Result<CommitResult, Error>>,
}

/// What a store remembers of one counter.
#[derive(Debug, Clone)]
struct Remembered {
    observed: Observed,
    /// How far other writers moved the counter between this store's looks lately: what a
    /// transaction guesses.
    moves: Moves,
}

/// A counter's last [`MOVES_KEPT`] moves between a store's looks, the latest last.
#[derive(Debug, Clone, Default)]
struct Moves(VecDeque<u64>);

impl Moves {
    /// Keeps `moved`, forgetting the oldest move past [`MOVES_KEPT`].
    fn record(&mut self, moved: u64) {
        if self.0.len() >= MOVES_KEPT {
            self.0.pop_front();
        }
        self.0.push_back(moved);
    }

    /// The moves the next transaction guesses beyond the last value seen: each nonzero move
    /// seen at least twice, or once among the last [`MOVES_FRESH`], the most frequent first
    /// (then the latest), at most [`COUNTER_GUESSES_MAX`] less one (the first branch's).
    fn guesses(&self) -> Vec<u64> {
        let fresh_from = self.0.len().saturating_sub(MOVES_FRESH);
        // (move, times seen, latest position)
        let mut seen: Vec<(u64, usize, usize)> = Vec::new();
        for (at, &moved) in self.0.iter().enumerate() {
            if moved == 0 {
                continue;
            }
            match seen.iter_mut().find(|s| s.0 == moved) {
                Some(s) => {
                    s.1 += 1;
                    s.2 = at;
                }
                None => seen.push((moved, 1, at)),
            }
        }
        seen.retain(|&(_, times, latest)| times >= 2 || latest >= fresh_from);
        seen.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
        seen.into_iter()
            .map(|(moved, _, _)| moved)
            .take(COUNTER_GUESSES_MAX - 1)
            .collect()
    }
}

/// Counts of a store's numbered commits ([`crate::EtcdStore::numbering_stats`]), since it
/// connected, over all its clones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumberingStats {
    /// Numbered commits that committed.
    pub commits: u64,
    /// etcd transactions sent for numbered commits (one can carry several commits, and the
    /// commit that reads a counter for a refusal sends one read more).
    pub transactions: u64,
    /// Of those, the ones refused because a counter held none of the values they assumed
    /// (another writer had moved it): each is followed by another transaction, resolved
    /// again, or by [`Error::TransactionConflict`] past [`NUMBERED_COMMIT_ATTEMPTS_MAX`].
    pub counter_retries: u64,
    /// Transactions that committed on a guess other than the counter's last value seen
    /// (another writer had moved it, and no retry was needed).
    pub later_guesses: u64,
    /// Guesses of the counter sent, over all those transactions (one branch each).
    pub guesses: u64,
    /// Numbered commits that committed in a transaction together with others of their lane.
    pub combined: u64,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    transactions: AtomicU64,
    counter_retries: AtomicU64,
    later_guesses: AtomicU64,
    guesses: AtomicU64,
    combined: AtomicU64,
}

fn bump(counter: &AtomicU64, by: usize) {
    counter.fetch_add(u64::try_from(by).unwrap_or(u64::MAX), Ordering::Relaxed);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a store keeps for its numbered commits: the lanes (per counter, the commits waiting
/// for the transaction in flight), the last state seen of its counters, and counts.
#[derive(Default)]
pub(crate) struct Counters {
    /// A lane exists while its leader task runs.
    lanes: Mutex<HashMap<Vec<u8>, VecDeque<Queued>>>,
    seen: Mutex<HashMap<Vec<u8>, Remembered>>,
    stats: Stats,
}

impl Counters {
    pub(crate) fn stats(&self) -> NumberingStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NumberingStats {
            commits: get(&self.stats.commits),
            transactions: get(&self.stats.transactions),
            counter_retries: get(&self.stats.counter_retries),
            later_guesses: get(&self.stats.later_guesses),
            guesses: get(&self.stats.guesses),
            combined: get(&self.stats.combined),
        }
    }

    fn recall(&self, key: &[u8]) -> Option<Remembered> {
        lock(&self.seen).get(key).cloned()
    }

    fn remember(&self, key: Vec<u8>, remembered: Option<Remembered>) {
        let mut seen = lock(&self.seen);
        match remembered {
            None => {
                seen.remove(&key);
            }
            Some(r) => {
                if seen.len() >= COUNTERS_REMEMBERED_MAX && !seen.contains_key(&key) {
                    seen.clear();
                }
                seen.insert(key, r);
            }
        }
    }

    /// Queues `queued` in `lane`; whether the caller must start the lane's leader.
    fn enqueue(&self, lane: Vec<u8>, queued: Queued) -> bool {
        match lock(&self.lanes).entry(lane) {
            MapEntry::Occupied(mut e) => {
                e.get_mut().push_back(queued);
                false
            }
            MapEntry::Vacant(e) => {
                e.insert(VecDeque::from([queued]));
                true
            }
        }
    }

    /// The next commits of `lane` to send in one transaction; `None` (and the lane closed)
    /// when none waits.
    fn next_batch(&self, lane: &[u8]) -> Option<Vec<Queued>> {
        let mut lanes = lock(&self.lanes);
        let queue = lanes.get_mut(lane)?;
        let Some(first) = queue.pop_front() else {
            lanes.remove(lane);
            return None;
        };
        let alone = !combinable(&first.write);
        let (mut bytes, mut ops) = (write_bytes(&first.write), ops_estimate(&first.write));
        let mut batch = vec![first];
        while !alone && batch.len() < COMBINED_COMMITS_MAX {
            let Some(next) = queue.front() else { break };
            let (b, o) = (write_bytes(&next.write), ops_estimate(&next.write));
            if !combinable(&next.write)
                || bytes + b > COMBINED_BYTES_MAX
                || ops + o > COMBINED_OPS_MAX
            {
                break;
            }
            (bytes, ops) = (bytes + b, ops + o);
            if let Some(next) = queue.pop_front() {
                batch.push(next);
            }
        }
        Some(batch)
    }
}

/// Closes a lane whose leader stopped early (a panic, the runtime's shutdown): the commits
/// still queued, never sent, are answered `Unavailable`.
struct LaneGuard<'a> {
    counters: &'a Counters,
    lane: &'a [u8],
    done: bool,
}

impl Drop for LaneGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let queued = lock(&self.counters.lanes).remove(self.lane);
        for q in queued.into_iter().flatten() {
            let _ = q.reply.send(Err(Error::unavailable(
                "the lane of numbered commits stopped before sending this one",
            )));
        }
    }
}

/// Whether a numbered commit may share a transaction with others of its lane.
fn combinable(write: &AtomicWrite) -> bool {
    write.numbering.counters.len() == 1
        && write.range_checks.is_empty()
        && !write.mutations.iter().any(versionstamped)
        && write
            .checks
            .iter()
            .all(|c| c.versionstamp.is_none_or(is_revision))
}

fn versionstamped(m: &Mutation) -> bool {
    matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. })
}

/// The etcd operations a commit needs at most in one branch.
fn ops_estimate(write: &AtomicWrite) -> usize {
    2 * (write.checks.len() + write.mutations.len() + write.numbering.counters.len())
        + write.range_checks.len()
        + 2
}

/// The bytes of a commit's keys and values.
fn write_bytes(write: &AtomicWrite) -> usize {
    let checks: usize = write.checks.iter().map(|c| c.key.len()).sum();
    let mutations: usize = write
        .mutations
        .iter()
        .map(|m| m.key.len() + m.kind.value_size().unwrap_or(0))
        .sum();
    checks + mutations + OP_OVERHEAD_BYTES * (write.checks.len() + write.mutations.len())
}

/// Commits `write` under `space`; a numbered commit of one counter goes through its lane.
pub(crate) async fn commit(
    kv: KvClient,
    space: Space,
    counters: Arc<Counters>,
    write: AtomicWrite,
) -> Result<CommitResult, Error> {
    write.validate()?;
    if ops_estimate(&write) > TXN_OPS_MAX {
        return Err(Error::Unsupported {
            operation: "a commit needing more etcd comparisons than TXN_OPS_MAX (4096)",
            needs: "fewer checks, sum/min/max mutations and range checks in one commit",
        });
    }
    if let [claim] = write.numbering.counters.as_slice() {
        let lane = space.data(&claim.key);
        let (reply, answer) = oneshot::channel();
        if counters.enqueue(lane.clone(), Queued { write, reply }) {
            tokio::spawn(lead(kv, space, Arc::clone(&counters), lane));
        }
        return answer.await.unwrap_or_else(|_| {
            Err(Error::outcome_unknown(
                "the lane of numbered commits stopped during the commit",
            ))
        });
    }
    let mut kv = kv;
    alone(&mut kv, &space, &counters, write).await
}

/// Sends the commits of `lane` until none waits.
async fn lead(mut kv: KvClient, space: Space, counters: Arc<Counters>, lane: Vec<u8>) {
    let mut guard = LaneGuard {
        counters: &counters,
        lane: &lane,
        done: false,
    };
    while let Some(batch) = counters.next_batch(&lane) {
        let (writes, replies): (Vec<AtomicWrite>, Vec<_>) =
            batch.into_iter().map(|q| (q.write, q.reply)).unzip();
        let outcomes = Run::new(&mut kv, &space, &counters, writes).go().await;
        let mut later = Vec::new();
        for (outcome, reply) in outcomes.into_iter().zip(replies) {
            match outcome {
                Outcome::Done(result) => {
                    let _ = reply.send(result);
                }
                Outcome::Alone(write) => later.push((write, reply)),
            }
        }
        for (write, reply) in later {
            let _ = reply.send(alone(&mut kv, &space, &counters, write).await);
        }
    }
    guard.done = true;
}

/// Commits `write` in transactions of its own.
async fn alone(
    kv: &mut KvClient,
    space: &Space,
    counters: &Counters,
    write: AtomicWrite,
) -> Result<CommitResult, Error> {
    let attempts = NUMBERED_COMMIT_ATTEMPTS_MAX;
    match Run::new(kv, space, counters, vec![write]).go().await.pop() {
        Some(Outcome::Done(result)) => result,
        // A commit alone has no neighbour to leave for.
        _ => Err(Error::TransactionConflict { attempts }),
    }
}

/// The attempts at committing some commits together (one, or a lane's combined ones).
struct Run<'a> {
    kv: &'a mut KvClient,
    space: &'a Space,
    counters: &'a Counters,
    writes: Vec<AtomicWrite>,
    outcomes: Vec<Option<Outcome>>,
    /// The commits not settled yet, in order (their positions are their stamp suffixes).
    active: Vec<usize>,
    known: HashMap<Vec<u8>, Observed>,
    /// The etcd keys of the counters the first commit claims (a group's all claim the one).
    counter_keys: Vec<Vec<u8>>,
    /// Whether the counters in `known` were read during this run.
    fresh: bool,
    /// The first counter's recent moves.
    moves: Moves,
    /// Whether a transaction's outcome is unknown, so the counters must be forgotten.
    lost: bool,
}

impl<'a> Run<'a> {
    fn new(
        kv: &'a mut KvClient,
        space: &'a Space,
        counters: &'a Counters,
        writes: Vec<AtomicWrite>,
    ) -> Run<'a> {
        let counter_keys: Vec<Vec<u8>> = writes
            .first()
            .map(|w| {
                w.numbering
                    .counters
                    .iter()
                    .map(|c| space.data(&c.key))
                    .collect()
            })
            .unwrap_or_default();
        let mut known = HashMap::new();
        let mut moves = None;
        for key in &counter_keys {
            if let Some(r) = counters.recall(key) {
                known.insert(key.clone(), r.observed);
                moves.get_or_insert(r.moves);
            }
        }
        Run {
            kv,
            space,
            counters,
            outcomes: writes.iter().map(|_| None).collect(),
            active: (0..writes.len()).collect(),
            writes,
            known,
            counter_keys,
            fresh: false,
            moves: moves.unwrap_or_default(),
            lost: false,
        }
    }

    /// Runs the attempts; every commit's outcome, in order.
    async fn go(mut self) -> Vec<Outcome> {
        if let Err(e) = self.attempts().await {
            self.settle_all(|| Err(e.clone()));
        }
        for key in std::mem::take(&mut self.counter_keys) {
            let remembered = (!self.lost)
                .then(|| self.known.get(&key).cloned())
                .flatten()
                .map(|observed| Remembered {
                    observed,
                    moves: self.moves.clone(),
                });
            self.counters.remember(key, remembered);
        }
        let attempts = NUMBERED_COMMIT_ATTEMPTS_MAX;
        self.outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Outcome::Done(Err(Error::TransactionConflict { attempts }))))
            .collect()
    }

    fn settle(&mut self, pos: usize, outcome: Outcome) {
        if let Some(i) = self.active.get(pos).copied() {
            self.active.remove(pos);
            if let Some(slot) = self.outcomes.get_mut(i) {
                *slot = Some(outcome);
            }
        }
    }

    fn settle_all(&mut self, result: impl Fn() -> Result<CommitResult, Error>) {
        for i in std::mem::take(&mut self.active) {
            if let Some(slot) = self.outcomes.get_mut(i) {
                *slot = Some(Outcome::Done(result()));
            }
        }
    }

    /// Leaves the commit at `pos` to be committed alone.
    fn leave(&mut self, pos: usize) {
        if let Some(write) = self
            .active
            .get(pos)
            .and_then(|&i| self.writes.get(i))
            .cloned()
        {
            self.settle(pos, Outcome::Alone(write));
        }
    }

    /// Reads `keys` (in one transaction) into `known`; the revision read at.
    async fn read(&mut self, keys: &[Vec<u8>]) -> Result<i64, Error> {
        let gets: Vec<TxnOp> = keys.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
        let response = self
            .kv
            .txn(Txn::new().and_then(gets))
            .await
            .map_err(|e| crate::errors::read_error(e, 0))?;
        let head = header_revision(response.header())
            .ok_or_else(|| Error::unavailable("etcd answered a read without its revision"))?;
        learn(
            &mut self.known,
            &self.space.marker(),
            keys,
            &response.op_responses(),
        )?;
        Ok(head)
    }

    async fn attempts(&mut self) -> Result<(), Error> {
        let solo = self.writes.len() == 1;
        let numbered = !self.counter_keys.is_empty();
        let space = self.space.clone();
        let marker = space.marker();
        // Only a commit alone has versionstamped keys, checks of claimed stamps or range
        // checks (the lanes combine no such commit).
        let first = self.writes.first().cloned().unwrap_or_default();
        let stamped = first.mutations.iter().any(versionstamped);
        // What a claim needs (the current revision and the marker), and the values carrying
        // the claimed stamps that checks name, read before the first attempt.
        let mut first_reads: Vec<Vec<u8>> = Vec::new();
        if solo {
            if stamped {
                first_reads.push(marker.clone());
            }
            for check in &first.checks {
                if check.versionstamp.is_some_and(|vs| !is_revision(vs)) {
                    first_reads.push(space.data(&check.key));
                }
            }
        }
        let mut head = 0;
        if !first_reads.is_empty() {
            head = self.read(&first_reads).await?;
        }
        let attempts = if stamped {
            STAMPED_COMMIT_ATTEMPTS_MAX
        } else if numbered {
            NUMBERED_COMMIT_ATTEMPTS_MAX
        } else {
            COMMIT_ATTEMPTS_MAX
        };
        let fence = space.fence();
        let oldest_since = first.range_checks.iter().map(|rc| rc.since.version()).min();
        if solo && oldest_since.is_some() {
            let (mod_revision, bound) = space.fence_seen();
            self.known.insert(
                fence.clone(),
                Observed {
                    mod_revision,
                    stored: (mod_revision != 0).then(|| Stored {
                        value: Some(Value::U64(bound)),
                        deadline: envelope::NO_DEADLINE,
                        stamp: Stamp::Revision,
                    }),
                    top: 0,
                },
            );
        }
        let mut sent = 0;
        while sent < attempts && !self.active.is_empty() {
            let now = now_ms();
            let claim = stamped.then(|| {
                let seen = self.known.get(&marker);
                Claim {
                    stamp: claimed_stamp(head, seen.map_or(0, |o| o.top)),
                    marker_revision: seen.map_or(0, |o| o.mod_revision),
                }
            });
            if solo {
                if let (Some(since), Some(seen)) = (oldest_since, self.known.get(&fence)) {
                    space.saw_fence(seen.mod_revision, fence_bound(seen));
                    if fence_bound(seen) > since {
                        // A tombstone newer than the snapshot may be gone: the range may
                        // have changed.
                        self.settle_all(range_changed);
                        return Ok(());
                    }
                }
                if first
                    .range_checks
                    .iter()
                    .any(|rc| rc.expires_at.is_some_and(|d| d <= now))
                {
                    self.settle_all(range_changed);
                    return Ok(());
                }
            }
            let levels = match self.levels(now, claim) {
                Ok(levels) => levels,
                Err(Refusal::Member(pos, e)) => {
                    if !solo {
                        self.leave(pos);
                    } else if !numbered || self.fresh || !is_numbering_refusal(&e) {
                        return Err(e);
                    } else {
                        // Refused from a remembered counter: only a counter read now says.
                        bump(&self.counters.stats.transactions, 1);
                        let keys = self.counter_keys.clone();
                        self.read(&keys).await?;
                        self.fresh = true;
                    }
                    continue;
                }
                Err(Refusal::Overlap(pos)) => {
                    self.leave(pos);
                    continue;
                }
            };
            let branches = match self.branches(&levels, now, claim) {
                Ok(branches) => branches,
                Err(e) if solo => return Err(e),
                Err(_) => {
                    // Which commit made the branch fail (a sum on a value that is not a
                    // number, …) only a commit alone tells.
                    while !self.active.is_empty() {
                        self.leave(0);
                    }
                    continue;
                }
            };
            let levels = &levels[..branches.len()];
            let (txn, reads) = assemble(branches);
            let branches = levels.len();
            sent += 1;
            if numbered {
                bump(&self.counters.stats.transactions, 1);
                bump(&self.counters.stats.guesses, branches);
            }
            let response = match self.kv.txn(txn).await {
                Ok(response) => response,
                Err(e) => {
                    let e = write_error(e);
                    self.lost = !matches!(e, Error::Unavailable { .. } | Error::Remote { .. });
                    return Err(e);
                }
            };
            let revision = header_revision(response.header());
            let (landed, range_changed) = self.walk(response, branches, &reads)?;
            if let Some(j) = landed {
                self.landed(&levels[j], j, claim, revision)?;
                return Ok(());
            }
            // Nothing was applied: a refused transaction without its revision is no commit.
            head = revision.ok_or_else(|| {
                Error::unavailable("etcd answered a refused commit without its revision")
            })?;
            self.fresh = true;
            self.refused(levels, now, range_changed);
            // Otherwise a guess was stale (a counter, a sum's operand, a tombstone's
            // revision, the marker a claim needs): again, with what the last `else` branch
            // read.
        }
        if !self.active.is_empty() {
            self.settle_all(|| Err(Error::TransactionConflict { attempts }));
        }
        Ok(())
    }

    /// The branches of the next transaction: the counters as last seen, then (one counter,
    /// moved lately by other writers) the guesses above.
    fn levels(&self, now: u64, claim: Option<Claim>) -> Result<Vec<Level>, Refusal> {
        let observed: Vec<Option<&Observed>> = self
            .counter_keys
            .iter()
            .map(|k| self.known.get(k))
            .collect();
        let current = observed
            .iter()
            .map(|o| o.and_then(|o| o.live(now)).cloned())
            .collect();
        let guards = observed.iter().map(|o| Guard::of(*o, now)).collect();
        let first = combine(&self.writes, &self.active, current, guards, claim)?;
        let base = first.numbers.first().and_then(|n| n.first()).copied();
        let mut levels = vec![first];
        if let (1, Some(base)) = (self.counter_keys.len(), base) {
            for moved in self.moves.guesses() {
                let Some(n) = base.checked_add(moved) else {
                    continue;
                };
                let current = vec![Some(Value::U64(n))];
                // A guess the numbering refuses (past the counter's limits) is left out.
                if let Ok(mut level) = combine(
                    &self.writes,
                    &self.active,
                    current,
                    vec![Guard::Number(n)],
                    claim,
                ) {
                    level.moved = moved;
                    levels.push(level);
                }
            }
        }
        Ok(levels)
    }

    /// The branches of `levels` that fit one transaction (the first always).
    fn branches(
        &self,
        levels: &[Level],
        now: u64,
        claim: Option<Claim>,
    ) -> Result<Vec<Branch>, Error> {
        let mut read_set = HashSet::new();
        let mut branches: Vec<Branch> = Vec::with_capacity(levels.len());
        // etcd counts, per nested transaction, the largest of its comparisons and its two
        // branches, against what the transactions around it left of `--max-txn-ops`: the
        // sum along the nesting. Every branch but the last has one nested transaction in its
        // `else`; the last has every read.
        let (mut inner_ops, mut reads, mut bytes) = (0, 0, 0);
        for (j, level) in levels.iter().enumerate() {
            let branch = match plan(self, level, now, claim, &mut read_set, j == 0) {
                Ok(branch) => branch,
                Err(e) if j == 0 => return Err(e),
                Err(_) => break,
            };
            let widest = branch.compares.len().max(branch.puts.len());
            let reads_after = reads + branch.reads.len() + branch.range_gets.len();
            let ops = inner_ops + widest.max(reads_after);
            if j > 0 && (ops > TXN_OPS_MAX || bytes + branch.bytes > GUESSES_BYTES_MAX) {
                break;
            }
            inner_ops += widest.max(1);
            reads = reads_after;
            if j > 0 {
                bytes += branch.bytes;
            }
            branches.push(branch);
        }
        Ok(branches)
    }

    /// Follows the answer down its `branches`: the branch that committed, or none (then
    /// what the last one's `else` read is learnt, and whether a range check's range
    /// changed).
    fn walk(
        &mut self,
        response: TxnResponse,
        branches: usize,
        reads: &[Vec<u8>],
    ) -> Result<(Option<usize>, bool), Error> {
        let mut current = response;
        for j in 0..branches {
            if current.succeeded() {
                return Ok((Some(j), false));
            }
            let mut ops = current.op_responses();
            if j + 1 < branches
                && let Some(TxnOpResponse::Txn(next)) = ops.pop()
            {
                current = next;
                continue;
            }
            let range_changed = learn(&mut self.known, &self.space.marker(), reads, &ops)?;
            return Ok((None, range_changed));
        }
        Ok((None, false))
    }

    /// The transaction committed branch `j` (`level`) at `revision`.
    fn landed(
        &mut self,
        level: &Level,
        j: usize,
        claim: Option<Claim>,
        revision: Option<i64>,
    ) -> Result<(), Error> {
        let stamp_of = |pos: usize| match (claim, revision) {
            (Some(claim), _) => Some(claim.stamp),
            (None, Some(r)) => Some(stamp_at(r, u16::try_from(pos).unwrap_or(u16::MAX))),
            (None, None) => None,
        };
        if stamp_of(0).is_none() {
            self.lost = true;
            return Err(Error::outcome_unknown(
                "etcd answered the commit without its revision",
            ));
        }
        let committed = self.active.len();
        if !self.counter_keys.is_empty() {
            let stats = &self.counters.stats;
            bump(&stats.commits, committed);
            if committed > 1 {
                bump(&stats.combined, committed);
            }
            if j > 0 {
                bump(&stats.later_guesses, 1);
            }
            self.moves.record(level.moved);
        }
        let mark = match claim {
            Some(claim) => Stamp::Claimed(claim.stamp),
            None => Stamp::Relative(level.top),
        };
        for (key, next) in self.counter_keys.iter().zip(&level.finals) {
            self.known.insert(
                key.clone(),
                Observed {
                    mod_revision: revision.unwrap_or(0),
                    stored: Some(Stored {
                        value: Some(Value::U64(*next)),
                        deadline: NO_DEADLINE,
                        stamp: mark,
                    }),
                    top: 0,
                },
            );
        }
        for (pos, &i) in std::mem::take(&mut self.active).iter().enumerate() {
            let versionstamp = stamp_of(pos).unwrap_or(Versionstamp::ZERO);
            let numbers = level.numbers.get(pos).cloned().unwrap_or_default();
            if let Some(slot) = self.outcomes.get_mut(i) {
                *slot = Some(Outcome::Done(Ok(CommitResult::Committed {
                    versionstamp,
                    numbers,
                })));
            }
        }
        Ok(())
    }

    /// After a refused transaction: settles the commits whose own checks failed (or leaves
    /// them to be committed alone), and learns how far the counter moved.
    fn refused(&mut self, levels: &[Level], now: u64, range_changed: bool) {
        let matched = levels.iter().position(|l| {
            self.counter_keys
                .iter()
                .zip(&l.guards)
                .all(|(k, g)| g.holds(self.known.get(k), now))
        });
        let checked_at = now_ms();
        let mut settled = false;
        if self.writes.len() == 1 {
            if let Some(level) = matched.and_then(|j| levels.get(j)) {
                let failed =
                    failed_checks(&level.write.checks, self.space, &self.known, checked_at);
                if !failed.is_empty() || range_changed {
                    self.settle_all(|| {
                        Ok(CommitResult::Conflict(Conflict {
                            failed_checks: failed.clone(),
                            range_changed,
                        }))
                    });
                    settled = true;
                }
            }
        } else {
            // `pos` is the commit's place in `active` now, `at` its place when the branches
            // were built (their spans).
            let mut pos = 0;
            for at in 0..self.active.len() {
                let Some(&i) = self.active.get(pos) else {
                    break;
                };
                let numbered_checks = self.writes.get(i).is_some_and(|w| {
                    w.numbering
                        .slots
                        .iter()
                        .any(|s| matches!(s.target, SlotTarget::CheckKey(_)))
                });
                // Check keys without numbers are the same in every branch.
                let level = if numbered_checks {
                    matched.and_then(|j| levels.get(j))
                } else {
                    levels.first()
                };
                let failed = level
                    .and_then(|l| Some((l, l.spans.get(at)?.clone())))
                    .map(|(l, span)| {
                        let checks = l.write.checks.get(span).unwrap_or_default();
                        failed_checks(checks, self.space, &self.known, checked_at)
                    })
                    .unwrap_or_default();
                if failed.is_empty() {
                    pos += 1;
                } else if numbered_checks {
                    self.leave(pos);
                    settled = true;
                } else {
                    let conflict = CommitResult::Conflict(Conflict {
                        failed_checks: failed,
                        range_changed: false,
                    });
                    self.settle(pos, Outcome::Done(Ok(conflict)));
                    settled = true;
                }
            }
        }
        if matched.is_none() && !self.counter_keys.is_empty() {
            if !settled {
                bump(&self.counters.stats.counter_retries, 1);
            }
            // How far the counter moved past the last value seen.
            let base = levels
                .first()
                .and_then(|l| l.numbers.first())
                .and_then(|n| n.first())
                .copied();
            let now_at = self
                .counter_keys
                .first()
                .and_then(|k| self.known.get(k))
                .and_then(|o| o.stored.as_ref())
                .and_then(Stored::number);
            if let (Some(base), Some(now_at)) = (base, now_at) {
                self.moves.record(now_at.saturating_sub(base));
            }
        }
    }
}

/// Whether `e` is a refusal of a commit's numbering by the counter's value.
fn is_numbering_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::CounterNotU64 { .. } | Error::CounterExhausted { .. } | Error::NumberTooWide { .. }
    )
}

fn range_changed() -> Result<CommitResult, Error> {
    Ok(CommitResult::Conflict(Conflict {
        failed_checks: Vec::new(),
        range_changed: true,
    }))
}

/// The revision an etcd answer names, if it names a real one (above zero).
fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Option<i64> {
    header
        .map(etcd_client::ResponseHeader::revision)
        .filter(|r| *r > 0)
}

/// The bound the collection fence holds (0 when absent).
fn fence_bound(seen: &Observed) -> u64 {
    match seen.stored.as_ref().and_then(|s| s.value.as_ref()) {
        Some(Value::U64(bound)) => *bound,
        _ => 0,
    }
}

/// The checks that do not hold in `known` at `now`, indexed from the first of `checks`.
fn failed_checks(
    checks: &[Check],
    space: &Space,
    known: &HashMap<Vec<u8>, Observed>,
    now: u64,
) -> Vec<FailedCheck> {
    checks
        .iter()
        .enumerate()
        .filter_map(|(index, check)| {
            let actual = known
                .get(&space.data(&check.key))
                .and_then(|o| o.stamp(now));
            (actual != check.versionstamp).then(|| FailedCheck {
                index,
                key: check.key.clone(),
                expected: check.versionstamp,
                actual,
            })
        })
        .collect()
}

/// The highest stamp suffix the marker's value names (empty: 0).
fn marker_top(value: &[u8]) -> u16 {
    <[u8; 2]>::try_from(value).map_or(0, u16::from_be_bytes)
}

/// Records the `else` branch's reads in `known` (the `marker` holds no envelope); returns
/// whether a range check's range changed.
fn learn(
    known: &mut HashMap<Vec<u8>, Observed>,
    marker: &[u8],
    reads: &[Vec<u8>],
    responses: &[TxnOpResponse],
) -> Result<bool, Error> {
    let mut range_changed = false;
    for (i, response) in responses.iter().enumerate() {
        let TxnOpResponse::Get(get) = response else {
            continue;
        };
        match reads.get(i) {
            Some(key) => {
                let observed = match get.kvs().first() {
                    None => Observed {
                        mod_revision: 0,
                        stored: None,
                        top: 0,
                    },
                    Some(kv) if kv.key() == marker => Observed {
                        mod_revision: kv.mod_revision(),
                        stored: None,
                        top: marker_top(kv.value()),
                    },
                    Some(kv) => Observed {
                        mod_revision: kv.mod_revision(),
                        stored: Some(envelope::decode(kv.key(), kv.value())?),
                        top: 0,
                    },
                };
                known.insert(key.clone(), observed);
            }
            None => range_changed |= get.count() > 0,
        }
    }
    Ok(range_changed)
}

/// A versionstamp as an etcd revision; one no revision can have (-1) when it does not fit.
fn revision_of(versionstamp: Versionstamp) -> i64 {
    i64::try_from(versionstamp.version()).unwrap_or(-1)
}

/// The branch of one attempt at `now` for `level`, from what `run` knows, making `claim` if
/// given; it needs read only keys not in `read_set` (needed by a branch before it), and the
/// counters and range checks' counts only if `first`.
fn plan(
    run: &Run<'_>,
    level: &Level,
    now: u64,
    claim: Option<Claim>,
    read_set: &mut HashSet<Vec<u8>>,
    first: bool,
) -> Result<Branch, Error> {
    let (space, known, write) = (run.space, &run.known, &level.write);
    let mut compares = Vec::new();
    let mut reads: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    let mut read = |key: &Vec<u8>, reads: &mut Vec<Vec<u8>>| {
        if read_set.insert(key.clone()) {
            reads.push(key.clone());
        }
    };
    for (key, guard) in run.counter_keys.iter().zip(&level.guards) {
        compares.extend(guard.compares(key, now));
        bytes += 2 * (key.len() + OP_OVERHEAD_BYTES);
        if first {
            read(key, &mut reads);
        }
    }
    for check in &write.checks {
        let key = space.data(&check.key);
        bytes += 2 * (key.len() + OP_OVERHEAD_BYTES);
        match check.versionstamp {
            Some(vs) => {
                let revision = if is_revision(vs) {
                    revision_of(vs)
                } else {
                    // The value read carrying this stamp, unchanged; none: the check fails.
                    known
                        .get(&key)
                        .filter(|o| o.stamp(now) == Some(vs))
                        .map_or(-1, |o| o.mod_revision)
                };
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                ));
                compares.push(Compare::value(
                    key.clone(),
                    CompareOp::Greater,
                    envelope::live_after(now),
                ));
            }
            None => {
                // Absent: never written (0), or the tombstone / expired value seen there.
                let revision = known
                    .get(&key)
                    .filter(|o| o.live(now).is_none())
                    .map_or(0, |o| o.mod_revision);
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                ));
            }
        }
        read(&key, &mut reads);
    }
    let marker = space.marker();
    if let Some(claim) = claim {
        compares.push(Compare::mod_revision(
            marker.clone(),
            CompareOp::Equal,
            claim.marker_revision,
        ));
        read(&marker, &mut reads);
    }
    if !write.range_checks.is_empty() {
        let fence = space.fence();
        let seen = known.get(&fence).map_or(0, |o| o.mod_revision);
        compares.push(Compare::mod_revision(fence.clone(), CompareOp::Equal, seen));
        read(&fence, &mut reads);
    }
    let mut staged: Vec<(KeyBytes, Staged, Stamp)> = Vec::new();
    let mut at: HashMap<KeyBytes, usize> = HashMap::new();
    for (index, m) in write.mutations.iter().enumerate() {
        let mark = level.marks.get(index).copied().unwrap_or(Stamp::Revision);
        let written;
        let m = match (&m.kind, claim) {
            (MutationKind::SetSuffixVersionstampedKey { .. }, Some(claim)) => {
                written = Mutation {
                    key: versionstamped_key(&m.key, claim.stamp),
                    kind: m.kind.clone(),
                };
                &written
            }
            _ => m,
        };
        let reads_current = !matches!(
            m.kind,
            MutationKind::Set { .. }
                | MutationKind::SetSuffixVersionstampedKey { .. }
                | MutationKind::Delete
        );
        let result = match at.get(&m.key).and_then(|&i| staged.get_mut(i)) {
            Some((_, earlier, _)) => {
                let current = earlier
                    .as_ref()
                    .filter(|(_, d)| d.is_none_or(|d| d > now))
                    .map(|(v, _)| v);
                *earlier = mutate::apply(m.kind.clone(), current, || now, index, &m.key)?;
                continue;
            }
            None if reads_current => {
                let key = space.data(&m.key);
                let observed = known.get(&key);
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    observed.map_or(0, |o| o.mod_revision),
                ));
                let current = observed.and_then(|o| o.live(now));
                if current.is_some() {
                    compares.push(Compare::value(
                        key.clone(),
                        CompareOp::Greater,
                        envelope::live_after(now),
                    ));
                }
                bytes += 2 * (key.len() + OP_OVERHEAD_BYTES);
                read(&key, &mut reads);
                mutate::apply(m.kind.clone(), current, || now, index, &m.key)?
            }
            None => mutate::apply(m.kind.clone(), None, || now, index, &m.key)?,
        };
        at.insert(m.key.clone(), staged.len());
        staged.push((m.key.clone(), result, mark));
    }
    let mut puts: Vec<TxnOp> = Vec::with_capacity(staged.len() + 1);
    for (key, result, mark) in &staged {
        let key = space.data(key);
        let value = match result {
            Some((v, deadline)) => envelope::encode(v, *deadline, *mark),
            None => envelope::tombstone(),
        };
        bytes += key.len() + value.len() + OP_OVERHEAD_BYTES;
        puts.push(TxnOp::put(key, value, None));
    }
    // Every commit writes the marker: etcd gives a transaction without a write no revision,
    // and a claim compares the marker's `mod_revision` with the store's last commit (and
    // reads the highest stamp suffix the marker holds, to claim above it).
    let top = if claim.is_none() && level.top > 0 {
        level.top.to_be_bytes().to_vec()
    } else {
        Vec::new()
    };
    puts.push(TxnOp::put(marker, top, None));
    let mut range_gets = Vec::new();
    for rc in &write.range_checks {
        let since = revision_of(rc.since);
        let (start, end) = (space.data(&rc.start), space.data(&rc.end));
        bytes += 2 * (start.len() + end.len() + OP_OVERHEAD_BYTES);
        compares.push(
            Compare::mod_revision(start.clone(), CompareOp::Less, since.saturating_add(1))
                .with_range(end.clone()),
        );
        if first {
            let options = GetOptions::new()
                .with_range(end)
                .with_min_mod_revision(since.saturating_add(1))
                .with_count_only();
            range_gets.push(TxnOp::get(start, Some(options)));
        }
    }
    Ok(Branch {
        compares,
        puts,
        reads,
        range_gets,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    //! The choice of a counter's guesses from its recent moves.
    use super::*;

    fn moves(seen: &[u64]) -> Moves {
        let mut moves = Moves::default();
        for &m in seen {
            moves.record(m);
        }
        moves
    }

    #[test]
    fn no_move_seen_means_no_guess_beyond_the_last_value() {
        assert!(moves(&[]).guesses().is_empty());
        assert!(moves(&[0; MOVES_KEPT]).guesses().is_empty());
    }

    #[test]
    fn moves_of_full_batches_are_guessed_most_frequent_first_and_nothing_between() {
        let seen = [8, 12, 4, 12, 8, 12, 16, 0, 12, 8];
        // 4, seen once and not among the last MOVES_FRESH, is left out; 16 is fresh.
        assert_eq!(moves(&seen).guesses(), [12, 8, 16]);
    }

    #[test]
    fn a_move_seen_once_is_guessed_while_among_the_last_moves_fresh() {
        let mut seen = vec![4; 10];
        seen.push(7);
        seen.extend(std::iter::repeat_n(4, MOVES_FRESH - 1));
        assert_eq!(
            moves(&seen).guesses(),
            [4, 7],
            "7 is the {MOVES_FRESH}th latest"
        );
        seen.push(4);
        assert_eq!(moves(&seen).guesses(), [4], "7 is one past the fresh ones");
        seen.push(7);
        assert_eq!(moves(&seen).guesses(), [4, 7], "seen twice, 7 stays");
    }

    #[test]
    fn only_the_last_moves_kept_count() {
        let mut seen = vec![5, 5];
        seen.extend(std::iter::repeat_n(0, MOVES_KEPT - 2));
        assert_eq!(
            moves(&seen).guesses(),
            [5],
            "both 5s among the last {MOVES_KEPT}"
        );
        seen.push(0);
        assert!(
            moves(&seen).guesses().is_empty(),
            "one 5 left, and not fresh"
        );
    }

    #[test]
    fn guesses_stop_at_counter_guesses_max_less_the_first_branch() {
        let at: Vec<u64> = (1..COUNTER_GUESSES_MAX as u64)
            .flat_map(|m| [m, m])
            .collect();
        assert_eq!(
            moves(&at).guesses().len(),
            COUNTER_GUESSES_MAX - 1,
            "at the limit"
        );
        let past: Vec<u64> = (1..=COUNTER_GUESSES_MAX as u64)
            .flat_map(|m| [m, m])
            .collect();
        let guesses = moves(&past).guesses();
        assert_eq!(guesses.len(), COUNTER_GUESSES_MAX - 1, "one past it");
        assert_eq!(
            guesses.first(),
            Some(&(COUNTER_GUESSES_MAX as u64)),
            "latest first"
        );
        assert!(
            !guesses.contains(&1),
            "the oldest of the equally frequent is left out"
        );
    }
}
