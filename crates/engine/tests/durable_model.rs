//! The durable database against the in-memory engine as its model, over random operations
//! with reopens, checkpoints and faults interleaved: a failed sync (the database stops; it is
//! reopened), a full disk (the commit that meets it fails, the database goes on) and power
//! cuts (what a power cut leaves is opened beside it).
//!
//! After every step both hold the same keys and values, and their versionstamps map one to one
//! in the same order (a commit that failed on a full disk uses a version the model never
//! does, so the stamps themselves may differ). A failed commit changes nothing. In `Sync`
//! mode a power cut loses nothing; in `Buffered` mode it keeps a prefix of the history that
//! holds everything synced.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, Error, Value, Versionstamp, key};
use tuplekv_testkit::config::proptest_config;
use tuplekv_testkit::db::{dump, options};
use tuplekv_testkit::durable::{BUFFERED, faulty};

/// One step.
#[derive(Debug, Clone)]
enum Step {
    Set(u8, u8),
    Delete(u8),
    Sum(u8, u64),
    CheckedSet(u8, u8),
    Reopen,
    Checkpoint,
    Sync,
    /// The next sync fails (the database stops and is reopened after the step that meets it).
    FailNextSync,
    /// The next write meets a full disk (its commit fails, the database goes on).
    DiskFullOnce,
    /// Open what a power cut now would leave, beside the database, and check it.
    PowerCut,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Step::Set(k, v)),
        2 => (0u8..12).prop_map(Step::Delete),
        2 => (0u8..12, 0u64..5).prop_map(|(k, n)| Step::Sum(k, n)),
        2 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Step::CheckedSet(k, v)),
        1 => Just(Step::Reopen),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Sync),
        1 => Just(Step::FailNextSync),
        1 => Just(Step::DiskFullOnce),
        1 => Just(Step::PowerCut),
    ]
}

/// Runs a write step; its outcome in a comparable form (an engine error is `Err`).
fn run(db: &Database, step: &Step) -> Result<bool, Error> {
    match step {
        Step::Set(k, v) => db.set(&key!["k", *k], vec![*v]).map(|_| true),
        Step::Delete(k) => db.delete(&key!["k", *k]).map(|_| true),
        Step::Sum(k, n) => db
            .atomic()
            .sum(&key!["k", *k], *n)
            .commit()
            .map(|r| r.is_committed()),
        Step::CheckedSet(k, v) => {
            let key = key!["k", *k];
            let seen = db.get(&key).unwrap().map(|e| e.versionstamp);
            db.atomic()
                .check(&key, seen)
                .set(&key, vec![*v])
                .commit()
                .map(|r| r.is_committed())
        }
        _ => unreachable!("not a write step"),
    }
}

type Entries = Vec<(Vec<u8>, Value, Versionstamp)>;

fn contents(entries: &Entries) -> Vec<(Vec<u8>, Value)> {
    entries
        .iter()
        .map(|(k, v, _)| (k.clone(), v.clone()))
        .collect()
}

/// Whether `got` holds the same keys and values as `want`, with versionstamps that map one to
/// one and in the same order.
fn same_up_to_stamps(got: &Entries, want: &Entries) -> Result<(), String> {
    if contents(got) != contents(want) {
        return Err(format!("durable {got:?}\nmodel   {want:?}"));
    }
    let mut pairs: BTreeMap<Versionstamp, Versionstamp> = BTreeMap::new();
    for ((_, _, g), (_, _, w)) in got.iter().zip(want) {
        if *pairs.entry(*w).or_insert(*g) != *g {
            return Err(format!("model stamp {w} maps to two durable stamps"));
        }
    }
    let durable: Vec<Versionstamp> = pairs.values().copied().collect();
    if durable.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("stamps out of order: {pairs:?}"));
    }
    Ok(())
}

struct Harness {
    dir: tempfile::TempDir,
    faults: Arc<Faults>,
    durability: Durability,
    db: Option<Database>,
    model: Database,
    /// The contents after every committed write, oldest first (the first is empty).
    history: Vec<Vec<(Vec<u8>, Value)>>,
    /// The index in `history` of the newest state known to be on stable storage.
    synced: usize,
    /// A fault is armed and has not yet been met.
    armed: bool,
}

