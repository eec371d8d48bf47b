//! The Toeplitz hash of Microsoft's RSS specification.
//!
//! For every set bit of the input (most significant first), XOR in the 32
//! bits of the key that start at that bit's position. The reference does
//! exactly that. The fast version precomputes, for each input byte position
//! and each byte value, the XOR of the key windows its set bits select, so
//! hashing is one table load and XOR per input byte (36 loads for an IPv6
//! 4-tuple) — DPDK's `rte_thash` takes the same approach.

use std::net::IpAddr;

pub const KEY_LEN: usize = 40;
/// Longest input: IPv6 source and destination, source and destination port.
pub const MAX_INPUT: usize = 36;

/// The key of the Microsoft RSS verification suite, the usual NIC default.
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b,
    0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac,
    0x01, 0xfa,
];

/// 0x6d5a repeated: its 16-bit period makes swapping source and destination
/// (addresses and ports alike) leave the hash unchanged, so both directions
/// of a flow land on one worker.
pub const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("RSS key must be 40 bytes (80 hex digits), got {0} hex digits")]
    Length(usize),
    #[error("RSS key is not hexadecimal at position {0}")]
    NotHex(usize),
}

/// Parse a 40-byte key from 80 hex digits (colons and spaces ignored).
pub fn parse_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let digits: Vec<(usize, char)> = text.char_indices().filter(|(_, c)| !matches!(c, ':' | ' ' | '-')).collect();
    if digits.len() != KEY_LEN * 2 {
        return Err(KeyError::Length(digits.len()));
    }
    let mut key = [0u8; KEY_LEN];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = pair[0].1.to_digit(16).ok_or(KeyError::NotHex(pair[0].0))?;
        let lo = pair[1].1.to_digit(16).ok_or(KeyError::NotHex(pair[1].0))?;
        key[i] = (hi * 16 + lo) as u8;
    }
    Ok(key)
}

/// The bytes RSS hashes, in network order: source address, destination
/// address, and for the 4-tuple source port, destination port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssInput {
    bytes: [u8; MAX_INPUT],
    len: u8,
}

impl RssInput {
    /// The IP pair. Panics if the families differ (a programming error).
    pub fn pair(src: IpAddr, dst: IpAddr) -> Self {
        let mut bytes = [0u8; MAX_INPUT];
        let len = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                bytes[..4].copy_from_slice(&s.octets());
                bytes[4..8].copy_from_slice(&d.octets());
                8
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                bytes[..16].copy_from_slice(&s.octets());
                bytes[16..32].copy_from_slice(&d.octets());
                32
            }
            _ => panic!("RSS input mixes IPv4 and IPv6"),
        };
        RssInput { bytes, len }
    }

    /// The IP pair and the ports.
    pub fn four_tuple(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Self {
        let mut i = Self::pair(src, dst);
        let at = usize::from(i.len);
        i.bytes[at..at + 2].copy_from_slice(&sport.to_be_bytes());
        i.bytes[at + 2..at + 4].copy_from_slice(&dport.to_be_bytes());
        i.len += 4;
        i
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The specification, bit by bit: the plain reference.
pub fn hash_reference(key: &[u8; KEY_LEN], input: &[u8]) -> u32 {
    assert!(input.len() <= MAX_INPUT, "RSS input longer than {MAX_INPUT} bytes");
    let mut result = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    let mut next_bit = 32; // index of the key bit that enters the window next
    for &byte in input {
        for b in (0..8).rev() {
            if byte >> b & 1 != 0 {
                result ^= window;
            }
            let incoming = key.get(next_bit / 8).map_or(0, |k| k >> (7 - next_bit % 8) & 1);
            window = (window << 1) | u32::from(incoming);
            next_bit += 1;
        }
    }
    result
}

/// A key with its per-byte contribution tables (36 × 256 × 4 bytes = 36 KiB).
#[derive(Clone)]
pub struct Toeplitz {
    tables: Box<[[u32; 256]; MAX_INPUT]>,
    key: [u8; KEY_LEN],
}

impl Toeplitz {
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        // The 32-bit window of the key starting at bit `off`.
        let window = |off: usize| -> u32 {
            let mut w = 0u64;
            for i in 0..5 {
                w = (w << 8) | u64::from(key.get(off / 8 + i).copied().unwrap_or(0));
            }
            (w >> (8 - off % 8)) as u32
        };
        let mut tables = Box::new([[0u32; 256]; MAX_INPUT]);
        for (pos, table) in tables.iter_mut().enumerate() {
            for (value, slot) in table.iter_mut().enumerate() {
                *slot = (0..8).filter(|b| value >> (7 - b) & 1 != 0).fold(0, |acc, b| acc ^ window(pos * 8 + b));
            }
        }
        Toeplitz { tables, key: *key }
    }

    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// Hash up to [`MAX_INPUT`] bytes.
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input.iter().zip(self.tables.iter()).fold(0, |acc, (&b, t)| acc ^ t[usize::from(b)])
    }

    #[inline]
    pub fn hash_input(&self, input: &RssInput) -> u32 {
        self.hash(input.as_bytes())
    }
}

