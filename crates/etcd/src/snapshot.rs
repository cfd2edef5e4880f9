//! [`EtcdSnapshot`]: reads of one etcd revision.

use std::sync::{Arc, OnceLock};

use etcd_client::{GetOptions, KvClient, SortOrder, SortTarget};
use tuplekv_engine::limits::KEY_SIZE_MAX_READ;
use tuplekv_engine::{ByteRange, Entry, Error, KeyBytes, ReadView, Versionstamp};

use crate::envelope;
use crate::errors::{read_error, retry_read};
use crate::{EtcdStore, Space, now_ms, wait};

/// Most keys a page of a scan asks etcd for when tombstones made the last page come short
/// (a page asks at least for what the scan still needs).
const SCAN_PAGE_MAX: usize = 1000;

/// A consistent view of an [`EtcdStore`]: every read sees one etcd revision.
///
/// Cheap to create: the first read fixes the revision (the latest then), and every later
/// read of this snapshot or its clones reads at it. Reads of a revision that etcd has since
/// compacted fail with [`Error::SnapshotExpired`], never with newer data.
#[derive(Clone)]
pub struct EtcdSnapshot {
    store: EtcdStore,
    revision: Arc<OnceLock<i64>>,
    /// Each read sees the latest revision (one-read views).
    latest: bool,
}

impl std::fmt::Debug for EtcdSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSnapshot")
            .field("revision", &self.revision.get())
            .finish_non_exhaustive()
    }
}

/// One range read: the live entries, the revision it read at, whether etcd has more keys in
/// the range, and the last key it returned (live or not), to page from.
pub(crate) struct Page {
    pub(crate) entries: Vec<Entry>,
    pub(crate) revision: i64,
    pub(crate) more: bool,
    pub(crate) last: Option<Vec<u8>>,
}

/// A boxed read, as [`EtcdSnapshot::read`] runs it.
type Read = std::pin::Pin<Box<dyn Future<Output = Result<Page, Error>> + Send + 'static>>;

impl EtcdSnapshot {
    pub(crate) fn new(store: EtcdStore, latest: bool) -> EtcdSnapshot {
        EtcdSnapshot {
            store,
            revision: Arc::new(OnceLock::new()),
            latest,
        }
    }

    /// The revision this snapshot reads at, once fixed.
    pub(crate) fn revision(&self) -> Option<i64> {
        self.revision.get().copied()
    }

    /// The snapshot's versionstamp, fixing its revision with a read (of the store's marker
    /// key) if none fixed it yet.
    ///
    /// # Errors
    /// The failure of that read, once retried within the read budget.
    pub(crate) fn try_versionstamp(&self) -> Result<Versionstamp, Error> {
        if self.revision().is_none() {
            wait(self.fix_revision())?;
        }
        self.versionstamp()
    }

