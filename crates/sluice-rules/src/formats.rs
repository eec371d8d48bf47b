//! The list formats beside plain text: ipset `save` output, nftables set
//! elements and Spamhaus DROP JSON lines. [`crate::parse_list`] hands each
//! line the plain fast path did not take to these, by its shape.

use crate::list::{keep, parse_entry, LineErrorKind, ListError, Parser};

/// Words after an ipset element that take a value we do not need.
const IPSET_IGNORED: [&str; 6] = ["packets", "bytes", "comment", "skbmark", "skbprio", "skbqueue"];

/// Words after an nft element that take a value we do not need.
const NFT_IGNORED: [&str; 3] = ["comment", "packets", "bytes"];

impl Parser<'_> {
    /// `add SET ELEMENT [options]` or the old `-A SET ELEMENT`. The set name
    /// is not kept: every set in the file goes into the one list.
    pub(crate) fn ipset_add(&mut self, no: usize, line: &str) -> Result<(), ListError> {
        match ipset_add_entry(line) {
            Ok((entry, timeout)) => {
                self.push(entry, timeout);
                Ok(())
            }
            Err((text, kind)) => self.fail(no, text, kind),
        }
    }

    /// `elements = { ...` outside an open elements block.
    pub(crate) fn nft_elements_open(&mut self, no: usize, line: &str) -> Result<(), ListError> {
        let rest = line.strip_prefix("elements").unwrap_or(line).trim_start();
        let Some(rest) = rest.strip_prefix('=').map(str::trim_start).and_then(|r| r.strip_prefix('{')) else {
            return self.fail(no, line, LineErrorKind::BadNftElements);
        };
        self.nft_elements = Some((no, keep(line)));
        self.nft_elements_text(no, rest)
    }

    /// Elements separated by commas, up to the `}` that closes the block:
    /// the rest of the opening line, then each line while the block is open.
    /// An element never spans lines in nft's output, so each line's pieces
    /// are whole elements; empty pieces (after a line's last comma) are skipped.
    pub(crate) fn nft_elements_text(&mut self, no: usize, text: &str) -> Result<(), ListError> {
        let mut rest = text;
        loop {
            let (piece, stop) = match split_element(rest) {
                Ok(split) => split,
                Err(kind) => return self.fail(no, rest, kind),
            };
            let element = piece.trim();
            if !element.is_empty() {
                match nft_element(element) {
                    Ok((entry, timeout)) => self.push(entry, timeout),
                    Err((text, kind)) => self.fail(no, text, kind)?,
                }
            }
            match stop {
                Stop::Comma(after) => rest = after,
                Stop::EndOfLine => return Ok(()),
                Stop::Close(after) => {
                    self.nft_elements = None;
                    let after = after.trim();
                    if after.is_empty() || after.starts_with('#') {
                        return Ok(());
                    }
                    return self.fail(no, after, LineErrorKind::TrailingText);
                }
            }
        }
    }

    /// A line inside `table`/`set`/`chain` blocks but outside elements:
    /// blocks open and close, `elements` are read, the rest (types, flags,
    /// rules, policies) says nothing about which addresses are listed.
    pub(crate) fn nft_block_line(&mut self, no: usize, line: &str) -> Result<(), ListError> {
        // Whatever follows a `}` here (the rest of a rule) is skipped too.
        if line.starts_with('}') {
            self.nft_blocks.pop();
        } else if line.split_whitespace().next() == Some("elements") {
            return self.nft_elements_open(no, line);
        } else if nft_code(line).ends_with('{') {
            self.nft_blocks.push((no, keep(line)));
        }
        Ok(())
    }

    /// One Spamhaus DROP JSON object.
    pub(crate) fn json_line(&mut self, no: usize, line: &str) -> Result<(), ListError> {
        let obj: DropLine = match serde_json::from_str(line) {
            Ok(obj) => obj,
            Err(e) => return self.fail(no, line, LineErrorKind::BadJson(e.to_string())),
        };
        if let Some(cidr) = obj.cidr {
            // Counted before parsing: a bad cidr skipped in lenient mode was
            // still a record of the download.
            self.json_records += 1;
            return match parse_entry(cidr.trim()) {
                Ok(entry) => {
                    self.push(entry, None);
                    Ok(())
                }
                Err(kind) => self.fail(no, &cidr, kind),
            };
        }
        if obj.kind.as_deref() != Some("metadata") {
            return self.fail(no, line, LineErrorKind::JsonNoCidr);
        }
        let read = std::mem::take(&mut self.json_records);
        match obj.records {
            Some(expected) if expected != read => {
                self.fail(no, line, LineErrorKind::JsonRecordCount { expected, read })
            }
            _ => Ok(()),
        }
    }
}

