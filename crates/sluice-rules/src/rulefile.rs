//! The rule file: an nft-flavoured language, one statement per line.
//!
//! ```text
//! set fh from "firehol_level1.netset"        # a list file, relative to the rule file
//! set nets { 10.0.0.0/8, 100.64.0.0/10, 2001:db8::/32 }
//! count proto udp                            # count, then go on
//! pass udp dport 53 daddr @resolvers
//! drop saddr @fh
//! drop tcp dport { 23, 2323 }
//! drop inner saddr @fh                       # the innermost IP header of a tunnel
//! default pass
//! ```
//!
//! This module only parses: it resolves set names to indices and list paths
//! against the rule file's directory, but reads no list. Every error names
//! `file:line:col` and what was expected there. Fuzzed in
//! `fuzz/fuzz_targets/rules.rs`.

use crate::prefix::Prefix;
use crate::ParsedList;
use std::fmt;
use std::path::{Path, PathBuf};

/// What a rule does when all its matches hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Drop; later rules are not looked at.
    Drop,
    /// Pass; later rules are not looked at.
    Pass,
    /// Count the packet against this rule and go on to the next.
    Count,
    /// Drop what exceeds the rule's rate ([`Rule::police`]); what is
    /// within it is counted and goes on to the next rule.
    Police,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Drop => "drop",
            Action::Pass => "pass",
            Action::Count => "count",
            Action::Police => "police",
        }
    }
}

/// Which IP header a match reads: the outer one (the default), or the
/// innermost one behind tunnels (the only one when there is no tunnel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Depth {
    Outer,
    Inner,
}

/// `saddr`, `daddr`, or `addr` (either).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrField {
    Src,
    Dst,
    Either,
}

/// `sport` or `dport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortField {
    Src,
    Dst,
}

/// `frag first` (offset 0, more fragments follow) or `frag later` (offset > 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragKind {
    First,
    Later,
}

/// The addresses an address match compares against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrValue {
    /// A named set: index into [`RuleFile::sets`].
    Set(usize),
    /// Prefixes written in the rule itself.
    Prefixes(Vec<Prefix>),
}

/// TCP flag bits, in header order.
pub mod tcp_flag {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
    pub const NAMES: [(&str, u8); 8] = [
        ("fin", FIN),
        ("syn", SYN),
        ("rst", RST),
        ("psh", PSH),
        ("ack", ACK),
        ("urg", URG),
        ("ece", ECE),
        ("cwr", CWR),
    ];
}

/// One condition of a rule. Every match of a rule must hold (AND). A match on
/// a header the packet does not have (ports of a later fragment, addresses of
/// a non-IP frame) does not hold, negated or not, as in nft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    Addr {
        depth: Depth,
        field: AddrField,
        negate: bool,
        value: AddrValue,
    },
    /// The upper-layer protocol number is one of `protos`.
    Proto {
        depth: Depth,
        negate: bool,
        protos: Vec<u8>,
    },
    /// `tcp|udp sport|dport`: the protocol is `proto` (6 or 17), its header
    /// is present, and the port is in one of `ranges` (inclusive).
    Port {
        depth: Depth,
        proto: u8,
        field: PortField,
        negate: bool,
        ranges: Vec<(u16, u16)>,
    },
    /// `tcp flags syn,!ack`: protocol TCP, header present, every bit of
    /// `set` set and every bit of `clear` clear.
    TcpFlags {
        depth: Depth,
        set: u8,
        clear: u8,
    },
    /// `icmp type N` / `icmpv6 type N`: protocol 1 (or 58), header present,
    /// type in `types`.
    IcmpType {
        depth: Depth,
        v6: bool,
        negate: bool,
        types: Vec<u8>,
    },
    /// The outermost VLAN tag's id is in `ids` (`negate`: there is a tag and
    /// it is not).
    Vlan {
        negate: bool,
        ids: Vec<u16>,
    },
    Frag {
        depth: Depth,
        kind: FragKind,
    },
    /// Length on the wire, in inclusive ranges.
    Len {
        negate: bool,
        ranges: Vec<(u32, u32)>,
    },
    /// The interface (live port) the packet came in on.
    Iface {
        negate: bool,
        names: Vec<String>,
    },
}

/// One rule: an action under all its matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line in the rule file.
    pub line: usize,
    /// The rule as written, comments and surrounding blanks removed.
    pub text: String,
    pub action: Action,
    pub matches: Vec<Match>,
    /// With [`Action::Police`]: the rate.
    pub police: Option<Police>,
}

/// What a `police` rule's rate counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoliceRate {
    /// Bytes per second (of whole frames, as on the wire).
    Bytes(u64),
    Packets(u64),
}

/// `police RATE [burst SIZE] [per saddr|daddr]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Police {
    pub rate: PoliceRate,
    /// In the rate's unit (bytes or packets); None: a tenth of a second's
    /// worth (at least two full-size frames or two packets).
    pub burst: Option<u64>,
    /// One bucket per source or destination address (a bounded table),
    /// or None: one for all the rule's traffic.
    pub per: Option<AddrField>,
}

/// `10mbit`, `64kbyte`, `5000pps` (k, m, g: thousands): (value, unit)
/// where the unit is `bit`, `byte` or `pps` (or "" for a bare number).
fn scaled(text: &str) -> Option<(u64, &str)> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let rest = &text[digits..];
    let (mult, unit) = match rest.chars().next() {
        Some('k') => (1_000, &rest[1..]),
        Some('m') => (1_000_000, &rest[1..]),
        Some('g') => (1_000_000_000, &rest[1..]),
        _ => (1, rest),
    };
    Some((n.checked_mul(mult)?, unit))
}

