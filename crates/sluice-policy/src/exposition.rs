//! The control plane's Prometheus families, for every data plane that
//! runs a [`Controller`](crate::controller::Controller) (the bridge, the
//! shield): its counts as [`ControlCounters`](crate::controller::ControlCounters)
//! and the control socket's counters declare them, and the named sets'
//! sizes, refusals and publish latency. One place, so a family means the
//! same whichever program serves it.

use crate::controller::ControlState;
#[cfg(test)]
use crate::controller::ControlTotals;
use prometheus_client::encoding::DescriptorEncoder;
use sluice_control::socket::SocketTotals;
use sluice_metrics::{counter, gauge};

/// The families `ControlCounters` and `SocketCounters` declare (both count
/// control requests). `reloads`, when given, are the (ok, failed) served
/// as `sluice_reloads` instead of the controller's own: for a data plane
/// whose reloads can still fail after the controller's worked (the
/// shield's kernel may refuse the program).
pub fn control_families(
    enc: &mut DescriptorEncoder,
    state: &ControlState,
    socket: &SocketTotals,
    reloads: Option<(u64, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut counts = state.counts.totals();
    if let Some((ok, failed)) = reloads {
        counts.reloads_ok = ok;
        counts.reloads_failed = failed;
    }
    // The controller's first: the help of the family both count into is its.
    sluice_metrics::counters::encode(enc, &[(vec![], counts.exported()), (vec![], socket.exported())])
}

/// The families [`set_families`] writes.
pub const SET_FAMILIES: &[&str] = &[
    "sluice_set_entries",
    "sluice_set_merges",
    "sluice_set_maxelem",
    "sluice_set_refused",
    "sluice_set_publish_latency_ns",
];

/// The named sets: their elements by part, merges, maxelem, refused adds,
/// and the publish latency of runtime changes.
pub fn set_families(enc: &mut DescriptorEncoder, c: &ControlState) -> Result<(), std::fmt::Error> {
    let mut sets = Vec::new();
    let mut merges = Vec::new();
    for row in c.sets() {
        for (part, v) in [("base", row.base), ("added", row.added), ("deleted", row.deleted), ("live", row.entries)] {
            sets.push((vec![("set", row.name.clone()), ("part", part.to_owned())], v as i64));
        }
        merges.push((vec![("set", row.name.clone())], row.merges));
    }
    gauge(
        enc,
        "sluice_set_entries",
        "Elements of each named set: in its base tables, added and deleted at runtime, live (base - deleted + added).",
        &sets,
    )?;
    counter(enc, "sluice_set_merges", "Runtime deltas folded into new base tables, per set.", &merges)?;
    let maxelem: Vec<_> = c.sets().into_iter().map(|row| (vec![("set", row.name)], row.maxelem as i64)).collect();
    gauge(enc, "sluice_set_maxelem", "The most elements each named set holds; adds beyond are refused.", &maxelem)?;
    // Every set with every reason, zeros too, so a rate has a series
    // from the start; then what was counted.
    let mut refused: std::collections::BTreeMap<(String, &str), u64> = c
        .sets()
        .into_iter()
        .flat_map(|row| {
            let reasons = sluice_rules::Refusal::REASONS.into_iter().chain([crate::sets::REFUSED_FULL]);
            reasons.map(move |r| ((row.name.clone(), r), 0))
        })
        .collect();
    refused.extend(c.refusals.counts().into_iter().map(|(set, reason, n)| ((set, reason), n)));
    let refused: Vec<_> =
        refused.into_iter().map(|((set, reason), n)| (vec![("set", set), ("reason", reason.to_owned())], n)).collect();
    counter(
        enc,
        "sluice_set_refused",
        "Runtime adds refused, per set and reason (full: past the set's maxelem; never_block: it overlaps --never-block; min_prefix: wider than --min-prefix-*).",
        &refused,
    )?;
    if let Some((p50, p99, max)) = c.publish_latency() {
        let q: Vec<_> = [("0.5", p50), ("0.99", p99), ("1", max)]
            .iter()
            .map(|(q, v)| (vec![("quantile", (*q).to_owned())], *v as i64))
            .collect();
        gauge(
            enc,
            "sluice_set_publish_latency_ns",
            "Publish latency of runtime changes over the last 4096 requests (ns), by quantile.",
            &q,
        )?;
    }
    Ok(())
}

/// The families [`crowdsec_families`] writes.
pub const CROWDSEC_FAMILIES: &[&str] = &[
    "sluice_crowdsec_decisions",
    "sluice_crowdsec_dropped_packets",
    "sluice_crowdsec_dropped_bytes",
    "sluice_crowdsec_active_decisions",
];

/// The CrowdSec feed's families keyed by what occurred (its counts are
/// declared: [`BouncerTotals`](crate::crowdsec::BouncerTotals)): its
/// decisions by what they were and what was done, and `usage`, the set's
/// drops and elements by the origin of the decision.
pub fn crowdsec_families(
    enc: &mut DescriptorEncoder,
    cs: &crate::crowdsec::BouncerCounters,
    usage: &[crate::usage::OriginUsage],
) -> Result<(), std::fmt::Error> {
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
    let by = |f: fn(&crate::usage::OriginUsage) -> u64| -> Vec<(Vec<(&str, String)>, u64)> {
        usage.iter().map(|u| (vec![("origin", u.origin.clone()), ("ip_type", u.ip_type.to_owned())], f(u))).collect()
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
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_counts_into_a_family_the_control_plane_declares() {
        for f in sluice_metrics::counters::families(SocketTotals::FAMILIES) {
            assert!(ControlTotals::FAMILIES.contains(&f), "{f}");
        }
    }
}
