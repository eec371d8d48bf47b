//! The bridge's side of the safety net (`sluice_guard::safety`): every
//! runtime add (a `ctl add` line, a CrowdSec decision, a block forwarded
//! from a guard) is checked before it reaches a set, and each refusal is
//! counted by set and reason in [`Refusals`] (`sluice_set_refused`, the
//! counter set sizes count into too) and logged, rate-limited.

use sluice_guard::safety::Safety;
use sluice_rules::{Prefix, Refusal};
use std::sync::Arc;

pub use crate::sets::Refusals;

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
