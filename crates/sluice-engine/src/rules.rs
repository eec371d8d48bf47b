//! [`RuleSet`]: a rule file (or the `--drop-*` shorthands) compiled for
//! batched evaluation.
//!
//! Evaluation has three steps per chunk of up to [`MAX_BATCH`] packets,
//! with rules as bit vectors (one bit per rule, Lakshman-Stiliadis style):
//!
//! 1. Header fields. Every header field some rule reads (protocol, ports,
//!    flags, VLAN, length...) has a table from the field's value class to
//!    the rules whose conditions on that field hold; each packet's
//!    accumulator starts with every rule and is AND-ed with one row per
//!    field. 100 rules cost a few word ANDs per field, not 100 rule walks.
//!    The fields that constrain the most rules come first, and a packet
//!    stops once no rule left in its accumulator is constrained by a later
//!    field (most packets after the protocol and a port).
//! 2. Set lookups. Each distinct (set, address field, layer) a rule reads is
//!    one *lookup*; it is probed at once for every packet of the chunk whose
//!    accumulator still holds a rule reading it, through the sets' batched,
//!    prefetched path, exactly as address-only rules always were. Small
//!    sets (written inline) are scanned instead: they fit in a few cache
//!    lines, and a table would cost a miss.
//! 3. Address conditions clear the rules they fail, a condition at a time
//!    over the chunk (a bit per packet: whether it holds is a few word
//!    operations, and the clearing has no branch). The first `pass`/`drop`
//!    left decides, the `count` rules before it are counted.
//!
//! [`RuleSet::evaluate_reference`] walks the rules one at a time over the
//! parsed matches: the plain reference the bit vectors are tested against.

use crate::dynamic::Delta;
use crate::tags::Tags;
use crate::{Verdict, MAX_BATCH};
use sluice_rules::{
    Action, AddrField, AddrValue, Depth, FragKind, Match, PortField, Prefix, Rule, RuleFile, SetSource, MAX_RULES,
};
use sluice_sets::{AddressSet, Options};
use sluice_wire::{IpSummary, PacketSummary};
use std::net::IpAddr;
use std::sync::Arc;

/// Sets of at most this many entries are scanned, not hashed.
const SMALL_SET: usize = 16;
/// Most distinct set lookups (and address conditions) in one rule set: each
/// is one bit of a per-packet word.
pub const MAX_LOOKUPS: usize = 64;

/// Which header a packet was dropped for, when a rule's address matches all
/// read one side (how `dropped_by_src` / `dropped_by_dst` are counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// What the rule set says of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// The `pass`/`drop` rule that decided, or `None` for the default.
    pub rule: Option<u16>,
}

/// One rule as the summary and metrics show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleInfo {
    pub line: usize,
    pub text: String,
    pub action: Action,
    pub side: Option<Side>,
    /// The named set the rule's address matches read, when there is
    /// exactly one (metrics label drops by it); else empty.
    pub list: String,
}

/// A set's entries, as looked up.
// A handful per rule set; boxing the table would add a pointer chase to
// every lookup.
#[allow(clippy::large_enum_variant)]
enum SetTable {
    Table(AddressSet),
    Small(SmallSet),
}

/// A few prefixes, scanned: (address, mask) pairs per family.
struct SmallSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl SmallSet {
    fn new(prefixes: &[Prefix]) -> SmallSet {
        let mut v = prefixes.to_vec();
        v.sort_unstable();
        v.dedup();
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for p in v {
            match p {
                Prefix::V4 { addr, len } => v4.push((addr, u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0))),
                Prefix::V6 { addr, len } => v6.push((addr, u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0))),
            }
        }
        SmallSet { v4, v6 }
    }

    #[inline]
    fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|&(p, m)| a & m == p)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|&(p, m)| a & m == p)
            }
        }
    }
}

impl SetTable {
    fn new(prefixes: &[Prefix], opts: Options) -> SetTable {
        if prefixes.len() <= SMALL_SET {
            SetTable::Small(SmallSet::new(prefixes))
        } else {
            SetTable::Table(AddressSet::with_options(prefixes, opts))
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match self {
            SetTable::Table(s) => s.contains(ip),
            SetTable::Small(v) => v.contains(ip),
        }
    }

    fn entries(&self) -> usize {
        match self {
            SetTable::Table(s) => s.len(),
            SetTable::Small(v) => v.v4.len() + v.v6.len(),
        }
    }

    fn from_entries(e: SetEntries, opts: Options) -> SetTable {
        match e {
            SetEntries::List(p) => SetTable::new(&p, opts),
            SetEntries::Built(s) => SetTable::Table(*s),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            SetTable::Table(s) => s.bytes(),
            SetTable::Small(v) => std::mem::size_of_val(v.v4.as_slice()) + std::mem::size_of_val(v.v6.as_slice()),
        }
    }
}

/// A set's tables, built by [`RuleSet::build_base`].
pub struct BaseTables(Arc<SetTable>);

/// One named set's new runtime state for [`RuleSet::with_sets`].
pub struct SetChange {
    pub set: usize,
    /// New base tables (after a merge or a flush), or None to keep them.
    pub base: Option<BaseTables>,
    pub delta: Option<Arc<Delta>>,
    /// Its elements' tags ([`crate::tags`]), when a feed tagged any.
    pub tags: Option<Arc<Tags>>,
}

/// A named set's entries for [`RuleSet::compile_sets`]: a list to build
/// tables from, or tables built before (loaded from a compiled file).
pub enum SetEntries {
    List(Vec<Prefix>),
    Built(Box<AddressSet>),
}

/// A named set as [`RuleSet::named_sets`] shows it, for saving.
pub enum SavedSet<'a> {
    /// A few prefixes, scanned (no tables).
    Small(Vec<Prefix>),
    Table(&'a AddressSet),
}

/// What a rule set was compiled from (a compiled file records it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A rule file: its name and text.
    File { source: String, text: String },
    /// The `--drop-*` shorthands: which lists were given, at which layer.
    Shorthand { src: bool, dst: bool, any: bool, inner: bool },
}

/// A set as the rule set holds it: named (from the rule file or a shorthand
/// flag) or written inline in a rule.
#[derive(Clone, Debug)]
pub struct SetInfo {
    pub name: String,
    pub kind: SetKind,
    pub entries: usize,
    pub bytes: usize,
}

/// Where a set's entries come from, as the rules say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// `set NAME from "FILE"` (also when its tables came from a compiled file).
    List,
    /// `set NAME { ... }`.
    Inline,
    /// `set NAME dynamic [timeout S] [maxelem N]`: only runtime entries.
    Dynamic { timeout: Option<u32>, maxelem: Option<u32> },
    /// `set NAME geo FILE country|asn LIST`: a database's networks.
    Geo,
    /// A `--drop-*` shorthand's lists.
    Shorthand,
    /// Written in a rule (`saddr { ... }`): not named, takes no runtime change.
    Anonymous,
}

/// A header field the bit-vector step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Proto(Depth),
    Port(Depth, PortField),
    TcpFlags(Depth),
    IcmpType(Depth),
    Frag(Depth),
    Vlan,
    Len,
    Iface,
}

/// A condition on one field's value. A missing value (no such header)
/// satisfies no condition.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pred {
    In { ranges: Vec<(u32, u32)>, negate: bool },
    Flags { set: u8, clear: u8 },
}

impl Pred {
    fn holds(&self, v: Option<u32>) -> bool {
        let Some(v) = v else { return false };
        match self {
            Pred::In { ranges, negate } => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&v)) != *negate,
            Pred::Flags { set, clear } => {
                let f = v as u8;
                f & set == *set && f & clear == 0
            }
        }
    }
}

