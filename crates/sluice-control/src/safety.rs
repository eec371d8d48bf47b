//! The safety net (`sluice_rules::safety`) as a running command holds it
//! ([`Safety`]): read from `--never-block FILE` and `--min-prefix-v4`/`-v6`,
//! reread on demand (SIGHUP), and its refusals logged at most [`LOG_LINES`]
//! a second. Both the guard (its blocks, `ctl block`) and the bridge (`ctl
//! add`, CrowdSec decisions, blocks forwarded from a guard) check their
//! runtime adds against one of these. The bridge's side is the [`Gate`]:
//! every runtime add is checked before it reaches a set, and each refusal is
//! counted by set and reason in [`Refusals`] (`sluice_set_refused`, the
//! counter set sizes count into too).

use sluice_rules::{NeverBlock, Prefix, Refusal, SafetyNet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// Refusals logged a second, at most; the rest are counted and summed up
/// in one line. A refusal can be an attacker's doing (a never-blocked
/// address flooding the guard, a LAPI sending wide ranges): one line per
/// refusal would let it fill the disk.
pub const LOG_LINES: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(1);

/// Lines logged in the current window, and refusals not logged.
struct LogWindow {
    since: Instant,
    lines: u32,
    more: u64,
}

/// A safety net that can be reread, and its log.
pub struct Safety {
    net: RwLock<Arc<SafetyNet>>,
    path: Option<PathBuf>,
    log: Mutex<LogWindow>,
}

impl std::fmt::Debug for Safety {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let net = self.net();
        f.debug_struct("Safety")
            .field("path", &self.path)
            .field("entries", &net.never.len())
            .field("min_v4", &net.min_v4())
            .field("min_v6", &net.min_v6())
            .finish()
    }
}

/// No list, and only a /0 refused (see [`SafetyNet::default`]).
impl Default for Safety {
    fn default() -> Safety {
        Safety::with_net(SafetyNet::default(), None)
    }
}

impl Safety {
    fn with_net(net: SafetyNet, path: Option<PathBuf>) -> Safety {
        Safety {
            net: RwLock::new(Arc::new(net)),
            path,
            log: Mutex::new(LogWindow { since: Instant::now(), lines: 0, more: 0 }),
        }
    }

    /// From the flags: the never-block file (if any) read now, so a bad
    /// line stops the start, named by file and line.
    pub fn load(path: Option<&Path>, min_v4: u8, min_v6: u8) -> Result<Safety, String> {
        let never = path.map(|p| NeverBlock::load(p).map_err(|e| format!("--never-block {e}"))).transpose()?;
        let net = SafetyNet::new(never.unwrap_or_default(), min_v4, min_v6)?;
        Ok(Safety::with_net(net, path.map(Path::to_owned)))
    }

    /// The never-block file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The net in force (one read lock; a batch checks all its lines
    /// against one).
    pub fn net(&self) -> Arc<SafetyNet> {
        Arc::clone(&self.net.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether there is a never-block file to reread.
    pub fn has_file(&self) -> bool {
        self.path.is_some()
    }

    /// Reads the never-block file again (SIGHUP): its entries, or what is
    /// wrong with it, in which case the list in force stays. Without a
    /// file, nothing to read: `Ok(None)`.
    pub fn reload(&self) -> Result<Option<usize>, String> {
        let Some(path) = &self.path else { return Ok(None) };
        let never = NeverBlock::load(path).map_err(|e| format!("--never-block {e}"))?;
        let n = never.len();
        let mut held = self.net.write().unwrap_or_else(PoisonError::into_inner);
        let new = SafetyNet::new(never, held.min_v4(), held.min_v6())?;
        *held = Arc::new(new);
        Ok(Some(n))
    }

    /// [`Safety::reload`], logged: what a SIGHUP handler calls (the
    /// bridge's reload, the guard's `control::reread_on_sighup`).
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(Some(n)) => {
                tracing::info!(
                    event = "never_block_reload",
                    entries = n,
                    "never-block list reread ({why}): {n} entries"
                )
            }
            Ok(None) => {}
            Err(e) => tracing::error!(
                event = "never_block_reload_failed",
                "never-block list reread ({why}) failed, the list in force stays: {e}"
            ),
        }
    }

    /// Whether a runtime add of `p` may go in (nothing counted or logged).
    pub fn check(&self, p: &Prefix) -> Result<(), Refusal> {
        self.net().check(p)
    }

