//! AF_XDP end to end: `ns_a:a0 <-> a1 [bridge] b1 <-> ns_b:b0`. Frames
//! written on a0 (AF_PACKET inside ns_a) are redirected by the XDP program
//! on a1 into an AF_XDP socket, forwarded *by UMEM address* onto b1's TX
//! ring (b1's socket shares a1's UMEM), and captured on b0 inside ns_b;
//! then the same the other way. Run in skb and in driver mode.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_same, live_or_skip, test_frames, Endpoint, Topology};
use sluice_live::bridge::{xsk_step, StepStats};
use sluice_live::{BindMode, Desc, FramePool, Umem, XdpMode, XdpRedirect, XskConfig, XskSocket};

/// Counts frames in flight per UMEM chunk, to prove that what a port
/// completes is exactly what the other port received: no copy in between.
#[derive(Default)]
struct InFlight(HashMap<u64, u32>);

impl InFlight {
    fn add(&mut self, chunk: u64) {
        *self.0.entry(chunk).or_default() += 1;
    }

    fn take(&mut self, chunk: u64) {
        let n = self.0.get_mut(&chunk).unwrap_or_else(|| panic!("completed chunk {chunk:#x} was never received"));
        *n -= 1;
        if *n == 0 {
            self.0.remove(&chunk);
        }
    }
}

/// XDP sees the frame as it was on the wire: an 802.1Q tag is still inline.
fn check_tag(frame: &[u8]) {
    if let Some(seq) = common::seq_of(frame) {
        assert_eq!(frame[12..14] == [0x81, 0x00], seq % 10_000 % 3 == 1, "frame {seq}: tag state in the UMEM");
    }
}

struct Report {
    a_to_b: StepStats,
    b_to_a: StepStats,
    completed_on_b: u64,
    completed_on_a: u64,
}

/// The bridge loop. A->B is written out with the raw socket API, B->A goes
/// through `bridge::xsk_step`; completions on both sides are checked
/// against what the other side received.
fn run_bridge(umem: Umem, mut a: XskSocket, mut b: XskSocket, mut pool: FramePool, stop: Arc<AtomicBool>) -> Report {
    let fs = u64::from(umem.frame_size());
    let base = umem.frame(0, 0).unwrap().as_ptr() as u64;
    let mut ab = InFlight::default();
    let mut ba = InFlight::default();
    let mut rep =
        Report { a_to_b: StepStats::default(), b_to_a: StepStats::default(), completed_on_b: 0, completed_on_a: 0 };
    let mut comp = [0u64; 64];
    let mut descs = [Desc::default(); 64];
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        // Completions: B transmitted what A received, and vice versa.
        let n = b.complete(&mut comp);
        for &addr in &comp[..n] {
            ab.take(addr & !(fs - 1));
        }
        pool.free_all(&comp[..n]);
        rep.completed_on_b += n as u64;
        let m = a.complete(&mut comp);
        for &addr in &comp[..m] {
            ba.take(addr & !(fs - 1));
        }
        pool.free_all(&comp[..m]);
        rep.completed_on_a += m as u64;
        for s in [&mut a, &mut b] {
            let free = s.fill_free() as usize;
            s.fill_from(&mut pool, free);
            s.wakeup().expect("wakeup");
        }

        // A -> B by hand: the received descriptors go onto B's TX ring as they are.
        let got = a.rx_batch(&mut descs);
        for d in &descs[..got] {
            let frame = umem.data(d).unwrap_or_else(|| panic!("RX descriptor outside the UMEM: {d:?}"));
            check_tag(frame);
        }
        let sent = b.tx(&descs[..got]).expect("tx");
        for d in &descs[..sent] {
            ab.add(d.addr & !(fs - 1));
        }
        let back: Vec<u64> = descs[sent..got].iter().map(|d| d.addr).collect();
        let refilled = a.fill(&back);
        pool.free_all(&back[refilled..]);
        if sent > 0 {
            b.kick_tx().expect("kick");
        }
        rep.a_to_b +=
            StepStats { received: got as u64, forwarded: sent as u64, dropped: 0, tx_full: (got - sent) as u64 };

        // B -> A through the library's step.
        let st = xsk_step(&umem, &mut b, &mut a, &mut pool, |frame| {
            ba.add((frame.as_ptr() as u64 - base) & !(fs - 1));
            check_tag(frame);
            true
        })
        .expect("step");
        rep.b_to_a += st;

        if got == 0 && st.received == 0 && n == 0 && m == 0 {
            idle += 1;
            if idle > 100 {
                let _ = a.poll_rx(1);
            }
        } else {
            idle = 0;
        }
    }
    println!("a1 {:?}\nb1 {:?}", a.stats().unwrap(), b.stats().unwrap());
    // Everything forwarded was completed: nothing leaked.
    assert!(ab.0.is_empty() || a.tx_pending() + b.tx_pending() > 0, "A->B frames never completed: {}", ab.0.len());
    rep
}

