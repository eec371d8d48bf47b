//! A strict, fast, resumable, zero-copy HTTP/1.1 request parser, and
//! [`response`], the framing of what an upstream answers. No I/O.
//!
//! [`Parser`] is the fast path: straight-line code over the bytes, with the
//! target and header-value scans done 32 or 16 bytes at a time by AVX2 or
//! SSE4.2, chosen at run time ([`Simd`]), or by a byte-class table (header
//! names go through the table, except in a common line that fits one AVX2
//! load: see `simd.rs` for why). A small state value is kept only to resume at a call boundary: a
//! head that arrives one byte per read is still parsed in O(total).
//! [`reference`] is a second, plain implementation of the same contract
//! that shares no logic with the fast path (its own character classes,
//! field reading, header semantics and body framing; only the result and
//! error types are common), so the property tests and the `http` fuzz
//! target compare two implementations end to end, body framing included.
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
pub mod samples;

pub use fast::{parse_request, parse_request_with, Parser};
pub use types::*;