    /// One line for a refusal (`what` says whose add: `ctl add to set
    /// blocks`, `crowdsec decision`, ...), unless [`LOG_LINES`] were logged
    /// in this second: then counted, and summed up in one line when the
    /// second is over.
    pub fn log_refusal(&self, what: &str, p: &Prefix, r: &Refusal) {
        if !self.window(|w| {
            if w.lines < LOG_LINES {
                w.lines += 1;
                true
            } else {
                w.more += 1;
                false
            }
        }) {
            return;
        }
        tracing::warn!(
            event = "add_refused",
            element = %p,
            reason = r.reason(),
            "refused {p} ({what}): {r}"
        );
    }

    /// `n` refusals not logged one by one (already counted elsewhere), for
    /// the summary line.
    pub fn not_logged(&self, n: u64) {
        self.window(|w| w.more += n);
    }

    /// The summary line of a second that is over, if refusals went
    /// unlogged in it; a refusal does it too, so call this now and then
    /// (a tick) for the line to come when refusals stop.
    pub fn flush_log(&self) {
        self.window(|_| ());
    }

    /// Runs `f` on the window, after closing the last one (its summary
    /// line) when a second has passed.
    fn window<T>(&self, f: impl FnOnce(&mut LogWindow) -> T) -> T {
        let mut w = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if w.since.elapsed() >= LOG_WINDOW {
            if w.more > 0 {
                let more = w.more;
                tracing::warn!(
                    event = "add_refused_not_logged",
                    count = more,
                    "{more} more runtime add(s) refused, not logged one by one (at most {LOG_LINES} lines a second)"
                );
            }
            (w.since, w.lines, w.more) = (Instant::now(), 0, 0);
        }
        f(&mut w)
    }

    /// Refusals waiting for their summary line (tests).
    pub fn unlogged(&self) -> u64 {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).more
    }
}

/// A refusal is logged at most this often per set and reason (with the
/// count since the last line); the counter counts every one.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Runtime adds refused, by set and reason: the `sluice_set_refused{set,
/// reason}` counter. One is shared (an `Arc`) by everything that refuses an
/// add: the set machinery here ([`REFUSED_FULL`]), and any check in front
/// of it (a safety net's `never_block`, `min_prefix`) calls
/// [`Refusals::count`] with its own reason. Reasons are fixed words
/// (`&'static str`) and sets are the rules' names, so the series are
/// bounded. Each call also logs, at most once per [`REFUSAL_LOG_EVERY`]
/// per set and reason, so a flood of refusals is a line per interval.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<BTreeMap<(String, &'static str), RefusalCount>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct RefusalCount {
    total: u64,
    /// Counted since the last log line.
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl Refusals {
    /// Counts `n` adds to `set` refused for `reason`; `what` says the last
    /// one (called only when a line is logged), e.g. `192.0.2.7/32: the set
    /// is full (maxelem 1000000)`.
    pub fn count(&self, set: &str, reason: &'static str, n: u64, what: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        let mut m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let c = m.entry((set.to_owned(), reason)).or_default();
        c.total += n;
        c.unlogged += n;
        let now = Instant::now();
        if c.logged_at.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY) {
            tracing::warn!(
                event = "set_refused",
                set,
                reason,
                refused = c.unlogged,
                "set `{set}`: {} add(s) refused ({reason}) since the last such line, {} in all; the last: {}",
                c.unlogged,
                c.total,
                what()
            );
            c.unlogged = 0;
            c.logged_at = Some(now);
        }
    }

    /// Counts `n` refusals without a line (the caller logs them itself).
    pub fn add(&self, set: &str, reason: &'static str, n: u64) {
        if n > 0 {
            let mut m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            m.entry((set.to_owned(), reason)).or_default().total += n;
        }
    }

    /// Every set's refusals of one reason.
    pub fn total(&self, reason: &str) -> u64 {
        let m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        m.iter().filter(|((_, r), _)| *r == reason).map(|(_, c)| c.total).sum()
    }

    /// Every (set, reason) with its count, sorted.
    pub fn counts(&self) -> Vec<(String, &'static str, u64)> {
        let m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        m.iter().map(|((s, r), c)| (s.clone(), *r, c.total)).collect()
    }

    /// The count for one set and reason.
    pub fn get(&self, set: &str, reason: &str) -> u64 {
        let m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        m.iter().find(|((s, r), _)| s == set && *r == reason).map_or(0, |(_, c)| c.total)
    }
}

/// What runtime adds are checked against and where refusals are counted:
/// one for the controller, a clone for each feed.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    pub safety: Arc<Safety>,
    pub refusals: Arc<Refusals>,
}

