//! Runtime set changes into the kernel.
//!
//! The shield runs the same control plane as the bridge (`sluice_policy::
//! Controller`: `sluice ctl`'s add/del/flush, timeouts, the safety net,
//! maxelem), with merges off so that a dynamic set's elements are all in
//! its delta. Before each rule set is published, and so before a change is
//! answered, [`Mirror::sync`] writes the difference into the set's kernel
//! tries: an acknowledged add is enforced.
//!
//! A reload (SIGHUP, `--watch`, `ctl reload`) publishes rules of a new id:
//! the mirror then compiles them into a new program with new tables, fills
//! its dynamic sets, and swaps it into every interface's link in one step
//! (`BPF_LINK_UPDATE`): each packet meets the old program or the new one.
//!
//! With a BGP feed ([`BgpMirror`]), each new flow table's blackhole routes
//! are written into the blackhole set's tries as a difference, as a
//! dynamic set's elements are; a change in the FlowSpec flows the kernel
//! can run is a new program built from the rules last read, swapped in
//! the same way.

use crate::flows::{BgpRules, KernelFlows, BLACKHOLE_SET};
use crate::{Compiled, ShieldError};
use sluice_engine::dynamic::AddedEdit;
use sluice_engine::flows::{FlowTable, Placement};
use sluice_engine::RuleSet;
use sluice_live::bpf::XdpLink;
use sluice_policy::Publication;
use sluice_rules::{Prefix, Rule};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

/// What runs in the kernel: the program with its tables, and the links
/// that attach it.
pub struct Kernel {
    pub compiled: Compiled,
    pub links: Vec<XdpLink>,
    /// Reloads swapped in, and reloads the kernel program refused.
    pub reloads: u64,
    pub reloads_failed: u64,
}

/// Where a new program's rules come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reread {
    /// The files as they are now (a reload).
    Disk,
    /// The last read's entries `elapsed` seconds after it (their timeouts
    /// passed).
    Expired(u64),
    /// The last read's entries as they are now (only BGP's flows changed).
    Last,
}

/// Compiles the rules from where [`Reread`] says, with a BGP feed's rules
/// when the shield has one.
pub type Rebuild = Box<dyn FnMut(Reread, Option<&BgpRules>) -> Result<Compiled, ShieldError> + Send>;

/// What `ctl status` and the metrics show of the BGP routes in the kernel.
#[derive(Clone, Debug, Default)]
pub struct BgpShown {
    /// Blackhole routes in the kernel's set.
    pub blackholes: usize,
    /// FlowSpec flows in the program, and the rules they take.
    pub flows_enforced: usize,
    pub flow_rules: usize,
    /// Flows of the table in force the program does not run, by reason.
    pub refused: BTreeMap<&'static str, u64>,
    /// Programs built for new flows that the kernel refused.
    pub programs_failed: u64,
    /// The flows the program in force runs, to count ([`copy_flow_counts`]).
    pub in_program: Option<ProgramFlows>,
}

/// The FlowSpec flows of the program in force: the table they are from,
/// and per flow its index there and its rules' indices in the program.
#[derive(Clone, Debug)]
pub struct ProgramFlows {
    pub table: Arc<FlowTable>,
    pub spans: Vec<(usize, std::ops::Range<usize>)>,
}

/// Copies the kernel's counters of the FlowSpec flows' rules into the
/// flows' own counters, which `sluice ctl flows` shows (the control
/// plane calls this every tick). A flow's packets are its rules' (a packet
/// meets one of them at most: a drop ends the walk, a stop skips the
/// rest); a discard drops them all, a rate those it found over, unless
/// `dry_run`. The kernel's counters start again with each program
/// (a reload, new flows), and so do these. The blackhole routes' drops are
/// the one rule's over their set (`drop daddr @bgp-blackholes`, in the
/// summary and the metrics), not a route's own.
pub fn copy_flow_counts(kernel: &Mutex<Kernel>, shown: &Mutex<BgpShown>, dry_run: bool) {
    use sluice_engine::flows::FlowVerdict;
    let Some(flows) = shown.lock().unwrap_or_else(PoisonError::into_inner).in_program.clone() else { return };
    let (counts, over) = {
        let k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        match (k.compiled.counts(), k.compiled.police_dropped()) {
            (Ok(c), Ok(o)) => (c, o),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!("the flows' counters: {e}");
                return;
            }
        }
    };
    for (i, rules) in &flows.spans {
        let (Some(flow), Some(matched)) = (flows.table.rules().get(*i), counts.get(rules.clone())) else { continue };
        let (packets, bytes) = matched.iter().fold((0, 0), |(p, b), c| (p + c.packets, b + c.bytes));
        // A discard drops what it matches, a rate what its police rule
        // found over, an accept nothing.
        let dropped = match flow.verdict {
            _ if dry_run => 0,
            FlowVerdict::Drop => packets,
            FlowVerdict::Police(_) => over.get(rules.clone()).map_or(0, |o| o.iter().map(|n| n.unwrap_or(0)).sum()),
            FlowVerdict::Accept => 0,
        };
        flow.counts.packets.store(packets, Ordering::Relaxed);
        flow.counts.bytes.store(bytes, Ordering::Relaxed);
        flow.counts.dropped.store(dropped, Ordering::Relaxed);
    }
}

