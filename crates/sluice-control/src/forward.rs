//! Forwards the guard's IP blocks to where other boxes, or this one's
//! bridge, enforce them: a bridge's control socket (`add SET IP timeout S`
//! lines, one atomic batch) and a CrowdSec Local API as a watcher (each
//! block an alert with a `ban` decision, `POST /v1/alerts`, logged in with
//! `/v1/watchers/login` and again on 401). At most one push per second per
//! destination; a push that fails keeps its blocks and is retried with
//! backoff, so nothing is lost while a destination is away.

use crate::{crowdsec, socket};
use serde_json::json;
use std::io::Read;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// One block to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub ip: IpAddr,
    /// Prefix length: the whole address (32, 128) or the network the guard
    /// keys clients by (`--key-prefix-v6 64`).
    pub len: u8,
    /// Seconds it lasts; 0: until the guard restarts.
    pub secs: u64,
    /// The limit it broke, e.g. `request_rate`.
    pub limit: String,
}

impl Block {
    /// A host's address, else the network as `ADDR/LEN`.
    pub fn target(&self) -> String {
        if self.len >= if self.ip.is_ipv4() { 32 } else { 128 } {
            self.ip.to_string()
        } else {
            format!("{}/{}", self.ip, self.len)
        }
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
        e => format!("{url}: {e}"),
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
    pub fn new(url: &str, login: &str, password: &str) -> Watcher {
        Watcher {
            url: url.trim_end_matches('/').to_owned(),
            login: login.to_owned(),
            password: password.to_owned(),
            token: None,
            // No redirects: the password and the token go to --crowdsec-url only.
            agent: ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).redirects(0).build(),
        }
    }

