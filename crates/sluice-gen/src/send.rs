//! `sluice send` as a library: a capture or generated frames transmitted
//! out of one interface, paced (pkt-gen's role in the seed's test bed), so
//! a live path can be driven from sluice itself. The paced transmit loop
//! is `sluice_live::send::transmit`; here are where frames come from
//! (a capture, looped, or the generator) and the run's summary.

use crate::{GenConfig, Generator};
use anyhow::{bail, Context, Result};
use sluice_control::product::Summary;
pub use sluice_live::send::SendTotals;
use sluice_live::send::{mtu_of, transmit, FrameSender, Pacing, PacketSender, XskSender};
use sluice_pcap::CaptureReader;
use sluice_wire::LinkType;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The socket layer frames leave by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SendIo {
    Afpacket,
    Afxdp,
}

impl SendIo {
    pub fn as_str(self) -> &'static str {
        match self {
            SendIo::Afpacket => "afpacket",
            SendIo::Afxdp => "afxdp",
        }
    }
}

/// Where the frames come from.
pub enum FrameOrigin {
    /// A capture's Ethernet frames, `loops` times (0: until stopped).
    Capture { path: PathBuf, loops: u64 },
    /// The generator, as `sluice gen` makes them.
    Generated(GenConfig),
}

pub struct SendConfig {
    pub iface: String,
    pub frames: FrameOrigin,
    /// Frames in all (None: the whole capture `loops` times, or the
    /// generator's count).
    pub count: Option<u64>,
    /// Frames per second (None: as fast as the ring takes them).
    pub rate: Option<f64>,
    pub io: SendIo,
    /// AF_PACKET: through the qdisc, which spreads flows over TX queues.
    pub through_qdisc: bool,
}

/// What a send did.
#[derive(Debug)]
pub struct SendSummary {
    pub iface: String,
    pub io: SendIo,
    pub totals: SendTotals,
    pub elapsed_s: f64,
    pub rate: Option<f64>,
    /// Stopped before the frames ran out (SIGINT, SIGTERM, the stop flag).
    pub interrupted: bool,
}

impl SendSummary {
    pub fn pps(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.totals.sent as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

impl Summary for SendSummary {
    fn text(&self) -> String {
        let SendTotals { sent, bytes, skipped, oversize } = self.totals;
        let mut out = format!(
            "sent {sent} frames ({bytes} bytes) on {} in {:.3} s ({:.0} frames/s)\n",
            self.iface,
            self.elapsed_s,
            self.pps()
        );
        if skipped > 0 {
            out += &format!(
                "skipped {skipped} frames that cannot be sent ({oversize} larger than the MTU allows; the rest too big \
                 for a ring slot or shorter than an Ethernet header)\n"
            );
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        let t = &self.totals;
        serde_json::json!({
            "iface": self.iface,
            "io": self.io.as_str(),
            "sent": t.sent,
            "bytes": t.bytes,
            "skipped": t.skipped,
            "oversize": t.oversize,
            "elapsed_s": self.elapsed_s,
            "pps": self.pps(),
            "rate": self.rate,
            "interrupted": self.interrupted,
        })
    }
}

/// Sends until the frames run out, `count` is reached or `stop` is set;
/// `progress` hears of the totals now and then.
pub fn run(cfg: SendConfig, stop: &Arc<AtomicBool>, progress: impl FnMut(&SendTotals)) -> Result<SendSummary> {
    if let Some(r) = cfg.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("the rate must be a positive number of frames per second");
        }
    }
    let mut frames = match cfg.frames {
        FrameOrigin::Capture { path, loops } => {
            let reader = CaptureReader::open(&path).with_context(|| path.display().to_string())?;
            Frames::Capture { path, reader, loops_left: loops }
        }
        FrameOrigin::Generated(g) => Frames::Gen(Box::new(Generator::new(g)?)),
    };
    let mut sender: Box<dyn FrameSender> = match cfg.io {
        SendIo::Afpacket => Box::new(
            PacketSender::open(&cfg.iface, cfg.through_qdisc)
                .with_context(|| format!("opening an AF_PACKET TX ring on {}", cfg.iface))?,
        ),
        SendIo::Afxdp => Box::new(
            XskSender::open(&cfg.iface, 0)
                .with_context(|| format!("opening an AF_XDP socket on {} queue 0", cfg.iface))?,
        ),
    };
    let pacing = Pacing { rate: cfg.rate, count: cfg.count, mtu: mtu_of(&cfg.iface) };
    let started = Instant::now();
    let totals = transmit(&mut *sender, |buf| frames.next(buf), &pacing, stop, progress)
        .with_context(|| format!("sending on {}", cfg.iface))?;
    Ok(SendSummary {
        iface: cfg.iface,
        io: cfg.io,
        totals,
        elapsed_s: started.elapsed().as_secs_f64(),
        rate: cfg.rate,
        interrupted: stop.load(Ordering::Relaxed),
    })
}

/// Where frames come from, as the transmit loop reads them.
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
