//! The HTTP guard's counters (`sluice_guard::Shared`) as Prometheus metrics.

use crate::block_forward::ForwardCounters;
use crate::{CountTotals, Limit, Report, Shared};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_control::socket::{SocketCounters, SocketTotals};
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
        counts(&mut enc, &r.counts, self.0.tls.is_some())?;
        requests_and_blocks(&mut enc, &r)?;
        connections(&mut enc, &r)?;
        if self.0.tls.is_some() {
            tls(&mut enc, &r)?;
        }
        if self.0.ja4_block.is_some() {
            ja4_list(&mut enc, &r)?;
        }
        if let Some(f) = &self.1 {
            forwarded(&mut enc, f)?;
        }
        if let Some(s) = &self.2 {
            // As the socket declares them: one family, by result.
            let rows = [(vec![], s.totals().exported())];
            for family in sluice_metrics::counters::families(SocketTotals::FAMILIES) {
                counter(
                    &mut enc,
                    family,
                    "Control socket requests the socket itself answered, by result (refused: the peer is not allowed; busy; too_large; timed_out; malformed; forbidden: the peer's role).",
                    &sluice_metrics::counters::samples(family, &rows),
                )?;
            }
        }
        Ok(())
    }
}

/// The threads' counts, as `Counts` declares their families (the TLS ones
/// when TLS is on).
fn counts(enc: &mut DescriptorEncoder, t: &CountTotals, tls: bool) -> Result<(), std::fmt::Error> {
    for (e, v) in t.exported() {
        if tls || !e.family.starts_with("sluice_guard_tls_") {
            one(enc, e.family, help(e.family), v)?;
        }
    }
    Ok(())
}

/// The help text of a `Counts` family.
fn help(family: &str) -> &'static str {
    match family {
        "sluice_guard_requests" => "Request heads received.",
        "sluice_guard_forwarded" => "Requests forwarded upstream.",
        "sluice_guard_bytes_in" => "Bytes read from clients.",
        "sluice_guard_bytes_out" => "Bytes written to clients.",
        "sluice_guard_upstream_errors" => "Upstream connects, writes or responses that failed.",
        "sluice_guard_upstream_timeouts" => {
            "Upstreams that did not connect or answer in time (504, or the client closed)."
        }
        "sluice_guard_upstream_queued" => "Requests that waited for an upstream slot (--upstream-max-inflight).",
        "sluice_guard_upstream_queued_new" => {
            "Of those, from new clients (not served before, or near a request limit)."
        }
        "sluice_guard_upstream_queue_wait_us" => "Microseconds those requests waited for a slot, in all.",
        "sluice_guard_upstream_pipelined" => "Requests written behind another on one upstream connection.",
        "sluice_guard_upstream_resent" => {
            "Of those, sent again on another connection (theirs closed, failed, or was stuck)."
        }
        "sluice_guard_upstream_queue_timeouts" => "Requests that waited --upstream-queue-timeout for a slot: 503.",
        "sluice_guard_tunnels" => "Connections that became tunnels (an upgrade answered 101: WebSocket).",
        "sluice_guard_tunnels_idle_closed" => "Tunnels closed for moving no byte either way for --tunnel-timeout.",
        "sluice_guard_refused_at_accept" => "Connections closed at accept (blocked, or no room to track).",
        "sluice_guard_connections" => "Client connections accepted.",
        "sluice_guard_closed_idle" => "Connections closed after the header timeout without a byte of a request.",
        "sluice_guard_shed_waiting" => "Connections waiting longest for a request, closed at --max-connections.",
        "sluice_guard_refused_max_connections" => "New connections closed at --max-connections, none waiting to shed.",
        "sluice_guard_refused_untrusted_proxy" => {
            "--proxy-protocol: connections from outside --trusted-proxies, closed at accept."
        }
        "sluice_guard_refused_forwarded_blocked" => {
            "--client-ip-header: requests of a blocked client behind a trusted proxy, answered 403."
        }
        "sluice_guard_proxy_header_errors" => {
            "--proxy-protocol: connections without a valid PROXY header within the header timeout, closed."
        }
        "sluice_guard_tls_handshakes" => "TLS handshakes finished.",
        "sluice_guard_tls_handshake_errors" => "TLS connections that failed before their handshake finished.",
        "sluice_guard_tls_handshake_timeouts" => "TLS connections closed at --tls-handshake-timeout.",
        _ => "A guard counter.",
    }
}

