//! The durable database's asynchronous commit (`Store::commit_async`) against a sequential
//! model, with commits run concurrently and faults interleaved.
//!
//! Each write step commits a few operations at once: some through `commit_async` (every
//! future created before any is awaited, so several are outstanding, share batches and the
//! flusher thread leads), the others through the blocking `commit`, each on its own thread.
//! Checked writes read their key before the step, so they race the step's other writes and
//! often conflict against versions not yet published (the settle and retry path). Between
//! write steps come reopens, checkpoints, power cuts and faults: a failed sync (its batch and
//! every later commit fail until the database is reopened) and a full disk once.
//!
//! Checked after every step, in `Sync` mode:
//! - an acknowledged commit's stamp is later than every stamp acknowledged before it started;
//! - applying the acknowledged commits in stamp order to a sequential model gives exactly the
//!   database's keys, values and stamps (so an `Err` commit or a conflict wrote nothing), and
//!   every committed check held in that order;
//! - a conflict has a committed write of its key in the same step to lose to;
//! - a reopen and a power cut keep exactly that state: nothing acknowledged is lost.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use tuplekv_engine::codec::encode_key;
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Durability, Error, Key, Store, Value, Versionstamp, key,
};
use tuplekv_testkit::config::proptest_config;
use tuplekv_testkit::db::dump;
use tuplekv_testkit::durable::faulty;
use tuplekv_testkit::executor::block_on;

/// How many keys the operations touch: few, so that concurrent commits meet.
const KEYS: u8 = 6;
/// The most operations committed at once in one step.
const OPS_PER_STEP_MAX: usize = 6;

/// One commit.
#[derive(Debug, Clone)]
enum Op {
    Set(u8, u64),
    Delete(u8),
    Sum(u8, u64),
    /// Sets the key if it still has the stamp read before the step.
    CheckedSet(u8, u64),
    /// Sets two keys in one commit.
    Pair(u8, u8, u64),
}

/// How an operation is committed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// `commit_async`, its future awaited on the step's own thread.
    Async,
    /// The blocking `commit`, on a thread of its own.
    Thread,
}

/// One step.
#[derive(Debug, Clone)]
enum Step {
    /// Operations committed concurrently; futures awaited last first when the flag is set.
    Batch(Vec<(Op, Mode)>, bool),
    Reopen,
    Checkpoint,
    /// The next sync fails: its batch fails, and every later commit until a reopen.
    FailNextSync,
    /// The next write meets a full disk.
    DiskFullOnce,
    /// Open what a power cut now would leave, beside the database, and check it.
    PowerCut,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEYS, 0u64..100).prop_map(|(k, v)| Op::Set(k, v)),
        1 => (0..KEYS).prop_map(Op::Delete),
        2 => (0..KEYS, 1u64..5).prop_map(|(k, n)| Op::Sum(k, n)),
        3 => (0..KEYS, 0u64..100).prop_map(|(k, v)| Op::CheckedSet(k, v)),
        1 => (0..KEYS, 0..KEYS, 0u64..100).prop_map(|(a, b, v)| Op::Pair(a, b, v)),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![3 => Just(Mode::Async), 2 => Just(Mode::Thread)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (
            proptest::collection::vec((op(), mode()), 1..=OPS_PER_STEP_MAX),
            any::<bool>()
        )
            .prop_map(|(ops, reverse)| Step::Batch(ops, reverse)),
        1 => Just(Step::Reopen),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::FailNextSync),
        1 => Just(Step::DiskFullOnce),
        1 => Just(Step::PowerCut),
    ]
}

fn k(i: u8) -> Key {
    key!["k", u64::from(i)]
}

/// The keys `op` writes.
fn touched(op: &Op) -> Vec<u8> {
    match *op {
        Op::Set(a, _) | Op::Delete(a) | Op::Sum(a, _) | Op::CheckedSet(a, _) => vec![a],
        Op::Pair(a, b, _) => vec![a, b],
    }
}

/// The write of `op`, with `seen` the stamp a checked set requires.
fn write_of(db: &Database, op: &Op, seen: Option<Versionstamp>) -> AtomicWrite {
    let a = db.atomic();
    let a = match *op {
        Op::Set(i, v) => a.set(&k(i), v),
        Op::Delete(i) => a.delete(&k(i)),
        Op::Sum(i, n) => a.sum(&k(i), n),
        Op::CheckedSet(i, v) => a.check(&k(i), seen).set(&k(i), v),
        Op::Pair(i, j, v) => a.set(&k(i), v).set(&k(j), v + 1000),
    };
    a.as_write().clone()
}

/// What one commit of a step answered, and when (on the harness's clock).
struct Outcome {
    start: u64,
    ack: u64,
    result: Result<CommitResult, Error>,
}

/// The sequential model: each key's value and the stamp of the commit that wrote it.
type Model = BTreeMap<Vec<u8>, (u64, Versionstamp)>;

