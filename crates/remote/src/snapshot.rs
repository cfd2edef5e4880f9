//! [`RemoteSnapshot`]: a [`ReadView`] over the network.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use denokv_proto::datapath as pb;
use tuplekv_engine::limits::{KEY_SIZE_MAX_READ, KEY_SIZE_MAX_WRITE, LIST_BATCH_SIZE_MAX};
use tuplekv_engine::{ByteRange, Entry, Error, ReadView, Versionstamp};

use crate::codec::{ReadOutput, decode_read_output, encode_read};
use crate::transport::{Kind, Transport};
use crate::{EXTENSION_NEEDED, RemoteStore};

/// What a snapshot is for, which decides how it reads once the server's offer is known (at
/// its first read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// [`Store::snapshot`](tuplekv_engine::Store::snapshot): one state, or (without the
    /// extension) one read.
    Snapshot,
    /// [`Store::transaction_snapshot`](tuplekv_engine::Store::transaction_snapshot): one
    /// state, or (without the extension) the latest state on each read.
    Transaction,
    /// One read of the latest state, never held ([`Store::get_latest_raw`] and `get_many`).
    ///
    /// [`Store::get_latest_raw`]: tuplekv_engine::Store::get_latest_raw
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing read yet.
    Unread,
    /// Held by the server at this versionstamp (with the extension).
    At(Versionstamp),
    /// One read done, without the extension: a second is refused.
    Spent,
    /// Each read sees the latest state.
    Latest,
}

/// A consistent view of a remote store (see the crate docs for what each server offers).
///
/// Cheap to create: nothing is sent until the first read. With tuplekv's extension the first
/// read fixes the state every later read of this snapshot (and its clones) sees, whether it
/// is blocking or async: concurrent first reads wait for one of them to fix it. The server
/// holds that state until the last clone is dropped (or it stays idle too long). Against a
/// server without the extension a snapshot serves one read, and a second fails with
/// [`Error::Unsupported`].
#[derive(Clone)]
pub struct RemoteSnapshot {
    store: RemoteStore,
    reader: Reader,
}

/// What a snapshot's reads need, without the store's handle: the futures that read run on
/// the store's runtime, and must never be what keeps it alive (its last owner would drop it
/// there).
#[derive(Clone)]
struct Reader {
    purpose: Purpose,
    state: Arc<Shared>,
}

/// What clones share; the last one to go releases the server's hold.
struct Shared {
    state: Mutex<State>,
    /// Held by a read that would fix the state (the first), so that concurrent first reads,
    /// blocking or async, agree on one state.
    fixing: tokio::sync::Mutex<()>,
    /// The id of this snapshot's hold on the server (random, so a retried request holds
    /// once and a release removes exactly this hold).
    hold_id: u64,
    transport: Arc<Transport>,
}

impl Shared {
    fn current(&self) -> State {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let State::At(v) = self.current() {
            self.transport.release(v, self.hold_id);
        }
    }
}

impl std::fmt::Debug for RemoteSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSnapshot")
            .field("purpose", &self.reader.purpose)
            .field("state", &self.reader.state.current())
            .finish_non_exhaustive()
    }
}

impl RemoteSnapshot {
    pub(crate) fn new(store: RemoteStore, purpose: Purpose) -> Self {
        let transport = Arc::clone(&store.inner.transport);
        let initial = match purpose {
            Purpose::Latest => State::Latest,
            _ => State::Unread,
        };
        RemoteSnapshot {
            store,
            reader: Reader {
                purpose,
                state: Arc::new(Shared {
                    state: Mutex::new(initial),
                    fixing: tokio::sync::Mutex::new(()),
                    hold_id: fastrand::u64(..),
                    transport,
                }),
            },
        }
    }

    /// The versionstamp this snapshot reads at, if it has fixed one (a held snapshot after
    /// its first read).
    pub fn versionstamp(&self) -> Option<Versionstamp> {
        match self.reader.state.current() {
            State::At(v) => Some(v),
            _ => None,
        }
    }

    /// Whether every read so far saw one state (`false` once a transaction's snapshot has
    /// read without the extension).
    pub(crate) fn one_state(&self) -> bool {
        self.reader.state.current() != State::Latest
    }

