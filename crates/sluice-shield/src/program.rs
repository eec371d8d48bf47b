//! The rules as one XDP program: a header parser that writes a summary of
//! the packet to the stack (what `sluice_wire::decode` finds, for the
//! shapes the kernel program reads), then each rule in order, its matches
//! as compares against that summary and lookups in the sets' tables.
//!
//! Registers while rules run: `R6` the context, `R7` data, `R8` data end,
//! `R9` scratch that survives helper calls. Everything the rules read is
//! in the stack slots below, zeroed at entry (the verifier wants every
//! slot written before it is read).
//!
//! What a packet is, as the engine sees it, and where the kernel program
//! stops short (said in docs/shield.md): Ethernet, up to four VLAN tags
//! (a fifth is undecodable, as in the engine), IPv4 with options, IPv6
//! with up to eight extension headers, TCP/UDP ports, TCP flags, ICMP
//! types, fragments. MPLS and PPPoE frames are judged as non-IP frames
//! (the engine reads the IP header behind them); `inner` matches are
//! refused at compile time.

use crate::asm::{Alu, Asm, Cond, Label, Reg, Size, FP, R0, R1, R2, R3, R4, R5, R6, R7, R8, R9};
use crate::tables::SetCode;
use sluice_rules::{Action, AddrField, FragKind, Match, PortField, Rule};

/// The packet's summary: 8-byte fields of a per-CPU scratch value (see
/// [`generate`] for why not the stack), at these offsets from `S`.
mod slot {
    /// 0: not IP; 4; 6.
    pub const IPV: i16 = 0;
    /// The source as IPv4 (host order), when `SRC4_OK`.
    pub const SRC4: i16 = 8;
    pub const DST4: i16 = 16;
    /// 1 when the address is IPv4, or IPv4-mapped and looked up as IPv4.
    pub const SRC4_OK: i16 = 24;
    pub const DST4_OK: i16 = 32;
    pub const PROTO: i16 = 40;
    pub const PORTS_OK: i16 = 48;
    pub const SPORT: i16 = 56;
    pub const DPORT: i16 = 64;
    pub const ICMP_OK: i16 = 72;
    pub const ICMP_TYPE: i16 = 80;
    pub const TCPF_OK: i16 = 88;
    pub const TCPF: i16 = 96;
    /// 0 whole, 1 first fragment, 2 later fragment.
    pub const FRAG: i16 = 104;
    pub const VLAN_OK: i16 = 112;
    pub const VLAN: i16 = 120;
    pub const WIRE_LEN: i16 = 128;
    /// IPv6 source and destination, as two 64-bit halves each (network order).
    pub const SRC6_HI: i16 = 136;
    pub const SRC6_LO: i16 = 144;
    pub const DST6_HI: i16 = 152;
    pub const DST6_LO: i16 = 160;
    /// The value's size.
    pub const SIZE: u32 = 168;
    /// A map key for helper calls, on the stack (below the frame pointer).
    pub const KEY: i16 = -8;
}
/// The scratch value's size.
pub const SUMMARY_BYTES: u32 = slot::SIZE;
pub(crate) use slot::KEY as KEY_SLOT;
pub(crate) use slot::WIRE_LEN as WIRE_LEN_SLOT;
/// The summary's base register while parsing and judging.
const S: Reg = R6;

/// `enum xdp_action`.
pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;

const ETH_P_IPV4: i32 = 0x0800;
const ETH_P_IPV6: i32 = 0x86dd;
const VLAN_TYPES: [i32; 3] = [0x8100, 0x88a8, 0x9100];
const MAX_VLAN_TAGS: usize = 4;
const MAX_EXT_HEADERS: usize = 8;

/// Counter slots past the rules' own (one per rule, in rule order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    /// Packets no `pass`/`drop` rule decided.
    Default = 0,
    /// Frames whose addresses cannot be known (the engine's decode errors).
    Undecodable = 1,
}

/// How many extra counter slots follow the rules'.
pub const EXTRA_COUNTERS: u32 = 2;

