//! Cache-conscious address sets for the classification fast path.
//!
//! The limit on this work is how many independent cache-line reads one core
//! keeps in flight, so every structure here answers a lookup from one cache
//! line where it can, and every one has a batch API that computes all the
//! addresses of a batch and prefetches them before reading any (VPP's
//! dual/quad loops, DPDK's phased bulk lookup).
//!
//! - [`V4ExactSet`], [`V6ExactSet`]: open addressing over 64-byte key
//!   buckets behind a one-byte-per-slot tag array, with a cache-resident
//!   blocked Bloom [`filter`] in front.
//! - [`V4PrefixSet`], [`V6PrefixSet`]: prefix membership.
//! - [`AddressSet`]: a mixed list, v4 and v6, hosts and prefixes.
//! - [`persist`]: a built [`AddressSet`] as bytes and back, without rebuilding.
//!
//! Each is property-tested against a plain reference (std `HashSet`, a
//! linear prefix scan). `unsafe` lives only in `mem` (mmap/madvise) and
//! `simd` (SSE2 compare, prefetch).
#![deny(unsafe_code)]

mod exact;
pub mod filter;
mod hash;
pub mod mem;
pub mod persist;
mod prefix;
mod prefix6;
mod set;
pub mod simd;

pub use exact::{
    ExactLayout, Prepared, TableInfo, V4ExactSet, V6ExactSet, DEFAULT_MAX_LOAD, MAX_BATCH, PREPARED_MAX, V4_SLOTS,
    V6_SLOTS,
};
pub use hash::Hasher;
/// The first multiplier of [`Hasher::hash32`] ([`ExactLayout::mul`]), for
/// a reader that computes the hash itself (the shield's kernel program).
pub const HASH_MUL: u64 = hash::C0;
/// The high half's multiplier of [`Hasher::hash128`] ([`ExactLayout::mul_hi`]).
pub const HASH_MUL_HI: u64 = hash::C1;
pub use persist::PersistError;
pub use prefix::V4PrefixSet;
pub use prefix6::V6PrefixSet;
pub use set::{AddressSet, Options, DEFAULT_BATCH};

/// A seeded xorshift64 for tests that need many reproducible random values
/// without a strategy (large lists checked against a scan).
#[cfg(test)]
pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
