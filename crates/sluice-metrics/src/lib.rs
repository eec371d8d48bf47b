//! The Prometheus side of sluice, and nothing of what is counted: a
//! loopback responder for `/metrics` (one request per connection, a few
//! connections at once, each on a thread of its own with one deadline),
//! the address check of `--metrics`, and helpers that encode a constant
//! counter or gauge family with escaped labels, and the per-rule families
//! the bridge and the shield both serve ([`rule_families`]); and
//! [`counters!`], a counter set declared once (summary keys, families,
//! help, type), with [`counters::encode`] to serve any declared set. Each
//! product's exporter sits beside the counters it reads (`sluice-bridge`'s
//! `metrics.rs`, `sluice-shield`'s `metrics.rs`, `sluice-guard`'s
//! `exporter.rs`); this crate depends on no sluice crate.
#![deny(unsafe_code)]

pub mod counters;

/// For [`counters!`]: its plain copies serialize as a map of their fields.
#[doc(hidden)]
pub use serde as __serde;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What scrape connections may take of the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderLimits {
    /// Connections answered at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// The whole request head must arrive within this from accept (a
    /// timeout per read would let a byte every second hold a connection
    /// for ever), and the reply be taken within as long again.
    pub deadline: Duration,
}

impl Default for ResponderLimits {
    fn default() -> ResponderLimits {
        ResponderLimits { max_connections: 4, deadline: Duration::from_secs(5) }
    }
}

/// A metrics address that was refused.
#[derive(Debug, thiserror::Error)]
pub enum AddrError {
    #[error("--metrics {0:?}: expected ADDRESS:PORT, e.g. 127.0.0.1:9100 or [::1]:9100")]
    Syntax(String),
    #[error(
        "--metrics {0}: not a loopback address; metrics would be reachable from the network. \
         Use 127.0.0.1 or [::1], or add --metrics-allow-remote if that is intended"
    )]
    NotLoopback(SocketAddr),
}

/// Where metrics may be served: loopback, unless remote access was asked for.
pub fn check_addr(s: &str, allow_remote: bool) -> Result<SocketAddr, AddrError> {
    let addr: SocketAddr = s.parse().map_err(|_| AddrError::Syntax(s.to_owned()))?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(AddrError::NotLoopback(addr));
    }
    Ok(addr)
}

/// Bind `addr` and serve `registry` there on a thread named
/// `sluice-metrics`; returns the bound address (port 0 picks one).
pub fn spawn(addr: SocketAddr, registry: Registry, who: &'static str) -> std::io::Result<SocketAddr> {
    spawn_with(addr, registry, who, ResponderLimits::default())
}

/// [`spawn`] with `limits`.
pub fn spawn_with(
    addr: SocketAddr,
    registry: Registry,
    who: &'static str,
    limits: ResponderLimits,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let registry = Arc::new(registry);
    std::thread::Builder::new().name("sluice-metrics".into()).spawn(move || serve(listener, registry, who, limits))?;
    Ok(bound)
}

/// [`spawn`] for `--metrics ADDR`, logging where it serves; the error
/// names the flag and the address.
pub fn serve_flag(addr: SocketAddr, registry: Registry, who: &'static str) -> Result<SocketAddr, String> {
    let bound = spawn(addr, registry, who).map_err(|e| format!("--metrics: cannot serve on {addr}: {e}"))?;
    tracing::info!("metrics at http://{bound}/metrics");
    Ok(bound)
}

/// A label value as the text exposition needs it: `\\`, `"` and a newline
/// escaped. prometheus-client writes label values as they are, and some
/// come from outside (a CrowdSec LAPI's strings, interface and set names):
/// unescaped, a `"` or a newline in one would end the line and forge series.
pub struct Escaped<'a>(pub &'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, enc: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0;
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            enc.write_str(&rest[..i])?;
            enc.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        enc.write_str(rest)
    }
}

fn escaped<'a>(labels: &'a [(&'a str, String)]) -> Vec<(&'a str, Escaped<'a>)> {
    labels.iter().map(|(k, v)| (*k, Escaped(v))).collect()
}

/// One counter family: `series` are (labels, value).
pub fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Vec<(&str, String)>, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(&escaped(labels))?)?;
    }
    Ok(())
}

/// One gauge family: `series` are (labels, value).
pub fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Vec<(&str, String)>, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(&escaped(labels))?)?;
    }
    Ok(())
}

/// One rule as its families label it, with what it matched.
pub struct RuleRow<'a> {
    /// Its line in the rule file.
    pub line: usize,
    /// The rule as written.
    pub rule: &'a str,
    /// What it does (`drop`, `pass`, `count`, ...).
    pub action: &'a str,
    pub packets: u64,
    pub bytes: u64,
}

