//! The control plane of sluice: where a run's rules come from
//! ([`RuleSpec`]: a rule file, a compiled file, or shorthand lists) and how
//! new rules reach running workers ([`Controller`]: reloads on SIGHUP or a
//! changed file, rebuilds when list entries expire, publication through
//! `sluice_engine::snapshot`, retirement of replaced sets off the fast
//! path).
//!
//! No argument parsing here: the CLI maps its flags onto [`RuleSpec`] and
//! prints what this crate logs (`log` crate) and counts ([`ControlState`]).
#![deny(unsafe_code)]

pub mod control;
pub mod crowdsec;
pub mod ctl;
pub mod hangup;
pub mod lapi_tls;
pub mod safety;
pub mod sets;
pub mod socket;
pub mod spec;
pub mod usage;

pub use control::{
    spawn_signals, stop_on_interrupt, wait_until_stopped, ControlState, Controller, Event, Request, SignalThread, Watch,
};
pub use spec::{describe, total_entries, Expiring, ListEntries, LoadError, Loaded, RuleSpec};

/// An error and its causes, each once, joined by ": " (what anyhow's `{:#}`
/// prints), for log lines.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // A wrapper whose message already ends with its cause's adds nothing.
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}
