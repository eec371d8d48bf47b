//! The L3 policy every packet data plane enforces (`sluice filter`,
//! `sluice bridge`, and the shield to come): where a run's rules come from
//! ([`RuleSpec`]: a rule file, a compiled file, or shorthand lists), how
//! new rules reach running workers ([`Controller`]: reloads on SIGHUP or a
//! changed file, rebuilds when list entries expire, runtime set changes
//! from the control socket and from feeds, publication through
//! `sluice_engine::snapshot`, retirement of replaced sets off the fast
//! path), the CrowdSec bouncer feed ([`crowdsec`]) and the firewall
//! bouncer's config file it reads ([`crowdsec_config`]), drops by origin
//! ([`usage`]), and the control commands these data planes answer
//! ([`commands`]). The socket, the safety net and the LAPI's TLS are the
//! shared control plane's (`sluice-control`).
//!
//! No argument parsing here: the CLI maps its flags onto [`RuleSpec`] and
//! prints what this crate logs (`tracing`) and counts ([`ControlState`]).
#![deny(unsafe_code)]

pub mod commands;
pub mod controller;
pub mod crowdsec;
pub mod crowdsec_config;
pub mod exposition;
pub mod flags;
pub mod sets;
pub mod spec;
pub mod usage;

pub use commands::Command;
pub use controller::{
    deliver_to, spawn_signals, ControlState, Controller, Event, FileWatch, Loading, LoadingError, Publication,
    SignalThread, StatusFn,
};
pub use spec::{describe, total_entries, Expiring, ListEntries, LoadError, Loaded, RuleSpec};