/// The families [`rule_families`] writes.
pub const RULE_FAMILIES: [&str; 2] = ["sluice_rule_packets", "sluice_rule_bytes"];

/// `sluice_rule_packets` and `sluice_rule_bytes`, one series per rule
/// labelled `line`, `rule`, `action`: what the bridge's workers and the
/// shield's kernel program count per rule, served under one name.
pub fn rule_families(enc: &mut DescriptorEncoder, rows: &[RuleRow<'_>]) -> Result<(), std::fmt::Error> {
    let labels = |r: &RuleRow<'_>| {
        vec![("line", r.line.to_string()), ("rule", r.rule.to_owned()), ("action", r.action.to_owned())]
    };
    let packets: Vec<_> = rows.iter().map(|r| (labels(r), r.packets)).collect();
    counter(
        enc,
        "sluice_rule_packets",
        "Packets each rule matched (count rules: before the deciding rule).",
        &packets,
    )?;
    let bytes: Vec<_> = rows.iter().map(|r| (labels(r), r.bytes)).collect();
    counter(enc, "sluice_rule_bytes", "Bytes (on the wire) each rule matched.", &bytes)
}

/// Serves `registry` at `/metrics` until the process ends: one request per
/// connection, each connection on a thread of its own so that a slow
/// client delays no other scrape, at most `limits.max_connections` at
/// once, each within `limits.deadline`; `who` names the program on `/`.
pub fn serve(listener: TcpListener, registry: Arc<Registry>, who: &'static str, limits: ResponderLimits) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(_) => {
                // Out of descriptors, say: wait rather than spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= limits.max_connections {
            active.fetch_sub(1, Ordering::AcqRel);
            busy(&stream, limits.max_connections);
            continue;
        }
        let slot = Slot(Arc::clone(&active));
        let registry = Arc::clone(&registry);
        // On an error the closure is dropped: the connection closes and
        // its slot is given back.
        let _ = std::thread::Builder::new().name("sluice-metrics-conn".into()).spawn(move || {
            let _slot = slot;
            let _ = answer(stream, &registry, who, limits.deadline);
        });
    }
}

/// A place among the connections answered at once; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// 503 for a connection beyond the bound, without waiting on it: a fresh
/// connection's send buffer takes it whole.
fn busy(s: &TcpStream, max: usize) {
    let body = format!("busy: {max} scrapes in progress\n");
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.set_nonblocking(true);
    // What of the request has come is read, so that closing with it unread
    // does not reset the connection (and lose the 503) as often.
    let _ = (&*s).read(&mut [0u8; 4096]);
    let _ = (&*s).write_all(reply.as_bytes());
}

/// The time left until `end`, as an error once none is.
fn left(end: Instant) -> std::io::Result<Duration> {
    Some(end.saturating_duration_since(Instant::now()))
        .filter(|d| !d.is_zero())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "past the deadline"))
}

