//! The little of V8's serialisation format the command line needs: writing a JavaScript
//! string (so `set --string` stores what Deno's `kv.set(key, "text")` stores) and reading
//! strings, booleans, `null` and `undefined` back for display. Everything else stays opaque
//! bytes.
//!
//! Format (V8 `ValueSerializer`; written as version 15, the spec's vectors, which Deno 2.9
//! reads although it writes version 16): header `FF 0F`, then a tag.
//! A string whose characters are all at most U+00FF is `"` (0x22), a varint length and its
//! Latin-1 bytes; any other string is `c` (0x63), a varint byte length and UTF-16LE, with a
//! padding byte `00` before the tag when needed to start the UTF-16 data at an even offset.

/// The header Deno's serializer writes: version tag and version 15.
const HEADER: [u8; 2] = [0xff, 0x0f];
/// The oldest format version `read_simple` accepts. Seen from Deno: 15 and 16; older ones are
/// accepted on the assumption (unchecked) that these few tags did not change. It only
/// affects how a value is shown, never what is stored.
const VERSION_READ_MIN: u8 = 13;
const TAG_ONE_BYTE_STRING: u8 = b'"';
const TAG_TWO_BYTE_STRING: u8 = b'c';
const TAG_PADDING: u8 = 0x00;
const TAG_TRUE: u8 = b'T';
const TAG_FALSE: u8 = b'F';
const TAG_NULL: u8 = b'0';
const TAG_UNDEFINED: u8 = b'_';

/// The V8 serialisation of the JavaScript string `s`.
pub(crate) fn write_string(s: &str) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    if s.chars().all(|c| u32::from(c) <= 0xff) {
        let latin1: Vec<u8> = s.chars().map(|c| u32::from(c) as u8).collect();
        out.push(TAG_ONE_BYTE_STRING);
        write_varint(&mut out, latin1.len() as u64);
        out.extend_from_slice(&latin1);
    } else {
        let units: Vec<u16> = s.encode_utf16().collect();
        let byte_len = (units.len() * 2) as u64;
        // The UTF-16 data must start at an even offset: tag + varint + data.
        if (out.len() + 1 + varint_len(byte_len)) % 2 == 1 {
            out.push(TAG_PADDING);
        }
        out.push(TAG_TWO_BYTE_STRING);
        write_varint(&mut out, byte_len);
        for unit in units {
            out.extend_from_slice(&unit.to_le_bytes());
        }
    }
    out
}

/// A short display of a V8 value that is a string, boolean, `null` or `undefined`; `None`
/// for anything else.
pub(crate) fn read_simple(bytes: &[u8]) -> Option<String> {
    // Any format version: Deno 2.9 writes 16 (`FF 10`), earlier ones 15; both lay strings,
    // booleans, null and undefined out the same way.
    let (&version_tag, rest) = bytes.split_first()?;
    let (&version, rest) = rest.split_first()?;
    if version_tag != HEADER[0] || !(VERSION_READ_MIN..0x80).contains(&version) {
        return None;
    }
    let rest = match rest.split_first() {
        Some((&TAG_PADDING, after)) => after,
        _ => rest,
    };
    let (&tag, rest) = rest.split_first()?;
    match tag {
        TAG_TRUE if rest.is_empty() => Some("true".into()),
        TAG_FALSE if rest.is_empty() => Some("false".into()),
        TAG_NULL if rest.is_empty() => Some("null".into()),
        TAG_UNDEFINED if rest.is_empty() => Some("undefined".into()),
        TAG_ONE_BYTE_STRING => {
            let (len, data) = read_varint(rest)?;
            (data.len() as u64 == len).then(|| {
                let s: String = data.iter().map(|&b| char::from(b)).collect();
                format!("{s:?}")
            })
        }
        TAG_TWO_BYTE_STRING => {
            let (len, data) = read_varint(rest)?;
            if data.len() as u64 != len || len % 2 != 0 {
                return None;
            }
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|p| u16::from_le_bytes([p[0], p[1]]))
                .collect();
            String::from_utf16(&units).ok().map(|s| format!("{s:?}"))
        }
        _ => None,
    }
}

fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut n: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((n, bytes.get(i + 1..)?));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_serialise_as_deno_writes_them() {
        // The reference vectors of the spec (§3.1).
        assert_eq!(hex::encode(write_string("bar")), "ff0f2203626172");
        assert_eq!(
            hex::encode(write_string("a😮b")),
            "ff0f630861003dd82ede6200"
        );
        assert_eq!(
            read_simple(&write_string("a😮b")).as_deref(),
            Some("\"a😮b\"")
        );
        assert_eq!(
            read_simple(&hex::decode("ff0f30").expect("hex")).as_deref(),
            Some("null")
        );
        // A long two-byte string needs a two-byte varint, so a padding byte.
        let long = "😮".repeat(40);
        let bytes = write_string(&long);
        assert_eq!(&bytes[..4], &[0xff, 0x0f, 0x00, b'c']);
        assert_eq!(read_simple(&bytes), Some(format!("{long:?}")));
        assert_eq!(read_simple(b"\xff\x0f\x5a\x00"), None);
        // What Deno 2.9.6 wrote for `kv.set(["str"], "héllo")`: format version 16.
        let deno = hex::decode("ff10220568e96c6c6f").expect("hex");
        assert_eq!(read_simple(&deno).as_deref(), Some("\"héllo\""));
    }
}