/// What the program is generated from: the rules, each address match's
/// set code (in match order), and what happens to undecodable frames.
pub struct Plan<'a> {
    pub rules: &'a [Rule],
    /// Per rule, per address match: how to test an address.
    pub addr_sets: Vec<Vec<&'a SetCode>>,
    pub default_drop: bool,
    pub undecodable_drop: bool,
    /// Look IPv4-mapped IPv6 addresses up as IPv4.
    pub v4mapped: bool,
    /// Count what would be dropped, drop nothing.
    pub dry_run: bool,
    /// The per-CPU counters map (`rules + EXTRA_COUNTERS` slots of
    /// packets and bytes).
    pub counters_fd: i32,
    /// A per-CPU array of one [`SUMMARY_BYTES`] value: the packet's summary.
    pub scratch_fd: i32,
    /// Drops sampled to user space; `None`: not one instruction for it.
    pub sample: Option<SampleTap>,
    /// Per rule: a `police` rule's buckets and numbers (`None` for the
    /// others).
    pub police: Vec<Option<crate::police::PoliceCode>>,
    /// The array of `u64` buckets the `police` rules charge (unused when
    /// no rule polices).
    pub buckets_fd: i32,
    /// A per-CPU array of (packets, bytes) per rule: what each `police`
    /// rule found over its rate (the engine's `Policer::over`).
    pub over_fd: i32,
    /// The interfaces `iface` matches name, with their ifindex (resolved
    /// on the host when compiling).
    pub ifindexes: Vec<(String, u32)>,
}

/// Where and how often dropped packets are sampled (`--sample-drops`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleTap {
    /// The `BPF_MAP_TYPE_RINGBUF` each sample is written to ([`record`]).
    pub ring_fd: i32,
    /// A per-CPU array of one counter (packets, bytes): samples a full
    /// ring had no room for.
    pub lost_fd: i32,
    /// Keep 1 in `rate` drops (at random: `bpf_get_prandom_u32`); 0 and 1: every one.
    pub rate: u32,
}

/// A sample in the ring: a header of four `u32`s in host order, then the
/// frame's first bytes (up to [`record::SNAP`]; the rest of the record is
/// not written).
pub mod record {
    /// The counter slot of what dropped it: the rule's index, or past the
    /// rules an [`super::Extra`] (the default, undecodable frames).
    pub const SLOT: usize = 0;
    /// `ctx->ingress_ifindex`.
    pub const IFINDEX: usize = 4;
    /// The frame's length (the linear part XDP sees).
    pub const LEN: usize = 8;
    /// `ctx->rx_queue_index`.
    pub const QUEUE: usize = 12;
    /// Where the frame's bytes start.
    pub const DATA: usize = 16;
    /// At most this many bytes of the frame are copied.
    pub const SNAP: usize = 128;
    /// The record's size.
    pub const SIZE: usize = DATA + SNAP;
}

/// Where the context pointer is kept on the stack when sampling or
/// matching `iface` (the tables' slots end at -88).
const CTX_SLOT: i16 = -96;
/// `struct xdp_md`'s `ingress_ifindex`.
const XDP_MD_INGRESS_IFINDEX: i16 = 12;

/// BPF helpers the sampling uses.
const HELPER_GET_PRANDOM_U32: i32 = 7;
const HELPER_RINGBUF_RESERVE: i32 = 131;
const HELPER_RINGBUF_SUBMIT: i32 = 132;
const HELPER_RINGBUF_DISCARD: i32 = 133;
const HELPER_XDP_LOAD_BYTES: i32 = 189;
/// `BPF_RB_NO_WAKEUP`: user space polls the ring on a timer, so a wakeup
/// per sample would be work on the fast path that nobody waits for.
const BPF_RB_NO_WAKEUP: i32 = 1;

