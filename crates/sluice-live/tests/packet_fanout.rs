//! AF_PACKET fanout: by hash, both directions of a flow go to the same
//! member index on both ports. (Forwarding itself, VLAN tags kept end to
//! end, is tested on the product's path in tests/pipeline_bridge.rs.)

use sluice_testkit::live as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{live_or_skip, Endpoint, Topology};
use sluice_live::{Fanout, FanoutMode, PacketConfig, PacketSocket};

/// An Ethernet + IPv4 + UDP frame of flow `i`, in direction `fwd` or back.
fn udp_frame(i: u16, fwd: bool) -> Vec<u8> {
    let (mut src, mut dst) = ([10, 0, 0, 1], [10, 0, 1, (i % 200) as u8 + 1]);
    let (mut sport, mut dport) = (20_000 + i, 53u16);
    if !fwd {
        std::mem::swap(&mut src, &mut dst);
        std::mem::swap(&mut sport, &mut dport);
    }
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0, 0, 28 + 8, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    let sum = {
        let mut s = 0u32;
        for c in f[ip_start..ip_start + 20].chunks(2) {
            s += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    };
    f[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&16u16.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&i.to_be_bytes());
    f.extend_from_slice(&[u8::from(fwd), 0, 0, 0, 0, 0]);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

#[test]
fn fanout_hash_sends_both_directions_of_a_flow_to_the_same_member() {
    if !live_or_skip("fanout_hash_sends_both_directions_of_a_flow_to_the_same_member") {
        return;
    }
    let topo = Topology::new("f");
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let group = (std::process::id() & 0xfff) as u16;
    let member = |iface: &str, g: u16| {
        let cfg = PacketConfig {
            tx: false,
            fanout: Some(Fanout { group: g, mode: FanoutMode::Hash, defrag: false }),
            ..PacketConfig::default()
        };
        PacketSocket::open(iface, &cfg).expect("fanout member")
    };
    let mut a_members = [member(&topo.a.near, group), member(&topo.a.near, group)];
    let mut b_members = [member(&topo.b.near, group + 1), member(&topo.b.near, group + 1)];

    let flows = 64u16;
    let fwd: Vec<Vec<u8>> = (0..flows).map(|i| udp_frame(i, true)).collect();
    let back: Vec<Vec<u8>> = (0..flows).map(|i| udp_frame(i, false)).collect();
    ep_a.send_all(&fwd);
    ep_b.send_all(&back);

    // flow -> member index, per port
    let gather = |members: &mut [PacketSocket; 2]| {
        let mut seen: BTreeMap<u16, usize> = BTreeMap::new();
        let end = std::time::Instant::now() + Duration::from_secs(3);
        while seen.len() < flows as usize && std::time::Instant::now() < end {
            for (k, m) in members.iter_mut().enumerate() {
                m.poll_rx(2).unwrap();
                m.rx_batch(256, |f, _| {
                    if f.len() >= 44 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
                        let flow = u16::from_be_bytes([f[42], f[43]]);
                        assert!(seen.insert(flow, k).is_none(), "flow {flow} delivered twice");
                    }
                });
            }
        }
        seen
    };
    let on_a = gather(&mut a_members);
    let on_b = gather(&mut b_members);
    assert_eq!(on_a.len(), flows as usize, "every forward frame reached one member on a1");
    assert_eq!(on_b.len(), flows as usize, "every reverse frame reached one member on b1");
    let both_used = on_a.values().any(|&k| k == 0) && on_a.values().any(|&k| k == 1);
    assert!(both_used, "the hash spread flows over both members: {on_a:?}");
    for i in 0..flows {
        assert_eq!(
            on_a[&i], on_b[&i],
            "flow {i}: forward went to member {} on a1, reverse to {} on b1",
            on_a[&i], on_b[&i]
        );
    }
}
