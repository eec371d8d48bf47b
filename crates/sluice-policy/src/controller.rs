//! How new rules reach a running bridge: the [`Controller`] owns the
//! [`Published`] rule set the workers read, rebuilds it off the fast path
//! (on SIGHUP, when a watched list file changes, when list entries expire),
//! publishes each new set so workers switch between batches, and frees a
//! replaced set only once no worker holds it, so freeing a large table
//! never stalls a worker.
//!
//! Everything it does is logged through the `log` crate (the CLI prints
//! it) and counted in [`ControlState`] (the metrics and the summary read
//! it).

use crate::commands::Command;
use crate::sets::{Feed, FeedOutcome, RuntimeSets, SetRow};
use crate::spec::{describe, total_entries, Expiring, ListEntries, LoadError, Loaded, RuleSpec};
use serde_json::json;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};
use sluice_control::command::{CtlError, SetCommand};
use sluice_control::safety::{Gate, Refusals};
use sluice_control::socket::{error_json, CtlRequest};
use sluice_engine::dynamic::Found;
use sluice_engine::snapshot::{Published, Snapshot};
use sluice_engine::RuleSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often the control loop looks at the files, the expiry times and the
/// replaced sets when nothing is sent to it.
pub const TICK: Duration = Duration::from_millis(200);

sluice_metrics::counters! {
    /// The control plane's counts, declared once: the exporter's families
    /// and their help come from this list.
    pub struct ControlCounters / ControlTotals {
        /// Rule reloads that worked.
        reloads_ok => "sluice_reloads" { "result" = "ok" },
        /// Rule reloads that failed (the rules in force stay).
        reloads_failed => "sluice_reloads" { "result" = "failed" },
        /// SIGHUPs received.
        sighups => "sluice_sighup",
        /// Control-socket requests the controller answered.
        ctl_ok => "sluice_control_requests" { "result" = "ok" },
        /// Control-socket requests the controller refused.
        ctl_failed => "sluice_control_requests" { "result" = "failed" },
        /// Runtime set changes applied (control socket lines: add, del, flush).
        updates => "sluice_set_updates",
        /// Runtime elements whose timeout passed.
        expired => "sluice_set_expired",
        /// Rule sets published for runtime changes (requests waiting together share one).
        publishes => "sluice_set_publishes",
        /// Tables of flows from BGP peers published (UPDATEs arriving together share one).
        flow_publications => "sluice_flow_publications",
    }
    families {
        /// Rule reloads (SIGHUP or a list file change), by result.
        "sluice_reloads",
        /// Control socket requests, by result (refused: the peer's uid/gid
        /// is not allowed; busy: too many connections at once; too_large:
        /// over 64 MiB; timed_out: not whole within the deadline; malformed:
        /// did not parse; forbidden: a command the peer's role may not send).
        "sluice_control_requests",
    }
}

/// What the controller has done, for metrics and summaries.
#[derive(Debug, Default)]
pub struct ControlState {
    /// Its counts (`state.reloads_ok` reads through to them).
    pub counts: ControlCounters,
    /// Unix time of the last successful load, in ms.
    pub last_reload_ms: AtomicU64,
    /// Generation of the rules in force (0 at start).
    pub generation: AtomicU64,
    lists: Mutex<Vec<ListEntries>>,
    /// From a request's arrival to its publication, the recent ones.
    recent_publish_ns: Mutex<std::collections::VecDeque<u64>>,
    sets: Mutex<Vec<SetRow>>,
    /// Runtime adds refused, by set and reason (`sluice_set_refused`): the
    /// one counter the sets count into (`full`) and the safety net in front
    /// of them (`never_block`, `min_prefix`).
    pub refusals: Arc<Refusals>,
}

impl std::ops::Deref for ControlState {
    type Target = ControlCounters;
    fn deref(&self) -> &ControlCounters {
        &self.counts
    }
}

impl ControlState {
    /// The lists in force and their entries: as read from their files, and
    /// a dynamic set's as it holds them now (it has no file: its size is
    /// its live size, as `ctl sets` and `sluice_set_entries` say).
    pub fn lists(&self) -> Vec<ListEntries> {
        let mut lists = self.lists.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let sets = self.sets();
        for l in lists.iter_mut().filter(|l| l.path == crate::spec::DYNAMIC_PATH) {
            let name = l.kind.strip_prefix("set ").unwrap_or(&l.kind);
            if let Some(row) = sets.iter().find(|r| r.name == name) {
                l.entries = row.entries as u64;
            }
        }
        lists
    }

