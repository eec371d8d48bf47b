//! The packet pipeline, shared by every source and sink:
//!
//! ```text
//! Source::fill ─> decode once ─> Reassembly ─> Judge (Inline | Workers) ─> output step ─> Sink::write
//!   (file, port,   (PacketBatch::  (hold fragments,  (RSS-steered, rule     (input order or
//!    generator)     decode_all)     release datagrams) snapshots)            as finished)
//! ```
//!
//! Packets travel in [`PacketBatch`]es that are recycled, so steady state
//! allocates nothing per batch or per packet. Each packet is decoded once;
//! its summary travels with it through reassembly, steering and judging.
//! One [`Disposition`] per packet says whether it is judged, judged but
//! steered by a reassembled datagram's flow, or already decided.
//!
//! Two kinds of file I/O live here, both in terms of batches: capture files
//! as a source and sinks ([`capture`], over `sluice-pcap`'s reader and
//! writer), and drop samples ([`sample`]: a tap on any sink that writes
//! dropped packets, with why, to pcapng). No sockets and no arguments: the
//! generator (`sluice-gen`) and the live ports (`sluice-live`) implement
//! [`Source`] and [`Sink`] in their own crates; the CLI wires them.
#![deny(unsafe_code)]

pub mod batch;
pub mod capture;
pub mod flags;
pub mod io;
pub mod judge;
pub mod lanes;
pub mod reassembly;
pub mod run;
pub mod sample;

pub use batch::{Backing, Disposition, Edit, Meta, Packet, PacketBatch, Recycler, DEFAULT_BATCH_PACKETS};
pub use capture::{CaptureSinks, CaptureSource, ReadMode, SinkError, WriteThrough, WriteThroughError, CHUNK_BYTES};
pub use io::{Collect, Discard, Fill, Sink, Source, VecSource};
pub use judge::{judge, Inline, Judge, JudgeConfig, JudgeError, LiveStats, Steering, Workers, WorkersConfig};
pub use lanes::{run_lanes, Lane};
pub use reassembly::{FragmentRouter, Inboxes, Reassembly, ReassemblyConfig};
pub use run::{run, wall_ns, Finished, Observer, Progress, Quiet, RunConfig, RunError, RunReport};
pub use sluice_engine::Verdict;
