//! The Internet checksum (RFC 1071) and the IPv4/IPv6 pseudo-headers.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement sum of `data` as big-endian 16-bit words, not yet folded.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(u16::from_be_bytes([*last, 0]));
    }
    fold64(acc)
}

fn fold64(mut acc: u64) -> u32 {
    while acc > 0xffff_ffff {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Fold a 32-bit partial sum into the final 16-bit checksum (complemented).
pub fn finish(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Combine partial sums.
pub fn combine(parts: &[u32]) -> u32 {
    fold64(parts.iter().map(|&p| u64::from(p)).sum())
}

/// Whether `data`, checksum field included, sums to zero with the pseudo-header
/// partial sum `pseudo` (0 where there is none, as for ICMPv4).
pub fn verify(pseudo: u32, data: &[u8]) -> bool {
    finish(combine(&[pseudo, sum(data)])) == 0
}

/// Zero the 2-byte checksum field at `at`, compute the checksum over all of
/// `data` plus `pseudo`, store it there and return it.
pub fn fill(data: &mut [u8], at: usize, pseudo: u32) -> u16 {
    data[at..at + 2].copy_from_slice(&[0, 0]);
    let c = finish(combine(&[pseudo, sum(data)]));
    data[at..at + 2].copy_from_slice(&c.to_be_bytes());
    c
}

/// Partial sum of the IPv4 pseudo-header for an upper-layer length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u32 {
    let mut acc = sum(&src.octets()) + sum(&dst.octets());
    acc += u32::from(protocol);
    acc += length;
    acc
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1).
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u32 {
    combine(&[sum(&src.octets()), sum(&dst.octets()), length >> 16, length & 0xffff, u32::from(next_header)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: words 0001 f203 f4f5 f6f7 sum to ddf2 before complement.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(&data)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }
}