/// The fields of a DROP JSON line we use; the others (`sblid`, `rir`,
/// `timestamp`, `size`, ...) are ignored.
#[derive(serde::Deserialize)]
struct DropLine {
    cidr: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    records: Option<u64>,
}

type Fail<'a> = (&'a str, LineErrorKind);

/// The element and timeout of an ipset `add` line.
fn ipset_add_entry(line: &str) -> Result<(crate::list::Entry, Option<u32>), Fail<'_>> {
    let mut tokens = Tokens { rest: line, whole: line };
    tokens.word()?; // `add` or `-A`
    let (Some(_set), Some(element)) = (tokens.word()?, tokens.word()?) else {
        return Err((line, LineErrorKind::IpsetMissingElement));
    };
    let entry = parse_entry(element).map_err(|k| (element, k))?;
    let mut timeout = None;
    while let Some(option) = tokens.word()? {
        match option {
            "nomatch" => return Err((option, LineErrorKind::IpsetNomatch)),
            "timeout" => {
                let value = tokens
                    .word()?
                    .ok_or((option, LineErrorKind::MissingOptionValue { format: "ipset", option: "timeout" }))?;
                let secs = parse_seconds(value).ok_or_else(|| (value, LineErrorKind::BadTimeout(clip(value))))?;
                // ipset's `timeout 0` is a permanent entry in a set with timeouts.
                timeout = Some(secs).filter(|&s| s > 0);
            }
            _ => match IPSET_IGNORED.iter().find(|&&o| o == option) {
                Some(&name) => {
                    tokens
                        .word()?
                        .ok_or((option, LineErrorKind::MissingOptionValue { format: "ipset", option: name }))?;
                }
                None => return Err((option, LineErrorKind::UnknownOption { format: "ipset", option: clip(option) })),
            },
        }
    }
    Ok((entry, timeout))
}

/// One nft element: `ADDR [timeout D] [expires D] [counter packets N bytes N] [comment "x"]`.
fn nft_element(element: &str) -> Result<(crate::list::Entry, Option<u32>), Fail<'_>> {
    let mut tokens = Tokens { rest: element, whole: element };
    let Some(addr) = tokens.word()? else {
        return Err((element, LineErrorKind::BadNftElements));
    };
    let entry = parse_entry(addr).map_err(|k| (addr, k))?;
    let (mut timeout, mut expires) = (None, None);
    while let Some(option) = tokens.word()? {
        match option {
            "timeout" | "expires" => {
                let name = if option == "timeout" { "timeout" } else { "expires" };
                let value = tokens
                    .word()?
                    .ok_or((option, LineErrorKind::MissingOptionValue { format: "nft", option: name }))?;
                let secs = parse_nft_duration(value).ok_or_else(|| (value, LineErrorKind::BadDuration(clip(value))))?;
                if name == "timeout" {
                    timeout = Some(secs);
                } else {
                    expires = Some(secs);
                }
            }
            // `counter` stands alone; its `packets N bytes N` follow as options.
            "counter" => {}
            ":" | "." => return Err((option, LineErrorKind::NftNotAddressSet)),
            _ => match NFT_IGNORED.iter().find(|&&o| o == option) {
                Some(&name) => {
                    tokens
                        .word()?
                        .ok_or((option, LineErrorKind::MissingOptionValue { format: "nft", option: name }))?;
                }
                None => return Err((option, LineErrorKind::UnknownOption { format: "nft", option: clip(option) })),
            },
        }
    }
    // `expires` is what is left of `timeout` when the set was listed.
    Ok((entry, expires.or(timeout)))
}

/// An nft structure line without its `# handle N` comment (`nft -a`).
pub(crate) fn nft_code(line: &str) -> &str {
    match line.find('#') {
        Some(i) => line[..i].trim_end(),
        None => line,
    }
}

/// Text kept in an error kind: bounded like the line text.
fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Whitespace-separated words; a word starting with `"` runs to the next
/// `"` (ipset and nft comments may hold spaces, commas and braces). A word
/// starting with `#` ends the line.
struct Tokens<'a> {
    rest: &'a str,
    /// Named by an unclosed-quote error.
    whole: &'a str,
}

