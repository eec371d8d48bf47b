//! The bridge's side of the safety net (`sluice_guard::safety`): every
//! runtime add (a `ctl add` line, a CrowdSec decision, a block forwarded
//! from a guard) is checked before it reaches a set, and each refusal is
//! counted by set and reason in [`Refusals`] (`sluice_set_refused`) and
//! logged, rate-limited.

use sluice_guard::safety::Safety;
use sluice_rules::{Prefix, Refusal};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Runtime adds refused, by (set, reason): `sluice_set_refused{set,reason}`.
/// Reasons are static labels (`never_block`, `min_prefix`; the set size
/// bound's `full` can count here too); sets are the rules' named sets, so
/// the series are bounded.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl Refusals {
    pub fn count(&self, set: &str, reason: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner).entry((set.to_owned(), reason)).or_default() += n;
    }

    pub fn get(&self, set: &str, reason: &str) -> u64 {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.iter().filter(|((s, r), _)| s == set && *r == reason).map(|(_, n)| *n).sum()
    }

    /// Every set's refusals of one reason.
    pub fn total(&self, reason: &str) -> u64 {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.iter().filter(|((_, r), _)| *r == reason).map(|(_, n)| *n).sum()
    }

    /// ((set, reason), refusals), sorted.
    pub fn rows(&self) -> Vec<((String, &'static str), u64)> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(k, v)| (k.clone(), *v)).collect()
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
        self.refusals.count(set, r.reason(), 1);
        self.safety.log_refusal(&format!("{what} to set `{set}`"), p, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_by_set_and_reason() {
        let r = Refusals::default();
        r.count("blocks", "never_block", 2);
        r.count("crowdsec", "min_prefix", 1);
        r.count("blocks", "never_block", 1);
        r.count("blocks", "min_prefix", 0);
        assert_eq!(r.get("blocks", "never_block"), 3);
        assert_eq!(r.get("blocks", "min_prefix"), 0);
        assert_eq!(r.total("never_block"), 3);
        assert_eq!(r.total("min_prefix"), 1);
        let rows: Vec<_> = r.rows().into_iter().map(|((s, k), n)| format!("{s} {k} {n}")).collect();
        assert_eq!(rows, ["blocks never_block 3", "crowdsec min_prefix 1"]);
    }
}
