//! `sluice shield --metrics`: the Prometheus exposition of a shield.
//!
//! Nothing here counts: every scrape reads the kernel program's per-CPU
//! counters (summed, [`Compiled::counts`](crate::Compiled::counts)), the
//! reloads the kernel took or refused, and the control plane's own counts
//! when it runs. Families that mean what the bridge's mean have the
//! bridge's names and labels, encoded by the same functions
//! (`sluice_metrics::rule_families`, `sluice_policy::exposition`).

use crate::mirror::Kernel;
use crate::program::Extra;
use crate::Attached;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_control::socket::SocketCounters;
use sluice_metrics::{counter, gauge};
use sluice_pipeline::sample::SampleCounters;
use sluice_policy::ControlState;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// What a shield's scrape reads.
pub struct ShieldMetrics {
    kernel: Arc<Mutex<Kernel>>,
    /// The interfaces and their modes, once attached.
    attached: OnceLock<Vec<Attached>>,
    /// The control plane's state and its socket's counters, when it runs.
    control: (Arc<ControlState>, Arc<SocketCounters>),
    dry_run: bool,
    /// The BGP feed's sessions and what the kernel holds of its routes.
    bgp: Option<(Arc<sluice_bgpfeed::BgpState>, Arc<Mutex<crate::mirror::BgpShown>>)>,
    /// With `--sample-drops`/`--log-drops`: the writer's counters and the ring.
    samples: OnceLock<(Arc<SampleCounters>, Arc<crate::samples::SampleRing>)>,
    /// With `--crowdsec-*`: the feed's decisions and the drops by origin.
    crowdsec: Option<Arc<crate::origins::CrowdsecSeen>>,
}

/// The families a shield with `--bgp-peer` adds: the feed's sessions' (the
/// bridge's names) and the kernel's share of the routes. Each FlowSpec
/// rule's packets are its `sluice_rule_*` series (`drop bgp FLOW`), the
/// blackholes' the blackhole rule's.
pub const BGP_FAMILIES: &[&str] = &[
    "sluice_bgp_session_up",
    "sluice_bgp_updates",
    "sluice_bgp_routes_refused",
    "sluice_bgp_route_bytes",
    "sluice_bgp_blackholes",
    "sluice_bgp_flows_enforced",
    "sluice_bgp_flows_refused",
];

impl ShieldMetrics {
    pub fn new(
        kernel: Arc<Mutex<Kernel>>,
        control: (Arc<ControlState>, Arc<SocketCounters>),
        dry_run: bool,
    ) -> ShieldMetrics {
        ShieldMetrics {
            kernel,
            attached: OnceLock::new(),
            control,
            dry_run,
            bgp: None,
            samples: OnceLock::new(),
            crowdsec: None,
        }
    }

    /// The same serving a BGP feed's families ([`BGP_FAMILIES`]).
    pub fn with_bgp(
        mut self,
        bgp: Option<(Arc<sluice_bgpfeed::BgpState>, Arc<Mutex<crate::mirror::BgpShown>>)>,
    ) -> ShieldMetrics {
        self.bgp = bgp;
        self
    }

    /// The same serving the CrowdSec feed's families (the bridge's:
    /// `sluice_crowdsec_*`, the drops by origin counted in the kernel).
    pub fn with_crowdsec(mut self, crowdsec: Option<Arc<crate::origins::CrowdsecSeen>>) -> ShieldMetrics {
        self.crowdsec = crowdsec;
        self
    }

    /// Records where the program was attached (served from then on).
    pub fn attached(&self, attached: Vec<Attached>) {
        let _ = self.attached.set(attached);
    }

    /// Serves `sluice_drop_samples` from then on (the bridge's family, and
    /// `result="ring_full"`: lost in the kernel, the ring had no room).
    pub fn samples(&self, counters: Arc<SampleCounters>, ring: Arc<crate::samples::SampleRing>) {
        let _ = self.samples.set((counters, ring));
    }

    /// A registry that encodes these on every scrape.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(Arc::clone(self))));
        registry
    }
}

