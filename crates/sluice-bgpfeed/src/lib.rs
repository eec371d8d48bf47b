//! Routers as a feed: BGP sessions (receive only) whose FlowSpec routes and
//! blackhole routes become the rule set's flows.
//!
//! One thread per peer runs `sluice_bgp::session::run` (connecting, or
//! taking the connections a listener thread accepts for it); their events
//! go through one bounded queue ([`RIB_QUEUE`]: a full one holds the
//! sessions, and through TCP their peers, back) to one RIB thread, which
//! keeps each peer's routes ([`Rib`]) and, after each burst of events
//! (everything waiting, handled together), builds the whole [`FlowTable`]
//! again and hands it to the control thread as one [`Event::Flows`]: the
//! workers see the table before an UPDATE or after it, never half of it.
//! While events keep coming a table goes out at most every
//! [`PUBLISH_EVERY`], so a flood from one peer delays another's
//! withdrawal by an interval and a rebuild, not by the flood. Counters and
//! policers belong to a route and move into each new table with it.
//!
//! The crate serves every data plane (the bridge judges the table in its
//! workers, the shield compiles it into its kernel program); it knows no
//! product, only the control plane's [`Event`] it sends the table as.
//!
//! A peer is a feed like any other: every route passes the safety net
//! before it is held ([`RouteGuard`]): a blackhole's prefix and a flow's
//! destination as a `ctl add` does (`--never-block`, `--min-prefix-*`), a
//! flow's source never over a never-blocked network, a flow with no
//! destination only with `--bgp-allow-undirected`, and with `--bgp-protect`
//! only destinations inside the operator's own networks (RFC 8955 section
//! 6's intent, for a box with no unicast RIB to validate against). A
//! refused route is counted by peer and reason; the session stays up.

use sluice_bgp::flowspec::{Component, Family, Flow, FlowOrder, PrefixMatch};
use sluice_bgp::message::{AfiSafi, FlowAction, Update, BLACKHOLE};
use sluice_bgp::session::{self, PeerConfig};
use sluice_control::safety::Safety;
use sluice_engine::flows::{FlowCounts, FlowRule, FlowTable, FlowVerdict, Placement, PoliceKey, Policer, Rate};
use sluice_policy::Event;
use sluice_rules::Prefix;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A data plane's BGP settings (`--bgp-*`).
#[derive(Clone, Debug)]
pub struct BgpConfig {
    pub peers: Vec<PeerConfig>,
    /// Accept the passive peers' connections here.
    pub listen: Option<SocketAddr>,
    /// Unicast routes with one of these communities are blackholes.
    pub blackhole_communities: Vec<u32>,
    /// Keep a peer's routes when its session is down (until it is back and
    /// has sent them again).
    pub keep_on_down: bool,
    pub placement: Placement,
    /// Routes one peer may hold (flows and blackholes together).
    pub max_routes: usize,
    /// Bytes one route may cost ([`route_cost`]), and one peer's routes
    /// together.
    pub max_route_bytes: usize,
    pub max_peer_bytes: usize,
    /// What every route is checked against.
    pub guard: RouteGuard,
}

/// What a route must pass before it is held: the product's safety net, and
/// where flows may point.
#[derive(Clone, Debug, Default)]
pub struct RouteGuard {
    /// `--never-block`, `--min-prefix-*` (the product's own, reread on SIGHUP).
    pub safety: Arc<Safety>,
    /// `--bgp-allow-undirected`: take flows with no destination prefix.
    pub allow_undirected: bool,
    /// `--bgp-protect FILE`: destinations must lie inside one of these.
    pub protect: Vec<Prefix>,
}

/// Why a route was refused, as `ctl bgp` and the metrics name it.
pub const REFUSAL_REASONS: [&str; 7] =
    ["max_routes", "route_bytes", "peer_bytes", "never_block", "min_prefix", "undirected", "outside_protect"];

/// A flow component's prefix as the addresses it can match: with an
/// offset (RFC 8956) the pattern is not anchored at the top bit, so it
/// reaches across the whole family (as wide as /0).
fn reach(p: &PrefixMatch) -> Prefix {
    Prefix::new(p.addr, if p.offset > 0 { 0 } else { p.len })
}

impl RouteGuard {
    /// Whether `dst` lies inside one of the protected networks (always,
    /// without `--bgp-protect`).
    fn protects(&self, dst: &Prefix) -> bool {
        self.protect.is_empty() || self.protect.iter().any(|p| p.contains_prefix(dst))
    }

    /// A blackhole's prefix: as a `ctl add` of it would be checked.
    pub fn blackhole(&self, p: &Prefix) -> Result<(), (&'static str, String)> {
        self.safety.check(p).map_err(|r| (r.reason(), r.to_string()))?;
        if !self.protects(p) {
            return Err(("outside_protect", "it is outside every --bgp-protect network".into()));
        }
        Ok(())
    }

    /// A flow: its destination as a blackhole's prefix; its source never
    /// over a never-blocked network (and, with no destination, no wider
    /// than the least prefix either); no destination at all only when
    /// allowed.
    pub fn flow(&self, f: &Flow) -> Result<(), (&'static str, String)> {
        let (mut dst, mut src) = (None, None);
        for c in &f.components {
            match c {
                Component::Destination(p) => dst = Some(reach(p)),
                Component::Source(p) => src = Some(reach(p)),
                _ => {}
            }
        }
        let net = self.safety.net();
        match &dst {
            Some(d) => self.blackhole(d).map_err(|(r, why)| (r, format!("its destination {d}: {why}")))?,
            None if !self.allow_undirected => {
                return Err((
                    "undirected",
                    "it has no destination prefix (--bgp-allow-undirected takes such flows)".into(),
                ))
            }
            None if !self.protect.is_empty() => {
                return Err(("outside_protect", "it has no destination inside a --bgp-protect network".into()))
            }
            None => {}
        }
        if let Some(s) = &src {
            let checked = match dst {
                Some(_) => {
                    net.never.overlapping(s).map_or(Ok(()), |listed| Err(sluice_rules::Refusal::NeverBlock { listed }))
                }
                None => net.check(s),
            };
            checked.map_err(|r| (r.reason(), format!("its source {s}: {r}")))?;
        }
        Ok(())
    }
}

impl BgpConfig {
    pub fn new(peers: Vec<PeerConfig>) -> BgpConfig {
        BgpConfig {
            peers,
            listen: None,
            blackhole_communities: vec![BLACKHOLE],
            keep_on_down: false,
            placement: Placement::First,
            max_routes: DEFAULT_MAX_ROUTES,
            max_route_bytes: DEFAULT_MAX_ROUTE_BYTES,
            max_peer_bytes: DEFAULT_MAX_PEER_BYTES,
            guard: RouteGuard::default(),
        }
    }
}

/// The `--bgp-*` flags (`sluice bridge`, `sluice shield`): BGP peers whose FlowSpec and
/// blackhole routes become rules (docs/bgp.md), as given, before
/// [`BgpFlags::config`] checks them.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BgpFlags {
    /// Peer with this router (ADDR or ADDR:PORT, port 179); repeat for more.
    /// sluice only receives routes.
    #[arg(id = "bgp_peer", long = "bgp-peer", value_name = "ADDR")]
    pub peers: Vec<String>,
    /// The peer's AS: one for all peers, or one per --bgp-peer in order.
    #[arg(id = "bgp_peer_as", long = "bgp-peer-as", value_name = "N")]
    pub peer_as: Vec<u32>,
    /// This side's AS (sent in OPEN; 4-octet ASes are announced).
    #[arg(id = "bgp_local_as", long = "bgp-local-as", value_name = "N")]
    pub local_as: Option<u32>,
    /// This side's BGP identifier.
    #[arg(id = "bgp_router_id", long = "bgp-router-id", value_name = "A.B.C.D")]
    pub router_id: Option<std::net::Ipv4Addr>,
    /// Wait for the peers to connect here (ADDR or ADDR:PORT) instead of
    /// connecting to them.
    #[arg(id = "bgp_listen", long = "bgp-listen", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Unicast routes with this community are blackholes (default 65535:666); repeatable.
    #[arg(id = "bgp_blackhole_community", long = "bgp-blackhole-community", value_name = "ASN:VALUE")]
    pub blackhole_communities: Vec<String>,
    /// Keep a peer's routes while its session is down (default: removed,
    /// or kept for its graceful-restart time).
    #[arg(id = "bgp_keep_on_down", long = "bgp-keep-on-down")]
    pub keep_on_down: bool,
    /// Where the flows sit: first (before the rule file's rules) or last.
    #[arg(id = "bgp_rules", long = "bgp-rules", value_name = "first|last", default_value = "first")]
    pub rules: String,
    /// The hold time proposed (the lower of the two sides' is agreed).
    #[arg(id = "bgp_hold_time", long = "bgp-hold-time", value_name = "SECONDS", default_value_t = 90)]
    pub hold_time: u16,
    /// A file holding the TCP MD5 key (RFC 2385) of the sessions (one line).
    #[arg(id = "bgp_password_file", long = "bgp-password-file", value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Routes one peer may hold, flows and blackholes together (default
    /// 100000); the rest are refused and counted.
    #[arg(id = "bgp_max_routes", long = "bgp-max-routes", value_name = "N")]
    pub max_routes: Option<usize>,
    /// Bytes one route may cost once decoded and held (default 8192; a
    /// route as operators write them costs under 1 KiB); larger ones are
    /// refused and counted.
    #[arg(id = "bgp_max_route_bytes", long = "bgp-max-route-bytes", value_name = "BYTES")]
    pub max_route_bytes: Option<usize>,
    /// Bytes one peer's routes may cost together (default 134217728, 128
    /// MiB); announcements past it are refused and counted.
    #[arg(id = "bgp_max_peer_bytes", long = "bgp-max-peer-bytes", value_name = "BYTES")]
    pub max_peer_bytes: Option<usize>,
    /// The longest graceful-restart window granted a peer.
    #[arg(id = "bgp_restart_time", long = "bgp-restart-time", value_name = "SECONDS", default_value_t = 120)]
    pub restart_time: u16,
    /// Take FlowSpec flows with no destination prefix (source-only, or
    /// protocol and ports alone); refused by default: such a flow reaches
    /// every destination, this host's too.
    #[arg(id = "bgp_allow_undirected", long = "bgp-allow-undirected")]
    pub allow_undirected: bool,
    /// The operator's own networks (a list file): flows and blackholes are
    /// taken only for destinations inside them (RFC 8955 section 6).
    #[arg(id = "bgp_protect", long = "bgp-protect", value_name = "FILE")]
    pub protect_file: Option<std::path::PathBuf>,
}

