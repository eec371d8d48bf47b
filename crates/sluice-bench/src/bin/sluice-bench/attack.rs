//! `sluice-bench guard --attack`: legitimate clients first, measured
//! beside the peers (issue 59). For each of `--contenders` (the guard,
//! nginx, HAProxy), a legitimate pool alone, then beside a 10,000-address
//! attack pool, through a fresh front of that kind, and with
//! `--attack-floor` a third phase: the same attack sent to a second front
//! of the same kind, so the legitimate pool's p99 there is what the
//! machine's contention alone costs it. One JSON row per contender.
//!
//! The peers are configured the way their users defend a site: nginx with
//! `limit_req` and `limit_conn` per `$binary_remote_addr`, HAProxy with a
//! stick table tracking `http_req_rate` and `conn_cur` and `http-request
//! deny` (both in `fronts.rs`, shown in BENCHMARKS.md), at the guard's
//! per-address rate. The guard blocks a breaching address at the IP level
//! (`--ip-block 60`); neither peer has that, which is the point measured.

use crate::fronts::{self, PeerLimits};
use crate::guard::{guard, serve, tls_flags, GuardBenchArgs, Killed};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The smallest range of `base`'s /8 with `n` usable hosts (network and
/// broadcast are skipped, as http-load skips them).
fn range_for(base: [u8; 4], n: usize) -> String {
    let bits = (n + 2).next_power_of_two().trailing_zeros().max(2);
    format!("{}.{}.{}.{}/{}", base[0], base[1], base[2], base[3], 32 - bits)
}

/// Sums over a pool's `per_second` from second `from` on: (2xx, all).
fn seconds_from(pool: &serde_json::Value, from: usize) -> (u64, u64) {
    let rows = pool["per_second"].as_array().map_or(&[][..], Vec::as_slice);
    rows.iter().skip(from).fold((0, 0), |(ok, all), s| {
        let n = |k: usize| s[k].as_u64().unwrap_or(0);
        (ok + n(0), all + n(0) + n(1) + n(2))
    })
}

/// The legitimate pool and the attack's, as http-load `--pool` TOML, and
/// the attack's offered rate (requests/s, all its addresses).
fn attack_pools(a: &GuardBenchArgs) -> (String, String, f64) {
    let legit = format!(
        "[[pool]]\nname = \"legit\"\nsource = \"{}\"\nconnections = {}\nrate = {}\nthreads = {}\nduration = {}\n",
        range_for([127, 10, 0, 0], a.legit_clients),
        a.legit_clients,
        a.legit_rate,
        a.threads,
        a.duration + a.attack_delay
    );
    let attack_rate = a.attack_clients as f64 * f64::from(a.limit) * f64::from(a.attack_factor);
    let attackers = format!(
        "[[pool]]\nname = \"attack\"\nsource = \"{}\"\nconnections = {}\nrate = {attack_rate}\nthreads = {}\ndelay = {}\n",
        range_for([127, 64, 0, 0], a.attack_clients),
        a.attack_clients,
        a.threads,
        a.attack_delay
    );
    (legit, attackers, attack_rate)
}

/// A front started for a phase: its process, its address, and whether it
/// prints a JSON summary when stopped (the guard does).
struct Front {
    process: Killed,
    addr: String,
    summarises: bool,
}

/// What every phase shares; one fresh front per phase (no block carries
/// over from one phase to the next).
struct AttackBed<'a> {
    a: &'a GuardBenchArgs,
    exe: &'a Path,
    dir: &'a Path,
    upstream: String,
    threads: String,
    total: String,
    /// The guard's flags: its limits, and TLS when asked.
    limits: Vec<String>,
    /// The same per-address limits in the peers' own terms.
    peer_limits: PeerLimits,
}

