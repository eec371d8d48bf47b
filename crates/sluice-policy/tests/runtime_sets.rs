//! Runtime set changes end to end through the rule set the judge reads:
//! random adds (with and without timeouts), deletes, flushes, expiry,
//! merges into new tables and reloads, IPv4 and IPv6, hosts and prefixes,
//! interleaved with lookups, against a plain model (a map of elements per
//! set, rebuilt from scratch: an address matches when a live element covers
//! it). Lookups go both ways the engine has: the batched evaluation the
//! workers run and the one-address `set_contains`. The dynamic set has a
//! small maxelem now and then (from its definition or the default for its
//! name): adds past it are refused as the model refuses them, and counted.

use proptest::prelude::*;
use sluice_control::SetCommand as Command;
use sluice_engine::dynamic::Elements;
use sluice_engine::{CompileOptions, Decision, RuleSet, Verdict};
use sluice_policy::sets::RuntimeSets;
use sluice_rules::{parse_rules, Prefix, SetSource};
use sluice_wire::{decode, LinkType, PacketSummary};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

const SECS: u64 = 1_000_000_000;
/// `f` is a list's set (its base from the file), `d` a dynamic one, with
/// `maxelem` when given.
fn rules_text(maxelem: Option<u32>) -> String {
    format!(
        "set f {{ 10.0.0.0/16, 10.0.4.0/24, 10.0.4.7, 2001:db8::/48, 2001:db8::9 }}\n\
         set d dynamic{}\n\
         drop saddr @d\n\
         drop daddr @f\n",
        maxelem.map_or(String::new(), |n| format!(" maxelem {n}"))
    )
}

fn compile(maxelem: Option<u32>) -> RuleSet {
    let file = parse_rules("t.rules", &rules_text(maxelem), Path::new(".")).unwrap();
    let sets: Vec<Vec<Prefix>> = file.load_sets(false).unwrap().into_iter().map(|l| l.prefixes).collect();
    RuleSet::compile(&file, &sets, &CompileOptions::default()).unwrap()
}

fn base_of(rules: &RuleSet, i: usize) -> Option<Elements> {
    let file = parse_rules("t.rules", &rules_text(None), Path::new(".")).unwrap();
    let def = &file.sets[file.set_index(&rules.named_set_info()[i].name)?];
    match &def.source {
        SetSource::Inline(p) => Some(Elements::from_prefixes(p)),
        _ => Some(Elements::new()),
    }
}

/// A UDP frame from `src` to `dst` (checksums zero: damage after the
/// addresses is only an anomaly).
fn frame(src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => unreachable!("one family per packet"),
    }
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

/// Each frame judged by the batched evaluation the workers run: (its
/// addresses, whether it was dropped).
fn judged(rules: &RuleSet, frames: &[Vec<u8>]) -> Vec<(sluice_wire::IpSummary, bool)> {
    let sums: Vec<PacketSummary> = frames.iter().map(|f| decode(LinkType::ETHERNET, f).unwrap()).collect();
    let mut got = Vec::with_capacity(sums.len());
    for chunk in sums.chunks(64) {
        let pkts: Vec<(&PacketSummary, u32, u32)> = chunk.iter().map(|s| (s, 60, 0)).collect();
        let mut out = vec![Decision { verdict: Verdict::Pass, rule: None }; pkts.len()];
        rules.evaluate_batch(&pkts, &mut out, 16, |_, _| {});
        got.extend(chunk.iter().zip(&out).map(|(s, d)| (*s.ip.as_ref().unwrap(), d.verdict == Verdict::Drop)));
    }
    got
}

#[derive(Debug, Clone)]
enum Op {
    Add(bool, Prefix, Option<u32>),
    Del(bool, Prefix),
    Flush(bool),
    Tick(u64),
    Reload,
    /// Several lines as one batch: all or nothing.
    Batch(Vec<Op>),
    /// Wait for the merges running on their threads.
    Settle,
    /// A CrowdSec feed into `d`: (full, adds with timeouts, deletes).
    Feed(bool, Vec<(Prefix, Option<u32>)>, Vec<Prefix>),
}

