use crate::prefix::{Prefix, PrefixParseError};
use crate::range::{RangeError, RangePrefixes};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::path::Path;

/// What was wrong with one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineErrorKind {
    #[error(transparent)]
    Prefix(#[from] PrefixParseError),
    #[error("unexpected text after the address")]
    TrailingText,
    #[error("line is not valid UTF-8")]
    NotUtf8,
    #[error("not an address range `first-last` of two IPv4 or two IPv6 addresses")]
    BadRange,
    #[error("range start is after its end")]
    RangeReversed,
    #[error("range mixes IPv4 and IPv6")]
    RangeMixedFamilies,
    #[error("ipset `add` line without a set name and an element")]
    IpsetMissingElement,
    #[error("ipset `nomatch` entries (exceptions carved out of a set) are not supported")]
    IpsetNomatch,
    #[error("unknown {format} option `{option}`")]
    UnknownOption { format: &'static str, option: String },
    #[error("{format} option `{option}` needs a value")]
    MissingOptionValue { format: &'static str, option: &'static str },
    #[error("ipset timeout `{0}` is not a whole number of seconds (0-4294967295)")]
    BadTimeout(String),
    #[error("`{0}` is not an nft duration like 1d2h3m4s500ms (at most 4294967295 s)")]
    BadDuration(String),
    #[error("map or concatenation element (`:` or `.`): only sets of addresses can be read")]
    NftNotAddressSet,
    #[error("quoted text is not closed on this line")]
    UnterminatedQuote,
    #[error("expected `elements = {{`")]
    BadNftElements,
    #[error("nft block opened here is not closed by `}}` before the end of the file")]
    UnclosedNftBlock,
    #[error("`}}` closes no open nft block")]
    UnmatchedBrace,
    #[error("not valid JSON: {0}")]
    BadJson(String),
    #[error("JSON object has no \"cidr\" and is not the metadata line")]
    JsonNoCidr,
    #[error("metadata line says {expected} records but {read} were read (truncated download?)")]
    JsonRecordCount { expected: u64, read: u64 },
}

impl From<RangeError> for LineErrorKind {
    fn from(e: RangeError) -> Self {
        match e {
            RangeError::Reversed => LineErrorKind::RangeReversed,
            RangeError::MixedFamilies => LineErrorKind::RangeMixedFamilies,
        }
    }
}

/// A malformed line: where it is and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub source: String,
    /// 1-based line number.
    pub line: usize,
    /// The offending text, cut to 80 characters.
    pub text: String,
    pub kind: LineErrorKind,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {:?}", self.source, self.line, self.kind, self.text)
    }
}

/// Why a list could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// Boxed so that results, and the errors that wrap this one (a rule
    /// file's set), stay small.
    #[error("{0}")]
    Line(Box<LineError>),
    #[error("{source_name}: {error}")]
    Io { source_name: String, error: io::Error },
    /// A geo set's database (the error names the file).
    #[error("{0}")]
    Geo(Box<sluice_geo::GeoError>),
}

/// The prefixes of a list, in file order, and the lines skipped in lenient mode.
#[derive(Clone, Debug, Default)]
pub struct ParsedList {
    /// Every entry as read, ranges split into their prefixes, including
    /// entries that carry a timeout (see [`ParsedList::live_after`]).
    pub prefixes: Vec<Prefix>,
    pub skipped: Vec<LineError>,
    pub lines: usize,
    /// `(index into prefixes, seconds left when read)` for the entries that
    /// expire (ipset `timeout`, nft `expires`/`timeout`), in index order;
    /// each prefix of a split range has its own pair. Entries not listed
    /// here never expire.
    pub timeouts: Vec<(usize, u32)>,
    /// A geo set's database and what it selected (None for a list file).
    pub geo: Option<sluice_geo::GeoInfo>,
}

impl ParsedList {
    /// The prefixes still matching `elapsed_secs` seconds after the list was
    /// read, in file order. An entry read with `t` seconds left matches
    /// while `elapsed_secs < t`, as the kernel counts it down to zero.
    pub fn live_after(&self, elapsed_secs: u64) -> Vec<Prefix> {
        let mut out = Vec::with_capacity(self.prefixes.len());
        let mut expiring = self.timeouts.iter().peekable();
        for (i, p) in self.prefixes.iter().enumerate() {
            match expiring.next_if(|(at, _)| *at == i) {
                Some((_, secs)) if u64::from(*secs) <= elapsed_secs => {}
                _ => out.push(*p),
            }
        }
        out
    }

