//! What a sequence is: its [`SequenceOptions`] as the caller gives them, and the checked,
//! resolved [`Definition`] stored under the sequence's definition key so that every handle on
//! the store agrees on it.

use std::fmt;

use crate::error::{Error, OptionsError};
use crate::format::{DEFAULT_FORMAT, Format, validate_prefix};
use crate::limits::{NUMBER_MAX, WIDTH_MAX};

/// How a sequence hands out numbers; see the crate docs for the trade-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Blocks of numbers reserved with one commit each and handed out lock-free; unique and
    /// increasing, with gaps (a crash or a dropped handle leaves its unused block unused).
    #[default]
    Fast,
    /// Each number commits together with the record that uses it: no gaps, one commit per
    /// batch of concurrent requests.
    Gapless,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Fast => "fast",
            Mode::Gapless => "gapless",
        })
    }
}

/// What happens when a sequence reaches the largest number its width shows (or its `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AtMax {
    /// Keep counting; codes get wider than the width (`INFO999`, `INFO1000`), up to
    /// [`NUMBER_MAX`], where the sequence fails with [`Error::Exhausted`]. A
    /// [`SequenceOptions::max`] would have no effect, so it must be left unset
    /// ([`OptionsError::MaxWithWiden`]).
    #[default]
    Widen,
    /// Fail with [`Error::Exhausted`] once [`SequenceOptions::max`] (by default the largest
    /// number the width shows) is handed out.
    Error,
}

/// The options of a new sequence.
///
/// ```
/// use tuplekv_sequence::{AtMax, Mode, SequenceOptions};
///
/// let ticket = SequenceOptions { mode: Mode::Gapless, width: 5, at_max: AtMax::Error, ..Default::default() };
/// assert_eq!(ticket.start, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SequenceOptions {
    /// Fast or gapless (default fast).
    pub mode: Mode,
    /// The first number (default 1).
    pub start: u64,
    /// The digits numbers are zero-padded to, 1 to [`WIDTH_MAX`] (default 3: `INFO001`).
    pub width: usize,
    /// The last number, with [`AtMax::Error`]; `None` (the default) means the largest number
    /// the width shows (999 for width 3), or the start if it is larger. Must be `None` with
    /// [`AtMax::Widen`], which counts to [`NUMBER_MAX`].
    pub max: Option<u64>,
    /// What happens past the largest number the width shows or `max` (default: widen).
    pub at_max: AtMax,
    /// The code template: `{prefix}` at least once and `{n}` exactly once (default
    /// `{prefix}{n}`). Without `{prefix}`, sequences with different prefixes would make the
    /// same codes, so [`OptionsError::FormatWithoutPrefix`] refuses it.
    pub format: String,
}

impl Default for SequenceOptions {
    fn default() -> Self {
        SequenceOptions {
            mode: Mode::Fast,
            start: 1,
            width: 3,
            max: None,
            at_max: AtMax::Widen,
            format: DEFAULT_FORMAT.to_owned(),
        }
    }
}

/// A sequence's checked options, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Definition {
    pub(crate) prefix: String,
    pub(crate) mode: Mode,
    pub(crate) start: u64,
    pub(crate) width: usize,
    pub(crate) max: u64,
    pub(crate) at_max: AtMax,
    pub(crate) template: String,
    pub(crate) format: Format,
}

impl Definition {
    /// Checks and resolves `options` for `prefix`, for a new sequence.
    pub(crate) fn new(prefix: &str, options: &SequenceOptions) -> Result<Definition, Error> {
        Definition::resolve(prefix, options, Format::new)
    }

    /// Checks and resolves the options of a sequence created earlier, whose format may lack
    /// `{prefix}` (allowed before [`OptionsError::FormatWithoutPrefix`] existed): the
    /// sequence exists, so its handles open and creating it again is a no-op, but no new
    /// sequence gets such a format.
    pub(crate) fn existing(prefix: &str, options: &SequenceOptions) -> Result<Definition, Error> {
        Definition::resolve(prefix, options, Format::stored)
    }

    /// Checks and resolves `options` for `prefix`, compiling the format with `compile`.
    fn resolve(
        prefix: &str,
        options: &SequenceOptions,
        compile: fn(&str, &str, usize) -> Result<Format, OptionsError>,
    ) -> Result<Definition, Error> {
        validate_prefix(prefix).map_err(|reason| Error::InvalidPrefix {
            prefix: prefix.to_owned(),
            reason,
        })?;
        let o = options;
        if o.width == 0 || o.width > WIDTH_MAX {
            return Err(OptionsError::Width { width: o.width }.into());
        }
        if o.start > NUMBER_MAX {
            return Err(OptionsError::NumberTooLarge {
                what: "start",
                value: o.start,
            }
            .into());
        }
        let shown = u32::try_from(o.width)
            .ok()
            .and_then(|w| 10u64.checked_pow(w))
            .map_or(NUMBER_MAX, |p| (p - 1).min(NUMBER_MAX));
        if let (AtMax::Widen, Some(max)) = (o.at_max, o.max) {
            return Err(OptionsError::MaxWithWiden { max }.into());
        }
        // Unset, the maximum is what the width shows (or the start, if that is wider).
        let max = o.max.unwrap_or(shown.max(o.start));
        if max > NUMBER_MAX {
            return Err(OptionsError::NumberTooLarge {
                what: "max",
                value: max,
            }
            .into());
        }
        if max < o.start {
            return Err(OptionsError::MaxBelowStart {
                start: o.start,
                max,
            }
            .into());
        }
        let format = compile(&o.format, prefix, o.width)?;
        Ok(Definition {
            prefix: prefix.to_owned(),
            mode: o.mode,
            start: o.start,
            width: o.width,
            max,
            at_max: o.at_max,
            template: o.format.clone(),
            format,
        })
    }

