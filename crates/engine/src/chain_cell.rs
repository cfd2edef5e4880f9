//! [`ChainCell`]: the pointer from a map node to its key's version list, read under an epoch
//! pin, and [`Retired`]: where replaced lists wait until no reader can hold them. This module
//! and the map's (`keymap.rs`) hold the engine's `unsafe` code.
//!
//! # Design
//! - The lists are protected by the epochs that already protect the map's nodes: a read is a
//!   plain acquire load under the pin the reader holds for the map, and writes nothing.
//! - A reference-counted pointer (such as `ArcSwap`) would cost a reader two locked
//!   instructions per list visited, and each store a walk over every thread's debts under
//!   the commit lock; a store here is one atomic swap.
//! - Replaced lists are freed by the writers, not the readers: handing each list to the epoch
//!   collector would make whichever thread pins next run the frees, and readers pin far more
//!   often than writers.
//! - So the writer keeps what it replaced in [`Retired`]: every [`RETIRE_BATCH`] lists it
//!   seals a batch and defers one marker to the collector, which only records that the
//!   batch's generation is safe. The writer frees safe batches itself, as later commits seal
//!   theirs and in every reclamation pass.
//! - A replaced list therefore outlives its last reader until a later seal or reclamation
//!   pass finds its batch safe: memory traded for readers that never free.
//!
//! # The invariant every `unsafe` block relies on
//! A list that a cell points to is freed only when no pinned thread can reach it:
//! - [`ChainCell::store`] unlinks the old list with an atomic swap, so no load that starts
//!   later returns it, and puts it in [`Retired`]. Its batch is sealed after the swap; the
//!   sealing defers a marker, which the collector runs only after every thread pinned at that
//!   moment has unpinned, and a list is freed only once its batch's marker (or a later batch's:
//!   markers of later batches cover earlier ones) has run.
//! - A cell's own list is freed when the cell is dropped. The skiplist drops a node's value
//!   only in the node's deferred destructor (once no pinned thread can reach the node) or when
//!   the whole map is dropped (`&mut`, so nobody reads it).
//! - A list is freed through the pointer `Box::into_raw` returned: the cell holds it in an
//!   `AtomicPtr` (never as an integer), and [`Retired`] keeps the same pointer.
//!
//! [`ChainCell::load`] ties the list it returns to the guard it was loaded under, so no
//! reference outlives the pin that keeps it alive.

use std::collections::VecDeque;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crossbeam_epoch::{self as epoch, Guard};
use parking_lot::Mutex;

use crate::version::{Chain, General, PACKED, Versions};

pub(crate) use crate::limits::RETIRE_BATCH;

/// A chain as one thin pointer to its first byte, the tag that says which form it is
/// (`version.rs`): what `Box::into_raw` returned for its buffer or its general list.
fn into_raw(chain: Chain) -> NonNull<u8> {
    let raw = match chain {
        Chain::Packed(buf) => Box::into_raw(buf).cast::<u8>(),
        Chain::General(general) => Box::into_raw(general).cast::<u8>(),
    };
    // SAFETY: `Box::into_raw` never returns null (a packed buffer is never empty: its header
    // alone is five bytes).
    #[expect(unsafe_code, reason = "a box's pointer is not null")]
    unsafe {
        NonNull::new_unchecked(raw)
    }
}

/// The versions of the chain `raw` points to, borrowed for `'g`.
///
/// # Safety
/// `raw` came from [`into_raw`] and its chain is not freed before `'g` ends.
#[expect(unsafe_code, reason = "reads a chain through its thin pointer")]
#[inline]
unsafe fn versions_of<'g>(raw: NonNull<u8>) -> Versions<'g> {
    let raw = raw.as_ptr();
    // SAFETY: by the caller's promise `raw` points to a live chain, whose first byte is its
    // tag (a packed buffer's first byte; a general list is `#[repr(C)]` with its `u8` tag
    // first). A packed buffer is at least its header long and says its whole length there,
    // so both slices lie within its allocation; chains are never written once published.
    unsafe {
        if *raw == PACKED {
            let header = std::slice::from_raw_parts(raw, Chain::PACKED_HEADER);
            let len = Chain::packed_len(header);
            Chain::packed_versions(std::slice::from_raw_parts(raw, len))
        } else {
            Versions::General(&(*raw.cast::<General>()).versions)
        }
    }
}

