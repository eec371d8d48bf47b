//! `sluice send`: transmit a capture or generated frames out of one
//! interface, paced (pkt-gen's role in the seed's test bed), so a live path
//! can be driven from sluice itself.
//!
//! The paced transmit loop is `sluice_live::send::transmit`; here are the
//! flags, where frames come from, and the totals.

use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sluice_gen::Generator;
use sluice_live::send::{mtu_of, transmit, FrameSender, Pacing, PacketSender, SendTotals, XskSender};
use sluice_pcap::CaptureReader;
use sluice_wire::LinkType;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct SendArgs {
    /// Interface to send on.
    #[arg(long)]
    pub iface: String,
    /// Send the frames of this capture (Ethernet); without it, generate
    /// frames as `sluice gen` does.
    #[arg(long = "in", value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Frames to send in all (default: the whole capture --loop times, or
    /// 100000 generated).
    #[arg(long)]
    pub count: Option<u64>,
    /// Frames per second (default: as fast as the ring takes them).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    /// Send the capture this many times (0: until interrupted).
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    pub loops: u64,
    /// Socket layer.
    #[arg(long, value_enum, default_value = "afpacket")]
    pub io: SendIo,
    /// AF_PACKET: through the qdisc, which spreads flows over TX queues by hash.
    #[arg(long)]
    pub through_qdisc: bool,
    /// Print the totals as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Generator (without --in)")]
    pub traffic: sluice_gen::flags::TrafficFlags,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SendIo {
    Afpacket,
    Afxdp,
}

/// Where frames come from.
enum Frames {
    Capture {
        path: PathBuf,
        reader: CaptureReader<sluice_pcap::Streamed<std::io::BufReader<std::fs::File>>>,
        loops_left: u64,
    },
    Gen(Box<Generator>),
}

impl Frames {
    /// The next frame into `buf`; false at the end.
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        match self {
            Frames::Gen(g) => Ok(g.next_frame(buf).is_some()),
            Frames::Capture { path, reader, loops_left } => loop {
                if let Some(rec) = reader.next_record().with_context(|| path.display().to_string())? {
                    if rec.interface.link_type != LinkType::ETHERNET {
                        bail!(
                            "{}: record {} has link type {:?}; sluice send sends Ethernet frames only",
                            path.display(),
                            rec.index,
                            rec.interface.link_type
                        );
                    }
                    buf.clear();
                    buf.extend_from_slice(rec.data);
                    return Ok(true);
                }
                if reader.records_read() == 0 {
                    // An empty capture: looping would send nothing forever.
                    return Ok(false);
                }
                // 0 loops: forever. Otherwise, one pass is done.
                if *loops_left != 0 {
                    *loops_left -= 1;
                    if *loops_left == 0 {
                        return Ok(false);
                    }
                }
                *reader = CaptureReader::open(&*path).with_context(|| path.display().to_string())?;
            },
        }
    }
}

pub fn run(a: SendArgs) -> Result<Outcome> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            crate::usage!("--rate must be a positive number of frames per second");
        }
    }
    let mut frames = match &a.input {
        Some(path) => {
            let reader = CaptureReader::open(path).with_context(|| path.display().to_string())?;
            Frames::Capture { path: path.clone(), reader, loops_left: a.loops }
        }
        None => {
            let cfg = a.traffic.config(a.count.unwrap_or(100_000))?;
            Frames::Gen(Box::new(Generator::new(cfg)?))
        }
    };
    let mut sender: Box<dyn FrameSender> = match a.io {
        SendIo::Afpacket => Box::new(
            PacketSender::open(&a.iface, a.through_qdisc)
                .with_context(|| format!("opening an AF_PACKET TX ring on {}", a.iface))?,
        ),
        SendIo::Afxdp => Box::new(
            XskSender::open(&a.iface, 0).with_context(|| format!("opening an AF_XDP socket on {} queue 0", a.iface))?,
        ),
    };
    let stop = Arc::new(AtomicBool::new(false));
    sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
    let show = std::io::stderr().is_terminal() && !a.json;
    let pacing = Pacing { rate: a.rate, count: a.count, mtu: mtu_of(&a.iface) };
    let started = Instant::now();
    let (mut last_print, mut last_sent) = (Instant::now(), 0u64);
    let progress = |t: &SendTotals| {
        if show {
            let dt = last_print.elapsed().as_secs_f64();
            tracing::info!("sent {} ({:.0} frames/s)", t.sent, (t.sent - last_sent) as f64 / dt);
            (last_print, last_sent) = (Instant::now(), t.sent);
        }
    };
    let t = transmit(&mut *sender, |buf| frames.next(buf), &pacing, &stop, progress)
        .with_context(|| format!("sending on {}", a.iface))?;
    let SendTotals { sent, bytes, skipped, oversize } = t;
    let elapsed = started.elapsed().as_secs_f64();
    let pps = if elapsed > 0.0 { sent as f64 / elapsed } else { 0.0 };
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "iface": a.iface,
                "io": match a.io { SendIo::Afpacket => "afpacket", SendIo::Afxdp => "afxdp" },
                "sent": sent,
                "bytes": bytes,
                "skipped": skipped,
                "oversize": oversize,
                "elapsed_s": elapsed,
                "pps": pps,
                "rate": a.rate,
                "interrupted": stop.load(Ordering::Relaxed),
            })
        );
    } else {
        println!("sent {sent} frames ({bytes} bytes) on {} in {elapsed:.3} s ({pps:.0} frames/s)", a.iface);
        if skipped > 0 {
            println!(
                "skipped {skipped} frames that cannot be sent ({oversize} larger than the MTU allows; the rest too big \
                 for a ring slot or shorter than an Ethernet header)"
            );
        }
    }
    Ok(Outcome::Complete)
}