/// The limits requests broke, and the blocks that followed.
fn requests_and_blocks(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    let breaches: Vec<_> =
        Limit::ALL.iter().map(|l| (vec![("limit", l.name().to_owned())], r.breaches[l.name()])).collect();
    counter(enc, "sluice_guard_breaches", "Limit breaches, by limit.", &breaches)?;
    one(enc, "sluice_guard_blocks", "Client IPs blocked.", r.blocked_total)?;
    gauge(enc, "sluice_guard_blocks_active", "Client IPs blocked now.", &[(vec![], r.blocked_active as i64)])?;
    let refused: Vec<_> = r.blocks_refused.iter().map(|(k, v)| (vec![("reason", (*k).to_owned())], *v)).collect();
    counter(
        enc,
        "sluice_guard_blocks_refused",
        "Blocks the safety net refused, by reason (never_block: the client overlaps --never-block; min_prefix: its network is wider than --min-prefix-*).",
        &refused,
    )?;
    Ok(())
}

/// What happened to connections: accepted, shed, refused, timed out.
fn connections(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    gauge(enc, "sluice_guard_max_connections", "--max-connections as applied.", &[(vec![], r.max_connections as i64)])?;
    gauge(enc, "sluice_guard_dry_run", "1: --dry-run, nothing is enforced.", &[(vec![], i64::from(r.dry_run))])?;
    one(enc, "sluice_guard_would_block", "--dry-run: client IPs an enforcing run would have blocked.", r.would_block)?;
    gauge(enc, "sluice_guard_clients_tracked", "Client IPs with state.", &[(vec![], r.clients_tracked as i64)])?;
    one(enc, "sluice_guard_clients_evicted", "Idle client states evicted for room.", r.clients_evicted)?;
    Ok(())
}

/// TLS: handshakes, certificate reloads, the most frequent JA4s.
fn tls(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    let reloads = [
        (vec![("result", "ok".to_owned())], r.tls_reloads_ok),
        (vec![("result", "failed".into())], r.tls_reloads_failed),
    ];
    counter(enc, "sluice_guard_tls_reloads", "Certificate reloads (SIGHUP), by result.", &reloads)?;
    let top: Vec<_> = r.ja4_top.iter().map(|t| (vec![("ja4", t.ja4.clone())], t.handshakes)).collect();
    counter(enc, "sluice_guard_ja4_handshakes", "ClientHellos of the 10 most frequent JA4s.", &top)?;
    let refused: Vec<_> = r.ja4_top.iter().map(|t| (vec![("ja4", t.ja4.clone())], t.refused)).collect();
    counter(enc, "sluice_guard_ja4_refused", "Of those, refused at the ClientHello.", &refused)?;
    let distinct = [(vec![], r.ja4_distinct as i64)];
    gauge(enc, "sluice_guard_ja4_distinct", "Distinct JA4s seen (at most 10,000 counted).", &distinct)?;
    Ok(())
}

/// `--block-ja4`: the list and its rereads.
fn ja4_list(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    let n = [(vec![], r.ja4_list_entries as i64)];
    gauge(enc, "sluice_guard_ja4_list_entries", "--block-ja4: fingerprints listed.", &n)?;
    let reloads = [
        (vec![("result", "ok".to_owned())], r.ja4_list_reloads_ok),
        (vec![("result", "failed".into())], r.ja4_list_reloads_failed),
    ];
    counter(enc, "sluice_guard_ja4_list_reloads", "--block-ja4 rereads (SIGHUP), by result.", &reloads)?;
    Ok(())
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
    gauge(enc, "sluice_guard_blocks_pending", "Blocks waiting for the next push.", &pending)?;
    Ok(())
}

/// A counter without labels.
fn one(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    counter(enc, name, help, &[(vec![], v)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counted_family_has_its_own_help() {
        let generic = help("");
        for f in sluice_metrics::counters::families(CountTotals::FAMILIES) {
            assert_ne!(help(f), generic, "{f} has no help text of its own");
        }
    }
}