/// Where a named set's entries come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetSource {
    /// A list file (any format `parse_list` reads), resolved against the
    /// rule file's directory.
    File(PathBuf),
    Inline(Vec<Prefix>),
    /// `set NAME dynamic [timeout S] [maxelem N]`: no entries but those
    /// added at runtime (they survive reloads); `timeout` is the default
    /// lifetime of an added entry, in seconds; `maxelem` the most elements
    /// the set holds (adds beyond are refused; None: the bridge's default).
    Dynamic {
        timeout: Option<u32>,
        maxelem: Option<u32>,
    },
    /// `set NAME geo FILE country CC,... [field PATH]` or `... asn N,...`:
    /// the networks a MaxMind DB file maps to those countries or AS
    /// numbers (the file resolved against the rule file's directory).
    Geo {
        db: PathBuf,
        select: sluice_geo::Select,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDef {
    pub name: String,
    pub line: usize,
    pub source: SetSource,
}

/// A parsed rule file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleFile {
    /// Names the file in messages (usually its path).
    pub source: String,
    /// The text it was parsed from (a compiled rule file keeps it).
    pub text: String,
    pub sets: Vec<SetDef>,
    pub rules: Vec<Rule>,
    /// What happens to a packet no `pass`/`drop` rule decided: `Pass` unless
    /// a `default drop` line says otherwise.
    pub default: Action,
}

impl RuleFile {
    /// The index of a set by name.
    pub fn set_index(&self, name: &str) -> Option<usize> {
        self.sets.iter().position(|s| s.name == name)
    }

    /// Read every set's entries: list files through [`crate::load_list`]
    /// (any format it reads; `lenient` skips bad lines), inline sets as
    /// written. `out[i]` is for `self.sets[i]`.
    pub fn load_sets(&self, lenient: bool) -> Result<Vec<ParsedList>, SetLoadError> {
        self.sets
            .iter()
            .map(|s| match &s.source {
                SetSource::Inline(p) => Ok(ParsedList { prefixes: p.clone(), lines: 1, ..ParsedList::default() }),
                SetSource::Dynamic { .. } => Ok(ParsedList::default()),
                SetSource::File(path) => crate::load_list(path, lenient).map_err(|error| SetLoadError {
                    rules: self.source.clone(),
                    line: s.line,
                    set: s.name.clone(),
                    error,
                }),
                SetSource::Geo { db, select } => crate::load_geo(db, select).map_err(|error| SetLoadError {
                    rules: self.source.clone(),
                    line: s.line,
                    set: s.name.clone(),
                    error: crate::ListError::Geo(Box::new(error)),
                }),
            })
            .collect()
    }
}

/// A set's list that could not be read: where the set is defined, and the
/// list's own error (which names the list file and line).
#[derive(Debug, thiserror::Error)]
#[error("{rules}:{line}: set `{set}`: {error}")]
pub struct SetLoadError {
    pub rules: String,
    pub line: usize,
    pub set: String,
    pub error: crate::ListError,
}

/// A rule file error: where, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    pub source: String,
    pub line: usize,
    /// 1-based column (in characters) of the offending token.
    pub col: usize,
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.source, self.line, self.col, self.message)
    }
}

impl std::error::Error for RuleError {}

/// Most rules in one file; the evaluator keeps one bit per rule.
pub const MAX_RULES: usize = 4096;

/// Parse a rule file's text. `source` names it in errors; `base` is the
/// directory list paths are relative to.
pub fn parse_rules(source: &str, text: &str, base: &Path) -> Result<RuleFile, RuleError> {
    let mut file = RuleFile {
        source: source.to_owned(),
        text: text.to_owned(),
        sets: Vec::new(),
        rules: Vec::new(),
        default: Action::Pass,
    };
    let mut default_line = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let raw = if line_no == 1 { raw.trim_start_matches('\u{feff}') } else { raw };
        let tokens = tokenize(raw).map_err(|(col, message)| RuleError {
            source: source.to_owned(),
            line: line_no,
            col,
            message,
        })?;
        if tokens.is_empty() {
            continue;
        }
        let mut p = Parser { toks: &tokens, pos: 0, line: line_no, source, end_col: raw.chars().count() + 1 };
        match tokens[0].text.as_str() {
            "set" => {
                let def = p.set_def(base, &file)?;
                file.sets.push(def);
            }
            "default" => {
                p.pos = 1;
                let t = p.next("`pass` or `drop`")?;
                file.default = match t.text.as_str() {
                    "pass" => Action::Pass,
                    "drop" => Action::Drop,
                    _ => return Err(p.err_at(t, "expected `pass` or `drop` after `default`")),
                };
                if let Some(prev) = default_line {
                    return Err(p.err_at(&tokens[0], &format!("a second `default` (the first is on line {prev})")));
                }
                default_line = Some(line_no);
                p.expect_end()?;
            }
            _ => {
                if file.rules.len() == MAX_RULES {
                    return Err(p.err_at(&tokens[0], &format!("more than {MAX_RULES} rules")));
                }
                let rule = p.rule(&file, raw)?;
                file.rules.push(rule);
            }
        }
    }
    Ok(file)
}

