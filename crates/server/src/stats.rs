//! [`ServerStats`]: counters a running server updates and anyone holding the `Arc` can read
//! (the Prometheus exporter, `metrics.rs`, reads them at each scrape).

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The routes requests are counted by, as the metrics label them: the four KV Connect
/// endpoints, the health probes, and anything else (a 404, `/metrics`).
pub(crate) const ROUTES: [&str; 6] = [
    "metadata",
    "snapshot_read",
    "atomic_write",
    "watch",
    "health",
    "other",
];

/// The response statuses counted one by one; any other is counted as `other`.
pub(crate) const STATUSES: [u16; 13] = [
    200, 400, 401, 404, 405, 408, 409, 410, 413, 415, 429, 500, 503,
];

/// Status slots: one per [`STATUSES`] entry, then `other`.
const STATUS_SLOTS: usize = STATUSES.len() + 1;

/// Upper bounds of the request latency buckets (Prometheus `le`); a last `+Inf` bucket takes
/// the rest. From 100 µs (an in-memory read) to 10 s (a body that waits its slot).
pub const LATENCY_BUCKETS: [Duration; 15] = [
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_millis(2_500),
    Duration::from_secs(10),
];

/// One route's latencies: a count per bucket (not cumulative) and their sum.
#[derive(Debug, Default)]
pub(crate) struct Latency {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Latency {
    fn observe(&self, elapsed: Duration) {
        let slot = LATENCY_BUCKETS.partition_point(|bound| *bound < elapsed);
        if let Some(bucket) = self.buckets.get(slot) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The count of each bucket (the last is `+Inf`) and the sum of the latencies.
    pub(crate) fn read(&self) -> ([u64; LATENCY_BUCKETS.len() + 1], Duration) {
        let counts =
            std::array::from_fn(|i| self.buckets.get(i).map_or(0, |b| b.load(Ordering::Relaxed)));
        (
            counts,
            Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)),
        )
    }
}

/// The route of a request path, as an index of [`ROUTES`] (paths relative to the router).
pub(crate) fn route_of(path: &str) -> usize {
    match path {
        "/" => 0,
        "/v2/snapshot_read" => 1,
        "/v2/atomic_write" => 2,
        "/v2/watch" => 3,
        "/healthz" | "/readyz" => 4,
        _ => 5,
    }
}

/// The slot of `status` among [`STATUSES`] (the last slot is `other`).
fn status_slot(status: u16) -> usize {
    STATUSES
        .iter()
        .position(|&s| s == status)
        .unwrap_or(STATUSES.len())
}

/// The label of status slot `slot`.
pub(crate) fn status_label(slot: usize) -> String {
    STATUSES
        .get(slot)
        .map_or_else(|| "other".to_owned(), u16::to_string)
}

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
    /// Responses by route ([`ROUTES`]) and status ([`STATUSES`], then other).
    responses: [[AtomicU64; STATUS_SLOTS]; ROUTES.len()],
    /// Time to the response head, by route.
    latency: [Latency; ROUTES.len()],
    request_bytes: AtomicU64,
    response_bytes: AtomicU64,
    commits: AtomicU64,
    commit_conflicts: AtomicU64,
}

/// Which endpoint a request went to (its index in [`ROUTES`] is its discriminant).
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

    /// Writes committed (`atomic_write` requests whose checks held).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Writes refused because a check failed (answered 200 with the failed checks).
    pub fn commit_conflicts(&self) -> u64 {
        self.commit_conflicts.load(Ordering::Relaxed)
    }

    /// Request body bytes read.
    pub fn request_bytes(&self) -> u64 {
        self.request_bytes.load(Ordering::Relaxed)
    }

    /// Response body bytes sent: whole bodies when their head is sent, watch frames as they
    /// are handed out.
    pub fn response_bytes(&self) -> u64 {
        self.response_bytes.load(Ordering::Relaxed)
    }

    /// Responses of route `route` ([`ROUTES`]) with status slot `slot`.
    pub(crate) fn responses(&self, route: usize, slot: usize) -> u64 {
        self.responses
            .get(route)
            .and_then(|r| r.get(slot))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The status slots of [`ServerStats::responses`].
    pub(crate) const STATUS_SLOTS: usize = STATUS_SLOTS;

    /// The latencies of route `route`.
    pub(crate) fn latency(&self, route: usize) -> Option<&Latency> {
        self.latency.get(route)
    }

    /// Counts a response of `route` with `status`, its time to the head, and its body's
    /// length when known.
    pub(crate) fn responded(
        &self,
        route: usize,
        status: u16,
        elapsed: Duration,
        body_len: Option<u64>,
    ) {
        if let Some(c) = self
            .responses
            .get(route)
            .and_then(|r| r.get(status_slot(status)))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(l) = self.latency.get(route) {
            l.observe(elapsed);
        }
        if let Some(n) = body_len.filter(|&n| n > 0) {
            self.response_bytes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts `n` request body bytes read.
    pub(crate) fn received(&self, n: usize) {
        self.request_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a commit's outcome: committed, or refused by a failed check.
    pub(crate) fn commit_outcome(&self, committed: bool) {
        let counter = match committed {
            true => &self.commits,
            false => &self.commit_conflicts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
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
            "metadata={} snapshot_read={} atomic_write={} commits={} commit_conflicts={} \
             watch={} refused={} connections={} \
             connections_refused={} open_connections={} open_watch_streams={} \
             body_slots_refused={} body_reads_timed_out={} watch_streams_stalled={}",
            self.metadata_requests(),
            self.snapshot_read_requests(),
            self.atomic_write_requests(),
            self.commits(),
            self.commit_conflicts(),
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

impl OpenGuard {
    /// Counts `n` response bytes sent on what this guard counts (a watch stream's frame).
    pub(crate) fn sent(&self, n: usize) {
        self.stats
            .response_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
    }
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