    /// Every named set with its entries (base, added, deleted), as of the
    /// last publication.
    pub fn sets(&self) -> Vec<SetRow> {
        self.sets.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Publish latency percentiles (ns) over the last 4096 requests that
    /// changed a set: (p50, p99, max).
    pub fn publish_latency(&self) -> Option<(u64, u64, u64)> {
        let mut v: Vec<u64> =
            self.recent_publish_ns.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some((at(0.5), at(0.99), v[v.len() - 1]))
    }

    fn published_change(&self, ns: u64) {
        let mut r = self.recent_publish_ns.lock().unwrap_or_else(PoisonError::into_inner);
        if r.len() == 4096 {
            r.pop_front();
        }
        r.push_back(ns);
    }

    fn loaded(&self, lists: Vec<ListEntries>) {
        *self.lists.lock().unwrap_or_else(PoisonError::into_inner) = lists;
        self.last_reload_ms.store(unix_ms(), Ordering::Relaxed);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// What the control loop is told.
#[derive(Debug)]
pub enum Event {
    /// Reload the rules; the string says why (for the log).
    Reload(&'static str),
    /// A control-socket request (parsed, and allowed by the peer's role).
    Ctl(CtlRequest<Command>),
    /// A feed's changes (CrowdSec); the reply says what changed.
    Feed(Feed, Sender<Result<FeedOutcome, String>>),
    /// The flows routers announced (BGP FlowSpec, blackholes), whole: in
    /// force with every rule set published from now on.
    Flows(Arc<sluice_engine::flows::FlowTable>),
    Quit,
}

/// How a control socket hands its requests to the controller behind
/// `events`.
pub fn deliver_to(events: &Sender<Event>) -> sluice_control::socket::Deliver<Command> {
    let events = events.clone();
    Arc::new(move |r| events.send(Event::Ctl(r)).is_ok())
}

/// Wall-clock time in ns (the runtime elements' deadlines).
pub fn wall_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// How often the loop looks for the end of a reload reading its files.
const RELOAD_POLL: Duration = Duration::from_millis(5);

/// Requests handled before one publication, at most.
const COALESCE: usize = 4096;

/// Polls files' metadata; a change counts once it has held still for one
/// poll, so a file being written is not read half-way (a rename is still
/// the safe way to replace a list).
pub struct FileWatch {
    paths: Vec<PathBuf>,
    seen: Vec<Option<FileStamp>>,
    pending: Option<Vec<Option<FileStamp>>>,
}

type FileStamp = (SystemTime, u64, u64);

impl FileWatch {
    pub fn new(paths: Vec<PathBuf>) -> FileWatch {
        let seen = Self::look(&paths);
        FileWatch { paths, seen, pending: None }
    }

    fn look(paths: &[PathBuf]) -> Vec<Option<FileStamp>> {
        use std::os::unix::fs::MetadataExt;
        paths
            .iter()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino()))))
            .collect()
    }

    /// Whether a file changed (and then held still) since the last call
    /// that said so.
    pub fn changed(&mut self) -> bool {
        let now = Self::look(&self.paths);
        if now == self.seen {
            self.pending = None;
            return false;
        }
        if self.pending.as_ref() == Some(&now) {
            self.seen = now;
            self.pending = None;
            return true;
        }
        self.pending = Some(now);
        false
    }
}

/// Owns the published rules and everything that replaces them.
pub struct Controller {
    spec: RuleSpec,
    ifaces: Vec<String>,
    published: Arc<Published<RuleSet>>,
    state: Arc<ControlState>,
    /// Lists whose entries expire, and the seconds after loading that the
    /// rules in force account for.
    expiry: Option<(Expiring, u64)>,
    watch: Option<FileWatch>,
    /// Replaced rule sets, freed here once no worker holds them.
    retired: Vec<Arc<Snapshot<RuleSet>>>,
    /// Runtime changes to named sets.
    sets: RuntimeSets,
    /// What runtime adds are checked against (`--never-block`,
    /// `--min-prefix-*`), counting into `state.refusals`.
    gate: Gate,
    /// The routers' flows, put beside every rule set published.
    flows: Option<Arc<sluice_engine::flows::FlowTable>>,
    /// Answers `ctl bgp` (the bridge's BGP sessions), when it has some.
    bgp_status: Option<StatusFn>,
    /// The product's own part of `ctl status`.
    status: Option<StatusFn>,
    /// Called with every rule set before it is published (and so before
    /// the changes in it are answered): a data plane that keeps its own
    /// copy of the sets (the shield's kernel maps) brings it up to date.
    on_publish: Option<PublishHook>,
    /// A reload reading the files on a thread of its own, and the one
    /// asked for meanwhile.
    reading: Option<ReloadInFlight>,
    next_load: Option<(&'static str, Vec<Sender<String>>)>,
}

/// A reload in flight: reading rule files, lists and geo databases (a
/// large database takes seconds) happens off the control thread, which
/// meanwhile answers `ctl`, CrowdSec and BGP as ever; the result is
/// published there, with the runtime changes made meanwhile carried over.
struct ReloadInFlight {
    result: Receiver<Result<Loaded, LoadError>>,
    why: &'static str,
    /// `ctl reload` requests answered when it is in force (or failed).
    replies: Vec<Sender<String>>,
}

/// See [`Controller::on_publish`].
pub type PublishHook = Box<dyn FnMut(&RuleSet, Publication) + Send>;

/// Why rules are published: what a data plane that keeps its own tables
/// (the shield's kernel maps) must redo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publication {
    /// Runtime changes (a set's delta, flows) over the same base tables.
    Changed,
    /// Built again from the files (`ctl reload`, SIGHUP, `--watch`): every
    /// list may hold other entries, with the same rule text.
    Reloaded,
    /// Built again without the list entries whose timeout passed,
    /// `elapsed` seconds after the files were read.
    Expired { elapsed: u64 },
}

/// A status a control-socket command answers with, from outside the
/// control plane.
pub type StatusFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

impl Controller {
    /// A controller whose first rules are `loaded` (built from `spec` with
    /// the live ports `ifaces`); `watch` polls the spec's files.
    pub fn new(spec: RuleSpec, ifaces: Vec<String>, loaded: Loaded, watch: bool) -> Controller {
        let sets = RuntimeSets::new();
        let state = Arc::new(ControlState { refusals: Arc::clone(&sets.refused), ..ControlState::default() });
        state.loaded(loaded.lists);
        *state.sets.lock().unwrap_or_else(PoisonError::into_inner) = sets.rows(&loaded.rules);
        Controller {
            sets,
            gate: Gate { safety: Arc::default(), refusals: Arc::clone(&state.refusals) },
            watch: watch.then(|| FileWatch::new(spec.files())),
            spec,
            ifaces,
            published: Arc::new(Published::new(loaded.rules)),
            state,
            expiry: loaded.expiry.map(|e| (e, 0)),
            retired: Vec::new(),
            flows: None,
            bgp_status: None,
            status: None,
            on_publish: None,
            reading: None,
            next_load: None,
        }
    }