impl<'a> Tokens<'a> {
    fn word(&mut self) -> Result<Option<&'a str>, Fail<'a>> {
        let whole = self.whole;
        self.next().transpose().map_err(|k| (whole, k))
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Result<&'a str, LineErrorKind>;

    fn next(&mut self) -> Option<Self::Item> {
        let s = self.rest.trim_start();
        if s.is_empty() || s.starts_with('#') {
            self.rest = "";
            return None;
        }
        let end = if let Some(quoted) = s.strip_prefix('"') {
            match quoted.find('"') {
                Some(i) => i + 2,
                None => {
                    self.rest = "";
                    return Some(Err(LineErrorKind::UnterminatedQuote));
                }
            }
        } else {
            s.find(char::is_whitespace).unwrap_or(s.len())
        };
        let (word, rest) = s.split_at(end);
        self.rest = rest;
        Some(Ok(word))
    }
}

/// Where an element of an nft block ends.
enum Stop<'a> {
    /// At a comma; the text after it.
    Comma(&'a str),
    /// At the `}` closing the block; the text after it.
    Close(&'a str),
    /// The line ended (or a `#` comment began) before either.
    EndOfLine,
}

/// The next element of an nft block and what ended it, skipping over quoted
/// text (comments may hold commas and braces).
fn split_element(s: &str) -> Result<(&str, Stop<'_>), LineErrorKind> {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => return Ok((&s[..i], Stop::Comma(&s[i + 1..]))),
            '}' if !quoted => return Ok((&s[..i], Stop::Close(&s[i + 1..]))),
            '#' if !quoted => return Ok((&s[..i], Stop::EndOfLine)),
            _ => {}
        }
    }
    if quoted {
        return Err(LineErrorKind::UnterminatedQuote);
    }
    Ok((s, Stop::EndOfLine))
}

