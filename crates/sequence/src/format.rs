//! Codes: a sequence's number written into its format (`INFO` + `001`), parsed back, and the
//! rules a prefix must follow so that codes stay unambiguous.

use std::fmt;

use crate::error::{CodeError, OptionsError, PrefixError};
use crate::limits::{FORMAT_SIZE_MAX, NUMBER_MAX, PREFIX_SIZE_MAX};

/// The format of the codes when none is given: the prefix, then the padded number.
pub const DEFAULT_FORMAT: &str = "{prefix}{n}";

/// Checks that `prefix` can name a sequence.
///
/// A prefix is 1 to [`PREFIX_SIZE_MAX`] bytes of printable, non-space characters other than
/// `{` and `}`, and does not end with an ASCII digit (so that with the default format no two
/// prefixes can make the same code).
///
/// # Errors
/// The first rule it breaks.
pub fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.is_empty() {
        return Err(PrefixError::Empty);
    }
    if prefix.len() > PREFIX_SIZE_MAX {
        return Err(PrefixError::TooLong { size: prefix.len() });
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || matches!(c, '{' | '}'))
    {
        return Err(PrefixError::BadChar(c));
    }
    if prefix.ends_with(|c: char| c.is_ascii_digit()) {
        return Err(PrefixError::EndsWithDigit);
    }
    Ok(())
}

/// How one sequence writes its numbers: fixed text, the number zero-padded to a width, fixed
/// text. Numbers wider than the width are written in full (the code widens).
///
/// ```
/// use tuplekv_sequence::Format;
///
/// let f = Format::new("{prefix}-{n}", "INFO", 3)?;
/// assert_eq!(f.format(7), "INFO-007");
/// assert_eq!(f.format(1234), "INFO-1234");
/// assert_eq!(f.parse("INFO-007")?, 7);
/// assert!(f.parse("INFO-7").is_err()); // not padded: not a code this sequence makes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    head: String,
    tail: String,
    width: usize,
}

impl Format {
    /// Compiles `template` for `prefix`: `{prefix}` stands for the prefix (at least once) and
    /// `{n}` for the number (exactly once); everything else is literal text.
    ///
    /// # Errors
    /// A template over [`FORMAT_SIZE_MAX`] bytes, without exactly one `{n}`, with another
    /// `{...}` or a lone brace, or with a control character; and
    /// [`OptionsError::FormatWithoutPrefix`] for a template without `{prefix}`, with which
    /// sequences of different prefixes would make the same codes.
    pub fn new(template: &str, prefix: &str, width: usize) -> Result<Format, OptionsError> {
        let (format, has_prefix) = Format::compile(template, prefix, width)?;
        if !has_prefix {
            return Err(OptionsError::FormatWithoutPrefix {
                format: template.to_owned(),
            });
        }
        Ok(format)
    }

    /// [`Format::new`] for a template stored before `{prefix}` was required: such a
    /// sequence exists, and its handles must open.
    pub(crate) fn stored(
        template: &str,
        prefix: &str,
        width: usize,
    ) -> Result<Format, OptionsError> {
        Format::compile(template, prefix, width).map(|(format, _)| format)
    }

    /// Compiles `template`, and says whether it holds `{prefix}`.
    fn compile(template: &str, prefix: &str, width: usize) -> Result<(Format, bool), OptionsError> {
        if template.len() > FORMAT_SIZE_MAX {
            return Err(OptionsError::FormatTooLong {
                size: template.len(),
            });
        }
        let bad = |reason| OptionsError::Format {
            format: template.to_owned(),
            reason,
        };
        let (mut head, mut tail) = (String::new(), String::new());
        let mut seen_n = false;
        let mut seen_prefix = false;
        let mut rest = template;
        loop {
            let mut chars = rest.chars();
            let Some(c) = chars.next() else { break };
            let out = if seen_n { &mut tail } else { &mut head };
            if let Some(after) = rest.strip_prefix("{prefix}") {
                out.push_str(prefix);
                seen_prefix = true;
                rest = after;
            } else if let Some(after) = rest.strip_prefix("{n}") {
                if seen_n {
                    return Err(bad("{n} appears more than once"));
                }
                seen_n = true;
                rest = after;
            } else if c == '{' || c == '}' {
                return Err(bad("only {prefix} and {n} may appear in braces"));
            } else if c.is_control() {
                return Err(bad("control characters are not allowed"));
            } else {
                out.push(c);
                rest = chars.as_str();
            }
        }
        if !seen_n {
            return Err(bad("{n} is missing"));
        }
        Ok((Format { head, tail, width }, seen_prefix))
    }

    /// The number of digits numbers are padded to.
    pub fn width(&self) -> usize {
        self.width
    }

    /// How many digits the code of `number` has: the width, or more for a wider number.
    pub fn digits(&self, number: u64) -> usize {
        let mut n = number;
        let mut d = 1;
        while n >= 10 {
            n /= 10;
            d += 1;
        }
        d.max(self.width)
    }

