//! A decoded packet as one line of text or JSON: what `sluice decode`
//! prints (like `tshark -T fields`), written straight into a reused
//! `String` so a multi-gigabyte capture costs no allocation per packet.

use crate::{DecodeError, IpSummary, PacketSummary};

/// The text line's columns, in order: index, src, dst, proto, sport,
/// dport, vlan ids, fragment offset, more-fragments flag, anomaly,
/// encapsulations (comma-separated, outermost first), then the innermost
/// header behind a tunnel: inner src, inner dst, inner proto, inner sport,
/// inner dport. Empty when absent, like `tshark -T fields`; trailing empty
/// columns are left off. Behind MPLS or PPPoE the IP header is in src/dst
/// (the encap column says what it sat on).
pub const TEXT_COLUMNS: [&str; 16] = [
    "index",
    "src",
    "dst",
    "proto",
    "sport",
    "dport",
    "vlan",
    "frag_offset",
    "more_fragments",
    "anomaly",
    "encap",
    "inner_src",
    "inner_dst",
    "inner_proto",
    "inner_sport",
    "inner_dport",
];

/// One line of `sluice decode`'s text output (see [`TEXT_COLUMNS`]) for
/// the packet at `index`, appended to `out`.
pub fn text_line(out: &mut String, index: u64, result: &Result<PacketSummary, DecodeError>) {
    use std::fmt::Write as _;
    let _ = write!(out, "{index}\t");
    match result {
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
        }
        Ok(s) => {
            match &s.ip {
                None => {
                    let _ = write!(out, "\t\tethertype 0x{:04x}\t\t\t", s.ethertype);
                }
                Some(ip) => {
                    let _ = write!(out, "{}\t{}\t{}\t", ip.src, ip.dst, ip.protocol);
                    if let Some((sp, dp)) = ip.ports {
                        let _ = write!(out, "{sp}\t{dp}\t");
                    } else {
                        out.push_str("\t\t");
                    }
                }
            }
            push_vlans(out, s);
            out.push('\t');
            if let Some(f) = s.ip.and_then(|ip| ip.fragment) {
                let _ = write!(out, "{}\t{}", f.offset, u8::from(f.more));
            } else {
                out.push('\t');
            }
            let anomaly = s.ip.and_then(|ip| ip.anomaly);
            if anomaly.is_some() || !s.encap.is_empty() {
                out.push('\t');
            }
            if let Some(a) = anomaly {
                let _ = write!(out, "{a}");
            }
            if !s.encap.is_empty() {
                out.push('\t');
                push_encap(out, s, false);
            }
            if let Some(i) = &s.inner {
                let _ = write!(out, "\t{}\t{}\t{}", i.src, i.dst, i.protocol);
                if let Some((sp, dp)) = i.ports {
                    let _ = write!(out, "\t{sp}\t{dp}");
                }
            }
            out.push('\n');
        }
    }
}

fn push_vlans(out: &mut String, s: &PacketSummary) {
    use std::fmt::Write as _;
    for (i, id) in s.vlans.as_slice().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{id}");
    }
}

/// Encapsulation names, comma-separated; quoted for JSON.
fn push_encap(out: &mut String, s: &PacketSummary, quoted: bool) {
    for (i, e) in s.encap.as_slice().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if quoted {
            out.push('"');
        }
        out.push_str(e.as_str());
        if quoted {
            out.push('"');
        }
    }
}

fn push_inner_json(out: &mut String, i: &IpSummary) {
    use std::fmt::Write as _;
    let _ = write!(out, ",\"inner_src\":\"{}\",\"inner_dst\":\"{}\",\"inner_proto\":{}", i.src, i.dst, i.protocol);
    if let Some((sp, dp)) = i.ports {
        let _ = write!(out, ",\"inner_sport\":{sp},\"inner_dport\":{dp}");
    }
}