struct Harness {
    dir: tempfile::TempDir,
    faults: Arc<Faults>,
    db: Option<Database>,
    model: Model,
    /// Every acknowledged commit so far: (start, ack, stamp).
    acked: Vec<(u64, u64, Versionstamp)>,
    clock: AtomicU64,
    /// A fault is armed and has not yet been met.
    armed: bool,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        Harness {
            dir,
            faults,
            db: Some(db),
            model: Model::new(),
            acked: Vec::new(),
            clock: AtomicU64::new(0),
            armed: false,
        }
    }

    fn db(&self) -> &Database {
        self.db.as_ref().unwrap()
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Commits `ops` concurrently; their outcomes in the order of `ops`.
    fn commit_concurrently(
        &self,
        writes: Vec<AtomicWrite>,
        modes: &[Mode],
        reverse: bool,
    ) -> Vec<Outcome> {
        let db = self.db();
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        std::thread::scope(|s| {
            let mut threads = Vec::new();
            let mut futures = Vec::new();
            for (i, (write, mode)) in writes.into_iter().zip(modes).enumerate() {
                match mode {
                    Mode::Thread => threads.push((
                        i,
                        s.spawn(move || {
                            let start = self.tick();
                            let result = db.commit(write);
                            let ack = self.tick();
                            Outcome { start, ack, result }
                        }),
                    )),
                    Mode::Async => {
                        let start = self.tick();
                        futures.push((i, start, Box::pin(db.commit_async(write))));
                    }
                }
            }
            if reverse {
                futures.reverse();
            }
            for (i, start, future) in futures {
                let result = block_on(future);
                let ack = self.tick();
                outcomes[i] = Some(Outcome { start, ack, result });
            }
            for (i, thread) in threads {
                outcomes[i] = Some(thread.join().unwrap());
            }
        });
        outcomes.into_iter().map(Option::unwrap).collect()
    }

    fn batch(&mut self, ops: &[(Op, Mode)], reverse: bool) -> Result<(), String> {
        // Checked sets require what their key holds before the step.
        let seen: Vec<Option<Versionstamp>> = ops
            .iter()
            .map(|(op, _)| {
                self.db()
                    .get(&k(touched(op)[0]))
                    .unwrap()
                    .map(|e| e.versionstamp)
            })
            .collect();
        let writes = ops
            .iter()
            .zip(&seen)
            .map(|((op, _), seen)| write_of(self.db(), op, *seen))
            .collect();
        let modes: Vec<Mode> = ops.iter().map(|(_, m)| *m).collect();
        let outcomes = self.commit_concurrently(writes, &modes, reverse);

        let mut committed = Vec::new();
        let mut conflicts = Vec::new();
        let mut failed = false;
        for (i, outcome) in outcomes.iter().enumerate() {
            match &outcome.result {
                Ok(CommitResult::Committed { versionstamp, .. }) => {
                    committed.push((*versionstamp, i));
                }
                Ok(_) => conflicts.push(i),
                Err(e) if self.armed => {
                    let _ = e;
                    failed = true;
                }
                Err(e) => return Err(format!("{:?} failed with no fault armed: {e}", ops[i])),
            }
        }
        self.check_acknowledgement_order(&outcomes)?;
        committed.sort();
        for &(stamp, i) in &committed {
            self.apply(&ops[i].0, seen[i], stamp)?;
        }
        for i in conflicts {
            let Op::CheckedSet(key, _) = ops[i].0 else {
                return Err(format!("{:?} conflicted with no check", ops[i].0));
            };
            if !committed
                .iter()
                .any(|&(_, j)| touched(&ops[j].0).contains(&key))
            {
                return Err(format!(
                    "{:?} conflicted though no write of its key committed",
                    ops[i].0
                ));
            }
        }
        if failed {
            self.met_fault()?;
        }
        Ok(())
    }

    /// Each acknowledged commit's stamp is later than every stamp acknowledged before it
    /// started.
    fn check_acknowledgement_order(&mut self, outcomes: &[Outcome]) -> Result<(), String> {
        let new: Vec<(u64, u64, Versionstamp)> = outcomes
            .iter()
            .filter_map(|o| match &o.result {
                Ok(r) => r.versionstamp().map(|vs| (o.start, o.ack, vs)),
                Err(_) => None,
            })
            .collect();
        self.acked.extend(new.iter().copied());
        for &(start, _, stamp) in &new {
            for &(_, ack, earlier) in &self.acked {
                if ack < start && earlier >= stamp {
                    return Err(format!(
                        "stamp {stamp} started after {earlier} was acknowledged"
                    ));
                }
            }
        }
        let mut stamps: Vec<Versionstamp> = self.acked.iter().map(|a| a.2).collect();
        stamps.sort();
        if stamps.windows(2).any(|w| w[0] == w[1]) {
            return Err("two acknowledged commits share a stamp".into());
        }
        Ok(())
    }

    /// Applies a committed `op` to the model at `stamp`.
    fn apply(
        &mut self,
        op: &Op,
        seen: Option<Versionstamp>,
        stamp: Versionstamp,
    ) -> Result<(), String> {
        let m = &mut self.model;
        match *op {
            Op::Set(i, v) => {
                m.insert(encode_key(&k(i)), (v, stamp));
            }
            Op::Delete(i) => {
                m.remove(&encode_key(&k(i)));
            }
            Op::Sum(i, n) => {
                let key = encode_key(&k(i));
                let old = m.get(&key).map_or(0, |e| e.0);
                m.insert(key, (old.wrapping_add(n), stamp));
            }
            Op::CheckedSet(i, v) => {
                let key = encode_key(&k(i));
                let now = m.get(&key).map(|e| e.1);
                if now != seen {
                    return Err(format!(
                        "{op:?} committed at {stamp} though the key's stamp was {now:?}, not {seen:?}"
                    ));
                }
                m.insert(key, (v, stamp));
            }
            Op::Pair(i, j, v) => {
                m.insert(encode_key(&k(i)), (v, stamp));
                m.insert(encode_key(&k(j)), (v + 1000, stamp));
            }
        }
        Ok(())
    }

    /// A commit or checkpoint met the armed fault: a full disk leaves the database going; a
    /// failed sync stopped it, so it is reopened.
    fn met_fault(&mut self) -> Result<(), String> {
        self.faults.disk_has_space();
        if self.db().sync().is_ok() {
            self.armed = false;
            Ok(())
        } else {
            self.reopen()
        }
    }

    /// Closes and reopens the database; it must hold exactly what the model holds.
    fn reopen(&mut self) -> Result<(), String> {
        let closed = self.db.take().unwrap().close();
        let options = || faulty(&self.faults, Durability::Sync);
        let db = match Database::open(self.dir.path(), options()) {
            Ok(db) => db,
            // Opening met the armed fault (it syncs the segment it starts): once more.
            Err(Error::Io { .. }) if self.armed => {
                self.faults.disk_has_space();
                self.armed = false;
                Database::open(self.dir.path(), options()).unwrap()
            }
            Err(e) => return Err(format!("reopening failed: {e}")),
        };
        self.db = Some(db);
        if let Err(e) = closed {
            if !self.armed {
                return Err(format!("closing failed with no fault armed: {e}"));
            }
            self.armed = false;
        }
        Ok(())
    }

    fn power_cut(&self) -> Result<(), String> {
        let image = tempfile::tempdir().unwrap();
        self.faults
            .power_cut_image(self.dir.path(), image.path())
            .unwrap();
        let crashed = Database::open(image.path(), faulty(&Faults::new(), Durability::Sync))
            .map_err(|e| format!("a power cut image does not open: {e}"))?;
        same(&crashed, &self.model).map_err(|e| format!("after a power cut: {e}"))
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Batch(ops, reverse) => self.batch(ops, *reverse)?,
            Step::Reopen => self.reopen()?,
            Step::Checkpoint => match self.db().checkpoint() {
                Ok(_) => {}
                Err(_) if self.armed => self.met_fault()?,
                Err(e) => return Err(format!("checkpoint failed: {e}")),
            },
            Step::FailNextSync if !self.armed => {
                self.faults.fail_next_syncs(1);
                self.armed = true;
            }
            Step::DiskFullOnce if !self.armed => {
                self.faults.disk_full_after(0);
                self.armed = true;
            }
            Step::FailNextSync | Step::DiskFullOnce => {}
            Step::PowerCut => self.power_cut()?,
        }
        same(self.db(), &self.model)
    }
}

