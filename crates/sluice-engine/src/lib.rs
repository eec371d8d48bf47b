//! The classification engine: decode a frame, decide pass or drop, count.
//!
//! It does no file or socket I/O and parses no arguments; sources and sinks
//! live in the CLI. Every frame handed to [`Engine::judge`] gets exactly one
//! verdict, and every verdict is counted under exactly one heading.
#![deny(unsafe_code)]

pub mod defrag;
pub mod snapshot;

use sluice_classify::{AddressSet, DEFAULT_BATCH, MAX_BATCH};
use sluice_rules::Prefix;
use sluice_wire::{decode, DecodeError, ErrorKind, IpSummary, LinkType, PacketSummary};
use std::net::IpAddr;

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Pass,
    Drop,
}

/// Address rules: drop when the source is in `drop_src`, the destination in
/// `drop_dst`, or either in `drop_any`.
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
    /// Reassembly gave the datagram up (see [`defrag::DropCause`]).
    Fragment,
}

impl RuleSet {
    pub fn new(drop_src: &[Prefix], drop_dst: &[Prefix], drop_any: &[Prefix]) -> Self {
        RuleSet {
            drop_src: AddressSet::new(drop_src),
            drop_dst: AddressSet::new(drop_dst),
            drop_any: AddressSet::new(drop_any),
        }
    }

    pub fn empty() -> Self {
        Self::new(&[], &[], &[])
    }

    pub fn is_empty(&self) -> bool {
        self.drop_src.is_empty() && self.drop_dst.is_empty() && self.drop_any.is_empty()
    }

    /// The rule that drops this packet, if any: one packet, no batching —
    /// the plain reference `match_batch` is tested against.
    pub fn match_ip(&self, ip: &IpSummary) -> Option<DropReason> {
        if self.drop_src.contains(ip.src) || self.drop_any.contains(ip.src) {
            Some(DropReason::Source)
        } else if self.drop_dst.contains(ip.dst) || self.drop_any.contains(ip.dst) {
            Some(DropReason::Destination)
        } else {
            None
        }
    }

    /// `match_ip` for a batch: every set is probed for all its keys at once,
    /// prefetched, before any result is read. `out[i]` is for `ips[i]`.
    pub fn match_batch(&self, ips: &[IpSummary], out: &mut [Option<DropReason>], batch: usize) {
        assert_eq!(ips.len(), out.len(), "one output per packet");
        let mut src = [IpAddr::from([0u8; 4]); MAX_BATCH];
        let mut dst = [IpAddr::from([0u8; 4]); MAX_BATCH];
        let mut by_src = [false; MAX_BATCH];
        let mut by_dst = [false; MAX_BATCH];
        let mut hit = [false; MAX_BATCH];
        for (ic, oc) in ips.chunks(MAX_BATCH).zip(out.chunks_mut(MAX_BATCH)) {
            let n = ic.len();
            for (i, ip) in ic.iter().enumerate() {
                (src[i], dst[i]) = (ip.src, ip.dst);
            }
            by_src[..n].fill(false);
            by_dst[..n].fill(false);
            // (set, keys, whether a hit counts against the destination)
            for (set, keys, to_dst) in [
                (&self.drop_src, &src, false),
                (&self.drop_any, &src, false),
                (&self.drop_dst, &dst, true),
                (&self.drop_any, &dst, true),
            ] {
                if set.is_empty() {
                    continue;
                }
                set.contains_batch(&keys[..n], &mut hit[..n], batch, true);
                let acc = if to_dst { &mut by_dst } else { &mut by_src };
                for (a, h) in acc[..n].iter_mut().zip(&hit[..n]) {
                    *a |= *h;
                }
            }
            for i in 0..n {
                oc[i] = if by_src[i] {
                    Some(DropReason::Source)
                } else if by_dst[i] {
                    Some(DropReason::Destination)
                } else {
                    None
                };
            }
        }
    }
}

/// One frame to judge.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub link: LinkType,
    pub data: &'a [u8],
    /// Length on the wire (the capture may hold less).
    pub wire_len: u32,
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
    /// Fragments dropped by reassembly (overlap, limits, timeout, incomplete).
    pub dropped_fragments: u64,
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
        self.dropped_fragments += o.dropped_fragments;
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
    batch: usize,
    stats: Stats,
}

