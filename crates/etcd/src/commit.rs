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
//! and the marker, claims the versionstamp `G` followed by `00 01` (between the stamp of
//! revision `G` and that of `G + 1`), writes it into its keys and into its values' envelopes,
//! and compares the marker with what it read. The comparison holds only if no commit of the
//! store landed since the read, so every earlier commit has a smaller stamp (a revision of at
//! most `G`), every later one a larger (a revision above `G`), and no two commits claim one
//! stamp. Such a commit conflicts with every commit of the store made meanwhile and is tried
//! again, at most [`STAMPED_COMMIT_ATTEMPTS_MAX`] times. A check of a stamp that is not a
//! revision compares the `mod_revision` read of a value carrying that stamp.
//!
//! A commit with range checks also compares the `mod_revision` of the collection fence
//! (module `collect`) with the state it last saw, and conflicts when the fence's bound is
//! above a range check's snapshot: the collector may have removed a tombstone written after
//! that snapshot, which the range comparison can no longer see.

use std::collections::HashMap;

use etcd_client::{Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Conflict, Error, Expiry, FailedCheck, KeyBytes, Mutation,
    MutationKind, Value, Versionstamp, sum_numbers, versionstamped_key,
};

use crate::envelope::{self, Stored};
use crate::errors::write_error;
use crate::{Space, TXN_OPS_MAX, now_ms};

/// Most times one commit is sent when its sum/min/max guesses (or the tombstones its checks
/// expected) turn out stale; then [`Error::TransactionConflict`].
pub const COMMIT_ATTEMPTS_MAX: u32 = 16;

/// Most times a commit with versionstamped keys is sent: it is tried again whenever another
/// commit of the store lands between its read of the current revision and its transaction,
/// so under a heavy write load it can give [`Error::TransactionConflict`].
pub const STAMPED_COMMIT_ATTEMPTS_MAX: u32 = 64;

/// The two bytes after the revision in the versionstamp a commit with versionstamped keys
/// claims: above the stamp of that revision's commit, below the next revision's.
const CLAIMED_SUFFIX: [u8; 2] = [0, 1];

