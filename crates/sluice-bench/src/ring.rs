//! A receive ring in memory: packet buffers at a fixed stride, as a NIC
//! driver lays them out, refilled with fresh random addresses each pass.
//!
//! Refilling stands in for the NIC's DMA: every pass over the ring sees new
//! addresses, so table lines cannot stay cached from the pass before, while
//! the buffers themselves are reused (and so cache-aliased by their stride)
//! exactly as a driver reuses them.

use sluice_wire::{ethernet, ethertype, ipv4, ipv6, udp};

/// A small, fast PRNG (wyrand): the bench needs speed, not quality beyond
/// "no pattern a hash table would notice".
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x243f_6a88_85a3_08d3)
    }
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }
}

/// Offsets of the IPv4 addresses in an untagged Ethernet frame.
const SRC_AT: usize = ethernet::HEADER_LEN + 12;
const DST_AT: usize = ethernet::HEADER_LEN + 16;
/// Offsets of the IPv6 addresses.
const SRC6_AT: usize = ethernet::HEADER_LEN + 8;
const DST6_AT: usize = ethernet::HEADER_LEN + 24;
const FRAME_LEN: usize = 60;
const FRAME6_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN;

/// Listed addresses the ring draws from (the table's own keys).
#[derive(Clone, Debug)]
pub enum Listed {
    V4(std::sync::Arc<[u32]>),
    V6(std::sync::Arc<[u128]>),
}

pub struct Ring {
    buf: Vec<u8>,
    slots: usize,
    stride: usize,
    frame_len: usize,
    ipv6: bool,
    rng: Rng,
    /// Listed keys, the next one to use, and the chance (of 2^32) that an
    /// address is one of them.
    listed: Option<(Listed, usize, u32)>,
}

