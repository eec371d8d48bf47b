//! `sluice-bench sets`: runtime set updates into a large set, one JSON
//! object.
//!
//! - library: the control plane's own path (`RuntimeSets::stage`, `commit`,
//!   publication into a `Published` rule set), batches of 1, 100 and 10,000
//!   adds into a set of `--entries` hosts: updates/s, and per publication
//!   the latency p50/p99/max (a single add's is its publish latency);
//!   merges counted.
//! - lookup: what a delta of 1k to 250k added hosts costs the judge, Mpps
//!   against no delta.
//! - socket: a `Controller` serving a real control socket, as a bridge
//!   does: `--updates` adds as one `-f` batch, and single `add` requests
//!   one connection each from 4 client threads (updates/s, round trip and
//!   publish latency).
//! - peers, in a network namespace of their own, on a set of the same
//!   size: `ipset restore` of the same adds, and `nft -f` of `add element`
//!   lines of 1,000 elements; and single `ipset add` / `nft add element`
//!   beside single `sluice ctl add` (each a process, as a script calls
//!   them). A peer that is not installed is reported as skipped.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use sluice_control::SetCommand as Command;
use sluice_engine::dynamic::Elements;
use sluice_engine::snapshot::Published;
use sluice_engine::{CompileOptions, RuleSet};
use sluice_policy::sets::RuntimeSets;
use sluice_rules::{parse_rules, Prefix};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct SetsBenchArgs {
    /// Hosts in the set the updates go into.
    #[arg(long, default_value_t = 1_000_000)]
    pub entries: usize,
    /// Adds per batch measurement.
    #[arg(long, default_value_t = 100_000)]
    pub updates: usize,
    /// Single adds timed one by one (library and socket).
    #[arg(long, default_value_t = 20_000)]
    pub singles: usize,
    /// Single adds as processes (`sluice ctl`, `ipset add`, `nft add element`).
    #[arg(long, default_value_t = 300)]
    pub processes: usize,
    /// Skip the ipset and nft peers.
    #[arg(long)]
    pub no_peers: bool,
    /// Only what a delta costs the judge (the `lookup` rows).
    #[arg(long)]
    pub only_lookup: bool,
    /// Print one JSON object per row.
    #[arg(long)]
    pub json: bool,
    /// Instead: countries as sets from this MaxMind DB file (e.g. GeoLite2
    /// from `npm pack @ip-location-db/geolite2-country-mmdb`): building the
    /// 10 largest and every country beside ipset and nft, and the lookup
    /// rate against an exact set.
    #[arg(long, value_name = "FILE")]
    pub geo: Option<PathBuf>,
}

/// `n` distinct IPv4 hosts from a seed (a multiplicative walk: no repeats).
/// As the controller does: the tables of merges finished elsewhere go out
/// (not part of an update's latency). How many went.
fn publish_merges(sets: &mut RuntimeSets, published: &Published<RuleSet>) -> usize {
    let cur = published.load();
    match sets.poll_merges(&cur.value, false) {
        (Some(r), m) => {
            drop(cur);
            published.publish(r);
            m
        }
        _ => 0,
    }
}
fn hosts(n: usize, seed: u32) -> Vec<Ipv4Addr> {
    (0..n as u32).map(|i| Ipv4Addr::from(0x0b00_0000u32.wrapping_add(i.wrapping_mul(2_654_435_761) ^ seed))).collect()
}

fn percentiles(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({ "p50_us": at(0.5), "p99_us": at(0.99), "max_us": v[v.len() - 1], "n": v.len() })
}

const RULES: &str = "set big from \"big.txt\"\nset dyn dynamic\ndrop saddr @big\ndrop saddr @dyn\n";

fn compile(base: &[Prefix]) -> RuleSet {
    let file = parse_rules("sets.rules", RULES, Path::new(".")).expect("the bench's rules parse");
    RuleSet::compile(&file, &[base.to_vec(), Vec::new()], &CompileOptions::default()).expect("they compile")
}