impl AttackBed<'_> {
    /// Starts a front of kind `contender` (`guard`, `nginx`, `haproxy`);
    /// `tag` names its own directory.
    fn front(&self, contender: &str, tag: &str) -> Result<Front> {
        if contender == "guard" {
            let limits: Vec<&str> = self.limits.iter().map(String::as_str).collect();
            let (process, addr) = guard(self.exe, &self.upstream, &self.threads, &self.total, &limits)?;
            return Ok(Front { process, addr, summarises: true });
        }
        let dir: PathBuf = self.dir.join(format!("{contender}-{tag}"));
        std::fs::create_dir_all(&dir)?;
        let port = fronts::free_port()?;
        let process = fronts::peer(contender, &self.upstream, port, &dir, Some(&self.peer_limits))?;
        Ok(Front { process, addr: format!("127.0.0.1:{port}"), summarises: false })
    }

    /// Runs http-load with `pools` through a fresh front of `contender`:
    /// its report and the front's summary (the guard's; null for a peer).
    /// `pools` may name `{ELSEWHERE}`: a second front's URL, started for
    /// the phase.
    fn phase(&self, contender: &str, name: &str, pools: &str) -> Result<(serde_json::Value, serde_json::Value)> {
        let a = self.a;
        let scheme = if a.tls { "https" } else { "http" };
        let front = self.front(contender, name)?;
        let elsewhere = match pools.contains("{ELSEWHERE}") {
            true => Some(self.front(contender, &format!("{name}-elsewhere"))?),
            false => None,
        };
        let pools = match &elsewhere {
            Some(other) => pools.replace("{ELSEWHERE}", &format!("{scheme}://{}/", other.addr)),
            None => pools.to_owned(),
        };
        let file = self.dir.join(format!("{contender}-{name}.toml"));
        std::fs::write(&file, pools)?;
        let url = format!("{scheme}://{}/", front.addr);
        let cpu_before = sluice_bench::cpu::tree_seconds(front.process.0.id());
        let out = Command::new(self.exe)
            .args(["http-load", "--url", &url, "--pool", file.to_str().context("path")?, "--json"])
            .args(["--duration", &a.duration.to_string(), "--timeout-ms", "2000"])
            .args(if a.tls { &["--tls-insecure"][..] } else { &[] })
            .output()
            .context("running sluice http-load")?;
        if !out.status.success() {
            bail!("http-load failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let load: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("http-load printed no JSON report")?;
        let cpu =
            sluice_bench::cpu::tree_seconds(front.process.0.id()).zip(cpu_before).map(|(after, before)| after - before);
        let mut summary = if front.summarises { front.process.summary()? } else { serde_json::Value::Null };
        if let (Some(m), Some(cpu)) = (summary.as_object_mut(), cpu) {
            m.insert("cpu_s".into(), cpu.into());
        }
        Ok((load, summary))
    }
}

/// The guard's flags for the attack: the per-address rate, an IP block on
/// a breach, and the capacity flags asked for.
fn guard_limits(a: &GuardBenchArgs, dir: &Path) -> Result<Vec<String>> {
    let limit = a.limit.to_string();
    let mut limits: Vec<String> = ["--request-rate", &limit, "--request-burst", &limit, "--ip-block", "60", "--json"]
        .into_iter()
        .map(String::from)
        .collect();
    if a.guard_max_connections > 0 {
        limits.extend(["--max-connections".into(), a.guard_max_connections.to_string()]);
    }
    if a.guard_max_inflight > 0 {
        limits.extend(["--upstream-max-inflight".into(), a.guard_max_inflight.to_string()]);
    }
    if a.attack_pipeline > 1 {
        limits.extend(["--upstream-pipeline".into(), a.attack_pipeline.to_string()]);
    }
    if !a.guard_no_calm_lane {
        limits.push("--calm-lane".into());
    }
    if a.guard_no_syn_filter {
        limits.push("--no-syn-filter".into());
    }
    if a.tls {
        limits.extend(tls_flags(dir)?);
    }
    Ok(limits)
}

/// `sluice-bench guard --attack`: a row per contender.
pub fn run(a: &GuardBenchArgs, exe: &Path) -> Result<()> {
    let contenders: Vec<&str> = a.contenders.as_ref().map_or(vec!["guard"], |c| c.iter().map(String::as_str).collect());
    if let Some(c) = contenders.iter().find(|c| !matches!(**c, "guard" | "nginx" | "haproxy")) {
        bail!("--contenders: unknown front {c:?} (guard, nginx or haproxy)");
    }
    if a.tls && contenders.iter().any(|c| *c != "guard") {
        bail!("--attack --tls runs the guard alone (--contenders guard): the peers' TLS is not configured here");
    }
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let threads = a.threads.to_string();
    // Every repetition's three phases, and the warm-up: the upstream
    // outlives them all (it was sized for one repetition, and stopped in
    // the last repetitions' floor phase).
    let phases = 3 * contenders.len() as u64 * a.attack_reps.max(1) as u64 + 1;
    let total = ((a.duration + a.attack_delay + 5) * phases + 30).to_string();
    let (_server, upstream) = serve(exe, &threads, &total, 128)?;
    let clients = (a.legit_clients + a.attack_clients) as u32;
    let peer_limits = PeerLimits {
        request_rate: a.limit,
        request_burst: a.limit,
        // The guard runs without connection limits here; the pools open one
        // connection per address, so these only bound a runaway.
        connection_rate: 1000,
        concurrent_connections: 100,
        header_timeout_ms: 5000,
        line_len: 4096,
        max_connections: clients + 1000,
    };
    let limits = guard_limits(a, dir.path())?;
    let bed = AttackBed { a, exe, dir: dir.path(), upstream, threads, total, limits, peer_limits };
    if !a.attack_no_warmup {
        eprintln!("guard --attack: warming the upstream up (both pools through a guard, not measured)");
        let (legit, attackers, _) = attack_pools(a);
        bed.phase("guard", "warmup", &format!("{legit}\n{attackers}"))?;
    }
    let mut rows = Vec::new();
    for contender in contenders {
        let mut reps = Vec::new();
        for rep in 0..a.attack_reps.max(1) {
            let mut row = contender_row(&bed, contender)?;
            if a.attack_reps > 1 {
                row["bench"] = "guard_attack_rep".into();
                row["rep"] = rep.into();
                println!("{row}");
            }
            reps.push(row);
        }
        let row = median_rep(reps);
        println!("{row}");
        rows.push(row);
    }
    // Beside a peer, the targets over the rows (one row alone is
    // its own summary).
    if let Some(summary) = versus(&rows).filter(|_| rows.len() > 1) {
        println!("{summary}");
    }
    Ok(())
}

/// One contender's row from its repetitions: the one with the median
/// attacked p99 over its floor (over its own p99 alone without a floor),
/// with each repetition's p99s and ratio beside it (`reps`). One
/// repetition is its own row.
fn median_rep(mut reps: Vec<serde_json::Value>) -> serde_json::Value {
    let key = |r: &serde_json::Value| {
        let attacked = r["legit"]["p99_us_attacked"].as_f64().unwrap_or(f64::NAN);
        let base = r["floor"]["p99_us"].as_f64().or(r["legit"]["p99_us_alone"].as_f64()).unwrap_or(f64::NAN);
        attacked / base
    };
    if reps.len() == 1 {
        return reps.pop().expect("one repetition");
    }
    let all: Vec<serde_json::Value> = reps
        .iter()
        .map(|r| {
            serde_json::json!({"p99_us_attacked": r["legit"]["p99_us_attacked"], "floor_p99_us": r["floor"]["p99_us"],
                               "p99_us_alone": r["legit"]["p99_us_alone"], "ratio": key(r),
                               "success_attacked": r["legit"]["success_attacked"],
                               "floor_success": r["floor"]["success"]})
        })
        .collect();
    let mut order: Vec<usize> = (0..reps.len()).collect();
    order.sort_by(|&x, &y| key(&reps[x]).total_cmp(&key(&reps[y])));
    let mut row = reps.swap_remove(order[(order.len() - 1) / 2]);
    row["bench"] = "guard_attack".into();
    if let Some(m) = row.as_object_mut() {
        m.remove("rep");
    }
    row["reps"] = serde_json::Value::Array(all);
    row
}

/// The targets over the rows of one run: the guard's legitimate
/// success, its attacked p99 against its floor and against each peer's
/// attacked p99 (`guard_attack_summary`; none without a guard row).
fn versus(rows: &[serde_json::Value]) -> Option<serde_json::Value> {
    let guard = rows.iter().find(|r| r["contender"] == "guard")?;
    let p99 = |r: &serde_json::Value| r["legit"]["p99_us_attacked"].as_f64().unwrap_or(f64::NAN);
    let success = guard["legit"]["success_attacked"].as_f64().unwrap_or(0.0);
    let floor = guard["floor"]["p99_us"].as_f64();
    let over_floor = floor.map(|f| p99(guard) / f);
    let peers: serde_json::Map<String, serde_json::Value> = (rows.iter())
        .filter(|r| r["contender"] != "guard")
        .map(|r| {
            let ratio = p99(guard) / p99(r);
            let name = r["contender"].as_str().unwrap_or("?").to_owned();
            (name, serde_json::json!({"p99_us_attacked": p99(r), "guard_over_peer": ratio, "met": ratio <= 1.0}))
        })
        .collect();
    Some(serde_json::json!({
        "bench": "guard_attack_summary",
        "guard_success_attacked": {"min": 0.999, "value": success, "met": success >= 0.999},
        "guard_p99_over_floor": {"max": 1.5, "value": over_floor, "met": over_floor.map(|r| r <= 1.5)},
        "guard_p99_against_peers": peers,
    }))
}

/// The phases of one contender and its row.
fn contender_row(bed: &AttackBed, contender: &str) -> Result<serde_json::Value> {
    let a = bed.a;
    let (legit, attackers, attack_rate) = attack_pools(a);
    let (alone, g_alone) = bed.phase(contender, "alone", &legit)?;
    let (both, g) = bed.phase(contender, "both", &format!("{legit}\n{attackers}"))?;
    let (floor, g_floor) = match a.attack_floor {
        true => {
            let (f, g) = bed.phase(contender, "floor", &format!("{legit}\n{attackers}url = \"{{ELSEWHERE}}\"\n"))?;
            (Some(f), g)
        }
        false => (None, serde_json::Value::Null),
    };
    // What the guard did to the attack: blocks, sheds, handshakes.
    let keys = [
        "upstream_queued",
        "upstream_queued_new",
        "upstream_queue_wait_us",
        "upstream_queue_timeouts",
        "blocked_total",
        "shed_waiting",
        "refused_max_connections",
        "refused_shed_lately",
        "calm_lane_lent",
        "calm_lane_returned",
        "paced",
        "refused_at_accept",
        "closed_blocked",
        "connections",
        "tls_handshakes",
        "max_connections",
        "syn_filter",
        "syn_filter_entries",
    ];
    let guard_summary = match g.is_null() {
        true => serde_json::Value::Null,
        false => keys.iter().map(|&k| (k.to_owned(), g[k].clone())).collect::<serde_json::Map<_, _>>().into(),
    };
    let (la, lb, at) = (&alone["pools"]["legit"], &both["pools"]["legit"], &both["pools"]["attack"]);
    let success = |p: &serde_json::Value| {
        let (ok, all) = seconds_from(p, 0);
        ok as f64 / all.max(1) as f64
    };
    let p99 = |p: &serde_json::Value| p["latency_us"]["p99"].as_f64().unwrap_or(f64::NAN);
    // What the attack meant to send after its first second, on its open-loop
    // schedule: a blocked address's requests mostly never go out (its
    // connections are closed at accept), so answered-or-failed outcomes
    // would undercount them. Refused is all of it but what came back 2xx.
    let (attack_ok, attack_outcomes) = seconds_from(at, 1);
    let meant = attack_rate * a.duration.saturating_sub(1) as f64;
    let refused = 1.0 - attack_ok as f64 / meant.max(1.0);
    let (legit_success, p99_ratio) = (success(lb), p99(lb) / p99(la));
    // The refused share is only a verdict on a front if the attackers did
    // send above the limit: an unblocked attacker under it is served by
    // design. Blocked addresses send little (refused at accept), so an
    // attack is judged if its addresses were blocked or what went out per
    // address beat the limit.
    let issued = at["issued"].as_f64().unwrap_or(0.0);
    let per_client = issued / (a.attack_clients as f64 * a.duration as f64).max(1.0);
    let blocked_share = g["blocked_total"].as_f64().map(|b| b / a.attack_clients.max(1) as f64);
    let judged = blocked_share.is_some_and(|b| b >= 0.99) || per_client > f64::from(a.limit);
    Ok(serde_json::json!({
        "bench": "guard_attack",
        "contender": contender,
        "tls": a.tls,
        "duration_s": a.duration,
        "attack_delay_s": a.attack_delay,
        "limit_per_ip": a.limit,
        "guard_max_inflight": a.guard_max_inflight,
        "guard_calm_lane": !a.guard_no_calm_lane,
        "warmup": !a.attack_no_warmup,
        "guard_pipeline": a.attack_pipeline,
        "legit": {"clients": a.legit_clients, "rate": a.legit_rate, "rps_alone": la["rps"], "rps_attacked": lb["rps"],
                  "success_alone": success(la), "success_attacked": legit_success,
                  "p99_us_alone": p99(la), "p99_us_attacked": p99(lb), "errors_attacked": lb["errors"],
                  "per_second_attacked": lb["per_second"]},
        "attack": {"clients": a.attack_clients, "offered_rate": attack_rate, "rps_answered": at["rps"],
                   "requests_after_first_second": meant, "served_after_first_second": attack_ok,
                   "outcomes_after_first_second": attack_outcomes,
                   "refused_after_first_second": refused, "sources": at["sources"], "errors": at["errors"],
                   // What http-load got out (a blocked address's requests mostly do not go out;
                   // far below the offered rate with none blocked, the load tool could not keep up).
                   "issued": at["issued"], "issued_per_client_per_s": per_client,
                   "blocked_share": blocked_share,
                   "per_second": at["per_second"]},
        "guard": guard_summary,
        // CPU seconds the legitimate pool's guard used over each phase's
        // load run (null for a peer).
        "guard_cpu_s": {"alone": g_alone["cpu_s"], "attacked": g["cpu_s"], "floor": g_floor["cpu_s"]},
        // How many client connections the front can hold at once (HAProxy's
        // is capped by this machine's file limit: `fronts::haproxy_maxconn`).
        "front_max_connections": match contender {
            "haproxy" => Some(fronts::haproxy_maxconn(bed.peer_limits.max_connections)),
            "nginx" => Some(bed.peer_limits.max_connections.min(fronts::fd_hard_limit() / 2)),
            _ => g["max_connections"].as_u64().map(|m| m as u32),
        },
        // The same attack on a second front of the same kind: the
        // legitimate p99 the machine's contention alone leaves (null
        // without --attack-floor).
        "floor": floor.as_ref().map(|f| {
            let lf = &f["pools"]["legit"];
            serde_json::json!({"p99_us": p99(lf), "success": success(lf), "p99_over_alone": p99(lf) / p99(la),
                               "attacked_over_floor": p99(lb) / p99(lf)})
        }),
        "targets": {
            "legit_success": {"min": 0.999, "value": legit_success, "met": legit_success >= 0.999},
            "legit_p99_over_alone": {"max": 2.0, "value": p99_ratio, "met": p99_ratio <= 2.0},
            "attack_refused_after_first_second": {"min": 0.99, "value": refused, "met": refused >= 0.99,
                "judged": judged},
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::median_rep;

    fn rep(attacked: f64, floor: f64) -> serde_json::Value {
        serde_json::json!({"bench": "guard_attack_rep", "rep": 0,
            "legit": {"p99_us_attacked": attacked, "p99_us_alone": 1.0, "success_attacked": 1.0},
            "floor": {"p99_us": floor}})
    }

    #[test]
    fn the_row_is_the_repetition_with_the_median_ratio_to_its_floor() {
        // Ratios 10, 2, 5: the median is the third, though its p99 is the largest.
        let row = median_rep(vec![rep(100.0, 10.0), rep(20.0, 10.0), rep(150.0, 30.0)]);
        assert_eq!(row["legit"]["p99_us_attacked"], 150.0);
        assert_eq!(row["bench"], "guard_attack");
        assert!(row.get("rep").is_none());
        let ratios: Vec<f64> = row["reps"].as_array().unwrap().iter().map(|r| r["ratio"].as_f64().unwrap()).collect();
        assert_eq!(ratios, [10.0, 2.0, 5.0]);
        // Even counts take the lower middle; one repetition is its own row.
        let row = median_rep(vec![rep(40.0, 10.0), rep(10.0, 10.0)]);
        assert_eq!(row["legit"]["p99_us_attacked"], 10.0);
        let one = rep(7.0, 1.0);
        assert_eq!(median_rep(vec![one.clone()]), one);
    }
}