fn ip_at(p: &PacketSummary, depth: Depth) -> Option<&IpSummary> {
    match depth {
        Depth::Outer => p.ip.as_ref(),
        Depth::Inner => p.innermost(),
    }
}

/// Fragment class: 0 whole, 1 first fragment, 2 later fragment.
fn frag_class(ip: &IpSummary) -> u32 {
    match ip.fragment {
        None => 0,
        Some(f) if f.offset == 0 => 1,
        Some(_) => 2,
    }
}

/// A header value a packet does not have.
const ABSENT: u32 = u32::MAX;
/// Per-packet value slots: six per layer (outer, then inner), then the
/// VLAN id, the wire length and the port.
const SLOTS: usize = 15;

/// Where `field`'s value sits among a packet's [`SLOTS`].
fn slot(field: Field) -> usize {
    let base = |l: Depth| if l == Depth::Outer { 0 } else { 6 };
    match field {
        Field::Proto(l) => base(l),
        Field::Port(l, PortField::Src) => base(l) + 1,
        Field::Port(l, PortField::Dst) => base(l) + 2,
        Field::TcpFlags(l) => base(l) + 3,
        Field::IcmpType(l) => base(l) + 4,
        Field::Frag(l) => base(l) + 5,
        Field::Vlan => 12,
        Field::Len => 13,
        Field::Iface => 14,
    }
}

/// One layer's six values (see [`slot`]).
#[inline]
fn layer_values(ip: Option<&IpSummary>, out: &mut [u32]) {
    let Some(ip) = ip else {
        out[..6].fill(ABSENT);
        return;
    };
    out[0] = u32::from(ip.protocol);
    (out[1], out[2]) = ip.ports.map_or((ABSENT, ABSENT), |(s, d)| (u32::from(s), u32::from(d)));
    out[3] = if ip.protocol == 6 { ip.tcp_flags.map_or(ABSENT, u32::from) } else { ABSENT };
    out[4] = ip.icmp.map_or(ABSENT, |(t, _)| u32::from(t));
    out[5] = frag_class(ip);
}

/// One field's value classes: values for which every rule's conditions on
/// the field hold alike share a class (the rows are interned). Class 0 is
/// "absent".
#[derive(Clone)]
struct FieldTable {
    /// Where the value is among the packet's [`SLOTS`].
    slot: usize,
    /// The class of every value in the field's domain: one load (64 KiB
    /// for a port, in L2) where a search over range bounds mispredicted at
    /// every step. (Two levels, 256 values per block, measured slower.)
    dense: Dense,
    /// The conditions, for values beyond `dense` (lengths over 65535).
    preds: Vec<(usize, Pred)>,
    /// `words` u64 per class: the rules whose conditions on this field hold.
    masks: Vec<u64>,
    /// The rules some field after this one constrains (`words` u64): once
    /// an accumulator holds none of them, the fields left cannot change it,
    /// as a row keeps every rule its field does not constrain.
    later: Vec<u64>,
}

/// Class ids, in bytes when there are at most 256 classes.
#[derive(Clone)]
enum Dense {
    U8(Vec<u8>),
    U32(Vec<u32>),
}

impl FieldTable {
    /// AND the rules value `v` allows into `acc`.
    #[inline(always)]
    fn and_into<const W: usize>(&self, v: u32, acc: &mut [u64; W]) {
        // ABSENT is beyond every domain: one bounds check covers it.
        let class = match &self.dense {
            Dense::U8(d) => d.get(v as usize).map(|&c| usize::from(c)),
            Dense::U32(d) => d.get(v as usize).map(|&c| c as usize),
        };
        let (rows, _) = self.masks.as_chunks::<W>();
        match class {
            Some(c) => {
                for (a, r) in acc.iter_mut().zip(&rows[c]) {
                    *a &= r;
                }
            }
            None if v == ABSENT => {
                for (a, r) in acc.iter_mut().zip(&rows[0]) {
                    *a &= r;
                }
            }
            None => {
                let fail = self.failing::<W>(v);
                for (a, f) in acc.iter_mut().zip(&fail) {
                    *a &= !f;
                }
            }
        }
    }

    /// The rules value `v` (beyond the dense domain) fails. Out of line and
    /// by value, so that no word of the caller's accumulator is indexed at
    /// run time: the accumulator then stays in registers across the tables
    /// instead of going through the stack at each one.
    #[inline(never)]
    fn failing<const W: usize>(&self, v: u32) -> [u64; W] {
        let mut fail = [0u64; W];
        for (r, p) in &self.preds {
            if !p.holds(Some(v)) {
                fail[r / 64] |= 1 << (r % 64);
            }
        }
        fail
    }

    /// Whether `acc` holds a rule a later field constrains.
    #[inline(always)]
    fn goes_on<const W: usize>(&self, acc: &[u64; W]) -> bool {
        let (later, _) = self.later.as_chunks::<W>();
        meets(acc, &later[0])
    }
}

/// Whether rule sets `a` and `b` share a rule.
#[inline(always)]
fn meets<const W: usize>(a: &[u64; W], b: &[u64; W]) -> bool {
    a.iter().zip(b).fold(0, |x, (a, b)| x | a & b) != 0
}

/// How many values of a field get a dense class map.
fn dense_domain(f: Field) -> u32 {
    match f {
        Field::Proto(_) | Field::TcpFlags(_) | Field::IcmpType(_) | Field::Frag(_) | Field::Iface => 256,
        Field::Port(..) | Field::Len => 65536,
        Field::Vlan => 4096,
    }
}

/// An address condition: one bit per packet, from one or two lookups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AddrCond {
    /// Lookup bit of the source (or the only) lookup.
    a: usize,
    /// For `addr` (either side): the destination's lookup bit.
    b: Option<usize>,
    negate: bool,
    depth: Depth,
}

/// A lookup: a backing probed with one address of each packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lookup {
    backing: usize,
    dst: bool,
    depth: Depth,
}

/// How to compile.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Look IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) up as IPv4.
    pub v4mapped: bool,
    /// Names of the live ports, by port index, for `iface` matches; empty
    /// when the packets come from a file.
    pub ifaces: Vec<String>,
    /// Build the sets' exact tables without their front filters (which
    /// cost 10 bits per host; see `sluice_sets::filter`).
    pub no_front_filter: bool,
    /// With the `--drop-*` shorthands: dynamic sets (filled at runtime, by
    /// a feed such as CrowdSec) whose sources are dropped, before the
    /// lists' rules.
    pub feed_sets: Vec<String>,
}

/// Why a rule file could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{file}:{line}: {message}")]
    Rule { file: String, line: usize, message: String },
    #[error("the rules need more than {MAX_LOOKUPS} distinct set lookups or address conditions")]
    TooManyLookups,
    #[error("{0} rules; at most {MAX_RULES} are supported")]
    TooManyRules(usize),
}