    /// Seconds after loading when the first entry expires, if any expires.
    pub fn next_expiry(&self) -> Option<u32> {
        self.timeouts.iter().map(|&(_, secs)| secs).min()
    }

    /// The first expiry strictly after `elapsed_secs`: when the set that
    /// [`ParsedList::live_after`]`(elapsed_secs)` returned next changes.
    pub fn next_expiry_after(&self, elapsed_secs: u64) -> Option<u32> {
        self.timeouts.iter().map(|&(_, secs)| secs).filter(|&s| u64::from(s) > elapsed_secs).min()
    }
}

/// Parse a list from a reader. `source` names it in errors (usually the path).
///
/// Each line is recognised by its shape, so one file may mix formats:
/// - plain FireHOL/Spamhaus text: `addr` or `addr/len`, `#` and `;` comments;
/// - ranges `first-last` (spaces around `-` allowed), split into the fewest
///   prefixes covering them exactly;
/// - ipset `save` output: `add SET ELEMENT [options]` (also old `-A`);
///   `create`/`-N` lines are skipped and the elements of every set are
///   merged into one list. The option `timeout N` is kept (seconds; `0`
///   means permanent, as in ipset); `packets`, `bytes`, `comment`,
///   `skbmark`, `skbprio`, `skbqueue` are ignored; `nomatch` is an error;
/// - nftables `nft list set`/`nft list ruleset` output: every
///   `elements = { ... }` block (possibly over many lines) is read, other
///   lines inside `table`/`set`/`chain` blocks are skipped. An element's
///   time left is its `expires`, else its `timeout`; `comment` and
///   `counter packets N bytes N` are ignored. Sets of other types (ports,
///   maps, concatenations) give errors on their elements;
/// - Spamhaus DROP JSON lines: `{"cidr": "..."}` objects; a metadata line
///   (`"type": "metadata"`) with `records` must match the number of cidr
///   lines since the previous metadata line (so drop_v4.json and
///   drop_v6.json may be concatenated).
///
/// Plain lines are tried first, in one byte-wise pass (faster than before
/// the other formats existed); only a line that is not a plain entry is
/// looked at again.
pub fn parse_list<R: BufRead>(source: &str, mut reader: R, lenient: bool) -> Result<ParsedList, ListError> {
    let mut p = Parser::new(source, lenient);
    let mut raw = Vec::with_capacity(128);
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|error| ListError::Io { source_name: source.to_owned(), error })?;
        if n == 0 {
            break;
        }
        p.out.lines += 1;
        let line_no = p.out.lines;
        match std::str::from_utf8(&raw) {
            Ok(text) => {
                let text = if line_no == 1 { text.trim_start_matches('\u{feff}') } else { text };
                // Inside an nft block a lone address is an element or noise,
                // not a plain entry, so only then is the fast path skipped.
                if !p.in_nft() {
                    match parse_plain(text) {
                        Plain::Prefix(prefix) => {
                            p.out.prefixes.push(prefix);
                            continue;
                        }
                        Plain::Blank => continue,
                        Plain::Other => {}
                    }
                }
                p.line(line_no, text)?;
            }
            Err(_) => p.fail(line_no, &String::from_utf8_lossy(&raw), LineErrorKind::NotUtf8)?,
        }
    }
    p.finish()
}

/// What the fast path made of a line.
enum Plain {
    Prefix(Prefix),
    /// Blank or comment only.
    Blank,
    /// Anything else: looked at again by [`Parser::line`].
    Other,
}

