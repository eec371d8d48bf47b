//! The classification engine: decode a frame, decide pass or drop, count.
//!
//! It does no file or socket I/O and parses no arguments; sources and sinks
//! live in the CLI. Every frame handed to [`Engine::judge`] gets exactly one
//! verdict, and every verdict is counted under exactly one heading.
#![deny(unsafe_code)]

pub mod compiled;
pub mod container;
pub mod dynamic;
pub mod flows;
pub mod hits;
pub mod rules;
pub mod snapshot;
pub mod tags;

use flows::{FlowDecision, Placement};
pub use rules::{
    shorthand_file, BaseTables, CompileError, CompileOptions, Decision, Origin, RuleInfo, RuleSet, SavedSet, SetChange,
    SetEntries, SetInfo, SetKind, Side,
};
use sluice_sets::{DEFAULT_BATCH, MAX_BATCH};
use sluice_wire::{decode, DecodeError, DecodeErrorKind, LinkType, PacketSummary};

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Pass,
    Drop,
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// A rule whose address matches all read the source (`drop saddr @x`).
    Source,
    /// A rule whose address matches all read the destination.
    Destination,
    /// Any other rule.
    Rule,
    /// No rule decided and the default is `drop`.
    Default,
    /// A flow from a router (FlowSpec discard or rate, blackhole route).
    Flow,
    Undecodable(DecodeErrorKind),
    /// Reassembly gave the datagram up (see `sluice_defrag::DropCause`).
    Fragment,
}

/// One frame to judge.
#[derive(Clone, Copy, Debug)]
pub struct RawFrame<'a> {
    pub link: LinkType,
    pub data: &'a [u8],
    /// Length on the wire (the capture may hold less).
    pub wire_len: u32,
}

/// Counters of everything the engine has judged.
///
/// Serialised as the counters of `sluice filter --json` and `bridge --json`
/// (summaries derive from this type, so a counter added here is in them):
/// every plain counter under its own name, the per-reason arrays as
/// `undecodable_by_reason` and `anomalies_by_reason` maps of the non-zero
/// reasons, and the per-rule counters left to the summaries (which print
/// them with their rules).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
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
    /// Dropped by a rule that reads no single address side (ports, `addr`...).
    pub dropped_by_rule: u64,
    /// Dropped because no rule decided and the default is `drop`.
    pub dropped_by_default: u64,
    /// Dropped by a flow from a router: a FlowSpec discard or rate, a
    /// blackhole route.
    pub dropped_by_flow: u64,
    /// Per rule of the rule set with [`Stats::rules_id`]: packets and bytes
    /// that matched it (`count` rules: matched before the deciding rule).
    #[serde(skip)]
    pub rule_hits: Vec<RuleCount>,
    /// Packets no rule decided (the default verdict applied).
    #[serde(skip)]
    pub default_hits: RuleCount,
    /// [`RuleSet::id`] of the rules `rule_hits` counts for.
    #[serde(skip)]
    pub rules_id: u64,
    /// Drops by the tag of the set element that caused them
    /// ([`RuleSet::tag_of`]; a CrowdSec decision's origin), by tag: IPv4,
    /// IPv6. Tags outlive reloads (the feed numbers them), so these do too.
    #[serde(skip)]
    pub tag_drops: Vec<[RuleCount; 2]>,
    /// Fragments dropped by reassembly (overlap, limits, timeout, incomplete).
    pub dropped_fragments: u64,
    /// ARP and other non-IP frames (passed).
    pub non_ip: u64,
    /// Frames that could not be decoded, by reason (given the default verdict).
    #[serde(rename = "undecodable_by_reason", serialize_with = "by_reason_map")]
    pub undecodable: [u64; DecodeErrorKind::COUNT],
    /// IP packets with damage past the addresses (still classified), by reason.
    #[serde(rename = "anomalies_by_reason", serialize_with = "by_reason_map")]
    pub anomalies: [u64; DecodeErrorKind::COUNT],
}

/// A per-reason array as a map of its non-zero reasons.
fn by_reason_map<S: serde::Serializer>(counts: &[u64; DecodeErrorKind::COUNT], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(Stats::by_reason(counts))
}

impl Stats {
    pub fn undecodable_total(&self) -> u64 {
        self.undecodable.iter().sum()
    }

