//! Runtime changes to named sets: the [`SetState`] of every set changed
//! since its tables were built, applied to the rule set in force as one
//! atomic batch (every line checked first, against an overlay of the lines
//! before it), expired on the wall clock, merged into new base tables on a
//! thread of its own when a delta grows, and carried over a reload for
//! `dynamic` sets.

use sluice_control::command::{CtlError, SetCommand};
use sluice_control::safety::Refusals;
use sluice_engine::dynamic::{ChangeError, Elements, Found, SetState};
use sluice_engine::{BaseTables, RuleSet, SetChange, SetInfo, SetKind};
use sluice_rules::Prefix;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{mpsc, Arc};

/// A delta is folded into new base tables once it holds more than this
/// many elements and more than 1/[`MERGE_RATIO`] of the base: below that a
/// lookup in the delta costs less than rebuilding (see BENCHMARKS.md).
pub const MERGE_MIN: usize = 4096;
pub const MERGE_RATIO: usize = 8;

/// The most elements a `dynamic` set holds unless its definition says
/// (`maxelem N`). ipset's default, 65,536, is a few minutes of a botnet's
/// addresses as an HTTP guard blocks them; a million timed hosts peaked at
/// 260-340 MB of RSS in `sluice-bench sets-scale` (the runtime state with
/// its deadlines, the base tables, a merge's working copy), ten million at
/// 1.8-2.8 GB. A set read from a list file may grow by as much at runtime
/// (its maxelem is its file's entries plus this).
pub const DEFAULT_MAXELEM: usize = 1_000_000;

/// The CrowdSec set's maxelem unless `--crowdsec-maxelem` or the set's
/// definition says: CrowdSec's community blocklist is tens of thousands of
/// addresses, and with a few subscribed blocklists and the local decisions
/// a LAPI holds a few hundred thousand; twice that leaves room for a
/// burst, while a LAPI gone wrong cannot make the bridge hold millions.
pub const DEFAULT_CROWDSEC_MAXELEM: usize = 500_000;

/// `sluice_set_refused`'s reason for an add past a set's maxelem.
pub const REFUSED_FULL: &str = "full";

/// Reads a set's base elements when it is first changed (a list file is
/// read again; None when only tables are known, as from a compiled file).
pub type BaseOf<'a> = dyn Fn(&RuleSet, usize) -> Option<Elements> + 'a;

/// A set's elements with their deadlines, and whether the list is complete.
pub type Listing = (Vec<(Prefix, Option<u64>)>, bool);

/// What a feed (CrowdSec) sends: elements to add with their own timeouts,
/// elements to delete (ignored when not there: a feed's delete may cross
/// an expiry), or with `full`, the set's whole content (anything else in
/// it is removed). Deletes apply before adds; adds past the set's maxelem
/// are refused and counted, the others applied.
///
/// A feed may tag what it adds with where it came from (a CrowdSec
/// decision's origin): `tags` is then one per add, each an index into
/// `tag_names` (which only grows: a tag means the same all the feed's
/// life), and every drop the element causes is counted under it
/// ([`sluice_engine::tags`]).
#[derive(Debug, Clone, Default)]
pub struct Feed {
    pub set: String,
    pub adds: Vec<(Prefix, Option<u32>)>,
    pub dels: Vec<Prefix>,
    pub full: bool,
    /// Empty, or one per add.
    pub tags: Vec<u16>,
    pub tag_names: Vec<String>,
}

/// What a feed changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedOutcome {
    /// Elements that were not in the set and are now.
    pub added: usize,
    /// Elements that were in the set and are not now.
    pub deleted: usize,
    /// Deletes of elements that were not there.
    pub ignored: usize,
    /// Adds refused: the set was full (counted in [`Refusals`] too).
    pub refused: usize,
}

/// One set as `sets` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetRow {
    pub name: String,
    pub kind: String,
    /// Elements the base tables were built with.
    pub base: usize,
    pub added: usize,
    pub deleted: usize,
    /// Elements in force: base - deleted + added.
    pub entries: usize,
    /// The most elements it holds: adds beyond are refused.
    pub maxelem: usize,
    pub merges: u64,
}

fn kind_name(k: SetKind) -> String {
    match k {
        SetKind::List => "list".into(),
        SetKind::Inline => "inline".into(),
        SetKind::Geo => "geo".into(),
        SetKind::Dynamic { timeout, .. } => match timeout {
            None => "dynamic".into(),
            Some(t) => format!("dynamic timeout {t}"),
        },
        SetKind::Shorthand => "shorthand".into(),
        SetKind::Anonymous => "anonymous".into(),
    }
}

