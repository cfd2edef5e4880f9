//! [`Faulty`]: the in-memory engine behind a [`Store`] that fails on demand, for the tests of
//! what a sequence does when its store errs, panics or loses a race: the next commits can
//! return an error, panic, or find the counter just moved by a rival handle.
#![allow(dead_code, reason = "each test file uses part of it")]

use std::sync::{Arc, Mutex};

use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Error, ReadView, Store, Value, Versionstamp,
};

/// What the next commits do.
#[derive(Debug, Default)]
struct Plan {
    /// This many commits fail with an I/O error.
    fail: u64,
    /// The commit this many commits from now panics (0: none).
    panic_in: u64,
    /// Before each of this many commits, a rival rewrites this counter key.
    rivals: u64,
    counter: Vec<u8>,
    /// Commits that reached the engine.
    committed: u64,
    /// This many commits lose their answer (`Error::OutcomeUnknown`), after being applied if
    /// `lost_applied`.
    lose: u64,
    lost_applied: bool,
}

/// A store that fails on demand; clones share the plan.
#[derive(Debug, Clone)]
pub(crate) struct Faulty {
    pub(crate) db: Database,
    plan: Arc<Mutex<Plan>>,
}

impl Faulty {
    pub(crate) fn new() -> Faulty {
        Faulty {
            db: Database::in_memory(),
            plan: Arc::default(),
        }
    }

    /// The next `n` commits fail with an I/O error and change nothing.
    pub(crate) fn fail_commits(&self, n: u64) {
        self.plan.lock().unwrap().fail = n;
    }

    /// The next `n` commits lose their answer: each fails with `Error::OutcomeUnknown`, after
    /// it was applied if `applied`, else without being applied.
    pub(crate) fn lose_answers(&self, n: u64, applied: bool) {
        let mut plan = self.plan.lock().unwrap();
        plan.lose = n;
        plan.lost_applied = applied;
    }

    /// The `k`-th commit from now (1: the next) panics before it reaches the engine.
    pub(crate) fn panic_on_commit(&self, k: u64) {
        self.plan.lock().unwrap().panic_in = k;
    }

    /// Before each of the next `n` commits, a rival handle rewrites the existing `counter`
    /// with its own value, so a commit checking the counter's versionstamp fails.
    pub(crate) fn rival_commits(&self, n: u64, counter: &[u8]) {
        let mut plan = self.plan.lock().unwrap();
        plan.rivals = n;
        plan.counter = counter.to_vec();
    }

    /// Commits that reached the engine (failed, panicked and rival ones not counted).
    pub(crate) fn committed(&self) -> u64 {
        self.plan.lock().unwrap().committed
    }

    /// The `U64` at `key`.
    pub(crate) fn u64_at(&self, key: &[u8]) -> Option<u64> {
        self.db
            .snapshot()
            .get_raw(key)
            .unwrap()
            .map(|e| e.value.as_u64().unwrap())
    }
}

impl Store for Faulty {
    type Snapshot = <Database as Store>::Snapshot;
    type Watch = tuplekv_engine::Watch;

    fn watch_raw(
        &self,
        keys: Vec<tuplekv_engine::KeyBytes>,
    ) -> Result<Self::Watch, tuplekv_engine::Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot(&self) -> Self::Snapshot {
        self.db.snapshot()
    }

    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> Versionstamp {
        <Database as Store>::snapshot_versionstamp(snapshot)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        {
            let mut plan = self.plan.lock().unwrap();
            if plan.panic_in > 0 {
                plan.panic_in -= 1;
                if plan.panic_in == 0 {
                    drop(plan);
                    panic!("the store panicked (on purpose)");
                }
            }
            if plan.fail > 0 {
                plan.fail -= 1;
                return Err(Error::Io(tuplekv_engine::IoError::new(
                    "writing the log (on purpose)",
                    std::io::Error::other("injected failure"),
                )));
            }
            if plan.rivals > 0 {
                plan.rivals -= 1;
                let value = self
                    .u64_at(&plan.counter)
                    .expect("the rival needs a counter");
                self.db.set_raw(&plan.counter, Value::U64(value)).unwrap();
            }
            plan.committed += 1;
            if plan.lose > 0 {
                plan.lose -= 1;
                if plan.lost_applied {
                    let _ = self.db.commit(write)?;
                }
                return Err(Error::outcome_unknown("the connection closed (on purpose)"));
            }
        }
        self.db.commit(write)
    }
}