    fn log_in(&mut self) -> Result<String, String> {
        let url = format!("{}/v1/watchers/login", self.url);
        let body = json!({ "machine_id": self.login, "password": self.password, "scenarios": [] });
        let r = self
            .agent
            .post(&url)
            .set("User-Agent", concat!("sluice-guard/", env!("CARGO_PKG_VERSION")))
            .send_json(body)
            .map_err(|e| http_error(&url, e))?;
        if let Some(redirect) = crowdsec::redirect(&r) {
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
    pub fn alerts(blocks: &[Block]) -> serde_json::Value {
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
    pub fn push(&mut self, blocks: &[Block]) -> Result<(), String> {
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
                    return match crowdsec::redirect(&r) {
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
pub enum Sink {
    /// A bridge's control socket and the dynamic set to add to.
    Ctl {
        socket: PathBuf,
        set: String,
    },
    Crowdsec(Watcher),
}

impl Sink {
    fn name(&self) -> String {
        match self {
            Sink::Ctl { socket, set } => format!("control socket {} (set {set})", socket.display()),
            Sink::Crowdsec(w) => format!("crowdsec {}", w.url),
        }
    }

    /// Pushes `blocks`: how many the destination refused for good (a
    /// bridge's safety net: `--never-block`, `--min-prefix-*`), which are
    /// dropped, the rest applied; an error keeps them all for the next try.
    fn push(&mut self, blocks: &[Block]) -> Result<usize, String> {
        match self {
            Sink::Ctl { socket, set } => {
                let mut left: Vec<&Block> = blocks.iter().collect();
                // The bridge refuses a batch whole and names every line its
                // safety net refused: those are dropped (sent again, they
                // would be refused again, and hold every later block back)
                // and the rest sent again. Each round drops one at least.
                loop {
                    if left.is_empty() {
                        return Ok(blocks.len());
                    }
                    let text: String = left
                        .iter()
                        .map(|b| match b.secs {
                            0 => format!("add {set} {}\n", b.target()),
                            s => format!("add {set} {} timeout {s}\n", b.target()),
                        })
                        .collect();
                    let reply = socket::request(socket, &text, Duration::from_secs(30)).map_err(|e| e.to_string())?;
                    if reply["ok"] == true {
                        return Ok(blocks.len() - left.len());
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
            Sink::Crowdsec(w) => w.push(blocks).map(|()| 0),
        }
    }
}

/// The sinks the guard's flags ask for: a bridge's control socket and its
/// set, and a LAPI as (URL, login, password file).
pub fn sinks(
    ctl: Option<(&std::path::Path, &str)>,
    crowdsec: Option<(&str, &str, &std::path::Path)>,
) -> Result<Vec<Sink>, String> {
    let mut sinks = Vec::new();
    if let Some((socket, set)) = ctl {
        sinks.push(Sink::Ctl { socket: socket.to_owned(), set: set.to_owned() });
    }
    if let Some((url, login, pw)) = crowdsec {
        if !url.starts_with("http://") {
            return Err(format!("--crowdsec-url {url}: expected http://HOST:PORT (https is not supported yet)"));
        }
        let password =
            std::fs::read_to_string(pw).map_err(|e| format!("--crowdsec-password-file {}: {e}", pw.display()))?;
        if let Some(w) = crowdsec::secret_file_warning("--crowdsec-password-file", pw) {
            tracing::warn!("{w}");
        }
        sinks.push(Sink::Crowdsec(Watcher::new(url, login, password.trim())));
    }
    Ok(sinks)
}

/// What forwarding counts, per sink in the order given.
#[derive(Debug, Default)]
pub struct ForwardCounters {
    pub pushed: Vec<AtomicU64>,
    pub failed: Vec<AtomicU64>,
    pub pending: Vec<AtomicU64>,
    pub names: Vec<String>,
}

impl ForwardCounters {
    pub fn new(sinks: &[Sink]) -> ForwardCounters {
        let n = sinks.len();
        ForwardCounters {
            pushed: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failed: (0..n).map(|_| AtomicU64::new(0)).collect(),
            pending: (0..n).map(|_| AtomicU64::new(0)).collect(),
            names: sinks.iter().map(Sink::name).collect(),
        }
    }
}

/// Takes new blocks from `take` once a second and pushes them to every
/// sink until `stop` (then one last try).
pub fn run(
    mut take: impl FnMut() -> Vec<Block>,
    mut sinks: Vec<Sink>,
    stop: Arc<AtomicBool>,
    counters: Arc<ForwardCounters>,
) {
    let mut pending: Vec<Vec<Block>> = sinks.iter().map(|_| Vec::new()).collect();
    let mut failures = vec![0u32; sinks.len()];
    let mut next_try = vec![Instant::now(); sinks.len()];
    loop {
        let last = stop.load(Ordering::Relaxed);
        let new = take();
        for (i, sink) in sinks.iter_mut().enumerate() {
            pending[i].extend(new.iter().cloned());
            counters.pending[i].store(pending[i].len() as u64, Ordering::Relaxed);
            if pending[i].is_empty() || (Instant::now() < next_try[i] && !last) {
                continue;
            }
            match sink.push(&pending[i]) {
                Ok(refused) => {
                    if failures[i] > 0 {
                        tracing::info!(event = "feed_up", "forwarding blocks to {} works again", counters.names[i]);
                    }
                    counters.pushed[i].fetch_add((pending[i].len() - refused) as u64, Ordering::Relaxed);
                    pending[i].clear();
                    failures[i] = 0;
                }
                Err(e) => {
                    failures[i] += 1;
                    counters.failed[i].fetch_add(1, Ordering::Relaxed);
                    if failures[i] == 1 || failures[i].is_power_of_two() {
                        tracing::warn!(
                            event = "feed_down",
                            "forwarding {} block(s) to {} failed (try {}), kept for the next: {e}",
                            pending[i].len(),
                            counters.names[i],
                            failures[i]
                        );
                    }
                    next_try[i] = Instant::now() + Duration::from_secs(1 << failures[i].min(5));
                }
            }
            counters.pending[i].store(pending[i].len() as u64, Ordering::Relaxed);
        }
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
        let a = Watcher::alerts(&[Block {
            ip: "192.0.2.1".parse().unwrap(),
            len: 32,
            secs: 0,
            limit: "http_parse".into(),
        }]);
        assert_eq!(a[0]["decisions"][0]["duration"], format!("{FOREVER_SECS}s"));
        assert_eq!(a[0]["source"]["value"], "192.0.2.1");
        assert_eq!(a[0]["decisions"][0]["scope"], "Ip");
        // A client keyed by its /64 is a Range decision of that network.
        let net = Block { ip: "2001:db8:0:7::".parse().unwrap(), len: 64, secs: 30, limit: "request_rate".into() };
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

    fn block() -> Block {
        Block { ip: "192.0.2.1".parse().unwrap(), len: 32, secs: 60, limit: "request_rate".into() }
    }

    #[test]
    fn a_watcher_follows_no_redirect() {
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = format!("http://{}/v1/watchers/login", elsewhere.local_addr().unwrap());
        let (url, h) = serve_once(format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"));
        let mut w = Watcher::new(&url, "m", "pw");
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
            let r = Watcher::new(&url, "m", "pw").log_in();
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
        use crate::control::{Controller, Event};
        use crate::spec::RuleSpec;
        let dir = tempfile::tempdir().unwrap();
        let (list, never) = (dir.path().join("list.txt"), dir.path().join("never.txt"));
        std::fs::write(&list, "10.0.0.1\n").unwrap();
        std::fs::write(&never, "192.0.2.7\n").unwrap();
        let spec = RuleSpec { drop_any: vec![list], feed_sets: vec!["guard".into()], ..RuleSpec::default() };
        let loaded = spec.load(&[]).unwrap();
        let safety = sluice_guard::safety::Safety::load(Some(&never), 8, 16).unwrap();
        let c = Controller::new(spec, Vec::new(), loaded, false).with_safety(Arc::new(safety));
        let state = Arc::clone(c.state());
        let (tx, rx) = std::sync::mpsc::channel();
        let sock = dir.path().join("ctl.sock");
        let serving = socket::serve(&sock, None, tx.clone(), Arc::default()).unwrap();
        let control = std::thread::spawn(move || c.run(rx, || {}));

        let b = |ip: &str, len: u8| Block { ip: ip.parse().unwrap(), len, secs: 60, limit: "request_rate".into() };
        let blocks = [b("198.51.100.1", 32), b("192.0.2.7", 32), b("192.0.2.0", 24), b("198.51.100.2", 32)];
        let mut sink = Sink::Ctl { socket: sock.clone(), set: "guard".into() };
        assert_eq!(sink.push(&blocks), Ok(2));
        let test = |ip: &str| socket::request(&sock, &format!("test guard {ip}"), Duration::from_secs(5)).unwrap();
        assert_eq!(
            (test("198.51.100.1")["match"].clone(), test("198.51.100.2")["match"].clone()),
            (true.into(), true.into())
        );
        assert_eq!(test("192.0.2.7")["match"], false);
        assert_eq!(state.refusals.get("guard", "never_block"), 2);
        let only_refused = [b("192.0.2.7", 32)];
        assert_eq!(sink.push(&only_refused), Ok(1), "nothing left to send");

        let mut elsewhere = Sink::Ctl { socket: sock.clone(), set: "nosuch".into() };
        let e = elsewhere.push(&blocks[..1]).unwrap_err();
        assert!(e.contains("no set `nosuch`"), "{e}");
        serving.stop();
        tx.send(Event::Quit).unwrap();
        control.join().unwrap();
    }
}
