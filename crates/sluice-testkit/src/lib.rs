//! What the tests of several sluice crates share, as a dev-dependency
//! (and `sluice-bench`'s gobgpd peer): nothing here is product code.
//!
//! - [`live`] (feature `live`): network namespaces and veth pairs built
//!   with `ip` and torn down on drop, test frames, AF_PACKET endpoints.
//! - [`lapi`]: a CrowdSec Local API of a test's own, and `cscli` against it.
//! - [`names`]: the key paths of a `--json` summary and the metric
//!   families of an exposition, checked against a kept list.
//! - [`bgp`]: BGP peers on loopback: gobgpd (config, start, its API and
//!   BGP port waited for, the `gobgp` CLI, stopped on drop), BIRD 2 and
//!   ExaBGP.

pub mod bgp;
pub mod lapi;
#[cfg(feature = "live")]
pub mod live;
pub mod names;
