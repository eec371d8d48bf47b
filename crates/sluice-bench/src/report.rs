//! Presets, the readable table, JSON lines and the SVG plot.

use crate::{Measured, Prefetch, PrefixDist, Scenario, Structure, SyncMode};
use serde_json::{json, Value};

pub const SEED_ENTRIES: usize = 6_000_000;
/// The small, cache-resident table of issue 12's comparison with hashbrown.
pub const SMALL_ENTRIES: usize = 250_000;
pub const SEED_BUCKETS: usize = 524_288;
pub const SEED_BUCKETS_BIG: usize = 2_097_152;
/// Random prefixes added to FireHOL for the prefix scenarios; also the
/// IPv4 routing-table scenario's size (the global table is about 1M).
pub const PREFIX_EXTRA: usize = 1_000_000;
/// The IPv6 routing-table scenario's size (the global table is about 200k).
pub const PREFIX6_ENTRIES: usize = 200_000;
/// The blocklist scenarios' generated entries (FireHOL level1-3 together
/// are some tens of thousands).
pub const BLOCKLIST_ENTRIES: usize = 100_000;

fn sc(
    name: &str,
    structure: Structure,
    entries: usize,
    batch: usize,
    prefetch: Prefetch,
    stride: usize,
    seed: Option<f64>,
) -> Scenario {
    Scenario {
        name: name.to_owned(),
        structure,
        entries,
        batch,
        prefetch,
        stride,
        threads: 1,
        pipeline: false,
        ipv6: false,
        sync: SyncMode::Snapshot,
        seed_mpps: seed,
        filter: true,
        listed: None,
        prefix_dist: PrefixDist::Firehol,
    }
}

/// sluice's defaults: batch [`sluice_sets::DEFAULT_BATCH`], each
/// batch's packet headers prefetched before decap, table lines prefetched
/// and pipelined across batches. (Header prefetch: 64-66 against 56-58 Mpps
/// at 6M hosts, stride 2048, where 2048 ring buffers share 64 sets of a
/// 2 MiB L2 and most headers come from the last-level cache; at stride 1920
/// 72-75 against 71-73.)
fn sluice_default(name: &str, structure: Structure, entries: usize, stride: usize) -> Scenario {
    Scenario {
        pipeline: true,
        ..sc(name, structure, entries, sluice_sets::DEFAULT_BATCH, Prefetch::Both, stride, None)
    }
}

/// hashbrown at its best: no API to prefetch its own lines, but the
/// packet headers are prefetched as for sluice.
fn hashbrown(name: &str, entries: usize, batch: usize) -> Scenario {
    sc(name, Structure::Hashbrown, entries, batch, Prefetch::Header, 2048, None)
}

