use crate::prefix::{Prefix, PrefixParseError};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
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
    #[error("{0}")]
    Line(LineError),
    #[error("{source_name}: {error}")]
    Io { source_name: String, error: io::Error },
}

/// The prefixes of a list, in file order, and the lines skipped in lenient mode.
#[derive(Clone, Debug, Default)]
pub struct ParsedList {
    pub prefixes: Vec<Prefix>,
    pub skipped: Vec<LineError>,
    pub lines: usize,
}

/// Parse a list from a reader. `source` names it in errors (usually the path).
pub fn parse_list<R: BufRead>(source: &str, mut reader: R, lenient: bool) -> Result<ParsedList, ListError> {
    let mut out = ParsedList::default();
    let mut raw = Vec::with_capacity(128);
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|error| ListError::Io { source_name: source.to_owned(), error })?;
        if n == 0 {
            break;
        }
        out.lines += 1;
        let line_no = out.lines;
        let result = match std::str::from_utf8(&raw) {
            Ok(text) => parse_line(if line_no == 1 { text.trim_start_matches('\u{feff}') } else { text }),
            Err(_) => Err((String::from_utf8_lossy(&raw).into_owned(), LineErrorKind::NotUtf8)),
        };
        match result {
            Ok(Some(p)) => out.prefixes.push(p),
            Ok(None) => {}
            Err((text, kind)) => {
                let e = LineError {
                    source: source.to_owned(),
                    line: line_no,
                    text: text.trim_end().chars().take(80).collect(),
                    kind,
                };
                if lenient {
                    out.skipped.push(e);
                } else {
                    return Err(ListError::Line(e));
                }
            }
        }
    }
    Ok(out)
}

/// One line: `Ok(None)` for blank and comment lines.
fn parse_line(line: &str) -> Result<Option<Prefix>, (String, LineErrorKind)> {
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

/// Open and parse a list file.
pub fn load_list(path: &Path, lenient: bool) -> Result<ParsedList, ListError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|error| ListError::Io { source_name: name.clone(), error })?;
    parse_list(&name, BufReader::new(file), lenient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firehol_and_spamhaus_shapes() {
        let text = "\u{feff}# FireHOL\n#\n\n1.2.3.4\r\n10.0.0.0/8\n  2001:db8::/32  \n5.6.7.0/24 ; SBL12345\n8.8.8.8 # trailing\n";
        let l = parse_list("t", text.as_bytes(), false).unwrap();
        assert_eq!(l.lines, 8);
        let got: Vec<String> = l.prefixes.iter().map(|p| p.to_string()).collect();
        assert_eq!(got, ["1.2.3.4/32", "10.0.0.0/8", "2001:db8::/32", "5.6.7.0/24", "8.8.8.8/32"]);
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
}