/// Compiled rules: see the module comment.
///
/// Cloning is cheap: the tables are shared (`Arc`), so a set's runtime
/// change is a clone with that set's delta (or base) replaced
/// ([`RuleSet::with_sets`]), published like a reload.
#[derive(Clone)]
pub struct RuleSet {
    rules: Vec<RuleInfo>,
    /// The parsed rules, for the reference evaluator.
    parsed: Vec<Rule>,
    /// For each rule, each `Match::Addr`'s backing (in match order).
    addr_backing: Vec<Vec<usize>>,
    default: Verdict,
    backings: Vec<Arc<SetTable>>,
    /// Per backing: what changed at runtime since its tables were built
    /// (named sets only).
    deltas: Vec<Option<Arc<Delta>>>,
    /// Per backing: its elements' tags (named sets a feed tags only).
    tags: Vec<Option<Arc<Tags>>>,
    /// Whether any backing has tags: a drop is then attributed to a tag.
    tagged: bool,
    /// Per rule: its positive address matches (backing, layer, field), in
    /// order, for [`RuleSet::tag_of`].
    addr_reads: Vec<Vec<(usize, Depth, AddrField)>>,
    /// The options the tables were built with (a merge builds alike).
    set_opts: Options,
    set_info: Vec<SetInfo>,
    lookups: Vec<Lookup>,
    conds: Vec<AddrCond>,
    /// `stride(words)` u64 per condition (the word count `decide` is
    /// compiled for, so its loops over them unroll): the rules that need it.
    cond_rules: Vec<u64>,
    /// `stride(words)` u64 per lookup: the rules some condition on it is
    /// part of.
    lookup_rules: Vec<u64>,
    fields: Arc<[FieldTable]>,
    /// Whether a field table reads the inner layer.
    reads_inner: bool,
    /// Whether an address condition reads the inner layer.
    conds_inner: bool,
    words: usize,
    /// Bits of every rule, of the deciding (`pass`/`drop`) rules, of `drop`.
    all: Vec<u64>,
    decisive: Vec<u64>,
    v4mapped: bool,
    ifaces: Vec<String>,
    /// Identifies the rules (not the sets' contents): counters carry over a
    /// reload that changes only lists.
    id: u64,
    origin: Origin,
    /// Named sets (the first `named` backings).
    named: usize,
    /// Rules from routers (FlowSpec, blackholes), beside these.
    flows: Option<Arc<crate::flows::FlowTable>>,
    /// Per rule: a `police` rule's bucket(s), shared by every worker (and
    /// every runtime change of the sets; a reload starts them afresh).
    policers: Vec<Option<Arc<crate::flows::Policer>>>,
    /// Whether some rule polices (the judge then reads the clock).
    policed: bool,
}

impl RuleSet {
    /// The `--drop-src/--drop-dst/--drop-any` shorthands: `drop saddr
    /// @drop-src`, `drop saddr @drop-any`, `drop daddr @drop-dst`, `drop daddr
    /// @drop-any` (source matches counted first, as they always were).
    pub fn new(drop_src: &[Prefix], drop_dst: &[Prefix], drop_any: &[Prefix]) -> Self {
        Self::shorthand(drop_src, drop_dst, drop_any, Depth::Outer, &CompileOptions::default())
    }

    /// [`RuleSet::new`] at a layer and with options.
    pub fn shorthand(
        drop_src: &[Prefix],
        drop_dst: &[Prefix],
        drop_any: &[Prefix],
        depth: Depth,
        opts: &CompileOptions,
    ) -> Self {
        let lists = [drop_src, drop_dst, drop_any].map(|l| (!l.is_empty()).then(|| SetEntries::List(l.to_vec())));
        Self::shorthand_sets(lists, depth, opts)
    }

    /// The shorthands with each list's entries given (`None`: not given).
    pub fn shorthand_sets(lists: [Option<SetEntries>; 3], depth: Depth, opts: &CompileOptions) -> Self {
        let present = [lists[0].is_some(), lists[1].is_some(), lists[2].is_some()];
        let file = shorthand_file(present, depth, &opts.feed_sets);
        let mut entries: Vec<SetEntries> = lists.into_iter().flatten().collect();
        entries.extend(opts.feed_sets.iter().map(|_| SetEntries::List(Vec::new())));
        let mut rs = Self::compile_sets(&file, entries, opts).expect("shorthand rules always compile");
        rs.origin =
            Origin::Shorthand { src: present[0], dst: present[1], any: present[2], inner: depth == Depth::Inner };
        for info in &mut rs.set_info[..rs.named] {
            if !matches!(info.kind, SetKind::Dynamic { .. }) {
                info.kind = SetKind::Shorthand;
            }
        }
        rs
    }

    pub fn empty() -> Self {
        Self::new(&[], &[], &[])
    }