/// `ASN:VALUE` (both 16-bit) as one 32-bit community.
pub fn community(s: &str) -> Result<u32, String> {
    let bad = || format!("`{s}` is not a community (ASN:VALUE, each 0 to 65535; e.g. 65535:666)");
    let (a, v) = s.split_once(':').ok_or_else(bad)?;
    let (a, v) = (a.parse::<u16>().map_err(|_| bad())?, v.parse::<u16>().map_err(|_| bad())?);
    Ok(u32::from(a) << 16 | u32::from(v))
}

fn with_port(s: &str, flag: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 179))
        .map_err(|_| format!("{flag} `{s}` is not an address (ADDR or ADDR:PORT; port 179 by default)"))
}

impl BgpFlags {
    /// The config these flags ask for (None: no `--bgp-peer`), or what is
    /// wrong with them.
    pub fn config(&self) -> Result<Option<BgpConfig>, String> {
        if self.peers.is_empty() {
            if self.local_as.is_some() || !self.peer_as.is_empty() || self.listen.is_some() {
                return Err("--bgp-local-as, --bgp-peer-as and --bgp-listen need --bgp-peer".into());
            }
            return Ok(None);
        }
        let local_as = self.local_as.ok_or("--bgp-peer needs --bgp-local-as N (this side's AS)")?;
        let router_id = self.router_id.ok_or("--bgp-peer needs --bgp-router-id A.B.C.D")?;
        if !(self.peer_as.len() == 1 || self.peer_as.len() == self.peers.len()) {
            return Err(format!(
                "--bgp-peer-as: give one AS for every peer or one per --bgp-peer ({} peers, {} ASes)",
                self.peers.len(),
                self.peer_as.len()
            ));
        }
        let md5_key = match &self.password_file {
            Some(f) => {
                let text = std::fs::read(f).map_err(|e| format!("--bgp-password-file {}: {e}", f.display()))?;
                if let Some(warn) = sluice_control::lapi::secret_file_warning("--bgp-password-file", f) {
                    tracing::warn!("{warn}");
                }
                // One line: a trailing newline is not part of the key.
                let key = text.strip_suffix(b"\n").unwrap_or(&text);
                let key = key.strip_suffix(b"\r").unwrap_or(key);
                if key.is_empty() || key.len() > sluice_bgp::md5::MAX_KEY {
                    return Err(format!(
                        "--bgp-password-file {}: the key must be 1 to {} bytes (it is {})",
                        f.display(),
                        sluice_bgp::md5::MAX_KEY,
                        key.len()
                    ));
                }
                Some(key.to_vec())
            }
            None => None,
        };
        let mut peers = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            let addr = with_port(p, "--bgp-peer")?;
            if peers.iter().any(|q: &PeerConfig| q.addr.ip() == addr.ip()) {
                return Err(format!("--bgp-peer {} given twice", addr.ip()));
            }
            let peer_as = self.peer_as[if self.peer_as.len() == 1 { 0 } else { i }];
            let mut c = PeerConfig::new(addr, peer_as, local_as, router_id);
            c.hold_time = self.hold_time;
            c.restart_time = self.restart_time;
            c.md5_key.clone_from(&md5_key);
            peers.push(c);
        }
        if self.hold_time == 1 || self.hold_time == 2 {
            return Err("--bgp-hold-time must be 0 or at least 3 seconds (RFC 4271)".into());
        }
        let placement = match self.rules.as_str() {
            "first" | "" => Placement::First,
            "last" => Placement::Last,
            r => return Err(format!("--bgp-rules `{r}`: first (before the rule file's rules) or last")),
        };
        let blackhole_communities = if self.blackhole_communities.is_empty() {
            vec![BLACKHOLE]
        } else {
            self.blackhole_communities.iter().map(|c| community(c)).collect::<Result<_, _>>()?
        };
        Ok(Some(BgpConfig {
            peers,
            listen: self.listen.as_deref().map(|l| with_port(l, "--bgp-listen")).transpose()?,
            blackhole_communities,
            keep_on_down: self.keep_on_down,
            placement,
            max_routes: match self.max_routes {
                Some(0) => return Err("--bgp-max-routes must be at least 1".into()),
                Some(n) => n,
                None => DEFAULT_MAX_ROUTES,
            },
            max_route_bytes: match self.max_route_bytes {
                Some(n) if n < MIN_ROUTE_BYTES => {
                    return Err(format!(
                        "--bgp-max-route-bytes must be at least {MIN_ROUTE_BYTES} (what the smallest route costs)"
                    ))
                }
                Some(n) => n,
                None => DEFAULT_MAX_ROUTE_BYTES,
            },
            max_peer_bytes: match self.max_peer_bytes {
                Some(n) if n < MIN_ROUTE_BYTES => {
                    return Err(format!("--bgp-max-peer-bytes must be at least {MIN_ROUTE_BYTES} (one small route)"))
                }
                Some(n) => n,
                None => DEFAULT_MAX_PEER_BYTES,
            },
            guard: RouteGuard {
                // The product puts its own net here when it starts.
                safety: Arc::default(),
                allow_undirected: self.allow_undirected,
                protect: match &self.protect_file {
                    Some(f) => {
                        let l = sluice_rules::load_list(f, false).map_err(|e| format!("--bgp-protect {e}"))?;
                        if l.prefixes.is_empty() {
                            return Err(format!(
                                "--bgp-protect {}: no networks in it (every route would be refused)",
                                f.display()
                            ));
                        }
                        l.prefixes
                    }
                    None => Vec::new(),
                },
            },
        }))
    }
}

/// The route families a peer's count is kept by.
pub const FAMILIES: [&str; 4] = ["ipv4-flowspec", "ipv6-flowspec", "ipv4-blackhole", "ipv6-blackhole"];

fn family_index(family: Family, blackhole: bool) -> usize {
    usize::from(family == Family::V6) + 2 * usize::from(blackhole)
}

/// One session as `ctl bgp` and the metrics show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SessionRow {
    pub peer: String,
    pub peer_as: u32,
    /// `established`, `idle` (down, retrying), `connect` (never up yet).
    pub state: &'static str,
    /// Seconds in this state.
    #[serde(skip)]
    pub since: Option<Instant>,
    /// Routes held per family (of [`FAMILIES`]).
    pub routes: [u64; 4],
    /// UPDATEs received per family (an UPDATE touching several counts in each).
    pub updates: [u64; 4],
    /// Why it last went down.
    pub last_error: Option<String>,
    /// Routes kept past a session's end: until this (graceful restart) or
    /// for good (`--bgp-keep-on-down`).
    pub stale: bool,
    /// Announcements refused over `--bgp-max-routes`.
    pub refused: u64,
    /// Announcements refused, by reason (of [`REFUSAL_REASONS`]; the
    /// `max_routes` ones are `refused` too).
    pub refused_by: BTreeMap<&'static str, u64>,
    /// What its routes cost together ([`route_cost`]), against
    /// `--bgp-max-peer-bytes`.
    pub bytes: u64,
}

/// What the RIB thread shows the rest of the product.
#[derive(Debug, Default)]
pub struct BgpState {
    pub sessions: Mutex<Vec<SessionRow>>,
    /// Tables handed to the control thread.
    pub publications: AtomicU64,
}