    /// Calls `hook` with every rule set before it is published, on the
    /// control thread: a change is answered only once the hook returned.
    pub fn on_publish(mut self, hook: PublishHook) -> Controller {
        self.on_publish = Some(hook);
        self
    }

    /// What `ctl status` answers: the product's own facts (an object),
    /// beside the rules' generation in force.
    pub fn with_status(mut self, status: StatusFn) -> Controller {
        self.status = Some(status);
        self
    }

    /// Answer `ctl bgp` with `status`.
    pub fn with_bgp_status(mut self, status: StatusFn) -> Controller {
        self.bgp_status = Some(status);
        self
    }

    /// Check runtime adds against `safety` (a new controller refuses only
    /// a /0); its never-block file is reread with the rules.
    pub fn with_safety(mut self, safety: Arc<sluice_control::safety::Safety>) -> Controller {
        self.gate.safety = safety;
        self
    }

    /// Never fold a set's runtime changes into new base tables: its
    /// elements stay in its delta, where a data plane that keeps its own
    /// tables (the shield's kernel maps) reads them.
    pub fn without_merges(mut self) -> Controller {
        self.sets.merge_min = usize::MAX;
        self
    }

    /// The safety net and the refusal counters, for a feed to check its
    /// adds against.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The rules the workers read.
    pub fn published(&self) -> &Arc<Published<RuleSet>> {
        &self.published
    }

    pub fn state(&self) -> &Arc<ControlState> {
        &self.state
    }

    /// Makes `n` the maxelem of the `dynamic` set `set` when its definition
    /// gives none (the CrowdSec set's `--crowdsec-maxelem`).
    pub fn set_maxelem_default(&mut self, set: &str, n: usize) {
        self.sets.set_maxelem_default(set, n);
        let rules = self.published.load();
        *self.state.sets.lock().unwrap_or_else(PoisonError::into_inner) = self.sets.rows(&rules.value);
    }

    fn publish(&mut self, rules: RuleSet) -> u64 {
        self.publish_as(rules, Publication::Changed)
    }

    fn publish_as(&mut self, rules: RuleSet, why: Publication) -> u64 {
        let rules = rules.with_flows(self.flows.clone());
        if let Some(hook) = &mut self.on_publish {
            hook(&rules, why);
        }
        let before = self.published.load();
        *self.state.sets.lock().unwrap_or_else(PoisonError::into_inner) = self.sets.rows(&rules);
        let generation = self.published.publish(rules);
        self.state.generation.store(generation, Ordering::Relaxed);
        self.retired.push(before);
        generation
    }

    /// Rebuild from the files, here and now; on failure the rules in force
    /// stay. Returns whether new rules were published. ([`Controller::run`]
    /// reads the files on another thread: [`Controller::start_reload`].)
    pub fn reload(&mut self, why: &str) -> bool {
        // On its own: a bad never-block file keeps the list in force and
        // says so, and the rules reload all the same.
        self.gate.safety.reload_logged(why);
        let loaded = self.spec.load(&self.ifaces);
        self.finish_reload(loaded, why)
    }

    /// Starts a reload whose files are read on a thread of its own;
    /// `reply` (a `ctl reload`) is answered once it is in force or has
    /// failed. One asked for while another reads waits for it, then reads
    /// the files again (it may be for a change the first did not see);
    /// several such are one.
    pub fn start_reload(&mut self, why: &'static str, reply: Option<Sender<String>>) {
        if self.reading.is_some() {
            let (_, replies) = self.next_load.get_or_insert((why, Vec::new()));
            replies.extend(reply);
            return;
        }
        self.gate.safety.reload_logged(why);
        let (tx, rx) = std::sync::mpsc::channel();
        let (spec, ifaces) = (self.spec.clone(), self.ifaces.clone());
        let spawned = std::thread::Builder::new().name("sluice-reload".into()).spawn(move || {
            let _ = tx.send(spec.load(&ifaces));
        });
        if let Err(e) = spawned {
            // No thread to spare: read them here, as before.
            tracing::warn!("reload ({why}): no thread for it ({e}); reading the files on the control thread");
            let loaded = self.spec.load(&self.ifaces);
            let ok = self.finish_reload(loaded, why);
            if let Some(r) = reply {
                let _ = r.send(self.reload_reply(ok));
            }
            return;
        }
        self.reading = Some(ReloadInFlight { result: rx, why, replies: reply.into_iter().collect() });
    }

    /// Whether a reload is reading its files.
    pub fn reloading(&self) -> bool {
        self.reading.is_some()
    }

    /// Waits for a reload reading its files (and the one asked for
    /// meanwhile), and puts it in force: at a stop, the reloads asked for
    /// before it are not lost.
    pub fn finish_reads(&mut self) {
        while self.reading.is_some() {
            self.poll_reload(true);
        }
    }

    /// Publishes a reload whose files have been read (`wait`: once they
    /// are), answers its requests, and starts the one asked for meanwhile.
    fn poll_reload(&mut self, wait: bool) {
        let Some(l) = &self.reading else { return };
        let loaded = match wait {
            true => l.result.recv().unwrap_or(Err(LoadError::Interrupted)),
            false => match l.result.try_recv() {
                Ok(loaded) => loaded,
                Err(std::sync::mpsc::TryRecvError::Empty) => return,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Err(LoadError::Interrupted),
            },
        };
        let l = self.reading.take().expect("checked above");
        let ok = self.finish_reload(loaded, l.why);
        for r in l.replies {
            let _ = r.send(self.reload_reply(ok));
        }
        if let Some((why, replies)) = self.next_load.take() {
            self.start_reload(why, None);
            if let Some(l) = &mut self.reading {
                l.replies.extend(replies);
            }
        }
    }