/// Batches of `size` adds into set `set`, through stage, commit and publication.
fn library(base: &[Prefix], set: &str, size: usize, total: usize, seed: u32) -> Value {
    let published = Arc::new(Published::new(compile(base)));
    let elems = Elements::from_prefixes(base);
    let base_of = move |r: &RuleSet, i: usize| (r.named_set_info()[i].name == "big").then(|| elems.clone());
    let mut sets = RuntimeSets::new();
    // The first change reads the base's elements (a list re-read in a
    // bridge): not part of an update's cost.
    let warm =
        vec![(1, Command::Add { set: set.into(), elem: Prefix::host(IpAddr::from([10, 0, 0, 1])), timeout: None })];
    sets.stage(&published.load().value, &warm, 0, &base_of).expect("warm-up add");
    let (r, _) = sets.commit(&published.load().value);
    published.publish(r.expect("a change"));
    let adds = hosts(total, seed);
    let mut lat = Vec::new();
    let mut merges = 0;
    let started = Instant::now();
    for chunk in adds.chunks(size) {
        let t = Instant::now();
        let batch: Vec<(usize, Command)> = chunk
            .iter()
            .enumerate()
            .map(|(i, a)| {
                (i + 1, Command::Add { set: set.into(), elem: Prefix::host(IpAddr::V4(*a)), timeout: Some(3600) })
            })
            .collect();
        let cur = published.load();
        sets.stage(&cur.value, &batch, 1, &base_of).expect("adds apply");
        let (r, _) = sets.commit(&cur.value);
        drop(cur);
        published.publish(r.expect("a change"));
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        merges += publish_merges(&mut sets, &published);
    }
    let secs = started.elapsed().as_secs_f64();
    // One merge of everything into new base tables, as the threshold would
    // make it: how long it takes, and what the publication waited for.
    sets.merge_min = 0;
    sets.merge_ratio = usize::MAX;
    let _ = sets.poll_merges(&published.load().value, true);
    let t = Instant::now();
    let one =
        vec![(1, Command::Add { set: set.into(), elem: Prefix::host(IpAddr::from([10, 0, 0, 2])), timeout: None })];
    let cur = published.load();
    sets.stage(&cur.value, &one, 1, &base_of).expect("an add");
    let (r, _) = sets.commit(&cur.value);
    drop(cur);
    published.publish(r.expect("a change"));
    // What the publication waited for: the merge runs on its own thread.
    let commit_s = t.elapsed().as_secs_f64();
    let cur = published.load();
    let (r, m) = sets.poll_merges(&cur.value, true);
    drop(cur);
    published.publish(r.expect("the merge's tables"));
    let merge_s = t.elapsed().as_secs_f64();
    assert_eq!(m, 1, "the forced merge ran");
    let mut v = percentiles(&mut lat);
    v["merge_s"] = merge_s.into();
    v["merge_commit_s"] = commit_s.into();
    let now = published.load();
    v["merge_entries"] = now.value.named_set_info()[now.value.named_index(set).unwrap_or(0)].entries.into();
    v["batch"] = size.into();
    v["updates"] = total.into();
    v["updates_per_s"] = (total as f64 / secs).into();
    v["merges"] = merges.into();
    v
}

fn write_list(path: &Path, base: &[Prefix]) -> Result<()> {
    let text: String = base.iter().map(|p| format!("{}\n", p.addr())).collect();
    std::fs::write(path, text).with_context(|| path.display().to_string())
}

/// A controller serving a control socket, as `sluice bridge --control` runs it.
struct Served {
    events: mpsc::Sender<sluice_policy::Event>,
    serving: Option<sluice_control::socket::Serving>,
    control: Option<std::thread::JoinHandle<()>>,
    state: Arc<sluice_policy::ControlState>,
    socket: PathBuf,
}

