//! [`Metrics`]: the server's counters as Prometheus text (format 0.0.4), for `GET /metrics`.
//!
//! Nothing here runs per request: the router updates the relaxed atomic counters of
//! [`ServerStats`] (one per database, and the transport's, server-wide), and a scrape reads
//! them, with what each database's [`StoreSampler`] reports, into text through
//! `prometheus-client`'s encoder.
//!
//! A server may serve several databases (one per URL path), each with its own
//! [`ServerConfig`](crate::ServerConfig) and so its own [`ServerStats`]: every per-database
//! series carries a `database` label ([`DEFAULT_DATABASE`] for the root one), and databases
//! are added (or removed) while the server runs. Connection-level series (connections, body
//! slots waited for) are the transport's, server-wide, without the label.
//!
//! ```
//! use std::sync::Arc;
//! use tuplekv_engine::Database;
//! use tuplekv_server::metrics::{DEFAULT_DATABASE, Metrics, database_sampler};
//! use tuplekv_server::{ServerConfig, router};
//!
//! let db = Database::in_memory();
//! let config = ServerConfig::new("a-long-secret-token").expect("a long enough token");
//! // The transport's counters are the root database's here (one database, one `ServerStats`).
//! let metrics = Metrics::new(Arc::clone(config.stats()));
//! metrics
//!     .add_database(DEFAULT_DATABASE, Arc::clone(config.stats()), Some(database_sampler(&db)))
//!     .expect("a new name");
//! // `GET /metrics` next to the KV Connect endpoints, behind the same access token.
//! let app = router(Arc::new(db), config.clone()).merge(metrics.router(Arc::clone(config.access_tokens())));
//! # let _ = app;
//! let text = metrics.encode().expect("encodes");
//! assert!(text.contains("tuplekv_commits_total{database=\"default\"} 0"));
//! ```
//!
//! # Series
//! Per database (label `database`): `tuplekv_requests_total` (labels `endpoint`, `status`),
//! `tuplekv_request_duration_seconds` (a histogram by `endpoint`: time to the response head,
//! so a watch's is the time to open it), `tuplekv_commits_total`,
//! `tuplekv_commit_conflicts_total` (writes refused by a failed check),
//! `tuplekv_request_bytes_total`, `tuplekv_response_bytes_total`, `tuplekv_open_watch_streams`,
//! `tuplekv_held_snapshots`, `tuplekv_body_slots_refused_total`,
//! `tuplekv_body_reads_timed_out_total`, `tuplekv_watch_streams_stalled_total`; and what its
//! sampler knows: `tuplekv_keys` and `tuplekv_stored_bytes` (live entries and their key and
//! value bytes), `tuplekv_versions`, `tuplekv_log_syncs_total` (syncs of the write-ahead log:
//! `rate(tuplekv_commits_total) / rate(tuplekv_log_syncs_total)` is the mean number of commits
//! a group commit made durable with one sync), `tuplekv_recovery_duration_seconds`,
//! `tuplekv_recovery_records_replayed` and `tuplekv_recovery_bytes_read`.
//! Server-wide: `tuplekv_connections_accepted_total`, `tuplekv_connections_refused_total`,
//! `tuplekv_open_connections`, `tuplekv_request_bodies_waiting`, `tuplekv_databases`.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tuplekv_engine::{Database, Key, ReadView, Selector};

use crate::error::ApiError;
pub use crate::stats::LATENCY_BUCKETS;
use crate::stats::{ROUTES, ServerStats, status_label};

/// The `database` label of the root database (the one served at `/`).
pub const DEFAULT_DATABASE: &str = "default";

/// How long [`database_sampler`] reuses its count of live keys and bytes (a scan of the whole
/// store) before scanning again: scrapes come every few seconds, and a large store should
/// not be scanned for each.
pub const STORE_SAMPLE_MAX_AGE: Duration = Duration::from_secs(10);

/// Entries [`database_sampler`] reads per scan of its snapshot.
const STORE_SCAN_BATCH: usize = 1000;

