//! [`Sequences`]: where the sequences of a store live (their keys under one root), creating
//! them and opening handles; and the state every handle shares ([`Core`]).
//!
//! Keys, under the root `R` (default `["__sequences"]`):
//! - `R + ["def", prefix]`: the definition (options), written once by `create`;
//! - `R + ["next", prefix]`: the counter, a `U64` holding the first number not yet reserved
//!   (fast) or committed (gapless); absent means the sequence's start;
//! - `R + ["used", prefix, number]`: the uniqueness key of a recorded number (the code as its
//!   value), checked absent in the commit that records it.

use tuplekv_codec::{Key, KeyPart, encode_key, encode_part_into};
use tuplekv_engine::{
    AtomicWrite, Check, CommitResult, KeyBytes, Mutation, MutationKind, ReadView, Store, Value,
    Versionstamp,
};

use crate::error::{Error, OptionsError};
use crate::fast::FastSequence;
use crate::gapless::GaplessSequence;
use crate::limits::ROOT_SIZE_MAX;
use crate::options::{Definition, Mode, SequenceOptions};
use crate::record::Record;

/// The root key of the sequences' keys when none is given.
pub const DEFAULT_ROOT: &str = "__sequences";

/// The sequences of one store: create them, open handles on them.
///
/// Each [`Sequences::fast`] or [`Sequences::gapless`] call opens an independent handle with its
/// own cache, standing for one application server; any number of handles, on any number of
/// `Sequences` values over the same store, never hand out the same number.
///
/// ```
/// use tuplekv_engine::Database;
/// use tuplekv_sequence::{SequenceOptions, Sequences};
///
/// let seqs = Sequences::new(Database::in_memory());
/// seqs.create("INFO", SequenceOptions::default())?;
/// let info = seqs.fast("INFO")?;
/// assert_eq!(info.next()?.code(), "INFO001");
/// assert_eq!(info.next()?.code(), "INFO002");
/// assert_eq!(info.parse("INFO002")?, 2);
/// # Ok::<(), tuplekv_sequence::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sequences<S> {
    store: S,
    root: Vec<u8>,
}

impl<S: Store + Clone> Sequences<S> {
    /// The sequences of `store`, under the root `[`[`DEFAULT_ROOT`]`]`.
    pub fn new(store: S) -> Self {
        Sequences {
            store,
            root: encode_key(&tuplekv_codec::key![DEFAULT_ROOT]),
        }
    }

