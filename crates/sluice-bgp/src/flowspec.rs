//! FlowSpec NLRI: what a router announces to drop or police, as RFC 8955
//! (IPv4) and RFC 8956 (IPv6) encode it, and what each component means for
//! a packet.
//!
//! An NLRI is a length (one byte, or two as `0xFnnn` from 240 on) and
//! components in strictly increasing type order. Prefix components are a
//! prefix length and its bytes (IPv6: also an offset, and only the bits
//! from the offset to the length are sent). The other components are lists
//! of `{operator, value}` pairs: numeric comparisons (`lt`, `gt`, `eq`;
//! `000` is false and `111` true) or bitmask tests (`m`: all of the bits,
//! else any; `not`), each ANDed with the one before it when its `a` bit is
//! set, else ORed, AND binding tighter than OR (RFC 8955 §4.2.1.1). A
//! value is 1, 2, 4 or 8 bytes wide; `len` keeps the width a peer used, so
//! an NLRI encodes back to the bytes it came from (its identity when it is
//! withdrawn).
//!
//! [`Flow::matches`] is the reference: each component as the RFCs define
//! it, one packet at a time. Compiled rules are checked against it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address family of an NLRI (AFI 1 or 2, SAFI 133).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    fn width(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

/// A `{numeric_op, value}` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NumericOp {
    /// ANDed with the pair before it (else ORed); never on a list's first.
    pub and: bool,
    pub lt: bool,
    pub gt: bool,
    pub eq: bool,
    /// The value's width on the wire: 1, 2, 4 or 8 bytes.
    pub len: u8,
    pub value: u64,
}

impl NumericOp {
    /// RFC 8955 Table 1: each set bit is a comparison, any of which holds.
    pub fn holds(&self, data: u64) -> bool {
        (self.lt && data < self.value) || (self.gt && data > self.value) || (self.eq && data == self.value)
    }
}

/// A `{bitmask_op, value}` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitmaskOp {
    pub and: bool,
    pub not: bool,
    /// `m`: every bit of the value is set in the data (else: any of them).
    pub matched: bool,
    pub len: u8,
    pub value: u64,
}

impl BitmaskOp {
    pub fn holds(&self, data: u64) -> bool {
        let hit = if self.matched { data & self.value == self.value } else { data & self.value != 0 };
        hit != self.not
    }
}

/// A prefix component: the bits of `addr` from `offset` to `len` (IPv4:
/// offset 0); the others are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefixMatch {
    pub len: u8,
    pub offset: u8,
    pub addr: IpAddr,
}

impl PrefixMatch {
    /// The prefix `addr/len` (offset 0), host bits cleared.
    pub fn new(addr: IpAddr, len: u8) -> PrefixMatch {
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let len = len.min(width);
        PrefixMatch { len, offset: 0, addr: from_bits(addr.is_ipv6(), bits(addr) & span(0, len)) }
    }

    /// The pattern as (bits, mask) over an address's bits, most
    /// significant first (an IPv4 address in the top 32): `ip` holds when
    /// its bits AND the mask equal the first.
    pub fn pattern(&self) -> (u128, u128) {
        let mask = span(self.offset, self.len);
        (bits(self.addr) & mask, mask)
    }

    /// An address's bits as [`PrefixMatch::pattern`] reads them.
    pub fn bits_of(ip: IpAddr) -> u128 {
        bits(ip)
    }

    /// Whether `ip`'s bits from `offset` to `len` are the pattern's.
    pub fn holds(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.addr.is_ipv6() && (bits(ip) ^ bits(self.addr)) & span(self.offset, self.len) == 0
    }
}