/// `quick`: the headline comparison, under a minute on 2 cores.
pub fn quick() -> Vec<Scenario> {
    let d = sluice_sets::DEFAULT_BATCH;
    let mut v = vec![
        sc("naive", Structure::Chained { buckets: SEED_BUCKETS }, SEED_ENTRIES, 1, Prefetch::None, 2048, Some(3.7)),
        hashbrown("hashbrown", SEED_ENTRIES, 16),
        hashbrown("hashbrown-b1", SEED_ENTRIES, 1),
        sluice_default("sluice", Structure::Sluice, SEED_ENTRIES, 2048),
        sluice_default("sluice-prefix", Structure::SluicePrefix, PREFIX_EXTRA, 2048),
        sc("prefix-trie", Structure::PrefixTrie, PREFIX_EXTRA, 16, Prefetch::None, 2048, None),
        sc("sluice-nopipe", Structure::Sluice, SEED_ENTRIES, d, Prefetch::Both, 2048, None),
        sc("sluice-nopf", Structure::Sluice, SEED_ENTRIES, d, Prefetch::None, 2048, None),
    ];
    // The front filter off and on, with random traffic (0.3% of packets
    // listed) and with half of all addresses listed (the filter's worst case).
    let nofilter = |name: &str, listed| Scenario {
        name: name.to_owned(),
        filter: false,
        listed,
        ..sluice_default("", Structure::Sluice, SEED_ENTRIES, 2048)
    };
    v.push(nofilter("sluice-nofilter", None));
    v.push(Scenario {
        name: "sluice-l50".into(),
        listed: Some(0.5),
        ..sluice_default("", Structure::Sluice, SEED_ENTRIES, 2048)
    });
    v.push(nofilter("sluice-l50-nofilter", Some(0.5)));
    // A small table (250k hosts, cache-resident) against hashbrown, each at
    // its best batch: sluice at its default and at 64, hashbrown one key at
    // a time and in the bench's batches of 16.
    v.push(sluice_default("sluice-250k", Structure::Sluice, SMALL_ENTRIES, 2048));
    v.push(sluice_default("sluice-250k-b64", Structure::Sluice, SMALL_ENTRIES, 2048).with_batch(64));
    v.push(hashbrown("hashbrown-250k", SMALL_ENTRIES, 16));
    v.push(hashbrown("hashbrown-250k-b1", SMALL_ENTRIES, 1));
    // Prefix lists as users load them (issue 23): the routing table's length
    // mix and a FireHOL level1-3-like blocklist, IPv4 on random traffic (the
    // bgp mix covers about 60% of it), IPv6 with half of the addresses
    // inside a listed prefix (random IPv6 addresses would miss at the root).
    let prefixes = |name: &str, dist: PrefixDist, entries, ipv6: bool| Scenario {
        prefix_dist: dist,
        ipv6,
        listed: ipv6.then_some(0.5),
        ..sluice_default(name, Structure::SluicePrefix, entries, 2048)
    };
    v.push(prefixes("sluice-prefix-bgp", PrefixDist::Bgp, PREFIX_EXTRA, false));
    v.push(prefixes("sluice-prefix-blocklist", PrefixDist::Blocklist, BLOCKLIST_ENTRIES, false));
    v.push(prefixes("sluice-prefix6-bgp", PrefixDist::Bgp, PREFIX6_ENTRIES, true));
    v.push(prefixes("sluice-prefix6-blocklist", PrefixDist::Blocklist, BLOCKLIST_ENTRIES, true));
    // The same two at stride 1920, where the ring's buffers no longer share
    // a few cache sets (the seed's stride experiment).
    v.push(sluice_default("sluice-1920", Structure::Sluice, SEED_ENTRIES, 1920));
    v.push(Scenario { stride: 1920, ..hashbrown("hashbrown-1920", SEED_ENTRIES, 16) });
    for b in [1, 4, 8, 16, 64] {
        v.push(
            Scenario { name: format!("sluice-b{b}"), ..sluice_default("", Structure::Sluice, SEED_ENTRIES, 2048) }
                .with_batch(b),
        );
    }
    v
}

/// `filter`: issue 12's grid. Tables of 250k, 1M, 6M and 50M hosts, each
/// with sluice's front filter on and off and hashbrown beside them (random
/// traffic: almost nothing listed); then at 6M hosts, 0.1%, 1%, 10% and 50%
/// of addresses listed, the filter on and off.
pub fn filter() -> Vec<Scenario> {
    let mut v = Vec::new();
    let sluice = |name: String, entries, filter, listed| Scenario {
        name,
        filter,
        listed,
        ..sluice_default("", Structure::Sluice, entries, 2048)
    };
    for (tag, entries) in [("250k", SMALL_ENTRIES), ("1M", 1_000_000), ("6M", SEED_ENTRIES), ("50M", 50_000_000)] {
        v.push(sluice(format!("sluice-{tag}"), entries, true, None));
        v.push(sluice(format!("sluice-{tag}-nofilter"), entries, false, None));
        v.push(hashbrown(&format!("hashbrown-{tag}"), entries, 16));
    }
    for share in [0.001, 0.01, 0.1, 0.5] {
        let pct = share * 100.0;
        v.push(sluice(format!("sluice-6M-l{pct}"), SEED_ENTRIES, true, Some(share)));
        v.push(sluice(format!("sluice-6M-l{pct}-nofilter"), SEED_ENTRIES, false, Some(share)));
    }
    v
}