    /// The versionstamp, fixing it now (one request) if no read has yet. `ZERO` when it
    /// cannot be known (the server does not hold snapshots, or the request failed): a range
    /// check made with it names no held snapshot, so the write is refused (410, or
    /// `Unsupported` without the extension) and a transaction runs again or reports it.
    pub(crate) fn versionstamp_or_fix(&self) -> Versionstamp {
        self.try_versionstamp().unwrap_or(Versionstamp::ZERO)
    }

    /// [`RemoteSnapshot::versionstamp_or_fix`], with the failure of the read that would fix
    /// the state instead of [`Versionstamp::ZERO`].
    pub(crate) fn try_versionstamp(&self) -> Result<Versionstamp, Error> {
        match self.reader.state.current() {
            State::At(v) => Ok(v),
            State::Unread => self.store.block_on(self.reader.clone().versionstamp()),
            State::Spent | State::Latest => Ok(Versionstamp::ZERO),
        }
    }

    /// [`RemoteSnapshot::try_versionstamp`] as a future that waits without a thread.
    pub(crate) fn try_versionstamp_async(
        &self,
    ) -> impl Future<Output = Result<Versionstamp, Error>> + Send + 'static + use<> {
        self.store.run_async(self.reader.clone().versionstamp())
    }

    /// [`ReadView::get_raw`] as a future that waits without a thread.
    pub(crate) fn get_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        self.store.run_async(self.reader.clone().get(key.to_vec()))
    }

    /// [`ReadView::scan`] as a future that waits without a thread.
    pub(crate) fn scan_async(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        self.store
            .run_async(self.reader.clone().scan(range.clone(), reverse, limit))
    }
}

impl Reader {
    /// The versionstamp, fixing it with a read of nothing if no read has.
    async fn versionstamp(self) -> Result<Versionstamp, Error> {
        let held = match self.state.current() {
            State::At(v) => return Ok(v),
            State::Unread => self.state.transport.session().await?.extension,
            State::Spent | State::Latest => false,
        };
        if !held {
            return Ok(Versionstamp::ZERO);
        }
        self.read(Vec::new()).await?;
        Ok(match self.state.current() {
            State::At(v) => v,
            _ => Versionstamp::ZERO,
        })
    }

    /// One snapshot read of `ranges`, as this snapshot's state says; the first read decides
    /// the state from what the server offers.
    async fn read(&self, ranges: Vec<pb::ReadRange>) -> Result<Vec<Vec<Entry>>, Error> {
        let shared = &self.state;
        let mut state = shared.current();
        // Held across the request by a read that would fix the state, so the first reads of
        // clones fix one state: the others wait here, then read at it.
        let _fixing = match state {
            State::Unread => {
                let guard = shared.fixing.lock().await;
                state = shared.current();
                Some(guard)
            }
            _ => None,
        };
        let transport = &shared.transport;
        let extension = match state {
            State::Unread if transport.session().await?.extension => {
                Some(tuplekv_wire::ReadExtension {
                    hold: true,
                    hold_id: shared.hold_id,
                    release: transport.take_releases(),
                    ..Default::default()
                })
            }
            State::At(v) => Some(tuplekv_wire::ReadExtension {
                at: v.as_bytes().to_vec(),
                release: transport.take_releases(),
                ..Default::default()
            }),
            State::Spent => {
                return Err(Error::Unsupported {
                    operation: "a second read of one snapshot",
                    needs: EXTENSION_NEEDED,
                });
            }
            State::Unread | State::Latest => None,
        };
        let held = extension.is_some();
        let body = encode_read(ranges, extension);
        let (_, reply) = transport.call("snapshot_read", body, Kind::Read).await?;
        let out: ReadOutput = decode_read_output(&reply.body)?;
        if state == State::Unread {
            shared.set(match (held, out.versionstamp, self.purpose) {
                (true, Some(v), _) => State::At(v),
                (true, None, _) => {
                    return Err(Error::Remote {
                        status: 200,
                        message: "the server agreed on tuplekv's extension but did not say \
                                  which state it read"
                            .into(),
                    });
                }
                (false, _, Purpose::Transaction) => State::Latest,
                (false, _, _) => State::Spent,
            });
        }
        Ok(out.ranges)
    }