/// The plain format's fast path: one address or prefix, perhaps a comment.
///
/// Byte-wise and conservative: it takes only a token made of hex digits,
/// `.`, `:` and `/` between ASCII blanks, and parses it as
/// [`Prefix::from_str`](std::str::FromStr) would. Anything else (other
/// characters, several tokens, an invalid prefix) goes to [`Parser::line`],
/// which gives the same answer the plain format always gave, so the fast
/// path changes speed, never results.
fn parse_plain(line: &str) -> Plain {
    // One pass over the bytes: where the token starts and ends, and its `/`.
    let bytes = line.as_bytes();
    let (mut start, mut end, mut slash) = (usize::MAX, 0, usize::MAX);
    for (i, &b) in bytes.iter().enumerate() {
        match BYTE_CLASS[usize::from(b)] {
            TOKEN | SLASH => {
                if start == usize::MAX {
                    start = i;
                } else if end != i {
                    return Plain::Other; // a second token
                }
                if b == b'/' && slash == usize::MAX {
                    slash = i;
                }
                end = i + 1;
            }
            BLANK => {}
            COMMENT => break,
            _ => return Plain::Other,
        }
    }
    if start == usize::MAX {
        return Plain::Blank;
    }
    // All ASCII, so every offset is a char boundary.
    let (addr, len) = if slash == usize::MAX {
        (&line[start..end], None)
    } else {
        (&line[start..slash], Some(&line[slash + 1..end]))
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return Plain::Other;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => return Plain::Other,
        },
    };
    Plain::Prefix(Prefix::new(addr, len))
}

const OTHER: u8 = 0;
const TOKEN: u8 = 1;
const SLASH: u8 = 2;
const BLANK: u8 = 3;
const COMMENT: u8 = 4;

/// What each byte is to the fast path: a prefix's characters (hex digits,
/// `.`, `:`), `/`, ASCII blanks, comment starts, or anything else.
static BYTE_CLASS: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' | b'.' | b':' => TOKEN,
            b'/' => SLASH,
            b' ' | b'\t' | b'\r' | b'\n' => BLANK,
            b'#' | b';' => COMMENT,
            _ => OTHER,
        };
        b += 1;
    }
    t
};

/// An address, prefix or range, checked and ready to be added.
pub(crate) enum Entry {
    Prefix(Prefix),
    Range(RangePrefixes),
}

/// `addr`, `addr/len` or `first-last` (spaces around `-` allowed).
pub(crate) fn parse_entry(token: &str) -> Result<Entry, LineErrorKind> {
    match token.parse::<Prefix>() {
        Ok(p) => Ok(Entry::Prefix(p)),
        Err(e) => match token.split_once('-') {
            Some((a, b)) => {
                let (Ok(a), Ok(b)) = (a.trim().parse::<IpAddr>(), b.trim().parse::<IpAddr>()) else {
                    return Err(LineErrorKind::BadRange);
                };
                Ok(Entry::Range(RangePrefixes::new(a, b)?))
            }
            None => Err(e.into()),
        },
    }
}

/// The state carried from line to line, and the output.
pub(crate) struct Parser<'s> {
    source: &'s str,
    lenient: bool,
    pub(crate) out: ParsedList,
    /// Open nft blocks (`table`, `set`, `chain`, ...), innermost last: the
    /// line each opened on and its text, for the end-of-file error.
    pub(crate) nft_blocks: Vec<(usize, String)>,
    /// The open `elements = {` block, if any: where it opened.
    pub(crate) nft_elements: Option<(usize, String)>,
    /// JSON lines with a `cidr` since the last metadata line.
    pub(crate) json_records: u64,
}

impl<'s> Parser<'s> {
    fn new(source: &'s str, lenient: bool) -> Self {
        Parser {
            source,
            lenient,
            out: ParsedList::default(),
            nft_blocks: Vec::new(),
            nft_elements: None,
            json_records: 0,
        }
    }

    fn in_nft(&self) -> bool {
        self.nft_elements.is_some() || !self.nft_blocks.is_empty()
    }

    /// Report a bad line: an error, or in lenient mode a skipped line.
    pub(crate) fn fail(&mut self, line: usize, text: &str, kind: LineErrorKind) -> Result<(), ListError> {
        let e = LineError { source: self.source.to_owned(), line, text: keep(text), kind };
        if self.lenient {
            self.out.skipped.push(e);
            Ok(())
        } else {
            Err(ListError::Line(Box::new(e)))
        }
    }

    /// Add an entry's prefixes, each with the entry's timeout.
    pub(crate) fn push(&mut self, entry: Entry, timeout: Option<u32>) {
        let first = self.out.prefixes.len();
        match entry {
            Entry::Prefix(p) => self.out.prefixes.push(p),
            Entry::Range(r) => self.out.prefixes.extend(r),
        }
        if let Some(secs) = timeout {
            self.out.timeouts.extend((first..self.out.prefixes.len()).map(|i| (i, secs)));
        }
    }

