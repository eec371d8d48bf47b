//! The HTTP guard's counters (`sluice_guard::Shared`) as Prometheus metrics:
//! the declared sets ([`CountTotals`](crate::CountTotals),
//! [`GuardTotals`](crate::GuardTotals), the control socket's) as they
//! declare themselves, and by hand only the families keyed by what
//! occurred: per limit, per reason, per JA4, per destination.

use crate::block_forward::ForwardCounters;
use crate::{Limit, Report, Shared};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_control::socket::SocketCounters;
use sluice_metrics::{counter, gauge};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A registry that encodes the guard's counters on every scrape.
///
/// `forward`: the block forwarder's counters, when blocks are forwarded;
/// `socket`: the control socket's, when there is one.
pub fn registry(
    shared: Arc<Shared>,
    forward: Option<Arc<ForwardCounters>>,
    socket: Option<Arc<SocketCounters>>,
) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exporter(shared, forward, socket)));
    registry
}

/// The families written by hand, each keyed by what occurred (the names
/// test checks that nothing else is served undeclared).
pub const DYNAMIC_FAMILIES: &[&str] = &[
    "sluice_guard_breaches",
    "sluice_guard_blocks_refused",
    "sluice_guard_dry_run",
    "sluice_guard_ja4_handshakes",
    "sluice_guard_ja4_refused",
    "sluice_guard_blocks_forwarded",
    "sluice_guard_forward_failures",
    "sluice_guard_blocks_shed",
    "sluice_guard_blocks_expired_unsent",
    "sluice_guard_blocks_pending",
];

/// Every family the declared sets the guard serves declare.
pub fn declared_families() -> Vec<&'static str> {
    use sluice_metrics::counters::families;
    let sets =
        [crate::CountTotals::FAMILIES, crate::GuardTotals::FAMILIES, sluice_control::socket::SocketTotals::FAMILIES];
    sets.into_iter().flat_map(families).collect()
}

/// The guard's counters as Prometheus metrics.
struct Exporter(Arc<Shared>, Option<Arc<ForwardCounters>>, Option<Arc<SocketCounters>>);

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardExporter")
    }
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = self.0.report();
        let (tls, ja4_list) = (self.0.tls.is_some(), self.0.ja4_block.is_some());
        // A family of TLS or of --block-ja4 is served only when that runs.
        let runs = |f: &str| {
            let needs_tls = f.starts_with("sluice_guard_tls_") || f == "sluice_guard_ja4_distinct";
            (tls || !needs_tls) && (ja4_list || !f.starts_with("sluice_guard_ja4_list_"))
        };
        let mut rows = vec![(vec![], r.counts.exported()), (vec![], r.totals.exported())];
        rows.extend(self.2.as_ref().map(|s| (vec![], s.totals().exported())));
        sluice_metrics::counters::encode_where(&mut enc, &rows, runs)?;
        dynamic(&mut enc, &r)?;
        if tls {
            ja4_top(&mut enc, &r)?;
        }
        match &self.1 {
            Some(f) => forwarded(&mut enc, f),
            None => Ok(()),
        }
    }
}

/// The limits requests broke, the blocks the safety net refused, the dry run.
fn dynamic(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    let breaches: Vec<_> =
        Limit::ALL.iter().map(|l| (vec![("limit", l.name().to_owned())], r.breaches[l.name()])).collect();
    counter(enc, "sluice_guard_breaches", "Limit breaches, by limit.", &breaches)?;
    let refused: Vec<_> = r.blocks_refused.iter().map(|(k, v)| (vec![("reason", (*k).to_owned())], *v)).collect();
    counter(
        enc,
        "sluice_guard_blocks_refused",
        "Blocks the safety net refused, by reason (never_block: the client overlaps --never-block; min_prefix: its network is wider than --min-prefix-*).",
        &refused,
    )?;
    gauge(enc, "sluice_guard_dry_run", "1: --dry-run, nothing is enforced.", &[(vec![], i64::from(r.dry_run))])
}

/// The most frequent JA4s.
fn ja4_top(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    let top: Vec<_> = r.ja4_top.iter().map(|t| (vec![("ja4", t.ja4.clone())], t.handshakes)).collect();
    counter(enc, "sluice_guard_ja4_handshakes", "ClientHellos of the 10 most frequent JA4s.", &top)?;
    let refused: Vec<_> = r.ja4_top.iter().map(|t| (vec![("ja4", t.ja4.clone())], t.refused)).collect();
    counter(enc, "sluice_guard_ja4_refused", "Of those, refused at the ClientHello.", &refused)
}

/// The block forwarder, per destination.
fn forwarded(enc: &mut DescriptorEncoder, f: &ForwardCounters) -> Result<(), std::fmt::Error> {
    let per = |v: &[AtomicU64]| -> Vec<(Vec<(&str, String)>, u64)> {
        f.names.iter().zip(v).map(|(n, a)| (vec![("destination", n.clone())], a.load(Ordering::Relaxed))).collect()
    };
    counter(enc, "sluice_guard_blocks_forwarded", "Blocks pushed to each destination.", &per(&f.pushed))?;
    counter(
        enc,
        "sluice_guard_forward_failures",
        "Pushes that failed (the blocks are kept and retried).",
        &per(&f.failed),
    )?;
    counter(
        enc,
        "sluice_guard_blocks_shed",
        "Blocks dropped unsent because too many were waiting (the oldest first).",
        &per(&f.shed),
    )?;
    counter(
        enc,
        "sluice_guard_blocks_expired_unsent",
        "Blocks dropped unsent because they ran out while waiting.",
        &per(&f.expired),
    )?;
    let pending: Vec<_> = per(&f.pending).into_iter().map(|(l, v)| (l, v as i64)).collect();
    gauge(enc, "sluice_guard_blocks_pending", "Blocks waiting for the next push.", &pending)
}
