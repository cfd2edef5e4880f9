//! The crate's error type. Every failure changes nothing in the store and uses no number,
//! except [`Error::CommitPanicked`], whose outcome the store never told.

use thiserror::Error;
use tuplekv_codec::EncodeError;
use tuplekv_engine::{Conflict, ErrorClass};

use crate::limits::{FORMAT_SIZE_MAX, NUMBER_MAX, PREFIX_SIZE_MAX, ROOT_SIZE_MAX, WIDTH_MAX};
use crate::options::Mode;

/// Why a sequence operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// No sequence with this prefix was created in the store.
    #[error("no sequence named {prefix:?}: create it first")]
    UnknownSequence {
        /// The prefix asked for.
        prefix: String,
    },
    /// `create` found the sequence already defined with other options.
    #[error("sequence {prefix:?} already exists with different options")]
    AlreadyExists {
        /// The prefix.
        prefix: String,
    },
    /// The sequence was opened in the other mode than it was created with.
    #[error("sequence {prefix:?} is a {actual} sequence, not {expected}")]
    WrongMode {
        /// The prefix.
        prefix: String,
        /// The mode asked for.
        expected: Mode,
        /// The mode it was created with.
        actual: Mode,
    },
    /// The prefix cannot name a sequence.
    #[error("invalid prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// What is wrong with it.
        reason: PrefixError,
    },
    /// The options of a new sequence are inconsistent.
    #[error("invalid options: {0}")]
    InvalidOptions(#[from] OptionsError),
    /// The root key leaves no room for the sequences' keys.
    #[error("root key is {size} bytes, max is {ROOT_SIZE_MAX}")]
    RootTooLarge {
        /// The encoded root's length.
        size: usize,
    },
    /// The sequence reached its maximum and its policy is to fail there.
    #[error("sequence {prefix:?} is exhausted: {max} is its last number")]
    Exhausted {
        /// The prefix.
        prefix: String,
        /// The last number it could hand out.
        max: u64,
    },
    /// The uniqueness backstop found the number already recorded: the counter went back (for
    /// example a stale copy was restored). The record was not written.
    #[error(
        "duplicate code {code}: number {number} of {prefix:?} is already recorded \
         (the counter went back; repair it before issuing more codes)"
    )]
    Duplicate {
        /// The prefix.
        prefix: String,
        /// The number handed out twice.
        number: u64,
        /// Its code.
        code: String,
    },
    /// A fast handle found the stored counter below the end of a block it reserved itself:
    /// the counter went back (for example a stale copy was restored), and the numbers above it
    /// may already be in use. Nothing was written and no number was handed out.
    #[error(
        "counter of {prefix:?} went back to {counter}, but this handle already reserved the \
         numbers below {reserved} (a stale copy restored?); repair it before issuing more codes"
    )]
    CounterWentBack {
        /// The prefix.
        prefix: String,
        /// The counter as read: the first number the store says is free.
        counter: u64,
        /// The end of the last block this handle reserved.
        reserved: u64,
    },
    /// The store panicked during a commit that another request of the same gapless batch was
    /// leading (that request's thread gets the panic). Whether the batch committed is unknown:
    /// look the record up before retrying.
    #[error(
        "the store panicked committing a batch of {prefix:?}; whether this request committed \
         is unknown"
    )]
    CommitPanicked {
        /// The prefix.
        prefix: String,
    },
    /// A gapless request's batch was sent to the store and its answer lost
    /// ([`tuplekv_engine::Error::OutcomeUnknown`]): the request committed, with the number
    /// and code given here, or nothing of it did. Look the code's record up before retrying
    /// (retrying blindly may commit the record twice, under two numbers).
    #[error(
        "whether {} of {prefix:?} committed is unknown: {cause}",
        .code.as_deref().unwrap_or("a request")
    )]
    OutcomeUnknown {
        /// The prefix.
        prefix: String,
        /// The number the request has if its batch committed: `Some` when the handle
        /// numbered the batch itself ([`Numbering::Checked`](crate::Numbering::Checked), and
        /// every request the checked path serves); `None` when the store was to number it
        /// ([`Numbering::Store`](crate::Numbering::Store)), whose answer, with the numbers,
        /// is what was lost.
        number: Option<u64>,
        /// The code of `number`.
        code: Option<String>,
        /// The store's error ([`tuplekv_engine::Error::OutcomeUnknown`], with the transport's
        /// failure as its own source).
        #[source]
        cause: Box<tuplekv_engine::Error>,
    },
    /// The caller's own checks in the record failed; nothing was written and no number used.
    #[error("the record's checks failed ({} of them); no number was used", .0.failed_checks.len())]
    Rejected(Conflict),
    /// The caller's record closure panicked; that request got no number, the others in its
    /// batch were not affected.
    #[error("the record closure of a request for {prefix:?} panicked; no number was used")]
    RecordPanicked {
        /// The prefix.
        prefix: String,
    },
    /// Text that is not a code of this sequence.
    #[error("{code:?} is not a code of {prefix:?}: {reason}")]
    InvalidCode {
        /// The prefix.
        prefix: String,
        /// The text given.
        code: String,
        /// Why it does not parse.
        reason: CodeError,
    },
    /// Other handles kept moving the counter; the operation gave up (nothing was written).
    #[error("counter of {prefix:?} kept changing: gave up after {attempts} attempts")]
    Contention {
        /// The prefix.
        prefix: String,
        /// How many commits were tried.
        attempts: u32,
    },
    /// A sequence's stored state is not what this crate writes.
    #[error("corrupt state of sequence {prefix:?}: {reason}")]
    Corrupt {
        /// The prefix.
        prefix: String,
        /// What is wrong.
        reason: String,
    },
    /// A key could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The store failed the commit (a limit or type error in the caller's record).
    #[error(transparent)]
    Store(#[from] tuplekv_engine::Error),
}