/// Elements near the list's, so that changes and lookups meet.
fn arb_prefix() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        (0u32..8, 0u32..12, prop::sample::select(vec![16u8, 24, 28, 32]))
            .prop_map(|(c, d, len)| Prefix::new(IpAddr::from([10, 0, c as u8, d as u8]), len)),
        (0u128..3, 0u128..12, prop::sample::select(vec![48u8, 64, 120, 128])).prop_map(|(g, h, len)| {
            Prefix::new(IpAddr::from(((0x2001_0db8u128 << 96) | (g << 80) | h).to_be_bytes()), len)
        }),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<bool>(), arb_prefix(), prop::option::of(1u32..4)).prop_map(|(d, p, t)| Op::Add(d, p, t)),
        5 => (any::<bool>(), arb_prefix()).prop_map(|(d, p)| Op::Del(d, p)),
        1 => any::<bool>().prop_map(Op::Flush),
        2 => (0u64..3).prop_map(Op::Tick),
        1 => Just(Op::Reload),
        2 => Just(Op::Settle),
        2 => (
            any::<bool>(),
            prop::collection::vec((arb_prefix(), prop::option::of(1u32..4)), 0..5),
            prop::collection::vec(arb_prefix(), 0..3)
        )
            .prop_map(|(full, adds, dels)| Op::Feed(full, adds, dels)),
        2 => prop::collection::vec(
            prop_oneof![
                3 => (any::<bool>(), arb_prefix(), prop::option::of(1u32..4)).prop_map(|(d, p, t)| Op::Add(d, p, t)),
                3 => (any::<bool>(), arb_prefix()).prop_map(|(d, p)| Op::Del(d, p)),
                1 => any::<bool>().prop_map(Op::Flush),
            ],
            2..6
        )
        .prop_map(Op::Batch),
    ]
}

fn line(op: &Op) -> Command {
    let name = |dynamic: bool| if dynamic { "d" } else { "f" }.to_string();
    match op {
        Op::Add(d, p, t) => Command::Add { set: name(*d), elem: *p, timeout: *t },
        Op::Del(d, p) => Command::Del { set: name(*d), elem: *p },
        Op::Flush(d) => Command::Flush { set: name(*d) },
        _ => unreachable!("only changes are batched"),
    }
}

/// The model after `lines`, or the first line (1-based) that fails: a
/// delete of what is not there, or an add past `d`'s maxelem `dmax` (then
/// also how many add lines to `d` the batch had: every one is refused).
fn model_batch(
    lines: &[Op],
    fm: &Model,
    dm: &Model,
    now: u64,
    dmax: usize,
) -> Result<(Model, Model), (usize, Option<usize>)> {
    let (mut f, mut d) = (fm.clone(), dm.clone());
    for (i, op) in lines.iter().enumerate() {
        let (m, max) = match op {
            Op::Add(true, ..) | Op::Del(true, _) | Op::Flush(true) => (&mut d, dmax),
            _ => (&mut f, usize::MAX),
        };
        match op {
            Op::Add(_, p, t) => {
                if !m.contains_key(p) && m.len() >= max {
                    let adds = lines.iter().filter(|l| matches!(l, Op::Add(true, ..))).count();
                    return Err((i + 1, Some(adds)));
                }
                m.insert(*p, t.map(|t| now + u64::from(t) * SECS));
            }
            Op::Del(_, p) => {
                if m.remove(p).is_none() {
                    return Err((i + 1, None));
                }
            }
            Op::Flush(_) => m.clear(),
            _ => unreachable!(),
        }
    }
    Ok((f, d))
}

type Model = HashMap<Prefix, Option<u64>>;

fn covered(m: &Model, ip: IpAddr) -> bool {
    m.keys().any(|p| p.contains(ip))
}