    /// A `ctl reload`'s answer (and its count).
    fn reload_reply(&self, ok: bool) -> String {
        if ok {
            self.state.ctl_ok.fetch_add(1, Ordering::Relaxed);
            json!({ "ok": true, "generation": self.state.generation.load(Ordering::Relaxed) }).to_string()
        } else {
            self.state.ctl_failed.fetch_add(1, Ordering::Relaxed);
            error_json("reload failed; the rules in force stay (see the bridge's log)", None)
        }
    }

    /// Publishes what a reload read (the runtime changes to sets whose
    /// lists were not read again carried over), or logs why it failed.
    fn finish_reload(&mut self, loaded: Result<Loaded, LoadError>, why: &str) -> bool {
        match loaded {
            Ok(l) => {
                for w in &l.warnings {
                    tracing::warn!("{w}");
                }
                let (rules, dropped) = self.sets.carry_over(l.rules);
                if !dropped.is_empty() {
                    tracing::info!("runtime changes to {} discarded: their lists were read again", dropped.join(", "));
                }
                let generation = self.publish_as(rules, Publication::Reloaded);
                let n = self.state.reloads_ok.fetch_add(1, Ordering::Relaxed) + 1;
                self.state.loaded(l.lists);
                // With the dynamic sets' elements carried over, as the JSON and metrics say.
                let lists = self.state.lists();
                tracing::info!(
                    event = "reload",
                    generation,
                    entries = total_entries(&lists),
                    "reload {n} ({why}): {} entries ({}) built in {:.1} ms; generation {generation} in force",
                    total_entries(&lists),
                    describe(&lists),
                    l.took.as_secs_f64() * 1e3
                );
                self.expiry = l.expiry.map(|e| (e, 0));
                true
            }
            Err(e) => {
                self.state.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    event = "reload_failed",
                    "reload ({why}) failed; the rules in force stay: {}",
                    sluice_control::chain(&e)
                );
                false
            }
        }
    }

    /// Rebuild without the entries whose timeout has passed, once the next
    /// one has. Returns whether new rules were published.
    pub fn expire(&mut self) -> bool {
        let Some((e, done)) = &self.expiry else { return false };
        let elapsed = e.loaded_at.elapsed().as_secs();
        if e.next_after(*done).is_none_or(|next| elapsed < next) {
            return false;
        }
        let started = Instant::now();
        match e.build(elapsed) {
            Ok(rules) => {
                let (rules, dropped) = self.sets.carry_over(rules);
                if !dropped.is_empty() {
                    tracing::info!("runtime changes to {} discarded: their lists were rebuilt", dropped.join(", "));
                }
                let live = e.live_entries(elapsed);
                let generation = self.publish_as(rules, Publication::Expired { elapsed });
                tracing::info!(
                    event = "expired",
                    generation,
                    live,
                    "entries expired ({elapsed} s after loading): {live} live entries, rebuilt in {:.1} ms; generation {generation} in force",
                    started.elapsed().as_secs_f64() * 1e3
                );
                self.expiry =
                    self.expiry.take().filter(|(e, _)| e.next_after(elapsed).is_some()).map(|(e, _)| (e, elapsed));
                true
            }
            Err(err) => {
                tracing::error!(
                    event = "reload_failed",
                    "rebuilding after entries expired failed; the rules in force stay: {err}"
                );
                self.expiry = None;
                false
            }
        }
    }

    /// One look at everything that changes without being told: watched
    /// files, expiry times, replaced sets no worker holds any more.
    pub fn tick(&mut self) {
        if self.watch.as_mut().is_some_and(FileWatch::changed) {
            self.start_reload("a watched file changed", None);
        }
        self.expire();
        self.expire_runtime();
        self.retired.retain(|s| Arc::strong_count(s) > 1);
        self.gate.safety.flush_log();
    }

    /// Checks a batch's adds against the safety net, all of them (each
    /// refusal is counted and logged): the first refused line and every
    /// refused line, or nothing when all may go in. An add to a set the
    /// rules do not name is left for [`RuntimeSets::stage`] to refuse.
    fn screen(&self, rules: &RuleSet, cmds: &[(usize, SetCommand)]) -> Option<(CtlError, Vec<usize>)> {
        let net = self.gate.safety.net();
        let mut first = None;
        let mut lines = Vec::new();
        for (line, cmd) in cmds {
            let SetCommand::Add { set, elem, .. } = cmd else { continue };
            if rules.named_index(set).is_none() {
                continue;
            }
            if let Err(r) = net.check(elem) {
                self.gate.refused(set, elem, &r, "ctl add");
                lines.push(*line);
                first.get_or_insert_with(|| {
                    let message = format!("add {set} {elem} refused ({}): {r}; nothing applied", r.reason());
                    CtlError { line: *line, message }
                });
            }
        }
        first.map(|e| (e, lines))
    }

    /// Removes runtime elements whose timeout passed.
    fn expire_runtime(&mut self) {
        let now = wall_ns();
        if self.sets.next_deadline().is_none_or(|d| d > now) {
            return;
        }
        self.release();
        let rules = self.published.load();
        if let Some((new, gone)) = self.sets.expire(&rules.value, now) {
            self.state.expired.fetch_add(gone as u64, Ordering::Relaxed);
            let generation = self.publish(new);
            tracing::debug!("{gone} runtime entries expired; generation {generation} in force");
        }
    }

    /// Handles one control request: a query is answered at once (Some); a
    /// change is staged (None), answered by [`Controller::commit`] once
    /// published.
    fn request(
        &mut self,
        req: &CtlRequest<Command>,
        staged: &mut Vec<(Sender<String>, Instant, usize)>,
    ) -> Option<String> {
        let rules = self.published.load();
        let rules = &rules.value;
        let spec = self.spec.clone();
        let base_of = move |r: &RuleSet, i: usize| spec.base_elements(r, i);
        // A batch is of changes only (the socket's parse saw to it).
        let changes: Vec<(usize, SetCommand)> = req
            .commands
            .iter()
            .filter_map(|(l, c)| match c {
                Command::Set(s) if s.changes() => Some((*l, s.clone())),
                _ => None,
            })
            .collect();
        let reply = if !changes.is_empty() {
            let cmds = changes;
            if let Some((e, lines)) = self.screen(rules, &cmds) {
                self.state.ctl_failed.fetch_add(1, Ordering::Relaxed);
                let more = match lines.len() {
                    1 => String::new(),
                    n => format!(" ({n} lines refused in all)"),
                };
                // Every refused line, so a sender (a guard forwarding its
                // blocks) can drop those and send the rest again.
                let error = format!("{e}{more}");
                return Some(
                    json!({ "ok": false, "error": error, "line": e.line, "refused_lines": lines }).to_string(),
                );
            }
            match self.sets.stage(rules, &cmds, wall_ns(), &base_of) {
                Ok(n) => {
                    staged.push((req.reply.clone(), req.received, n));
                    return None;
                }
                Err(e) => Err((e.to_string(), Some(e.line))),
            }
        } else {
            match &req.commands[0].1 {
                Command::Sets => Ok(json!({ "ok": true, "sets": self.set_rows(rules) })),
                Command::Set(SetCommand::Test { set, addr }) => self.sets.test(rules, set, *addr, &base_of).map(|f| {
                    let (element, from) = match f {
                        Some(Found::Added(p)) => (Some(p.to_string()), Some("added")),
                        Some(Found::Base(p)) => (Some(p.to_string()), Some("base")),
                        Some(Found::BaseTables) => (None, Some("base-tables")),
                        None => (None, None),
                    };
                    let mut v = json!({ "ok": true, "set": set, "addr": addr.to_string(), "match": f.is_some(), "element": element, "from": from });
                    // A geo set: what its database says of the address.
                    if let Some(g) = self.spec.geo_lookup(rules, set, *addr) {
                        v["geo"] = g;
                    }
                    v
                }).map_err(|e| (e, None)),
                Command::Set(SetCommand::List { set }) => self.sets.list(rules, set, &base_of).map(|(elems, complete)| {
                    let now = wall_ns();
                    let elements: Vec<serde_json::Value> = elems
                        .iter()
                        .map(|(p, d)| json!({ "element": p.to_string(), "expires_in": d.map(|d| d.saturating_sub(now).div_ceil(1_000_000_000)) }))
                        .collect();
                    json!({ "ok": true, "set": set, "complete": complete, "elements": elements })
                }).map_err(|e| (e, None)),
                Command::Stats => Ok(self.stats_json()),
                Command::Flows => Ok(flows_json(rules)),
                Command::Status => {
                    let mut status = self.status.as_ref().map_or_else(|| json!({}), |f| f());
                    status["generation"] = json!(self.state.generation.load(Ordering::Relaxed));
                    Ok(json!({ "ok": true, "status": status }))
                }
                Command::Bgp => match &self.bgp_status {
                    Some(f) => Ok(f()),
                    None => Err(("this bridge has no BGP session (--bgp-peer)".into(), None)),
                },
                Command::Reload => {
                    // Answered once in force (or failed): reload_reply.
                    self.start_reload("control socket", Some(req.reply.clone()));
                    return None;
                }
                Command::Set(SetCommand::Add { .. } | SetCommand::Del { .. } | SetCommand::Flush { .. }) => {
                    unreachable!("changes are staged above")
                }
            }
        };
        Some(match reply {
            Ok(v) => {
                self.state.ctl_ok.fetch_add(1, Ordering::Relaxed);
                v.to_string()
            }
            Err((e, line)) => {
                self.state.ctl_failed.fetch_add(1, Ordering::Relaxed);
                error_json(&e, line)
            }
        })
    }

    /// Frees the replaced rule sets no worker holds any more. Before a set
    /// change too, not only every tick: a set's delta from two publications
    /// ago is reused (brought up to date, not copied) once nothing holds it.
    fn release(&mut self) {
        self.retired.retain(|s| Arc::strong_count(s) > 1);
    }

    /// Publishes what the staged requests changed, once, and answers them.
    fn commit(&mut self, staged: Vec<(Sender<String>, Instant, usize)>) {
        self.release();
        let rules = self.published.load();
        let (new, _merged) = self.sets.commit(&rules.value);
        drop(rules);
        let generation = match new {
            Some(r) => {
                self.state.publishes.fetch_add(1, Ordering::Relaxed);
                self.publish(r)
            }
            None => self.state.generation.load(Ordering::Relaxed),
        };
        for (reply, received, n) in staged {
            let ns = received.elapsed().as_nanos() as u64;
            self.state.published_change(ns);
            self.state.updates.fetch_add(n as u64, Ordering::Relaxed);
            self.state.ctl_ok.fetch_add(1, Ordering::Relaxed);
            let _ = reply.send(
                json!({ "ok": true, "applied": n, "generation": generation, "publish_us": ns / 1000 }).to_string(),
            );
        }
    }

    /// Publishes the new tables of merges that finished on their threads.
    fn finish_merges(&mut self) {
        self.release();
        let rules = self.published.load();
        let (new, n) = self.sets.poll_merges(&rules.value, false);
        drop(rules);
        if let Some(r) = new {
            let generation = self.publish(r);
            tracing::debug!("{n} set delta(s) merged into new tables; generation {generation} in force");
        }
    }

    /// `ctl sets`: each set's row, and for a geo set (or the shorthand set
    /// `--drop-country`/`--drop-asn` fill) where its networks came from.
    fn set_rows(&self, rules: &RuleSet) -> Vec<serde_json::Value> {
        let lists = self.state.lists();
        self.sets
            .rows(rules)
            .into_iter()
            .map(|r| {
                let geo: Vec<&sluice_geo::GeoInfo> = lists
                    .iter()
                    .filter(|l| {
                        l.kind.strip_prefix("set ") == Some(r.name.as_str())
                            || (r.name == "drop-src" && matches!(l.kind.as_str(), "drop-country" | "drop-asn"))
                    })
                    .filter_map(|l| l.geo.as_ref())
                    .collect();
                let mut v = serde_json::to_value(&r).expect("a row serializes");
                if !geo.is_empty() {
                    v["geo"] = serde_json::to_value(&geo).expect("geo info serializes");
                }
                v
            })
            .collect()
    }

    /// The counters `sluice ctl stats` shows.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = &self.state;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let lat = s.publish_latency();
        json!({
            "ok": true,
            "generation": get(&s.generation),
            "reloads_ok": get(&s.reloads_ok),
            "reloads_failed": get(&s.reloads_failed),
            "updates": get(&s.updates),
            "expired": get(&s.expired),
            // Counted where merges happen, per set (`sluice_set_merges`):
            // whichever path started one (a change, an expiry), on whichever
            // thread it ran.
            "merges": self.sets.rows(&self.published.load().value).iter().map(|r| r.merges).sum::<u64>(),
            "publishes": get(&s.publishes),
            "ctl_ok": get(&s.ctl_ok),
            "ctl_failed": get(&s.ctl_failed),
            "refused_never_block": s.refusals.total("never_block"),
            "refused_min_prefix": s.refusals.total("min_prefix"),
            "publish_p50_us": lat.map(|l| l.0 / 1000),
            "publish_p99_us": lat.map(|l| l.1 / 1000),
            "publish_max_us": lat.map(|l| l.2 / 1000),
        })
    }

    /// Replaced rule sets not yet freed (some worker still holds them).
    pub fn retired(&self) -> usize {
        self.retired.len()
    }

    /// The control loop: handle events, tick every [`TICK`], and call
    /// `every_tick` (status lines, deadlines) until told to quit or every
    /// sender is gone.
    pub fn run(mut self, events: Receiver<Event>, mut every_tick: impl FnMut()) {
        let mut last_tick = Instant::now();
        loop {
            // While a reload reads its files, look for its end often.
            let wait = if self.reading.is_some() { RELOAD_POLL } else { TICK };
            let mut next = match events.recv_timeout(wait) {
                Ok(e) => Some(e),
                Err(RecvTimeoutError::Disconnected) => return self.finish_reads(),
                Err(RecvTimeoutError::Timeout) => None,
            };
            // Requests waiting together are published together.
            let mut staged = Vec::new();
            let mut handled = 0;
            while let Some(event) = next.take() {
                match event {
                    Event::Reload(why) => {
                        self.commit(std::mem::take(&mut staged));
                        self.start_reload(why, None);
                    }
                    Event::Ctl(req) => {
                        if let Some(reply) = self.request(&req, &mut staged) {
                            let _ = req.reply.send(reply);
                        }
                    }
                    Event::Feed(feed, reply) => {
                        let rules = self.published.load();
                        let spec = self.spec.clone();
                        let base_of = move |r: &RuleSet, i: usize| spec.base_elements(r, i);
                        let r = self.sets.feed(&rules.value, &feed, wall_ns(), &base_of);
                        drop(rules);
                        self.commit(Vec::new());
                        let _ = reply.send(r);
                    }
                    Event::Flows(table) => {
                        self.commit(std::mem::take(&mut staged));
                        self.flows = Some(table);
                        let rules = self.published.load();
                        let next = rules.value.clone();
                        drop(rules);
                        let generation = self.publish(next);
                        self.state.flow_publications.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(generation, "flows published");
                    }
                    Event::Quit => {
                        self.commit(staged);
                        return self.finish_reads();
                    }
                }
                handled += 1;
                if handled < COALESCE {
                    next = events.try_recv().ok();
                }
            }
            self.commit(staged);
            self.finish_merges();
            self.poll_reload(false);
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.tick();
                every_tick();
            }
        }
    }
}