/// The last state seen of one etcd key.
#[derive(Debug, Clone)]
struct Observed {
    /// 0 when the key did not exist.
    mod_revision: i64,
    stored: Option<Stored>,
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

/// The versionstamp claimed when the current revision is `head`.
fn claimed_stamp(head: i64) -> Versionstamp {
    let mut bytes = [0u8; 10];
    bytes[..8].copy_from_slice(&u64::try_from(head).unwrap_or(0).to_be_bytes());
    bytes[8..].copy_from_slice(&CLAIMED_SUFFIX);
    Versionstamp::from_bytes(bytes)
}

/// Whether `stamp` is a revision's (its last two bytes zero), not a claimed one.
fn is_revision(stamp: Versionstamp) -> bool {
    stamp.as_bytes()[8..] == [0, 0]
}

/// What a key holds after a commit's mutations: a value with its deadline, or nothing.
type Staged = Option<(Value, Option<u64>)>;

/// One attempt's transaction, and what its `else` branch reads.
struct Plan {
    txn: Txn,
    /// The etcd keys the `else` branch reads, in order, then one count per range check.
    reads: Vec<Vec<u8>>,
}

/// Commits `write` under `space`.
pub(crate) async fn commit(
    mut kv: KvClient,
    space: Space,
    write: AtomicWrite,
) -> Result<CommitResult, Error> {
    write.validate()?;
    if !write.numbering.is_empty() {
        return Err(Error::Unsupported {
            operation: "numbers assigned at commit",
            needs: "numbering in etcd transactions",
        });
    }
    let stamped = write
        .mutations
        .iter()
        .any(|m| matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. }));
    let compares = 2 * (write.checks.len() + write.mutations.len()) + write.range_checks.len() + 2;
    if compares > TXN_OPS_MAX {
        return Err(Error::Unsupported {
            operation: "a commit needing more etcd comparisons than TXN_OPS_MAX (4096)",
            needs: "fewer checks, sum/min/max mutations and range checks in one commit",
        });
    }
    let mut known: HashMap<Vec<u8>, Observed> = HashMap::new();
    let marker = space.marker();
    // What a claim needs (the current revision and the marker), and the values carrying the
    // claimed stamps that checks name, read before the first attempt.
    let mut first_reads: Vec<Vec<u8>> = Vec::new();
    if stamped {
        first_reads.push(marker.clone());
    }
    for check in &write.checks {
        if check.versionstamp.is_some_and(|vs| !is_revision(vs)) {
            first_reads.push(space.data(&check.key));
        }
    }
    let mut head = 0;
    if !first_reads.is_empty() {
        let gets: Vec<TxnOp> = first_reads
            .iter()
            .map(|k| TxnOp::get(k.clone(), None))
            .collect();
        let response = kv
            .txn(Txn::new().and_then(gets))
            .await
            .map_err(|e| crate::errors::read_error(e, 0))?;
        head = header_revision(response.header()).ok_or_else(|| Error::Unavailable {
            reason: "etcd answered a read without its revision".into(),
        })?;
        learn(&mut known, &marker, &first_reads, &response.op_responses())?;
    }
    let attempts = if stamped {
        STAMPED_COMMIT_ATTEMPTS_MAX
    } else {
        COMMIT_ATTEMPTS_MAX
    };
    let fence = space.fence();
    let oldest_since = write.range_checks.iter().map(|rc| rc.since.version()).min();
    if oldest_since.is_some() {
        let (mod_revision, bound) = space.fence_seen();
        known.insert(
            fence.clone(),
            Observed {
                mod_revision,
                stored: (mod_revision != 0).then(|| Stored {
                    value: Some(Value::U64(bound)),
                    deadline: envelope::NO_DEADLINE,
                    stamp: None,
                }),
            },
        );
    }
    for _ in 0..attempts {
        let now = now_ms();
        let claim = stamped.then(|| Claim {
            stamp: claimed_stamp(head),
            marker_revision: known.get(&marker).map_or(0, |o| o.mod_revision),
        });
        if let (Some(since), Some(seen)) = (oldest_since, known.get(&fence)) {
            space.saw_fence(seen.mod_revision, fence_bound(seen));
            if fence_bound(seen) > since {
                // A tombstone newer than the snapshot may be gone: the range may have changed.
                return Ok(CommitResult::Conflict(Conflict {
                    failed_checks: Vec::new(),
                    range_changed: true,
                }));
            }
        }
        if write
            .range_checks
            .iter()
            .any(|rc| rc.expires_at.is_some_and(|d| d <= now))
        {
            return Ok(CommitResult::Conflict(Conflict {
                failed_checks: Vec::new(),
                range_changed: true,
            }));
        }
        let plan = plan(&write, &space, &known, now, claim)?;
        let response = kv.txn(plan.txn).await.map_err(write_error)?;
        let revision = header_revision(response.header());
        if response.succeeded() {
            let versionstamp = match (claim, revision) {
                (Some(claim), _) => claim.stamp,
                (None, Some(revision)) => Versionstamp::from_version(revision.unsigned_abs()),
                (None, None) => {
                    return Err(Error::OutcomeUnknown {
                        reason: "etcd answered the commit without its revision".into(),
                    });
                }
            };
            return Ok(CommitResult::committed(versionstamp));
        }
        // Nothing was applied: a refused transaction without its revision is no commit.
        head = revision.ok_or_else(|| Error::Unavailable {
            reason: "etcd answered a refused commit without its revision".into(),
        })?;
        let range_changed = learn(&mut known, &marker, &plan.reads, &response.op_responses())?;
        let conflict = Conflict {
            failed_checks: failed_checks(&write, &space, &known, now_ms()),
            range_changed,
        };
        if !conflict.failed_checks.is_empty() || conflict.range_changed {
            return Ok(CommitResult::Conflict(conflict));
        }
        // A guess was stale (a sum's operand, a tombstone's revision, the marker a claim
        // needs): again, with what the `else` branch read.
    }
    Err(Error::TransactionConflict { attempts })
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