/// Writes all of `bytes` by `end`.
fn write_by(s: &mut TcpStream, mut bytes: &[u8], end: Instant) -> std::io::Result<()> {
    while !bytes.is_empty() {
        s.set_write_timeout(Some(left(end)?))?;
        match s.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn answer(mut s: TcpStream, registry: &Registry, who: &str, deadline: Duration) -> std::io::Result<()> {
    let end = Instant::now() + deadline;
    let mut buf = [0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        let k = match left(end).and_then(|t| s.set_read_timeout(Some(t))).and_then(|()| s.read(&mut buf[n..])) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                let body = "the request head did not arrive in time\n";
                let head = format!(
                    "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                // A second at most for a client already past its time.
                return write_by(&mut s, format!("{head}{body}").as_bytes(), Instant::now() + Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        };
        if k == 0 {
            break;
        }
        n += k;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next(), first.next());
    let path = target.map(|t| t.split('?').next().unwrap_or(t));
    let (status, ctype, body) = match (method, path) {
        (Some("GET"), Some("/metrics")) => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", body),
                Err(_) => ("500 Internal Server Error", "text/plain", "encoding the metrics failed\n".to_owned()),
            }
        }
        (Some("GET"), Some("/")) => ("200 OK", "text/plain", format!("{who}: metrics at /metrics\n")),
        (Some("GET"), Some(_)) => ("404 Not Found", "text/plain", "not found; metrics are at /metrics\n".to_owned()),
        (Some(_), Some(_)) => ("405 Method Not Allowed", "text/plain", "only GET\n".to_owned()),
        _ => ("400 Bad Request", "text/plain", "bad request\n".to_owned()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let end = Instant::now() + deadline;
    write_by(&mut s, head.as_bytes(), end)?;
    write_by(&mut s, body.as_bytes(), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[derive(Debug)]
    struct One;

    impl prometheus_client::collector::Collector for One {
        fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            counter(&mut enc, "sluice_test", "A test counter.", &[(vec![("k", "v".to_owned())], 7)])?;
            gauge(&mut enc, "sluice_test_gauge", "A test gauge.", &[(vec![], -3)])
        }
    }

    #[test]
    fn the_responder_serves_metrics_and_refuses_the_rest() {
        let addr = spawn("127.0.0.1:0".parse().unwrap(), one_registry(), "test").unwrap();
        let m = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.contains("sluice_test_total{k=\"v\"} 7"), "{m}");
        assert!(m.contains("sluice_test_gauge{} -3"), "{m}");
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, "\r\n\r\n").starts_with("HTTP/1.1 400"));
    }

    fn one_registry() -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(One));
        registry
    }

    /// A client that sends a request head a byte every 100 ms for 4 s,
    /// never ending it; reading on the returned stream ends when the
    /// responder cuts it.
    fn trickle(addr: SocketAddr) -> (TcpStream, std::thread::JoinHandle<()>) {
        let slow = TcpStream::connect(addr).unwrap();
        let mut w = slow.try_clone().unwrap();
        let t = std::thread::spawn(move || {
            let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().chain(std::iter::repeat(&b'a'));
            for b in head.take(40) {
                if w.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        (slow, t)
    }

    #[test]
    fn a_slow_client_delays_no_scrape_and_is_cut_at_its_deadline() {
        let limits = ResponderLimits { max_connections: 4, deadline: Duration::from_secs(1) };
        let addr = spawn_with("127.0.0.1:0".parse().unwrap(), one_registry(), "test", limits).unwrap();
        let started = Instant::now();
        let (mut slow, trickling) = trickle(addr);
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let m = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let scrape = t.elapsed();
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(scrape < Duration::from_millis(500), "the scrape waited {scrape:?} behind the slow client");
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = Vec::new();
        // Cut with a 408, or reset when a byte arrived as it closed.
        let _ = slow.read_to_end(&mut reply);
        let cut = started.elapsed();
        assert!(cut > Duration::from_millis(900) && cut < Duration::from_millis(2500), "cut after {cut:?}");
        assert!(reply.is_empty() || reply.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&reply));
        trickling.join().unwrap();
    }

    #[test]
    fn beyond_the_bound_a_connection_is_answered_503() {
        let limits = ResponderLimits { max_connections: 1, deadline: Duration::from_secs(3) };
        let addr = spawn_with("127.0.0.1:0".parse().unwrap(), one_registry(), "test", limits).unwrap();
        let (slow, trickling) = trickle(addr);
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        // Nothing sent: a request unread at close could turn the 503 into a
        // reset, a real scraper's fate here too at times.
        let mut m = String::new();
        TcpStream::connect(addr).unwrap().read_to_string(&mut m).unwrap();
        assert!(m.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{m}");
        assert!(m.ends_with("busy: 1 scrapes in progress\n"), "{m}");
        assert!(t.elapsed() < Duration::from_millis(500), "answered at once: {:?}", t.elapsed());
        drop(slow);
        trickling.join().unwrap();
        // The place is given back once the slow client is gone.
        let end = Instant::now() + Duration::from_secs(5);
        while !get(addr, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200") {
            assert!(Instant::now() < end, "the place was not given back");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[derive(Debug)]
    struct Hostile;

    impl prometheus_client::collector::Collector for Hostile {
        fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let v = "a\"} 1\nsluice_forged_total{x=\"\\".to_owned();
            counter(&mut enc, "sluice_test", "A test counter.", &[(vec![("k", v.clone())], 7)])?;
            gauge(&mut enc, "sluice_test_gauge", "A test gauge.", &[(vec![("k", v)], 1)])
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Hostile));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let want = r#"{k="a\"} 1\nsluice_forged_total{x=\"\\"}"#;
        assert!(text.contains(&format!("sluice_test_total{want} 7\n")), "{text}");
        assert!(text.contains(&format!("sluice_test_gauge{want} 1\n")), "{text}");
        assert!(!text.contains("\nsluice_forged"), "{text}");
        assert_eq!(text.lines().count(), 7, "{text}");
    }

    #[test]
    fn addresses_are_loopback_unless_allowed() {
        assert!(check_addr("127.0.0.1:9100", false).is_ok());
        assert!(check_addr("[::1]:0", false).is_ok());
        assert!(matches!(check_addr("0.0.0.0:9100", false), Err(AddrError::NotLoopback(_))));
        assert!(check_addr("0.0.0.0:9100", true).is_ok());
        assert!(matches!(check_addr("localhost", false), Err(AddrError::Syntax(_))));
    }
}
