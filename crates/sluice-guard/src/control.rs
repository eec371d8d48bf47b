//! An http-guard's control socket (`http-guard --control PATH`): `sluice
//! ctl` asks which clients are blocked (`blocks`), blocks or lets one in at
//! once (`block ADDR [timeout S]`, `unblock ADDR`) and which clients send
//! the most (`clients [N]`), over the same socket, access rules and
//! request frame as a bridge's ([`sluice_control::socket`]); the commands
//! ([`GuardCommand`]) and their text ([`render_text`]) are the guard's own.

use crate::Shared;
use serde_json::json;
use sluice_control::command::{addr, timeout, want, words, Protocol, Role, SetCommand};
use sluice_control::socket::{self, Access, CtlRequest, Deliver, Serving, SocketCounters, SocketError};
use std::net::IpAddr;
use std::path::Path;
use std::sync::mpsc::channel;
use std::sync::Arc;

/// A command to an http-guard's control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardCommand {
    /// `blocks`: the blocks in force.
    Blocks,
    /// `block ADDR [timeout S]`: block a client (its address's network) now.
    Block { client: IpAddr, timeout: Option<u32> },
    /// `unblock ADDR`: lift a client's block now.
    Unblock { client: IpAddr },
    /// `clients [N]`: the clients with the highest request rates.
    Clients { top: usize },
    /// `stats`: the guard's counters (its `--json` summary's, less the
    /// block log) and its control socket's.
    Stats,
}

impl GuardCommand {
    /// The verbs, for a refusal's list.
    pub const VERBS: &'static str = "blocks, block, unblock, clients, stats";
}

impl Protocol for GuardCommand {
    fn parse_line(line: &str) -> Result<Option<GuardCommand>, String> {
        let w = words(line);
        let Some((&verb, args)) = w.split_first() else { return Ok(None) };
        let cmd = match verb {
            "blocks" => want(args, 0, "blocks").map(|()| GuardCommand::Blocks)?,
            "block" => {
                if !(args.len() == 1 || args.len() == 3 && args[1] == "timeout") {
                    return Err("usage: block ADDR [timeout SECONDS]".into());
                }
                let timeout = args.get(2).map(|t| timeout(t)).transpose()?;
                GuardCommand::Block { client: addr(args[0])?, timeout }
            }
            "unblock" => {
                want(args, 1, "unblock ADDR").and_then(|()| Ok(GuardCommand::Unblock { client: addr(args[0])? }))?
            }
            "clients" => {
                if args.len() > 1 {
                    return Err("usage: clients [N]".into());
                }
                let top = match args.first() {
                    None => 20,
                    Some(n) => n.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("`{n}` is not a count"))?,
                };
                GuardCommand::Clients { top }
            }
            "stats" => want(args, 0, "stats").map(|()| GuardCommand::Stats)?,
            v if SetCommand::VERBS.contains(&v) || ["sets", "reload", "bgp", "flows"].contains(&v) => {
                return Err(format!(
                    "`{v}` is a bridge command (and a shield's); this socket is an http-guard's: {}",
                    GuardCommand::VERBS
                ))
            }
            v => {
                return Err(format!("unknown command `{v}` (this socket is an http-guard's: {})", GuardCommand::VERBS))
            }
        };
        Ok(Some(cmd))
    }

    fn name(&self) -> &'static str {
        match self {
            GuardCommand::Blocks => "blocks",
            GuardCommand::Block { .. } => "block",
            GuardCommand::Unblock { .. } => "unblock",
            GuardCommand::Clients { .. } => "clients",
            GuardCommand::Stats => "stats",
        }
    }

    /// None is batched: each is sent alone.
    fn batchable(&self) -> bool {
        false
    }

    /// Blocking and listing blocks are what the add role may (as adding
    /// and listing a set's elements); lifting a block and reading the
    /// clients' rates need more.
    fn role(&self) -> Role {
        match self {
            GuardCommand::Blocks | GuardCommand::Block { .. } => Role::Add,
            GuardCommand::Unblock { .. } | GuardCommand::Clients { .. } | GuardCommand::Stats => Role::Admin,
        }
    }
}