    /// A code with `digits` copies of `fill` for its number: the placeholder a store fills
    /// in, and the byte offset of its digits.
    pub(crate) fn sample(&self, digits: usize, fill: char) -> (String, usize) {
        let mut s = String::with_capacity(self.head.len() + digits + self.tail.len());
        s.push_str(&self.head);
        s.extend(std::iter::repeat_n(fill, digits));
        s.push_str(&self.tail);
        (s, self.head.len())
    }

    /// The code of `number`.
    pub fn format(&self, number: u64) -> String {
        let mut s = String::with_capacity(self.head.len() + self.width + self.tail.len());
        // Writing to a String cannot fail.
        let _ = self.write(number, &mut s);
        s
    }

    /// Writes the code of `number` to `out`.
    ///
    /// # Errors
    /// What `out` returns.
    pub fn write(&self, number: u64, out: &mut impl fmt::Write) -> fmt::Result {
        write!(
            out,
            "{}{number:0width$}{}",
            self.head,
            self.tail,
            width = self.width
        )
    }

    /// The number of a code this format makes; exactly the texts [`Format::format`] returns
    /// parse, so `format(parse(code)?) == code`.
    ///
    /// # Errors
    /// The text does not have the fixed parts, its number part is not digits, is not padded
    /// exactly as `format` pads, or is above [`NUMBER_MAX`].
    pub fn parse(&self, code: &str) -> Result<u64, CodeError> {
        let digits = code
            .strip_prefix(self.head.as_str())
            .and_then(|r| r.strip_suffix(self.tail.as_str()))
            .ok_or(CodeError::Shape)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CodeError::NotDigits);
        }
        let padded_wider = digits.len() > self.width && digits.starts_with('0');
        if digits.len() < self.width || padded_wider {
            return Err(CodeError::Padding);
        }
        let n: u64 = digits.parse().map_err(|_| CodeError::TooLarge)?;
        if n > NUMBER_MAX {
            return Err(CodeError::TooLarge);
        }
        Ok(n)
    }
}

/// A number handed out by a sequence, with its code.
///
/// The code is written on demand ([`Issued::code`], `Display`), so taking a number costs no
/// allocation.
#[derive(Debug, Clone, Copy)]
pub struct Issued<'a> {
    number: u64,
    format: &'a Format,
}

impl<'a> Issued<'a> {
    pub(crate) fn new(number: u64, format: &'a Format) -> Self {
        Issued { number, format }
    }

    /// The number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The code, such as `INFO001`.
    pub fn code(&self) -> String {
        self.format.format(self.number)
    }
}

impl fmt::Display for Issued<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.format.write(self.number, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_round_trips_at_width_and_wider() {
        let f = Format::new(DEFAULT_FORMAT, "INFO", 3).expect("valid");
        for n in [0, 1, 999, 1000, NUMBER_MAX] {
            assert_eq!(f.parse(&f.format(n)), Ok(n));
        }
        assert_eq!(f.format(1), "INFO001");
        assert_eq!(f.parse("INFO01"), Err(CodeError::Padding));
        assert_eq!(f.parse("INFO0999"), Err(CodeError::Padding));
        assert_eq!(f.parse("INFO+01"), Err(CodeError::NotDigits));
        assert_eq!(f.parse("WARN001"), Err(CodeError::Shape));
        assert_eq!(f.parse("INFO9007199254740992"), Err(CodeError::TooLarge));
        assert_eq!(
            f.parse("INFO99999999999999999999"),
            Err(CodeError::TooLarge)
        );
    }

    #[test]
    fn templates_need_exactly_one_number() {
        for bad in ["{prefix}", "{n}{n}", "{x}{n}", "{n}}", "a\n{n}"] {
            assert!(Format::new(bad, "A", 1).is_err(), "{bad:?}");
        }
        let f = Format::new("[{prefix}/{n}/{prefix}]", "A", 2).expect("valid");
        assert_eq!(f.format(5), "[A/05/A]");
        assert_eq!(f.parse("[A/05/A]"), Ok(5));
    }

    #[test]
    fn templates_need_the_prefix() {
        for bad in ["{n}", "N-{n}", "{n}-prefix"] {
            assert_eq!(
                Format::new(bad, "A", 3),
                Err(OptionsError::FormatWithoutPrefix {
                    format: bad.to_owned()
                })
            );
            // A stored one still compiles: its sequence exists.
            assert!(Format::stored(bad, "A", 3).is_ok(), "{bad:?}");
        }
        let err = Format::new("N-{n}", "A", 3).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"format "N-{n}" has no {prefix}: sequences with different prefixes would make the same codes"#
        );
        // The other rules still apply to a stored template.
        assert!(Format::stored("{n}{n}", "A", 3).is_err());
    }

    #[test]
    fn prefixes_that_could_collide_are_rejected() {
        assert_eq!(validate_prefix("INFO"), Ok(()));
        assert_eq!(validate_prefix("ÉTÉ_2"), Err(PrefixError::EndsWithDigit));
        assert_eq!(validate_prefix(""), Err(PrefixError::Empty));
        assert_eq!(validate_prefix("a b"), Err(PrefixError::BadChar(' ')));
        assert_eq!(validate_prefix("a\0"), Err(PrefixError::BadChar('\0')));
        assert_eq!(validate_prefix("{n}"), Err(PrefixError::BadChar('{')));
    }
}