/// `seed`: every single-thread row of the seed post's DDIO tables, chained
/// table as in the post, with the post's figure beside ours.
pub fn seed() -> Vec<Scenario> {
    let c = Structure::Chained { buckets: SEED_BUCKETS };
    let big = Structure::Chained { buckets: SEED_BUCKETS_BIG };
    let mut v = vec![sc("empty-2048-b1", c, 0, 1, Prefetch::None, 2048, Some(6.5))];
    for (b, fig) in [(1, 10.0), (2, 11.1), (4, 11.7)] {
        v.push(sc(&format!("empty-1920-b{b}"), c, 0, b, Prefetch::None, 1920, Some(fig)));
    }
    for (b, fig) in [(1, 10.0), (2, 10.8), (4, 11.5)] {
        v.push(sc(&format!("empty-1920-b{b}-hdrpf"), c, 0, b, Prefetch::Header, 1920, Some(fig)));
    }
    for (stride, figs) in [(2048, [3.7, 4.5, 4.8]), (1920, [5.0, 5.6, 5.6])] {
        for (b, fig) in [1, 2, 4].into_iter().zip(figs) {
            v.push(sc(&format!("6m-524k-{stride}-b{b}"), c, SEED_ENTRIES, b, Prefetch::None, stride, Some(fig)));
        }
    }
    for (pf, fig) in [(Prefetch::Header, 5.5), (Prefetch::Bucket, 7.7), (Prefetch::Both, 7.5)] {
        v.push(sc(&format!("6m-524k-1920-b4-{}", pf.name()), c, SEED_ENTRIES, 4, pf, 1920, Some(fig)));
    }
    for (b, pf, fig) in
        [(1, Prefetch::None, 6.1), (2, Prefetch::None, 7.1), (4, Prefetch::None, 7.1), (4, Prefetch::Bucket, 8.9)]
    {
        v.push(sc(&format!("6m-2m-1920-b{b}-{}", pf.name()), big, SEED_ENTRIES, b, pf, 1920, Some(fig)));
    }
    // The post's threads and locks rows: batch 4, bucket prefetch, 2M buckets,
    // 1 and 4 threads. Beside its 4-thread figures, 2 threads (one per CPU on
    // a 2-CPU machine) and 4 (two to a CPU there).
    for (threads, sync, fig) in [
        (1, SyncMode::None, 8.9),
        (2, SyncMode::None, 12.0),
        (4, SyncMode::None, 12.0),
        (1, SyncMode::RwLock, 7.0),
        (2, SyncMode::RwLock, 4.7),
        (4, SyncMode::RwLock, 4.7),
    ] {
        v.push(Scenario {
            threads,
            sync,
            ..sc(
                &format!("6m-2m-1920-b4-bucket-t{threads}-{}", sync.name()),
                big,
                SEED_ENTRIES,
                4,
                Prefetch::Bucket,
                1920,
                Some(fig),
            )
        });
    }
    // sluice on the same traffic, both strides; and with an empty set, where
    // only the ring, the decap and the stride's cache aliasing are measured.
    for stride in [2048, 1920] {
        v.push(sluice_default(&format!("sluice-{stride}"), Structure::Sluice, SEED_ENTRIES, stride));
    }
    for stride in [2048, 1920] {
        v.push(sc(&format!("sluice-empty-{stride}-b1"), Structure::Sluice, 0, 1, Prefetch::None, stride, None));
    }
    v
}

fn buckets(s: &Structure) -> Value {
    match s {
        Structure::Chained { buckets } => json!(buckets),
        _ => Value::Null,
    }
}