fn list_model() -> Model {
    ["10.0.0.0/16", "10.0.4.0/24", "10.0.4.7", "2001:db8::/48", "2001:db8::9"]
        .iter()
        .map(|s| (s.parse().unwrap(), None))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn runtime_sets_equal_the_model(
        ops in prop::collection::vec(arb_op(), 1..50),
        probes in prop::collection::vec(arb_prefix(), 6),
        merge_min in 0usize..6,
        background in any::<bool>(),
        defined in prop_oneof![2 => Just(None), 1 => (1u32..8).prop_map(Some)],
        by_name in prop_oneof![2 => Just(None), 1 => (1usize..8).prop_map(Some)],
    ) {
        let mut rules = compile(defined);
        let mut sets = RuntimeSets::new();
        if let Some(n) = by_name {
            sets.set_maxelem_default("d", n);
        }
        let dmax = defined.map(|n| n as usize).or(by_name).unwrap_or(sluice_policy::sets::DEFAULT_MAXELEM);
        let mut refused = 0u64;
        sets.merge_min = merge_min;
        sets.merge_ratio = 1;
        sets.background = background;
        let (fi, di) = (rules.named_index("f").unwrap(), rules.named_index("d").unwrap());
        let mut fm = list_model();
        let mut dm = Model::new();
        let mut now = 1_000 * SECS;
        for op in ops {
            let name = |dynamic: bool| if dynamic { "d" } else { "f" }.to_string();
            let mut batch = Vec::new();
            match &op {
                Op::Add(d, p, t) => batch.push((1, Command::Add { set: name(*d), elem: *p, timeout: *t })),
                Op::Del(d, p) => batch.push((1, Command::Del { set: name(*d), elem: *p })),
                Op::Flush(d) => batch.push((1, Command::Flush { set: name(*d) })),
                Op::Tick(s) => {
                    now += s * SECS;
                    if let Some((r, _)) = sets.expire(&rules, now) {
                        rules = r;
                    }
                    for m in [&mut fm, &mut dm] {
                        m.retain(|_, d| d.is_none_or(|d| d > now));
                    }
                }
                Op::Reload => {
                    let (r, _) = sets.carry_over(compile(defined));
                    rules = r;
                    fm = list_model();
                }
                Op::Feed(full, adds, dels) => {
                    let feed = sluice_policy::sets::Feed { set: "d".into(), adds: adds.clone(), dels: dels.clone(), full: *full, ..Default::default() };
                    let out = sets.feed(&rules, &feed, now, &base_of).unwrap();
                    if let (Some(r), _) = sets.commit(&rules) {
                        rules = r;
                    }
                    if *full {
                        dm.retain(|p, _| adds.iter().any(|a| a.0 == *p));
                    }
                    for p in dels {
                        dm.remove(p);
                    }
                    // As far as it fits, in the answer's order.
                    let mut n = 0;
                    for (p, t) in adds {
                        if dm.contains_key(p) || dm.len() < dmax {
                            dm.insert(*p, t.map(|t| now + u64::from(t) * SECS));
                        } else {
                            n += 1;
                        }
                    }
                    prop_assert_eq!(out.refused, n);
                    refused += n as u64;
                }
                Op::Settle => {
                    if let (Some(r), _) = sets.poll_merges(&rules, true) {
                        rules = r;
                    }
                }
                Op::Batch(lines) => {
                    let batch: Vec<(usize, Command)> = lines.iter().enumerate().map(|(i, l)| (i + 1, line(l))).collect();
                    let got = sets.stage(&rules, &batch, now, &base_of);
                    match model_batch(lines, &fm, &dm, now, dmax) {
                        Ok((f, d)) => {
                            prop_assert!(got.is_ok(), "{:?}", got);
                            (fm, dm) = (f, d);
                        }
                        Err((bad, full)) => {
                            if let (Some(n), Err(e)) = (full, &got) {
                                prop_assert!(e.message.contains("the set is full"), "{}", e);
                                refused += n as u64;
                            }
                            prop_assert_eq!(got.map_err(|e| e.line), Err(bad));
                        }
                    }
                    if let (Some(r), _) = sets.commit(&rules) {
                        rules = r;
                    }
                }
            }
            if !batch.is_empty() {
                let r = sets.stage(&rules, &batch, now, &base_of);
                let m = if matches!(&op, Op::Add(true, ..) | Op::Del(true, _) | Op::Flush(true)) { &mut dm } else { &mut fm };
                let max = if matches!(&op, Op::Add(true, ..)) { dmax } else { usize::MAX };
                match &op {
                    Op::Add(_, p, t) if !m.contains_key(p) && m.len() >= max => {
                        let e = r.unwrap_err();
                        prop_assert!(e.message.contains(&format!("the set is full: it holds {max} elements")), "{}", e);
                        refused += 1;
                    }
                    Op::Add(_, p, t) => {
                        prop_assert!(r.is_ok());
                        m.insert(*p, t.map(|t| now + u64::from(t) * SECS));
                    }
                    Op::Del(_, p) => prop_assert_eq!(r.is_ok(), m.remove(p).is_some(), "del {}", p),
                    _ => {
                        prop_assert!(r.is_ok());
                        m.clear();
                    }
                }
                if let (Some(r), _) = sets.commit(&rules) {
                    rules = r;
                }
            }
            // Merges that happen to be done are published, as the controller does.
            if let (Some(r), _) = sets.poll_merges(&rules, false) {
                rules = r;
            }
            // Every probe as a source (set d) and as a destination (set f).
            let addrs: Vec<IpAddr> = probes.iter().map(|p| p.addr()).chain(fm.keys().chain(dm.keys()).map(|p| p.addr())).collect();
            let frames: Vec<Vec<u8>> = addrs.iter().flat_map(|&a| {
                let other = if a.is_ipv4() { IpAddr::from([192, 0, 2, 1]) } else { "2001:db8:ffff::1".parse().unwrap() };
                [frame(a, other), frame(other, a)]
            }).collect();
            for (ip, dropped) in judged(&rules, &frames) {
                let want = covered(&dm, ip.src) || covered(&fm, ip.dst);
                prop_assert_eq!(dropped, want, "{} -> {} after {:?}", ip.src, ip.dst, op);
            }
            prop_assert_eq!(sets.refused.get("d", "full"), refused);
            let row = sets.rows(&rules).into_iter().find(|r| r.name == "d").unwrap();
            prop_assert_eq!((row.entries, row.maxelem), (dm.len(), dmax));
            for &a in &addrs {
                prop_assert_eq!(rules.set_contains(di, a), covered(&dm, a), "d {}", a);
                prop_assert_eq!(rules.set_contains(fi, a), covered(&fm, a), "f {}", a);
            }
        }
    }
}

