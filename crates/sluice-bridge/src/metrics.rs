//! What `sluice bridge` counts while it runs, and the Prometheus
//! exposition of it at `/metrics` (the summary and the status line show
//! the same counts: [`crate::summary`]).
//!
//! Nothing here counts packets: each number is read, on a scrape, from the
//! one place that counts it. The live ports' sink counts every frame's
//! verdict per receiving port and the fragments by outcome as it handles
//! them, besides what the sockets received, sent and lost
//! ([`BridgeCounters`]); the workers count rules, drop reasons and
//! undecodable frames ([`Stats`], published once per batch); the control
//! plane counts reloads ([`ControlState`]). Every number with a fixed name
//! is declared once with `counters!` (in [`crate::counters`]: the ports',
//! [`LaneTotals`], [`BridgeTotals`]) and served by
//! `sluice_metrics::counters::encode`;
//! only the families keyed by what occurred ([`dynamic_families`]) are
//! written by hand.

use crate::counters::{BridgeCounters, BridgeTotals, LaneTotals};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Side, Stats};
use sluice_metrics::counters::encode_where;
use sluice_metrics::{counter, gauge};
use sluice_pipeline::LiveStats;
use sluice_pipeline::{Observer, Progress};
use sluice_policy::ControlState;
use sluice_wire::DecodeErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// The families written by hand, keyed by what occurred: per list and
/// reason, rule, set, origin, peer and flow (the names test checks that
/// nothing else is served undeclared).
pub fn dynamic_families() -> Vec<&'static str> {
    use sluice_policy::exposition::{CROWDSEC_FAMILIES, SET_FAMILIES};
    let own = ["sluice_dropped_packets", "sluice_undecodable_packets", "sluice_list_entries", "sluice_info"];
    let theirs = [&sluice_metrics::RULE_FAMILIES[..], SET_FAMILIES, CROWDSEC_FAMILIES, crate::bgp::SERVED_FAMILIES];
    own.into_iter().chain(theirs.into_iter().flatten().copied()).collect()
}

/// Everything the bridge counts, shared by the sink, the control thread,
/// the status line and the metrics server.
pub struct BridgeMetrics {
    pub ifaces: [String; 2],
    /// "afxdp (skb mode)", "afpacket", ...
    pub io: Mutex<String>,
    pub started: Instant,
    /// The workers' counters (per rule, drops by reason), once the judge exists.
    pub live_stats: Mutex<Vec<LiveStats>>,
    /// The rules in force, for the rule counters' labels.
    pub rules: Mutex<Option<Arc<Published<RuleSet>>>>,
    /// Reloads, the generation in force, the lists' entries.
    pub control: Arc<ControlState>,
    /// From the pipeline's observer: judged so far (some may not be written yet).
    pub judged: AtomicU64,
    /// The live ports' own counters: received, sent, lost at a ring, and
    /// each frame's verdict and fragment outcome as the sink handled it.
    pub ports: Arc<BridgeCounters>,
    /// The control socket's connections and refused peers.
    pub socket: Arc<sluice_control::socket::SocketCounters>,
    /// `--dry-run`: nothing is enforced; drops are what would have been.
    pub dry_run: std::sync::atomic::AtomicBool,
    /// The CrowdSec bouncer's counters, and its set, when it runs.
    pub crowdsec: OnceLock<Arc<sluice_policy::crowdsec::BouncerCounters>>,
    pub crowdsec_set: OnceLock<String>,
    /// Set when drops are sampled (`--sample-drops`, `--log-drops`).
    pub samples: OnceLock<Arc<sluice_pipeline::sample::SampleCounters>>,
    /// A per-queue bridge's fragment inboxes (fragments moved between lanes).
    pub inboxes: OnceLock<Arc<sluice_pipeline::Inboxes>>,
    /// The BGP sessions, when there are some.
    pub bgp: OnceLock<Arc<crate::bgp::BgpState>>,
}

impl BridgeMetrics {
    pub fn new(ifaces: [String; 2], ports: Arc<BridgeCounters>, control: Arc<ControlState>) -> BridgeMetrics {
        BridgeMetrics {
            ifaces,
            io: Mutex::new(String::new()),
            started: Instant::now(),
            live_stats: Mutex::new(Vec::new()),
            rules: Mutex::new(None),
            control,
            judged: AtomicU64::new(0),
            socket: Arc::default(),
            crowdsec: OnceLock::new(),
            crowdsec_set: OnceLock::new(),
            samples: OnceLock::new(),
            inboxes: OnceLock::new(),
            bgp: OnceLock::new(),
            dry_run: std::sync::atomic::AtomicBool::new(false),
            ports,
        }
    }

