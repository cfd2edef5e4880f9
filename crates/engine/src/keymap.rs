//! [`KeyMap`]: the ordered map from encoded key to version list, with guard-scoped reads.
//!
//! # Design
//! A skiplist whose links change only under one small writer mutex, built for the engine's
//! access pattern: many readers, short inserts once their place is found, and removals made
//! only by the engine's own writers (reclamation and rollback).
//! - Readers take no lock and write no shared memory: a read pins the epoch once per operation
//!   and borrows nodes, and the version lists they point to ([`ChainCell`]), under that pin
//!   ([`KeyMap::read`], [`KeyMap::scan`]).
//! - Only writers, which keep a key's place across the commit lock, take a counted handle
//!   ([`Slot`]): one atomic increment per key a commit touches, none per key a reader visits.
//! - An insert finds its place and allocates its node without the lock, then takes it for a
//!   few stores: it brings the place up to date and links. Inserts anywhere in the map
//!   serialise only on those stores.
//! - The key count sits beside the writer lock and each thread draws node heights from its
//!   own generator, so an insert writes no line shared by the whole map but the lock's.
//! - With one writer at a time there are no marked pointers, compare-and-swap retry loops or
//!   helping, and a removed node is unlinked from every level at once.
//! - A node holds exactly its height's links, in the node's own allocation, and one node in
//!   four reaches the next level: nodes are small, and a search passes about four per level.
//! - Each key a commit writes is searched from the head: O(log n) whatever its distance from
//!   the commit's other keys.
//! - The links run forward only: a reverse scan costs one map search per entry.
//!
//! # The invariants the `unsafe` blocks rely on
//! - **Links change only under `writer`.** A node is linked bottom level first, each level's
//!   pointer stored (release) after the new node's own pointer at that level is set, so a
//!   reader following any link finds a fully built node. A removed node is unlinked from
//!   every level under the lock; its own forward links are left as they were, so a reader
//!   standing on it still walks forward to nodes that were linked when it was removed.
//! - **A node is freed only through the epoch collector, after it is unlinked and its count
//!   reaches zero.** The count is one for being linked plus one per [`Slot`]. Removal drops the
//!   linked reference; whoever drops the count to zero defers the node's destruction, which
//!   runs once every thread pinned at that moment has unpinned. So a pointer loaded under a
//!   pin stays valid until that pin ends: the node was linked (or reachable from a node
//!   removed after the pin began) when it was loaded, hence not yet deferred. Only the map's
//!   own `Drop` (`&mut`, so no reader) frees nodes directly.
//! - **A [`Slot`] holds a count**, so its node outlives it whatever happens to the map.
//! - **A node is reached and freed through the pointer [`Node::alloc`] returned.** The links
//!   store that pointer (`AtomicPtr`, never an integer), searches carry it as a [`NodeRef`]
//!   and a slot keeps it; the free goes through it, never through a pointer taken from a
//!   `&Node`, whose permission allows reads only. Miri checks this under Tree Borrows
//!   (`cargo xtask miri`).

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{self, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Guard};
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::chain_cell::ChainCell;
use crate::key_bytes::{KeyBytes, compare};
use crate::version::Versions;

/// The most levels a node can have: with a quarter of the nodes of each level reaching the
/// next, searches stay logarithmic up to about four billion keys.
const MAX_HEIGHT: usize = 16;

/// One key: its key, its version list, and its links.
///
/// A node is allocated with exactly `height` links, which follow the fixed part in the same
/// allocation (as crossbeam's nodes do), and then the key's bytes: most nodes have one or two
/// levels and keys are short, so a node of an 11-byte key takes one 35-byte allocation, where
/// a fixed tower or a fixed-size key buffer would make every node larger, and every search
/// miss the cache more. So nodes are made and freed only by [`Node::alloc`] and
/// [`Node::free`], never boxed.
#[repr(C)]
struct Node {
    cell: ChainCell,
    /// One for being linked, plus one per [`Slot`]. The node is destroyed once it is zero.
    refs: AtomicU32,
    /// Set (under the writer lock) as the node is unlinked.
    removed: AtomicBool,
    height: u8,
    /// The key's length: its bytes follow the links.
    key_len: u16,
    /// Where the `height` links start (level 0 first); the key's bytes follow them.
    tower: [AtomicPtr<Node>; 0],
}

// The map's links are `AtomicPtr`s, which make the map `Send` and `Sync` whatever a node
// holds: sound only while nodes, read by every thread and freed by any, are both themselves.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Node>();
};

impl Node {
    /// The allocation of a node with `height` links and a key of `key_len` bytes.
    fn layout(height: usize, key_len: usize) -> Layout {
        let size =
            std::mem::size_of::<Node>() + height * std::mem::size_of::<AtomicPtr<Node>>() + key_len;
        Layout::from_size_align(size, std::mem::align_of::<Node>())
            .expect("a node of at most MAX_HEIGHT links has a valid layout")
    }

    /// A new node, counted for being linked and for the slot handed to its inserter, with
    /// `height` null links.
    fn alloc(key: &[u8], cell: ChainCell, height: usize) -> NonNull<Node> {
        debug_assert!((1..=MAX_HEIGHT).contains(&height));
        // Keys are at most a few kilobytes (the engine's key limits).
        let key_len = u16::try_from(key.len()).expect("a key fits a node's 16-bit length");
        let layout = Node::layout(height, key.len());
        // SAFETY: the layout has a non-zero size (the fixed part alone is not empty).
        #[expect(unsafe_code, reason = "a node's links extend its allocation")]
        let raw = unsafe { alloc::alloc(layout) }.cast::<Node>();
        let Some(node) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `raw` is a fresh allocation of `layout`: room for the fixed part, aligned
        // for it, followed by room for `height` links (`Atomic` is a pointer-sized value,
        // aligned like the fixed part) and then for the key's bytes. Everything is written
        // before the node is shared.
        #[expect(unsafe_code, reason = "builds a variable-sized node in place")]
        unsafe {
            raw.write(Node {
                cell,
                refs: AtomicU32::new(2),
                removed: AtomicBool::new(false),
                height: height as u8,
                key_len,
                tower: [],
            });
            let tower = ptr::addr_of_mut!((*raw).tower).cast::<AtomicPtr<Node>>();
            for level in 0..height {
                tower.add(level).write(AtomicPtr::new(ptr::null_mut()));
            }
            let bytes = tower.add(height).cast::<u8>();
            ptr::copy_nonoverlapping(key.as_ptr(), bytes, key.len());
        }
        node
    }