/// Generates the program.
pub fn generate(plan: &Plan<'_>) -> Result<Vec<sluice_live::bpf::Insn>, crate::asm::TooFar> {
    let mut a = Asm::new();
    let undecodable = a.label();
    let parsed = a.label();
    let rules = a.label();
    // Each drop goes through the sampling block when there is one.
    let sample = plan.sample.map(|_| a.label());
    // The context is kept for the sampling and for `iface` matches.
    let reads_iface = plan.rules.iter().flat_map(|r| &r.matches).any(|m| matches!(m, Match::Iface { .. }));
    if sample.is_some() || reads_iface {
        a.stx(Size::DW, FP, CTX_SLOT, R1);
    }
    a.ldx(Size::W, R7, R1, 0);
    a.ldx(Size::W, R8, R1, 4);
    // The summary lives in a per-CPU map value, not on the stack: the
    // verifier knows what is stored on the stack, so every way through
    // the parser (IPv4 or 6, fragment or not, ports or not...) would be a
    // state of its own through all the rules, and a few rules would pass
    // its million-instruction limit. What it reads from a map value it
    // does not know, so the rules are verified once.
    a.st_imm(Size::DW, FP, slot::KEY, 0);
    a.lookup(plan.scratch_fd, slot::KEY);
    let have = a.label();
    a.jmp_imm(Cond::Ne, R0, 0, have);
    a.mov_imm(R0, XDP_PASS);
    a.exit();
    a.bind(have);
    a.mov(S, R0);
    let mut s = 0;
    while s < slot::SIZE as i16 {
        a.st_imm(Size::DW, S, s, 0);
        s += 8;
    }
    a.mov(R2, R8);
    a.alu(Alu::Sub, R2, R7);
    a.stx(Size::DW, S, slot::WIRE_LEN, R2);

    parse(&mut a, plan.v4mapped, undecodable, parsed);
    a.bind(parsed);
    // Forget the packet pointers: every way through the parser meets here
    // in one state.
    a.mov_imm(R7, 0);
    a.mov_imm(R8, 0);
    a.mov_imm(R9, 0);
    a.ja(rules);

    a.bind(undecodable);
    a.mov_imm(R7, 0);
    a.mov_imm(R8, 0);
    let undecodable_slot = plan.rules.len() as i32 + Extra::Undecodable as i32;
    count(&mut a, plan.counters_fd, undecodable_slot);
    verdict(&mut a, plan.undecodable_drop && !plan.dry_run, undecodable_slot, sample);

    a.bind(rules);
    for (r, rule) in plan.rules.iter().enumerate() {
        let next = a.label();
        let mut sets = plan.addr_sets[r].iter();
        for m in &rule.matches {
            match_code(&mut a, m, &mut sets, &plan.ifindexes, next);
        }
        count(&mut a, plan.counters_fd, r as i32);
        match rule.action {
            Action::Drop => verdict(&mut a, !plan.dry_run, r as i32, sample),
            Action::Pass => {
                a.mov_imm(R0, XDP_PASS);
                a.exit();
            }
            // Counted; on to the next rule.
            Action::Count => {}
            // Counted either way (as the engine counts a police rule's
            // packets, over or not); over the rate it decides: drop.
            Action::Police => {
                let over = a.label();
                let within = a.label();
                let code = plan.police[r].as_ref().expect("a police rule has its buckets");
                let keys = crate::police::KeySlots {
                    ipv: slot::IPV,
                    v4: [slot::SRC4, slot::DST4],
                    v6: [[slot::SRC6_HI, slot::SRC6_LO], [slot::DST6_HI, slot::DST6_LO]],
                };
                crate::police::emit(&mut a, code, plan.buckets_fd, &keys, slot::KEY, over);
                a.ja(within);
                a.bind(over);
                count(&mut a, plan.over_fd, r as i32);
                verdict(&mut a, !plan.dry_run, r as i32, sample);
                a.bind(within);
            }
        }
        a.bind(next);
    }
    let default_slot = plan.rules.len() as i32 + Extra::Default as i32;
    count(&mut a, plan.counters_fd, default_slot);
    verdict(&mut a, plan.default_drop && !plan.dry_run, default_slot, sample);
    if let (Some(tap), Some(l)) = (plan.sample, sample) {
        a.bind(l);
        sample_block(&mut a, &tap);
    }
    a.finish()
}

/// Return `XDP_DROP` (through the sampling block, with the counter slot
/// that decided in `R9`, when there is one) or `XDP_PASS`.
fn verdict(a: &mut Asm, drop: bool, slot: i32, sample: Option<Label>) {
    match (drop, sample) {
        (true, Some(l)) => {
            a.mov_imm(R9, slot);
            a.ja(l);
        }
        (drop, _) => {
            a.mov_imm(R0, if drop { XDP_DROP } else { XDP_PASS });
            a.exit();
        }
    }
}

