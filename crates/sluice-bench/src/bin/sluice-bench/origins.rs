//! `sluice-bench origins`: what counting drops by origin costs the judge.
//!
//! One rule set, `drop saddr @crowdsec`, its set filled through the
//! control plane's feed as the CrowdSec bouncer fills it, once without
//! tags and once with every element tagged by one of four origins (what
//! the bouncer does since drops are counted by origin). Generated traffic
//! whose sources are half from the set is decoded and judged batch by
//! batch, the two alternating rep by rep; every drop of the tagged side
//! costs one more lookup among the tagged elements, one hash probe per
//! element length present. `--lengths` spreads the elements over that
//! many prefix lengths (a Country or AS ban brings ~20), the worst case.

use anyhow::{Context, Result};
use clap::Args;
use sluice_engine::dynamic::Elements;
use sluice_engine::{CompileOptions, RuleSet, Stats};
use sluice_gen::{FrameSize, GenConfig, Generator, ProtoMix};
use sluice_policy::sets::{Feed, RuntimeSets};
use sluice_rules::{parse_rules, Prefix};
use std::path::Path;

#[derive(Args, Debug)]
pub struct OriginsBenchArgs {
    /// Packets judged per repetition.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Elements in the set.
    #[arg(long, default_value_t = 100_000)]
    pub elements: usize,
    /// Prefix lengths the elements are spread over, /32 down (1: all hosts; at most 16).
    #[arg(long, default_value_t = 1)]
    pub lengths: u8,
    /// Repetitions, the two sides alternating (the best of each is reported).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

const ORIGINS: [&str; 4] = ["crowdsec", "cscli", "CAPI", "lists:firehol"];

/// The set as a feed: `n` elements over `lengths` prefix lengths (/32 down),
/// tagged or not.
fn feed(elements: &[Prefix], tagged: bool) -> Feed {
    let mut f = Feed { set: "crowdsec".into(), full: true, ..Feed::default() };
    for (i, p) in elements.iter().enumerate() {
        f.adds.push((*p, None));
        if tagged {
            f.tags.push((i % ORIGINS.len()) as u16);
        }
    }
    if tagged {
        f.tag_names = ORIGINS.map(String::from).to_vec();
    }
    f
}

fn rules(elements: &[Prefix], tagged: bool) -> Result<RuleSet> {
    let file =
        parse_rules("bench.rules", "set crowdsec dynamic\ndrop saddr @crowdsec\ndefault pass\n", Path::new("."))?;
    let base = RuleSet::compile(&file, &[vec![]], &CompileOptions::default())?;
    let mut sets = RuntimeSets::new();
    // No merge on a thread: the bench reads the set as one publication holds it.
    sets.background = false;
    let base_of = |_: &RuleSet, _: usize| Some(Elements::new());
    sets.feed(&base, &feed(elements, tagged), 0, &base_of).map_err(anyhow::Error::msg)?;
    sets.commit(&base).0.context("the feed changed nothing")
}

pub fn run(a: OriginsBenchArgs) -> Result<()> {
    anyhow::ensure!((1..=16).contains(&a.lengths), "--lengths: 1 to 16 (/32 down to /17)");
    // Elements: 10.x.y.z hosts and prefixes, /32 down to /(33 - lengths).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut elements = Vec::with_capacity(a.elements);
    let mut seen = std::collections::HashSet::new();
    while elements.len() < a.elements {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 32 - (elements.len() % usize::from(a.lengths)) as u8;
        let p = Prefix::new(std::net::IpAddr::from(std::net::Ipv4Addr::from(x as u32 | 0x0100_0000)), len);
        if seen.insert(p) {
            elements.push(p);
        }
    }
    let cfg = GenConfig {
        count: a.packets,
        seed: 11,
        ipv6_share: 0.0,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        listed_share: 0.5,
        list: elements.clone(),
        ..GenConfig::default()
    };
    let mut gen = Generator::new(cfg).context("generator")?;
    let (mut buf, mut bytes, mut frames) = (Vec::new(), Vec::new(), Vec::with_capacity(a.packets as usize));
    while gen.next_frame(&mut buf).is_some() {
        frames.push((bytes.len(), buf.len()));
        bytes.extend_from_slice(&buf);
    }
    let plain = rules(&elements, false)?;
    let tagged = rules(&elements, true)?;
    let time = |rules: &RuleSet| crate::rules::judge_all(rules, &frames, &bytes);
    let (mut best_plain, mut best_tagged) = (f64::MAX, f64::MAX);
    let mut stats = (Stats::default(), Stats::default());
    for rep in 0..a.reps {
        let (tp, sp) = time(&plain);
        let (tt, st) = time(&tagged);
        best_plain = best_plain.min(tp);
        best_tagged = best_tagged.min(tt);
        if !a.json {
            eprintln!("rep {rep}: untagged {:.1} Mpps, tagged {:.1} Mpps", mpps(a.packets, tp), mpps(a.packets, tt));
        }
        stats = (sp, st);
    }
    // The same verdicts, and every tagged drop counted under an origin.
    anyhow::ensure!(stats.0.dropped == stats.1.dropped, "the two sides dropped differently");
    let by_origin: u64 = stats.1.tag_drops.iter().map(|c| c[0].packets + c[1].packets).sum();
    anyhow::ensure!(by_origin == stats.1.dropped, "{by_origin} drops by origin of {}", stats.1.dropped);
    let v = serde_json::json!({
        "bench": "origins",
        "packets": a.packets,
        "elements": a.elements,
        "lengths": a.lengths,
        "reps": a.reps,
        "dropped": stats.1.dropped,
        "untagged_mpps": mpps(a.packets, best_plain),
        "tagged_mpps": mpps(a.packets, best_tagged),
        "tagged_over_untagged": best_plain / best_tagged,
        "drops_by_origin": ORIGINS.iter().zip(&stats.1.tag_drops).map(|(o, c)| (o.to_string(), c[0].packets)).collect::<std::collections::BTreeMap<_, _>>(),
    });
    if a.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn mpps(n: u64, secs: f64) -> f64 {
    n as f64 / secs / 1e6
}
