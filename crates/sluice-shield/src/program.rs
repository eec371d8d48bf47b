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
//! (the engine reads the IP header behind them). A program with `inner`
//! matches also walks the tunnels the engine walks ([`walk`]) to the
//! innermost IP header, into a second set of slots.

use crate::asm::{Alu, Asm, Cond, Label, Reg, Size, FP, R0, R1, R2, R3, R4, R5, R6, R7, R8, R9};
use crate::tables::SetCode;
use sluice_rules::{Action, AddrField, Depth, FragKind, Match, PortField, Rule};

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
    /// What every program zeroes at entry: the outer summary.
    pub const OUTER_END: i16 = 168;
    /// The innermost IP header's summary: the outer one's IP fields, in
    /// the same order, from here ([`super::INNER`]). Only a program with
    /// `inner` matches writes it.
    pub const INNER: i16 = OUTER_END;
    /// Where the upper layer of the header the tunnel walk stands on
    /// starts (0: none known), and that header's datagram end: written by
    /// the parser of a program that walks tunnels.
    pub const L4_AT: i16 = INNER + 18 * 8;
    pub const END: i16 = L4_AT + 8;
    /// The walk's offset, stored and loaded back (see [`super::walk`]).
    pub const WALK_AT: i16 = END + 8;
    /// The first counter slot of the row of the interface the frame came
    /// in on (see [`super::Plan::ifaces`]): written at entry by a program
    /// with interface rows, read by every count.
    pub const ROW: i16 = WALK_AT + 8;
    /// The value's size.
    pub const SIZE: u32 = ROW as u32 + 8;
    /// A map key for helper calls, on the stack (below the frame pointer).
    pub const KEY: i16 = -8;
}
/// The scratch value's size.
pub const SUMMARY_BYTES: u32 = slot::SIZE;
pub(crate) use slot::KEY as KEY_SLOT;
pub(crate) use slot::WIRE_LEN as WIRE_LEN_SLOT;

/// One IP header's slots in the summary: the outer header's, or the
/// innermost one's behind tunnels (`inner` matches read those).
#[derive(Clone, Copy)]
struct Layer {
    ipv: i16,
    src4: i16,
    dst4: i16,
    src4_ok: i16,
    dst4_ok: i16,
    proto: i16,
    ports_ok: i16,
    sport: i16,
    dport: i16,
    icmp_ok: i16,
    icmp_type: i16,
    tcpf_ok: i16,
    tcpf: i16,
    frag: i16,
    src6_hi: i16,
    src6_lo: i16,
    dst6_hi: i16,
    dst6_lo: i16,
}

const OUTER: Layer = Layer {
    ipv: slot::IPV,
    src4: slot::SRC4,
    dst4: slot::DST4,
    src4_ok: slot::SRC4_OK,
    dst4_ok: slot::DST4_OK,
    proto: slot::PROTO,
    ports_ok: slot::PORTS_OK,
    sport: slot::SPORT,
    dport: slot::DPORT,
    icmp_ok: slot::ICMP_OK,
    icmp_type: slot::ICMP_TYPE,
    tcpf_ok: slot::TCPF_OK,
    tcpf: slot::TCPF,
    frag: slot::FRAG,
    src6_hi: slot::SRC6_HI,
    src6_lo: slot::SRC6_LO,
    dst6_hi: slot::DST6_HI,
    dst6_lo: slot::DST6_LO,
};

/// The `i`th field of the inner layer.
const fn at(i: i16) -> i16 {
    slot::INNER + 8 * i
}

const INNER: Layer = {
    Layer {
        ipv: at(0),
        src4: at(1),
        dst4: at(2),
        src4_ok: at(3),
        dst4_ok: at(4),
        proto: at(5),
        ports_ok: at(6),
        sport: at(7),
        dport: at(8),
        icmp_ok: at(9),
        icmp_type: at(10),
        tcpf_ok: at(11),
        tcpf: at(12),
        frag: at(13),
        src6_hi: at(14),
        src6_lo: at(15),
        dst6_hi: at(16),
        dst6_lo: at(17),
    }
};

impl Layer {
    /// The layer a match of this depth reads.
    fn at(depth: Depth) -> &'static Layer {
        match depth {
            Depth::Outer => &OUTER,
            Depth::Inner => &INNER,
        }
    }

    /// The slots a match reads in this layer (none for `vlan`, `len`...).
    fn read_by(&self, m: &Match) -> Vec<i16> {
        let l = self;
        match m {
            Match::Addr { field, .. } => {
                let src = [l.src4_ok, l.src4, l.src6_hi, l.src6_lo];
                let dst = [l.dst4_ok, l.dst4, l.dst6_hi, l.dst6_lo];
                let mut v = vec![l.ipv];
                match field {
                    AddrField::Src => v.extend(src),
                    AddrField::Dst => v.extend(dst),
                    AddrField::Either => v.extend(src.into_iter().chain(dst)),
                }
                v
            }
            Match::Proto { .. } => vec![l.ipv, l.proto],
            Match::Port { field, .. } => {
                vec![l.ipv, l.proto, l.ports_ok, if *field == PortField::Src { l.sport } else { l.dport }]
            }
            Match::TcpFlags { .. } => vec![l.ipv, l.proto, l.tcpf_ok, l.tcpf],
            Match::IcmpType { .. } => vec![l.ipv, l.proto, l.icmp_ok, l.icmp_type],
            Match::Frag { .. } => vec![l.ipv, l.frag],
            Match::Vlan { .. } | Match::Len { .. } | Match::Iface { .. } => Vec::new(),
        }
    }
}

/// The depth a match reads, for those that read an IP header.
fn depth_of(m: &Match) -> Option<Depth> {
    match m {
        Match::Addr { depth, .. }
        | Match::Proto { depth, .. }
        | Match::Port { depth, .. }
        | Match::TcpFlags { depth, .. }
        | Match::IcmpType { depth, .. }
        | Match::Frag { depth, .. } => Some(*depth),
        Match::Vlan { .. } | Match::Len { .. } | Match::Iface { .. } => None,
    }
}

