//! `sluice shield`: sluice on the host it protects.
//!
//! The rules are compiled into one XDP program ([`program`], written with
//! the small assembler in [`asm`]: no clang, no ELF, no BTF), the sets into
//! the engine's own tables inside BPF maps ([`tables`]), and the program
//! attached to the host's interfaces. A dropped packet never reaches the
//! kernel's stack; the rest pass (`XDP_PASS`).
//!
//! Everything the rule language has runs in the kernel (police, `iface`,
//! `inner` behind the tunnels the engine walks); what the kernel cannot
//! take (an interface the host lacks, a program past the verifier's
//! limits) is refused when the rules are compiled, naming its `file:line`
//! ([`ShieldError::Unsupported`]); nothing is loaded then.

/// The eBPF assembler (`sluice_live::asm`), where the program is written.
pub use sluice_live::asm;
pub mod flows;
pub mod metrics;
pub mod mirror;
pub mod origins;
pub mod police;
pub mod program;
pub mod samples;
pub mod service;
pub mod tables;

pub use service::{start, Attached, ModeChoice, Shield, ShieldConfig, ShieldSummary};

use sluice_live::bpf::{BpfMap, MapType, XdpProgram};
use sluice_live::LiveError;
use sluice_rules::Prefix;
use sluice_rules::{Action, AddrValue, Match, RuleFile, SetSource};
use tables::SetCode;

/// Why rules cannot become a kernel program, or the kernel refused it.
#[derive(Debug, thiserror::Error)]
pub enum ShieldError {
    /// A construct the kernel program does not run (yet), where it is.
    #[error("{file}:{line}: {what}: the kernel program cannot run this; nothing was loaded")]
    Unsupported { file: String, line: usize, what: String },
    /// The kernel (a map, the verifier, an attachment) refused.
    #[error(transparent)]
    Kernel(#[from] LiveError),
    /// What was asked cannot be done (no interface, rules that do not load).
    #[error("{0}")]
    Config(String),
    /// A signal handler could not be installed.
    #[error("signals: {0}")]
    Io(#[from] std::io::Error),
}

/// How the program treats what the rules do not say.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Drop frames whose addresses cannot be known (as `--undecodable drop`).
    pub undecodable_drop: bool,
    /// Look IPv4-mapped IPv6 addresses up as IPv4.
    pub v4mapped: bool,
    /// Judge and count everything, drop nothing (the counters say what
    /// would have been dropped).
    pub dry_run: bool,
    /// Sample drops into this ring ([`program::SampleTap`]; the maps belong
    /// to the caller, who keeps them across reloads).
    pub sample: Option<program::SampleTap>,
    /// Count drops by the origin of the element that matched, for this
    /// dynamic set's elements ([`origins::OriginCounts`]; the CrowdSec
    /// feed's set).
    pub origins: Option<origins::OriginTap>,
    /// The interfaces whose packets and bytes are counted apart, by
    /// ifindex (the shield's `--iface`s, in order; [`program::Plan::ifaces`],
    /// [`Compiled::iface_counts`]). Empty: no interface rows.
    pub ifaces: Vec<u32>,
}

/// A rule's counter: packets and bytes (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub packets: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Count {
    fn add_assign(&mut self, c: Count) {
        self.packets += c.packets;
        self.bytes += c.bytes;
    }
}

/// What came in on one interface, by the verdict the rules gave it: the
/// sum of the counters a packet ends at (a `pass` or `drop` rule, a
/// `police` rule's over-rate drops, the default, undecodable frames) in
/// the interface's row. Under `--dry-run`, `drop` is what the rules
/// would have dropped (as the bridge counts it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceCount {
    pub pass: Count,
    pub drop: Count,
}

impl IfaceCount {
    fn add(&mut self, drop: bool, c: Count) {
        *if drop { &mut self.drop } else { &mut self.pass } += c;
    }
}