pub fn scenario_json(m: &Measured) -> Value {
    let s = &m.scenario;
    let med = m.median();
    json!({
        "scenario": s.name,
        "structure": s.structure.name(),
        "batch": s.batch,
        "prefetch": s.prefetch.name(),
        "stride": s.stride,
        "entries": s.entries,
        "buckets": buckets(&s.structure),
        "threads": s.threads,
        "pipeline": s.pipeline,
        "family": if s.ipv6 { "ipv6" } else { "ipv4" },
        "sync": s.sync.name(),
        "mpps_median": med,
        "mpps_min": m.min(),
        "mpps_max": m.max(),
        "mpps_reps": m.values,
        "ns_per_packet": if med > 0.0 { 1000.0 / med } else { 0.0 },
        "reps": m.values.len(),
        "drop_share": m.drop_share,
        "table_bytes": m.table_bytes,
        "build_s": m.build_s,
        "seed_mpps": s.seed_mpps,
        "filter": if s.structure == Structure::Sluice { json!(if s.filter { "on" } else { "off" }) } else { Value::Null },
        "filter_bytes": m.filter.map(|f| f.0),
        "filter_fpr": m.filter.map(|f| f.1),
        "listed_share": s.listed,
        "prefix_dist": s.structure.holds_prefixes().then(|| s.prefix_dist.name()),
        "ipv6": s.ipv6,
    })
}

/// The probe's row; `name` is `probe` (the table-sized buffer, beyond the
/// caches) or `probe-llc` (a buffer that fits the last-level cache).
pub fn probe_json(name: &str, bytes: usize, (med, min, max): (f64, f64, f64), reps: usize) -> Value {
    json!({
        "scenario": name,
        "structure": "probe",
        "batch": 16,
        "prefetch": "bucket",
        "bytes": bytes,
        "mlines_per_s": med,
        "mlines_per_s_min": min,
        "mlines_per_s_max": max,
        "reps": reps,
    })
}

/// The dependent-load probe's row, beside the seed's ~50 ns L3 miss.
pub fn chase_json(bytes: usize, (med, min, max): (f64, f64, f64), reps: usize) -> Value {
    json!({
        "scenario": "probe-chase",
        "structure": "probe",
        "bytes": bytes,
        "ns_per_load": med,
        "ns_per_load_min": min,
        "ns_per_load_max": max,
        "seed_ns_per_load": SEED_MISS_NS,
        "reps": reps,
    })
}

/// The seed post's figure: "An L3 miss (ie, RAM access) on Sandybridge is ~50ns".
pub const SEED_MISS_NS: f64 = 50.0;

/// The probes' medians (M random lines/s) of a run, where they ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probes {
    /// Over a buffer as large as sluice's table.
    pub table: Option<f64>,
    /// Over a buffer beyond the last-level cache.
    pub dram: Option<f64>,
    /// Over a buffer the last-level cache holds.
    pub llc: Option<f64>,
}

