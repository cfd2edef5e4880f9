//! [`RemoteSnapshot`]: a [`ReadView`] over the network.

use std::sync::{Arc, Mutex, PoisonError};

use denokv_proto::datapath as pb;
use tuplekv_engine::limits::{KEY_SIZE_MAX_READ, KEY_SIZE_MAX_WRITE, LIST_BATCH_SIZE_MAX};
use tuplekv_engine::{ByteRange, Entry, Error, ReadView, Versionstamp};

use crate::codec::{ReadOutput, decode_read_output, encode_read};
use crate::transport::{Kind, Transport};
use crate::{EXTENSION_NEEDED, RemoteStore};

/// How a snapshot reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// With the extension: the first read fixes the state (the server holds it), later reads
    /// read that state.
    Held,
    /// Without the extension: one read, of the latest state; a second read is refused.
    Once,
    /// Without the extension, for transactions: every read reads the latest state (the
    /// transaction's commit checks what it read).
    Latest,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Unread,
    At(Versionstamp),
    /// A `Once` snapshot that has read.
    Spent,
}

/// A consistent view of a remote store (see the crate docs for what each server offers).
///
/// Cheap to create: nothing is sent until the first read. With tuplekv's extension the first
/// read fixes the state every later read of this snapshot (and its clones) sees; the server
/// holds that state while reads keep coming. Against a server without the extension a
/// snapshot serves one read, and a second fails with [`Error::Unsupported`].
#[derive(Clone)]
pub struct RemoteSnapshot {
    store: RemoteStore,
    mode: Mode,
    state: Arc<Shared>,
}

/// What clones share; the last one to go releases the server's hold.
struct Shared {
    state: Mutex<State>,
    transport: Arc<Transport>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let State::At(v) = *self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            self.transport.release(v);
        }
    }
}

impl std::fmt::Debug for RemoteSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSnapshot")
            .field("mode", &self.mode)
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl RemoteSnapshot {
    pub(crate) fn new(store: RemoteStore, mode: Mode) -> Self {
        let transport = Arc::clone(&store.inner.transport);
        RemoteSnapshot {
            store,
            mode,
            state: Arc::new(Shared {
                state: Mutex::new(State::Unread),
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

    /// The versionstamp, fixing it now (one request) if no read has yet. `ZERO` when it
    /// cannot be known (no extension, or the request failed): a range check made with it
    /// conflicts with any key in its range, which is safe.
    pub(crate) fn versionstamp_or_fix(&self) -> Versionstamp {
        if self.mode != Mode::Held {
            return Versionstamp::ZERO;
        }
        if let Some(v) = self.versionstamp() {
            return v;
        }
        match self.read(Vec::new()) {
            Ok(_) => self.versionstamp().unwrap_or(Versionstamp::ZERO),
            Err(_) => Versionstamp::ZERO,
        }
    }

    /// One snapshot read of `ranges`, as this snapshot's mode says.
    fn read(&self, ranges: Vec<pb::ReadRange>) -> Result<Vec<Vec<Entry>>, Error> {
        // Held across the request, so the first reads of clones fix one state.
        let mut state = self.lock();
        let extension = match (self.mode, *state) {
            (Mode::Held, State::Unread) => Some(tuplekv_wire::ReadExtension {
                hold: true,
                at: Vec::new(),
                release: self.state.transport.take_releases(),
            }),
            (Mode::Held, State::At(v)) => Some(tuplekv_wire::ReadExtension {
                hold: false,
                at: v.as_bytes().to_vec(),
                release: self.state.transport.take_releases(),
            }),
            (Mode::Once, State::Spent) => {
                return Err(Error::Unsupported {
                    operation: "a second read of one snapshot",
                    needs: EXTENSION_NEEDED,
                });
            }
            _ => None,
        };
        let held = extension.is_some();
        let body = encode_read(ranges, extension);
        let transport = Arc::clone(&self.state.transport);
        let out: ReadOutput = self.store.block_on(async move {
            let (_, reply) = transport.call("snapshot_read", body, Kind::Read).await?;
            decode_read_output(&reply.body)
        })?;
        match (*state, out.versionstamp) {
            (State::Unread, Some(v)) if held => *state = State::At(v),
            (State::Unread, _) if self.mode == Mode::Once => *state = State::Spent,
            _ => {}
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
        if key.len() > KEY_SIZE_MAX_WRITE {
            // No stored key is that long, and its one-key range would end past the limit.
            return Ok(None);
        }
        let mut end = key.to_vec();
        end.push(0);
        let ranges = self.read(vec![pb::ReadRange {
            start: key.to_vec(),
            end,
            limit: 1,
            reverse: false,
        }])?;
        Ok(ranges.into_iter().next().and_then(|r| r.into_iter().next()))
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
        self.mode != Mode::Latest
    }
}

/// Reads up to ten keys in one request (one state), in request order.
pub(crate) fn get_many_raw(
    snapshot: &RemoteSnapshot,
    keys: &[Vec<u8>],
) -> Result<Vec<Option<Entry>>, Error> {
    // Keys too long to be stored are not asked for (their ranges would end past the limit).
    let asked: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| k.len() <= KEY_SIZE_MAX_WRITE)
        .collect();
    let ranges = asked
        .iter()
        .map(|k| {
            let mut end = k.to_vec();
            end.push(0);
            pb::ReadRange {
                start: k.to_vec(),
                end,
                limit: 1,
                reverse: false,
            }
        })
        .collect();
    let mut out = snapshot.read(ranges)?.into_iter();
    Ok(keys
        .iter()
        .map(|k| match k.len() <= KEY_SIZE_MAX_WRITE {
            true => out.next().and_then(|r| r.into_iter().next()),
            false => None,
        })
        .collect())
}