impl BgpState {
    /// The sessions as `ctl bgp` answers.
    pub fn json(&self) -> serde_json::Value {
        let rows = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let sessions: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["seconds"] = r.since.map(|s| s.elapsed().as_secs()).into();
                v["routes"] =
                    FAMILIES.iter().zip(r.routes).map(|(f, n)| (f.to_string(), serde_json::Value::from(n))).collect();
                v["updates"] =
                    FAMILIES.iter().zip(r.updates).map(|(f, n)| (f.to_string(), serde_json::Value::from(n))).collect();
                v
            })
            .collect();
        serde_json::json!({ "ok": true, "sessions": sessions })
    }

    /// The sessions' families (by peer) and the flows' in force (by
    /// family, by flow): keyed by what occurred, so written by hand.
    pub fn families(
        &self,
        enc: &mut prometheus_client::encoding::DescriptorEncoder,
        table: Option<&Arc<FlowTable>>,
    ) -> Result<(), std::fmt::Error> {
        self.session_families(enc)?;
        flow_families(enc, table)
    }

    /// The sessions' families alone ([`SESSION_FAMILIES`]), for a data
    /// plane that counts the flows its own way (the shield, in the kernel).
    pub fn session_families(
        &self,
        enc: &mut prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use sluice_metrics::{counter, gauge};
        let rows = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let up: Vec<_> =
            rows.iter().map(|r| (vec![("peer", r.peer.clone())], i64::from(r.state == "established"))).collect();
        gauge(enc, "sluice_bgp_session_up", "1 while the BGP session with the peer is established.", &up)?;
        let mut updates = Vec::new();
        for r in &rows {
            for (f, n) in FAMILIES.iter().zip(r.updates) {
                updates.push((vec![("peer", r.peer.clone()), ("family", (*f).to_owned())], n));
            }
        }
        counter(enc, "sluice_bgp_updates", "UPDATEs received, by peer and the route family they touched.", &updates)?;
        let refused: Vec<_> = rows
            .iter()
            .flat_map(|r| {
                REFUSAL_REASONS.iter().map(|reason| {
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
        )
    }
}

/// The flows in force (by family) and their counters (by flow), as the
/// userspace judge counts them.
fn flow_families(
    enc: &mut prometheus_client::encoding::DescriptorEncoder,
    table: Option<&Arc<FlowTable>>,
) -> Result<(), std::fmt::Error> {
    use sluice_metrics::{counter, gauge};
    let mut by_family = [0i64; 4];
    let mut busiest = Vec::new();
    for r in table.iter().flat_map(|t| t.rules()) {
        by_family[family_index(r.flow.family, r.blackhole)] += 1;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        busiest.push((l(&r.counts.packets), l(&r.counts.dropped), r.flow.to_string()));
    }
    let fam: Vec<_> = FAMILIES.iter().zip(by_family).map(|(f, n)| (vec![("family", (*f).to_owned())], n)).collect();
    gauge(enc, "sluice_flow_rules", "Flows in force from BGP peers, by family (FlowSpec, blackhole routes).", &fam)?;
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
    if table.is_some_and(|t| t.rules().len() > FLOW_SERIES) {
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

/// The families [`BgpState::session_families`] writes.
pub const SESSION_FAMILIES: &[&str] =
    &["sluice_bgp_session_up", "sluice_bgp_updates", "sluice_bgp_routes_refused", "sluice_bgp_route_bytes"];

/// The families [`BgpState::families`] writes.
pub const SERVED_FAMILIES: &[&str] = &[
    "sluice_bgp_session_up",
    "sluice_bgp_updates",
    "sluice_bgp_routes_refused",
    "sluice_bgp_route_bytes",
    "sluice_flow_rules",
    "sluice_flow_rule_packets",
    "sluice_flow_rule_dropped",
];

/// Flows served by name in `sluice_flow_rule_*` (the busiest; the rest are
/// summed under `rule="other"`), so a table of 10,000 flows is not 10,000
/// series.
pub const FLOW_SERIES: usize = 32;

/// A route's key in its peer's table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Flow(Family, Vec<u8>),
    Blackhole(IpAddr, u8),
}

struct Route {
    rule: FlowRule,
    /// Left from a session that ended (graceful restart, keep-on-down).
    stale: bool,
    /// Its place in the table. Encoded once, when the route comes: a
    /// rebuild sorts by these bytes instead of encoding components again
    /// in every comparison.
    order: FlowOrder,
    /// What it is counted at ([`route_cost`]).
    cost: usize,
}

#[derive(Default)]
struct PeerRib {
    routes: HashMap<Key, Route>,
    /// The routes' costs added up: what `--bgp-max-peer-bytes` bounds.
    bytes: usize,
    /// Stale routes are dropped at this instant (graceful restart).
    stale_until: Option<Instant>,
    /// Announcements refused, by reason (of [`REFUSAL_REASONS`]).
    refused: BTreeMap<&'static str, u64>,
    /// When a refusal was last logged, and refusals since not logged.
    logged: Option<Instant>,
    unlogged: u64,
}

/// Routes one peer may hold by default (`--bgp-max-routes`): a peer that
/// announces more gets the rest refused (counted, logged), so what one
/// router sends cannot grow the process without bound.
pub const DEFAULT_MAX_ROUTES: usize = 100_000;

/// Bytes one route may cost by default (`--bgp-max-route-bytes`). A
/// route as operators write them (a destination, a protocol, a few ports
/// or a short range) costs under 1 KiB ([`route_cost`]); 8 KiB leaves
/// room for lists of about 100 operators, while one 4 KB NLRI of 2,000
/// one-byte operators (about 100 KiB once held, copied into the table and
/// compiled) is refused.
pub const DEFAULT_MAX_ROUTE_BYTES: usize = 8 << 10;

/// Bytes one peer's routes may cost together by default
/// (`--bgp-max-peer-bytes`): 128 MiB holds `--bgp-max-routes`' 100,000
/// routes of about 1.3 KiB each, and eight peers at their full budget
/// stay at half of the unit's `MemoryMax=2G`, the other half left for
/// the table being replaced while the new one is published, the rule
/// sets and the rings.
pub const DEFAULT_MAX_PEER_BYTES: usize = 128 << 20;

/// The least a route can cost (a blackhole, with a peer address as its
/// source): a byte limit under it would refuse everything.
pub const MIN_ROUTE_BYTES: usize = 512;

/// What a route is counted at, in bytes: a measure of the memory it
/// keeps while held, not an allocator's exact figure. Its flow three
/// times (the RIB's own, the table's copy, and the compiled tests, which
/// have at most a range per operator), its key and sort key, the
/// strings it carries (twice: the RIB's and the table's), its counters
/// and policer, and the fixed size of its slots in the RIB's map and the
/// table. A 4 KB NLRI decodes to about 16 bytes per operator: its cost
/// grows with its bytes on the wire, which is what a peer controls.
pub fn route_cost(flow_key: usize, order: usize, rule: &FlowRule) -> usize {
    let strings = rule.source.capacity()
        + rule.unsupported.iter().map(|u| u.capacity() + std::mem::size_of::<String>()).sum::<usize>();
    let policer = match rule.verdict {
        FlowVerdict::Police(_) => std::mem::size_of::<Policer>() + std::mem::size_of::<AtomicU64>(),
        _ => 0,
    };
    std::mem::size_of::<Key>()
        + std::mem::size_of::<Route>()
        + std::mem::size_of::<FlowRule>()
        + std::mem::size_of::<FlowCounts>()
        + flow_key
        + order
        + 3 * rule.flow.heap_bytes()
        + 2 * strings
        + policer
}

/// Every peer's routes, and what becomes of them as sessions come and go.
pub struct Rib {
    peers: BTreeMap<SocketAddr, PeerRib>,
    blackhole: Vec<u32>,
    keep_on_down: bool,
    max_routes: usize,
    max_route_bytes: usize,
    max_peer_bytes: usize,
    guard: RouteGuard,
}

/// A peer's refusals are logged at most once a second (with the count of
/// those not logged): a peer's flood of hostile routes is not a flood of
/// log lines.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

impl PeerRib {
    /// Takes `key`'s route out, its bytes with it; whether there was one.
    fn remove(&mut self, key: &Key) -> bool {
        match self.routes.remove(key) {
            Some(r) => {
                self.bytes -= r.cost;
                true
            }
            None => false,
        }
    }

    /// Holds `route` under `key` (in place of what was there).
    fn insert(&mut self, key: Key, route: Route) {
        self.bytes += route.cost;
        if let Some(old) = self.routes.insert(key, route) {
            self.bytes -= old.cost;
        }
    }

    /// Whether `route` may be held under `key`, by bytes: `Err` with the
    /// refusal's reason and why. The route it replaces is freed first.
    fn fits(&self, key: &Key, cost: usize, max_route: usize, max_peer: usize) -> Result<(), (&'static str, String)> {
        if cost > max_route {
            return Err(("route_bytes", format!("it costs {cost} bytes, over --bgp-max-route-bytes {max_route}")));
        }
        let freed = self.routes.get(key).map_or(0, |r| r.cost);
        let total = self.bytes - freed + cost;
        if total > max_peer {
            return Err((
                "peer_bytes",
                format!(
                    "the peer's routes would cost {total} bytes, over --bgp-max-peer-bytes {max_peer} (this one {cost})"
                ),
            ));
        }
        Ok(())
    }

    /// Counts a refusal of `what` (the route) for `reason`, and logs it
    /// unless a line went out for this peer within the last second.
    fn refuse(&mut self, peer: SocketAddr, reason: &'static str, what: &dyn std::fmt::Display, why: &str) {
        *self.refused.entry(reason).or_default() += 1;
        let now = Instant::now();
        if self.logged.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_EVERY) {
            self.unlogged += 1;
            return;
        }
        let more = std::mem::take(&mut self.unlogged);
        let more = if more > 0 { format!(" ({more} more refused since the last such line)") } else { String::new() };
        tracing::warn!(
            event = "bgp_route_refused",
            reason,
            "route from {peer} refused ({reason}): {what}: {why}{more}"
        );
        self.logged = Some(now);
    }
}

/// How a route's actions read as a flow's verdict: (verdict, go on,
/// unsupported actions).
fn verdict_of(actions: &[FlowAction], old: Option<&FlowRule>) -> (FlowVerdict, bool, Vec<String>) {
    let mut verdict = FlowVerdict::Accept;
    let mut go_on = false;
    let mut unsupported = Vec::new();
    for a in actions {
        match *a {
            FlowAction::RateBytes(r) | FlowAction::RatePackets(r) if r <= 0.0 || r.is_nan() => {
                verdict = FlowVerdict::Drop
            }
            FlowAction::RateBytes(r) | FlowAction::RatePackets(r) => {
                let rate = if matches!(a, FlowAction::RateBytes(_)) {
                    Rate::BytesPerSecond(f64::from(r))
                } else {
                    Rate::PacketsPerSecond(f64::from(r))
                };
                // The same rate again keeps its bucket (and what it holds).
                verdict = match old.map(|o| &o.verdict) {
                    Some(FlowVerdict::Police(p)) if p.rate == rate => FlowVerdict::Police(Arc::clone(p)),
                    _ => FlowVerdict::Police(Arc::new(Policer::new(rate, None, PoliceKey::Rule))),
                };
            }
            FlowAction::Action { sample, terminal } => {
                go_on = terminal;
                if sample {
                    unsupported.push("sample".to_string());
                }
            }
            FlowAction::Redirect => unsupported.push("redirect".into()),
            FlowAction::Marking(d) => unsupported.push(format!("mark dscp {d}")),
        }
    }
    (verdict, go_on, unsupported)
}

impl Rib {
    pub fn new(blackhole: Vec<u32>, keep_on_down: bool) -> Rib {
        Rib {
            peers: BTreeMap::new(),
            blackhole,
            keep_on_down,
            max_routes: DEFAULT_MAX_ROUTES,
            max_route_bytes: DEFAULT_MAX_ROUTE_BYTES,
            max_peer_bytes: DEFAULT_MAX_PEER_BYTES,
            guard: RouteGuard::default(),
        }
    }

    /// At most `route` bytes per route and `peer` bytes per peer ([`route_cost`]).
    pub fn with_max_bytes(mut self, route: usize, peer: usize) -> Rib {
        self.max_route_bytes = route;
        self.max_peer_bytes = peer;
        self
    }

    /// What `peer`'s routes cost together ([`route_cost`]).
    pub fn bytes(&self, peer: SocketAddr) -> usize {
        self.peers.get(&peer).map_or(0, |r| r.bytes)
    }

    /// Whether each peer's count of bytes is the sum of what its routes
    /// cost, and within the limits (each route and the peer's total): the
    /// invariant the `bgp_rib` fuzz target checks after every event.
    pub fn audit(&self) -> Result<(), String> {
        for (peer, rib) in &self.peers {
            let sum: usize = rib.routes.values().map(|r| r.cost).sum();
            if sum != rib.bytes {
                return Err(format!("{peer}: {} bytes counted, its routes cost {sum}", rib.bytes));
            }
            if sum > self.max_peer_bytes {
                return Err(format!("{peer}: {sum} bytes held, over {}", self.max_peer_bytes));
            }
            if let Some(r) = rib.routes.values().find(|r| r.cost > self.max_route_bytes) {
                return Err(format!("{peer}: a route of {} bytes held, over {}", r.cost, self.max_route_bytes));
            }
            if rib.routes.len() > self.max_routes {
                return Err(format!("{peer}: {} routes held, over {}", rib.routes.len(), self.max_routes));
            }
        }
        Ok(())
    }

    /// Routes held, all peers together.
    pub fn len(&self) -> usize {
        self.peers.values().map(|r| r.routes.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check every route against `guard` (a new RIB refuses only a /0).
    pub fn with_guard(mut self, guard: RouteGuard) -> Rib {
        self.guard = guard;
        self
    }

    /// At most `n` routes per peer.
    pub fn with_max_routes(mut self, n: usize) -> Rib {
        self.max_routes = n;
        self
    }

    /// Apply one UPDATE from `peer`; returns whether a route changed.
    /// Each route is taken or refused on its own: those that pass the
    /// guard and fit the peer's limits are held, the others are counted
    /// under their reason (and withdraw what the peer held under the same
    /// key: its newest word on that route is a refused one), and the
    /// session goes on.
    pub fn update(&mut self, peer: SocketAddr, u: &Update) -> bool {
        let rib = self.peers.entry(peer).or_default();
        let (max, max_route, max_peer) = (self.max_routes, self.max_route_bytes, self.max_peer_bytes);
        let mut changed = false;
        let (mut refused, mut unsupported_seen) = (0u64, None);
        for f in &u.flows_withdrawn {
            changed |= rib.remove(&Key::Flow(f.family, f.to_bytes()));
        }
        for &(addr, len) in &u.withdrawn {
            changed |= rib.remove(&Key::Blackhole(addr, len));
        }
        for f in &u.flows_announced {
            let key = Key::Flow(f.family, f.to_bytes());
            if let Err((reason, why)) = self.guard.flow(f) {
                // As an implicit withdrawal of what the peer held under it.
                changed |= rib.remove(&key);
                rib.refuse(peer, reason, &format_args!("flow `{f}`"), &why);
                continue;
            }
            let old = rib.routes.get(&key).map(|r| &r.rule);
            if old.is_none() && rib.routes.len() >= max {
                refused += 1;
                continue;
            }
            let (verdict, go_on, unsupported) = verdict_of(&u.flow_actions, old);
            if !unsupported.is_empty() && unsupported_seen.is_none() {
                unsupported_seen = Some(format!("flow `{f}`: {}", unsupported.join(", ")));
            }
            let counts = old.map_or_else(Arc::default, |o| Arc::clone(&o.counts));
            let rule = FlowRule {
                flow: f.clone(),
                verdict,
                go_on,
                blackhole: false,
                source: peer.ip().to_string(),
                unsupported,
                counts,
            };
            let order = FlowOrder::of(f);
            let Key::Flow(_, bytes) = &key else { unreachable!("a flow's key") };
            let cost = route_cost(bytes.len(), order.heap_bytes(), &rule);
            if let Err((reason, why)) = rib.fits(&key, cost, max_route, max_peer) {
                changed |= rib.remove(&key);
                rib.refuse(peer, reason, &format_args!("flow `{f}`"), &why);
                continue;
            }
            rib.insert(key, Route { rule, stale: false, order, cost });
            changed = true;
        }
        let blackhole = u.communities.iter().any(|c| self.blackhole.contains(c));
        for &(addr, len) in &u.announced {
            let key = Key::Blackhole(addr, len);
            if !blackhole {
                // A route without the community replaces a blackhole of the
                // same prefix (and is not one itself).
                changed |= rib.remove(&key);
                continue;
            }
            if let Err((reason, why)) = self.guard.blackhole(&Prefix::new(addr, len)) {
                changed |= rib.remove(&key);
                rib.refuse(peer, reason, &format_args!("blackhole {addr}/{len}"), &why);
                continue;
            }
            if !rib.routes.contains_key(&key) && rib.routes.len() >= max {
                refused += 1;
                continue;
            }
            let counts = rib.routes.get(&key).map_or_else(Arc::default, |r| Arc::clone(&r.rule.counts));
            let family = if addr.is_ipv6() { Family::V6 } else { Family::V4 };
            let rule = FlowRule {
                flow: Flow { family, components: vec![Component::Destination(PrefixMatch::new(addr, len))] },
                verdict: FlowVerdict::Drop,
                go_on: false,
                blackhole: true,
                source: peer.ip().to_string(),
                unsupported: Vec::new(),
                counts,
            };
            let order = FlowOrder::of(&rule.flow);
            let cost = route_cost(0, order.heap_bytes(), &rule);
            if let Err((reason, why)) = rib.fits(&key, cost, max_route, max_peer) {
                changed |= rib.remove(&key);
                rib.refuse(peer, reason, &format_args!("blackhole {addr}/{len}"), &why);
                continue;
            }
            rib.insert(key, Route { rule, stale: false, order, cost });
            changed = true;
        }
        // Logged once per UPDATE, not once per route: a peer's flood of
        // routes is not a flood of log lines.
        if let Some(what) = unsupported_seen {
            tracing::warn!(
                event = "bgp_unsupported_action",
                "UPDATE from {peer}: {what} not supported (and so for every flow it carries that names it); matches are counted"
            );
        }
        if refused > 0 {
            *rib.refused.entry("max_routes").or_default() += refused;
            tracing::warn!(
                event = "bgp_max_routes",
                "UPDATE from {peer}: {refused} route(s) refused, the peer holds {max} (--bgp-max-routes)"
            );
        }
        if let Some(family) = u.end_of_rib {
            // End-of-RIB (RFC 4724), per family: what the restarted peer did
            // not send again of this family is gone; its other families'
            // stale routes wait for their own marker (or the window's end).
            changed |= Self::drop_stale(rib, Some(family));
        }
        changed
    }

    /// Drops the stale routes of `family` (all of them: None); the restart
    /// window ends with the last.
    fn drop_stale(rib: &mut PeerRib, family: Option<AfiSafi>) -> bool {
        let of = |k: &Key| match *k {
            Key::Flow(f, _) => AfiSafi { afi: if f == Family::V6 { 2 } else { 1 }, safi: 133 },
            Key::Blackhole(a, _) => AfiSafi { afi: if a.is_ipv6() { 2 } else { 1 }, safi: 1 },
        };
        let before = rib.routes.len();
        let mut freed = 0;
        rib.routes.retain(|k, r| {
            let keep = !(r.stale && family.is_none_or(|f| of(k) == f));
            freed += if keep { 0 } else { r.cost };
            keep
        });
        rib.bytes -= freed;
        if rib.routes.values().all(|r| !r.stale) {
            rib.stale_until = None;
        }
        rib.routes.len() != before
    }

    /// `peer`'s session ended: its routes go, or stay stale for `keep_for`
    /// (graceful restart) or for good (keep-on-down). Returns whether a
    /// route went.
    pub fn down(&mut self, peer: SocketAddr, keep_for: Duration, now: Instant) -> bool {
        let Some(rib) = self.peers.get_mut(&peer) else { return false };
        if rib.routes.is_empty() || (rib.stale_until.is_some() && rib.routes.values().all(|r| r.stale)) {
            // Nothing to remove, or a window already running: the failed
            // reconnects during a restart do not end it early.
            return false;
        }
        if self.keep_on_down || !keep_for.is_zero() {
            for r in rib.routes.values_mut() {
                r.stale = true;
            }
            // A second end while stale does not extend the first window.
            if !self.keep_on_down && rib.stale_until.is_none() {
                rib.stale_until = Some(now + keep_for);
            }
            false
        } else {
            rib.routes.clear();
            rib.bytes = 0;
            true
        }
    }

    /// Drops stale routes whose restart window has passed; returns the
    /// peers whose routes went.
    pub fn expire(&mut self, now: Instant) -> Vec<SocketAddr> {
        let mut gone = Vec::new();
        for (peer, rib) in &mut self.peers {
            if rib.stale_until.is_some_and(|t| now >= t) && Self::drop_stale(rib, None) {
                gone.push(*peer);
            }
        }
        gone
    }

    /// Routes held per family, whether some are stale, and the refusals
    /// by reason.
    fn counts(&self, peer: SocketAddr) -> ([u64; 4], bool, BTreeMap<&'static str, u64>) {
        let mut n = [0u64; 4];
        let mut stale = false;
        let refused = self.peers.get(&peer).map_or_else(BTreeMap::new, |r| r.refused.clone());
        if let Some(rib) = self.peers.get(&peer) {
            for r in rib.routes.values() {
                n[family_index(r.rule.flow.family, r.rule.blackhole)] += 1;
                stale |= r.stale;
            }
        }
        (n, stale, refused)
    }

    /// Every route, in the table's order: by the sort keys the routes
    /// keep, so a rebuild compares bytes and encodes nothing. Flows that
    /// tie keep one order from table to table: peers in address order,
    /// each peer's by key.
    fn ordered(&self) -> Vec<(&FlowOrder, &FlowRule)> {
        let mut all: Vec<(&FlowOrder, usize, &Key, &FlowRule)> = Vec::with_capacity(self.len());
        for (i, rib) in self.peers.values().enumerate() {
            all.extend(rib.routes.iter().map(|(k, r)| (&r.order, i, k, &r.rule)));
        }
        all.sort_unstable_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)).then_with(|| a.2.cmp(b.2)));
        all.into_iter().map(|(o, _, _, r)| (o, r)).collect()
    }

    /// Every peer's routes as one table, with the orders made when they
    /// came: handed over in order, the table's own (stable) sort finds
    /// one run.
    pub fn table(&self, placement: Placement) -> FlowTable {
        FlowTable::with_orders(self.ordered().into_iter().map(|(o, r)| (o.clone(), r.clone())).collect(), placement)
    }
}

/// The running BGP feed.
pub struct Bgp {
    pub state: Arc<BgpState>,
    threads: Vec<JoinHandle<()>>,
}

impl Bgp {
    /// Starts the sessions, the listener (with passive peers) and the RIB
    /// thread, which sends each new table to `events`. Everything stops
    /// with `stop`.
    pub fn spawn(
        cfg: BgpConfig,
        events: Sender<Event>,
        stop: &Arc<AtomicBool>,
        state: Arc<BgpState>,
    ) -> std::io::Result<Bgp> {
        *state.sessions.lock().unwrap_or_else(PoisonError::into_inner) = cfg
            .peers
            .iter()
            .map(|p| SessionRow {
                peer: p.addr.to_string(),
                peer_as: p.peer_as,
                state: "connect",
                since: Some(Instant::now()),
                routes: [0; 4],
                updates: [0; 4],
                last_error: None,
                stale: false,
                refused: 0,
                refused_by: BTreeMap::new(),
                bytes: 0,
            })
            .collect();
        let (tx, rx) = sync_channel(RIB_QUEUE);
        let mut threads = Vec::new();
        let mut inboxes: HashMap<IpAddr, SyncSender<TcpStream>> = HashMap::new();
        let listener = cfg.listen.map(TcpListener::bind).transpose()?;
        if let Some(l) = &listener {
            // The listener checks each peer's segments with its key.
            for p in &cfg.peers {
                if let Some(key) = &p.md5_key {
                    sluice_bgp::md5::set_key(l, p.addr.ip(), key).map_err(|e| {
                        std::io::Error::new(e.kind(), format!("TCP MD5 key for {} on the listener: {e}", p.addr.ip()))
                    })?;
                }
            }
        }
        for p in &cfg.peers {
            let accepted = (p.passive || listener.is_some()).then(|| {
                // One connection waits for the session at most: more from
                // the same peer are closed, not piled up.
                let (atx, arx) = sync_channel(1);
                inboxes.insert(p.addr.ip(), atx);
                arx
            });
            let p = PeerConfig { passive: accepted.is_some(), ..p.clone() };
            let (tx, stop) = (tx.clone(), Arc::clone(stop));
            threads.push(
                std::thread::Builder::new()
                    .name("sluice-bgp-peer".into())
                    .spawn(move || session::run(p, tx, stop, accepted))?,
            );
        }
        drop(tx);
        if let Some(l) = listener {
            l.set_nonblocking(true)?;
            let stop = Arc::clone(stop);
            threads.push(
                std::thread::Builder::new()
                    .name("sluice-bgp-listen".into())
                    .spawn(move || listen(l, inboxes, &stop))?,
            );
        }
        let (st, stop) = (Arc::clone(&state), Arc::clone(stop));
        threads.push(
            std::thread::Builder::new()
                .name("sluice-bgp-rib".into())
                .spawn(move || rib_loop(cfg, rx, events, st, &stop))?,
        );
        Ok(Bgp { state, threads })
    }

    /// Waits for the threads (after `stop`).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Hands each accepted connection to its peer's session, by address;
/// others are closed.
fn listen(l: TcpListener, inboxes: HashMap<IpAddr, SyncSender<TcpStream>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, from)) => {
                let _ = s.set_nonblocking(false);
                // An IPv4 peer on a `[::]` listener comes as ::ffff:a.b.c.d.
                match inboxes.get(&from.ip().to_canonical()) {
                    Some(tx) => {
                        if let Err(TrySendError::Full(_)) = tx.try_send(s) {
                            tracing::warn!(
                                event = "bgp_refused",
                                "BGP connection from {from}: that peer has one waiting already; closed"
                            );
                        }
                    }
                    None => tracing::warn!(event = "bgp_refused", "BGP connection from {from}: not a configured peer"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                tracing::warn!("accepting BGP connections: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Events waiting for the RIB thread, every peer's together. A full queue
/// holds the sessions back (each waits before reading on, and TCP holds
/// its peer back in turn): a flood is bounded here, not queued. At most
/// 64 UPDATEs of 4 KB, each decoding to at most about 130 KB.
pub const RIB_QUEUE: usize = 64;

/// While events keep coming, a table is published at most this often (the
/// first change after a quiet spell at once): under a flood the rebuilds
/// stay a bounded share of the RIB thread's time, and another peer's
/// withdrawal waits for one such interval and one rebuild, not for the
/// flood to end.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

fn rib_loop(
    cfg: BgpConfig,
    rx: Receiver<session::SessionEvent>,
    events: Sender<Event>,
    state: Arc<BgpState>,
    stop: &AtomicBool,
) {
    let mut rib = Rib::new(cfg.blackhole_communities.clone(), cfg.keep_on_down)
        .with_max_routes(cfg.max_routes)
        .with_max_bytes(cfg.max_route_bytes, cfg.max_peer_bytes)
        .with_guard(cfg.guard.clone());
    // A change not published yet, and when the last table went out.
    let mut changed = false;
    let mut published = Instant::now().checked_sub(PUBLISH_EVERY).unwrap_or_else(Instant::now);
    while !stop.load(Ordering::Relaxed) {
        let wait = if changed {
            (published + PUBLISH_EVERY).saturating_duration_since(Instant::now())
        } else {
            Duration::from_millis(200)
        };
        let mut next = match rx.recv_timeout(wait) {
            Ok(e) => Some(e),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut touched = std::collections::BTreeSet::new();
        // Everything waiting, handled together, for at most an interval:
        // then the table goes out even if more is waiting.
        let started = Instant::now();
        while let Some(e) = next.take() {
            let (peer, went) = on_event(e, &mut rib, &state, cfg.keep_on_down);
            changed |= went;
            touched.extend(peer);
            if started.elapsed() < PUBLISH_EVERY {
                next = rx.try_recv().ok();
            }
        }
        for peer in rib.expire(Instant::now()) {
            tracing::warn!(
                event = "bgp_stale_removed",
                "the restart window of {peer} passed: its stale routes removed"
            );
            changed = true;
            touched.insert(peer);
        }
        for peer in touched {
            let (routes, stale, refused) = rib.counts(peer);
            row(&state, peer, &mut |r| {
                r.routes = routes;
                r.stale = stale;
                r.refused = refused.get("max_routes").copied().unwrap_or(0);
                r.refused_by.clone_from(&refused);
                r.bytes = rib.bytes(peer) as u64;
            });
        }
        if changed && published.elapsed() >= PUBLISH_EVERY {
            changed = false;
            let table = rib.table(cfg.placement);
            // The interval counts from the table's end: a slow rebuild
            // (a large table) still leaves an interval for the events.
            published = Instant::now();
            state.publications.fetch_add(1, Ordering::Relaxed);
            if events.send(Event::Flows(Arc::new(table))).is_err() {
                return;
            }
        }
    }
}

/// One session event into the RIB and the session's row: the peer whose
/// routes it touched, and whether the table changed.
fn on_event(
    e: session::SessionEvent,
    rib: &mut Rib,
    state: &BgpState,
    keep_on_down: bool,
) -> (Option<SocketAddr>, bool) {
    match e {
        session::SessionEvent::Up { peer, open, hold_time } => {
            tracing::info!(
                event = "bgp_up",
                "BGP session with {peer} (AS {}, router id {}) established; hold time {hold_time} s",
                open.asn(),
                open.router_id
            );
            row(state, peer, &mut |r| {
                r.state = "established";
                r.since = Some(Instant::now());
            });
            (None, false)
        }
        session::SessionEvent::Update { peer, update } => {
            if let Some(why) = &update.treat_as_withdraw {
                tracing::warn!(
                    event = "bgp_treat_as_withdraw",
                    "UPDATE from {peer}: {why}; its routes are withdrawn (RFC 7606)"
                );
            }
            let mut fams = [false; 4];
            for f in update.flows_announced.iter().chain(&update.flows_withdrawn) {
                fams[family_index(f.family, false)] = true;
            }
            for (a, _) in update.announced.iter().chain(&update.withdrawn) {
                fams[family_index(if a.is_ipv6() { Family::V6 } else { Family::V4 }, true)] = true;
            }
            row(state, peer, &mut |r| {
                for (n, f) in r.updates.iter_mut().zip(fams) {
                    *n += u64::from(f);
                }
            });
            (Some(peer), rib.update(peer, &update))
        }
        session::SessionEvent::Down { peer, reason, keep_for } => {
            let (held, _, _) = rib.counts(peer);
            let held: u64 = held.iter().sum();
            let went = rib.down(peer, keep_for, Instant::now());
            let what = if went {
                format!("its {held} route(s) removed")
            } else if held == 0 {
                "it held no routes".to_string()
            } else if keep_on_down {
                format!("its {held} route(s) kept (--bgp-keep-on-down)")
            } else {
                format!("its {held} route(s) kept for the restart time ({} s)", keep_for.as_secs())
            };
            tracing::warn!(event = "bgp_down", "BGP session with {peer} down: {reason}; {what}");
            row(state, peer, &mut |r| {
                if r.state == "established" {
                    r.since = Some(Instant::now());
                }
                r.state = "idle";
                r.last_error = Some(reason.clone());
            });
            (Some(peer), went)
        }
    }
}

/// Changes the row of `peer` in `ctl bgp`'s table.
fn row(state: &BgpState, peer: SocketAddr, f: &mut dyn FnMut(&mut SessionRow)) {
    let mut rows = state.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(r) = rows.iter_mut().find(|r| r.peer == peer.to_string()) {
        f(r);
    }
}

/// Counters of a flow as `ctl flows` shows them.
pub fn counts_json(c: &FlowCounts) -> serde_json::Value {
    serde_json::json!({
        "packets": c.packets.load(Ordering::Relaxed),
        "bytes": c.bytes.load(Ordering::Relaxed),
        "dropped": c.dropped.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bgp::flowspec::NumericOp;

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, n], 179))
    }

    fn udp53() -> Flow {
        let eq = |v| NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: v };
        Flow {
            family: Family::V4,
            components: vec![
                Component::Destination(PrefixMatch::new("203.0.113.0".parse().unwrap(), 24)),
                Component::Protocol(vec![eq(17)]),
                Component::DestinationPort(vec![eq(53)]),
            ],
        }
    }

    fn announce(flows: Vec<Flow>, actions: Vec<FlowAction>) -> Update {
        Update { flows_announced: flows, flow_actions: actions, ..Update::default() }
    }

    fn flow(components: Vec<Component>) -> Flow {
        Flow { family: Family::V4, components }
    }

    fn dst(p: &str) -> Component {
        let p: Prefix = p.parse().unwrap();
        Component::Destination(PrefixMatch::new(p.addr(), p.len()))
    }

    fn src(p: &str) -> Component {
        let p: Prefix = p.parse().unwrap();
        Component::Source(PrefixMatch::new(p.addr(), p.len()))
    }

    /// A guard with `never` never blocked, /8 and /16 at least.
    fn guarded(never: &str, allow_undirected: bool, protect: &[&str]) -> (Rib, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, format!("{never}\n")).unwrap();
        let guard = RouteGuard {
            safety: Arc::new(Safety::load(Some(&f), 8, 16).unwrap()),
            allow_undirected,
            protect: protect.iter().map(|p| p.parse().unwrap()).collect(),
        };
        (Rib::new(vec![BLACKHOLE], false).with_guard(guard), dir)
    }

    fn discard() -> Vec<FlowAction> {
        vec![FlowAction::RateBytes(0.0)]
    }

    fn blackhole(p: &str) -> Update {
        let p: Prefix = p.parse().unwrap();
        Update { announced: vec![(p.addr(), p.len())], communities: vec![BLACKHOLE], ..Update::default() }
    }

    #[test]
    fn no_route_can_turn_the_bridge_against_what_it_protects() {
        let (mut rib, _dir) = guarded("192.0.2.7", false, &[]);
        let udp =
            || Component::Protocol(vec![NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: 17 }]);
        let hostile = [
            (blackhole("0.0.0.0/0"), "min_prefix"),
            (blackhole("192.0.2.0/24"), "never_block"),
            (announce(vec![flow(vec![dst("128.0.0.0/1")])], discard()), "min_prefix"),
            (announce(vec![flow(vec![dst("192.0.2.7/32")])], discard()), "never_block"),
            (announce(vec![flow(vec![dst("198.51.100.0/24"), src("192.0.2.0/28")])], discard()), "never_block"),
            (announce(vec![flow(vec![udp()])], discard()), "undirected"),
            (announce(vec![flow(vec![src("203.0.113.9/32")])], discard()), "undirected"),
        ];
        for (u, _) in &hostile {
            assert!(!rib.update(peer(1), u), "refused: nothing changed");
        }
        let (held, _, refused) = rib.counts(peer(1));
        assert_eq!(held, [0; 4]);
        let mut want: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, reason) in &hostile {
            *want.entry(reason).or_default() += 1;
        }
        assert_eq!(refused, want);
        // The narrow flow and blackhole beside them go in.
        assert!(rib.update(peer(1), &announce(vec![udp53()], discard())));
        assert!(rib.update(peer(1), &blackhole("198.51.100.9/32")));
        assert_eq!(rib.table(Placement::First).rules().len(), 2);
    }

    #[test]
    fn undirected_flows_on_request_and_a_protected_destination_when_asked() {
        let (mut rib, _dir) = guarded("192.0.2.7", true, &[]);
        assert!(rib.update(peer(1), &announce(vec![flow(vec![src("203.0.113.9/32")])], discard())));
        // With no destination, the source is the flow's only anchor: as wide
        // as a ctl add may be, and never over a never-blocked network.
        assert!(!rib.update(peer(1), &announce(vec![flow(vec![src("0.0.0.0/1")])], discard())));
        assert!(!rib.update(peer(1), &announce(vec![flow(vec![src("192.0.2.0/24")])], discard())));
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("min_prefix", 1), ("never_block", 1)]));

        let (mut rib, _dir) = guarded("192.0.2.7", true, &["198.51.100.0/24", "2001:db8::/32"]);
        assert!(rib.update(peer(1), &blackhole("198.51.100.9/32")));
        assert!(rib.update(peer(1), &announce(vec![flow(vec![dst("198.51.100.128/25")])], discard())));
        assert!(!rib.update(peer(1), &blackhole("203.0.113.9/32")));
        assert!(!rib.update(peer(1), &announce(vec![flow(vec![dst("198.51.0.0/16")])], discard())), "wider than it");
        assert!(!rib.update(peer(1), &announce(vec![flow(vec![src("203.0.113.9/32")])], discard())));
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("outside_protect", 3)]));
    }

    #[test]
    fn an_offset_reaches_across_the_family_and_a_refused_announcement_withdraws_the_held_one() {
        let (mut rib, _dir) = guarded("192.0.2.7", false, &[]);
        let mut offset = PrefixMatch::new("2001:db8::".parse().unwrap(), 64);
        offset.offset = 32;
        let f6 = Flow { family: Family::V6, components: vec![Component::Destination(offset)] };
        assert!(!rib.update(peer(1), &announce(vec![f6], discard())));
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("min_prefix", 1)]));
        // Held under a looser net, then announced again under a tighter one.
        let (mut loose, _d) = guarded("10.9.9.9", false, &[]);
        let f = flow(vec![dst("192.0.2.0/24")]);
        assert!(loose.update(peer(1), &announce(vec![f.clone()], discard())));
        loose.guard = rib.guard.clone();
        assert!(loose.update(peer(1), &announce(vec![f], discard())), "the held route went");
        assert_eq!(loose.table(Placement::First).rules().len(), 0);
    }

    #[test]
    fn an_ipv4_peer_reaches_its_session_through_a_dual_stack_listener_and_only_one_waits() {
        let l = TcpListener::bind("[::]:0").unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let (tx, rx) = sync_channel(1);
        let inboxes = HashMap::from([(IpAddr::from([127, 0, 0, 1]), tx)]);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let t = std::thread::spawn(move || listen(l, inboxes, &flag));
        let _peer = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // A second and a third from the same peer while the first waits:
        // closed by the listener, not queued.
        let mut extra: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
        for e in &mut extra {
            e.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(std::io::Read::read(e, &mut [0u8; 1]).unwrap_or(1), 0, "closed");
        }
        let got = rx.recv_timeout(Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let s = got.expect("the IPv4 peer's connection reached its session");
        assert_eq!(s.peer_addr().unwrap().ip().to_canonical(), IpAddr::from([127, 0, 0, 1]));
        assert!(rx.try_recv().is_err(), "one waits, no more");
    }

    #[test]
    fn flags_are_checked_and_mapped() {
        let f = BgpFlags {
            peers: vec!["192.0.2.1".into(), "[2001:db8::1]:1179".into()],
            peer_as: vec![65001],
            local_as: Some(65002),
            router_id: Some("192.0.2.2".parse().unwrap()),
            blackhole_communities: vec!["65000:666".into()],
            rules: "last".into(),
            hold_time: 90,
            restart_time: 120,
            ..BgpFlags::default()
        };
        let c = f.config().unwrap().unwrap();
        assert_eq!(c.peers[0].addr, "192.0.2.1:179".parse().unwrap());
        assert_eq!(c.peers[1].addr, "[2001:db8::1]:1179".parse().unwrap());
        assert_eq!(c.peers[1].peer_as, 65001);
        assert_eq!(c.blackhole_communities, vec![65000 << 16 | 666]);
        assert_eq!(c.placement, Placement::Last);
        let err = |g: BgpFlags| g.config().unwrap_err();
        assert!(err(BgpFlags { local_as: None, ..f.clone() }).contains("--bgp-local-as"));
        assert!(err(BgpFlags { peer_as: vec![1, 2, 3], ..f.clone() }).contains("one per --bgp-peer"));
        assert!(err(BgpFlags { blackhole_communities: vec!["666".into()], ..f.clone() }).contains("ASN:VALUE"));
        assert!(err(BgpFlags { rules: "middle".into(), ..f.clone() }).contains("first"));
        assert!(err(BgpFlags { peers: vec!["router".into()], ..f.clone() }).contains("not an address"));
        assert_eq!((c.max_route_bytes, c.max_peer_bytes), (DEFAULT_MAX_ROUTE_BYTES, DEFAULT_MAX_PEER_BYTES));
        let c = BgpFlags { max_route_bytes: Some(4096), max_peer_bytes: Some(1 << 20), ..f.clone() }.config();
        assert_eq!(c.map(|c| c.map(|c| (c.max_route_bytes, c.max_peer_bytes))), Ok(Some((4096, 1 << 20))));
        assert!(err(BgpFlags { max_route_bytes: Some(100), ..f.clone() }).contains("--bgp-max-route-bytes"));
        assert!(err(BgpFlags { max_peer_bytes: Some(0), ..f.clone() }).contains("--bgp-max-peer-bytes"));
        assert!(BgpFlags::default().config().unwrap().is_none());
    }

    #[test]
    fn routes_come_go_and_keep_their_counters() {
        let mut rib = Rib::new(vec![BLACKHOLE], false);
        assert!(rib.update(peer(1), &announce(vec![udp53()], vec![FlowAction::RateBytes(0.0)])));
        let t = rib.table(Placement::First);
        assert_eq!(t.rules().len(), 1);
        assert!(matches!(t.rules()[0].verdict, FlowVerdict::Drop));
        t.rules()[0].counts.packets.fetch_add(5, Ordering::Relaxed);
        // The same flow again, now policed: one route, the counters kept.
        rib.update(peer(1), &announce(vec![udp53()], vec![FlowAction::RateBytes(1e6)]));
        let t = rib.table(Placement::First);
        assert_eq!(t.rules().len(), 1);
        assert!(matches!(&t.rules()[0].verdict, FlowVerdict::Police(p) if p.rate == Rate::BytesPerSecond(1e6)));
        assert_eq!(t.rules()[0].counts.packets.load(Ordering::Relaxed), 5);
        // A blackhole, and a plain route for the same prefix lifts it.
        let bh = Update {
            announced: vec![("198.51.100.7".parse().unwrap(), 32)],
            communities: vec![BLACKHOLE],
            ..Update::default()
        };
        assert!(rib.update(peer(2), &bh));
        assert_eq!(rib.table(Placement::First).rules().len(), 2);
        let plain = Update { announced: vec![("198.51.100.7".parse().unwrap(), 32)], ..Update::default() };
        assert!(rib.update(peer(2), &plain));
        assert_eq!(rib.table(Placement::First).rules().len(), 1);
        // Withdrawn.
        assert!(rib.update(peer(1), &Update { flows_withdrawn: vec![udp53()], ..Update::default() }));
        assert!(rib.table(Placement::First).is_empty());
    }

    #[test]
    fn a_peer_holds_at_most_max_routes() {
        let mut rib = Rib::new(vec![BLACKHOLE], false).with_max_routes(2);
        let flows: Vec<Flow> = (1..=3u8)
            .map(|i| Flow {
                family: Family::V4,
                components: vec![Component::Destination(PrefixMatch::new(IpAddr::from([203, 0, 113, i]), 32))],
            })
            .collect();
        assert!(rib.update(peer(1), &announce(flows.clone(), vec![FlowAction::RateBytes(0.0)])));
        assert_eq!(rib.table(Placement::First).rules().len(), 2, "the third refused");
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("max_routes", 1)]));
        // Announcing one it holds again is a replacement, not a new route;
        // a blackhole over the limit is refused too; another peer has its own.
        rib.update(peer(1), &announce(vec![flows[0].clone()], vec![]));
        let bh = Update {
            announced: vec![("198.51.100.7".parse().unwrap(), 32)],
            communities: vec![BLACKHOLE],
            ..Update::default()
        };
        rib.update(peer(1), &bh);
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("max_routes", 2)]));
        assert!(rib.update(peer(2), &bh));
        assert_eq!(rib.table(Placement::First).rules().len(), 3);
        // A withdrawal makes room.
        rib.update(peer(1), &Update { flows_withdrawn: vec![flows[0].clone()], ..Update::default() });
        assert!(rib.update(peer(1), &announce(vec![flows[2].clone()], vec![])));
        assert_eq!(rib.table(Placement::First).rules().len(), 3);
    }

    /// Flows to 203.0.113.I/32 (I of `ids`), UDP.
    fn flows_to(ids: std::ops::Range<u32>) -> Vec<Flow> {
        ids.map(|i| {
            let [_, _, a, b] = i.to_be_bytes();
            let eq = |v| NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: v };
            flow(vec![
                Component::Destination(PrefixMatch::new(IpAddr::from([10, a, b, 1]), 32)),
                Component::Protocol(vec![eq(17)]),
            ])
        })
        .collect()
    }

    /// One 4 KB NLRI of one-byte `==` operators on the port, as a peer
    /// sends it (decoded from its bytes, so its lists are as long as a
    /// decoder makes them).
    fn huge_flow() -> Flow {
        let mut body = vec![1, 24, 203, 0, 113, 4];
        let n = 2_000;
        for i in 0..n {
            body.extend_from_slice(&[if i + 1 == n { 0x81 } else { 0x01 }, (i % 256) as u8]);
        }
        let mut nlri = (0xf000 | body.len() as u16).to_be_bytes().to_vec();
        nlri.extend_from_slice(&body);
        Flow::decode(Family::V4, &nlri).unwrap().0
    }

    fn cost_of(f: &Flow) -> usize {
        let mut rib = Rib::new(vec![BLACKHOLE], false).with_max_bytes(usize::MAX, usize::MAX);
        rib.update(peer(9), &announce(vec![f.clone()], discard()));
        rib.bytes(peer(9))
    }

    #[test]
    fn a_route_costs_what_its_bytes_decode_to() {
        let typical = cost_of(&udp53());
        let huge = huge_flow();
        let big = cost_of(&huge);
        eprintln!(
            "cost: udp53 flow {typical} B, blackhole {} B, 4 KB NLRI ({} B) {big} B",
            {
                let mut rib = Rib::new(vec![BLACKHOLE], false);
                rib.update(peer(9), &blackhole("198.51.100.9/32"));
                rib.bytes(peer(9))
            },
            huge.to_bytes().len()
        );
        // What the defaults were reasoned from.
        assert!(typical < 1024, "a route as operators write them: {typical}");
        assert!(big > 16 * huge.to_bytes().len(), "a 4 KB NLRI decodes to 16+ bytes a wire byte: {big}");
        assert!(big > DEFAULT_MAX_ROUTE_BYTES);
        let mut rib = Rib::new(vec![BLACKHOLE], false);
        rib.update(peer(9), &blackhole("198.51.100.9/32"));
        assert!(rib.bytes(peer(9)) <= MIN_ROUTE_BYTES, "the least limit takes a blackhole");
        assert!(DEFAULT_MAX_ROUTES * typical < DEFAULT_MAX_PEER_BYTES);
    }

    #[test]
    fn a_peer_holds_routes_within_its_bytes_and_a_withdrawal_frees_them() {
        let each = cost_of(&flows_to(0..1)[0]);
        // Room for three small flows, and not a policer more.
        let mut rib = Rib::new(vec![BLACKHOLE], false).with_max_bytes(DEFAULT_MAX_ROUTE_BYTES, 3 * each + 8);
        // One UPDATE: the huge flow refused by its own size, three of five
        // small ones taken, two refused over the peer's total.
        let mut flows = vec![huge_flow()];
        flows.extend(flows_to(0..5));
        assert!(rib.update(peer(1), &announce(flows.clone(), discard())));
        assert_eq!(rib.counts(peer(1)).2, BTreeMap::from([("peer_bytes", 2), ("route_bytes", 1)]));
        assert_eq!(rib.table(Placement::First).rules().len(), 3);
        assert_eq!(rib.bytes(peer(1)), 3 * each);
        // Another peer has its own budget.
        assert!(rib.update(peer(2), &announce(flows_to(0..3), discard())));
        assert_eq!(rib.bytes(peer(2)), 3 * each);
        // A withdrawal frees its bytes: the next one fits.
        assert!(rib.update(peer(1), &Update { flows_withdrawn: flows_to(0..1), ..Update::default() }));
        assert_eq!(rib.bytes(peer(1)), 2 * each);
        assert!(rib.update(peer(1), &announce(flows_to(4..5), discard())));
        assert_eq!(rib.bytes(peer(1)), 3 * each);
        // Announced again, the same route is a replacement, not more bytes.
        assert!(rib.update(peer(1), &announce(flows_to(4..5), discard())));
        assert_eq!(rib.bytes(peer(1)), 3 * each);
        // A replacement that no longer fits (policed now: a policer more)
        // withdraws what it replaced.
        assert!(rib.update(peer(1), &announce(flows_to(4..5), vec![FlowAction::RateBytes(1e6)])));
        assert_eq!(rib.counts(peer(1)).2.get("peer_bytes"), Some(&3));
        assert_eq!(rib.bytes(peer(1)), 2 * each);
        // The session's end frees everything; so does a stale window's.
        assert!(rib.down(peer(1), Duration::ZERO, Instant::now()));
        assert_eq!(rib.bytes(peer(1)), 0);
        rib.down(peer(2), Duration::from_secs(5), Instant::now());
        assert_eq!(rib.bytes(peer(2)), 3 * each, "kept while stale");
        rib.expire(Instant::now() + Duration::from_secs(5));
        assert_eq!(rib.bytes(peer(2)), 0);
    }

    #[test]
    fn the_table_is_handed_over_in_precedence_order() {
        // 10,000 flows from two peers: destinations, protocols and ports
        // that make every comparison reach past the first component.
        let mut rib = Rib::new(vec![BLACKHOLE], false);
        let eq = |v| NumericOp { and: false, lt: false, gt: false, eq: true, len: 2, value: v };
        for p in 1..=2u8 {
            let flows: Vec<Flow> = (0..5_000u32)
                .map(|i| {
                    let [_, _, a, b] = (i / 4).to_be_bytes();
                    flow(vec![
                        Component::Destination(PrefixMatch::new(IpAddr::from([10, a, b, 0]), 24 + (i % 4) as u8)),
                        Component::Protocol(vec![eq(u64::from(6 + 11 * (i % 2)))]),
                        Component::DestinationPort(vec![eq(u64::from(i % 1000)), eq(u64::from(p) * 7)]),
                    ])
                })
                .collect();
            for chunk in flows.chunks(100) {
                rib.update(peer(p), &announce(chunk.to_vec(), discard()));
            }
        }
        assert_eq!(rib.len(), 10_000);
        let ordered = rib.ordered();
        for w in ordered.windows(2) {
            let (a, b) = (&w[0].1.flow, &w[1].1.flow);
            assert_ne!(a.precedence(b), std::cmp::Ordering::Greater, "{a} / {b}");
        }
        // The table keeps the RIB's order (its rebuild time is measured
        // by `sluice-bench flowspec`, not here).
        let table = rib.table(Placement::First);
        assert_eq!(table.rules().len(), 10_000);
        assert!(table.rules().iter().zip(&ordered).all(|(t, (_, r))| t.flow == r.flow));
    }

    #[test]
    fn a_restarting_peer_keeps_its_routes_for_the_window_then_loses_the_stale_ones() {
        let mut rib = Rib::new(vec![BLACKHOLE], false);
        let now = Instant::now();
        let other = Flow { components: udp53().components[..2].to_vec(), ..udp53() };
        rib.update(peer(1), &announce(vec![udp53(), other.clone()], vec![FlowAction::RateBytes(0.0)]));
        assert!(!rib.down(peer(1), Duration::from_secs(30), now), "kept for the restart time");
        assert_eq!(rib.table(Placement::First).rules().len(), 2);
        assert!(rib.expire(now + Duration::from_secs(29)).is_empty());
        // Reconnecting fails meanwhile (no graceful restart on a refused
        // connection): the window still holds.
        assert!(!rib.down(peer(1), Duration::ZERO, now + Duration::from_secs(1)));
        assert_eq!(rib.table(Placement::First).rules().len(), 2);
        // Back, sends one of the two again. IPv4 unicast's End-of-RIB does
        // not end FlowSpec's restart (RFC 4724: per family); FlowSpec's does,
        // and the flow not sent again goes.
        rib.update(peer(1), &announce(vec![udp53()], vec![FlowAction::RateBytes(0.0)]));
        let eor = |f| Update { end_of_rib: Some(f), ..Update::default() };
        assert!(!rib.update(peer(1), &eor(AfiSafi::IPV4_UNICAST)));
        assert!(!rib.update(peer(1), &Update::default()), "an empty UPDATE that is no marker ends nothing");
        assert_eq!(rib.table(Placement::First).rules().len(), 2);
        assert!(rib.update(peer(1), &eor(AfiSafi::IPV4_FLOWSPEC)));
        assert_eq!(rib.table(Placement::First).rules().len(), 1);
        // Down without graceful restart: gone at once.
        assert!(rib.down(peer(1), Duration::ZERO, now));
        assert!(rib.table(Placement::First).is_empty());
        // Down with graceful restart, never back: gone after the window.
        rib.update(peer(1), &announce(vec![udp53()], vec![FlowAction::RateBytes(0.0)]));
        rib.down(peer(1), Duration::from_secs(30), now);
        assert_eq!(rib.expire(now + Duration::from_secs(30)), vec![peer(1)]);
        assert!(rib.table(Placement::First).is_empty());
        // Keep-on-down keeps them.
        let mut rib = Rib::new(vec![BLACKHOLE], true);
        rib.update(peer(1), &announce(vec![udp53()], vec![]));
        assert!(!rib.down(peer(1), Duration::ZERO, now));
        assert!(rib.expire(now + Duration::from_secs(3600)).is_empty());
        assert_eq!(rib.table(Placement::First).rules().len(), 1);
        assert!(matches!(rib.table(Placement::First).rules()[0].verdict, FlowVerdict::Accept));
    }
}