/// A dropped packet, 1 in `rate` of them: a [`record`] reserved in the
/// ring, filled (`bpf_xdp_load_bytes` copies the frame's first bytes: the
/// verifier wants a copy of a bounded, non-zero length, which reading the
/// packet directly would have to prove per byte), and submitted; a full
/// ring loses the sample (counted), never the verdict. Then `XDP_DROP`.
/// `R9` holds the counter slot; `R6` the summary.
fn sample_block(a: &mut Asm, tap: &SampleTap) {
    let out = a.label();
    let have = a.label();
    let discard = a.label();
    let short = a.label();
    if tap.rate > 1 {
        a.call(HELPER_GET_PRANDOM_U32);
        a.jmp32_imm(Cond::Ge, R0, (1u64 << 32).div_ceil(u64::from(tap.rate)) as u32, out);
    }
    a.ld_map(R1, tap.ring_fd);
    a.mov_imm(R2, record::SIZE as i32);
    a.mov_imm(R3, 0);
    a.call(HELPER_RINGBUF_RESERVE);
    a.jmp_imm(Cond::Ne, R0, 0, have);
    count(a, tap.lost_fd, 0);
    a.ja(out);
    a.bind(have);
    a.mov(R7, R0);
    a.stx(Size::W, R7, record::SLOT as i16, R9);
    a.ldx(Size::DW, R1, FP, CTX_SLOT);
    a.ldx(Size::W, R2, R1, 12);
    a.stx(Size::W, R7, record::IFINDEX as i16, R2);
    a.ldx(Size::W, R2, R1, 16);
    a.stx(Size::W, R7, record::QUEUE as i16, R2);
    a.ldx(Size::DW, R4, S, slot::WIRE_LEN);
    a.stx(Size::W, R7, record::LEN as i16, R4);
    a.jmp_imm(Cond::Le, R4, record::SNAP as i32, short);
    a.mov_imm(R4, record::SNAP as i32);
    a.bind(short);
    a.jmp_imm(Cond::Lt, R4, 1, discard);
    a.mov_imm(R2, 0);
    a.mov(R3, R7);
    a.alu_imm(Alu::Add, R3, record::DATA as i32);
    a.call(HELPER_XDP_LOAD_BYTES);
    a.jmp_imm(Cond::Ne, R0, 0, discard);
    a.mov(R1, R7);
    a.mov_imm(R2, BPF_RB_NO_WAKEUP);
    a.call(HELPER_RINGBUF_SUBMIT);
    a.ja(out);
    a.bind(discard);
    a.mov(R1, R7);
    a.mov_imm(R2, 0);
    a.call(HELPER_RINGBUF_DISCARD);
    a.bind(out);
    a.mov_imm(R0, XDP_DROP);
    a.exit();
}

/// `counters[idx] += (1, wire length)` on this CPU.
fn count(a: &mut Asm, map_fd: i32, idx: i32) {
    let done = a.label();
    a.st_imm(Size::DW, FP, slot::KEY, idx);
    a.lookup(map_fd, slot::KEY);
    a.jmp_imm(Cond::Eq, R0, 0, done);
    a.ldx(Size::DW, R1, R0, 0);
    a.alu_imm(Alu::Add, R1, 1);
    a.stx(Size::DW, R0, 0, R1);
    a.ldx(Size::DW, R1, R0, 8);
    a.ldx(Size::DW, R2, S, slot::WIRE_LEN);
    a.alu(Alu::Add, R1, R2);
    a.stx(Size::DW, R0, 8, R1);
    a.bind(done);
}

/// `R2 = R7 + off_reg; if R2 + n > R8 goto fail` (leaves R2 = the pointer).
fn need(a: &mut Asm, off: Reg, n: i32, fail: Label) {
    a.mov(R2, R7);
    a.alu(Alu::Add, R2, off);
    a.mov(R1, R2);
    a.alu_imm(Alu::Add, R1, n);
    a.jmp(Cond::Gt, R1, R8, fail);
}

/// Ethernet, VLAN tags, IPv4/IPv6, the upper layer: the summary slots.
/// `R9` holds the offset of the header being read.
fn parse(a: &mut Asm, v4mapped: bool, undecodable: Label, rules: Label) {
    let ipv4 = a.label();
    let ipv6 = a.label();
    link_layer(a, ipv4, ipv6, undecodable, rules);
    a.bind(ipv4);
    ipv4_header(a, undecodable, rules);
    a.bind(ipv6);
    ipv6_header(a, v4mapped, undecodable, rules);
}

/// Ethernet and up to [`MAX_VLAN_TAGS`] tags (the first one's VLAN kept):
/// on to `ipv4` or `ipv6` with `R9` at the IP header.
fn link_layer(a: &mut Asm, ipv4: Label, ipv6: Label, undecodable: Label, rules: Label) {
    a.mov(R2, R7);
    a.alu_imm(Alu::Add, R2, 14);
    a.jmp(Cond::Gt, R2, R8, undecodable);
    a.ldx(Size::H, R3, R7, 12);
    a.from_be(R3, 16);
    a.mov_imm(R9, 14);
    for tag in 0..=MAX_VLAN_TAGS {
        a.jmp_imm(Cond::Eq, R3, ETH_P_IPV4, ipv4);
        a.jmp_imm(Cond::Eq, R3, ETH_P_IPV6, ipv6);
        let is_vlan = a.label();
        for ty in VLAN_TYPES {
            a.jmp_imm(Cond::Eq, R3, ty, is_vlan);
        }
        // Not a tag, not IP: judged as a non-IP frame.
        a.ja(rules);
        a.bind(is_vlan);
        if tag == MAX_VLAN_TAGS {
            // A fifth tag: the engine gives up on the frame.
            a.ja(undecodable);
            break;
        }
        need(a, R9, 4, undecodable);
        if tag == 0 {
            a.ldx(Size::H, R4, R2, 0);
            a.from_be(R4, 16);
            a.alu_imm(Alu::And, R4, 0x0fff);
            a.stx(Size::DW, S, slot::VLAN, R4);
            a.st_imm(Size::DW, S, slot::VLAN_OK, 1);
        }
        a.ldx(Size::H, R3, R2, 2);
        a.from_be(R3, 16);
        a.alu_imm(Alu::Add, R9, 4);
    }
}

