//! `sluice-bench guard`: `sluice http-load` straight to `sluice
//! http-serve`, through `sluice http-guard` (limits set, none reached),
//! with `--tls` through a second guard terminating TLS, and through the
//! `--peers` (nginx with 1 worker, HAProxy with 1 thread) at the same
//! limits, for each response size and connection count; contenders
//! alternating, one JSON line per repetition, one per case with the
//! medians and the guard's ratios, one summary. Targets are reported, not
//! asserted: on a small machine the processes share the cores.

use crate::fronts;
use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_bench::pmc::{self, Pmc, Reading};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

#[derive(Args, Debug)]
pub struct GuardBenchArgs {
    /// Seconds per contender per repetition.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// Connections the load keeps open: each count is a case of its own.
    #[arg(long, value_delimiter = ',', default_value = "32,1000")]
    pub connections: Vec<usize>,
    /// Response body sizes (bytes) of the upstream: each is a case of its own.
    #[arg(long, value_delimiter = ',', default_value = "128,16384")]
    pub sizes: Vec<usize>,
    /// The proxies the guard is measured beside, at the same limits:
    /// nginx (1 worker) and HAProxy (1 thread); `none` for neither.
    #[arg(long, value_delimiter = ',', default_value = "nginx,haproxy")]
    pub peers: Vec<String>,
    /// A named case instead of --connections, --sizes and --source:
    /// `limits64` is issue 59's operator case (64 clients from 64
    /// loopback addresses, 128-byte responses, every front with its
    /// per-address limits on but far above the load and an upstream
    /// keep-alive pool). Rows carry `case`.
    #[arg(long, value_name = "NAME")]
    pub case: Option<String>,
    /// Also through a guard with `--upstream-pipeline N` (1: not): the
    /// contender `guard_pipelined`, beside the guard at its defaults.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub guard_pipeline: usize,
    /// Threads of each of http-load, http-serve and http-guard.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Repetitions, the contenders alternating (median, min and max are reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Source addresses of the connections (one per connection, so no one
    /// address carries the whole rate).
    #[arg(long, default_value = "127.6.0.0/24")]
    pub source: String,
    /// Open loop at this many requests/s in total (the same offered load
    /// both ways) instead of as fast as the loop closes: reports what each
    /// path delivers and its corrected p99 latency.
    #[arg(long, value_name = "R")]
    pub rate: Option<u64>,
    /// Counters over each side's runs: http-load, plus the guard on the
    /// guarded side (they are opened after the upstream starts and before
    /// the guard does, so the guard inherits them and the upstream not).
    #[arg(long)]
    pub pmc: bool,
    /// Instead: a legitimate pool alone, then beside an attack pool, through
    /// each of --contenders (issues 24 and 59): the legitimate pool's success and p99 against
    /// its own without the attack, and the attack's refused share after its
    /// first second.
    #[arg(long)]
    pub attack: bool,
    /// --attack: addresses of the legitimate pool (one connection each).
    #[arg(long, default_value_t = 1000)]
    pub legit_clients: usize,
    /// --attack: the legitimate pool's requests/s in total (open loop).
    #[arg(long, default_value_t = 200.0)]
    pub legit_rate: f64,
    /// --attack: addresses of the attack pool (one connection each).
    #[arg(long, default_value_t = 10_000)]
    pub attack_clients: usize,
    /// --attack: the guard's per-address request rate limit (requests/s).
    #[arg(long, default_value_t = 2)]
    pub limit: u32,
    /// --attack: each attacker offers this many times the limit (open loop).
    #[arg(long, default_value_t = 10)]
    pub attack_factor: u32,
    /// --attack: seconds the legitimate pool runs before the attack starts
    /// (the attack then runs --duration seconds, the legitimate pool until it ends).
    #[arg(long, default_value_t = 2)]
    pub attack_delay: u64,
    /// --attack: the guard's --max-connections (0: its default, half the
    /// file limit); both pools' connections must fit under it, or the guard
    /// sheds the ones never served (the attackers' newest) to make room.
    #[arg(long, default_value_t = 0)]
    pub guard_max_connections: usize,
    /// --attack: the guard's --upstream-max-inflight (0: no cap), so known
    /// clients go first when the attack's first allowed requests arrive.
    #[arg(long, default_value_t = 0)]
    pub guard_max_inflight: usize,
    /// --attack: the guard's --upstream-pipeline (1: off).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub attack_pipeline: usize,
    /// --attack: run the guard (and its floor) with `--no-syn-filter`:
    /// blocked addresses refused at accept, not dropped at their SYN in the
    /// kernel (the A/B case of the SYN filter).
    #[arg(long)]
    pub guard_no_syn_filter: bool,
    /// --attack: run the guard (and its floor) without `--calm-lane` (on by
    /// default, as in the shipped site config: calm connections served by
    /// a thread of their own beside the accepting one).
    #[arg(long)]
    pub guard_no_calm_lane: bool,
    /// --attack: a third phase, the floor: the same attack sent to a second
    /// front of the same kind (same limits, same upstream), so the legitimate
    /// pool's p99 there is what the machine's contention alone costs it
    /// (the load tool, the kernel, a busy guard beside), with nothing of the
    /// attack in its own guard's loop.
    #[arg(long)]
    pub attack_floor: bool,
    /// --attack: run each contender's phases this many times: a row per
    /// repetition (`guard_attack_rep`), then the contender's row, the
    /// repetition with the median attacked p99 (over its floor, with
    /// --attack-floor), with every repetition's numbers beside it. The
    /// legitimate p99 under the attack swings several-fold from one run to
    /// the next on a small shared machine.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub attack_reps: usize,
    /// --attack: skip the warm-up (by default both pools run once through
    /// a guard, unmeasured, before the first contender: the upstream's
    /// first flood of connections costs it more than any later one, and
    /// only the first attacked phase would pay for it, never a floor).
    #[arg(long)]
    pub attack_no_warmup: bool,
    /// Also through a guard terminating TLS (a self-signed certificate made
    /// for the run; http-load over https): its requests/s against the plain
    /// guard's. With --attack: both pools over TLS.
    #[arg(long)]
    pub tls: bool,
    /// Instead: slowhttptest's slow attacks against the guard (its
    /// defaults) and nginx (1 worker, proxy_pass) in front of a 1 MiB page,
    /// a legitimate client fetching it every 250 ms (issue 39).
    #[arg(long)]
    pub slow_attacks: bool,
    /// --slow-attacks: which (slowhttptest -H, -B, -X, -R).
    #[arg(long, value_delimiter = ',', default_value = "H,B,X,R")]
    pub slow_modes: Vec<String>,
    /// --slow-attacks and --attack: the fronts attacked (guard, nginx,
    /// haproxy), each in its turn (default: guard,nginx with
    /// --slow-attacks; the guard alone with --attack); --attack configures
    /// the peers with the guard's per-address rate (nginx
    /// `limit_req`/`limit_conn`, HAProxy a stick table and `http-request
    /// deny`).
    #[arg(long, value_delimiter = ',')]
    pub contenders: Option<Vec<String>>,
    /// --slow-attacks: attacking connections (slowhttptest -c).
    #[arg(long, default_value_t = 5000)]
    pub slow_connections: usize,
    /// --slow-attacks: seconds per attack (slowhttptest -l).
    #[arg(long, default_value_t = 120)]
    pub slow_seconds: u64,
    /// --slow-attacks: new attacking connections per second (slowhttptest -r).
    #[arg(long, default_value_t = 500)]
    pub slow_rate: usize,
    /// Instead: tunnels. --connections connections upgrade (a WebSocket
    /// handshake answered 101) and bounce --sizes-byte messages off an echo
    /// upstream, one in flight each: messages/s and p99 round trip straight
    /// to it, through the guard at its defaults, and through the --peers
    /// (nginx passing upgrades on, HAProxy as it is).
    #[arg(long)]
    pub tunnels: bool,
    /// Instead: HTTP/2 over TLS (issue 59). h2load through each of
    /// --contenders (default guard,nginx,haproxy), each terminating TLS
    /// with the same self-signed certificate and speaking HTTP/1.1
    /// keep-alive to one `sluice http-serve`, per-address limits on but far
    /// above the load: req/s and p99 per contender per repetition.
    #[arg(long)]
    pub http2: bool,
    /// --http2: requests per h2load run (h2load -n).
    #[arg(long, default_value_t = 100_000)]
    pub h2_requests: u64,
    /// --http2: h2load's client connections (h2load -c).
    #[arg(long, default_value_t = 64)]
    pub h2_clients: usize,
    /// --http2: streams in flight per connection (h2load -m).
    #[arg(long, default_value_t = 10)]
    pub h2_streams: usize,
    /// --http2: the upstream's response body size (bytes).
    #[arg(long, default_value_t = 128)]
    pub h2_size: usize,
}