/// The ratios the presets exist to show, where their rows are present
/// (`null` where not).
pub fn ratios(rows: &[Measured], probes: &Probes, build_6m_s: Option<f64>) -> Option<Value> {
    let (probe, probe_llc) = (probes.table, probes.llc);
    let row = |n: &str| rows.iter().find(|m| m.scenario.name == n);
    let get = |n: &str| row(n).map(Measured::median);
    // Row against row: the median of the per-round ratios. Repetitions are
    // interleaved, so round r of every row ran within seconds of the
    // others, and a slow stretch of the shared machine that hits a round
    // hits both sides of its ratio; the ratio of two medians can take each
    // from a different stretch (the exact path's median moved from 27 to 69
    // Mpps across five runs of the quick preset). The ratio of medians
    // stands in when the rows have different repetition counts.
    let pair = |x: Option<&Measured>, base: Option<&Measured>| -> Option<f64> {
        let (x, base) = (x?, base?);
        if x.values.len() != base.values.len() || x.values.is_empty() {
            return Some(x.median() / base.median());
        }
        let per_round: Vec<f64> = x.values.iter().zip(&base.values).map(|(a, b)| a / b).collect();
        Some(crate::stats::median(&per_round))
    };
    let paired = |x: &str, base: &str| pair(row(x), row(base));
    // The best median among rows whose name starts with `prefix` and then
    // has nothing or a -b<batch> suffix.
    let best = |prefix: &str| {
        rows.iter()
            .filter(|m| {
                m.scenario.name.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with("-b"))
            })
            .map(Measured::median)
            .reduce(f64::max)
    };
    let sluice = get("sluice").or_else(|| get("sluice-6M"));
    let sluice_row = row("sluice").or_else(|| row("sluice-6M"));
    let vs_sluice = |x: &str| pair(row(x), sluice_row);
    // Every sluice row with the filter whose twin without it (the same
    // scenario in every other respect) ran too: filter on / off.
    let filter_by_row: serde_json::Map<String, Value> = rows
        .iter()
        .filter(|m| m.scenario.structure == Structure::Sluice && m.scenario.filter)
        .filter_map(|m| {
            let off = rows.iter().find(|o| {
                !o.scenario.filter
                    && o.scenario == Scenario { name: o.scenario.name.clone(), filter: false, ..m.scenario.clone() }
            })?;
            Some((m.scenario.name.clone(), json!(pair(Some(m), Some(off)))))
        })
        .collect();
    if sluice.is_none() && filter_by_row.is_empty() {
        return None;
    }
    let hashbrown = row("hashbrown").or_else(|| row("hashbrown-6M"));
    Some(json!({
        "scenario": "ratios",
        "sluice_vs_naive": pair(sluice_row, row("naive")),
        "sluice_vs_hashbrown": pair(sluice_row, hashbrown),
        "sluice_vs_probe": sluice.zip(probe).map(|(s, p)| s / p),
        "sluice_vs_dram_probe": sluice.zip(probes.dram).map(|(s, p)| s / p),
        "stride1920_sluice_vs_dram_probe": get("sluice-1920").zip(probes.dram).map(|(s, p)| s / p),
        "stride1920_sluice_vs_hashbrown": paired("sluice-1920", "hashbrown-1920"),
        "two_lookups_vs_probe": sluice.zip(probe).map(|(s, p)| 2.0 * s / p),
        "two_lookups_vs_llc_probe": sluice.zip(probe_llc).map(|(s, p)| 2.0 * s / p),
        "small_sluice_vs_hashbrown_best": best("sluice-250k").zip(best("hashbrown-250k")).map(|(s, h)| s / h),
        "prefix_vs_sluice": vs_sluice("sluice-prefix"),
        "prefix_vs_prefix_trie": paired("sluice-prefix", "prefix-trie"),
        "prefix_bgp_vs_sluice": vs_sluice("sluice-prefix-bgp"),
        "prefix_blocklist_vs_sluice": vs_sluice("sluice-prefix-blocklist"),
        "prefix6_bgp_vs_sluice": vs_sluice("sluice-prefix6-bgp"),
        "prefix6_blocklist_vs_sluice": vs_sluice("sluice-prefix6-blocklist"),
        "filter_on_vs_off": pair(sluice_row, row("sluice-nofilter").or_else(|| row("sluice-6M-nofilter"))),
        "filter_on_vs_off_listed50": pair(
            row("sluice-l50").or_else(|| row("sluice-6M-l50")),
            row("sluice-l50-nofilter").or_else(|| row("sluice-6M-l50-nofilter")),
        ),
        "filter_on_vs_off_by_row": filter_by_row,
        "build_6m_s": build_6m_s,
    }))
}

pub fn table_header() -> String {
    format!(
        "{:<24} {:<13} {:>9} {:>9} {:>5} {:>8} {:>4} {:>6} {:>3} {:>8} {:>17} {:>7} {:>6} {:>7}",
        "scenario",
        "structure",
        "entries",
        "buckets",
        "batch",
        "prefetch",
        "pipe",
        "stride",
        "thr",
        "Mpps",
        "[min-max]",
        "ns/pkt",
        "drop%",
        "seed"
    )
}

