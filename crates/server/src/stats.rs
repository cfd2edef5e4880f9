//! [`ServerStats`]: counters a running server updates and anyone holding the `Arc` can read.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Request counts by endpoint, and what is open now. All counters are relaxed atomics: each is
/// exact on its own, but two read one after the other need not be from the same instant.
#[derive(Debug, Default)]
pub struct ServerStats {
    metadata: AtomicU64,
    snapshot_read: AtomicU64,
    atomic_write: AtomicU64,
    watch: AtomicU64,
    refused: AtomicU64,
    connections: AtomicU64,
    connections_refused: AtomicU64,
    open_connections: AtomicUsize,
    open_watch_streams: AtomicUsize,
    request_bodies_waiting: AtomicUsize,
    body_slots_refused: AtomicU64,
    body_reads_timed_out: AtomicU64,
    watch_streams_stalled: AtomicU64,
    held_snapshots: AtomicUsize,
}

/// Which endpoint a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Metadata,
    SnapshotRead,
    AtomicWrite,
    Watch,
}

impl ServerStats {
    /// Snapshots held for clients of tuplekv's extension now (as of the last hold or release).
    pub fn held_snapshots(&self) -> usize {
        self.held_snapshots.load(Ordering::Relaxed)
    }

    pub(crate) fn set_held_snapshots(&self, n: usize) {
        self.held_snapshots.store(n, Ordering::Relaxed);
    }

    /// Metadata exchanges (`POST /`) received.
    pub fn metadata_requests(&self) -> u64 {
        self.metadata.load(Ordering::Relaxed)
    }

    /// `snapshot_read` requests received.
    pub fn snapshot_read_requests(&self) -> u64 {
        self.snapshot_read.load(Ordering::Relaxed)
    }

    /// `atomic_write` requests received.
    pub fn atomic_write_requests(&self) -> u64 {
        self.atomic_write.load(Ordering::Relaxed)
    }

    /// `watch` requests received.
    pub fn watch_requests(&self) -> u64 {
        self.watch.load(Ordering::Relaxed)
    }

    /// Requests answered with an error status (any endpoint).
    pub fn refused_requests(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections accepted and served since the start.
    pub fn connections_accepted(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections closed at once because [`crate::limits::CONNECTIONS_MAX`] (or the
    /// configured limit) were open.
    pub fn connections_refused(&self) -> u64 {
        self.connections_refused.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open_connections.load(Ordering::Relaxed)
    }

    /// Watch streams open now.
    pub fn open_watch_streams(&self) -> usize {
        self.open_watch_streams.load(Ordering::Relaxed)
    }

    /// Requests waiting now for a slot to read their body in (see
    /// [`crate::limits::REQUEST_BODIES_IN_FLIGHT_MAX`]).
    pub fn request_bodies_waiting(&self) -> usize {
        self.request_bodies_waiting.load(Ordering::Relaxed)
    }

    /// Requests answered 503 because no body slot was free (a large body that waited its
    /// longest, or a metadata exchange without the token that found its slots taken).
    pub fn body_slots_refused(&self) -> u64 {
        self.body_slots_refused.load(Ordering::Relaxed)
    }

    /// Requests answered 408 because their body did not arrive within the read timeout.
    pub fn body_reads_timed_out(&self) -> u64 {
        self.body_reads_timed_out.load(Ordering::Relaxed)
    }

    /// HTTP/1.1 watch streams whose connection was closed because their client left a frame
    /// untaken past the watch send timeout.
    pub fn watch_streams_stalled(&self) -> u64 {
        self.watch_streams_stalled.load(Ordering::Relaxed)
    }

    pub(crate) fn body_slot_timed_out(&self) {
        self.body_slots_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn body_read_timed_out(&self) {
        self.body_reads_timed_out.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_stream_stalled(&self) {
        self.watch_streams_stalled.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request waiting for a body slot until the guard is dropped.
    pub(crate) fn wait_for_body_slot(self: &std::sync::Arc<Self>) -> OpenGuard {
        self.request_bodies_waiting.fetch_add(1, Ordering::Relaxed);
        OpenGuard {
            stats: std::sync::Arc::clone(self),
            which: Open::BodyWait,
        }
    }

    pub(crate) fn request(&self, endpoint: Endpoint) {
        let counter = match endpoint {
            Endpoint::Metadata => &self.metadata,
            Endpoint::SnapshotRead => &self.snapshot_read,
            Endpoint::AtomicWrite => &self.atomic_write,
            Endpoint::Watch => &self.watch,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection open until the guard is dropped.
    pub(crate) fn open_connection(self: &std::sync::Arc<Self>) -> OpenGuard {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenGuard {
            stats: std::sync::Arc::clone(self),
            which: Open::Connection,
        }
    }

    /// Counts a watch stream open until the guard is dropped, unless `max` are open already.
    pub(crate) fn try_open_watch(self: &std::sync::Arc<Self>, max: usize) -> Option<OpenGuard> {
        self.open_watch_streams
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(OpenGuard {
            stats: std::sync::Arc::clone(self),
            which: Open::WatchStream,
        })
    }
}

impl fmt::Display for ServerStats {
    /// One line for the log: request counts and what is open.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "metadata={} snapshot_read={} atomic_write={} watch={} refused={} connections={} \
             connections_refused={} open_connections={} open_watch_streams={} \
             body_slots_refused={} body_reads_timed_out={} watch_streams_stalled={}",
            self.metadata_requests(),
            self.snapshot_read_requests(),
            self.atomic_write_requests(),
            self.watch_requests(),
            self.refused_requests(),
            self.connections_accepted(),
            self.connections_refused(),
            self.open_connections(),
            self.open_watch_streams(),
            self.body_slots_refused(),
            self.body_reads_timed_out(),
            self.watch_streams_stalled(),
        )
    }
}

#[derive(Debug)]
enum Open {
    Connection,
    WatchStream,
    BodyWait,
}

/// Decrements an open-count when dropped.
#[derive(Debug)]
pub(crate) struct OpenGuard {
    stats: std::sync::Arc<ServerStats>,
    which: Open,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let counter = match self.which {
            Open::Connection => &self.stats.open_connections,
            Open::WatchStream => &self.stats.open_watch_streams,
            Open::BodyWait => &self.stats.request_bodies_waiting,
        };
        counter.fetch_sub(1, Ordering::Relaxed);
    }
}