    /// Drops a node's key and list and frees its allocation.
    ///
    /// # Safety
    /// `node` came from [`Node::alloc`], is not linked, and nothing will read it again.
    #[expect(unsafe_code, reason = "frees a variable-sized node")]
    unsafe fn free(node: *mut Node) {
        // SAFETY: by the caller's promise the node is valid and this is its last use; its
        // layout is the one `alloc` made for its height.
        unsafe {
            let layout = Node::layout(usize::from((*node).height), usize::from((*node).key_len));
            ptr::drop_in_place(node);
            alloc::dealloc(node.cast(), layout);
        }
    }

    /// The forward link at `level` (below `height`).
    #[inline]
    fn next(&self, level: usize) -> &AtomicPtr<Node> {
        debug_assert!(level < usize::from(self.height));
        // SAFETY: a node is only ever reached through a pointer to a `Node::alloc`
        // allocation, which holds `height` initialised links from `tower` on, and
        // `level < height` at every call (a level is only followed on nodes found at it).
        #[expect(unsafe_code, reason = "a node's links lie past its fixed part")]
        unsafe {
            &*ptr::addr_of!(self.tower)
                .cast::<AtomicPtr<Node>>()
                .add(level)
        }
    }

    /// The key.
    #[inline]
    fn key(&self) -> &[u8] {
        // SAFETY: as in `next`: the node's allocation holds `key_len` initialised bytes right
        // after its `height` links, written before it was shared and never written again.
        #[expect(unsafe_code, reason = "a node's key lies past its links")]
        unsafe {
            let bytes = ptr::addr_of!(self.tower)
                .cast::<AtomicPtr<Node>>()
                .add(usize::from(self.height))
                .cast::<u8>();
            std::slice::from_raw_parts(bytes, usize::from(self.key_len))
        }
    }

    fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Takes a counted reference, unless the count already reached zero (the node is unlinked
    /// and its destruction deferred).
    fn try_acquire(&self) -> bool {
        let mut refs = self.refs.load(Ordering::Relaxed);
        loop {
            if refs == 0 {
                return false;
            }
            match self.refs.compare_exchange_weak(
                refs,
                refs + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => refs = now,
            }
        }
    }

    /// Drops a counted reference on `node`; the last one defers the node's destruction.
    ///
    /// Takes the node's pointer rather than `&self`: the free goes through the pointer the node
    /// was reached by, whose provenance is its allocation's, never through one derived from a
    /// shared reference (which permits reads only).
    ///
    /// # Safety
    /// The caller owns one of `node`'s counts (its linked count, or a [`Slot`]'s) and gives it
    /// up: it does not use that count again.
    #[expect(unsafe_code, reason = "drops a count through the node's raw pointer")]
    unsafe fn release(node: NodeRef<'_>) {
        if node.refs.fetch_sub(1, Ordering::Release) == 1 {
            atomic::fence(Ordering::Acquire);
            let raw = node.ptr.as_ptr();
            let guard = epoch::pin();
            // SAFETY: the count reached zero, so the node is unlinked (being linked holds a
            // count) and no slot holds it; nothing can take a new count (`try_acquire` refuses
            // zero). Threads still pinned from before may hold plain references: the collector
            // runs the free only after all of them have unpinned. This is the only place that
            // schedules the free of a node that was ever linked.
            unsafe {
                guard.defer_unchecked(move || Node::free(raw));
            }
        }
    }
}

/// A node reached through a link while a guard is pinned for `'g` (or fresh from
/// [`Node::alloc`], or held by a count for `'g`): readable for `'g`.
///
/// It keeps the raw pointer the node was reached by, not a `&Node`: a [`Slot`] made from it
/// holds that pointer, and the node's last release frees through it. A pointer taken back from
/// a shared reference would carry that reference's permission, which allows no write and so no
/// free, under the aliasing rules Miri checks.
#[derive(Clone, Copy)]
struct NodeRef<'g> {
    ptr: NonNull<Node>,
    pinned: PhantomData<&'g Node>,
}

impl<'g> NodeRef<'g> {
    /// # Safety
    /// `ptr` points to a node built by [`Node::alloc`] that is not freed before `'g` ends: it
    /// was loaded from a link while a guard that lives for `'g` was pinned, is fresh and about
    /// to be linked under such a guard, or a count on it is held for `'g`.
    #[expect(unsafe_code, reason = "a NodeRef asserts that its node outlives 'g")]
    unsafe fn new(ptr: NonNull<Node>) -> Self {
        NodeRef {
            ptr,
            pinned: PhantomData,
        }
    }

    /// The node, borrowed for `'g`.
    #[inline]
    fn get(self) -> &'g Node {
        // SAFETY: `NodeRef::new`'s promise: the node is allocated and fully built for `'g`,
        // and nothing writes it except through atomics.
        #[expect(unsafe_code, reason = "reads a node through the pointer it holds")]
        unsafe {
            self.ptr.as_ref()
        }
    }
}

impl Deref for NodeRef<'_> {
    type Target = Node;

    #[inline]
    fn deref(&self) -> &Node {
        self.get()
    }
}

/// The node `link` points to, if any, readable for as long as `guard` stays pinned.
#[inline]
fn load<'g>(link: &AtomicPtr<Node>, _pinned: &'g Guard) -> Option<NodeRef<'g>> {
    #[cfg(test)]
    tests::LINKS_FOLLOWED.with(|n| n.set(n.get() + 1));
    let ptr = NonNull::new(link.load(Ordering::Acquire))?;
    // SAFETY: a node reachable through the map's links while `guard` is pinned is not freed
    // before `guard` unpins (module docs: it is destroyed only through the collector, deferred
    // after it was unlinked, and a removed node's links point only at nodes linked when it
    // was removed). It was fully built before it was linked (release store, acquire load).
    #[expect(unsafe_code, reason = "a loaded link stays valid only while pinned")]
    unsafe {
        Some(NodeRef::new(ptr))
    }
}

/// A writer lock on its own cache line, with the key count beside it: both are written only
/// by the lock's holder, and readers never touch this line except for [`KeyMap::len`].
#[repr(align(64))]
struct WriterLine {
    lock: Mutex<()>,
    len: AtomicUsize,
}

/// Encoded key → version list, ordered by key bytes.
pub(crate) struct KeyMap {
    /// The head's forward links, one per level.
    head: [AtomicPtr<Node>; MAX_HEIGHT],
    /// The number of levels in use (only grows; written under the writer lock).
    height: AtomicUsize,
    writer: WriterLine,
}