impl Harness {
    fn new(durability: Durability) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, durability)).unwrap();
        let model = Database::with_options(options());
        Harness {
            dir,
            faults,
            durability,
            db: Some(db),
            model,
            history: vec![Vec::new()],
            synced: 0,
            armed: false,
        }
    }

    fn db(&self) -> &Database {
        self.db.as_ref().unwrap()
    }

    /// Closes and reopens the database. If closing failed on an armed fault (its final sync),
    /// the reopened database holds a synced prefix, which the model then follows.
    fn reopen(&mut self) {
        let closed = self.db.take().unwrap().close();
        let options = || faulty(&self.faults, self.durability);
        let mut reopened_twice = false;
        let db = match Database::open(self.dir.path(), options()) {
            Ok(db) => db,
            // Opening met the armed fault (it syncs the segment it starts): try once more.
            Err(Error::Io { .. }) if self.armed => {
                self.faults.disk_has_space();
                reopened_twice = true;
                Database::open(self.dir.path(), options()).unwrap()
            }
            Err(e) => panic!("reopening failed: {e}"),
        };
        self.db = Some(db);
        match closed {
            Ok(()) => self.durable_now(),
            Err(e) => {
                assert!(self.armed, "closing failed with no fault armed: {e}");
                self.armed = false;
                self.follow_reopened();
            }
        }
        if reopened_twice {
            // The first open met the armed fault and consumed it.
            self.armed = false;
        }
    }

    /// Marks the current state durable (a successful sync, or `Sync` mode's commit).
    fn durable_now(&mut self) {
        self.synced = self.history.len() - 1;
    }

    fn write(&mut self, step: &Step) -> Result<(), String> {
        match run(self.db(), step) {
            Ok(got) => {
                let want = run(&self.model, step).map_err(|e| e.to_string());
                if Ok(got) != want {
                    return Err(format!("durable {got:?}, model {want:?}"));
                }
                if got {
                    self.history.push(contents(&dump(&self.model)));
                    if self.durability == Durability::Sync {
                        self.durable_now();
                    }
                }
            }
            Err(Error::Io { .. }) if self.armed => self.met_fault(),
            Err(e) => {
                // A refused mutation (sum on bytes) is refused by the model too.
                let want = run(&self.model, step);
                if want.as_ref().map_err(ToString::to_string) != Err(e.to_string()) {
                    return Err(format!("durable {e}, model {want:?}"));
                }
            }
        }
        Ok(())
    }

    /// A commit, sync or checkpoint met the armed fault and failed: a full disk leaves the
    /// database going; a failed sync stopped it, so it is reopened.
    fn met_fault(&mut self) {
        self.faults.disk_has_space();
        if self.db().sync().is_ok() {
            self.armed = false;
        } else {
            self.reopen();
        }
    }

    /// After a failed sync and a reopen: the database holds a state at or after the newest
    /// synced one (buffered commits acknowledged since may be lost), and the model follows.
    fn follow_reopened(&mut self) {
        let kept = contents(&dump(self.db()));
        let at = self.history[self.synced..]
            .iter()
            .rposition(|h| *h == kept)
            .map(|i| i + self.synced);
        let at = at.unwrap_or_else(|| panic!("reopened state {kept:?} is not a synced prefix"));
        if at + 1 != self.history.len() {
            // Rebuilt in the durable stamps' order, so the two keep mapping in order.
            self.model = Database::with_options(options());
            let mut entries = dump(self.db());
            entries.sort_by_key(|(_, _, vs)| *vs);
            for (k, v, _) in entries {
                self.model.set_raw(&k, v).unwrap();
            }
            self.history.truncate(at + 1);
        }
        self.synced = at;
    }

    fn power_cut(&self) -> Result<(), String> {
        let image = tempfile::tempdir().unwrap();
        self.faults
            .power_cut_image(self.dir.path(), image.path())
            .unwrap();
        let crashed = Database::open(image.path(), faulty(&Faults::new(), Durability::Sync))
            .map_err(|e| format!("a power cut image does not open: {e}"))?;
        let kept = contents(&dump(&crashed));
        if !self.history[self.synced..].contains(&kept) {
            return Err(format!(
                "a power cut kept {kept:?}, not a prefix holding everything synced ({:?})",
                self.history[self.synced]
            ));
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Reopen => self.reopen(),
            Step::Checkpoint | Step::Sync => {
                let done = match step {
                    Step::Sync => self.db().sync().map(|_| ()),
                    _ => self.db().checkpoint().map(|_| ()),
                };
                match done {
                    Ok(()) => self.durable_now(),
                    Err(_) if self.armed => self.met_fault(),
                    Err(e) => return Err(format!("{step:?} failed: {e}")),
                }
            }
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
            write => self.write(write)?,
        }
        same_up_to_stamps(&dump(self.db()), &dump(&self.model))
    }
}

proptest! {
    #![proptest_config(proptest_config(24, "durable_model.txt"))]

    /// Random operations with reopens, checkpoints, failed syncs, full disks and power cuts.
    #[test]
    fn a_durable_database_matches_the_in_memory_engine_through_faults_and_reopens(
        steps in proptest::collection::vec(step(), 1..60),
        buffered in any::<bool>(),
    ) {
        let mut h = Harness::new(if buffered { BUFFERED } else { Durability::Sync });
        for s in &steps {
            let checked = h.step(s);
            prop_assert!(checked.is_ok(), "after {:?}: {}", s, checked.unwrap_err());
        }
    }
}
