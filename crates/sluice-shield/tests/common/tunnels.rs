//! Tunnels around an IP packet, as `sluice_wire::decode` walks them: IP in
//! IP (4in4, 6in4, 4in6, 6in6), GRE (IP or Ethernet inside, with or
//! without checksum, key and sequence), VXLAN, Geneve (IP or Ethernet,
//! options) and GTP-U (short or long header, extension headers), built with
//! sluice-wire's own emitters. Well formed: damage is the caller's (a byte
//! changed, the frame cut).

use sluice_wire::{ethertype, geneve, gre, gtpu, ip_proto, vxlan};

/// A tunnel kind; `ALL` is every one the engine walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Protocol 4 (4in4, 4in6) or 41 (6in4, 6in6), by the inner family.
    IpInIp,
    Gre,
    /// GRE carrying Ethernet (transparent Ethernet bridging).
    GreTeb,
    Vxlan,
    Geneve,
    /// Geneve carrying Ethernet.
    GeneveTeb,
    GtpU,
}

pub const ALL: [Kind; 7] =
    [Kind::IpInIp, Kind::Gre, Kind::GreTeb, Kind::Vxlan, Kind::Geneve, Kind::GeneveTeb, Kind::GtpU];

fn be16(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}

/// An IPv4 (20 bytes) or IPv6 (40) header from `src` to `dst` around
/// `payload`, lengths right.
pub fn ip(v6: bool, src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = if v6 {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&be16(payload.len() as u16));
        h[6] = proto;
        h[7] = 64;
        h[8..24].copy_from_slice(&src);
        h[24..40].copy_from_slice(&dst);
        h
    } else {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&be16((20 + payload.len()) as u16));
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&src[12..]);
        h[16..20].copy_from_slice(&dst[12..]);
        h
    };
    h.extend_from_slice(payload);
    h
}

/// An IPv4 address as the 16 bytes [`ip`] takes (the last four).
pub fn v4(a: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[12..].copy_from_slice(&a.to_be_bytes());
    b
}

/// A UDP header to `dport` around `payload` (checksum 0: not checked).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&be16(sport));
    u.extend_from_slice(&be16(dport));
    u.extend_from_slice(&be16((8 + payload.len()) as u16));
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// An Ethernet header (and `tags` VLAN tags) before a packet of `ty`.
pub fn ethernet(ty: u16, tags: usize, packet: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    for i in 0..tags {
        f.extend_from_slice(&be16(if i == 0 { ethertype::VLAN } else { ethertype::QINQ }));
        f.extend_from_slice(&be16(100 + i as u16));
    }
    f.extend_from_slice(&be16(ty));
    f.extend_from_slice(packet);
    f
}

/// A tunnel header of `len` bytes as its `emit` writes it, then what it
/// carries: `inner` itself, or (`teb`: transparent Ethernet bridging)
/// `inner` in an Ethernet frame of EtherType `ty` with `tags` VLAN tags.
fn header(len: usize, emit: impl FnOnce(&mut [u8]), teb: bool, ty: u16, tags: usize, inner: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; len];
    emit(&mut h);
    if teb {
        h.extend(ethernet(ty, tags, inner));
    } else {
        h.extend_from_slice(inner);
    }
    h
}

/// `inner` (an IP packet of EtherType `ty`, or anything else) in a tunnel
/// of `kind` under an outer IP header (`outer_v6`) from `src` to `dst`:
/// the outer packet. `variant`'s bits pick the header's options (GRE
/// checksum, key, sequence; inner VLAN tags; Geneve options; GTP-U's long
/// header and extension headers).
pub fn wrap(kind: Kind, ty: u16, inner: &[u8], outer_v6: bool, src: [u8; 16], dst: [u8; 16], variant: u64) -> Vec<u8> {
    let bit = |n: u32| variant >> n & 1 == 1;
    // Up to five inner VLAN tags: a fifth is damage.
    let tags = (variant >> 8 & 7) as usize % 6;
    match kind {
        Kind::IpInIp => {
            let proto = if ty == ethertype::IPV6 { ip_proto::IPV6 } else { ip_proto::IPIP };
            ip(outer_v6, src, dst, proto, inner)
        }
        Kind::Gre | Kind::GreTeb => {
            let teb = kind == Kind::GreTeb;
            let r = gre::Repr {
                protocol: if teb { ethertype::TEB } else { ty },
                checksum: bit(0),
                key: bit(1).then_some(0x1234_5678),
                seq: bit(2).then_some(7),
            };
            let g = header(r.buffer_len(), |b| r.emit(b), teb, ty, tags, inner);
            ip(outer_v6, src, dst, ip_proto::GRE, &g)
        }
        Kind::Vxlan => {
            let v = header(vxlan::HEADER_LEN, |b| vxlan::Repr { vni: 42 }.emit(b), true, ty, tags, inner);
            ip(outer_v6, src, dst, ip_proto::UDP, &udp(49152, vxlan::PORT, &v))
        }
        Kind::Geneve | Kind::GeneveTeb => {
            let teb = kind == Kind::GeneveTeb;
            let r = geneve::Repr {
                options_len: 4 * (variant >> 3 & 3) as usize,
                protocol: if teb { ethertype::TEB } else { ty },
                vni: 42,
            };
            let g = header(r.buffer_len(), |b| r.emit(b), teb, ty, tags, inner);
            ip(outer_v6, src, dst, ip_proto::UDP, &udp(49153, geneve::PORT, &g))
        }
        Kind::GtpU => {
            let long = bit(5);
            let r = gtpu::Repr { msg_type: gtpu::MSG_G_PDU, length: 0, teid: 9, seq: long.then_some(3) };
            // Its extension headers go between the header and `inner`.
            let mut g = header(r.buffer_len(), |b| r.emit(b), false, ty, tags, &[]);
            if long && bit(6) {
                // The E flag and one or two extension headers (PDU session
                // container: 1 word, then the next type; the last says 0).
                g[0] |= 0x04;
                g[11] = 0x85;
                let n = 1 + usize::from(bit(7));
                for i in 0..n {
                    g.extend_from_slice(&[1, 0, 0, if i + 1 < n { 0x85 } else { 0 }]);
                }
            }
            let length = (g.len() - gtpu::MIN_HEADER_LEN + inner.len()) as u16;
            g[2..4].copy_from_slice(&be16(length));
            g.extend_from_slice(inner);
            ip(outer_v6, src, dst, ip_proto::UDP, &udp(2152, gtpu::PORT, &g))
        }
    }
}