    /// No rule at all and a passing default.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default == Verdict::Pass
    }

    /// Compile a parsed rule file; `sets[i]` holds the entries of
    /// `file.sets[i]` (the caller loaded the list files).
    pub fn compile(file: &RuleFile, sets: &[Vec<Prefix>], opts: &CompileOptions) -> Result<Self, CompileError> {
        Self::compile_sets(file, sets.iter().map(|s| SetEntries::List(s.clone())).collect(), opts)
    }

    /// [`RuleSet::compile`] with each set's entries as a list or as tables
    /// already built.
    pub fn compile_sets(file: &RuleFile, sets: Vec<SetEntries>, opts: &CompileOptions) -> Result<Self, CompileError> {
        assert_eq!(file.sets.len(), sets.len(), "one entry list per set");
        let named = sets.len();
        if file.rules.len() > MAX_RULES {
            return Err(CompileError::TooManyRules(file.rules.len()));
        }
        let set_opts = Options { filter: !opts.no_front_filter, ..Options::default() };
        // Lowering: each rule's matches become address conditions over
        // interned lookups, and predicates on header fields.
        let mut low = Lowering::new(file, sets, set_opts);
        for (r, rule) in file.rules.iter().enumerate() {
            low.rule(r, rule, opts)?;
        }
        // Bit rows: which rules each condition and each lookup serves.
        let rows = BitRows::new(file, &low.conds, &low.rule_conds, low.lookups.len());
        let fields = build_fields(&low.field_preds, &rows.padded());
        let rules = file
            .rules
            .iter()
            .map(|r| RuleInfo {
                line: r.line,
                text: r.text.clone(),
                action: r.action,
                side: side_of(r),
                list: list_of(r, file),
            })
            .collect();
        let conds_inner = low.conds.iter().any(|c| c.depth == Depth::Inner);
        let reads_inner = low.field_preds.iter().any(|(f, _, _)| slot(*f) >= 6 && slot(*f) < 12);
        Ok(RuleSet {
            rules,
            parsed: file.rules.clone(),
            addr_reads: file
                .rules
                .iter()
                .zip(&low.addr_backing)
                .map(|(r, backings)| {
                    let addrs = r.matches.iter().filter(|m| matches!(m, Match::Addr { .. }));
                    addrs
                        .zip(backings)
                        .filter_map(|(m, &b)| match m {
                            Match::Addr { depth, field, negate: false, .. } => Some((b, *depth, *field)),
                            _ => None,
                        })
                        .collect()
                })
                .collect(),
            addr_backing: low.addr_backing,
            default: if file.default == Action::Drop { Verdict::Drop } else { Verdict::Pass },
            deltas: vec![None; low.tables.len()],
            tags: vec![None; low.tables.len()],
            tagged: false,
            backings: low.tables.into_iter().map(Arc::new).collect(),
            set_opts,
            set_info: low.set_info,
            lookups: low.lookups,
            conds: low.conds,
            cond_rules: rows.cond_rules,
            lookup_rules: rows.lookup_rules,
            reads_inner,
            conds_inner,
            fields: fields.into(),
            words: rows.words,
            all: rows.all,
            decisive: rows.decisive,
            v4mapped: opts.v4mapped,
            ifaces: opts.ifaces.clone(),
            id: rules_id(file),
            origin: Origin::File { source: file.source.clone(), text: file.text.clone() },
            flows: None,
            policers: file.rules.iter().map(|r| r.police.map(|p| Arc::new(policer(&p)))).collect(),
            policed: file.rules.iter().any(|r| r.police.is_some()),
            named,
        })
    }

    pub fn rules(&self) -> &[RuleInfo] {
        &self.rules
    }

    pub fn sets(&self) -> &[SetInfo] {
        &self.set_info
    }

    /// The named sets (defined with `set`, or a shorthand's list), without
    /// the inline ones.
    pub fn named_set_info(&self) -> &[SetInfo] {
        &self.set_info[..self.named]
    }

    pub fn default_verdict(&self) -> Verdict {
        self.default
    }

    /// Identifies the rule texts (see the field).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn v4mapped(&self) -> bool {
        self.v4mapped
    }

    /// What the rules were compiled from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The named sets, in definition order, as saved in a compiled file.
    pub fn named_sets(&self) -> impl Iterator<Item = (&str, SavedSet<'_>)> {
        self.set_info.iter().zip(&self.backings).take(self.named).map(|(info, b)| {
            let saved = match &**b {
                SetTable::Table(s) => SavedSet::Table(s),
                SetTable::Small(s) => SavedSet::Small(
                    s.v4.iter()
                        .map(|&(a, m)| Prefix::V4 { addr: a, len: m.count_ones() as u8 })
                        .chain(s.v6.iter().map(|&(a, m)| Prefix::V6 { addr: a, len: m.count_ones() as u8 }))
                        .collect(),
                ),
            };
            (info.name.as_str(), saved)
        })
    }

    /// The index of the named set `name`.
    pub fn named_index(&self, name: &str) -> Option<usize> {
        self.set_info[..self.named].iter().position(|s| s.name == name)
    }

    /// Whether set `set`'s base tables hold `ip` (its delta not applied).
    pub fn base_contains(&self, set: usize, ip: IpAddr) -> bool {
        self.backings[set].contains(self.key(ip))
    }

    /// Whether set `set` holds `ip`, its runtime changes included.
    pub fn set_contains(&self, set: usize, ip: IpAddr) -> bool {
        let key = self.key(ip);
        let hit = self.backings[set].contains(key);
        self.deltas[set].as_ref().map_or(hit, |d| d.matches(hit, key))
    }

    /// Set `set`'s runtime changes in force.
    pub fn delta(&self, set: usize) -> Option<&Arc<Delta>> {
        self.deltas[set].as_ref()
    }

    /// A copy without runtime deltas, for work that only builds tables (a
    /// merge on its own thread) and must not hold a delta meanwhile: a
    /// delta no one else holds is reused, not copied
    /// ([`crate::dynamic::SetState::delta`]).
    pub fn without_deltas(&self) -> RuleSet {
        let mut rs = self.clone();
        rs.deltas.iter_mut().for_each(|d| *d = None);
        rs
    }

    /// Tables for `prefixes`, built as this rule set's were (for a merge or
    /// a flush; build them off the fast path).
    pub fn build_base(&self, prefixes: &[Prefix]) -> BaseTables {
        BaseTables(Arc::new(SetTable::new(prefixes, self.set_opts)))
    }

    /// This rule set with named sets' runtime state replaced: each change's
    /// delta, and its base when it has one. Counters and rule ids carry
    /// over (the rules did not change).
    pub fn with_sets(&self, changes: Vec<SetChange>) -> RuleSet {
        let mut rs = self.clone();
        for c in changes {
            assert!(c.set < rs.named, "runtime changes go to named sets");
            if let Some(BaseTables(b)) = c.base {
                rs.set_info[c.set].entries = b.entries();
                rs.set_info[c.set].bytes = b.bytes();
                rs.backings[c.set] = b;
            }
            rs.deltas[c.set] = c.delta;
            rs.tags[c.set] = c.tags;
        }
        rs.tagged = rs.tags.iter().any(Option::is_some);
        rs
    }

    /// This rule set with `flows` in force beside its rules (None: no
    /// flows). Counters carry over.
    pub fn with_flows(&self, flows: Option<Arc<crate::flows::FlowTable>>) -> RuleSet {
        RuleSet { flows: flows.filter(|f| !f.is_empty()), ..self.clone() }
    }

    /// The flows in force, if any.
    pub fn flows(&self) -> Option<&Arc<crate::flows::FlowTable>> {
        self.flows.as_ref()
    }

    /// Set `set`'s tags in force.
    pub fn tags(&self, set: usize) -> Option<&Arc<Tags>> {
        self.tags[set].as_ref()
    }

    /// The tag of the element that made rule `rule` match packet `p`, and
    /// whether its address is IPv6: the first address match of the rule
    /// over a tagged set whose address (source, then destination for
    /// `addr`) a tagged element covers. For counting a drop by the
    /// element's source; None without tags.
    pub fn tag_of(&self, rule: usize, p: &PacketSummary) -> Option<(u16, bool)> {
        if !self.tagged {
            return None;
        }
        for &(b, depth, field) in &self.addr_reads[rule] {
            let Some(tags) = &self.tags[b] else { continue };
            let Some(ip) = ip_at(p, depth) else { continue };
            let sides: &[IpAddr] = match field {
                AddrField::Src => &[ip.src],
                AddrField::Dst => &[ip.dst],
                AddrField::Either => &[ip.src, ip.dst],
            };
            for &a in sides {
                let key = self.key(a);
                if let Some(t) = tags.lookup(key) {
                    return Some((t, key.is_ipv6()));
                }
            }
        }
        None
    }

    /// Names of the live ports `iface` matches refer to.
    pub fn ifaces(&self) -> &[String] {
        &self.ifaces
    }

    /// The address a set is probed with: with `v4mapped`, `::ffff:a.b.c.d`
    /// is IPv4. The plain form, which the reference evaluator uses.
    fn key(&self, ip: IpAddr) -> IpAddr {
        if self.v4mapped {
            ip.to_canonical()
        } else {
            ip
        }
    }

    /// [`RuleSet::key`] for the batch path, as IPv4 (`Ok`) or IPv6 bits,
    /// by hand and inline (`to_canonical` was a call per address);
    /// `rules_prop` compares the two through the evaluators.
    #[inline(always)]
    fn key_bits(&self, ip: IpAddr) -> Result<u32, u128> {
        match ip {
            IpAddr::V4(a) => Ok(u32::from(a)),
            IpAddr::V6(a) => {
                let a = u128::from(a);
                if self.v4mapped && a >> 32 == 0xffff {
                    Ok(a as u32)
                } else {
                    Err(a)
                }
            }
        }
    }

    /// One packet, one rule at a time over the parsed matches: the plain
    /// reference. Calls `counted(rule)` for each `count` rule that matched
    /// before the deciding one.
    pub fn evaluate_reference(
        &self,
        p: &PacketSummary,
        wire_len: u32,
        port: u32,
        counted: impl FnMut(usize),
    ) -> Decision {
        let now = if self.policed { crate::flows::mono_ns() } else { 0 };
        self.evaluate_reference_at(p, wire_len, port, now, counted)
    }

    /// [`RuleSet::evaluate_reference`] with `police` rules read at `now`
    /// ([`crate::flows::mono_ns`]): a test holds both evaluators to one clock.
    pub fn evaluate_reference_at(
        &self,
        p: &PacketSummary,
        wire_len: u32,
        port: u32,
        now: u64,
        mut counted: impl FnMut(usize),
    ) -> Decision {
        for (r, rule) in self.parsed.iter().enumerate() {
            let mut addr_i = 0;
            let holds = rule.matches.iter().all(|m| {
                let ok = self.reference_match(m, p, wire_len, port, self.addr_backing[r].get(addr_i).copied());
                if matches!(m, Match::Addr { .. }) {
                    addr_i += 1;
                }
                ok
            });
            if !holds {
                continue;
            }
            match rule.action {
                Action::Count => counted(r),
                Action::Police => {
                    if self.over_rate(r, p, wire_len, now) {
                        return Decision { verdict: Verdict::Drop, rule: Some(r as u16) };
                    }
                    counted(r)
                }
                Action::Pass => return Decision { verdict: Verdict::Pass, rule: Some(r as u16) },
                Action::Drop => return Decision { verdict: Verdict::Drop, rule: Some(r as u16) },
            }
        }
        Decision { verdict: self.default, rule: None }
    }

    fn reference_match(&self, m: &Match, p: &PacketSummary, wire_len: u32, port: u32, backing: Option<usize>) -> bool {
        let at = |l: Depth| ip_at(p, l);
        match m {
            Match::Addr { depth, field, negate, .. } => {
                let Some(ip) = at(*depth) else { return false };
                let set = backing.expect("one backing per address match");
                let hit = match field {
                    AddrField::Src => self.set_contains(set, ip.src),
                    AddrField::Dst => self.set_contains(set, ip.dst),
                    AddrField::Either => self.set_contains(set, ip.src) || self.set_contains(set, ip.dst),
                };
                hit != *negate
            }
            Match::Proto { depth, negate, protos } => {
                at(*depth).is_some_and(|ip| protos.contains(&ip.protocol) != *negate)
            }
            Match::Port { depth, proto, field, negate, ranges } => at(*depth).is_some_and(|ip| {
                ip.protocol == *proto
                    && ip.ports.is_some_and(|(s, d)| {
                        let v = if *field == PortField::Src { s } else { d };
                        ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&v)) != *negate
                    })
            }),
            Match::TcpFlags { depth, set, clear } => at(*depth)
                .is_some_and(|ip| ip.protocol == 6 && ip.tcp_flags.is_some_and(|f| f & set == *set && f & clear == 0)),
            Match::IcmpType { depth, v6, negate, types } => at(*depth).is_some_and(|ip| {
                ip.protocol == if *v6 { 58 } else { 1 } && ip.icmp.is_some_and(|(t, _)| types.contains(&t) != *negate)
            }),
            Match::Vlan { negate, ids } => p.vlans.as_slice().first().is_some_and(|v| ids.contains(v) != *negate),
            Match::Frag { depth, kind } => at(*depth).is_some_and(|ip| match (kind, ip.fragment) {
                (FragKind::First, Some(f)) => f.offset == 0,
                (FragKind::Later, Some(f)) => f.offset > 0,
                (_, None) => false,
            }),
            Match::Len { negate, ranges } => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&wire_len)) != *negate,
            Match::Iface { negate, names } => {
                let name = self.ifaces.get(port as usize);
                name.is_some_and(|n| names.contains(n) != *negate)
            }
        }
    }

    /// Decide up to [`MAX_BATCH`] packets: `pkts[i]` is (summary, wire
    /// length, port); `out[i]` receives the decision, and `count(rule, i)` is
    /// called for every `count` rule that matched packet i before its
    /// deciding rule.
    pub fn evaluate_batch(
        &self,
        pkts: &[(&PacketSummary, u32, u32)],
        out: &mut [Decision],
        batch: usize,
        count: impl FnMut(usize, usize),
    ) {
        let now = if self.policed { crate::flows::mono_ns() } else { 0 };
        self.evaluate_batch_at(pkts, out, batch, now, count)
    }

    /// [`RuleSet::evaluate_batch`] with `police` rules read at `now`.
    pub fn evaluate_batch_at(
        &self,
        pkts: &[(&PacketSummary, u32, u32)],
        out: &mut [Decision],
        batch: usize,
        now: u64,
        mut count: impl FnMut(usize, usize),
    ) {
        let n = pkts.len();
        assert!(n <= MAX_BATCH && out.len() == n, "at most MAX_BATCH packets, one output each");
        // With the word count a constant where it is small.
        match stride(self.words) {
            1 => self.decide::<1>(pkts, out, batch, now, &mut count),
            2 => self.decide::<2>(pkts, out, batch, now, &mut count),
            3 => self.decide::<3>(pkts, out, batch, now, &mut count),
            4 => self.decide::<4>(pkts, out, batch, now, &mut count),
            8 => self.decide::<8>(pkts, out, batch, now, &mut count),
            16 => self.decide::<16>(pkts, out, batch, now, &mut count),
            32 => self.decide::<32>(pkts, out, batch, now, &mut count),
            _ => self.decide::<{ MAX_RULES / 64 }>(pkts, out, batch, now, &mut count),
        }
    }

    /// [`RuleSet::evaluate_batch`] over `W` words of rule bits (rules beyond
    /// `self.words` are never set), in three steps:
    ///
    /// 1. The header fields: each packet's accumulator starts with every
    ///    rule and keeps those whose field conditions hold.
    /// 2. The lookups, one bit each per packet, each only for the packets
    ///    whose accumulator still holds a rule that reads it: a set that
    ///    only `udp dport 53` rules read is looked up for those packets.
    /// 3. The address conditions clear the rules they fail; the first
    ///    deciding rule left decides, the `count` rules before it count.
    fn decide<const W: usize>(
        &self,
        pkts: &[(&PacketSummary, u32, u32)],
        out: &mut [Decision],
        batch: usize,
        now: u64,
        count: &mut impl FnMut(usize, usize),
    ) {
        let w = self.words;
        let mut all = [0u64; W];
        let mut decisive = [0u64; W];
        all[..w].copy_from_slice(&self.all);
        decisive[..w].copy_from_slice(&self.decisive);
        let mut accs = [all; MAX_BATCH];
        if !self.fields.is_empty() {
            // A power of two long, so that a table's slot needs no check.
            let mut vals = [ABSENT; SLOTS.next_power_of_two()];
            for ((p, wire_len, port), acc) in pkts.iter().zip(accs.iter_mut()) {
                layer_values(p.ip.as_ref(), &mut vals[..6]);
                if self.reads_inner {
                    layer_values(p.innermost(), &mut vals[6..12]);
                }
                vals[12] = p.vlans.as_slice().first().map_or(ABSENT, |&v| u32::from(v));
                vals[13] = *wire_len;
                vals[14] = *port;
                // In registers while the tables narrow it.
                let mut a = *acc;
                for t in self.fields.iter() {
                    t.and_into::<W>(vals[t.slot % vals.len()], &mut a);
                    if !t.goes_on(&a) {
                        break;
                    }
                }
                *acc = a;
            }
        }
        let hits = self.lookup_hits(pkts, batch, |k, i| {
            let readers: &[u64; W] = self.lookup_rules[k * W..(k + 1) * W].try_into().expect("W words");
            meets(&accs[i], readers)
        });
        // Step 3, a condition at a time over the whole batch: bit i of a
        // mask is packet i, so whether each packet holds a condition is a
        // few word operations, and clearing the rules it fails has no
        // branch (a branch on the traffic's outcome mispredicts).
        const _: () = assert!(MAX_BATCH <= 64, "a packet per bit of a u64");
        let (mut outer, mut inner) = (0u64, 0u64);
        for (i, (p, _, _)) in pkts.iter().enumerate() {
            outer |= u64::from(p.ip.is_some()) << i;
        }
        if self.conds_inner {
            for (i, (p, _, _)) in pkts.iter().enumerate() {
                inner |= u64::from(p.innermost().is_some()) << i;
            }
        }
        for (c, cond) in self.conds.iter().enumerate() {
            let present = if cond.depth == Depth::Outer { outer } else { inner };
            let hit = hits[cond.a] | cond.b.map_or(0, |b| hits[b]);
            let holds = present & if cond.negate { !hit } else { hit };
            let needing: &[u64; W] = self.cond_rules[c * W..(c + 1) * W].try_into().expect("W words");
            for (i, acc) in accs[..pkts.len()].iter_mut().enumerate() {
                let keep = (holds >> i & 1).wrapping_neg();
                for (a, r) in acc.iter_mut().zip(needing) {
                    *a &= !r | keep;
                }
            }
        }
        'packet: for i in 0..pkts.len() {
            let acc = &accs[i];
            out[i] = Decision { verdict: self.default, rule: None };
            for (wi, (&a, &d)) in acc.iter().zip(&decisive).enumerate() {
                let first_decisive = a & d;
                let counts =
                    if first_decisive == 0 { a } else { a & ((first_decisive & first_decisive.wrapping_neg()) - 1) };
                let mut c = counts & !d;
                while c != 0 {
                    let r = wi * 64 + c.trailing_zeros() as usize;
                    // A `police` rule over its rate decides: drop.
                    if self.policed && self.over_rate(r, pkts[i].0, pkts[i].1, now) {
                        out[i] = Decision { verdict: Verdict::Drop, rule: Some(r as u16) };
                        continue 'packet;
                    }
                    count(r, i);
                    c &= c - 1;
                }
                if first_decisive != 0 {
                    let r = wi * 64 + first_decisive.trailing_zeros() as usize;
                    let verdict = if self.rules[r].action == Action::Drop { Verdict::Drop } else { Verdict::Pass };
                    out[i] = Decision { verdict, rule: Some(r as u16) };
                    break;
                }
            }
        }
    }

    /// Whether rule `r` polices and packet `p` (`wire_len` bytes) is over
    /// its rate at `now` (a packet within it is charged).
    #[inline]
    fn over_rate(&self, r: usize, p: &PacketSummary, wire_len: u32, now: u64) -> bool {
        let Some(pol) = &self.policers[r] else { return false };
        let key = match (pol.per, &p.ip) {
            (crate::flows::PoliceKey::Source, Some(ip)) => sluice_bgp::flowspec::PrefixMatch::bits_of(ip.src),
            (crate::flows::PoliceKey::Destination, Some(ip)) => sluice_bgp::flowspec::PrefixMatch::bits_of(ip.dst),
            _ => 0,
        };
        !pol.admit(&key, wire_len, now)
    }

    /// Rule `r`'s policer, if it polices.
    pub fn policer(&self, r: usize) -> Option<&Arc<crate::flows::Policer>> {
        self.policers.get(r)?.as_ref()
    }

    /// Step 2 of [`RuleSet::decide`]: bit i of `hits[k]` is whether lookup
    /// k holds packet i's address, for the packets `needed(k, i)` (0 for
    /// the others, whose rules reading it are already cleared). Each
    /// family's keys are gathered into their own array, as the set's
    /// batched paths take them (a gather of `IpAddr`s, split again by the
    /// set, cost about as much as the lookups of a sparse list).
    fn lookup_hits(
        &self,
        pkts: &[(&PacketSummary, u32, u32)],
        batch: usize,
        needed: impl Fn(usize, usize) -> bool,
    ) -> [u64; MAX_LOOKUPS] {
        let mut hits = [0u64; MAX_LOOKUPS];
        let (mut k4, mut at4, mut f4) = ([0u32; MAX_BATCH], [0u8; MAX_BATCH], [false; MAX_BATCH]);
        let (mut k6, mut at6, mut f6) = ([0u128; MAX_BATCH], [0u8; MAX_BATCH], [false; MAX_BATCH]);
        const _: () = assert!(MAX_BATCH <= 256, "packet indexes are bytes");
        for (k, l) in self.lookups.iter().enumerate() {
            let (mut n4, mut n6) = (0, 0);
            for (i, (p, _, _)) in pkts.iter().enumerate() {
                let Some(ip) = ip_at(p, l.depth) else { continue };
                if !needed(k, i) {
                    continue;
                }
                match self.key_bits(if l.dst { ip.dst } else { ip.src }) {
                    Ok(a) => {
                        (k4[n4], at4[n4]) = (a, i as u8);
                        n4 += 1;
                    }
                    Err(a) => {
                        (k6[n6], at6[n6]) = (a, i as u8);
                        n6 += 1;
                    }
                }
            }
            let (k4, f4, k6, f6) = (&k4[..n4], &mut f4[..n4], &k6[..n6], &mut f6[..n6]);
            match &*self.backings[l.backing] {
                SetTable::Table(s) => {
                    s.contains_v4_batch(k4, f4, batch, true);
                    s.contains_v6_batch(k6, f6, batch, true);
                }
                SetTable::Small(v) => {
                    for (f, &key) in f4.iter_mut().zip(k4) {
                        *f = v.contains(IpAddr::from(std::net::Ipv4Addr::from(key)));
                    }
                    for (f, &key) in f6.iter_mut().zip(k6) {
                        *f = v.contains(IpAddr::from(std::net::Ipv6Addr::from(key)));
                    }
                }
            }
            if let Some(d) = &self.deltas[l.backing] {
                for (f, &key) in f4.iter_mut().zip(k4) {
                    *f = d.matches(*f, IpAddr::from(std::net::Ipv4Addr::from(key)));
                }
                for (f, &key) in f6.iter_mut().zip(k6) {
                    *f = d.matches(*f, IpAddr::from(std::net::Ipv6Addr::from(key)));
                }
            }
            let mut mask = 0;
            for (&f, &i) in f4.iter().zip(&at4[..n4]) {
                mask |= u64::from(f) << i;
            }
            for (&f, &i) in f6.iter().zip(&at6[..n6]) {
                mask |= u64::from(f) << i;
            }
            hits[k] = mask;
        }
        hits
    }
}

