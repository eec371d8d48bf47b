//! `sluice-bench filter`: the file path of `sluice filter` against the
//! machine's own limits (`dd` reading the capture, `cp` copying it) and a peer
//! (`tcpdump` reading, filtering and writing it), timed as subprocesses in one
//! run, repetitions interleaved, reported as ratios.
//!
//! tcpdump's filter is `not net P` for the first IPv4 network P of the list:
//! BPF's `net` looks at the IPv4 (or ARP) addresses of frames whose EtherType
//! at offset 12 is IPv4, so it drops only untagged IPv4 frames from or to P,
//! and writes every other frame (VLAN-tagged, IPv6) to its output. What the
//! comparison needs is that tcpdump reads, runs a filter on and writes
//! (nearly) the whole capture, as `sluice filter --pass --drop` does.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use sluice_bench::pmc::{self, Pmc, Reading};
use sluice_pcap::CaptureReader;
use sluice_rules::{load_list, Prefix, FIREHOL_LEVEL1};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The issues' targets: rate ratios (higher is better) and their floors
/// (against `dd`, issue 43's 0.40; issue 23's was 0.30).
const TARGET_VS_DD: f64 = 0.40;
const TARGET_VS_CP: f64 = 0.8;
const TARGET_VS_TCPDUMP: f64 = 3.0;

#[derive(Args, Debug)]
pub struct FilterBenchArgs {
    /// Input capture (pcap or pcapng); default: generate one like `sluice demo` (IMIX, 20% IPv6,
    /// 15% VLAN/QinQ-tagged, 2% of datagrams fragmented, 10% of sources from the list).
    #[arg(long = "in", value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Packets to generate (without --in).
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// Generator seed (without --in).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address list for `--drop-any` (default: the embedded FireHOL level1 list, written to a file).
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
    /// Where to make the temporary directory that holds the generated capture and the outputs
    /// (default: the system's temporary directory, /tmp). It is removed afterwards unless --keep.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the temporary directory (its path is printed).
    #[arg(long)]
    pub keep: bool,
    /// Repetitions; each runs every contender once (median, min and max are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Untimed rounds of every contender before the timed ones (the first run of a writer
    /// is often much slower: the page cache is still taking the pages back).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Also time `sluice filter --workers N` without outputs (0: skip).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Counters per contender over its timed runs (perf_event_open with
    /// inherit: the command's process and its threads are counted).
    #[arg(long)]
    pub pmc: bool,
}

/// One timed command.
struct Contender {
    name: &'static str,
    program: OsString,
    args: Vec<OsString>,
    /// Files the command writes; removed before and after every run.
    outputs: Vec<PathBuf>,
    /// Why it is not run, if it is not.
    skipped: Option<String>,
    secs: Vec<f64>,
    /// Total size of the outputs of the last run.
    out_bytes: Option<u64>,
    /// Counters summed over the timed runs (`--pmc`).
    pmc: Option<Reading>,
}

impl Contender {
    fn new(name: &'static str, program: impl Into<OsString>, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Contender {
        Contender {
            name,
            program: program.into(),
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
            outputs: Vec::new(),
            skipped: None,
            secs: Vec::new(),
            out_bytes: None,
            pmc: None,
        }
    }

    fn writing(mut self, outputs: &[&Path]) -> Contender {
        self.outputs = outputs.iter().map(|p| p.to_path_buf()).collect();
        self
    }

    fn command_line(&self) -> String {
        let mut s = Path::new(&self.program)
            .file_name()
            .map_or_else(|| self.program.to_string_lossy(), |n| n.to_string_lossy())
            .into_owned();
        for a in &self.args {
            let a = a.to_string_lossy();
            s.push(' ');
            if a.contains(' ') {
                s.push_str(&format!("'{a}'"));
            } else {
                s.push_str(&a);
            }
        }
        s
    }