/// Per level, the last node before a searched key (`None`: the head).
type Preds<'g> = [Option<NodeRef<'g>>; MAX_HEIGHT];

/// A counted handle on one key's node: it stays valid (readable, possibly removed) until
/// dropped, whatever happens to the map meanwhile.
pub(crate) struct Slot<'a> {
    map: &'a KeyMap,
    /// The pointer the node was reached by (see [`NodeRef`]).
    node: NonNull<Node>,
}

// SAFETY: a slot is a counted reference to a node whose fields are all thread-safe (atomics,
// an immutable key, an epoch-protected cell); the count is atomic, and the node is destroyed
// through the epoch collector from whichever thread drops the last count.
#[expect(unsafe_code, reason = "a slot holds a raw pointer to a node")]
unsafe impl Send for Slot<'_> {}
// SAFETY: as for `Send`: shared access reads atomics and immutable data only.
#[expect(unsafe_code, reason = "a slot holds a raw pointer to a node")]
unsafe impl Sync for Slot<'_> {}

impl<'a> Slot<'a> {
    /// A slot for `node`, whose count the caller has already taken.
    fn adopt(map: &'a KeyMap, node: NodeRef<'_>) -> Self {
        Slot {
            map,
            node: node.ptr,
        }
    }

    fn node(&self) -> NodeRef<'_> {
        // SAFETY: the slot holds a count on the node, so it is not destroyed before the slot
        // is dropped (module docs).
        #[expect(unsafe_code, reason = "a slot's count keeps its node alive")]
        unsafe {
            NodeRef::new(self.node)
        }
    }

    /// The key.
    pub(crate) fn key(&self) -> &[u8] {
        self.node().get().key()
    }

    /// The key's version list.
    pub(crate) fn cell(&self) -> &ChainCell {
        &self.node().get().cell
    }

    /// Whether the node has been removed from the map.
    pub(crate) fn is_removed(&self) -> bool {
        self.node().is_removed()
    }

    /// Removes the node from the map; `false` if it was already removed.
    pub(crate) fn remove(&self) -> bool {
        let _writer = self.map.writer.lock.lock();
        let guard = epoch::pin();
        self.map.unlink(self.node(), &guard)
    }
}

impl Clone for Slot<'_> {
    fn clone(&self) -> Self {
        // The slot's own count keeps the node's count above zero.
        self.node().refs.fetch_add(1, Ordering::Relaxed);
        Slot::adopt(self.map, self.node())
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // SAFETY: the slot's count, given up as the slot goes.
        #[expect(unsafe_code, reason = "gives up the slot's count")]
        unsafe {
            Node::release(self.node());
        }
    }
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap {
            head: Default::default(),
            height: AtomicUsize::new(1),
            writer: WriterLine {
                lock: Mutex::new(()),
                len: AtomicUsize::new(0),
            },
        }
    }
}

impl Drop for KeyMap {
    fn drop(&mut self) {
        let mut next = self.head[0].load(Ordering::Relaxed);
        while let Some(node) = NonNull::new(next) {
            // SAFETY: `&mut self`: no reader or slot remains (slots borrow the map), so every
            // node still linked is the map's alone (removed ones are not reachable from here:
            // they are the collector's or a slot's). Each is visited once, its successor read
            // before it is freed.
            #[expect(unsafe_code, reason = "frees the nodes still linked at drop")]
            unsafe {
                next = node.as_ref().next(0).load(Ordering::Relaxed);
                Node::free(node.as_ptr());
            }
        }
    }
}

/// A node height: `n` with probability `(3/4) 4^-(n-1)`, at most [`MAX_HEIGHT`]. From the
/// thread's own generator, so inserts share no state.
///
/// One node in four reaches the next level, rather than one in two: a search passes more
/// nodes per level but has half as many levels to descend, and nodes carry fewer links, so
/// more of the upper levels stay in cache.
fn random_height() -> usize {
    let bits = fastrand::u32(..);
    (1 + bits.trailing_zeros() as usize / 2).min(MAX_HEIGHT)
}

impl KeyMap {
    /// The forward link at `level` of `at` (`None`: the head).
    #[inline]
    fn link<'n>(&'n self, at: Option<NodeRef<'n>>, level: usize) -> &'n AtomicPtr<Node> {
        match at {
            Some(node) => node.get().next(level),
            None => &self.head[level],
        }
    }