/// What the kernel holds of a BGP feed's table.
pub struct BgpMirror {
    placement: Placement,
    /// The table last seen (each new one is a new `Arc`).
    seen: Option<Arc<FlowTable>>,
    /// What that table asks of the kernel.
    wanted: KernelFlows,
    /// The FlowSpec rules of the program in force, and the index of the
    /// first among its rules.
    in_program: Vec<Rule>,
    /// Which of them stop the flows (a flow's T bit changes this, not its rules).
    in_program_stops: Vec<bool>,
    first: usize,
    /// The blackholes in the tries of the program in force.
    blackholes: HashSet<Prefix>,
    /// Whether `wanted` may hold other blackholes than `blackholes` (a new
    /// table, or a new program's empty tables): otherwise a sync skips the
    /// set difference, O(routes), that most publications (a `ctl add`)
    /// have no need of.
    stale: bool,
    pub shown: Arc<Mutex<BgpShown>>,
}

impl BgpMirror {
    pub fn new(placement: Placement) -> BgpMirror {
        BgpMirror {
            placement,
            seen: None,
            wanted: KernelFlows { placement, ..KernelFlows::default() },
            in_program: Vec::new(),
            in_program_stops: Vec::new(),
            first: 0,
            blackholes: HashSet::new(),
            stale: true,
            shown: Arc::default(),
        }
    }

    /// The rules a program is built with now.
    pub fn program_rules(&self) -> BgpRules {
        self.wanted.program_rules()
    }

    /// Takes `table` in when it is new: whether the program's FlowSpec
    /// rules must change.
    fn see(&mut self, table: Option<&Arc<FlowTable>>) -> bool {
        if self.seen.as_ref().map(Arc::as_ptr) == table.map(Arc::as_ptr) {
            return false;
        }
        self.seen = table.cloned();
        self.stale = true;
        let known = std::mem::take(&mut self.wanted.refused_texts);
        self.wanted = KernelFlows::of(table.map(Arc::as_ref), self.placement, &known);
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        shown.refused.clone_from(&self.wanted.refused);
        let rebuild = self.wanted.rules != self.in_program || self.wanted.stops != self.in_program_stops;
        if !rebuild && shown.in_program.is_some() {
            // The same rules in the program, from the new table's flows.
            shown.in_program = self.program_flows();
        }
        rebuild
    }

    /// The wanted flows as the program runs them (its rules from `first`).
    fn program_flows(&self) -> Option<ProgramFlows> {
        let table = self.seen.clone()?;
        let first = self.first;
        let spans = self.wanted.spans.iter().map(|(i, r)| (*i, r.start + first..r.end + first)).collect();
        Some(ProgramFlows { table, spans })
    }

    /// The blackhole set of `compiled` brought to the table's routes.
    fn sync_blackholes(&mut self, compiled: &Compiled) {
        if !std::mem::take(&mut self.stale) {
            return;
        }
        let Some((_, maps)) = compiled.dynamic_sets().find(|(n, _)| *n == BLACKHOLE_SET) else { return };
        for p in self.blackholes.difference(&self.wanted.blackholes) {
            if let Err(e) = maps.remove(p) {
                tracing::error!("BGP blackhole {p}: the kernel kept it: {e}");
            }
        }
        for p in self.wanted.blackholes.difference(&self.blackholes) {
            if let Err(e) = maps.insert(p, 0) {
                tracing::error!("BGP blackhole {p}: the kernel refused it: {e}");
            }
        }
        self.blackholes.clone_from(&self.wanted.blackholes);
        self.shown.lock().unwrap_or_else(PoisonError::into_inner).blackholes = self.blackholes.len();
    }

    /// The program in force now holds the wanted flows; `compiled` is it.
    fn took(&mut self, compiled: &Compiled) {
        self.in_program.clone_from(&self.wanted.rules);
        self.in_program_stops.clone_from(&self.wanted.stops);
        // The flows' rules come right after the blackhole rule: first in
        // the program, or last after the file's.
        self.first = match self.placement {
            Placement::First => 1,
            Placement::Last => compiled.rule_texts().len() - self.in_program.len(),
        };
        let flows = self.program_flows();
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        shown.in_program = flows;
        shown.flows_enforced = self.wanted.enforced;
        shown.flow_rules = self.in_program.len();
    }
}

