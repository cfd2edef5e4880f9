//! [`ChainCell`]: a key's current version list, swapped by writers and read under an epoch
//! pin. The only module of the engine with `unsafe` code.
//!
//! Every read of the map already pins crossbeam's epoch (the skiplist needs it), and a pinned
//! reader can borrow anything that was reachable when it pinned: memory unlinked meanwhile is
//! freed only once every pin that might have seen it has ended. The version lists use the same
//! rule. A reader loads the cell's pointer and borrows the list for as long as its pin lasts;
//! a writer swaps in a new list and hands the old one to the epoch collector. Reading a list
//! is then one plain load: no reference count, no hazard slot, no locked instruction. (An
//! `ArcSwap` did the same job with a locked write per load into a per-thread debt slot, which
//! also orders every later load behind it, and a scan of every thread's slots per store.)
//!
//! The null pointer is the empty list, so a slot inserted empty (a commit reserving a key it
//! may write) allocates nothing.
//!
//! A replaced list waits in the writing thread's deferral bag (up to 64 objects) until the bag
//! fills or is flushed. So that large values do not linger there (a thread that overwrites a
//! 64 KiB value and then only reads would otherwise keep it), a writer flushes its bag once the
//! values it has deferred since the last flush reach [`DEFERRED_BYTES_FLUSH`].
//!
//! Invariants the `unsafe` blocks rely on:
//! 1. The pointer is null or came from `Owned::new` / `Owned::from(Box)` and is owned by the
//!    cell: nothing else frees it while it is in the cell.
//! 2. A pointer swapped out is unreachable from the cell and is destroyed only through
//!    `Guard::defer_destroy`, that is after every pin that could have loaded it has ended.
//! 3. The cell itself is dropped only when nobody can reach it: it lives in a skiplist node,
//!    which crossbeam frees through the same epoch scheme once unlinked and unreferenced, and
//!    `Drop` takes `&mut self`.
//! 4. Every guard passed in is a pin of the default collector, the one the skiplist and every
//!    deferral use: [`Pin`] can only be made by [`pin`]. (A guard of another collector would
//!    not hold back the frees.)

use std::cell::Cell;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::db::Chain;

/// Value bytes a thread may leave in its deferral bag before it flushes the bag.
pub(crate) const DEFERRED_BYTES_FLUSH: usize = 256 * 1024;

thread_local! {
    /// Value bytes this thread has deferred since its last flush.
    static DEFERRED_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// A pin of crossbeam's default collector: what every read of the map holds.
pub(crate) struct Pin(Guard);

/// Pins the current thread (cheap when it is pinned already).
pub(crate) fn pin() -> Pin {
    Pin(epoch::pin())
}

impl Pin {
    /// The guard, for the skiplist.
    pub(crate) fn guard(&self) -> &Guard {
        &self.0
    }
}

/// The list an empty cell reads as.
static EMPTY: Chain = Chain::EMPTY;

/// A key's version list: read under an epoch pin, replaced whole by writers.
pub(crate) struct ChainCell {
    ptr: Atomic<Chain>,
}

impl ChainCell {
    /// A cell holding the empty list, without allocating.
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

    /// The current list, borrowed for as long as `pin` lasts.
    pub(crate) fn load<'g>(&'g self, pin: &'g Pin) -> &'g Chain {
        let shared = self.ptr.load(Ordering::Acquire, &pin.0);
        // SAFETY: by invariant 1 the pointer is null or points to a live `Chain` owned by the
        // cell. It cannot be freed while `pin` lasts: a writer that swaps it out defers its
        // destruction past every current pin of the default collector (invariants 2 and 4),
        // and the cell outlives the borrow of `self`.
        unsafe { shared.as_ref() }.unwrap_or(&EMPTY)
    }

    /// Replaces the list with `chain`; the old one is freed once no pinned reader can hold
    /// it. Writers of one cell are serialised by the caller (the commit lock).
    pub(crate) fn store(&self, chain: Box<Chain>, pin: &Pin) {
        let guard = &pin.0;
        let old = self.ptr.swap(Owned::from(chain), Ordering::AcqRel, guard);
        // SAFETY: as in `load`: `old` is null or a live list, and `guard` keeps it alive.
        let Some(replaced) = (unsafe { old.as_ref() }) else {
            return;
        };
        let bytes: usize = replaced
            .versions
            .iter()
            .filter_map(|v| v.value.as_ref())
            .map(|v| v.size())
            .sum();
        // SAFETY: `old` was owned by the cell (invariant 1) and the swap made it unreachable
        // from it, so no reader pinned from now on can load it; readers pinned before may
        // still hold it, and `defer_destroy` waits for them (invariant 4: same collector).
        // Only this call saw `old` come out of the cell, so it is destroyed once.
        unsafe { guard.defer_destroy(old) };
        let pending = DEFERRED_BYTES.with(|d| {
            let total = d.get().saturating_add(bytes);
            d.set(total);
            total
        });
        if pending >= DEFERRED_BYTES_FLUSH {
            DEFERRED_BYTES.with(|d| d.set(0));
            guard.flush();
        }
    }
}

impl Drop for ChainCell {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no other thread can reach the cell (invariant 3), so no
        // reader holds its list either: every reader borrows the list through the cell. The
        // list is owned by the cell (invariant 1) and freed here once.
        let guard = unsafe { epoch::unprotected() };
        let current = self
            .ptr
            .swap(epoch::Shared::null(), Ordering::Relaxed, guard);
        if !current.is_null() {
            // SAFETY: see above; `current` is non-null and owned by the cell.
            drop(unsafe { current.into_owned() });
        }
    }
}

