//! Forwards the guard's IP blocks to where other boxes, or this one's
//! bridge, enforce them: a bridge's control socket (`add SET IP timeout S`
//! lines, one atomic batch) and a CrowdSec Local API as a watcher (each
//! block an alert with a `ban` decision, `POST /v1/alerts`, logged in with
//! `/v1/watchers/login` and again on 401). At most one push per second per
//! destination; a push that fails keeps its blocks and is retried with
//! backoff, so nothing is lost while a destination is away.

use serde_json::json;
use sluice_control::command::SetCommand;
use sluice_control::lapi::{self, LapiTls};
use sluice_control::socket;
use sluice_rules::Prefix;
use std::io::Read;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// One block to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedBlock {
    pub ip: IpAddr,
    /// Prefix length: the whole address (32, 128) or the network the guard
    /// keys clients by (`--key-prefix-v6 64`).
    pub len: u8,
    /// Seconds it lasts; 0: until the guard restarts.
    pub secs: u64,
    /// The limit it broke, e.g. `request_rate`.
    pub limit: String,
}

impl ForwardedBlock {
    /// A host's address, else the network as `ADDR/LEN`.
    pub fn target(&self) -> String {
        if self.len >= if self.ip.is_ipv4() { 32 } else { 128 } {
            self.ip.to_string()
        } else {
            format!("{}/{}", self.ip, self.len)
        }
    }

    /// The `add` command that puts it in `set` of a bridge or a shield.
    pub fn add(&self, set: &str) -> SetCommand {
        let timeout = match self.secs {
            0 => None,
            s => Some(u32::try_from(s).unwrap_or(u32::MAX)),
        };
        SetCommand::Add { set: set.to_owned(), elem: Prefix::new(self.ip, self.len), timeout }
    }

    /// CrowdSec's scope for it: `Ip` or `Range`.
    pub fn scope(&self) -> &'static str {
        if self.target().contains('/') {
            "Range"
        } else {
            "Ip"
        }
    }
}

/// The duration a permanent block gets where one is required (a year).
pub const FOREVER_SECS: u64 = 365 * 24 * 3600;

/// The CrowdSec scenario name of a limit: `sluice/http-request-rate`.
pub fn scenario(limit: &str) -> String {
    format!("sluice/http-{}", limit.replace('_', "-"))
}

/// The largest login answer read: a token and its expiry are about 1 KB.
pub const MAX_LOGIN_ANSWER: u64 = 64 * 1024;

/// Logs in to a LAPI as a machine and pushes alerts.
pub struct Watcher {
    pub url: String,
    pub login: String,
    pub password: String,
    token: Option<String>,
    agent: ureq::Agent,
}

fn http_error(url: &str, e: ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, r) => {
            let body = r.into_string().unwrap_or_default();
            format!("{url}: HTTP {code}: {}", body.chars().take(200).collect::<String>())
        }
        e => lapi::transport_error(url, &e),
    }
}

/// RFC 3339 UTC, second precision, as the LAPI wants its times.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

impl Watcher {
    /// A watcher logging in as `login` with `password`, or, with an empty
    /// password and `tls` holding a client certificate, by the certificate
    /// (the LAPI admits it by its OU, `agents_allowed_ou`, and names the
    /// machine after its CN).
    pub fn new(url: &str, login: &str, password: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Watcher {
        // No redirects: the password and the token go to --crowdsec-url only.
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).redirects(0);
        let agent = match tls {
            Some(t) => agent.tls_config(t),
            None => agent,
        };
        Watcher {
            url: url.trim_end_matches('/').to_owned(),
            login: login.to_owned(),
            password: password.to_owned(),
            token: None,
            agent: agent.build(),
        }
    }