/// The ctl test's load at the library level, at a scale the random ops
/// above never reach: batches of 100 adds to a dynamic set with a timeout
/// (so deltas pass the merge threshold and merge on their threads, with the
/// default thresholds), single adds and deletes of watched hosts between
/// them, and old rule sets held for a while as idle workers hold them (so
/// some deltas are brought up to date in place and some are copied). After
/// every publication, a commit or a finished merge, every watched host and
/// every hundredth other element is looked up both ways the engine has.
#[test]
fn many_adds_with_merges_on_threads_and_held_snapshots_lose_no_element() {
    let mut rules = compile(None);
    let di = rules.named_index("d").unwrap();
    let mut sets = RuntimeSets::new();
    let now = 1_000 * SECS;
    let mut model: std::collections::HashSet<IpAddr> = std::collections::HashSet::new();
    let mut held: std::collections::VecDeque<RuleSet> = std::collections::VecDeque::new();
    let mut merges = 0;
    let check = |rules: &RuleSet, model: &std::collections::HashSet<IpAddr>, watched: &[IpAddr], when: &str| {
        let addrs: Vec<IpAddr> = watched.iter().copied().chain(model.iter().copied().step_by(100)).collect();
        let frames: Vec<Vec<u8>> = addrs.iter().map(|&a| frame(a, IpAddr::from([192, 0, 2, 1]))).collect();
        for (ip, dropped) in judged(rules, &frames) {
            assert_eq!(dropped, model.contains(&ip.src), "{} {when}", ip.src);
            assert_eq!(rules.set_contains(di, ip.src), model.contains(&ip.src), "{} {when}", ip.src);
        }
    };
    let mut k = 0u32;
    let watched: Vec<IpAddr> = (0..48u8).map(|s| IpAddr::from([10, 201, 0, s])).collect();
    for round in 0..400usize {
        // 100 other adds, as the ctl test's background does.
        let batch: Vec<(usize, Command)> = (0..100)
            .map(|i| {
                k += 1;
                let elem = Prefix::new(IpAddr::from([198, 18, (k >> 8) as u8, k as u8]), 32);
                model.insert(elem.addr());
                (i + 1, Command::Add { set: "d".into(), elem, timeout: Some(2) })
            })
            .collect();
        sets.stage(&rules, &batch, now, &base_of).unwrap();
        // A watched host in, and one added 8 rounds before out.
        let s = round % 48;
        let one = vec![(1, Command::Add { set: "d".into(), elem: Prefix::new(watched[s], 32), timeout: None })];
        sets.stage(&rules, &one, now, &base_of).unwrap();
        model.insert(watched[s]);
        if round >= 8 {
            let d = (round - 8) % 48;
            if model.remove(&watched[d]) {
                let del = vec![(1, Command::Del { set: "d".into(), elem: Prefix::new(watched[d], 32) })];
                sets.stage(&rules, &del, now, &base_of).unwrap();
            }
        }
        if let (Some(r), _) = sets.commit(&rules) {
            held.push_back(std::mem::replace(&mut rules, r));
        }
        check(&rules, &model, &watched, &format!("after the commit of round {round}"));
        // Now and then wait for a merge, so that some finish right after
        // the commit that started them and some a few commits later.
        let (r, n) = sets.poll_merges(&rules, round % 7 == 0);
        if let Some(r) = r {
            merges += n;
            held.push_back(std::mem::replace(&mut rules, r));
            check(&rules, &model, &watched, &format!("after a merge in round {round}"));
        }
        // Readers let go of old rule sets at different paces.
        while held.len() > 1 + round % 3 {
            held.pop_front();
        }
    }
    assert!(merges >= 4, "only {merges} merges: the test did not reach the threshold");
}

