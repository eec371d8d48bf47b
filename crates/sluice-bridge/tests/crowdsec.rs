//! The bridge as a CrowdSec bouncer over in-memory ports, against a real
//! Local API (Debian's `crowdsec -no-cs`, started by the test): a decision
//! added with `cscli` drops the address's frames, its deletion lets them
//! through again. No root, no veths (the veth version, with ping across
//! namespaces, is `sluice-cli`'s tests/crowdsec.rs).

#[path = "../../sluice-cli/tests/lapi/mod.rs"]
mod lapi;

use lapi::{crowdsec_or_skip, Lapi};
use sluice_bridge::{Bridge, BridgeConfig, MemoryPair, Wire};
use sluice_control::crowdsec::{BouncerConfig, DEFAULT_MAX_ANSWER};
use sluice_control::RuleSpec;
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
    let key = lapi.bouncer_key("sluice");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let crowdsec =
        BouncerConfig::from_flags(Some(&lapi.url), Some(&key), 1.0, 300.0, "crowdsec", DEFAULT_MAX_ANSWER).unwrap();
    // No rules: the feed's set is added and its sources dropped.
    let cfg = BridgeConfig { crowdsec, ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, Box::new(pair)).unwrap();
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

    let counters = bridge.metrics().crowdsec.get().cloned().expect("the bouncer's counters");
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert!(counters.pulls_ok.load(Ordering::Relaxed) >= 2, "{counters:?}");
    assert!(s.json["dropped"].as_u64().unwrap() >= 1, "{}", s.json);
}
