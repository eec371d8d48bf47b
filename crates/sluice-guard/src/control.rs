//! An http-guard's control socket (`http-guard --control PATH`): `sluice
//! ctl` asks which clients are blocked (`blocks`), blocks or lets one in at
//! once (`block ADDR [timeout S]`, `unblock ADDR`) and which clients send
//! the most (`clients [N]`), over the same socket, access rules and
//! protocol as a bridge's ([`sluice_control::socket`]).

use crate::Shared;
use serde_json::json;
use sluice_control::control::Event;
use sluice_control::ctl::{parse_request, Command};
use sluice_control::socket::{self, error_json, Serving, SocketCounters, SocketError};
use std::path::Path;
use std::sync::mpsc::channel;
use std::sync::Arc;

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
/// and ignored ([`sluice_control::hangup`]): a plain guard has nothing to reread,
/// and must not die of it.
pub fn reread_on_sighup(shared: &Shared) -> std::io::Result<()> {
    let (store, ja4) = (shared.tls.clone(), shared.ja4_block.clone());
    let safety = std::sync::Arc::clone(shared.table.safety());
    if store.is_none() && ja4.is_none() && !safety.has_file() {
        return sluice_control::hangup::install();
    }
    sluice_control::hangup::on_sighup(move || {
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

/// Serve `path` (mode 0600, or 0660 for `group`) for the guard whose
/// threads share `shared`.
pub fn serve(
    path: &Path,
    group: Option<u32>,
    shared: Arc<Shared>,
    counters: Arc<SocketCounters>,
) -> Result<GuardControl, SocketError> {
    let (tx, rx) = channel();
    let serving = socket::serve(path, group, tx, counters)?;
    let answering = std::thread::Builder::new()
        .name("sluice-guard-ctl".into())
        .spawn(move || {
            for event in rx {
                if let Event::Ctl(req) = event {
                    let _ = req.reply.send(answer(&shared, &req.text));
                }
            }
        })
        .map_err(|error| SocketError::Io { path: path.display().to_string(), error })?;
    Ok(GuardControl { serving, answering })
}

/// The reply to one request, as JSON.
pub fn answer(shared: &Shared, text: &str) -> String {
    let cmds = match parse_request(text) {
        Ok(c) => c,
        Err(e) => return error_json(&e.to_string(), Some(e.line)),
    };
    let (t, now) = (&shared.table, shared.started.elapsed().as_millis() as u64);
    match &cmds[..] {
        [(_, Command::Blocks)] => {
            let blocks: Vec<_> = t
                .block_rows(now)
                .iter()
                .map(|b| json!({ "client": b.client.to_string(), "expires_in": b.expires_in, "limit": b.limit, "ja4": b.ja4 }))
                .collect();
            json!({ "ok": true, "blocks": blocks }).to_string()
        }
        [(_, Command::Block { client, timeout })] => {
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
        [(_, Command::Unblock { client })] => {
            let was = t.unblock(*client, now);
            let done = if was { "unblocked" } else { "was not blocked" };
            if was {
                let client = t.net(*client);
                tracing::info!(event = "unblock", client = %client, "unblocked {client} (sluice ctl)");
            }
            json!({ "ok": true, "client": t.net(*client).to_string(), "done": done, "was_blocked": was }).to_string()
        }
        [(_, Command::Clients { top })] => json!({ "ok": true, "clients": t.top_clients(*top, now) }).to_string(),
        _ => error_json(
            "that is a bridge command; this socket is an http-guard's (blocks, block, unblock, clients)",
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyPrefixes, Limit, Limits, Table};
    use std::net::IpAddr;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    fn ask(shared: &Shared, text: &str) -> serde_json::Value {
        serde_json::from_str(&answer(shared, text)).unwrap()
    }

    fn shared(table: Table) -> Shared {
        Shared {
            table: Arc::new(table),
            max_connections: 10,
            threads: Vec::new(),
            started: Instant::now(),
            tls: None,
            ja4_block: None,
            ja4_stats: Default::default(),
            block_file_writes: Arc::new(AtomicU64::new(0)),
        }
    }

    #[test]
    fn blocks_are_listed_made_and_lifted() {
        let limits = Limits { request_rate: Some(100), ..Limits::default() };
        let shared = shared(Table::new(limits, 100).with_key_prefixes(KeyPrefixes { v4: 32, v6: 64 }));
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
    }

    #[test]
    fn a_block_the_safety_net_refuses_is_an_error_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "192.0.2.0/28\n").unwrap();
        let safety = Arc::new(sluice_control::safety::Safety::load(Some(&f), 8, 16).unwrap());
        let shared = shared(Table::new(Limits::default(), 100).with_safety(safety));
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
