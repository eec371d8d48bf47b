//! What `sluice bridge` counts while it runs, and how it is shown: the
//! Prometheus exposition at `/metrics`, the status line, and the per-port
//! part of the final summary.
//!
//! Nothing here counts packets: each number is read, on a scrape, from the
//! one place that counts it. The live ports' sink counts every frame's
//! verdict per receiving port and the fragments by outcome as it handles
//! them, besides what the sockets received, sent and lost
//! ([`BridgeCounters`]); the workers count rules, drop reasons and
//! undecodable frames ([`Stats`], published once per batch); the control
//! plane counts reloads ([`ControlState`]).

use crate::counters::{BridgeCounters, PortTotals};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Side, Stats};
use sluice_metrics::{counter, gauge};
use sluice_pipeline::sample::SampleCounts;
use sluice_pipeline::LiveStats;
use sluice_pipeline::{Observer, Progress};
use sluice_policy::ControlState;
use sluice_wire::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    pub judged_dropped: AtomicU64,
    /// The live ports' own counters: received, sent, lost at a ring, and
    /// each frame's verdict and fragment outcome as the sink handled it.
    pub ports: Arc<BridgeCounters>,
    /// The control socket's connections and refused peers.
    pub socket: Arc<sluice_control::socket::SocketCounters>,
    /// `--dry-run`: nothing is enforced; drops are what would have been.
    pub dry_run: std::sync::atomic::AtomicBool,
    /// The CrowdSec bouncer's counters, and its set, when it runs.
    pub crowdsec: std::sync::OnceLock<Arc<sluice_policy::crowdsec::BouncerCounters>>,
    pub crowdsec_set: std::sync::OnceLock<String>,
    /// Set when drops are sampled (`--sample-drops`, `--log-drops`).
    pub samples: std::sync::OnceLock<Arc<sluice_pipeline::sample::SampleCounters>>,
    /// A per-queue bridge's fragment inboxes (fragments moved between lanes).
    pub inboxes: std::sync::OnceLock<Arc<sluice_pipeline::Inboxes>>,
    /// The BGP sessions, when there are some.
    pub bgp: std::sync::OnceLock<Arc<crate::bgp::BgpState>>,
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
            judged_dropped: AtomicU64::new(0),
            socket: Arc::default(),
            crowdsec: std::sync::OnceLock::new(),
            crowdsec_set: std::sync::OnceLock::new(),
            samples: std::sync::OnceLock::new(),
            inboxes: std::sync::OnceLock::new(),
            bgp: std::sync::OnceLock::new(),
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

    /// The per-port part of the summary, one object per port.
    /// The final `--json` summary: the run's report, then the ports, the
    /// reloads and the lists (the rules' rows are added by the caller).
    pub fn summary_json(&self, report: &sluice_pipeline::RunReport, io: &str) -> serde_json::Value {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut v = serde_json::to_value(report.to_json()).expect("the report serialises");
        v["io"] = io.into();
        v["per_port"] = self.per_port_json();
        let c = &self.control;
        v["reloads"] = serde_json::json!({
            "ok": l(&c.reloads_ok),
            "failed": l(&c.reloads_failed),
            "sighup": l(&c.sighups),
            "generation": l(&c.generation),
        });
        v["lists"] = c
            .lists()
            .iter()
            .map(|e| serde_json::json!({ "list": e.kind, "path": e.path, "entries": e.entries }))
            .collect();
        v["frames_reclaimed"] = l(&self.ports.frames_reclaimed).into();
        if let Some(q) = self.per_lane_json(report) {
            // `per_queue`: the old name, kept for one release (docs/json.md).
            v["per_queue"] = q.clone();
            v["per_lane"] = q;
        }
        if let Some(i) = self.inboxes.get() {
            v["fragments_resteered"] = l(&i.moved).into();
            v["fragments_resteer_full"] = l(&i.overflowed).into();
        }
        let dry = self.dry_run.load(Ordering::Relaxed);
        v["dry_run"] = dry.into();
        if dry {
            v["would_drop"] = v["dropped"].clone();
        }
        v
    }

    /// The text summary's lines after the run's own: io, ports, reloads, workers.
    pub fn summary_text(&self, report: &sluice_pipeline::RunReport, io: &str) -> String {
        use std::fmt::Write as _;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = format!("io           {io}\n");
        for p in self.per_port_json().as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "port {} {:<8} in {} (pass {}, drop {}); sent {}; lost: rx ring {}, tx ring {}, unsendable {}, no buffer {}",
                p["port"],
                p["iface"].as_str().unwrap_or(""),
                p["packets"],
                p["passed"],
                p["dropped"],
                p["tx_packets"],
                p["rx_ring_drops"],
                p["tx_ring_full"],
                p["tx_invalid"],
                p["tx_no_buffer"]
            );
        }
        let c = &self.control;
        let (ok, failed, hup) = (l(&c.reloads_ok), l(&c.reloads_failed), l(&c.sighups));
        let _ = writeln!(out, "reloads      {ok} ok, {failed} failed ({hup} SIGHUP)");
        let _ = writeln!(out, "workers      {:?}", report.per_worker);
        for q in self.per_lane_json(report).as_ref().and_then(|v| v.as_array()).into_iter().flatten() {
            let _ = writeln!(
                out,
                "queue {:<6} on CPU {}: in {} (pass {}, drop {}); sent {}; judged {}",
                q["queue"], q["cpu"], q["rx_packets"], q["passed"], q["dropped"], q["tx_packets"], q["judged"]
            );
        }
        if let Some(i) = self.inboxes.get() {
            let (moved, full) = (l(&i.moved), l(&i.overflowed));
            let _ =
                writeln!(out, "fragments    {moved} moved to the lane of their IP pair, {full} given up (inbox full)");
        }
        if self.dry_run.load(Ordering::Relaxed) {
            let n = report.stats.dropped;
            let _ = writeln!(
                out,
                "dry run      nothing was enforced: {n} packets would have been dropped, all were forwarded"
            );
        }
        out
    }

    /// A per-queue bridge's lanes, one object each (`None` for one thread):
    /// the queue, the CPU, what it received, passed, dropped, sent and judged.
    pub fn per_lane_json(&self, report: &sluice_pipeline::RunReport) -> Option<serde_json::Value> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let lanes = self.ports.lanes.get()?;
        Some(
            lanes
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    serde_json::json!({
                        "queue": c.queue,
                        "cpu": c.cpu,
                        "rx_packets": l(&c.rx_packets),
                        "tx_packets": l(&c.tx_packets),
                        "passed": l(&c.passed),
                        "dropped": l(&c.dropped),
                        "judged": report.per_worker.get(i).copied().unwrap_or(0),
                    })
                })
                .collect(),
        )
    }

    pub fn per_port_json(&self) -> serde_json::Value {
        (0..2)
            .map(|p| {
                let t = self.ports.ports[p].totals();
                // Every counter under its own name (`PortCounters` declares them).
                let mut v: serde_json::Map<String, serde_json::Value> =
                    t.pairs().into_iter().map(|(k, n)| (k.to_owned(), n.into())).collect();
                v.insert("port".into(), p.into());
                v.insert("iface".into(), self.ifaces[p].clone().into());
                v.insert("packets".into(), (t.passed + t.dropped).into());
                v.insert("bytes".into(), (t.passed_bytes + t.dropped_bytes).into());
                serde_json::Value::Object(v)
            })
            .collect()
    }

    /// What the control thread runs every tick besides reloading: a status
    /// line on stderr every 2 s when `status`, and setting `stop` once
    /// `duration` seconds have passed (`--duration`).
    pub fn ticker(
        self: &Arc<Self>,
        status: bool,
        duration: Option<Duration>,
        stop: &Arc<std::sync::atomic::AtomicBool>,
    ) -> impl FnMut() + Send + 'static {
        let deadline = duration.map(|d| Instant::now() + d);
        let (shared, stop) = (Arc::clone(self), Arc::clone(stop));
        let mut last_status = Instant::now();
        let mut last_counts = [0u64; 2];
        move || {
            if status && last_status.elapsed() >= Duration::from_secs(2) {
                let since = last_status.elapsed();
                last_status = Instant::now();
                eprintln!("{}", shared.status_line(&mut last_counts, since));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// One status line: per port in/pass/drop and rate since the last line.
    pub fn status_line(&self, last: &mut [u64; 2], since: Duration) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = format!("sluice: {:>7.1} s", self.started.elapsed().as_secs_f64());
        for (p, last) in last.iter_mut().enumerate() {
            let t = self.ports.ports[p].totals();
            let n = t.passed + t.dropped;
            let rate = (n - *last) as f64 / since.as_secs_f64().max(1e-3);
            *last = n;
            s += &format!(
                " | {} in {n} pass {} drop {} ({:.1} kpps) ring drops {}",
                self.ifaces[p],
                t.passed,
                t.dropped,
                rate / 1e3,
                t.rx_ring_drops + t.tx_ring_full
            );
        }
        s += &format!(" | reloads {} ok {} failed", l(&self.control.reloads_ok), l(&self.control.reloads_failed));
        s
    }
}

