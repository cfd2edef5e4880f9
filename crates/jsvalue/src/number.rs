//! Numbers as JavaScript prints them (`Number.prototype.toString`), and which of them V8
//! keeps as a small integer (a Smi).

use std::fmt::Write;

/// Appends `x` as JavaScript's `String(x)` does, except that `-0` is written `-0` (so that it
/// reads back as itself).
pub(crate) fn write_number(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0" } else { "0" });
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // `{:e}` gives the shortest digits that read back as `x`: `d[.ddd]e<exp>`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // x = 0.d1…dk × 10^n (ECMA-262 Number::toString).
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let n = exp + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k).unsigned_abs() as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n.unsigned_abs() as usize);
        let _ = write!(out, "{int}.{frac}");
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', n.unsigned_abs() as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        let _ = write!(
            out,
            "e{}{}",
            if e < 0 { '-' } else { '+' },
            e.unsigned_abs()
        );
    }
}

/// The number as JavaScript prints it, as a string.
pub(crate) fn number_string(x: f64) -> String {
    let mut s = String::new();
    write_number(&mut s, x);
    s
}

/// The Smi V8 keeps `x` as (an integer in `i32`'s range that is not `-0`), if any: V8 writes
/// those with the int32 tag and every other number as a double.
pub(crate) fn as_smi(x: f64) -> Option<i32> {
    if x.fract() != 0.0 || !x.is_finite() || (x == 0.0 && x.is_sign_negative()) {
        return None;
    }
    if x >= f64::from(i32::MIN) && x <= f64::from(i32::MAX) {
        // In range and integral, so exact.
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked integral and in range"
        )]
        Some(x as i32)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        for (x, s) in [
            (1.0, "1"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (-0.0, "-0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (123.456, "123.456"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(number_string(x), s);
        }
    }

    #[test]
    fn smis_are_the_int32_integers_but_minus_zero() {
        assert_eq!(as_smi(2147483647.0), Some(i32::MAX));
        assert_eq!(as_smi(-2147483648.0), Some(i32::MIN));
        assert_eq!(as_smi(2147483648.0), None);
        assert_eq!(as_smi(-0.0), None);
        assert_eq!(as_smi(1.5), None);
        assert_eq!(as_smi(f64::NAN), None);
    }
}
