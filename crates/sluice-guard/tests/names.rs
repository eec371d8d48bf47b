//! The names users rely on: every key of the guard's `--json` summary and
//! every metric it serves, compared with the lists in `tests/names/` (a
//! change to one is a change to a published interface, made on purpose
//! with `SLUICE_BLESS=1`). docs/metrics.md is checked against these lists
//! and the bridge's by `sluice-bridge`'s tests/names.rs.

use sluice_guard::block_forward::{self, ForwardCounters};
use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, Guard};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn key_paths(v: &serde_json::Value, at: &str, out: &mut BTreeSet<String>) {
    // Maps keyed by what occurred (limits, reasons) hold data, not names.
    const DATA_KEYED: &[&str] = &["breaches", "blocks_refused"];
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                out.insert(p.clone());
                if !DATA_KEYED.contains(&k.as_str()) {
                    key_paths(v, &p, out);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| key_paths(i, &format!("{at}[]"), out)),
        _ => {}
    }
}

fn same_as_listed(names: &BTreeSet<String>, file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/names").join(file);
    if std::env::var("SLUICE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, names.iter().map(|n| format!("{n}\n")).collect::<String>()).unwrap();
        return;
    }
    let listed: BTreeSet<String> =
        std::fs::read_to_string(&path).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    let gone: Vec<_> = listed.difference(names).collect();
    let new: Vec<_> = names.difference(&listed).collect();
    assert!(gone.is_empty() && new.is_empty(), "{file}: no longer served {gone:?}; new, not listed {new:?}");
}

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

#[test]
fn the_summary_keys_and_metric_names_are_the_published_ones() {
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
    let registry = sluice_guard::exporter::registry(running.shared(), Some(forward));
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry).unwrap();
    running.stop_flag().store(true, std::sync::atomic::Ordering::Relaxed);
    let report = running.join().unwrap();
    let mut keys = BTreeSet::new();
    key_paths(&serde_json::to_value(&report).unwrap(), "", &mut keys);
    same_as_listed(&keys, "guard-json.txt");
    let names: BTreeSet<String> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    same_as_listed(&names, "guard-metrics.txt");
}
