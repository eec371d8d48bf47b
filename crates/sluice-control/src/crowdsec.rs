//! The bridge as a CrowdSec bouncer: a thread that streams decisions from
//! a CrowdSec Local API (`GET /v1/decisions/stream`, `startup=true` first,
//! then the changes since the last pull, every interval) and hands them to
//! the controller as a [`Feed`] for one dynamic set: `ban` decisions of
//! scope `Ip` and `Range` go in with their remaining duration as timeout,
//! deleted ones come out; other types and scopes are counted, not applied.
//!
//! The delta stream can miss decisions (a bouncer that pulled 100,000 saw
//! 50 never arrive until a restart; sluice's own first try missed 100: the
//! LAPI hands out what was committed since the last pull by creation time,
//! so decisions created before a pull and committed after it are never
//! streamed). So a full pull replaces the set's content in one publication
//! (no gap: nothing is removed before the new content is in) and counts
//! what it repaired: every `resync`, and once the stream goes quiet after
//! it brought changes (a burst such as `cscli decisions import` is then
//! complete within a few intervals), no more often than every 10 s and 10
//! times the last full pull's duration. When the LAPI is
//! unreachable or answers what does not parse, the set keeps what it has,
//! the pull is retried with backoff, `up` goes to 0, and the first pull
//! that works again is a full one.

use crate::control::Event;
use crate::sets::{Feed, FeedOutcome};
use serde::Deserialize;
use sluice_rules::Prefix;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// Where and how often to pull.
#[derive(Debug, Clone)]
pub struct BouncerConfig {
    /// The LAPI's base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// The bouncer's API key (`cscli bouncers add NAME`).
    pub key: String,
    pub interval: Duration,
    /// How often a full pull repairs the set.
    pub resync: Duration,
    /// The dynamic set the decisions go into.
    pub set: String,
}

/// A decision's (origin, type, scope, what was done with it).
pub type DecisionKey = (String, String, String, &'static str);

impl BouncerConfig {
    /// [`BouncerConfig::new`] when both the URL and the key file are given
    /// (`--crowdsec-url`, `--crowdsec-key-file`), else no bouncer.
    pub fn from_flags(
        url: Option<&str>,
        key_file: Option<&std::path::Path>,
        interval: f64,
        resync: f64,
        set: &str,
    ) -> Result<Option<Self>, String> {
        match (url, key_file) {
            (Some(url), Some(key_file)) => Self::new(url, key_file, interval, resync, set).map(Some),
            _ => Ok(None),
        }
    }

    /// From the flags: the key read from `key_file`, the URL checked.
    pub fn new(url: &str, key_file: &std::path::Path, interval: f64, resync: f64, set: &str) -> Result<Self, String> {
        if url.starts_with("https://") {
            return Err(format!(
                "--crowdsec-url {url}: https is not supported yet; use the LAPI's http listener on loopback or a local TLS tunnel"
            ));
        }
        if !url.starts_with("http://") {
            return Err(format!("--crowdsec-url {url}: expected http://HOST:PORT"));
        }
        for (flag, v) in [("--crowdsec-interval", interval), ("--crowdsec-resync", resync)] {
            if !(v.is_finite() && v >= 0.05) {
                return Err(format!("{flag} must be a number of seconds, at least 0.05"));
            }
        }
        let key = std::fs::read_to_string(key_file)
            .map_err(|e| format!("--crowdsec-key-file {}: {e}", key_file.display()))?
            .trim()
            .to_owned();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!(
                "--crowdsec-key-file {}: expected one API key (cscli bouncers add NAME -o raw)",
                key_file.display()
            ));
        }
        Ok(BouncerConfig {
            url: url.to_owned(),
            key,
            interval: Duration::from_secs_f64(interval),
            resync: Duration::from_secs_f64(resync),
            set: set.to_owned(),
        })
    }
}

