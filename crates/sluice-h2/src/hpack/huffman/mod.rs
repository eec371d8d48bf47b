// Copied from h2 0.4.18 (commit 3850acdcca3fe7a9102076204f6f1cf76e3325ca),
// src/hpack/huffman/mod.rs, MIT (see ../LICENSE-h2). Changed: output into a
// Vec<u8> (no `bytes`), table lookups through `get` (an out-of-range entry
// is an InvalidHuffmanCode, never a panic), the encoder dropped (ours sends
// no Huffman).

mod table;

use self::table::DECODE_TABLE;
use super::DecoderError;

const BRANCH: u16 = 0x8000;
const TABLE_INDEX_MASK: u16 = 0x7f00;
const TABLE_WIDTH: usize = 256;

fn entry(table: usize, index: usize) -> Result<u16, DecoderError> {
    DECODE_TABLE.get(table * TABLE_WIDTH + index).copied().ok_or(DecoderError::InvalidHuffmanCode)
}

/// Decodes a Huffman string (RFC 7541 5.2) onto the end of `buf`.
pub fn decode(src: &[u8], buf: &mut Vec<u8>) -> Result<(), DecoderError> {
    // Max compression ratio is >= 0.5
    buf.reserve(src.len() << 1);

    let mut table = 0;
    let mut acc = 0u32;
    let mut bits = 0;

    for &byte in src {
        acc = (acc << 8) | byte as u32;
        bits += 8;

        while bits >= 8 {
            let index = (acc >> (bits - 8)) as u8 as usize;
            let entry = entry(table, index)?;

            if entry & BRANCH == 0 {
                buf.push(entry as u8);
                table = 0;
                bits -= (entry >> 8) as usize;
            } else {
                table = ((entry & TABLE_INDEX_MASK) >> 8) as usize;
                if table == 0 {
                    return Err(DecoderError::InvalidHuffmanCode);
                }
                bits -= 8;
            }
        }
    }

    // Fewer than eight bits remain. A prefix of the EOS code (all ones) is
    // valid padding only when the previous symbol has completed.
    while bits > 0 {
        let padding = (1u32 << bits) - 1;
        if table == 0 && acc & padding == padding {
            break;
        }

        let index = (acc << (8 - bits)) as u8 as usize;
        let entry = entry(table, index)?;
        if entry & BRANCH != 0 {
            return Err(DecoderError::InvalidHuffmanCode);
        }

        let used = (entry >> 8) as usize;
        if used > bits {
            return Err(DecoderError::InvalidHuffmanCode);
        }

        buf.push(entry as u8);
        table = 0;
        bits -= used;
    }

    if table == 0 {
        Ok(())
    } else {
        Err(DecoderError::InvalidHuffmanCode)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn decode(src: &[u8]) -> Result<Vec<u8>, DecoderError> {
        let mut buf = Vec::new();
        super::decode(src, &mut buf).map(|()| buf)
    }

    #[test]
    fn decode_single_byte() {
        assert_eq!(b"o".to_vec(), decode(&[0b00111111]).unwrap());
        assert_eq!(b"0".to_vec(), decode(&[7]).unwrap());
        assert_eq!(b"A".to_vec(), decode(&[(0x21 << 2) + 3]).unwrap());
    }

    #[test]
    fn single_char_multi_byte() {
        assert_eq!(b"#".to_vec(), decode(&[255, 160 + 15]).unwrap());
        assert_eq!(b"$".to_vec(), decode(&[255, 200 + 7]).unwrap());
        assert_eq!(b"\x0a".to_vec(), decode(&[255, 255, 255, 240 + 3]).unwrap());
    }

    #[test]
    fn bad_padding_and_eos() {
        // Padding longer than 7 bits, and the EOS symbol itself, are errors.
        assert!(decode(&[0xff]).is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