/// What a store tells the exporter at a scrape; `None` where it does not know.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StoreSample {
    /// Live entries.
    pub keys: Option<u64>,
    /// Bytes of the live entries' keys and values.
    pub stored_bytes: Option<u64>,
    /// Versions held in memory (with those kept for open snapshots).
    pub versions: Option<u64>,
    /// Syncs of the write-ahead log since the store was opened.
    pub log_syncs: Option<u64>,
    /// How long recovery took when the store was opened.
    pub recovery_duration: Option<Duration>,
    /// Commit records recovery replayed from the log.
    pub recovery_records_replayed: Option<u64>,
    /// Bytes of log and checkpoint recovery read.
    pub recovery_bytes_read: Option<u64>,
}

/// Reports a store's state at each scrape (called off the async runtime's workers, so it may
/// scan or wait briefly).
pub trait StoreSampler: Send + Sync + 'static {
    /// The store's state now.
    fn sample(&self) -> StoreSample;
}

impl<F: Fn() -> StoreSample + Send + Sync + 'static> StoreSampler for F {
    fn sample(&self) -> StoreSample {
        self()
    }
}

/// A [`StoreSampler`] of `db`: its live keys and their bytes (counted by a scan of the latest
/// state, reused for [`STORE_SAMPLE_MAX_AGE`]), its versions and log syncs, and what its
/// recovery did (a durable database). It holds a handle of `db`: drop the [`Metrics`] it is
/// added to before closing `db`.
pub fn database_sampler(db: &Database) -> Arc<dyn StoreSampler> {
    Arc::new(DatabaseSampler {
        db: db.clone(),
        max_age: STORE_SAMPLE_MAX_AGE,
        counted: Mutex::new(None),
    })
}

/// [`database_sampler`]'s sampler.
struct DatabaseSampler {
    db: Database,
    max_age: Duration,
    /// When the keys and bytes were last counted, and the counts.
    counted: Mutex<Option<(Instant, u64, u64)>>,
}

impl DatabaseSampler {
    /// Live keys and their bytes, counted again if the last count is older than `max_age`.
    fn keys_and_bytes(&self) -> Option<(u64, u64)> {
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, keys, bytes)) = *counted
            && at.elapsed() < self.max_age
        {
            return Some((keys, bytes));
        }
        let (keys, bytes) = count_live(&self.db)?;
        *counted = Some((Instant::now(), keys, bytes));
        Some((keys, bytes))
    }
}

/// Live entries of `db` and the bytes of their keys and values, by scans of one snapshot;
/// `None` if a scan fails.
fn count_live(db: &Database) -> Option<(u64, u64)> {
    let snapshot = db.snapshot();
    let mut range = Selector::prefix(&Key::empty()).byte_range().ok()?;
    let (mut keys, mut bytes) = (0u64, 0u64);
    loop {
        let batch = snapshot.scan(&range, false, STORE_SCAN_BATCH).ok()?;
        for entry in &batch {
            keys += 1;
            bytes += (entry.key.len() + entry.value.size()) as u64;
        }
        match batch.last() {
            Some(last) if batch.len() == STORE_SCAN_BATCH => {
                let mut next = last.key.to_vec();
                next.push(0);
                range.start = next;
            }
            _ => return Some((keys, bytes)),
        }
    }
}

impl StoreSampler for DatabaseSampler {
    fn sample(&self) -> StoreSample {
        let stats = self.db.stats();
        let (keys, stored_bytes) = self.keys_and_bytes().unzip();
        let report = self.db.recovery_report();
        StoreSample {
            keys,
            stored_bytes,
            versions: Some(stats.versions as u64),
            log_syncs: report.map(|_| stats.log_syncs),
            recovery_duration: report.map(|r| r.elapsed),
            recovery_records_replayed: report.map(|r| r.records_replayed),
            recovery_bytes_read: report.map(|r| r.bytes_read),
        }
    }
}

/// Why [`Metrics::add_database`] refused a database.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricsError {
    /// A database of this name is registered already.
    DuplicateDatabase(String),
}

impl std::fmt::Display for MetricsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricsError::DuplicateDatabase(name) => {
                write!(f, "the metrics already have a database named {name:?}")
            }
        }
    }
}

impl std::error::Error for MetricsError {}

/// One registered database.
struct Served {
    name: String,
    stats: Arc<ServerStats>,
    sampler: Option<Arc<dyn StoreSampler>>,
}

