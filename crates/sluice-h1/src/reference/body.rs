//! The reference's body framing, written apart from the fast path's
//! byte-state machine (`body.rs`): a chunk-size line is collected whole and,
//! after every byte, the line so far is read again from its start by a
//! small recursive-descent reading of the grammar
//!
//! ```text
//! chunk-line = 1*16HEXDIG [ BWS ] *( ";" token [ "=" ( token / quoted-string ) ] ) CRLF
//! ```
//!
//! (`BWS` only as a tolerance), which says whether it is a valid beginning,
//! a whole line, or where it first goes wrong. Quadratic in a line's length,
//! which only a test ever pays.

use super::chars::{qdtext, quoted_pair, tchar};
use super::{bare_lf, Fields};
use crate::types::*;

/// What the bytes of a chunk-size line say so far.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A valid beginning; the tolerances it used.
    Partial(Signals),
    /// A whole line of `len` bytes (its LF last), announcing `size` bytes.
    Whole { size: u64, signals: Signals },
    /// Wrong at byte `at` of the line.
    Bad(ErrorKind, usize),
}

/// How an extension ended: where the next part starts, or why it cannot.
enum Ext {
    Next(usize),
    Partial,
    Bad(usize),
}

/// One `token [ "=" ( token / quoted-string ) ]` starting at `i`.
fn extension(b: &[u8], mut i: usize) -> Ext {
    let name = b[i..].iter().take_while(|&&c| tchar(c)).count();
    if name == 0 {
        return if i == b.len() { Ext::Partial } else { Ext::Bad(i) };
    }
    i += name;
    if b.get(i) != Some(&b'=') {
        return Ext::Next(i);
    }
    i += 1;
    match b.get(i) {
        None => Ext::Partial,
        Some(b'"') => {
            i += 1;
            loop {
                match b.get(i) {
                    None => return Ext::Partial,
                    Some(b'"') => return Ext::Next(i + 1),
                    Some(b'\\') => match b.get(i + 1) {
                        None => return Ext::Partial,
                        Some(&c) if quoted_pair(c) => i += 2,
                        Some(_) => return Ext::Bad(i + 1),
                    },
                    Some(&c) if qdtext(c) => i += 1,
                    Some(_) => return Ext::Bad(i),
                }
            }
        }
        Some(&c) if tchar(c) => Ext::Next(i + b[i..].iter().take_while(|&&c| tchar(c)).count()),
        Some(_) => Ext::Bad(i),
    }
}

/// Reads a chunk-size line (or its beginning) from its first byte.
fn read_line(b: &[u8], opts: &Options) -> Line {
    let mut signals = Signals::NONE;
    let digits = b.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if digits > 16 {
        return Line::Bad(ErrorKind::ChunkSizeTooLong, 16);
    }
    if digits == 0 {
        return if b.is_empty() { Line::Partial(signals) } else { Line::Bad(ErrorKind::InvalidChunkSize, 0) };
    }
    let size = b[..digits].iter().fold(0u64, |n, c| n << 4 | u64::from((*c as char).to_digit(16).unwrap_or(0)));
    let mut i = digits;
    let spaces = b[i..].iter().take_while(|&&c| c == b' ' || c == b'\t').count();
    if spaces > 0 {
        if !opts.lenient.contains(Lenient::SPACES_AFTER_CHUNK_SIZE) {
            return Line::Bad(ErrorKind::InvalidChunkSize, i);
        }
        signals.insert(Signals::SPACES_AFTER_CHUNK_SIZE);
        i += spaces;
    }
    // A stray byte before any extension is a bad size; after one, a bad extension.
    let mut stray = ErrorKind::InvalidChunkSize;
    loop {
        match b.get(i) {
            None => return Line::Partial(signals),
            Some(b';') => {
                stray = ErrorKind::InvalidChunkExtension;
                match extension(b, i + 1) {
                    Ext::Next(j) => i = j,
                    Ext::Partial => return Line::Partial(signals),
                    Ext::Bad(at) => return Line::Bad(ErrorKind::InvalidChunkExtension, at),
                }
            }
            Some(b'\r') => {
                return match b.get(i + 1) {
                    None => Line::Partial(signals),
                    Some(b'\n') => Line::Whole { size, signals },
                    Some(_) => Line::Bad(ErrorKind::LoneCr, i),
                }
            }
            Some(b'\n') => {
                if !opts.lenient.contains(Lenient::OPTIONAL_CR_BEFORE_LF) {
                    return Line::Bad(ErrorKind::BareLf, i);
                }
                signals.insert(Signals::BARE_LF);
                return Line::Whole { size, signals };
            }
            Some(_) => return Line::Bad(stray, i),
        }
    }
}

#[derive(Clone, Debug)]
enum Part {
    /// `Content-Length` bytes still to come.
    Length(u64),
    /// A chunk-size line: its bytes so far, and where it starts.
    SizeLine {
        bytes: Vec<u8>,
        start: usize,
    },
    /// Chunk data still to come.
    Data(u64),
    /// After chunk data: whether its CR has been seen.
    DataEnd {
        cr: bool,
    },
    /// The trailer section, and its bytes so far.
    Trailers {
        fields: Box<Fields>,
        bytes: usize,
    },
    Done,
}