impl std::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Toeplitz({:02x?})", &self.key[..4])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Microsoft verification suite: (destination, source, IP-only hash,
    /// 4-tuple hash), destination listed first as in the published table.
    pub(crate) const VECTORS: [(&str, &str, u32, u32); 8] = [
        ("161.142.100.80:1766", "66.9.149.187:2794", 0x323e8fc2, 0x51ccc178),
        ("65.69.140.83:4739", "199.92.111.2:14230", 0xd718262a, 0xc626b0ea),
        ("12.22.207.184:38024", "24.19.198.95:12898", 0xd2d0a5de, 0x5c2b394a),
        ("209.142.163.6:2217", "38.27.205.30:48228", 0x82989176, 0xafc7327f),
        ("202.188.127.2:1303", "153.39.163.191:44251", 0x5d1809c5, 0x10e828a2),
        ("[3ffe:2501:200:3::1]:1766", "[3ffe:2501:200:1fff::7]:2794", 0x2cc18cd5, 0x40207d3d),
        ("[ff02::1]:4739", "[3ffe:501:8::260:97ff:fe40:efab]:14230", 0x0f0c461c, 0xdde51bbf),
        ("[fe80::200:f8ff:fe21:67cf]:38024", "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251", 0x4b61e985, 0x02d1feef),
    ];

    #[test]
    fn microsoft_verification_suite() {
        let t = Toeplitz::new(&MICROSOFT_KEY);
        for (dst, src, ip_only, with_ports) in VECTORS {
            let (d, s): (std::net::SocketAddr, std::net::SocketAddr) = (dst.parse().unwrap(), src.parse().unwrap());
            let pair = RssInput::pair(s.ip(), d.ip());
            let four = RssInput::four_tuple(s.ip(), d.ip(), s.port(), d.port());
            assert_eq!(hash_reference(&MICROSOFT_KEY, pair.as_bytes()), ip_only, "{src} -> {dst} reference");
            assert_eq!(t.hash_input(&pair), ip_only, "{src} -> {dst}");
            assert_eq!(hash_reference(&MICROSOFT_KEY, four.as_bytes()), with_ports, "{src} -> {dst} reference, ports");
            assert_eq!(t.hash_input(&four), with_ports, "{src} -> {dst} ports");
        }
    }

    #[test]
    fn key_parsing() {
        let hex = "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(parse_key(hex).unwrap(), MICROSOFT_KEY);
        assert_eq!(parse_key("6d:5a").unwrap_err(), KeyError::Length(4));
        assert!(matches!(parse_key(&hex.replace('6', "g")), Err(KeyError::NotHex(0))));
    }

    proptest! {
        #[test]
        fn fast_equals_reference(key in proptest::collection::vec(any::<u8>(), KEY_LEN), input in proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT)) {
            let key: [u8; KEY_LEN] = key.try_into().unwrap();
            prop_assert_eq!(Toeplitz::new(&key).hash(&input), hash_reference(&key, &input));
        }

        #[test]
        fn symmetric_key_hashes_both_directions_alike(s in any::<[u8; 16]>(), d in any::<[u8; 16]>(), sp in any::<u16>(), dp in any::<u16>(), v6 in any::<bool>()) {
            let t = Toeplitz::new(&SYMMETRIC_KEY);
            let (src, dst) = if v6 {
                (IpAddr::from(s), IpAddr::from(d))
            } else {
                (IpAddr::from([s[0], s[1], s[2], s[3]]), IpAddr::from([d[0], d[1], d[2], d[3]]))
            };
            prop_assert_eq!(t.hash_input(&RssInput::pair(src, dst)), t.hash_input(&RssInput::pair(dst, src)));
            prop_assert_eq!(t.hash_input(&RssInput::four_tuple(src, dst, sp, dp)), t.hash_input(&RssInput::four_tuple(dst, src, dp, sp)));
        }
    }
}
