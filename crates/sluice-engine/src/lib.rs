//! The classification engine: decode a frame, decide pass or drop, count.
//!
//! It does no file or socket I/O and parses no arguments; sources and sinks
//! live in the CLI. Every frame handed to [`Engine::judge`] gets exactly one
//! verdict, and every verdict is counted under exactly one heading.
#![deny(unsafe_code)]

use sluice_rules::AddressSet;
use sluice_wire::{decode, ErrorKind, IpSummary, LinkType};

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Pass,
    Drop,
}

/// Address rules: drop when the source is in `drop_src`, the destination in
/// `drop_dst`, or either in `drop_any`.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    pub drop_src: AddressSet,
    pub drop_dst: AddressSet,
    pub drop_any: AddressSet,
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    Source,
    Destination,
    Undecodable(ErrorKind),
}

impl RuleSet {
    pub fn is_empty(&self) -> bool {
        self.drop_src.is_empty() && self.drop_dst.is_empty() && self.drop_any.is_empty()
    }

    /// The rule that drops this packet, if any.
    pub fn match_ip(&self, ip: &IpSummary) -> Option<DropReason> {
        if self.drop_src.contains(ip.src) || self.drop_any.contains(ip.src) {
            Some(DropReason::Source)
        } else if self.drop_dst.contains(ip.dst) || self.drop_any.contains(ip.dst) {
            Some(DropReason::Destination)
        } else {
            None
        }
    }
}

/// Counters of everything the engine has judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets: u64,
    /// Bytes on the wire (original lengths).
    pub bytes: u64,
    pub passed: u64,
    pub passed_bytes: u64,
    pub dropped: u64,
    pub dropped_bytes: u64,
    pub dropped_by_src: u64,
    pub dropped_by_dst: u64,
    /// ARP and other non-IP frames (passed).
    pub non_ip: u64,
    /// Frames that could not be decoded, by reason (given the default verdict).
    pub undecodable: [u64; ErrorKind::COUNT],
    /// IP packets with damage past the addresses (still classified), by reason.
    pub anomalies: [u64; ErrorKind::COUNT],
}

impl Stats {
    pub fn undecodable_total(&self) -> u64 {
        self.undecodable.iter().sum()
    }

    /// Non-zero counts of a per-reason array, with their names.
    pub fn by_reason(counts: &[u64; ErrorKind::COUNT]) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ErrorKind::ALL.iter().zip(counts).filter(|(_, n)| **n > 0).map(|(k, n)| (k.as_str(), *n))
    }

    /// Add another worker's or run's counters.
    pub fn merge(&mut self, o: &Stats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.passed += o.passed;
        self.passed_bytes += o.passed_bytes;
        self.dropped += o.dropped;
        self.dropped_bytes += o.dropped_bytes;
        self.dropped_by_src += o.dropped_by_src;
        self.dropped_by_dst += o.dropped_by_dst;
        self.non_ip += o.non_ip;
        for i in 0..ErrorKind::COUNT {
            self.undecodable[i] += o.undecodable[i];
            self.anomalies[i] += o.anomalies[i];
        }
    }
}

/// Rules plus the verdict for frames that cannot be decoded.
pub struct Engine {
    rules: RuleSet,
    undecodable: Verdict,
    stats: Stats,
}

impl Engine {
    pub fn new(rules: RuleSet, undecodable: Verdict) -> Self {
        Engine { rules, undecodable, stats: Stats::default() }
    }

    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Decode one frame and decide; `wire_len` is its original length.
    pub fn judge(&mut self, link: LinkType, frame: &[u8], wire_len: u32) -> Verdict {
        let s = &mut self.stats;
        s.packets += 1;
        s.bytes += u64::from(wire_len);
        let reason = match decode(link, frame) {
            Ok(summary) => match summary.ip {
                Some(ip) => {
                    if let Some(a) = ip.anomaly {
                        s.anomalies[a.kind().index()] += 1;
                    }
                    self.rules.match_ip(&ip)
                }
                None => {
                    s.non_ip += 1;
                    None
                }
            },
            Err(e) => {
                s.undecodable[e.kind().index()] += 1;
                (self.undecodable == Verdict::Drop).then_some(DropReason::Undecodable(e.kind()))
            }
        };
        match reason {
            None => {
                s.passed += 1;
                s.passed_bytes += u64::from(wire_len);
                Verdict::Pass
            }
            Some(r) => {
                s.dropped += 1;
                s.dropped_bytes += u64::from(wire_len);
                match r {
                    DropReason::Source => s.dropped_by_src += 1,
                    DropReason::Destination => s.dropped_by_dst += 1,
                    DropReason::Undecodable(_) => {}
                }
                Verdict::Drop
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_rules::Prefix;

    fn set(items: &[&str]) -> AddressSet {
        let ps: Vec<Prefix> = items.iter().map(|s| s.parse().unwrap()).collect();
        AddressSet::from_prefixes(&ps)
    }

    fn raw_v4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut v = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0];
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v
    }

    #[test]
    fn src_dst_any_and_undecodable() {
        let rules = RuleSet {
            drop_src: set(&["10.0.0.0/8"]),
            drop_dst: set(&["192.0.2.1"]),
            drop_any: set(&["198.51.100.0/24"]),
        };
        let mut e = Engine::new(rules, Verdict::Pass);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([10, 1, 1, 1], [1, 1, 1, 1]), 20), Verdict::Drop);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([1, 1, 1, 1], [10, 1, 1, 1]), 20), Verdict::Pass);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([1, 1, 1, 1], [192, 0, 2, 1]), 20), Verdict::Drop);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([192, 0, 2, 1], [1, 1, 1, 1]), 20), Verdict::Pass);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([1, 1, 1, 1], [198, 51, 100, 7]), 20), Verdict::Drop);
        assert_eq!(e.judge(LinkType::RAW, &raw_v4([198, 51, 100, 7], [1, 1, 1, 1]), 20), Verdict::Drop);
        assert_eq!(e.judge(LinkType::RAW, &[0x45, 0], 2), Verdict::Pass);
        let s = e.stats();
        assert_eq!((s.packets, s.dropped, s.passed, s.dropped_by_src, s.dropped_by_dst), (7, 4, 3, 2, 2));
        assert_eq!(s.undecodable[ErrorKind::TruncatedIpv4.index()], 1);
        let mut strict = Engine::new(RuleSet::default(), Verdict::Drop);
        assert_eq!(strict.judge(LinkType::RAW, &[0x45, 0], 2), Verdict::Drop);
    }

    proptest! {
        #[test]
        fn every_frame_counted_once(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..50)) {
            let mut e = Engine::new(RuleSet { drop_any: set(&["0.0.0.0/1"]), ..RuleSet::default() }, Verdict::Drop);
            for f in &frames {
                e.judge(LinkType::RAW, f, f.len() as u32);
            }
            let s = e.stats();
            prop_assert_eq!(s.packets, frames.len() as u64);
            prop_assert_eq!(s.passed + s.dropped, s.packets);
            prop_assert_eq!(s.dropped, s.dropped_by_src + s.dropped_by_dst + s.undecodable_total());
        }
    }
}