    /// The sequences of `store`, under `root`.
    ///
    /// # Errors
    /// [`Error::RootTooLarge`] if the encoded root is over [`ROOT_SIZE_MAX`] bytes.
    pub fn with_root(store: S, root: &Key) -> Result<Self, Error> {
        let root = encode_key(root);
        if root.len() > ROOT_SIZE_MAX {
            return Err(Error::RootTooLarge { size: root.len() });
        }
        Ok(Sequences { store, root })
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Defines the sequence `prefix`. Idempotent: creating it again with the same options
    /// succeeds, so every server may call it at start-up.
    ///
    /// # Errors
    /// [`Error::InvalidPrefix`], [`Error::InvalidOptions`] (among them a format without
    /// `{prefix}`, [`OptionsError::FormatWithoutPrefix`]), [`Error::AlreadyExists`] with
    /// other options, or a store error.
    ///
    /// A sequence created before formats had to hold `{prefix}` keeps its format: creating it
    /// again with the same options still succeeds, and its handles open.
    pub fn create(&self, prefix: &str, options: SequenceOptions) -> Result<(), Error> {
        let def = match Definition::new(prefix, &options) {
            Ok(def) => def,
            Err(refused @ Error::InvalidOptions(OptionsError::FormatWithoutPrefix { .. })) => {
                let same = Definition::existing(prefix, &options)?;
                return match self.definition(prefix)? {
                    Some(existing) if existing == same => Ok(()),
                    _ => Err(refused),
                };
            }
            Err(e) => return Err(e),
        };
        let key = self.key(&["def".into(), prefix.into()])?;
        let write = AtomicWrite {
            checks: vec![Check {
                key: KeyBytes::from(key.as_slice()),
                versionstamp: None,
            }],
            mutations: vec![Mutation {
                key: KeyBytes::from(key.as_slice()),
                kind: MutationKind::Set {
                    value: Value::from(def.encode()),
                    expiry: None,
                },
            }],
            ..AtomicWrite::default()
        };
        if self.store.commit(write)?.is_committed() {
            return Ok(());
        }
        match self.definition(prefix)? {
            Some(existing) if existing == def => Ok(()),
            _ => Err(Error::AlreadyExists {
                prefix: prefix.to_owned(),
            }),
        }
    }

    /// A new fast handle on the sequence `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidPrefix`], [`Error::UnknownSequence`], [`Error::WrongMode`] for a
    /// gapless sequence, or a store error.
    pub fn fast(&self, prefix: &str) -> Result<FastSequence<S>, Error> {
        Ok(FastSequence::new(self.core(prefix, Mode::Fast)?))
    }

    /// A new gapless handle on the sequence `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidPrefix`], [`Error::UnknownSequence`], [`Error::WrongMode`] for a fast
    /// sequence, or a store error.
    pub fn gapless(&self, prefix: &str) -> Result<GaplessSequence<S>, Error> {
        Ok(GaplessSequence::new(self.core(prefix, Mode::Gapless)?))
    }

    /// The key of the counter of `prefix` (for operators: backups, repairs, monitoring).
    ///
    /// # Errors
    /// [`Error::InvalidPrefix`].
    pub fn counter_key(&self, prefix: &str) -> Result<Vec<u8>, Error> {
        valid(prefix)?;
        self.key(&["next".into(), prefix.into()])
    }

    /// The uniqueness key of number `number` of `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidPrefix`].
    pub fn used_key(&self, prefix: &str, number: u64) -> Result<Vec<u8>, Error> {
        valid(prefix)?;
        self.key(&["used".into(), prefix.into(), number.into()])
    }

    fn definition(&self, prefix: &str) -> Result<Option<Definition>, Error> {
        let key = self.key(&["def".into(), prefix.into()])?;
        match self.store.snapshot().get_raw(&key)? {
            None => Ok(None),
            Some(entry) => {
                let bytes = entry.value.as_bytes().ok_or_else(|| Error::Corrupt {
                    prefix: prefix.to_owned(),
                    reason: "definition is not bytes".to_owned(),
                })?;
                Definition::decode(prefix, bytes).map(Some)
            }
        }
    }

    fn core(&self, prefix: &str, mode: Mode) -> Result<Core<S>, Error> {
        valid(prefix)?;
        let def = self
            .definition(prefix)?
            .ok_or_else(|| Error::UnknownSequence {
                prefix: prefix.to_owned(),
            })?;
        if def.mode != mode {
            return Err(Error::WrongMode {
                prefix: prefix.to_owned(),
                expected: mode,
                actual: def.mode,
            });
        }
        Ok(Core {
            store: self.store.clone(),
            counter: self.key(&["next".into(), prefix.into()])?,
            used: self.key(&["used".into(), prefix.into()])?,
            def,
        })
    }

    fn key(&self, parts: &[KeyPart]) -> Result<Vec<u8>, Error> {
        let mut out = self.root.clone();
        for p in parts {
            encode_part_into(p, &mut out)?;
        }
        Ok(out)
    }
}

fn valid(prefix: &str) -> Result<(), Error> {
    crate::format::validate_prefix(prefix).map_err(|reason| Error::InvalidPrefix {
        prefix: prefix.to_owned(),
        reason,
    })
}

/// What every handle of one sequence holds: the store, the definition, the keys.
#[derive(Debug)]
pub(crate) struct Core<S> {
    pub(crate) store: S,
    pub(crate) def: Definition,
    /// The counter's encoded key.
    pub(crate) counter: Vec<u8>,
    /// The encoded prefix of the uniqueness keys.
    pub(crate) used: Vec<u8>,
}

impl<S: Store> Core<S> {
    /// The counter: the next free number and the stamp to check (`None`: absent).
    pub(crate) fn read_counter(&self) -> Result<(u64, Option<Versionstamp>), Error> {
        self.read_counter_in(&self.store)
    }

