use crate::args::list_or_firehol;
use crate::report::{finished, judge, Bar};
use crate::{progress, Outcome};
use anyhow::Result;
use clap::Args;
use sluice_defrag::DefragLimits;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Verdict};
use sluice_gen::{demo_config, GenSource, Generator};
use sluice_pcap::PcapHeader;
use sluice_pipeline::WriteThrough;
use sluice_pipeline::{Discard, JudgeConfig, Reassembly, RunConfig};
use sluice_wire::LinkType;
use std::path::PathBuf;
use std::sync::Arc;

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
    let list = list_or_firehol(None)?;
    let entries = list.len();
    let rules = RuleSet::new(&[], &[], &list);
    // Generated packets stream straight into the pipeline; nothing touches
    // the disk unless --keep asks for a copy.
    let gen = GenSource::new(Generator::new(demo_config(a.packets, a.seed, list))?, a.packets, false);
    let header = PcapHeader::new(LinkType::ETHERNET, sluice_gen::SNAPLEN, false);
    let mut source = match &a.keep {
        Some(p) => WriteThrough::new(gen, p, header)?,
        None => WriteThrough::without_copy(gen),
    };
    let judge = judge(&Arc::new(Published::new(rules)), JudgeConfig::default(), 1, &[], None, false);
    let mut stage = Reassembly::new(DefragLimits::default(), Verdict::Drop);
    let mut bar = Bar(progress::bar(a.packets, false, !a.json));
    // Generating is the costly half: on two CPUs it runs on the reader thread.
    let cfg = RunConfig { read_ahead: sluice_cpus::available_cpus() >= 2, ..RunConfig::default() };
    let result = sluice_pipeline::run(&mut source, &mut stage, judge, &mut Discard, &mut bar, &cfg);
    bar.0.finish_and_clear();
    let done = finished(result)?;
    source.finish()?;
    let gen = *source.inner().stats();
    let run = &done.report;
    let observed = run.stats.dropped;
    let ok = observed == gen.listed && done.stopped.is_none();
    use std::fmt::Write;
    let mut out = String::new();
    if a.json {
        let mut v = serde_json::to_value(run.to_json())?;
        v["expected_dropped"] = gen.listed.into();
        v["match"] = ok.into();
        v["list"] = "firehol_level1 (embedded)".into();
        v["list_entries"] = entries.into();
        v["generated"] = gen.to_json(a.keep.as_deref(), run.elapsed.as_secs_f64());
        v["kept"] = a.keep.as_ref().map(|p| p.display().to_string()).into();
        out = v.to_string() + "\n";
    } else {
        let _ = writeln!(out, "sluice demo: FireHOL level1 ({entries} entries, embedded) against generated traffic");
        let _ = writeln!(
            out,
            "generated    {:>12}  packets: ipv4 {}, ipv6 {}, vlan {} (qinq {}), {} fragments, IMIX sizes",
            gen.packets, gen.ipv4, gen.ipv6, gen.vlan_tagged, gen.qinq_tagged, gen.fragments
        );
        let capture = match &a.keep {
            Some(p) => format!("{} (kept)", p.display()),
            None => "none: generated straight into the pipeline (--keep FILE writes one)".to_owned(),
        };
        let _ = writeln!(out, "capture      {capture}");
        out += &run.text();
        let _ = writeln!(
            out,
            "expected dropped {:>8}  (packets whose source the generator drew from the list)",
            gen.listed
        );
        let _ = writeln!(out, "observed dropped {:>8}  {}", observed, if ok { "OK: identical" } else { "MISMATCH" });
    }
    // With the capture on standard output, the report goes to stderr.
    if a.keep.as_deref().is_some_and(sluice_pcap::stdio::is_stdio) {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
    if let Some(e) = &done.stopped {
        anyhow::bail!("generating: {e}");
    }
    Ok(if ok { Outcome::Complete } else { Outcome::DemoMismatch })
}