/// The pipeline's progress reports, as live numbers. One per pipeline: the
/// lanes of a per-queue bridge each add what they judged since their last
/// report.
pub struct LiveObserver {
    metrics: Arc<BridgeMetrics>,
    last: (u64, u64),
}

impl LiveObserver {
    pub fn new(metrics: &Arc<BridgeMetrics>) -> LiveObserver {
        LiveObserver { metrics: Arc::clone(metrics), last: (0, 0) }
    }
}

impl Observer for LiveObserver {
    fn progress(&mut self, p: &Progress) {
        let m = &self.metrics;
        m.judged.fetch_add(p.judged.saturating_sub(self.last.0), Ordering::Relaxed);
        m.judged_dropped.fetch_add(p.dropped.saturating_sub(self.last.1), Ordering::Relaxed);
        self.last = (self.last.0.max(p.judged), self.last.1.max(p.dropped));
    }
}

/// The help text of a family of the ports' counters.
fn port_family_help(family: &str) -> &'static str {
    match family {
        "sluice_packets" => "Packets received on a port, by verdict.",
        "sluice_bytes" => "Bytes (on the wire) received on a port, by verdict.",
        "sluice_tx_packets" => "Packets transmitted on a port.",
        "sluice_tx_bytes" => "Bytes transmitted on a port.",
        "sluice_ring_drops" => {
            "Frames lost at a ring: the kernel's RX ring full or fill ring empty, our TX ring full, a frame that \
             cannot be sent, no free buffer, a failed send (fill_ring_empty counts events, not frames)."
        }
        _ => "A port's counter.",
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
        // By owner: what the ports counted, what the workers judged, the
        // control plane, the runtime sets, the CrowdSec feed, the samples.
        self.ports(&mut enc)?;
        self.judged(&mut enc)?;
        self.control(&mut enc)?;
        self.sets(&mut enc)?;
        self.crowdsec(&mut enc)?;
        self.flows(&mut enc)?;
        self.samples(&mut enc)
    }
}