    fn remove_outputs(&self) -> Result<()> {
        for p in &self.outputs {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", p.display())),
            }
        }
        Ok(())
    }

    /// Run once; the wall time from spawn to exit, or why it failed.
    fn run_once(&mut self) -> Result<f64> {
        self.remove_outputs()?;
        let started = Instant::now();
        let out = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running {}", self.command_line()))?;
        let secs = started.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!("{} failed ({}): {}", self.command_line(), out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
        if !self.outputs.is_empty() {
            let mut total = 0;
            for p in &self.outputs {
                total +=
                    std::fs::metadata(p).with_context(|| format!("{} did not write {}", self.name, p.display()))?.len();
            }
            self.out_bytes = Some(total);
        }
        self.remove_outputs()?;
        Ok(secs)
    }

    fn summary(&self) -> Option<Summary> {
        if self.skipped.is_some() || self.secs.is_empty() {
            return None;
        }
        Some(Summary {
            median: sluice_bench::median(&self.secs),
            min: self.secs.iter().copied().fold(f64::INFINITY, f64::min),
            max: self.secs.iter().copied().fold(0.0, f64::max),
        })
    }
}

#[derive(Clone, Copy)]
struct Summary {
    median: f64,
    min: f64,
    max: f64,
}

/// Records and captured bytes in a capture, reading all of it (which also
/// brings it into the page cache).
fn count_records(path: &Path) -> Result<(u64, u64)> {
    let mut r = CaptureReader::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (mut n, mut bytes) = (0u64, 0u64);
    while let Some(rec) = r.next_record().with_context(|| format!("reading {}", path.display()))? {
        n += 1;
        bytes += rec.data.len() as u64;
    }
    Ok((n, bytes))
}

/// Read a file once so that every contender starts from the page cache.
fn warm(path: &Path) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::copy(&mut f, &mut std::io::sink()).with_context(|| format!("reading {}", path.display()))?;
    Ok(())
}

/// Why tcpdump cannot be run, if it cannot.
fn tcpdump_missing() -> Option<String> {
    match Command::new("tcpdump").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("tcpdump --version failed ({s})")),
        Err(_) => Some("tcpdump not found on PATH (apt-get install tcpdump)".to_owned()),
    }
}

/// A one-prefix tcpdump filter from the list: the first IPv4 network, else the first IPv4 host.
fn tcpdump_prefix(list: &[Prefix]) -> String {
    let v4 = || list.iter().filter(|p| matches!(p, Prefix::V4 { .. }));
    v4().find(|p| !p.is_host())
        .or_else(|| v4().next())
        .map_or_else(|| "192.0.2.0/24".to_owned(), |p| format!("{}/{}", p.addr(), p.len()))
}

fn ratio(num: Option<Summary>, den: Option<Summary>) -> Option<f64> {
    // Rate ratio: the reference's time over sluice's time.
    match (num, den) {
        (Some(reference), Some(sluice)) if sluice.median > 0.0 => Some(reference.median / sluice.median),
        _ => None,
    }
}