/// Whether `db` holds exactly the model's keys, values and stamps.
fn same(db: &Database, model: &Model) -> Result<(), String> {
    let got: Vec<(Vec<u8>, Value, Versionstamp)> = dump(db);
    let want: Vec<(Vec<u8>, Value, Versionstamp)> = model
        .iter()
        .map(|(key, (v, vs))| (key.clone(), Value::U64(*v), *vs))
        .collect();
    if got == want {
        Ok(())
    } else {
        Err(format!("database {got:?}\nmodel    {want:?}"))
    }
}

proptest! {
    #![proptest_config(proptest_config(16, "durable_async_model.txt"))]

    /// Concurrent asynchronous and blocking commits, with reopens, checkpoints, failed syncs,
    /// full disks and power cuts, against commits applied one by one in stamp order.
    #[test]
    fn concurrent_async_commits_match_a_sequential_model_through_faults(
        steps in proptest::collection::vec(step(), 1..30),
    ) {
        let mut h = Harness::new();
        for s in &steps {
            let checked = h.step(s);
            prop_assert!(checked.is_ok(), "after {:?}: {}", s, checked.unwrap_err());
        }
        // Everything acknowledged survives a final reopen.
        let reopened = h.reopen().and_then(|()| same(h.db(), &h.model));
        prop_assert!(reopened.is_ok(), "after the final reopen: {}", reopened.unwrap_err());
    }
}