/// Whether a rule reads the innermost header.
pub fn reads_inner(rule: &Rule) -> bool {
    rule.matches.iter().any(|m| depth_of(m) == Some(Depth::Inner))
}

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
    /// The per-CPU counters map: a row of `rules + EXTRA_COUNTERS` slots of
    /// packets and bytes per interface row ([`Plan::ifaces`], [`rows`]).
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
    /// rule found over its rate (the engine's `Policer::over`); rows as
    /// `counters_fd`'s (the same slot numbers).
    pub over_fd: i32,
    /// The interfaces `iface` matches name, with their ifindex (resolved
    /// on the host when compiling).
    pub ifindexes: Vec<(String, u32)>,
    /// Per rule: when it matches and does not drop, the rule the packet
    /// goes on at (past a BGP table's flows: a rate's conforming packet, an
    /// accepted one), or the default's when that is past the last; `None`:
    /// the next rule.
    pub skip_to: Vec<Option<usize>>,
    /// A per-CPU array of (packets, bytes) per origin and family
    /// ([`origin_slot`]): each drop by a rule over a set whose elements
    /// carry origins is counted under the origin of the element that
    /// matched, as the engine's `Stats::tag_drops`; `None`: not one
    /// instruction for it.
    pub origin_counts_fd: Option<i32>,
    /// The interfaces the counters keep a row each for, by ifindex (the
    /// shield's own, in `--iface` order): row `i` counts the frames that
    /// came in on `ifaces[i]` (`ctx->ingress_ifindex`, compared once per
    /// packet at entry), the row past them those from any other
    /// interface (only `BPF_PROG_TEST_RUN` gives the program one). Empty:
    /// one row, and not one instruction for it.
    pub ifaces: Vec<u32>,
}

/// The slot of [`Plan::origin_counts_fd`] for origin tag `tag` and family
/// (IPv4 0, IPv6 1): `tag * 2 + family`, [`crate::tables::ORIGIN_SLOTS`]
/// tags.
pub const fn origin_slot(tag: usize, v6: bool) -> usize {
    tag * 2 + v6 as usize
}

/// How many rows of counters a program with these interfaces has.
pub fn rows(ifaces: &[u32]) -> u32 {
    if ifaces.is_empty() {
        1
    } else {
        ifaces.len() as u32 + 1
    }
}

/// Where and how often dropped packets are sampled (`--sample-drops`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleTap {
    /// The `BPF_MAP_TYPE_RINGBUF` each sample is written to ([`record`]).
    pub ring_fd: i32,
    /// A per-CPU array of counters (packets, bytes): at 0 the samples a
    /// full ring had no room for, at 1 those over the cap (`max_pps`; a
    /// map of one counts none of those).
    pub lost_fd: i32,
    /// Keep 1 in `rate` drops (at random: `bpf_get_prandom_u32`); 0 and 1: every one.
    pub rate: u32,
    /// At most this many samples a second, a burst of as many (0: no
    /// cap): a token bucket in `cap_fd`, charged as a `police` rule's
    /// (the ring is not touched for a sample over it).
    pub max_pps: u64,
    /// A BPF array of one `u64`, the cap's bucket (unused without a cap).
    pub cap_fd: i32,
}

impl SampleTap {
    /// The cap as a `police` rule's bucket: a sample costs 1e9 / `max_pps`
    /// ns, and `max_pps` back to back conform (the writer's own cap, a
    /// token bucket of `max_pps` tokens, lets as many through); `None`
    /// without a cap (or one past 1e9 a second, which the clock cannot
    /// tell from none).
    pub fn cap(&self) -> Option<crate::police::PoliceCode> {
        let cost = 1_000_000_000u64.checked_div(self.max_pps).filter(|&c| c > 0)?;
        Some(crate::police::PoliceCode {
            base: 0,
            per: None,
            tolerance_ns: cost * (self.max_pps - 1),
            cost: crate::police::Cost::Fixed(cost),
        })
    }
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
/// Where the sampling block keeps the counter slot (R9) while the cap's
/// check clobbers it.
const SAMPLE_SLOT: i16 = -112;
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
    // The context is kept for the sampling, for `iface` matches and for the
    // tunnel walk. Tunnels are walked (just before the first rule that
    // reads the innermost header) only in a program that has such a rule:
    // the others are not one instruction longer.
    let reads_iface = plan.rules.iter().flat_map(|r| &r.matches).any(|m| matches!(m, Match::Iface { .. }));
    let walk_at = plan.rules.iter().position(reads_inner);
    if sample.is_some() || reads_iface || walk_at.is_some() {
        a.stx(Size::DW, FP, CTX_SLOT, R1);
    }
    a.ldx(Size::W, R7, R1, 0);
    a.ldx(Size::W, R8, R1, 4);
    let rowed = !plan.ifaces.is_empty();
    if rowed {
        // R9 = the first counter slot of the interface's row (kept across
        // the lookup below, stored into the summary once it is there).
        let stride = plan.rules.len() as i32 + EXTRA_COUNTERS as i32;
        let found = a.label();
        a.ldx(Size::W, R2, R1, XDP_MD_INGRESS_IFINDEX);
        for (row, &ifindex) in plan.ifaces.iter().enumerate() {
            let next = a.label();
            a.jmp_imm(Cond::Ne, R2, ifindex as i32, next);
            a.mov_imm(R9, row as i32 * stride);
            a.ja(found);
            a.bind(next);
        }
        a.mov_imm(R9, plan.ifaces.len() as i32 * stride);
        a.bind(found);
    }
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
    if rowed {
        a.stx(Size::DW, S, slot::ROW, R9);
    }
    let mut s = 0;
    while s < slot::OUTER_END {
        a.st_imm(Size::DW, S, s, 0);
        s += 8;
    }
    a.mov(R2, R8);
    a.alu(Alu::Sub, R2, R7);
    a.stx(Size::DW, S, slot::WIRE_LEN, R2);
    if walk_at.is_some() {
        // The outer parser writes it only when an upper layer is known.
        a.st_imm(Size::DW, S, slot::L4_AT, 0);
    }