    fn log_in(&mut self) -> Result<String, String> {
        let url = format!("{}/v1/watchers/login", self.url);
        let body = if self.password.is_empty() {
            json!({ "scenarios": [] })
        } else {
            json!({ "machine_id": self.login, "password": self.password, "scenarios": [] })
        };
        let r = self
            .agent
            .post(&url)
            .set("User-Agent", concat!("sluice-guard/", env!("CARGO_PKG_VERSION")))
            .send_json(body)
            .map_err(|e| http_error(&url, e))?;
        if let Some(redirect) = lapi::redirect(&r) {
            return Err(format!("{url}: {redirect} refused: the password is sent to --crowdsec-url only"));
        }
        // Read to a bound: ureq's into_json would read whatever the peer sends.
        let mut answer = Vec::new();
        r.into_reader().take(MAX_LOGIN_ANSWER + 1).read_to_end(&mut answer).map_err(|e| format!("{url}: {e}"))?;
        if answer.len() as u64 > MAX_LOGIN_ANSWER {
            return Err(format!("{url}: the answer is over {MAX_LOGIN_ANSWER} bytes, which no login answer is"));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&answer).map_err(|e| format!("{url}: the answer is not JSON: {e}"))?;
        let token = v["token"].as_str().ok_or_else(|| format!("{url}: no token in the answer: {v}"))?.to_owned();
        self.token = Some(token.clone());
        Ok(token)
    }

    /// The alerts for `blocks`: one per block, each with its `ban`.
    pub fn alerts(blocks: &[ForwardedBlock]) -> serde_json::Value {
        let now = rfc3339(SystemTime::now());
        let alerts: Vec<serde_json::Value> = blocks
            .iter()
            .map(|b| {
                let scenario = scenario(&b.limit);
                let secs = if b.secs == 0 { FOREVER_SECS } else { b.secs };
                let (ip, scope) = (b.target(), b.scope());
                json!({
                    "scenario": scenario,
                    "scenario_hash": "",
                    "scenario_version": "",
                    "message": format!("sluice http-guard blocked {ip}: {}", b.limit),
                    "events_count": 1,
                    "start_at": now,
                    "stop_at": now,
                    "capacity": 0,
                    "leakspeed": "0",
                    "simulated": false,
                    "remediation": true,
                    "events": [{ "timestamp": now, "meta": [{ "key": "limit", "value": b.limit }] }],
                    "source": { "scope": scope, "value": ip, "ip": b.ip.to_string() },
                    // "crowdsec": what the LAPI and cscli expect of a
                    // watcher's decisions (`cscli decisions list` shows no
                    // other origin by default); the scenario says sluice.
                    "decisions": [{
                        "origin": "crowdsec",
                        "type": "ban",
                        "scope": scope,
                        "value": ip,
                        "duration": format!("{secs}s"),
                        "scenario": scenario,
                    }],
                })
            })
            .collect();
        serde_json::Value::Array(alerts)
    }

    /// Pushes `blocks` as alerts (logging in first, and again once on 401).
    pub fn push(&mut self, blocks: &[ForwardedBlock]) -> Result<(), String> {
        let url = format!("{}/v1/alerts", self.url);
        let body = Self::alerts(blocks);
        for attempt in 0..2 {
            let token = match self.token.clone() {
                Some(t) => t,
                None => self.log_in()?,
            };
            let r = self
                .agent
                .post(&url)
                .set("Authorization", &format!("Bearer {token}"))
                .set("User-Agent", concat!("sluice-guard/", env!("CARGO_PKG_VERSION")))
                .send_json(body.clone());
            match r {
                Ok(r) => {
                    return match lapi::redirect(&r) {
                        Some(redirect) => {
                            Err(format!("{url}: {redirect} refused: the token is sent to --crowdsec-url only"))
                        }
                        None => Ok(()),
                    }
                }
                Err(ureq::Error::Status(401, _)) if attempt == 0 => self.token = None,
                Err(e) => return Err(http_error(&url, e)),
            }
        }
        Err(format!("{url}: refused after logging in again"))
    }
}

/// Where blocks go.
pub enum Target {
    /// A bridge's control socket and the dynamic set to add to.
    Ctl {
        socket: PathBuf,
        set: String,
    },
    Crowdsec(Watcher),
}

/// Something blocks are pushed to: a [`Target`], or a test's fake.
pub trait Destination {
    /// How the logs and metrics name it.
    fn name(&self) -> String;
    /// Pushes the first blocks of `blocks` (at least one) in one request:
    /// how many it took, and of those how many it refused for good.
    fn push(&mut self, blocks: &[ForwardedBlock]) -> Result<Pushed, String>;
}

/// What one push took off the front of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// Blocks taken: applied, or refused for good (not to be sent again).
    pub taken: usize,
    /// Of those, refused (a bridge's safety net).
    pub refused: usize,
}