    /// Every worker's counters, merged.
    pub fn stats(&self) -> Stats {
        let mut all = Stats::default();
        for s in self.live_stats.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            all.add(&s.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all
    }

    /// The numbers [`BridgeTotals`] declares, now.
    pub fn totals(&self) -> BridgeTotals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (p, c) = (&self.ports, &self.control);
        let inbox = |f: fn(&sluice_pipeline::Inboxes) -> &AtomicU64| self.inboxes.get().map_or(0, |i| l(f(i)));
        let dry = self.dry_run.load(Ordering::Relaxed);
        BridgeTotals {
            judged: l(&self.judged),
            // In the order of `FRAGMENT_OUTCOMES`.
            fragments_judged: l(&p.fragments[0]),
            fragments_reassembly_passed: l(&p.fragments[1]),
            fragments_reassembly_dropped: l(&p.fragments[2]),
            frames_reclaimed: l(&p.frames_reclaimed),
            fragments_resteered: inbox(|i| &i.moved),
            fragments_resteer_full: inbox(|i| &i.overflowed),
            last_reload_ms: l(&c.last_reload_ms),
            generation: l(&c.generation),
            dry_run: u64::from(dry),
            would_drop: if dry { p.ports.iter().map(|p| l(&p.dropped)).sum() } else { 0 },
        }
    }

    /// The CrowdSec set's drops and elements by origin (see
    /// `sluice_policy::usage`); empty without the bouncer.
    pub fn origin_usage(&self) -> Vec<sluice_policy::usage::OriginUsage> {
        match (self.crowdsec_set.get(), self.rules()) {
            (Some(set), Some(rules)) => sluice_policy::usage::origin_usage(&rules.value, set, &self.stats()),
            _ => Vec::new(),
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> Option<Arc<sluice_engine::snapshot::Snapshot<RuleSet>>> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|p| p.load())
    }

    pub fn io(&self) -> String {
        self.io.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A registry that encodes these counters on every scrape.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(Arc::clone(self))));
        registry
    }
}

/// The pipeline's progress reports, as live numbers. One per pipeline: the
/// lanes of a per-queue bridge each add what they judged since their last
/// report.
pub struct LiveObserver {
    metrics: Arc<BridgeMetrics>,
    last: u64,
}

impl LiveObserver {
    pub fn new(metrics: &Arc<BridgeMetrics>) -> LiveObserver {
        LiveObserver { metrics: Arc::clone(metrics), last: 0 }
    }
}

impl Observer for LiveObserver {
    fn progress(&mut self, p: &Progress) {
        self.metrics.judged.fetch_add(p.judged.saturating_sub(self.last), Ordering::Relaxed);
        self.last = self.last.max(p.judged);
    }
}

/// Encodes [`BridgeMetrics`] on every scrape.
struct Exporter(Arc<BridgeMetrics>);

// prometheus-client wants collectors to be Debug; the counters are not
// worth printing.
impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let enc = &mut enc;
        // The declared sets: the ports, the lanes, the bridge's own, the
        // CrowdSec feed's, the samples' (always: zeros without
        // --sample-drops/--log-drops, so a dashboard's panel has a series).
        let t = s.totals();
        let port = |p: usize| vec![("port", p.to_string()), ("iface", s.ifaces[p].clone())];
        let mut rows: Vec<_> = (0..2).map(|p| (port(p), s.ports.ports[p].totals().exported())).collect();
        for c in s.ports.lanes.get().into_iter().flatten() {
            let queue = vec![("queue", c.queue.to_string()), ("cpu", c.cpu.to_string())];
            rows.push((queue, LaneTotals::of(c).exported()));
        }
        rows.push((vec![], t.exported()));
        rows.extend(s.crowdsec.get().map(|cs| (vec![], cs.counts.totals().exported())));
        rows.push((vec![], s.samples.get().map(|sc| sc.totals()).unwrap_or_default().exported()));
        let (inboxes, dry) = (s.inboxes.get().is_some(), t.dry_run == 1);
        encode_where(enc, &rows, |f| match f {
            "sluice_fragments_resteered" => inboxes,
            "sluice_would_drop_packets" => dry,
            _ => true,
        })?;
        sluice_policy::exposition::control_families(enc, &s.control, &s.socket.totals(), None)?;
        // By hand, the families keyed by what occurred.
        judged(enc, s)?;
        let entries: Vec<_> = (s.control.lists().into_iter())
            .map(|e| (vec![("list", e.kind.to_owned()), ("path", e.path)], e.entries as i64))
            .collect();
        gauge(enc, "sluice_list_entries", "Entries of each list file in the rules in force.", &entries)?;
        gauge(enc, "sluice_info", "How the bridge runs.", &[(vec![("io", s.io())], 1)])?;
        sluice_policy::exposition::set_families(enc, &s.control)?;
        if let Some(cs) = s.crowdsec.get() {
            sluice_policy::exposition::crowdsec_families(enc, cs, &s.origin_usage())?;
        }
        match s.bgp.get() {
            Some(bgp) => bgp.families(enc, s.rules().as_ref().and_then(|r| r.value.flows())),
            None => Ok(()),
        }
    }
}

