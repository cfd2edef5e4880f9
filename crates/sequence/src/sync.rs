//! The synchronisation primitives of the lock-free block allocator, switched by `cfg(loom)`:
//! `std`'s normally, loom's model-checked ones under `RUSTFLAGS="--cfg loom"` (`tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
