//! What the bridge and the HTTP guard count, shown three ways: Prometheus
//! metrics at `/metrics` (encoded by `prometheus-client` from the live
//! counters on every scrape, served by a one-request-per-connection
//! responder on a thread of its own), the bridge's status line, and the
//! summaries' JSON. Nothing here counts packets itself: it reads the
//! counters the engine, the live ports, the control plane and the guard
//! keep.
#![deny(unsafe_code)]

pub mod bridge;
pub mod guard;

pub use bridge::{BridgeMetrics, LiveObserver};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

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
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("sluice-metrics".into()).spawn(move || serve(listener, &registry, who))?;
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

/// Serves `registry` at `/metrics` until the process ends: one request per
/// connection, answered in turn, with timeouts so a stuck client cannot
/// hold the next scrape for long; `who` names the program on `/`.
pub fn serve(listener: TcpListener, registry: &Registry, who: &str) {
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let _ = answer(stream, registry, who);
    }
}

fn answer(mut s: TcpStream, registry: &Registry, who: &str) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        let k = s.read(&mut buf[n..])?;
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
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
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
        let mut registry = Registry::default();
        registry.register_collector(Box::new(One));
        let addr = spawn("127.0.0.1:0".parse().unwrap(), registry, "test").unwrap();
        let m = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.contains("sluice_test_total{k=\"v\"} 7"), "{m}");
        assert!(m.contains("sluice_test_gauge{} -3"), "{m}");
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, "\r\n\r\n").starts_with("HTTP/1.1 400"));
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
