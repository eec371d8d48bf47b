//! The HTTP guard's counters (`sluice_guard::Shared`) as Prometheus metrics.

use crate::block_forward::ForwardCounters;
use crate::{Limit, Report, Shared};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use sluice_metrics::{counter, gauge};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A registry that encodes the guard's counters on every scrape.
///
/// `forward`: the block forwarder's counters, when blocks are forwarded.
pub fn registry(shared: Arc<Shared>, forward: Option<Arc<ForwardCounters>>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exporter(shared, forward)));
    registry
}

/// The guard's counters as Prometheus metrics.
struct Exporter(Arc<Shared>, Option<Arc<ForwardCounters>>);

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardExporter")
    }
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = self.0.report();
        requests_and_blocks(&mut enc, &r)?;
        connections(&mut enc, &r)?;
        upstream_and_bytes(&mut enc, &r)?;
        if self.0.tls.is_some() {
            tls(&mut enc, &r)?;
        }
        if self.0.ja4_block.is_some() {
            ja4_list(&mut enc, &r)?;
        }
        if let Some(f) = &self.1 {
            forwarded(&mut enc, f)?;
        }
        Ok(())
    }
}

/// Requests, the limits they broke, and the blocks that followed.
fn requests_and_blocks(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    one(enc, "sluice_guard_requests", "Request heads received.", r.requests)?;
    one(enc, "sluice_guard_forwarded", "Requests forwarded upstream.", r.forwarded)?;
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
    one(
        enc,
        "sluice_guard_closed_idle",
        "Connections closed after the header timeout without a byte of a request.",
        r.closed_idle,
    )?;
    one(
        enc,
        "sluice_guard_shed_waiting",
        "Connections waiting longest for a request, closed at --max-connections.",
        r.shed_waiting,
    )?;
    one(
        enc,
        "sluice_guard_refused_max_connections",
        "New connections closed at --max-connections, none waiting to shed.",
        r.refused_max_connections,
    )?;
    one(
        enc,
        "sluice_guard_refused_untrusted_proxy",
        "--proxy-protocol: connections from outside --trusted-proxies, closed at accept.",
        r.refused_untrusted_proxy,
    )?;
    one(
        enc,
        "sluice_guard_refused_forwarded_blocked",
        "--client-ip-header: requests of a blocked client behind a trusted proxy, answered 403.",
        r.refused_forwarded_blocked,
    )?;
    one(
        enc,
        "sluice_guard_proxy_header_errors",
        "--proxy-protocol: connections without a valid PROXY header within the header timeout, closed.",
        r.proxy_header_errors,
    )?;
    gauge(enc, "sluice_guard_max_connections", "--max-connections as applied.", &[(vec![], r.max_connections as i64)])?;
    gauge(enc, "sluice_guard_dry_run", "1: --dry-run, nothing is enforced.", &[(vec![], i64::from(r.dry_run))])?;
    one(enc, "sluice_guard_would_block", "--dry-run: client IPs an enforcing run would have blocked.", r.would_block)?;
    one(
        enc,
        "sluice_guard_refused_at_accept",
        "Connections closed at accept (blocked, or no room to track).",
        r.refused_at_accept,
    )?;
    gauge(enc, "sluice_guard_clients_tracked", "Client IPs with state.", &[(vec![], r.clients_tracked as i64)])?;
    one(enc, "sluice_guard_clients_evicted", "Idle client states evicted for room.", r.clients_evicted)?;
    Ok(())
}

/// The upstream side, and the bytes each way.
fn upstream_and_bytes(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    one(enc, "sluice_guard_upstream_errors", "Upstream connects, writes or responses that failed.", r.upstream_errors)?;
    one(
        enc,
        "sluice_guard_upstream_timeouts",
        "Upstreams that did not connect or answer in time (504, or the client closed).",
        r.upstream_timeouts,
    )?;
    one(enc, "sluice_guard_connections", "Client connections accepted.", r.connections)?;
    one(enc, "sluice_guard_bytes_in", "Bytes read from clients.", r.bytes_in)?;
    one(enc, "sluice_guard_bytes_out", "Bytes written to clients.", r.bytes_out)?;
    Ok(())
}

/// TLS: handshakes, certificate reloads, the most frequent JA4s.
fn tls(enc: &mut DescriptorEncoder, r: &Report) -> Result<(), std::fmt::Error> {
    one(enc, "sluice_guard_tls_handshakes", "TLS handshakes finished.", r.tls_handshakes)?;
    one(
        enc,
        "sluice_guard_tls_handshake_errors",
        "TLS connections that failed before their handshake finished.",
        r.tls_handshake_errors,
    )?;
    one(
        enc,
        "sluice_guard_tls_handshake_timeouts",
        "TLS connections closed at --tls-handshake-timeout.",
        r.tls_handshake_timeouts,
    )?;
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
