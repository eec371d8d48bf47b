//! The bridge as a CrowdSec bouncer over in-memory ports, against a real
//! Local API (Debian's `crowdsec -no-cs`, started by the test): a decision
//! added with `cscli` drops the address's frames, its deletion lets them
//! through again. No root, no veths (the veth version, with ping across
//! namespaces, is `sluice-cli`'s tests/crowdsec.rs).

use sluice_testkit::lapi;

use lapi::{crowdsec_or_skip, Lapi};
use sluice_bridge::{Bridge, BridgeConfig, MemoryPair, Wire};
use sluice_control::lapi::LapiTls;
use sluice_policy::crowdsec::{BouncerConfig, GeoScopes, StreamFilters, DEFAULT_MAX_ANSWER};
use sluice_policy::RuleSpec;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// An Ethernet + IPv4 + UDP frame from `src`.
fn frame(src: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[192, 0, 2, 1, 0x4e, 0x20, 0, 53, 0, 8, 0, 0]);
    f
}

/// A bouncer of its own API key (the LAPI streams what is new since a
/// key's last pull), pulling every `interval` seconds.
fn keyed(lapi: &Lapi, name: &str, interval: f64) -> Option<BouncerConfig> {
    let key = lapi.bouncer_key(name);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    BouncerConfig::from_flags(
        Some(&lapi.url),
        Some(&key),
        &LapiTls::default(),
        interval,
        300.0,
        "crowdsec",
        DEFAULT_MAX_ANSWER,
    )
    .unwrap()
}

/// Whether a frame from `src` sent on port 0 comes out of port 1.
fn passes(wire: &Wire, src: [u8; 4]) -> bool {
    wire.drain(1);
    wire.send(0, &frame(src));
    wire.recv(1, Duration::from_millis(300)).is_some()
}