/// What the bouncer counts (the metrics read it).
#[derive(Debug, Default)]
pub struct BouncerCounters {
    /// 1 while the last pull worked.
    pub up: AtomicU64,
    /// Unix time (ms) of the last pull that worked.
    pub last_pull_ms: AtomicU64,
    pub pulls_ok: AtomicU64,
    pub pulls_failed: AtomicU64,
    /// Duration (µs) of the last pull that worked, request to publication.
    pub last_pull_us: AtomicU64,
    /// Elements a full pull added or removed that the stream had not.
    pub repaired: AtomicU64,
    /// Decisions by (origin, type, scope, what was done).
    decisions: Mutex<BTreeMap<DecisionKey, u64>>,
}

impl BouncerCounters {
    /// Decisions counted by (origin, type, scope, action): `added`,
    /// `deleted`, `ignored` (a type or scope not applied, or a bad value).
    pub fn decisions(&self) -> Vec<(DecisionKey, u64)> {
        self.decisions.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    fn count(&self, d: &Decision, action: &'static str) {
        let key = (d.origin.clone(), d.kind.clone(), d.scope.clone(), action);
        *self.decisions.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default() += 1;
    }
}

/// One decision as the LAPI sends it.
#[derive(Debug, Clone, Deserialize)]
pub struct Decision {
    #[serde(default)]
    pub origin: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub value: String,
    /// A Go duration ("3h59m58.5s"): what is left of the decision.
    #[serde(default)]
    pub duration: String,
}

/// `/v1/decisions/stream`'s answer.
#[derive(Debug, Deserialize)]
pub struct Stream {
    #[serde(default)]
    pub new: Option<Vec<Decision>>,
    #[serde(default)]
    pub deleted: Option<Vec<Decision>>,
}

/// A Go `time.Duration` string in seconds: `[-]` then number+unit pairs
/// (`h`, `m`, `s`, `ms`, `us`/`µs`, `ns`), e.g. `1h2m3.5s`, `-11.6ms`.
pub fn go_duration(s: &str) -> Option<f64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0.0);
    }
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (unit, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find(|(u, _)| rest.starts_with(u))
        .map(|(u, f)| (*f, u.len()))?;
        total += num * unit;
        rest = &rest[len..];
    }
    Some(if neg { -total } else { total })
}

/// The element a decision bans, if it is one sluice applies.
fn element(d: &Decision) -> Option<Prefix> {
    if !d.kind.eq_ignore_ascii_case("ban") {
        return None;
    }
    match d.scope.to_ascii_lowercase().as_str() {
        "ip" => d.value.parse::<std::net::IpAddr>().ok().map(Prefix::host),
        "range" => d.value.parse::<Prefix>().ok().filter(|p| !p.covers_all()),
        _ => None,
    }
}

/// A stream answer as a feed for `set`, counting every decision.
pub fn to_feed(s: Stream, set: &str, full: bool, counters: &BouncerCounters) -> Feed {
    let mut feed = Feed { set: set.to_owned(), full, ..Feed::default() };
    for d in s.new.unwrap_or_default() {
        let secs = go_duration(&d.duration);
        match (element(&d), secs) {
            (Some(p), Some(secs)) if secs > 0.0 => {
                counters.count(&d, "added");
                feed.adds.push((p, Some(secs.ceil().min(f64::from(u32::MAX)) as u32)));
            }
            _ => counters.count(&d, "ignored"),
        }
    }
    for d in s.deleted.unwrap_or_default() {
        match element(&d) {
            Some(p) => {
                counters.count(&d, "deleted");
                feed.dels.push(p);
            }
            None => counters.count(&d, "ignored"),
        }
    }
    // A full pull's content is the set; a delete in it means nothing more.
    if full {
        feed.dels.clear();
    }
    feed
}

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{0}")]
    Http(String),
    #[error("the answer is not a decision stream: {0}")]
    Parse(String),
    #[error("the bridge is stopping")]
    Stopping,
    #[error("the set: {0}")]
    Set(String),
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One pull: the stream's answer.
pub fn pull(agent: &ureq::Agent, cfg: &BouncerConfig, startup: bool) -> Result<Stream, PullError> {
    let url = format!("{}/v1/decisions/stream?startup={startup}", cfg.url.trim_end_matches('/'));
    let resp = agent
        .get(&url)
        .set("X-Api-Key", &cfg.key)
        .set("User-Agent", concat!("sluice-bouncer/", env!("CARGO_PKG_VERSION")))
        .call()
        .map_err(|e| match e {
            ureq::Error::Status(code, r) => {
                let why = if code == 403 { " (is the API key right? cscli bouncers list)" } else { "" };
                PullError::Http(format!("{url}: HTTP {code} {}{why}", r.status_text()))
            }
            e => PullError::Http(format!("{url}: {e}")),
        })?;
    // Parsed as it streams in: a full pull of 100,000 decisions is about
    // 15 MB (ureq's `into_string` stops at 10 MB).
    let reader = std::io::BufReader::new(resp.into_reader().take(MAX_ANSWER));
    serde_json::from_reader(reader).map_err(|e| PullError::Parse(format!("{url}: {e}")))
}

