//! `sluice-bench guard --http2` (issue 59): h2load over TLS (ALPN `h2`)
//! through the guard, nginx (1 worker) and HAProxy (1 thread), each
//! terminating TLS with the same self-signed certificate and speaking
//! HTTP/1.1 keep-alive to one `sluice http-serve`, every front's
//! per-address limits on but far above the load. The contenders alternate
//! (repetition k starts at the k-th); one JSON line per contender per
//! repetition, one summary with the medians and the guard's ratios. The
//! goal (1.2x both peers) is reported, not asserted.

use crate::fronts;
use crate::guard::{guard, serve, tls_flags, Killed, LIMITS, PEER_LIMITS};
use anyhow::{bail, Context, Result};
use serde_json::json;
use sluice_bench::median;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::guard::GuardBenchArgs;

/// The peers' limits are guard.rs's [`PEER_LIMITS`]. h2load's connections
/// all come from 127.0.0.1, so that one address carries the whole rate:
/// 60,000 requests/s (the guard's largest `--request-rate`; it counts
/// streams) is above what any front here serves, and a run that reached it
/// would show refused requests in `failed`.
/// The goal issue 59 sets: the guard's req/s at least this many times each peer's.
const GOAL: f64 = 1.2;

/// One h2load run's numbers.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    rps: f64,
    p99_us: f64,
    /// Requests h2load was asked for (-n).
    requests: u64,
    /// Requests not answered 2xx: failed, errored, timed out, other statuses.
    failed: u64,
}

impl Outcome {
    /// 2xx responses per second: h2load's req/s times the share answered 2xx.
    fn ok_rps(&self) -> f64 {
        self.rps * (self.requests - self.failed) as f64 / self.requests as f64
    }
}

pub fn run(a: &GuardBenchArgs, exe: &Path) -> Result<()> {
    let names = contenders(a)?;
    if a.reps == 0 || a.h2_clients == 0 || a.h2_streams == 0 || a.h2_requests < a.h2_clients as u64 {
        bail!("--http2: --reps, --h2-clients and --h2-streams at least 1, --h2-requests at least --h2-clients");
    }
    let dir = tempfile::tempdir().context("a temporary directory")?;
    // Every front lives for the whole run; a run of -n requests has no set
    // length, so a generous bound (each front is killed at the end anyway).
    let total = (a.reps * names.len() * 600 + 60).to_string();
    let (_server, upstream) = serve(exe, "1", &total, a.h2_size)?;
    let tls = tls_flags(dir.path())?;
    let mut fronts: Vec<(&str, Killed, String)> = Vec::new();
    for name in &names {
        let (child, addr) = start_front(name, exe, &upstream, &total, &tls, dir.path())
            .with_context(|| format!("starting {name} with TLS and HTTP/2"))?;
        fronts.push((name, child, addr));
    }
    let mut runs: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for rep in 0..a.reps {
        for k in 0..fronts.len() {
            let (name, _, addr) = &fronts[(rep + k) % fronts.len()];
            let log = dir.path().join(format!("h2load-{name}-{rep}.log"));
            let o = h2load(a, addr, &log).with_context(|| format!("h2load through {name}, repetition {rep}"))?;
            eprintln!(
                "bench guard --http2: rep {rep} {name:<8} {:>9.0} req/s, p99 {:.0} us, {} of {} not 2xx",
                o.rps, o.p99_us, o.failed, o.requests
            );
            // A failed request is reported in the row, never dropped; a
            // refusal (a 429) is quicker than a proxied answer, so `ok_rps`
            // counts the 2xx responses alone, and the summary goes by it.
            println!(
                "{}",
                json!({"bench": "guard_http2", "contender": name, "rep": rep, "rps": o.rps, "ok_rps": o.ok_rps(),
                       "p99_us": o.p99_us, "requests": o.requests, "failed": o.failed, "all_2xx": o.failed == 0})
            );
            runs.entry(name).or_default().push(o);
        }
    }
    println!("{}", summary(a, &runs));
    drop(fronts);
    Ok(())
}

/// The contenders asked for (default: all three), each checked to be
/// known and, for the peers, installed; h2load too.
fn contenders(a: &GuardBenchArgs) -> Result<Vec<String>> {
    let names = a.contenders.clone().unwrap_or_else(|| vec!["guard".into(), "nginx".into(), "haproxy".into()]);
    if names.is_empty() {
        bail!("--http2: --contenders needs at least one of guard, nginx, haproxy");
    }
    for n in &names {
        match n.as_str() {
            "guard" => {}
            // `-v` is the flag both know; each prints its version and exits 0.
            "nginx" | "haproxy" if !on_path(n, "-v") => {
                bail!("--http2: {n} is not installed (apt-get install {n}), or leave it out of --contenders")
            }
            "nginx" | "haproxy" => {}
            other => bail!("--http2: unknown contender {other:?} (guard, nginx, haproxy)"),
        }
    }
    if !on_path("h2load", "--version") {
        bail!("--http2: h2load is not installed (apt-get install nghttp2-client)");
    }
    Ok(names)
}