/// What the flow's component types are, in their order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// Type 1.
    Destination(PrefixMatch),
    /// Type 2.
    Source(PrefixMatch),
    /// Type 3: IPv4's protocol, IPv6's upper-layer protocol (the last next header).
    Protocol(Vec<NumericOp>),
    /// Type 4: the source or the destination port (TCP, UDP).
    Port(Vec<NumericOp>),
    /// Type 5.
    DestinationPort(Vec<NumericOp>),
    /// Type 6.
    SourcePort(Vec<NumericOp>),
    /// Type 7 (ICMP or ICMPv6).
    IcmpType(Vec<NumericOp>),
    /// Type 8.
    IcmpCode(Vec<NumericOp>),
    /// Type 9: the TCP header's flags.
    TcpFlags(Vec<BitmaskOp>),
    /// Type 10.
    PacketLength(Vec<NumericOp>),
    /// Type 11: the 6-bit DSCP.
    Dscp(Vec<NumericOp>),
    /// Type 12: [`FRAG_DF`], [`FRAG_IS`], [`FRAG_FIRST`], [`FRAG_LAST`].
    Fragment(Vec<BitmaskOp>),
    /// Type 13 (IPv6 only): the 20-bit flow label.
    FlowLabel(Vec<NumericOp>),
}

/// The fragment component's bits (RFC 8955 §4.2.2.12): don't fragment
/// (IPv4 only), is a fragment (offset not 0), first fragment (more
/// fragments, offset 0), last fragment (no more fragments, offset not 0).
pub const FRAG_DF: u64 = 0x01;
pub const FRAG_IS: u64 = 0x02;
pub const FRAG_FIRST: u64 = 0x04;
pub const FRAG_LAST: u64 = 0x08;

/// A component's value, by its encoding.
enum Body<'a> {
    Prefix(&'a PrefixMatch),
    Numeric(&'a [NumericOp]),
    Bitmask(&'a [BitmaskOp]),
}

impl Component {
    fn body(&self) -> Body<'_> {
        match self {
            Component::Destination(p) | Component::Source(p) => Body::Prefix(p),
            Component::TcpFlags(ops) | Component::Fragment(ops) => Body::Bitmask(ops),
            Component::Protocol(ops)
            | Component::Port(ops)
            | Component::DestinationPort(ops)
            | Component::SourcePort(ops)
            | Component::IcmpType(ops)
            | Component::IcmpCode(ops)
            | Component::PacketLength(ops)
            | Component::Dscp(ops)
            | Component::FlowLabel(ops) => Body::Numeric(ops),
        }
    }

    /// The component's value as encoded after its type: a prefix's length
    /// (offset, in IPv6) and bits, or the operator list.
    fn encode_value(&self, family: Family, out: &mut Vec<u8>) {
        match self.body() {
            Body::Prefix(p) => {
                out.push(p.len);
                if family == Family::V6 {
                    out.push(p.offset);
                }
                let n = usize::from(p.len.saturating_sub(p.offset)).div_ceil(8);
                let pattern = (bits(p.addr) << p.offset).to_be_bytes();
                out.extend_from_slice(&pattern[..n]);
            }
            Body::Bitmask(ops) => {
                for (i, op) in ops.iter().enumerate() {
                    let low = u8::from(op.not) << 1 | u8::from(op.matched);
                    push_op(out, i, ops.len(), op.and, op.len, op.value, low);
                }
            }
            Body::Numeric(ops) => {
                for (i, op) in ops.iter().enumerate() {
                    let low = u8::from(op.lt) << 2 | u8::from(op.gt) << 1 | u8::from(op.eq);
                    push_op(out, i, ops.len(), op.and, op.len, op.value, low);
                }
            }
        }
    }

    /// The component's type number.
    pub fn kind(&self) -> u8 {
        match self {
            Component::Destination(_) => 1,
            Component::Source(_) => 2,
            Component::Protocol(_) => 3,
            Component::Port(_) => 4,
            Component::DestinationPort(_) => 5,
            Component::SourcePort(_) => 6,
            Component::IcmpType(_) => 7,
            Component::IcmpCode(_) => 8,
            Component::TcpFlags(_) => 9,
            Component::PacketLength(_) => 10,
            Component::Dscp(_) => 11,
            Component::Fragment(_) => 12,
            Component::FlowLabel(_) => 13,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Component::Destination(_) => "destination",
            Component::Source(_) => "source",
            Component::Protocol(_) => "protocol",
            Component::Port(_) => "port",
            Component::DestinationPort(_) => "destination-port",
            Component::SourcePort(_) => "source-port",
            Component::IcmpType(_) => "icmp-type",
            Component::IcmpCode(_) => "icmp-code",
            Component::TcpFlags(_) => "tcp-flags",
            Component::PacketLength(_) => "packet-length",
            Component::Dscp(_) => "dscp",
            Component::Fragment(_) => "fragment",
            Component::FlowLabel(_) => "flow-label",
        }
    }
}

/// One FlowSpec NLRI: a rule's match.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub family: Family,
    /// In strictly increasing type order.
    pub components: Vec<Component>,
}