    /// A line the plain fast path did not take.
    fn line(&mut self, no: usize, text: &str) -> Result<(), ListError> {
        if self.nft_elements.is_some() {
            return self.nft_elements_text(no, text);
        }
        let t = text.trim();
        if !self.nft_blocks.is_empty() {
            return self.nft_block_line(no, t);
        }
        if t.starts_with('{') {
            return self.json_line(no, t);
        }
        match t.split_whitespace().next().unwrap_or("") {
            "add" | "-A" => return self.ipset_add(no, t),
            "create" | "-N" => return Ok(()),
            "table" | "set" | "map" if crate::formats::nft_code(t).ends_with('{') => {
                self.nft_blocks.push((no, keep(t)));
                return Ok(());
            }
            "elements" => return self.nft_elements_open(no, t),
            "}" => return self.fail(no, t, LineErrorKind::UnmatchedBrace),
            _ => {}
        }
        self.plain_slow(no, t)
    }

    /// A plain line that is not a lone prefix: a range, or an error worded
    /// as the plain format always worded it.
    fn plain_slow(&mut self, no: usize, line: &str) -> Result<(), ListError> {
        let content = match line.find(['#', ';']) {
            Some(i) => line[..i].trim(),
            None => line.trim(),
        };
        if content.is_empty() {
            return Ok(());
        }
        if content.contains('-') {
            return match parse_entry(content) {
                Ok(entry) => {
                    self.push(entry, None);
                    Ok(())
                }
                Err(kind) => self.fail(no, content, kind),
            };
        }
        let mut tokens = content.split_whitespace();
        let token = tokens.next().unwrap_or("");
        if tokens.next().is_some() {
            return self.fail(no, content, LineErrorKind::TrailingText);
        }
        match token.parse::<Prefix>() {
            Ok(p) => {
                self.out.prefixes.push(p);
                Ok(())
            }
            Err(e) => self.fail(no, token, e.into()),
        }
    }

    /// End of input: a block still open means the file was cut short.
    fn finish(mut self) -> Result<ParsedList, ListError> {
        if let Some((no, text)) = self.nft_elements.take() {
            self.fail(no, &text, LineErrorKind::UnclosedNftBlock)?;
        }
        if let Some((no, text)) = self.nft_blocks.pop() {
            self.fail(no, &text, LineErrorKind::UnclosedNftBlock)?;
        }
        Ok(self.out)
    }
}

/// A line kept for a later error: cut like every error's text.
pub(crate) fn keep(line: &str) -> String {
    line.trim().chars().take(80).collect()
}

/// Open and parse a list file.
pub fn load_list(path: &Path, lenient: bool) -> Result<ParsedList, ListError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|error| ListError::Io { source_name: name.clone(), error })?;
    parse_list(&name, BufReader::new(file), lenient)
}

