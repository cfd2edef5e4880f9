//! The server's limits: the KV Connect protocol's (per request) and the transport's (per
//! connection and per server). Each has a test at the limit and one past it
//! (`tests/limits.rs`). Where the engine has the same limit, the constant is the engine's.

use std::time::Duration;

use tuplekv_engine::limits as engine;

/// Most read ranges in one `snapshot_read` (a `getMany` of ten keys is ten ranges).
pub const READ_RANGES_MAX: usize = engine::GET_MANY_KEYS_MAX;
/// Most entries one `snapshot_read` may ask for: the sum of its ranges' limits (each ≥ 1).
pub const READ_ENTRIES_MAX: usize = engine::LIST_BATCH_SIZE_MAX;
/// Largest encoded key a read range may use as its start or end.
pub const READ_KEY_SIZE_MAX: usize = engine::KEY_SIZE_MAX_READ;
/// Largest encoded key a mutation or a watch may use.
pub const WRITE_KEY_SIZE_MAX: usize = engine::KEY_SIZE_MAX_WRITE;
/// Most checks in one `atomic_write`: what Deno's own CLI accepts (denokv allows only 10).
pub const CHECKS_MAX: usize = engine::CHECKS_MAX;
/// Most mutations in one `atomic_write`.
pub const MUTATIONS_MAX: usize = engine::MUTATIONS_MAX;
/// Largest value payload, in bytes.
pub const VALUE_SIZE_MAX: usize = engine::VALUE_SIZE_MAX;
/// Most bytes one `atomic_write` may carry, counted as the engine counts them: each check and
/// delete its key, each value-carrying mutation twice its key plus its value.
pub const TOTAL_MUTATION_SIZE_MAX: usize = engine::TOTAL_MUTATION_SIZE_MAX;
/// Most counters one `atomic_write` of tuplekv's extension takes numbers from.
pub const COUNTERS_PER_COMMIT_MAX: usize = engine::COUNTERS_PER_COMMIT_MAX;
/// Most number slots (placeholders) in one `atomic_write` of tuplekv's extension.
pub const NUMBER_SLOTS_MAX: usize = engine::NUMBER_SLOTS_MAX;
/// Most keys one `watch` request may watch.
pub const WATCHED_KEYS_MAX: usize = engine::WATCH_KEYS_MAX;

/// Largest request body, in bytes. The biggest valid `atomic_write` (819 200 payload bytes
/// plus the framing of 1000 mutations and 100 checks) fits with room to spare.
pub const REQUEST_BODY_MAX: usize = 1 << 20;
/// Largest metadata exchange body (`POST /`), in bytes. A real one is
/// `{"supportedVersions":[1,2,3]}`.
pub const METADATA_BODY_MAX: usize = 4 << 10;
/// Largest body that is read without a slot of [`REQUEST_BODIES_IN_FLIGHT_MAX`]: one whose
/// declared length (`Content-Length`) is at most one HTTP/2 stream window. Such bodies hold
/// no server-wide resource, so reads and typical writes never queue behind large uploads,
/// and their memory is bounded per connection by HTTP/2 flow control (at most
/// [`H2_STREAMS_PER_CONNECTION_MAX`] × [`H2_STREAM_WINDOW`]) or, over HTTP/1.1, by one
/// request at a time.
pub const SMALL_BODY_MAX: usize = H2_STREAM_WINDOW as usize;
/// Most large request bodies (longer than [`SMALL_BODY_MAX`], or of no declared length)
/// being read and held at once across the server: at most this many times
/// [`REQUEST_BODY_MAX`] bytes (64 MiB) of large bodies are buffered at once. A request past
/// it waits for a slot, at most [`BODY_SLOT_WAIT_MAX`]; the bodies of waiting HTTP/2 streams
/// stay within their stream windows, which never exhaust their connection's window (see
/// [`H2_STREAM_WINDOW`]), so a waiter can never stop a slot holder's body from arriving.
pub const REQUEST_BODIES_IN_FLIGHT_MAX: usize = 64;
/// How long a large body waits for a slot of [`REQUEST_BODIES_IN_FLIGHT_MAX`]; past it the
/// request is answered 503 with `Retry-After`, having done nothing (Deno's and tuplekv's
/// clients retry it).
pub const BODY_SLOT_WAIT_MAX: Duration = Duration::from_secs(5);
/// How long a request body may take to arrive, counted from when the server starts reading
/// it (once it has its slot, if it needs one). Past it the request is answered 408, its slot
/// freed, and an HTTP/1.1 connection closed: a client that sends a byte a second holds
/// nothing for longer than this. It allows [`REQUEST_BODY_MAX`] at about 100 kB/s.
pub const REQUEST_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most metadata-exchange bodies being read at once that came without the valid token in
/// their `Authorization` header (they are read before the token is judged, so that errors
/// come in denokv's order). One past it is answered 503 at once: such clients never wait,
/// and never use what clients with the token use (those read their metadata body as a
/// small body, [`SMALL_BODY_MAX`]).
pub const UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX: usize = 64;
/// Largest header block of one request, in bytes (HTTP/1.1 read buffer and HTTP/2
/// `SETTINGS_MAX_HEADER_LIST_SIZE`). Hyper's HTTP/1.1 buffer cannot be smaller than 8 KiB.
pub const HEADER_BLOCK_SIZE_MAX: usize = 16 << 10;
/// Most concurrent HTTP/2 streams one connection may open (`SETTINGS_MAX_CONCURRENT_STREAMS`);
/// a client with more requests queues them itself (Deno's and tuplekv's do).
pub const H2_STREAMS_PER_CONNECTION_MAX: u32 = 128;
/// Each HTTP/2 stream's receive window (`SETTINGS_INITIAL_WINDOW_SIZE`), in bytes. The
/// connection's window is this times the connection's stream limit (8 MiB by default), so
/// the bodies of every stream the server has not read yet (waiting for a slot, say) fit in
/// the connection window with room left: flow control can stop one stream, never the
/// connection. That is what a connection's buffered request data is bounded by.
pub const H2_STREAM_WINDOW: u32 = 64 << 10;
/// Most connections open at once. At the limit, a new connection takes the slot of the
/// oldest connection that has not shown the access token (idle, or sending its first
/// request slowly), which is closed; when every open connection has shown it, the new one
/// is closed as soon as it is accepted.
pub const CONNECTIONS_MAX: usize = 1024;
/// How long a new connection waits for the slot of a connection closed to make room for it
/// (see [`CONNECTIONS_MAX`]) before it is refused.
pub const CONNECTION_SLOT_WAIT_MAX: Duration = Duration::from_secs(1);
/// The least time between two log lines about refused connections: refusals in between are
/// counted and reported in the next line (and in `ServerStats::connections_refused`).
pub const REFUSED_CONNECTION_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The access token's least length, in characters (denokv's rule): a short token can be
/// guessed, and an empty one would match `Authorization: Bearer `.
pub const ACCESS_TOKEN_LEN_MIN: usize = 12;
/// The access token's greatest length, in bytes: it travels in every request's
/// `Authorization` header, which must fit [`HEADER_BLOCK_SIZE_MAX`] with the rest.
pub const ACCESS_TOKEN_LEN_MAX: usize = 1024;
/// Longest database name (`http://host:port/NAME`), in characters.
pub const DATABASE_NAME_LEN_MAX: usize = 63;
/// Most named databases open at once in one server (each holds its store's memory and, when
/// durable, its log's file handles); a request that would open one more gets 503.
pub const DATABASES_OPEN_MAX: usize = 256;
/// Most access tokens valid at once (an old and a new one during a rotation, one per
/// application, a few spare).
pub const ACCESS_TOKENS_MAX: usize = 64;
/// Largest tokens file (`tuplekv serve --tokens-file`), in bytes.
pub const TOKENS_FILE_SIZE_MAX: u64 = 256 * 1024;
/// The least time between two log lines about requests refused for a missing or wrong
/// access token: refusals in between are counted and reported in the next line.
pub const REFUSED_TOKEN_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Most watch streams open at once across the server; one past it gets 429.
pub const WATCH_STREAMS_MAX: usize = 1024;