/// The IPv4 header at `R9`: addresses, protocol, fragments, then the upper
/// layer when it was captured.
fn ipv4_header(a: &mut Asm, undecodable: Label, rules: Label) {
    let no_l4 = rules;
    need(a, R9, 20, undecodable);
    a.ldx(Size::B, R3, R2, 0);
    a.mov(R4, R3);
    a.alu_imm(Alu::Rsh, R4, 4);
    a.jmp_imm(Cond::Ne, R4, 4, undecodable);
    a.alu_imm(Alu::And, R3, 0x0f);
    a.jmp_imm(Cond::Lt, R3, 5, undecodable);
    a.alu_imm(Alu::Lsh, R3, 2); // header length, 20..60
    a.ldx(Size::H, R4, R2, 2);
    a.from_be(R4, 16); // total length
    let total_ok = a.label();
    a.jmp_imm(Cond::Eq, R4, 0, total_ok);
    a.jmp(Cond::Lt, R4, R3, undecodable);
    a.bind(total_ok);
    a.st_imm(Size::DW, S, slot::IPV, 4);
    a.ldx(Size::W, R5, R2, 12);
    a.from_be(R5, 32);
    a.stx(Size::DW, S, slot::SRC4, R5);
    a.ldx(Size::W, R5, R2, 16);
    a.from_be(R5, 32);
    a.stx(Size::DW, S, slot::DST4, R5);
    a.st_imm(Size::DW, S, slot::SRC4_OK, 1);
    a.st_imm(Size::DW, S, slot::DST4_OK, 1);
    a.ldx(Size::B, R5, R2, 9);
    a.stx(Size::DW, S, slot::PROTO, R5);
    // Fragments: offset (13 bits) and more-fragments.
    a.ldx(Size::H, R5, R2, 6);
    a.from_be(R5, 16);
    let whole = a.label();
    let frag_done = a.label();
    let first = a.label();
    a.mov(R1, R5);
    a.alu_imm(Alu::And, R1, 0x1fff);
    a.jmp_imm(Cond::Eq, R1, 0, first);
    a.st_imm(Size::DW, S, slot::FRAG, 2);
    // A later fragment has no upper-layer header.
    a.ja(no_l4);
    a.bind(first);
    a.jmp_imm(Cond::Set, R5, 0x2000, frag_done);
    a.ja(whole);
    a.bind(frag_done);
    a.st_imm(Size::DW, S, slot::FRAG, 1);
    a.bind(whole);
    // Options cut by the capture: the addresses count, nothing after.
    // R5 = end of the datagram (offset): total, or what was captured.
    a.ldx(Size::DW, R5, S, slot::WIRE_LEN);
    let captured = a.label();
    a.jmp_imm(Cond::Eq, R4, 0, captured);
    a.alu(Alu::Add, R4, R9);
    a.jmp(Cond::Gt, R4, R5, captured);
    a.mov(R5, R4);
    a.bind(captured);
    // R4 = L4 offset = R9 + header length; it must be captured.
    a.mov(R4, R9);
    a.alu(Alu::Add, R4, R3);
    a.ldx(Size::DW, R1, S, slot::WIRE_LEN);
    a.jmp(Cond::Gt, R4, R1, no_l4);
    upper_layer(a, false, rules);
}