/// Why an NLRI did not decode: where (a byte offset in the bytes given)
/// and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("FlowSpec NLRI, byte {at}: {kind}")]
pub struct FlowError {
    pub at: usize,
    pub kind: FlowErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowErrorKind {
    #[error("it ends inside {0}")]
    Truncated(&'static str),
    #[error("a flow with no component")]
    Empty,
    #[error("component type {0} after type {1}: types must be in increasing order, each once")]
    Order(u8, u8),
    #[error("unknown component type {0}")]
    Unknown(u8),
    #[error("component type {0} is not defined for {1}")]
    NotForFamily(u8, &'static str),
    #[error("prefix length {0} is over {1}")]
    PrefixLength(u8, u8),
    #[error("prefix offset {offset} is not below its length {len}")]
    Offset { offset: u8, len: u8 },
}

fn err(at: usize, kind: FlowErrorKind) -> FlowError {
    FlowError { at, kind }
}

/// An address's bits, IPv4 in the top 32 (so one mask serves both).
fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_bits(v6: bool, b: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(b))
    } else {
        IpAddr::V4(Ipv4Addr::from((b >> 96) as u32))
    }
}

/// The bits from `from` to `to` (most significant first).
fn span(from: u8, to: u8) -> u128 {
    let upto = |n: u8| u128::MAX.checked_shr(u32::from(n)).unwrap_or(0);
    upto(from) & !upto(to)
}

/// Reads bytes of an NLRI, naming where it ends too soon.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self, what: &'static str) -> Result<u8, FlowError> {
        let b = *self.bytes.get(self.at).ok_or(err(self.at, FlowErrorKind::Truncated(what)))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], FlowError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(err(self.at, FlowErrorKind::Truncated(what)))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
}

/// An operator byte's common part: end of list, AND, the value's width.
fn op_head(b: u8) -> (bool, bool, u8) {
    (b & 0x80 != 0, b & 0x40 != 0, 1 << ((b >> 4) & 3))
}

fn value(r: &mut Reader<'_>, len: u8) -> Result<u64, FlowError> {
    Ok(r.take(usize::from(len), "a value")?.iter().fold(0u64, |v, &b| v << 8 | u64::from(b)))
}

fn numeric_ops(r: &mut Reader<'_>) -> Result<Vec<NumericOp>, FlowError> {
    let mut ops = Vec::new();
    loop {
        let b = r.byte("an operator list")?;
        let (end, and, len) = op_head(b);
        let value = value(r, len)?;
        // The first pair's AND bit is read as unset (RFC 8955 §4.2.1.1);
        // the reserved bit is ignored.
        let and = and && !ops.is_empty();
        ops.push(NumericOp { and, lt: b & 4 != 0, gt: b & 2 != 0, eq: b & 1 != 0, len, value });
        if end {
            return Ok(ops);
        }
    }
}

fn bitmask_ops(r: &mut Reader<'_>) -> Result<Vec<BitmaskOp>, FlowError> {
    let mut ops = Vec::new();
    loop {
        let b = r.byte("an operator list")?;
        let (end, and, len) = op_head(b);
        let value = value(r, len)?;
        let and = and && !ops.is_empty();
        ops.push(BitmaskOp { and, not: b & 2 != 0, matched: b & 1 != 0, len, value });
        if end {
            return Ok(ops);
        }
    }
}

