use crate::cmd_filter::{filter_capture, print_summary, summary_json, Judge, Sinks};
use crate::cmd_gen::{list_or_firehol, write_capture};
use crate::reassembly::Reassembly;
use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_engine::defrag::Limits;
use sluice_engine::{Engine, RuleSet, Verdict};
use sluice_gen::{FrameSize, GenConfig, ProtoMix};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Packets to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keep the generated capture at this path (default: a temporary file, deleted).
    #[arg(long, value_name = "FILE")]
    pub keep: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The demo's traffic: a realistic mix with 10% of sources from the list.
pub fn demo_config(packets: u64, seed: u64, list: Vec<sluice_rules::Prefix>) -> GenConfig {
    GenConfig {
        count: packets,
        seed,
        flows: None,
        ipv6_share: 0.2,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        vlan_share: 0.1,
        qinq_share: 0.05,
        listed_share: 0.1,
        list,
        frag_share: 0.02,
        ..GenConfig::default()
    }
}

pub fn run(a: DemoArgs) -> Result<Outcome> {
    let list = list_or_firehol(None)?;
    let entries = list.len();
    let temp;
    let path = match &a.keep {
        Some(p) => p.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("sluice-demo-")
                .suffix(".pcap")
                .tempfile()
                .context("creating a temporary file")?;
            temp.path().to_path_buf()
        }
    };
    let rules = RuleSet::new(&[], &[], &list);
    let started = Instant::now();
    let gen = write_capture(demo_config(a.packets, a.seed, list), &path, false, !a.json)?;
    let gen_secs = started.elapsed().as_secs_f64();
    let mut engine = Engine::new(rules, Verdict::Pass);
    let reassembly = Reassembly::new(Limits::default(), Verdict::Drop);
    let run = filter_capture(
        &path,
        Judge::Inline(&mut engine),
        &Sinks { pass: None, drop: None, format: None },
        reassembly,
        !a.json,
    )?;
    let observed = run.stats.dropped;
    let ok = observed == gen.listed && run.stopped.is_none();
    if a.json {
        let mut v = summary_json(&path, &run);
        v["expected_dropped"] = gen.listed.into();
        v["match"] = ok.into();
        v["list"] = "firehol_level1 (embedded)".into();
        v["list_entries"] = entries.into();
        v["generate_s"] = gen_secs.into();
        v["generated"] = crate::cmd_gen::stats_json(&gen, &path, gen_secs);
        v["kept"] = a.keep.is_some().into();
        println!("{v}");
    } else {
        println!("sluice demo: FireHOL level1 ({entries} entries, embedded) against a generated capture");
        println!(
            "generated    {:>12}  packets in {:.2} s: ipv4 {}, ipv6 {}, vlan {} (qinq {}), {} fragments, IMIX sizes",
            gen.packets, gen_secs, gen.ipv4, gen.ipv6, gen.vlan_tagged, gen.qinq_tagged, gen.fragments
        );
        println!(
            "capture      {}{}",
            path.display(),
            if a.keep.is_some() { "" } else { " (deleted afterwards; --keep FILE keeps it)" }
        );
        print_summary(&run);
        println!("expected dropped {:>8}  (packets whose source the generator drew from the list)", gen.listed);
        println!("observed dropped {:>8}  {}", observed, if ok { "OK: identical" } else { "MISMATCH" });
    }
    if let Some(e) = &run.stopped {
        eprintln!("sluice: error: {}: stopped at {e}", path.display());
        return Ok(Outcome::InputDamaged);
    }
    Ok(if ok { Outcome::Complete } else { Outcome::DemoMismatch })
}
