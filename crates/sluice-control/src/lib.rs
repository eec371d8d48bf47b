//! The control plane every sluice product shares, and nothing of any one
//! product: the control socket ([`socket`]: framing, peer credentials and
//! [`Role`]s, limits, counters, stop), the request language's frame and
//! the commands that cross products ([`command`]: `add`/`del`/`flush`/
//! `test`/`list` of a set, typed, encoded and parsed in one place, so the
//! guard's block forwarder and a bridge's or shield's server speak the
//! same lines), the safety net as a running command holds it ([`safety`]),
//! TLS and HTTP to a CrowdSec Local API ([`lapi`]), and the process's
//! signals ([`signals`]).
//!
//! Each product owns its own command type (a [`command::Protocol`]) and
//! its replies; the socket is generic over it. This crate depends on no
//! engine, set or product crate: the guard builds against it alone.
#![deny(unsafe_code)]

pub mod command;
pub mod lapi;
pub mod product;
pub mod safety;
pub mod signals;
pub mod socket;

pub use command::{parse_request, CtlError, Protocol, Role, SetCommand};
pub use signals::stop_on_interrupt;

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