/// A guard's reply as `sluice ctl` prints it without `--json` (empty for a
/// refusal, or a reply that is not a guard's).
pub fn render_text(r: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let str_of = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    if r["ok"] != true {
        return out;
    }
    if let Some(blocks) = r["blocks"].as_array() {
        for b in blocks {
            let _ = match b["expires_in"].as_u64() {
                Some(t) => writeln!(out, "{} timeout {t}", str_of(&b["client"])),
                None => writeln!(out, "{}", str_of(&b["client"])),
            };
        }
    } else if let Some(clients) = r["clients"].as_array() {
        let _ = writeln!(out, "{:<40} {:>10} {:>12} {:>8}", "client", "req/s", "connections", "blocked");
        for c in clients {
            // As strings: a JSON value's Display ignores width and alignment.
            let (n, k, b) = (c["requests_per_s"].to_string(), c["connections"].to_string(), c["blocked"].to_string());
            let _ = writeln!(out, "{:<40} {n:>10} {k:>12} {b:>8}", str_of(&c["client"]));
        }
    } else if let Some(client) = r["client"].as_str() {
        let _ = writeln!(out, "{client}: {}", str_of(&r["done"]));
    } else if let Some(o) = r.as_object().filter(|o| o.contains_key("requests")) {
        // `stats`: one `key: value` line each, as a bridge's.
        for (k, v) in o.iter().filter(|(k, _)| *k != "ok") {
            let _ = writeln!(out, "{k}: {v}");
        }
    }
    out
}

/// The socket and the thread answering it; [`GuardControl::stop`] ends both.
pub struct GuardControl {
    serving: Serving,
    answering: std::thread::JoinHandle<()>,
}

impl GuardControl {
    pub fn stop(self) {
        // The accept loop ends and drops its sender; the answering thread
        // then finds its channel closed.
        self.serving.stop();
        let _ = self.answering.join();
    }
}

/// A thread forwarding the guard's new blocks to `sinks` (a bridge's
/// control socket, a CrowdSec LAPI) until `stop`, then one last push.
pub fn spawn_forwarder(
    shared: &Shared,
    sinks: Vec<crate::block_forward::Target>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    counters: Arc<crate::block_forward::ForwardCounters>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let table = Arc::clone(&shared.table);
    // The forwarder counts a block's wait from when it takes it (once a
    // second): the time before that is taken off here, rounded up.
    let take = move || {
        let blocks = table.take_blocks().into_iter();
        blocks.filter_map(|b| {
            let secs = match b.secs {
                0 => 0,
                s => s.checked_sub(crate::block_forward::whole_secs_up(b.at.elapsed())).filter(|&s| s > 0)?,
            };
            Some(crate::block_forward::ForwardedBlock { ip: b.ip.addr, len: b.ip.len, secs, limit: b.limit.into() })
        })
    };
    std::thread::Builder::new()
        .name("guard-forward".into())
        .spawn(move || crate::block_forward::run(move || take().collect(), sinks, stop, counters))
}

/// `--tls-cert`, `--block-ja4`, `--never-block`: reread the certificate
/// files, the JA4 list and the never-block list on each SIGHUP; a failed
/// reload keeps the old one and says why. Without any, SIGHUP is logged
/// and ignored ([`sluice_control::signals`]): a plain guard has nothing to reread,
/// and must not die of it.
pub fn reread_on_sighup(shared: &Shared) -> std::io::Result<()> {
    let (store, ja4) = (shared.tls.clone(), shared.ja4_block.clone());
    let safety = std::sync::Arc::clone(shared.table.safety());
    if store.is_none() && ja4.is_none() && !safety.has_file() {
        return sluice_control::signals::install();
    }
    sluice_control::signals::on_sighup(move || {
        safety.reload_logged("SIGHUP");
        match store.as_ref().map(|s| s.reload()) {
            Some(Ok(())) => tracing::info!(event = "tls_reload", "certificates reloaded (SIGHUP)"),
            Some(Err(e)) => {
                tracing::error!(event = "tls_reload_failed", "reload (SIGHUP) failed, old certificates kept: {e}")
            }
            None => {}
        }
        match ja4.as_ref().map(|l| l.reload()) {
            Some(Ok(n)) => tracing::info!(event = "ja4_reload", "--block-ja4 reloaded (SIGHUP): {n} fingerprints"),
            Some(Err(e)) => {
                tracing::error!(event = "ja4_reload_failed", "reload (SIGHUP) failed, old JA4 list kept: {e}")
            }
            None => {}
        }
    })
}