fn prefix(r: &mut Reader<'_>, family: Family) -> Result<PrefixMatch, FlowError> {
    let at = r.at;
    let len = r.byte("a prefix")?;
    if len > family.width() {
        return Err(err(at, FlowErrorKind::PrefixLength(len, family.width())));
    }
    let offset = if family == Family::V6 { r.byte("a prefix offset")? } else { 0 };
    if offset != 0 && offset >= len {
        return Err(err(at + 1, FlowErrorKind::Offset { offset, len }));
    }
    // RFC 8956 §3.1: only the bits from the offset to the length are sent.
    let n = usize::from(len - offset).div_ceil(8);
    let pattern =
        r.take(n, "a prefix")?.iter().enumerate().fold(0u128, |v, (i, &b)| v | u128::from(b) << (120 - 8 * i));
    let addr = (pattern >> offset) & span(offset, len);
    Ok(PrefixMatch { len, offset, addr: from_bits(family == Family::V6, addr) })
}

impl Flow {
    /// Decodes one NLRI (its length, then its components) from the start
    /// of `bytes`: the flow, and how many bytes it took.
    pub fn decode(family: Family, bytes: &[u8]) -> Result<(Flow, usize), FlowError> {
        let mut r = Reader { bytes, at: 0 };
        let first = r.byte("the NLRI length")?;
        let len = if first >= 0xf0 {
            usize::from(first & 0x0f) << 8 | usize::from(r.byte("the NLRI length")?)
        } else {
            usize::from(first)
        };
        let start = r.at;
        r.take(len, "the NLRI")?;
        // Components are read only within the NLRI's own length.
        let mut c = Reader { bytes: &bytes[..start + len], at: start };
        let mut components: Vec<Component> = Vec::new();
        while c.at < start + len {
            let at = c.at;
            let kind = c.byte("a component")?;
            if let Some(last) = components.last().map(Component::kind) {
                if kind <= last {
                    return Err(err(at, FlowErrorKind::Order(kind, last)));
                }
            }
            let comp = match kind {
                1 => Component::Destination(prefix(&mut c, family)?),
                2 => Component::Source(prefix(&mut c, family)?),
                3 => Component::Protocol(numeric_ops(&mut c)?),
                4 => Component::Port(numeric_ops(&mut c)?),
                5 => Component::DestinationPort(numeric_ops(&mut c)?),
                6 => Component::SourcePort(numeric_ops(&mut c)?),
                7 => Component::IcmpType(numeric_ops(&mut c)?),
                8 => Component::IcmpCode(numeric_ops(&mut c)?),
                9 => Component::TcpFlags(bitmask_ops(&mut c)?),
                10 => Component::PacketLength(numeric_ops(&mut c)?),
                11 => Component::Dscp(numeric_ops(&mut c)?),
                12 => Component::Fragment(bitmask_ops(&mut c)?),
                13 if family == Family::V6 => Component::FlowLabel(numeric_ops(&mut c)?),
                13 => return Err(err(at, FlowErrorKind::NotForFamily(13, family.name()))),
                k => return Err(err(at, FlowErrorKind::Unknown(k))),
            };
            components.push(comp);
        }
        if components.is_empty() {
            return Err(err(0, FlowErrorKind::Empty));
        }
        Ok((Flow { family, components }, start + len))
    }

