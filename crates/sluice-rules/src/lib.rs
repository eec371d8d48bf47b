//! Address lists as operators publish them, the rule language, and
//! membership tests over plain sets.
//!
//! [`parse_list`] reads, line by line and in any mix: plain FireHOL netsets
//! and the Spamhaus DROP text (one IPv4/IPv6 address or CIDR per line, `#`
//! and `;` comments), ranges `a-b` (split into prefixes), ipset `save`
//! output (`add SET ELEMENT [timeout N]`), nftables set elements
//! (`elements = { ... }`, with `timeout`/`expires`), and Spamhaus DROP JSON
//! lines. Entries with a timeout are kept apart so they can expire. A
//! malformed line is an error naming the source and line; in lenient mode it
//! is skipped and reported. [`parse_rules`] reads rule files (see
//! `rulefile.rs`). Fuzzed in `fuzz/fuzz_targets/list.rs` and `rules.rs`.
#![deny(unsafe_code)]

pub mod file;
mod formats;
mod list;
mod prefix;
mod range;
mod rulefile;
pub mod safety_net;
mod set;

pub use file::write_atomic;
pub use list::{load_geo, load_list, parse_list, LineError, LineErrorKind, ListError, ParsedList};
pub use prefix::{Prefix, PrefixParseError};
pub use range::{range_to_prefixes, RangeError};
pub use rulefile::{
    load_rules, parse_rules, proto_number, tcp_flag, Action, AddrField, AddrValue, Depth, FragKind, Match, Police,
    PoliceRate, PortField, Rule, RuleError, RuleFile, RuleLoadError, SetDef, SetLoadError, SetSource, MAX_RULES,
};
pub use safety_net::{NeverBlock, Refusal, SafetyNet};
pub use set::PrefixHashSet;

/// The FireHOL level1 list (2,574 IPv4 entries, August 2020), embedded for
/// `sluice demo` and tests. Source: iplists.firehol.org.
pub const FIREHOL_LEVEL1: &str = include_str!("../data/firehol_level1.netset");