/// The IPv6 header at `R9`: addresses (v4-mapped ones as IPv4 too when
/// `v4mapped`), the extension headers, then the upper layer.
fn ipv6_header(a: &mut Asm, v4mapped: bool, undecodable: Label, rules: Label) {
    need(a, R9, 40, undecodable);
    a.ldx(Size::B, R3, R2, 0);
    a.alu_imm(Alu::Rsh, R3, 4);
    a.jmp_imm(Cond::Ne, R3, 6, undecodable);
    a.st_imm(Size::DW, S, slot::IPV, 6);
    for (off, hi, lo, v4, ok) in [
        (8, slot::SRC6_HI, slot::SRC6_LO, slot::SRC4, slot::SRC4_OK),
        (24, slot::DST6_HI, slot::DST6_LO, slot::DST4, slot::DST4_OK),
    ] {
        a.ldx(Size::DW, R3, R2, off);
        a.stx(Size::DW, S, hi, R3);
        a.ldx(Size::DW, R4, R2, off + 8);
        a.stx(Size::DW, S, lo, R4);
        if v4mapped {
            // ::ffff:a.b.c.d: the first 8 bytes zero, then 0000ffff.
            let not = a.label();
            a.jmp_imm(Cond::Ne, R3, 0, not);
            a.ldx(Size::W, R3, R2, off + 8);
            a.from_be(R3, 32);
            a.jmp_imm(Cond::Ne, R3, 0xffff, not);
            a.ldx(Size::W, R3, R2, off + 12);
            a.from_be(R3, 32);
            a.stx(Size::DW, S, v4, R3);
            a.st_imm(Size::DW, S, ok, 1);
            a.bind(not);
        }
    }
    a.ldx(Size::B, R3, R2, 6);
    a.stx(Size::DW, S, slot::PROTO, R3);
    // R5 = end of the payload: 40 + payload length, or what was captured.
    a.ldx(Size::H, R4, R2, 4);
    a.from_be(R4, 16);
    a.ldx(Size::DW, R5, S, slot::WIRE_LEN);
    let captured = a.label();
    a.jmp_imm(Cond::Eq, R4, 0, captured);
    a.alu_imm(Alu::Add, R4, 40);
    a.alu(Alu::Add, R4, R9);
    a.jmp(Cond::Gt, R4, R5, captured);
    a.mov(R5, R4);
    a.bind(captured);
    a.alu_imm(Alu::Add, R9, 40);
    // Extension headers: R3 = next header, R9 = its offset.
    let upper = a.label();
    ipv6_extensions(a, upper, rules);
    a.bind(upper);
    a.mov(R4, R9);
    upper_layer(a, true, rules);
}

/// Up to [`MAX_EXT_HEADERS`] extension headers (`R3` the next header, `R9`
/// its offset, `R5` the payload's end): on to `upper` at the first that is
/// not one; a fragment's, or one cut short, goes to `rules` without an
/// upper layer.
fn ipv6_extensions(a: &mut Asm, upper: Label, rules: Label) {
    for _ in 0..MAX_EXT_HEADERS {
        let ext = a.label();
        for kind in [0, 43, 44, 60, 51, 135] {
            a.jmp_imm(Cond::Eq, R3, kind, ext);
        }
        a.ja(upper);
        a.bind(ext);
        // 8 bytes inside the payload and captured; else no upper layer.
        a.mov(R4, R9);
        a.alu_imm(Alu::Add, R4, 8);
        a.jmp(Cond::Gt, R4, R5, rules);
        need(a, R9, 8, rules);
        // R4 = this header's length.
        let long = a.label();
        let ah = a.label();
        let sized = a.label();
        a.mov_imm(R4, 8);
        a.jmp_imm(Cond::Eq, R3, 44, sized);
        a.ldx(Size::B, R4, R2, 1);
        a.jmp_imm(Cond::Eq, R3, 51, ah);
        a.ja(long);
        a.bind(ah);
        a.alu_imm(Alu::Add, R4, 2);
        a.alu_imm(Alu::Lsh, R4, 2);
        a.ja(sized);
        a.bind(long);
        a.alu_imm(Alu::Add, R4, 1);
        a.alu_imm(Alu::Lsh, R4, 3);
        a.bind(sized);
        a.mov(R1, R9);
        a.alu(Alu::Add, R1, R4);
        a.jmp(Cond::Gt, R1, R5, rules);
        // A fragment header: first (offset 0) or later.
        let not_frag = a.label();
        let next = a.label();
        a.jmp_imm(Cond::Ne, R3, 44, not_frag);
        a.ldx(Size::H, R1, R2, 2);
        a.from_be(R1, 16);
        a.alu_imm(Alu::Rsh, R1, 3);
        a.st_imm(Size::DW, S, slot::FRAG, 1);
        a.jmp_imm(Cond::Eq, R1, 0, not_frag);
        a.st_imm(Size::DW, S, slot::FRAG, 2);
        // Only the first fragment carries further headers.
        a.ldx(Size::B, R3, R2, 0);
        a.stx(Size::DW, S, slot::PROTO, R3);
        a.ja(rules);
        a.bind(not_frag);
        a.ldx(Size::B, R3, R2, 0);
        a.stx(Size::DW, S, slot::PROTO, R3);
        a.alu(Alu::Add, R9, R4);
        a.ja(next);
        a.bind(next);
    }
    // Past the eighth: the engine stops walking (no upper layer).
    for kind in [0, 43, 44, 60, 51, 135] {
        a.jmp_imm(Cond::Eq, R3, kind, rules);
    }
}

