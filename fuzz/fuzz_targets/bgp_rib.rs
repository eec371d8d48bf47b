//! UPDATE sequences from two peers into the bridge's RIB and the table it
//! builds: whatever the bytes, each peer's routes stay within their limits
//! in count and bytes (the counts agree with the routes held), the table
//! holds exactly the routes held, and the time taken is bounded by the
//! bytes that came and the routes held.
//!
//! Input: a flags byte (bit 0: 4-octet ASes), then records of a control
//! byte and a two-byte length: an UPDATE body of that many bytes from
//! peer `ctl & 1`; or, with `ctl & 0xf0 == 0xf0`, that peer's session
//! ends (routes kept for a restart window when `ctl & 2`), with no body;
//! or, with `ctl & 0xf0 == 0xe0`, the restart windows pass.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_bgp::message::{decode, frame, Message, BLACKHOLE, MAX_MESSAGE};
use sluice_bridge::bgp::Rib;
use sluice_engine::flows::Placement;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Small limits, so that inputs of a few KB reach them.
const MAX_ROUTES: usize = 500;
const MAX_ROUTE_BYTES: usize = 2_048;
const MAX_PEER_BYTES: usize = 64 << 10;

/// Generous bounds (tens of times what a release build takes on a loaded
/// machine), so the target finds algorithmic blow-ups, not scheduling.
fn update_budget(bytes: usize) -> Duration {
    Duration::from_millis(20) + Duration::from_micros(50) * bytes as u32
}

fn table_budget(routes: usize) -> Duration {
    Duration::from_millis(20) + Duration::from_micros(20) * routes as u32
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let as4 = flags & 1 == 1;
    let peers: [SocketAddr; 2] = ["192.0.2.1:179".parse().unwrap(), "[2001:db8::1]:179".parse().unwrap()];
    let mut rib = Rib::new(vec![BLACKHOLE], false)
        .with_max_routes(MAX_ROUTES)
        .with_max_bytes(MAX_ROUTE_BYTES, MAX_PEER_BYTES)
        .with_guard(sluice_bridge::bgp::RouteGuard { allow_undirected: true, ..Default::default() });
    let now = Instant::now();
    while let [ctl, hi, lo, tail @ ..] = rest {
        let peer = peers[usize::from(ctl & 1)];
        let changed = match ctl & 0xf0 {
            0xf0 => {
                rest = tail;
                let keep = if ctl & 2 != 0 { Duration::from_secs(30) } else { Duration::ZERO };
                rib.down(peer, keep, now)
            }
            0xe0 => {
                rest = tail;
                !rib.expire(now + Duration::from_secs(3600)).is_empty()
            }
            _ => {
                let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(MAX_MESSAGE - 19).min(tail.len());
                let (body, after) = tail.split_at(len);
                rest = after;
                let Ok(Message::Update(u)) = decode(&frame(2, body), as4) else { continue };
                let t = Instant::now();
                let changed = rib.update(peer, &u);
                let took = t.elapsed();
                assert!(took <= update_budget(len), "an UPDATE of {len} bytes took {took:?}");
                changed
            }
        };
        if let Err(e) = rib.audit() {
            panic!("{e}");
        }
        if changed {
            let t = Instant::now();
            let table = rib.table(Placement::First);
            let took = t.elapsed();
            assert_eq!(table.rules().len(), rib.len());
            assert!(took <= table_budget(rib.len()), "a table of {} routes took {took:?}", rib.len());
        }
    }
});
