//! `sluice-bench guard --tunnels`: connections that upgrade (a WebSocket
//! handshake answered 101) and then bounce messages off an echo upstream,
//! straight to it, through the guard at its defaults, and through nginx
//! (1 worker, upgrades passed on) and HAProxy (1 thread), the contenders
//! alternating. The clients and the echo are `sluice_bench::tunnel`.

use crate::fronts;
use crate::guard::{spawn_announced, GuardBenchArgs, Killed};
use anyhow::{bail, Context, Result};
use serde_json::json;
use sluice_bench::median;
use sluice_bench::tunnel::{drive, EchoServer};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub fn run(a: &GuardBenchArgs, exe: &Path) -> Result<()> {
    let peers: Vec<&str> = a.peers.iter().map(String::as_str).filter(|p| *p != "none").collect();
    if let Some(p) = peers.iter().find(|p| !matches!(**p, "nginx" | "haproxy")) {
        bail!("--peers: unknown peer {p:?} (nginx, haproxy or none)");
    }
    let echo = EchoServer::start().context("starting the echo upstream")?;
    let upstream = echo.addr().to_string();
    let cases: Vec<(usize, usize)> = a.sizes.iter().flat_map(|&s| a.connections.iter().map(move |&c| (s, c))).collect();
    let total = (a.duration as usize * a.reps * (2 + peers.len()) * cases.len() + 60).to_string();
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let args = ["http-guard", "--listen", "127.0.0.1:0", "--upstream", &upstream, "--duration", &total, "--no-pin"];
    let (_guard, guarded) = spawn_announced(exe, &args, "sluice: guarding on ")?;
    let mut contenders: Vec<(&str, SocketAddr, Option<Killed>)> =
        vec![("direct", echo.addr(), None), ("guard", guarded.parse().context("the guard's address")?, None)];
    for p in &peers {
        let port = fronts::free_port()?;
        let pdir = dir.path().join(p);
        std::fs::create_dir_all(&pdir)?;
        let conf = match *p {
            "nginx" => fronts::nginx_tunnel_conf(&pdir, port, &upstream),
            // HAProxy passes upgrades on in its HTTP mode as it is.
            _ => fronts::haproxy_conf(port, &upstream, None),
        };
        let killed = fronts::peer_with(p, port, &pdir, &conf)?;
        contenders.push((p, SocketAddr::from(([127, 0, 0, 1], port)), Some(killed)));
    }
    for (size, conns) in cases {
        let mut rates = vec![Vec::new(); contenders.len()];
        let mut p99s = vec![Vec::new(); contenders.len()];
        for rep in 0..a.reps {
            // Each repetition starts one contender further along.
            for k in 0..contenders.len() {
                let i = (k + rep) % contenders.len();
                let (name, addr, _) = &contenders[i];
                let o = drive(*addr, conns, size, Duration::from_secs(a.duration))
                    .with_context(|| format!("{name}: {conns} tunnels, {size}-byte messages"))?;
                eprintln!(
                    "bench guard --tunnels: {size} B x {conns}: {name:<8} {:>9.0} msg/s, p99 {} us",
                    o.per_second(),
                    o.p99_us
                );
                rates[i].push(o.per_second());
                p99s[i].push(o.p99_us);
            }
        }
        let mut row = json!({"bench": "guard_tunnels", "size_bytes": size, "connections": conns, "reps": a.reps, "duration_s": a.duration});
        for (i, (name, _, _)) in contenders.iter().enumerate() {
            row[format!("median_{name}_msg_per_s")] = json!(median(&rates[i]));
            row[format!("median_{name}_p99_us")] = json!(median(&p99s[i]));
            row[format!("{name}_msg_per_s_reps")] = json!(rates[i]);
        }
        let guard = median(&rates[1]);
        row["guard_vs_direct"] = json!(guard / median(&rates[0]));
        for (i, (name, _, _)) in contenders.iter().enumerate().skip(2) {
            row[format!("guard_vs_{name}")] = json!(guard / median(&rates[i]));
        }
        println!("{row}");
    }
    Ok(())
}
