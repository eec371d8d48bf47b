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

use crate::{Compiled, ShieldError};
use sluice_engine::RuleSet;
use sluice_live::bpf::XdpLink;
use sluice_policy::Publication;
use sluice_rules::Prefix;
use std::collections::{HashMap, HashSet};
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

/// Compiles the rules: as they are now on disk (`None`: a reload's), or
/// as the last read's entries are `Some(elapsed)` seconds after it (their
/// timeouts passed).
pub type Rebuild = Box<dyn FnMut(Option<u64>) -> Result<Compiled, ShieldError> + Send>;

/// What the kernel holds of each dynamic set, as last written.
pub struct Mirror {
    kernel: Arc<Mutex<Kernel>>,
    rebuild: Rebuild,
    mirrored: HashMap<String, HashSet<Prefix>>,
    /// The id ([`RuleSet::id`]) of the rules the program was built from.
    rules_id: u64,
}

impl Mirror {
    /// A mirror of `kernel`'s dynamic sets, whose program holds the rules
    /// of id `rules_id`; `rebuild` compiles a reload's.
    pub fn new(kernel: Arc<Mutex<Kernel>>, rules_id: u64, rebuild: Rebuild) -> Mirror {
        Mirror { kernel, rebuild, mirrored: HashMap::new(), rules_id }
    }

    /// Brings the kernel to `rules`: a new program when they were reloaded,
    /// then every dynamic set's tries to their elements. O(elements) per
    /// call (a set difference); a kernel that refuses an element (a set
    /// past its maxelem) is logged and the rest go on.
    pub fn sync(&mut self, rules: &RuleSet, why: Publication) {
        let kernel = Arc::clone(&self.kernel);
        let mut k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        // A reload with the same rule text may still change every list, and
        // expired entries leave the tables: both are a new program.
        let rebuild = match why {
            Publication::Reloaded => Some(None),
            Publication::Expired { elapsed } => Some(Some(elapsed)),
            Publication::Changed => (self.rules_id != rules.id()).then_some(None),
        };
        if let Some(elapsed) = rebuild {
            self.rules_id = rules.id();
            self.reload(&mut k, rules, elapsed);
        }
        self.sync_sets(&k.compiled, rules);
    }

    /// A reload's rules into a new program, swapped into every link.
    fn reload(&mut self, k: &mut Kernel, rules: &RuleSet, elapsed: Option<u64>) {
        let new = match (self.rebuild)(elapsed) {
            Ok(c) => c,
            Err(e) => {
                k.reloads_failed += 1;
                tracing::error!("reload: {e}; the kernel keeps the program it had");
                return;
            }
        };
        // The new program's dynamic sets, filled before it sees a packet.
        let before = std::mem::take(&mut self.mirrored);
        self.sync_sets(&new, rules);
        for link in &k.links {
            if let Err(e) = link.update(new.program()) {
                k.reloads_failed += 1;
                tracing::error!("reload: {}: {e}; the kernel keeps the program it had", link.iface());
                // The links already swapped go back to the program that stays.
                for l in &k.links {
                    let _ = l.update(k.compiled.program());
                }
                self.mirrored = before;
                return;
            }
        }
        k.compiled = new;
        k.reloads += 1;
        tracing::info!("reload: {} instructions in the kernel", k.compiled.instructions());
    }

    fn sync_sets(&mut self, compiled: &Compiled, rules: &RuleSet) {
        for (name, maps) in compiled.dynamic_sets() {
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
