//! [`RemoteSnapshot`]: a [`ReadView`] over the network.

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
/// read fixes the state every later read of this snapshot (and its clones) sees; the server
/// holds that state until the last clone is dropped (or it stays idle too long). Against a
/// server without the extension a snapshot serves one read, and a second fails with
/// [`Error::Unsupported`].
#[derive(Clone)]
pub struct RemoteSnapshot {
    store: RemoteStore,
    purpose: Purpose,
    state: Arc<Shared>,
}

/// What clones share; the last one to go releases the server's hold.
struct Shared {
    state: Mutex<State>,
    /// The id of this snapshot's hold on the server (random, so a retried request holds
    /// once and a release removes exactly this hold).
    hold_id: u64,
    transport: Arc<Transport>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let State::At(v) = *self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            self.transport.release(v, self.hold_id);
        }
    }
}

impl std::fmt::Debug for RemoteSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSnapshot")
            .field("purpose", &self.purpose)
            .field("state", &*self.lock())
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
            purpose,
            state: Arc::new(Shared {
                state: Mutex::new(initial),
                hold_id: fastrand::u64(..),
                transport,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The versionstamp this snapshot reads at, if it has fixed one (a held snapshot after
    /// its first read).
    pub fn versionstamp(&self) -> Option<Versionstamp> {
        match *self.lock() {
            State::At(v) => Some(v),
            _ => None,
        }
    }

    /// Whether every read so far saw one state (`false` once a transaction's snapshot has
    /// read without the extension).
    pub(crate) fn one_state(&self) -> bool {
        *self.lock() != State::Latest
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
        if let Some(v) = self.versionstamp() {
            return Ok(v);
        }
        let held = matches!(*self.lock(), State::Unread) && self.store.extension()?;
        if !held {
            return Ok(Versionstamp::ZERO);
        }
        self.read(Vec::new())?;
        Ok(self.versionstamp().unwrap_or(Versionstamp::ZERO))
    }

    /// One snapshot read of `ranges`, as this snapshot's state says; the first read decides
    /// the state from what the server offers.
    fn read(&self, ranges: Vec<pb::ReadRange>) -> Result<Vec<Vec<Entry>>, Error> {
        // Held across the request, so the first reads of clones fix one state.
        let mut state = self.lock();
        let transport = &self.state.transport;
        let extension = match *state {
            State::Unread if self.store.extension()? => Some(tuplekv_wire::ReadExtension {
                hold: true,
                hold_id: self.state.hold_id,
                release: transport.take_releases(),
                ..Default::default()
            }),
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
        let transport = Arc::clone(transport);
        let out: ReadOutput = self.store.block_on(async move {
            let (_, reply) = transport.call("snapshot_read", body, Kind::Read).await?;
            decode_read_output(&reply.body)
        })?;
        if *state == State::Unread {
            *state = match (held, out.versionstamp, self.purpose) {
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
            };
        }
        Ok(out.ranges)
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
        let Some(range) = key_range(key) else {
            return Ok(None);
        };
        let ranges = self.read(vec![range])?;
        Ok(ranges
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .filter(|e| e.key.as_slice() == key))
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        check_bound(&range.start)?;
        check_bound(&range.end)?;
        let mut out = Vec::new();
        let (mut start, mut end) = (range.start.clone(), range.end.clone());
        while out.len() < limit && start < end {
            let want = (limit - out.len()).min(LIST_BATCH_SIZE_MAX);
            let batch = self
                .read(vec![pb::ReadRange {
                    start: start.clone(),
                    end: end.clone(),
                    limit: i32::try_from(want).unwrap_or(i32::MAX),
                    reverse,
                }])?
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
        false => snapshot.read(asked)?.into_iter(),
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
