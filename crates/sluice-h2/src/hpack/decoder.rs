// Copied from h2 0.4.18 (commit 3850acdcca3fe7a9102076204f6f1cf76e3325ca),
// src/hpack/decoder.rs and the static table of src/hpack/table.rs, MIT
// (see LICENSE-h2 beside this file). Changed:
// - no `http`, `bytes` or `tracing`: a field is a raw (name, value) byte
//   pair; names and values are validated by the caller (crate::head), per
//   RFC 9113 8.2.1, not here;
// - the input is one whole header block as a slice (the connection
//   assembles HEADERS + CONTINUATION raw and bounded first), so there is no
//   resumable cursor and no NeedMore: a truncated block is an error;
// - the decoded field list is bounded (`max_list`, RFC 7541 4.1 sizes): a
//   block that references a large dynamic entry many times cannot expand
//   16 KiB of input into megabytes; past the bound fields are still decoded
//   (the dynamic table must stay in step with the peer) but not kept;
// - a size update anywhere but the start of a block is an error (RFC 7541
//   4.2), as in h2; one over our SETTINGS_HEADER_TABLE_SIZE too;
// - integers: the 5-octet limit kept, the shift checked;
// - the table's `consolidate` no longer panics (it stops at empty).

use super::{huffman, ENTRY_OVERHEAD, STATIC_TABLE};
use std::collections::VecDeque;

/// Decodes headers using HPACK.
#[derive(Debug)]
pub struct Decoder {
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask.
    max_allowed: usize,
    table: Table,
}

/// What can go wrong decoding a header block. Every one is a connection
/// error of type COMPRESSION_ERROR (RFC 9113 4.3) except `ListTooLarge`,
/// which leaves the decoder in step and can be refused per stream.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum DecoderError {
    InvalidRepresentation,
    InvalidTableIndex,
    InvalidHuffmanCode,
    InvalidMaxDynamicSize,
    IntegerOverflow,
    /// The block ends inside a representation.
    Truncated,
    /// The decoded list is over `max_list` (the whole block was decoded).
    ListTooLarge,
}

#[derive(Debug)]
struct Table {
    entries: VecDeque<super::Field>,
    size: usize,
    max_size: usize,
}

enum Representation {
    Indexed,
    LiteralWithIndexing,
    LiteralWithoutIndexing,
    LiteralNeverIndexed,
    SizeUpdate,
}

impl Representation {
    fn load(byte: u8) -> Result<Representation, DecoderError> {
        const INDEXED: u8 = 0b1000_0000;
        const LITERAL_WITH_INDEXING: u8 = 0b0100_0000;
        const LITERAL_WITHOUT_INDEXING: u8 = 0b1111_0000;
        const LITERAL_NEVER_INDEXED: u8 = 0b0001_0000;
        const SIZE_UPDATE_MASK: u8 = 0b1110_0000;
        const SIZE_UPDATE: u8 = 0b0010_0000;

        if byte & INDEXED == INDEXED {
            Ok(Representation::Indexed)
        } else if byte & LITERAL_WITH_INDEXING == LITERAL_WITH_INDEXING {
            Ok(Representation::LiteralWithIndexing)
        } else if byte & LITERAL_WITHOUT_INDEXING == 0 {
            Ok(Representation::LiteralWithoutIndexing)
        } else if byte & LITERAL_WITHOUT_INDEXING == LITERAL_NEVER_INDEXED {
            Ok(Representation::LiteralNeverIndexed)
        } else if byte & SIZE_UPDATE_MASK == SIZE_UPDATE {
            Ok(Representation::SizeUpdate)
        } else {
            Err(DecoderError::InvalidRepresentation)
        }
    }
}

/// A read position in one block.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }
}

impl Decoder {
    /// A decoder whose dynamic table holds at most `size` bytes (RFC 7541
    /// 4.1 sizes), our SETTINGS_HEADER_TABLE_SIZE.
    pub fn new(size: usize) -> Decoder {
        Decoder { max_allowed: size, table: Table { entries: VecDeque::new(), size: 0, max_size: size } }
    }

    /// The dynamic table's current size (RFC 7541 sizes).
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// The most a decoder with a `size`-byte table holds: the entries'
    /// bytes, plus per entry (at most `size / 32` of them) two vectors'
    /// overhead, the ring buffer's slots counted twice for its growth.
    pub fn memory_bound(size: usize) -> usize {
        size + (size / ENTRY_OVERHEAD + 1) * 4 * 24 + 256
    }