    parse(&mut a, plan.v4mapped, walk_at.is_some(), undecodable, parsed);
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
    tally(&mut a, rowed, plan.counters_fd, undecodable_slot);
    verdict(&mut a, plan.undecodable_drop && !plan.dry_run, undecodable_slot, sample);

    a.bind(rules);
    // Each rule's start, and the default's after them: where a skip lands.
    let starts: Vec<Label> = (0..=plan.rules.len()).map(|_| a.label()).collect();
    for (r, rule) in plan.rules.iter().enumerate() {
        a.bind(starts[r]);
        if walk_at == Some(r) {
            // What an `inner` match reads when no tunnel was reached: the
            // outer header's slots, copied (only those the rules read).
            let mut fallback: Vec<(i16, i16)> = Vec::new();
            for m in plan.rules.iter().flat_map(|r| &r.matches) {
                if depth_of(m) == Some(Depth::Inner) {
                    for pair in OUTER.read_by(m).into_iter().zip(INNER.read_by(m)) {
                        if !fallback.contains(&pair) {
                            fallback.push(pair);
                        }
                    }
                }
            }
            walk(&mut a, plan.v4mapped, &fallback);
        }
        let next = a.label();
        let mut sets = plan.addr_sets[r].iter();
        for m in &rule.matches {
            match_code(&mut a, m, &mut sets, &plan.ifindexes, next);
        }
        tally(&mut a, rowed, plan.counters_fd, r as i32);
        // What a drop by this rule counts by origin, if anything.
        let by_origin = |a: &mut Asm| {
            if let Some(fd) = plan.origin_counts_fd {
                count_origin(a, rule, &plan.addr_sets[r], fd);
            }
        };
        match rule.action {
            Action::Drop => {
                by_origin(&mut a);
                verdict(&mut a, !plan.dry_run, r as i32, sample);
            }
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
                tally(&mut a, rowed, plan.over_fd, r as i32);
                by_origin(&mut a);
                verdict(&mut a, !plan.dry_run, r as i32, sample);
                a.bind(within);
            }
        }
        if let Some(&Some(to)) = plan.skip_to.get(r) {
            a.ja(starts[to.min(plan.rules.len())]);
        }
        a.bind(next);
    }
    a.bind(starts[plan.rules.len()]);
    let default_slot = plan.rules.len() as i32 + Extra::Default as i32;
    tally(&mut a, rowed, plan.counters_fd, default_slot);
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
    if let Some(cap) = tap.cap() {
        // Over the cap: counted, and the ring never touched.
        let over = a.label();
        let within = a.label();
        a.stx(Size::DW, FP, SAMPLE_SLOT, R9);
        let keys = crate::police::KeySlots {
            ipv: slot::IPV,
            v4: [slot::SRC4, slot::DST4],
            v6: [[slot::SRC6_HI, slot::SRC6_LO], [slot::DST6_HI, slot::DST6_LO]],
        };
        crate::police::emit(a, &cap, tap.cap_fd, &keys, slot::KEY, over);
        a.ja(within);
        a.bind(over);
        count(a, tap.lost_fd, 1);
        a.ja(out);
        a.bind(within);
        a.ldx(Size::DW, R9, FP, SAMPLE_SLOT);
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
    a.st_imm(Size::DW, FP, slot::KEY, idx);
    bump(a, map_fd);
}

/// [`count`] in the row of the interface the frame came in on, when the
/// program has interface rows (`rowed`): `counters[row + idx]`.
fn tally(a: &mut Asm, rowed: bool, map_fd: i32, idx: i32) {
    if !rowed {
        return count(a, map_fd, idx);
    }
    a.ldx(Size::DW, R1, S, slot::ROW);
    a.alu_imm(Alu::Add, R1, idx);
    a.stx(Size::DW, FP, slot::KEY, R1);
    bump(a, map_fd);
}

