//! The server side of HTTP/2 (RFC 9113) for `sluice http-guard`, with every
//! flood of the last years refused. No I/O: like `sluice-h1`, the caller
//! owns the socket (the guard's TLS stream after ALPN chose `h2`).
//!
//! - [`frame`]: the 9-byte header and every frame type, parsed from a
//!   slice (never panicking; a [`frame::FrameError`] carries the RFC error
//!   code and whether it is a stream or a connection error), and the
//!   encoders a server needs.
//! - [`hpack`]: h2 0.4.18's decoder, copied (MIT, `src/hpack/LICENSE-h2`)
//!   and adapted (raw bytes, whole blocks, a bound on the decoded list);
//!   our stateless encoder (static table or literal, no Huffman).
//! - [`ServerConn`]: one connection. `recv(input, now)` takes bytes from
//!   any split; [`Event`]s come out of `poll_event` (`Request` with a
//!   checked [`RequestHead`] that [`RequestHead::to_h1`] writes as the
//!   HTTP/1.1 head sluice-h1's strict parser reads unchanged, `Data`,
//!   `Reset`, `Writable`, `Breach`, `GoAway`); `send_headers`, `send_data`
//!   (bounded by both send windows), `reset`, `goaway` answer; the bytes
//!   to write are `pending_output` / `consume_output`; `release` grants
//!   the client window back as the body is forwarded; `tick` and
//!   `next_deadline` run the timers. No clock is read inside: `now` is
//!   always passed in, so every limit is testable to the millisecond.
//! - [`relay`]: the guard's HTTP/2 over its HTTP/1.1 machinery: a stream's
//!   request as HTTP/1.1 bytes ([`relay::RequestBody`]), and the upstream's
//!   HTTP/1.1 response turned into HEADERS and DATA ([`relay::ResponseRelay`],
//!   [`relay::pump`]), bounded, without I/O.
//!
//! # Limits, and why
//!
//! [`Limits`] documents each default. In short: 100 concurrent streams
//! (over it: REFUSED_STREAM, counted as a reset); the raw header block
//! (HEADERS + CONTINUATION) at most `max_head` (16 KiB, the guard's
//! `--max-head`) and 8 CONTINUATION frames, both checked on the raw bytes
//! before the block is decoded once (the CONTINUATION flood never reaches
//! HPACK); the decoded list bounded by `max_head` too (an indexed
//! reference to a big table entry repeated cannot blow 16 KiB up); HPACK
//! table 4096; stream window 65535, connection window 128 KiB. Floods, each
//! a [`BreachKind`] with a stable name, counted by token buckets against
//! the `now` given: Rapid Reset (50 resets a second net of streams
//! completed, 200 in all, streams we refuse and malformed requests counted
//! with them), SETTINGS (10, then 2 a second), PING (10 a
//! second), PRIORITY (100 plus 100 per stream opened), WINDOW_UPDATE (100 a
//! second plus 2 per DATA frame we sent), empty DATA/HEADERS/CONTINUATION
//! frames without END_STREAM (100), more than 64 unread replies (the peer
//! is not reading), the SETTINGS ack after 10 s, a stream held at a zero
//! window for 10 s. A breach queues GOAWAY (ENHANCE_YOUR_CALM, or
//! SETTINGS_TIMEOUT) and ends the connection; the guard blocks the client.
//!
//! # Memory
//!
//! Every buffer has a cap, so one connection holds at most
//! [`Limits::memory_bound`]: at the defaults [`DEFAULT_MEMORY_BOUND`] =
//! 278 009 bytes (about 272 KiB): the partial frame (16 393), the raw
//! header block (16 384), the HPACK table with its entries' overhead
//! (16 736), the queued events (64 KiB, plus one event of up to 24 KiB
//! over it, and the head being built), the streams (100 × 256), and the
//! output buffer at its hard cap ([`Limits::output_cap`]: 64 KiB, one
//! response head of up to 16 KiB, and the few replies one frame can add).
//! Reading pauses (`recv` takes fewer bytes than offered) while the output
//! is at `max_output` or the events at `max_event_bytes`; `send_data`
//! takes no more than the output has room for. The `h2_conn` fuzz target
//! checks `memory_in_use() <= memory_bound()` after every step.

pub mod conn;
pub mod frame;
mod head;
pub mod hpack;
pub mod relay;

pub use conn::{BreachKind, ConnError, Event, Limits, SendError, ServerConn, Stats, DEFAULT_MEMORY_BOUND};
pub use frame::ErrorCode;
pub use head::{chunk, RequestHead};