/// The same load with the judge's readers on threads of their own, as the
/// bridge runs them: two readers take the newest snapshot as a worker does
/// between batches, keep it a random while, and check every watched host
/// against what the writer published under that generation. The writer
/// publishes as the controller does (loads the rules in force, commits,
/// publishes, polls merges), so deltas are brought up to date in place
/// exactly when no reader holds them.
#[test]
fn readers_on_threads_see_each_generation_as_it_was_published() {
    use sluice_engine::snapshot::Published;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let published = Arc::new(Published::new(compile(None)));
    let di = published.load().value.named_index("d").unwrap();
    let watched: Vec<IpAddr> = (0..48u8).map(|s| IpAddr::from([10, 201, 0, s])).collect();
    // What each generation holds of the watched hosts.
    let expected: Arc<Mutex<Vec<Vec<bool>>>> = Arc::new(Mutex::new(vec![vec![false; watched.len()]]));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (mut reader, expected, stop, watched) =
                (published.reader(), Arc::clone(&expected), Arc::clone(&stop), watched.clone());
            std::thread::spawn(move || {
                let mut x = seed + 1;
                let (mut seen, mut checks) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let snap = reader.refresh();
                    let want = expected.lock().unwrap()[snap.generation as usize].clone();
                    seen = seen.max(snap.generation);
                    for (a, &w) in watched.iter().zip(&want) {
                        assert_eq!(snap.value.set_contains(di, *a), w, "{a} in generation {}", snap.generation);
                        checks += 1;
                    }
                    // Hold it a while, as a busy or idle worker does.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    std::thread::sleep(std::time::Duration::from_micros(x % 400));
                }
                (seen, checks)
            })
        })
        .collect();
    let mut sets = RuntimeSets::new();
    let now = 1_000 * SECS;
    let mut member = vec![false; watched.len()];
    let mut k = 0u32;
    let publish = |rules: RuleSet, member: &[bool]| {
        let mut e = expected.lock().unwrap();
        let g = published.publish(rules);
        assert_eq!(g as usize, e.len());
        e.push(member.to_vec());
    };
    let started = std::time::Instant::now();
    let mut round = 0usize;
    let mut merges = 0;
    while started.elapsed() < std::time::Duration::from_secs(3) || merges < 3 {
        let cur = published.load();
        let batch: Vec<(usize, Command)> = (0..100)
            .map(|i| {
                k += 1;
                let elem = Prefix::new(IpAddr::from([198, 18, (k >> 8) as u8, k as u8]), 32);
                (i + 1, Command::Add { set: "d".into(), elem, timeout: Some(2) })
            })
            .collect();
        sets.stage(&cur.value, &batch, now, &base_of).unwrap();
        let s = round % 48;
        let one = vec![(1, Command::Add { set: "d".into(), elem: Prefix::new(watched[s], 32), timeout: None })];
        sets.stage(&cur.value, &one, now, &base_of).unwrap();
        member[s] = true;
        if round >= 8 && member[(round - 8) % 48] {
            let d = (round - 8) % 48;
            let del = vec![(1, Command::Del { set: "d".into(), elem: Prefix::new(watched[d], 32) })];
            sets.stage(&cur.value, &del, now, &base_of).unwrap();
            member[d] = false;
        }
        let (new, _) = sets.commit(&cur.value);
        drop(cur);
        if let Some(r) = new {
            publish(r, &member);
        }
        let cur = published.load();
        let (new, n) = sets.poll_merges(&cur.value, false);
        drop(cur);
        if let Some(r) = new {
            merges += n;
            publish(r, &member);
        }
        round += 1;
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (seen, checks) = r.join().unwrap();
        assert!(seen > 100 && checks > 1000, "a reader saw too little: generation {seen}, {checks} checks");
    }
}
