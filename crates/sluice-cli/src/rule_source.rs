//! Where a run's rules come from: `--rules FILE` or the `--drop-*`
//! shorthands, shared by `filter`, `bridge` and `compile`.

use crate::live_metrics::ListEntries;
use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_engine::compiled;
use sluice_engine::{CompileOptions, RuleSet};
use sluice_rules::{load_list, load_rules, Layer, ParsedList, Prefix, RuleFile};
use std::io::Read;
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The rules a run judges by (shared by `filter`, `bridge` and `compile`).
#[derive(Args, Debug, Clone)]
pub struct RuleArgs {
    /// A rule file (nft-flavoured: `set`, `drop`/`pass`/`count` rules,
    /// `default`; see README), or a file made by `sluice compile`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["drop_src", "drop_dst", "drop_any", "inner"])]
    pub rules: Option<PathBuf>,
    /// Drop packets whose source address is in LIST (repeatable; shorthand
    /// for the rule `drop saddr @LIST`).
    #[arg(long, value_name = "LIST")]
    pub drop_src: Vec<PathBuf>,
    /// Drop packets whose destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_dst: Vec<PathBuf>,
    /// Drop packets whose source or destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_any: Vec<PathBuf>,
    /// The --drop-* lists match the innermost IP header of tunnelled
    /// packets (GRE, IPIP, VXLAN, Geneve, GTP-U...) instead of the outer one.
    #[arg(long)]
    pub inner: bool,
    /// Look IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) up as IPv4, so IPv4
    /// entries match them.
    #[arg(long)]
    pub v4mapped: bool,
    /// Skip malformed list lines with a warning instead of stopping.
    #[arg(long)]
    pub lenient: bool,
    /// Build host tables without their front filters (10 bits per host,
    /// cache-resident; they answer "not listed" without touching the
    /// table). A compiled file keeps what it was compiled with.
    #[arg(long)]
    pub no_front_filter: bool,
}

/// A built rule set and what went into it.
pub struct Loaded {
    pub rules: RuleSet,
    pub entries: Vec<ListEntries>,
    pub took: Duration,
    /// When some list entries carry a timeout: what rebuilds the rules as
    /// they expire.
    pub expiry: Option<Expiring>,
}

/// How the rules are built from their lists.
enum Plan {
    File(RuleFile),
    Shorthand(Layer),
}

/// Lists whose entries expire (ipset `timeout`, nft `expires`), kept to
/// rebuild the rules when they do: tables are never changed in place, so an
/// expiry is a new rule set published like a reload.
pub struct Expiring {
    pub loaded_at: Instant,
    plan: Plan,
    lists: Vec<(usize, ParsedList)>,
    opts: CompileOptions,
}

impl Expiring {
    /// The rules with the entries still live `elapsed` seconds after loading.
    pub fn build(&self, elapsed: u64) -> Result<RuleSet> {
        let targets = match &self.plan {
            Plan::File(f) => f.sets.len(),
            Plan::Shorthand(_) => 3,
        };
        let mut sets: Vec<Vec<Prefix>> = vec![Vec::new(); targets];
        for (t, list) in &self.lists {
            if list.timeouts.is_empty() {
                sets[*t].extend_from_slice(&list.prefixes);
            } else {
                sets[*t].extend(list.live_after(elapsed));
            }
        }
        Ok(match &self.plan {
            Plan::File(f) => RuleSet::compile(f, &sets, &self.opts)?,
            Plan::Shorthand(layer) => RuleSet::shorthand(&sets[0], &sets[1], &sets[2], *layer, &self.opts),
        })
    }

    /// Seconds after loading of the first expiry after `elapsed`.
    pub fn next_after(&self, elapsed: u64) -> Option<u64> {
        self.lists.iter().filter_map(|(_, l)| l.next_expiry_after(elapsed)).min().map(u64::from)
    }

    /// Entries still live `elapsed` seconds after loading.
    pub fn live_entries(&self, elapsed: u64) -> usize {
        self.lists
            .iter()
            .map(|(_, l)| if l.timeouts.is_empty() { l.prefixes.len() } else { l.live_after(elapsed).len() })
            .sum()
    }
}