    /// Every NLRI of an MP_REACH or MP_UNREACH attribute's NLRI field.
    pub fn decode_all(family: Family, bytes: &[u8]) -> Result<Vec<Flow>, FlowError> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let (flow, n) = Flow::decode(family, &bytes[at..]).map_err(|e| err(at + e.at, e.kind))?;
            out.push(flow);
            at += n;
        }
        Ok(out)
    }

    /// The NLRI's bytes, its length first. Values are written at their
    /// `len` (wider when one does not fit); the last pair of each list gets
    /// the end-of-list bit, the first never the AND bit.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut body = Vec::new();
        for c in &self.components {
            body.push(c.kind());
            c.encode_value(self.family, &mut body);
        }
        if body.len() < 240 {
            out.push(body.len() as u8);
        } else {
            // Two bytes, 0xFnnn: at most 4095 (RFC 8955 §4.1).
            out.extend_from_slice(&(0xf000 | body.len().min(0x0fff) as u16).to_be_bytes());
        }
        out.extend_from_slice(&body);
    }

    /// The NLRI's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Which of two flows is applied first (`Less`: `self`), as RFC 8955
    /// §5.1 orders them (RFC 8956 §4 for IPv6): component by component, a
    /// flow that lacks a component the other has comes after it, a lower
    /// type first; prefixes: the lower offset first, then of two that
    /// overlap the longer first, else the lower address; other components:
    /// their bytes compared as far as both go, the lower first, else the
    /// longer first. (RFC 8956's appendix tests `offset <` twice; the text
    /// says the lower offset wins, which is what this does.)
    pub fn precedence(&self, other: &Flow) -> std::cmp::Ordering {
        self.precedence_key().cmp(&other.precedence_key())
    }

    /// [`Flow::precedence`] as bytes: `a.precedence_key().cmp(&b.precedence_key())`
    /// is `a.precedence(&b)`, so a table of many flows is sorted with each
    /// flow's key encoded once and compared with `memcmp`, instead of every
    /// comparison encoding its components again. Per component: its type;
    /// a prefix as its offset, its address with the bits past its length
    /// set (a prefix inside another then sorts before it, disjoint ones by
    /// address) and `255 - len` (of two equal so far, the longer first); any
    /// other as its value's bytes with 0xFF escaped as `FF 00`, ended by
    /// `FF FF` (which sorts after any further byte: the longer first). The
    /// flow ends with 0xFF, above every type: a flow lacking a component
    /// the other has comes after it.
    pub fn precedence_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(32);
        let mut value = Vec::new();
        for c in &self.components {
            key.push(c.kind());
            match c {
                Component::Destination(p) | Component::Source(p) => {
                    key.push(p.offset);
                    key.extend_from_slice(&(bits(p.addr) | !span(0, p.len)).to_be_bytes());
                    key.push(255 - p.len);
                }
                _ => {
                    value.clear();
                    c.encode_value(self.family, &mut value);
                    for &b in &value {
                        key.push(b);
                        if b == 0xff {
                            key.push(0);
                        }
                    }
                    key.extend_from_slice(&[0xff, 0xff]);
                }
            }
        }
        key.push(0xff);
        key
    }

    /// The bytes this flow holds on the heap: its component list and each
    /// operator list, at their capacity. A route's cost in memory is
    /// counted from it (a 4 KB NLRI of one-byte operators decodes to about
    /// 16 bytes per operator).
    pub fn heap_bytes(&self) -> usize {
        let ops = |n: usize, each: usize| n * each;
        self.components.capacity() * std::mem::size_of::<Component>()
            + self
                .components
                .iter()
                .map(|c| match c {
                    Component::Destination(_) | Component::Source(_) => 0,
                    Component::TcpFlags(o) | Component::Fragment(o) => {
                        ops(o.capacity(), std::mem::size_of::<BitmaskOp>())
                    }
                    Component::Protocol(o)
                    | Component::Port(o)
                    | Component::DestinationPort(o)
                    | Component::SourcePort(o)
                    | Component::IcmpType(o)
                    | Component::IcmpCode(o)
                    | Component::PacketLength(o)
                    | Component::Dscp(o)
                    | Component::FlowLabel(o) => ops(o.capacity(), std::mem::size_of::<NumericOp>()),
                })
                .sum::<usize>()
    }

    /// Whether `p` matches every component, as RFC 8955 §4.2.2 and RFC
    /// 8956 §3 define them. A packet of the other family never matches;
    /// a component a packet cannot have (ports of an ICMP packet) does not.
    pub fn matches(&self, p: &FlowPacket) -> bool {
        if p.src.is_ipv6() != (self.family == Family::V6) {
            return false;
        }
        self.components.iter().all(|c| match c {
            Component::Destination(m) => m.holds(p.dst),
            Component::Source(m) => m.holds(p.src),
            Component::Protocol(ops) => numeric(ops, Some(u64::from(p.protocol))),
            Component::Port(ops) => {
                p.ports.is_some_and(|(s, d)| numeric(ops, Some(u64::from(s))) || numeric(ops, Some(u64::from(d))))
            }
            Component::DestinationPort(ops) => numeric(ops, p.ports.map(|(_, d)| u64::from(d))),
            Component::SourcePort(ops) => numeric(ops, p.ports.map(|(s, _)| u64::from(s))),
            Component::IcmpType(ops) => numeric(ops, p.icmp.map(|(t, _)| u64::from(t))),
            Component::IcmpCode(ops) => numeric(ops, p.icmp.map(|(_, c)| u64::from(c))),
            Component::TcpFlags(ops) => bitmask(ops, p.tcp_flags.map(u64::from)),
            Component::PacketLength(ops) => numeric(ops, Some(u64::from(p.length))),
            Component::Dscp(ops) => numeric(ops, Some(u64::from(p.dscp))),
            Component::Fragment(ops) => bitmask(ops, Some(p.fragment)),
            Component::FlowLabel(ops) => numeric(ops, Some(u64::from(p.flow_label))),
        })
    }
}

