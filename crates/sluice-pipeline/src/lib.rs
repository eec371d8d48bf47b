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
//! This crate does no file or socket I/O and parses no arguments: capture
//! files (`sluice-pcap`), the generator (`sluice-gen`) and live ports
//! implement [`Source`] and [`Sink`]; the CLI wires them.
#![deny(unsafe_code)]

pub mod batch;
pub mod io;
pub mod judge;
pub mod lanes;
pub mod reassembly;
pub mod run;

pub use batch::{Backing, Disposition, Edit, Meta, Packet, PacketBatch, Recycler, DEFAULT_BATCH_PACKETS};
pub use io::{Collect, Discard, Fill, Sink, Source, VecSource};
pub use judge::{judge, Inline, Judge, JudgeConfig, JudgeError, LiveStats, Steering, Workers, WorkersConfig};
pub use lanes::{run_lanes, Lane};
pub use reassembly::{FragmentRouter, Inboxes, Reassembly};
pub use run::{run, wall_ns, Finished, Observer, Progress, Quiet, RunConfig, RunError, RunReport};
pub use sluice_engine::Verdict;