/// What the kernel holds at one scrape, read under one lock so that the
/// rules and their counters belong together across a reload.
struct KernelReading {
    /// Per rule: line, action, text, then its counter.
    rules: Vec<(usize, &'static str, String, crate::Count)>,
    default: crate::Count,
    undecodable: crate::Count,
    /// Per `--iface`, in order (then the row of any other interface).
    ifaces: Vec<crate::IfaceCount>,
    reloads: u64,
    reloads_failed: u64,
}

fn read_kernel(kernel: &Mutex<Kernel>) -> Result<KernelReading, crate::ShieldError> {
    let k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
    let (counts, ifaces) = k.compiled.counts_and_ifaces()?;
    let texts = k.compiled.rule_texts();
    let extra = |e: Extra| counts.get(texts.len() + e as usize).copied().unwrap_or_default();
    let rules = k
        .compiled
        .rule_lines()
        .iter()
        .zip(texts)
        .zip(&counts)
        .map(|((&(line, action), text), c)| (line, action.as_str(), text.clone(), *c))
        .collect();
    Ok(KernelReading {
        rules,
        default: extra(Extra::Default),
        undecodable: extra(Extra::Undecodable),
        ifaces,
        reloads: k.reloads,
        reloads_failed: k.reloads_failed,
    })
}

/// Encodes [`ShieldMetrics`] on every scrape.
struct Exporter(Arc<ShieldMetrics>);

// prometheus-client wants collectors to be Debug; the counters are not
// worth printing.
impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &self.0;
        let k = read_kernel(&m.kernel).map_err(|e| {
            // The scrape is answered 500; the log says why.
            tracing::warn!("metrics: reading the kernel's counters: {e}");
            std::fmt::Error
        })?;
        let rows: Vec<_> = k
            .rules
            .iter()
            .map(|(line, action, rule, c)| sluice_metrics::RuleRow {
                line: *line,
                rule,
                action,
                packets: c.packets,
                bytes: c.bytes,
            })
            .collect();
        sluice_metrics::rule_families(&mut enc, &rows)?;
        let one = |n: u64| [(vec![], n)];
        counter(
            &mut enc,
            "sluice_shield_default_packets",
            "Packets no pass or drop rule decided: the default's verdict applied to them.",
            &one(k.default.packets),
        )?;
        counter(
            &mut enc,
            "sluice_shield_default_bytes",
            "Bytes (on the wire) of the packets the default decided.",
            &one(k.default.bytes),
        )?;
        counter(
            &mut enc,
            "sluice_shield_undecodable_packets",
            "Frames whose addresses cannot be known (--undecodable decides them).",
            &one(k.undecodable.packets),
        )?;
        counter(
            &mut enc,
            "sluice_shield_undecodable_bytes",
            "Bytes (on the wire) of the undecodable frames.",
            &one(k.undecodable.bytes),
        )?;
        iface_families(&mut enc, m.attached.get().map_or(&[][..], Vec::as_slice), &k.ifaces)?;
        let (state, socket) = &m.control;
        // A reload is in force once the kernel took its program: it fails
        // when the rules do not load (the controller's count) or when the
        // kernel refuses them (the mirror's).
        let failed = state.counts.totals().reloads_failed + k.reloads_failed;
        sluice_policy::exposition::control_families(&mut enc, state, &socket.totals(), Some((k.reloads, failed)))?;
        sluice_policy::exposition::set_families(&mut enc, state)?;
        let modes: Vec<_> = m
            .attached
            .get()
            .into_iter()
            .flatten()
            .map(|a| (vec![("iface", a.iface.clone()), ("mode", a.mode.to_owned())], 1))
            .collect();
        gauge(
            &mut enc,
            "sluice_shield_xdp_mode",
            "1 for each interface the program is attached to, labelled with the XDP mode it runs in (native, generic).",
            &modes,
        )?;
        if let Some((state, shown)) = &m.bgp {
            bgp_families(&mut enc, state, shown)?;
        }
        if let Some(cs) = &m.crowdsec {
            sluice_policy::exposition::crowdsec_families(&mut enc, &cs.counters, &cs.usage())?;
        }
        if let Some((counters, ring)) = m.samples.get() {
            let t = counters.totals();
            let rows: Vec<_> = [
                ("written", t.written),
                ("queue_full", t.lost_queue_full),
                // Kernel-capped samples are over --sample-max-pps too.
                ("over_cap", t.over_cap + ring.over_cap()),
                ("write_error", t.write_errors),
                ("ring_full", ring.lost()),
            ]
            .into_iter()
            .map(|(r, n)| (vec![("result", r.to_owned())], n))
            .collect();
            counter(
                &mut enc,
                "sluice_drop_samples",
                "Dropped frames sampled (--sample-drops, --log-drops), by what became of them.",
                &rows,
            )?;
        }
        gauge(
            &mut enc,
            "sluice_dry_run",
            "1 under --dry-run: nothing is enforced, and the drop counters count what would have been dropped.",
            &[(vec![], i64::from(m.dry_run))],
        )
    }
}