impl Error {
    /// The error's class: what kind of failure it is, for a caller deciding what to answer or
    /// whether to retry (see [`ErrorClass`] for each, and [`ErrorClass::http_status`]). A
    /// store error ([`Error::Store`]) has the engine error's class, so a commit whose answer
    /// was lost is [`ErrorClass::OutcomeUnknown`] here as in the engine and in collections.
    ///
    /// The predicates ([`is_outcome_unknown`](Self::is_outcome_unknown),
    /// [`is_conflict`](Self::is_conflict), [`is_transient`](Self::is_transient), ...) are
    /// [`Classify`](tuplekv_engine::Classify)'s, inherent.
    ///
    /// # Examples
    /// ```
    /// use tuplekv_engine::{Database, ErrorClass};
    /// use tuplekv_sequence::Sequences;
    ///
    /// let seqs = Sequences::new(Database::in_memory());
    /// let err = seqs.fast("ORD").unwrap_err(); // never created
    /// assert!(err.is_not_found());
    /// assert_eq!(err.class().http_status(), 404);
    /// ```
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::UnknownSequence { .. } => ErrorClass::NotFound,
            Error::AlreadyExists { .. } => ErrorClass::AlreadyExists,
            Error::WrongMode { .. }
            | Error::InvalidPrefix { .. }
            | Error::InvalidOptions(_)
            | Error::RootTooLarge { .. }
            | Error::InvalidCode { .. }
            | Error::Encode(_) => ErrorClass::Invalid,
            Error::Exhausted { .. } => ErrorClass::Exhausted,
            // The counter went back: the numbers it would hand out may be in use.
            Error::Duplicate { .. } | Error::CounterWentBack { .. } | Error::Corrupt { .. } => {
                ErrorClass::Corrupt
            }
            Error::CommitPanicked { .. } | Error::OutcomeUnknown { .. } => {
                ErrorClass::OutcomeUnknown
            }
            // The caller's own checks failed, or other handles kept winning the counter.
            Error::Rejected(_) | Error::Contention { .. } => ErrorClass::Conflict,
            Error::RecordPanicked { .. } => ErrorClass::Internal,
            Error::Store(e) => e.class(),
        }
    }
}

