//! Where a store's work runs: its own runtime or the caller's, the tasks it spawns there
//! (stopped with the last handle), and how a blocking call finds out whether waiting on this
//! thread could deadlock (see "How it talks" in the crate docs).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::task::{AbortHandle, JoinSet};
use tuplekv_engine::Error;

thread_local! {
    /// The current-thread runtime this thread was last seen running a store's work on: the
    /// thread that drives it, on which a blocking call would wait for itself.
    static DRIVES: Cell<Option<tokio::runtime::Id>> = const { Cell::new(None) };
}

/// How the calling thread stands to a store's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// Not in the runtime's context: on no runtime, or on another one.
    Outside,
    /// In the context of the store's runtime, a multi-thread one.
    MultiThread,
    /// In the context of the store's current-thread runtime, on the thread that drives it.
    Driver,
    /// In the context of the store's current-thread runtime, on another thread (one of its
    /// blocking threads, or a thread the driver was not seen on yet).
    Beside,
}

/// The tasks a store spawned on its runtime: hyper's connection tasks, watches, the requests
/// of blocking calls. Aborted together by [`Tasks::close`] when the last handle goes, so a
/// store on the caller's runtime leaves nothing running there.
pub(crate) struct Tasks {
    handle: Handle,
    /// `None` once closed.
    set: Mutex<Option<JoinSet<()>>>,
}

impl Tasks {
    pub(crate) fn new(handle: Handle) -> Self {
        Tasks {
            handle,
            set: Mutex::new(Some(JoinSet::new())),
        }
    }

    /// Spawns `fut` on the store's runtime; once closed, the task is aborted at once.
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) -> AbortHandle {
        let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        match set.as_mut() {
            Some(set) => {
                // Forget the tasks that are done, so the set stays as small as what runs.
                while set.try_join_next().is_some() {}
                set.spawn_on(fut, &self.handle)
            }
            None => {
                let task = self.handle.spawn(fut).abort_handle();
                task.abort();
                task
            }
        }
    }

    /// Spawns `fut` and returns a handle to its output that aborts the task when dropped.
    pub(crate) fn spawn_joined<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Joined<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = self.spawn(async move {
            let _ = tx.send(fut.await);
        });
        Joined { rx, task }
    }

    /// Aborts every task and refuses new ones. Never blocks.
    pub(crate) fn close(&self) {
        let set = self
            .set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(set);
    }

    /// How the calling thread stands to the store's runtime.
    pub(crate) fn caller(&self) -> Caller {
        let Ok(current) = Handle::try_current() else {
            return Caller::Outside;
        };
        let id = self.handle.id();
        if current.id() != id {
            return Caller::Outside;
        }
        match current.runtime_flavor() {
            RuntimeFlavor::CurrentThread if DRIVES.get() == Some(id) => Caller::Driver,
            RuntimeFlavor::CurrentThread => Caller::Beside,
            _ => Caller::MultiThread,
        }
    }

    /// Notes that this thread runs the store's current-thread runtime (it polls the store's
    /// futures there).
    pub(crate) fn note_driver(&self) {
        if self.handle.runtime_flavor() == RuntimeFlavor::CurrentThread {
            DRIVES.set(Some(self.handle.id()));
        }
    }
}

/// The output of a task of [`Tasks::spawn_joined`]: `None` if the task was lost (aborted, or
/// its runtime stopped). Dropping it aborts the task.
pub(crate) struct Joined<T> {
    rx: tokio::sync::oneshot::Receiver<T>,
    task: AbortHandle,
}

impl<T> Future for Joined<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.rx).poll(cx).map(Result::ok)
    }
}

impl<T> Drop for Joined<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// hyper's executor: spawns the client's tasks (connections, request bodies, the pool's idle
/// timer) among the store's [`Tasks`].
#[derive(Clone)]
pub(crate) struct Spawner(pub(crate) std::sync::Arc<Tasks>);

impl<F> hyper::rt::Executor<F> for Spawner
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let _ = self.0.spawn(async move {
            let _ = fut.await;
        });
    }
}

/// What a blocking call made on the thread that drives the store's current-thread runtime
/// answers: waiting there would wait for the thread itself.
pub(crate) fn blocking_on_driver() -> Error {
    Error::Unsupported {
        operation: "a blocking call on the thread that drives the current-thread tokio \
                    runtime the store runs on",
        needs: "the async methods there (`get_async`, `transaction_async`, …), or a blocking \
                thread (`tokio::task::spawn_blocking`)",
    }
}