fn on_path(tool: &str, flag: &str) -> bool {
    Command::new(tool).arg(flag).output().is_ok_and(|o| o.status.success())
}

/// Start one front with TLS and HTTP/2 in front of `upstream`: it and its address.
fn start_front(
    name: &str,
    exe: &Path,
    upstream: &str,
    total: &str,
    tls: &[String],
    dir: &Path,
) -> Result<(Killed, String)> {
    // tls_flags gives ["--tls-cert", CERT, "--tls-key", KEY].
    let (cert, key) = (&tls[1], &tls[3]);
    if name == "guard" {
        // HTTP/2 is on by default on a TLS listener. No `--ip-block`: the
        // peers' configurations refuse a request over the rate (429, 503)
        // and block no address, and h2load's one address would otherwise
        // be blocked for the rest of the run the first time a repetition
        // passes 60,000 requests in a second (the guard can: BENCHMARKS.md).
        let mut args: Vec<&str> = LIMITS.to_vec();
        if let Some(k) = args.iter().position(|&a| a == "--ip-block") {
            args.drain(k..k + 2);
        }
        args.extend(tls.iter().map(String::as_str));
        return guard(exe, upstream, "1", total, &args);
    }
    let port = fronts::free_port()?;
    let pdir = dir.join(name);
    std::fs::create_dir_all(&pdir)?;
    let conf = if name == "nginx" {
        fronts::nginx_conf_listen(&pdir, &nginx_h2_listen(port, cert, key)?, upstream, Some(&PEER_LIMITS))
    } else {
        // HAProxy reads the certificate and its key from one PEM file.
        let pem = pdir.join("cert-and-key.pem");
        std::fs::write(&pem, std::fs::read_to_string(cert)? + &std::fs::read_to_string(key)?)?;
        let bind = format!("bind 127.0.0.1:{port} ssl crt {} alpn h2,http/1.1", pem.display());
        // Idle upstream connections are shared by every client connection,
        // as the guard's pool and nginx's `keepalive` share theirs.
        fronts::haproxy_conf_bind(&bind, "  http-reuse always\n", upstream, Some(&PEER_LIMITS))
    };
    Ok((fronts::peer_with(name, port, &pdir, &conf)?, format!("127.0.0.1:{port}")))
}

/// nginx's `listen` for TLS and HTTP/2: `http2 on;` from 1.25.1, before it
/// (Debian bookworm's 1.22) the `http2` parameter of `listen`.
fn nginx_h2_listen(port: u16, cert: &str, key: &str) -> Result<String> {
    let out = Command::new("nginx").arg("-v").output().context("nginx -v")?;
    // nginx prints "nginx version: nginx/1.22.1" on stderr.
    let text = String::from_utf8_lossy(&out.stderr);
    let version = text.split('/').nth(1).context("nginx -v printed no version")?.trim();
    let parts: Vec<u32> = version.split('.').map_while(|p| p.parse().ok()).collect();
    let new_style = parts.as_slice() >= [1, 25, 1].as_slice();
    let listen = if new_style {
        format!("listen 127.0.0.1:{port} ssl; http2 on;")
    } else {
        format!("listen 127.0.0.1:{port} ssl http2;")
    };
    Ok(format!("{listen} ssl_certificate {cert}; ssl_certificate_key {key};"))
}

/// One h2load run against `addr` over TLS: its req/s, the p99 of the
/// per-request latencies it logs to `log`, and the requests not answered 2xx.
fn h2load(a: &GuardBenchArgs, addr: &str, log: &Path) -> Result<Outcome> {
    let out = Command::new("h2load")
        .args(["-n", &a.h2_requests.to_string(), "-c", &a.h2_clients.to_string()])
        .args(["-m", &a.h2_streams.to_string(), "-t", "1"])
        .arg(format!("--log-file={}", log.display()))
        .arg(format!("https://{addr}/"))
        .output()
        .context("running h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let o = parse_h2load(&text, a.h2_requests)
        .with_context(|| format!("h2load's report: {text}{}", String::from_utf8_lossy(&out.stderr)))?;
    let p99_us = log_p99_us(&std::fs::read_to_string(log).context("h2load's --log-file")?)?;
    Ok(Outcome { p99_us, ..o })
}

/// Parse h2load's report: req/s from "finished in", and the requests not
/// answered 2xx from "requests:" and "status codes:". An error when the
/// connection did not negotiate h2 (h2load would fall back to HTTP/1.1).
fn parse_h2load(text: &str, asked: u64) -> Result<Outcome> {
    let line = |prefix: &str| text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned));
    match line("Application protocol:") {
        Some(p) if p.trim() == "h2" => {}
        other => bail!("the front did not speak h2 (h2load's application protocol: {other:?})"),
    }
    let finished = line("finished in").context("no \"finished in\" line")?;
    let rps = finished
        .split(", ")
        .find_map(|f| f.strip_suffix(" req/s"))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .context("no req/s")?;
    // "N word, N word, ...": the number before `word`.
    let count =
        |l: &str, word: &str| l.split(", ").find_map(|f| f.trim().strip_suffix(word)?.trim().parse::<u64>().ok());
    let requests = line("requests:").context("no \"requests:\" line")?;
    let total = count(&requests, "total").context("no requests total")?;
    let succeeded = count(&requests, "succeeded").context("no requests succeeded")?;
    let codes = line("status codes:").context("no \"status codes:\" line")?;
    let ok_2xx = count(&codes, "2xx").context("no 2xx count")?;
    // h2load's "succeeded" counts any status; only a 2xx is served.
    let served = ok_2xx.min(succeeded);
    Ok(Outcome { rps, p99_us: f64::NAN, requests: total.max(asked), failed: total.max(asked) - served })
}