    /// What this decoder holds now (see `memory_bound`).
    pub fn memory_in_use(&self) -> usize {
        let entries: usize = self.table.entries.iter().map(|(n, v)| n.capacity() + v.capacity()).sum();
        entries + self.table.entries.capacity() * 2 * 24 + 256
    }

    /// Decodes one whole header block, calling `f` with each field in
    /// order while the list stays within `max_list` (RFC 7541 sizes:
    /// name + value + 32 each). Past it the rest of the block is still
    /// decoded, for the dynamic table, and `ListTooLarge` is returned.
    pub fn decode<F>(&mut self, block: &[u8], max_list: usize, mut f: F) -> Result<(), DecoderError>
    where
        F: FnMut(&[u8], &[u8]),
    {
        use self::Representation::*;
        let mut src = Cursor { buf: block, pos: 0 };
        let mut can_resize = true;
        let mut list = 0usize;
        let mut over = false;
        let mut emit = |name: &[u8], value: &[u8]| {
            list = list.saturating_add(name.len() + value.len() + ENTRY_OVERHEAD);
            if list > max_list {
                over = true;
            } else {
                f(name, value)
            }
        };

        while let Some(ty) = src.peek() {
            // At this point we are always at the beginning of the next block
            // within the HPACK data. The type of the block can always be
            // determined from the first byte.
            match Representation::load(ty)? {
                Indexed => {
                    can_resize = false;
                    let index = decode_int(&mut src, 7)?;
                    let (n, v) = self.table.get(index)?;
                    emit(n, v);
                }
                LiteralWithIndexing => {
                    can_resize = false;
                    let (name, value) = self.decode_literal(&mut src, true)?;
                    emit(&name, &value);
                    self.table.insert(name, value);
                }
                LiteralWithoutIndexing | LiteralNeverIndexed => {
                    can_resize = false;
                    let (name, value) = self.decode_literal(&mut src, false)?;
                    emit(&name, &value);
                }
                SizeUpdate => {
                    if !can_resize {
                        return Err(DecoderError::InvalidMaxDynamicSize);
                    }
                    let new_size = decode_int(&mut src, 5)?;
                    if new_size > self.max_allowed {
                        return Err(DecoderError::InvalidMaxDynamicSize);
                    }
                    self.table.set_max_size(new_size);
                }
            }
        }
        if over {
            return Err(DecoderError::ListTooLarge);
        }
        Ok(())
    }

    fn decode_literal(&mut self, buf: &mut Cursor<'_>, index: bool) -> Result<super::Field, DecoderError> {
        let prefix = if index { 6 } else { 4 };

        // Extract the table index for the name, or 0 if not indexed
        let table_idx = decode_int(buf, prefix)?;

        let name = if table_idx == 0 { decode_string(buf)? } else { self.table.get(table_idx)?.0.to_vec() };
        let value = decode_string(buf)?;
        Ok((name, value))
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(4096)
    }
}

fn decode_string(buf: &mut Cursor<'_>) -> Result<Vec<u8>, DecoderError> {
    const HUFF_FLAG: u8 = 0b1000_0000;

    // The first bit in the first byte contains the huffman encoded flag.
    let huff = match buf.peek() {
        Some(hdr) => (hdr & HUFF_FLAG) == HUFF_FLAG,
        None => return Err(DecoderError::Truncated),
    };

    // Decode the string length using 7 bit prefix
    let len = decode_int(buf, 7)?;
    let end = buf.pos.checked_add(len).ok_or(DecoderError::Truncated)?;
    let raw = buf.buf.get(buf.pos..end).ok_or(DecoderError::Truncated)?;
    buf.pos = end;
    if huff {
        let mut out = Vec::new();
        huffman::decode(raw, &mut out)?;
        Ok(out)
    } else {
        Ok(raw.to_vec())
    }
}