/// A rule file's rules lowered for compiling: the sets' tables (named, then
/// the inline ones interned by their prefixes), the lookups and address
/// conditions (interned: each distinct one is looked up once per batch),
/// each rule's conditions, and the header-field predicates.
struct Lowering<'f> {
    file: &'f RuleFile,
    set_opts: Options,
    named: usize,
    tables: Vec<SetTable>,
    set_info: Vec<SetInfo>,
    inline: Vec<Vec<Prefix>>,
    lookups: Vec<Lookup>,
    conds: Vec<AddrCond>,
    rule_conds: Vec<Vec<usize>>,
    field_preds: Vec<(Field, usize, Pred)>,
    addr_backing: Vec<Vec<usize>>,
}

impl<'f> Lowering<'f> {
    fn new(file: &'f RuleFile, sets: Vec<SetEntries>, set_opts: Options) -> Self {
        let tables: Vec<SetTable> = sets.into_iter().map(|s| SetTable::from_entries(s, set_opts)).collect();
        let set_info = file
            .sets
            .iter()
            .zip(&tables)
            .map(|(d, b)| SetInfo {
                name: d.name.clone(),
                kind: match d.source {
                    SetSource::File(_) => SetKind::List,
                    SetSource::Inline(_) => SetKind::Inline,
                    SetSource::Dynamic { timeout, maxelem } => SetKind::Dynamic { timeout, maxelem },
                    SetSource::Geo { .. } => SetKind::Geo,
                },
                entries: b.entries(),
                bytes: b.bytes(),
            })
            .collect();
        Lowering {
            file,
            set_opts,
            named: file.sets.len(),
            tables,
            set_info,
            inline: Vec::new(),
            lookups: Vec::new(),
            conds: Vec::new(),
            rule_conds: Vec::new(),
            field_preds: Vec::new(),
            addr_backing: Vec::new(),
        }
    }

