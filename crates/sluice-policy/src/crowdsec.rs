//! The bridge as a CrowdSec bouncer: a thread that streams decisions from
//! a CrowdSec Local API (`GET /v1/decisions/stream`, `startup=true` first,
//! then the changes since the last pull, every interval) and hands them to
//! the controller as a [`Feed`] for one dynamic set: `ban` decisions (or
//! those of the types `--crowdsec-types` names) of
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
//!
//! The LAPI is trusted with decisions, not with this process's memory or
//! its metrics: an answer is parsed as it streams in, one decision at a
//! time, into the feed (memory is about the decisions kept, not the JSON);
//! it is refused whole past `--crowdsec-max-answer` bytes or with a JSON
//! string over [`MAX_STRING`] bytes; a decision with a field over
//! [`MAX_FIELD`] bytes is skipped and counted; the labels its strings
//! become are from a fixed list ([`label`]); a redirect is refused, so the
//! API key goes nowhere but `--crowdsec-url`.

use crate::controller::Event;
use crate::sets::{Feed, FeedOutcome};
use crate::usage::{Origins, Pusher, UsageSource};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use sluice_control::lapi::{agent, redirect, secret_file_warning, LapiTls};
use sluice_control::safety::Gate;
use sluice_rules::Prefix;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// Where and how often to pull. Its `Debug` leaves the key out.
#[derive(Clone)]
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
    /// The largest answer read (`--crowdsec-max-answer`); a larger one is
    /// refused whole.
    pub max_answer: u64,
    /// What a ban is checked against (`--never-block`, `--min-prefix-*`)
    /// and where its refusal is counted: a refused decision is skipped,
    /// the others applied.
    pub gate: Gate,
    /// Which decisions the LAPI streams (`--crowdsec-origins`, ...).
    pub filters: StreamFilters,
    /// The decision types enforced as bans (`--crowdsec-types`, the
    /// firewall bouncer's `supported_decisions_types`), compared ignoring
    /// case; empty: `ban` alone. Others are counted as ignored.
    pub types: Vec<String>,
    /// `--geo-db`: bans of scope `Country` and `AS` become their networks.
    pub geo: Option<Arc<GeoScopes>>,
    /// An `https://` URL's TLS (its roots, and a client certificate).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// How often drops by origin go to `POST /v1/usage-metrics`
    /// (`--crowdsec-metrics-interval`; None: never), and where they are
    /// read (the bridge's counters; None: nothing to push).
    pub metrics_interval: Option<Duration>,
    pub usage: Option<UsageSource>,
}

impl fmt::Debug for BouncerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BouncerConfig")
            .field("url", &self.url)
            .field("key", &if self.key.is_empty() { "none" } else { "(hidden)" })
            .field("interval", &self.interval)
            .field("resync", &self.resync)
            .field("set", &self.set)
            .field("max_answer", &self.max_answer)
            .field("gate", &self.gate)
            .field("filters", &self.filters)
            .field("types", &self.types)
            .field("geo", &self.geo)
            .field("tls", &self.tls.is_some())
            .field("metrics_interval", &self.metrics_interval)
            .field("usage", &self.usage)
            .finish()
    }
}

/// `--crowdsec-interval`'s default, in seconds: CrowdSec's own bouncers'
/// `update_frequency`.
pub const DEFAULT_INTERVAL: f64 = 10.0;

/// Where the bouncer's API key comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum ApiKey {
    /// A file holding it alone (`--crowdsec-key-file`).
    File(std::path::PathBuf),
    /// The key itself, and where it was read (`api_key` of
    /// `--crowdsec-config`, as "FILE:LINE"); never printed.
    Given { key: String, from: String },
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiKey::File(p) => f.debug_tuple("File").field(p).finish(),
            ApiKey::Given { from, .. } => write!(f, "Given {{ key: (hidden), from: {from:?} }}"),
        }
    }
}

/// Bans of scope `Country` and `AS` as the networks MaxMind DB files give
/// them (`--geo-db`). Each key's databases are walked once, at its first
/// ban, into an index of every value (so a LAPI naming thousands of
/// distinct AS numbers costs one walk, and the memory is the databases'
/// own size, not the feed's); the index is dropped at the next full pull,
/// which reads the databases again, so a new database is taken up.
#[derive(Debug)]
pub struct GeoScopes {
    dbs: Vec<std::path::PathBuf>,
    index: Mutex<HashMap<sluice_geo::Key, Option<Arc<Index>>>>,
}

/// A key's values and each one's networks, shared by the decisions that name it.
type Index = HashMap<String, Networks>;
type Networks = Arc<Vec<Prefix>>;

impl GeoScopes {
    pub fn new(dbs: Vec<std::path::PathBuf>) -> GeoScopes {
        GeoScopes { dbs, index: Mutex::new(HashMap::new()) }
    }

    /// `--geo-db`'s files for the bouncer; None when none is given.
    pub fn for_files(dbs: &[std::path::PathBuf]) -> Option<Arc<GeoScopes>> {
        (!dbs.is_empty()).then(|| Arc::new(GeoScopes::new(dbs.to_vec())))
    }

    /// The networks of a country code or AS number; None when no database
    /// has it (or it is not one).
    fn networks(&self, key: sluice_geo::Key, value: &str) -> Option<Networks> {
        let value = key.parse_value(value).ok()?;
        let index = {
            let mut all = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            all.entry(key).or_insert_with(|| self.read(key)).clone()?
        };
        index.get(&value).cloned()
    }

    /// Every value of `key` in the databases; None (logged) when they
    /// cannot be read or hold none.
    fn read(&self, key: sluice_geo::Key) -> Option<Arc<Index>> {
        let dbs: Vec<&Path> = self.dbs.iter().map(|p| p.as_path()).collect();
        match sluice_geo::index_in(&dbs, key) {
            Ok(i) if !i.is_empty() => Some(Arc::new(
                i.into_iter()
                    .map(|(v, n)| (v, Arc::new(n.iter().map(|&(a, l)| Prefix::new(a, l)).collect())))
                    .collect(),
            )),
            Ok(_) => {
                tracing::warn!("crowdsec: bans of {}s are ignored: no --geo-db file has any", key.name());
                None
            }
            Err(e) => {
                tracing::warn!("crowdsec: bans of {}s are ignored: {e}", key.name());
                None
            }
        }
    }