impl Ring {
    /// `slots` buffers `stride` bytes apart, each holding a 60-byte
    /// Ethernet/IPv4/UDP frame, or a 62-byte Ethernet/IPv6/UDP one.
    pub fn new(slots: usize, stride: usize, seed: u64, ipv6: bool) -> Self {
        let frame_len = if ipv6 { FRAME6_LEN } else { FRAME_LEN };
        assert!(stride >= frame_len, "stride must hold a frame");
        // Page-aligned start so that stride, not the allocator, decides aliasing.
        let mut buf = vec![0u8; slots * stride + 4096];
        let skew = buf.as_ptr().align_offset(4096);
        buf.drain(..skew);
        buf.truncate(slots * stride);
        let mut ring = Ring { buf, slots, stride, frame_len, ipv6, rng: Rng::new(seed), listed: None };
        for s in 0..slots {
            let f = ring.frame_mut(s);
            let ty = if ipv6 { ethertype::IPV6 } else { ethertype::IPV4 };
            ethernet::Repr { src: [2, 0, 0, 0, 0, 1], dst: [2, 0, 0, 0, 0, 2], ethertype: ty }
                .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
            if ipv6 {
                ipv6::Repr {
                    src: std::net::Ipv6Addr::LOCALHOST,
                    dst: std::net::Ipv6Addr::LOCALHOST,
                    next_header: 17,
                    payload_len: udp::HEADER_LEN as u16,
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                }
                .emit(&mut f[ethernet::HEADER_LEN..]);
                continue;
            }
            ipv4::Repr {
                src: [10, 0, 0, 1].into(),
                dst: [10, 0, 0, 2].into(),
                protocol: 17,
                payload_len: 26,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                ttl: 64,
            }
            .emit(&mut f[ethernet::HEADER_LEN..]);
        }
        ring.refill();
        ring
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn stride(&self) -> usize {
        self.stride
    }

    fn frame_mut(&mut self, slot: usize) -> &mut [u8] {
        let at = slot * self.stride;
        &mut self.buf[at..at + self.frame_len]
    }

    #[inline(always)]
    pub fn frame(&self, slot: usize) -> &[u8] {
        let at = slot * self.stride;
        &self.buf[at..at + self.frame_len]
    }

    /// Make `share` of the addresses (each source and destination drawn on
    /// its own) listed ones: the table's keys, taken in their (random) order
    /// so reading them streams and the table lines they hit are random.
    pub fn set_listed(&mut self, keys: Listed, share: f64) {
        let empty = match &keys {
            Listed::V4(k) => k.is_empty(),
            Listed::V6(k) => k.is_empty(),
        };
        assert!(!empty, "listed traffic needs listed keys");
        let chance = (share.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u32;
        self.listed = Some((keys, 0, chance));
        self.refill();
    }

    /// A random address, or with the listed chance the next listed key.
    #[inline(always)]
    fn next_addr(&mut self) -> u128 {
        let r = self.rng.next_u64();
        let Some((keys, at, chance)) = &mut self.listed else { unreachable!("only with listed keys") };
        if (r as u32) < *chance {
            let k = match keys {
                Listed::V4(k) => u128::from(k[*at % k.len()]),
                Listed::V6(k) => k[*at % k.len()],
            };
            *at = at.wrapping_add(1);
            return k;
        }
        if self.ipv6 {
            (u128::from(self.rng.next_u64()) << 64) | u128::from(r.rotate_left(32))
        } else {
            u128::from((r >> 32) as u32)
        }
    }

    /// New random source and destination in every buffer (the "DMA").
    pub fn refill(&mut self) {
        if self.listed.is_some() {
            let v6 = self.ipv6;
            for s in 0..self.slots {
                let (src, dst) = (self.next_addr(), self.next_addr());
                let f = self.frame_mut(s);
                if v6 {
                    f[SRC6_AT..SRC6_AT + 16].copy_from_slice(&src.to_be_bytes());
                    f[DST6_AT..DST6_AT + 16].copy_from_slice(&dst.to_be_bytes());
                } else {
                    f[SRC_AT..SRC_AT + 4].copy_from_slice(&(src as u32).to_be_bytes());
                    f[DST_AT..DST_AT + 4].copy_from_slice(&(dst as u32).to_be_bytes());
                }
            }
            return;
        }
        for s in 0..self.slots {
            if self.ipv6 {
                let src = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
                let dst = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
                let f = self.frame_mut(s);
                f[SRC6_AT..SRC6_AT + 16].copy_from_slice(&src.to_be_bytes());
                f[DST6_AT..DST6_AT + 16].copy_from_slice(&dst.to_be_bytes());
            } else {
                let r = self.rng.next_u64();
                let f = self.frame_mut(s);
                f[SRC_AT..SRC_AT + 4].copy_from_slice(&(r as u32).to_be_bytes());
                f[DST_AT..DST_AT + 4].copy_from_slice(&((r >> 32) as u32).to_be_bytes());
            }
        }
    }
}

/// Ethernet II carrying IPv6 → (source, destination). Agrees with `decode`.
#[inline(always)]
pub fn ipv6_pair(frame: &[u8]) -> Option<(u128, u128)> {
    let h = frame.get(..DST6_AT + 16)?;
    if u16::from_be_bytes([h[12], h[13]]) != ethertype::IPV6 || h[14] >> 4 != 6 {
        return None;
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&h[SRC6_AT..SRC6_AT + 16]);
    let src = u128::from_be_bytes(a);
    a.copy_from_slice(&h[DST6_AT..DST6_AT + 16]);
    Some((src, u128::from_be_bytes(a)))
}

/// The seed's decap: Ethernet II carrying IPv4 → (source, destination).
/// `None` for anything else. Agrees with `sluice_wire::decode` (tested).
/// Ethertype, version and header length are one 32-bit load and compare.
#[inline(always)]
pub fn ipv4_pair(frame: &[u8]) -> Option<(u32, u32)> {
    let h: &[u8; DST_AT + 4] = frame.get(..DST_AT + 4)?.try_into().ok()?;
    let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    // Bytes 12-15: ethertype, version/IHL, DSCP/ECN.
    let head = be32(12);
    let ihl = (head >> 8) & 0x0f;
    if head >> 12 != (u32::from(ethertype::IPV4) << 4 | 4) || ihl < 5 {
        return None;
    }
    let header = ihl as usize * 4;
    let total = u16::from_be_bytes([h[16], h[17]]);
    if header > usize::from(total) || frame.len() < ethernet::HEADER_LEN + header {
        return None;
    }
    Some((be32(SRC_AT), be32(DST_AT)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_wire::{decode, LinkType};
    use std::net::IpAddr;

    #[test]
    fn ring_frames_decode_and_change_on_refill() {
        let mut ring = Ring::new(64, 1920, 1, false);
        assert_eq!(ring.frame(5).as_ptr() as usize - ring.frame(4).as_ptr() as usize, 1920);
        let before = ipv4_pair(ring.frame(3)).unwrap();
        let ip = decode(LinkType::ETHERNET, ring.frame(3)).unwrap().ip.unwrap();
        assert_eq!(ip.src, IpAddr::from(before.0.to_be_bytes()));
        ring.refill();
        assert_ne!(ipv4_pair(ring.frame(3)).unwrap(), before);
        let ring6 = Ring::new(8, 2048, 1, true);
        let (s6, d6) = ipv6_pair(ring6.frame(2)).unwrap();
        let ip = decode(LinkType::ETHERNET, ring6.frame(2)).unwrap().ip.unwrap();
        assert_eq!((ip.src, ip.dst), (IpAddr::from(s6.to_be_bytes()), IpAddr::from(d6.to_be_bytes())));
    }

    proptest! {
        #[test]
        fn decap_agrees_with_decode(bytes in proptest::collection::vec(any::<u8>(), 0..80), ty in prop_oneof![Just(true), Just(false)]) {
            let mut f = bytes;
            if ty && f.len() > 15 { f[12] = 8; f[13] = 0; f[14] = 0x45; }
            if let Some((s, d)) = ipv4_pair(&f) {
                let ip = decode(LinkType::ETHERNET, &f).unwrap().ip.unwrap();
                prop_assert_eq!(ip.src, IpAddr::from(s.to_be_bytes()));
                prop_assert_eq!(ip.dst, IpAddr::from(d.to_be_bytes()));
            }
            let mut f6 = f.clone();
            if f6.len() > 15 { f6[12] = 0x86; f6[13] = 0xdd; f6[14] = 0x60; }
            if let Some((s, d)) = ipv6_pair(&f6) {
                let ip = decode(LinkType::ETHERNET, &f6).unwrap().ip.unwrap();
                prop_assert_eq!(ip.src, IpAddr::from(s.to_be_bytes()));
                prop_assert_eq!(ip.dst, IpAddr::from(d.to_be_bytes()));
            }
        }
    }
}