/// What the exporter reads at a scrape.
struct Sources {
    transport: Arc<ServerStats>,
    databases: RwLock<Vec<Arc<Served>>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

/// The Prometheus exporter of a server: cheap to clone (clones share the databases).
#[derive(Clone)]
pub struct Metrics {
    sources: Arc<Sources>,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("databases", &self.database_names())
            .finish_non_exhaustive()
    }
}

/// The `Collector` that reads [`Sources`] into the registry's encoder.
#[derive(Debug)]
struct Exporter(Arc<Sources>);

impl Metrics {
    /// An exporter with no database yet, whose connection-level series come from
    /// `transport` (the [`ServeOptions::stats`](crate::ServeOptions::stats) the server runs
    /// with).
    pub fn new(transport: Arc<ServerStats>) -> Metrics {
        let sources = Arc::new(Sources {
            transport,
            databases: RwLock::new(Vec::new()),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(Arc::clone(&sources))));
        Metrics {
            sources,
            registry: Arc::new(registry),
        }
    }

    /// Adds a database, labelled `name`, whose requests are counted in `stats` (its
    /// [`ServerConfig::stats`](crate::ServerConfig::stats)) and whose store, if `sampler` is
    /// given, is sampled at each scrape. May be called while the server runs.
    ///
    /// # Errors
    /// [`MetricsError::DuplicateDatabase`] if `name` is registered already (nothing changes).
    pub fn add_database(
        &self,
        name: impl Into<String>,
        stats: Arc<ServerStats>,
        sampler: Option<Arc<dyn StoreSampler>>,
    ) -> Result<(), MetricsError> {
        let name = name.into();
        let mut databases = self
            .sources
            .databases
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if databases.iter().any(|d| d.name == name) {
            return Err(MetricsError::DuplicateDatabase(name));
        }
        databases.push(Arc::new(Served {
            name,
            stats,
            sampler,
        }));
        Ok(())
    }

    /// Removes the database labelled `name` (a database no longer served); whether it was
    /// registered.
    pub fn remove_database(&self, name: &str) -> bool {
        let mut databases = self
            .sources
            .databases
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = databases.len();
        databases.retain(|d| d.name != name);
        databases.len() != before
    }

    /// The names of the registered databases, in the order they were added.
    pub fn database_names(&self) -> Vec<String> {
        self.sources
            .databases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|d| d.name.clone())
            .collect()
    }

    /// Every series now, as Prometheus text (format 0.0.4). Runs the samplers: call it off
    /// the async runtime's workers (the routes do).
    ///
    /// # Errors
    /// If the encoder refuses a series (a name it cannot write).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// `GET /metrics` behind `tokens` (`Authorization: Bearer <token>` with one of them,
    /// checked as the data path checks it: 401 otherwise; a replaced set applies at once).
    /// Merge it into the server's router.
    pub fn router(&self, tokens: Arc<crate::AccessTokens>) -> Router {
        let token = tokens;
        let metrics = self.clone();
        Router::new().route(
            METRICS_PATH,
            get(move |headers: HeaderMap| {
                let metrics = metrics.clone();
                let token = Arc::clone(&token);
                async move {
                    crate::app::authorize(&headers, &token)?;
                    Ok::<_, ApiError>(metrics.answer().await)
                }
            }),
        )
    }

    /// `GET /metrics` without a token: for a listener of its own that only the monitoring
    /// can reach (`tuplekv serve --metrics-addr`, loopback by default).
    pub fn open_router(&self) -> Router {
        let metrics = self.clone();
        Router::new().route(
            METRICS_PATH,
            get(move || {
                let metrics = metrics.clone();
                async move { metrics.answer().await }
            }),
        )
    }

    /// The scrape's answer, encoded on the blocking pool (samplers may scan a store).
    async fn answer(self) -> Response {
        match tokio::task::spawn_blocking(move || self.encode()).await {
            Ok(Ok(text)) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
                text,
            )
                .into_response(),
            Ok(Err(_)) | Err(_) => {
                tracing::error!("encoding the metrics failed");
                ApiError::internal().into_response()
            }
        }
    }
}

