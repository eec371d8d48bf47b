//! `sluice-bench shield --veth-frames N`: the same frames as traffic.
//!
//! The generator (`sluice_gen::send`, AF_PACKET) sends the row's frames,
//! written as a capture and looped, from a veth end in this netns to its
//! peer in a netns of the bench's, where each contender's program is
//! attached in native (drv) mode in turn. With `kernel.bpf_stats_enabled`
//! on (restored after), the kernel's `run_time_ns / run_cnt` of the
//! program over the send is its cost per packet on a real receive path,
//! and `run_cnt` over the send's time the rate it judged frames at; the
//! drop rate is that times the share of the frames the program drops
//! (known from `BPF_PROG_TEST_RUN`). On this VM the sender shares the two
//! vCPUs with the receiver: the rates are the machine's, not the
//! program's limit.

use crate::shield::Contender;
use anyhow::{Context, Result};
use sluice_gen::send::{FrameOrigin, SendConfig, SendIo};
use sluice_live::bpf::XdpMode;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const NETNS: &str = "sluice-bench-veth";
/// The sender's end (in this netns) and the receiver's (in [`NETNS`]).
const VETH: [&str; 2] = ["sbv0", "sbv1"];
const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// pcap's magic (microsecond timestamps), version and Ethernet link type.
const PCAP_MAGIC: u32 = 0xa1b2_c3d4;
const PCAP_VERSION: (u16, u16) = (2, 4);
const LINKTYPE_ETHERNET: u32 = 1;

/// A pcap file's header: magic, version, zone and accuracy (0), snap
/// length, link type.
fn pcap_header(snaplen: u32) -> Vec<u8> {
    let mut h = PCAP_MAGIC.to_le_bytes().to_vec();
    h.extend_from_slice(&PCAP_VERSION.0.to_le_bytes());
    h.extend_from_slice(&PCAP_VERSION.1.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&snaplen.to_le_bytes());
    h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// The netns, the veths and the stats switch, undone when dropped.
struct Setup {
    stats_before: Option<String>,
    capture: std::path::PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(v) = &self.stats_before {
            let _ = std::fs::write(STATS_SYSCTL, v);
        }
        let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
        let _ = std::fs::remove_file(&self.capture);
    }
}

fn ip(args: &[&str]) -> Result<()> {
    let st = Command::new("ip").args(args).status().with_context(|| format!("ip {}", args.join(" ")))?;
    anyhow::ensure!(st.success(), "ip {} failed", args.join(" "));
    Ok(())
}

/// One contender's row on the veth.
pub struct VethRow {
    pub ns_per_packet: f64,
    pub judged_mpps: f64,
    pub dropped_mpps: f64,
    pub sent_mpps: f64,
}

/// Sends `count` frames (`frames` looped) through each contender in turn;
/// `drop_share[i]`: the share of `frames` contender `i` drops.
pub fn run(contenders: &[Contender], frames: &[Vec<u8>], drop_share: &[f64], count: u64) -> Result<Vec<VethRow>> {
    let capture = std::env::temp_dir().join(format!("sluice-bench-veth-{}.pcap", std::process::id()));
    let mut setup = Setup { stats_before: None, capture: capture.clone() };
    let snaplen = frames.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let mut pcap = pcap_header(snaplen);
    for f in frames {
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(f);
    }
    std::fs::write(&capture, pcap)?;
    ip(&["netns", "add", NETNS])?;
    ip(&["link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1], "netns", NETNS])?;
    ip(&["link", "set", VETH[0], "up"])?;
    ip(&["-n", NETNS, "link", "set", VETH[1], "up"])?;
    setup.stats_before = Some(std::fs::read_to_string(STATS_SYSCTL)?);
    std::fs::write(STATS_SYSCTL, "1")?;
    let mut rows = Vec::new();
    for (c, &share) in contenders.iter().zip(drop_share) {
        let link = sluice_live::netns::run_in(NETNS, || c.program.attach(VETH[1], XdpMode::Driver))??;
        let (t0, n0) = c.program.run_stats()?;
        let cfg = SendConfig {
            iface: VETH[0].into(),
            frames: FrameOrigin::Capture { path: capture.clone(), loops: 0 },
            count: Some(count),
            rate: None,
            io: SendIo::Afpacket,
            through_qdisc: false,
        };
        let sent = sluice_gen::send::run(cfg, &Arc::new(AtomicBool::new(false)), |_| {})?;
        let (t1, n1) = c.program.run_stats()?;
        drop(link);
        let runs = (n1 - n0) as f64;
        let judged_mpps = runs / sent.elapsed_s.max(f64::MIN_POSITIVE) / 1e6;
        rows.push(VethRow {
            ns_per_packet: (t1 - t0) as f64 / runs.max(1.0),
            judged_mpps,
            dropped_mpps: judged_mpps * share,
            sent_mpps: sent.pps() / 1e6,
        });
    }
    drop(setup);
    Ok(rows)
}