/// TCP/UDP ports, TCP flags, the ICMP type, from the header at offset R4
/// when it lies inside the datagram (end offset R5); then the rules.
fn upper_layer(a: &mut Asm, v6: bool, rules: Label) {
    let tcp = a.label();
    let udp = a.label();
    let icmp = a.label();
    a.ldx(Size::DW, R3, S, slot::PROTO);
    a.jmp_imm(Cond::Eq, R3, 6, tcp);
    a.jmp_imm(Cond::Eq, R3, 17, udp);
    a.jmp_imm(Cond::Eq, R3, if v6 { 58 } else { 1 }, icmp);
    a.ja(rules);

    let inside = |a: &mut Asm, n: i32| {
        a.mov(R1, R4);
        a.alu_imm(Alu::Add, R1, n);
        a.jmp(Cond::Gt, R1, R5, rules);
        need(a, R4, n, rules);
    };
    let ports = |a: &mut Asm| {
        a.ldx(Size::H, R3, R2, 0);
        a.from_be(R3, 16);
        a.stx(Size::DW, S, slot::SPORT, R3);
        a.ldx(Size::H, R3, R2, 2);
        a.from_be(R3, 16);
        a.stx(Size::DW, S, slot::DPORT, R3);
        a.st_imm(Size::DW, S, slot::PORTS_OK, 1);
    };

    a.bind(tcp);
    inside(a, 20);
    // Data offset: at least 5 words, all captured inside the datagram.
    a.ldx(Size::B, R3, R2, 12);
    a.alu_imm(Alu::Rsh, R3, 4);
    a.jmp_imm(Cond::Lt, R3, 5, rules);
    a.alu_imm(Alu::Lsh, R3, 2);
    a.mov(R1, R4);
    a.alu(Alu::Add, R1, R3);
    a.jmp(Cond::Gt, R1, R5, rules);
    ports(a);
    a.ldx(Size::B, R3, R2, 13);
    a.stx(Size::DW, S, slot::TCPF, R3);
    a.st_imm(Size::DW, S, slot::TCPF_OK, 1);
    a.ja(rules);

    a.bind(udp);
    inside(a, 8);
    ports(a);
    a.ja(rules);

    a.bind(icmp);
    inside(a, 8);
    a.ldx(Size::B, R3, R2, 0);
    a.stx(Size::DW, S, slot::ICMP_TYPE, R3);
    a.st_imm(Size::DW, S, slot::ICMP_OK, 1);
    a.ja(rules);
}

/// `if slot == 0 goto fail`.
fn require(a: &mut Asm, s: i16, fail: Label) {
    a.ldx(Size::DW, R1, S, s);
    a.jmp_imm(Cond::Eq, R1, 0, fail);
}

/// Jumps to `fail` unless R3 is one of `values` (or, negated, is none).
fn one_of(a: &mut Asm, values: impl IntoIterator<Item = (u32, u32)>, negate: bool, fail: Label) {
    let hit = a.label();
    let done = a.label();
    // An immediate is sign-extended: values past i32::MAX go through R4.
    let jump = |a: &mut Asm, cond: Cond, v: u32, to: Label| match i32::try_from(v) {
        Ok(imm) => a.jmp_imm(cond, R3, imm, to),
        Err(_) => {
            a.ld_imm64(R4, u64::from(v));
            a.jmp(cond, R3, R4, to);
        }
    };
    for (lo, hi) in values {
        if lo == hi {
            jump(a, Cond::Eq, lo, hit);
        } else {
            let skip = a.label();
            jump(a, Cond::Lt, lo, skip);
            jump(a, Cond::Le, hi, hit);
            a.bind(skip);
        }
    }
    // No value matched.
    if negate {
        a.ja(done);
    } else {
        a.ja(fail);
    }
    a.bind(hit);
    if negate {
        a.ja(fail);
    }
    a.bind(done);
}