    /// Rule `r`'s matches, lowered.
    fn rule(&mut self, r: usize, rule: &Rule, opts: &CompileOptions) -> Result<(), CompileError> {
        let mut mine = Vec::new();
        let mut backs = Vec::new();
        for m in &rule.matches {
            match m {
                Match::Addr { depth, field, negate, value } => {
                    let backing = self.table_of(value, rule.line);
                    backs.push(backing);
                    mine.push(self.addr_cond(backing, *depth, *field, *negate)?);
                }
                other => {
                    let err = |message: String| CompileError::Rule {
                        file: self.file.source.clone(),
                        line: rule.line,
                        message,
                    };
                    for (f, p) in field_preds(other, opts).map_err(err)? {
                        self.field_preds.push((f, r, p));
                    }
                }
            }
        }
        self.rule_conds.push(mine);
        self.addr_backing.push(backs);
        Ok(())
    }

    /// The table an address match reads: a named set, or an inline set
    /// (the same prefixes share one table).
    fn table_of(&mut self, value: &AddrValue, line: usize) -> usize {
        let p = match value {
            AddrValue::Set(i) => return *i,
            AddrValue::Prefixes(p) => p,
        };
        let mut key = p.clone();
        key.sort_unstable();
        key.dedup();
        if let Some(i) = self.inline.iter().position(|x| *x == key) {
            return self.named + i;
        }
        let b = SetTable::new(&key, self.set_opts);
        self.set_info.push(SetInfo {
            name: format!("(inline, line {line})"),
            kind: SetKind::Anonymous,
            entries: b.entries(),
            bytes: b.bytes(),
        });
        self.tables.push(b);
        self.inline.push(key);
        self.named + self.inline.len() - 1
    }