/// The body of one request, fed in any pieces.
#[derive(Clone, Debug)]
pub(super) struct BodyReader {
    part: Part,
    pub body_len: u64,
    signals: Signals,
    /// The tolerances of the size line in progress.
    pending: Signals,
}

impl BodyReader {
    pub(super) fn new(framing: Framing) -> BodyReader {
        let part = match framing {
            Framing::None | Framing::Length(0) => Part::Done,
            Framing::Length(n) => Part::Length(n),
            Framing::Chunked => Part::SizeLine { bytes: Vec::new(), start: 0 },
        };
        BodyReader { part, body_len: 0, signals: Signals::NONE, pending: Signals::NONE }
    }

    pub(super) fn done(&self) -> bool {
        matches!(self.part, Part::Done)
    }

    /// The tolerances met so far, those of a line or trailer section not yet
    /// ended included.
    pub(super) fn signals(&self) -> Signals {
        match &self.part {
            Part::Trailers { fields, .. } => self.signals | fields.signals,
            Part::SizeLine { .. } => self.signals | self.pending,
            _ => self.signals,
        }
    }

    /// Takes what belongs to the body from `input`, whose first byte is at
    /// message offset `at`; returns how many bytes that was.
    pub(super) fn feed(&mut self, input: &[u8], at: usize, opts: &Options) -> Result<usize, Error> {
        let mut i = 0;
        while i < input.len() && !self.done() {
            let pos = at + i;
            match &mut self.part {
                Part::Length(left) | Part::Data(left) => {
                    let n = (*left).min((input.len() - i) as u64);
                    *left -= n;
                    self.body_len += n;
                    i += n as usize;
                    if *left == 0 {
                        let length = matches!(self.part, Part::Length(_));
                        self.part = if length { Part::Done } else { Part::DataEnd { cr: false } };
                    }
                    continue;
                }
                Part::SizeLine { bytes, start } => {
                    if bytes.is_empty() {
                        *start = pos;
                    }
                    bytes.push(input[i]);
                    match read_line(bytes, opts) {
                        Line::Partial(signals) => self.pending = signals,
                        Line::Bad(kind, k) => return Err(Error { kind, offset: *start + k }),
                        Line::Whole { size, signals } => {
                            self.signals.insert(signals);
                            self.pending = Signals::NONE;
                            self.part = if size == 0 {
                                Part::Trailers { fields: Box::new(Fields::new()), bytes: 0 }
                            } else {
                                Part::Data(size)
                            };
                        }
                    }
                }
                Part::DataEnd { cr } => match (*cr, input[i]) {
                    (false, b'\r') => *cr = true,
                    (false, b'\n') | (true, b'\n') => {
                        if !*cr {
                            bare_lf(&mut self.signals, pos, opts)?;
                        }
                        self.part = Part::SizeLine { bytes: Vec::new(), start: 0 };
                    }
                    (true, _) => return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 }),
                    (false, _) => {
                        if !opts.lenient.contains(Lenient::OPTIONAL_CRLF_AFTER_CHUNK) {
                            return Err(Error { kind: ErrorKind::MissingCrlfAfterChunk, offset: pos });
                        }
                        // The missing CRLF tolerated, this byte begins the next size line.
                        self.signals.insert(Signals::MISSING_CRLF_AFTER_CHUNK);
                        self.part = Part::SizeLine { bytes: Vec::new(), start: 0 };
                        continue;
                    }
                },
                Part::Trailers { fields, bytes } => {
                    if *bytes >= opts.max_head {
                        return Err(Error { kind: ErrorKind::HeadTooLarge, offset: pos });
                    }
                    *bytes += 1;
                    let ended = fields.step(input[i], pos, opts);
                    if ended? {
                        self.signals.insert(fields.signals);
                        self.part = Part::Done;
                    }
                }
                Part::Done => {}
            }
            i += 1;
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Options {
        Options::default()
    }

    #[test]
    fn lines_read_whole_partial_or_wrong_at_the_first_bad_byte() {
        let o = strict();
        assert_eq!(read_line(b"1a\r\n", &o), Line::Whole { size: 26, signals: Signals::NONE });
        assert_eq!(read_line(b"1a;x=\"a\\\"b\";y\r\n", &o), Line::Whole { size: 26, signals: Signals::NONE });
        assert_eq!(read_line(b"1a;x=\"a", &o), Line::Partial(Signals::NONE));
        assert_eq!(read_line(b"1a ", &o), Line::Bad(ErrorKind::InvalidChunkSize, 2));
        assert_eq!(read_line(b"1a;=", &o), Line::Bad(ErrorKind::InvalidChunkExtension, 3));
        assert_eq!(read_line(b"1a;x=\"a\"b", &o), Line::Bad(ErrorKind::InvalidChunkExtension, 8));
        assert_eq!(read_line(b"1a\rx", &o), Line::Bad(ErrorKind::LoneCr, 2));
        assert_eq!(read_line(b"1a\n", &o), Line::Bad(ErrorKind::BareLf, 2));
        assert_eq!(read_line(b"00000000000000001", &o), Line::Bad(ErrorKind::ChunkSizeTooLong, 16));
        assert_eq!(read_line(b"g", &o), Line::Bad(ErrorKind::InvalidChunkSize, 0));
    }
}