/// The values of `0..=max` a numeric operator list admits, as sorted,
/// disjoint, non-adjacent inclusive ranges (empty: none). This is how a
/// rule over a field of known width (a port, a protocol) is compiled: the
/// list's ORs of ANDs become the ranges a rule's range match takes.
pub fn numeric_ranges(ops: &[NumericOp], max: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut group: Option<Vec<(u64, u64)>> = None;
    for op in ops {
        let mut one = Vec::new();
        if op.lt && op.value > 0 {
            one.push((0, (op.value - 1).min(max)));
        }
        if op.eq && op.value <= max {
            one.push((op.value, op.value));
        }
        if op.gt && op.value < max {
            one.push((op.value + 1, max));
        }
        let one = normalize(one);
        group = Some(match group {
            Some(g) if op.and => intersect(&g, &one),
            g => {
                out.extend(g.unwrap_or_default());
                one
            }
        });
    }
    out.extend(group.unwrap_or_default());
    normalize(out)
}

/// Sorted, merged (overlapping or adjacent ranges joined).
fn normalize(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(alo, ahi) in a {
        for &(blo, bhi) in b {
            let (lo, hi) = (alo.max(blo), ahi.min(bhi));
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    normalize(out)
}

/// The values of `0..=max` a bitmask operator list admits, one flag per
/// value (a field of at most 16 bits: TCP flags, the fragment bits): the
/// reference's own answers, tabulated for a rule's value-set match.
pub fn bitmask_values(ops: &[BitmaskOp], max: u16) -> Vec<bool> {
    (0..=u64::from(max)).map(|d| bitmask(ops, Some(d))).collect()
}

/// One operator byte and its value.
fn push_op(out: &mut Vec<u8>, i: usize, n: usize, and: bool, len: u8, value: u64, low: u8) {
    let need = match value {
        0..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    };
    let width = [1u8, 2, 4, 8].into_iter().find(|&w| w >= len.max(need)).unwrap_or(8);
    let code = width.trailing_zeros() as u8;
    let end = u8::from(i + 1 == n) << 7;
    let and = u8::from(and && i > 0) << 6;
    out.push(end | and | code << 4 | low);
    out.extend_from_slice(&value.to_be_bytes()[8 - usize::from(width)..]);
}

/// An operator list over `data` (None: the packet has no such field, and
/// the component does not match): ORs of ANDs, AND binding tighter.
pub fn numeric(ops: &[NumericOp], data: Option<u64>) -> bool {
    let Some(d) = data else { return false };
    any_of_all(ops.iter().map(|o| (o.and, o.holds(d))))
}

pub fn bitmask(ops: &[BitmaskOp], data: Option<u64>) -> bool {
    let Some(d) = data else { return false };
    any_of_all(ops.iter().map(|o| (o.and, o.holds(d))))
}

/// `(and, holds)` pairs: a pair without AND starts a new group; true when
/// every pair of some group holds.
fn any_of_all(pairs: impl Iterator<Item = (bool, bool)>) -> bool {
    let mut any = false;
    let mut group: Option<bool> = None;
    for (and, holds) in pairs {
        group = match (group, and) {
            (Some(g), true) => Some(g && holds),
            (g, _) => {
                any |= g.unwrap_or(false);
                Some(holds)
            }
        };
    }
    any || group.unwrap_or(false)
}

/// A flow's place in a table: IPv4 before IPv6 (they never meet), then
/// [`Flow::precedence`] as bytes ([`Flow::precedence_key`]). Encoded once
/// per flow, when it comes: a table of many flows is sorted with
/// `memcmp`, and made only from a flow, so a table cannot be handed an
/// order that is not its flows'.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowOrder(Vec<u8>);

impl FlowOrder {
    pub fn of(flow: &Flow) -> FlowOrder {
        let mut k = vec![u8::from(flow.family == Family::V6)];
        k.extend_from_slice(&flow.precedence_key());
        FlowOrder(k)
    }

    /// Its bytes on the heap (what a route's cost counts).
    pub fn heap_bytes(&self) -> usize {
        self.0.capacity()
    }
}

/// What a FlowSpec component reads of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPacket {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4's protocol, IPv6's upper-layer protocol.
    pub protocol: u8,
    /// TCP's or UDP's (source, destination).
    pub ports: Option<(u16, u16)>,
    /// ICMP's or ICMPv6's (type, code).
    pub icmp: Option<(u8, u8)>,
    /// TCP's flags (the 12 bits after the data offset).
    pub tcp_flags: Option<u16>,
    /// The packet's length as type 10 reads it (IPv4: its total length).
    pub length: u32,
    pub dscp: u8,
    /// [`FRAG_DF`] | [`FRAG_IS`] | [`FRAG_FIRST`] | [`FRAG_LAST`].
    pub fragment: u64,
    /// IPv6's flow label.
    pub flow_label: u32,
}

impl fmt::Display for Flow {
    /// GoBGP's spelling: `destination 192.0.2.0/24 protocol ==17
    /// destination-port >=1024&<=2048`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.components.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{} ", c.name())?;
            match c.body() {
                Body::Prefix(p) => {
                    write!(f, "{}/{}", p.addr, p.len)?;
                    if p.offset != 0 {
                        write!(f, "/{}", p.offset)?;
                    }
                }
                Body::Bitmask(ops) => {
                    for (i, o) in ops.iter().enumerate() {
                        let join = if i == 0 {
                            ""
                        } else if o.and {
                            "&"
                        } else {
                            " "
                        };
                        let not = if o.not { "!" } else { "" };
                        let m = if o.matched { "=" } else { "" };
                        write!(f, "{join}{m}{not}0x{:x}", o.value)?;
                    }
                }
                Body::Numeric(ops) => {
                    for (i, o) in ops.iter().enumerate() {
                        let join = if i == 0 {
                            ""
                        } else if o.and {
                            "&"
                        } else {
                            " "
                        };
                        let op = match (o.lt, o.gt, o.eq) {
                            (false, false, false) => "false",
                            (false, false, true) => "==",
                            (false, true, false) => ">",
                            (false, true, true) => ">=",
                            (true, false, false) => "<",
                            (true, false, true) => "<=",
                            (true, true, false) => "!=",
                            (true, true, true) => "true",
                        };
                        write!(f, "{join}{op}{}", o.value)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