/// What the workers judged: drops by reason and list, rules, undecodable frames.
fn judged(enc: &mut DescriptorEncoder, s: &BridgeMetrics) -> Result<(), std::fmt::Error> {
    let stats = s.stats();
    // The workers count every drop they decide by its reason but the
    // undecodable ones, which are what is left; reassembly's are the
    // fragments the sink saw it give up and drop.
    let undecodable_dropped =
        stats.dropped - stats.dropped_by_src - stats.dropped_by_dst - stats.dropped_by_rule - stats.dropped_by_default;
    let reason = |r: &str, list: String| vec![("reason", r.to_owned()), ("list", list)];
    let mut drops: Vec<(Vec<(&str, String)>, u64)> = vec![
        (reason("undecodable", String::new()), undecodable_dropped),
        (reason("fragment", String::new()), s.ports.fragments[2].load(Ordering::Relaxed)),
        (reason("default", String::new()), stats.dropped_by_default),
    ];
    let mut rule_rows = Vec::new();
    let rules = s.rules();
    if let Some(r) = &rules {
        let same = stats.rules_id == r.value.id();
        for (i, info) in r.value.rules().iter().enumerate() {
            let c = if same { stats.rule_hits.get(i).copied().unwrap_or_default() } else { Default::default() };
            let (packets, bytes) = (c.packets, c.bytes);
            let (line, rule, action) = (info.line, &info.text, info.action.as_str());
            rule_rows.push(sluice_metrics::RuleRow { line, rule, action, packets, bytes });
            let dropped = match info.action {
                sluice_rules::Action::Drop => c.packets,
                // What the rule's bucket found over its rate.
                sluice_rules::Action::Police => r.value.policer(i).map_or(0, |p| p.over.load(Ordering::Relaxed)),
                _ => continue,
            };
            let side = match info.side {
                Some(Side::Source) => "src",
                Some(Side::Destination) => "dst",
                None => "rule",
            };
            let key = reason(side, info.list.clone());
            match drops.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += dropped,
                None => drops.push((key, dropped)),
            }
        }
    }
    let help = "Dropped packets by reason and the list (set) of the rule that dropped them.";
    counter(enc, "sluice_dropped_packets", help, &drops)?;
    sluice_metrics::rule_families(enc, &rule_rows)?;
    let undecodable: Vec<_> = (DecodeErrorKind::ALL.iter())
        .map(|k| (vec![("reason", k.as_str().to_owned())], stats.undecodable[k.index()]))
        .filter(|(_, v)| *v > 0)
        .collect();
    counter(enc, "sluice_undecodable_packets", "Packets that could not be decoded, by reason.", &undecodable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fragment_counts_are_labelled_in_the_order_the_sink_counts_them() {
        let t = BridgeTotals {
            fragments_judged: 1,
            fragments_reassembly_passed: 2,
            fragments_reassembly_dropped: 3,
            ..Default::default()
        };
        let rows = [(vec![], t.exported())];
        let labelled: Vec<_> = sluice_metrics::counters::samples("sluice_fragments", &rows)
            .into_iter()
            .map(|(l, n)| (l[0].1.clone(), n))
            .collect();
        let want: Vec<_> = crate::counters::FRAGMENT_OUTCOMES.iter().map(|o| o.to_string()).zip(1..).collect();
        assert_eq!(labelled, want);
    }
}