/// Rules compiled and loaded into the kernel: the program, its counters
/// and the sets' tables. Not attached anywhere yet.
pub struct Compiled {
    program: XdpProgram,
    counters: BpfMap,
    rules: usize,
    sets: Vec<SetCode>,
    /// The dynamic sets the rules use, by name: the index in `sets`.
    dynamic: Vec<(String, usize)>,
    /// Each rule as written, in order.
    texts: Vec<String>,
    /// Each rule's line and action, in order (the metrics' labels).
    lines: Vec<(usize, Action)>,
    insns: usize,
    /// The `police` rules' buckets (`None` when no rule polices), and per
    /// rule its code.
    buckets: Option<BpfMap>,
    police: Vec<Option<police::PoliceCode>>,
    /// Per rule (per CPU): packets and bytes a `police` rule found over
    /// its rate, in rows as `counters`; `None` when no rule polices.
    over: Option<BpfMap>,
    /// Rows of counters: one per interface in [`Options::ifaces`], and one
    /// for the others (1 without interfaces).
    rows: u32,
    /// Where the default and undecodable frames go: drop (else pass).
    default_drop: bool,
    undecodable_drop: bool,
}

/// Each slot's counter summed over the rows.
fn sum_rows(rows: &[Vec<Count>]) -> Vec<Count> {
    let mut sum = rows.first().cloned().unwrap_or_default();
    for row in rows.iter().skip(1) {
        for (s, &c) in sum.iter_mut().zip(row) {
            *s += c;
        }
    }
    sum
}

/// A dynamic set's most elements per family when its definition gives
/// none (the engine's default).
pub const DEFAULT_MAXELEM: u32 = 1_000_000;

/// The file's rules with a BGP feed's (the blackhole set's rule, whose
/// set is `blackholes`, then the flows') before or after them.
fn with_bgp_rules(
    file: &[sluice_rules::Rule],
    blackholes: usize,
    bgp: Option<&flows::BgpRules>,
) -> (Vec<sluice_rules::Rule>, Vec<Option<usize>>) {
    let Some(bgp) = bgp else { return (file.to_vec(), vec![None; file.len()]) };
    let ours = std::iter::once(flows::blackhole_rule(blackholes)).chain(bgp.flows.iter().cloned());
    let n = 1 + bgp.flows.len();
    // Where a packet a flow's rule stops goes on: the rule past the flows'.
    let (rules, first): (Vec<sluice_rules::Rule>, usize) = match bgp.placement {
        sluice_engine::flows::Placement::First => (ours.chain(file.iter().cloned()).collect(), 0),
        sluice_engine::flows::Placement::Last => (file.iter().cloned().chain(ours).collect(), file.len()),
    };
    let mut skip = vec![None; rules.len()];
    for (k, &stops) in bgp.stops.iter().enumerate() {
        if stops {
            skip[first + 1 + k] = Some(first + n);
        }
    }
    (rules, skip)
}

impl Compiled {
    /// Compiles `file` with each set's entries (`sets[i]` for
    /// `file.sets[i]`) and loads it: maps first, then the program (the
    /// verifier's words in the error when it refuses).
    pub fn new(file: &RuleFile, sets: &[Vec<Prefix>], opts: &Options) -> Result<Compiled, ShieldError> {
        Self::with_layout(file, sets, opts, &tables::Layout::default())
    }

    /// [`Compiled::new`] with the sets' tables laid out as `layout` says
    /// (the bench's and the tests' knob).
    pub fn with_layout(
        file: &RuleFile,
        sets: &[Vec<Prefix>],
        opts: &Options,
        layout: &tables::Layout,
    ) -> Result<Compiled, ShieldError> {
        Self::build(file, sets, opts, layout, None)
    }

    /// [`Compiled::new`] with the rules a BGP feed adds (the blackhole
    /// set's rule and the flows', before or after the file's; see
    /// [`flows`]); `None` when the shield has no BGP peer.
    pub fn with_bgp(
        file: &RuleFile,
        sets: &[Vec<Prefix>],
        opts: &Options,
        bgp: Option<&flows::BgpRules>,
    ) -> Result<Compiled, ShieldError> {
        Self::build(file, sets, opts, &tables::Layout::default(), bgp)
    }