/// How often an idle watch stream gets a keep-alive (a zero-length frame). The first one is
/// sent as soon as the stream opens.
pub const WATCH_PING_INTERVAL: Duration = Duration::from_secs(5);
/// The least watch ping interval: a configured interval below it (zero, say) is raised to it.
pub const WATCH_PING_INTERVAL_MIN: Duration = Duration::from_millis(10);
/// How long an HTTP/1.1 watch stream may leave a frame untaken (its client reads nothing,
/// so the server's buffers for it are full); past it the connection is closed, so an unread
/// stream holds at most one state and its buffers for this long. (Over HTTP/2 the client's
/// flow control window bounds what the server buffers for a stream.)
pub const WATCH_SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an HTTP/1.1 connection may take to send a request's header block, counted from
/// when the server starts waiting for one: on a new connection (its first bytes, for either
/// protocol) and on a kept-alive connection between requests. Past it the connection is
/// closed, so idle connections do not hold a slot of [`CONNECTIONS_MAX`] forever.
pub const H1_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a TLS handshake may take, counted from the client's first bytes; past it the
/// connection is closed, so a client that opens a connection and never finishes its
/// handshake does not hold a slot of [`CONNECTIONS_MAX`]. (Waiting for the first bytes is
/// bounded by [`H1_HEADER_READ_TIMEOUT`], as on a plain connection.)
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the server pings an HTTP/2 connection (`PING` frames), to find dead peers.
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long an HTTP/2 ping may go unacknowledged before the connection is closed.
pub const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long graceful shutdown waits for requests in flight (and for HTTP/2 clients to
/// acknowledge the GOAWAY) before it closes the connections that are left.
pub const SHUTDOWN_GRACE_MAX: Duration = Duration::from_secs(10);
/// How long a metadata token stays valid (`expiresAt` = now + this).
pub const METADATA_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Most snapshots the server holds for clients of tuplekv's extension (each pins the
/// versions it can see, so old versions are kept while it is held). One past it drops the
/// least recently used; a later read of that one gets 410 Gone, and a transaction reading it
/// runs again.
pub const SNAPSHOTS_HELD_MAX: usize = 4096;
/// How long a held snapshot stays after its last read; past it the server drops it.
pub const SNAPSHOT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most range checks in one `atomic_write` of tuplekv's extension.
pub const RANGE_CHECKS_MAX: usize = 1024;
/// Most snapshot releases one `snapshot_read` of tuplekv's extension may carry.
pub const RELEASES_PER_READ_MAX: usize = tuplekv_wire::RELEASES_PER_READ_MAX;
/// Most holds (client snapshots) recorded on one held snapshot. Past it, further holds are
/// served but not recorded, and the snapshot is no longer dropped by releases, only when idle
/// or too old (so no reader loses it early).
pub const HOLDS_PER_SNAPSHOT_MAX: usize = 65_536;
/// The longest a snapshot stays held, however often it is read: past it, its reads get 410
/// Gone (a transaction runs again), so a client cannot pin old versions for ever.
pub const SNAPSHOT_AGE_MAX: Duration = Duration::from_secs(10 * 60);
