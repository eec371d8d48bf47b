//! A two-port bridge that forwards everything, A <-> B:
//!
//! ```text
//! bridge IFACE_A IFACE_B [afxdp-skb | afxdp-drv | afpacket] [SECONDS]
//! ```
//!
//! AF_XDP: one UMEM shared by both ports' sockets; a frame received on one
//! port goes onto the other's TX ring by address. AF_PACKET: RX ring ->
//! copy -> TX ring. Prints the counters every second and at the end. The
//! XDP programs are detached when the process exits, however it exits
//! (they hang on BPF link descriptors).

use std::time::{Duration, Instant};

use sluice_live::bridge::{packet_step, wait_any, xsk_service, xsk_step, StepStats};
use sluice_live::{FramePool, PacketConfig, PacketSocket, Umem, XdpMode, XdpRedirect, XskConfig, XskSocket};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: bridge IFACE_A IFACE_B [afxdp-skb | afxdp-drv | afpacket] [SECONDS]");
        std::process::exit(2);
    }
    let io = args.get(2).map(String::as_str).unwrap_or("afxdp-skb");
    let secs: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10);
    let r = match io {
        "afxdp-skb" => run_xsk(&args[0], &args[1], XdpMode::Skb, secs),
        "afxdp-drv" => run_xsk(&args[0], &args[1], XdpMode::Driver, secs),
        "afpacket" => run_packet(&args[0], &args[1], secs),
        other => {
            eprintln!("unknown I/O {other:?}");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn report(t0: Instant, ab: &StepStats, ba: &StepStats) {
    println!(
        "{:>6.1}s  A->B rx {} fwd {} lost {}  B->A rx {} fwd {} lost {}",
        t0.elapsed().as_secs_f64(),
        ab.received,
        ab.forwarded,
        ab.tx_full,
        ba.received,
        ba.forwarded,
        ba.tx_full
    );
}

fn run_xsk(a: &str, b: &str, mode: XdpMode, secs: u64) -> sluice_live::Result<()> {
    let umem = Umem::new(8192, 2048)?;
    if let Some(w) = umem.warning() {
        eprintln!("warning: {w}");
    }
    let ra = XdpRedirect::attach(a, 1, mode)?;
    let rb = XdpRedirect::attach(b, 1, mode)?;
    let cfg = XskConfig::default();
    let mut sa = XskSocket::bind(a, 0, &umem, &cfg)?;
    let mut sb = XskSocket::bind(b, 0, &umem, &cfg)?;
    eprintln!("AF_XDP {mode:?} mode, zero-copy: {} / {}", sa.is_zero_copy(), sb.is_zero_copy());
    let mut pool = FramePool::new(&umem);
    sa.fill_from(&mut pool, 2048);
    sb.fill_from(&mut pool, 2048);
    ra.register(0, &sa)?;
    rb.register(0, &sb)?;
    let (t0, mut last) = (Instant::now(), Instant::now());
    let (mut ab, mut ba) = (StepStats::default(), StepStats::default());
    while t0.elapsed() < Duration::from_secs(secs) {
        xsk_service(&mut sa, &mut pool)?;
        xsk_service(&mut sb, &mut pool)?;
        let s1 = xsk_step(&umem, &mut sa, &mut sb, &mut pool, |_| true)?;
        let s2 = xsk_step(&umem, &mut sb, &mut sa, &mut pool, |_| true)?;
        ab += s1;
        ba += s2;
        if s1.received == 0 && s2.received == 0 && sa.tx_pending() == 0 && sb.tx_pending() == 0 {
            use std::os::fd::AsRawFd;
            wait_any(&[sa.as_raw_fd(), sb.as_raw_fd()], 10)?;
        }
        if last.elapsed() >= Duration::from_secs(1) {
            report(t0, &ab, &ba);
            last = Instant::now();
        }
    }
    report(t0, &ab, &ba);
    eprintln!("{a}: {:?}\n{b}: {:?}", sa.stats()?, sb.stats()?);
    Ok(())
}

fn run_packet(a: &str, b: &str, secs: u64) -> sluice_live::Result<()> {
    let cfg = PacketConfig::default();
    let mut pa = PacketSocket::open(a, &cfg)?;
    let mut pb = PacketSocket::open(b, &cfg)?;
    let fds = [pa.rx_fd().unwrap_or(-1), pb.rx_fd().unwrap_or(-1)];
    let (t0, mut last) = (Instant::now(), Instant::now());
    let (mut ab, mut ba) = (StepStats::default(), StepStats::default());
    let mut csum_partial = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        let mut count = |_: &[u8], m: sluice_live::FrameMeta| {
            csum_partial += u64::from(m.csum_not_ready);
            true
        };
        let s1 = packet_step(&mut pa, &mut pb, &mut count)?;
        let s2 = packet_step(&mut pb, &mut pa, &mut count)?;
        ab += s1;
        ba += s2;
        if s1.received == 0 && s2.received == 0 {
            wait_any(&fds, 10)?;
        }
        if last.elapsed() >= Duration::from_secs(1) {
            report(t0, &ab, &ba);
            last = Instant::now();
        }
    }
    report(t0, &ab, &ba);
    eprintln!("frames with a partial checksum (TP_STATUS_CSUMNOTREADY): {csum_partial}");
    eprintln!("{a}: {:?}\n{b}: {:?}", pa.stats()?, pb.stats()?);
    Ok(())
}