/// The most `add` lines in one request to a bridge's control socket. A
/// line is at most about 80 bytes with a set name of the usual length
/// (`add guard ` + an IPv6 /128 of 43 + ` timeout 31536000`), so 100,000
/// lines are about 8 MB, an eighth of the socket's 64 MiB
/// ([`socket::MAX_REQUEST`]); [`ctl_batch`] also stops at that many
/// bytes, for set names long enough to need it.
pub const MAX_BATCH: usize = 100_000;

/// The `add` lines for as many of `blocks` as fit in one request (at most
/// [`MAX_BATCH`] lines, at most `max_bytes`), and how many that is: at
/// least one, even if that one is over (the bridge then refuses it whole).
pub fn ctl_batch(set: &str, blocks: &[ForwardedBlock], max_bytes: usize) -> (String, usize) {
    let mut text = String::new();
    let mut n = 0;
    for b in blocks.iter().take(MAX_BATCH) {
        let line = ctl_line(set, b);
        if n > 0 && text.len() + line.len() > max_bytes {
            break;
        }
        text += &line;
        n += 1;
    }
    (text, n)
}

/// The `add` line of one block.
fn ctl_line(set: &str, b: &ForwardedBlock) -> String {
    format!("{}\n", b.add(set))
}

impl Destination for Target {
    fn name(&self) -> String {
        match self {
            Target::Ctl { socket, set } => format!("control socket {} (set {set})", socket.display()),
            Target::Crowdsec(w) => format!("crowdsec {}", w.url),
        }
    }

    /// Pushes the first blocks of `blocks` in one request. A bridge
    /// refuses a batch whole and names every line its safety net refused
    /// (`--never-block`, `--min-prefix-*`): those are dropped (sent again,
    /// they would be refused again and hold every later block back) and
    /// the rest sent again, each round one fewer at least.
    fn push(&mut self, blocks: &[ForwardedBlock]) -> Result<Pushed, String> {
        match self {
            Target::Ctl { socket, set } => {
                let (_, taken) = ctl_batch(set, blocks, socket::MAX_REQUEST as usize);
                let mut left: Vec<&ForwardedBlock> = blocks[..taken].iter().collect();
                loop {
                    if left.is_empty() {
                        return Ok(Pushed { taken, refused: taken });
                    }
                    let text: String = left.iter().map(|b| ctl_line(set, b)).collect();
                    let reply = socket::request(socket, &text, Duration::from_secs(30)).map_err(|e| e.to_string())?;
                    if reply["ok"] == true {
                        return Ok(Pushed { taken, refused: taken - left.len() });
                    }
                    let error = reply["error"].as_str().unwrap_or("refused").to_owned();
                    let refused: std::collections::HashSet<usize> = reply["refused_lines"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|l| l.as_u64()?.checked_sub(1).map(|i| i as usize))
                        .filter(|&i| i < left.len())
                        .collect();
                    if refused.is_empty() {
                        return Err(error);
                    }
                    tracing::warn!(
                        event = "forward_refused",
                        count = refused.len(),
                        "the bridge at {} refused {} block(s), dropped (the rest sent again): {error}",
                        socket.display(),
                        refused.len()
                    );
                    left = left.into_iter().enumerate().filter(|(i, _)| !refused.contains(i)).map(|(_, b)| b).collect();
                }
            }
            Target::Crowdsec(w) => {
                let taken = blocks.len().min(MAX_BATCH);
                w.push(&blocks[..taken]).map(|()| Pushed { taken, refused: 0 })
            }
        }
    }
}

/// How the guard reaches a LAPI as a watcher (`--crowdsec-*`): a machine's
/// login and password file, or over https a client certificate.
#[derive(Debug, Clone, Default)]
pub struct WatcherFlags {
    pub url: String,
    pub login: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
    pub tls: LapiTls,
}

/// The sinks the guard's flags ask for: a bridge's control socket and its
/// set, and a LAPI.
pub fn targets(ctl: Option<(&std::path::Path, &str)>, crowdsec: Option<&WatcherFlags>) -> Result<Vec<Target>, String> {
    let mut sinks = Vec::new();
    if let Some((socket, set)) = ctl {
        sinks.push(Target::Ctl { socket: socket.to_owned(), set: set.to_owned() });
    }
    if let Some(w) = crowdsec {
        sinks.push(Target::Crowdsec(watcher(w)?));
    }
    Ok(sinks)
}

