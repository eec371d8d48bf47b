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
//! - [`Xorshift`]: a seeded generator for random test input (a failing
//!   case names its seed and reproduces).

pub mod bgp;
pub mod lapi;
#[cfg(feature = "live")]
pub mod live;
pub mod names;

/// A seeded xorshift64 generator (seed not 0).
pub struct Xorshift(pub u64);

impl Xorshift {
    /// The next number.
    #[allow(clippy::should_implement_trait)] // Not an iterator: it never ends.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