impl Served {
    fn start(dir: &Path, base: &[Prefix]) -> Result<Served> {
        write_list(&dir.join("big.txt"), base)?;
        std::fs::write(dir.join("sets.rules"), RULES)?;
        let spec = sluice_policy::RuleSpec { rules: Some(dir.join("sets.rules")), ..Default::default() };
        let loaded = spec.load(&[]).context("loading the bench's rules")?;
        let controller = sluice_policy::Controller::new(spec, Vec::new(), loaded, false);
        let state = Arc::clone(controller.state());
        let (tx, rx) = mpsc::channel();
        let socket = dir.join("ctl.sock");
        let serving = sluice_control::socket::serve(
            &socket,
            sluice_control::socket::Access::owner_and(None, None)?,
            sluice_policy::deliver_to(&tx),
            Arc::default(),
        )?;
        let control = std::thread::spawn(move || controller.run(rx, || {}));
        Ok(Served { events: tx, serving: Some(serving), control: Some(control), state, socket })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.serving.take() {
            s.stop();
        }
        let _ = self.events.send(sluice_policy::Event::Quit);
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
    }
}

fn socket(dir: &Path, base: &[Prefix], a: &SetsBenchArgs) -> Result<Value> {
    let served = Served::start(dir, base)?;
    let req = |text: &str| sluice_control::socket::request(&served.socket, text, Duration::from_secs(120));
    // Warm: the first change to `big` reads its list again.
    req("add big 10.0.0.1")?;
    let adds = hosts(a.updates, 7);
    let text: String = adds.iter().map(|h| format!("add big {h} timeout 3600\n")).collect();
    let t = Instant::now();
    let r = req(&text)?;
    let batch_s = t.elapsed().as_secs_f64();
    if r["ok"] != true {
        bail!("the batch was refused: {r}");
    }
    // Single adds, 4 clients, one connection each.
    let singles = hosts(a.singles, 11);
    let per = singles.len().div_ceil(4);
    let t = Instant::now();
    let rtts: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = singles
            .chunks(per.max(1))
            .map(|chunk| {
                let socket = served.socket.clone();
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|h| {
                            let t = Instant::now();
                            let r = sluice_control::socket::request(
                                &socket,
                                &format!("add big {h}"),
                                Duration::from_secs(60),
                            );
                            assert!(r.is_ok_and(|r| r["ok"] == true), "a single add failed");
                            t.elapsed().as_secs_f64() * 1e6
                        })
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a client thread")).collect()
    });
    let singles_s = t.elapsed().as_secs_f64();
    let mut rtts = rtts;
    let (p50, p99, max) = served.state.publish_latency().unwrap_or_default();
    Ok(json!({
        "batch": { "updates": a.updates, "seconds": batch_s, "updates_per_s": a.updates as f64 / batch_s },
        "single": {
            "clients": 4,
            "updates": singles.len(),
            "updates_per_s": singles.len() as f64 / singles_s,
            "round_trip": percentiles(&mut rtts),
            "publish_p50_us": p50 as f64 / 1e3,
            "publish_p99_us": p99 as f64 / 1e3,
            "publish_max_us": max as f64 / 1e3,
            "publishes": served.state.publishes.load(std::sync::atomic::Ordering::Relaxed),
        },
    }))
}