    /// Read the databases again at the next use (a full pull).
    fn forget(&self) {
        self.index.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// The decision stream's filters, as the LAPI names them
/// (`/v1/decisions/stream?origins=...&scopes=...&scenarios_containing=...
/// &scenarios_not_containing=...`): each a list, comma-separated on the
/// wire; empty lists are not sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFilters {
    /// `crowdsec`, `cscli`, `CAPI`, `lists`, ...
    pub origins: Vec<String>,
    /// `ip`, `range`, and with `--geo-db` `country`, `as` (the scopes
    /// sluice applies; others are ignored anyway).
    pub scopes: Vec<String>,
    /// Decisions whose scenario contains one of these.
    pub scenarios_containing: Vec<String>,
    /// Decisions whose scenario contains none of these.
    pub scenarios_not_containing: Vec<String>,
}

impl StreamFilters {
    /// `&name=a,b` for each list given, the values percent-encoded.
    pub fn query(&self) -> String {
        let mut q = String::new();
        for (name, values) in [
            ("origins", &self.origins),
            ("scopes", &self.scopes),
            ("scenarios_containing", &self.scenarios_containing),
            ("scenarios_not_containing", &self.scenarios_not_containing),
        ] {
            if !values.is_empty() {
                let joined: Vec<String> = values.iter().map(|v| percent_encode(v)).collect();
                q += &format!("&{name}={}", joined.join(","));
            }
        }
        q
    }
}

/// A query value with everything but unreserved characters (RFC 3986)
/// percent-encoded.
fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// `--crowdsec-max-answer`'s default: 256 MiB, a full pull of about 1.9
/// million decisions (100,000 are 13.8 MB), kept in the feed at 48 bytes
/// each (about 90 MB).
pub const DEFAULT_MAX_ANSWER: u64 = 256 << 20;

/// The least `--crowdsec-max-answer`: below it even an empty stream of a
/// few decisions would be refused.
pub const MIN_MAX_ANSWER: u64 = 1024;

/// The longest string kept from a decision (origin, type, scope, value,
/// duration). CrowdSec's are a few dozen bytes (an IPv6 range is at most
/// 43); a longer one is not a decision sluice can apply or label, so the
/// decision is skipped and counted (`action="oversized"`) while the rest
/// of the answer applies: one watcher's junk must not stop enforcement of
/// every other decision.
pub const MAX_FIELD: usize = 256;

/// The longest JSON string read anywhere in an answer. serde_json holds a
/// string whole before a visitor sees it, even one that is then skipped,
/// so this bounds the parser's own buffer. No field of a decision stream
/// comes near it: an answer that has one is refused whole.
pub const MAX_STRING: u64 = 64 * 1024;

/// A decision's (origin, type, scope, what was done with it) as metric
/// labels: each one of the few values [`label`] knows, or `other`, so the
/// LAPI can neither forge a line of the exposition nor grow the series
/// without bound.
pub type DecisionKey = (&'static str, &'static str, &'static str, &'static str);

/// CrowdSec's decision origins (`pkg/types/constants.go`, and `appsec`
/// for its WAF's).
pub const ORIGINS: &[&str] =
    &["crowdsec", "cscli", "cscli-import", "console", "lists", "CAPI", "appsec", "remediation_sync"];
/// Decision types CrowdSec's profiles and bouncers use.
pub const TYPES: &[&str] = &["ban", "captcha", "throttle"];
/// Decision scopes CrowdSec's scenarios, lists and cscli use.
pub const SCOPES: &[&str] = &["Ip", "Range", "Country", "AS"];

/// `v` as a label value: its spelling in `known` (compared ignoring ASCII
/// case, as the LAPI and sluice compare types and scopes), else `other`.
pub fn label(known: &[&'static str], v: &str) -> &'static str {
    known.iter().find(|k| k.eq_ignore_ascii_case(v)).copied().unwrap_or("other")
}

impl BouncerConfig {
    /// [`BouncerConfig::new`] when both the URL and the key file are given
    /// (`--crowdsec-url`, `--crowdsec-key-file`), else no bouncer.
    pub fn from_flags(
        url: Option<&str>,
        key_file: Option<&Path>,
        tls: &LapiTls,
        interval: f64,
        resync: f64,
        set: &str,
        max_answer: u64,
    ) -> Result<Option<Self>, String> {
        match url {
            Some(url) if key_file.is_some() || tls.has_cert() => {
                Self::new(url, key_file, tls, interval, resync, set, max_answer).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// From the flags: the key read from `key_file` (none with a client
    /// certificate), the URL checked; a key file others can read is a
    /// warning.
    pub fn new(
        url: &str,
        key_file: Option<&Path>,
        tls: &LapiTls,
        interval: f64,
        resync: f64,
        set: &str,
        max_answer: u64,
    ) -> Result<Self, String> {
        let key = key_file.map(|p| ApiKey::File(p.to_owned()));
        Self::with_key(url, key.as_ref(), tls, interval, resync, set, max_answer)
    }

    /// [`BouncerConfig::new`] with the key from a file or given
    /// (`--crowdsec-config`'s `api_key`).
    pub fn with_key(
        url: &str,
        key: Option<&ApiKey>,
        tls: &LapiTls,
        interval: f64,
        resync: f64,
        set: &str,
        max_answer: u64,
    ) -> Result<Self, String> {
        let tls = sluice_control::lapi::check_url(url, tls)?;
        for (flag, v) in [("--crowdsec-interval", interval), ("--crowdsec-resync", resync)] {
            if !(v.is_finite() && v >= 0.05) {
                return Err(format!("{flag} must be a number of seconds, at least 0.05"));
            }
        }
        if max_answer < MIN_MAX_ANSWER {
            return Err(format!("--crowdsec-max-answer {max_answer}: must be at least {MIN_MAX_ANSWER} bytes"));
        }
        let key = match key {
            Some(ApiKey::File(key_file)) => read_key(key_file)?,
            Some(ApiKey::Given { key, .. }) => key.clone(),
            None => String::new(),
        };
        Ok(BouncerConfig {
            url: url.to_owned(),
            key,
            interval: Duration::from_secs_f64(interval),
            resync: Duration::from_secs_f64(resync),
            set: set.to_owned(),
            max_answer,
            gate: Gate::default(),
            filters: StreamFilters::default(),
            types: vec!["ban".to_owned()],
            geo: None,
            tls,
            metrics_interval: Some(Duration::from_secs_f64(crate::usage::DEFAULT_METRICS_INTERVAL)),
            usage: None,
        })
    }
}

/// An API key file's one key; a file others can read is a warning.
fn read_key(key_file: &Path) -> Result<String, String> {
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
    if let Some(w) = secret_file_warning("--crowdsec-key-file", key_file) {
        tracing::warn!("{w}");
    }
    Ok(key)
}

sluice_metrics::counters! {
    /// What the bouncer counts, declared once with its families.
    pub struct BouncerCounts / BouncerTotals {
        /// 1 while the last pull from the CrowdSec LAPI worked.
        up => gauge "sluice_crowdsec_up",
        /// Unix time of the last pull from the LAPI that worked.
        last_pull_ms => gauge "sluice_crowdsec_last_pull_timestamp_seconds" / 1000,
        /// The last pull that worked, from request to publication (µs).
        last_pull_us => gauge "sluice_crowdsec_pull_duration_us",
        /// Pulls from the LAPI that worked.
        pulls_ok => "sluice_crowdsec_pulls" { "result" = "ok" },
        /// Pulls from the LAPI that failed.
        pulls_failed => "sluice_crowdsec_pulls" { "result" = "failed" },
        /// Set elements a full pull added or removed that the delta stream had missed.
        repaired => "sluice_crowdsec_repaired",
        /// Usage-metrics pushes the LAPI accepted.
        usage_pushes_ok => "sluice_crowdsec_usage_pushes" { "result" = "ok" },
        /// Usage-metrics pushes that failed.
        usage_pushes_failed => "sluice_crowdsec_usage_pushes" { "result" = "failed" },
        /// 1 once the LAPI answered a push with 404 (before 1.6.3): no more are made.
        usage_pushes_unsupported => "sluice_crowdsec_usage_pushes" { "result" = "unsupported" },
    }
    families {
        /// Pulls from the LAPI, by result.
        "sluice_crowdsec_pulls",
        /// Pushes of the drops by origin to the LAPI's /v1/usage-metrics, by
        /// result (unsupported: answered 404, none after).
        "sluice_crowdsec_usage_pushes",
    }
}

/// What the bouncer counts (the metrics read it): its declared counts
/// (`counters.pulls_ok` reads through), and its decisions by key.
#[derive(Debug, Default)]
pub struct BouncerCounters {
    pub counts: BouncerCounts,
    /// Decisions by (origin, type, scope, what was done): at most
    /// 9 x 4 x 5 x 5 keys, as every label is from a fixed list.
    decisions: Mutex<BTreeMap<DecisionKey, u64>>,
}

impl std::ops::Deref for BouncerCounters {
    type Target = BouncerCounts;
    fn deref(&self) -> &BouncerCounts {
        &self.counts
    }
}

impl BouncerCounters {
    /// Decisions counted by (origin, type, scope, action): `added`,
    /// `deleted`, `ignored` (a type or scope not applied, or a bad value),
    /// `oversized` (a field over [`MAX_FIELD`] bytes), `refused` (by the
    /// safety net).
    pub fn decisions(&self) -> Vec<(DecisionKey, u64)> {
        self.decisions.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Counts an answer's decisions, once it was applied.
    pub fn count(&self, tally: &Tally) {
        let mut d = self.decisions.lock().unwrap_or_else(PoisonError::into_inner);
        for (k, n) in &tally.decisions {
            *d.entry(*k).or_default() += n;
        }
    }
}

/// What one answer held, counted as it was parsed and added to
/// [`BouncerCounters`] only when the answer was applied.
#[derive(Debug, Default)]
pub struct Tally {
    pub decisions: BTreeMap<DecisionKey, u64>,
    /// Decisions skipped for a field over [`MAX_FIELD`] bytes.
    pub oversized: u64,
    /// Bans the safety net refused, by reason (`never_block`, `min_prefix`).
    pub refused: BTreeMap<&'static str, u64>,
}

/// One string field of a decision: kept when it is at most [`MAX_FIELD`]
/// bytes, else only the fact that it was longer.
#[derive(Debug)]
enum Field {
    Kept(String),
    TooLong,
}

impl Default for Field {
    fn default() -> Self {
        Field::Kept(String::new())
    }
}

impl Field {
    /// The string, or "" for one that was too long (it labels as `other`
    /// and applies as nothing).
    fn as_str(&self) -> &str {
        match self {
            Field::Kept(s) => s,
            Field::TooLong => "",
        }
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(if v.len() > MAX_FIELD { Field::TooLong } else { Field::Kept(v.to_owned()) })
            }
        }
        d.deserialize_str(V)
    }
}

/// One decision as the LAPI sends it: the fields sluice uses (the others,
/// `scenario`, `id`, `until`, `uuid`, ..., are skipped unread).
#[derive(Debug, Default, Deserialize)]
struct Decision {
    #[serde(default)]
    origin: Field,
    #[serde(rename = "type", default)]
    kind: Field,
    #[serde(default)]
    scope: Field,
    #[serde(default)]
    value: Field,
    /// A Go duration ("3h59m58.5s"): what is left of the decision.
    #[serde(default)]
    duration: Field,
}

impl Decision {
    fn oversized(&self) -> bool {
        [&self.origin, &self.kind, &self.scope, &self.value, &self.duration].iter().any(|f| matches!(f, Field::TooLong))
    }
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

/// Whether decisions of type `kind` are enforced: one of `types`
/// (ignoring case), or `ban` when `types` is empty.
fn enforced(types: &[String], kind: &str) -> bool {
    if types.is_empty() {
        kind.eq_ignore_ascii_case("ban")
    } else {
        types.iter().any(|t| t.eq_ignore_ascii_case(kind))
    }
}

/// The elements a decision bans, if it is one sluice applies (of a type in
/// `types`): an address, a range, or (with `--geo-db`) a country's or an
/// AS's networks.
fn banned(d: &Decision, geo: Option<&GeoScopes>, types: &[String]) -> Option<Banned> {
    if !enforced(types, d.kind.as_str()) {
        return None;
    }
    let value = d.value.as_str();
    match d.scope.as_str().to_ascii_lowercase().as_str() {
        "ip" => value.parse::<std::net::IpAddr>().ok().map(|a| Banned::One(Prefix::host(a))),
        // A /0 is the safety net's to refuse (counted as such).
        "range" => value.parse::<Prefix>().ok().map(Banned::One),
        "country" => geo?.networks(sluice_geo::Key::Country, value).map(Banned::Many),
        "as" => geo?.networks(sluice_geo::Key::Asn, value).map(Banned::Many),
        _ => None,
    }
}

/// What one decision bans.
enum Banned {
    One(Prefix),
    /// A country's or an AS's networks, shared with the cache.
    Many(Arc<Vec<Prefix>>),
}

impl Banned {
    fn each(&self) -> &[Prefix] {
        match self {
            Banned::One(p) => std::slice::from_ref(p),
            Banned::Many(v) => v,
        }
    }
}

/// Where an answer's decisions go as they are parsed.
struct Sink<'a> {
    feed: Feed,
    tally: Tally,
    /// The net in force when the answer came, and where refusals are logged.
    net: Arc<sluice_rules::SafetyNet>,
    gate: &'a Gate,
    geo: Option<&'a GeoScopes>,
    /// The decision types enforced ([`BouncerConfig::types`]).
    types: &'a [String],
    warned_geo: bool,
    /// This answer's origins (the feed's tags index them).
    origins: Origins,
}

impl Sink<'_> {
    fn take(&mut self, d: &Decision, deleted: bool) {
        let action = if d.oversized() {
            self.tally.oversized += 1;
            "oversized"
        } else if deleted {
            match banned(d, self.geo, self.types) {
                // A full pull's content is the set; a delete in it means
                // nothing more.
                Some(_) if self.feed.full => "deleted",
                Some(e) => {
                    self.feed.dels.extend_from_slice(e.each());
                    "deleted"
                }
                None => self.ignored(d),
            }
        } else {
            match (banned(d, self.geo, self.types), go_duration(d.duration.as_str())) {
                (Some(e), Some(secs)) if secs > 0.0 => {
                    let timeout = Some(secs.ceil().min(f64::from(u32::MAX)) as u32);
                    let tag = self.origins.tag(d.origin.as_str());
                    let mut added = false;
                    for &p in e.each() {
                        match self.net.check(&p) {
                            Ok(()) => {
                                self.feed.adds.push((p, timeout));
                                self.feed.tags.push(tag);
                                added = true;
                            }
                            // Logged now, counted once the answer is applied.
                            Err(r) => {
                                *self.tally.refused.entry(r.reason()).or_default() += 1;
                                let what = format!("crowdsec decision for set `{}`", self.feed.set);
                                self.gate.safety.log_refusal(&what, &p, &r);
                            }
                        }
                    }
                    if added {
                        "added"
                    } else {
                        "refused"
                    }
                }
                _ => self.ignored(d),
            }
        };
        let key =
            (label(ORIGINS, d.origin.as_str()), label(TYPES, d.kind.as_str()), label(SCOPES, d.scope.as_str()), action);
        *self.tally.decisions.entry(key).or_default() += 1;
    }

    /// A decision not applied; a ban of scope `Country` or `AS` without
    /// `--geo-db` says so once per answer.
    fn ignored(&mut self, d: &Decision) -> &'static str {
        let scope = d.scope.as_str();
        let geo_scope = scope.eq_ignore_ascii_case("country") || scope.eq_ignore_ascii_case("as");
        if geo_scope && self.geo.is_none() && enforced(self.types, d.kind.as_str()) && !self.warned_geo {
            self.warned_geo = true;
            tracing::warn!("crowdsec: bans of scope {scope} are ignored: give --geo-db FILE to enforce them");
        }
        "ignored"
    }
}

/// The answer's top-level keys.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    New,
    Deleted,
    #[serde(other)]
    Other,
}

/// `/v1/decisions/stream`'s answer, `{"new": [...], "deleted": [...]}`
/// (either may be `null`), each decision handed to the sink as it is
/// parsed.
struct Answer<'a, 'g>(&'a mut Sink<'g>);

impl<'de> DeserializeSeed<'de> for Answer<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Answer<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object with the lists `new` and `deleted`")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = [false; 2];
        while let Some(key) = map.next_key::<Key>()? {
            let deleted = match key {
                Key::New => false,
                Key::Deleted => true,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[usize::from(deleted)], true) {
                return Err(de::Error::duplicate_field(if deleted { "deleted" } else { "new" }));
            }
            map.next_value_seed(List { sink: &mut *self.0, deleted })?;
        }
        Ok(())
    }
}

