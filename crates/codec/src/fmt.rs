//! Human-readable rendering of key parts, as a person writes them in JavaScript:
//! `"users"`, `42n`, `3.14`, `-0`, `NaN`, `1e+21`, `true`, and bytes as `b"\x00ab"`.

use std::fmt::{self, Write};

/// Writes a string part in double quotes, escaping quotes, backslashes and control characters.
pub(crate) fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\0' => f.write_str("\\0")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

/// Writes a bytes part as a Rust byte-string literal: printable ASCII as is, the rest as `\xNN`.
pub(crate) fn write_bytes(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    f.write_str("b\"")?;
    for &byte in b {
        match byte {
            b'"' => f.write_str("\\\"")?,
            b'\\' => f.write_str("\\\\")?,
            0x20..=0x7e => f.write_char(char::from(byte))?,
            _ => write!(f, "\\x{byte:02x}")?,
        }
    }
    f.write_char('"')
}

/// Writes a number as JavaScript's `Number.prototype.toString` does (shortest round-trip
/// digits, exponent form outside `1e-7 ..= 1e21`), except that `-0` is written `-0` because it
/// is a different key from `0`.
pub(crate) fn write_number(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    if x.is_nan() {
        return f.write_str("NaN");
    }
    if x.is_infinite() {
        return f.write_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    }
    if x == 0.0 {
        return f.write_str(if x.is_sign_negative() { "-0" } else { "0" });
    }
    if x < 0.0 {
        f.write_char('-')?;
    }
    // `{:e}` gives the shortest digits that round-trip, as `d[.ddd]e<exp>`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // The value is 0.d1d2…dk × 10^n, in the terms of ECMA-262 Number::toString.
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let n = exp + 1;
    if k <= n && n <= 21 {
        f.write_str(&digits)?;
        for _ in 0..(n - k) {
            f.write_char('0')?;
        }
        Ok(())
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n.unsigned_abs() as usize);
        write!(f, "{int}.{frac}")
    } else if -6 < n && n <= 0 {
        f.write_str("0.")?;
        for _ in 0..(-n) {
            f.write_char('0')?;
        }
        f.write_str(&digits)
    } else {
        let (first, rest) = digits.split_at(1);
        f.write_str(first)?;
        if !rest.is_empty() {
            write!(f, ".{rest}")?;
        }
        let e = n - 1;
        write!(f, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs())
    }
}

#[cfg(test)]
mod tests {
    use crate::KeyPart;

    fn shown(x: f64) -> String {
        KeyPart::Number(x).to_string()
    }

    #[test]
    fn numbers_print_like_javascript() {
        assert_eq!(shown(1.0), "1");
        assert_eq!(shown(-300.0), "-300");
        assert_eq!(shown(123.456), "123.456");
        assert_eq!(shown(0.1), "0.1");
        assert_eq!(shown(1e21), "1e+21");
        assert_eq!(shown(1e20), "100000000000000000000");
        assert_eq!(shown(1e-7), "1e-7");
        assert_eq!(shown(1.5e-7), "1.5e-7");
        assert_eq!(shown(0.000001), "0.000001");
        assert_eq!(shown(-0.0), "-0");
        assert_eq!(shown(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(shown(f64::MIN_POSITIVE / 4.0), "5.562684646268003e-309");
        assert_eq!(shown(-f64::NAN), "NaN");
    }

    #[test]
    fn strings_and_bytes_escape_what_is_not_printable() {
        assert_eq!(KeyPart::from("a\"b\\\0\n").to_string(), r#""a\"b\\\0\n""#);
        assert_eq!(
            KeyPart::from(&[0u8, b'a', 0xff]).to_string(),
            r#"b"\x00a\xff""#
        );
    }
}