/// A geo set's networks, read from its database.
pub fn load_geo(db: &Path, select: &sluice_geo::Select) -> Result<ParsedList, sluice_geo::GeoError> {
    let db = sluice_geo::GeoDb::open(db)?;
    let networks = db.networks(select)?;
    let prefixes: Vec<Prefix> = networks.prefixes.iter().map(|&(a, l)| Prefix::new(a, l)).collect();
    let geo = Some(db.geo_info(select, &networks));
    Ok(ParsedList { lines: prefixes.len(), prefixes, geo, ..ParsedList::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(ps: &[Prefix]) -> Vec<String> {
        ps.iter().map(|p| p.to_string()).collect()
    }

    fn err(text: &str) -> LineError {
        match parse_list("f", text.as_bytes(), false) {
            Err(ListError::Line(e)) => *e,
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn firehol_and_spamhaus_shapes() {
        let text = "\u{feff}# FireHOL\n#\n\n1.2.3.4\r\n10.0.0.0/8\n  2001:db8::/32  \n5.6.7.0/24 ; SBL12345\n8.8.8.8 # trailing\n";
        let l = parse_list("t", text.as_bytes(), false).unwrap();
        assert_eq!(l.lines, 8);
        let got: Vec<String> = l.prefixes.iter().map(|p| p.to_string()).collect();
        assert_eq!(got, ["1.2.3.4/32", "10.0.0.0/8", "2001:db8::/32", "5.6.7.0/24", "8.8.8.8/32"]);
        assert!(l.timeouts.is_empty());
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let text = "1.2.3.4\n# ok\n1.2.3.400\n";
        let err = parse_list("blocklist.txt", text.as_bytes(), false).unwrap_err();
        assert_eq!(err.to_string(), "blocklist.txt:3: not an IPv4 or IPv6 address: \"1.2.3.400\"");
        let lenient = parse_list("blocklist.txt", text.as_bytes(), true).unwrap();
        assert_eq!(lenient.prefixes.len(), 1);
        assert_eq!(lenient.skipped[0].line, 3);
    }

    #[test]
    fn trailing_text_and_non_utf8() {
        let err = parse_list("x", "1.2.3.4 5.6.7.8\n".as_bytes(), false).unwrap_err();
        assert!(err.to_string().contains("x:1: unexpected text after the address"), "{err}");
        let err = parse_list("x", &b"1.1.1.1\n\xff\xfe\n"[..], false).unwrap_err();
        assert!(err.to_string().starts_with("x:2: line is not valid UTF-8"), "{err}");
    }

    #[test]
    fn missing_file_is_io_error_with_name() {
        let err = load_list(Path::new("/nonexistent/list.netset"), false).unwrap_err();
        assert!(err.to_string().starts_with("/nonexistent/list.netset: "), "{err}");
    }

    #[test]
    fn parses_the_embedded_firehol_list() {
        let l = parse_list("firehol_level1.netset", crate::FIREHOL_LEVEL1.as_bytes(), false).unwrap();
        // The header says "Entries: 2574 subnets".
        assert_eq!(l.prefixes.len(), 2574);
        assert!(l.skipped.is_empty());
    }

    /// The plain format's line parser before the other formats came:
    /// the reference the fast path is tested against.
    fn reference_line(line: &str) -> Result<Option<Prefix>, (String, LineErrorKind)> {
        let content = match line.find(['#', ';']) {
            Some(i) => &line[..i],
            None => line,
        };
        let mut tokens = content.split_whitespace();
        let Some(token) = tokens.next() else {
            return Ok(None);
        };
        if tokens.next().is_some() {
            return Err((content.trim().to_owned(), LineErrorKind::TrailingText));
        }
        token.parse::<Prefix>().map(Some).map_err(|e| (token.to_owned(), e.into()))
    }

    proptest::proptest! {
        /// Plain lines (no `-`, braces or other formats' keywords) parse
        /// exactly as they did: same prefix, or same error and text.
        #[test]
        fn plain_lines_parse_as_before(line in "[0-9a-fA-Fx.:/#; \t\r+%\u{a0}\u{b}\u{feff}]{0,24}") {
            let first = line.split_whitespace().next().unwrap_or("");
            proptest::prop_assume!(!["add", "create", "set"].contains(&first));
            let got = parse_list("p", line.as_bytes(), false);
            // parse_list drops a byte order mark at the start of the file.
            match reference_line(line.trim_start_matches('\u{feff}')) {
                Ok(Some(p)) => proptest::prop_assert_eq!(got.unwrap().prefixes, vec![p]),
                Ok(None) => proptest::prop_assert!(got.unwrap().prefixes.is_empty()),
                Err((text, kind)) => match got {
                    Err(ListError::Line(e)) => {
                        proptest::prop_assert_eq!((e.line, e.text, e.kind), (1, text.chars().take(80).collect(), kind))
                    }
                    other => proptest::prop_assert!(false, "{:?} gave {:?}", line, other),
                },
            }
        }

        /// Real-looking entries, with and without lengths and comments.
        #[test]
        fn plain_entries_parse_as_before(a in proptest::prelude::any::<u32>(), b in proptest::prelude::any::<u128>(),
                                         len in 0u8..140, form in 0u8..6) {
            let line = match form {
                0 => format!("{}", std::net::Ipv4Addr::from(a)),
                1 => format!("{}/{len}", std::net::Ipv4Addr::from(a)),
                2 => format!("  {}/{len} ; SBL{a}", std::net::Ipv4Addr::from(a)),
                3 => format!("{}", std::net::Ipv6Addr::from(b)),
                4 => format!("{}/{len}\r", std::net::Ipv6Addr::from(b)),
                _ => format!("{}/0{len} # x", std::net::Ipv6Addr::from(b)),
            };
            let got = parse_list("p", line.as_bytes(), false).map(|l| l.prefixes).map_err(|e| e.to_string());
            let want = reference_line(&line).map(|p| p.into_iter().collect::<Vec<_>>()).map_err(|(_, k)| k.to_string());
            proptest::prop_assert_eq!(got.is_ok(), want.is_ok());
            if let (Ok(g), Ok(w)) = (got, want) {
                proptest::prop_assert_eq!(g, w);
            }
        }
    }

    #[test]
    fn ranges_split_into_prefixes() {
        let text = "1.2.3.4-1.2.3.9\n10.0.0.0 - 10.0.0.255 # spaced\n2001:db8::-2001:db8::3 ; v6\n5.5.5.5- 5.5.5.5\n";
        let l = parse_list("r", text.as_bytes(), false).unwrap();
        assert_eq!(strs(&l.prefixes), ["1.2.3.4/30", "1.2.3.8/31", "10.0.0.0/24", "2001:db8::/126", "5.5.5.5/32"]);
    }

    #[test]
    fn range_errors_name_the_line() {
        let e = err("1.1.1.1\n1.2.3.9-1.2.3.4\n");
        assert_eq!((e.line, &e.kind, e.text.as_str()), (2, &LineErrorKind::RangeReversed, "1.2.3.9-1.2.3.4"));
        assert_eq!(e.to_string(), "f:2: range start is after its end: \"1.2.3.9-1.2.3.4\"");
        let e = err("\n\n1.2.3.4-::1\n");
        assert_eq!((e.line, e.kind), (3, LineErrorKind::RangeMixedFamilies));
        let e = err("1.2.3.4-1.2.3\n");
        assert_eq!((e.line, e.kind), (1, LineErrorKind::BadRange));
        let e = err("10.0.0.0/8-10.1.0.0\n");
        assert_eq!(e.kind, LineErrorKind::BadRange);
        let e = err("1.2.3.4-1.2.3.5 1.2.3.6\n");
        assert_eq!(e.kind, LineErrorKind::BadRange);
    }

    #[test]
    fn timeouts_and_expiry() {
        let l = ParsedList {
            prefixes: ["1.0.0.0/8", "2.0.0.0/8", "3.0.0.0/8", "4.0.0.0/8"].iter().map(|s| s.parse().unwrap()).collect(),
            timeouts: vec![(1, 10), (3, 5)],
            ..ParsedList::default()
        };
        assert_eq!(l.next_expiry(), Some(5));
        assert_eq!(l.next_expiry_after(0), Some(5));
        assert_eq!(l.next_expiry_after(5), Some(10));
        assert_eq!(l.next_expiry_after(10), None);
        assert_eq!(strs(&l.live_after(0)), ["1.0.0.0/8", "2.0.0.0/8", "3.0.0.0/8", "4.0.0.0/8"]);
        assert_eq!(strs(&l.live_after(4)), ["1.0.0.0/8", "2.0.0.0/8", "3.0.0.0/8", "4.0.0.0/8"]);
        assert_eq!(strs(&l.live_after(5)), ["1.0.0.0/8", "2.0.0.0/8", "3.0.0.0/8"]);
        assert_eq!(strs(&l.live_after(10)), ["1.0.0.0/8", "3.0.0.0/8"]);
        assert_eq!(strs(&l.live_after(u64::MAX)), ["1.0.0.0/8", "3.0.0.0/8"]);
        assert_eq!(ParsedList::default().next_expiry(), None);
    }

    #[test]
    fn a_split_range_gives_each_prefix_the_timeout() {
        let l = parse_list("t", "9.9.9.9\nadd s 1.2.3.4-1.2.3.9 timeout 60\n8.8.8.8\n".as_bytes(), false).unwrap();
        assert_eq!(strs(&l.prefixes), ["9.9.9.9/32", "1.2.3.4/30", "1.2.3.8/31", "8.8.8.8/32"]);
        assert_eq!(l.timeouts, [(1, 60), (2, 60)]);
        assert_eq!(strs(&l.live_after(60)), ["9.9.9.9/32", "8.8.8.8/32"]);
    }
}