/// Where the routes answer.
pub const METRICS_PATH: &str = "/metrics";

/// The labels of a per-database series.
type Labels = Vec<(&'static str, String)>;

/// Writes one family of `kind` named `name` with a value per label set (nothing when
/// `rows` is empty).
fn family<V>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: &[(Labels, V)],
) -> std::fmt::Result
where
    V: prometheus_client::encoding::EncodeGaugeValue
        + prometheus_client::encoding::EncodeCounterValue,
{
    if rows.is_empty() {
        return Ok(());
    }
    let mut fam = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        let mut m = fam.encode_family(labels)?;
        match kind {
            MetricType::Counter => m.encode_counter::<NoLabelSet, _, u64>(value, None)?,
            _ => m.encode_gauge(value)?,
        }
    }
    Ok(())
}

/// The `database` label alone.
fn db_label(name: &str) -> Labels {
    vec![("database", name.to_owned())]
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> std::fmt::Result {
        let databases: Vec<Arc<Served>> = self
            .0
            .databases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let samples: Vec<(String, StoreSample)> = databases
            .iter()
            .filter_map(|d| Some((d.name.clone(), d.sampler.as_ref()?.sample())))
            .collect();
        let per_db = |read: fn(&ServerStats) -> u64| -> Vec<(Labels, u64)> {
            databases
                .iter()
                .map(|d| (db_label(&d.name), read(&d.stats)))
                .collect()
        };
        use MetricType::{Counter, Gauge};

        let mut requests = Vec::new();
        for d in &databases {
            for (route, endpoint) in ROUTES.iter().enumerate() {
                for slot in 0..ServerStats::STATUS_SLOTS {
                    let n = d.stats.responses(route, slot);
                    if n > 0 {
                        let labels = vec![
                            ("database", d.name.clone()),
                            ("endpoint", (*endpoint).to_owned()),
                            ("status", status_label(slot)),
                        ];
                        requests.push((labels, n));
                    }
                }
            }
        }
        family(
            &mut enc,
            "tuplekv_requests",
            "Requests answered, by endpoint and status.",
            Counter,
            &requests,
        )?;
        self.encode_latency(&mut enc, &databases)?;
        family(
            &mut enc,
            "tuplekv_commits",
            "Writes committed.",
            Counter,
            &per_db(ServerStats::commits),
        )?;
        family(
            &mut enc,
            "tuplekv_commit_conflicts",
            "Writes refused because a check failed.",
            Counter,
            &per_db(ServerStats::commit_conflicts),
        )?;
        family(
            &mut enc,
            "tuplekv_request_bytes",
            "Request body bytes read.",
            Counter,
            &per_db(ServerStats::request_bytes),
        )?;
        family(
            &mut enc,
            "tuplekv_response_bytes",
            "Response body bytes sent.",
            Counter,
            &per_db(ServerStats::response_bytes),
        )?;
        family(
            &mut enc,
            "tuplekv_open_watch_streams",
            "Watch streams open now.",
            Gauge,
            &per_db(|s| s.open_watch_streams() as u64),
        )?;
        family(
            &mut enc,
            "tuplekv_held_snapshots",
            "Snapshots held for clients of tuplekv's extension.",
            Gauge,
            &per_db(|s| s.held_snapshots() as u64),
        )?;
        family(
            &mut enc,
            "tuplekv_body_slots_refused",
            "Requests answered 503 because no body slot was free.",
            Counter,
            &per_db(ServerStats::body_slots_refused),
        )?;
        family(
            &mut enc,
            "tuplekv_body_reads_timed_out",
            "Requests answered 408 because their body did not arrive in time.",
            Counter,
            &per_db(ServerStats::body_reads_timed_out),
        )?;
        family(
            &mut enc,
            "tuplekv_watch_streams_stalled",
            "HTTP/1.1 watch streams closed because their client stopped reading.",
            Counter,
            &per_db(ServerStats::watch_streams_stalled),
        )?;
        let sampled = |read: fn(&StoreSample) -> Option<u64>| -> Vec<(Labels, u64)> {
            samples
                .iter()
                .filter_map(|(name, s)| Some((db_label(name), read(s)?)))
                .collect()
        };
        family(
            &mut enc,
            "tuplekv_keys",
            "Live entries stored.",
            Gauge,
            &sampled(|s| s.keys),
        )?;
        family(
            &mut enc,
            "tuplekv_stored_bytes",
            "Bytes of the live entries' keys and values.",
            Gauge,
            &sampled(|s| s.stored_bytes),
        )?;
        family(
            &mut enc,
            "tuplekv_versions",
            "Versions held in memory.",
            Gauge,
            &sampled(|s| s.versions),
        )?;
        family(
            &mut enc,
            "tuplekv_log_syncs",
            "Syncs of the write-ahead log that made commits durable.",
            Counter,
            &sampled(|s| s.log_syncs),
        )?;
        let recovery: Vec<(Labels, f64)> = samples
            .iter()
            .filter_map(|(name, s)| Some((db_label(name), s.recovery_duration?.as_secs_f64())))
            .collect();
        family(
            &mut enc,
            "tuplekv_recovery_duration_seconds",
            "How long recovery took when the store was opened.",
            Gauge,
            &recovery,
        )?;
        family(
            &mut enc,
            "tuplekv_recovery_records_replayed",
            "Commit records recovery replayed from the log.",
            Gauge,
            &sampled(|s| s.recovery_records_replayed),
        )?;
        family(
            &mut enc,
            "tuplekv_recovery_bytes_read",
            "Bytes of log and checkpoint recovery read.",
            Gauge,
            &sampled(|s| s.recovery_bytes_read),
        )?;
        let t = &self.0.transport;
        let server = |v: u64| vec![(Labels::new(), v)];
        family(
            &mut enc,
            "tuplekv_connections_accepted",
            "Connections accepted.",
            Counter,
            &server(t.connections_accepted()),
        )?;
        family(
            &mut enc,
            "tuplekv_connections_refused",
            "Connections closed at once because too many were open.",
            Counter,
            &server(t.connections_refused()),
        )?;
        family(
            &mut enc,
            "tuplekv_open_connections",
            "Connections open now.",
            Gauge,
            &server(t.open_connections() as u64),
        )?;
        family(
            &mut enc,
            "tuplekv_request_bodies_waiting",
            "Requests waiting now for a slot to read their body.",
            Gauge,
            &server(t.request_bodies_waiting() as u64),
        )?;
        family(
            &mut enc,
            "tuplekv_databases",
            "Databases served.",
            Gauge,
            &server(databases.len() as u64),
        )
    }
}