/// One of the answer's lists, or `null`.
struct List<'a, 'g> {
    sink: &'a mut Sink<'g>,
    deleted: bool,
}

impl<'de> DeserializeSeed<'de> for List<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for List<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of decisions or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(d) = seq.next_element::<Decision>()? {
            self.sink.take(&d, self.deleted);
        }
        Ok(())
    }
}

/// Why an answer was refused: nothing of it is applied.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("{}", too_large(*.size, *.limit))]
    TooLarge {
        /// The size the answer announced (Content-Length), if it did.
        size: Option<u64>,
        limit: u64,
    },
    #[error(
        "the answer has a JSON string over {MAX_STRING} bytes, which no decision stream has; refused whole, nothing applied"
    )]
    LongString,
    #[error("the answer is not a decision stream: {0}; nothing applied")]
    Json(#[from] serde_json::Error),
}

fn too_large(size: Option<u64>, limit: u64) -> String {
    match size {
        Some(n) => format!("the answer is {n} bytes, over --crowdsec-max-answer {limit}; refused whole, nothing applied"),
        None => format!(
            "the answer is over --crowdsec-max-answer {limit} bytes (read that far; it did not say its length); refused whole, nothing applied"
        ),
    }
}

/// What [`Guard`] stopped reading at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Answer,
    String,
}

