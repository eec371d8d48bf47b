//! Drops by origin, and the LAPI's usage metrics.
//!
//! Each ban the bouncer adds is tagged with its decision's origin
//! (`crowdsec`, `cscli`, `CAPI`, `lists:NAME`, ...): the set keeps the tag
//! with the element ([`sluice_engine::tags`]) and the judge counts every
//! packet a rule over the set drops under the tag of the element that
//! matched. The exporter serves those counts
//! (`sluice_crowdsec_dropped_packets_total{origin,ip_type}`, `_bytes_total`,
//! `sluice_crowdsec_active_decisions`), and the bouncer pushes them to
//! `POST /v1/usage-metrics` (CrowdSec >= 1.6.3; `cscli metrics show
//! bouncers`) every `--crowdsec-metrics-interval`, as its own bouncers do:
//! `dropped` (units `packet` and `byte`) as what was dropped since the last
//! push that was accepted, `active_decisions` (unit `ip`) as it is now, each
//! with labels `origin` and `ip_type`.

use serde_json::json;
use sluice_engine::{RuleSet, Stats};
use std::time::{Duration, SystemTime};

/// The most distinct origins kept apart; the ones after are counted as
/// `other` (labels stay bounded whatever a LAPI sends).
pub const MAX_ORIGINS: usize = 32;

/// Origin names and the tags they get, for the bouncer's life: a tag means
/// the same origin in every answer, so counts carry across pulls.
#[derive(Debug, Default, Clone)]
pub struct Origins {
    names: Vec<String>,
}

impl Origins {
    /// The tag of `origin` (new origins get the next one; past
    /// [`MAX_ORIGINS`], the tag of `other`).
    pub fn tag(&mut self, origin: &str) -> u16 {
        if let Some(i) = self.names.iter().position(|n| n == origin) {
            return i as u16;
        }
        let name = if self.names.len() + 1 < MAX_ORIGINS { origin } else { "other" };
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i as u16;
        }
        self.names.push(name.to_owned());
        (self.names.len() - 1) as u16
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// A feed whose tags index its own `tag_names` (one answer's origins)
    /// with the tags of this registry instead.
    pub fn globalize(&mut self, feed: &mut crate::sets::Feed) {
        let local = std::mem::take(&mut feed.tag_names);
        let map: Vec<u16> = local.iter().map(|n| self.tag(n)).collect();
        feed.tags.iter_mut().for_each(|t| *t = map[usize::from(*t)]);
        if !feed.tags.is_empty() || !self.names.is_empty() {
            feed.tag_names = self.names.clone();
        }
    }
}

/// One origin's drops and active decisions of one address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginUsage {
    pub origin: String,
    /// `ipv4` or `ipv6`.
    pub ip_type: &'static str,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    /// Elements of the set carrying this origin now.
    pub active: u64,
}

/// Per origin and family: what `stats` counted as dropped by set `set`'s
/// elements and how many it holds in `rules`. Families with nothing to say
/// are left out.
pub fn origin_usage(rules: &RuleSet, set: &str, stats: &Stats) -> Vec<OriginUsage> {
    let Some(tags) = rules.named_index(set).and_then(|i| rules.tags(i)) else { return Vec::new() };
    let mut out = Vec::new();
    for (tag, name) in tags.names().iter().enumerate() {
        for (f, ip_type) in ["ipv4", "ipv6"].into_iter().enumerate() {
            let d = stats.tag_drops.get(tag).map(|c| c[f]).unwrap_or_default();
            let active = tags.counts().get(tag).map_or(0, |c| c[f]);
            if d.packets == 0 && active == 0 {
                continue;
            }
            out.push(OriginUsage {
                origin: name.clone(),
                ip_type,
                dropped_packets: d.packets,
                dropped_bytes: d.bytes,
                active,
            });
        }
    }
    out
}

/// Where the bouncer reads the counts it pushes: the run's rules and
/// counters as the exporter reads them, and the product that counted them
/// (`sluice-bridge`, `sluice-shield`: the remediation component's type
/// and name the LAPI shows).
#[derive(Clone)]
pub struct UsageSource(pub std::sync::Arc<dyn Fn() -> Vec<OriginUsage> + Send + Sync>, pub &'static str);

impl std::fmt::Debug for UsageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageSource")
    }
}

/// The default push interval, and the least the spec allows (less is
/// taken, with a warning: tests want it short).
pub const DEFAULT_METRICS_INTERVAL: f64 = 1800.0;
pub const SPEC_MIN_INTERVAL: f64 = 900.0;

/// Checks `--crowdsec-metrics-interval`: None turns the push off (0).
pub fn metrics_interval(secs: f64) -> Result<Option<Duration>, String> {
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("--crowdsec-metrics-interval {secs}: expected seconds, 0 to turn the push off"));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    if secs < SPEC_MIN_INTERVAL {
        tracing::warn!(
            "--crowdsec-metrics-interval {secs}: below the {SPEC_MIN_INTERVAL} s CrowdSec's spec asks of bouncers \
             (fine for a test, not for a fleet's LAPI)"
        );
    }
    Ok(Some(Duration::from_secs_f64(secs.max(1.0))))
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The OS as the spec names it: `/etc/os-release`'s `ID` and `VERSION_ID`,
/// else `linux` and the kernel's release.
fn os() -> (String, String) {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |k: &str| {
        release.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')).map(|v| v.trim_matches('"').to_owned())
    };
    let kernel = || std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    (field("ID").unwrap_or_else(|| "linux".into()), field("VERSION_ID").unwrap_or_else(kernel))
}