    /// The index of the address condition on `backing` (interned, as are
    /// its lookups).
    fn addr_cond(
        &mut self,
        backing: usize,
        depth: Depth,
        field: AddrField,
        negate: bool,
    ) -> Result<usize, CompileError> {
        // Only the sides the condition reads are looked up.
        let (src, dst) = (Lookup { backing, dst: false, depth }, Lookup { backing, dst: true, depth });
        let c = match field {
            AddrField::Src => AddrCond { a: self.lookup(src)?, b: None, negate, depth },
            AddrField::Dst => AddrCond { a: self.lookup(dst)?, b: None, negate, depth },
            AddrField::Either => AddrCond { a: self.lookup(src)?, b: Some(self.lookup(dst)?), negate, depth },
        };
        if let Some(i) = self.conds.iter().position(|x| *x == c) {
            return Ok(i);
        }
        if self.conds.len() == MAX_LOOKUPS {
            return Err(CompileError::TooManyLookups);
        }
        self.conds.push(c);
        Ok(self.conds.len() - 1)
    }

    fn lookup(&mut self, l: Lookup) -> Result<usize, CompileError> {
        if let Some(i) = self.lookups.iter().position(|x| *x == l) {
            return Ok(i);
        }
        if self.lookups.len() == MAX_LOOKUPS {
            return Err(CompileError::TooManyLookups);
        }
        self.lookups.push(l);
        Ok(self.lookups.len() - 1)
    }
}

/// A match on header fields as the predicates it needs (a port or a
/// flag also needs its protocol); the error names what is wrong.
fn field_preds(m: &Match, opts: &CompileOptions) -> Result<Vec<(Field, Pred)>, String> {
    let ranges = |v: &[u8]| v.iter().map(|&x| (u32::from(x), u32::from(x))).collect::<Vec<_>>();
    let proto = |depth: Depth, p: u8| (Field::Proto(depth), Pred::In { ranges: ranges(&[p]), negate: false });
    Ok(match m {
        Match::Addr { .. } => unreachable!("address matches are conditions"),
        Match::Proto { depth, negate, protos } => {
            vec![(Field::Proto(*depth), Pred::In { ranges: ranges(protos), negate: *negate })]
        }
        Match::Port { depth, proto: p, field, negate, ranges: r } => {
            let r = r.iter().map(|&(a, b)| (u32::from(a), u32::from(b))).collect();
            vec![proto(*depth, *p), (Field::Port(*depth, *field), Pred::In { ranges: r, negate: *negate })]
        }
        Match::TcpFlags { depth, set, clear } => {
            vec![proto(*depth, 6), (Field::TcpFlags(*depth), Pred::Flags { set: *set, clear: *clear })]
        }
        Match::IcmpType { depth, v6, negate, types } => vec![
            proto(*depth, if *v6 { 58 } else { 1 }),
            (Field::IcmpType(*depth), Pred::In { ranges: ranges(types), negate: *negate }),
        ],
        Match::Vlan { negate, ids } => {
            let r = ids.iter().map(|&v| (u32::from(v), u32::from(v))).collect();
            vec![(Field::Vlan, Pred::In { ranges: r, negate: *negate })]
        }
        Match::Frag { depth, kind } => {
            let c = match kind {
                FragKind::First => 1,
                FragKind::Later => 2,
            };
            vec![(Field::Frag(*depth), Pred::In { ranges: vec![(c, c)], negate: false })]
        }
        Match::Len { negate, ranges: r } => vec![(Field::Len, Pred::In { ranges: r.clone(), negate: *negate })],
        Match::Iface { negate, names } => {
            let mut r = Vec::new();
            for n in names {
                match opts.ifaces.iter().position(|i| i == n) {
                    Some(p) => r.push((p as u32, p as u32)),
                    None if opts.ifaces.is_empty() => {
                        return Err("`iface` matches live ports only (sluice bridge, sluice shield)".into())
                    }
                    None => {
                        return Err(format!(
                            "`iface {n}`: not one of the interfaces given ({})",
                            opts.ifaces.join(", ")
                        ))
                    }
                }
            }
            vec![(Field::Iface, Pred::In { ranges: r, negate: *negate })]
        }
    })
}

/// The rules as bit rows: all of them, the deciding ones, and per address
/// condition and per lookup the rules it serves (rows of `stride(words)`).
struct BitRows {
    words: usize,
    all: Vec<u64>,
    decisive: Vec<u64>,
    cond_rules: Vec<u64>,
    lookup_rules: Vec<u64>,
}

impl BitRows {
    fn new(file: &RuleFile, conds: &[AddrCond], rule_conds: &[Vec<usize>], lookups: usize) -> Self {
        let words = file.rules.len().div_ceil(64).max(1);
        let mut all = vec![0u64; words];
        let mut decisive = vec![0u64; words];
        for (r, rule) in file.rules.iter().enumerate() {
            all[r / 64] |= 1 << (r % 64);
            if !matches!(rule.action, Action::Count | Action::Police) {
                decisive[r / 64] |= 1 << (r % 64);
            }
        }
        let sw = stride(words);
        let mut cond_rules = vec![0u64; conds.len() * sw];
        for (r, cs) in rule_conds.iter().enumerate() {
            for &c in cs {
                cond_rules[c * sw + r / 64] |= 1 << (r % 64);
            }
        }
        let mut lookup_rules = vec![0u64; lookups * sw];
        for (c, cond) in conds.iter().enumerate() {
            for k in std::iter::once(cond.a).chain(cond.b) {
                for (l, r) in lookup_rules[k * sw..(k + 1) * sw].iter_mut().zip(&cond_rules[c * sw..]) {
                    *l |= r;
                }
            }
        }
        BitRows { words, all, decisive, cond_rules, lookup_rules }
    }