    fn build(
        file: &RuleFile,
        sets: &[Vec<Prefix>],
        opts: &Options,
        layout: &tables::Layout,
        bgp: Option<&flows::BgpRules>,
    ) -> Result<Compiled, ShieldError> {
        // The BGP rules name the blackhole set as the one past the file's.
        let blackholes = file.sets.len();
        let (rules, skip_to) = with_bgp_rules(&file.rules, blackholes, bgp);
        let mut codes: Vec<SetCode> = Vec::new();
        // Per rule, per address match: the index in `codes`.
        let mut uses: Vec<Vec<usize>> = Vec::new();
        let mut named: Vec<Option<usize>> = vec![None; file.sets.len() + 1];
        // Dynamic sets by name: the index of their code.
        let mut dynamic: Vec<(String, usize)> = Vec::new();
        for r in &rules {
            let mut mine = Vec::new();
            for m in &r.matches {
                let Match::Addr { value, .. } = m else { continue };
                let i = match value {
                    AddrValue::Set(s) => match named[*s] {
                        Some(i) => i,
                        None if *s == blackholes => {
                            dynamic.push((flows::BLACKHOLE_SET.to_owned(), codes.len()));
                            codes.push(SetCode::dynamic(DEFAULT_MAXELEM, &format!("s{s}"), layout, false)?);
                            named[*s] = Some(codes.len() - 1);
                            codes.len() - 1
                        }
                        None => {
                            let name = format!("s{s}");
                            codes.push(match file.sets[*s].source {
                                SetSource::Dynamic { maxelem, .. } => {
                                    let set = &file.sets[*s].name;
                                    dynamic.push((set.clone(), codes.len()));
                                    let origins = opts.origins.as_ref().is_some_and(|o| &o.set == set);
                                    SetCode::dynamic(maxelem.unwrap_or(DEFAULT_MAXELEM), &name, layout, origins)?
                                }
                                _ => SetCode::new(&sets[*s], &name, layout)?,
                            });
                            named[*s] = Some(codes.len() - 1);
                            codes.len() - 1
                        }
                    },
                    AddrValue::Prefixes(p) => {
                        codes.push(SetCode::new(p, &format!("r{}", r.line), layout)?);
                        codes.len() - 1
                    }
                };
                mine.push(i);
            }
            uses.push(mine);
        }
        // `iface` names: the host's interfaces, by index (the program
        // compares `ingress_ifindex`). A name the host does not have is
        // an error where it is written, as the bridge refuses a name that
        // is not one of its ports.
        let mut ifindexes: Vec<(String, u32)> = Vec::new();
        for r in &rules {
            for m in &r.matches {
                let Match::Iface { names, .. } = m else { continue };
                for n in names {
                    if ifindexes.iter().any(|(name, _)| name == n) {
                        continue;
                    }
                    let i = sluice_live::sys::ifindex(n)
                        .map_err(|e| ShieldError::Config(format!("{}:{}: `iface {n}`: {e}", file.source, r.line)))?;
                    ifindexes.push((n.clone(), i));
                }
            }
        }
        // `police` rules: a bucket each, or PER_ADDRESS_BUCKETS when per
        // address, in one array of u64 shared by every CPU.
        let mut next_bucket = 0u32;
        let police: Vec<Option<police::PoliceCode>> = rules
            .iter()
            .map(|r| {
                let p = r.police.as_ref().filter(|_| r.action == Action::Police)?;
                let code = police::PoliceCode::new(p, next_bucket);
                next_bucket += code.buckets();
                Some(code)
            })
            .collect();
        // A row of counters per interface (and one for the others): the
        // over-rate counts in rows of the same stride, so one row offset
        // serves both.
        let rows = program::rows(&opts.ifaces);
        let slots = (rules.len() as u32 + program::EXTRA_COUNTERS) * rows;
        let (buckets, over) = if next_bucket > 0 {
            (
                Some(BpfMap::new(MapType::Array, 4, 8, next_bucket, 0, "sluice_police")?),
                Some(BpfMap::new(MapType::PercpuArray, 4, 16, slots, 0, "sluice_over")?),
            )
        } else {
            (None, None)
        };
        let counters = BpfMap::new(MapType::PercpuArray, 4, 16, slots, 0, "sluice_counts")?;
        let scratch = BpfMap::new(MapType::PercpuArray, 4, program::SUMMARY_BYTES, 1, 0, "sluice_scratch")?;
        let plan = program::Plan {
            rules: &rules,
            addr_sets: uses.iter().map(|u| u.iter().map(|&i| &codes[i]).collect()).collect(),
            default_drop: file.default == Action::Drop,
            undecodable_drop: opts.undecodable_drop,
            v4mapped: opts.v4mapped,
            dry_run: opts.dry_run,
            counters_fd: std::os::fd::AsRawFd::as_raw_fd(&counters),
            scratch_fd: std::os::fd::AsRawFd::as_raw_fd(&scratch),
            sample: opts.sample,
            police: police.clone(),
            buckets_fd: buckets.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd),
            over_fd: over.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd),
            ifindexes,
            skip_to,
            origin_counts_fd: opts.origins.as_ref().map(|o| o.counts_fd),
            ifaces: opts.ifaces.clone(),
        };
        let insns = program::generate(&plan).map_err(|e| ShieldError::Unsupported {
            file: file.source.clone(),
            line: 0,
            what: format!("the rules make a program the kernel cannot hold ({e})"),
        })?;
        let program = XdpProgram::load_named(&insns, "sluice_shield")?;
        // The program holds its maps; `scratch` needs no other owner.
        drop(scratch);
        let texts = rules.iter().map(|r| r.text.clone()).collect();
        let lines = rules.iter().map(|r| (r.line, r.action)).collect();
        Ok(Compiled {
            program,
            counters,
            rules: rules.len(),
            sets: codes,
            dynamic,
            texts,
            lines,
            insns: insns.len(),
            buckets,
            police,
            over,
            rows,
            default_drop: file.default == Action::Drop,
            undecodable_drop: opts.undecodable_drop,
        })
    }

    /// The dynamic sets the rules use, by name, with their kernel tries.
    pub fn dynamic_sets(&self) -> impl Iterator<Item = (&str, tables::DynamicMaps<'_>)> {
        self.dynamic.iter().filter_map(|(n, i)| Some((n.as_str(), self.sets[*i].dynamic_maps()?)))
    }

    /// Each rule as written, in order (the counters' order).
    pub fn rule_texts(&self) -> &[String] {
        &self.texts
    }

    /// Each rule's line in its file and its action, in order.
    pub fn rule_lines(&self) -> &[(usize, Action)] {
        &self.lines
    }

    /// The loaded program.
    pub fn program(&self) -> &XdpProgram {
        &self.program
    }

    /// How many instructions it has.
    pub fn instructions(&self) -> usize {
        self.insns
    }

    /// Kernel memory the sets' tables take, in bytes.
    pub fn table_bytes(&self) -> u64 {
        self.sets.iter().map(SetCode::bytes).sum()
    }

    /// Runs the program on `frame` in the kernel (`BPF_PROG_TEST_RUN`):
    /// `XDP_DROP` or `XDP_PASS`.
    pub fn test_run(&self, frame: &[u8]) -> Result<u32, ShieldError> {
        Ok(self.program.test_run(frame)?)
    }

    /// [`Compiled::test_run`] as if the frame came in on the interface
    /// `ifindex` (it must exist: the kernel looks it up).
    pub fn test_run_on(&self, frame: &[u8], ifindex: u32) -> Result<u32, ShieldError> {
        Ok(self.program.test_run_on(frame, ifindex)?)
    }

    /// Rule `rule`'s `police` buckets as the kernel holds them (each the
    /// ns at which it is full again; 0 never charged), or `None` when the
    /// rule does not police.
    pub fn police_buckets(&self, rule: usize) -> Result<Option<Vec<u64>>, ShieldError> {
        let (Some(code), Some(map)) = (self.police.get(rule).copied().flatten(), &self.buckets) else {
            return Ok(None);
        };
        let words = (code.base..code.base + code.buckets())
            .map(|i| {
                let v = map.lookup(&i.to_ne_bytes())?.unwrap_or_default();
                Ok(v.get(..8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))))
            })
            .collect::<Result<Vec<u64>, ShieldError>>()?;
        Ok(Some(words))
    }

    /// Per rule: for a `police` rule, the packets it found over its rate
    /// (dropped, or under `--dry-run` passed), as the engine's
    /// `police_dropped`; `None` for the other rules.
    pub fn police_dropped(&self) -> Result<Vec<Option<u64>>, ShieldError> {
        let over = match &self.over {
            Some(map) => self.read_rows(map)?,
            None => Vec::new(),
        };
        Ok((0..self.rules)
            .map(|r| {
                self.police[r]?;
                Some(over.iter().map(|row| row[r].packets).sum())
            })
            .collect())
    }

    /// Kernel memory the `police` buckets take, in bytes (8 a bucket).
    pub fn police_bytes(&self) -> u64 {
        self.police.iter().flatten().map(|c| 8 * u64::from(c.buckets())).sum()
    }

    /// Each rule's counter, in rule order, then the default's and the
    /// undecodable frames' ([`program::Extra`]): summed over the CPUs and
    /// the interface rows.
    pub fn counts(&self) -> Result<Vec<Count>, ShieldError> {
        Ok(sum_rows(&self.read_rows(&self.counters)?))
    }

    /// Per interface row ([`Options::ifaces`] in order, then the one for
    /// every other interface): its packets and bytes by verdict.
    pub fn iface_counts(&self) -> Result<Vec<IfaceCount>, ShieldError> {
        Ok(self.counts_and_ifaces()?.1)
    }

    /// [`Compiled::counts`] and [`Compiled::iface_counts`] of one reading.
    pub fn counts_and_ifaces(&self) -> Result<(Vec<Count>, Vec<IfaceCount>), ShieldError> {
        let rows = self.read_rows(&self.counters)?;
        let over = match &self.over {
            Some(map) => self.read_rows(map)?,
            None => Vec::new(),
        };
        let extra = |e: program::Extra| self.rules + e as usize;
        let ifaces = rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut v = IfaceCount::default();
                for (r, &(_, action)) in self.lines.iter().enumerate() {
                    match action {
                        Action::Drop => v.drop += row[r],
                        Action::Pass => v.pass += row[r],
                        // Over its rate: dropped (the rest goes on to a
                        // later counter).
                        Action::Police => v.drop += over.get(i).map_or(Count::default(), |o| o[r]),
                        Action::Count => {}
                    }
                }
                v.add(self.default_drop, row[extra(program::Extra::Default)]);
                v.add(self.undecodable_drop, row[extra(program::Extra::Undecodable)]);
                v
            })
            .collect();
        Ok((sum_rows(&rows), ifaces))
    }

    /// A per-CPU map of (packets, bytes) in rows of the counters' stride:
    /// each row's slots, summed over the CPUs.
    fn read_rows(&self, map: &BpfMap) -> Result<Vec<Vec<Count>>, ShieldError> {
        let stride = self.rules as u32 + program::EXTRA_COUNTERS;
        (0..self.rows)
            .map(|row| {
                (row * stride..(row + 1) * stride)
                    .map(|i| {
                        let v = map.lookup(&i.to_ne_bytes())?.unwrap_or_default();
                        let mut c = Count::default();
                        for cpu in v.chunks_exact(16) {
                            c.packets += u64::from_ne_bytes(cpu[..8].try_into().expect("8 bytes"));
                            c.bytes += u64::from_ne_bytes(cpu[8..].try_into().expect("8 bytes"));
                        }
                        Ok(c)
                    })
                    .collect()
            })
            .collect()
    }
}
