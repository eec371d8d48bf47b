//! Just enough rtnetlink to ask which XDP program an interface carries
//! (`RTM_GETLINK`, attribute `IFLA_XDP`), for error messages and tests.
//! Attaching goes through BPF links (see [`crate::bpf`]), not netlink.

use std::io;

use crate::sys;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const NLM_F_ACK: u16 = 4;
const NLA_F_NESTED: u16 = 0x8000;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What `IFLA_XDP` says about an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpAttached {
    /// The program's id (as `bpftool prog show id N` takes it).
    pub prog_id: u32,
    /// "driver", "skb", "hw" or "multiple".
    pub mode: &'static str,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks the attributes in `b`: (type without flag bits, payload).
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u16_at(b, at)? as usize;
        let ty = u16_at(b, at + 2)? & NLA_TYPE_MASK;
        if len < 4 || at + len > b.len() {
            return None;
        }
        let payload = &b[at + 4..at + len];
        at += align4(len);
        Some((ty, payload))
    })
}

/// The XDP program attached to interface `ifindex` (in this thread's
/// network namespace), or `None`.
pub fn xdp_query(ifindex: u32) -> io::Result<Option<XdpAttached>> {
    let sock = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
    // nlmsghdr (16) + ifinfomsg (16)
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    sys::send(&sock, &req)?;
    let mut buf = vec![0u8; 64 * 1024];
    let n = sys::recv(&sock, &mut buf, 0)?;
    let msg = &buf[..n];
    let len = u32_at(msg, 0).ok_or_else(|| io::Error::other("short netlink reply"))? as usize;
    let ty = u16_at(msg, 4).ok_or_else(|| io::Error::other("short netlink reply"))?;
    let msg = msg.get(..len).ok_or_else(|| io::Error::other("truncated netlink reply"))?;
    if ty == NLMSG_ERROR {
        let errno = u32_at(msg, 16).map(|e| -(e as i32)).unwrap_or(libc::EIO);
        return Err(io::Error::from_raw_os_error(errno));
    }
    if ty != RTM_NEWLINK {
        return Err(io::Error::other(format!("unexpected netlink reply type {ty}")));
    }
    let Some(link_attrs) = msg.get(32..) else { return Ok(None) };
    for (ty, payload) in attrs(link_attrs) {
        if ty != IFLA_XDP {
            continue;
        }
        let mut attached = 0u8;
        let mut prog_id = 0u32;
        for (ty, p) in attrs(payload) {
            match ty {
                IFLA_XDP_ATTACHED => attached = p.first().copied().unwrap_or(0),
                IFLA_XDP_PROG_ID => prog_id = u32_at(p, 0).unwrap_or(0),
                _ => {}
            }
        }
        let mode = match attached {
            0 => return Ok(None),
            1 => "driver",
            2 => "skb",
            3 => "hw",
            _ => "multiple",
        };
        return Ok(Some(XdpAttached { prog_id, mode }));
    }
    Ok(None)
}

/// Detaches the XDP program attached to `ifindex` through netlink in
/// `mode` ("driver" or "skb", as [`xdp_query`] says): what `--force`
/// does to another tool's program. A program held by a BPF link cannot be
/// detached this way (EBUSY): its owner must let go.
pub fn xdp_detach(ifindex: u32, mode: &str) -> io::Result<()> {
    let flags: u32 = match mode {
        "driver" => crate::bpf::XDP_FLAGS_DRV_MODE,
        "skb" => crate::bpf::XDP_FLAGS_SKB_MODE,
        _ => 0,
    };
    let sock = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
    // nlmsghdr (16) + ifinfomsg (16) + IFLA_XDP (4) { FD (8), FLAGS (8) }
    let len = 16 + 16 + 4 + 8 + 8;
    let mut req = vec![0u8; len];
    req[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_SETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    req[32..34].copy_from_slice(&20u16.to_ne_bytes());
    req[34..36].copy_from_slice(&(IFLA_XDP | NLA_F_NESTED).to_ne_bytes());
    req[36..38].copy_from_slice(&8u16.to_ne_bytes());
    req[38..40].copy_from_slice(&IFLA_XDP_FD.to_ne_bytes());
    req[40..44].copy_from_slice(&(-1i32).to_ne_bytes());
    req[44..46].copy_from_slice(&8u16.to_ne_bytes());
    req[46..48].copy_from_slice(&IFLA_XDP_FLAGS.to_ne_bytes());
    req[48..52].copy_from_slice(&flags.to_ne_bytes());
    sys::send(&sock, &req)?;
    let mut buf = vec![0u8; 4096];
    let n = sys::recv(&sock, &mut buf, 0)?;
    let msg = &buf[..n];
    if u16_at(msg, 4) == Some(NLMSG_ERROR) {
        let errno = u32_at(msg, 16).map_or(libc::EIO, |e| -(e as i32));
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_nested_attributes() {
        // IFLA_XDP { ATTACHED = 2 (skb), PROG_ID = 42 } with the NESTED flag set.
        let mut b = Vec::new();
        b.extend_from_slice(&20u16.to_ne_bytes());
        b.extend_from_slice(&(IFLA_XDP | 0x8000).to_ne_bytes());
        b.extend_from_slice(&5u16.to_ne_bytes());
        b.extend_from_slice(&IFLA_XDP_ATTACHED.to_ne_bytes());
        b.extend_from_slice(&[2, 0, 0, 0]);
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&IFLA_XDP_PROG_ID.to_ne_bytes());
        b.extend_from_slice(&42u32.to_ne_bytes());
        let outer: Vec<_> = attrs(&b).collect();
        assert_eq!(outer.len(), 1);
        assert_eq!(outer[0].0, IFLA_XDP);
        let inner: Vec<_> = attrs(outer[0].1).collect();
        assert_eq!(inner, vec![(IFLA_XDP_ATTACHED, &[2u8][..]), (IFLA_XDP_PROG_ID, &42u32.to_ne_bytes()[..])]);
    }
}