/// `sluice_packets` and `sluice_bytes` by interface and verdict, as the
/// bridge's per port: each attached interface's row (the row of frames
/// from any other interface, which only a test run gives the program, is
/// in the rule counters and in no interface's).
fn iface_families(
    enc: &mut DescriptorEncoder,
    attached: &[Attached],
    rows: &[crate::IfaceCount],
) -> Result<(), std::fmt::Error> {
    let series = |f: fn(&crate::Count) -> u64| -> Vec<_> {
        attached
            .iter()
            .zip(rows)
            .enumerate()
            .flat_map(|(port, (a, c))| {
                [("pass", &c.pass), ("drop", &c.drop)].map(|(verdict, n)| {
                    let labels =
                        vec![("port", port.to_string()), ("iface", a.iface.clone()), ("verdict", verdict.to_owned())];
                    (labels, f(n))
                })
            })
            .collect()
    };
    counter(
        enc,
        "sluice_packets",
        "Packets received on an interface, by the verdict the rules gave them (under --dry-run, drop is what they would have dropped).",
        &series(|c| c.packets),
    )?;
    counter(enc, "sluice_bytes", "Bytes (on the wire) received on an interface, by verdict.", &series(|c| c.bytes))
}

/// The BGP feed's sessions and the routes in the kernel, refused flows by
/// reason (every reason, 0 when none).
fn bgp_families(
    enc: &mut DescriptorEncoder,
    state: &sluice_bgpfeed::BgpState,
    shown: &Mutex<crate::mirror::BgpShown>,
) -> Result<(), std::fmt::Error> {
    state.session_families(enc)?;
    let s = shown.lock().unwrap_or_else(PoisonError::into_inner).clone();
    gauge(
        enc,
        "sluice_bgp_blackholes",
        "Blackhole routes from BGP peers in the kernel program's blackhole set.",
        &[(vec![], s.blackholes as i64)],
    )?;
    gauge(
        enc,
        "sluice_bgp_flows_enforced",
        "FlowSpec flows from BGP peers the kernel program runs (each as one rule or a few).",
        &[(vec![], s.flows_enforced as i64)],
    )?;
    let refused: Vec<_> = crate::flows::REFUSAL_REASONS
        .iter()
        .map(|r| (vec![("reason", (*r).to_owned())], s.refused.get(r).copied().unwrap_or(0) as i64))
        .collect();
    gauge(
        enc,
        "sluice_bgp_flows_refused",
        "FlowSpec flows in force from BGP peers that the kernel program does not run, by reason: rate (a traffic-rate not a whole number of bytes or packets a second), rate_split (a rate over a flow of several rules), offset, icmp_code, tcp_flags, packet_length, dscp, fragment, flow_label (components it cannot match), matches_nothing, too_many_rules, too_many_ranges, shadowed (an earlier refused rate or accept may match its packets first).",
        &refused,
    )
}