    /// The last number this sequence may hand out.
    pub(crate) fn limit(&self) -> u64 {
        match self.at_max {
            AtMax::Error => self.max,
            AtMax::Widen => NUMBER_MAX,
        }
    }

    /// The error for a request past [`Definition::limit`].
    pub(crate) fn exhausted(&self) -> Error {
        Error::Exhausted {
            prefix: self.prefix.clone(),
            max: self.limit(),
        }
    }

    /// The stored form: one `name=value` line per option, the template last (it may hold `=`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let at_max = match self.at_max {
            AtMax::Widen => "widen",
            AtMax::Error => "error",
        };
        format!(
            "v1\nmode={}\nstart={}\nwidth={}\nmax={}\nat_max={at_max}\nformat={}",
            self.mode, self.start, self.width, self.max, self.template
        )
        .into_bytes()
    }

    /// Reads the stored form back, checking it as `create` did when it wrote it (see
    /// [`Definition::existing`]).
    pub(crate) fn decode(prefix: &str, bytes: &[u8]) -> Result<Definition, Error> {
        let corrupt = |reason: &str| Error::Corrupt {
            prefix: prefix.to_owned(),
            reason: format!("definition: {reason}"),
        };
        let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?;
        let mut lines = text.splitn(7, '\n');
        if lines.next() != Some("v1") {
            return Err(corrupt("unknown version"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix('='))
                .ok_or_else(|| corrupt(&format!("missing {name}")))
        };
        let mode = match field("mode")? {
            "fast" => Mode::Fast,
            "gapless" => Mode::Gapless,
            _ => return Err(corrupt("bad mode")),
        };
        let number = |s: &str| s.parse::<u64>().map_err(|_| corrupt("bad number"));
        let start = number(field("start")?)?;
        let width = number(field("width")?)?;
        let max = number(field("max")?)?;
        let at_max = match field("at_max")? {
            "widen" => AtMax::Widen,
            "error" => AtMax::Error,
            _ => return Err(corrupt("bad at_max")),
        };
        let format = field("format")?.to_owned();
        let options = SequenceOptions {
            mode,
            start,
            width: usize::try_from(width).map_err(|_| corrupt("bad width"))?,
            // A widening sequence counts to NUMBER_MAX whatever its stored max says (older
            // versions stored a caller's max there unused), so it is resolved again.
            max: (at_max == AtMax::Error).then_some(max),
            at_max,
            format,
        };
        Definition::existing(prefix, &options).map_err(|e| corrupt(&e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_round_trip_through_their_stored_form() {
        let o = SequenceOptions {
            mode: Mode::Gapless,
            start: 7,
            width: 5,
            max: Some(123_456),
            at_max: AtMax::Error,
            format: "{prefix}=\n{n}".replace('\n', "-"),
        };
        let d = Definition::new("TICKET", &o).expect("valid");
        assert_eq!(Definition::decode("TICKET", &d.encode()), Ok(d));
        let widening = SequenceOptions {
            start: 5000,
            ..Default::default()
        };
        let d = Definition::new("TICKET", &widening).expect("valid");
        assert_eq!(d.max, 5000);
        assert_eq!(Definition::decode("TICKET", &d.encode()), Ok(d.clone()));
        // A widening definition stored with a caller's (unused) max still opens.
        let stored = String::from_utf8(d.encode())
            .expect("utf-8")
            .replace("max=5000", "max=700");
        assert_eq!(Definition::decode("TICKET", stored.as_bytes()), Ok(d));
        assert!(Definition::decode("TICKET", b"v2\n").is_err());
    }

    #[test]
    fn a_stored_format_without_the_prefix_still_decodes() {
        let stored = b"v1\nmode=fast\nstart=1\nwidth=3\nmax=999\nat_max=widen\nformat=N-{n}";
        let d = Definition::decode("A", stored).expect("created before the rule");
        assert_eq!(d.format.format(7), "N-007");
        let options = SequenceOptions {
            format: "N-{n}".into(),
            ..Default::default()
        };
        assert_eq!(Definition::existing("A", &options), Ok(d));
        assert_eq!(
            Definition::new("A", &options),
            Err(Error::InvalidOptions(OptionsError::FormatWithoutPrefix {
                format: "N-{n}".into()
            }))
        );
    }

    #[test]
    fn default_max_is_what_the_width_shows() {
        let d = Definition::new("A", &SequenceOptions::default()).expect("valid");
        assert_eq!((d.max, d.limit()), (999, NUMBER_MAX));
        let wide = SequenceOptions {
            width: WIDTH_MAX,
            ..Default::default()
        };
        assert_eq!(Definition::new("A", &wide).expect("valid").max, NUMBER_MAX);
    }
}
