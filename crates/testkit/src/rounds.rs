//! A checker thread's rounds, for tests where one thread repeats a check (an auditor reading
//! snapshots, a reader holding them, a reclaimer) while others do the work it checks. Left to
//! the scheduler, such a checker may not run at all before the work is over, and the test
//! then checks nothing. With [`Rounds`] the workers wait for it instead, without timing: for
//! its first round before they start, and for a round that begins while they run.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Counts the rounds of one checker thread, lets other threads wait for them, and tells the
/// checker when to stop.
///
/// The checker runs its rounds with [`Rounds::run`]; the workers call [`Rounds::wait_for`]
/// before they start and [`Rounds::wait_for_fresh`] somewhere in the middle; the test holds a
/// [`Rounds::stop_on_drop`] guard while the workers run. A checker that ends (stopped, or a
/// round panicked) releases every waiter, and a test that panics stops the checker, so a
/// failed check fails the test instead of hanging it.
///
/// # Examples
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tuplekv_testkit::rounds::Rounds;
///
/// let (rounds, work) = (Rounds::default(), AtomicU64::new(0));
/// std::thread::scope(|s| {
///     let checker = s.spawn(|| rounds.run(|| assert!(work.load(Ordering::SeqCst) <= 100)));
///     let stop = rounds.stop_on_drop();
///     rounds.wait_for(1);
///     for i in 0..100 {
///         if i == 50 {
///             rounds.wait_for_fresh();
///         }
///         work.fetch_add(1, Ordering::SeqCst);
///     }
///     drop(stop);
///     assert!(checker.join().unwrap() >= 2);
/// });
/// ```
#[derive(Debug, Default)]
pub struct Rounds {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    begun: u64,
    finished: u64,
    stop: bool,
    ended: bool,
}

/// Marks the checker ended however [`Rounds::run`] is left, a panic included.
struct EndOnDrop<'a>(&'a Rounds);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.update(|s| s.ended = true);
    }
}

/// Stops the checker when dropped; see [`Rounds::stop_on_drop`].
#[derive(Debug)]
#[must_use = "the checker stops when the guard is dropped"]
pub struct StopOnDrop<'a>(&'a Rounds);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl Rounds {
    /// Runs `round` again and again on the calling thread until [`Rounds::stop`] is called
    /// (checked after each round, so it runs at least once), and returns how many rounds ran.
    ///
    /// # Panics
    /// When `round` panics; the waiters are released first.
    pub fn run(&self, mut round: impl FnMut()) -> u64 {
        let _end = EndOnDrop(self);
        loop {
            self.update(|s| s.begun += 1);
            round();
            self.update(|s| s.finished += 1);
            let state = self.lock();
            if state.stop {
                return state.finished;
            }
        }
    }

    /// Tells the checker to stop after its current round.
    pub fn stop(&self) {
        self.update(|s| s.stop = true);
    }

    /// A guard that calls [`Rounds::stop`] when dropped: hold it while the workers run, so
    /// that a worker's panic (which unwinds past it) stops the checker instead of leaving it
    /// running and the test waiting for it forever.
    pub fn stop_on_drop(&self) -> StopOnDrop<'_> {
        StopOnDrop(self)
    }

    /// Waits until the checker has finished `n` rounds in all, or has ended.
    pub fn wait_for(&self, n: u64) {
        self.wait_while(|s| s.finished < n);
    }

    /// Waits until a round that begins after this call has finished, or the checker has
    /// ended: that round checked what was there while the caller was at this point.
    pub fn wait_for_fresh(&self) {
        let begun = self.lock().begun;
        self.wait_while(|s| s.finished <= begun);
    }

    /// How many rounds have finished so far.
    pub fn finished(&self) -> u64 {
        self.lock().finished
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A round that panicked poisons nothing here: the counters are never left half
        // updated, so a poisoned lock's state is as good as any.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    fn wait_while(&self, mut pending: impl FnMut(&State) -> bool) {
        let mut state = self.lock();
        while !state.ended && pending(&state) {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}