/// The p99 (nearest rank) of the latencies in h2load's `--log-file`: a
/// line per request, "start (µs since the epoch) TAB status TAB latency (µs)".
fn log_p99_us(log: &str) -> Result<f64> {
    let mut lat: Vec<u64> = log.lines().filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok()).collect::<Vec<_>>();
    if lat.is_empty() {
        bail!("h2load's --log-file has no requests");
    }
    lat.sort_unstable();
    let rank = (lat.len() as f64 * 0.99).ceil() as usize;
    Ok(lat[rank.clamp(1, lat.len()) - 1] as f64)
}

/// The summary: each contender's median 2xx responses/s and p99, the guard's ratio
/// to each peer (the median of each repetition's pair: the same moment
/// of the machine), and whether every request of every run was served.
fn summary(a: &GuardBenchArgs, runs: &BTreeMap<&str, Vec<Outcome>>) -> serde_json::Value {
    let mut rps = serde_json::Map::new();
    let mut p99 = serde_json::Map::new();
    let mut failed = serde_json::Map::new();
    for (name, r) in runs {
        rps.insert(name.to_string(), json!(median(&r.iter().map(Outcome::ok_rps).collect::<Vec<_>>())));
        p99.insert(name.to_string(), json!(median(&r.iter().map(|o| o.p99_us).collect::<Vec<_>>())));
        failed.insert(name.to_string(), json!(r.iter().map(|o| o.failed).sum::<u64>()));
    }
    let pair = |peer: &str| -> Option<f64> {
        let (g, p) = (runs.get("guard")?, runs.get(peer)?);
        Some(median(&g.iter().zip(p).map(|(g, p)| g.ok_rps() / p.ok_rps()).collect::<Vec<_>>()))
    };
    let (vs_nginx, vs_haproxy) = (pair("nginx"), pair("haproxy"));
    let met = |r: Option<f64>| r.map(|r| r >= GOAL);
    json!({
        "bench": "guard_http2_summary",
        "reps": a.reps,
        "h2load": {"requests": a.h2_requests, "clients": a.h2_clients, "streams": a.h2_streams, "threads": 1},
        "size_bytes": a.h2_size,
        // Of `ok_rps`: a run with refused requests is not credited for them.
        "median_rps": rps,
        "median_p99_us": p99,
        "failed": failed,
        "all_2xx": runs.values().flatten().all(|o| o.failed == 0),
        "guard_vs_nginx": vs_nginx,
        "guard_vs_haproxy": vs_haproxy,
        "goal": GOAL,
        "goal_met": {"nginx": met(vs_nginx), "haproxy": met(vs_haproxy)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "starting benchmark...\nApplication protocol: h2\n\
        finished in 1.03s, 96990.15 req/s, 4.37MB/s\n\
        requests: 100000 total, 100000 started, 100000 done, 99990 succeeded, 10 failed, 0 errored, 0 timeout\n\
        status codes: 99980 2xx, 0 3xx, 10 4xx, 0 5xx\n";

    #[test]
    fn h2load_report_counts_every_request_not_answered_2xx() {
        let o = parse_h2load(REPORT, 100_000).unwrap();
        assert_eq!((o.rps, o.requests, o.failed), (96990.15, 100_000, 20));
        assert!((o.ok_rps() - 96990.15 * 0.9998).abs() < 1e-6);
        assert!(parse_h2load(&REPORT.replace("protocol: h2", "protocol: http/1.1"), 1).is_err());
    }

    #[test]
    fn p99_is_the_nearest_rank_of_the_logged_latencies() {
        let log: String = (1..=200).map(|i| format!("1700000000000000\t200\t{i}\n")).collect();
        assert_eq!(log_p99_us(&log).unwrap(), 198.0);
        assert!(log_p99_us("").is_err());
    }
}