impl Exporter {
    /// `tuplekv_request_duration_seconds`, by database and endpoint.
    fn encode_latency(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        databases: &[Arc<Served>],
    ) -> std::fmt::Result {
        if databases.is_empty() {
            return Ok(());
        }
        let mut fam = enc.encode_descriptor(
            "tuplekv_request_duration_seconds",
            "Time from a request's arrival to its response head, by endpoint.",
            None,
            MetricType::Histogram,
        )?;
        for d in databases {
            for (route, endpoint) in ROUTES.iter().enumerate() {
                let Some(latency) = d.stats.latency(route) else {
                    continue;
                };
                let (counts, sum) = latency.read();
                let count: u64 = counts.iter().sum();
                let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                    .iter()
                    .map(Duration::as_secs_f64)
                    .chain([f64::INFINITY])
                    .zip(counts)
                    .collect();
                let labels: Labels = vec![
                    ("database", d.name.clone()),
                    ("endpoint", (*endpoint).to_owned()),
                ];
                fam.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    sum.as_secs_f64(),
                    count,
                    &buckets,
                    None,
                )?;
            }
        }
        Ok(())
    }
}

/// Parses Prometheus text into `(series with its labels, value)` pairs, skipping comments:
/// enough for tests and for `tuplekv stats --url` to read what [`Metrics::encode`] writes.
///
/// ```
/// use tuplekv_server::metrics::parse_text;
///
/// let text = "# TYPE a_total counter\na_total{database=\"default\"} 3\nb 1.5\n";
/// assert_eq!(
///     parse_text(text),
///     vec![
///         ("a_total{database=\"default\"}".to_owned(), 3.0),
///         ("b".to_owned(), 1.5)
///     ]
/// );
/// ```
pub fn parse_text(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            Some((series.to_owned(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuplekv_engine::key;

    fn value(text: &str, key: &str) -> Option<f64> {
        parse_text(text)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    #[test]
    fn a_second_database_gets_its_own_label_and_a_duplicate_name_is_refused() {
        let transport = Arc::new(ServerStats::default());
        let metrics = Metrics::new(Arc::clone(&transport));
        let a = Arc::new(ServerStats::default());
        let b = Arc::new(ServerStats::default());
        metrics
            .add_database(DEFAULT_DATABASE, Arc::clone(&a), None)
            .expect("new");
        a.commit_outcome(true);
        metrics
            .add_database("tenant-2", Arc::clone(&b), None)
            .expect("added while serving");
        b.commit_outcome(false);
        assert_eq!(
            metrics.add_database("tenant-2", Arc::new(ServerStats::default()), None),
            Err(MetricsError::DuplicateDatabase("tenant-2".into()))
        );
        let text = metrics.encode().expect("encodes");
        assert_eq!(
            value(&text, "tuplekv_commits_total{database=\"default\"}"),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                "tuplekv_commit_conflicts_total{database=\"tenant-2\"}"
            ),
            Some(1.0)
        );
        assert_eq!(value(&text, "tuplekv_databases"), Some(2.0));
        assert!(metrics.remove_database("tenant-2"));
        assert!(!metrics.remove_database("tenant-2"));
        let text = metrics.encode().expect("encodes");
        assert_eq!(
            value(&text, "tuplekv_commits_total{database=\"tenant-2\"}"),
            None
        );
    }

    #[test]
    fn latencies_land_in_their_buckets_cumulatively() {
        let stats = Arc::new(ServerStats::default());
        let metrics = Metrics::new(Arc::clone(&stats));
        metrics
            .add_database(DEFAULT_DATABASE, Arc::clone(&stats), None)
            .expect("new");
        let write = crate::stats::route_of("/v2/atomic_write");
        // At a bound is in its bucket; past the last bound is +Inf only.
        stats.responded(write, 200, LATENCY_BUCKETS[0], Some(10));
        stats.responded(write, 409, Duration::from_secs(11), None);
        let text = metrics.encode().expect("encodes");
        let bucket = |le: &str| {
            value(
                &text,
                &format!(
                    "tuplekv_request_duration_seconds_bucket{{database=\"default\",endpoint=\"atomic_write\",le=\"{le}\"}}"
                ),
            )
        };
        assert_eq!(bucket("0.0001"), Some(1.0));
        assert_eq!(bucket("10"), Some(1.0));
        assert_eq!(bucket("+Inf"), Some(2.0));
        assert_eq!(
            value(
                &text,
                "tuplekv_requests_total{database=\"default\",endpoint=\"atomic_write\",status=\"409\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&text, "tuplekv_response_bytes_total{database=\"default\"}"),
            Some(10.0)
        );
    }

    #[test]
    fn the_database_sampler_counts_live_keys_and_reuses_its_count_within_the_max_age() {
        let db = Database::in_memory();
        db.set(&key!["a"], b"12345").expect("set");
        let sampler = DatabaseSampler {
            db: db.clone(),
            max_age: Duration::from_secs(3600),
            counted: Mutex::new(None),
        };
        let first = sampler.sample();
        assert_eq!(first.keys, Some(1));
        assert!(first.stored_bytes.is_some_and(|b| b >= 5), "{first:?}");
        assert_eq!(first.recovery_duration, None, "in memory: no recovery");
        db.set(&key!["b"], b"1").expect("set");
        assert_eq!(sampler.sample().keys, Some(1), "within the max age: reused");
        let fresh = DatabaseSampler {
            max_age: Duration::ZERO,
            ..sampler
        };
        assert_eq!(fresh.sample().keys, Some(2), "past it: counted again");
    }

    #[test]
    fn live_keys_are_counted_across_scan_batches() {
        let db = Database::in_memory();
        let n = STORE_SCAN_BATCH as u64 + 1;
        for i in 0..n {
            db.set(&key!["k", i], b"v").expect("set");
        }
        assert_eq!(count_live(&db).map(|(k, _)| k), Some(n));
    }
}
