//! Address lists as operators publish them, and membership tests over them.
//!
//! [`parse_list`] reads the plain-text format of FireHOL netsets and the
//! Spamhaus DROP list: one IPv4/IPv6 address or CIDR per line, `#` and `;`
//! comments (whole-line or trailing), blank lines, CRLF endings. A malformed
//! line is an error naming the source and line; in lenient mode it is skipped
//! and reported. Fuzzed in `fuzz/fuzz_targets/list.rs`.
#![deny(unsafe_code)]

mod list;
mod prefix;
mod set;

pub use list::{load_list, parse_list, LineError, LineErrorKind, ListError, ParsedList};
pub use prefix::{Prefix, PrefixParseError};
pub use set::PrefixHashSet;

/// The FireHOL level1 list (2,574 IPv4 entries, August 2020), embedded for
/// `sluice demo` and tests. Source: iplists.firehol.org.
pub const FIREHOL_LEVEL1: &str = include_str!("../data/firehol_level1.netset");
