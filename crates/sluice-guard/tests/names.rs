//! The names users rely on: every key of the guard's `--json` summary and
//! every metric it serves, compared with the lists in `tests/names/` (a
//! change to one is a change to a published interface, made on purpose
//! with `SLUICE_BLESS=1`). docs/metrics.md is checked against these lists
//! and the bridge's by `sluice-bridge`'s tests/names.rs.

use sluice_testkit::names as support;

use sluice_guard::block_forward::{self, ForwardCounters};
use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, Guard};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An upstream that answers every request head 200.
fn upstream() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
                        && s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A guard with everything that adds names switched on (TLS, a JA4 list,
/// a block file, the forwarder's and the socket's counters): its report
/// and a scrape.
fn run_everything() -> (sluice_guard::Report, String) {
    let dir = tempfile::tempdir().unwrap();
    let ja4 = dir.path().join("ja4.txt");
    std::fs::write(&ja4, "t13d1516h2_8daaf6152771_02713d6af862\n").unwrap();
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), upstream());
    c.pin = false;
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
    c.tls = vec![CertFiles { cert: testdata.join("tls-a.test.pem"), key: testdata.join("tls-a.test.key") }];
    c.block_ja4 = Some(ja4);
    c.block_file = Some(dir.path().join("blocks.ipset"));
    let guard = Guard::bind(c).unwrap();
    let addr = guard.local_addr();
    let running = guard.start().unwrap();
    // A connection that is not TLS: a handshake error, some bytes in.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    let _ = s.read(&mut [0u8; 64]);
    let sinks = block_forward::targets(Some((&dir.path().join("bridge.sock"), "guard")), None).unwrap();
    let forward = Arc::new(ForwardCounters::new(&sinks));
    let socket = Arc::new(sluice_control::socket::SocketCounters::default());
    let registry = sluice_guard::exporter::registry(running.shared(), Some(forward), Some(socket));
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry).unwrap();
    running.stop_flag().store(true, std::sync::atomic::Ordering::Relaxed);
    (running.wait().unwrap(), metrics)
}

#[test]
fn the_summary_keys_and_metric_names_are_the_published_ones() {
    let (report, metrics) = run_everything();
    let mut keys = BTreeSet::new();
    // Maps keyed by what occurred (limits, reasons) hold data, not names.
    support::key_paths(&serde_json::to_value(&report).unwrap(), "", &["breaches", "blocks_refused"], &mut keys);
    support::same_as_listed(&keys, &listed("guard-json.txt"));
    support::same_as_listed(&support::metric_names(&metrics), &listed("guard-metrics.txt"));
}

/// Every metric the guard serves, every key of its report and every line
/// of its text summary has a declaration: a counter set's (`counters!`),
/// or a family, key or line the guard lists as written by hand.
#[test]
fn every_metric_and_key_is_declared() {
    let (report, metrics) = run_everything();
    let e = &sluice_guard::exporter::DYNAMIC_FAMILIES;
    let families: BTreeSet<&str> =
        sluice_guard::exporter::declared_families().into_iter().chain(e.iter().copied()).collect();
    let undeclared: Vec<_> =
        support::metric_names(&metrics).into_iter().filter(|f| !families.contains(f.as_str())).collect();
    assert!(undeclared.is_empty(), "served, declared nowhere: {undeclared:?}");
    let sets = [sluice_guard::CountTotals::NAMES, sluice_guard::GuardTotals::NAMES, sluice_guard::REPORT_KEYS];
    let names: BTreeSet<&str> = sets.into_iter().flatten().copied().collect();
    let json = serde_json::to_value(&report).unwrap();
    let undeclared: Vec<_> = json.as_object().unwrap().keys().filter(|k| !names.contains(k.as_str())).collect();
    assert!(undeclared.is_empty(), "report keys declared nowhere: {undeclared:?}");
    let mut dry = report.clone();
    dry.dry_run = true;
    let text = report.text(Duration::from_secs(1)) + &dry.text(Duration::from_secs(1));
    let undeclared: Vec<_> = (text.lines())
        .filter(|l| {
            let rest = l.trim_start_matches(|c: char| c.is_ascii_digit());
            !sluice_guard::SUMMARY_LINES.iter().any(|w| rest.starts_with(w))
        })
        .collect();
    assert!(undeclared.is_empty(), "summary lines declared nowhere: {undeclared:?}");
}

fn listed(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/names").join(file)
}
