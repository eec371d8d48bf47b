//! `sluice send`: transmit a capture or generated frames out of one
//! interface, paced (pkt-gen's role in the seed's test bed), so a live path
//! can be driven from sluice itself.
//!
//! Pacing is a token bucket: tokens accrue at `--rate` per second, at most
//! a millisecond's worth (and at least one) at a time, and each frame takes
//! one; the ring is flushed whenever the bucket runs dry, before sleeping.

use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sluice_gen::Generator;
use sluice_live::send::{FrameSender, PacketSender, XskSender};
use sluice_live::LiveError;
use sluice_pcap::CaptureReader;
use sluice_wire::LinkType;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Print the totals as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Generator (without --in)")]
    pub traffic: crate::cmd_gen::TrafficArgs,
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

/// The interface's MTU (from sysfs), if it can be read.
fn mtu_of(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu")).ok()?.trim().parse().ok()
}

/// The longest frame the kernel sends on a link with `mtu`: the Ethernet
/// header on top, and one VLAN tag more if the frame carries one.
fn max_frame(mtu: usize, frame: &[u8]) -> usize {
    let tagged = matches!(frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
    mtu + 14 + if tagged { 4 } else { 0 }
}

/// Tokens at `rate` per second, at most `burst` at a time.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Bucket {
        let burst = (rate / 1000.0).clamp(1.0, 256.0);
        Bucket { rate, burst, tokens: 1.0, at: Instant::now() }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + (now - self.at).as_secs_f64() * self.rate).min(self.burst);
        self.at = now;
    }

    /// How long until a token is there.
    fn wait(&self) -> Duration {
        Duration::from_secs_f64(((1.0 - self.tokens) / self.rate).max(0.0))
    }
}

pub fn run(a: SendArgs) -> Result<Outcome> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of frames per second");
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
            PacketSender::open(&a.iface).with_context(|| format!("opening an AF_PACKET TX ring on {}", a.iface))?,
        ),
        SendIo::Afxdp => Box::new(
            XskSender::open(&a.iface, 0).with_context(|| format!("opening an AF_XDP socket on {} queue 0", a.iface))?,
        ),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing the signal handlers")?;
    }
    let limit = a.count.unwrap_or(u64::MAX);
    let show = std::io::stderr().is_terminal() && !a.json;
    let mut bucket = a.rate.map(Bucket::new);
    let mut buf = Vec::with_capacity(16_384);
    let (mut sent, mut bytes, mut skipped, mut unflushed) = (0u64, 0u64, 0u64, 0u32);
    let mtu = mtu_of(&a.iface);
    let mut oversize = 0u64;
    let started = Instant::now();
    let (mut last_print, mut last_sent) = (Instant::now(), 0u64);
    while sent + skipped < limit && !stop.load(Ordering::Relaxed) {
        if let Some(b) = bucket.as_mut() {
            b.refill();
            while b.tokens < 1.0 {
                // Out of tokens: what is queued goes now, then wait for the next one.
                sender.flush().context("flushing the TX ring")?;
                unflushed = 0;
                let w = b.wait();
                if w > Duration::from_micros(50) {
                    std::thread::sleep(w);
                } else {
                    std::hint::spin_loop();
                }
                b.refill();
            }
            b.tokens -= 1.0;
        }
        if !frames.next(&mut buf)? {
            break;
        }
        if mtu.is_some_and(|m| buf.len() > max_frame(m, &buf)) {
            // The kernel would drop it silently after taking it from the ring.
            if oversize == 0 {
                eprintln!(
                    "sluice: warning: skipping frames larger than {}'s MTU allows ({} bytes, first one {} bytes)",
                    a.iface,
                    max_frame(mtu.unwrap_or(0), &buf),
                    buf.len()
                );
            }
            oversize += 1;
            skipped += 1;
            continue;
        }
        let mut full_since = None;
        loop {
            match sender.send(&buf) {
                Ok(true) => {
                    sent += 1;
                    bytes += buf.len() as u64;
                    unflushed += 1;
                    break;
                }
                Ok(false) => {
                    sender.flush().context("flushing the TX ring")?;
                    unflushed = 0;
                    let since = *full_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(2) {
                        bail!("the TX ring on {} stayed full for 2 s: is the link up and carrying?", a.iface);
                    }
                    std::thread::sleep(Duration::from_micros(20));
                }
                Err(e @ (LiveError::FrameTooBig { .. } | LiveError::Config(_))) => {
                    if skipped == 0 {
                        eprintln!("sluice: warning: skipping a frame that cannot be sent: {e}");
                    }
                    skipped += 1;
                    break;
                }
                Err(e) => return Err(anyhow::Error::new(e).context(format!("sending on {}", a.iface))),
            }
        }
        if unflushed >= 64 {
            sender.flush().context("flushing the TX ring")?;
            unflushed = 0;
        }
        if show && last_print.elapsed() >= Duration::from_secs(1) {
            let dt = last_print.elapsed().as_secs_f64();
            eprintln!("sluice: sent {sent} ({:.0} frames/s)", (sent - last_sent) as f64 / dt);
            (last_print, last_sent) = (Instant::now(), sent);
        }
    }
    sender.drain().context("waiting for the TX ring to drain")?;
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