fn watcher(w: &WatcherFlags) -> Result<Watcher, String> {
    let url = &w.url;
    let tls = lapi::check_url(url, &w.tls)?;
    let password = match (&w.password_file, w.tls.has_cert()) {
        (Some(pw), _) => {
            let password =
                std::fs::read_to_string(pw).map_err(|e| format!("--crowdsec-password-file {}: {e}", pw.display()))?;
            if let Some(warn) = lapi::secret_file_warning("--crowdsec-password-file", pw) {
                tracing::warn!("{warn}");
            }
            let password = password.trim();
            if password.is_empty() {
                return Err(format!("--crowdsec-password-file {}: the file is empty", pw.display()));
            }
            password.to_owned()
        }
        (None, true) => String::new(),
        (None, false) => {
            return Err(format!(
                "--crowdsec-url {url}: give --crowdsec-login and --crowdsec-password-file, or --crowdsec-cert"
            ))
        }
    };
    if !password.is_empty() && w.login.as_deref().is_none_or(str::is_empty) {
        return Err("--crowdsec-password-file needs --crowdsec-login (the machine's name)".into());
    }
    Ok(Watcher::new(url, w.login.as_deref().unwrap_or_default(), &password, tls))
}

/// What forwarding counts, per sink in the order given.
#[derive(Debug, Default)]
pub struct ForwardCounters {
    pub pushed: Vec<AtomicU64>,
    pub failed: Vec<AtomicU64>,
    pub pending: Vec<AtomicU64>,
    /// Blocks dropped unsent because [`MAX_PENDING`] were waiting (the
    /// oldest go first).
    pub shed: Vec<AtomicU64>,
    /// Blocks dropped unsent because they ran out while waiting.
    pub expired: Vec<AtomicU64>,
    pub names: Vec<String>,
}

impl ForwardCounters {
    pub fn new(sinks: &[impl Destination]) -> ForwardCounters {
        let n = sinks.len();
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect();
        ForwardCounters {
            pushed: zeros(),
            failed: zeros(),
            pending: zeros(),
            shed: zeros(),
            expired: zeros(),
            names: sinks.iter().map(Destination::name).collect(),
        }
    }
}

/// The most blocks kept for one destination while it is away. Past it the
/// oldest are shed (counted): they are the nearest to running out, and the
/// newest are the clients attacking now. A waiting block takes about 100
/// bytes (`waiting_block_size` measures it), so 100,000 are about 10 MB
/// per destination, and they go in one [`MAX_BATCH`] once it is back.
pub const MAX_PENDING: usize = 100_000;

/// `d` in seconds, rounded up: a block's time left is rounded down, so it
/// is never sent for longer than the guard holds it.
pub fn whole_secs_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A block waiting for its destination, and since when.
#[derive(Debug, Clone)]
struct Waiting {
    block: ForwardedBlock,
    since: Instant,
}

/// The blocks waiting for one destination, oldest first.
#[derive(Debug, Default)]
struct Queue {
    waiting: std::collections::VecDeque<Waiting>,
}

impl Queue {
    /// Adds `new` (taken at `now`), shedding the oldest past `cap`: how
    /// many were shed.
    fn add(&mut self, new: &[ForwardedBlock], now: Instant, cap: usize) -> u64 {
        self.waiting.extend(new.iter().map(|b| Waiting { block: b.clone(), since: now }));
        let over = self.waiting.len().saturating_sub(cap);
        self.waiting.drain(..over);
        over as u64
    }

    /// Drops the blocks that ran out by `now` (how many), and gives the
    /// first `max` of the rest with the seconds they have left: a block of
    /// 60 s that waited 20 s is sent for 40 s, so a destination that was
    /// away does not hold it longer than the guard does. A permanent block
    /// (0 s) stays permanent.
    fn batch(&mut self, now: Instant, max: usize) -> (Vec<ForwardedBlock>, u64) {
        let left = |w: &Waiting| w.block.secs.checked_sub(whole_secs_up(now.saturating_duration_since(w.since)));
        let before = self.waiting.len();
        // A timed block with no whole second left is gone; 0 would be sent
        // as "for good".
        self.waiting.retain(|w| w.block.secs == 0 || left(w).is_some_and(|s| s > 0));
        let expired = (before - self.waiting.len()) as u64;
        let blocks = self
            .waiting
            .iter()
            .take(max)
            .map(|w| ForwardedBlock {
                secs: if w.block.secs == 0 { 0 } else { left(w).unwrap_or(0) },
                ..w.block.clone()
            })
            .collect();
        (blocks, expired)
    }
}

