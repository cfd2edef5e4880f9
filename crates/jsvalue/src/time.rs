//! Dates: time values (milliseconds since 1970 UTC) to and from ISO 8601 text
//! (`1970-01-01T00:00:00.000Z`), as `Date.prototype.toISOString` writes it for years
//! 0000 to 9999.

/// The largest time value a `Date` holds: 8.64e15 ms (ECMA-262 TimeClip).
pub(crate) const TIME_MAX_MS: f64 = 8.64e15;

/// Days from 1970-01-01 to `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `(year, month, day)` of a day number counted from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The ISO text of a time value whose year is 0000 to 9999; `None` for others (and NaN).
pub(crate) fn iso_of(ms: f64) -> Option<String> {
    if !ms.is_finite() || ms.fract() != 0.0 || ms.abs() > TIME_MAX_MS {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "integral and at most 8.64e15"
    )]
    let ms = ms as i64;
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    Some(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    ))
}

/// The time value of `YYYY-MM-DDTHH:MM:SS[.sss]Z`, or `None` if the text is not that form
/// or names no real moment.
pub(crate) fn parse_iso(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let (millis, rest) = if sep(19, b'.') {
        (num(20..23)?, 23)
    } else {
        (0, 19)
    };
    if b.get(rest..) != Some(b"Z") {
        return None;
    }
    let days_in_month = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if d < 1 || d > days_in_month || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let ms = days_from_civil(y, mo, d) * 86_400_000 + ((h * 60 + mi) * 60 + s) * 1000 + millis;
    #[allow(clippy::cast_precision_loss, reason = "below 2^53")]
    Some(ms as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_text_round_trips() {
        assert_eq!(iso_of(0.0).as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(iso_of(-1.0).as_deref(), Some("1969-12-31T23:59:59.999Z"));
        assert_eq!(
            iso_of(951_782_400_000.0).as_deref(),
            Some("2000-02-29T00:00:00.000Z")
        );
        assert_eq!(
            iso_of(-62_167_219_200_000.0).as_deref(),
            Some("0000-01-01T00:00:00.000Z")
        );
        assert_eq!(iso_of(-62_167_219_200_001.0), None);
        assert_eq!(iso_of(253_402_300_800_000.0), None);
        for ms in [
            0.0,
            -1.0,
            1_700_000_000_123.0,
            253_402_300_799_999.0,
            -62_167_219_200_000.0,
        ] {
            let text = iso_of(ms).expect("in range");
            assert_eq!(parse_iso(&text), Some(ms), "{text}");
        }
        assert_eq!(parse_iso("2001-02-29T00:00:00.000Z"), None);
        assert_eq!(parse_iso("2001-02-28T00:00:00Z"), Some(983_318_400_000.0));
        assert_eq!(parse_iso("2001-02-28"), None);
    }
}