/// The answer's bytes, counted: an error past `max` bytes in all, or
/// past [`MAX_STRING`] bytes in one JSON string (tracked by its quotes
/// and backslash escapes, which is all it takes to find where a string
/// ends), so the parser never holds more.
struct Guard<R> {
    inner: R,
    max: u64,
    read: u64,
    in_string: bool,
    escaped: bool,
    string_len: u64,
    over: Option<Over>,
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.max {
            self.over = Some(Over::Answer);
            return Err(std::io::Error::other("over --crowdsec-max-answer"));
        }
        for &b in &buf[..n] {
            if !self.in_string {
                if b == b'"' {
                    self.in_string = true;
                    self.string_len = 0;
                }
                continue;
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                continue;
            }
            self.string_len += 1;
            if self.string_len > MAX_STRING {
                self.over = Some(Over::String);
                return Err(std::io::Error::other("a JSON string over the limit"));
            }
        }
        Ok(n)
    }
}

/// A stream answer as a feed for `set`, parsed as it is read, and what its
/// decisions were; all or nothing: an error leaves nothing to apply.
/// `announced` is its Content-Length, if it gave one: over `max_answer`
/// it is refused before a byte is read. A ban `gate` refuses is left out
/// of the feed and counted in the tally; decisions of a type not in
/// `types` (empty: `ban` alone) are counted as ignored.
#[allow(clippy::too_many_arguments)]
pub fn parse(
    r: impl Read,
    announced: Option<u64>,
    set: &str,
    full: bool,
    max_answer: u64,
    gate: &Gate,
    geo: Option<&GeoScopes>,
    types: &[String],
) -> Result<(Feed, Tally), AnswerError> {
    if let Some(n) = announced.filter(|&n| n > max_answer) {
        return Err(AnswerError::TooLarge { size: Some(n), limit: max_answer });
    }
    let mut guard = Guard {
        inner: std::io::BufReader::new(r),
        max: max_answer,
        read: 0,
        in_string: false,
        escaped: false,
        string_len: 0,
        over: None,
    };
    let mut sink = Sink {
        feed: Feed { set: set.to_owned(), full, ..Feed::default() },
        tally: Tally::default(),
        net: gate.safety.net(),
        gate,
        geo,
        types,
        warned_geo: false,
        origins: Origins::default(),
    };
    let result = {
        let mut de = serde_json::Deserializer::from_reader(&mut guard);
        Answer(&mut sink).deserialize(&mut de).and_then(|()| de.end())
    };
    match (result, guard.over) {
        (Ok(()), _) => {
            let mut feed = sink.feed;
            feed.tag_names = sink.origins.names().to_vec();
            Ok((feed, sink.tally))
        }
        (Err(_), Some(Over::Answer)) => Err(AnswerError::TooLarge { size: None, limit: max_answer }),
        (Err(_), Some(Over::String)) => Err(AnswerError::LongString),
        (Err(e), None) => Err(AnswerError::Json(e)),
    }
}

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{0}")]
    Http(String),
    #[error("{url}: {redirect} refused: the API key is sent to --crowdsec-url only")]
    Redirect { url: String, redirect: String },
    #[error("{url}: {source}")]
    Answer {
        url: String,
        #[source]
        source: AnswerError,
    },
    #[error("the bridge is stopping")]
    Stopping,
    #[error("the set: {0}")]
    Set(String),
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One pull: the stream's answer as a feed (a full one when `startup`),
/// and what its decisions were.
pub fn pull(agent: &ureq::Agent, cfg: &BouncerConfig, startup: bool) -> Result<(Feed, Tally), PullError> {
    // The LAPI streams scopes Ip and Range unless asked for others.
    let mut filters = cfg.filters.clone();
    if cfg.geo.is_some() && filters.scopes.is_empty() {
        filters.scopes = ["ip", "range", "country", "as"].map(String::from).to_vec();
    }
    let url = format!("{}/v1/decisions/stream?startup={startup}{}", cfg.url.trim_end_matches('/'), filters.query());
    let mut req = agent.get(&url).set("User-Agent", concat!("sluice-bouncer/", env!("CARGO_PKG_VERSION")));
    // With a client certificate the LAPI knows the bouncer by it.
    if !cfg.key.is_empty() {
        req = req.set("X-Api-Key", &cfg.key);
    }
    let resp = req.call().map_err(|e| match e {
        ureq::Error::Status(code, r) => {
            let why = if code == 403 { " (is the API key right? cscli bouncers list)" } else { "" };
            PullError::Http(format!("{url}: HTTP {code} {}{why}", r.status_text()))
        }
        e => PullError::Http(sluice_control::lapi::transport_error(&url, &e)),
    })?;
    if let Some(redirect) = redirect(&resp) {
        return Err(PullError::Redirect { url, redirect });
    }
    let announced = resp.header("Content-Length").and_then(|v| v.trim().parse().ok());
    if startup {
        cfg.geo.iter().for_each(|g| g.forget());
    }
    parse(resp.into_reader(), announced, &cfg.set, startup, cfg.max_answer, &cfg.gate, cfg.geo.as_deref(), &cfg.types)
        .map_err(|source| PullError::Answer { url, source })
}

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