pub fn run(a: FilterBenchArgs) -> Result<()> {
    let reps = a.reps.max(1);
    let exe = crate::sluice_exe()?;
    let mut builder = tempfile::Builder::new();
    builder.prefix("sluice-bench-filter-");
    let tmp = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            builder.tempdir_in(d)
        }
        None => builder.tempdir(),
    }
    .context("creating a temporary directory")?;
    let dir = tmp.path().to_path_buf();
    let note = |s: String| eprintln!("bench filter: {s}");

    let (list_path, list, input, expected_dropped) = inputs(&a, &dir, &note)?;
    let file_bytes = std::fs::metadata(&input).with_context(|| format!("reading {}", input.display()))?.len();
    note(format!("capture {} is {:.1} MB; outputs go to {}", input.display(), file_bytes as f64 / 1e6, dir.display()));
    warm(&input)?;
    let (records, frame_bytes) = count_records(&input)?;
    if records == 0 {
        bail!("{} holds no packets", input.display());
    }

    // Sanity: sluice filter sees every record (and, on a generated capture, drops exactly the listed ones).
    note("sanity run: sluice filter --json".to_owned());
    let (filter_packets, dropped) = sanity_run(&exe, &input, &list_path)?;
    let sane = filter_packets == records && expected_dropped.is_none_or(|e| e == dropped);

    // The contenders.
    let prefix = tcpdump_prefix(&list);
    let tcpdump_filter = format!("not net {prefix}");
    let (cp_out, pass, drop, td_out) =
        (dir.join("cp.pcap"), dir.join("pass.pcap"), dir.join("drop.pcap"), dir.join("tcpdump.pcap"));
    let if_arg = {
        let mut s = OsString::from("if=");
        s.push(&input);
        s
    };
    let filter = |extra: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut v: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"filter", &"--in", &input, &"--drop-any", &list_path];
        v.extend_from_slice(extra);
        v.push(&"--no-progress");
        v.into_iter().map(|a| a.as_ref().to_owned()).collect::<Vec<OsString>>()
    };
    let workers = a.workers.to_string();
    let mut cs = vec![
        Contender::new("dd", "dd", &[&if_arg, &"of=/dev/null", &"bs=1M"]),
        Contender::new("cp", "cp", &[&input, &cp_out]).writing(&[&cp_out]),
        Contender { args: filter(&[]), ..Contender::new("filter", &exe, &[]) },
        Contender {
            args: filter(&[&"--pass", &pass, &"--drop", &drop]),
            ..Contender::new("filter_outputs", &exe, &[])
        }
        .writing(&[&pass, &drop]),
        Contender::new("tcpdump", "tcpdump", &[&"-r", &input, &"-w", &td_out, &tcpdump_filter]).writing(&[&td_out]),
    ];
    cs[4].skipped = tcpdump_missing();
    // The mapped input beside the default chunked reads: which is faster
    // depends on the host (the page faults against the kernel's copy).
    cs.push(Contender { args: filter(&[&"--read", &"map"]), ..Contender::new("filter_map", &exe, &[]) });
    if a.workers > 0 {
        cs.push(Contender { args: filter(&[&"--workers", &workers]), ..Contender::new("filter_workers", &exe, &[]) });
    }

    race(&mut cs, &a, reps, &note)?;
    for c in &cs {
        c.remove_outputs()?;
    }

    let get = |n: &str| cs.iter().find(|c| c.name == n).and_then(Contender::summary);
    let r_dd = ratio(get("dd"), get("filter"));
    let r_cp = ratio(get("cp"), get("filter_outputs"));
    let r_td = ratio(get("tcpdump"), get("filter_outputs"));
    let r_workers = ratio(get("filter"), get("filter_workers"));
    let r_map = ratio(get("dd"), get("filter_map"));
    let report = Report {
        a: &a,
        cs: &cs,
        dir: &dir,
        input: &input,
        list_path: &list_path,
        list_entries: list.len(),
        records,
        file_bytes,
        frame_bytes,
        reps,
        tcpdump_filter: &tcpdump_filter,
        ratios: [r_dd, r_cp, r_td, r_workers, r_map],
        sanity: (filter_packets, dropped, expected_dropped, sane),
    };
    if a.json {
        report.json();
    } else {
        report.text();
    }
    if a.keep {
        let kept = tmp.keep();
        note(format!("kept {}", kept.display()));
    }
    if !sane {
        bail!("sanity check failed: sluice filter counted {filter_packets} packets and dropped {dropped}, the capture holds {records} records{}", expected_dropped.map_or(String::new(), |e| format!(" and {e} listed sources")));
    }
    Ok(())
}