/// A self-signed certificate and key for the run, as PEM files in `dir`:
/// the guard's `--tls-cert`/`--tls-key` flags.
pub(crate) fn tls_flags(dir: &Path) -> Result<Vec<String>> {
    let ck = rcgen::generate_simple_self_signed(vec!["guard.bench".to_owned()]).context("making a certificate")?;
    let (cert, key) = (dir.join("guard.pem"), dir.join("guard.key"));
    std::fs::write(&cert, ck.cert.pem())?;
    std::fs::write(&key, ck.signing_key.serialize_pem())?;
    let path = |p: &Path| p.to_str().map(str::to_owned).context("a UTF-8 temporary path");
    Ok(vec!["--tls-cert".into(), path(&cert)?, "--tls-key".into(), path(&key)?])
}

/// A child killed when dropped (the slow-attack bench's too).
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    /// SIGTERM first, so a master process (nginx's) ends its workers, then
    /// SIGKILL after 2 s if it is still there.
    fn drop(&mut self) {
        let term = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).stderr(Stdio::null()).status();
        if term.is_err() {
            let _ = self.0.kill();
        }
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < end {
            if matches!(self.0.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    /// SIGTERM, then the JSON summary it prints on stdout (started with `--json`).
    pub(crate) fn summary(mut self) -> Result<serde_json::Value> {
        Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().context("kill")?;
        let mut out = String::new();
        std::io::Read::read_to_string(&mut self.0.stdout.take().context("stdout")?, &mut out)?;
        serde_json::from_str(&out).context("the guard printed no JSON summary")
    }
}

/// Start `sluice ARGS` and read the address it announces on stderr after `prefix`.
pub(crate) fn spawn_announced(exe: &Path, args: &[&str], prefix: &str) -> Result<(Killed, String)> {
    let json = args.contains(&"--json");
    let mut child = Command::new(exe)
        .args(args)
        .stdout(if json { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting sluice {}", args[0]))?;
    let stderr = child.stderr.take().context("stderr")?;
    let child = Killed(child);
    for line in BufReader::new(stderr).lines() {
        if let Some(a) = line?.strip_prefix(prefix) {
            return Ok((child, a.trim().to_owned()));
        }
    }
    bail!("sluice {} did not say where it listens", args[0])
}

/// `sluice http-serve` on a free loopback port for `total` seconds,
/// answering `size`-byte bodies: it and its address.
pub(crate) fn serve(exe: &Path, threads: &str, total: &str, size: usize) -> Result<(Killed, String)> {
    let size = format!("fixed:{size}");
    let args = ["http-serve", "--listen", "127.0.0.1:0", "--threads", threads, "--duration", total, "--size", &size];
    spawn_announced(exe, &args, "sluice: serving on ")
}

/// `sluice http-guard` in front of `upstream` with the limits in `limits`
/// (unpinned: http-serve pins its thread 0 to CPU 0, and pinning the guard
/// there too would put both on one core): it and its address.
pub(crate) fn guard(
    exe: &Path,
    upstream: &str,
    threads: &str,
    total: &str,
    limits: &[&str],
) -> Result<(Killed, String)> {
    let mut args = vec!["http-guard", "--listen", "127.0.0.1:0", "--upstream", upstream, "--threads", threads];
    args.extend(["--duration", total, "--no-pin"]);
    args.extend(limits);
    spawn_announced(exe, &args, "sluice: guarding on ")
}

use sluice_bench::median;

/// Every limit on, none reached: the accounting runs on every request.
/// [`LIMITS`] in the peers' terms (nginx, HAProxy): every limit on, far
/// above the load.
pub(crate) const PEER_LIMITS: fronts::PeerLimits = fronts::PeerLimits {
    request_rate: 60_000,
    request_burst: 60_000,
    connection_rate: 1000,
    concurrent_connections: 1000,
    header_timeout_ms: 5000,
    line_len: 4096,
    max_connections: 9000,
};

pub(crate) const LIMITS: [&str; 21] = [
    "--request-rate",
    "60000",
    "--request-burst",
    "60000",
    "--connection-rate",
    "1000",
    "--concurrent-connections",
    "1000",
    "--client-header-timeout",
    "5000",
    "--http-header-cnt",
    "64",
    "--http-uri-len",
    "4096",
    "--http-field-len",
    "4096",
    "--http-methods",
    "GET,HEAD,POST",
    "--http-host-required",
    "--ip-block",
    "10",
];

/// What every front of a run shares.
struct Run<'a> {
    threads: &'a str,
    /// Seconds each front lives: the whole run.
    total: &'a str,
    /// The guard's TLS flags (empty: no TLS contender).
    tls: &'a [String],
    peers: &'a [&'a str],
    dir: &'a Path,
}

/// The fronts of one response size, each with its address: the guard,
/// with TLS and pipelined when asked, and the peers.
struct SizeFronts {
    size: usize,
    upstream: String,
    guard: (Killed, String),
    tls_guard: Option<(Killed, String)>,
    pipelined: Option<(Killed, String)>,
    peers: Vec<(&'static str, Killed, String)>,
}

impl SizeFronts {
    fn start(exe: &Path, a: &GuardBenchArgs, size: usize, upstream: &str, run: &Run) -> Result<SizeFronts> {
        let (threads, total) = (run.threads, run.total);
        let peer_limits = PEER_LIMITS;
        let guarded = guard(exe, upstream, threads, total, &LIMITS)?;
        let depth = a.guard_pipeline.to_string();
        let pipelined = if a.guard_pipeline > 1 {
            let mut with_pipeline: Vec<&str> = LIMITS.to_vec();
            with_pipeline.extend(["--upstream-pipeline", &depth]);
            Some(guard(exe, upstream, threads, total, &with_pipeline)?)
        } else {
            None
        };
        let tls_guard = if a.tls {
            let mut with_tls: Vec<&str> = LIMITS.to_vec();
            with_tls.extend(run.tls.iter().map(String::as_str));
            Some(guard(exe, upstream, threads, total, &with_tls)?)
        } else {
            None
        };
        let mut peers = Vec::new();
        for &p in run.peers {
            let port = fronts::free_port()?;
            let pdir = run.dir.join(format!("{p}-{size}"));
            std::fs::create_dir_all(&pdir)?;
            let child = fronts::peer(p, upstream, port, &pdir, Some(&peer_limits))?;
            let name = if p == "nginx" { "nginx" } else { "haproxy" };
            peers.push((name, child, format!("127.0.0.1:{port}")));
        }
        Ok(SizeFronts { size, upstream: upstream.to_owned(), guard: guarded, tls_guard, pipelined, peers })
    }
}

pub fn run(mut a: GuardBenchArgs) -> Result<()> {
    match a.case.as_deref() {
        None => {}
        Some("limits64") => {
            (a.connections, a.sizes) = (vec![64], vec![128]);
            // 126 usable hosts; http-load gives each connection its own.
            a.source = "127.6.0.0/25".into();
        }
        Some(other) => bail!("--case {other:?}: the named cases are limits64"),
    }
    if a.reps == 0 || a.duration == 0 {
        bail!("--reps and --duration must be at least 1");
    }
    let exe = crate::sluice_exe()?;
    if a.slow_attacks {
        let s = crate::slow::Slow {
            modes: &a.slow_modes,
            contenders: &a.contenders.clone().unwrap_or_else(|| vec!["guard".into(), "nginx".into()]),
            connections: a.slow_connections,
            seconds: a.slow_seconds,
            rate: a.slow_rate,
        };
        return crate::slow::run(&exe, &s);
    }
    if a.attack {
        return crate::attack::run(&a, &exe);
    }
    if a.tunnels {
        return crate::tunnels::run(&a, &exe);
    }
    if a.http2 {
        return crate::guard_h2::run(&a, &exe);
    }
    let peers: Vec<&str> = a.peers.iter().map(String::as_str).filter(|p| *p != "none").collect();
    if let Some(p) = peers.iter().find(|p| !matches!(**p, "nginx" | "haproxy")) {
        bail!("--peers: unknown peer {p:?} (nginx, haproxy or none)");
    }
    if a.connections.is_empty() || a.sizes.is_empty() {
        bail!("--connections and --sizes need at least one value each");
    }
    let cases: Vec<(usize, usize)> = a.sizes.iter().flat_map(|&s| a.connections.iter().map(move |&c| (s, c))).collect();
    // Every front lives for the whole run: each case's runs, all contenders.
    let contenders = 2 + usize::from(a.tls) + usize::from(a.guard_pipeline > 1) + peers.len();
    let total = (a.duration as usize * a.reps * contenders * cases.len() + 60).to_string();
    let threads = a.threads.to_string();
    let dir = tempfile::tempdir().context("a temporary directory")?;
    // One upstream per response size, started before the counters open
    // (so they count the fronts and the load, not the upstream).
    let mut servers = Vec::new();
    for &size in &a.sizes {
        servers.push((size, serve(&exe, &threads, &total, size)?));
    }
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let tls = if a.tls { tls_flags(dir.path())? } else { Vec::new() };
    let fronts_by_size = servers
        .iter()
        .map(|(size, (_, upstream))| {
            SizeFronts::start(
                &exe,
                &a,
                *size,
                upstream,
                &Run { threads: &threads, total: &total, tls: &tls, peers: &peers, dir: dir.path() },
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let load = Load { exe: &exe, threads: &threads, a: &a };
    let mut counts: std::collections::BTreeMap<&str, Reading> = Default::default();
    let mut summaries = Vec::new();
    for &(size, conns) in &cases {
        let f = fronts_by_size.iter().find(|f| f.size == size).expect("a front per size");
        // The contenders in a fixed order; each repetition starts at a different one.
        // Each with its front's process, whose CPU is read around its run
        // (the direct path has none).
        let mut order: Vec<(&str, &str, bool, Option<u32>)> =
            vec![("direct", &f.upstream, false, None), ("guard", &f.guard.1, false, Some(f.guard.0 .0.id()))];
        if let Some((p, addr)) = &f.tls_guard {
            order.push(("guard_tls", addr, true, Some(p.0.id())));
        }
        if let Some((p, addr)) = &f.pipelined {
            order.push(("guard_pipelined", addr, false, Some(p.0.id())));
        }
        order.extend(f.peers.iter().map(|(name, p, addr)| (*name, addr.as_str(), false, Some(p.0.id()))));
        let mut runs: std::collections::BTreeMap<&str, Vec<(f64, f64)>> = Default::default();
        let mut cpu: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
        for rep in 0..a.reps {
            let mut line =
                serde_json::json!({ "bench": "guard", "size_bytes": size, "connections": conns, "rep": rep });
            for k in 0..order.len() {
                let (name, addr, tls, pid) = order[(rep + k) % order.len()];
                let before = pid.and_then(sluice_bench::cpu::tree_seconds);
                let (r, reading) = pmc::maybe(&mut pmc, || load.rps(addr, tls, conns));
                let after = pid.and_then(sluice_bench::cpu::tree_seconds);
                let served = r.with_context(|| format!("{name}, {size}-byte responses, {conns} connections"))?;
                let (rps, p99) = (served.rps, served.p99_us);
                if let Some(x) = reading {
                    counts.entry(name).or_default().add(&x);
                }
                runs.entry(name).or_default().push((rps, p99));
                let key = json_key(name);
                line[format!("{key}_rps")] = rps.into();
                line[format!("{key}_p99_us")] = p99.into();
                if let (Some(b), Some(a)) = (before, after) {
                    // The front's CPU (its whole process tree) per request served.
                    let us = (a - b) * 1e6 / served.requests.max(1) as f64;
                    cpu.entry(name).or_default().push(us);
                    line[format!("{key}_cpu_us_per_req")] = us.into();
                    line[format!("{key}_cpu_share")] = ((a - b) / served.seconds.max(1e-9)).into();
                }
            }
            let (d, g) = (runs["direct"][rep].0, runs["guard"][rep].0);
            line["ratio"] = (g / d).into();
            if let Some(t) = runs.get("guard_tls") {
                line["tls_vs_plain"] = (t[rep].0 / g).into();
            }
            println!("{line}");
        }
        summaries.push(case_summary(&a, size, conns, &runs, &cpu, &peers));
        println!("{}", summaries.last().expect("just pushed"));
    }
    println!("{}", run_summary(&a, &peers, &summaries, &counts));
    drop(fronts_by_size);
    drop(servers);
    Ok(())
}

/// The JSON key a contender's numbers go under in the rows.
fn json_key(name: &str) -> &str {
    match name {
        "guard" => "guarded",
        "guard_tls" => "guarded_tls",
        "guard_pipelined" => "guarded_pipelined",
        other => other,
    }
}

/// The run's last row: every case's targets met or not, and the counters.
fn run_summary(
    a: &GuardBenchArgs,
    peers: &[&str],
    summaries: &[serde_json::Value],
    counts: &std::collections::BTreeMap<&str, Reading>,
) -> serde_json::Value {
    let side = |r: Option<&Reading>| {
        let (hw, sw) = Reading::json_fields(r);
        serde_json::json!({ "hw": hw, "sw": sw })
    };
    let pmc_json = a.pmc.then(|| {
        let mut m = serde_json::Map::new();
        for (name, r) in counts {
            m.insert(json_key(name).to_owned(), side(Some(r)));
        }
        serde_json::Value::Object(m)
    });
    let met = |k: &str| summaries.iter().all(|s| s["targets"][k]["met"].as_bool() != Some(false));
    let judged = a.rate.is_none();
    serde_json::json!({
        "bench": "guard_summary",
        "case": a.case,
        "threads": a.threads,
        "duration_s": a.duration,
        "reps": a.reps,
        "offered_rps": a.rate,
        "peers": peers,
        "cases": summaries.len(),
        "pmc": pmc_json,
        // Below saturation every path delivers the offered rate: the
        // targets are judged on the closed loop's peak only.
        "targets": judged.then(|| serde_json::json!({
            "guard_vs_direct": {"min": 0.7, "met": met("guard_vs_direct")},
            "guard_vs_nginx": {"min": 1.5, "met": met("guard_vs_nginx")},
            "guard_vs_haproxy": {"min": 1.5, "met": met("guard_vs_haproxy")},
            "p99_no_worse_than_peers": {"met": met("p99_no_worse_than_peers")},
        })),
    })
}

/// One case's medians, the guard's ratios against the direct path and
/// each peer, and the targets judged (closed loop only).
fn case_summary(
    a: &GuardBenchArgs,
    size: usize,
    conns: usize,
    runs: &std::collections::BTreeMap<&str, Vec<(f64, f64)>>,
    cpu: &std::collections::BTreeMap<&str, Vec<f64>>,
    peers: &[&str],
) -> serde_json::Value {
    let med =
        |name: &str, f: fn(&(f64, f64)) -> f64| runs.get(name).map(|r| median(&r.iter().map(f).collect::<Vec<_>>()));
    let rps = |name| med(name, |r| r.0);
    let p99 = |name| med(name, |r| r.1);
    // Ratios are medians of each repetition's pair (the same moment of the machine).
    let pair = |num: &str, den: &str| -> Option<f64> {
        let (n, d) = (runs.get(num)?, runs.get(den)?);
        Some(median(&n.iter().zip(d).map(|(n, d)| n.0 / d.0).collect::<Vec<_>>()))
    };
    let judged = a.rate.is_none();
    let mut s = serde_json::json!({
        "bench": "guard_case",
        "case": a.case,
        "size_bytes": size,
        "connections": conns,
        "threads": a.threads,
        "duration_s": a.duration,
        "reps": a.reps,
        "offered_rps": a.rate,
        "median_direct_rps": rps("direct"),
        "median_guarded_rps": rps("guard"),
        "median_direct_p99_us": p99("direct"),
        "median_guarded_p99_us": p99("guard"),
        "median_ratio": pair("guard", "direct"),
        "median_guarded_tls_rps": rps("guard_tls"),
        "median_guarded_tls_p99_us": p99("guard_tls"),
        "median_tls_vs_plain": pair("guard_tls", "guard"),
        "guard_pipeline": a.guard_pipeline,
        "median_guarded_pipelined_rps": rps("guard_pipelined"),
        "median_guarded_pipelined_p99_us": p99("guard_pipelined"),
        "median_pipelined_vs_plain": pair("guard_pipelined", "guard"),
    });
    for (name, us) in cpu {
        s[format!("median_{}_cpu_us_per_req", json_key(name))] = median(us).into();
    }
    let mut targets = serde_json::Map::new();
    let ratio = pair("guard", "direct").unwrap_or(f64::NAN);
    targets.insert("guard_vs_direct".into(), serde_json::json!({"min": 0.7, "value": ratio, "met": ratio >= 0.7}));
    // The guard at its defaults, and pipelined when measured.
    let guards = ["guard", "guard_pipelined"].into_iter().filter(|g| runs.contains_key(g));
    for (g, name) in guards.map(|g| (g, g.replace("guard_", ""))) {
        let mut p99_ok = true;
        for &p in peers {
            let r = pair(g, p).unwrap_or(f64::NAN);
            s[format!("median_{p}_rps")] = rps(p).into();
            s[format!("median_{p}_p99_us")] = p99(p).into();
            s[format!("{name}_vs_{p}")] = r.into();
            // CPU per request, the peer's over the guard's: how much more
            // work the peer spends on each request, whatever share of the
            // cores each front got in its runs.
            if let (Some(gc), Some(pc)) = (cpu.get(g), cpu.get(p)) {
                let e = median(&gc.iter().zip(pc).map(|(g, p)| p / g).collect::<Vec<_>>());
                s[format!("{name}_cpu_efficiency_vs_{p}")] = e.into();
            }
            targets.insert(format!("{name}_vs_{p}"), serde_json::json!({"min": 1.5, "value": r, "met": r >= 1.5}));
            p99_ok &= p99(g) <= p99(p);
        }
        if !peers.is_empty() {
            let key =
                if g == "guard" { "p99_no_worse_than_peers".into() } else { format!("{name}_p99_no_worse_than_peers") };
            targets.insert(key, serde_json::json!({ "met": p99_ok }));
        }
    }
    s["targets"] = if judged { serde_json::Value::Object(targets) } else { serde_json::Value::Null };
    s
}

/// One `sluice http-load` run as the benchmark's flags say.
struct Load<'a> {
    exe: &'a Path,
    threads: &'a str,
    a: &'a GuardBenchArgs,
}

impl Load<'_> {
    /// What a run against `addr` served; an error if any request failed
    /// (a limit was reached?).
    fn rps(&self, addr: &str, tls: bool, conns: usize) -> Result<Served> {
        let a = self.a;
        let url = if tls { format!("https://{addr}/") } else { format!("http://{addr}/") };
        let (conns, dur) = (conns.to_string(), a.duration.to_string());
        let mut load = Command::new(self.exe);
        load.args(["http-load", "--url", &url, "--threads", self.threads, "--connections", &conns]).args([
            "--duration",
            &dur,
            "--source",
            &a.source,
            "--json",
        ]);
        if let Some(r) = a.rate {
            load.args(["--rate", &r.to_string()]);
        }
        if tls {
            load.arg("--tls-insecure");
        }
        let out = load.output().context("running sluice http-load")?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("http-load printed no JSON report")?;
        let errors = v["errors"]
            .as_object()
            .map_or(0, |e| e.iter().filter(|(k, _)| *k != "status").filter_map(|(_, n)| n.as_u64()).sum::<u64>());
        if errors > 0 || v["errors"]["status"].as_object().is_some_and(|s| !s.is_empty()) {
            bail!("http-load to {addr} had errors (a limit was reached?): {}", v["errors"]);
        }
        let field = |k: &str| v[k].as_f64().with_context(|| format!("http-load's report has no {k}"));
        Ok(Served {
            rps: field("rps")?,
            p99_us: v["latency_us"]["p99"].as_f64().context("http-load's report has no p99")?,
            requests: field("requests")? as u64,
            seconds: field("duration_s")?,
        })
    }
}

/// One load run's report: what the rows and the CPU per request need.
struct Served {
    rps: f64,
    p99_us: f64,
    requests: u64,
    seconds: f64,
}