/// Flows served by name in `sluice_flow_rule_*` (the busiest; the rest are
/// summed under `rule="other"`), so a table of 10,000 flows is not 10,000
/// series.
pub const FLOW_SERIES: usize = 32;

impl Exporter {
    /// The ports' counters, per lane too, and fragments moved between lanes.
    fn ports(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let port = |p: usize| vec![("port", p.to_string()), ("iface", s.ifaces[p].clone())];
        // The ports' families, as `PortCounters` declares them.
        let rows: Vec<_> = (0..2).map(|p| (port(p), s.ports.ports[p].totals().exported())).collect();
        for family in sluice_metrics::counters::families(PortTotals::FAMILIES) {
            counter(enc, family, port_family_help(family), &sluice_metrics::counters::samples(family, &rows))?;
        }
        if let Some(lanes) = s.ports.lanes.get() {
            let queue =
                |c: &crate::counters::LaneCounters| vec![("queue", c.queue.to_string()), ("cpu", c.cpu.to_string())];
            let mut judged = Vec::new();
            for c in lanes {
                for (verdict, n) in [("pass", l(&c.passed)), ("drop", l(&c.dropped))] {
                    let mut labels = queue(c);
                    labels.push(("verdict", verdict.to_owned()));
                    judged.push((labels, n));
                }
            }
            counter(enc, "sluice_queue_packets", "Packets a queue's worker handled, by verdict.", &judged)?;
            let rx: Vec<_> = lanes.iter().map(|c| (queue(c), l(&c.rx_packets))).collect();
            counter(enc, "sluice_queue_rx_packets", "Packets received on a queue (both ports).", &rx)?;
            let tx: Vec<_> = lanes.iter().map(|c| (queue(c), l(&c.tx_packets))).collect();
            counter(enc, "sluice_queue_tx_packets", "Packets a queue's worker transmitted (both ports).", &tx)?;
        }
        if let Some(i) = s.inboxes.get() {
            counter(
                enc,
                "sluice_fragments_resteered",
                "Fragments that arrived on another queue than the one their IP pair is reassembled on: moved, or given up with the incomplete verdict when that queue's inbox was full.",
                &[
                    (vec![("result", "moved".to_owned())], l(&i.moved)),
                    (vec![("result", "inbox_full".to_owned())], l(&i.overflowed)),
                ],
            )?;
        }
        Ok(())
    }

