//! Running sluice as a service: config files that stand for flags
//! ([`config`]), logs as text or JSON lines that journald reads ([`log`]),
//! and the man pages and shell completions a package installs ([`dist`]).
//! No flags are defined here; the CLI owns them and hands its clap
//! definition in.

pub mod config;
pub mod dist;
pub mod help;
pub mod log;