tuplekv_engine::__impl_classify!(Error);

/// What makes a prefix invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// The empty string.
    #[error("it is empty")]
    Empty,
    /// Longer than [`PREFIX_SIZE_MAX`].
    #[error("it is {size} bytes, max is {PREFIX_SIZE_MAX}")]
    TooLong {
        /// Its UTF-8 length.
        size: usize,
    },
    /// A control, whitespace or brace character, which has no place in a code.
    #[error("character {0:?} is not allowed")]
    BadChar(char),
    /// Ending in a digit would let two prefixes make the same code (`A1` + `001` is `A` +
    /// `1001`).
    #[error("it ends with a digit")]
    EndsWithDigit,
}

/// What makes sequence options invalid.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// Width 0 or above [`WIDTH_MAX`].
    #[error("width is {width}, must be 1 to {WIDTH_MAX}")]
    Width {
        /// The width given.
        width: usize,
    },
    /// A start or maximum above [`NUMBER_MAX`].
    #[error("{what} is {value}, max is {NUMBER_MAX}")]
    NumberTooLarge {
        /// `"start"` or `"max"`.
        what: &'static str,
        /// The value given.
        value: u64,
    },
    /// A maximum below the start.
    #[error("max {max} is below start {start}")]
    MaxBelowStart {
        /// The start.
        start: u64,
        /// The maximum.
        max: u64,
    },
    /// A maximum set with [`AtMax::Widen`](crate::AtMax::Widen), which counts past any
    /// maximum to [`NUMBER_MAX`]: the maximum would have no effect.
    #[error(
        "max {max} has no effect with AtMax::Widen, which counts to {NUMBER_MAX}: \
         use AtMax::Error to stop at it, or leave max unset"
    )]
    MaxWithWiden {
        /// The maximum given.
        max: u64,
    },
    /// A format template longer than [`FORMAT_SIZE_MAX`].
    #[error("format is {size} bytes, max is {FORMAT_SIZE_MAX}")]
    FormatTooLong {
        /// Its length.
        size: usize,
    },
    /// A format template without exactly one `{n}`, or with an unknown placeholder.
    #[error("format {format:?}: {reason}")]
    Format {
        /// The template.
        format: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A format template without `{prefix}`: sequences with different prefixes would make the
    /// same codes (`N{n}` makes `N001` for every prefix).
    #[error(
        "format {format:?} has no {{prefix}}: sequences with different prefixes would make \
         the same codes"
    )]
    FormatWithoutPrefix {
        /// The template.
        format: String,
    },
}