/// Pushes the drops by origin to `POST /v1/usage-metrics` (see
/// [`crate::usage`]); a LAPI without the endpoint (404, before 1.6.3)
/// turns the push off, said once.
fn push_usage(agent: &ureq::Agent, cfg: &BouncerConfig, pusher: &mut Pusher, counters: &BouncerCounters) {
    let Some(source) = &cfg.usage else { return };
    let usage = (source.0)();
    let now = SystemTime::now();
    let body = pusher.body(&usage, now);
    let url = format!("{}/v1/usage-metrics", cfg.url.trim_end_matches('/'));
    let mut req = agent.post(&url).set("User-Agent", concat!("sluice-bouncer/", env!("CARGO_PKG_VERSION")));
    if !cfg.key.is_empty() {
        req = req.set("X-Api-Key", &cfg.key);
    }
    let failed = match req.send_json(body) {
        Ok(r) => match redirect(&r) {
            Some(redirect) => Some(format!("{redirect} refused")),
            None => {
                pusher.accepted(usage, now);
                counters.usage_pushes_ok.fetch_add(1, Ordering::Relaxed);
                None
            }
        },
        Err(ureq::Error::Status(404, _)) => {
            tracing::info!(
                "crowdsec: {url} answers 404 (a LAPI before 1.6.3 has no usage metrics): drops by origin are not pushed"
            );
            pusher.on = false;
            counters.usage_pushes_unsupported.store(1, Ordering::Relaxed);
            None
        }
        Err(ureq::Error::Status(code, r)) => Some(format!("HTTP {code} {}", r.status_text())),
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = failed {
        let n = counters.usage_pushes_failed.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                "crowdsec: usage metrics push {n} to {url} failed (the next one carries these drops too): {why}"
            );
        }
    }
}

/// When the next pull is a full one, and how long to wait for it: a full
/// pull first, every `--crowdsec-resync`, after a failure (whatever the
/// stream sent meanwhile is repaired), and once a streamed burst has gone
/// quiet.
struct Schedule {
    full: bool,
    first: bool,
    last_full: Instant,
    last_full_took: Duration,
    /// Changes streamed since the last full pull.
    streamed: bool,
    failures: u32,
}

impl Schedule {
    fn new() -> Schedule {
        Schedule {
            full: true,
            first: true,
            last_full: Instant::now(),
            last_full_took: Duration::ZERO,
            streamed: false,
            failures: 0,
        }
    }