/// ipset's timeout: decimal seconds, digits only.
fn parse_seconds(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// nft's durations: `1d2h3m4s500ms`, `30s`, `1h` (any of the units, each
/// with its number), or bare seconds. Milliseconds round up: an entry is
/// kept until the kernel would have dropped it, never dropped before.
pub(crate) fn parse_nft_duration(s: &str) -> Option<u32> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    let mut ms: u64 = 0;
    let mut rest = s.as_bytes();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let mut n: u64 = 0;
        for &b in &rest[..digits] {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        }
        rest = &rest[digits..];
        let (unit_ms, unit_len) = match rest {
            [b'm', b's', ..] => (1, 2),
            [b'd', ..] => (86_400_000, 1),
            [b'h', ..] => (3_600_000, 1),
            [b'm', ..] => (60_000, 1),
            [b's', ..] => (1_000, 1),
            _ => return None,
        };
        rest = &rest[unit_len..];
        ms = ms.checked_add(n.checked_mul(unit_ms)?)?;
    }
    u32::try_from(ms.div_ceil(1000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_list, LineError, ParsedList, Prefix};

    fn strs(ps: &[Prefix]) -> Vec<String> {
        ps.iter().map(|p| p.to_string()).collect()
    }

    fn ok(text: &str) -> ParsedList {
        parse_list("f", text.as_bytes(), false).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> LineError {
        match parse_list("f", text.as_bytes(), false) {
            Err(ListError::Line(e)) => *e,
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    // ---- ipset ----

    const IPSET_SAVE: &str = "\
create blocked hash:net family inet hashsize 1024 maxelem 65536 timeout 600 counters comment skbinfo
add blocked 1.2.3.4 timeout 300 packets 0 bytes 0 comment \"seen; twice #1\" skbmark 0x1/0xffffffff skbprio 1:10 skbqueue 3
add blocked 10.0.0.0/8 timeout 0 packets 5 bytes 300
add blocked 192.0.2.1-192.0.2.9 timeout 42
create blocked6 hash:ip family inet6 hashsize 1024 maxelem 65536
add blocked6 2001:db8::1
-N old iphash --hashsize 1024
-A old 5.6.7.8
";

    #[test]
    fn ipset_save_merges_sets_and_keeps_timeouts() {
        let l = ok(IPSET_SAVE);
        assert_eq!(
            strs(&l.prefixes),
            [
                "1.2.3.4/32",
                "10.0.0.0/8",
                "192.0.2.1/32",
                "192.0.2.2/31",
                "192.0.2.4/30",
                "192.0.2.8/31",
                "2001:db8::1/128",
                "5.6.7.8/32"
            ]
        );
        // `timeout 0` is permanent.
        assert_eq!(l.timeouts, [(0, 300), (2, 42), (3, 42), (4, 42), (5, 42)]);
        assert_eq!(l.next_expiry(), Some(42));
        assert_eq!(strs(&l.live_after(42)), ["1.2.3.4/32", "10.0.0.0/8", "2001:db8::1/128", "5.6.7.8/32"]);
        assert_eq!(l.live_after(300).len(), 3);
    }

    #[test]
    fn ipset_errors_name_the_line() {
        let e = err("create s hash:ip\nadd s 1.2.3.4\nadd s 1.2.3.5 nomatch\n");
        assert_eq!((e.line, &e.kind, e.text.as_str()), (3, &LineErrorKind::IpsetNomatch, "nomatch"));
        assert!(e.to_string().starts_with("f:3: ipset `nomatch` entries"), "{e}");
        let e = err("add s 1.2.3.4 frobnicate 3\n");
        assert_eq!(e.kind, LineErrorKind::UnknownOption { format: "ipset", option: "frobnicate".into() });
        assert_eq!(e.to_string(), "f:1: unknown ipset option `frobnicate`: \"frobnicate\"");
        let e = err("\nadd s 1.2.3.4 timeout 1h\n");
        assert_eq!((e.line, e.kind), (2, LineErrorKind::BadTimeout("1h".into())));
        assert_eq!(err("add s 1.2.3.4 timeout 4294967296\n").kind, LineErrorKind::BadTimeout("4294967296".into()));
        assert_eq!(err("add s 1.2.3.4 timeout +5\n").kind, LineErrorKind::BadTimeout("+5".into()));
        assert_eq!(
            err("add s 1.2.3.4 timeout\n").kind,
            LineErrorKind::MissingOptionValue { format: "ipset", option: "timeout" }
        );
        assert_eq!(
            err("add s 1.2.3.4 comment\n").kind,
            LineErrorKind::MissingOptionValue { format: "ipset", option: "comment" }
        );
        assert_eq!(err("add s 1.2.3.4 comment \"open\n").kind, LineErrorKind::UnterminatedQuote);
        assert_eq!(err("add s\n").kind, LineErrorKind::IpsetMissingElement);
        assert_eq!(err("add\n").kind, LineErrorKind::IpsetMissingElement);
        let e = err("add s 1.2.3.9-1.2.3.1\n");
        assert_eq!((e.kind, e.text.as_str()), (LineErrorKind::RangeReversed, "1.2.3.9-1.2.3.1"));
        let e = err("add s 1.2.3.4,tcp:80\n");
        assert_eq!(e.kind, LineErrorKind::Prefix(crate::PrefixParseError::BadAddress));
    }

    #[test]
    fn ipset_lenient_skips_only_bad_lines() {
        let l = parse_list("f", "add s 1.1.1.1\nadd s 2.2.2.2 nomatch\nadd s 3.3.3.3 timeout 9\n".as_bytes(), true)
            .unwrap();
        assert_eq!(strs(&l.prefixes), ["1.1.1.1/32", "3.3.3.3/32"]);
        assert_eq!(l.timeouts, [(1, 9)]);
        assert_eq!(l.skipped.len(), 1);
        assert_eq!(l.skipped[0].line, 2);
    }

    // ---- nftables ----

    const NFT_RULESET: &str = "\
table inet filter {
\tset blocked {
\t\ttype ipv4_addr
\t\tflags interval,timeout
\t\ttimeout 1h
\t\telements = { 1.2.3.4, 10.0.0.0/8,
\t\t\t     192.0.2.1-192.0.2.9, 5.6.7.8 timeout 1h expires 59m58s,
\t\t\t     9.9.9.9 timeout 30s counter packets 0 bytes 0 comment \"a, b } c\",
\t\t\t     8.8.8.8 comment \"x\" }
\t}

\tset blocked6 {
\t\ttype ipv6_addr
\t\telements = { 2001:db8::/32 }
\t}

\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\tip saddr @blocked counter packets 0 bytes 0 drop
\t\ttcp dport { 22, 80 } accept
\t}
}
";

    #[test]
    fn nft_ruleset_reads_every_element() {
        let l = ok(NFT_RULESET);
        assert_eq!(
            strs(&l.prefixes),
            [
                "1.2.3.4/32",
                "10.0.0.0/8",
                "192.0.2.1/32",
                "192.0.2.2/31",
                "192.0.2.4/30",
                "192.0.2.8/31",
                "5.6.7.8/32",
                "9.9.9.9/32",
                "8.8.8.8/32",
                "2001:db8::/32"
            ]
        );
        // `expires` wins over `timeout`.
        assert_eq!(l.timeouts, [(6, 3598), (7, 30)]);
        assert_eq!(l.lines, NFT_RULESET.lines().count());
    }

    #[test]
    fn nft_bare_elements_block_and_plain_lines_after_it() {
        let l = ok("elements = {\n1.1.1.1,\n2.2.2.2\n}\n3.3.3.3\nset s { \n elements = { 4.4.4.4 } \n }\n");
        assert_eq!(strs(&l.prefixes), ["1.1.1.1/32", "2.2.2.2/32", "3.3.3.3/32", "4.4.4.4/32"]);
        assert!(ok("elements = { }\n").prefixes.is_empty());
    }

    #[test]
    fn nft_durations() {
        assert_eq!(parse_nft_duration("1d2h3m4s500ms"), Some(86_400 + 7_200 + 180 + 5));
        assert_eq!(parse_nft_duration("30s"), Some(30));
        assert_eq!(parse_nft_duration("1h"), Some(3600));
        assert_eq!(parse_nft_duration("59m58s"), Some(3598));
        assert_eq!(parse_nft_duration("1ms"), Some(1));
        assert_eq!(parse_nft_duration("0s"), Some(0));
        assert_eq!(parse_nft_duration("45"), Some(45));
        assert_eq!(parse_nft_duration("49711d"), None); // over u32 seconds
        assert_eq!(parse_nft_duration("49710d6h28m15s"), Some(u32::MAX));
        assert_eq!(parse_nft_duration("49710d6h28m16s"), None);
        assert_eq!(parse_nft_duration("99999999999999999999d"), None);
        for bad in ["", "h", "1x", "1h2", "-1s", "1.5s", "s1"] {
            assert_eq!(parse_nft_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn nft_errors_name_the_line() {
        let e = err("table ip t {\n set s {\n  elements = { 1.2.3.4,\n   5.6.7.8 timeout soon }\n }\n}\n");
        assert_eq!((e.line, &e.kind, e.text.as_str()), (4, &LineErrorKind::BadDuration("soon".into()), "soon"));
        let e = err("elements = { 1.2.3.4 frob 2 }\n");
        assert_eq!(e.kind, LineErrorKind::UnknownOption { format: "nft", option: "frob".into() });
        let e = err("elements = { 1.2.3.4 expires }\n");
        assert_eq!(e.kind, LineErrorKind::MissingOptionValue { format: "nft", option: "expires" });
        let e = err("elements = {\n1.2.3.4,\n22, 80 }\n");
        assert_eq!((e.line, e.text.as_str()), (3, "22"));
        let e = err("elements = { 1.2.3.4 comment \"x }\n");
        assert_eq!(e.kind, LineErrorKind::UnterminatedQuote);
        let e = err("elements = { 1.2.3.4 } extra\n");
        assert_eq!((e.kind, e.text.as_str()), (LineErrorKind::TrailingText, "extra"));
        let e = err("elements { 1.2.3.4 }\n");
        assert_eq!(e.kind, LineErrorKind::BadNftElements);
        let e = err("1.1.1.1\n}\n");
        assert_eq!((e.line, e.kind), (2, LineErrorKind::UnmatchedBrace));
        assert_eq!(err("elements = { 1.2.3.4 : drop }\n").kind, LineErrorKind::NftNotAddressSet);
        assert_eq!(err("elements = { 1.2.3.4 . 80 }\n").kind, LineErrorKind::NftNotAddressSet);
        let e = err("elements = { 1.2.3.9-1.2.3.1 }\n");
        assert_eq!(e.kind, LineErrorKind::RangeReversed);
    }

    #[test]
    fn nft_unclosed_block_names_where_it_opened() {
        let e = err("table inet f {\n set s {\n  type ipv4_addr\n  elements = { 1.2.3.4,\n   5.6.7.8,\n");
        assert_eq!((e.line, &e.kind), (4, &LineErrorKind::UnclosedNftBlock));
        assert_eq!(e.text, "elements = { 1.2.3.4,");
        assert!(e.to_string().starts_with("f:4: nft block opened here is not closed"), "{e}");
        let e = err("table inet f {\n set s {\n  elements = { 1.2.3.4 }\n }\n");
        assert_eq!((e.line, e.kind, e.text.as_str()), (1, LineErrorKind::UnclosedNftBlock, "table inet f {"));
        // Lenient: the elements read are kept, the cut-off block reported.
        let l = parse_list("f", "elements = { 1.2.3.4,\n 5.6.7.8,\n".as_bytes(), true).unwrap();
        assert_eq!(l.prefixes.len(), 2);
        assert_eq!(l.skipped.len(), 1);
        assert_eq!(l.skipped[0].line, 1);
    }

    #[test]
    fn nft_lenient_skips_bad_elements_only() {
        let l = parse_list("f", "elements = { 1.1.1.1, bad, 2.2.2.2 timeout x, 3.3.3.3 }\n".as_bytes(), true).unwrap();
        assert_eq!(strs(&l.prefixes), ["1.1.1.1/32", "3.3.3.3/32"]);
        assert_eq!(l.skipped.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(), ["bad", "x"]);
    }

    // ---- Spamhaus DROP JSON ----

    const DROP_V4: &str = r#"{"cidr":"1.10.16.0/20","sblid":"SBL256894","rir":"apnic"}
{"cidr":"1.19.0.0/16","sblid":"SBL434604","rir":"apnic"}
{"cidr":"2.57.122.0/24","sblid":"SBL636050","rir":"ripencc"}
{"type":"metadata","timestamp":1700000000,"size":163,"records":3,"copyright":"(c) 2023 The Spamhaus Project SLU","terms":"https://www.spamhaus.org/drop/terms/"}
"#;

    #[test]
    fn drop_json_lines() {
        let l = ok(DROP_V4);
        assert_eq!(strs(&l.prefixes), ["1.10.16.0/20", "1.19.0.0/16", "2.57.122.0/24"]);
        // drop_v4.json and drop_v6.json concatenated: each metadata line counts its own part.
        let both = format!("{DROP_V4}{{\"cidr\":\"2001:db8::/32\",\"sblid\":\"SBL1\",\"rir\":\"ripencc\"}}\r\n{{\"type\":\"metadata\",\"records\":1}}\n");
        assert_eq!(ok(&both).prefixes.len(), 4);
        // No metadata (or no records in it): nothing to check.
        assert_eq!(ok("{\"cidr\":\"1.2.3.4\"}\n{\"type\":\"metadata\"}\n").prefixes.len(), 1);
    }

    #[test]
    fn drop_json_errors_name_the_line() {
        let truncated: String =
            DROP_V4.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| format!("{l}\n")).collect();
        let e = err(&truncated);
        assert_eq!((e.line, &e.kind), (3, &LineErrorKind::JsonRecordCount { expected: 3, read: 2 }));
        assert!(e.to_string().starts_with("f:3: metadata line says 3 records but 2 were read"), "{e}");
        let e = err("{\"cidr\":\"1.2.3.4\"}\n{\"cidr\":\"1.2.3\"}\n");
        assert_eq!(
            (e.line, &e.kind, e.text.as_str()),
            (2, &LineErrorKind::Prefix(crate::PrefixParseError::BadAddress), "1.2.3")
        );
        let e = err("{\"cidr\":\"1.2.3.4\"\n");
        assert_eq!(e.line, 1);
        assert!(matches!(e.kind, LineErrorKind::BadJson(_)), "{e}");
        let e = err("{\"cidr\":42}\n");
        assert!(matches!(e.kind, LineErrorKind::BadJson(_)), "{e}");
        let e = err("{\"sblid\":\"SBL1\"}\n");
        assert_eq!(e.kind, LineErrorKind::JsonNoCidr);
        // In lenient mode a bad cidr still counts as a record read.
        let l = parse_list(
            "f",
            "{\"cidr\":\"x\"}\n{\"cidr\":\"1.2.3.4\"}\n{\"type\":\"metadata\",\"records\":2}\n".as_bytes(),
            true,
        )
        .unwrap();
        assert_eq!((l.prefixes.len(), l.skipped.len()), (1, 1));
    }

    #[test]
    fn tokens_keep_quoted_words_whole() {
        let t: Vec<_> =
            Tokens { rest: "add s 1.2.3.4 comment \"a b\" # rest", whole: "" }.collect::<Result<_, _>>().unwrap();
        assert_eq!(t, ["add", "s", "1.2.3.4", "comment", "\"a b\""]);
    }
}