/// Serve `path` for the guard whose threads share `shared`, to its owner
/// and whom `access` names.
pub fn serve(
    path: &Path,
    access: Access,
    shared: Arc<Shared>,
    counters: Arc<SocketCounters>,
) -> Result<GuardControl, SocketError> {
    let (tx, rx) = channel::<CtlRequest<GuardCommand>>();
    let deliver: Deliver<GuardCommand> = Arc::new(move |r| tx.send(r).is_ok());
    let socket_counters = Arc::clone(&counters);
    let serving = socket::serve(path, access, deliver, counters)?;
    let answering = std::thread::Builder::new()
        .name("sluice-guard-ctl".into())
        .spawn(move || {
            for req in rx {
                // Never batched: one command a request.
                let _ = req.reply.send(answer(&shared, &req.commands[0].1, &socket_counters));
            }
        })
        .map_err(|error| SocketError::Io { path: path.display().to_string(), error })?;
    Ok(GuardControl { serving, answering })
}

/// The reply to one command, as JSON (`socket`: the control socket's own
/// counters, for `stats`).
pub fn answer(shared: &Shared, cmd: &GuardCommand, socket: &SocketCounters) -> String {
    let (t, now) = (&shared.table, shared.started.elapsed().as_millis() as u64);
    match cmd {
        GuardCommand::Blocks => {
            let blocks: Vec<_> = t
                .block_rows(now)
                .iter()
                .map(|b| json!({ "client": b.client.to_string(), "expires_in": b.expires_in, "limit": b.limit, "ja4": b.ja4 }))
                .collect();
            json!({ "ok": true, "blocks": blocks }).to_string()
        }
        GuardCommand::Block { client, timeout } => {
            let new = match t.try_block_for(*client, timeout.map_or(0, u64::from), "manual", None, now) {
                Ok(new) => new,
                Err(r) => {
                    let mut v = json!({ "ok": false, "reason": r.reason() });
                    v["error"] = format!("block {} refused ({}): {r}", t.net(*client), r.reason()).into();
                    return v.to_string();
                }
            };
            let done = if new { "blocked" } else { "already blocked (or the block table is full)" };
            if new {
                // The line a limit's block writes (docs/http-guard.md), so a
                // manual block is in the same log; an operator's, so no limiter.
                let (client, secs) = (t.net(*client), timeout.map_or(0, u64::from));
                tracing::info!(event = "block", client = %client, limit = "manual", ja4 = "-", secs,
                    "blocked {client} (manual, sluice ctl) for {secs} s");
            }
            json!({ "ok": true, "client": t.net(*client).to_string(), "done": done, "new": new }).to_string()
        }
        GuardCommand::Unblock { client } => {
            let was = t.unblock(*client, now);
            let done = if was { "unblocked" } else { "was not blocked" };
            if was {
                let client = t.net(*client);
                tracing::info!(event = "unblock", client = %client, "unblocked {client} (sluice ctl)");
            }
            json!({ "ok": true, "client": t.net(*client).to_string(), "done": done, "was_blocked": was }).to_string()
        }
        GuardCommand::Clients { top } => json!({ "ok": true, "clients": t.top_clients(*top, now) }).to_string(),
        GuardCommand::Stats => {
            let mut v = serde_json::to_value(shared.report()).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                // `blocks` lists them; the log's first 1024 would swamp the rest.
                o.remove("blocks");
                o.insert("ok".into(), true.into());
                let ctl: serde_json::Map<_, _> =
                    socket.totals().pairs().into_iter().map(|(k, n)| (format!("ctl_{k}"), n.into())).collect();
                o.extend(ctl);
            }
            v.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientTable, KeyPrefixes, Limit, Limits};
    use std::net::IpAddr;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    /// What the socket answers `text` with: the socket's refusal of a
    /// request that does not parse, else the guard's answer.
    fn ask(shared: &Shared, text: &str) -> serde_json::Value {
        match sluice_control::command::parse_request::<GuardCommand>(text) {
            Ok(cmds) => serde_json::from_str(&answer(shared, &cmds[0].1, &SocketCounters::default())).unwrap(),
            Err(e) => serde_json::from_str(&socket::error_json(&e.to_string(), Some(e.line))).unwrap(),
        }
    }

    fn shared(table: ClientTable) -> Shared {
        Shared {
            table: Arc::new(table),
            max_connections: 10,
            threads: Vec::new(),
            started: Instant::now(),
            tls: None,
            ja4_block: None,
            ja4_stats: Default::default(),
            block_file_writes: Arc::new(AtomicU64::new(0)),
            syn_filter: Err("a test".into()),
            lanes: Vec::new(),
        }
    }

    #[test]
    fn blocks_are_listed_made_and_lifted() {
        let limits = Limits { request_rate: Some(100), ..Limits::default() };
        let shared = shared(ClientTable::new(limits, 100).with_key_prefixes(KeyPrefixes { v4: 32, v6: 64 }));
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "2001:db8:0:9::7".parse().unwrap());
        shared.table.on_accept(a, 0);
        for _ in 0..3 {
            shared.table.on_request(a, 0).unwrap();
        }
        assert!(shared.table.block(a, 0, Limit::RequestRate, 0));
        let want = json!([{ "client": "192.0.2.1", "expires_in": null, "limit": "request_rate", "ja4": null }]);
        assert_eq!(ask(&shared, "blocks")["blocks"], want);
        let top = ask(&shared, "clients 1");
        assert_eq!(
            top["clients"],
            json!([{ "client": "192.0.2.1", "requests_per_s": 3, "connections": 1, "blocked": true }])
        );
        let r = ask(&shared, "block 2001:db8:0:9::1 timeout 60");
        assert_eq!((&r["client"], &r["done"]), (&json!("2001:db8:0:9::/64"), &json!("blocked")));
        assert!(shared.table.is_blocked(b, 1), "the whole /64");
        assert_eq!(ask(&shared, "block 2001:db8:0:9::2")["new"], false);
        assert_eq!(ask(&shared, "unblock 192.0.2.1")["was_blocked"], true);
        assert_eq!(ask(&shared, "unblock 192.0.2.1")["was_blocked"], false);
        assert!(!shared.table.is_blocked(a, 1));
        let refused = ask(&shared, "add guard 192.0.2.9");
        assert!(refused["ok"] == false && refused["error"].as_str().unwrap().contains("bridge command"), "{refused}");
        assert_eq!(ask(&shared, "block nope")["ok"], false);
        let stats = ask(&shared, "stats");
        assert_eq!(
            (&stats["ok"], &stats["blocked_total"], &stats["ctl_forbidden"]),
            (&json!(true), &json!(2), &json!(0))
        );
        assert!(stats.get("blocks").is_none() && stats["breaches"].is_object(), "{stats}");
        let text = render_text(&stats);
        assert!(text.lines().any(|l| l == "blocked_total: 2") && !text.lines().any(|l| l.starts_with("ok:")), "{text}");
    }

    #[test]
    fn a_block_the_safety_net_refuses_is_an_error_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "192.0.2.0/28\n").unwrap();
        let safety = Arc::new(sluice_control::safety::Safety::load(Some(&f), 8, 16).unwrap());
        let shared = shared(ClientTable::new(Limits::default(), 100).with_safety(safety));
        let r = ask(&shared, "block 192.0.2.5 timeout 60");
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(
            r["error"],
            "block 192.0.2.5 refused (never_block): it overlaps 192.0.2.0/28, which is on the never-block list"
        );
        assert_eq!(r["reason"], "never_block");
        assert!(!shared.table.is_blocked("192.0.2.5".parse().unwrap(), 1));
        assert!(ask(&shared, "blocks")["blocks"].as_array().unwrap().is_empty());
        assert_eq!(ask(&shared, "block 192.0.2.16")["done"], "blocked", "outside the /28");
    }
}
