//! `sluice-bench guard --slow-attacks`: slowhttptest's four slow attacks
//! (slow headers `-H`, slow body `-B`, slow read `-X`, range `-R`) against
//! `sluice http-guard` with its defaults and against nginx (1 worker,
//! `proxy_pass`, its defaults), optionally HAProxy (1 thread), each in
//! front of the same `sluice http-serve --size fixed:1048576 --after-body`, while a
//! legitimate client fetches the 1 MiB page every 250 ms. Per attack and
//! contender, one JSON line: peak RSS, RSS growth per attacking connection,
//! the attack's connections closed by the front, the legitimate client's
//! success and p99; then one line with the targets judged.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fronts::{free_port, wait_listening};
use crate::guard::Killed;

/// Response size of the upstream (and of each probe).
const PAGE: usize = 1 << 20;

/// The settings of one run (from `GuardBenchArgs`).
pub struct Slow<'a> {
    pub modes: &'a [String],
    pub contenders: &'a [String],
    pub connections: usize,
    pub seconds: u64,
    pub rate: usize,
}

/// Resident memory of `pid` and its children, in KiB.
fn rss_tree_kib(pid: u32) -> u64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.split_whitespace().next()?.parse().ok()))
        })
        .unwrap_or(0);
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children.split_whitespace().filter_map(|c| c.parse().ok()).map(rss_tree_kib).sum::<u64>()
}

/// Start a contender in front of `upstream` on `port`.
fn front(exe: &Path, name: &str, upstream: &str, port: u16, dir: &Path, total: u64) -> Result<Killed> {
    let child = match name {
        "guard" => Command::new(exe)
            .args(["http-guard", "--listen", &format!("127.0.0.1:{port}"), "--upstream", upstream, "--no-pin"])
            .args(["--duration", &total.to_string(), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting sluice http-guard")?,
        "nginx" | "haproxy" => return crate::fronts::peer(name, upstream, port, dir, None),
        other => bail!("unknown contender {other:?}: guard, nginx or haproxy"),
    };
    let child = Killed(child);
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port)))?;
    Ok(child)
}

/// One GET of the page on a fresh connection: its latency if whole, else
/// what went wrong.
fn probe(addr: SocketAddr) -> Result<Duration, String> {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n").map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::with_capacity(PAGE + 512);
    s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
    let head = got.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no response head")? + 4;
    if got.starts_with(b"HTTP/1.1 200") && got.len() - head == PAGE {
        Ok(t.elapsed())
    } else {
        Err(format!("{:?}, {} body bytes", String::from_utf8_lossy(&got[..head.min(20)]), got.len() - head))
    }
}

/// slowhttptest's flags for an attack.
fn mode_flags(mode: &str) -> Result<&'static [&'static str]> {
    Ok(match mode {
        "H" => &["-H", "-i", "10", "-x", "24"],
        "B" => &["-B", "-i", "10", "-s", "65536", "-x", "10"],
        // A tiny window, 2 s between reads of 32 bytes, 8 pipelined requests.
        "X" => &["-X", "-k", "8", "-w", "1", "-y", "8", "-n", "2", "-z", "32"],
        "R" => &["-R", "-a", "5", "-b", "2000"],
        other => bail!("unknown attack {other:?}: H, B, X or R"),
    })
}

/// slowhttptest's CSV (`-g -o`): the most connections it held at once, the
/// closed count at the end, and the second by which the front had closed
/// all it would (the last second the closed count grew).
fn attack_counts(csv: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(csv).unwrap_or_default();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').map(str::trim).collect();
    let col = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
    let (connected, closed) = (col("connected"), col("closed"));
    let seconds = col("seconds");
    let (mut max_connected, mut last_closed, mut closed_by) = (0, 0, 0);
    for l in lines {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let n = |c: Option<usize>| c.and_then(|c| f.get(c)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        max_connected = max_connected.max(n(connected));
        if n(closed) > last_closed {
            (last_closed, closed_by) = (n(closed), n(seconds));
        }
    }
    (max_connected, last_closed, closed_by)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Each probe's start, and how long it took or why it failed.
type Probes = Vec<(Instant, Result<Duration, String>)>;

/// Fetch the page at `addr` every 250 ms until `stop`.
fn probe_every_250ms(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Probes> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            out.push((t, probe(addr)));
            std::thread::sleep(Duration::from_millis(250).saturating_sub(t.elapsed()));
        }
        out
    })
}

