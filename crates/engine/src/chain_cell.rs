//! [`ChainCell`]: the pointer from a map node to its key's version list, read under an epoch
//! pin. This module holds the engine's only `unsafe` code.
//!
//! # Why not a safe pointer
//! Readers visit one version list per key they pass. With a reference-counted pointer
//! (`ArcSwap` or a lock), each visit writes shared memory: a count or a debt slot taken and
//! given back, two locked instructions per key. On x86 a locked instruction also stops the
//! processor from starting the next key's memory loads early, so a scan's cache misses are
//! paid one after another. Crossbeam's epochs already protect the map's nodes during a scan;
//! here they protect the lists too, and a read is a plain load.
//!
//! # The invariant every `unsafe` block relies on
//! A list that a cell points to is freed only when no pinned thread can reach it:
//! - [`ChainCell::store`] unlinks the old list with an atomic swap, so no later load returns
//!   it, and hands it to the epoch collector, which frees it only after every thread pinned at
//!   the time of the swap has unpinned.
//! - A cell's own list is freed when the cell is dropped. The skiplist drops a node's value
//!   only in the node's deferred destructor (once no pinned thread can reach the node) or when
//!   the whole map is dropped (`&mut`, so nobody reads it).
//!
//! [`ChainCell::load`] ties the list it returns to the guard it was loaded under, so no
//! reference outlives the pin that keeps it alive.

use std::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};

use crate::db::{Chain, Version};

/// A key's version list, newest first, replaced as a whole by writers. A null pointer is the
/// empty list (a slot inserted for a write, before the write lands): no allocation.
pub(crate) struct ChainCell {
    ptr: Atomic<Chain>,
}

impl ChainCell {
    /// A cell holding the empty list.
    pub(crate) fn empty() -> Self {
        ChainCell {
            ptr: Atomic::null(),
        }
    }

    /// A cell holding `chain`.
    pub(crate) fn new(chain: Box<Chain>) -> Self {
        ChainCell {
            ptr: Atomic::from(Owned::from(chain)),
        }
    }

    /// The versions, newest first, as of this load; valid while `guard` stays pinned.
    #[inline]
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> &'g [Version] {
        let shared = self.ptr.load(Ordering::Acquire, guard);
        // SAFETY: `shared` is null or points to a list this cell held while `guard` was
        // pinned. Such a list is freed only after `guard` unpins (see the module docs: a
        // replaced list is deferred to the epoch collector, and the cell's own list goes with
        // the node, whose destruction is deferred the same way), so it lives for `'g`. Lists
        // are never written after they are published: `store` takes ownership of a finished
        // list.
        #[allow(unsafe_code)]
        let chain = unsafe { shared.as_ref() };
        chain.map_or(&[], |c| c.versions.as_slice())
    }

    /// Replaces the list with `chain` (`None`: the empty list). The old list is freed once no
    /// pinned reader can still hold it.
    pub(crate) fn store(&self, chain: Option<Box<Chain>>) {
        let guard = epoch::pin();
        let new = chain.map_or_else(Shared::null, |c| {
            Owned::<Chain>::from(c).into_shared(&guard)
        });
        let old = self.ptr.swap(new, Ordering::AcqRel, &guard);
        if !old.is_null() {
            // SAFETY: the swap unlinked `old`; no load that starts after it can return it, so
            // only threads pinned now may hold it, and the collector frees it after they all
            // unpin. Each swap returns a distinct old pointer, so it is deferred exactly once.
            #[allow(unsafe_code)]
            unsafe {
                guard.defer_destroy(old);
            }
        }
    }
}

impl Drop for ChainCell {
    fn drop(&mut self) {
        let ptr = std::mem::replace(&mut self.ptr, Atomic::null());
        // SAFETY: `&mut self`: the cell is being destroyed, which the skiplist does only once
        // no pinned thread can reach its node, or when the map itself is dropped. No reader
        // holds the list, and this is its only owner.
        #[allow(unsafe_code)]
        let owned = unsafe { ptr.try_into_owned() };
        drop(owned);
    }
}

impl std::fmt::Debug for ChainCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let guard = epoch::pin();
        f.debug_list().entries(self.load(&guard)).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use bytes::Bytes;
    use smallvec::smallvec;

    use super::*;
    use crate::value::Value;

    fn chain(versions: &[u64]) -> Box<Chain> {
        Box::new(Chain {
            versions: versions
                .iter()
                .map(|&version| Version {
                    version,
                    value: Some(Value::U64(version)),
                    expires_at: None,
                })
                .collect(),
        })
    }

    fn versions_of(cell: &ChainCell) -> Vec<u64> {
        let guard = epoch::pin();
        cell.load(&guard).iter().map(|v| v.version).collect()
    }

    #[test]
    fn an_empty_cell_reads_as_no_versions() {
        let cell = ChainCell::empty();
        assert!(versions_of(&cell).is_empty());
        cell.store(Some(chain(&[2, 1])));
        assert_eq!(versions_of(&cell), [2, 1]);
        cell.store(None);
        assert!(versions_of(&cell).is_empty());
    }

    #[test]
    fn a_list_loaded_before_a_store_stays_readable_until_unpinned() {
        let cell = ChainCell::new(chain(&[1]));
        let guard = epoch::pin();
        let old = cell.load(&guard);
        cell.store(Some(chain(&[2, 1])));
        cell.store(Some(chain(&[3])));
        assert_eq!(old.len(), 1);
        assert_eq!(old.first().map(|v| v.version), Some(1));
        assert_eq!(cell.load(&guard).first().map(|v| v.version), Some(3));
    }

    /// Counts the values alive: every list a cell held is freed once, after readers unpin.
    #[test]
    fn replaced_and_dropped_lists_are_freed_exactly_once() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        struct Tracked;
        impl Tracked {
            fn value() -> Value {
                LIVE.fetch_add(1, Ordering::SeqCst);
                Value::Bytes(Bytes::from_owner(Tracked))
            }
        }
        impl AsRef<[u8]> for Tracked {
            fn as_ref(&self) -> &[u8] {
                b"v"
            }
        }
        impl Drop for Tracked {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let tracked = |version| {
            Box::new(Chain {
                versions: smallvec![Version {
                    version,
                    value: Some(Tracked::value()),
                    expires_at: None,
                }],
            })
        };
        let cells: Arc<Vec<ChainCell>> = Arc::new((0..8).map(|_| ChainCell::empty()).collect());
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let cells = Arc::clone(&cells);
                std::thread::spawn(move || {
                    for i in 0..2_000u64 {
                        let cell = &cells[((i + t) % 8) as usize];
                        cell.store(Some(tracked(i)));
                        let guard = epoch::pin();
                        assert_eq!(cell.load(&guard).len(), 1);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        drop(cells);
        // Deferred lists are freed as the collector advances; pin until it has.
        for _ in 0..10_000 {
            if LIVE.load(Ordering::SeqCst) == 0 {
                break;
            }
            epoch::pin().flush();
            std::thread::yield_now();
        }
        assert_eq!(LIVE.load(Ordering::SeqCst), 0, "every list freed");
    }
}
