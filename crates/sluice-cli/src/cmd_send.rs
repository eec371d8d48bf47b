//! `sluice send`: transmit a capture or generated frames out of one
//! interface, paced. The run and its summary are `sluice_gen::send`'s;
//! here are the flags.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_control::product::Summary;
use sluice_gen::send::{FrameOrigin, SendConfig, SendIo, SendTotals};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
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

pub fn run(a: SendArgs) -> Result<Outcome> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            crate::usage!("--rate must be a positive number of frames per second");
        }
    }
    let frames = match a.input {
        Some(path) => FrameOrigin::Capture { path, loops: a.loops },
        None => FrameOrigin::Generated(a.traffic.config(a.count.unwrap_or(100_000))?),
    };
    let cfg =
        SendConfig { iface: a.iface, frames, count: a.count, rate: a.rate, io: a.io, through_qdisc: a.through_qdisc };
    let stop = Arc::new(AtomicBool::new(false));
    sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
    let show = std::io::stderr().is_terminal() && !a.json;
    let (mut last_print, mut last_sent) = (Instant::now(), 0u64);
    let progress = |t: &SendTotals| {
        if show {
            let dt = last_print.elapsed().as_secs_f64();
            tracing::info!("sent {} ({:.0} frames/s)", t.sent, (t.sent - last_sent) as f64 / dt);
            (last_print, last_sent) = (Instant::now(), t.sent);
        }
    };
    let summary = sluice_gen::send::run(cfg, &stop, progress)?;
    match a.json {
        true => println!("{}", summary.json()),
        false => print!("{}", summary.text()),
    }
    Ok(Outcome::Complete)
}
