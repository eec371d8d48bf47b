//! Runtime set changes into the kernel.
//!
//! The shield runs the same control plane as the bridge (`sluice_policy::
//! Controller`: `sluice ctl`'s add/del/flush, timeouts, the safety net,
//! maxelem), with merges off so that a dynamic set's elements are all in
//! its delta. Before each rule set is published, and so before a change is
//! answered, [`Mirror::sync`] writes the difference into the set's kernel
//! tries: an acknowledged add is enforced.

use crate::Compiled;
use sluice_engine::RuleSet;
use sluice_rules::Prefix;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What the kernel holds of each dynamic set, as last written.
pub struct Mirror {
    compiled: Arc<Compiled>,
    mirrored: HashMap<String, HashSet<Prefix>>,
    /// The rules the program was built from; a reload that changes them is
    /// not in the kernel program (said once).
    rules_id: u64,
    warned_reload: bool,
}

impl Mirror {
    /// A mirror of `compiled`'s dynamic sets, whose static part holds the
    /// rules of id `rules_id` ([`RuleSet::id`]).
    pub fn new(compiled: Arc<Compiled>, rules_id: u64) -> Mirror {
        Mirror { compiled, mirrored: HashMap::new(), rules_id, warned_reload: false }
    }

    /// Brings every dynamic set's tries to `rules`' elements. O(elements)
    /// per call (a set difference); a kernel that refuses an element (a
    /// set past its maxelem) is logged and the rest go on.
    pub fn sync(&mut self, rules: &RuleSet) {
        if self.rules_id != rules.id() && !self.warned_reload {
            self.warned_reload = true;
            tracing::warn!(
                "the rules were reloaded: the shield's kernel program keeps the rules and lists it started with \
                 (runtime set changes still apply); restart it to load new ones"
            );
        }
        for (name, maps) in self.compiled.dynamic_sets() {
            let Some(i) = rules.named_index(name) else { continue };
            let now: HashSet<Prefix> = rules.delta(i).map(|d| d.added_elements().iter().collect()).unwrap_or_default();
            let old = self.mirrored.entry(name.to_owned()).or_default();
            for p in old.difference(&now) {
                if let Err(e) = maps.remove(p) {
                    tracing::error!("set `{name}`: the kernel kept {p}: {e}");
                }
            }
            for p in now.difference(old) {
                if let Err(e) = maps.insert(p) {
                    tracing::error!("set `{name}`: the kernel refused {p}: {e}");
                }
            }
            *old = now;
        }
    }
}
