//! The block file: the blocks in force as `ipset save` lines, so a
//! firewall can drop the addresses at L3 (`ipset restore`, or sluice's own
//! list parser: `set guard from "FILE"` + `drop saddr @guard` in a rule file
//! that `sluice bridge --watch` reloads). Written whole to a temporary file
//! in the same directory and renamed over the old one, so a reader sees the
//! old list or the new one, never half of one.

use crate::net::ClientNet;
use crate::table::ClientTable;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ipset set names (ipset keeps one family per set).
pub const SET_V4: &str = "sluice-guard";
pub const SET_V6: &str = "sluice-guard6";
/// Writes are coalesced: at most one per this interval.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);
/// How often expiries and changes are looked at.
const TICK: Duration = Duration::from_millis(50);

/// The file's text: a `create` line per family (so an empty list is still a
/// valid ipset save file, which sluice's parser skips), then one `add` line
/// per address or network (`--key-prefix-*`) with the seconds left, rounded
/// up; permanent blocks have none. `hash:net`, which takes both.
pub fn render(blocks: &[(ClientNet, Option<u64>)]) -> String {
    let mut out = format!("create {SET_V4} hash:net family inet hashsize 1024 maxelem 1048576 timeout 0\n");
    let v6 = blocks.iter().any(|(ip, _)| ip.addr.is_ipv6());
    if v6 {
        out.push_str(&format!("create {SET_V6} hash:net family inet6 hashsize 1024 maxelem 1048576 timeout 0\n"));
    }
    for (ip, left) in blocks {
        let set = if ip.addr.is_ipv4() { SET_V4 } else { SET_V6 };
        match left {
            Some(s) => out.push_str(&format!("add {set} {ip} timeout {s}\n")),
            None => out.push_str(&format!("add {set} {ip}\n")),
        }
    }
    out
}

/// Write the list `text` to `path` whole or not at all.
pub fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    sluice_rules::write_atomic(path, text.as_bytes())
}

/// An empty list, written before the guard accepts anything: stale blocks
/// from an earlier run do not linger, a bad path fails at start, and a
/// bridge can load the file as soon as the guard says it is up.
pub fn start(path: &Path, writes: &AtomicU64) -> io::Result<()> {
    write_atomic(path, &render(&[]))?;
    writes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Publishes the table's blocks to `path` until `stop`; also drops expired
/// blocks (so the accept check and the file agree). Returns the writes made.
pub fn run(
    table: Arc<ClientTable>,
    path: Option<PathBuf>,
    started: Instant,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
) -> io::Result<()> {
    let now_ms = || started.elapsed().as_millis() as u64;
    let mut last_write: Option<Instant> = None;
    let mut pending = false;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        table.expire(now_ms());
        pending |= table.dirty.swap(false, Ordering::AcqRel);
        let due = last_write.is_none_or(|t| t.elapsed() >= MIN_INTERVAL);
        if pending && due {
            pending = false;
            last_write = Some(Instant::now());
            if let Some(p) = &path {
                write_atomic(p, &render(&table.blocks(now_ms())))?;
                writes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Limit, Limits};
    use crate::net::KeyPrefixes;
    use std::net::IpAddr;

    #[test]
    fn sluice_rules_reads_what_is_published_timeouts_included() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocks.txt");
        // Empty: still a valid list, with no entries.
        write_atomic(&path, &render(&[])).unwrap();
        let l = sluice_rules::load_list(&path, false).unwrap();
        assert!(l.prefixes.is_empty() && l.skipped.is_empty());

        let t = ClientTable::new(Limits::default(), 100).with_key_prefixes(KeyPrefixes { v4: 32, v6: 64 });
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("127.3.0.1".parse().unwrap(), "127.9.9.9".parse().unwrap(), "2001:db8:0:7::1".parse().unwrap());
        t.block(a, 57, Limit::RequestRate, 0);
        t.block(b, 0, Limit::HttpParse, 0);
        t.block(c, 3, Limit::HttpParse, 0);
        let text = render(&t.blocks(400));
        assert!(text.contains("add sluice-guard 127.3.0.1 timeout 57\n"), "{text}");
        assert!(text.contains("add sluice-guard 127.9.9.9\n"), "{text}");
        write_atomic(&path, &text).unwrap();
        let l = sluice_rules::load_list(&path, false).unwrap();
        let got: Vec<String> = l.prefixes.iter().map(|p| p.to_string()).collect();
        assert!(text.contains("add sluice-guard6 2001:db8:0:7::/64 timeout 3\n"), "{text}");
        assert_eq!(got, ["127.3.0.1/32", "127.9.9.9/32", "2001:db8:0:7::/64"]);
        assert_eq!(l.timeouts, [(0, 57), (2, 3)]);
        // Three seconds on, the IPv6 block has lapsed for the reader too.
        assert_eq!(l.live_after(3).len(), 2);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