impl std::fmt::Debug for ChainCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pin = pin();
        f.debug_tuple("ChainCell").field(self.load(&pin)).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    use super::*;
    use crate::db::Version;
    use crate::value::Value;

    /// A list of `n` versions, all tagged `n`, so a reader can tell a torn list from a whole one.
    fn chain_of_len(n: u64) -> Box<Chain> {
        Box::new(Chain {
            versions: (0..n)
                .map(|_| Version {
                    version: n,
                    value: Some(Value::U64(n)),
                    expires_at: None,
                })
                .collect(),
        })
    }

    #[test]
    fn a_replaced_large_value_is_freed_without_the_writer_flushing() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        struct Big(Vec<u8>);
        impl Drop for Big {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
        impl AsRef<[u8]> for Big {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        LIVE.fetch_add(1, Ordering::SeqCst);
        let big = Value::Bytes(bytes::Bytes::from_owner(Big(vec![0; DEFERRED_BYTES_FLUSH])));
        let cell = ChainCell::new(Box::new(Chain {
            versions: std::iter::once(Version {
                version: 1,
                value: Some(big),
                expires_at: None,
            })
            .collect(),
        }));
        cell.store(chain_of_len(1), &pin());
        // Only pins from here on: collection happens as they advance the epoch.
        for _ in 0..100_000 {
            if LIVE.load(Ordering::SeqCst) == 0 {
                break;
            }
            drop(pin());
        }
        assert_eq!(LIVE.load(Ordering::SeqCst), 0, "the large value was freed");
    }

    #[test]
    fn an_empty_cell_reads_as_the_empty_list_and_stores_replace_it() {
        let cell = ChainCell::empty();
        let guard = pin();
        assert!(cell.load(&guard).versions.is_empty());
        cell.store(chain_of_len(2), &guard);
        assert_eq!(cell.load(&guard).versions.len(), 2);
        cell.store(chain_of_len(1), &guard);
        assert_eq!(cell.load(&guard).versions.len(), 1);
    }

    #[test]
    fn a_borrowed_list_stays_whole_while_a_writer_replaces_it() {
        let cell = ChainCell::new(chain_of_len(1));
        let guard = pin();
        let before = cell.load(&guard);
        let writer_guard = pin();
        cell.store(chain_of_len(3), &writer_guard);
        assert_eq!(before.versions.len(), 1, "the old list is still readable");
        assert_eq!(before.versions[0].value, Some(Value::U64(1)));
        assert_eq!(cell.load(&guard).versions.len(), 3);
    }

    #[test]
    fn readers_racing_a_writer_see_only_whole_lists_and_every_list_is_freed() {
        /// Counts live lists through the values' drop: each list holds one `Bytes` owned by a
        /// tracker.
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        struct Tracked;
        impl Drop for Tracked {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
        impl AsRef<[u8]> for Tracked {
            fn as_ref(&self) -> &[u8] {
                b"t"
            }
        }
        let tracked_chain = |n: u64| {
            LIVE.fetch_add(1, Ordering::SeqCst);
            let mut chain = chain_of_len(n);
            chain.versions.push(Version {
                version: n,
                value: Some(Value::Bytes(bytes::Bytes::from_owner(Tracked))),
                expires_at: None,
            });
            chain
        };

        let cell = Arc::new(ChainCell::new(tracked_chain(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (cell, stop) = (Arc::clone(&cell), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) || reads == 0 {
                        let guard = pin();
                        let chain = cell.load(&guard);
                        let n = chain.versions[0].version;
                        assert_eq!(chain.versions.len() as u64, n + 1, "a whole list");
                        assert!(chain.versions.iter().all(|v| v.version == n));
                        reads += 1;
                    }
                })
            })
            .collect();
        for i in 0..20_000u64 {
            let guard = pin();
            cell.store(tracked_chain(1 + i % 4), &guard);
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().expect("reader");
        }
        drop(Arc::try_unwrap(cell).map_err(|_| ()).expect("last handle"));
        // Deferred destruction runs as pins advance the epoch; flush until it has.
        for _ in 0..10_000 {
            if LIVE.load(Ordering::SeqCst) == 0 {
                break;
            }
            pin().0.flush();
        }
        assert_eq!(
            LIVE.load(Ordering::SeqCst),
            0,
            "every replaced list was freed"
        );
    }
}