/// A set's elements with their origin bytes, to compare (foldhash:
/// SipHash cost as much as the kernel write).
type Elems = HashMap<Prefix, u8, foldhash::fast::RandomState>;

/// What the kernel holds of each dynamic set, as last written.
pub struct Mirror {
    kernel: Arc<Mutex<Kernel>>,
    rebuild: Rebuild,
    /// Per set, the delta ([`sluice_engine::dynamic::Delta::id`]; 0: none)
    /// its tables were last brought to: the next is written as the edits
    /// since that one when it lists them (O(changes)), else as the
    /// difference from what the tables hold.
    copied: HashMap<String, u64>,
    /// The id ([`RuleSet::id`]) of the rules the program was built from.
    rules_id: u64,
    bgp: Option<BgpMirror>,
}

impl Mirror {
    /// A mirror of `kernel`'s dynamic sets, whose program holds the rules
    /// of id `rules_id`; `rebuild` compiles a reload's.
    pub fn new(kernel: Arc<Mutex<Kernel>>, rules_id: u64, rebuild: Rebuild) -> Mirror {
        Mirror { kernel, rebuild, copied: HashMap::new(), rules_id, bgp: None }
    }

    /// The same mirroring a BGP feed's tables too.
    pub fn with_bgp(mut self, bgp: BgpMirror) -> Mirror {
        self.bgp = Some(bgp);
        self
    }

    /// Brings the kernel to `rules`: a new program when they were reloaded,
    /// then every dynamic set's tables to their elements: nothing for a set
    /// whose delta is the one last written, its edits since then when the
    /// delta lists them (O(changes)), else a set difference (O(elements):
    /// after a flush, or a new program). A kernel that refuses an element
    /// (a set past its maxelem) is logged and the rest go on.
    pub fn sync(&mut self, rules: &RuleSet, why: Publication) {
        let kernel = Arc::clone(&self.kernel);
        let mut k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        // A reload with the same rule text may still change every list, and
        // expired entries leave the tables: both are a new program.
        let mut reread = match why {
            Publication::Reloaded => Some(Reread::Disk),
            Publication::Expired { elapsed } => Some(Reread::Expired(elapsed)),
            Publication::Changed => (self.rules_id != rules.id()).then_some(Reread::Disk),
        };
        if reread.is_some() {
            self.rules_id = rules.id();
        }
        // New flows for the program: built from the rules last read, unless
        // a reload builds one anyway.
        if self.bgp.as_mut().is_some_and(|b| b.see(rules.flows())) && reread.is_none() {
            reread = Some(Reread::Last);
        }
        if let Some(reread) = reread {
            self.reload(&mut k, rules, reread);
        }
        self.sync_sets(&k.compiled, rules);
        if let Some(b) = &mut self.bgp {
            b.sync_blackholes(&k.compiled);
        }
    }

