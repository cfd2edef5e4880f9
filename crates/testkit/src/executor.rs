//! The smallest executor, for tests of the engine's futures (`KeyWatch::next`,
//! `Store::commit_async`): run one future on the test's thread, or poll it once.
//!
//! [`block_on`] fails the test when a pending future is not woken within [`WAKE_WITHIN`]:
//! a lost wake-up is a bug to see, not a slow test.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a pending future may wait for its wake-up before [`block_on`] panics.
pub const WAKE_WITHIN: Duration = Duration::from_secs(60);

/// Records a wake-up and unparks the waiting thread.
struct Wakeup {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Runs `future` to completion on this thread, polling it again only when it was woken.
///
/// # Panics
/// If the future, pending, is not woken within [`WAKE_WITHIN`].
pub fn block_on<F: Future>(future: F) -> F::Output {
    let wakeup = Arc::new(Wakeup {
        woken: AtomicBool::new(false),
        thread: std::thread::current(),
    });
    let waker = Waker::from(Arc::clone(&wakeup));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        let deadline = Instant::now() + WAKE_WITHIN;
        while !wakeup.woken.swap(false, Ordering::AcqRel) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "a pending future was not woken within {WAKE_WITHIN:?}: a lost wake-up"
            );
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// Polls `future` once, with a waker that does nothing.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(future).poll(&mut cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_woken_from_another_thread_completes() {
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let mut ready = false;
        let waker_thread = std::thread::spawn(move || {
            let waker = rx.recv().expect("a waker");
            waker.wake();
        });
        let mut sent = Some(tx);
        let out = block_on(std::future::poll_fn(|cx| {
            if ready {
                return Poll::Ready(7);
            }
            ready = true;
            if let Some(tx) = sent.take() {
                tx.send(cx.waker().clone()).expect("send");
            }
            Poll::Pending
        }));
        assert_eq!(out, 7);
        waker_thread.join().expect("join");
    }
}