    /// [`Core::read_counter`] through `store`, a view of this core's store (a
    /// [`Replay`](tuplekv_engine::replay::Replay) of it, for an async caller).
    pub(crate) fn read_counter_in<T: Store>(
        &self,
        store: &T,
    ) -> Result<(u64, Option<Versionstamp>), Error> {
        match store.snapshot().get_raw(&self.counter)? {
            None => Ok((self.def.start, None)),
            Some(entry) => match entry.value.as_u64() {
                Some(n) => Ok((n, Some(entry.versionstamp))),
                None => Err(Error::Corrupt {
                    prefix: self.def.prefix.clone(),
                    reason: "counter is not a U64".to_owned(),
                }),
            },
        }
    }

    /// The counter's check and its new value, as a check and a mutation.
    pub(crate) fn counter_cas(&self, seen: Option<Versionstamp>, next: u64) -> (Check, Mutation) {
        let key = KeyBytes::from(self.counter.as_slice());
        (
            Check {
                key: key.clone(),
                versionstamp: seen,
            },
            Mutation {
                key,
                kind: MutationKind::Set {
                    value: Value::U64(next),
                    expiry: None,
                },
            },
        )
    }

    /// The uniqueness key of `number`.
    pub(crate) fn used_key(&self, number: u64) -> Result<Vec<u8>, Error> {
        let mut key = self.used.clone();
        encode_part_into(&KeyPart::from(number), &mut key)?;
        Ok(key)
    }

    /// Appends the backstop of `number` to `write`: its uniqueness key must be absent, and is
    /// set to the code. Returns the index of the check.
    pub(crate) fn add_backstop(
        &self,
        write: &mut AtomicWrite,
        number: u64,
    ) -> Result<usize, Error> {
        let key = KeyBytes::from(self.used_key(number)?.as_slice());
        write.checks.push(Check {
            key: key.clone(),
            versionstamp: None,
        });
        write.mutations.push(Mutation {
            key,
            kind: MutationKind::Set {
                value: Value::from(self.def.format.format(number).into_bytes()),
                expiry: None,
            },
        });
        Ok(write.checks.len() - 1)
    }

    /// The number a uniqueness key names, if it is one of this sequence's.
    pub(crate) fn number_of_used_key(&self, key: &[u8]) -> Option<u64> {
        let rest = key.strip_prefix(self.used.as_slice())?;
        let parts = tuplekv_codec::decode_key(rest).ok()?;
        match parts.parts() {
            [KeyPart::BigInt(n)] => u64::try_from(n).ok(),
            _ => None,
        }
    }

    pub(crate) fn duplicate(&self, number: u64) -> Error {
        Error::Duplicate {
            prefix: self.def.prefix.clone(),
            number,
            code: self.def.format.format(number),
        }
    }

    /// Commits `record` with the backstop of `number`.
    pub(crate) fn commit_record(&self, number: u64, record: Record) -> Result<Versionstamp, Error> {
        let mut write = record.into_write();
        let backstop = self.add_backstop(&mut write, number)?;
        match self.store.commit(write)? {
            CommitResult::Committed { versionstamp, .. } => Ok(versionstamp),
            CommitResult::Conflict(c) => {
                if c.failed_checks.iter().any(|f| f.index == backstop) {
                    Err(self.duplicate(number))
                } else {
                    Err(Error::Rejected(c))
                }
            }
        }
    }

    pub(crate) fn parse(&self, code: &str) -> Result<u64, Error> {
        self.def
            .format
            .parse(code)
            .map_err(|reason| Error::InvalidCode {
                prefix: self.def.prefix.clone(),
                code: code.to_owned(),
                reason,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{NUMBER_MAX, PREFIX_SIZE_MAX, ROOT_SIZE_MAX};
    use tuplekv_engine::limits::KEY_SIZE_MAX_WRITE;

    #[test]
    fn root_size_max_leaves_room_for_the_longest_key() {
        let mut suffix = Vec::new();
        let prefix = "x".repeat(PREFIX_SIZE_MAX);
        for p in [
            KeyPart::from("used"),
            KeyPart::from(prefix),
            KeyPart::from(NUMBER_MAX),
        ] {
            encode_part_into(&p, &mut suffix).expect("encodable");
        }
        assert_eq!(ROOT_SIZE_MAX + suffix.len(), KEY_SIZE_MAX_WRITE);
    }
}