/// Why text is not a code of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CodeError {
    /// It does not start and end with the format's fixed text.
    #[error("it does not match the format")]
    Shape,
    /// The number part is empty or has a non-digit.
    #[error("the number part is not all digits")]
    NotDigits,
    /// The number has fewer digits than the width, or a leading zero it does not need.
    #[error("the number is not padded to the width exactly")]
    Padding,
    /// The number is above [`NUMBER_MAX`].
    #[error("the number is above {NUMBER_MAX}")]
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class each variant must have, decided variant by variant: a new variant does not
    /// compile here until it has one (and a sample in `one_of_each`).
    fn expected_class(e: &Error) -> ErrorClass {
        use ErrorClass as C;
        match e {
            Error::UnknownSequence { .. } => C::NotFound,
            Error::AlreadyExists { .. } => C::AlreadyExists,
            Error::WrongMode { .. } => C::Invalid,
            Error::InvalidPrefix { .. } => C::Invalid,
            Error::InvalidOptions(_) => C::Invalid,
            Error::RootTooLarge { .. } => C::Invalid,
            Error::Exhausted { .. } => C::Exhausted,
            Error::Duplicate { .. } => C::Corrupt,
            Error::CounterWentBack { .. } => C::Corrupt,
            Error::CommitPanicked { .. } => C::OutcomeUnknown,
            Error::OutcomeUnknown { .. } => C::OutcomeUnknown,
            Error::Rejected(_) => C::Conflict,
            Error::RecordPanicked { .. } => C::Internal,
            Error::InvalidCode { .. } => C::Invalid,
            Error::Contention { .. } => C::Conflict,
            Error::Corrupt { .. } => C::Corrupt,
            Error::Encode(_) => C::Invalid,
            Error::Store(e) => e.class(),
        }
    }

    fn one_of_each() -> Vec<Error> {
        let prefix = || "ORD".to_owned();
        vec![
            Error::UnknownSequence { prefix: prefix() },
            Error::AlreadyExists { prefix: prefix() },
            Error::WrongMode {
                prefix: prefix(),
                expected: Mode::Fast,
                actual: Mode::Gapless,
            },
            Error::InvalidPrefix {
                prefix: String::new(),
                reason: PrefixError::Empty,
            },
            Error::InvalidOptions(OptionsError::Width { width: 0 }),
            Error::RootTooLarge { size: 2000 },
            Error::Exhausted {
                prefix: prefix(),
                max: 999,
            },
            Error::Duplicate {
                prefix: prefix(),
                number: 7,
                code: "ORD007".into(),
            },
            Error::CounterWentBack {
                prefix: prefix(),
                counter: 3,
                reserved: 10,
            },
            Error::CommitPanicked { prefix: prefix() },
            Error::OutcomeUnknown {
                prefix: prefix(),
                number: Some(1),
                code: Some("INV001".into()),
                cause: Box::new(tuplekv_engine::Error::outcome_unknown("reset")),
            },
            Error::Rejected(Conflict::default()),
            Error::RecordPanicked { prefix: prefix() },
            Error::InvalidCode {
                prefix: prefix(),
                code: "ORDx".into(),
                reason: CodeError::NotDigits,
            },
            Error::Contention {
                prefix: prefix(),
                attempts: 32,
            },
            Error::Corrupt {
                prefix: prefix(),
                reason: "not a u64".into(),
            },
            Error::Encode(EncodeError::BigIntTooLarge { bytes: 300 }),
            Error::Store(tuplekv_engine::Error::ValueTooLarge { size: 70_000 }),
        ]
    }

    #[test]
    fn every_variant_has_its_decided_class_and_the_predicates_follow_it() {
        let samples = one_of_each();
        let mut kinds: Vec<_> = samples.iter().map(std::mem::discriminant).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), samples.len(), "one sample per variant");
        for e in &samples {
            let class = e.class();
            assert_eq!(class, expected_class(e), "{e:?}");
            assert_eq!(tuplekv_engine::Classify::class(e), class);
            assert_eq!(e.is_conflict(), class == ErrorClass::Conflict, "{e:?}");
            assert_eq!(e.is_not_found(), class == ErrorClass::NotFound);
            assert_eq!(e.is_outcome_unknown(), class == ErrorClass::OutcomeUnknown);
            assert_eq!(e.is_invalid(), class == ErrorClass::Invalid, "{e:?}");
        }
    }

    #[test]
    fn an_outcome_unknown_store_error_classifies_as_in_the_engine_and_the_index() {
        let lost = tuplekv_engine::Error::outcome_unknown("connection reset");
        let wrapped = Error::Store(lost.clone());
        assert_eq!(wrapped.class(), ErrorClass::OutcomeUnknown);
        assert_eq!(wrapped.class(), lost.class());
        assert!(wrapped.is_outcome_unknown());
        assert!(!wrapped.is_transient());
        let down = Error::Store(tuplekv_engine::Error::unavailable("no route"));
        assert!(down.is_transient());
    }
}