    /// A reload's rules (or new BGP flows) into a new program, swapped
    /// into every link.
    fn reload(&mut self, k: &mut Kernel, rules: &RuleSet, reread: Reread) {
        // A new program for flows only is not a reload: its failures are
        // the BGP status's, and the reload counters stay the operator's.
        let what = if reread == Reread::Last { "BGP flows" } else { "reload" };
        let failed = |k: &mut Kernel, bgp: Option<&BgpMirror>| match (reread, bgp) {
            (Reread::Last, Some(b)) => b.shown.lock().unwrap_or_else(PoisonError::into_inner).programs_failed += 1,
            _ => k.reloads_failed += 1,
        };
        let bgp_rules = self.bgp.as_ref().map(BgpMirror::program_rules);
        let new = match (self.rebuild)(reread, bgp_rules.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                failed(k, self.bgp.as_ref());
                tracing::error!("{what}: {e}; the kernel keeps the program it had");
                return;
            }
        };
        // The new program's dynamic sets (the BGP blackholes too), filled
        // before it sees a packet.
        let copied_before = std::mem::take(&mut self.copied);
        self.sync_sets(&new, rules);
        let blackholes_before = self.bgp.as_mut().map(|b| {
            b.stale = true;
            std::mem::take(&mut b.blackholes)
        });
        if let Some(b) = &mut self.bgp {
            b.sync_blackholes(&new);
        }
        let refused = k.links.iter().find_map(|l| l.update(new.program()).err().map(|e| (l.iface().to_owned(), e)));
        if let Some((iface, e)) = refused {
            failed(k, self.bgp.as_ref());
            tracing::error!("{what}: {iface}: {e}; the kernel keeps the program it had");
            // The links already swapped go back to the program that stays.
            for l in &k.links {
                let _ = l.update(k.compiled.program());
            }
            self.copied = copied_before;
            if let (Some(b), Some(held)) = (&mut self.bgp, blackholes_before) {
                b.blackholes = held;
                // The old program's tables may still lack the new table's routes.
                b.stale = true;
            }
            return;
        }
        k.compiled = new;
        if reread != Reread::Last {
            k.reloads += 1;
        }
        if let Some(b) = &mut self.bgp {
            b.took(&k.compiled);
        }
        tracing::info!("{what}: {} instructions in the kernel", k.compiled.instructions());
    }

    fn sync_sets(&mut self, compiled: &Compiled, rules: &RuleSet) {
        for (name, maps) in compiled.dynamic_sets() {
            let Some(i) = rules.named_index(name) else { continue };
            let delta = rules.delta(i);
            // Each element's origin, when the kernel keeps them (the
            // CrowdSec feed's set): a present element whose origin changed
            // is among the edits.
            let tags = rules.tags(i).filter(|_| maps.counts_origins());
            let origin = |p: &Prefix| crate::tables::origin_byte(tags.and_then(|t| t.get(p)));
            // 0: no delta (the set empty); delta ids start at 1.
            let current = delta.map_or(0, |d| d.id());
            let last = self.copied.get(name).copied();
            if last == Some(current) {
                continue;
            }
            let edits = last.and_then(|l| delta?.added_since(l));
            match edits {
                Some(edits) => {
                    for edit in edits {
                        let (p, done) = match edit {
                            AddedEdit::Added(p) => (p, maps.insert(&p, origin(&p))),
                            AddedEdit::Removed(p) => (p, maps.remove(&p)),
                            AddedEdit::Retagged(p) if tags.is_some() => (p, maps.retag(&p, origin(&p))),
                            AddedEdit::Retagged(_) => continue,
                        };
                        if let Err(e) = done {
                            let what = if matches!(edit, AddedEdit::Removed(_)) { "kept" } else { "refused" };
                            tracing::error!("set `{name}`: the kernel {what} {p}: {e}");
                        }
                    }
                }
                None => {
                    // What the kernel holds, read back (the mirror keeps no
                    // copy: that cost as much as the writes), against what
                    // it should: only the difference is written, so an
                    // element in both is never absent meanwhile.
                    let old: Elems = match maps.elements() {
                        Ok(e) => e.into_iter().collect(),
                        Err(e) => {
                            tracing::error!("set `{name}`: reading its kernel tables: {e}; left as they are");
                            continue;
                        }
                    };
                    let now: Elems =
                        delta.map(|d| d.added_elements().iter().map(|p| (p, origin(&p))).collect()).unwrap_or_default();
                    for p in old.keys().filter(|p| !now.contains_key(p)) {
                        if let Err(e) = maps.remove(p) {
                            tracing::error!("set `{name}`: the kernel kept {p}: {e}");
                        }
                    }
                    // New elements, and present ones of another origin.
                    for (p, &o) in now.iter().filter(|(p, o)| old.get(p) != Some(o)) {
                        let done = if old.contains_key(p) { maps.retag(p, o) } else { maps.insert(p, o) };
                        if let Err(e) = done {
                            tracing::error!("set `{name}`: the kernel refused {p}: {e}");
                        }
                    }
                }
            }
            self.copied.insert(name.to_owned(), current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bgp::flowspec::{Component, Family, Flow, PrefixMatch};
    use sluice_engine::flows::{FlowRule, FlowVerdict};

    fn table(go_on: bool) -> Arc<FlowTable> {
        let flow = Flow {
            family: Family::V4,
            components: vec![Component::Destination(PrefixMatch::new("192.0.2.0".parse().unwrap(), 24))],
        };
        let rule = FlowRule {
            flow,
            verdict: FlowVerdict::Accept,
            go_on,
            blackhole: false,
            source: "192.0.2.1".into(),
            unsupported: Vec::new(),
            counts: Default::default(),
        };
        Arc::new(FlowTable::new(vec![rule], Placement::First))
    }

    /// A flow whose T bit flips keeps its rules but not its stop: the
    /// program must be built again; the same table again needs nothing.
    #[test]
    fn a_flows_stop_changing_is_a_new_program() {
        let mut b = BgpMirror::new(Placement::First);
        let stops = table(false);
        assert!(b.see(Some(&stops)), "the first flows");
        // As `took` leaves it once the program holds them.
        b.in_program.clone_from(&b.wanted.rules);
        b.in_program_stops.clone_from(&b.wanted.stops);
        assert!(!b.see(Some(&stops)), "the same table");
        assert!(b.see(Some(&table(true))), "the same rules, no longer stopping the flows");
    }
}