impl RuleArgs {
    /// Whether any rule source was given.
    pub fn given(&self) -> bool {
        self.rules.is_some() || !self.drop_src.is_empty() || !self.drop_dst.is_empty() || !self.drop_any.is_empty()
    }

    /// The files a reload should watch: the rule file and the lists it
    /// names (as of now), or the shorthand lists.
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.rules {
            Some(path) => {
                let mut v = vec![path.clone()];
                if let Ok(f) = load_rules(path) {
                    v.extend(f.sets.iter().filter_map(|s| match &s.source {
                        sluice_rules::SetSource::File(p) => Some(p.clone()),
                        sluice_rules::SetSource::Inline(_) => None,
                    }));
                }
                v
            }
            None => self.drop_src.iter().chain(&self.drop_dst).chain(&self.drop_any).cloned().collect(),
        }
    }

    /// Parse every file and build the rule set; `ifaces` names the live
    /// ports for `iface` matches (empty for files). A bad line or a missing
    /// file is an error naming file:line, and nothing is built.
    pub fn load(&self, ifaces: &[String]) -> Result<Loaded> {
        let started = Instant::now();
        let opts =
            CompileOptions { v4mapped: self.v4mapped, ifaces: ifaces.to_vec(), no_front_filter: self.no_front_filter };
        if let Some(path) = self.rules.as_deref().filter(|p| is_compiled_file(p)) {
            let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
            let bytes =
                sluice_classify::mem::map_file(&file).with_context(|| format!("{}: mapping", path.display()))?;
            let rules = compiled::load(&bytes, &opts)
                .with_context(|| format!("{}: a compiled rule file, refused", path.display()))?;
            let entries = rules
                .named_set_info()
                .iter()
                .map(|s| ListEntries {
                    kind: format!("set {}", s.name),
                    path: path.display().to_string(),
                    entries: s.entries as u64,
                })
                .collect();
            return Ok(Loaded { rules, entries, took: started.elapsed(), expiry: None });
        }
        let mut entries = Vec::new();
        // Each parsed list and where it goes: a set of the rule file, or a
        // shorthand kind (0 src, 1 dst, 2 any).
        let mut lists: Vec<(usize, ParsedList)> = Vec::new();
        let plan = match &self.rules {
            Some(path) => {
                let file = load_rules(path)?;
                for (i, (def, list)) in file.sets.iter().zip(file.load_sets(self.lenient)?).enumerate() {
                    let path = match &def.source {
                        sluice_rules::SetSource::File(p) => p.display().to_string(),
                        sluice_rules::SetSource::Inline(_) => "(inline)".into(),
                    };
                    entries.push(ListEntries {
                        kind: format!("set {}", def.name),
                        path,
                        entries: list.prefixes.len() as u64,
                    });
                    lists.push((i, list));
                }
                Plan::File(file)
            }
            None => {
                for (k, (kind, paths)) in
                    [("drop-src", &self.drop_src), ("drop-dst", &self.drop_dst), ("drop-any", &self.drop_any)]
                        .into_iter()
                        .enumerate()
                {
                    for path in paths {
                        let list = load_list(path, self.lenient)?;
                        entries.push(ListEntries {
                            kind: kind.into(),
                            path: path.display().to_string(),
                            entries: list.prefixes.len() as u64,
                        });
                        lists.push((k, list));
                    }
                }
                Plan::Shorthand(if self.inner { Layer::Inner } else { Layer::Outer })
            }
        };
        for (_, list) in &lists {
            for skipped in &list.skipped {
                eprintln!("sluice: warning: {skipped} (line skipped)");
            }
        }
        let mut expiring = Expiring { loaded_at: started, plan, lists, opts };
        let rules = expiring.build(0)?;
        if !self.given() {
            eprintln!("sluice: warning: no rules given (--rules or --drop-*); every decodable packet passes");
        } else if rules.is_empty() {
            eprintln!("sluice: warning: the rules are empty; every decodable packet passes");
        }
        // Keep the lists only when entries will expire.
        let expiry = if expiring.next_after(0).is_some() {
            expiring.lists.iter_mut().for_each(|(_, l)| l.skipped.clear());
            Some(expiring)
        } else {
            None
        };
        Ok(Loaded { rules, entries, took: started.elapsed(), expiry })
    }

    /// [`RuleArgs::load`] for `sluice compile`, which only builds tables:
    /// entries that expire are refused (a compiled file would keep them).
    pub fn load_for_compile(&self) -> Result<Loaded> {
        let loaded = self.load(&[])?;
        if let Some(e) = &loaded.expiry {
            let n: usize = e.lists.iter().map(|(_, l)| l.timeouts.len()).sum();
            bail!("{n} list entries carry a timeout; a compiled file cannot expire them: load those lists as text");
        }
        Ok(loaded)
    }
}

