//! Live packet I/O for sluice: the socket layer under `sluice bridge`.
//!
//! Two kinds of port, both as a pair of rings shared with the kernel:
//!
//! - **AF_XDP** (the main path, [`xsk`] + [`bpf`]): a tiny XDP program on
//!   each interface redirects every frame of queue *q* to the AF_XDP socket
//!   in slot *q* of an XSKMAP. The sockets of both ports share one UMEM
//!   (`XDP_SHARED_UMEM`), so a frame received on port A is forwarded by
//!   putting *its UMEM address* on port B's TX ring — no copy — and a
//!   dropped frame's address goes straight back to a fill ring (netmap's
//!   buffer swap). See [`pipeline`]'s `XskTx`.
//! - **AF_PACKET** (the fallback, [`packet`]): a `TPACKET_V3` RX ring (a few
//!   ms block timeout) and a `TPACKET_V2` TX ring with `PACKET_QDISC_BYPASS`,
//!   `PACKET_IGNORE_OUTGOING`, promiscuous mode and optional
//!   `PACKET_FANOUT_HASH`. The kernel strips 802.1Q tags on receive; the
//!   port puts them back into the bytes. See [`pipeline`]'s `PacketTx`.
//!
//! On top of the sockets, [`pipeline`] (the one forwarding path: what
//! `sluice bridge` runs, and what this crate's live tests drive) makes both kinds of bridge a
//! `sluice_pipeline` source (both ports' RX rings) and sink (each passed
//! packet onto the other port's TX ring; AF_XDP by UMEM address, lending
//! received frames to the batches in place). They count frames in and out
//! through [`pipeline::PortCount`], which whoever opens them implements:
//! this crate names no metric and counts no verdict. [`open`] is how a
//! bridge opens its ports: [`open::PortPair`] yields lanes (a source and a
//! sink per queue, or one over every queue), and [`open::LivePorts`] is the
//! live pair, AF_XDP falling back to AF_PACKET; `sluice bridge` runs them.
//! [`send`] is the transmit side `sluice send` paces.
//!
//! # Why raw `bpf()`
//!
//! The XDP program is six instruction slots
//! (`return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS)`),
//! assembled by hand in [`bpf::redirect_program`] and loaded with three
//! system calls: `BPF_MAP_CREATE` (an XSKMAP), `BPF_PROG_LOAD` (the verifier
//! log is captured and put in the error when it refuses), `BPF_LINK_CREATE`
//! (attach to the interface in skb or driver mode). There is no ELF object
//! to compile, no relocation but the map fd in one `ld_imm64`, and no CO-RE,
//! so nothing needs clang, a C toolchain, libbpf or kernel BTF — and this
//! kernel has no BTF. The program is attached through a BPF link: closing the
//! link's descriptor (dropping [`XdpLink`], or the process dying) detaches
//! it, and the kernel refuses (`EBUSY`) to replace a program someone else
//! attached, which becomes [`LiveError::XdpBusy`] naming the interface and
//! the program id found there (asked through rtnetlink, [`netlink`]). We
//! need no bpffs: the map, program and link live as long as their
//! descriptors (`ip netns exec` hides `/sys/fs/bpf` anyway).
//!
//! # Ring rule: write the first slot last
//!
//! Every ring has one producer and one consumer, each owning one index
//! word. The producer writes the descriptors first and publishes the
//! producer index last, with a release store; the consumer loads the
//! producer index with an acquire load before reading the descriptors, and
//! hands the slots back with a release store of its consumer index. So the
//! kernel never sees an index that covers a slot not yet written ("write
//! the first slot last": the slot that makes the batch visible is the
//! index, and it is written after everything it covers). AF_PACKET rings
//! do the same with a status word per block (RX) or slot (TX). Each side
//! caches the other side's index and reloads it only when the cached value
//! says full (producer) or empty (consumer).
//!
//! # Measured here (Linux 6.18, veth, 2 cores, root)
//!
//! - `BPF_LINK_CREATE` for XDP works, in skb (`XDP_FLAGS_SKB_MODE`) and in
//!   driver mode (`XDP_FLAGS_DRV_MODE`) on veth; a second attach fails with
//!   `EBUSY`; closing the link detaches (checked through `IFLA_XDP`). The
//!   netlink attach (`RTM_SETLINK`/`IFLA_XDP_FD`) is therefore not
//!   implemented; netlink is used only to name the program already there.
//! - veth has copy mode only: `XDP_ZEROCOPY` bind fails with `EOPNOTSUPP`,
//!   [`BindMode::Auto`] falls back to `XDP_COPY`. The UMEM is still shared,
//!   so forwarding between the two ports copies nothing in user space.
//! - The XDP program sees a VLAN tag inline in both modes; AF_PACKET gets it
//!   stripped into the ring header and [`PacketSocket::rx_batch`] restores it.
//! - `RLIMIT_MEMLOCK` is 8 MiB and cannot be raised, yet 16 MiB UMEMs
//!   register (root's `CAP_IPC_LOCK` exempts it): a refused raise is a
//!   warning ([`Umem::warning`]); the kernel's own refusal (`ENOBUFS`) is
//!   [`LiveError::Memlock`] with the limit and the size asked.
//! - `PACKET_FANOUT_HASH` uses the kernel's symmetric flow hash: both
//!   directions of a UDP flow land on the same member index on both ports.
//! - TPACKET_V3 adds up to the block timeout of latency per hop at low rates
//!   (ping through the AF_PACKET bridge: 1.7-3.4 ms with a 2 ms timeout,
//!   against 0.15-0.5 ms through AF_XDP).
//! - Frames a *local* stack sends into a veth with checksum offload on carry
//!   a partial L4 checksum (`CHECKSUM_PARTIAL`, `TP_STATUS_CSUMNOTREADY`);
//!   forwarded as bytes, the far namespace drops them (`UdpInCsumErrors`,
//!   `TcpInCsumErrors`) on every path (AF_XDP skb/driver, AF_PACKET). Frames
//!   from a wire never have this. On veth test beds turn TX checksumming off
//!   on the far ends (`ethtool -K a0 tx off`): then ping, UDP and TCP pass.
//!
//! # Crate choice
//!
//! The rings are written on `libc` directly. Of the Rust AF_XDP crates,
//! `xsk-rs` and `libbpf-rs` (and `xdpsock`) need libbpf/libxdp, a C
//! toolchain and clang for the program; `xdpilone` is EUPL, which the
//! project's MIT/Apache licensing keeps out; the `xdp` crate is pure Rust,
//! dual MIT/Apache and has shared UMEM, but it says itself that it is early
//! and shaped for Quilkin's needs, it has broken its API in seven of eleven
//! releases, and it loads no XDP program, so we would still write the
//! `bpf()` part. The whole socket layer here is a few hundred lines over
//! `libc`, with the exact ring discipline the bridge needs (address moves
//! between two sockets' rings, per-socket fill/completion rings for
//! cross-device sharing), and no dependency beyond `libc` and `thiserror`.
//!
//! # Unsafe
//!
//! `#![deny(unsafe_code)]` here; it is allowed only in [`sys`] (system call
//! wrappers, mmap), [`bpf`] (the `bpf()` call and its attr structs), [`xsk`]
//! (ring words and UMEM bytes, including the read-only [`UmemView`] the
//! pipeline's batches borrow frames from), [`packet`] (ring blocks and
//! slots) and [`ringbuf`] (a BPF ring buffer's mapped positions and records),
//! and every block says why it is sound in a `// SAFETY:` comment.
//! [`pipeline`] and [`send`] have none.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod asm;
#[allow(unsafe_code)]
pub mod bpf;
pub mod error;
pub mod netlink;
pub mod netns;
pub mod open;
#[allow(unsafe_code)]
pub mod packet;
pub mod pipeline;
#[allow(unsafe_code)]
pub mod ringbuf;
pub mod send;
#[allow(unsafe_code)]
pub mod sys;
#[allow(unsafe_code)]
pub mod xsk;

pub use bpf::{BpfMap, MapType, MappedArray, SocketFilter, XdpLink, XdpMode, XdpProgram, XdpRedirect, XskMap};
pub use error::{LiveError, Result};
pub use packet::{Fanout, FanoutMode, FrameMeta, PacketConfig, PacketSocket};
pub use xsk::{BindMode, Desc, FramePool, Umem, UmemView, XskConfig, XskSocket};