fn xsk_bridge(mode: XdpMode, tag: &str) {
    let topo = Topology::new(tag);
    let (a1, b1) = (topo.a.near.clone(), topo.b.near.clone());
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);

    let umem = Umem::new(4096, 2048).expect("UMEM");
    if let Some(w) = umem.warning() {
        println!("warning: {w}");
    }
    let cfg = XskConfig { mode: BindMode::Auto, ..XskConfig::default() };
    let redir_a = XdpRedirect::attach(&a1, 1, mode).expect("attach a1");
    let redir_b = XdpRedirect::attach(&b1, 1, mode).expect("attach b1");
    let mut sa = XskSocket::bind(&a1, 0, &umem, &cfg).expect("bind a1");
    let mut sb = XskSocket::bind(&b1, 0, &umem, &cfg).expect("bind b1 (shared UMEM)");
    // The fill rings are full before any frame can arrive.
    let mut pool = FramePool::new(&umem);
    assert_eq!(sa.fill_from(&mut pool, 1024), 1024);
    assert_eq!(sb.fill_from(&mut pool, 1024), 1024);
    assert!(!sa.is_shared() && sb.is_shared());
    println!("{mode:?}: a1 zero-copy={} b1 zero-copy={}", sa.is_zero_copy(), sb.is_zero_copy());
    redir_a.register(0, &sa).unwrap();
    redir_b.register(0, &sb).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let bridge = {
        let stop = stop.clone();
        std::thread::spawn(move || run_bridge(umem, sa, sb, pool, stop))
    };

    let ab = test_frames(0, 300);
    ep_a.send_all(&ab);
    let got_b = ep_b.collect(ab.len(), Duration::from_secs(5));

    let ba = test_frames(10_000, 300);
    ep_b.send_all(&ba);
    let got_a = ep_a.collect(ba.len(), Duration::from_secs(5));

    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let rep = bridge.join().expect("bridge thread");
    println!(
        "{mode:?}: A->B {:?}, B->A {:?}, completed on B {}, on A {}",
        rep.a_to_b, rep.b_to_a, rep.completed_on_b, rep.completed_on_a
    );
    assert_same("A->B", &ab, &got_b);
    assert_same("B->A", &ba, &got_a);
    assert_eq!(rep.a_to_b.forwarded, ab.len() as u64, "A->B forwarded exactly our frames");
    assert_eq!(rep.b_to_a.forwarded, ba.len() as u64, "B->A forwarded exactly our frames");
    assert_eq!(rep.completed_on_b, rep.a_to_b.forwarded, "every A->B frame completed on B");
    assert_eq!(rep.completed_on_a, rep.b_to_a.forwarded, "every B->A frame completed on A");
    drop((redir_a, redir_b));
}

#[test]
fn xsk_bridge_skb_mode() {
    if !live_or_skip("xsk_bridge_skb_mode") {
        return;
    }
    xsk_bridge(XdpMode::Skb, "s");
}

#[test]
fn xsk_bridge_driver_mode() {
    if !live_or_skip("xsk_bridge_driver_mode") {
        return;
    }
    xsk_bridge(XdpMode::Driver, "d");
}

#[test]
fn xsk_bind_errors_are_clear() {
    if !live_or_skip("xsk_bind_errors_are_clear") {
        return;
    }
    let p = common::unique("e");
    let v1 = common::Veth::new(&format!("{p}0"), &format!("{p}1"), None);
    let v2 = common::Veth::new(&format!("{p}2"), &format!("{p}3"), None);
    let umem = Umem::new(64, 4096).expect("UMEM");
    let cfg = XskConfig { rx_size: 64, tx_size: 64, fill_size: 64, comp_size: 64, ..XskConfig::default() };

    let err = XskSocket::bind("nosuch0", 0, &umem, &cfg).expect_err("missing interface");
    assert!(matches!(&err, sluice_live::LiveError::NoSuchInterface { .. }), "{err}");

    let first = XskSocket::bind(&v1.near, 0, &umem, &cfg).expect("first");
    // veth has one queue: queue 3 does not exist.
    let err = XskSocket::bind(&v1.far, 3, &umem, &cfg).expect_err("no such queue");
    assert!(err.to_string().contains("no queue 3"), "{err}");
    // The same (interface, queue) twice: over the same UMEM, and from another UMEM.
    let err = XskSocket::bind(&v1.near, 0, &umem, &cfg).expect_err("queue taken, same UMEM");
    assert!(err.to_string().contains("already has that queue"), "{err}");
    let other = Umem::new(64, 4096).expect("UMEM");
    let err = XskSocket::bind(&v1.near, 0, &other, &cfg).expect_err("queue taken, other UMEM");
    assert!(err.to_string().contains("already used by another AF_XDP socket"), "{err}");
    // Sharing across devices works while the first socket is open, and survives its closing.
    let mut second = XskSocket::bind(&v2.near, 0, &umem, &cfg).expect("shared");
    assert!(second.is_shared());
    drop(first);
    assert_eq!(second.fill(&[0, 4096]), 2);
    let err = XskSocket::bind(&v2.far, 0, &umem, &cfg).expect_err("registration closed");
    assert!(err.to_string().contains("first socket is closed"), "{err}");
    // A descriptor that crosses a frame is refused instead of leaking the frame.
    let err = second.tx(&[Desc { addr: 4000, len: 200, options: 0 }]).expect_err("crossing");
    assert!(err.to_string().contains("not inside one UMEM frame"), "{err}");
    println!("errors: ok");
}
