//! Drops by origin on the shield: what the CrowdSec bouncer pushes as its
//! usage metrics and the exporter serves (`sluice_crowdsec_dropped_*`).
//!
//! The bridge counts each drop by a rule over the CrowdSec feed's set under
//! the origin (`crowdsec`, `cscli`, `CAPI`, `lists:NAME`...) of the element
//! that matched (`sluice_engine::Stats::tag_drops`). The kernel program
//! does the same: that set's host tables keep an origin byte per slot and
//! its tries one per element ([`crate::tables::origin_byte`]: tag + 1), and
//! a drop by a rule over it looks the element up again (off the pass path:
//! only dropped packets pay) and adds to a per-CPU counter per origin and
//! family. The counters are made once and outlive reloads, as the bridge's
//! do; the origins' names and active counts are the control plane's
//! (`sluice_policy::usage::origin_usage` reads both).

use crate::program::origin_slot;
use crate::tables::ORIGIN_SLOTS;
use crate::ShieldError;
use sluice_engine::Stats;
use sluice_live::bpf::{BpfMap, MapType};
use std::os::fd::AsRawFd;

/// What each program built is given: the counters and the set whose
/// elements carry origins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginTap {
    pub counts_fd: i32,
    pub set: String,
}

/// The per-CPU counters of drops by origin and family.
pub struct OriginCounts {
    map: BpfMap,
    set: String,
}

impl OriginCounts {
    /// Counters for the drops by the elements of dynamic set `set`.
    pub fn new(set: &str) -> Result<OriginCounts, ShieldError> {
        let slots = origin_slot(ORIGIN_SLOTS, false) as u32;
        let map = BpfMap::new(MapType::PercpuArray, 4, 16, slots, 0, "sluice_origins")?;
        Ok(OriginCounts { map, set: set.to_owned() })
    }

    pub fn tap(&self) -> OriginTap {
        OriginTap { counts_fd: self.map.as_raw_fd(), set: self.set.clone() }
    }

    /// The set they count the drops of.
    pub fn set(&self) -> &str {
        &self.set
    }

    /// The counts as the engine keeps them (`Stats::tag_drops`: per tag,
    /// IPv4 then IPv6), summed over CPUs, up to the last tag with any.
    pub fn read(&self) -> Result<Vec<[sluice_engine::RuleCount; 2]>, ShieldError> {
        let mut out = vec![<[sluice_engine::RuleCount; 2]>::default(); ORIGIN_SLOTS];
        for (tag, row) in out.iter_mut().enumerate() {
            for (f, c) in row.iter_mut().enumerate() {
                let key = (origin_slot(tag, f == 1) as u32).to_ne_bytes();
                let v = self.map.lookup(&key)?.unwrap_or_default();
                for cpu in v.chunks_exact(16) {
                    c.packets += u64::from_ne_bytes(cpu[..8].try_into().expect("8 bytes"));
                    c.bytes += u64::from_ne_bytes(cpu[8..].try_into().expect("8 bytes"));
                }
            }
        }
        let used = out.iter().rposition(|r| r.iter().any(|c| c.packets > 0)).map_or(0, |i| i + 1);
        out.truncate(used);
        Ok(out)
    }

    /// [`OriginCounts::read`] as the engine's statistics, for
    /// `sluice_policy::usage::origin_usage` (the rest of them zero).
    pub fn stats(&self) -> Result<Stats, ShieldError> {
        Ok(Stats { tag_drops: self.read()?, ..Stats::default() })
    }
}

/// The CrowdSec feed on a shield, as its metrics and usage push read it:
/// the bouncer's decision counters, the kernel's drops by origin, and the
/// rules in force (the origins' names and each one's active decisions).
pub struct CrowdsecSeen {
    pub counters: std::sync::Arc<sluice_policy::crowdsec::BouncerCounters>,
    pub origins: std::sync::Arc<OriginCounts>,
    pub published: std::sync::Arc<sluice_engine::snapshot::Published<sluice_engine::RuleSet>>,
}

impl CrowdsecSeen {
    /// Drops and active decisions by origin and family, as the bridge's
    /// `origin_usage` (empty, with a warning, if the kernel cannot be read).
    pub fn usage(&self) -> Vec<sluice_policy::usage::OriginUsage> {
        let stats = match self.origins.stats() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("reading the drops by origin: {e}");
                return Vec::new();
            }
        };
        let rules = self.published.load();
        sluice_policy::usage::origin_usage(&rules.value, self.origins.set(), &stats)
    }
}