    /// Non-zero counts of a per-reason array, with their names.
    pub fn by_reason(counts: &[u64; DecodeErrorKind::COUNT]) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DecodeErrorKind::ALL.iter().zip(counts).filter(|(_, n)| **n > 0).map(|(k, n)| (k.as_str(), *n))
    }

    /// Add another worker's or run's counters.
    pub fn add(&mut self, o: &Stats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.passed += o.passed;
        self.passed_bytes += o.passed_bytes;
        self.dropped += o.dropped;
        self.dropped_bytes += o.dropped_bytes;
        self.dropped_by_src += o.dropped_by_src;
        self.dropped_by_dst += o.dropped_by_dst;
        self.dropped_by_rule += o.dropped_by_rule;
        self.dropped_by_default += o.dropped_by_default;
        self.dropped_by_flow += o.dropped_by_flow;
        self.default_hits.add(o.default_hits);
        if self.tag_drops.len() < o.tag_drops.len() {
            self.tag_drops.resize(o.tag_drops.len(), Default::default());
        }
        for (a, b) in self.tag_drops.iter_mut().zip(&o.tag_drops) {
            a[0].add(b[0]);
            a[1].add(b[1]);
        }
        // Counters of different rules (workers on either side of a reload
        // that changed the rule file) are not added: the newer ones win.
        if self.rule_hits.is_empty() || self.rules_id != o.rules_id {
            if !o.rule_hits.is_empty() {
                self.rule_hits = o.rule_hits.clone();
                self.rules_id = o.rules_id;
            }
        } else {
            if self.rule_hits.len() < o.rule_hits.len() {
                self.rule_hits.resize(o.rule_hits.len(), RuleCount::default());
            }
            for (a, b) in self.rule_hits.iter_mut().zip(&o.rule_hits) {
                a.add(*b);
            }
        }
        self.dropped_fragments += o.dropped_fragments;
        self.non_ip += o.non_ip;
        for i in 0..DecodeErrorKind::COUNT {
            self.undecodable[i] += o.undecodable[i];
            self.anomalies[i] += o.anomalies[i];
        }
    }
}

/// Packets and bytes (on the wire) one rule matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RuleCount {
    pub packets: u64,
    pub bytes: u64,
}