/// What has been pushed, so each push carries the drops since the last
/// one the LAPI accepted.
#[derive(Debug)]
pub struct Pusher {
    /// The remediation component's type and name.
    component: &'static str,
    started: SystemTime,
    /// The time and the cumulative counts of the last accepted push.
    last: SystemTime,
    pushed: Vec<OriginUsage>,
    /// False once the LAPI said it has no such endpoint.
    pub on: bool,
}

impl Pusher {
    pub fn new(component: &'static str, started: SystemTime) -> Pusher {
        Pusher { component, started, last: started, pushed: Vec::new(), on: true }
    }

    /// The body of a push at `now` of `usage` (cumulative counts).
    pub fn body(&self, usage: &[OriginUsage], now: SystemTime) -> serde_json::Value {
        let mut items = Vec::new();
        for u in usage {
            let before = self.pushed.iter().find(|p| p.origin == u.origin && p.ip_type == u.ip_type);
            let (bp, bb) = before.map_or((0, 0), |b| (b.dropped_packets, b.dropped_bytes));
            let labels = json!({ "origin": u.origin, "ip_type": u.ip_type });
            // A counter that went down (counters restart only with the
            // process) is sent whole.
            let delta = |now: u64, then: u64| if now >= then { now - then } else { now };
            items.push(
                json!({ "name": "dropped", "unit": "packet", "value": delta(u.dropped_packets, bp), "labels": labels }),
            );
            items.push(
                json!({ "name": "dropped", "unit": "byte", "value": delta(u.dropped_bytes, bb), "labels": labels }),
            );
            items.push(json!({ "name": "active_decisions", "unit": "ip", "value": u.active, "labels": labels }));
        }
        let (os_name, os_version) = os();
        let window = now.duration_since(self.last).map_or(0, |d| d.as_secs_f64().round() as u64);
        json!({
            "remediation_components": [{
                "version": env!("CARGO_PKG_VERSION"),
                "type": self.component,
                "name": self.component,
                "os": { "name": os_name, "version": os_version },
                "feature_flags": [],
                "utc_startup_timestamp": unix_secs(self.started),
                "metrics": [{
                    "meta": { "window_size_seconds": window, "utc_now_timestamp": unix_secs(now) },
                    "items": items,
                }],
            }]
        })
    }

    /// The push of `usage` at `now` was accepted.
    pub fn accepted(&mut self, usage: Vec<OriginUsage>, now: SystemTime) {
        self.pushed = usage;
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(origin: &str, p: u64, b: u64, active: u64) -> OriginUsage {
        OriginUsage { origin: origin.into(), ip_type: "ipv4", dropped_packets: p, dropped_bytes: b, active }
    }

    #[test]
    fn origins_keep_their_tags_and_stay_bounded() {
        let mut o = Origins::default();
        assert_eq!((o.tag("cscli"), o.tag("crowdsec"), o.tag("cscli")), (0, 1, 0));
        for i in 0..100 {
            o.tag(&format!("lists:{i}"));
        }
        assert_eq!(o.names().len(), MAX_ORIGINS);
        assert_eq!(o.names().last().map(String::as_str), Some("other"));
        assert_eq!(o.tag("lists:99"), o.tag("lists:1000"));
    }

    #[test]
    fn a_push_carries_the_drops_since_the_last_accepted_one() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut p = Pusher::new("sluice-bridge", t0);
        let first = vec![u("cscli", 10, 1000, 2)];
        let body = p.body(&first, t0 + Duration::from_secs(30));
        let rc = &body["remediation_components"][0];
        assert_eq!(rc["type"], "sluice-bridge");
        assert_eq!(rc["utc_startup_timestamp"], 1_700_000_000u64);
        let m = &rc["metrics"][0];
        assert_eq!(m["meta"]["window_size_seconds"], 30);
        assert_eq!(m["meta"]["utc_now_timestamp"], 1_700_000_030u64);
        let items = m["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(
            (items[0]["name"].as_str(), items[0]["unit"].as_str(), items[0]["value"].as_u64()),
            (Some("dropped"), Some("packet"), Some(10))
        );
        assert_eq!(items[2]["value"], 2);
        assert_eq!(items[0]["labels"]["origin"], "cscli");
        // Not accepted: the next push carries them again.
        let again = p.body(&[u("cscli", 15, 1500, 2)], t0 + Duration::from_secs(60));
        assert_eq!(again["remediation_components"][0]["metrics"][0]["items"][0]["value"], 15);
        p.accepted(vec![u("cscli", 15, 1500, 2)], t0 + Duration::from_secs(60));
        let next = p.body(&[u("cscli", 18, 1800, 1), u("CAPI", 4, 400, 9)], t0 + Duration::from_secs(90));
        let items = next["remediation_components"][0]["metrics"][0]["items"].as_array().unwrap().clone();
        let v: Vec<u64> = items.iter().map(|i| i["value"].as_u64().unwrap()).collect();
        assert_eq!(v, vec![3, 300, 1, 4, 400, 9]);
        assert_eq!(next["remediation_components"][0]["metrics"][0]["meta"]["window_size_seconds"], 30);
    }

    #[test]
    fn the_interval_flag() {
        assert_eq!(metrics_interval(0.0), Ok(None));
        assert_eq!(metrics_interval(1800.0), Ok(Some(Duration::from_secs(1800))));
        assert!(metrics_interval(-1.0).is_err() && metrics_interval(f64::NAN).is_err());
        assert_eq!(metrics_interval(2.0), Ok(Some(Duration::from_secs(2))));
    }
}