/// Round-robin: every rep runs every contender once, starting one further
/// along each rep (warm-up rounds first, not timed).
fn race(cs: &mut [Contender], a: &FilterBenchArgs, reps: usize, note: &dyn Fn(String)) -> Result<()> {
    let n = cs.len();
    let mut counters = a.pmc.then(Pmc::open_reporting);
    for round in 0..a.warmup + reps {
        let timed = round >= a.warmup;
        let label =
            if timed { format!("rep {}/{reps}", round - a.warmup + 1) } else { format!("warm-up {}", round + 1) };
        for k in 0..n {
            let c = &mut cs[(round + k) % n];
            if c.skipped.is_some() {
                continue;
            }
            // Counted only when timed: the counters are opened before the
            // command is spawned, so it inherits them.
            let (r, reading) = if timed { pmc::maybe(&mut counters, || c.run_once()) } else { (c.run_once(), None) };
            match r {
                Ok(s) => {
                    note(format!("{label}: {:<15} {s:.3} s", c.name));
                    if timed {
                        c.secs.push(s);
                    }
                    if let Some(x) = reading {
                        c.pmc.get_or_insert_with(Reading::default).add(&x);
                    }
                }
                Err(e) if c.name == "tcpdump" => {
                    note(format!("tcpdump skipped: {e:#}"));
                    c.skipped = Some(format!("{e:#}"));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// What a run found, for its report.
struct Report<'a> {
    a: &'a FilterBenchArgs,
    cs: &'a [Contender],
    dir: &'a Path,
    input: &'a Path,
    list_path: &'a Path,
    list_entries: usize,
    records: u64,
    file_bytes: u64,
    frame_bytes: u64,
    reps: usize,
    tcpdump_filter: &'a str,
    /// filter vs dd, outputs vs cp, outputs vs tcpdump, workers vs one,
    /// mapped vs dd.
    ratios: [Option<f64>; 5],
    /// Packets filter counted, dropped, expected dropped, all agreed.
    sanity: (u64, u64, Option<u64>, bool),
}

impl Report<'_> {
    fn json(&self) {
        let Report { a, cs, input, list_path, records, file_bytes, frame_bytes, reps, tcpdump_filter, .. } = *self;
        let list_len = self.list_entries;
        let [r_dd, r_cp, r_td, r_workers, r_map] = self.ratios;
        let (filter_packets, dropped, expected_dropped, sane) = self.sanity;
        let target = |v: Option<f64>, min: f64| json!({ "min": min, "value": v, "met": v.map(|v| v >= min) });
        let contenders: serde_json::Map<String, Value> = cs
            .iter()
            .map(|c| {
                let mut v = match (c.summary(), &c.skipped) {
                    (Some(s), _) => json!({
                        "command": c.command_line(),
                        "median_s": s.median, "min_s": s.min, "max_s": s.max,
                        "mpps": records as f64 / s.median / 1e6,
                        "mb_s": file_bytes as f64 / s.median / 1e6,
                        "runs_s": c.secs,
                        "out_bytes": c.out_bytes,
                    }),
                    (None, reason) => json!({
                        "command": c.command_line(),
                        "skipped": reason.clone().unwrap_or_else(|| "not run".to_owned()),
                    }),
                };
                if let Some(r) = &c.pmc {
                    let (hw, sw) = Reading::json_fields(Some(r));
                    v["pmc"] = hw;
                    v["pmc_sw"] = sw;
                }
                (c.name.to_owned(), v)
            })
            .collect();
        let v = json!({
            "input": input.display().to_string(),
            "generated": a.input.is_none(),
            "list": list_path.display().to_string(),
            "list_entries": list_len,
            "packets": records,
            "bytes": file_bytes,
            "frame_bytes": frame_bytes,
            "reps": reps,
            "warmup": a.warmup,
            "tcpdump_filter": tcpdump_filter,
            "contenders": contenders,
            "ratios": {
                "filter_vs_dd": r_dd,
                "filter_outputs_vs_cp": r_cp,
                "filter_outputs_vs_tcpdump": r_td,
                "filter_workers_vs_filter": r_workers,
                "filter_map_vs_dd": r_map,
            },
            "targets": {
                "filter_vs_dd": target(r_dd, TARGET_VS_DD),
                "filter_outputs_vs_cp": target(r_cp, TARGET_VS_CP),
                "filter_outputs_vs_tcpdump": target(r_td, TARGET_VS_TCPDUMP),
            },
            "sanity": {
                "filter_packets": filter_packets,
                "capture_records": records,
                "dropped": dropped,
                "expected_dropped": expected_dropped,
                "ok": sane,
            },
        });
        println!("{v}");
    }

    fn text(&self) {
        let Report { a, cs, dir, input, list_path, records, file_bytes, reps, tcpdump_filter, .. } = *self;
        let list_len = self.list_entries;
        let [r_dd, r_cp, r_td, r_workers, r_map] = self.ratios;
        let (filter_packets, dropped, expected_dropped, sane) = self.sanity;
        println!(
        "sluice-bench filter: {} ({}), {records} packets, {:.1} MB; list {} ({} entries); {reps} reps after {} warm-up, interleaved",
        input.display(),
        if a.input.is_none() { "generated" } else { "given" },
        file_bytes as f64 / 1e6,
        list_path.display(),
        list_len,
        a.warmup
    );
        let in_dir = format!("{}/", dir.display());
        println!(
            "{:<15} {:>9} {:>9} {:>9} {:>8} {:>9}  command",
            "contender", "median s", "min s", "max s", "Mpps", "MB/s"
        );
        for c in cs {
            match c.summary() {
                Some(s) => println!(
                    "{:<15} {:>9.3} {:>9.3} {:>9.3} {:>8.2} {:>9.0}  {}",
                    c.name,
                    s.median,
                    s.min,
                    s.max,
                    records as f64 / s.median / 1e6,
                    file_bytes as f64 / s.median / 1e6,
                    c.command_line().replace(&in_dir, "")
                ),
                None => println!("{:<15} skipped: {}", c.name, c.skipped.as_deref().unwrap_or("not run")),
            }
            if let Some(r) = &c.pmc {
                println!("{:<15} {}", "", r.line());
            }
        }
        println!("(paths in the commands are relative to {})", dir.display());
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{x:.2}"));
        let met = |v: Option<f64>, min: f64| match v {
            Some(x) if x >= min => "met",
            Some(_) => "NOT met",
            None => "not measured",
        };
        println!("ratios (rates; higher is better for sluice):");
        println!(
            "  filter, no output / dd          {:>6}  target >= {TARGET_VS_DD:.2}  {}",
            f(r_dd),
            met(r_dd, TARGET_VS_DD)
        );
        println!(
            "  filter --read map / dd          {:>6}  target >= {TARGET_VS_DD:.2}  {}",
            f(r_map),
            met(r_map, TARGET_VS_DD)
        );
        println!(
            "  filter --pass --drop / cp       {:>6}  target >= {TARGET_VS_CP:.2}  {}",
            f(r_cp),
            met(r_cp, TARGET_VS_CP)
        );
        println!(
        "  filter --pass --drop / tcpdump  {:>6}  target >= {TARGET_VS_TCPDUMP:.2}  {}  (tcpdump '{tcpdump_filter}')",
        f(r_td),
        met(r_td, TARGET_VS_TCPDUMP)
    );
        if a.workers > 0 {
            println!("  filter --workers {} / filter     {:>6}", a.workers, f(r_workers));
        }
        println!(
        "sanity: sluice filter --json counted {filter_packets} packets, the capture holds {records} records; dropped {dropped}{}: {}",
        expected_dropped.map_or(String::new(), |e| format!(" (expected {e})")),
        if sane { "OK" } else { "MISMATCH" }
    );
    }
}

/// `sluice filter --json` once: the packets it counted and dropped.
fn sanity_run(exe: &Path, input: &Path, list_path: &Path) -> Result<(u64, u64)> {
    let out = Command::new(exe)
        .arg("filter")
        .arg("--in")
        .arg(input)
        .arg("--drop-any")
        .arg(list_path)
        .args(["--no-progress", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .context("running sluice filter --json")?;
    if !out.status.success() {
        bail!("sluice filter --json failed ({})", out.status);
    }
    let summary: Value = serde_json::from_slice(&out.stdout).context("parsing sluice filter --json")?;
    let filter_packets = summary["packets"].as_u64().context("sluice filter --json has no packets")?;
    let dropped = summary["dropped"].as_u64().unwrap_or(0);
    Ok((filter_packets, dropped))
}

/// The list (given, or the embedded FireHOL list written next to the
/// capture) and the capture (given, or generated like `sluice demo`'s, with
/// the drops it must give).
fn inputs(
    a: &FilterBenchArgs,
    dir: &Path,
    note: &dyn Fn(String),
) -> Result<(PathBuf, Vec<Prefix>, PathBuf, Option<u64>)> {
    // The list: given, or the embedded FireHOL list written next to the capture.
    let list_path = match &a.list {
        Some(p) => p.clone(),
        None => {
            let p = dir.join("firehol_level1.netset");
            std::fs::write(&p, FIREHOL_LEVEL1).with_context(|| format!("writing {}", p.display()))?;
            p
        }
    };
    let list = load_list(&list_path, false)?.prefixes;

    // The capture: given, or generated like `sluice demo`'s.
    let mut expected_dropped = None;
    let input = match &a.input {
        Some(p) => p.clone(),
        None => {
            let p = dir.join("bench.pcap");
            note(format!("generating {} IMIX packets into {}", a.packets, p.display()));
            let started = Instant::now();
            let stats =
                sluice_gen::write_capture(sluice_gen::demo_config(a.packets, a.seed, list.clone()), &p, false, |_| {})?;
            note(format!("generated in {:.2} s", started.elapsed().as_secs_f64()));
            expected_dropped = Some(stats.listed);
            p
        }
    };
    Ok((list_path, list, input, expected_dropped))
}