fn decode_int(buf: &mut Cursor<'_>, prefix_size: u8) -> Result<usize, DecoderError> {
    // The octet limit is chosen such that the maximum allowed *value* can
    // never overflow an unsigned 32-bit integer. The maximum value of any
    // integer that can be encoded with 5 octets is ~2^28
    const MAX_BYTES: usize = 5;
    const VARINT_MASK: u8 = 0b0111_1111;
    const VARINT_FLAG: u8 = 0b1000_0000;

    let mask = if prefix_size >= 8 { 0xFF } else { (1u8 << prefix_size).wrapping_sub(1) };

    let mut ret = (buf.next().ok_or(DecoderError::Truncated)? & mask) as usize;

    if ret < mask as usize {
        // Value fits in the prefix bits
        return Ok(ret);
    }

    // The int did not fit in the prefix bits, so continue reading.
    //
    // The total number of bytes used to represent the int. The first byte was
    // the prefix, so start at 1.
    let mut bytes = 1;

    // The rest of the int is stored as a varint -- 7 bits for the value and 1
    // bit to indicate if it is the last byte.
    let mut shift = 0;

    while let Some(b) = buf.next() {
        bytes += 1;
        ret += ((b & VARINT_MASK) as usize) << shift;
        shift += 7;

        if b & VARINT_FLAG == 0 {
            return Ok(ret);
        }

        if bytes == MAX_BYTES {
            // The spec requires that this situation is an error
            return Err(DecoderError::IntegerOverflow);
        }
    }

    Err(DecoderError::Truncated)
}

impl Table {
    /// Returns the entry located at the given index.
    ///
    /// The table is 1-indexed and constructed in such a way that the first
    /// entries belong to the static table, followed by entries in the dynamic
    /// table. They are merged into a single index address space, though.
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), DecoderError> {
        if index == 0 {
            return Err(DecoderError::InvalidTableIndex);
        }
        if let Some((n, v)) = STATIC_TABLE.get(index - 1) {
            return Ok((n, v));
        }
        match self.entries.get(index - 1 - STATIC_TABLE.len()) {
            Some((n, v)) => Ok((n, v)),
            None => Err(DecoderError::InvalidTableIndex),
        }
    }

    fn insert(&mut self, mut name: Vec<u8>, mut value: Vec<u8>) {
        // Huffman output is over-reserved; the table keeps exact sizes.
        name.shrink_to_fit();
        value.shrink_to_fit();
        let len = name.len() + value.len() + ENTRY_OVERHEAD;
        self.reserve(len);
        // RFC 7541 4.4: an entry larger than the table empties it and is
        // not added.
        if self.size + len <= self.max_size {
            self.size += len;
            self.entries.push_front((name, value));
        }
    }

    fn set_max_size(&mut self, size: usize) {
        self.max_size = size;
        // Make the table size fit within the new constraints.
        self.reserve(0);
    }

    fn reserve(&mut self, size: usize) {
        while self.size + size > self.max_size {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + ENTRY_OVERHEAD,
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Result<Vec<crate::hpack::Field>, DecoderError> {
        let mut v = Vec::new();
        d.decode(block, usize::MAX, |n, val| v.push((n.to_vec(), val.to_vec())))?;
        Ok(v)
    }

    #[test]
    fn test_decode_empty() {
        let mut de = Decoder::new(0);
        assert_eq!(decode_all(&mut de, &[]), Ok(vec![]));
    }

    #[test]
    fn test_decode_indexed_larger_than_table() {
        let mut de = Decoder::new(0);
        assert_eq!(decode_all(&mut de, &[0x80 | 62]), Err(DecoderError::InvalidTableIndex));
    }

    #[test]
    fn the_input_that_panics_other_crates() {
        // A 6-bit-prefix index of 63 with no continuation byte.
        let mut de = Decoder::default();
        assert_eq!(decode_all(&mut de, &[0x3f]), Err(DecoderError::Truncated));
    }

    #[test]
    fn size_update_rules() {
        let mut de = Decoder::new(4096);
        // Over our setting.
        assert_eq!(decode_all(&mut de, &[0x3f, 0xe2, 0x1f]), Err(DecoderError::InvalidMaxDynamicSize));
        // After a field.
        assert_eq!(decode_all(&mut de, &[0x82, 0x20]), Err(DecoderError::InvalidMaxDynamicSize));
        // At the start, twice, is fine.
        assert_eq!(decode_all(&mut de, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).map(|v| v.len()), Ok(1));
    }

    #[test]
    fn integer_overflow() {
        let mut de = Decoder::default();
        assert_eq!(decode_all(&mut de, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), Err(DecoderError::IntegerOverflow));
    }
}
