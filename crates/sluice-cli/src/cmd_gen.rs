use crate::{progress, Outcome};
use anyhow::Result;
use clap::Args;
use sluice_gen::flags::TrafficFlags;
use sluice_gen::{GenConfig, GenStats};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Output capture (pcap; `-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Frames to write (each IP fragment is one frame).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    #[command(flatten)]
    pub traffic: TrafficFlags,
    /// Send each fragmented datagram's fragments in random order.
    #[arg(long)]
    pub frag_shuffle: bool,
    /// Share of fragmented datagrams with one fragment sent twice.
    #[arg(long, default_value_t = 0.0, value_parser = sluice_gen::flags::share)]
    pub frag_dup: f64,
    /// Write nanosecond timestamps (default: microseconds).
    #[arg(long)]
    pub nanos: bool,
    /// Print what was generated as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GenArgs) -> Result<Outcome> {
    let cfg = GenConfig { frag_shuffle: a.frag_shuffle, frag_dup_share: a.frag_dup, ..a.traffic.config(a.count)? };
    let started = Instant::now();
    let stats = write_capture(cfg, &a.out, a.nanos, true)?;
    let elapsed = started.elapsed().as_secs_f64();
    // With the capture on standard output, what is said about it goes to stderr.
    let to_stdout = sluice_pcap::stdio::is_stdio(&a.out);
    let text =
        if a.json { stats.to_json(Some(&a.out), elapsed).to_string() } else { stats_text(&stats, &a.out, elapsed) };
    if to_stdout {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
    Ok(Outcome::Complete)
}

/// Generate `cfg` into a pcap file at `out` (`-`: standard output), with a
/// progress bar on a terminal.
pub fn write_capture(cfg: GenConfig, out: &Path, nanos: bool, show_progress: bool) -> Result<GenStats> {
    let pb = progress::bar(cfg.count, false, show_progress);
    let stats = sluice_gen::write_capture(cfg, out, nanos, |n| pb.set_position(n))?;
    pb.finish_and_clear();
    Ok(stats)
}

fn stats_text(s: &GenStats, out: &Path, elapsed_s: f64) -> String {
    let mut t = format!("wrote {} packets ({} bytes) to {} in {:.2} s\n", s.packets, s.bytes, out.display(), elapsed_s);
    t += &format!("  ipv4 {}  ipv6 {}  tcp {}  udp {}  icmp {}\n", s.ipv4, s.ipv6, s.tcp, s.udp, s.icmp);
    t += &format!(
        "  vlan-tagged {} (qinq {})  fragments {} of {} datagrams",
        s.vlan_tagged, s.qinq_tagged, s.fragments, s.fragmented_datagrams
    );
    if s.encapsulated > 0 {
        t += &format!("\n  encapsulated {}", s.encapsulated);
    }
    if s.listed > 0 {
        t += &format!("\n  sources from the list: {} (a filter on the list drops exactly these)", s.listed);
    }
    t
}