    /// The entry at `key`.
    async fn get(self, key: Vec<u8>) -> Result<Option<Entry>, Error> {
        check_bound(&key)?;
        let Some(range) = key_range(&key) else {
            return Ok(None);
        };
        let ranges = self.read(vec![range]).await?;
        Ok(ranges
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .filter(|e| e.key.as_slice() == key.as_slice()))
    }

    /// Up to `limit` entries of `range`, in batches of at most [`LIST_BATCH_SIZE_MAX`].
    async fn scan(
        self,
        range: ByteRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, Error> {
        check_bound(&range.start)?;
        check_bound(&range.end)?;
        let mut out = Vec::new();
        let (mut start, mut end) = (range.start, range.end);
        while out.len() < limit && start < end {
            let want = (limit - out.len()).min(LIST_BATCH_SIZE_MAX);
            let batch = self
                .read(vec![pb::ReadRange {
                    start: start.clone(),
                    end: end.clone(),
                    limit: i32::try_from(want).unwrap_or(i32::MAX),
                    reverse,
                }])
                .await?
                .into_iter()
                .next()
                .unwrap_or_default();
            let full = batch.len() >= want;
            if let Some(last) = batch.last() {
                if reverse {
                    end = last.key.to_vec();
                } else {
                    start = last.key.to_vec();
                    start.push(0);
                }
            }
            out.extend(batch);
            if !full {
                break;
            }
        }
        Ok(out)
    }
}

/// A read range's bounds checked against the read key limit.
fn check_bound(key: &[u8]) -> Result<(), Error> {
    if key.len() > KEY_SIZE_MAX_READ {
        return Err(Error::KeyTooLargeForRead { size: key.len() });
    }
    Ok(())
}

impl ReadView for RemoteSnapshot {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        check_bound(key)?;
        self.store.block_on(self.reader.clone().get(key.to_vec()))
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        check_bound(&range.start)?;
        check_bound(&range.end)?;
        self.store
            .block_on(self.reader.clone().scan(range.clone(), reverse, limit))
    }

    fn reads_one_state(&self) -> bool {
        self.one_state()
    }
}

/// The one-key read range of `key` (limit 1; the caller keeps the entry only if its key is
/// `key`), or `None` for a key no entry can have. Usually `[key, key ++ 00)`; a key longer
/// than the write limit (only a versionstamped key can be: its prefix plus the suffix) would
/// make that end one byte past the read limit, so it reads `[key, key with its last byte
/// raised)` instead, whose first entry is `key` if it exists. Such keys end with the suffix
/// string's terminator `00`, so one that does not cannot exist.
fn key_range(key: &[u8]) -> Option<pb::ReadRange> {
    let end = if key.len() <= KEY_SIZE_MAX_WRITE {
        let mut end = key.to_vec();
        end.push(0);
        end
    } else {
        let (&last, head) = key.split_last()?;
        if last != 0 {
            return None;
        }
        let mut end = head.to_vec();
        end.push(1);
        end
    };
    Some(pb::ReadRange {
        start: key.to_vec(),
        end,
        limit: 1,
        reverse: false,
    })
}

/// Reads up to ten keys in one request (one state), in request order.
pub(crate) fn get_many_raw(
    snapshot: &RemoteSnapshot,
    keys: &[Vec<u8>],
) -> Result<Vec<Option<Entry>>, Error> {
    let ranges: Vec<Option<pb::ReadRange>> = keys.iter().map(|k| key_range(k)).collect();
    let asked: Vec<pb::ReadRange> = ranges.iter().flatten().cloned().collect();
    let mut out = match asked.is_empty() {
        true => Vec::new().into_iter(),
        false => {
            let reader = snapshot.reader.clone();
            let read = async move { reader.read(asked).await };
            snapshot.store.block_on(read)?.into_iter()
        }
    };
    Ok(keys
        .iter()
        .zip(&ranges)
        .map(|(k, range)| {
            range.as_ref()?;
            out.next()?
                .into_iter()
                .next()
                .filter(|e| e.key.as_slice() == k.as_slice())
        })
        .collect())
}
