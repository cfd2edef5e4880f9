//! A key's versions: [`Version`] (a value or tombstone at one version, with its deadline) and
//! [`Chain`] (a key's versions, newest first, immutable once published), and how a read picks
//! one. Deadlines are wall-clock milliseconds ([`now_ms`]).

use std::time::{SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use crate::key_bytes::KeyBytes;
use crate::store::Entry;
use crate::value::{Value, Versionstamp};

/// One version of one key.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) version: u64,
    /// `None` is a tombstone (the key was deleted at this version).
    pub(crate) value: Option<Value>,
    /// Unix time in milliseconds from which the value is invisible.
    pub(crate) expires_at: Option<u64>,
}

impl Version {
    /// The value, unless this is a tombstone or has expired by `now` (lazily computed).
    pub(crate) fn live_value(&self, now: &mut Option<u64>) -> Option<&Value> {
        let value = self.value.as_ref()?;
        match self.expires_at {
            Some(deadline) if deadline <= *now.get_or_insert_with(now_ms) => None,
            _ => Some(value),
        }
    }
}

/// A key's versions, newest first. Immutable once published.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    pub(crate) versions: SmallVec<[Version; 1]>,
}

impl Chain {
    /// A chain of the one version `version`.
    pub(crate) fn one(version: Version) -> Chain {
        let mut versions = SmallVec::new();
        versions.push(version);
        Chain { versions }
    }
}

/// The newest of `versions` (newest first) at or below `at`.
pub(crate) fn version_at(versions: &[Version], at: u64) -> Option<&Version> {
    versions.iter().find(|v| v.version <= at)
}

/// A published-to-be version list of `versions`, built in `spare` (an empty list allocated
/// before the commit lock) when there is one.
pub(crate) fn chain_of(
    spare: Option<Box<Chain>>,
    versions: impl IntoIterator<Item = Version>,
) -> Box<Chain> {
    match spare {
        Some(mut chain) => {
            chain.versions.clear();
            chain.versions.extend(versions);
            chain
        }
        None => Box::new(Chain {
            versions: versions.into_iter().collect(),
        }),
    }
}

/// The entry `key` shows at version `at`, if live: its newest version at or below `at`.
pub(crate) fn entry_at(
    key: &KeyBytes,
    versions: &[Version],
    at: u64,
    now: &mut Option<u64>,
) -> Option<Entry> {
    let version = version_at(versions, at)?;
    version.live_value(now)?;
    entry_of(key, version)
}

/// The entry of `key`'s `version` (`None` for a tombstone; expiry is the caller's to check).
pub(crate) fn entry_of(key: &KeyBytes, version: &Version) -> Option<Entry> {
    Some(Entry {
        key: key.clone(),
        value: version.value.clone()?,
        versionstamp: Versionstamp::from_version(version.version),
        expires_at: version.expires_at,
    })
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
