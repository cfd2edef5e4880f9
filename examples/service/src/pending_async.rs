//! Stand-ins for the async API of the sequence crate until it lands: each runs
//! the blocking method with [`tokio::task::block_in_place`] (the runtime moves its other
//! tasks off the worker meanwhile), so [`Mode::Async`](crate::Mode::Async) handlers compile
//! and behave today. Inherent methods of the same name win over these once they exist.

use std::future::Future;

use tuplekv_engine::Store;
use tuplekv_sequence::{Error as SequenceError, FastSequence, GaplessSequence, Issued, Record};

/// `FastSequence::next_async`.
pub(crate) trait FastAsync {
    fn next_async(&self) -> impl Future<Output = Result<Issued<'_>, SequenceError>> + Send;
}

impl<S: Store> FastAsync for FastSequence<S> {
    fn next_async(&self) -> impl Future<Output = Result<Issued<'_>, SequenceError>> + Send {
        std::future::ready(tokio::task::block_in_place(|| self.next()))
    }
}

/// `GaplessSequence::next_coded_async`.
pub(crate) trait GaplessAsync {
    fn next_coded_async<F>(
        &self,
        build: F,
    ) -> impl Future<Output = Result<Issued<'_>, SequenceError>> + Send
    where
        F: FnMut(&str, &mut Record) + Send + 'static;
}

impl<S: Store> GaplessAsync for GaplessSequence<S> {
    fn next_coded_async<F>(
        &self,
        build: F,
    ) -> impl Future<Output = Result<Issued<'_>, SequenceError>> + Send
    where
        F: FnMut(&str, &mut Record) + Send + 'static,
    {
        std::future::ready(tokio::task::block_in_place(|| self.next_coded(build)))
    }
}
