//! `sluice-bench shield`'s contenders that are not ours to load, and its
//! runtime-update row.
//!
//! xdp-filter (Debian's `xdp-tools`) is loaded by its own tool onto a veth
//! in a netns of the bench's, with a bpffs mount of the bench's own (its
//! tool keeps its maps pinned there; `LIBXDP_BPFFS` says where); the
//! program is then opened by id and run on the same frames through
//! `BPF_PROG_TEST_RUN` as every other contender. Its tool adds one address
//! per process (about 12 ms each here), so the first address is added by
//! the tool, which shows the value its map holds per address, and the
//! rest are written into that map with the same value.

use crate::shield::{frame, hosts, median, set_rule, Contender};
use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use sluice_live::bpf::{BpfMap, XdpProgram};
use sluice_rules::{Prefix, SetSource};
use sluice_shield::program::XDP_DROP;
use sluice_shield::{Compiled, Options};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The most addresses xdp-filter holds (its maps' size).
pub const XDP_FILTER_MAX: usize = 10_000;
const NETNS: &str = "sluice-bench-xf";
/// The veth's two ends, both in [`NETNS`]; xdp-filter is loaded on the second.
const VETH: [&str; 2] = ["sbxf0", "sbxf1"];

/// What the xdp-filter contender set up, torn down when dropped: the
/// program unloaded, the netns (and its veths) deleted, the bpffs unmounted.
pub struct XdpFilterSetup {
    bpffs: PathBuf,
    mounted: bool,
    netns: bool,
}

impl XdpFilterSetup {
    /// `cmd args...`, in the netns when `in_netns`, with xdp-filter told
    /// where its bpffs is: its stdout.
    fn run(&self, in_netns: bool, cmd: &[&str]) -> Result<String> {
        let mut c = if in_netns {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", NETNS]).args(cmd);
            c
        } else {
            let mut c = Command::new(cmd[0]);
            c.args(&cmd[1..]);
            c
        };
        let out = c.env("LIBXDP_BPFFS", &self.bpffs).output().with_context(|| cmd.join(" "))?;
        if !out.status.success() {
            bail!("{}: {}", cmd.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for XdpFilterSetup {
    fn drop(&mut self) {
        if self.netns {
            let _ = self.run(true, &["xdp-filter", "unload", VETH[1]]);
            let _ = self.run(false, &["ip", "netns", "del", NETNS]);
        }
        if self.mounted {
            let _ = Command::new("umount").arg(&self.bpffs).status();
        }
        let _ = std::fs::remove_dir(&self.bpffs);
    }
}

/// xdp-filter holding `set` (IPv4 hosts) as sources to drop, and what
/// keeps it loaded.
pub fn xdp_filter(set: &[Prefix]) -> Result<(Contender, XdpFilterSetup)> {
    if set.len() > XDP_FILTER_MAX {
        bail!("xdp-filter holds at most {XDP_FILTER_MAX} addresses");
    }
    let bpffs = std::env::temp_dir().join(format!("sluice-bench-bpffs-{}", std::process::id()));
    std::fs::create_dir_all(&bpffs)?;
    let mut s = XdpFilterSetup { bpffs, mounted: false, netns: false };
    let bpffs = s.bpffs.to_string_lossy().into_owned();
    s.run(false, &["mount", "-t", "bpf", "bpf", &bpffs]).context("a bpffs for xdp-filter")?;
    s.mounted = true;
    s.run(false, &["ip", "netns", "add", NETNS])?;
    s.netns = true;
    s.run(false, &["ip", "-n", NETNS, "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]])?;
    for v in VETH {
        s.run(false, &["ip", "-n", NETNS, "link", "set", v, "up"])?;
    }
    let addrs: Vec<u32> = set
        .iter()
        .map(|p| match *p {
            Prefix::V4 { addr, len: 32 } => Ok(addr),
            _ => bail!("xdp-filter's contender holds IPv4 hosts only"),
        })
        .collect::<Result<_>>()?;
    let t = Instant::now();
    s.run(true, &["xdp-filter", "load", VETH[1], "-m", "skb", "-f", "ipv4", "-p", "allow"])
        .context("xdp-filter (apt-get install xdp-tools, or --no-xdp-filter)")?;
    let first = std::net::Ipv4Addr::from(addrs[0]).to_string();
    s.run(true, &["xdp-filter", "ip", &first, "-m", "src"])?;
    let map = BpfMap::open_pinned(&s.bpffs.join("xdp-filter/filter_ipv4"))?;
    let value = map.lookup(&addrs[0].to_be_bytes())?.context("xdp-filter's map lacks the address its tool added")?;
    let keys: Vec<u8> = addrs[1..].iter().flat_map(|a| a.to_be_bytes()).collect();
    let values: Vec<u8> = value.iter().copied().cycle().take(value.len() * (addrs.len() - 1)).collect();
    if map.update_batch(&keys, &values).is_err() {
        for k in keys.chunks_exact(4) {
            map.update(k, &value)?;
        }
    }
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let link: serde_json::Value =
        serde_json::from_str(&s.run(false, &["ip", "-n", NETNS, "-j", "link", "show", "dev", VETH[1]])?)?;
    let id = link[0]["xdp"]["prog"]["id"].as_u64().context("no XDP program on the veth")?;
    let program = XdpProgram::from_id(u32::try_from(id)?)?;
    let how = "xdp-filter load -m skb -f ipv4 -p allow; one address by `xdp-filter ip`, the rest into its map";
    Ok((Contender::new("xdpfilter", program, load_ms, how), s))
}

/// Runtime updates of a dynamic set, `n` adds each way in one run: the
/// kernel write alone (`DynamicMaps::insert`: the set's host table,
/// written through its mapping), the same adds into an LPM trie one
/// `BPF_MAP_UPDATE_ELEM` each (the shield's path before), and the control
/// plane's path in batches of 100 and 10,000 with the shield's mirror
/// bringing each publication into the kernel. Each way then times
/// `samples` single adds from the call to the first frame from that
/// address the program drops.
pub fn updates(n: usize, samples: usize, json: bool, rng: &mut ChaCha8Rng) -> Result<()> {
    let maxelem = u32::try_from(n + samples)?;
    let file = set_rule(SetSource::Dynamic { timeout: None, maxelem: Some(maxelem) });
    let mut adds = hosts(n + samples, rng);
    adds.shuffle(rng);
    let (bulk, timed) = adds.split_at(n);
    let mut rows = Vec::new();

    // The kernel write alone: the host table's two stores per add.
    let compiled = Compiled::new(&file, &[Vec::new()], &Options::default())?;
    let (_, maps) = compiled.dynamic_sets().next().context("a dynamic set")?;
    let t = Instant::now();
    for p in bulk {
        maps.insert(p, 0)?;
    }
    let kernel_s = t.elapsed().as_secs_f64();
    let in_trie = maps.in_tries().0;
    let (p50, p99, max) = enforced(timed, |p| Ok(maps.insert(p, 0)?), |f| Ok(compiled.test_run(f)?))?;
    rows.push(serde_json::json!({
        "path": "kernel", "how": "DynamicMaps::insert: the set's host table, written through its mapping",
        "updates_per_s": n as f64 / kernel_s, "spilled_to_trie": in_trie,
        "add_to_enforced_us": { "p50": p50, "p99": p99, "max": max },
    }));
    drop(compiled);

    // IPv6 hosts, as many as the IPv6 host table holds at its quarter
    // fill (a bucket per host, at most 2^17: past that, hosts go to the
    // trie).
    let n6 = n.min(sluice_shield::tables::DYN6_MAX_BUCKETS);
    let compiled = Compiled::new(&file, &[Vec::new()], &Options::default())?;
    let (_, maps) = compiled.dynamic_sets().next().context("a dynamic set")?;
    let hosts6: Vec<Prefix> =
        (0..n6).map(|_| Prefix::V6 { addr: (0x2001_0db8_u128 << 96) | u128::from(rng.next_u64()), len: 128 }).collect();
    let t = Instant::now();
    for p in &hosts6 {
        maps.insert(p, 0)?;
    }
    let secs6 = t.elapsed().as_secs_f64();
    rows.push(serde_json::json!({
        "path": "kernel_v6", "how": "DynamicMaps::insert of IPv6 /128s: the set's IPv6 host table, written through its mapping",
        "updates": n6, "updates_per_s": n6 as f64 / secs6, "spilled_to_trie": maps.in_tries().1,
    }));
    drop(compiled);

    // The path before, and a BPF_MAP_TYPE_HASH's or LPM_TRIE's runtime
    // path in any tool: one BPF_MAP_UPDATE_ELEM per add into a trie.
    let trie = BpfMap::new(
        sluice_live::bpf::MapType::LpmTrie,
        8,
        1,
        maxelem,
        sluice_live::bpf::BPF_F_NO_PREALLOC,
        "bench_trie",
    )?;
    let t = Instant::now();
    for p in bulk {
        let Prefix::V4 { addr, .. } = *p else { unreachable!("hosts are IPv4") };
        let mut key = 32u32.to_ne_bytes().to_vec();
        key.extend_from_slice(&addr.to_be_bytes());
        trie.update(&key, &[1])?;
    }
    let trie_s = t.elapsed().as_secs_f64();
    rows.push(serde_json::json!({
        "path": "trie", "how": "one BPF_MAP_UPDATE_ELEM per add into an LPM_TRIE (the shield's path before)",
        "updates_per_s": n as f64 / trie_s,
    }));
    drop(trie);

    // What `sluice ctl add -f`, CrowdSec's stream and the guard reach: the
    // control plane's own path (stage, commit) in batches, each published
    // rule set brought into the kernel by the shield's mirror.
    for batch in [100, 10_000] {
        let row = through_control(&file, bulk, timed, batch)?;
        rows.push(row);
    }
    let kernel_ratio = rate_of(&rows, "kernel") / rate_of(&rows, "trie");
    if json {
        for mut r in rows {
            r["bench"] = "shield".into();
            r["row"] = "updates".into();
            if r.get("updates").is_none() {
                r["updates"] = n.into();
            }
            r["enforce_samples"] = samples.into();
            println!("{r}");
        }
        println!(
            "{}",
            serde_json::json!({"bench": "shield", "row": "updates_summary", "kernel_over_trie": kernel_ratio})
        );
    } else {
        for r in &rows {
            println!(
                "runtime updates, {}: {n} adds at {:.0}/s; add to enforced p99 {} us",
                r["path"].as_str().unwrap_or("?"),
                r["updates_per_s"].as_f64().unwrap_or(0.0),
                r["add_to_enforced_us"]["p99"]
            );
        }
        println!("  host table over trie: {kernel_ratio:.1}x");
    }
    Ok(())
}

/// The adds per second of the row of `path`.
fn rate_of(rows: &[serde_json::Value], path: &str) -> f64 {
    rows.iter().find(|r| r["path"] == path).and_then(|r| r["updates_per_s"].as_f64()).unwrap_or(f64::NAN)
}

/// p50, p99 and max of `add` then the first `BPF_PROG_TEST_RUN` of a frame
/// from the added address returning `XDP_DROP` (the update is synchronous:
/// the very next run must drop), in microseconds.
fn enforced(
    timed: &[Prefix],
    mut add: impl FnMut(&Prefix) -> Result<()>,
    run: impl Fn(&[u8]) -> Result<u32>,
) -> Result<(f64, f64, f64)> {
    let mut micros = Vec::with_capacity(timed.len());
    for p in timed {
        let Prefix::V4 { addr, .. } = *p else { unreachable!("hosts are IPv4") };
        let f = frame(addr);
        let t = Instant::now();
        add(p)?;
        if run(&f)? != XDP_DROP as u32 {
            bail!("{p} added but its frame not dropped");
        }
        micros.push(t.elapsed().as_secs_f64() * 1e6);
    }
    if micros.is_empty() {
        return Ok((f64::NAN, f64::NAN, f64::NAN));
    }
    micros.sort_by(f64::total_cmp);
    let p99 = micros[(micros.len() * 99 / 100).min(micros.len() - 1)];
    let max = micros[micros.len() - 1];
    Ok((median(&mut micros), p99, max))
}

/// The adds of `bulk` in batches of `batch` through the control plane and
/// the shield's mirror; then each of `timed` as a batch of one, to
/// enforced.
fn through_control(
    file: &sluice_rules::RuleFile,
    bulk: &[Prefix],
    timed: &[Prefix],
    batch: usize,
) -> Result<serde_json::Value> {
    use sluice_control::SetCommand;
    use sluice_engine::snapshot::Published;
    use sluice_engine::{CompileOptions, RuleSet};
    use sluice_policy::Publication;
    use sluice_shield::mirror::{Kernel, Mirror};
    use std::sync::{Arc, Mutex};
    let compiled = Compiled::new(file, &[Vec::new()], &Options::default())?;
    let rules = RuleSet::compile(file, &[Vec::new()], &CompileOptions::default())?;
    let published = Published::new(rules);
    let kernel = Arc::new(Mutex::new(Kernel { compiled, links: Vec::new(), reloads: 0, reloads_failed: 0 }));
    let rules_id = published.load().value.id();
    let rebuild: sluice_shield::mirror::Rebuild =
        Box::new(|_, _| Err(sluice_shield::ShieldError::Config("the bench does not reload".into())));
    let mut mirror = Mirror::new(Arc::clone(&kernel), rules_id, rebuild);
    let mut sets = sluice_policy::sets::RuntimeSets::new();
    // As the shield's controller: a set's elements stay in its delta.
    sets.merge_min = usize::MAX;
    let base_of = |_: &RuleSet, _: usize| Some(sluice_engine::dynamic::Elements::new());
    let mut step = |chunk: &[Prefix]| -> Result<()> {
        let cmds: Vec<(usize, SetCommand)> = chunk
            .iter()
            .enumerate()
            .map(|(i, p)| (i + 1, SetCommand::Add { set: "set".into(), elem: *p, timeout: None }))
            .collect();
        let cur = published.load();
        sets.stage(&cur.value, &cmds, 1, &base_of).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let (r, _) = sets.commit(&cur.value);
        drop(cur);
        let r = r.context("a change")?;
        // Before publishing, as the controller's publish hook runs.
        mirror.sync(&r, Publication::Changed);
        published.publish(r);
        Ok(())
    };
    let t = Instant::now();
    for chunk in bulk.chunks(batch) {
        step(chunk)?;
    }
    let secs = t.elapsed().as_secs_f64();
    // The kernel's lock is the mirror's: taken for each run only.
    let run = |f: &[u8]| -> Result<u32> {
        let k = kernel.lock().map_err(|_| anyhow::anyhow!("the kernel's lock is poisoned"))?;
        Ok(k.compiled.test_run(f)?)
    };
    let (p50, p99, max) = enforced(timed, |p| step(std::slice::from_ref(p)), run)?;
    Ok(serde_json::json!({
        "path": format!("control_batch_{batch}"),
        "how": format!("RuntimeSets::stage + commit of {batch} adds, then the shield's Mirror::sync into the kernel"),
        "batch": batch,
        "updates_per_s": bulk.len() as f64 / secs,
        "add_to_enforced_us": { "p50": p50, "p99": p99, "max": max },
    }))
}