    /// Walks down from the top level, moving right past every node whose key is `before` the
    /// sought place. Returns the last such node at the bottom level (`None`: the head) and the
    /// first node after it (removed nodes included), and records the last one of each level in
    /// `preds` if given.
    #[inline]
    fn descend<'g>(
        &'g self,
        guard: &'g Guard,
        before: impl Fn(&[u8]) -> bool,
        mut preds: Option<&mut Preds<'g>>,
    ) -> (Option<NodeRef<'g>>, Option<NodeRef<'g>>) {
        let mut pred: Option<NodeRef<'g>> = None;
        // The node that stopped the level above: known not to be `before`, so no need to
        // compare it again when it stops this level too.
        let mut stop: Option<NonNull<Node>> = None;
        let mut succ = None;
        for level in (0..self.height.load(Ordering::Relaxed)).rev() {
            loop {
                succ = load(self.link(pred, level), guard);
                match succ {
                    Some(next) if Some(next.ptr) != stop && before(next.key()) => {
                        pred = Some(next);
                    }
                    _ => break,
                }
            }
            stop = succ.map(|n| n.ptr);
            if let Some(preds) = preds.as_deref_mut() {
                preds[level] = pred;
            }
        }
        (pred, succ)
    }

    /// The first node at or after `key` that is not removed, if its key is `key`.
    #[inline]
    fn find<'g>(&'g self, key: &[u8], guard: &'g Guard) -> Option<NodeRef<'g>> {
        let (_, succ) = self.descend(guard, |k| compare(k, key).is_lt(), None);
        succ.filter(|n| !n.is_removed() && n.key() == key)
    }

    /// The first node after `at` (`None`: the head) at the bottom level that is not removed.
    #[inline]
    fn next_live<'g>(&'g self, at: Option<NodeRef<'_>>, guard: &'g Guard) -> Option<NodeRef<'g>> {
        let mut next = load(self.link(at, 0), guard);
        while let Some(node) = next.filter(|n| n.is_removed()) {
            next = load(node.get().next(0), guard);
        }
        next
    }

    /// The first live node at or after `start` (`None`: from the first key), or after it if
    /// `exclusive`.
    fn lower_bound<'g>(
        &'g self,
        start: Option<&[u8]>,
        exclusive: bool,
        guard: &'g Guard,
    ) -> Option<NodeRef<'g>> {
        let pred = match start {
            None => None,
            Some(start) if exclusive => self.descend(guard, |k| compare(k, start).is_le(), None).0,
            Some(start) => self.descend(guard, |k| compare(k, start).is_lt(), None).0,
        };
        self.next_live(pred, guard)
    }

    /// Unlinks `node` from every level and drops its linked count; `false` if it was already
    /// removed. Called with the writer lock held.
    fn unlink(&self, node: NodeRef<'_>, guard: &Guard) -> bool {
        debug_assert!(
            self.writer.lock.is_locked(),
            "an unlink without the writer lock"
        );
        if node.is_removed() {
            return false;
        }
        node.removed.store(true, Ordering::Release);
        let mut preds: Preds<'_> = [None; MAX_HEIGHT];
        self.descend(guard, |k| compare(k, node.key()).is_lt(), Some(&mut preds));
        for level in (0..usize::from(node.height)).rev() {
            let link = self.link(preds[level], level);
            debug_assert!(ptr::eq(link.load(Ordering::Relaxed), node.ptr.as_ptr()));
            link.store(
                node.get().next(level).load(Ordering::Relaxed),
                Ordering::Release,
            );
        }
        self.writer.len.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the node's linked count, given up now that it is unlinked; `removed` was
        // false and is set under the writer lock, so this runs once per node.
        #[expect(unsafe_code, reason = "gives up an unlinked node's linked count")]
        unsafe {
            Node::release(node);
        }
        true
    }

    /// Brings the bottom `height` levels of `preds`, found for `key` without the lock, up to
    /// date under it: moves each level right past nodes linked since, or searches again if
    /// one of them was removed. Returns the live node holding `key`, if there is one. Called
    /// with the writer lock held.
    fn settle<'g>(
        &'g self,
        key: &[u8],
        height: usize,
        preds: &mut Preds<'g>,
        guard: &'g Guard,
    ) -> Option<NodeRef<'g>> {
        let succ = if preds[..height].iter().flatten().any(|p| p.is_removed()) {
            *preds = [None; MAX_HEIGHT];
            self.descend(guard, |k| compare(k, key).is_lt(), Some(preds))
                .1
        } else {
            let from = *preds;
            self.walk_from(&from, key, height, preds, guard)
        };
        succ.filter(|n| n.key() == key)
    }

    /// A new node for `key`, of a random height (at most one level above the map's).
    fn new_node(&self, key: &[u8], cell: ChainCell) -> NonNull<Node> {
        let height = random_height().min(self.height.load(Ordering::Relaxed) + 1);
        Node::alloc(key, cell, height)
    }

    /// Links `node` (fresh from [`KeyMap::new_node`]) after `preds` (settled) at each of its
    /// levels. Called with the writer lock held.
    ///
    /// The links store `node` itself, the pointer [`Node::alloc`] returned: every pointer
    /// later loaded from them carries the allocation's provenance, so the node can be freed
    /// through it.
    fn link_in<'g>(
        &'g self,
        node: NonNull<Node>,
        preds: &Preds<'g>,
        _pinned: &'g Guard,
    ) -> NodeRef<'g> {
        let raw = node.as_ptr();
        // SAFETY: fresh from `Node::alloc` and not yet shared; linked below under `guard`,
        // after which it is freed only through the collector (module docs), so it lives for
        // `'g`.
        #[expect(unsafe_code, reason = "a fresh node lives as long as its pin")]
        let node = unsafe { NodeRef::new(node) };
        let height = usize::from(node.height);
        for (level, pred) in preds.iter().enumerate().take(height) {
            node.get().next(level).store(
                self.link(*pred, level).load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
        }
        for (level, pred) in preds.iter().enumerate().take(height) {
            self.link(*pred, level).store(raw, Ordering::Release);
        }
        if height > self.height.load(Ordering::Relaxed) {
            self.height.store(height, Ordering::Relaxed);
        }
        self.writer.len.fetch_add(1, Ordering::Relaxed);
        node
    }

    /// The number of keys (including empty slots not yet reclaimed).
    pub(crate) fn len(&self) -> usize {
        self.writer.len.load(Ordering::Relaxed)
    }

    /// A counted handle on `key`'s node, if present.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Slot<'_>> {
        let guard = epoch::pin();
        let node = self.find(key, &guard)?;
        // A node found removed, or whose count already reached zero, is being unlinked: the
        // key is absent.
        node.try_acquire().then(|| Slot::adopt(self, node))
    }

    /// A counted handle on `key`'s node, inserting it with an empty cell first if absent.
    ///
    /// The search runs without the lock, from the head; an insert allocates its node before
    /// taking the writer lock, then brings the search up to date under it and links.
    pub(crate) fn get_or_insert(&self, key: &[u8]) -> Slot<'_> {
        let guard = epoch::pin();
        let mut preds: Preds<'_> = [None; MAX_HEIGHT];
        let before = |k: &[u8]| compare(k, key).is_lt();
        let (_, succ) = self.descend(&guard, before, Some(&mut preds));
        if let Some(found) = succ.filter(|n| !n.is_removed() && n.key() == key)
            && found.try_acquire()
        {
            return Slot::adopt(self, found);
        }
        let node = self.new_node(key, ChainCell::empty());
        let _writer = self.writer.lock.lock();
        self.settle_and_link(node, &mut preds, &guard)
    }

    /// Counted handles on `keys`' nodes, one per key in order, inserting each absent key with
    /// an empty cell first ([`KeyMap::get_or_insert`] for each).
    ///
    /// Each key is searched from the head, so it costs O(log n) whatever its distance from
    /// the others; a search from the previous key's place would carry a place of
    /// [`MAX_HEIGHT`] links from key to key.
    pub(crate) fn get_or_insert_all<K: AsRef<[u8]>>(&self, keys: &[K]) -> SmallVec<[Slot<'_>; 4]> {
        keys.iter()
            .map(|key| self.get_or_insert(key.as_ref()))
            .collect()
    }

    /// [`KeyMap::descend`] for `key` over the bottom `top` levels, using `from`, places found
    /// earlier for `key` (each a node below `key`, or the head). Returns the first node at or
    /// after `key` at the bottom level.
    ///
    /// Each level starts from whichever is further right: its place in `from`, or the place
    /// this walk found on the level above. So the walk never follows more links than a
    /// descent from the head (which starts each level from the place above). Starting each
    /// level from `from` alone would walk a lower level from an old place all the way to
    /// `key`: linear in the keys linked between them since.
    fn walk_from<'g>(
        &'g self,
        from: &Preds<'g>,
        key: &[u8],
        top: usize,
        preds: &mut Preds<'g>,
        guard: &'g Guard,
    ) -> Option<NodeRef<'g>> {
        let mut succ = None;
        let mut above: Option<NodeRef<'g>> = None;
        for level in (0..top).rev() {
            let mut pred = match (from[level], above) {
                (Some(here), Some(up)) if compare(here.key(), up.key()).is_lt() => Some(up),
                (None, up) => up,
                (here, _) => here,
            };
            loop {
                succ = load(self.link(pred, level), guard);
                match succ {
                    Some(next) if compare(next.key(), key).is_lt() => pred = Some(next),
                    _ => break,
                }
            }
            preds[level] = pred;
            above = pred;
        }
        succ
    }

    /// Under the writer lock: links `node` (fresh from [`KeyMap::new_node`]) at `preds`
    /// (found without the lock), or frees it if its key was inserted meanwhile. Returns the
    /// key's handle either way.
    fn settle_and_link<'a: 'g, 'g>(
        &'a self,
        node: NonNull<Node>,
        preds: &mut Preds<'g>,
        guard: &'g Guard,
    ) -> Slot<'a> {
        // SAFETY: fresh from `Node::alloc`, not shared yet.
        #[expect(unsafe_code, reason = "reads a fresh node before it is linked")]
        let (key, height) = unsafe { (node.as_ref().key(), usize::from(node.as_ref().height)) };
        match self.settle(key, height, preds, guard) {
            Some(found) => {
                // SAFETY: never linked or shared, and not used again.
                #[expect(unsafe_code, reason = "frees a fresh node that lost its insert")]
                unsafe {
                    Node::free(node.as_ptr());
                }
                // Linked and seen under the lock: its count is above zero.
                found.refs.fetch_add(1, Ordering::Relaxed);
                Slot::adopt(self, found)
            }
            None => Slot::adopt(self, self.link_in(node, preds, guard)),
        }
    }

    /// Inserts `key`, replacing any node it had.
    pub(crate) fn insert(&self, key: &[u8], value: ChainCell) {
        let guard = epoch::pin();
        let _writer = self.writer.lock.lock();
        let mut preds: Preds<'_> = [None; MAX_HEIGHT];
        let before = |k: &[u8]| compare(k, key).is_lt();
        let (_, succ) = self.descend(&guard, before, Some(&mut preds));
        if let Some(old) = succ.filter(|n| n.key() == key) {
            self.unlink(old, &guard);
            self.descend(&guard, before, Some(&mut preds));
        }
        let node = self.link_in(self.new_node(key, value), &preds, &guard);
        // SAFETY: the count `Node::alloc` reserved for a slot; no slot is handed out.
        #[expect(unsafe_code, reason = "gives up the count reserved for a slot")]
        unsafe {
            Node::release(node);
        }
    }

    /// Calls `f` with `key` and its versions, if present, under one epoch pin and without
    /// counting.
    pub(crate) fn read<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[u8], Versions<'_>) -> R,
    ) -> Option<R> {
        self.with(key, |found| found.map(|(key, versions)| f(key, versions)))
    }

    /// Calls `f` with `key` and its versions (`None` if absent) under one epoch pin, without
    /// counting. The versions are loaded before `f` runs.
    pub(crate) fn with<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&[u8], Versions<'_>)>) -> R,
    ) -> R {
        let guard = epoch::pin();
        let node = self.find(key, &guard).map(NodeRef::get);
        f(node.map(|n| (n.key(), n.cell.load(&guard))))
    }

    /// Visits the keys in `[start, end)` with their versions, ascending or descending, under
    /// one epoch pin and without counting, until `visit` returns `false`.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        mut visit: impl FnMut(&[u8], Versions<'_>) -> bool,
    ) {
        let guard = epoch::pin();
        if reverse {
            // The links run forward only: each step searches for the last key below the one
            // visited before.
            let mut bound = end;
            while let (Some(node), _) = self.descend(&guard, |k| compare(k, bound).is_lt(), None) {
                let node = node.get();
                let key = node.key();
                if compare(key, start).is_lt() {
                    break;
                }
                if !node.is_removed() && !visit(node.key(), node.cell.load(&guard)) {
                    break;
                }
                bound = key;
            }
            return;
        }
        let mut next = self.lower_bound(Some(start), false, &guard);
        while let Some(node) = next {
            if !compare(node.key(), end).is_lt() || !visit(node.key(), node.cell.load(&guard)) {
                break;
            }
            next = self.next_live(Some(node), &guard);
        }
    }

    /// Up to `n` keys after `after` (from the first key without it), in order.
    pub(crate) fn keys_after(&self, after: Option<&[u8]>, n: usize) -> Vec<KeyBytes> {
        let guard = epoch::pin();
        let mut out = Vec::with_capacity(n.min(1024));
        let mut next = self.lower_bound(after, true, &guard);
        while let Some(node) = next.filter(|_| out.len() < n) {
            out.push(KeyBytes::from(node.key()));
            next = self.next_live(Some(node), &guard);
        }
        out
    }

    /// Every node in key order, each a counted handle, with the epoch pinned only per step (so
    /// a long walk, such as a checkpoint, does not hold back memory reclamation).
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            map: self,
            at: None,
        }
    }
}