#[test]
fn crowdsec_decisions_reach_the_bridge_over_memory_ports() {
    let Some(bin) = crowdsec_or_skip("crowdsec_decisions_reach_the_bridge_over_memory_ports") else { return };
    let lapi = Lapi::new(bin);
    let every = Some(Duration::from_millis(100));
    let crowdsec = keyed(&lapi, "sluice", 1.0).map(|c| BouncerConfig { metrics_interval: every, ..c });
    // No rules: the feed's set is added and its sources dropped.
    let cfg = BridgeConfig { crowdsec, ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    const BANNED: [u8; 4] = [198, 51, 100, 66];
    assert!(passes(&wire, BANNED), "no decision yet");

    let wait = |want: bool, what: &str| {
        let end = Instant::now() + Duration::from_secs(15);
        while passes(&wire, BANNED) != want {
            assert!(Instant::now() < end, "{what}");
        }
    };
    lapi.cscli(&["decisions", "add", "--ip", "198.51.100.66", "--duration", "1h"]);
    wait(false, "the ban was never enforced");
    assert!(passes(&wire, [203, 0, 113, 7]), "others pass");
    lapi.cscli(&["decisions", "delete", "--ip", "198.51.100.66"]);
    wait(true, "the ban was never lifted");

    // Debian's 1.4.6 has no usage metrics: the first push's 404 turns them off.
    let end = Instant::now() + Duration::from_secs(5);
    let counters = bridge.metrics().crowdsec.get().cloned().expect("the bouncer's counters");
    while counters.usage_pushes_unsupported.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < end, "no usage-metrics push was tried: {counters:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(counters.usage_pushes_unsupported.load(Ordering::Relaxed), 1, "pushed again after a 404");
    assert_eq!(
        counters.usage_pushes_ok.load(Ordering::Relaxed) + counters.usage_pushes_failed.load(Ordering::Relaxed),
        0
    );
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert!(counters.pulls_ok.load(Ordering::Relaxed) >= 2, "{counters:?}");
    assert!(s.json["dropped"].as_u64().unwrap() >= 1, "{}", s.json);
}

#[test]
fn stream_filters_give_exactly_the_decisions_they_name() {
    let Some(bin) = crowdsec_or_skip("stream_filters_give_exactly_the_decisions_they_name") else { return };
    let lapi = Lapi::new(bin);
    // A bouncer key each: the LAPI streams what is new since the key's last pull.
    let bridge = |name: &str, filters: StreamFilters| {
        let c = keyed(&lapi, name, 0.5).map(|c| BouncerConfig { filters, ..c });
        let cfg = BridgeConfig { crowdsec: c, ..BridgeConfig::new(RuleSpec::default()) };
        let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
        (Bridge::start(cfg, pair).unwrap(), wire)
    };
    let ssh = bridge("ssh", StreamFilters { scenarios_containing: vec!["ssh".into()], ..StreamFilters::default() });
    let not_ssh =
        bridge("not-ssh", StreamFilters { scenarios_not_containing: vec!["ssh".into()], ..StreamFilters::default() });
    let capi = bridge("capi", StreamFilters { origins: vec!["CAPI".into()], ..StreamFilters::default() });
    let cscli = bridge("cscli", StreamFilters { origins: vec!["cscli".into()], ..StreamFilters::default() });
    let ip = bridge("ip", StreamFilters { scopes: vec!["ip".into()], ..StreamFilters::default() });
    const SSH: [u8; 4] = [198, 51, 100, 66];
    const HTTP: [u8; 4] = [198, 51, 100, 77];
    lapi.cscli(&["decisions", "add", "--ip", "198.51.100.66", "--reason", "crowdsecurity/ssh-bf", "--duration", "1h"]);
    lapi.cscli(&[
        "decisions",
        "add",
        "--ip",
        "198.51.100.77",
        "--reason",
        "crowdsecurity/http-probing",
        "--duration",
        "1h",
    ]);
    let dropped = |wire: &Wire, src: [u8; 4], what: &str| {
        let end = Instant::now() + Duration::from_secs(15);
        while passes(wire, src) {
            assert!(Instant::now() < end, "{what}");
        }
    };
    dropped(&ssh.1, SSH, "scenarios_containing=ssh never dropped the ssh-bf ban");
    dropped(&not_ssh.1, HTTP, "scenarios_not_containing=ssh never dropped the http-probing ban");
    dropped(&cscli.1, SSH, "origins=cscli never dropped the ssh-bf ban");
    dropped(&cscli.1, HTTP, "origins=cscli never dropped the http-probing ban");
    dropped(&ip.1, SSH, "scopes=ip never dropped the ssh-bf ban");
    // Several pulls later, the others still pass.
    std::thread::sleep(Duration::from_secs(2));
    assert!(passes(&ssh.1, HTTP), "scenarios_containing=ssh took the http-probing ban");
    assert!(passes(&not_ssh.1, SSH), "scenarios_not_containing=ssh took the ssh-bf ban");
    assert!(passes(&capi.1, SSH) && passes(&capi.1, HTTP), "origins=CAPI took a cscli ban");
    for (b, _) in [ssh, not_ssh, capi, cscli, ip] {
        assert!(b.metrics().crowdsec.get().unwrap().pulls_ok.load(Ordering::Relaxed) >= 2);
        b.stop();
        b.wait().unwrap();
    }
}

#[test]
fn country_and_as_bans_drop_their_networks_with_a_geo_database() {
    let Some(bin) = crowdsec_or_skip("country_and_as_bans_drop_their_networks_with_a_geo_database") else { return };
    use sluice_geo::write::{Value, Writer};
    let dir = tempfile::tempdir().unwrap();
    let mut w = Writer::new("GeoLite2-Country", 1);
    let cc = |c: &str| Value::map([("country", Value::map([("iso_code", Value::str(c))]))]);
    w.insert("198.51.100.0".parse().unwrap(), 24, cc("RU")).unwrap();
    w.insert("203.0.113.0".parse().unwrap(), 24, cc("FI")).unwrap();
    let country = dir.path().join("country.mmdb");
    std::fs::write(&country, w.to_bytes()).unwrap();
    let mut w = Writer::new("GeoLite2-ASN", 1);
    w.insert("192.0.2.0".parse().unwrap(), 24, Value::map([("autonomous_system_number", Value::U32(64500))])).unwrap();
    let asn = dir.path().join("asn.mmdb");
    std::fs::write(&asn, w.to_bytes()).unwrap();

    let lapi = Lapi::new(bin);
    let geo = Some(std::sync::Arc::new(GeoScopes::new(vec![country, asn])));
    let crowdsec = keyed(&lapi, "geo", 0.5).map(|c| BouncerConfig { geo, ..c });
    let cfg = BridgeConfig { crowdsec, ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    let wait = |src: [u8; 4], want: bool, what: &str| {
        // Within the pull interval and a second.
        let end = Instant::now() + Duration::from_millis(1500 + 500);
        while passes(&wire, src) != want {
            let seen =
                bridge.metrics().crowdsec.get().map(|c| {
                    (c.decisions(), c.pulls_ok.load(Ordering::Relaxed), c.pulls_failed.load(Ordering::Relaxed))
                });
            assert!(Instant::now() < end, "{what}; decisions seen: {seen:?}");
        }
    };
    const RU: [u8; 4] = [198, 51, 100, 66];
    const FI: [u8; 4] = [203, 0, 113, 7];
    const AS64500: [u8; 4] = [192, 0, 2, 9];
    assert!(passes(&wire, RU) && passes(&wire, AS64500));
    lapi.cscli(&["decisions", "add", "--scope", "Country", "--value", "RU", "--duration", "1h"]);
    wait(RU, false, "the Country ban was not enforced within the interval and a second");
    assert!(passes(&wire, FI), "another country passes");
    lapi.cscli(&["decisions", "add", "--scope", "AS", "--value", "64500", "--duration", "1h"]);
    wait(AS64500, false, "the AS ban was not enforced within the interval and a second");
    lapi.cscli(&["decisions", "delete", "--value", "RU"]);
    wait(RU, true, "the Country ban was not lifted");
    assert!(!passes(&wire, AS64500), "the AS ban stays");
    let counters = bridge.metrics().crowdsec.get().cloned().unwrap();
    let added =
        counters.decisions().iter().filter(|((_, _, scope, action), _)| *scope != "Ip" && *action == "added").count();
    assert!(added >= 2, "{:?}", counters.decisions());
    bridge.stop();
    bridge.wait().unwrap();
}

#[test]
fn a_tls_lapi_admits_the_bouncer_by_its_client_certificate() {
    let Some(bin) = crowdsec_or_skip("a_tls_lapi_admits_the_bouncer_by_its_client_certificate") else { return };
    let lapi = Lapi::with_tls(bin);
    let t = lapi.tls_dir();
    let tls =
        LapiTls { ca: Some(t.join("ca.crt")), cert: Some(t.join("bouncer.crt")), key: Some(t.join("bouncer.key")) };
    // No API key: the certificate's OU admits it.
    let crowdsec = BouncerConfig::from_flags(Some(&lapi.url), None, &tls, 0.5, 300.0, "crowdsec", DEFAULT_MAX_ANSWER)
        .unwrap()
        .expect("a bouncer");
    assert!(crowdsec.key.is_empty());

    // A CA that did not sign the LAPI's certificate: refused, and said so.
    lapi::make_ca(&t, "other");
    let wrong = LapiTls { ca: Some(t.join("other.crt")), ..tls.clone() };
    let w = BouncerConfig::from_flags(Some(&lapi.url), None, &wrong, 0.5, 300.0, "crowdsec", DEFAULT_MAX_ANSWER)
        .unwrap()
        .unwrap();
    let e = sluice_policy::crowdsec::pull(&sluice_control::lapi::agent(w.tls.as_ref()), &w, true).unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
    // Plain http with a certificate is a mistake, named.
    let http = lapi.url.replace("https://", "http://");
    let e = BouncerConfig::from_flags(Some(&http), None, &tls, 0.5, 300.0, "crowdsec", DEFAULT_MAX_ANSWER).unwrap_err();
    assert!(e.contains("need an https:// URL"), "{e}");

    let cfg = BridgeConfig { crowdsec: Some(crowdsec), ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    const BANNED: [u8; 4] = [198, 51, 100, 66];
    lapi.cscli(&["decisions", "add", "--ip", "198.51.100.66", "--duration", "1h"]);
    let end = Instant::now() + Duration::from_secs(15);
    while passes(&wire, BANNED) {
        let c = bridge
            .metrics()
            .crowdsec
            .get()
            .map(|c| (c.pulls_ok.load(Ordering::Relaxed), c.pulls_failed.load(Ordering::Relaxed)));
        assert!(Instant::now() < end, "the ban over TLS was never enforced (pulls ok, failed: {c:?})");
    }
    assert!(passes(&wire, [203, 0, 113, 7]));
    bridge.stop();
    bridge.wait().unwrap();
}

#[test]
fn drops_by_origin_reach_the_lapi_usage_metrics() {
    let Some(bin) = lapi::crowdsec17_or_skip("drops_by_origin_reach_the_lapi_usage_metrics") else { return };
    let lapi = Lapi::with_metrics(bin);
    let every = Duration::from_secs(2);
    let crowdsec = keyed(&lapi, "usage", 0.5).map(|c| BouncerConfig { metrics_interval: Some(every), ..c });
    let cfg = BridgeConfig { crowdsec, ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    const MANUAL: [u8; 4] = [198, 51, 100, 66];
    const IMPORTED: [u8; 4] = [203, 0, 113, 9];
    // Two origins: cscli's own decision, and one imported from a file.
    lapi.cscli(&["decisions", "add", "--ip", "198.51.100.66", "--duration", "1h"]);
    let csv = lapi.dir.path().join("import.csv");
    std::fs::write(&csv, "value,duration\n203.0.113.9,1h\n").unwrap();
    lapi.cscli(&["decisions", "import", "-i", csv.to_str().unwrap(), "--format", "csv"]);
    let end = Instant::now() + Duration::from_secs(15);
    while passes(&wire, MANUAL) || passes(&wire, IMPORTED) {
        assert!(Instant::now() < end, "the bans were not enforced");
    }
    for i in 0..20 {
        wire.send(0, &frame(MANUAL));
        if i % 2 == 0 {
            wire.send(0, &frame(IMPORTED));
        }
    }
    assert!(passes(&wire, [192, 0, 2, 200]), "others pass");
    // The exporter's view, once every frame sent is judged.
    let m = bridge.metrics();
    let served = |origin: &str| m.origin_usage().into_iter().find(|u| u.origin == origin);
    let end = Instant::now() + Duration::from_secs(5);
    while served("cscli").map(|u| u.dropped_packets) < Some(21) {
        assert!(Instant::now() < end, "drops by origin: {:?}", m.origin_usage());
        std::thread::sleep(Duration::from_millis(20));
    }
    // What /metrics serves, summed over ip_type as cscli shows it.
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m.registry()).unwrap();
    let want = lapi::exported_usage(&text);
    assert_eq!(want.len(), 6, "two origins, three series each: {text}");
    assert_eq!(want[&("cscli".to_owned(), "dropped".to_owned(), "packet".to_owned())], 21, "{text}");
    // The LAPI's view after the next pushes (every 2 s): the same counts.
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let got = lapi.usage("usage");
        if got == want {
            break;
        }
        assert!(Instant::now() < end, "cscli metrics show bouncers: {got:?}, /metrics: {want:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let counters = m.crowdsec.get().cloned().unwrap();
    assert!(counters.usage_pushes_ok.load(Ordering::Relaxed) >= 1);
    assert_eq!(counters.usage_pushes_failed.load(Ordering::Relaxed), 0);
    bridge.stop();
    bridge.wait().unwrap();
}