/// Takes back ownership of the chain `raw` points to.
///
/// # Safety
/// `raw` came from [`into_raw`], no reader can reach it any more, and this is its only free.
#[expect(unsafe_code, reason = "rebuilds the box a chain was leaked from")]
unsafe fn from_raw(raw: NonNull<u8>) -> Chain {
    let raw = raw.as_ptr();
    // SAFETY: as in `versions_of` for the tag and length; the box is rebuilt with the type
    // and length it was leaked with, through the pointer `Box::into_raw` returned.
    unsafe {
        if *raw == PACKED {
            let len = Chain::packed_len(std::slice::from_raw_parts(raw, Chain::PACKED_HEADER));
            Chain::Packed(Box::from_raw(ptr::slice_from_raw_parts_mut(raw, len)))
        } else {
            Chain::General(Box::from_raw(raw.cast::<General>()))
        }
    }
}

/// A key's version list, newest first, replaced as a whole by writers. A null pointer is the
/// empty list (a slot inserted for a write, before the write lands): no allocation.
///
/// The pointer is a plain `AtomicPtr` holding what `Box::into_raw` returned (cast to its first
/// byte, the chain's tag): a pointer loaded from it keeps the chain's allocation as its
/// provenance (crossbeam's `Atomic` stores an integer), so Miri checks every access and the
/// final free against that allocation.
pub(crate) struct ChainCell {
    ptr: AtomicPtr<u8>,
}

// `AtomicPtr` makes a cell `Send` and `Sync` whatever it points to, where crossbeam's `Atomic`
// asked its pointee to be both: sound only while the lists it hands between threads (read by
// many, freed by any) are `Send` and `Sync` themselves.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Chain>();
};

impl ChainCell {
    /// A cell holding the empty list.
    pub(crate) fn empty() -> Self {
        ChainCell {
            ptr: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A cell holding `chain`.
    pub(crate) fn new(chain: Chain) -> Self {
        ChainCell {
            ptr: AtomicPtr::new(into_raw(chain).as_ptr()),
        }
    }

    /// The versions, newest first, as of this load; valid while `guard` stays pinned.
    #[inline]
    pub(crate) fn load<'g>(&self, _pinned: &'g Guard) -> Versions<'g> {
        let Some(raw) = NonNull::new(self.ptr.load(Ordering::Acquire)) else {
            return Versions::EMPTY;
        };
        // SAFETY: `raw` points to a chain this cell held while `guard` was pinned. Such a
        // chain is freed only after `guard` unpins (see the module docs: a replaced chain
        // waits in `Retired` for a marker deferred after its swap, and the cell's own chain
        // goes with the node, whose destruction is deferred), so it lives for `'g`. Chains
        // are never written after they are published: `store` takes ownership of a finished
        // one.
        #[expect(unsafe_code, reason = "a chain outlives its load only while pinned")]
        unsafe {
            versions_of(raw)
        }
    }

    /// Replaces the list with `chain` (`None`: the empty list). The old list goes to
    /// `retired`, which frees it once no pinned reader can still hold it.
    pub(crate) fn store(&self, chain: Option<Chain>, retired: &Retired) {
        let guard = epoch::pin();
        let new = chain.map_or(ptr::null_mut(), |c| into_raw(c).as_ptr());
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if let Some(old) = NonNull::new(old) {
            retired.push(old, &guard);
        }
    }
}

impl Drop for ChainCell {
    fn drop(&mut self) {
        let Some(raw) = NonNull::new(*self.ptr.get_mut()) else {
            return;
        };
        // SAFETY: `&mut self`: the cell is being destroyed, which the skiplist does only once
        // no pinned thread can reach its node, or when the map itself is dropped. No reader
        // holds the chain, and this is its only owner; `raw` came from `into_raw`.
        #[expect(unsafe_code, reason = "the cell owns its chain through a raw pointer")]
        drop(unsafe { from_raw(raw) });
    }
}

impl std::fmt::Debug for ChainCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let guard = epoch::pin();
        self.load(&guard).fmt(f)
    }
}

/// Version lists unlinked from their cells, kept until no reader can hold them, then freed by
/// the writers (see the module docs).
pub(crate) struct Retired {
    state: Mutex<RetiredState>,
    /// The newest generation whose marker the epoch collector has run: every batch up to it
    /// is safe to free.
    safe: Arc<AtomicU64>,
}