/// A thread that turns SIGINT/SIGTERM into `stop`, and SIGHUP (through
/// [`sluice_control::signals`]) into [`Event::Reload`] (counted in `state.sighups`).
/// Install it before opening ports, so a signal during a slow open still
/// ends the run cleanly; close the returned handle when the run is over.
pub fn spawn_signals(
    stop: Arc<AtomicBool>,
    events: Sender<Event>,
    state: Arc<ControlState>,
) -> std::io::Result<SignalThread> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    let handle = signals.handle();
    sluice_control::signals::on_sighup(move || {
        state.sighups.fetch_add(1, Ordering::Relaxed);
        let _ = events.send(Event::Reload("SIGHUP"));
    })?;
    std::thread::Builder::new().name("sluice-signals".into()).spawn(move || {
        for _ in signals.forever() {
            stop.store(true, Ordering::Relaxed);
        }
    })?;
    Ok(SignalThread(handle))
}

/// What [`spawn_signals`] started.
pub struct SignalThread(Handle);

impl SignalThread {
    /// End the thread; a SIGHUP from now on has nothing to reread (the
    /// control loop that reloaded is gone).
    pub fn close(&self) {
        sluice_control::signals::nothing_to_reread();
        self.0.close();
    }
}

/// `ctl flows`: the flows in force, in the order they apply, with their
/// source and counters.
pub fn flows_json(rules: &RuleSet) -> serde_json::Value {
    use sluice_engine::flows::{FlowVerdict, Placement, Rate};
    let Some(t) = rules.flows() else {
        return json!({ "ok": true, "placement": null, "flows": [] });
    };
    let flows: Vec<serde_json::Value> = t
        .rules()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let action = match &r.verdict {
                FlowVerdict::Drop => "drop".to_string(),
                FlowVerdict::Accept => "accept".to_string(),
                FlowVerdict::Police(p) => match p.rate {
                    Rate::BytesPerSecond(b) => format!("police {b} bytes/s"),
                    Rate::PacketsPerSecond(n) => format!("police {n} packets/s"),
                },
            };
            let family = match r.flow.family {
                sluice_bgp::flowspec::Family::V4 => "ipv4",
                sluice_bgp::flowspec::Family::V6 => "ipv6",
            };
            json!({
                "index": i,
                "kind": if r.blackhole { "blackhole" } else { "flowspec" },
                "family": family,
                "flow": r.flow.to_string(),
                "action": action,
                "go_on": r.go_on,
                "unsupported": r.unsupported,
                "source": r.source,
                "packets": r.counts.packets.load(Ordering::Relaxed),
                "bytes": r.counts.bytes.load(Ordering::Relaxed),
                "dropped": r.counts.dropped.load(Ordering::Relaxed),
            })
        })
        .collect();
    let placement = match t.placement() {
        Placement::First => "first",
        Placement::Last => "last",
    };
    json!({ "ok": true, "placement": placement, "flows": flows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn spec_for(dir: &std::path::Path, text: &str) -> RuleSpec {
        let list = dir.join("list.txt");
        std::fs::write(&list, text).unwrap();
        RuleSpec { drop_any: vec![list], ..RuleSpec::default() }
    }

    #[test]
    fn a_reload_publishes_a_new_generation_and_a_failed_one_keeps_the_rules() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_for(dir.path(), "10.0.0.1\n");
        let loaded = spec.load(&[]).unwrap();
        let mut c = Controller::new(spec.clone(), Vec::new(), loaded, false);
        assert_eq!(c.published().load().generation, 0);
        std::fs::write(&spec.drop_any[0], "10.0.0.1\n10.0.0.2\n").unwrap();
        assert!(c.reload("test"));
        assert_eq!(c.published().load().generation, 1);
        assert_eq!(c.state().lists()[0].entries, 2);
        std::fs::write(&spec.drop_any[0], "garbage here\n").unwrap();
        assert!(!c.reload("test"));
        assert_eq!(c.published().load().generation, 1);
        assert_eq!(c.state().reloads_ok.load(Ordering::Relaxed), 1);
        assert_eq!(c.state().reloads_failed.load(Ordering::Relaxed), 1);
        assert_eq!(c.state().lists()[0].entries, 2);
    }

    #[test]
    fn a_replaced_set_is_freed_only_when_no_reader_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_for(dir.path(), "10.0.0.1\n");
        let loaded = spec.load(&[]).unwrap();
        let mut c = Controller::new(spec, Vec::new(), loaded, false);
        let held = c.published().load();
        assert!(c.reload("test"));
        c.tick();
        assert_eq!(c.retired(), 1, "a worker still holds generation 0");
        drop(held);
        c.tick();
        assert_eq!(c.retired(), 0);
    }

    #[test]
    fn a_watched_file_reloads_once_it_holds_still() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_for(dir.path(), "10.0.0.1\n");
        let loaded = spec.load(&[]).unwrap();
        let mut c = Controller::new(spec.clone(), Vec::new(), loaded, true);
        c.tick();
        assert_eq!(c.published().load().generation, 0);
        // Replace by rename, as the docs ask: a new inode.
        let tmp = dir.path().join("list.tmp");
        std::fs::write(&tmp, "10.0.0.1\n10.0.0.2\n10.0.0.3\n").unwrap();
        std::fs::rename(&tmp, &spec.drop_any[0]).unwrap();
        c.tick(); // seen, pending
        assert_eq!(c.published().load().generation, 0);
        c.tick(); // held still: reload (read on a thread of its own)
        c.finish_reads();
        assert_eq!(c.published().load().generation, 1);
        assert_eq!(c.state().lists()[0].entries, 3);
        c.tick();
        assert_eq!(c.published().load().generation, 1, "one change, one reload");
    }

    #[test]
    fn the_loop_reloads_on_an_event_and_stops_on_quit() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_for(dir.path(), "10.0.0.1\n");
        let loaded = spec.load(&[]).unwrap();
        let c = Controller::new(spec, Vec::new(), loaded, false);
        let (published, state) = (Arc::clone(c.published()), Arc::clone(c.state()));
        let (tx, rx) = channel();
        let t = std::thread::spawn(move || c.run(rx, || {}));
        tx.send(Event::Reload("test")).unwrap();
        tx.send(Event::Quit).unwrap();
        t.join().unwrap();
        assert_eq!(published.load().generation, 1);
        assert_eq!(state.generation.load(Ordering::Relaxed), 1);
    }

    /// A reload whose list cannot be read yet (a FIFO with no writer
    /// blocks its open, as a huge geo database takes seconds) leaves the
    /// loop answering: `stats` is answered, an add is published, and the
    /// `ctl reload` asked meanwhile is answered once its files are read,
    /// with the add carried over.
    #[test]
    fn the_loop_answers_while_a_reload_reads_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "10.0.0.1\n").unwrap();
        let rules = dir.path().join("rules.txt");
        std::fs::write(&rules, "set bad from \"list.txt\"\nset blocks dynamic\ndrop saddr @bad\ndrop saddr @blocks\n")
            .unwrap();
        let spec = RuleSpec { rules: Some(rules), ..RuleSpec::default() };
        let loaded = spec.load(&[]).unwrap();
        let c = Controller::new(spec, Vec::new(), loaded, false);
        let (published, state) = (Arc::clone(c.published()), Arc::clone(c.state()));
        let (tx, rx) = channel();
        let t = std::thread::spawn(move || c.run(rx, || {}));
        std::fs::remove_file(&list).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&list).status().unwrap().success());
        let ask = |text: &str| {
            let (reply, answer) = channel();
            let commands = sluice_control::command::parse_request::<Command>(text).unwrap();
            tx.send(Event::Ctl(CtlRequest { commands, received: Instant::now(), reply })).unwrap();
            answer
        };
        let reload = ask("reload");
        let stats = ask("stats").recv_timeout(Duration::from_secs(10)).expect("stats answered during the reload");
        assert!(stats.contains("\"ok\":true"), "{stats}");
        let add = ask("add blocks 192.0.2.9").recv_timeout(Duration::from_secs(10)).expect("an add answered");
        assert!(add.contains("\"ok\":true"), "{add}");
        assert!(reload.recv_timeout(Duration::from_millis(100)).is_err(), "the reload is still reading");
        std::fs::write(&list, "10.0.0.1\n10.0.0.2\n").unwrap();
        let done = reload.recv_timeout(Duration::from_secs(10)).expect("the reload answered");
        assert!(done.contains("\"ok\":true"), "{done}");
        assert_eq!(state.reloads_ok.load(Ordering::Relaxed), 1);
        assert_eq!(state.lists()[0].entries, 2);
        let test = ask("test blocks 192.0.2.9").recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(test.contains("\"match\":true"), "the add made during the reload stays: {test}");
        tx.send(Event::Quit).unwrap();
        t.join().unwrap();
        assert!(published.load().generation >= 2);
    }
}