/// Whether `path` starts like a file `sluice compile` wrote.
fn is_compiled_file(path: &Path) -> bool {
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    compiled::is_compiled(&head[..n])
}

/// The per-rule counters of a run, for the summaries: (rule, packets, bytes).
pub fn rule_rows(rules: &RuleSet, stats: &sluice_engine::Stats) -> Vec<serde_json::Value> {
    let same = stats.rules_id == rules.id();
    rules
        .rules()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let c = if same { stats.rule_hits.get(i).copied().unwrap_or_default() } else { Default::default() };
            serde_json::json!({ "line": r.line, "text": r.text, "action": r.action.as_str(), "packets": c.packets, "bytes": c.bytes })
        })
        .collect()
}

/// Print the rules with their counters (text summaries).
pub fn print_rules(rules: &RuleSet, stats: &sluice_engine::Stats) {
    if rules.rules().is_empty() {
        return;
    }
    println!("rules");
    for row in rule_rows(rules, stats) {
        let line = row["line"].as_u64().unwrap_or(0);
        let at = if line == 0 { "flag".to_owned() } else { format!("line {line}") };
        println!(
            "  {:>12} pkts {:>14} bytes  {at:<9} {}",
            row["packets"],
            row["bytes"],
            row["text"].as_str().unwrap_or("")
        );
    }
    let d = stats.default_hits;
    let verdict = match rules.default_verdict() {
        sluice_engine::Verdict::Pass => "pass",
        sluice_engine::Verdict::Drop => "drop",
    };
    println!("  {:>12} pkts {:>14} bytes  {:<9} default {verdict}", d.packets, d.bytes, "");
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::{IpSummary, PacketSummary};

    fn drops(rules: &RuleSet, src: &str) -> bool {
        let ip = IpSummary { src: src.parse().unwrap(), dst: "192.0.2.1".parse().unwrap(), ..IpSummary::UNSPECIFIED };
        let p = PacketSummary { ip: Some(ip), ..PacketSummary::EMPTY };
        rules.evaluate_reference(&p, 60, 0, |_| {}).verdict == sluice_engine::Verdict::Drop
    }

    #[test]
    fn entries_with_a_timeout_stop_matching_when_it_passes() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("flood.ipset");
        std::fs::write(&list, "create flood hash:ip timeout 300\nadd flood 10.0.0.1 timeout 5\nadd flood 10.0.0.2\nadd flood 10.0.0.3 timeout 9\n").unwrap();
        let args = RuleArgs {
            rules: None,
            drop_src: vec![list],
            drop_dst: Vec::new(),
            drop_any: Vec::new(),
            inner: false,
            v4mapped: false,
            lenient: false,
            no_front_filter: false,
        };
        let loaded = args.load(&[]).unwrap();
        assert!(
            drops(&loaded.rules, "10.0.0.1") && drops(&loaded.rules, "10.0.0.2") && drops(&loaded.rules, "10.0.0.3")
        );
        let e = loaded.expiry.expect("entries expire");
        assert_eq!(e.next_after(0), Some(5));
        let later = e.build(5).unwrap();
        assert!(!drops(&later, "10.0.0.1") && drops(&later, "10.0.0.2") && drops(&later, "10.0.0.3"));
        assert_eq!(e.next_after(5), Some(9));
        let last = e.build(9).unwrap();
        assert!(!drops(&last, "10.0.0.3") && drops(&last, "10.0.0.2"));
        assert_eq!(e.next_after(9), None);
        assert_eq!(e.live_entries(9), 1);
        // A compiled file cannot expire entries: refused.
        assert!(args.load_for_compile().is_err());
    }
}