pub fn table_row(m: &Measured) -> String {
    let s = &m.scenario;
    let b = match s.structure {
        Structure::Chained { buckets } => buckets.to_string(),
        _ => "-".into(),
    };
    let med = m.median();
    let seed = s.seed_mpps.map_or("-".to_owned(), |x| format!("{x:.1}"));
    format!(
        "{:<24} {:<13} {:>9} {:>9} {:>5} {:>8} {:>4} {:>6} {:>3} {:>8.2} {:>17} {:>7.1} {:>6.1} {:>7}",
        s.name,
        s.structure.name(),
        s.entries,
        b,
        s.batch,
        s.prefetch.name(),
        if s.pipeline { "yes" } else { "no" },
        s.stride,
        s.threads,
        med,
        format!("[{:.2}-{:.2}]", m.min(), m.max()),
        1000.0 / med.max(1e-9),
        m.drop_share * 100.0,
        seed
    )
}

/// A horizontal bar chart of median Mpps with min-max whiskers, and the
/// seed's figure as a tick where there is one.
pub fn svg(rows: &[Measured], probe: Option<f64>, title: &str) -> String {
    let bars: Vec<crate::svg::Bar> = rows
        .iter()
        .map(|m| crate::svg::Bar {
            label: m.scenario.name.clone(),
            median: m.median(),
            min: m.min(),
            max: m.max(),
            seed: m.scenario.seed_mpps,
            value: format!("{:.2}", m.median()),
        })
        .collect();
    let mut legend = "bars: median Mpps, whiskers: min-max; red tick: the seed post's figure".to_owned();
    if let Some(p) = probe {
        legend += &format!("; probe limit {p:.1} M lines/s (2 lines per packet: {:.1} Mpps)", p / 2.0);
    }
    crate::svg::bars(title, 220.0, &bars, &legend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_preset_has_the_named_scenarios() {
        let q = quick();
        let get = |n: &str| q.iter().find(|s| s.name == n).unwrap_or_else(|| panic!("{n} missing"));
        let naive = get("naive");
        assert_eq!(naive.structure, Structure::Chained { buckets: 524_288 });
        assert_eq!((naive.batch, naive.prefetch, naive.stride, naive.entries), (1, Prefetch::None, 2048, 6_000_000));
        assert_eq!(get("hashbrown").structure, Structure::Hashbrown);
        let s = get("sluice");
        assert_eq!((s.structure, s.entries, s.batch), (Structure::Sluice, 6_000_000, sluice_sets::DEFAULT_BATCH));
        assert_eq!(get("sluice-prefix").structure, Structure::SluicePrefix);
        let bgp = get("sluice-prefix-bgp");
        assert_eq!((bgp.prefix_dist.clone(), bgp.entries, bgp.ipv6), (PrefixDist::Bgp, 1_000_000, false));
        let bgp6 = get("sluice-prefix6-bgp");
        assert_eq!(
            (bgp6.prefix_dist.clone(), bgp6.entries, bgp6.ipv6, bgp6.listed),
            (PrefixDist::Bgp, 200_000, true, Some(0.5))
        );
        assert_eq!(get("sluice-prefix-blocklist").prefix_dist, PrefixDist::Blocklist);
        assert!(get("sluice-prefix6-blocklist").ipv6);
        let names: std::collections::HashSet<&str> = q.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), q.len(), "scenario names are unique");
        assert_eq!(get("sluice-250k").entries, SMALL_ENTRIES);
        assert_eq!(get("hashbrown-250k-b1").batch, 1);
    }

    #[test]
    fn filter_preset_covers_the_grid() {
        let f = filter();
        let names: std::collections::HashSet<&str> = f.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), f.len(), "scenario names are unique");
        for tag in ["250k", "1M", "6M", "50M"] {
            for n in [format!("sluice-{tag}"), format!("sluice-{tag}-nofilter"), format!("hashbrown-{tag}")] {
                assert!(names.contains(n.as_str()), "{n} missing");
            }
        }
        for l in ["0.1", "1", "10", "50"] {
            let on = f.iter().find(|s| s.name == format!("sluice-6M-l{l}")).expect("listed row");
            assert!(on.filter && on.listed.is_some());
            assert!(names.contains(format!("sluice-6M-l{l}-nofilter").as_str()));
        }
    }

    fn row(name: &str, mpps: f64) -> Measured {
        let s = quick().into_iter().find(|s| s.name == name).expect("a quick row");
        let mut m = Measured::new(
            crate::Classified { scenario: s, drop_share: 0.0, table_bytes: 0, build_s: 0.0, filter: None },
            "Mpps",
            true,
        );
        m.values = vec![mpps];
        m
    }

    #[test]
    fn ratios_pick_their_rows() {
        let rows = [
            row("sluice", 40.0),
            row("sluice-nofilter", 20.0),
            row("hashbrown", 10.0),
            row("sluice-250k", 60.0),
            row("sluice-250k-b64", 80.0),
            row("hashbrown-250k", 50.0),
            row("hashbrown-250k-b1", 40.0),
        ];
        let probes = Probes { table: Some(80.0), dram: Some(40.0), llc: None };
        let r = ratios(&rows, &probes, None).expect("ratios");
        assert_eq!(r["sluice_vs_hashbrown"], 4.0);
        assert_eq!(r["sluice_vs_probe"], 0.5);
        assert_eq!(r["sluice_vs_dram_probe"], 1.0);
        assert_eq!(r["two_lookups_vs_probe"], 1.0);
        assert_eq!(r["small_sluice_vs_hashbrown_best"], 1.6);
        assert_eq!(r["filter_on_vs_off"], 2.0);
        assert_eq!(r["filter_on_vs_off_by_row"]["sluice"], 2.0);
        assert!(r["two_lookups_vs_llc_probe"].is_null());
        assert!(ratios(&rows[2..3], &Probes::default(), None).is_none());
    }

    #[test]
    fn row_against_row_is_the_median_of_per_round_ratios() {
        // The machine slow in rounds 2 and 3 for both rows: per round 0.5,
        // 1.2 and 1.2 (median 1.2), where the medians' ratio (30 / 30)
        // would say 1.0.
        let mut sluice = row("sluice", 0.0);
        sluice.values = vec![60.0, 30.0, 20.0];
        let mut bgp = row("sluice-prefix6-bgp", 0.0);
        bgp.values = vec![30.0, 36.0, 24.0];
        let r = ratios(&[sluice.clone(), bgp.clone()], &Probes::default(), None).expect("ratios");
        assert!((r["prefix6_bgp_vs_sluice"].as_f64().unwrap() - 1.2).abs() < 1e-9, "{r}");
        // Different repetition counts: the ratio of medians.
        bgp.values = vec![45.0, 45.0];
        let r = ratios(&[sluice, bgp], &Probes::default(), None).expect("ratios");
        assert_eq!(r["prefix6_bgp_vs_sluice"], 1.5);
    }

    #[test]
    fn seed_preset_covers_every_single_thread_row_of_the_post() {
        let rows: Vec<f64> = seed().iter().filter_map(|s| s.seed_mpps).collect();
        // 1 + 3 + 3 empty-table rows, 6 no-prefetch rows, 3 prefetch rows, 4 big-table rows,
        // 6 threads-and-locks rows (1, 2 and 4 threads, with and without the lock).
        assert_eq!(rows.len(), 26);
    }

    #[test]
    fn prefix_list_covers_a_part_of_ipv4() {
        let list = crate::prefix_list(200_000, 1);
        let set = sluice_sets::AddressSet::new(&list);
        let mut rng = crate::ring::Rng::new(3);
        let hits = (0..100_000).filter(|_| set.contains_v4(rng.next_u64() as u32)).count();
        assert!((10_000..60_000).contains(&hits), "{hits}");
    }
}