impl Engine {
    pub fn new(rules: RuleSet, undecodable: Verdict) -> Self {
        Engine { rules, undecodable, batch: DEFAULT_BATCH, stats: Stats::default() }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Decode one frame and decide.
    pub fn judge(&mut self, link: LinkType, data: &[u8], wire_len: u32) -> Verdict {
        let mut v = [Verdict::Pass];
        self.judge_batch(&[Frame { link, data, wire_len }], &mut v);
        v[0]
    }

    /// Decode and decide a batch: `verdicts[i]` is for `frames[i]`. The main
    /// path: decode everything, look every address up in batches, count.
    pub fn judge_batch(&mut self, frames: &[Frame<'_>], verdicts: &mut [Verdict]) {
        judge_batch(&self.rules, self.undecodable, self.batch, &mut self.stats, frames, verdicts);
    }
}

/// [`Engine::judge_batch`] against rules held elsewhere (a worker's current
/// rule snapshot), counting into `stats`.
pub fn judge_batch(
    rules: &RuleSet,
    undecodable: Verdict,
    batch: usize,
    stats: &mut Stats,
    frames: &[Frame<'_>],
    verdicts: &mut [Verdict],
) {
    assert_eq!(frames.len(), verdicts.len(), "one verdict per frame");
    let mut decoded: [Result<PacketSummary, DecodeError>; MAX_BATCH] = [Err(DecodeError::TooManyVlanTags); MAX_BATCH];
    for (fc, vc) in frames.chunks(MAX_BATCH).zip(verdicts.chunks_mut(MAX_BATCH)) {
        for (d, f) in decoded.iter_mut().zip(fc) {
            *d = decode(f.link, f.data);
        }
        judge_decoded(rules, undecodable, batch, stats, fc.len(), |i| (&decoded[i], fc[i].wire_len), vc);
    }
}

/// Decide packets already decoded (the pipeline decodes each packet once,
/// before reassembly and steering): `item(i)` gives packet i's decode result
/// and wire length, `verdicts[i]` receives its verdict. Addresses are looked
/// up in batches of [`MAX_BATCH`], every set probed for all keys at once.
pub fn judge_decoded<'a>(
    rules: &RuleSet,
    undecodable: Verdict,
    batch: usize,
    stats: &mut Stats,
    n: usize,
    item: impl Fn(usize) -> (&'a Result<PacketSummary, DecodeError>, u32),
    verdicts: &mut [Verdict],
) {
    assert_eq!(n, verdicts.len(), "one verdict per packet");
    let mut ip_list = [IpSummary::UNSPECIFIED; MAX_BATCH];
    let mut matched = [None; MAX_BATCH];
    for (c, vc) in verdicts.chunks_mut(MAX_BATCH).enumerate() {
        let base = c * MAX_BATCH;
        let mut n_ip = 0;
        for i in 0..vc.len() {
            if let Ok(PacketSummary { ip: Some(ip), .. }) = item(base + i).0 {
                ip_list[n_ip] = *ip;
                n_ip += 1;
            }
        }
        rules.match_batch(&ip_list[..n_ip], &mut matched[..n_ip], batch);
        let mut next_ip = 0;
        for (i, v) in vc.iter_mut().enumerate() {
            let (decoded, wire_len) = item(base + i);
            let reason = match decoded {
                Ok(PacketSummary { ip: Some(ip), .. }) => {
                    if let Some(a) = ip.anomaly {
                        stats.anomalies[a.kind().index()] += 1;
                    }
                    next_ip += 1;
                    matched[next_ip - 1]
                }
                Ok(PacketSummary { ip: None, .. }) => {
                    stats.non_ip += 1;
                    None
                }
                Err(e) => {
                    stats.undecodable[e.kind().index()] += 1;
                    (undecodable == Verdict::Drop).then_some(DropReason::Undecodable(e.kind()))
                }
            };
            *v = stats.count(reason, wire_len);
        }
    }
}

impl Stats {
    /// Count a fragment whose verdict reassembly decided (it is not judged).
    pub fn count_fragment(&mut self, verdict: Verdict, wire_len: u32) {
        match verdict {
            Verdict::Pass => self.count(None, wire_len),
            Verdict::Drop => {
                self.dropped_fragments += 1;
                self.count(Some(DropReason::Fragment), wire_len)
            }
        };
    }

    fn count(&mut self, reason: Option<DropReason>, wire_len: u32) -> Verdict {
        self.packets += 1;
        self.bytes += u64::from(wire_len);
        match reason {
            None => {
                self.passed += 1;
                self.passed_bytes += u64::from(wire_len);
                Verdict::Pass
            }
            Some(r) => {
                self.dropped += 1;
                self.dropped_bytes += u64::from(wire_len);
                match r {
                    DropReason::Source => self.dropped_by_src += 1,
                    DropReason::Destination => self.dropped_by_dst += 1,
                    DropReason::Undecodable(_) | DropReason::Fragment => {}
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

    fn list(items: &[&str]) -> Vec<Prefix> {
        items.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn raw_v4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut v = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0];
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v
    }

    #[test]
    fn src_dst_any_and_undecodable() {
        let rules = RuleSet::new(&list(&["10.0.0.0/8"]), &list(&["192.0.2.1"]), &list(&["198.51.100.0/24"]));
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
        let mut strict = Engine::new(RuleSet::empty(), Verdict::Drop);
        assert_eq!(strict.judge(LinkType::RAW, &[0x45, 0], 2), Verdict::Drop);
    }

    proptest! {
        #[test]
        fn batch_matching_agrees_with_one_at_a_time(src_hosts in proptest::collection::vec(0u8..32, 0..10),
                                                    any_nets in proptest::collection::vec((0u8..32, 24u8..=32), 0..6),
                                                    pairs in proptest::collection::vec((0u8..32, 0u8..32, any::<bool>()), 1..150),
                                                    batch in 1usize..64) {
            let hosts: Vec<String> = src_hosts.iter().map(|h| format!("10.0.0.{h}")).collect();
            let nets: Vec<String> = any_nets.iter().map(|(h, l)| format!("10.0.0.{h}/{l}")).collect();
            let six: Vec<String> = src_hosts.iter().map(|h| format!("2001:db8::{h}")).collect();
            let srcs: Vec<&str> = hosts.iter().chain(&six).map(String::as_str).collect();
            let rules = RuleSet::new(&list(&srcs), &list(&["10.0.0.7", "2001:db8::7"]), &list(&nets.iter().map(String::as_str).collect::<Vec<_>>()));
            let ips: Vec<IpSummary> = pairs
                .iter()
                .map(|&(s, d, v6)| {
                    let (src, dst): (IpAddr, IpAddr) = if v6 {
                        (format!("2001:db8::{s}").parse().unwrap(), format!("2001:db8::{d}").parse().unwrap())
                    } else {
                        (IpAddr::from([10, 0, 0, s]), IpAddr::from([10, 0, 0, d]))
                    };
                    IpSummary { src, dst, ..IpSummary::UNSPECIFIED }
                })
                .collect();
            let mut out = vec![None; ips.len()];
            rules.match_batch(&ips, &mut out, batch);
            for (ip, o) in ips.iter().zip(&out) {
                prop_assert_eq!(*o, rules.match_ip(ip));
            }
        }

        #[test]
        fn every_frame_counted_once(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..50)) {
            let mut e = Engine::new(RuleSet::new(&[], &[], &list(&["0.0.0.0/1"])), Verdict::Drop);
            let batch: Vec<Frame<'_>> = frames.iter().map(|f| Frame { link: LinkType::RAW, data: f, wire_len: f.len() as u32 }).collect();
            let mut verdicts = vec![Verdict::Pass; batch.len()];
            e.judge_batch(&batch, &mut verdicts);
            let mut one = Engine::new(RuleSet::new(&[], &[], &list(&["0.0.0.0/1"])), Verdict::Drop);
            for (f, v) in frames.iter().zip(&verdicts) {
                prop_assert_eq!(one.judge(LinkType::RAW, f, f.len() as u32), *v, "batch and single verdicts differ");
            }
            prop_assert_eq!(one.stats(), e.stats());
            let s = e.stats();
            prop_assert_eq!(s.packets, frames.len() as u64);
            prop_assert_eq!(s.passed + s.dropped, s.packets);
            prop_assert_eq!(s.dropped, s.dropped_by_src + s.dropped_by_dst + s.undecodable_total() + s.dropped_fragments);
        }
    }
}
