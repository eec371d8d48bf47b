//! The PROXY protocol header (HAProxy's specification, versions 1 and 2) a
//! load balancer sends first on each connection, naming the client it
//! accepted. The guard reads it only from `--trusted-proxies` and then
//! limits, blocks and publishes the client it names instead of the load
//! balancer.
//!
//! [`parse`] looks at the start of a connection's input and says: more
//! bytes needed, a header of `len` bytes naming a source (or none: a
//! `LOCAL` or `UNKNOWN` connection, the balancer's own health check), or
//! what is wrong. It never panics and reads no byte past the header; the
//! fuzz target `proxy_header` holds it to that.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version 2 signature.
const SIG2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A version 1 header is at most 107 bytes, CRLF included.
const MAX_V1: usize = 107;
/// The longest version 2 header taken: the addresses and TLVs a balancer
/// adds (AWS, GCP, Azure: some tens of bytes; certificates' names more).
pub const MAX_V2: usize = 16 + 1024;

/// What the start of a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Not all of the header yet.
    Incomplete,
    /// A header of `len` bytes; the client it names (`None`: `LOCAL` or
    /// `UNKNOWN`, a connection of the balancer's own).
    Header { len: usize, source: Option<SocketAddr> },
}

/// Why a connection's first bytes are not a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("not a PROXY protocol header")]
    NotProxy,
    #[error("PROXY v1 header: {0}")]
    BadV1(&'static str),
    #[error("PROXY v2 header: {0}")]
    BadV2(&'static str),
}

/// Read a PROXY header (v1 or v2) at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    // Decide the version on the bytes there are: a prefix of a signature is
    // not yet anything else.
    let n = buf.len().min(SIG2.len());
    if buf[..n] == SIG2[..n] {
        return if n < SIG2.len() { Ok(Parsed::Incomplete) } else { parse_v2(buf) };
    }
    let n = buf.len().min(6);
    if buf[..n] == b"PROXY "[..n] {
        return if n < 6 { Ok(Parsed::Incomplete) } else { parse_v1(buf) };
    }
    Err(ProxyError::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let bad = ProxyError::BadV1;
    let Some(end) = buf.iter().take(MAX_V1).position(|&c| c == b'\n') else {
        return if buf.len() >= MAX_V1 { Err(bad("no CRLF within 107 bytes")) } else { Ok(Parsed::Incomplete) };
    };
    let line = &buf[..end];
    let Some(line) = line.strip_suffix(b"\r") else { return Err(bad("the line does not end in CRLF")) };
    let text = std::str::from_utf8(line).map_err(|_| bad("not ASCII"))?;
    let mut words = text.split(' ');
    let _proxy = words.next();
    let len = end + 1;
    match words.next() {
        // The balancer could not tell: the rest of the line is to be ignored.
        Some("UNKNOWN") => return Ok(Parsed::Header { len, source: None }),
        Some("TCP4" | "TCP6") => {}
        _ => return Err(bad("the protocol is not TCP4, TCP6 or UNKNOWN")),
    }
    let tcp6 = text.as_bytes()[6..].starts_with(b"TCP6");
    let (Some(src), Some(dst), Some(sport), Some(dport), None) =
        (words.next(), words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad("not source, destination and two ports after the protocol"));
    };
    let addr = |s: &str| -> Result<IpAddr, ProxyError> {
        // Std's parsers are strict (no leading zeros in IPv4, no zone ids).
        if tcp6 {
            s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad("an address is not IPv6"))
        } else {
            s.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad("an address is not IPv4"))
        }
    };
    let port = |s: &str| -> Result<u16, ProxyError> {
        let ok =
            !s.is_empty() && s.len() <= 5 && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
        ok.then(|| s.parse::<u16>().ok()).flatten().ok_or(bad("a port is not 0-65535"))
    };
    let (src, _dst, sport, _dport) = (addr(src)?, addr(dst)?, port(sport)?, port(dport)?);
    Ok(Parsed::Header { len, source: Some(SocketAddr::new(src, sport)) })
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let bad = ProxyError::BadV2;
    if buf.len() < 16 {
        return Ok(Parsed::Incomplete);
    }
    let (ver_cmd, fam) = (buf[12], buf[13]);
    if ver_cmd >> 4 != 2 {
        return Err(bad("the version is not 2"));
    }
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > MAX_V2 {
        return Err(bad("longer than 1040 bytes"));
    }
    if buf.len() < len {
        return Ok(Parsed::Incomplete);
    }
    let body = &buf[16..len];
    match ver_cmd & 0xf {
        // LOCAL: the balancer's own connection; the addresses are to be ignored.
        0 => return Ok(Parsed::Header { len, source: None }),
        1 => {}
        _ => return Err(bad("the command is neither LOCAL nor PROXY")),
    }
    let source = match fam {
        // UNSPEC: unknown protocol; as LOCAL.
        0x00 => None,
        // TCP over IPv4, and over IPv6 (UDP is refused: the guard is TCP).
        0x11 => {
            let a = body.get(..12).ok_or(bad("shorter than two IPv4 addresses and ports"))?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([a[8], a[9]])))
        }
        0x21 => {
            let a = body.get(..36).ok_or(bad("shorter than two IPv6 addresses and ports"))?;
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), u16::from_be_bytes([a[32], a[33]])))
        }
        _ => return Err(bad("the family is not TCP over IPv4 or IPv6")),
    };
    Ok(Parsed::Header { len, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut h = SIG2.to_vec();
        h.extend([0x20 | cmd, fam]);
        h.extend((body.len() as u16).to_be_bytes());
        h.extend(body);
        h
    }

    #[test]
    fn version_1() {
        let h = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
        let want = Parsed::Header { len: 45, source: Some("192.0.2.7:56324".parse().unwrap()) };
        assert_eq!(parse(h), Ok(want));
        let h = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
        assert_eq!(parse(h), Ok(Parsed::Header { len: h.len(), source: Some("[2001:db8::1]:1".parse().unwrap()) }));
        assert_eq!(parse(b"PROXY UNKNOWN whatever\r\n"), Ok(Parsed::Header { len: 24, source: None }));
        // Every prefix of a header is incomplete.
        let h = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n";
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete), "{n}");
        }
        for bad in [
            &b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\n"[..],
            b"PROXY TCP4 192.0.2.07 198.51.100.1 1 2\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 65536 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 01 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1 2 3\r\n",
            b"PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",
        ] {
            assert!(matches!(parse(bad), Err(ProxyError::BadV1(_))), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(matches!(parse(&[b'P'; 200][..]), Err(ProxyError::NotProxy)));
        let long = [&b"PROXY UNKNOWN "[..], &[b'x'; 120]].concat();
        assert!(matches!(parse(&long), Err(ProxyError::BadV1(_))));
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ProxyError::NotProxy));
    }

    #[test]
    fn version_2() {
        let mut body = vec![192, 0, 2, 7, 198, 51, 100, 1];
        body.extend(56324u16.to_be_bytes());
        body.extend(443u16.to_be_bytes());
        body.extend([0x03, 0x00, 0x04, 1, 2, 3, 4]); // a TLV (CRC32C), skipped
        let h = v2(1, 0x11, &body);
        let want = Parsed::Header { len: h.len(), source: Some("192.0.2.7:56324".parse().unwrap()) };
        assert_eq!(parse(&[&h[..], b"GET /"].concat()), Ok(want));
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete), "{n}");
        }
        let mut body6 = Ipv6Addr::from(0x2001_0db8u128 << 96 | 1).octets().to_vec();
        body6.extend([0; 16]);
        body6.extend([0, 80, 1, 187]);
        assert_eq!(
            parse(&v2(1, 0x21, &body6)).unwrap(),
            Parsed::Header { len: 52, source: Some("[2001:db8::1]:80".parse().unwrap()) }
        );
        assert_eq!(parse(&v2(0, 0x11, &body)).unwrap(), Parsed::Header { len: h.len(), source: None }, "LOCAL");
        assert_eq!(parse(&v2(1, 0x00, &[])).unwrap(), Parsed::Header { len: 16, source: None }, "UNSPEC");
        assert!(matches!(parse(&v2(1, 0x12, &body)), Err(ProxyError::BadV2(_))), "UDP");
        assert!(matches!(parse(&v2(1, 0x11, &body[..6])), Err(ProxyError::BadV2(_))), "short");
        assert!(matches!(parse(&v2(2, 0x11, &body)), Err(ProxyError::BadV2(_))), "command");
        let mut h3 = v2(1, 0x11, &body);
        h3[12] = 0x31;
        assert!(matches!(parse(&h3), Err(ProxyError::BadV2(_))), "version 3");
        let long = v2(1, 0x11, &vec![0; 2000]);
        assert!(matches!(parse(&long[..16]), Err(ProxyError::BadV2(_))), "refused on its length alone");
    }

    proptest! {
        #[test]
        fn never_panics_and_never_reads_past_its_header(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                                        v2_prefix in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..40)) {
            let input = if v2_prefix { [&SIG2[..], &bytes].concat() } else { [&b"PROXY "[..], &bytes].concat() };
            if let Ok(Parsed::Header { len, source }) = parse(&input) {
                prop_assert!(len <= input.len());
                // The same header with anything after it reads the same.
                let more = [&input[..len], &tail].concat();
                prop_assert_eq!(parse(&more), Ok(Parsed::Header { len, source }));
            }
        }
    }
}
