//! The crate's error type. Every failure changes nothing in the store and uses no number,
//! except [`Error::CommitPanicked`], whose outcome the store never told.

use thiserror::Error;
use tuplekv_codec::EncodeError;
use tuplekv_engine::Conflict;

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
        "whether {} of {prefix:?} committed is unknown: {reason}",
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
        /// The store's reason.
        reason: String,
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