#[derive(Default)]
struct RetiredState {
    /// Unlinked since the last seal. An `AtomicPtr` is only a pointer here (no ownership,
    /// unlike a `Box`), so holding one while readers still read the list asserts nothing
    /// about it; it is used for being `Send`, never for its atomicity.
    open: Vec<AtomicPtr<u8>>,
    /// Sealed batches, oldest first, each with its generation.
    sealed: VecDeque<(u64, Vec<AtomicPtr<u8>>)>,
    /// The generation the next sealed batch gets (from 1: `safe` starts at 0, none).
    next_generation: u64,
}

impl Default for Retired {
    fn default() -> Self {
        Retired {
            state: Mutex::new(RetiredState {
                next_generation: 1,
                ..RetiredState::default()
            }),
            safe: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Retired {
    /// Keeps `old`, just unlinked from its cell, until it is safe to free; every
    /// [`RETIRE_BATCH`] lists, seals a batch and frees the batches found safe.
    fn push(&self, old: NonNull<u8>, guard: &Guard) {
        let ready = {
            let mut state = self.state.lock();
            state.open.push(AtomicPtr::new(old.as_ptr()));
            if state.open.len() < RETIRE_BATCH {
                return;
            }
            self.seal(&mut state, guard);
            self.take_safe(&mut state)
        };
        free(ready);
    }

    /// Seals what is open, then frees every batch already safe (none of a batch sealed now:
    /// its marker has not run yet). Called by reclamation passes, so an idle database does
    /// not keep replaced lists around for long.
    pub(crate) fn collect(&self) {
        let guard = epoch::pin();
        let ready = {
            let mut state = self.state.lock();
            if !state.open.is_empty() {
                self.seal(&mut state, &guard);
            }
            self.take_safe(&mut state)
        };
        drop(guard);
        free(ready);
    }

    /// Replaced lists not freed yet (for stats and tests).
    pub(crate) fn len(&self) -> usize {
        let state = self.state.lock();
        state.open.len() + state.sealed.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    /// Turns the open lists into a batch and defers its marker to the collector.
    fn seal(&self, state: &mut RetiredState, guard: &Guard) {
        let generation = state.next_generation;
        state.next_generation += 1;
        let batch = std::mem::take(&mut state.open);
        state.sealed.push_back((generation, batch));
        let safe = Arc::clone(&self.safe);
        guard.defer(move || {
            safe.fetch_max(generation, Ordering::Release);
        });
        // Hands the marker to the global queue now (a thread's deferred functions otherwise
        // wait until it has 64), and lets this writer run what is due, markers included.
        guard.flush();
    }

    /// Takes the sealed batches whose lists no reader can hold any more.
    fn take_safe(&self, state: &mut RetiredState) -> Vec<Vec<AtomicPtr<u8>>> {
        let safe = self.safe.load(Ordering::Acquire);
        let mut ready = Vec::new();
        while state.sealed.front().is_some_and(|(g, _)| *g <= safe) {
            if let Some((_, batch)) = state.sealed.pop_front() {
                ready.push(batch);
            }
        }
        ready
    }
}

/// Frees lists no reader can reach (taken from [`Retired`] as safe, or owned outright).
fn free(batches: Vec<Vec<AtomicPtr<u8>>>) {
    for batch in batches {
        for list in batch {
            let Some(list) = NonNull::new(list.into_inner()) else {
                continue;
            };
            // SAFETY: `list` was unlinked from its cell by a swap before its batch was sealed,
            // and its batch's marker (or a later one's) has run: every thread pinned when it
            // was sealed, so every thread that could have loaded the list, has unpinned. Each
            // swap yields a distinct pointer (from `into_raw`), retired once, so this is its
            // only free.
            #[expect(unsafe_code, reason = "frees a list readers reached by raw pointer")]
            drop(unsafe { from_raw(list) });
        }
    }
}

impl Drop for Retired {
    fn drop(&mut self) {
        // The database is being dropped: no reader of its map is left, so everything retired
        // can go, safe or not.
        let state = self.state.get_mut();
        let mut all: Vec<_> = state.sealed.drain(..).map(|(_, b)| b).collect();
        all.push(std::mem::take(&mut state.open));
        free(all);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tuplekv_testkit::counted::counted_bytes;

    use super::*;
    use crate::value::Value;
    use crate::version::{VALUE_INLINE_MAX, Version};

    /// A packed chain of `versions`, each holding its number.
    fn chain(versions: &[u64]) -> Chain {
        let versions: Vec<Version> = versions
            .iter()
            .map(|&version| Version {
                version,
                value: Some(Value::U64(version)),
                expires_at: None,
            })
            .collect();
        Chain::build(versions.iter().map(Version::as_version_ref), None)
    }

    fn versions_of(cell: &ChainCell) -> Vec<u64> {
        let guard = epoch::pin();
        cell.load(&guard).iter().map(|v| v.version).collect()
    }

    #[test]
    fn an_empty_cell_reads_as_no_versions_and_storing_over_it_retires_nothing() {
        let retired = Retired::default();
        let cell = ChainCell::empty();
        assert!(versions_of(&cell).is_empty());
        cell.store(Some(chain(&[2, 1])), &retired);
        assert_eq!(versions_of(&cell), [2, 1]);
        assert_eq!(retired.len(), 0, "nothing was replaced");
        cell.store(None, &retired);
        assert!(versions_of(&cell).is_empty());
        assert_eq!(retired.len(), 1);
    }

    #[test]
    fn a_list_loaded_before_a_store_stays_readable_until_unpinned() {
        let retired = Retired::default();
        let cell = ChainCell::new(chain(&[1]));
        let guard = epoch::pin();
        let old = cell.load(&guard);
        let stores = 3 * RETIRE_BATCH + 1;
        for v in 0..stores {
            cell.store(Some(chain(&[v as u64 + 2])), &retired);
            retired.collect();
        }
        assert_eq!(old.len(), 1);
        assert_eq!(old.first().map(|v| v.version), Some(1));
        assert_eq!(
            retired.len(),
            stores,
            "nothing is freed while a thread that could hold it is pinned"
        );
        drop(guard);
    }

    static LIVE: AtomicUsize = AtomicUsize::new(0);

    /// Every list a cell held is freed exactly once: replaced ones by the writers once safe
    /// (or with the [`Retired`] that holds them), the rest when their cells are dropped; in
    /// between, each list is in a cell, waiting in `Retired`, or freed. (That writers free as
    /// they go, rather than at the end, is `tests/reclamation.rs`'s to check: here other unit
    /// tests in the process may hold pins, which hold the epoch back for everyone, for as long
    /// as they like.)
    #[test]
    fn replaced_and_dropped_lists_are_freed_exactly_once() {
        // Values too large to pack: the general chains keep the counted buffers themselves.
        let tracked = |version| {
            static LARGE: [u8; VALUE_INLINE_MAX + 1] = [7; VALUE_INLINE_MAX + 1];
            let chain = Chain::one(&Version {
                version,
                value: Some(Value::Bytes(counted_bytes(&LIVE, &LARGE))),
                expires_at: None,
            });
            assert!(matches!(chain, Chain::General(_)));
            chain
        };
        let cells: Arc<Vec<ChainCell>> = Arc::new((0..8).map(|_| ChainCell::empty()).collect());
        let retired = Arc::new(Retired::default());
        // Under Miri, which interprets this thousands of times slower, fewer threads and stores:
        // still several sealed batches each.
        let (threads, stores) = if cfg!(miri) { (2, 200) } else { (4, 4_000) };
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let (cells, retired) = (Arc::clone(&cells), Arc::clone(&retired));
                std::thread::spawn(move || {
                    for i in 0..stores {
                        let cell = &cells[((i + t) % 8) as usize];
                        cell.store(Some(tracked(i)), &retired);
                        let guard = epoch::pin();
                        assert_eq!(cell.load(&guard).len(), 1);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        retired.collect();
        assert_eq!(
            LIVE.load(Ordering::SeqCst),
            8 + retired.len(),
            "every list not freed is a cell's or waits in `Retired`"
        );
        drop(retired);
        assert_eq!(
            LIVE.load(Ordering::SeqCst),
            8,
            "the cells' own lists remain"
        );
        drop(cells);
        assert_eq!(LIVE.load(Ordering::SeqCst), 0, "every list freed");
    }
}