    /// What the workers judged: drops by reason and set, rules, undecodable frames, fragments.
    fn judged(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stats = s.stats();
        let rules = s.rules();
        // The workers count every drop they decide by its reason but the
        // undecodable ones, which are what is left; reassembly's are the
        // fragments the sink saw it give up and drop.
        let undecodable_dropped = stats.dropped
            - stats.dropped_by_src
            - stats.dropped_by_dst
            - stats.dropped_by_rule
            - stats.dropped_by_default;
        let mut drops: Vec<(Vec<(&str, String)>, u64)> = vec![
            (vec![("reason", "undecodable".into()), ("list", String::new())], undecodable_dropped),
            (vec![("reason", "fragment".into()), ("list", String::new())], l(&s.ports.fragments[2])),
            (vec![("reason", "default".into()), ("list", String::new())], stats.dropped_by_default),
        ];
        let mut rule_rows = Vec::new();
        if let Some(r) = &rules {
            let same = stats.rules_id == r.value.id();
            for (i, info) in r.value.rules().iter().enumerate() {
                let c = if same { stats.rule_hits.get(i).copied().unwrap_or_default() } else { Default::default() };
                rule_rows.push(sluice_metrics::RuleRow {
                    line: info.line,
                    rule: &info.text,
                    action: info.action.as_str(),
                    packets: c.packets,
                    bytes: c.bytes,
                });
                let dropped = match info.action {
                    sluice_rules::Action::Drop => c.packets,
                    // What the rule's bucket found over its rate.
                    sluice_rules::Action::Police => r.value.policer(i).map_or(0, |p| p.over.load(Ordering::Relaxed)),
                    _ => continue,
                };
                let reason = match info.side {
                    Some(Side::Source) => "src",
                    Some(Side::Destination) => "dst",
                    None => "rule",
                };
                let key = vec![("reason", reason.to_owned()), ("list", info.list.clone())];
                match drops.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n += dropped,
                    None => drops.push((key, dropped)),
                }
            }
        }
        counter(
            enc,
            "sluice_dropped_packets",
            "Dropped packets by reason and the list (set) of the rule that dropped them.",
            &drops,
        )?;
        sluice_metrics::rule_families(enc, &rule_rows)?;
        let undecodable: Vec<_> = ErrorKind::ALL
            .iter()
            .map(|k| (vec![("reason", k.as_str().to_owned())], stats.undecodable[k.index()]))
            .filter(|(_, v)| *v > 0)
            .collect();
        counter(enc, "sluice_undecodable_packets", "Packets that could not be decoded, by reason.", &undecodable)?;
        let frags: Vec<_> = crate::counters::FRAGMENT_OUTCOMES
            .iter()
            .zip(&s.ports.fragments)
            .map(|(o, a)| (vec![("outcome", (*o).to_owned())], l(a)))
            .collect();
        counter(
            enc,
            "sluice_fragments",
            "IP fragments: judged with their datagram, or decided by reassembly (given up: passed or dropped).",
            &frags,
        )?;
        counter(
            enc,
            "sluice_frames_reclaimed",
            "AF_XDP frames whose packets reassembly copied out, given back to the pool.",
            &[(vec![], l(&s.ports.frames_reclaimed))],
        )?;
        Ok(())
    }

    /// The control plane: reloads, lists, generation, how the bridge runs, the dry run.
    fn control(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        sluice_policy::exposition::control_families(enc, &s.control, &s.socket.totals(), None)?;
        counter(
            enc,
            "sluice_judged_packets",
            "Packets judged so far (the pipeline's progress; may run ahead of what was written).",
            &[(vec![], l(&s.judged))],
        )?;
        let entries: Vec<_> = s
            .control
            .lists()
            .into_iter()
            .map(|e| (vec![("list", e.kind.to_owned()), ("path", e.path)], e.entries as i64))
            .collect();
        gauge(enc, "sluice_list_entries", "Entries of each list file in the rules in force.", &entries)?;
        gauge(
            enc,
            "sluice_last_reload_timestamp_seconds",
            "Unix time the rules in force were loaded.",
            &[(vec![], (l(&s.control.last_reload_ms) / 1000) as i64)],
        )?;
        gauge(
            enc,
            "sluice_rules_generation",
            "Generation of the rules in force (0 at start, +1 per publication: reload, expiry, runtime change, merge).",
            &[(vec![], l(&s.control.generation) as i64)],
        )?;
        gauge(enc, "sluice_info", "How the bridge runs.", &[(vec![("io", s.io())], 1)])?;
        let dry = s.dry_run.load(Ordering::Relaxed);
        gauge(
            enc,
            "sluice_dry_run",
            "1 under --dry-run: nothing is enforced, and the drop counters count what would have been dropped.",
            &[(vec![], i64::from(dry))],
        )?;
        if dry {
            let would: u64 = s.ports.ports.iter().map(|p| l(&p.dropped)).sum();
            counter(
                enc,
                "sluice_would_drop_packets",
                "--dry-run: packets the rules would have dropped (all were forwarded).",
                &[(vec![], would)],
            )?;
        }
        Ok(())
    }

    /// The runtime sets, as every data plane over the controller serves them.
    fn sets(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        sluice_policy::exposition::set_families(enc, &self.0.control)
    }

    /// The CrowdSec feed, when it runs.
    fn crowdsec(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if let Some(cs) = s.crowdsec.get() {
            gauge(
                enc,
                "sluice_crowdsec_up",
                "1 while the last pull from the CrowdSec LAPI worked.",
                &[(vec![], l(&cs.up) as i64)],
            )?;
            gauge(
                enc,
                "sluice_crowdsec_last_pull_timestamp_seconds",
                "Unix time of the last pull from the LAPI that worked.",
                &[(vec![], (l(&cs.last_pull_ms) / 1000) as i64)],
            )?;
            gauge(
                enc,
                "sluice_crowdsec_pull_duration_us",
                "The last pull that worked, from request to publication (µs).",
                &[(vec![], l(&cs.last_pull_us) as i64)],
            )?;
            counter(
                enc,
                "sluice_crowdsec_pulls",
                "Pulls from the LAPI, by result.",
                &[
                    (vec![("result", "ok".to_owned())], l(&cs.pulls_ok)),
                    (vec![("result", "failed".to_owned())], l(&cs.pulls_failed)),
                ],
            )?;
            counter(
                enc,
                "sluice_crowdsec_repaired",
                "Set elements a full pull added or removed that the delta stream had missed.",
                &[(vec![], l(&cs.repaired))],
            )?;
            let d: Vec<_> = cs
                .decisions()
                .into_iter()
                .map(|((origin, kind, scope, action), n)| {
                    let labels = [("origin", origin), ("type", kind), ("scope", scope), ("action", action)];
                    (labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(), n)
                })
                .collect();
            counter(
                enc,
                "sluice_crowdsec_decisions",
                "Decisions in the answers applied, by origin, type, scope (each a known value or other) and what was done (added, deleted, ignored, oversized).",
                &d,
            )?;
            let usage = s.origin_usage();
            let by = |f: fn(&sluice_policy::usage::OriginUsage) -> u64| -> Vec<(Vec<(&str, String)>, u64)> {
                let labels = |u: &sluice_policy::usage::OriginUsage| {
                    vec![("origin", u.origin.clone()), ("ip_type", u.ip_type.to_owned())]
                };
                usage.iter().map(|u| (labels(u), f(u))).collect()
            };
            counter(
                enc,
                "sluice_crowdsec_dropped_packets",
                "Packets dropped by a rule over the CrowdSec set, by the origin of the decision that matched (crowdsec, cscli, CAPI, lists:NAME, ...) and ip_type.",
                &by(|u| u.dropped_packets),
            )?;
            counter(
                enc,
                "sluice_crowdsec_dropped_bytes",
                "Bytes (on the wire) dropped by a rule over the CrowdSec set, by origin and ip_type.",
                &by(|u| u.dropped_bytes),
            )?;
            let active: Vec<_> = by(|u| u.active).into_iter().map(|(l, n)| (l, n as i64)).collect();
            gauge(
                enc,
                "sluice_crowdsec_active_decisions",
                "Elements of the CrowdSec set now, by the origin of the decision that put them there and ip_type.",
                &active,
            )?;
            counter(
                enc,
                "sluice_crowdsec_usage_pushes",
                "Pushes of the drops by origin to the LAPI's /v1/usage-metrics, by result (unsupported: answered 404, none after).",
                &[
                    (vec![("result", "ok".to_owned())], l(&cs.usage_pushes_ok)),
                    (vec![("result", "failed".to_owned())], l(&cs.usage_pushes_failed)),
                    (vec![("result", "unsupported".to_owned())], l(&cs.usage_pushes_unsupported)),
                ],
            )?;
        }
        Ok(())
    }

    /// The BGP sessions and the flows in force (only with `--bgp-peer`).
    fn flows(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let Some(bgp) = s.bgp.get() else { return Ok(()) };
        let rows = bgp.sessions.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let up: Vec<_> =
            rows.iter().map(|r| (vec![("peer", r.peer.clone())], i64::from(r.state == "established"))).collect();
        gauge(enc, "sluice_bgp_session_up", "1 while the BGP session with the peer is established.", &up)?;
        let mut updates = Vec::new();
        for r in &rows {
            for (f, n) in crate::bgp::FAMILIES.iter().zip(r.updates) {
                updates.push((vec![("peer", r.peer.clone()), ("family", (*f).to_owned())], n));
            }
        }
        counter(enc, "sluice_bgp_updates", "UPDATEs received, by peer and the route family they touched.", &updates)?;
        let refused: Vec<_> = rows
            .iter()
            .flat_map(|r| {
                crate::bgp::REFUSAL_REASONS.iter().map(|reason| {
                    let n = r.refused_by.get(reason).copied().unwrap_or(0);
                    (vec![("peer", r.peer.clone()), ("reason", (*reason).to_owned())], n)
                })
            })
            .collect();
        counter(
            enc,
            "sluice_bgp_routes_refused",
            "Routes refused, by peer and reason: max_routes (--bgp-max-routes), route_bytes (--bgp-max-route-bytes), peer_bytes (--bgp-max-peer-bytes), never_block, min_prefix (the safety net), undirected (no destination), outside_protect (--bgp-protect).",
            &refused,
        )?;
        let bytes: Vec<_> = rows.iter().map(|r| (vec![("peer", r.peer.clone())], r.bytes as i64)).collect();
        gauge(
            enc,
            "sluice_bgp_route_bytes",
            "What the peer's routes cost, in bytes as --bgp-max-peer-bytes counts them.",
            &bytes,
        )?;
        let rules = s.rules();
        let table = rules.as_ref().and_then(|r| r.value.flows().cloned());
        let mut by_family = [0i64; 4];
        let mut busiest = Vec::new();
        if let Some(t) = &table {
            for r in t.rules() {
                let v6 = r.flow.family == sluice_bgp::flowspec::Family::V6;
                by_family[usize::from(v6) + 2 * usize::from(r.blackhole)] += 1;
                let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
                busiest.push((l(&r.counts.packets), l(&r.counts.dropped), r.flow.to_string()));
            }
        }
        let fam: Vec<_> =
            crate::bgp::FAMILIES.iter().zip(by_family).map(|(f, n)| (vec![("family", (*f).to_owned())], n)).collect();
        gauge(
            enc,
            "sluice_flow_rules",
            "Flows in force from BGP peers, by family (FlowSpec, blackhole routes).",
            &fam,
        )?;
        busiest.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
        let mut packets = Vec::new();
        let mut dropped = Vec::new();
        let (mut other_p, mut other_d) = (0, 0);
        for (i, (p, d, text)) in busiest.into_iter().enumerate() {
            if i < FLOW_SERIES {
                packets.push((vec![("rule", text.clone())], p));
                dropped.push((vec![("rule", text)], d));
            } else {
                other_p += p;
                other_d += d;
            }
        }
        if table.as_ref().is_some_and(|t| t.rules().len() > FLOW_SERIES) {
            packets.push((vec![("rule", "other".to_owned())], other_p));
            dropped.push((vec![("rule", "other".to_owned())], other_d));
        }
        counter(
            enc,
            "sluice_flow_rule_packets",
            "Packets each flow from a BGP peer matched (the 32 busiest by name, the rest as rule=\"other\").",
            &packets,
        )?;
        counter(
            enc,
            "sluice_flow_rule_dropped",
            "Packets each flow dropped (discard, blackhole, or over its traffic-rate), as sluice_flow_rule_packets.",
            &dropped,
        )
    }

    /// Drop samples (always served: zeros without --sample-drops/--log-drops).
    fn samples(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        // Always served (zeros without --sample-drops/--log-drops), so a
        // dashboard's panel has a series either way.
        let n = s.samples.get().map(|sc| sc.totals()).unwrap_or_default();
        let rows = [(vec![], n.exported())];
        for family in sluice_metrics::counters::families(SampleCounts::FAMILIES) {
            let help = match family {
                "sluice_drop_samples" => {
                    "Dropped frames sampled (--sample-drops, --log-drops), by what became of them."
                }
                _ => "Sample files rotated.",
            };
            counter(enc, family, help, &sluice_metrics::counters::samples(family, &rows))?;
        }
        Ok(())
    }
}

impl BridgeMetrics {
    /// A registry that encodes these counters on every scrape.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(Arc::clone(self))));
        registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_family_has_its_own_help() {
        let generic = port_family_help("");
        for f in sluice_metrics::counters::families(PortTotals::FAMILIES) {
            assert_ne!(port_family_help(f), generic, "{f} has no help text of its own");
        }
    }
}