/// A controller with its rules loaded, as a product starts one: the rules
/// (with the CrowdSec feed's set, sized), the safety net its runtime adds
/// pass, and the bouncer's config checked by that same net.
pub struct Loading {
    pub controller: Controller,
    /// The lists as loaded, for the start line.
    pub entries: Vec<crate::ListEntries>,
    pub build_ms: f64,
    /// The bouncer's config, its bans checked by the controller's safety net.
    pub crowdsec: Option<crate::crowdsec::BouncerConfig>,
}

/// Why a controller could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LoadingError {
    #[error("{what}: {error}")]
    Rules { what: &'static str, error: crate::LoadError },
    #[error("--crowdsec-maxelem {flag}, but the rules define set `{set}` with maxelem {defined}: give one of them")]
    Maxelem { flag: u32, set: String, defined: u32 },
}

/// The CrowdSec set's maxelem when its definition gives none:
/// `--crowdsec-maxelem`, else the default. Both given and different is an
/// error: one of them would be silently ignored.
fn feed_maxelem(rules: &RuleSet, set: &str, flag: Option<u32>) -> Result<usize, LoadingError> {
    let defined = rules.named_index(set).and_then(|i| match rules.named_set_info()[i].kind {
        sluice_engine::SetKind::Dynamic { maxelem, .. } => maxelem,
        _ => None,
    });
    if let (Some(d), Some(f)) = (defined, flag) {
        if d != f {
            return Err(LoadingError::Maxelem { flag: f, set: set.to_owned(), defined: d });
        }
    }
    Ok(flag.map_or(crate::sets::DEFAULT_CROWDSEC_MAXELEM, |n| n as usize))
}

