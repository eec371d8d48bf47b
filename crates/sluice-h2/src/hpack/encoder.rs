//! Our HPACK encoder: stateless (no dynamic table, so nothing to keep in
//! step with the peer's decoder), no Huffman. See the module docs.

use super::STATIC_TABLE;

/// An integer with an N-bit prefix (RFC 7541 5.1); `first` holds the
/// representation's pattern bits above the prefix.
fn encode_int(out: &mut Vec<u8>, first: u8, prefix: u8, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A dynamic table size update (RFC 7541 6.3), for the start of a block
/// after the peer changed SETTINGS_HEADER_TABLE_SIZE.
pub fn encode_size_update(out: &mut Vec<u8>, size: usize) {
    encode_int(out, 0x20, 5, size);
}

/// Appends the encoding of these fields to `out`: static-table indexed on
/// an exact match, else a literal without indexing (RFC 7541 6.2.2), its
/// name indexed when the static table names it.
pub fn encode<'a>(out: &mut Vec<u8>, fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) {
    for (name, value) in fields {
        let mut name_idx = 0;
        let mut exact = 0;
        for (i, (n, v)) in STATIC_TABLE.iter().enumerate() {
            if *n == name {
                if name_idx == 0 {
                    name_idx = i + 1;
                }
                if *v == value {
                    exact = i + 1;
                    break;
                }
            }
        }
        if exact != 0 {
            encode_int(out, 0x80, 7, exact);
        } else {
            encode_int(out, 0x00, 4, name_idx);
            if name_idx == 0 {
                encode_str(out, name);
            }
            encode_str(out, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7541_c1_integers() {
        let mut b = Vec::new();
        encode_int(&mut b, 0, 5, 10);
        assert_eq!(b, [0b01010]);
        b.clear();
        encode_int(&mut b, 0, 5, 1337);
        assert_eq!(b, [31, 154, 10]);
        b.clear();
        encode_int(&mut b, 0, 8, 42);
        assert_eq!(b, [42]);
    }
}