    /// [`EtcdSnapshot::try_versionstamp`] as a future that waits without a thread.
    pub(crate) fn try_versionstamp_async(
        &self,
    ) -> impl Future<Output = Result<Versionstamp, Error>> + Send + 'static + use<> {
        let snapshot = self.clone();
        async move {
            if snapshot.revision().is_none() {
                snapshot.fix_revision().await?;
            }
            snapshot.versionstamp()
        }
    }

    /// The fixed revision as a stamp.
    fn versionstamp(&self) -> Result<Versionstamp, Error> {
        let revision = self.revision().unwrap_or(0);
        u64::try_from(revision)
            .map(Versionstamp::from_version)
            .map_err(|_| {
                Error::unavailable(format!("etcd answered a read with revision {revision}"))
            })
    }

    /// Fixes the revision with a read of the store's marker key.
    async fn fix_revision(&self) -> Result<(), Error> {
        let space = self.store.space();
        let marker = space.marker();
        self.read(|kv, revision| {
            Box::pin(get_page(
                kv,
                space.clone(),
                marker.clone(),
                None,
                revision,
                1,
                false,
            ))
        })
        .await
        .map(|_| ())
    }

    /// Runs one read at this snapshot's revision (fixing it from the answer on the first),
    /// each request a task of the store's runtime.
    async fn read(&self, request: impl Fn(KvClient, i64) -> Read) -> Result<Page, Error> {
        loop {
            let fixed = self.revision();
            let page = self
                .store
                .run_async(request(self.store.kv(), fixed.unwrap_or(0)))
                .await?;
            if self.latest || fixed.is_some() {
                return Ok(page);
            }
            // The first read: fix its revision, unless a clone's first read fixed another.
            if *self.revision.get_or_init(|| page.revision) == page.revision {
                return Ok(page);
            }
        }
    }

    /// [`ReadView::get_raw`] as a future that waits without a thread.
    pub(crate) fn get_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        let (snapshot, key) = (self.clone(), key.to_vec());
        async move { snapshot.get(&key).await }
    }

    /// [`ReadView::scan`] as a future that waits without a thread.
    pub(crate) fn scan_async(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        let (snapshot, range) = (self.clone(), range.clone());
        async move { snapshot.scan_pages(&range, reverse, limit).await }
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        if key.len() > KEY_SIZE_MAX_READ {
            return Err(Error::KeyTooLargeForRead { size: key.len() });
        }
        let space = self.store.space();
        let target = space.data(key);
        let page = self
            .read(|kv, revision| {
                Box::pin(get_page(
                    kv,
                    space.clone(),
                    target.clone(),
                    None,
                    revision,
                    1,
                    false,
                ))
            })
            .await?;
        Ok(page.entries.into_iter().next())
    }

    async fn scan_pages(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, Error> {
        for bound in [&range.start, &range.end] {
            if bound.len() > KEY_SIZE_MAX_READ {
                return Err(Error::KeyTooLargeForRead { size: bound.len() });
            }
        }
        let mut out: Vec<Entry> = Vec::new();
        if range.is_empty() || limit == 0 {
            return Ok(out);
        }
        let space = self.store.space();
        let (mut start, mut end) = (space.data(&range.start), space.data(&range.end));
        // Tombstones and expired values take places in a page: read pages until `limit`
        // live entries or the end of the range, each page at least twice the last (up to
        // SCAN_PAGE_MAX), so a run of K tombstones costs about log2(K) round trips.
        let mut page_size: usize = 0;
        loop {
            page_size = limit
                .saturating_sub(out.len())
                .max(page_size.saturating_mul(2).min(SCAN_PAGE_MAX));
            let want = page_size;
            let page = self
                .read(|kv, revision| {
                    Box::pin(get_page(
                        kv,
                        space.clone(),
                        start.clone(),
                        Some(end.clone()),
                        revision,
                        want,
                        reverse,
                    ))
                })
                .await?;
            out.extend(page.entries);
            let Some(last) = page.last else { break };
            if out.len() >= limit || !page.more {
                break;
            }
            if reverse {
                end = last;
            } else {
                start = last;
                start.push(0);
            }
        }
        out.truncate(limit);
        Ok(out)
    }
}

/// The blocking reads wait on this thread for the async ones, whose requests run on the
/// store's runtime.
impl ReadView for EtcdSnapshot {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        wait(self.get(key))
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        wait(self.scan_pages(range, reverse, limit))
    }
}

/// One range read of etcd keys `[key, end)` (or `key` alone) at `revision` (0: the
/// latest), at most `limit` keys, in key order or reversed.
pub(crate) async fn get_page(
    kv: KvClient,
    space: Space,
    key: Vec<u8>,
    end: Option<Vec<u8>>,
    revision: i64,
    limit: usize,
    reverse: bool,
) -> Result<Page, Error> {
    let mut options = GetOptions::new()
        .with_revision(revision)
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
    if let Some(end) = end {
        options = options.with_range(end);
    }
    if reverse {
        options = options.with_sort(SortTarget::Key, SortOrder::Descend);
    }
    // Reads change nothing: a transient failure is retried within the read budget.
    let response = retry_read(|| {
        let (mut kv, key, options) = (kv.clone(), key.clone(), options.clone());
        async move {
            kv.get(key, Some(options))
                .await
                .map_err(|e| read_error(e, revision))
        }
    })
    .await?;
    let now = now_ms();
    let mut entries = Vec::with_capacity(response.kvs().len());
    for kv in response.kvs() {
        // The store's other keys (its marker, fixing a snapshot's revision) hold no envelope.
        let Some(key) = space.user_key(kv.key()) else {
            continue;
        };
        let stored = envelope::decode(kv.key(), kv.value())?;
        let Some(value) = stored.live(now) else {
            continue;
        };
        entries.push(Entry {
            key: KeyBytes::from(key),
            value: value.clone(),
            versionstamp: stored.versionstamp(kv.mod_revision()),
            expires_at: stored.expires_at(),
        });
    }
    let revision = response
        .header()
        .map(etcd_client::ResponseHeader::revision)
        .filter(|r| *r > 0)
        .ok_or_else(|| Error::unavailable("etcd answered a read without its revision"))?;
    Ok(Page {
        entries,
        revision,
        more: response.more(),
        last: response.kvs().last().map(|kv| kv.key().to_vec()),
    })
}
