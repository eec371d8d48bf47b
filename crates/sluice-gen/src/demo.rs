//! `sluice demo`: the embedded FireHOL level1 list against generated
//! traffic whose listed sources the generator counted, so the drops
//! observed are checked against the drops expected.

use crate::{demo_config, flags::list_or_firehol, GenSource, GenStats, Generator, SNAPLEN};
use sluice_control::product::Summary;
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_pcap::PcapHeader;
use sluice_pipeline::{Discard, Observer, ReassemblyConfig, RunConfig, RunError, RunReport, WorkersConfig};
use sluice_pipeline::{SinkError, WriteThrough};
use sluice_wire::LinkType;
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// What a demo run makes.
pub struct DemoConfig {
    pub packets: u64,
    /// The generator's seed: the same seed gives the same packets.
    pub seed: u64,
    /// Also write the generated packets to this capture (pcap).
    pub keep: Option<PathBuf>,
}

/// What a demo run did.
pub struct DemoSummary {
    pub report: RunReport,
    pub generated: GenStats,
    pub list_entries: usize,
    pub keep: Option<PathBuf>,
}

impl DemoSummary {
    /// The drops observed are exactly the packets with a listed source.
    pub fn matched(&self) -> bool {
        self.report.stats.dropped == self.generated.listed
    }
}

/// Generate, judge and count; `observer` hears of progress.
pub fn run(config: DemoConfig, observer: &mut dyn Observer) -> anyhow::Result<DemoSummary> {
    let list = list_or_firehol(None)?;
    let list_entries = list.len();
    let rules = RuleSet::new(&[], &[], &list);
    // Generated packets stream straight into the pipeline; nothing touches
    // the disk unless `keep` asks for a copy.
    let gen = GenSource::new(Generator::new(demo_config(config.packets, config.seed, list))?, config.packets, false);
    let header = PcapHeader::new(LinkType::ETHERNET, SNAPLEN, false);
    let mut source = match &config.keep {
        Some(p) => WriteThrough::new(gen, p, header)?,
        None => WriteThrough::without_copy(gen),
    };
    let judge = sluice_pipeline::judge(&Arc::new(Published::new(rules)), WorkersConfig::new(1));
    let mut stage = ReassemblyConfig::default().stage();
    // Generating is the costly half: on two CPUs it runs on the reader thread.
    let cfg = RunConfig { read_ahead: sluice_cpus::available_cpus() >= 2, ..RunConfig::default() };
    let done = sluice_pipeline::run(&mut source, &mut stage, judge, &mut Discard, observer, &cfg)
        .map_err(|e: RunError<std::convert::Infallible>| anyhow::anyhow!("{e}"))?;
    source.finish().map_err(|e: SinkError| anyhow::anyhow!("{e}"))?;
    if let Some(e) = &done.stopped {
        anyhow::bail!("generating: {e}");
    }
    let generated = *source.inner().stats();
    Ok(DemoSummary { report: done.report, generated, list_entries, keep: config.keep })
}

impl Summary for DemoSummary {
    fn text(&self) -> String {
        let (gen, entries) = (&self.generated, self.list_entries);
        let mut out = String::new();
        let _ = writeln!(out, "sluice demo: FireHOL level1 ({entries} entries, embedded) against generated traffic");
        let _ = writeln!(
            out,
            "generated    {:>12}  packets: ipv4 {}, ipv6 {}, vlan {} (qinq {}), {} fragments, IMIX sizes",
            gen.packets, gen.ipv4, gen.ipv6, gen.vlan_tagged, gen.qinq_tagged, gen.fragments
        );
        let capture = match &self.keep {
            Some(p) => format!("{} (kept)", p.display()),
            None => "none: generated straight into the pipeline (--keep FILE writes one)".to_owned(),
        };
        let _ = writeln!(out, "capture      {capture}");
        out += &self.report.text();
        let _ = writeln!(
            out,
            "expected dropped {:>8}  (packets whose source the generator drew from the list)",
            gen.listed
        );
        let verdict = if self.matched() { "OK: identical" } else { "MISMATCH" };
        let _ = writeln!(out, "observed dropped {:>8}  {verdict}", self.report.stats.dropped);
        out
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self.report.to_json()).expect("the report serialises");
        v["expected_dropped"] = self.generated.listed.into();
        v["match"] = self.matched().into();
        v["list"] = "firehol_level1 (embedded)".into();
        v["list_entries"] = self.list_entries.into();
        v["generated"] = self.generated.to_json(self.keep.as_deref(), self.report.elapsed.as_secs_f64());
        v["kept"] = self.keep.as_ref().map(|p| p.display().to_string()).into();
        v
    }
}