/// A merge building tables elsewhere: its set, and where they come back.
struct MergeInFlight {
    set: String,
    /// The merge's number in its set's state.
    seq: u64,
    done: mpsc::Receiver<(BaseTables, Elements)>,
}

/// The change to publish for set `i` (its state `s`): its delta, with new
/// tables when it was flushed, or merged here; a merge that is due starts
/// on a thread of its own when `running` is given.
#[allow(clippy::too_many_arguments)]
fn change_for(
    rules: &RuleSet,
    i: usize,
    name: &str,
    s: &mut SetState,
    flushed: bool,
    (min, ratio): (usize, usize),
    running: Option<&mut Vec<MergeInFlight>>,
    merged: &mut usize,
) -> SetChange {
    let mut base = flushed.then(|| rules.build_base(&[]));
    if s.wants_merge(min, ratio) && !s.merging() {
        match running {
            Some(running) => {
                if let Some((seq, input)) = s.start_merge() {
                    let (tx, rx) = mpsc::channel();
                    let rules = rules.without_deltas();
                    let spawned = std::thread::Builder::new().name("sluice-merge".into()).spawn(move || {
                        let list = input.elements();
                        let tables = rules.build_base(&list);
                        let _ = tx.send((tables, Elements::from_prefixes(&list)));
                    });
                    match spawned {
                        Ok(_) => running.push(MergeInFlight { set: name.to_owned(), seq, done: rx }),
                        Err(e) => tracing::warn!("set `{name}`: cannot start a merge thread ({e}); the delta stays"),
                    }
                }
            }
            None => {
                *merged += 1;
                base = Some(rules.build_base(&s.merge()));
            }
        }
    }
    SetChange { set: i, base, delta: s.delta(), tags: s.tags() }
}

/// The runtime state of every named set changed since its tables were built.
#[derive(Default)]
pub struct RuntimeSets {
    /// (foldhash: every staged change looks its set up by name.)
    states: HashMap<String, SetState, foldhash::fast::RandomState>,
    /// Sets changed by staged batches not yet committed.
    touched: BTreeSet<usize>,
    flushed: BTreeSet<usize>,
    /// Merges building new tables on threads of their own.
    running: Vec<MergeInFlight>,
    /// Merge on a thread of its own (publications go on meanwhile); off,
    /// a merge is done within the commit that wants it.
    pub background: bool,
    pub merge_min: usize,
    pub merge_ratio: usize,
    /// Adds refused, by set and reason (shared with the metrics).
    pub refused: Arc<Refusals>,
    /// The maxelem of `dynamic` sets whose definition does not say, by
    /// name, where it is not [`DEFAULT_MAXELEM`] (a feed's set).
    maxelem_defaults: HashMap<String, usize>,
}

impl RuntimeSets {
    pub fn new() -> RuntimeSets {
        RuntimeSets { merge_min: MERGE_MIN, merge_ratio: MERGE_RATIO, background: true, ..RuntimeSets::default() }
    }

    /// Makes `n` the maxelem of the `dynamic` set `set` when its definition
    /// gives none (`--crowdsec-maxelem` for the CrowdSec set). A set
    /// already in use takes it at once.
    pub fn set_maxelem_default(&mut self, set: &str, n: usize) {
        self.maxelem_defaults.insert(set.to_owned(), n);
        if let Some(s) = self.states.get_mut(set) {
            if s.maxelem != usize::MAX {
                s.maxelem = n;
            }
        }
    }

    /// Set `info`'s maxelem: its definition's, else the default for its
    /// name or kind; for a set read from a list, its base entries plus
    /// [`DEFAULT_MAXELEM`] (its runtime growth is what is bounded).
    fn maxelem(&self, info: &SetInfo) -> usize {
        match info.kind {
            SetKind::Dynamic { maxelem: Some(n), .. } => n as usize,
            SetKind::Dynamic { maxelem: None, .. } => {
                self.maxelem_defaults.get(&info.name).copied().unwrap_or(DEFAULT_MAXELEM)
            }
            _ => info.entries.saturating_add(DEFAULT_MAXELEM),
        }
    }

    fn index(rules: &RuleSet, name: &str) -> Result<usize, String> {
        let known = || rules.named_set_info().iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        rules.named_index(name).ok_or_else(|| format!("no set `{name}` (the rules name: {})", known()))
    }