/// Keys: index, src, dst, proto, sport/dport (when present), vlan (list,
/// outermost first), frag_offset/more_fragments (fragments only), anomaly
/// (when present); `ethertype` for non-IP; `error` when undecodable.
/// `encap` (list of names, outermost first, possibly empty) on every
/// decoded packet; behind a tunnel, the innermost header's inner_src,
/// inner_dst, inner_proto and inner_sport/inner_dport (when present).
/// Every value is a number, an address, a fixed identifier or a list of
/// numbers, so no string escaping is needed.
pub fn json_line(out: &mut String, index: u64, result: &Result<PacketSummary, DecodeError>) {
    use std::fmt::Write as _;
    let _ = write!(out, "{{\"index\":{index}");
    match result {
        Err(e) => {
            let _ = write!(out, ",\"error\":\"{}\"", e.reason());
        }
        Ok(s) => {
            match &s.ip {
                None => {
                    let _ = write!(out, ",\"ethertype\":{}", s.ethertype);
                }
                Some(ip) => {
                    let _ = write!(out, ",\"src\":\"{}\",\"dst\":\"{}\",\"proto\":{}", ip.src, ip.dst, ip.protocol);
                    if let Some((sp, dp)) = ip.ports {
                        let _ = write!(out, ",\"sport\":{sp},\"dport\":{dp}");
                    }
                }
            }
            out.push_str(",\"vlan\":[");
            push_vlans(out, s);
            out.push(']');
            out.push_str(",\"encap\":[");
            push_encap(out, s, true);
            out.push(']');
            if let Some(i) = &s.inner {
                push_inner_json(out, i);
            }
            if let Some(ip) = &s.ip {
                if let Some(f) = ip.fragment {
                    let _ = write!(out, ",\"frag_offset\":{},\"more_fragments\":{}", f.offset, f.more);
                }
                if let Some(a) = ip.anomaly {
                    let _ = write!(out, ",\"anomaly\":\"{}\"", a.reason());
                }
            }
        }
    }
    out.push_str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode;

    #[test]
    fn json_lines_parse_and_have_the_documented_keys() {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        frame.extend_from_slice(&[0x45, 0, 0, 28, 0, 1, 0x20, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        frame.extend_from_slice(&[0, 53, 4, 0, 0, 8, 0, 0]);
        let mut line = String::new();
        json_line(&mut line, 3, &decode(crate::LinkType::ETHERNET, &frame));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["index"], 3);
        assert_eq!(v["src"], "1.2.3.4");
        assert_eq!(v["dst"], "5.6.7.8");
        assert_eq!(v["proto"], 17);
        assert_eq!(v["sport"], 53);
        assert_eq!(v["dport"], 1024);
        assert_eq!(v["vlan"], serde_json::json!([5]));
        assert_eq!(v["frag_offset"], 0);
        assert_eq!(v["more_fragments"], true);
        assert_eq!(v["encap"], serde_json::json!([]));
        assert!(v.get("inner_src").is_none());
        line.clear();
        json_line(&mut line, 4, &decode(crate::LinkType::ETHERNET, &frame[..20]));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"], "truncated_ipv4");
    }

    /// IPv6 in IPv4 carrying UDP, and the same behind an MPLS label.
    fn six_in_four() -> Vec<u8> {
        let mut inner = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        inner.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        inner.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        inner.extend_from_slice(&[0x1f, 0x90, 0, 53, 0, 8, 0, 0]);
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + inner.len()) as u16;
        let mut ip = [0x45, 0, 0, 0, 0, 1, 0, 0, 64, 41, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        crate::ipv4::Packet::new_unchecked(&mut ip[..]).fill_checksum();
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&inner);
        frame
    }

    #[test]
    fn tunnels_show_the_inner_header() {
        let frame = six_in_four();
        let mut line = String::new();
        json_line(&mut line, 0, &decode(crate::LinkType::ETHERNET, &frame));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((v["src"].as_str(), v["proto"].as_u64()), (Some("192.0.2.1"), Some(41)));
        assert_eq!(v["encap"], serde_json::json!(["6in4"]));
        assert_eq!((v["inner_src"].as_str(), v["inner_dst"].as_str()), (Some("2001:db8::1"), Some("2001:db8::2")));
        assert_eq!(
            (v["inner_proto"].as_u64(), v["inner_sport"].as_u64(), v["inner_dport"].as_u64()),
            (Some(17), Some(8080), Some(53))
        );
        line.clear();
        text_line(&mut line, 0, &decode(crate::LinkType::ETHERNET, &frame));
        assert_eq!(line, "0\t192.0.2.1\t192.0.2.2\t41\t\t\t\t\t\t\t6in4\t2001:db8::1\t2001:db8::2\t17\t8080\t53\n");
        assert_eq!(line.trim_end().split('\t').count(), TEXT_COLUMNS.len(), "every column, in the documented order");
        // Cut inside the inner header: the outer anomaly, no inner columns.
        line.clear();
        text_line(&mut line, 0, &decode(crate::LinkType::ETHERNET, &frame[..60]));
        let cols: Vec<&str> = line.trim_end().split('\t').collect();
        assert_eq!(cols.len(), 11, "{line:?}");
        assert_eq!(cols[10], "6in4");
        assert!(cols[9].contains("truncated_ipv6"), "{line:?}");
    }
}