impl Gate {
    /// A refusal of `p` for `set`, counted and logged (`what` says whose
    /// add it was).
    pub fn refused(&self, set: &str, p: &Prefix, r: &Refusal, what: &str) {
        // Logged here, by the net's own limiter (a line per refusal, up to
        // its rate): counted quietly.
        self.refusals.add(set, r.reason(), 1);
        self.safety.log_refusal(&format!("{what} to set `{set}`"), p, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn a_reload_replaces_the_list_and_a_bad_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "192.0.2.1\n").unwrap();
        let s = Safety::load(Some(&f), 8, 16).unwrap();
        assert!(s.check(&pf("192.0.2.0/24")).is_err());
        assert!(s.check(&pf("198.51.100.0/24")).is_ok());
        std::fs::write(&f, "198.51.100.7\n").unwrap();
        assert_eq!(s.reload(), Ok(Some(1)));
        assert!(s.check(&pf("192.0.2.0/24")).is_ok());
        assert!(s.check(&pf("198.51.100.0/24")).is_err());
        std::fs::write(&f, "198.51.100.7\n10.0.0.0/33\n").unwrap();
        let e = s.reload().unwrap_err();
        assert!(e.starts_with(&format!("--never-block {}:2: prefix length 33", f.display())), "{e}");
        assert!(s.check(&pf("198.51.100.0/24")).is_err(), "the list in force stays");
        assert_eq!(s.check(&pf("0.0.0.0/7")).unwrap_err().reason(), "min_prefix", "the widths stay");
        assert_eq!(Safety::default().reload(), Ok(None));
        let e = Safety::load(Some(&dir.path().join("nope")), 8, 16).unwrap_err();
        assert!(e.starts_with("--never-block ") && e.contains("nope"), "{e}");
    }

    #[test]
    fn refusals_past_the_lines_of_a_second_are_only_counted() {
        let s = Safety::default();
        let r = Refusal::MinPrefix { min: 8, v6: false };
        for _ in 0..LOG_LINES + 5 {
            s.log_refusal("test", &pf("0.0.0.0/1"), &r);
        }
        s.not_logged(3);
        assert_eq!(s.unlogged(), 8);
        s.flush_log();
        assert_eq!(s.unlogged(), 8, "the second is not over");
        s.log.lock().unwrap().since -= LOG_WINDOW;
        s.flush_log();
        assert_eq!(s.unlogged(), 0, "summed up, and a new second begun");
        s.log_refusal("test", &pf("0.0.0.0/1"), &r);
        let lines = s.log.lock().unwrap().lines;
        assert_eq!((lines, s.unlogged()), (1, 0));
    }

    #[test]
    fn refusals_are_counted_by_set_and_reason() {
        let r = Refusals::default();
        r.add("blocks", "never_block", 2);
        r.add("crowdsec", "min_prefix", 1);
        r.count("blocks", "never_block", 1, || "192.0.2.1/32".into());
        r.add("blocks", "min_prefix", 0);
        assert_eq!(r.get("blocks", "never_block"), 3);
        assert_eq!(r.get("blocks", "min_prefix"), 0);
        assert_eq!(r.total("never_block"), 3);
        assert_eq!(r.total("min_prefix"), 1);
        let rows: Vec<_> = r.counts().into_iter().map(|(s, k, n)| format!("{s} {k} {n}")).collect();
        assert_eq!(rows, ["blocks never_block 3", "crowdsec min_prefix 1"]);
    }
}

/// The safety net's flags (every product that takes runtime adds): what no
/// `ctl add`, feed or guard block may cover, and how wide one may be. The
/// rule files are not restricted.
#[derive(clap::Args, Debug, Clone)]
pub struct SafetyFlags {
    /// Never block these addresses and prefixes (a list file: one per line,
    /// # comments): a runtime add that covers or overlaps one is refused.
    /// Reread on SIGHUP (a bridge's `ctl reload` too); a bad file keeps the
    /// list in force.
    #[arg(long, value_name = "FILE")]
    pub never_block: Option<PathBuf>,
    /// Refuse runtime adds (`ctl`, a feed, the guard's blocks) of IPv4
    /// prefixes wider than /N; the operator's own files are not restricted.
    #[arg(long, value_name = "N", default_value_t = sluice_rules::safety_net::DEFAULT_MIN_PREFIX_V4)]
    pub min_prefix_v4: u8,
    /// Refuse runtime adds of IPv6 prefixes wider than /N.
    #[arg(long, value_name = "N", default_value_t = sluice_rules::safety_net::DEFAULT_MIN_PREFIX_V6)]
    pub min_prefix_v6: u8,
}

impl SafetyFlags {
    /// The never-block file read (a bad line stops the start, named), the
    /// widths checked.
    pub fn load(&self) -> anyhow::Result<Arc<Safety>> {
        let s = Safety::load(self.never_block.as_deref(), self.min_prefix_v4, self.min_prefix_v6)
            .map_err(anyhow::Error::msg)?;
        if let Some(p) = &self.never_block {
            tracing::info!("--never-block {}: {} entries", p.display(), s.net().never.len());
        }
        Ok(Arc::new(s))
    }
}