/// `map[key] += (1, wire length)` on this CPU, the key in [`slot::KEY`].
fn bump(a: &mut Asm, map_fd: i32) {
    let done = a.label();
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

/// How an IP header is parsed: into which slots, within what.
#[derive(Clone, Copy)]
struct Hdr {
    /// The slots written.
    l: &'static Layer,
    /// The slot holding where the bytes this header may use end: the
    /// frame's (the outer header), or the datagram's that carries it (a
    /// tunnel's inner header).
    limit: i16,
    /// A tunnel's inner header: `limit` is checked besides the frame's end.
    inner: bool,
    /// The program walks tunnels: the upper layer's offset and the
    /// datagram's end are kept ([`slot::L4_AT`], [`slot::END`]).
    walk: bool,
    v4mapped: bool,
}

/// Ethernet, VLAN tags, IPv4/IPv6, the upper layer: the summary slots.
/// `R9` holds the offset of the header being read.
fn parse(a: &mut Asm, v4mapped: bool, walk: bool, undecodable: Label, rules: Label) {
    let ipv4 = a.label();
    let ipv6 = a.label();
    let h = Hdr { l: &OUTER, limit: slot::WIRE_LEN, inner: false, walk, v4mapped };
    link_layer(a, ipv4, ipv6, undecodable, rules);
    a.bind(ipv4);
    ipv4_header(a, h, undecodable, rules);
    a.bind(ipv6);
    ipv6_header(a, h, undecodable, rules);
}

/// `if S[limit] < off + n goto fail` (clobbers R1, R2).
fn within(a: &mut Asm, off: Reg, n: i32, limit: i16, fail: Label) {
    a.ldx(Size::DW, R1, S, limit);
    a.mov(R2, off);
    a.alu_imm(Alu::Add, R2, n);
    a.jmp(Cond::Gt, R2, R1, fail);
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
fn ipv4_header(a: &mut Asm, h: Hdr, undecodable: Label, rules: Label) {
    let no_l4 = rules;
    if h.inner {
        within(a, R9, 20, h.limit, undecodable);
    }
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
    a.st_imm(Size::DW, S, h.l.ipv, 4);
    a.ldx(Size::W, R5, R2, 12);
    a.from_be(R5, 32);
    a.stx(Size::DW, S, h.l.src4, R5);
    a.ldx(Size::W, R5, R2, 16);
    a.from_be(R5, 32);
    a.stx(Size::DW, S, h.l.dst4, R5);
    a.st_imm(Size::DW, S, h.l.src4_ok, 1);
    a.st_imm(Size::DW, S, h.l.dst4_ok, 1);
    a.ldx(Size::B, R5, R2, 9);
    a.stx(Size::DW, S, h.l.proto, R5);
    // Fragments: offset (13 bits) and more-fragments.
    a.ldx(Size::H, R5, R2, 6);
    a.from_be(R5, 16);
    let whole = a.label();
    let frag_done = a.label();
    let first = a.label();
    a.mov(R1, R5);
    a.alu_imm(Alu::And, R1, 0x1fff);
    a.jmp_imm(Cond::Eq, R1, 0, first);
    a.st_imm(Size::DW, S, h.l.frag, 2);
    // A later fragment has no upper-layer header.
    a.ja(no_l4);
    a.bind(first);
    a.jmp_imm(Cond::Set, R5, 0x2000, frag_done);
    a.ja(whole);
    a.bind(frag_done);
    a.st_imm(Size::DW, S, h.l.frag, 1);
    a.bind(whole);
    // Options cut by the capture: the addresses count, nothing after.
    // R5 = end of the datagram (offset): total, or what was captured.
    a.ldx(Size::DW, R5, S, h.limit);
    let captured = a.label();
    a.jmp_imm(Cond::Eq, R4, 0, captured);
    a.alu(Alu::Add, R4, R9);
    a.jmp(Cond::Gt, R4, R5, captured);
    a.mov(R5, R4);
    a.bind(captured);
    // R4 = L4 offset = R9 + header length; it must be captured.
    a.mov(R4, R9);
    a.alu(Alu::Add, R4, R3);
    a.ldx(Size::DW, R1, S, h.limit);
    a.jmp(Cond::Gt, R4, R1, no_l4);
    upper_layer(a, h, false, rules);
}

/// The IPv6 header at `R9`: addresses (v4-mapped ones as IPv4 too when
/// `v4mapped`), the extension headers, then the upper layer.
fn ipv6_header(a: &mut Asm, h: Hdr, undecodable: Label, rules: Label) {
    if h.inner {
        within(a, R9, 40, h.limit, undecodable);
    }
    need(a, R9, 40, undecodable);
    a.ldx(Size::B, R3, R2, 0);
    a.alu_imm(Alu::Rsh, R3, 4);
    a.jmp_imm(Cond::Ne, R3, 6, undecodable);
    a.st_imm(Size::DW, S, h.l.ipv, 6);
    for (off, hi, lo, v4, ok) in
        [(8, h.l.src6_hi, h.l.src6_lo, h.l.src4, h.l.src4_ok), (24, h.l.dst6_hi, h.l.dst6_lo, h.l.dst4, h.l.dst4_ok)]
    {
        a.ldx(Size::DW, R3, R2, off);
        a.stx(Size::DW, S, hi, R3);
        a.ldx(Size::DW, R4, R2, off + 8);
        a.stx(Size::DW, S, lo, R4);
        if h.v4mapped {
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
    a.stx(Size::DW, S, h.l.proto, R3);
    // R5 = end of the payload: 40 + payload length, or what was captured.
    a.ldx(Size::H, R4, R2, 4);
    a.from_be(R4, 16);
    a.ldx(Size::DW, R5, S, h.limit);
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
    ipv6_extensions(a, h.l, upper, rules);
    a.bind(upper);
    a.mov(R4, R9);
    upper_layer(a, h, true, rules);
}

/// Up to [`MAX_EXT_HEADERS`] extension headers (`R3` the next header, `R9`
/// its offset, `R5` the payload's end): on to `upper` at the first that is
/// not one; a fragment's, or one cut short, goes to `rules` without an
/// upper layer.
fn ipv6_extensions(a: &mut Asm, l: &Layer, upper: Label, rules: Label) {
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
        a.st_imm(Size::DW, S, l.frag, 1);
        a.jmp_imm(Cond::Eq, R1, 0, not_frag);
        a.st_imm(Size::DW, S, l.frag, 2);
        // Only the first fragment carries further headers.
        a.ldx(Size::B, R3, R2, 0);
        a.stx(Size::DW, S, l.proto, R3);
        a.ja(rules);
        a.bind(not_frag);
        a.ldx(Size::B, R3, R2, 0);
        a.stx(Size::DW, S, l.proto, R3);
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
fn upper_layer(a: &mut Asm, h: Hdr, v6: bool, rules: Label) {
    let l = h.l;
    if h.walk {
        // Where a tunnel this header carries starts, and where it ends.
        a.stx(Size::DW, S, slot::L4_AT, R4);
        a.stx(Size::DW, S, slot::END, R5);
    }
    let tcp = a.label();
    let udp = a.label();
    let icmp = a.label();
    a.ldx(Size::DW, R3, S, l.proto);
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
        a.stx(Size::DW, S, l.sport, R3);
        a.ldx(Size::H, R3, R2, 2);
        a.from_be(R3, 16);
        a.stx(Size::DW, S, l.dport, R3);
        a.st_imm(Size::DW, S, l.ports_ok, 1);
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
    a.stx(Size::DW, S, l.tcpf, R3);
    a.st_imm(Size::DW, S, l.tcpf_ok, 1);
    a.ja(rules);

    a.bind(udp);
    inside(a, 8);
    ports(a);
    a.ja(rules);

    a.bind(icmp);
    inside(a, 8);
    a.ldx(Size::B, R3, R2, 0);
    a.stx(Size::DW, S, l.icmp_type, R3);
    a.st_imm(Size::DW, S, l.icmp_ok, 1);
    a.ja(rules);
}

/// Tunnels walked, as `sluice_wire::decode` walks them: a fifth is
/// damage (`TooManyEncapsulations`; MPLS and PPPoE, which count there too,
/// are not read by the kernel program).
const MAX_TUNNELS: usize = sluice_wire::MAX_ENCAP_DEPTH;
/// The furthest into a frame the tunnel walk reads a header from. The
/// verifier bounds every variable offset into a packet by 64 KiB, and the
/// walk adds offsets it cannot bound from the bytes (they come back from
/// the summary); this bound, checked where they come back, leaves room
/// for the most one tunnel level adds (a GTP-U extension chain, an IPv6
/// extension chain: about 25 KiB). No frame XDP sees puts a header there.
const MAX_WALK_OFF: i32 = 0x8000;
const ETH_P_TEB: i32 = sluice_wire::ethertype::TEB as i32;
const IPPROTO_IPIP: i32 = sluice_wire::ip_proto::IPIP as i32;
const IPPROTO_IPV6: i32 = sluice_wire::ip_proto::IPV6 as i32;
const IPPROTO_GRE: i32 = sluice_wire::ip_proto::GRE as i32;
const IPPROTO_UDP: i32 = sluice_wire::ip_proto::UDP as i32;

/// How many tunnels the walk has entered, on the stack: a constant the
/// verifier follows, so that it sees the loop below end.
const LEVEL_SLOT: i16 = -104;

/// From the outer header, through the tunnels the engine walks (IP in IP
/// both ways, GRE with IP or Ethernet inside, VXLAN, Geneve, GTP-U), to
/// the innermost IP header: its fields into the [`INNER`] slots, as
/// `PacketSummary::innermost` has them. Damage in any tunnel or inner
/// header leaves the engine with no inner header (`inner` is `None`): then,
/// as when no tunnel is found, the `fallback` slots (the outer header's
/// that the rules read) are copied into the inner ones.
///
/// One tunnel per turn of a loop (bounded by [`MAX_TUNNELS`] in
/// [`LEVEL_SLOT`]): each turn starts from what is in the summary, not from
/// registers, so the verifier checks it once per level, and the program
/// holds one copy of the tunnel and IP parsers, not one per level.
fn walk(a: &mut Asm, v4mapped: bool, fallback: &[(i16, i16)]) {
    let done = a.label();
    let error = a.label();
    let inner = a.label();
    let tunnel = a.label();
    // The parser forgot the packet pointers; the context has them.
    a.ldx(Size::DW, R1, FP, CTX_SLOT);
    a.ldx(Size::W, R7, R1, 0);
    a.ldx(Size::W, R8, R1, 4);
    a.st_imm(Size::DW, S, INNER.ipv, 0);
    a.mov_imm(R1, 0);
    a.stx(Size::DW, FP, LEVEL_SLOT, R1);
    // The outer header's tunnel, then (back here after each inner header)
    // the inner one's.
    tunnel_entry(a, &OUTER, done, tunnel);
    a.bind(inner);
    tunnel_entry(a, &INNER, done, tunnel);
    a.bind(tunnel);
    tunnel_step(a, v4mapped, done, error, inner);
    a.bind(error);
    a.st_imm(Size::DW, S, INNER.ipv, 0);
    a.bind(done);
    let reached = a.label();
    a.ldx(Size::DW, R1, S, INNER.ipv);
    a.jmp_imm(Cond::Ne, R1, 0, reached);
    for &(outer, inner) in fallback {
        a.ldx(Size::DW, R1, S, outer);
        a.stx(Size::DW, S, inner, R1);
    }
    a.bind(reached);
    a.mov_imm(R7, 0);
    a.mov_imm(R8, 0);
    a.mov_imm(R9, 0);
}

/// What the tunnel walk needs of the header in `cur`, then on to `tunnel`:
/// R4 its upper layer's offset ([`slot::L4_AT`]; a later fragment, cut
/// options or a cut extension chain have none: `done`), R5 its datagram's
/// end ([`slot::END`]), R3 its protocol, and for UDP R0 the destination
/// port (no UDP header: `done`).
fn tunnel_entry(a: &mut Asm, cur: &Layer, done: Label, tunnel: Label) {
    a.ldx(Size::DW, R4, S, slot::L4_AT);
    a.jmp_imm(Cond::Eq, R4, 0, done);
    a.jmp_imm(Cond::Gt, R4, MAX_WALK_OFF, done);
    a.ldx(Size::DW, R5, S, slot::END);
    a.ldx(Size::DW, R3, S, cur.proto);
    // Loaded whatever the protocol: every way into `tunnel` then holds the
    // same (unknown) R0, and the verifier checks the step once per level.
    a.ldx(Size::DW, R0, S, cur.dport);
    a.jmp_imm(Cond::Ne, R3, IPPROTO_UDP, tunnel);
    require(a, cur.ports_ok, done);
    a.ja(tunnel);
}

/// One tunnel (from [`tunnel_entry`]'s registers), recognised as
/// `sluice_wire`'s `tunnel_step` does, and the IP header inside parsed into
/// [`INNER`]; then on to `next`. `done`: no (further) tunnel; `error`:
/// damage, no inner header at all. A tunnel past [`MAX_TUNNELS`] is damage
/// once its header is known good, where the engine counts it.
fn tunnel_step(a: &mut Asm, v4mapped: bool, done: Label, error: Label, next: Label) {
    let (ip4, ip6, eth) = (a.label(), a.label(), a.label());
    let (in_ip4, in_ip6, in_eth) = (a.label(), a.label(), a.label());
    let gre = a.label();
    let vxlan = a.label();
    let geneve = a.label();
    let gtp = a.label();
    a.mov(R9, R4);
    a.jmp_imm(Cond::Eq, R3, IPPROTO_IPIP, in_ip4);
    a.jmp_imm(Cond::Eq, R3, IPPROTO_IPV6, in_ip6);
    a.jmp_imm(Cond::Eq, R3, IPPROTO_GRE, gre);
    a.jmp_imm(Cond::Ne, R3, IPPROTO_UDP, done);
    // The UDP tunnels, by destination port (R0); R4 past the UDP header.
    a.alu_imm(Alu::Add, R4, 8);
    a.jmp_imm(Cond::Eq, R0, i32::from(sluice_wire::vxlan::PORT), vxlan);
    a.jmp_imm(Cond::Eq, R0, i32::from(sluice_wire::geneve::PORT), geneve);
    a.jmp_imm(Cond::Eq, R0, i32::from(sluice_wire::gtpu::PORT), gtp);
    a.ja(done);

    // GRE: flags and version, the protocol; the checksum (or routing),
    // key and sequence words.
    a.bind(gre);
    a.mov(R1, R4);
    a.alu_imm(Alu::Add, R1, 4);
    a.jmp(Cond::Gt, R1, R5, error);
    need(a, R4, 4, error);
    a.ldx(Size::H, R3, R2, 0);
    a.from_be(R3, 16);
    a.ldx(Size::H, R0, R2, 2);
    a.from_be(R0, 16);
    a.mov(R9, R4);
    a.alu_imm(Alu::Add, R9, 4);
    for bits in [0xc000, 0x2000, 0x1000] {
        let absent = a.label();
        a.mov(R1, R3);
        a.alu_imm(Alu::And, R1, bits);
        a.jmp_imm(Cond::Eq, R1, 0, absent);
        a.alu_imm(Alu::Add, R9, 4);
        a.bind(absent);
    }
    a.jmp(Cond::Gt, R9, R5, error);
    // PPTP's version 1 and RFC 1701 routing are not walked.
    a.jmp_imm(Cond::Set, R3, 0x4007, done);
    a.jmp_imm(Cond::Eq, R0, ETH_P_IPV4, in_ip4);
    a.jmp_imm(Cond::Eq, R0, ETH_P_IPV6, in_ip6);
    a.jmp_imm(Cond::Eq, R0, ETH_P_TEB, in_eth);
    a.ja(done);

    // VXLAN: 8 bytes (flags unchecked, as the engine), then Ethernet.
    a.bind(vxlan);
    a.mov(R9, R4);
    a.alu_imm(Alu::Add, R9, 8);
    a.jmp(Cond::Gt, R9, R5, error);
    a.ja(in_eth);

    // Geneve: version (2 bits) and options length (6 bits, in words),
    // the protocol.
    a.bind(geneve);
    a.mov(R1, R4);
    a.alu_imm(Alu::Add, R1, 8);
    a.jmp(Cond::Gt, R1, R5, error);
    need(a, R4, 8, error);
    a.ldx(Size::B, R3, R2, 0);
    a.ldx(Size::H, R0, R2, 2);
    a.from_be(R0, 16);
    a.mov(R9, R3);
    a.alu_imm(Alu::And, R9, 0x3f);
    a.alu_imm(Alu::Lsh, R9, 2);
    a.alu(Alu::Add, R9, R4);
    a.alu_imm(Alu::Add, R9, 8);
    a.jmp(Cond::Gt, R9, R5, error);
    a.jmp_imm(Cond::Gt, R3, 0x3f, done);
    a.jmp_imm(Cond::Eq, R0, ETH_P_IPV4, in_ip4);
    a.jmp_imm(Cond::Eq, R0, ETH_P_IPV6, in_ip6);
    a.jmp_imm(Cond::Eq, R0, ETH_P_TEB, in_eth);
    a.ja(done);

    // GTP-U: flags (version 3 bits; E, S, PN: the optional word), the
    // message type; a G-PDU's extension headers (each its length in words
    // first, the next one's type last); then IP, told by its version.
    a.bind(gtp);
    let short = a.label();
    let exts = a.label();
    let sized = a.label();
    a.mov(R1, R4);
    a.alu_imm(Alu::Add, R1, 8);
    a.jmp(Cond::Gt, R1, R5, error);
    need(a, R4, 8, error);
    a.ldx(Size::B, R3, R2, 0);
    a.ldx(Size::B, R0, R2, 1);
    a.mov(R1, R3);
    a.alu_imm(Alu::And, R1, 7);
    a.jmp_imm(Cond::Eq, R1, 0, short);
    a.mov(R1, R4);
    a.alu_imm(Alu::Add, R1, 12);
    a.jmp(Cond::Gt, R1, R5, error);
    a.bind(short);
    a.mov(R1, R3);
    a.alu_imm(Alu::Rsh, R1, 5);
    a.jmp_imm(Cond::Ne, R1, 1, done);
    a.jmp_imm(Cond::Ne, R0, i32::from(sluice_wire::gtpu::MSG_G_PDU), done);
    // R9: the header's length so far; R0: the next extension's type.
    a.mov_imm(R9, 8);
    a.mov(R1, R3);
    a.alu_imm(Alu::And, R1, 7);
    a.jmp_imm(Cond::Eq, R1, 0, sized);
    a.mov_imm(R9, 12);
    a.mov_imm(R0, 0);
    a.mov(R1, R3);
    a.alu_imm(Alu::And, R1, 4);
    a.jmp_imm(Cond::Eq, R1, 0, exts);
    need(a, R4, 12, error);
    a.ldx(Size::B, R0, R2, 11);
    a.bind(exts);
    for _ in 0..MAX_EXT_HEADERS {
        a.jmp_imm(Cond::Eq, R0, 0, sized);
        // Its length byte inside the datagram, not 0.
        a.mov(R3, R4);
        a.alu(Alu::Add, R3, R9);
        a.jmp(Cond::Ge, R3, R5, error);
        need(a, R3, 1, error);
        a.ldx(Size::B, R0, R2, 0);
        a.jmp_imm(Cond::Eq, R0, 0, error);
        a.alu_imm(Alu::Lsh, R0, 2);
        a.alu(Alu::Add, R9, R0);
        // Its last byte (the next type) inside the datagram.
        a.mov(R3, R4);
        a.alu(Alu::Add, R3, R9);
        a.jmp(Cond::Gt, R3, R5, error);
        a.mov(R3, R9);
        a.alu_imm(Alu::Sub, R3, 1);
        a.alu(Alu::Add, R3, R4);
        need(a, R3, 1, error);
        a.ldx(Size::B, R0, R2, 0);
    }
    // A ninth extension: the engine gives up on the header.
    a.jmp_imm(Cond::Ne, R0, 0, error);
    a.bind(sized);
    // Something must follow the header.
    a.alu(Alu::Add, R9, R4);
    a.jmp(Cond::Ge, R9, R5, error);
    count_tunnel(a, error);
    need(a, R9, 1, error);
    a.ldx(Size::B, R3, R2, 0);
    a.alu_imm(Alu::Rsh, R3, 4);
    a.jmp_imm(Cond::Eq, R3, 4, ip4);
    a.jmp_imm(Cond::Eq, R3, 6, ip6);
    a.ja(done);

    // A tunnel whose header is good: counted (one too many is damage),
    // then what it carries at R9.
    for (at, to) in [(in_ip4, ip4), (in_ip6, ip6), (in_eth, eth)] {
        a.bind(at);
        count_tunnel(a, error);
        a.ja(to);
    }

    // Ethernet inside (VXLAN, GRE and Geneve's TEB) at R9: its VLAN tags
    // walked past (a fifth is damage), then IP or nothing to walk.
    a.bind(eth);
    a.mov(R1, R9);
    a.alu_imm(Alu::Add, R1, 14);
    a.jmp(Cond::Gt, R1, R5, error);
    need(a, R9, 14, error);
    a.ldx(Size::H, R3, R2, 12);
    a.from_be(R3, 16);
    a.alu_imm(Alu::Add, R9, 14);
    for tag in 0..=MAX_VLAN_TAGS {
        a.jmp_imm(Cond::Eq, R3, ETH_P_IPV4, ip4);
        a.jmp_imm(Cond::Eq, R3, ETH_P_IPV6, ip6);
        let is_vlan = a.label();
        for ty in VLAN_TYPES {
            a.jmp_imm(Cond::Eq, R3, ty, is_vlan);
        }
        a.ja(done);
        a.bind(is_vlan);
        if tag == MAX_VLAN_TAGS {
            a.ja(error);
            break;
        }
        a.mov(R1, R9);
        a.alu_imm(Alu::Add, R1, 4);
        a.jmp(Cond::Gt, R1, R5, error);
        need(a, R9, 4, error);
        a.ldx(Size::H, R3, R2, 2);
        a.from_be(R3, 16);
        a.alu_imm(Alu::Add, R9, 4);
    }

    // The inner IP header at R9 (R3: its version), into the inner slots,
    // bounded by the datagram that carries it.
    let decode = a.label();
    a.bind(ip4);
    a.mov_imm(R3, 4);
    a.ja(decode);
    a.bind(ip6);
    a.mov_imm(R3, 6);
    a.bind(decode);
    // Stored and loaded back: whichever way R9 was reached, from here on
    // the verifier knows only the bound below (one state, not one per way).
    a.stx(Size::DW, S, slot::WALK_AT, R9);
    a.ldx(Size::DW, R9, S, slot::WALK_AT);
    a.jmp_imm(Cond::Gt, R9, MAX_WALK_OFF, done);
    // The last level's fields must not leak into this one's: each is
    // read only behind one of these.
    for s in
        [INNER.ipv, INNER.src4_ok, INNER.dst4_ok, INNER.ports_ok, INNER.icmp_ok, INNER.tcpf_ok, INNER.frag, slot::L4_AT]
    {
        a.st_imm(Size::DW, S, s, 0);
    }
    let h = Hdr { l: &INNER, limit: slot::END, inner: true, walk: true, v4mapped };
    let v6 = a.label();
    a.jmp_imm(Cond::Eq, R3, 6, v6);
    ipv4_header(a, h, error, next);
    a.bind(v6);
    ipv6_header(a, h, error, next);
}

/// One more tunnel in [`LEVEL_SLOT`]; past [`MAX_TUNNELS`], `error`
/// (clobbers R1).
fn count_tunnel(a: &mut Asm, error: Label) {
    a.ldx(Size::DW, R1, FP, LEVEL_SLOT);
    a.jmp_imm(Cond::Ge, R1, MAX_TUNNELS as i32, error);
    a.alu_imm(Alu::Add, R1, 1);
    a.stx(Size::DW, FP, LEVEL_SLOT, R1);
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

/// Per side an address match reads (the source, then the destination
/// for `addr`): its IPv4 address in R9 when it has one (or the
/// IPv4-mapped one, with --v4mapped), else its IPv6 address in R7/R8, and
/// `test(a, v6, next)` for it, which goes on to the next side at `next`.
/// Falls through past the last.
fn each_side(a: &mut Asm, l: &Layer, field: AddrField, mut test: impl FnMut(&mut Asm, bool, Label)) {
    let src = (l.src4_ok, l.src4, l.src6_hi, l.src6_lo);
    let dst = (l.dst4_ok, l.dst4, l.dst6_hi, l.dst6_lo);
    let sides: &[(i16, i16, i16, i16)] = match field {
        AddrField::Src => &[src],
        AddrField::Dst => &[dst],
        AddrField::Either => &[src, dst],
    };
    for &(ok, addr, hi, lo) in sides {
        let next = a.label();
        let v6 = a.label();
        a.ldx(Size::DW, R1, S, ok);
        a.jmp_imm(Cond::Eq, R1, 0, v6);
        a.ldx(Size::DW, R9, S, addr);
        test(a, false, next);
        a.bind(v6);
        a.ldx(Size::DW, R1, S, l.ipv);
        a.jmp_imm(Cond::Ne, R1, 6, next);
        a.ldx(Size::DW, R7, S, hi);
        a.ldx(Size::DW, R8, S, lo);
        test(a, true, next);
        a.bind(next);
    }
}

/// A drop by `rule` counted under the origin of the element that made it
/// match, as the engine's `RuleSet::tag_of` finds it: the rule's first
/// positive address match over a set whose elements carry origins, and in
/// it the first side an element with an origin holds (the longest such
/// element). Nothing when none does. Clobbers R0-R5 and R7-R9.
fn count_origin(a: &mut Asm, rule: &Rule, sets: &[&SetCode], fd: i32) {
    let (found4, found6, add, done) = (a.label(), a.label(), a.label(), a.label());
    let addrs = rule.matches.iter().filter(|m| matches!(m, Match::Addr { .. }));
    let mut any = false;
    for (m, set) in addrs.zip(sets) {
        let Match::Addr { field, negate: false, depth, .. } = m else { continue };
        if !set.counts_origins() {
            continue;
        }
        any = true;
        each_side(a, Layer::at(*depth), *field, |a, v6, next| match v6 {
            false => set.emit_origin_v4(a, found4, next),
            true => set.emit_origin_v6(a, found6, next),
        });
    }
    if !any {
        return;
    }
    a.ja(done);
    a.bind(found4);
    a.mov_imm(R9, 0);
    a.ja(add);
    a.bind(found6);
    a.mov_imm(R9, 1);
    // R0 = the origin byte (tag + 1), R9 the family.
    a.bind(add);
    a.alu_imm(Alu::Sub, R0, 1);
    a.jmp_imm(Cond::Ge, R0, crate::tables::ORIGIN_SLOTS as i32, done);
    a.alu_imm(Alu::Lsh, R0, 1);
    a.alu(Alu::Add, R0, R9);
    a.stx(Size::DW, FP, slot::KEY, R0);
    bump(a, fd);
    a.bind(done);
}

fn match_code<'s>(
    a: &mut Asm,
    m: &Match,
    sets: &mut impl Iterator<Item = &'s &'s SetCode>,
    ifindexes: &[(String, u32)],
    fail: Label,
) {
    // The outer header's slots, or the innermost one's.
    let l = depth_of(m).map_or(&OUTER, Layer::at);
    match m {
        Match::Addr { field, negate, .. } => {
            let set = sets.next().expect("a set code per address match");
            require(a, l.ipv, fail);
            let hit = a.label();
            let miss = a.label();
            each_side(a, l, *field, |a, v6, next| match v6 {
                false => set.emit_v4(a, hit, next),
                true => set.emit_v6(a, hit, next),
            });
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
            require(a, l.ipv, fail);
            a.ldx(Size::DW, R3, S, l.proto);
            one_of(a, protos.iter().map(|&p| (u32::from(p), u32::from(p))), *negate, fail);
        }
        Match::Port { proto, field, negate, ranges, .. } => {
            require(a, l.ipv, fail);
            a.ldx(Size::DW, R3, S, l.proto);
            a.jmp_imm(Cond::Ne, R3, i32::from(*proto), fail);
            require(a, l.ports_ok, fail);
            a.ldx(Size::DW, R3, S, if *field == PortField::Src { l.sport } else { l.dport });
            one_of(a, ranges.iter().map(|&(lo, hi)| (u32::from(lo), u32::from(hi))), *negate, fail);
        }
        Match::TcpFlags { set, clear, .. } => {
            require(a, l.ipv, fail);
            a.ldx(Size::DW, R3, S, l.proto);
            a.jmp_imm(Cond::Ne, R3, 6, fail);
            require(a, l.tcpf_ok, fail);
            a.ldx(Size::DW, R3, S, l.tcpf);
            a.mov(R4, R3);
            a.alu_imm(Alu::And, R4, i32::from(*set));
            a.jmp_imm(Cond::Ne, R4, i32::from(*set), fail);
            a.jmp_imm(Cond::Set, R3, i32::from(*clear), fail);
        }
        Match::IcmpType { v6, negate, types, .. } => {
            require(a, l.ipv, fail);
            a.ldx(Size::DW, R3, S, l.proto);
            a.jmp_imm(Cond::Ne, R3, if *v6 { 58 } else { 1 }, fail);
            require(a, l.icmp_ok, fail);
            a.ldx(Size::DW, R3, S, l.icmp_type);
            one_of(a, types.iter().map(|&t| (u32::from(t), u32::from(t))), *negate, fail);
        }
        Match::Vlan { negate, ids } => {
            require(a, slot::VLAN_OK, fail);
            a.ldx(Size::DW, R3, S, slot::VLAN);
            one_of(a, ids.iter().map(|&v| (u32::from(v), u32::from(v))), *negate, fail);
        }
        Match::Frag { kind, .. } => {
            require(a, l.ipv, fail);
            a.ldx(Size::DW, R3, S, l.frag);
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