    fn fresh(rules: &RuleSet, i: usize, base_of: &BaseOf<'_>, maxelem: usize) -> SetState {
        let info = &rules.named_set_info()[i];
        let mut s = match info.kind {
            SetKind::Dynamic { timeout, .. } if info.entries == 0 => SetState::new(Some(Elements::new()), 0, timeout),
            _ => SetState::new(base_of(rules, i), info.entries, None),
        };
        s.maxelem = maxelem;
        s
    }

    /// The state of set `i`, made on first use.
    fn state(&mut self, rules: &RuleSet, i: usize, base_of: &BaseOf<'_>) -> &mut SetState {
        let info = &rules.named_set_info()[i];
        // Looked up before inserting: a batch asks for every line, and
        // `entry` would copy the name each time.
        if !self.states.contains_key(&info.name) {
            let fresh = Self::fresh(rules, i, base_of, self.maxelem(info));
            self.states.insert(info.name.clone(), fresh);
        }
        self.states.get_mut(&info.name).unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Stages a batch of changes, all or nothing: every line is checked
    /// against the sets as the lines before it leave them (without copying
    /// a set), and only if all hold are they applied; else the first bad
    /// line, and nothing changed. [`RuntimeSets::commit`] makes the rules to
    /// publish, once for any number of staged batches. `now` is wall-clock ns.
    pub fn stage(
        &mut self,
        rules: &RuleSet,
        batch: &[(usize, SetCommand)],
        now: u64,
        base_of: &BaseOf<'_>,
    ) -> Result<usize, CtlError> {
        // Presence after the lines so far, where a line changed it.
        // foldhash, seeded per process as the engine's element sets are:
        // SipHash was a tenth of a large batch's time.
        let mut overlay: HashMap<(usize, Prefix), bool, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(batch.len(), foldhash::fast::RandomState::default());
        let mut emptied: BTreeSet<usize> = BTreeSet::new();
        // Elements held after the lines so far, per set a line changed.
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        let mut sets = Vec::with_capacity(batch.len());
        for (line, cmd) in batch {
            let err = |message: String| CtlError { line: *line, message };
            let (SetCommand::Add { set, .. } | SetCommand::Del { set, .. } | SetCommand::Flush { set }) = cmd else {
                return Err(err(format!("`{}` does not change a set", cmd.name())));
            };
            let i = Self::index(rules, set).map_err(err)?;
            sets.push(i);
            match cmd {
                SetCommand::Add { elem, .. } => {
                    if elem.covers_all() {
                        return Err(err(format!("{elem} would match every address; put it in the rules instead")));
                    }
                    let known = overlay.get(&(i, *elem)).copied().or_else(|| emptied.contains(&i).then_some(false));
                    let s = self.state(rules, i, base_of);
                    let size = sizes.get(&i).copied().unwrap_or_else(|| s.len());
                    let present = known.unwrap_or_else(|| s.has(elem));
                    let maxelem = s.maxelem;
                    if !present {
                        if size >= maxelem {
                            let adds = batch
                                .iter()
                                .filter(|(_, c)| matches!(c, SetCommand::Add { set: s, .. } if s == set))
                                .count();
                            let full = ChangeError::Full { elem: *elem, maxelem };
                            let message = if batch.len() > 1 {
                                format!("add {set} {elem}: {full}; the batch is refused whole, nothing applied")
                            } else {
                                format!("add {set} {elem}: {full}")
                            };
                            self.refused.count(set, REFUSED_FULL, adds as u64, || message.clone());
                            return Err(err(message));
                        }
                        sizes.insert(i, size + 1);
                    } else {
                        sizes.insert(i, size);
                    }
                    overlay.insert((i, *elem), true);
                }
                SetCommand::Del { elem, .. } => {
                    let present = match overlay.get(&(i, *elem)) {
                        Some(&p) => Ok(p),
                        None if emptied.contains(&i) => Ok(false),
                        None => self.state(rules, i, base_of).can_del(elem).map(|()| true),
                    };
                    match present {
                        Ok(true) => {}
                        Ok(false) => {
                            return Err(err(format!("del {set} {elem}: {}", ChangeError::NotInSet(*elem))));
                        }
                        Err(e) => return Err(err(format!("del {set} {elem}: {e}"))),
                    }
                    let size = match sizes.get(&i) {
                        Some(&n) => n,
                        None => self.state(rules, i, base_of).len(),
                    };
                    sizes.insert(i, size.saturating_sub(1));
                    overlay.insert((i, *elem), false);
                }
                SetCommand::Flush { .. } => {
                    emptied.insert(i);
                    sizes.insert(i, 0);
                    overlay.retain(|(j, _), _| *j != i);
                }
                _ => unreachable!("matched above"),
            }
        }
        for ((_, cmd), &i) in batch.iter().zip(&sets) {
            let s = self.state(rules, i, base_of);
            match cmd {
                // Checked above: the set has room.
                SetCommand::Add { elem, timeout, .. } => s.add(*elem, *timeout, now).unwrap_or(()),
                // Checked above.
                SetCommand::Del { elem, .. } => s.del(*elem).unwrap_or(()),
                SetCommand::Flush { .. } => {
                    s.flush();
                    self.flushed.insert(i);
                }
                _ => {}
            }
            self.touched.insert(i);
        }
        Ok(batch.len())
    }

    /// Stages a feed's changes (see [`Feed`]); committed like a batch.
    pub fn feed(
        &mut self,
        rules: &RuleSet,
        feed: &Feed,
        now: u64,
        base_of: &BaseOf<'_>,
    ) -> Result<FeedOutcome, String> {
        let i = Self::index(rules, &feed.set)?;
        let s = self.state(rules, i, base_of);
        let mut out = FeedOutcome::default();
        if feed.full {
            // The whole content: anything else goes (O(set), as the pull was).
            let want: std::collections::HashSet<Prefix> = feed.adds.iter().map(|a| a.0).collect();
            for (p, _) in s.elements() {
                if !want.contains(&p) && s.del(p).is_ok() {
                    out.deleted += 1;
                }
            }
        }
        // Deletes first: they make room for the adds, and an element both
        // deleted and added (one decision on it ended, another began) is in
        // the set afterwards, as the LAPI has it.
        for p in &feed.dels {
            match s.del(*p) {
                Ok(()) => out.deleted += 1,
                Err(_) => out.ignored += 1,
            }
        }
        let mut last_refused = None;
        if !feed.tag_names.is_empty() {
            s.name_tags(&feed.tag_names);
        }
        for (k, &(p, timeout)) in feed.adds.iter().enumerate() {
            if p.covers_all() {
                out.ignored += 1;
                continue;
            }
            let new = !s.has(&p);
            // Past maxelem the answer applies as far as it fits (see
            // docs/crowdsec.md): the LAPI is trusted with decisions, the
            // limit only bounds memory, and refusing the whole answer would
            // enforce fewer of them, at every pull alike.
            let added = match feed.tags.get(k) {
                Some(&tag) => s.add_tagged(p, timeout, now, tag),
                None => s.add(p, timeout, now),
            };
            match added {
                Ok(()) => out.added += usize::from(new),
                Err(e) => {
                    out.refused += 1;
                    last_refused = Some(e);
                }
            }
        }
        if let Some(e) = last_refused {
            let n = out.refused;
            self.refused.count(&feed.set, REFUSED_FULL, n as u64, || {
                format!("{e} ({n} of this answer's adds refused, the rest applied)")
            });
        }
        self.touched.insert(i);
        Ok(out)
    }

    /// The rules with every staged change, to publish (None when nothing
    /// was staged), and how many deltas were folded into new tables.
    pub fn commit(&mut self, rules: &RuleSet) -> (Option<RuleSet>, usize) {
        if self.touched.is_empty() {
            return (None, 0);
        }
        let mut merges = 0;
        let mut changes = Vec::new();
        let threshold = (self.merge_min, self.merge_ratio);
        for i in std::mem::take(&mut self.touched) {
            let name = &rules.named_set_info()[i].name;
            let Some(s) = self.states.get_mut(name) else { continue };
            let running = self.background.then_some(&mut self.running);
            let flushed = self.flushed.contains(&i);
            changes.push(change_for(rules, i, name, s, flushed, threshold, running, &mut merges));
        }
        self.flushed.clear();
        (Some(rules.with_sets(changes)), merges)
    }

    /// Merges that finished on their threads: the rules with their new
    /// tables (the changes made meanwhile as the new deltas), and how many.
    /// With `wait`, waits for every running merge.
    pub fn poll_merges(&mut self, rules: &RuleSet, wait: bool) -> (Option<RuleSet>, usize) {
        let mut changes = Vec::new();
        let mut finished = 0;
        let mut still = Vec::new();
        for r in std::mem::take(&mut self.running) {
            let got =
                if wait { r.done.recv().map_err(|_| mpsc::TryRecvError::Disconnected) } else { r.done.try_recv() };
            match got {
                Ok((tables, elems)) => {
                    let (Some(s), Some(i)) = (self.states.get_mut(&r.set), rules.named_index(&r.set)) else { continue };
                    if s.finish_merge(r.seq, elems) {
                        finished += 1;
                        changes.push(SetChange { set: i, base: Some(tables), delta: s.delta(), tags: s.tags() });
                    }
                }
                Err(mpsc::TryRecvError::Empty) => still.push(r),
                Err(mpsc::TryRecvError::Disconnected) => {
                    tracing::error!("set `{}`: the merge thread died; the delta stays", r.set);
                    if let Some(s) = self.states.get_mut(&r.set) {
                        s.merge_abandoned();
                    }
                }
            }
        }
        self.running = still;
        ((!changes.is_empty()).then(|| rules.with_sets(changes)), finished)
    }

    /// The earliest deadline of any element (wall-clock ns).
    pub fn next_deadline(&self) -> Option<u64> {
        self.states.values().filter_map(SetState::next_deadline).min()
    }

    /// Removes what expired by `now`: the new rules and how many elements
    /// left, or None when nothing did.
    pub fn expire(&mut self, rules: &RuleSet, now: u64) -> Option<(RuleSet, usize)> {
        let mut changes = Vec::new();
        let mut gone = 0;
        for (name, s) in &mut self.states {
            if s.next_deadline().is_none_or(|d| d > now) {
                continue;
            }
            gone += s.expire(now);
            let Some(i) = rules.named_index(name) else { continue };
            let running = self.background.then_some(&mut self.running);
            let mut merged = 0;
            changes.push(change_for(
                rules,
                i,
                name,
                s,
                false,
                (self.merge_min, self.merge_ratio),
                running,
                &mut merged,
            ));
        }
        (!changes.is_empty()).then(|| (rules.with_sets(changes), gone))
    }

    /// After a reload: `dynamic` sets keep their elements (folded into the
    /// new rules' tables); runtime changes to other sets are dropped, as
    /// their files were read again. Returns the rules to publish and the
    /// names of the sets whose changes were dropped.
    pub fn carry_over(&mut self, new: RuleSet) -> (RuleSet, Vec<String>) {
        // Merges under way built tables for the old rules: the sets are
        // merged here instead.
        self.running.clear();
        self.touched.clear();
        self.flushed.clear();
        let mut dropped = Vec::new();
        let mut changes = Vec::new();
        let old = std::mem::take(&mut self.states);
        for (name, mut s) in old {
            let i = new.named_index(&name);
            match i.map(|i| (i, new.named_set_info()[i].kind)) {
                Some((i, SetKind::Dynamic { timeout, .. })) => {
                    s.default_timeout = timeout;
                    s.maxelem = self.maxelem(&new.named_set_info()[i]);
                    if s.len() > s.maxelem {
                        tracing::warn!(
                            "set `{name}` holds {} elements, over its maxelem {} now: it keeps them, and takes no new one until enough leave",
                            s.len(),
                            s.maxelem
                        );
                    }
                    changes.push(SetChange {
                        set: i,
                        base: Some(new.build_base(&s.merge())),
                        delta: None,
                        tags: s.tags(),
                    });
                    self.states.insert(name, s);
                }
                _ => dropped.push(name),
            }
        }
        dropped.sort();
        let rules = if changes.is_empty() { new } else { new.with_sets(changes) };
        (rules, dropped)
    }

    /// Every named set with its counts.
    pub fn rows(&self, rules: &RuleSet) -> Vec<SetRow> {
        rules
            .named_set_info()
            .iter()
            .map(|info| {
                let (base, added, deleted, merges, maxelem) = match self.states.get(&info.name) {
                    Some(s) => {
                        let (b, a, d) = s.counts();
                        (b, a, d, s.merges, s.maxelem)
                    }
                    None => (info.entries, 0, 0, 0, self.maxelem(info)),
                };
                SetRow {
                    name: info.name.clone(),
                    kind: kind_name(info.kind),
                    base,
                    added,
                    deleted,
                    entries: base + added - deleted.min(base + added),
                    maxelem,
                    merges,
                }
            })
            .collect()
    }

    /// Which element of `set` matches `addr` (None: none does).
    pub fn test(
        &mut self,
        rules: &RuleSet,
        set: &str,
        addr: IpAddr,
        base_of: &BaseOf<'_>,
    ) -> Result<Option<Found>, String> {
        let i = Self::index(rules, set)?;
        let hit = rules.base_contains(i, addr);
        Ok(self.state(rules, i, base_of).find(hit, addr))
    }

    /// Every element of `set` with its deadline; false when the base's
    /// elements are not known (only those added are listed).
    pub fn list(&mut self, rules: &RuleSet, set: &str, base_of: &BaseOf<'_>) -> Result<Listing, String> {
        let i = Self::index(rules, set)?;
        let s = self.state(rules, i, base_of);
        Ok((s.elements(), s.base_known()))
    }
}
