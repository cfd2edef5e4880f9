//! The tags of V8's serialisation format that this crate reads or writes.

/// Starts the header: `FF <version varint>`.
pub(crate) const TAG_VERSION: u8 = 0xff;
/// Skipped; written so that two-byte string data starts at an even offset.
pub(crate) const TAG_PADDING: u8 = 0x00;
/// An object count for verification, skipped.
pub(crate) const TAG_VERIFY_COUNT: u8 = b'?';
/// A hole in a dense array.
pub(crate) const TAG_THE_HOLE: u8 = b'-';
pub(crate) const TAG_UNDEFINED: u8 = b'_';
pub(crate) const TAG_NULL: u8 = b'0';
pub(crate) const TAG_TRUE: u8 = b'T';
pub(crate) const TAG_FALSE: u8 = b'F';
/// A Smi: zigzag varint.
pub(crate) const TAG_INT32: u8 = b'I';
/// A uint32 varint (read only).
pub(crate) const TAG_UINT32: u8 = b'U';
/// A double, 8 bytes little-endian.
pub(crate) const TAG_DOUBLE: u8 = b'N';
/// A bigint: bitfield varint (byte length << 1 | sign), then the magnitude's bytes.
pub(crate) const TAG_BIGINT: u8 = b'Z';
/// A UTF-8 string (read only; V8 no longer writes it).
pub(crate) const TAG_UTF8_STRING: u8 = b'S';
/// A Latin-1 string: byte length varint, bytes.
pub(crate) const TAG_ONE_BYTE_STRING: u8 = b'"';
/// A UTF-16LE string: byte length varint, units.
pub(crate) const TAG_TWO_BYTE_STRING: u8 = b'c';
/// A back-reference: the id of an object read before.
pub(crate) const TAG_OBJECT_REFERENCE: u8 = b'^';
pub(crate) const TAG_BEGIN_OBJECT: u8 = b'o';
/// Ends an object: its property count.
pub(crate) const TAG_END_OBJECT: u8 = b'{';
/// A sparse array: length, then key-value pairs.
pub(crate) const TAG_BEGIN_SPARSE_ARRAY: u8 = b'a';
/// Ends a sparse array: property count, length.
pub(crate) const TAG_END_SPARSE_ARRAY: u8 = b'@';
/// A dense array: length, elements, then other properties.
pub(crate) const TAG_BEGIN_DENSE_ARRAY: u8 = b'A';
/// Ends a dense array: count of the other properties, length.
pub(crate) const TAG_END_DENSE_ARRAY: u8 = b'$';
/// A date: its time value as a double.
pub(crate) const TAG_DATE: u8 = b'D';
pub(crate) const TAG_TRUE_OBJECT: u8 = b'y';
pub(crate) const TAG_FALSE_OBJECT: u8 = b'x';
pub(crate) const TAG_NUMBER_OBJECT: u8 = b'n';
pub(crate) const TAG_BIGINT_OBJECT: u8 = b'z';
pub(crate) const TAG_STRING_OBJECT: u8 = b's';
/// A regexp: its source (a string), its flags varint.
pub(crate) const TAG_REGEXP: u8 = b'R';
pub(crate) const TAG_BEGIN_MAP: u8 = b';';
/// Ends a map: twice its entry count.
pub(crate) const TAG_END_MAP: u8 = b':';
pub(crate) const TAG_BEGIN_SET: u8 = b'\'';
/// Ends a set: its size.
pub(crate) const TAG_END_SET: u8 = b',';
/// An array buffer: byte length varint, bytes.
pub(crate) const TAG_ARRAY_BUFFER: u8 = b'B';
/// A view over the buffer just read: sub-tag, byte offset, byte length, flags (version 14+).
pub(crate) const TAG_VIEW: u8 = b'V';
/// An embedder's object; Node writes typed arrays this way.
pub(crate) const TAG_HOST_OBJECT: u8 = b'\\';
