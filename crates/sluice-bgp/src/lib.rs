//! BGP as a feed for the bridge. So far: FlowSpec NLRI ([`flowspec`]),
//! decoded, encoded, ordered and matched against a packet as RFC 8955
//! (IPv4) and RFC 8956 (IPv6) define them, and the messages a
//! receive-only speaker reads and sends ([`message`]), with RFC 7606's
//! error handling, and a session per peer ([`session`]). Written by hand: the crates that decode
//! FlowSpec (rustbgpd-wire, bgpkit-parser, routecore) read RFC 8956's
//! IPv6 prefix offsets wrongly or not at all (docs/crates.md).
#![deny(unsafe_code)]

pub mod flowspec;
#[allow(unsafe_code)]
pub mod md5;
pub mod message;
pub mod session;
