//! Why a request failed on the way, as text for the message and, when the transport gave one,
//! the transport's error to keep as the [`Error`]'s source.

use std::fmt;

use tuplekv_engine::{Cause, Error};

/// What failed: the text an [`Error::Unavailable`] or [`Error::OutcomeUnknown`] says, and the
/// error behind it (a refused connection's), which becomes that error's `source()`.
pub(crate) struct Reason {
    text: String,
    source: Option<Cause>,
}

impl Reason {
    /// `text`, caused by `source`.
    pub(crate) fn caused_by(
        text: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Reason {
            text,
            source: Some(Cause::new(source)),
        }
    }

    /// [`Error::Unavailable`], with the source.
    pub(crate) fn unavailable(self) -> Error {
        Error::Unavailable {
            reason: self.text,
            source: self.source,
        }
    }

    /// [`Error::OutcomeUnknown`], with the source.
    pub(crate) fn outcome_unknown(self) -> Error {
        Error::OutcomeUnknown {
            reason: self.text,
            source: self.source,
        }
    }
}

impl From<String> for Reason {
    fn from(text: String) -> Self {
        Reason { text, source: None }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
