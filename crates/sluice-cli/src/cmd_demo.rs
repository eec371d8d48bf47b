//! `sluice demo`: the run and its summary are `sluice_gen::demo`'s.

use crate::report::Bar;
use crate::{progress, Outcome};
use anyhow::Result;
use clap::Args;
use sluice_gen::demo::DemoConfig;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Packets to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Seed of the generator: the same seed gives the same packets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the generated packets to this capture (pcap; `-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub keep: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DemoArgs) -> Result<Outcome> {
    let mut bar = Bar(progress::bar(a.packets, false, !a.json));
    let to_stdout = a.keep.as_deref().is_some_and(sluice_pcap::stdio::is_stdio);
    let summary = sluice_gen::demo::run(DemoConfig { packets: a.packets, seed: a.seed, keep: a.keep }, &mut bar)?;
    bar.0.finish_and_clear();
    let out = sluice_control::product::print(&summary, a.json);
    // With the capture on standard output, the report goes to stderr.
    if to_stdout {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
    Ok(if summary.matched() { Outcome::Complete } else { Outcome::DemoMismatch })
}