impl Loading {
    /// Loads `spec` (with the CrowdSec feed's set) for the live ports
    /// `ports` into a new controller.
    pub fn load(
        mut spec: RuleSpec,
        crowdsec: Option<crate::crowdsec::BouncerConfig>,
        crowdsec_maxelem: Option<u32>,
        watch: bool,
        safety: Arc<sluice_control::safety::Safety>,
        ports: &[String],
    ) -> Result<Loading, LoadingError> {
        spec.feed_sets.extend(crowdsec.as_ref().map(|c| c.set.clone()));
        let what = if spec.rules.is_some() { "loading the rules" } else { "loading the address lists" };
        let loaded = spec.load(ports).map_err(|error| LoadingError::Rules { what, error })?;
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let entries = loaded.lists.clone();
        let build_ms = loaded.took.as_secs_f64() * 1e3;
        let feed_maxelem = match &crowdsec {
            Some(c) => Some((c.set.clone(), feed_maxelem(&loaded.rules, &c.set, crowdsec_maxelem)?)),
            None => None,
        };
        let mut controller = Controller::new(spec, ports.to_vec(), loaded, watch).with_safety(safety);
        if let Some((set, n)) = feed_maxelem {
            controller.set_maxelem_default(&set, n);
        }
        // The bouncer's bans are checked against the same net, counted in the same place.
        let crowdsec = crowdsec.map(|c| crate::crowdsec::BouncerConfig { gate: controller.gate().clone(), ..c });
        Ok(Loading { controller, entries, build_ms, crowdsec })
    }
}