impl RuleCount {
    fn add(&mut self, o: RuleCount) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }

    fn hit(&mut self, wire_len: u32) {
        self.packets += 1;
        self.bytes += u64::from(wire_len);
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
        self.judge_batch(&[RawFrame { link, data, wire_len }], &mut v);
        v[0]
    }

    /// Decode and decide a batch: `verdicts[i]` is for `frames[i]`. The main
    /// path: decode everything, look every address up in batches, count.
    pub fn judge_batch(&mut self, frames: &[RawFrame<'_>], verdicts: &mut [Verdict]) {
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
    frames: &[RawFrame<'_>],
    verdicts: &mut [Verdict],
) {
    assert_eq!(frames.len(), verdicts.len(), "one verdict per frame");
    let mut decoded: [Result<PacketSummary, DecodeError>; MAX_BATCH] = [Err(DecodeError::TooManyVlanTags); MAX_BATCH];
    for (fc, vc) in frames.chunks(MAX_BATCH).zip(verdicts.chunks_mut(MAX_BATCH)) {
        for (d, f) in decoded.iter_mut().zip(fc) {
            *d = decode(f.link, f.data);
        }
        judge_decoded(rules, undecodable, batch, stats, fc.len(), |i| (&decoded[i], fc[i].wire_len, 0), vc);
    }
}

/// Decide packets already decoded (the pipeline decodes each packet once,
/// before reassembly and steering): `item(i)` gives packet i's decode
/// result, wire length and port (the live port it came in on; 0 for files),
/// `verdicts[i]` receives its verdict. Rules are evaluated in chunks of
/// [`MAX_BATCH`] (see [`rules`]).
pub fn judge_decoded<'a>(
    rules: &RuleSet,
    undecodable: Verdict,
    batch: usize,
    stats: &mut Stats,
    n: usize,
    item: impl Fn(usize) -> (&'a Result<PacketSummary, DecodeError>, u32, u32),
    verdicts: &mut [Verdict],
) {
    assert_eq!(n, verdicts.len(), "one verdict per packet");
    if stats.rules_id != rules.id() || stats.rule_hits.len() != rules.rules().len() {
        // New rules (a reload that changed the rule file): counters restart.
        stats.rules_id = rules.id();
        stats.rule_hits.clear();
        stats.rule_hits.resize(rules.rules().len(), RuleCount::default());
    }
    let mut pkts: [(&PacketSummary, u32, u32); MAX_BATCH] = [(&EMPTY_SUMMARY, 0, 0); MAX_BATCH];
    let mut decided = [Decision { verdict: Verdict::Pass, rule: None }; MAX_BATCH];
    let flows = rules.flows().map(|f| (f, f.placement()));
    // Per packet of a chunk: dropped by a flow before the rules looked.
    let mut flow_dropped = [false; MAX_BATCH];
    let now = flows.filter(|(f, _)| f.policed()).map_or(0, |_| flows::mono_ns());
    for (c, vc) in verdicts.chunks_mut(MAX_BATCH).enumerate() {
        let base = c * MAX_BATCH;
        let mut m = 0;
        for (i, dropped) in flow_dropped.iter_mut().enumerate().take(vc.len()) {
            if let (Ok(p), wire_len, port) = item(base + i) {
                if let (Some((f, Placement::First)), Some(ip)) = (flows, &p.ip) {
                    *dropped = f.judge(ip, wire_len, now) != FlowDecision::Pass;
                    if *dropped {
                        continue;
                    }
                }
                pkts[m] = (p, wire_len, port);
                m += 1;
            }
        }
        let hits = &mut stats.rule_hits;
        rules.evaluate_batch(&pkts[..m], &mut decided[..m], batch, |r, j| hits[r].hit(pkts[j].1));
        let mut next = 0;
        for (i, v) in vc.iter_mut().enumerate() {
            let (decoded, wire_len, _) = item(base + i);
            let reason = match decoded {
                Ok(p) => {
                    match &p.ip {
                        Some(ip) => {
                            if let Some(a) = ip.anomaly {
                                stats.anomalies[a.kind().index()] += 1;
                            }
                        }
                        None => stats.non_ip += 1,
                    }
                    if std::mem::take(&mut flow_dropped[i]) {
                        *v = stats.count(Some(DropReason::Flow), wire_len);
                        continue;
                    }
                    let d = decided[next];
                    next += 1;
                    if d.rule.is_none() {
                        if let (Some((f, Placement::Last)), Some(ip)) = (flows, &p.ip) {
                            if f.judge(ip, wire_len, now) != FlowDecision::Pass {
                                *v = stats.count(Some(DropReason::Flow), wire_len);
                                continue;
                            }
                        }
                    }
                    match d.rule {
                        Some(r) => stats.rule_hits[usize::from(r)].hit(wire_len),
                        None => stats.default_hits.hit(wire_len),
                    }
                    match (d.verdict, d.rule) {
                        (Verdict::Pass, _) => None,
                        (Verdict::Drop, None) => Some(DropReason::Default),
                        (Verdict::Drop, Some(r)) => Some({
                            if let Some((tag, v6)) = rules.tag_of(usize::from(r), p) {
                                stats.tag_drop(tag, v6, wire_len);
                            }
                            match rules.rules()[usize::from(r)].side {
                                Some(Side::Source) => DropReason::Source,
                                Some(Side::Destination) => DropReason::Destination,
                                None => DropReason::Rule,
                            }
                        }),
                    }
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

/// A placeholder for filling arrays of summaries.
static EMPTY_SUMMARY: PacketSummary = PacketSummary::EMPTY;

impl Stats {
    fn tag_drop(&mut self, tag: u16, v6: bool, wire_len: u32) {
        let t = usize::from(tag);
        if self.tag_drops.len() <= t {
            self.tag_drops.resize(t + 1, Default::default());
        }
        self.tag_drops[t][usize::from(v6)].hit(wire_len);
    }

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
                    DropReason::Rule => self.dropped_by_rule += 1,
                    DropReason::Default => self.dropped_by_default += 1,
                    DropReason::Flow => self.dropped_by_flow += 1,
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
    use sluice_rules::Prefix;

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
        assert_eq!(s.undecodable[DecodeErrorKind::TruncatedIpv4.index()], 1);
        let mut strict = Engine::new(RuleSet::empty(), Verdict::Drop);
        assert_eq!(strict.judge(LinkType::RAW, &[0x45, 0], 2), Verdict::Drop);
    }

    proptest! {
        #[test]
        fn every_frame_counted_once(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..50)) {
            let mut e = Engine::new(RuleSet::new(&[], &[], &list(&["0.0.0.0/1"])), Verdict::Drop);
            let batch: Vec<RawFrame<'_>> = frames.iter().map(|f| RawFrame { link: LinkType::RAW, data: f, wire_len: f.len() as u32 }).collect();
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
            prop_assert_eq!(s.dropped, s.dropped_by_src + s.dropped_by_dst + s.dropped_by_rule + s.dropped_by_default + s.undecodable_total() + s.dropped_fragments);
        }
    }
}