/// The largest answer read (about 7 million decisions).
pub const MAX_ANSWER: u64 = 1 << 30;

/// The least time between two full pulls made because the stream went quiet.
pub const SETTLE_GAP: Duration = Duration::from_secs(10);

/// Runs the bouncer until `stop`: pulls, feeds the controller, backs off
/// on failure.
/// Starts [`run`] on a thread of its own (`sluice-crowdsec`), logging what it pulls from where.
pub fn spawn(
    cfg: BouncerConfig,
    events: Sender<Event>,
    stop: &Arc<AtomicBool>,
    counters: &Arc<BouncerCounters>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    tracing::info!("crowdsec bouncer pulling {} every {:?} into set `{}`", cfg.url, cfg.interval, cfg.set);
    let (stop, counters) = (Arc::clone(stop), Arc::clone(counters));
    std::thread::Builder::new().name("sluice-crowdsec".into()).spawn(move || run(cfg, events, stop, counters))
}

pub fn run(cfg: BouncerConfig, events: Sender<Event>, stop: Arc<AtomicBool>, counters: Arc<BouncerCounters>) {
    let agent =
        ureq::AgentBuilder::new().timeout_connect(Duration::from_secs(5)).timeout(Duration::from_secs(60)).build();
    let mut full = true;
    let mut first = true;
    let mut last_full = Instant::now();
    let mut last_full_took = Duration::ZERO;
    // Changes streamed since the last full pull.
    let mut streamed = false;
    let mut failures = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if last_full.elapsed() >= cfg.resync {
            full = true;
        }
        let started = Instant::now();
        let result = pull(&agent, &cfg, full).and_then(|s| {
            let feed = to_feed(s, &cfg.set, full, &counters);
            let (tx, rx) = channel();
            events.send(Event::Feed(feed, tx)).map_err(|_| PullError::Stopping)?;
            let r: Result<FeedOutcome, String> = rx.recv().map_err(|_| PullError::Stopping)?;
            r.map_err(PullError::Set)
        });
        match result {
            Ok(out) => {
                counters.up.store(1, Ordering::Relaxed);
                counters.pulls_ok.fetch_add(1, Ordering::Relaxed);
                counters.last_pull_ms.store(unix_ms(), Ordering::Relaxed);
                counters.last_pull_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                if failures > 0 {
                    tracing::info!(
                        event = "feed_up",
                        "crowdsec: {} answers again after {failures} failed pull(s)",
                        cfg.url
                    );
                }
                if full && !first {
                    let fixed = out.added + out.deleted;
                    counters.repaired.fetch_add(fixed as u64, Ordering::Relaxed);
                    if fixed > 0 {
                        tracing::warn!(
                            event = "feed_repaired",
                            "crowdsec: the full pull repaired set `{}`: {} decision(s) the stream had not brought, {} it had not removed",
                            cfg.set,
                            out.added,
                            out.deleted
                        );
                    }
                }
                let was_full = full;
                full = false;
                if was_full {
                    last_full = Instant::now();
                    last_full_took = started.elapsed();
                    streamed = false;
                    if first {
                        tracing::info!(
                            event = "feed_up",
                            bans = out.added,
                            "crowdsec: {} ban(s) from {} in set `{}`",
                            out.added,
                            cfg.url,
                            cfg.set
                        );
                    }
                } else if out.added + out.deleted > 0 {
                    streamed = true;
                } else if streamed && last_full.elapsed() >= (last_full_took * 10).max(SETTLE_GAP) {
                    // Quiet after a burst: make sure the burst is all here.
                    full = true;
                }
                first = false;
                failures = 0;
            }
            Err(PullError::Stopping) => return,
            Err(e) => {
                counters.up.store(0, Ordering::Relaxed);
                counters.pulls_failed.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                // Say so at once, then now and then; enforcement goes on.
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(
                        event = "feed_down",
                        failures,
                        "crowdsec: pull {failures} failed, enforcing the {} decision set as it is: {e}",
                        cfg.set
                    );
                }
                // Whatever the stream sent meanwhile is repaired by a full pull.
                full = true;
            }
        }
        let wait = if failures == 0 {
            cfg.interval
        } else {
            (cfg.interval * 2u32.saturating_pow(failures.min(5) - 1)).min(cfg.interval.max(Duration::from_secs(10)))
        };
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20).min(wait));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("29m59.5s"), Some(1799.5));
        assert_eq!(go_duration("1h0m0s"), Some(3600.0));
        assert_eq!(go_duration("720h"), Some(2_592_000.0));
        assert!((go_duration("-11.605761ms").unwrap() + 0.011605761).abs() < 1e-12);
        assert!((go_duration("1.5µs").unwrap() - 1.5e-6).abs() < 1e-15);
        assert_eq!(go_duration("0"), Some(0.0));
        assert_eq!(go_duration(""), None);
        assert_eq!(go_duration("5x"), None);
        assert_eq!(go_duration("h"), None);
    }

    #[test]
    fn bans_of_ip_and_range_apply_and_the_rest_is_counted() {
        let s: Stream = serde_json::from_str(
            r#"{"deleted":[{"duration":"-1ms","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.9"}],
                "new":[{"duration":"29m59.5s","origin":"cscli","scope":"Range","type":"ban","value":"198.51.100.0/24"},
                       {"duration":"1h","origin":"crowdsec","scope":"Ip","type":"ban","value":"2001:db8::1"},
                       {"duration":"1h","origin":"crowdsec","scope":"Ip","type":"captcha","value":"192.0.2.1"},
                       {"duration":"1h","origin":"CAPI","scope":"Country","type":"ban","value":"FR"},
                       {"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"not-an-ip"},
                       {"duration":"-5s","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.7"}]}"#,
        )
        .unwrap();
        let c = BouncerCounters::default();
        let f = to_feed(s, "crowdsec", false, &c);
        assert_eq!(
            f.adds,
            vec![("198.51.100.0/24".parse().unwrap(), Some(1800)), ("2001:db8::1".parse().unwrap(), Some(3600))]
        );
        assert_eq!(f.dels, vec!["192.0.2.9".parse().unwrap()]);
        let d = c.decisions();
        let n = |o: &str, t: &str, s: &str, a: &str| {
            d.iter().find(|(k, _)| (k.0.as_str(), k.1.as_str(), k.2.as_str(), k.3) == (o, t, s, a)).map_or(0, |x| x.1)
        };
        assert_eq!(n("crowdsec", "captcha", "Ip", "ignored"), 1);
        assert_eq!(n("CAPI", "ban", "Country", "ignored"), 1);
        assert_eq!(n("cscli", "ban", "Ip", "ignored"), 2, "a bad value and an expired one");
        assert_eq!(n("cscli", "ban", "Ip", "deleted"), 1);
        let empty: Stream = serde_json::from_str(r#"{"deleted":null,"new":null}"#).unwrap();
        assert!(to_feed(empty, "crowdsec", true, &c).adds.is_empty());
    }
}