/// Runs a command (in the bench's namespace when `ns`), failing on error.
fn sh(ns: Option<&str>, args: &[&str], stdin: Option<&Path>) -> Result<()> {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Process::new("ip");
            c.args(["netns", "exec", ns]).args(args);
            c
        }
        None => {
            let mut c = Process::new(args[0]);
            c.args(&args[1..]);
            c
        }
    };
    if let Some(f) = stdin {
        c.stdin(std::fs::File::open(f)?);
    }
    let out = c.stderr(Stdio::piped()).stdout(Stdio::null()).output().with_context(|| format!("running {args:?}"))?;
    if !out.status.success() {
        bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn have(tool: &str) -> bool {
    Process::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Single updates as processes, one after the other: per-call latency.
fn per_call(n: usize, mut call: impl FnMut(Ipv4Addr) -> Result<()>, seed: u32) -> Result<Value> {
    let mut lat = Vec::with_capacity(n);
    for h in hosts(n, seed) {
        let t = Instant::now();
        call(h)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut v = percentiles(&mut lat);
    v["updates_per_s"] = (n as f64 / (lat.iter().sum::<f64>() / 1e6)).into();
    Ok(v)
}

pub(crate) struct Netns(pub(crate) String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Process::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ipset(dir: &Path, base: &[Prefix], a: &SetsBenchArgs, ns: &str) -> Result<Value> {
    let base_file = dir.join("ipset-base.txt");
    let mut t = format!(
        "create sb hash:ip family inet hashsize {} maxelem 4000000 timeout 0\n",
        base.len().next_power_of_two()
    );
    t.extend(base.iter().map(|p| format!("add sb {}\n", p.addr())));
    std::fs::write(&base_file, t)?;
    let started = Instant::now();
    sh(Some(ns), &["ipset", "restore"], Some(&base_file))?;
    let build_s = started.elapsed().as_secs_f64();
    let adds = dir.join("ipset-adds.txt");
    let text: String = hosts(a.updates, 7).iter().map(|h| format!("add sb {h} timeout 3600\n")).collect();
    std::fs::write(&adds, text)?;
    let t = Instant::now();
    sh(Some(ns), &["ipset", "restore"], Some(&adds))?;
    let s = t.elapsed().as_secs_f64();
    let single =
        per_call(a.processes, |h| sh(Some(ns), &["ipset", "add", "sb", &h.to_string(), "timeout", "3600"], None), 11)?;
    sh(Some(ns), &["ipset", "destroy", "sb"], None)?;
    Ok(json!({
        "build_s": build_s,
        "batch": { "updates": a.updates, "seconds": s, "updates_per_s": a.updates as f64 / s },
        "single_process": single,
    }))
}

fn nft(dir: &Path, base: &[Prefix], a: &SetsBenchArgs, ns: &str) -> Result<Value> {
    let f = dir.join("nft-base.nft");
    let mut t = String::from("add table inet sb\nadd set inet sb s { type ipv4_addr; size 4000000; flags timeout; }\n");
    for chunk in base.chunks(1000) {
        let e: Vec<String> = chunk.iter().map(|p| p.addr().to_string()).collect();
        t += &format!("add element inet sb s {{ {} }}\n", e.join(", "));
    }
    std::fs::write(&f, t)?;
    let started = Instant::now();
    sh(Some(ns), &["nft", "-f", p(&f)], None)?;
    let build_s = started.elapsed().as_secs_f64();
    let adds = dir.join("nft-adds.nft");
    let mut t = String::new();
    for chunk in hosts(a.updates, 7).chunks(1000) {
        let e: Vec<String> = chunk.iter().map(|h| format!("{h} timeout 3600s")).collect();
        t += &format!("add element inet sb s {{ {} }}\n", e.join(", "));
    }
    std::fs::write(&adds, t)?;
    let t = Instant::now();
    sh(Some(ns), &["nft", "-f", p(&adds)], None)?;
    let s = t.elapsed().as_secs_f64();
    let single = per_call(
        a.processes,
        |h| sh(Some(ns), &["nft", "add", "element", "inet", "sb", "s", &format!("{{ {h} timeout 3600s }}")], None),
        11,
    )?;
    sh(Some(ns), &["nft", "delete", "table", "inet", "sb"], None)?;
    Ok(json!({
        "build_s": build_s,
        "batch": { "updates": a.updates, "seconds": s, "updates_per_s": a.updates as f64 / s, "lines_of": 1000 },
        "single_process": single,
    }))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap_or("")
}

/// `sluice ctl add` as a process, against the served socket.
fn ctl_processes(dir: &Path, base: &[Prefix], a: &SetsBenchArgs) -> Result<Value> {
    let sluice = crate::sluice_exe()?;
    let served = Served::start(dir, base)?;
    sluice_control::socket::request(&served.socket, "add big 10.0.0.1", Duration::from_secs(60))?;
    let sock = served.socket.clone();
    per_call(
        a.processes,
        |h| {
            let out = Process::new(&sluice)
                .args(["ctl", "--socket", p(&sock), "add", "big", &h.to_string(), "timeout", "3600"])
                .output()?;
            if !out.status.success() {
                bail!("sluice ctl: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(())
        },
        11,
    )
}

/// A UDP/IPv4 frame from `src` (checksums zero: only an anomaly).
fn frame(src: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&[192, 0, 2, 1, 0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

/// What a delta costs the judge: Mpps of the rules with `big`'s delta
/// holding 0, 1k, 10k, 100k... added hosts (never merged), over the same
/// packets (sources: a quarter from the base, a quarter from the delta, the
/// rest neither), sizes alternating rep by rep.
fn lookup(base: &[Prefix], sizes: &[usize], reps: usize) -> Vec<Value> {
    let rules0 = compile(base);
    let elems = Elements::from_prefixes(base);
    let base_of = move |r: &RuleSet, i: usize| (r.named_set_info()[i].name == "big").then(|| elems.clone());
    let max = sizes.iter().copied().max().unwrap_or(0);
    let extra = hosts(max, 0x0add);
    let variants: Vec<RuleSet> = sizes
        .iter()
        .map(|&k| {
            let mut sets = RuntimeSets::new();
            sets.merge_min = usize::MAX;
            let batch: Vec<(usize, Command)> = extra[..k]
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    (i + 1, Command::Add { set: "big".into(), elem: Prefix::host(IpAddr::V4(*h)), timeout: None })
                })
                .collect();
            if k == 0 {
                return compile(base);
            }
            sets.stage(&rules0, &batch, 0, &base_of).expect("adds apply");
            sets.commit(&rules0).0.expect("a change")
        })
        .collect();
    let n = 1 << 18;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let pick = rng as usize;
            let src = match pick % 4 {
                0 => match base[pick / 4 % base.len()].addr() {
                    IpAddr::V4(a) => a,
                    IpAddr::V6(_) => unreachable!("IPv4 hosts"),
                },
                1 if max > 0 => extra[pick / 4 % max],
                _ => Ipv4Addr::from((pick >> 8) as u32 | 0xc000_0000),
            };
            frame(src)
        })
        .collect();
    let decoded: Vec<_> = frames.iter().map(|f| sluice_wire::decode(sluice_wire::LinkType::ETHERNET, f)).collect();
    let mut mpps = vec![Vec::new(); sizes.len()];
    let mut verdicts = vec![sluice_engine::Verdict::Pass; n];
    for rep in 0..reps {
        for j in 0..sizes.len() {
            let v = (j + rep) % sizes.len();
            let rules = &variants[v];
            let mut stats = sluice_engine::Stats::default();
            let t = Instant::now();
            for _ in 0..4 {
                sluice_engine::judge_decoded(
                    rules,
                    sluice_engine::Verdict::Pass,
                    sluice_sets::DEFAULT_BATCH,
                    &mut stats,
                    n,
                    |i| (&decoded[i], 60, 0),
                    &mut verdicts,
                );
            }
            mpps[v].push(4.0 * n as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
    }
    let med = |v: &[f64]| sluice_bench::median(v);
    let m0 = med(&mpps[0]);
    sizes
        .iter()
        .zip(&mpps)
        .map(|(&k, m)| {
            let dropped = {
                let mut stats = sluice_engine::Stats::default();
                sluice_engine::judge_decoded(
                    &variants[sizes.iter().position(|&x| x == k).unwrap_or(0)],
                    sluice_engine::Verdict::Pass,
                    sluice_sets::DEFAULT_BATCH,
                    &mut stats,
                    n,
                    |i| (&decoded[i], 60, 0),
                    &mut verdicts,
                );
                stats.dropped as f64 / n as f64
            };
            json!({ "delta": k, "mpps": med(m), "mpps_min": sluice_bench::stats::min(m), "mpps_max": sluice_bench::stats::max(m), "vs_no_delta": med(m) / m0, "drop_share": dropped })
        })
        .collect()
}

pub fn run(a: SetsBenchArgs) -> Result<()> {
    if let Some(db) = &a.geo {
        return crate::sets_geo::run(db, !a.no_peers);
    }
    let dir = tempfile::tempdir()?;
    let base: Vec<Prefix> = hosts(a.entries, 0x5eed).into_iter().map(|h| Prefix::host(IpAddr::V4(h))).collect();
    if a.only_lookup {
        eprintln!("sets: what a delta costs the judge, {} entries", a.entries);
        let look = lookup(&base, &[0, 1_000, 10_000, 100_000, a.entries / 4], 5);
        println!("{}", json!({ "bench": "sets", "entries": a.entries, "lookup": look }));
        return Ok(());
    }
    eprintln!("sets: library path, {} entries", a.entries);
    let lib: Vec<Value> = [(1, a.singles), (100, a.updates), (10_000, a.updates)]
        .iter()
        .map(|&(size, total)| library(&base, "big", size, total, 3))
        .collect();
    let lib_dyn = library(&base, "dyn", 1, a.singles, 5);
    eprintln!("sets: what a delta costs the judge");
    let look = lookup(&base, &[0, 1_000, 10_000, 100_000, a.entries / 4], 5);
    eprintln!("sets: control socket");
    let sock = socket(dir.path(), &base, &a)?;
    let ctl_proc = ctl_processes(dir.path(), &base, &a).unwrap_or_else(|e| json!({ "skipped": e.to_string() }));
    let mut peers = json!({});
    if !a.no_peers {
        let ns = Netns(format!("sluice-bench-sets-{}", std::process::id()));
        let made = sh(None, &["ip", "netns", "add", &ns.0], None);
        for (name, tool) in [("ipset", "ipset"), ("nft", "nft")] {
            eprintln!("sets: {name}");
            peers[name] = match (&made, have(tool)) {
                (Err(e), _) => json!({ "skipped": format!("no network namespace: {e}") }),
                (_, false) => json!({ "skipped": format!("{tool} is not installed") }),
                _ => {
                    let r = if name == "ipset" {
                        ipset(dir.path(), &base, &a, &ns.0)
                    } else {
                        nft(dir.path(), &base, &a, &ns.0)
                    };
                    r.unwrap_or_else(|e| json!({ "skipped": e.to_string() }))
                }
            };
        }
    }
    let rate = |v: &Value| v["batch"]["updates_per_s"].as_f64();
    let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
    let ours = rate(&sock);
    let out = json!({
        "bench": "sets",
        "entries": a.entries,
        "updates": a.updates,
        "library": lib,
        "library_dynamic_single": lib_dyn,
        "lookup": look,
        "socket": sock,
        "ctl_process": ctl_proc,
        "peers": peers,
        "ratios": {
            "socket_batch_vs_ipset_restore": ratio(ours, rate(&peers["ipset"])),
            "socket_batch_vs_nft_batch": ratio(ours, rate(&peers["nft"])),
            "ctl_process_vs_ipset_add": ratio(ctl_proc["updates_per_s"].as_f64(), peers["ipset"]["single_process"]["updates_per_s"].as_f64()),
            "ctl_process_vs_nft_add": ratio(ctl_proc["updates_per_s"].as_f64(), peers["nft"]["single_process"]["updates_per_s"].as_f64()),
        },
        "goals": {
            "updates_per_s_100k": ours.map(|r| r >= 100_000.0),
            "single_publish_p99_10ms": sock["single"]["publish_p99_us"].as_f64().map(|p| p <= 10_000.0),
        },
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct SetsScaleArgs {
    /// Timed adds in all (distinct IPv4 hosts).
    #[arg(long, default_value_t = 10_000_000)]
    pub adds: usize,
    /// Adds per batch: each batch is staged, committed and published.
    #[arg(long, default_value_t = 10_000)]
    pub batch: usize,
    /// Each add's timeout, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u32,
    /// Steps the expiry of everything is cut into (each a publication).
    #[arg(long, default_value_t = 100)]
    pub expiry_steps: usize,
    /// The set definition's words after `dynamic` (e.g. `maxelem 20000000`).
    #[arg(long, default_value = "")]
    pub set_options: String,
    /// Never merge the delta into new tables (as for a set loaded from a
    /// compiled file): the delta grows to every add.
    #[arg(long)]
    pub no_merge: bool,
    /// Run twice in the same process: deltas reused once no reader holds
    /// them, then with every snapshot held two publications longer
    /// (readers that let go late: each delta is copied whole, as every
    /// publication did before), and their ratios.
    #[arg(long)]
    pub compare: bool,
    /// Print one JSON object per row.
    #[arg(long)]
    pub json: bool,
}

/// The peak resident set size so far (VmHWM), in bytes.
fn vm_hwm() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = s.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

/// Resets VmHWM to the current RSS (Linux 4.0+), so a phase's peak is its own.
fn reset_hwm() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn dist_us(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({ "median_us": at(0.5), "p99_us": at(0.99), "max_us": v[v.len() - 1], "n": v.len() })
}

/// `sluice-bench sets-scale`: `--adds` timed adds into one dynamic set, in
/// batches of `--batch`, through the control plane's own path (stage,
/// commit, publication; merges on their own thread, their tables published
/// as the controller does), then the expiry of everything in
/// `--expiry-steps` steps of the (virtual) wall clock. One JSON object:
/// total time, time per commit (median, p99, max), the expiry's, and the
/// peak RSS (VmHWM) of each phase. Run one size per process: the peaks
/// are the process's.
pub fn run_scale(a: SetsScaleArgs) -> Result<()> {
    let out = if a.compare {
        let reuse = scale(&a, false)?;
        let held = scale(&a, true)?;
        let r = |k: &str, f: &str| held[k][f].as_f64().zip(reuse[k][f].as_f64()).map(|(h, r)| h / r);
        json!({
            "bench": "sets-scale",
            "reused": reuse,
            "held": held,
            "ratios_held_vs_reused": {
                "adds_total_s": held["adds_total_s"].as_f64().zip(reuse["adds_total_s"].as_f64()).map(|(h, r)| h / r),
                "commit_median": r("commit", "median_us"),
                "commit_p99": r("commit", "p99_us"),
                "expiry_step_median": r("expiry_step", "median_us"),
            },
        })
    } else {
        scale(&a, false)?
    };
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

/// One run of [`run_scale`]; with `hold`, each published snapshot is held
/// until two more are published.
fn scale(a: &SetsScaleArgs, hold: bool) -> Result<Value> {
    let rules = format!("set dyn dynamic {}\ndrop saddr @dyn\n", a.set_options);
    let file = parse_rules("scale.rules", &rules, Path::new(".")).context("the bench's rules")?;
    let compiled = RuleSet::compile(&file, &[Vec::new()], &CompileOptions::default()).context("compiling")?;
    let published = Arc::new(Published::new(compiled));
    let base_of = |_: &RuleSet, _: usize| Some(Elements::new());
    let mut sets = RuntimeSets::new();
    if a.no_merge {
        sets.merge_min = usize::MAX;
    }
    // With `hold`, the last two snapshots, as readers that let go late
    // would keep them: the delta before the last is never free to reuse.
    let mut held: std::collections::VecDeque<Arc<sluice_engine::snapshot::Snapshot<RuleSet>>> =
        std::collections::VecDeque::new();
    let secs = 1_000_000_000u64;
    // The virtual wall clock: 1 ms per batch, so deadlines spread over the run.
    let t0 = 1_000 * secs;
    let hwm_start = vm_hwm();
    reset_hwm();
    let mut lat = Vec::with_capacity(a.adds.div_ceil(a.batch.max(1)));
    let mut merges = 0;
    let started = Instant::now();
    let mut now = t0;
    let mut done = 0usize;
    while done < a.adds {
        let n = a.batch.min(a.adds - done);
        // Hosts made as needed: a 10M list would weigh on the peak.
        let batch: Vec<(usize, Command)> = (done..done + n)
            .map(|i| {
                let h = Ipv4Addr::from(0x0b00_0000u32.wrapping_add((i as u32).wrapping_mul(2_654_435_761)));
                (
                    i - done + 1,
                    Command::Add { set: "dyn".into(), elem: Prefix::host(IpAddr::V4(h)), timeout: Some(a.timeout) },
                )
            })
            .collect();
        let t = Instant::now();
        let cur = published.load();
        if hold {
            held.push_back(Arc::clone(&cur));
            if held.len() > 2 {
                held.pop_front();
            }
        }
        sets.stage(&cur.value, &batch, now, &base_of).map_err(|e| anyhow::anyhow!("batch at {done}: {e}"))?;
        let (r, m) = sets.commit(&cur.value);
        drop(cur);
        published.publish(r.context("a change")?);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        merges += m;
        merges += publish_merges(&mut sets, &published);
        done += n;
        now += 1_000_000;
    }
    let adds_s = started.elapsed().as_secs_f64();
    let adds_hwm = vm_hwm();
    let cur = published.load();
    let (r, m) = sets.poll_merges(&cur.value, true);
    drop(cur);
    if let Some(r) = r {
        published.publish(r);
    }
    merges += m;
    let live = |sets: &RuntimeSets, p: &Published<RuleSet>| sets.rows(&p.load().value).first().map_or(0, |r| r.entries);
    let entries_after_adds = live(&sets, &published);
    // Expiry: the deadlines run from t0 + timeout to now + timeout; cut
    // into equal steps of the clock.
    reset_hwm();
    let (first, last) = (t0 + u64::from(a.timeout) * secs, now + u64::from(a.timeout) * secs);
    let steps = a.expiry_steps.max(1) as u64;
    let mut exp = Vec::new();
    let mut expired = 0;
    let started = Instant::now();
    for k in 1..=steps {
        let at = first + (last - first) * k / steps;
        let t = Instant::now();
        let cur = published.load();
        if hold {
            held.push_back(Arc::clone(&cur));
            if held.len() > 2 {
                held.pop_front();
            }
        }
        let r = sets.expire(&cur.value, at);
        drop(cur);
        if let Some((r, gone)) = r {
            published.publish(r);
            expired += gone;
        }
        exp.push(t.elapsed().as_secs_f64() * 1e6);
        merges += publish_merges(&mut sets, &published);
    }
    let expiry_s = started.elapsed().as_secs_f64();
    drop(held);
    let out = json!({
        "bench": "sets-scale",
        "adds": a.adds,
        "batch": a.batch,
        "timeout_s": a.timeout,
        "set_options": a.set_options,
        "adds_total_s": adds_s,
        "adds_per_s": a.adds as f64 / adds_s,
        "commit": dist_us(&mut lat),
        "entries_after_adds": entries_after_adds,
        "merges": merges,
        "expiry_total_s": expiry_s,
        "expiry_step": dist_us(&mut exp),
        "expired": expired,
        "entries_after_expiry": live(&sets, &published),
        "vm_hwm_start_bytes": hwm_start,
        "vm_hwm_adds_bytes": adds_hwm,
        "vm_hwm_expiry_bytes": vm_hwm(),
        "no_merge": a.no_merge,
        "readers_hold": hold,
    });
    Ok(out)
}