/// The checks that do not hold in `known` at `now`.
fn failed_checks(
    write: &AtomicWrite,
    space: &Space,
    known: &HashMap<Vec<u8>, Observed>,
    now: u64,
) -> Vec<FailedCheck> {
    write
        .checks
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
                    },
                    Some(kv) if kv.key() == marker => Observed {
                        mod_revision: kv.mod_revision(),
                        stored: None,
                    },
                    Some(kv) => Observed {
                        mod_revision: kv.mod_revision(),
                        stored: Some(envelope::decode(kv.key(), kv.value())?),
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

/// The transaction of one attempt at `now`, from what `known` holds, making `claim` if given.
fn plan(
    write: &AtomicWrite,
    space: &Space,
    known: &HashMap<Vec<u8>, Observed>,
    now: u64,
    claim: Option<Claim>,
) -> Result<Plan, Error> {
    let mut compares = Vec::new();
    let mut reads: Vec<Vec<u8>> = Vec::new();
    let mut read_set = std::collections::HashSet::new();
    let mut read = |key: &Vec<u8>, reads: &mut Vec<Vec<u8>>| {
        if read_set.insert(key.clone()) {
            reads.push(key.clone());
        }
    };
    for check in &write.checks {
        let key = space.data(&check.key);
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
    let mut staged: Vec<(KeyBytes, Staged)> = Vec::new();
    let mut at: HashMap<KeyBytes, usize> = HashMap::new();
    for (index, m) in write.mutations.iter().enumerate() {
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
            Some((_, earlier)) => {
                let current = earlier
                    .as_ref()
                    .filter(|(_, d)| d.is_none_or(|d| d > now))
                    .map(|(v, _)| v);
                *earlier = apply(&m.kind, current, now, index, &m.key)?;
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
                read(&key, &mut reads);
                apply(&m.kind, current, now, index, &m.key)?
            }
            None => apply(&m.kind, None, now, index, &m.key)?,
        };
        at.insert(m.key.clone(), staged.len());
        staged.push((m.key.clone(), result));
    }
    let mut puts: Vec<TxnOp> = staged
        .iter()
        .map(|(key, result)| {
            let value = match result {
                Some((v, deadline)) => envelope::encode(v, *deadline, claim.map(|c| c.stamp)),
                None => envelope::tombstone(),
            };
            TxnOp::put(space.data(key), value, None)
        })
        .collect();
    // Every commit writes the marker: etcd gives a transaction without a write no revision,
    // and a claim compares the marker's `mod_revision` with the store's last commit.
    puts.push(TxnOp::put(marker, Vec::new(), None));
    let mut else_ops: Vec<TxnOp> = reads.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
    for rc in &write.range_checks {
        let since = revision_of(rc.since);
        let (start, end) = (space.data(&rc.start), space.data(&rc.end));
        compares.push(
            Compare::mod_revision(start.clone(), CompareOp::Less, since.saturating_add(1))
                .with_range(end.clone()),
        );
        let options = GetOptions::new()
            .with_range(end)
            .with_min_mod_revision(since.saturating_add(1))
            .with_count_only();
        else_ops.push(TxnOp::get(start, Some(options)));
    }
    Ok(Plan {
        txn: Txn::new().when(compares).and_then(puts).or_else(else_ops),
        reads,
    })
}

/// What mutation `index` (of `kind`) leaves at its key, given the key's live value.
fn apply(
    kind: &MutationKind,
    current: Option<&Value>,
    now: u64,
    index: usize,
    key: &KeyBytes,
) -> Result<Staged, Error> {
    let u64_op = |op: &'static str, n: u64, f: fn(u64, u64) -> u64| match current {
        None => Ok(Some((Value::U64(n), None))),
        Some(Value::U64(old)) => Ok(Some((Value::U64(f(*old, n)), None))),
        Some(_) => Err(Error::NotU64 {
            op,
            index,
            key: key.clone(),
        }),
    };
    match kind {
        MutationKind::Set { value, expiry }
        | MutationKind::SetSuffixVersionstampedKey { value, expiry } => {
            let deadline = expiry.map(|e| match e {
                Expiry::In(d) => {
                    now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }
                Expiry::At(deadline) => deadline,
            });
            Ok(Some((value.clone(), deadline)))
        }
        MutationKind::Delete => Ok(None),
        MutationKind::Sum(n) => u64_op("sum", *n, u64::wrapping_add),
        MutationKind::Min(n) => u64_op("min", *n, u64::min),
        MutationKind::Max(n) => u64_op("max", *n, u64::max),
        MutationKind::SumBounded(sum) => Ok(Some((
            sum_numbers(
                &sum.operand,
                sum.min.as_ref(),
                sum.max.as_ref(),
                sum.clamp,
                current,
            )?,
            None,
        ))),
    }
}