fn match_code<'s>(
    a: &mut Asm,
    m: &Match,
    sets: &mut impl Iterator<Item = &'s &'s SetCode>,
    ifindexes: &[(String, u32)],
    fail: Label,
) {
    match m {
        Match::Addr { field, negate, .. } => {
            let set = sets.next().expect("a set code per address match");
            require(a, slot::IPV, fail);
            let hit = a.label();
            let miss = a.label();
            // Per side: the IPv4 address when there is one (or the
            // IPv4-mapped one, with --v4mapped), else the IPv6 address.
            let sides: &[(i16, i16, i16, i16)] = match field {
                AddrField::Src => &[(slot::SRC4_OK, slot::SRC4, slot::SRC6_HI, slot::SRC6_LO)],
                AddrField::Dst => &[(slot::DST4_OK, slot::DST4, slot::DST6_HI, slot::DST6_LO)],
                AddrField::Either => &[
                    (slot::SRC4_OK, slot::SRC4, slot::SRC6_HI, slot::SRC6_LO),
                    (slot::DST4_OK, slot::DST4, slot::DST6_HI, slot::DST6_LO),
                ],
            };
            for &(ok, addr, hi, lo) in sides {
                let next = a.label();
                let v6 = a.label();
                a.ldx(Size::DW, R1, S, ok);
                a.jmp_imm(Cond::Eq, R1, 0, v6);
                a.ldx(Size::DW, R9, S, addr);
                set.emit_v4(a, hit, next);
                a.bind(v6);
                a.ldx(Size::DW, R1, S, slot::IPV);
                a.jmp_imm(Cond::Ne, R1, 6, next);
                a.ldx(Size::DW, R7, S, hi);
                a.ldx(Size::DW, R8, S, lo);
                set.emit_v6(a, hit, next);
                a.bind(next);
            }
            a.ja(miss);
            a.bind(hit);
            if *negate {
                a.ja(fail);
            }
            let done = a.label();
            a.ja(done);
            a.bind(miss);
            if !*negate {
                a.ja(fail);
            }
            a.bind(done);
        }
        Match::Proto { negate, protos, .. } => {
            require(a, slot::IPV, fail);
            a.ldx(Size::DW, R3, S, slot::PROTO);
            one_of(a, protos.iter().map(|&p| (u32::from(p), u32::from(p))), *negate, fail);
        }
        Match::Port { proto, field, negate, ranges, .. } => {
            require(a, slot::IPV, fail);
            a.ldx(Size::DW, R3, S, slot::PROTO);
            a.jmp_imm(Cond::Ne, R3, i32::from(*proto), fail);
            require(a, slot::PORTS_OK, fail);
            a.ldx(Size::DW, R3, S, if *field == PortField::Src { slot::SPORT } else { slot::DPORT });
            one_of(a, ranges.iter().map(|&(lo, hi)| (u32::from(lo), u32::from(hi))), *negate, fail);
        }
        Match::TcpFlags { set, clear, .. } => {
            require(a, slot::IPV, fail);
            a.ldx(Size::DW, R3, S, slot::PROTO);
            a.jmp_imm(Cond::Ne, R3, 6, fail);
            require(a, slot::TCPF_OK, fail);
            a.ldx(Size::DW, R3, S, slot::TCPF);
            a.mov(R4, R3);
            a.alu_imm(Alu::And, R4, i32::from(*set));
            a.jmp_imm(Cond::Ne, R4, i32::from(*set), fail);
            a.jmp_imm(Cond::Set, R3, i32::from(*clear), fail);
        }
        Match::IcmpType { v6, negate, types, .. } => {
            require(a, slot::IPV, fail);
            a.ldx(Size::DW, R3, S, slot::PROTO);
            a.jmp_imm(Cond::Ne, R3, if *v6 { 58 } else { 1 }, fail);
            require(a, slot::ICMP_OK, fail);
            a.ldx(Size::DW, R3, S, slot::ICMP_TYPE);
            one_of(a, types.iter().map(|&t| (u32::from(t), u32::from(t))), *negate, fail);
        }
        Match::Vlan { negate, ids } => {
            require(a, slot::VLAN_OK, fail);
            a.ldx(Size::DW, R3, S, slot::VLAN);
            one_of(a, ids.iter().map(|&v| (u32::from(v), u32::from(v))), *negate, fail);
        }
        Match::Frag { kind, .. } => {
            require(a, slot::IPV, fail);
            a.ldx(Size::DW, R3, S, slot::FRAG);
            a.jmp_imm(Cond::Ne, R3, if *kind == FragKind::First { 1 } else { 2 }, fail);
        }
        Match::Len { negate, ranges } => {
            a.ldx(Size::DW, R3, S, slot::WIRE_LEN);
            one_of(a, ranges.iter().copied(), *negate, fail);
        }
        // The interface the frame came in on, by index: the shield runs
        // one program on every interface it guards.
        Match::Iface { negate, names } => {
            a.ldx(Size::DW, R1, FP, CTX_SLOT);
            a.ldx(Size::W, R3, R1, XDP_MD_INGRESS_IFINDEX);
            let index = |n: &String| {
                ifindexes.iter().find(|(name, _)| name == n).map(|&(_, i)| (i, i)).expect("resolved when compiling")
            };
            one_of(a, names.iter().map(index), *negate, fail);
        }
    }
}