/// See [`KeyMap::iter`].
pub(crate) struct Iter<'a> {
    map: &'a KeyMap,
    /// The node returned last, counted so that it can be stepped from under a later pin.
    at: Option<Slot<'a>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Slot<'a>;

    fn next(&mut self) -> Option<Slot<'a>> {
        let guard = epoch::pin();
        let mut next = match &self.at {
            None => self.map.next_live(None, &guard),
            // Removed since it was returned: its links may point at nodes freed since (this
            // thread was not pinned meanwhile), so find the next key by searching.
            Some(at) if at.is_removed() => self.map.lower_bound(Some(at.key()), true, &guard),
            Some(at) => self.map.next_live(Some(at.node()), &guard),
        };
        loop {
            let node = next?;
            if node.try_acquire() {
                let slot = Slot::adopt(self.map, node);
                self.at = Some(slot.clone());
                return Some(slot);
            }
            next = self.map.next_live(Some(node), &guard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain_cell::Retired;
    use crate::version::{Chain, Version};

    thread_local! {
        /// Every link this thread's searches and walks have followed (tests only): the cost
        /// of a search, counted instead of timed.
        pub(super) static LINKS_FOLLOWED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn map_of(keys: &[&[u8]]) -> KeyMap {
        let map = KeyMap::default();
        for key in keys {
            map.insert(key, ChainCell::empty());
        }
        map
    }

    fn scanned(map: &KeyMap, start: &[u8], end: &[u8], reverse: bool, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        map.scan(start, end, reverse, |key, _| {
            out.push(key.to_vec());
            out.len() < n
        });
        out
    }

    #[test]
    fn scan_visits_the_half_open_range_in_either_direction_until_told_to_stop() {
        let map = map_of(&[b"a", b"b", b"c", b"d"]);
        assert_eq!(scanned(&map, b"b", b"d", false, 10), [b"b", b"c"]);
        assert_eq!(scanned(&map, b"b", b"d", true, 10), [b"c", b"b"]);
        assert_eq!(scanned(&map, b"a", b"z", false, 2), [b"a", b"b"]);
        assert_eq!(scanned(&map, b"a", b"z", true, 1), [b"d"]);
        assert!(scanned(&map, b"x", b"z", false, 10).is_empty());
    }

    #[test]
    fn a_forward_scan_stops_at_the_end_bound_and_never_past_it() {
        let map = map_of(&[b"p\x01a", b"p\x01b", b"p\x02", b"p\xff", b"q"]);
        assert_eq!(
            scanned(&map, b"p\x01", b"p\x02", false, 10),
            [b"p\x01a", b"p\x01b"]
        );
        assert_eq!(scanned(&map, b"p\x01b", b"p\xff", false, 10).len(), 2);
        assert_eq!(scanned(&map, b"p", b"p\xff\x00", false, 10).len(), 4);
        assert!(scanned(&map, b"p\x03", b"p\x04", false, 10).is_empty());
        assert!(scanned(&map, b"r", b"s", false, 10).is_empty());
    }

    #[test]
    fn a_slot_stays_readable_after_its_node_is_removed() {
        let map = map_of(&[b"a"]);
        let slot = map.get(b"a").expect("present");
        let other = slot.clone();
        assert!(slot.remove());
        assert!(!other.remove(), "already removed");
        assert!(other.is_removed());
        assert_eq!(other.key(), b"a");
        assert!(other.cell().load(&epoch::pin()).is_empty());
        assert!(map.get(b"a").is_none());
        assert!(map.read(b"a", |_, _| ()).is_none());
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn get_or_insert_returns_the_existing_node() {
        let map = KeyMap::default();
        let retired = Retired::default();
        let first = map.get_or_insert(&KeyBytes::from(&b"k"[..]));
        let second = map.get_or_insert(&KeyBytes::from(&b"k"[..]));
        let version = Version {
            version: 7,
            value: None,
            expires_at: None,
        };
        first.cell().store(Some(Chain::one(&version)), &retired);
        let guard = epoch::pin();
        let seen: Vec<u64> = second
            .cell()
            .load(&guard)
            .iter()
            .map(|v| v.version)
            .collect();
        assert_eq!(seen, [7], "both handles name the same node");
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn iter_and_keys_after_walk_every_key_in_order() {
        let map = map_of(&[b"c", b"a", b"b"]);
        let all: Vec<Vec<u8>> = map.iter().map(|slot| slot.key().to_vec()).collect();
        assert_eq!(all, [b"a", b"b", b"c"]);
        let first: Vec<Vec<u8>> = map.keys_after(None, 2).iter().map(|k| k.to_vec()).collect();
        assert_eq!(first, [b"a", b"b"]);
        let rest: Vec<Vec<u8>> = map
            .keys_after(Some(b"b"), 2)
            .iter()
            .map(|k| k.to_vec())
            .collect();
        assert_eq!(rest, [b"c"]);
    }

    /// `normal`, or `miri` when the tests run under Miri, which interprets them thousands of
    /// times slower: fewer keys, rounds and threads, through the same code paths.
    fn scaled<T>(normal: T, miri: T) -> T {
        if cfg!(miri) { miri } else { normal }
    }

    /// Rounds for the randomized tests below; `TUPLEKV_STRESS=N` multiplies them.
    fn stress() -> usize {
        std::env::var("TUPLEKV_STRESS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1)
    }

    fn key_of(n: u64) -> KeyBytes {
        // Big-endian, so byte order is numeric order; a shared prefix, as real keys have.
        let mut key = b"\x02users\x00".to_vec();
        key.extend_from_slice(&n.to_be_bytes());
        KeyBytes::from(key)
    }

    fn keys_of(map: &KeyMap) -> Vec<Vec<u8>> {
        scanned(map, b"", b"\xff", false, usize::MAX)
    }

    /// Runs `work(t)` on `n` threads at once; returns each thread's result, in thread order.
    fn on_threads<T: Send>(n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..n)
                .map(|t| {
                    let work = &work;
                    s.spawn(move || work(t))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("no panic"))
                .collect()
        })
    }

    #[test]
    fn random_inserts_removals_and_scans_match_an_ordered_set() {
        // Few enough keys that steps often meet a key already there (or just removed).
        let space = scaled(400, 40);
        for seed in 0..scaled(8, 2) * stress() as u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let map = KeyMap::default();
            let mut model = std::collections::BTreeSet::new();
            for step in 0..scaled(3000, 150) {
                let k = key_of(rng.u64(0..space));
                match rng.u8(0..10) {
                    0..=3 => {
                        let slot = map.get_or_insert(&k);
                        assert_eq!(slot.key(), k.as_slice());
                        model.insert(k.to_vec());
                    }
                    4 if rng.bool() => {
                        map.insert(&k, ChainCell::empty());
                        model.insert(k.to_vec());
                    }
                    4 => {
                        // Several keys, in any order, repeats included.
                        let keys: Vec<KeyBytes> = (0..rng.usize(1..6))
                            .map(|_| key_of(rng.u64(0..space)))
                            .collect();
                        let refs: Vec<&KeyBytes> = keys.iter().collect();
                        let slots = map.get_or_insert_all(&refs);
                        assert_eq!(slots.len(), keys.len());
                        for (slot, key) in slots.iter().zip(&keys) {
                            assert_eq!(slot.key(), key.as_slice(), "seed {seed} step {step}");
                            assert!(!slot.is_removed());
                            model.insert(key.to_vec());
                        }
                    }
                    5..=7 => {
                        let removed = map.get(k.as_slice()).is_some_and(|slot| slot.remove());
                        assert_eq!(
                            removed,
                            model.remove(k.as_slice()),
                            "seed {seed} step {step}"
                        );
                    }
                    _ => {
                        let (a, b) = (key_of(rng.u64(0..space)), key_of(rng.u64(0..space)));
                        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                        let n = rng.usize(1..50);
                        let want: Vec<Vec<u8>> = model
                            .range(lo.to_vec()..hi.to_vec())
                            .take(n)
                            .cloned()
                            .collect();
                        assert_eq!(scanned(&map, &lo, &hi, false, n), want, "seed {seed}");
                        let want: Vec<Vec<u8>> = model
                            .range(lo.to_vec()..hi.to_vec())
                            .rev()
                            .take(n)
                            .cloned()
                            .collect();
                        assert_eq!(scanned(&map, &lo, &hi, true, n), want, "seed {seed}");
                        let want: Vec<Vec<u8>> = model
                            .range(lo.to_vec()..)
                            .filter(|key| key.as_slice() != lo.as_slice())
                            .take(n)
                            .cloned()
                            .collect();
                        let after: Vec<Vec<u8>> = map
                            .keys_after(Some(&lo), n)
                            .iter()
                            .map(|key| key.to_vec())
                            .collect();
                        assert_eq!(after, want, "seed {seed}");
                    }
                }
                assert_eq!(map.len(), model.len(), "seed {seed} step {step}");
                assert_eq!(
                    map.read(k.as_slice(), |key, _| key.to_vec()),
                    model.get(k.as_slice()).cloned(),
                    "seed {seed} step {step}"
                );
            }
            let all: Vec<Vec<u8>> = map.iter().map(|slot| slot.key().to_vec()).collect();
            assert_eq!(
                all,
                model.iter().cloned().collect::<Vec<_>>(),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn tall_nodes_are_linked_and_unlinked_at_every_level() {
        let map = KeyMap::default();
        // With one node in four reaching the next level, `n` keys all staying below `levels`
        // has odds of (1 - 4^-(levels-1))^n: about e^-78 for 20k and five, e^-19 for 300 and
        // three.
        let (n, levels) = scaled((20_000, 5), (300, 3));
        for i in 0..n {
            map.insert(&key_of(i), ChainCell::empty());
        }
        assert!(
            map.height.load(Ordering::Relaxed) >= levels,
            "{n} keys reach at least {levels} levels"
        );
        for i in (0..n).step_by(2) {
            assert!(
                map.get(key_of(i).as_slice())
                    .is_some_and(|slot| slot.remove())
            );
        }
        assert_eq!(map.len(), n as usize / 2);
        let want: Vec<Vec<u8>> = (0..n)
            .filter(|i| i % 2 == 1)
            .map(|i| key_of(i).to_vec())
            .collect();
        assert_eq!(keys_of(&map), want);
        for i in 0..n {
            assert_eq!(
                map.read(key_of(i).as_slice(), |_, _| ()).is_some(),
                i % 2 == 1
            );
        }
    }

    #[test]
    fn an_iterator_steps_past_nodes_removed_under_it() {
        let map = KeyMap::default();
        for i in 0..10 {
            map.insert(&key_of(i), ChainCell::empty());
        }
        let mut iter = map.iter();
        let first = iter.next().expect("ten keys");
        assert_eq!(first.key(), key_of(0).as_slice());
        // The iterator's own node and the next two go while it is paused on the first.
        for i in 0..3 {
            assert!(
                map.get(key_of(i).as_slice())
                    .is_some_and(|slot| slot.remove())
            );
        }
        assert!(first.is_removed());
        let rest: Vec<KeyBytes> = iter.map(|slot| KeyBytes::from(slot.key())).collect();
        assert_eq!(rest, (3..10).map(key_of).collect::<Vec<_>>());
    }

    #[test]
    fn racing_inserts_of_one_key_share_one_node() {
        let map = KeyMap::default();
        let keys = scaled(200, 30);
        let slots: Vec<Vec<Slot<'_>>> = on_threads(scaled(4, 3), |_| {
            (0..keys).map(|i| map.get_or_insert(&key_of(i))).collect()
        });
        assert_eq!(map.len(), keys as usize);
        for i in 0..keys as usize {
            let first = slots[0][i].cell();
            assert!(slots.iter().all(|t| ptr::eq(t[i].cell(), first)), "key {i}");
        }
    }

    #[test]
    fn concurrent_inserts_and_removals_keep_every_reader_ordered() {
        let map = KeyMap::default();
        let writers = scaled(3u64, 2);
        let per_writer = scaled(300u64, 20);
        let stop = AtomicBool::new(false);
        let finals: Vec<std::collections::BTreeSet<Vec<u8>>> = std::thread::scope(|s| {
            let readers: Vec<_> = (0..scaled(2, 1))
                .map(|_| {
                    s.spawn(|| {
                        let mut scans = 0;
                        while !stop.load(Ordering::Relaxed) || scans == 0 {
                            let keys = keys_of(&map);
                            assert!(keys.windows(2).all(|w| w[0] < w[1]), "ordered, no twins");
                            let back = scanned(&map, b"", b"\xff", true, usize::MAX);
                            assert!(back.windows(2).all(|w| w[0] > w[1]), "ordered backwards");
                            scans += 1;
                        }
                    })
                })
                .collect();
            let workers: Vec<_> = (0..writers)
                .map(|w| {
                    let map = &map;
                    s.spawn(move || {
                        let mut rng = fastrand::Rng::with_seed(w);
                        let mut mine = std::collections::BTreeSet::new();
                        for _ in 0..scaled(4000, 150) * stress() {
                            // Interleaved key ranges: neighbours belong to different writers.
                            let k = key_of(rng.u64(0..per_writer) * writers + w);
                            if rng.bool() {
                                drop(map.get_or_insert(&k));
                                mine.insert(k.to_vec());
                            } else if let Some(slot) = map.get(k.as_slice()) {
                                assert!(slot.remove(), "only this writer removes its keys");
                                mine.remove(k.as_slice());
                            } else {
                                assert!(!mine.contains(k.as_slice()));
                            }
                        }
                        mine
                    })
                })
                .collect();
            let finals = workers
                .into_iter()
                .map(|w| w.join().expect("no panic"))
                .collect();
            stop.store(true, Ordering::Relaxed);
            for r in readers {
                r.join().expect("no panic");
            }
            finals
        });
        let want: Vec<Vec<u8>> = finals
            .into_iter()
            .flatten()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(keys_of(&map), want);
        assert_eq!(map.len(), want.len());
    }

    #[test]
    fn inserting_several_keys_returns_one_handle_per_key_in_order() {
        let map = map_of(&[b"b", b"d"]);
        let keys: Vec<KeyBytes> = [&b"a"[..], b"b", b"c", b"c", b"e", b"a\x00", b"d"]
            .into_iter()
            .map(KeyBytes::from)
            .collect();
        let refs: Vec<&KeyBytes> = keys.iter().collect();
        let slots = map.get_or_insert_all(&refs);
        let got: Vec<&[u8]> = slots.iter().map(Slot::key).collect();
        let want: Vec<&[u8]> = keys.iter().map(KeyBytes::as_slice).collect();
        assert_eq!(got, want);
        assert!(
            ptr::eq(slots[2].cell(), slots[3].cell()),
            "a repeated key gets one node"
        );
        let existing = map.get(b"b").expect("present");
        assert!(
            ptr::eq(slots[1].cell(), existing.cell()),
            "a present key keeps its node"
        );
        assert_eq!(keys_of(&map), [&b"a"[..], b"a\x00", b"b", b"c", b"d", b"e"]);
        assert_eq!(map.len(), 6);
    }

    #[test]
    fn racing_batches_of_overlapping_keys_share_one_node_per_key() {
        let map = KeyMap::default();
        let keys: Vec<KeyBytes> = (0..scaled(300, 30)).map(key_of).collect();
        let batches: Vec<Vec<Vec<Slot<'_>>>> = on_threads(scaled(4, 3), |t| {
            // Batches of three neighbours, each thread from another offset.
            (0..keys.len() - 2)
                .map(|i| {
                    let at = (i + t * 37) % (keys.len() - 2);
                    let refs: Vec<&KeyBytes> = keys[at..at + 3].iter().collect();
                    map.get_or_insert_all(&refs).into_vec()
                })
                .collect()
        });
        assert_eq!(map.len(), keys.len());
        for slot in batches.iter().flatten().flatten() {
            let current = map.get(slot.key()).expect("every key present");
            assert!(ptr::eq(slot.cell(), current.cell()), "one node per key");
        }
    }
}

/// How many links a search follows, counted rather than timed: a search must stay
/// logarithmic in the map's size whatever the distance between the keys of one batch.
///
/// Not under Miri: these tests count work rather than check memory, run no `unsafe` path the
/// tests above do not, and their maps of up to 100k keys would take hours to interpret.
#[cfg(all(test, not(miri)))]
mod search_cost {
    use super::tests::LINKS_FOLLOWED;
    use super::*;
    use tuplekv_codec::{encode_key, key};

    const COLORS: [&str; 4] = ["green", "blue", "red", "black"];

    /// The keys the secondary-index guide writes for record `i`, in its commit's order: the
    /// record, its colour entry, its email entry (three ranges far apart).
    fn guide_keys(i: u64) -> [KeyBytes; 3] {
        [
            KeyBytes::from(encode_key(&key!["users", i])),
            KeyBytes::from(encode_key(&key![
                "users_by_color",
                COLORS[(i % 4) as usize],
                i
            ])),
            KeyBytes::from(encode_key(&key![
                "users_by_email",
                format!("user{i}@example.com")
            ])),
        ]
    }

    /// A random key of 1 to 24 bytes from a small alphabet, so keys share prefixes.
    fn random_key(rng: &mut fastrand::Rng) -> KeyBytes {
        let len = rng.usize(1..=24);
        KeyBytes::from(
            (0..len)
                .map(|_| b"\x00\x01\x02abz\xff"[rng.usize(0..7)])
                .collect::<Vec<u8>>(),
        )
    }

    /// The links `work` follows on this thread.
    fn links_followed(work: impl FnOnce()) -> u64 {
        let before = LINKS_FOLLOWED.with(std::cell::Cell::get);
        work();
        LINKS_FOLLOWED.with(std::cell::Cell::get) - before
    }

    /// Links followed per key by `get_or_insert_all` over `batches`, on this thread.
    fn links_per_key(map: &KeyMap, batches: &[Vec<KeyBytes>]) -> f64 {
        let mut keys = 0;
        let links = links_followed(|| {
            for batch in batches {
                let refs: Vec<&KeyBytes> = batch.iter().collect();
                keys += map.get_or_insert_all(&refs).len();
            }
        });
        assert!(
            links >= keys as u64,
            "the count must see every search's links"
        );
        links as f64 / keys as f64
    }

    /// The bound checked: a small multiple of `log2(n)` links per key. A search from the head
    /// of a one-in-four skiplist follows about `2 log2(n)` on average (half as many levels as
    /// a binary one, about four links per level), and an insert walks its levels once more
    /// under the writer lock.
    fn bound(n: usize) -> f64 {
        4.0 * (n as f64).log2()
    }

    #[test]
    fn batches_of_keys_in_far_apart_ranges_cost_logarithmic_links_per_key() {
        let map = KeyMap::default();
        let mut next = 0u64;
        for target in [1_000usize, 10_000, 100_000] {
            while map.len() < target {
                for k in guide_keys(next) {
                    map.insert(&k, ChainCell::empty());
                }
                next += 1;
            }
            // Fresh records (inserts) and records already there (found), as commits bring them.
            let batches: Vec<Vec<KeyBytes>> = (0..300)
                .map(|j| {
                    let i = if j % 2 == 0 { next + j } else { j * 37 % next };
                    guide_keys(i).to_vec()
                })
                .collect();
            let n = map.len();
            let per_key = links_per_key(&map, &batches);
            assert!(
                per_key <= bound(n),
                "{per_key:.1} links per key in a map of {n} keys (bound {:.1})",
                bound(n)
            );
        }
    }

    #[test]
    fn batches_of_random_keys_cost_logarithmic_links_per_key() {
        let mut rng = fastrand::Rng::with_seed(26);
        let map = KeyMap::default();
        for target in [1_000usize, 10_000, 100_000] {
            while map.len() < target {
                map.insert(&random_key(&mut rng), ChainCell::empty());
            }
            // Sorted batches (each key after the one before) and batches in any order, of two
            // to six keys.
            let batches: Vec<Vec<KeyBytes>> = (0..300)
                .map(|j| {
                    let mut batch: Vec<KeyBytes> = (0..rng.usize(2..=6))
                        .map(|_| random_key(&mut rng))
                        .collect();
                    if j % 2 == 0 {
                        batch.sort();
                    }
                    batch
                })
                .collect();
            let n = map.len();
            let per_key = links_per_key(&map, &batches);
            assert!(
                per_key <= bound(n),
                "seed 26: {per_key:.1} links per key in a map of {n} keys (bound {:.1})",
                bound(n)
            );
        }
    }
}