/// One attack against one contender: its JSON record.
fn one(exe: &Path, s: &Slow, mode: &str, contender: &str) -> Result<serde_json::Value> {
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let total = s.seconds + 60;
    // --after-body: an application that reads a request's body before
    // answering (answered at the head, slow bodies would hold nothing).
    let (page, total_s) = (format!("fixed:{PAGE}"), total.to_string());
    let args = ["http-serve", "--listen", "127.0.0.1:0", "--size", &page, "--after-body", "--duration", &total_s];
    let (up, upstream) = crate::guard::spawn_announced(exe, &args, "sluice: serving on ")?;
    let port = free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut f = front(exe, contender, &upstream, port, dir.path(), total)?;
    // Warm: the first requests make the upstream pool and buffers.
    for _ in 0..3 {
        probe(addr).map_err(|e| anyhow::anyhow!("the contender does not serve the page: {e}"))?;
    }
    let base = rss_tree_kib(f.0.id());
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe_every_250ms(addr, Arc::clone(&stop));
    let csv = dir.path().join("attack");
    let mut attack = Command::new("slowhttptest")
        .args(mode_flags(mode)?)
        .args(["-c", &s.connections.to_string(), "-r", &s.rate.to_string(), "-l", &s.seconds.to_string()])
        .args(["-u", &format!("http://127.0.0.1:{port}/"), "-p", "5", "-g", "-o"])
        .arg(&csv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting slowhttptest (apt-get install slowhttptest)")?;
    let (started, mut peak) = (Instant::now(), base);
    let deadline = started + Duration::from_secs(s.seconds + 30);
    while attack.try_wait()?.is_none() && Instant::now() < deadline {
        peak = peak.max(rss_tree_kib(f.0.id()));
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = attack.kill();
    let _ = attack.wait();
    // A front that cuts every attacking connection ends the attack early
    // (slowhttptest exits): the probes go on to the attack's full length,
    // so every contender is judged over the same window.
    let attack_ended = Instant::now();
    while Instant::now() < started + Duration::from_secs(s.seconds) {
        peak = peak.max(rss_tree_kib(f.0.id()));
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    let timed = prober.join().map_err(|_| anyhow::anyhow!("the probe thread panicked"))?;
    let during: Vec<f64> = timed
        .iter()
        .filter(|(t, _)| *t >= started && *t < attack_ended)
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    let probes: Vec<_> = timed.into_iter().map(|(_, r)| r).collect();
    let (max_connected, closed, closed_by) = attack_counts(&dir.path().join("attack.csv"));
    let guard_summary = if contender == "guard" {
        Command::new("kill").args(["-TERM", &f.0.id().to_string()]).status()?;
        let mut out = String::new();
        f.0.stdout.take().context("stdout")?.read_to_string(&mut out)?;
        serde_json::from_str::<serde_json::Value>(&out).ok()
    } else {
        None
    };
    drop(f);
    drop(up);
    let ok: Vec<f64> = probes.iter().flatten().map(|d| d.as_secs_f64() * 1000.0).collect();
    let mut failures = std::collections::BTreeMap::<String, u64>::new();
    for e in probes.iter().filter_map(|p| p.as_ref().err()) {
        *failures.entry(e.clone()).or_default() += 1;
    }
    let success = ok.len() as f64 / probes.len().max(1) as f64;
    let growth = (peak.saturating_sub(base)) as f64 / s.connections.max(1) as f64;
    Ok(serde_json::json!({
        "bench": "guard_slow_attack",
        "attack": mode,
        "contender": contender,
        "connections": s.connections,
        "seconds": s.seconds,
        "rss_base_kib": base,
        "rss_peak_kib": peak,
        "rss_growth_per_connection_kib": growth,
        "attack_max_connected": max_connected,
        "attack_closed_by_front": closed,
        "attack_last_closed_at_s": closed_by,
        "legit_probes": probes.len(),
        "legit_success": success,
        "legit_failures": failures,
        "legit_p50_ms": percentile(&mut ok.clone(), 0.5),
        "legit_p99_ms": percentile(&mut ok.clone(), 0.99),
        "attack_seconds": attack_ended.duration_since(started).as_secs_f64(),
        "legit_probes_during_attack": during.len(),
        "legit_p99_during_attack_ms": percentile(&mut during.clone(), 0.99),
        "guard": guard_summary.map(|g| serde_json::json!({
            "breaches": g["breaches"], "closed_idle": g["closed_idle"], "shed_waiting": g["shed_waiting"],
            "upstream_timeouts": g["upstream_timeouts"],
        })),
    }))
}

pub fn run(exe: &Path, s: &Slow) -> Result<()> {
    let mut rows = Vec::new();
    for mode in s.modes {
        for contender in s.contenders {
            let row = one(exe, s, mode, contender).with_context(|| format!("-{mode} against {contender}"))?;
            println!("{row}");
            rows.push(row);
        }
    }
    // The targets: the guard's growth <= 64 KiB per attacking connection,
    // the legitimate client always served, its p99 no worse than nginx's.
    let find = |mode: &str, who: &str| rows.iter().find(|r| r["attack"] == mode && r["contender"] == who);
    let mut targets = serde_json::Map::new();
    for mode in s.modes {
        let Some(g) = find(mode, "guard") else { continue };
        let growth = g["rss_growth_per_connection_kib"].as_f64().unwrap_or(f64::NAN);
        let success = g["legit_success"].as_f64().unwrap_or(0.0);
        let p99 = g["legit_p99_ms"].as_f64().unwrap_or(f64::NAN);
        let nginx_p99 = find(mode, "nginx").and_then(|n| n["legit_p99_ms"].as_f64());
        targets.insert(
            mode.clone(),
            serde_json::json!({
                "growth_kib": {"max": 64, "value": growth, "met": growth <= 64.0},
                "legit_success": {"min": 1.0, "value": success, "met": success >= 1.0},
                "legit_p99_vs_nginx": nginx_p99.map(|n| serde_json::json!({
                    "value": p99 / n, "max": 1.0, "met": p99 <= n,
                })),
            }),
        );
    }
    println!("{}", serde_json::json!({ "bench": "guard_slow_attacks", "targets": targets }));
    Ok(())
}