/// The forwarding state of every destination: what waits, how often it
/// failed, when to try again.
struct Forwarder<D> {
    sinks: Vec<D>,
    queues: Vec<Queue>,
    failures: Vec<u32>,
    next_try: Vec<Instant>,
    counters: Arc<ForwardCounters>,
    cap: usize,
    batch: usize,
}

impl<D: Destination> Forwarder<D> {
    fn new(sinks: Vec<D>, counters: Arc<ForwardCounters>, now: Instant) -> Forwarder<D> {
        let n = sinks.len();
        Forwarder {
            sinks,
            queues: (0..n).map(|_| Queue::default()).collect(),
            failures: vec![0; n],
            next_try: vec![now; n],
            counters,
            cap: MAX_PENDING,
            batch: MAX_BATCH,
        }
    }

    /// Queues `new` (taken at `now`) for every destination and pushes to
    /// those due (all of them when `last`), batch after batch, until one
    /// fails or none is left.
    fn step(&mut self, new: &[ForwardedBlock], now: Instant, last: bool) {
        for (i, sink) in self.sinks.iter_mut().enumerate() {
            let (queue, c) = (&mut self.queues[i], &self.counters);
            c.shed[i].fetch_add(queue.add(new, now, self.cap), Ordering::Relaxed);
            while !queue.waiting.is_empty() && (now >= self.next_try[i] || last) {
                let (blocks, expired) = queue.batch(now, self.batch);
                c.expired[i].fetch_add(expired, Ordering::Relaxed);
                if blocks.is_empty() {
                    break;
                }
                match sink.push(&blocks) {
                    Ok(Pushed { taken, refused }) => {
                        if self.failures[i] > 0 {
                            tracing::info!(event = "feed_up", "forwarding blocks to {} works again", c.names[i]);
                        }
                        let n = taken.clamp(1, blocks.len());
                        c.pushed[i].fetch_add(n.saturating_sub(refused) as u64, Ordering::Relaxed);
                        queue.waiting.drain(..n);
                        self.failures[i] = 0;
                    }
                    Err(e) => {
                        self.failures[i] += 1;
                        c.failed[i].fetch_add(1, Ordering::Relaxed);
                        if self.failures[i] == 1 || self.failures[i].is_power_of_two() {
                            tracing::warn!(
                                event = "feed_down",
                                "forwarding {} block(s) to {} failed (try {}), kept for the next: {e}",
                                queue.waiting.len(),
                                c.names[i],
                                self.failures[i]
                            );
                        }
                        self.next_try[i] = now + Duration::from_secs(1 << self.failures[i].min(5));
                        break;
                    }
                }
            }
            c.pending[i].store(queue.waiting.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Takes new blocks from `take` once a second and pushes them to every
/// sink until `stop` (then one last try). Each destination keeps at most
/// [`MAX_PENDING`] blocks while it is away, gets them [`MAX_BATCH`] at a
/// time, each with the time it has left.
pub fn run<D: Destination>(
    mut take: impl FnMut() -> Vec<ForwardedBlock>,
    sinks: Vec<D>,
    stop: Arc<AtomicBool>,
    counters: Arc<ForwardCounters>,
) {
    let mut forwarder = Forwarder::new(sinks, counters, Instant::now());
    loop {
        let last = stop.load(Ordering::Relaxed);
        // A block's wait is counted from here, within a second of the
        // guard making it (the guard's outbox is taken once a second).
        forwarder.step(&take(), Instant::now(), last);
        if last {
            return;
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_names() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_651_199)), "2026-11-25T23:59:59Z");
        assert_eq!(scenario("request_rate"), "sluice/http-request-rate");
        let a = Watcher::alerts(&[ForwardedBlock {
            ip: "192.0.2.1".parse().unwrap(),
            len: 32,
            secs: 0,
            limit: "http_parse".into(),
        }]);
        assert_eq!(a[0]["decisions"][0]["duration"], format!("{FOREVER_SECS}s"));
        assert_eq!(a[0]["source"]["value"], "192.0.2.1");
        assert_eq!(a[0]["decisions"][0]["scope"], "Ip");
        // A client keyed by its /64 is a Range decision of that network.
        let net =
            ForwardedBlock { ip: "2001:db8:0:7::".parse().unwrap(), len: 64, secs: 30, limit: "request_rate".into() };
        assert_eq!(net.target(), "2001:db8:0:7::/64");
        let a = Watcher::alerts(&[net]);
        assert_eq!(
            (&a[0]["decisions"][0]["scope"], &a[0]["decisions"][0]["value"]),
            (&"Range".into(), &"2001:db8:0:7::/64".into())
        );
        assert_eq!(a[0]["source"]["scope"], "Range");
    }

    /// A one-answer HTTP server on loopback: its URL.
    fn serve_once(answer: String) -> (String, std::thread::JoinHandle<()>) {
        use std::io::{BufRead, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = std::io::BufReader::new(s);
            // The whole request, body too: unread, it would reset the connection.
            let (mut line, mut body) = (String::new(), 0);
            while r.read_line(&mut line).unwrap() > 2 {
                let lower = line.to_ascii_lowercase();
                if let Some(n) = lower.strip_prefix("content-length:") {
                    body = n.trim().parse().unwrap();
                }
                line.clear();
            }
            r.read_exact(&mut vec![0; body]).unwrap();
            r.get_mut().write_all(answer.as_bytes()).unwrap();
        });
        (url, h)
    }

    fn block() -> ForwardedBlock {
        ForwardedBlock { ip: "192.0.2.1".parse().unwrap(), len: 32, secs: 60, limit: "request_rate".into() }
    }

    #[test]
    fn a_watcher_follows_no_redirect() {
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = format!("http://{}/v1/watchers/login", elsewhere.local_addr().unwrap());
        let (url, h) = serve_once(format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"));
        let mut w = Watcher::new(&url, "m", "pw", None);
        let e = w.push(&[block()]).unwrap_err();
        assert!(e.contains(&format!("HTTP 302 redirect to \"{to}\" refused")), "{e}");
        h.join().unwrap();
        elsewhere.set_nonblocking(true).unwrap();
        assert!(elsewhere.accept().is_err(), "the redirect was followed");
    }

    #[test]
    fn a_login_answer_is_read_to_a_bound() {
        let token = format!(r#"{{"code":200,"expire":"x","token":"{}"}}"#, "t".repeat(1000));
        let big = format!(r#"{{"token":"t","pad":"{}"}}"#, "p".repeat(MAX_LOGIN_ANSWER as usize));
        for (body, ok) in [(token, true), (big, false)] {
            let (url, h) = serve_once(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
            let r = Watcher::new(&url, "m", "pw", None).log_in();
            assert_eq!(r.is_ok(), ok, "{r:?}");
            if let Err(e) = r {
                assert!(e.ends_with(&format!("the answer is over {MAX_LOGIN_ANSWER} bytes, which no login answer is")));
            }
            h.join().unwrap();
        }
    }

    /// Against a real controller behind a real socket: the bridge refuses
    /// the batch whole, naming the lines its safety net refused; the
    /// forwarder drops those and the rest goes in. A refusal of another
    /// kind keeps every block for the next try.
    #[test]
    fn blocks_a_bridge_refuses_are_dropped_and_the_rest_applied() {
        use sluice_policy::{Controller, Event, RuleSpec};
        let dir = tempfile::tempdir().unwrap();
        let (list, never) = (dir.path().join("list.txt"), dir.path().join("never.txt"));
        std::fs::write(&list, "10.0.0.1\n").unwrap();
        std::fs::write(&never, "192.0.2.7\n").unwrap();
        let spec = RuleSpec { drop_any: vec![list], feed_sets: vec!["guard".into()], ..RuleSpec::default() };
        let loaded = spec.load(&[]).unwrap();
        let safety = sluice_control::safety::Safety::load(Some(&never), 8, 16).unwrap();
        let c = Controller::new(spec, Vec::new(), loaded, false).with_safety(Arc::new(safety));
        let state = Arc::clone(c.state());
        let (tx, rx) = std::sync::mpsc::channel();
        let sock = dir.path().join("ctl.sock");
        let access = socket::Access::owner_and(None, None).unwrap();
        let serving = socket::serve(&sock, access, sluice_policy::deliver_to(&tx), Arc::default()).unwrap();
        let control = std::thread::spawn(move || c.run(rx, || {}));

        let b =
            |ip: &str, len: u8| ForwardedBlock { ip: ip.parse().unwrap(), len, secs: 60, limit: "request_rate".into() };
        let blocks = [b("198.51.100.1", 32), b("192.0.2.7", 32), b("192.0.2.0", 24), b("198.51.100.2", 32)];
        let mut sink = Target::Ctl { socket: sock.clone(), set: "guard".into() };
        assert_eq!(sink.push(&blocks), Ok(Pushed { taken: 4, refused: 2 }));
        let test = |ip: &str| socket::request(&sock, &format!("test guard {ip}"), Duration::from_secs(5)).unwrap();
        assert_eq!(
            (test("198.51.100.1")["match"].clone(), test("198.51.100.2")["match"].clone()),
            (true.into(), true.into())
        );
        assert_eq!(test("192.0.2.7")["match"], false);
        assert_eq!(state.refusals.get("guard", "never_block"), 2);
        let only_refused = [b("192.0.2.7", 32)];
        assert_eq!(sink.push(&only_refused), Ok(Pushed { taken: 1, refused: 1 }), "nothing left to send");

        let mut elsewhere = Target::Ctl { socket: sock.clone(), set: "nosuch".into() };
        let e = elsewhere.push(&blocks[..1]).unwrap_err();
        assert!(e.contains("no set `nosuch`"), "{e}");
        serving.stop();
        tx.send(Event::Quit).unwrap();
        control.join().unwrap();
    }

    /// A destination that takes at most `max` blocks a push, or fails when
    /// down, and keeps what it got.
    struct Fake {
        up: bool,
        max: usize,
        got: Vec<Vec<ForwardedBlock>>,
    }

    impl Destination for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn push(&mut self, blocks: &[ForwardedBlock]) -> Result<Pushed, String> {
            if !self.up {
                return Err("down".into());
            }
            let n = blocks.len().min(self.max);
            self.got.push(blocks[..n].to_vec());
            Ok(Pushed { taken: n, refused: 0 })
        }
    }

    fn forwarder(up: bool, now: Instant) -> Forwarder<Fake> {
        let sinks = vec![Fake { up, max: usize::MAX, got: Vec::new() }];
        let counters = Arc::new(ForwardCounters::new(&sinks));
        Forwarder::new(sinks, counters, now)
    }

    /// ForwardedBlock `i`: 10.x.y.z from the index, for `secs`.
    fn nth(i: u32, secs: u64) -> ForwardedBlock {
        ForwardedBlock { ip: IpAddr::V4((0x0a00_0000 + i).into()), len: 32, secs, limit: "request_rate".into() }
    }

    fn load(a: &[AtomicU64]) -> u64 {
        a[0].load(Ordering::Relaxed)
    }

    #[test]
    fn pending_blocks_are_capped_and_the_oldest_shed() {
        let t0 = Instant::now();
        let mut f = forwarder(false, t0);
        let n = MAX_PENDING as u32 + 5;
        let blocks: Vec<ForwardedBlock> = (0..n).map(|i| nth(i, 0)).collect();
        f.step(&blocks[..10], t0, false);
        f.step(&blocks[10..], t0, false);
        assert_eq!(load(&f.counters.pending), MAX_PENDING as u64);
        assert_eq!(load(&f.counters.shed), 5);
        // Back: what is left goes, from the sixth on, in order.
        f.sinks[0].up = true;
        f.step(&[], t0 + Duration::from_secs(60), false);
        let got: Vec<ForwardedBlock> = f.sinks[0].got.concat();
        assert_eq!(got, blocks[5..]);
        assert_eq!((load(&f.counters.pending), load(&f.counters.pushed)), (0, MAX_PENDING as u64));
    }

    #[test]
    fn blocks_go_in_batches_and_a_failed_one_is_kept() {
        let t0 = Instant::now();
        let mut f = forwarder(true, t0);
        f.batch = 4;
        let blocks: Vec<ForwardedBlock> = (0..10).map(|i| nth(i, 0)).collect();
        f.step(&blocks, t0, false);
        let sizes: Vec<usize> = f.sinks[0].got.iter().map(Vec::len).collect();
        assert_eq!(sizes, [4, 4, 2]);
        assert_eq!(f.sinks[0].got.concat(), blocks);
        // A destination that takes fewer than offered gets the rest next.
        f.sinks[0] = Fake { up: true, max: 3, got: Vec::new() };
        f.step(&blocks[..5], t0, false);
        let sizes: Vec<usize> = f.sinks[0].got.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 2]);
        // Down: kept whole, in order, for the next try.
        f.sinks[0] = Fake { up: false, max: usize::MAX, got: Vec::new() };
        f.step(&blocks, t0, false);
        assert_eq!((load(&f.counters.pending), load(&f.counters.failed)), (10, 1));
        f.sinks[0].up = true;
        f.step(&[], t0 + Duration::from_secs(1), false);
        assert!(f.sinks[0].got.is_empty(), "retried before its backoff");
        f.step(&[], t0 + Duration::from_secs(2), false);
        assert_eq!(f.sinks[0].got.concat(), blocks);
    }

    #[test]
    fn a_control_socket_request_stays_under_its_limit() {
        let blocks: Vec<ForwardedBlock> = (0..MAX_BATCH as u32 + 1).map(|i| nth(i, FOREVER_SECS)).collect();
        let max = socket::MAX_REQUEST as usize;
        let (text, n) = ctl_batch("guard", &blocks, max);
        assert_eq!((n, text.lines().count()), (MAX_BATCH, MAX_BATCH));
        assert_eq!(text.lines().next(), Some("add guard 10.0.0.0 timeout 31536000"));
        // The longest line, an IPv6 network for a year: 100,000 of them
        // are far under the limit.
        let v6 = ForwardedBlock {
            ip: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0".parse().unwrap(),
            len: 124,
            ..nth(0, FOREVER_SECS)
        };
        let (line, _) = ctl_batch("guard", &[v6], max);
        assert!(line.len() * MAX_BATCH < max / 4, "{} bytes a line", line.len());
        // A set name long enough to pass the limit: cut by bytes, every
        // block sent once over the requests.
        let set = "s".repeat(1000);
        let (mut sent, mut requests) = (0, 0);
        while sent < blocks.len() {
            let (text, n) = ctl_batch(&set, &blocks[sent..], max);
            assert!(text.len() <= max && n > 0);
            assert_eq!(text.lines().count(), n);
            sent += n;
            requests += 1;
        }
        assert_eq!(requests, 2);
    }

    #[test]
    fn blocks_go_with_the_time_they_have_left() {
        let t0 = Instant::now();
        let mut f = forwarder(false, t0);
        let blocks = [nth(0, 60), nth(1, 10), nth(2, 0), nth(3, 21)];
        f.step(&blocks, t0, false);
        // Away for 19.5 s (the backoff has passed), counted as 20: 40 s
        // left of the 60, the 10-s block ran out and is not sent, the
        // permanent one stays so, the 21-s block has its last second.
        f.sinks[0].up = true;
        f.step(&[], t0 + Duration::from_millis(19_500), false);
        let got: Vec<(u32, u64)> = f.sinks[0]
            .got
            .concat()
            .iter()
            .map(|b| (b.ip.to_string().rsplit('.').next().unwrap().parse().unwrap(), b.secs))
            .collect();
        assert_eq!(got, [(0, 40), (2, 0), (3, 1)]);
        assert_eq!(load(&f.counters.expired), 1);
        assert_eq!(load(&f.counters.pushed), 3);
        // Nothing but expired blocks waiting: dropped, nothing sent.
        f.sinks[0] = Fake { up: false, max: usize::MAX, got: Vec::new() };
        f.step(&[nth(4, 5)], t0, false);
        f.sinks[0].up = true;
        f.step(&[], t0 + Duration::from_secs(5), false);
        assert!(f.sinks[0].got.is_empty());
        assert_eq!((load(&f.counters.expired), load(&f.counters.pending)), (2, 0));
    }

    #[test]
    fn waiting_block_size() {
        // MAX_PENDING's memory: the queue's slot, and the limit's name on
        // the heap (an allocation of 16 to 32 bytes).
        let slot = std::mem::size_of::<Waiting>();
        assert!(slot <= 72, "{slot} bytes");
    }
}