    /// A pull that `started` was applied as `out`.
    fn pulled(&mut self, out: &FeedOutcome, started: Instant, cfg: &BouncerConfig, counters: &BouncerCounters) {
        counters.up.store(1, Ordering::Relaxed);
        counters.pulls_ok.fetch_add(1, Ordering::Relaxed);
        counters.last_pull_ms.store(unix_ms(), Ordering::Relaxed);
        counters.last_pull_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if self.failures > 0 {
            tracing::info!(
                event = "feed_up",
                "crowdsec: {} answers again after {} failed pull(s)",
                cfg.url,
                self.failures
            );
        }
        if self.full && !self.first {
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
        if self.full {
            self.last_full = Instant::now();
            self.last_full_took = started.elapsed();
            self.streamed = false;
            if self.first {
                tracing::info!(
                    event = "feed_up",
                    bans = out.added,
                    "crowdsec: {} ban(s) from {} in set `{}`",
                    out.added,
                    cfg.url,
                    cfg.set
                );
            }
            self.full = false;
        } else if out.added + out.deleted > 0 {
            self.streamed = true;
        } else if self.streamed && self.last_full.elapsed() >= (self.last_full_took * 10).max(SETTLE_GAP) {
            // Quiet after a burst: make sure the burst is all here.
            self.full = true;
        }
        self.first = false;
        self.failures = 0;
    }

    fn failed(&mut self, e: &PullError, cfg: &BouncerConfig, counters: &BouncerCounters) {
        counters.up.store(0, Ordering::Relaxed);
        counters.pulls_failed.fetch_add(1, Ordering::Relaxed);
        self.failures += 1;
        let failures = self.failures;
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
        self.full = true;
    }

    /// The wait before the next pull: the interval, doubled per failure
    /// up to 10 s (or the interval, if longer).
    fn wait(&self, interval: Duration) -> Duration {
        match self.failures {
            0 => interval,
            f => (interval * 2u32.saturating_pow(f.min(5) - 1)).min(interval.max(Duration::from_secs(10))),
        }
    }
}

/// One pull applied through the controller: the feed, then its tally
/// counted (an answer refused counts nothing, and the full pull that
/// follows counts its decisions once).
fn pull_and_apply(
    agent: &ureq::Agent,
    cfg: &BouncerConfig,
    full: bool,
    origins: &mut Origins,
    events: &Sender<Event>,
    counters: &BouncerCounters,
) -> Result<FeedOutcome, PullError> {
    let (mut feed, tally) = pull(agent, cfg, full)?;
    origins.globalize(&mut feed);
    let (tx, rx) = channel();
    events.send(Event::Feed(feed, tx)).map_err(|_| PullError::Stopping)?;
    let r: Result<FeedOutcome, String> = rx.recv().map_err(|_| PullError::Stopping)?;
    let out = r.map_err(PullError::Set)?;
    counters.count(&tally);
    for (reason, n) in &tally.refused {
        cfg.gate.refusals.add(&cfg.set, reason, *n);
    }
    if tally.oversized > 0 {
        tracing::warn!(
            event = "feed_oversized",
            "crowdsec: skipped {} decision(s) with a field over {MAX_FIELD} bytes",
            tally.oversized
        );
    }
    Ok(out)
}

pub fn run(cfg: BouncerConfig, events: Sender<Event>, stop: Arc<AtomicBool>, counters: Arc<BouncerCounters>) {
    let agent = agent(cfg.tls.as_ref());
    let mut origins = Origins::default();
    let component = cfg.usage.as_ref().map_or("sluice", |u| u.1);
    let mut pusher = Pusher::new(component, SystemTime::now());
    let every = cfg.metrics_interval.filter(|_| cfg.usage.is_some());
    let mut next_push = every.map(|i| Instant::now() + i);
    let mut schedule = Schedule::new();
    while !stop.load(Ordering::Relaxed) {
        if schedule.last_full.elapsed() >= cfg.resync {
            schedule.full = true;
        }
        let started = Instant::now();
        match pull_and_apply(&agent, &cfg, schedule.full, &mut origins, &events, &counters) {
            Ok(out) => schedule.pulled(&out, started, &cfg, &counters),
            Err(PullError::Stopping) => return,
            Err(e) => schedule.failed(&e, &cfg, &counters),
        }
        let wait = schedule.wait(cfg.interval);
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            if next_push.is_some_and(|t| Instant::now() >= t) {
                push_usage(&agent, &cfg, &mut pusher, &counters);
                next_push = every.filter(|_| pusher.on).map(|i| Instant::now() + i);
            }
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

    const MAX: u64 = DEFAULT_MAX_ANSWER;

    fn n(t: &Tally, o: &str, ty: &str, s: &str, a: &str) -> u64 {
        t.decisions.iter().find(|(k, _)| **k == (o, ty, s, a)).map_or(0, |x| *x.1)
    }

    fn parse_str(json: &str, full: bool, max: u64) -> Result<(Feed, Tally), AnswerError> {
        parse(json.as_bytes(), None, "crowdsec", full, max, &Gate::default(), None, &[])
    }

    #[test]
    fn bans_of_ip_and_range_apply_and_the_rest_is_counted() {
        let (f, t) = parse_str(
            r#"{"deleted":[{"duration":"-1ms","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.9"}],
                "new":[{"duration":"29m59.5s","origin":"cscli","scope":"Range","type":"ban","value":"198.51.100.0/24","scenario":"manual"},
                       {"duration":"1h","origin":"crowdsec","scope":"Ip","type":"ban","value":"2001:db8::1","id":7,"simulated":false},
                       {"duration":"1h","origin":"crowdsec","scope":"Ip","type":"captcha","value":"192.0.2.1"},
                       {"duration":"1h","origin":"CAPI","scope":"Country","type":"ban","value":"FR"},
                       {"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"not-an-ip"},
                       {"duration":"-5s","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.7"}],
                "unknown":{"ignored":[1,2,{"x":null}]}}"#,
            false,
            MAX,
        )
        .unwrap();
        assert_eq!(
            f.adds,
            vec![("198.51.100.0/24".parse().unwrap(), Some(1800)), ("2001:db8::1".parse().unwrap(), Some(3600))]
        );
        assert_eq!(f.dels, vec!["192.0.2.9".parse().unwrap()]);
        assert_eq!(n(&t, "crowdsec", "captcha", "Ip", "ignored"), 1);
        assert_eq!(n(&t, "CAPI", "ban", "Country", "ignored"), 1);
        assert_eq!(n(&t, "cscli", "ban", "Ip", "ignored"), 2, "a bad value and an expired one");
        assert_eq!(n(&t, "cscli", "ban", "Ip", "deleted"), 1);
        assert_eq!(n(&t, "cscli", "ban", "Range", "added"), 1);
        let (f, _) = parse_str(r#"{"deleted":null,"new":null}"#, true, MAX).unwrap();
        assert!(f.adds.is_empty() && f.full);
        // A full pull's deletes count but remove nothing: its content is the set.
        let (f, t) = parse_str(
            r#"{"new":[],"deleted":[{"duration":"1s","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.9"}]}"#,
            true,
            MAX,
        )
        .unwrap();
        assert!(f.dels.is_empty());
        assert_eq!(n(&t, "cscli", "ban", "Ip", "deleted"), 1);
    }

    #[test]
    fn a_ban_the_safety_net_refuses_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "192.0.2.7\n").unwrap();
        let safety = sluice_control::safety::Safety::load(Some(&f), 8, 16).unwrap();
        let gate = Gate { safety: Arc::new(safety), ..Gate::default() };
        let d = |scope: &str, value: &str| {
            format!(r#"{{"duration":"1h","origin":"cscli","scope":"{scope}","type":"ban","value":"{value}"}}"#)
        };
        let json = format!(
            r#"{{"new":[{},{},{},{},{},{}]}}"#,
            d("Range", "0.0.0.0/1"),
            d("Range", "0.0.0.0/0"),
            d("Range", "192.0.2.0/24"),
            d("Ip", "192.0.2.7"),
            d("Ip", "192.0.2.8"),
            d("Range", "2001:db8::/16")
        );
        let (f, t) = parse(json.as_bytes(), None, "crowdsec", false, MAX, &gate, None, &[]).unwrap();
        let adds: Vec<String> = f.adds.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(adds, ["192.0.2.8/32", "2001::/16"], "the others are applied");
        assert_eq!(t.refused, BTreeMap::from([("min_prefix", 2), ("never_block", 2)]));
        assert_eq!(n(&t, "cscli", "ban", "Range", "refused"), 3);
        assert_eq!(n(&t, "cscli", "ban", "Ip", "refused"), 1);
        assert_eq!(n(&t, "cscli", "ban", "Ip", "added"), 1);
        // Counted in sluice_set_refused once applied (by `run`), not here.
        assert_eq!(gate.refusals.total("never_block"), 0);
    }

    #[test]
    fn what_is_not_a_decision_stream_is_refused_whole() {
        let d = r#"{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.1"}"#;
        for bad in [
            format!(r#"{{"new":[{d}],"new":[{d}]}}"#),
            format!(r#"{{"new":[{d}]}} trailing"#),
            format!(r#"{{"new":[{d},{{"value":7}}]}}"#),
            format!(r#"{{"new":[{d}]"#),
            format!("[{d}]"),
        ] {
            let e = parse_str(&bad, false, MAX).unwrap_err();
            assert!(matches!(e, AnswerError::Json(_)), "{bad}: {e}");
            assert!(e.to_string().starts_with("the answer is not a decision stream: "), "{e}");
        }
        let e = parse_str(&format!(r#"{{"new":[{d}],"new":[]}}"#), false, MAX).unwrap_err();
        assert!(e.to_string().contains("duplicate field `new`"), "{e}");
    }

    #[test]
    fn labels_are_known_values_or_other() {
        assert_eq!(label(ORIGINS, "CAPI"), "CAPI");
        assert_eq!(label(ORIGINS, "capi"), "CAPI");
        assert_eq!(label(ORIGINS, "cscli-import"), "cscli-import");
        assert_eq!(label(ORIGINS, "crowdsec\"} 1\nsluice_forged 1"), "other");
        assert_eq!(label(TYPES, "ban\nforged 1"), "other");
        assert_eq!(label(SCOPES, "ip"), "Ip");
        assert_eq!(label(SCOPES, ""), "other");
        // However many distinct strings the LAPI sends, the keys are bounded.
        let mut json = String::from(r#"{"new":["#);
        for i in 0..500 {
            json += &format!(
                r#"{{"duration":"1h","origin":"o{i}\"\n","scope":"s{i}","type":"t{i}","value":"192.0.2.{}"}},"#,
                i % 250
            );
        }
        json.pop();
        json += "]}";
        let (_, t) = parse_str(&json, false, MAX).unwrap();
        assert_eq!(t.decisions.len(), 1, "{:?}", t.decisions);
        assert_eq!(n(&t, "other", "other", "other", "ignored"), 500);
    }

    #[test]
    fn a_decision_with_an_oversized_field_is_skipped_and_counted() {
        let long = "a".repeat(MAX_FIELD + 1);
        let fits = "1".repeat(MAX_FIELD - 2) + "ms";
        let json = format!(
            r#"{{"new":[{{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.1"}},
                       {{"duration":"1h","origin":"{long}","scope":"Ip","type":"ban","value":"192.0.2.2"}},
                       {{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.3{long}"}},
                       {{"duration":"{fits}","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.4"}}],
                "deleted":[{{"duration":"1h","origin":"cscli","scope":"Ip","type":"{long}","value":"192.0.2.5"}}]}}"#
        );
        let (f, t) = parse_str(&json, false, MAX).unwrap();
        let adds: Vec<String> = f.adds.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(adds, ["192.0.2.1/32", "192.0.2.4/32"], "a field of exactly {MAX_FIELD} bytes is kept");
        assert!(f.dels.is_empty());
        assert_eq!(t.oversized, 3);
        assert_eq!(n(&t, "other", "ban", "Ip", "oversized"), 1);
        assert_eq!(n(&t, "cscli", "ban", "Ip", "oversized"), 1);
        assert_eq!(n(&t, "cscli", "other", "Ip", "oversized"), 1);
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_whole() {
        let mut json = String::from(r#"{"new":["#);
        for i in 0..100 {
            json +=
                &format!(r#"{{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.{i}"}},"#);
        }
        json.pop();
        json += "]}";
        let len = json.len() as u64;
        let (f, _) = parse_str(&json, false, len).unwrap();
        assert_eq!(f.adds.len(), 100, "an answer of exactly the limit is read");
        let e = parse_str(&json, false, len - 1).unwrap_err();
        assert!(matches!(e, AnswerError::TooLarge { size: None, limit } if limit == len - 1), "{e}");
        assert!(e.to_string().contains(&format!("over --crowdsec-max-answer {}", len - 1)), "{e}");
        // One that says its length is refused before it is read.
        let e = parse(&b"not even JSON"[..], Some(len), "crowdsec", false, len - 1, &Gate::default(), None, &[])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the answer is {len} bytes, over --crowdsec-max-answer {}; refused whole, nothing applied",
                len - 1
            )
        );
    }

    #[test]
    fn a_json_string_over_the_limit_is_refused_wherever_it_is() {
        let d = r#"{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.1""#;
        // In a field sluice does not keep, and in a key.
        let skipped = format!(r#"{{"new":[{d},"scenario":"{}"}}]}}"#, "x".repeat(MAX_STRING as usize + 1));
        assert!(matches!(parse_str(&skipped, false, MAX), Err(AnswerError::LongString)));
        let key = format!(r#"{{"{}":1,"new":[]}}"#, "k".repeat(MAX_STRING as usize + 1));
        assert!(matches!(parse_str(&key, false, MAX), Err(AnswerError::LongString)));
        // Escaped quotes do not end a string, and one of the limit is read.
        let escaped = "\\\"".repeat(MAX_STRING as usize / 2);
        let fits = format!(r#"{{"new":[{d},"scenario":"{escaped}"}}]}}"#);
        assert_eq!(parse_str(&fits, false, MAX).unwrap().0.adds.len(), 1);
        let over = format!(r#"{{"new":[{d},"scenario":"{escaped}x"}}]}}"#);
        assert!(matches!(parse_str(&over, false, MAX), Err(AnswerError::LongString)));
    }

    /// A one-answer HTTP server on loopback: its address, and the request it got.
    fn serve_once(answer: String) -> (std::net::SocketAddr, std::thread::JoinHandle<String>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let (s, _) = l.accept().unwrap();
            let mut r = std::io::BufReader::new(s);
            let mut head = String::new();
            while r.read_line(&mut head).unwrap() > 2 {}
            r.get_mut().write_all(answer.as_bytes()).unwrap();
            head
        });
        (addr, h)
    }

    fn config(url: String, max_answer: u64) -> BouncerConfig {
        BouncerConfig {
            url,
            key: "the-key".into(),
            interval: Duration::from_secs(1),
            resync: Duration::from_secs(1),
            set: "crowdsec".into(),
            max_answer,
            gate: Gate::default(),
            filters: StreamFilters::default(),
            types: Vec::new(),
            geo: None,
            tls: None,
            metrics_interval: None,
            usage: None,
        }
    }

    #[test]
    fn a_usage_push_goes_with_the_key_and_only_an_accepted_one_moves_the_window() {
        use crate::usage::OriginUsage;
        let usage = || {
            vec![OriginUsage {
                origin: "cscli".into(),
                ip_type: "ipv4",
                dropped_packets: 7,
                dropped_bytes: 700,
                active: 1,
            }]
        };
        let mut cfg = config(String::new(), MAX);
        cfg.usage = Some(UsageSource(Arc::new(usage), "sluice-bridge"));
        let counters = BouncerCounters::default();
        let mut pusher = Pusher::new("sluice-bridge", SystemTime::now());
        // Refused: counted, nothing marked as pushed.
        let (addr, h) = serve_once("HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".into());
        cfg.url = format!("http://{addr}");
        push_usage(&agent(None), &cfg, &mut pusher, &counters);
        let head = h.join().unwrap();
        assert!(head.starts_with("POST /v1/usage-metrics HTTP/1.1"), "{head}");
        assert!(head.to_ascii_lowercase().contains("x-api-key: the-key"), "{head}");
        assert_eq!(counters.usage_pushes_failed.load(Ordering::Relaxed), 1);
        let body = pusher.body(&usage(), SystemTime::now());
        assert_eq!(body["remediation_components"][0]["metrics"][0]["items"][0]["value"], 7, "still to be pushed");
        // Accepted: the next push carries only what came after.
        let (addr, h) = serve_once("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".into());
        cfg.url = format!("http://{addr}");
        push_usage(&agent(None), &cfg, &mut pusher, &counters);
        h.join().unwrap();
        assert_eq!(counters.usage_pushes_ok.load(Ordering::Relaxed), 1);
        let body = pusher.body(&usage(), SystemTime::now());
        assert_eq!(body["remediation_components"][0]["metrics"][0]["items"][0]["value"], 0);
        // A 404 (a LAPI before 1.6.3) turns the push off.
        let (addr, h) = serve_once("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into());
        cfg.url = format!("http://{addr}");
        push_usage(&agent(None), &cfg, &mut pusher, &counters);
        h.join().unwrap();
        assert!(!pusher.on);
        assert_eq!(counters.usage_pushes_unsupported.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn stream_filters_are_named_as_the_lapi_names_them() {
        assert_eq!(StreamFilters::default().query(), "");
        let f = StreamFilters {
            origins: vec!["cscli".into(), "lists:firehol".into()],
            scopes: vec![],
            scenarios_containing: vec!["ssh".into()],
            scenarios_not_containing: vec!["http probing".into()],
        };
        assert_eq!(
            f.query(),
            "&origins=cscli,lists%3Afirehol&scenarios_containing=ssh&scenarios_not_containing=http%20probing"
        );
    }

    #[test]
    fn a_redirect_is_refused_and_the_key_goes_nowhere_else() {
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = format!("http://{}/v1/decisions/stream?startup=true", elsewhere.local_addr().unwrap());
        let (addr, h) = serve_once(format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"));
        let e = pull(&agent(None), &config(format!("http://{addr}"), MAX), true).unwrap_err();
        assert!(matches!(e, PullError::Redirect { .. }), "{e}");
        assert!(e.to_string().contains(&format!("HTTP 302 redirect to \"{to}\" refused")), "{e}");
        assert!(h.join().unwrap().to_ascii_lowercase().contains("x-api-key: the-key"));
        elsewhere.set_nonblocking(true).unwrap();
        assert!(elsewhere.accept().is_err(), "the redirect was followed");
    }

    #[test]
    fn an_announced_answer_over_the_limit_is_not_read() {
        let (addr, h) = serve_once(format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{}",
            " ".repeat(5000)
        ));
        let e = pull(&agent(None), &config(format!("http://{addr}"), 2048), true).unwrap_err();
        assert!(e.to_string().contains("the answer is 5000 bytes, over --crowdsec-max-answer 2048"), "{e}");
        h.join().unwrap();
        let (addr, h) =
            serve_once("HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n{\"new\":null,\"deleted\":null}".to_owned());
        let (f, t) = pull(&agent(None), &config(format!("http://{addr}"), 2048), true).unwrap();
        assert!(f.adds.is_empty() && f.full && t.decisions.is_empty());
        h.join().unwrap();
    }

    #[test]
    fn a_key_file_others_can_read_is_a_warning() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("crowdsec.key");
        std::fs::write(&f, "k").unwrap();
        for (mode, warned) in [(0o600, false), (0o400, false), (0o640, true), (0o604, true), (0o644, true)] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let w = secret_file_warning("--crowdsec-key-file", &f);
            assert_eq!(w.is_some(), warned, "{mode:o}: {w:?}");
            if let Some(w) = w {
                assert!(w.starts_with(&format!("--crowdsec-key-file {}: mode {mode:04o}", f.display())), "{w}");
            }
        }
        let e = BouncerConfig::new("http://127.0.0.1:1", Some(&f), &LapiTls::default(), 1.0, 1.0, "crowdsec", 1023)
            .unwrap_err();
        assert_eq!(e, "--crowdsec-max-answer 1023: must be at least 1024 bytes");
    }
}
