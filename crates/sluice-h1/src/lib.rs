//! A strict, fast, resumable, zero-copy HTTP/1.1 request parser, and
//! [`response`], the framing of what an upstream answers. No I/O.
//!
//! [`Parser`] is the fast path: straight-line code over the bytes, with the
//! target and header-value scans done 32 or 16 bytes at a time by AVX2 or
//! SSE4.2, chosen at run time ([`Simd`]), or by a byte-class table (header
//! names always go through the table: see `simd.rs` for why). A small state value is kept only to resume at a call boundary: a
//! head that arrives one byte per read is still parsed in O(total).
//! [`reference`] is the plain byte-at-a-time state machine with the same
//! contract; the property tests hold the two equal.
//!
//! The contract is strict by default; each tolerance is a [`Lenient`] flag,
//! and every anomaly met is recorded in [`Signals`].

mod body;
mod fast;
mod semantics;
mod simd;
mod types;

pub mod reference;
pub mod response;

pub use fast::{parse_request, parse_request_with, Parser};
pub use types::*;