/// Read and parse a rule file; list paths are relative to its directory.
pub fn load_rules(path: &Path) -> Result<RuleFile, RuleLoadError> {
    let text =
        std::fs::read_to_string(path).map_err(|error| RuleLoadError::Io { path: path.display().to_string(), error })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse_rules(&path.display().to_string(), &text, base).map_err(RuleLoadError::Rule)
}

/// Why a rule file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RuleLoadError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}")]
    Rule(RuleError),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    /// 1-based character column.
    col: usize,
    /// A "quoted string".
    quoted: bool,
}

/// Split a line into words, `{`, `}`, `,` and quoted strings; `#` starts a
/// comment outside quotes.
fn tokenize(line: &str) -> Result<Vec<Token>, (usize, String)> {
    let mut out = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            break;
        } else if matches!(c, '{' | '}' | ',') {
            out.push(Token { text: c.to_string(), col: i + 1, quoted: false });
            i += 1;
        } else if c == '"' {
            let start = i;
            i += 1;
            let mut s = String::new();
            loop {
                match chars.get(i) {
                    None => return Err((start + 1, "unterminated string: expected a closing `\"`".into())),
                    Some('"') => break,
                    Some(&ch) => s.push(ch),
                }
                i += 1;
            }
            i += 1;
            out.push(Token { text: s, col: start + 1, quoted: true });
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '{' | '}' | ',' | '"' | '#') {
                i += 1;
            }
            out.push(Token { text: chars[start..i].iter().collect(), col: start + 1, quoted: false });
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: &'a [Token],
    pos: usize,
    line: usize,
    source: &'a str,
    /// Column just past the line, for "expected X" at the end.
    end_col: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, col: usize, message: &str) -> RuleError {
        RuleError { source: self.source.to_owned(), line: self.line, col, message: message.to_owned() }
    }

    fn err_at(&self, t: &Token, message: &str) -> RuleError {
        self.err(t.col, message)
    }

    fn peek(&self) -> Option<&'a Token> {
        self.toks.get(self.pos)
    }

    fn next(&mut self, expected: &str) -> Result<&'a Token, RuleError> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err(self.err(self.end_col, &format!("expected {expected}, found the end of the line"))),
        }
    }

    fn expect_end(&self) -> Result<(), RuleError> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(self.err_at(t, &format!("unexpected `{}`: expected the end of the line", t.text))),
        }
    }

    /// After `dynamic`: `timeout SECONDS` and `maxelem N`, each at most
    /// once, in either order.
    fn dynamic_options(&mut self) -> Result<SetSource, RuleError> {
        let (mut timeout, mut maxelem) = (None, None);
        while let Some(k) = self.peek() {
            let (slot, what) = match k.text.as_str() {
                "timeout" if !k.quoted => (&mut timeout, "a timeout in seconds (1 to 4294967295)"),
                "maxelem" if !k.quoted => (&mut maxelem, "a most elements count (1 to 4294967295)"),
                _ => {
                    return Err(self
                        .err_at(k, "expected `timeout SECONDS`, `maxelem N` or the end of the line after `dynamic`"))
                }
            };
            if slot.is_some() {
                return Err(self.err_at(k, &format!("`{}` is given twice", k.text)));
            }
            self.pos += 1;
            let v = self.next(what)?;
            match v.text.parse::<u32>() {
                Ok(n) if n > 0 && !v.quoted => *slot = Some(n),
                _ => return Err(self.err_at(v, &format!("expected {what}, found `{}`", v.text))),
            }
        }
        Ok(SetSource::Dynamic { timeout, maxelem })
    }

    /// After `geo`: the database, `country` or `asn`, the values separated
    /// by commas, then `field PATH` if given.
    fn geo_options(&mut self, base: &Path) -> Result<SetSource, RuleError> {
        let db = self.next("a MaxMind DB file (.mmdb)")?;
        let k = self.next("`country` or `asn`")?;
        let key = match k.text.as_str() {
            "country" if !k.quoted => sluice_geo::Key::Country,
            "asn" if !k.quoted => sluice_geo::Key::Asn,
            _ => return Err(self.err_at(k, &format!("expected `country` or `asn`, found `{}`", k.text))),
        };
        let what = match key {
            sluice_geo::Key::Country => "a country code (like CN)",
            sluice_geo::Key::Asn => "an AS number (like 4134)",
        };
        let mut values = Vec::new();
        loop {
            let v = self.next(what)?;
            let value = key.parse_value(&v.text).map_err(|m| self.err_at(v, &m))?;
            if values.contains(&value) {
                return Err(self.err_at(v, &format!("{value} is listed twice")));
            }
            values.push(value);
            match self.peek() {
                Some(t) if t.text == "," && !t.quoted => self.pos += 1,
                _ => break,
            }
        }
        let mut field = None;
        if let Some(t) = self.peek().filter(|t| t.text == "field" && !t.quoted) {
            self.pos += 1;
            let f = self.next("a field path, like country_code or registered_country.iso_code")?;
            if f.text.is_empty() || f.text.split('.').any(str::is_empty) {
                return Err(self.err_at(t, "expected a field path, like country_code or registered_country.iso_code"));
            }
            field = Some(f.text.clone());
        }
        Ok(SetSource::Geo { db: base.join(&db.text), select: sluice_geo::Select { key, values, field } })
    }

    /// `set NAME from "PATH"`, `set NAME { prefix, ... }`,
    /// `set NAME dynamic [timeout SECONDS] [maxelem N]` or
    /// `set NAME geo FILE country|asn LIST [field PATH]`.
    fn set_def(&mut self, base: &Path, file: &RuleFile) -> Result<SetDef, RuleError> {
        self.pos = 1;
        let name = self.next("a set name")?;
        if name.quoted || !valid_name(&name.text) {
            return Err(self.err_at(name, "expected a set name (letters, digits, `_`, `-`, `.`)"));
        }
        if file.set_index(&name.text).is_some() {
            let prev = file.sets[file.set_index(&name.text).unwrap_or(0)].line;
            return Err(self.err_at(name, &format!("set `{}` is already defined on line {prev}", name.text)));
        }
        let t = self.next("`from \"FILE\"` or `{`")?;
        let source = match t.text.as_str() {
            "from" if !t.quoted => {
                let path = self.next("a quoted file name")?;
                if !path.quoted {
                    return Err(self.err_at(path, "expected a quoted file name, like \"firehol_level1.netset\""));
                }
                SetSource::File(base.join(&path.text))
            }
            "{" if !t.quoted => {
                self.pos -= 1;
                SetSource::Inline(self.prefix_braces()?)
            }
            "dynamic" if !t.quoted => self.dynamic_options()?,
            "geo" if !t.quoted => self.geo_options(base)?,
            _ => {
                return Err(self.err_at(
                    t,
                    "expected `from \"FILE\"`, `{ prefix, ... }`, `dynamic [timeout SECONDS] [maxelem N]` or `geo FILE country|asn LIST` after the set name",
                ))
            }
        };
        self.expect_end()?;
        Ok(SetDef { name: name.text.clone(), line: self.line, source })
    }

    /// `{ a, b, ... }` of prefixes (the `{` is next).
    fn prefix_braces(&mut self) -> Result<Vec<Prefix>, RuleError> {
        self.braces("an address or prefix", |p, t| {
            t.text.parse::<Prefix>().map_err(|e| p.err_at(t, &format!("expected an address or prefix: {e}")))
        })
    }

    /// `{ item, item, ... }`, each item parsed by `item`; at least one.
    fn braces<T>(
        &mut self,
        what: &str,
        mut item: impl FnMut(&Self, &'a Token) -> Result<T, RuleError>,
    ) -> Result<Vec<T>, RuleError> {
        let open = self.next("`{`")?;
        debug_assert_eq!(open.text, "{");
        let mut out = Vec::new();
        loop {
            let t = self.next(what)?;
            if t.text == "}" && !t.quoted {
                if out.is_empty() {
                    return Err(self.err_at(t, &format!("empty braces: expected {what}")));
                }
                return Ok(out);
            }
            out.push(item(self, t)?);
            let sep = self.next("`,` or `}`")?;
            match sep.text.as_str() {
                "," if !sep.quoted => {}
                "}" if !sep.quoted => return Ok(out),
                _ => return Err(self.err_at(sep, &format!("expected `,` or `}}`, found `{}`", sep.text))),
            }
        }
    }

    /// A single value or `{ v, ... }`.
    fn one_or_braces<T>(
        &mut self,
        what: &str,
        mut item: impl FnMut(&Self, &'a Token) -> Result<T, RuleError>,
    ) -> Result<Vec<T>, RuleError> {
        match self.peek() {
            Some(t) if t.text == "{" && !t.quoted => self.braces(what, item),
            _ => {
                let t = self.next(what)?;
                Ok(vec![item(self, t)?])
            }
        }
    }

    /// An optional `!=` before a value.
    fn negation(&mut self) -> bool {
        match self.peek() {
            Some(t) if t.text == "!=" && !t.quoted => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn rule(&mut self, file: &RuleFile, raw: &str) -> Result<Rule, RuleError> {
        let first = self.next("an action")?;
        let action = match first.text.as_str() {
            "drop" => Action::Drop,
            "pass" | "accept" => Action::Pass,
            "count" => Action::Count,
            "police" => Action::Police,
            _ => {
                return Err(self.err_at(
                    first,
                    &format!(
                        "unknown statement `{}`: expected `set`, `default`, `drop`, `pass`, `count` or `police`",
                        first.text
                    ),
                ))
            }
        };
        let police = if action == Action::Police { Some(self.police()?) } else { None };
        let mut depth = Depth::Outer;
        let mut matches = Vec::new();
        while let Some(t) = self.peek() {
            self.pos += 1;
            if t.quoted {
                return Err(self.err_at(t, "unexpected string: expected a match such as `saddr`, `proto`, `tcp dport`"));
            }
            match t.text.as_str() {
                "outer" => depth = Depth::Outer,
                "inner" => depth = Depth::Inner,
                "saddr" | "daddr" | "addr" => {
                    let field = match t.text.as_str() {
                        "saddr" => AddrField::Src,
                        "daddr" => AddrField::Dst,
                        _ => AddrField::Either,
                    };
                    let negate = self.negation();
                    let value = self.addr_value(file)?;
                    matches.push(Match::Addr { depth, field, negate, value });
                }
                "proto" => {
                    let negate = self.negation();
                    let protos = self.one_or_braces("a protocol (tcp, udp, icmp, icmpv6 or 0-255)", |p, t| {
                        proto_number(&t.text).ok_or_else(|| {
                            p.err_at(t, &format!("expected a protocol (tcp, udp, icmp, icmpv6 or 0-255), found `{}`", t.text))
                        })
                    })?;
                    matches.push(Match::Proto { depth, negate, protos });
                }
                "tcp" | "udp" => {
                    let proto = if t.text == "tcp" { 6 } else { 17 };
                    match self.peek().map(|n| n.text.as_str()) {
                        Some(f @ ("sport" | "dport")) => {
                            self.pos += 1;
                            let field = if f == "sport" { PortField::Src } else { PortField::Dst };
                            let negate = self.negation();
                            let ranges = self.one_or_braces("a port, range (a-b) or set", |p, t| port_range(p, t))?;
                            matches.push(Match::Port { depth, proto, field, negate, ranges });
                        }
                        Some("flags") if proto == 6 => {
                            self.pos += 1;
                            let (set, clear) = self.tcp_flags()?;
                            matches.push(Match::TcpFlags { depth, set, clear });
                        }
                        // `tcp` alone: the protocol.
                        _ => matches.push(Match::Proto { depth, negate: false, protos: vec![proto] }),
                    }
                }
                "icmp" | "icmpv6" => {
                    let v6 = t.text == "icmpv6";
                    if self.peek().is_some_and(|n| n.text == "type") {
                        self.pos += 1;
                        let negate = self.negation();
                        let types = self.one_or_braces("an ICMP type (0-255)", |p, t| {
                            t.text.parse::<u8>().map_err(|_| p.err_at(t, &format!("expected an ICMP type (0-255), found `{}`", t.text)))
                        })?;
                        matches.push(Match::IcmpType { depth, v6, negate, types });
                    } else {
                        matches.push(Match::Proto { depth, negate: false, protos: vec![if v6 { 58 } else { 1 }] });
                    }
                }
                "vlan" => {
                    let negate = self.negation();
                    let ids = self.one_or_braces("a VLAN id (0-4095)", |p, t| match t.text.parse::<u16>() {
                        Ok(v) if v < 4096 => Ok(v),
                        _ => Err(p.err_at(t, &format!("expected a VLAN id (0-4095), found `{}`", t.text))),
                    })?;
                    matches.push(Match::Vlan { negate, ids });
                }
                "frag" => {
                    let k = self.next("`first` or `later`")?;
                    let kind = match k.text.as_str() {
                        "first" => FragKind::First,
                        "later" => FragKind::Later,
                        _ => return Err(self.err_at(k, &format!("expected `first` or `later`, found `{}`", k.text))),
                    };
                    matches.push(Match::Frag { depth, kind });
                }
                "len" => {
                    let negate = self.negation();
                    let ranges = self.one_or_braces("a length or range (MIN-MAX)", |p, t| len_range(p, t))?;
                    matches.push(Match::Len { negate, ranges });
                }
                "iface" => {
                    let negate = self.negation();
                    let names = self.one_or_braces("an interface name", |p, t| {
                        if valid_name(&t.text) {
                            Ok(t.text.clone())
                        } else {
                            Err(p.err_at(t, &format!("expected an interface name, found `{}`", t.text)))
                        }
                    })?;
                    matches.push(Match::Iface { negate, names });
                }
                other => {
                    return Err(self.err_at(
                        t,
                        &format!(
                            "unknown match `{other}`: expected saddr, daddr, addr, proto, tcp, udp, icmp, icmpv6, vlan, frag, len, iface, inner or outer"
                        ),
                    ))
                }
            }
        }
        let text = raw.split('#').next().unwrap_or(raw).trim().to_owned();
        Ok(Rule { line: self.line, text, action, matches, police })
    }

    /// `RATE [burst SIZE] [per saddr|daddr]` after `police`.
    fn police(&mut self) -> Result<Police, RuleError> {
        const RATE: &str = "a rate: bits (10mbit), bytes (1mbyte) or packets (5000pps) per second";
        let t = self.next(RATE)?;
        let rate = match scaled(&t.text) {
            Some((n, "bit")) if n >= 8 => PoliceRate::Bytes(n / 8),
            Some((n, "byte")) if n > 0 => PoliceRate::Bytes(n),
            Some((n, "pps")) if n > 0 => PoliceRate::Packets(n),
            _ => return Err(self.err_at(t, &format!("expected {RATE}, found `{}`", t.text))),
        };
        let mut police = Police { rate, burst: None, per: None };
        if self.peek().is_some_and(|t| t.text == "burst") {
            self.pos += 1;
            let t = self.next("a burst size")?;
            let unit_ok = |u: &str| match rate {
                PoliceRate::Bytes(_) => u.is_empty() || u == "byte",
                PoliceRate::Packets(_) => u.is_empty() || u == "packets",
            };
            police.burst = match scaled(&t.text) {
                Some((n, u)) if n > 0 && unit_ok(u) => Some(n),
                _ => {
                    let want = match rate {
                        PoliceRate::Bytes(_) => "bytes (64kbyte, or a number)",
                        PoliceRate::Packets(_) => "packets (100packets, or a number)",
                    };
                    return Err(self.err_at(t, &format!("expected a burst in {want}, found `{}`", t.text)));
                }
            };
        }
        if self.peek().is_some_and(|t| t.text == "per") {
            self.pos += 1;
            let t = self.next("`saddr` or `daddr`")?;
            police.per = Some(match t.text.as_str() {
                "saddr" => AddrField::Src,
                "daddr" => AddrField::Dst,
                _ => {
                    return Err(self.err_at(t, &format!("expected `saddr` or `daddr` after `per`, found `{}`", t.text)))
                }
            });
        }
        Ok(police)
    }

    /// `@name`, a prefix, or `{ prefix, ... }`.
    fn addr_value(&mut self, file: &RuleFile) -> Result<AddrValue, RuleError> {
        let t = self
            .peek()
            .ok_or_else(|| self.err(self.end_col, "expected `@set`, an address or `{`, found the end of the line"))?;
        if let Some(name) = t.text.strip_prefix('@') {
            self.pos += 1;
            return match file.set_index(name) {
                Some(i) => Ok(AddrValue::Set(i)),
                None => Err(self
                    .err_at(t, &format!("unknown set `@{name}` (define it with `set {name} ...` on an earlier line)"))),
            };
        }
        Ok(AddrValue::Prefixes(self.one_or_braces("`@set`, an address or prefix", |p, t| {
            t.text.parse::<Prefix>().map_err(|e| p.err_at(t, &format!("expected `@set`, an address or prefix: {e}")))
        })?))
    }

    /// `syn,!ack` — a comma-separated list (tokenized as words and commas).
    fn tcp_flags(&mut self) -> Result<(u8, u8), RuleError> {
        let (mut set, mut clear) = (0u8, 0u8);
        loop {
            let t = self.next("a TCP flag (fin, syn, rst, psh, ack, urg, ece, cwr; `!` for clear)")?;
            let (name, negate) = match t.text.strip_prefix('!') {
                Some(n) => (n, true),
                None => (t.text.as_str(), false),
            };
            let Some(&(_, bit)) = tcp_flag::NAMES.iter().find(|(n, _)| *n == name) else {
                return Err(self.err_at(
                    t,
                    &format!("expected a TCP flag (fin, syn, rst, psh, ack, urg, ece, cwr), found `{name}`"),
                ));
            };
            if (set | clear) & bit != 0 {
                return Err(self.err_at(t, &format!("flag `{name}` given twice")));
            }
            if negate {
                clear |= bit;
            } else {
                set |= bit;
            }
            match self.peek() {
                Some(c) if c.text == "," && !c.quoted => self.pos += 1,
                _ => return Ok((set, clear)),
            }
        }
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `tcp`, `udp`, `icmp`, `icmpv6` or a number.
pub fn proto_number(s: &str) -> Option<u8> {
    match s {
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        "icmpv6" | "ipv6-icmp" => Some(58),
        "gre" => Some(47),
        "esp" => Some(50),
        "sctp" => Some(132),
        _ => s.parse().ok(),
    }
}

fn split_range(s: &str) -> (&str, Option<&str>) {
    match s.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    }
}

fn port_range(p: &Parser<'_>, t: &Token) -> Result<(u16, u16), RuleError> {
    let bad = || p.err_at(t, &format!("expected a port (0-65535) or range (a-b), found `{}`", t.text));
    let (a, b) = split_range(&t.text);
    let lo: u16 = a.parse().map_err(|_| bad())?;
    let hi: u16 = match b {
        Some(b) => b.parse().map_err(|_| bad())?,
        None => lo,
    };
    if lo > hi {
        return Err(p.err_at(t, &format!("port range `{}` is reversed", t.text)));
    }
    Ok((lo, hi))
}

fn len_range(p: &Parser<'_>, t: &Token) -> Result<(u32, u32), RuleError> {
    let bad = || p.err_at(t, &format!("expected a length or range (MIN-MAX), found `{}`", t.text));
    let (a, b) = split_range(&t.text);
    let lo: u32 = a.parse().map_err(|_| bad())?;
    let hi: u32 = match b {
        Some(b) => b.parse().map_err(|_| bad())?,
        None => lo,
    };
    if lo > hi {
        return Err(p.err_at(t, &format!("length range `{}` is reversed", t.text)));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RuleFile, RuleError> {
        parse_rules("r.rules", text, Path::new("/etc/sluice"))
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn police_rules() {
        let f = parse(
            "police 10mbit udp dport 53\npolice 5kpps burst 100 per saddr\npolice 64kbyte burst 1mbyte per daddr tcp\n",
        )
        .unwrap();
        let p = |i: usize| f.rules[i].police.unwrap();
        assert_eq!(f.rules[0].action, Action::Police);
        assert_eq!(p(0), Police { rate: PoliceRate::Bytes(1_250_000), burst: None, per: None });
        assert_eq!(f.rules[0].matches.len(), 1);
        assert_eq!(p(1), Police { rate: PoliceRate::Packets(5_000), burst: Some(100), per: Some(AddrField::Src) });
        assert_eq!(p(2), Police { rate: PoliceRate::Bytes(64_000), burst: Some(1_000_000), per: Some(AddrField::Dst) });
        assert_eq!(f.rules[2].matches, vec![Match::Proto { depth: Depth::Outer, negate: false, protos: vec![6] }]);
        assert!(f.rules.iter().all(|r| r.police.is_some()));
        assert_eq!(
            err("police fast udp"),
            "r.rules:1:8: expected a rate: bits (10mbit), bytes (1mbyte) or packets (5000pps) per second, found `fast`"
        );
        assert!(
            err("police 100pps burst 5kbyte").contains("expected a burst in packets"),
            "{}",
            err("police 100pps burst 5kbyte")
        );
        assert!(err("police 1mbit per sport").contains("expected `saddr` or `daddr` after `per`"));
        assert!(err("police").contains("expected a rate"));
        assert!(err("police 0pps").contains("expected a rate"));
        assert!(parse("drop udp").unwrap().rules[0].police.is_none());
    }

    #[test]
    fn geo_sets() {
        use sluice_geo::{Key, Select};
        let f = parse("set cn geo GeoLite2-Country.mmdb country CN, ru\nset bad geo \"/var/lib/asn.mmdb\" asn AS4134,4837 field asn\ndrop saddr @cn\n")
            .unwrap();
        assert_eq!(
            f.sets[0].source,
            SetSource::Geo {
                db: PathBuf::from("/etc/sluice/GeoLite2-Country.mmdb"),
                select: Select { key: Key::Country, values: vec!["CN".into(), "RU".into()], field: None }
            }
        );
        assert_eq!(
            f.sets[1].source,
            SetSource::Geo {
                db: PathBuf::from("/var/lib/asn.mmdb"),
                select: Select { key: Key::Asn, values: vec!["4134".into(), "4837".into()], field: Some("asn".into()) }
            }
        );
        assert_eq!(err("set x geo a.mmdb"), "r.rules:1:17: expected `country` or `asn`, found the end of the line");
        assert_eq!(err("set x geo a.mmdb city Paris"), "r.rules:1:18: expected `country` or `asn`, found `city`");
        assert_eq!(
            err("set x geo a.mmdb country CHN"),
            "r.rules:1:26: `CHN` is not a country code (two letters, ISO 3166-1 alpha-2, like CN)"
        );
        assert_eq!(
            err("set x geo a.mmdb country CN,"),
            "r.rules:1:29: expected a country code (like CN), found the end of the line"
        );
        assert_eq!(err("set x geo a.mmdb country CN,cn"), "r.rules:1:29: CN is listed twice");
        assert!(err("set x geo a.mmdb asn 12x").contains("`12x` is not an AS number"));
        assert!(err("set x geo a.mmdb asn 1 field").contains("expected a field path"));
        assert!(err("set x geo a.mmdb asn 1 field a..b").contains("expected a field path"));
        assert!(err("set x geo a.mmdb asn 1 extra").contains("unexpected `extra`"));
    }

    #[test]
    fn a_geo_set_loads_its_networks_and_names_a_bad_database() {
        use sluice_geo::write::{Value, Writer};
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::new("t", 1);
        let cc = |c: &str| Value::map([("country_code", Value::str(c))]);
        w.insert("10.0.0.0".parse().unwrap(), 8, cc("DE")).unwrap();
        w.insert("2001:db8::".parse().unwrap(), 32, cc("DE")).unwrap();
        w.insert("11.0.0.0".parse().unwrap(), 8, cc("FR")).unwrap();
        std::fs::write(dir.path().join("c.mmdb"), w.to_bytes()).unwrap();
        let text = "set de geo c.mmdb country DE field country_code\nset xx geo c.mmdb country XX field country_code\n";
        let f = parse_rules("r.rules", text, dir.path()).unwrap();
        let de = f.load_sets(false).map(|_| ()).unwrap_err().to_string();
        assert_eq!(
            de,
            format!(
                "r.rules:2: set `xx`: {}: country XX has no networks at field `country_code`",
                dir.path().join("c.mmdb").display()
            )
        );
        let f = parse_rules("r.rules", "set de geo c.mmdb country DE field country_code\n", dir.path()).unwrap();
        let mut got: Vec<String> = f.load_sets(false).unwrap()[0].prefixes.iter().map(|p| p.to_string()).collect();
        got.sort();
        assert_eq!(got, vec!["10.0.0.0/8", "2001:db8::/32"]);
        let f = parse_rules("r.rules", "set de geo missing.mmdb country DE\n", dir.path()).unwrap();
        assert!(f.load_sets(false).map(|_| ()).unwrap_err().to_string().contains("missing.mmdb: cannot open"));
    }

    #[test]
    fn dynamic_sets() {
        let f = parse("set blocks dynamic\nset bans dynamic timeout 3600   # an hour\ndrop saddr @blocks\n").unwrap();
        assert_eq!(f.sets[0].source, SetSource::Dynamic { timeout: None, maxelem: None });
        assert_eq!(f.sets[1].source, SetSource::Dynamic { timeout: Some(3600), maxelem: None });
        assert_eq!(f.load_sets(false).unwrap()[1].prefixes, vec![]);
        let f =
            parse("set a dynamic maxelem 500\nset b dynamic timeout 60 maxelem 7\nset c dynamic maxelem 9 timeout 5\n")
                .unwrap();
        assert_eq!(f.sets[0].source, SetSource::Dynamic { timeout: None, maxelem: Some(500) });
        assert_eq!(f.sets[1].source, SetSource::Dynamic { timeout: Some(60), maxelem: Some(7) });
        assert_eq!(f.sets[2].source, SetSource::Dynamic { timeout: Some(5), maxelem: Some(9) });
    }

    #[test]
    fn a_bad_maxelem_is_named_with_its_line_and_column() {
        assert_eq!(
            err("\nset x dynamic maxelem 0"),
            "r.rules:2:23: expected a most elements count (1 to 4294967295), found `0`"
        );
        assert!(
            err("set x dynamic maxelem").contains("expected a most elements count"),
            "{}",
            err("set x dynamic maxelem")
        );
        assert!(err("set x dynamic maxelem 5000000000").contains("found `5000000000`"));
        assert!(err("set x dynamic maxelem many").contains("found `many`"));
        assert_eq!(err("set x dynamic maxelem 5 maxelem 6"), "r.rules:1:25: `maxelem` is given twice");
        assert!(err("set x dynamic timeout 5 timeout 6").contains("`timeout` is given twice"));
        assert!(err("set x dynamic maxelem 5 forever").contains("`timeout SECONDS`, `maxelem N` or the end"));
    }

    #[test]
    fn the_issue_example() {
        let f = parse(
            "set fh from \"firehol_level1.netset\"        # a list file\n\
             set nets { 10.0.0.0/8, 100.64.0.0/10, 2001:db8::/32 }\n\
             set resolvers { 192.0.2.53 }\n\
             count proto udp                            # count, then go on\n\
             pass udp dport 53 daddr @resolvers\n\
             drop saddr @fh\n\
             drop tcp dport { 23, 2323 }\n\
             drop udp dport 0-1023\n\
             drop inner saddr @fh\n\
             drop tcp flags syn,!ack vlan 100 len 0-100 frag first\n\
             drop icmp type { 8, 0 } iface eth0 addr != @nets\n\
             default drop\n",
        )
        .unwrap();
        assert_eq!(f.sets.len(), 3);
        assert_eq!(f.sets[0].source, SetSource::File(PathBuf::from("/etc/sluice/firehol_level1.netset")));
        assert_eq!(f.default, Action::Drop);
        assert_eq!(f.rules.len(), 8);
        assert_eq!(f.rules[0].text, "count proto udp");
        assert_eq!(f.rules[0].line, 4);
        assert_eq!(f.rules[0].matches, vec![Match::Proto { depth: Depth::Outer, negate: false, protos: vec![17] }]);
        assert_eq!(
            f.rules[1].matches,
            vec![
                Match::Port {
                    depth: Depth::Outer,
                    proto: 17,
                    field: PortField::Dst,
                    negate: false,
                    ranges: vec![(53, 53)]
                },
                Match::Addr { depth: Depth::Outer, field: AddrField::Dst, negate: false, value: AddrValue::Set(2) },
            ]
        );
        assert_eq!(
            f.rules[3].matches,
            vec![Match::Port {
                depth: Depth::Outer,
                proto: 6,
                field: PortField::Dst,
                negate: false,
                ranges: vec![(23, 23), (2323, 2323)]
            }]
        );
        assert_eq!(
            f.rules[5].matches,
            vec![Match::Addr { depth: Depth::Inner, field: AddrField::Src, negate: false, value: AddrValue::Set(0) }]
        );
        assert_eq!(
            f.rules[6].matches[0],
            Match::TcpFlags { depth: Depth::Outer, set: tcp_flag::SYN, clear: tcp_flag::ACK }
        );
        assert_eq!(f.rules[6].matches[1], Match::Vlan { negate: false, ids: vec![100] });
        assert_eq!(f.rules[6].matches[3], Match::Frag { depth: Depth::Outer, kind: FragKind::First });
        assert_eq!(
            f.rules[7].matches[2],
            Match::Addr { depth: Depth::Outer, field: AddrField::Either, negate: true, value: AddrValue::Set(1) }
        );
    }

    #[test]
    fn errors_name_line_column_and_what_was_expected() {
        assert_eq!(
            err("drop saddr @nope"),
            "r.rules:1:12: unknown set `@nope` (define it with `set nope ...` on an earlier line)"
        );
        assert_eq!(
            err("\n\ndrop tcp dport 70000"),
            "r.rules:3:16: expected a port (0-65535) or range (a-b), found `70000`"
        );
        assert!(err("drop tcp dport").starts_with("r.rules:1:15: expected a port"));
        assert!(err("frob saddr 1.2.3.4").starts_with("r.rules:1:1: unknown statement `frob`"));
        assert!(err("drop saddr 1.2.3.400").starts_with("r.rules:1:12: expected `@set`, an address or prefix"));
        assert!(err("drop saddr { 1.2.3.4 2.3.4.5 }").starts_with("r.rules:1:22: expected `,` or `}`"));
        assert!(err("drop tcp flags syn,!bogus").contains("found `bogus`"));
        assert!(err("set a { 1.2.3.4 }\nset a { 1.2.3.5 }").contains("already defined on line 1"));
        assert!(err("default pass\ndefault drop").contains("the first is on line 1"));
        assert!(err("set x from firehol").contains("quoted file name"));
        assert!(err("set x dynamic timeout 0").contains("timeout in seconds"));
        assert!(err("set x dynamic timeout").contains("timeout in seconds"));
        assert!(err("set x dynamic forever").contains("`timeout SECONDS`"));
        assert!(err("set x from \"unterminated").contains("unterminated string"));
        assert!(err("drop udp dport 9-1").contains("reversed"));
        assert!(err("drop vlan 4096").contains("0-4095"));
        assert!(err("drop frag middle").contains("`first` or `later`"));
        assert!(err("drop proto { }").contains("empty braces"));
        assert!(err("drop wibble").contains("unknown match `wibble`"));
    }

    #[test]
    fn comments_blank_lines_and_shorthands() {
        let f = parse("# all comment\n\n   \ndrop\ncount tcp # x\npass icmpv6\n").unwrap();
        assert_eq!(f.rules.len(), 3);
        assert!(f.rules[0].matches.is_empty());
        assert_eq!(f.rules[1].text, "count tcp");
        assert_eq!(f.rules[2].matches, vec![Match::Proto { depth: Depth::Outer, negate: false, protos: vec![58] }]);
        assert_eq!(f.default, Action::Pass);
    }
}