    /// `all`, padded to `stride(words)` words (no rule sits in the
    /// padding): the row length `decide` is compiled for.
    fn padded(&self) -> Vec<u64> {
        let mut padded = self.all.clone();
        padded.resize(stride(self.words), 0);
        padded
    }
}

/// What tells two rule sets' counters apart: the rules' text and the default.
fn rules_id(file: &RuleFile) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in &file.rules {
        r.text.hash(&mut h);
    }
    file.default.as_str().hash(&mut h);
    h.finish()
}

/// Words of rule bits `decide` is compiled for: the word count itself up
/// to 4 (up to 256 rules), else the next power of two.
fn stride(words: usize) -> usize {
    if words <= 4 {
        words
    } else {
        words.next_power_of_two().min(MAX_RULES / 64)
    }
}

/// The rule of a drop, for [`crate::Stats`]: by source, by destination, or
/// neither.
fn side_of(r: &Rule) -> Option<Side> {
    let mut side = None;
    for m in &r.matches {
        if let Match::Addr { field, negate: false, .. } = m {
            let s = match field {
                AddrField::Src => Side::Source,
                AddrField::Dst => Side::Destination,
                AddrField::Either => return None,
            };
            if side.is_some_and(|x| x != s) {
                return None;
            }
            side = Some(s);
        } else if let Match::Addr { negate: true, .. } = m {
            return None;
        }
    }
    side
}

/// The one named set a rule reads, if exactly one.
fn list_of(r: &Rule, file: &RuleFile) -> String {
    let mut names = r.matches.iter().filter_map(|m| match m {
        Match::Addr { value: AddrValue::Set(i), .. } => Some(file.sets[*i].name.as_str()),
        _ => None,
    });
    match (names.next(), names.next()) {
        (Some(a), None) => a.to_owned(),
        _ => String::new(),
    }
}

/// Class tables for every field some rule reads, those that constrain the
/// most rules first: a packet's accumulator mostly empties after the first
/// few (most rules name a protocol and a port), and the step stops there.
fn build_fields(preds: &[(Field, usize, Pred)], all: &[u64]) -> Vec<FieldTable> {
    let mut fields: Vec<(Field, Vec<u64>)> = Vec::new();
    for (f, r, _) in preds {
        let at = match fields.iter().position(|(g, _)| g == f) {
            Some(at) => at,
            None => {
                fields.push((*f, vec![0; all.len()]));
                fields.len() - 1
            }
        };
        fields[at].1[r / 64] |= 1 << (r % 64);
    }
    let constrained = |m: &[u64]| m.iter().map(|w| w.count_ones()).sum::<u32>();
    // Stable: equal counts keep the rule file's order.
    fields.sort_by_key(|(_, m)| std::cmp::Reverse(constrained(m)));
    let later: Vec<Vec<u64>> = (0..fields.len())
        .map(|j| {
            let mut l = vec![0; all.len()];
            for (_, m) in &fields[j + 1..] {
                for (l, m) in l.iter_mut().zip(m) {
                    *l |= m;
                }
            }
            l
        })
        .collect();
    fields
        .into_iter()
        .zip(later)
        .map(|((field, _), later)| {
            let mine: Vec<(usize, Pred)> =
                preds.iter().filter(|(f, _, _)| *f == field).map(|(_, r, p)| (*r, p.clone())).collect();
            let row = |v: Option<u32>| {
                let mut row = all.to_vec();
                for (r, p) in &mine {
                    if !p.holds(v) {
                        row[r / 64] &= !(1 << (r % 64));
                    }
                }
                row
            };
            let mut masks = row(None);
            let mut classes: std::collections::HashMap<Vec<u64>, usize> = std::collections::HashMap::new();
            classes.insert(masks.clone(), 0);
            let ids: Vec<usize> = (0..dense_domain(field))
                .map(|v| {
                    let r = row(Some(v));
                    let next = classes.len();
                    *classes.entry(r).or_insert_with_key(|r| {
                        masks.extend_from_slice(r);
                        next
                    })
                })
                .collect();
            let dense = if classes.len() <= 256 {
                Dense::U8(ids.iter().map(|&c| c as u8).collect())
            } else {
                Dense::U32(ids.iter().map(|&c| c as u32).collect())
            };
            FieldTable { slot: slot(field), dense, preds: mine, masks, later }
        })
        .collect()
}

/// The rule file the shorthand flags stand for; its sets are the given
/// lists in the order src, dst, any (`present`), then the feeds' sets.
pub fn shorthand_file(present: [bool; 3], depth: Depth, feeds: &[String]) -> RuleFile {
    let mut file = RuleFile {
        source: "(flags)".into(),
        text: String::new(),
        sets: Vec::new(),
        rules: Vec::new(),
        default: Action::Pass,
    };
    for (name, given) in ["drop-src", "drop-dst", "drop-any"].into_iter().zip(present) {
        if given {
            file.sets.push(sluice_rules::SetDef {
                name: name.into(),
                line: 0,
                source: sluice_rules::SetSource::Inline(Vec::new()),
            });
        }
    }
    for name in feeds {
        file.sets.push(sluice_rules::SetDef {
            name: name.clone(),
            line: 0,
            source: sluice_rules::SetSource::Dynamic { timeout: None, maxelem: None },
        });
        let i = file.sets.len() - 1;
        file.rules.push(Rule {
            police: None,
            line: 0,
            text: format!("drop saddr @{name}"),
            action: Action::Drop,
            matches: vec![Match::Addr {
                depth: Depth::Outer,
                field: AddrField::Src,
                negate: false,
                value: AddrValue::Set(i),
            }],
        });
    }
    let q = if depth == Depth::Inner { "inner " } else { "" };
    // Source matches first, as the drop reasons always counted them.
    for (set, field) in [
        ("drop-src", AddrField::Src),
        ("drop-any", AddrField::Src),
        ("drop-dst", AddrField::Dst),
        ("drop-any", AddrField::Dst),
    ] {
        if let Some(i) = file.set_index(set) {
            let word = if field == AddrField::Src { "saddr" } else { "daddr" };
            file.rules.push(Rule {
                police: None,
                line: 0,
                text: format!("drop {q}{word} @{set}"),
                action: Action::Drop,
                matches: vec![Match::Addr { depth, field, negate: false, value: AddrValue::Set(i) }],
            });
        }
    }
    file
}

/// A rule file's `police` as the engine's policer (the shield's kernel
/// program takes its numbers from it too).
pub fn policer(p: &sluice_rules::Police) -> crate::flows::Policer {
    use crate::flows::{PoliceKey, Policer, Rate};
    let rate = match p.rate {
        sluice_rules::PoliceRate::Bytes(n) => Rate::BytesPerSecond(n as f64),
        sluice_rules::PoliceRate::Packets(n) => Rate::PacketsPerSecond(n as f64),
    };
    let per = match p.per {
        Some(AddrField::Src) => PoliceKey::Source,
        Some(AddrField::Dst) => PoliceKey::Destination,
        _ => PoliceKey::Rule,
    };
    Policer::new(rate, p.burst.map(|b| b as f64), per)
}
