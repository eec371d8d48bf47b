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

/// Runtime updates: `n` single adds to a dynamic set as `sluice ctl add`
/// reaches the kernel (the mirror's `DynamicMaps::insert`: one
/// `BPF_MAP_UPDATE_ELEM` into the set's LPM trie), then `samples` adds
/// each timed from the call to the first frame from that address the
/// program drops.
pub fn updates(n: usize, samples: usize, json: bool, rng: &mut ChaCha8Rng) -> Result<()> {
    let maxelem = u32::try_from(n + samples)?;
    let file = set_rule(SetSource::Dynamic { timeout: None, maxelem: Some(maxelem) });
    let compiled = Compiled::new(&file, &[Vec::new()], &Options::default())?;
    let (_, maps) = compiled.dynamic_sets().next().context("a dynamic set")?;
    let mut adds = hosts(n + samples, rng);
    adds.shuffle(rng);
    let (bulk, timed) = adds.split_at(n);
    let t = Instant::now();
    for p in bulk {
        maps.insert(p)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let mut micros = Vec::with_capacity(samples);
    for p in timed {
        let Prefix::V4 { addr, .. } = *p else { unreachable!("hosts are IPv4") };
        let f = frame(addr);
        let t = Instant::now();
        maps.insert(p)?;
        // The update is synchronous: the very next run must drop.
        if compiled.test_run(&f)? != XDP_DROP as u32 {
            bail!("{p} added but its frame not dropped");
        }
        micros.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let per_s = n as f64 / secs.max(f64::MIN_POSITIVE);
    let p99 = if micros.is_empty() {
        f64::NAN
    } else {
        micros.sort_by(f64::total_cmp);
        micros[(micros.len() * 99 / 100).min(micros.len() - 1)]
    };
    let p50 = if micros.is_empty() { f64::NAN } else { median(&mut micros) };
    let max = micros.last().copied().unwrap_or(f64::NAN);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "bench": "shield", "row": "updates", "updates": n, "updates_per_s": per_s,
                "path": "DynamicMaps::insert: BPF_MAP_UPDATE_ELEM into the set's LPM trie",
                "enforce_samples": samples, "add_to_enforced_us": { "p50": p50, "p99": p99, "max": max },
            })
        );
    } else {
        println!("runtime updates: {n} adds in {secs:.3} s = {per_s:.0}/s (one BPF_MAP_UPDATE_ELEM each)");
        println!("  add to enforced ({samples} adds): p50 {p50:.1} us, p99 {p99:.1} us, max {max:.1} us");
    }
    Ok(())
}
