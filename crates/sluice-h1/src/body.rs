//! The fast path's body framing after the head: a fixed length, or chunked
//! coding with its extensions and trailer section. Chunk framing is read one
//! byte at a time (a few bytes per chunk); data is taken in bulk. The
//! reference has its own (`reference/body.rs`), written another way.

use crate::types::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Length,
    /// First hex digit of a chunk size.
    Size,
    SizeMore,
    SizeWs,
    SizeCr,
    ExtStart,
    ExtName,
    ExtValStart,
    ExtTok,
    ExtQuoted,
    ExtEscape,
    ExtAfterQuoted,
    Data,
    DataCr,
    DataLf,
    Trailers,
    Done,
}

#[derive(Clone, Debug)]
pub(crate) struct Body {
    st: St,
    remaining: u64,
    size: u64,
    digits: u8,
    trailer_bytes: usize,
    trailers: Trailers,
    pub body_len: u64,
    pub chunks: u64,
    pub signals: Signals,
}

fn hex(c: u8) -> Option<u64> {
    (c as char).to_digit(16).map(u64::from)
}

/// quoted-string's qdtext.
fn qdtext(c: u8) -> bool {
    matches!(c, b'\t' | b' ' | 0x21 | 0x23..=0x5B | 0x5D..=0x7E | 0x80..=0xFF)
}

impl Body {
    /// What a parser reset before its next head: the counters its
    /// accessors report. The state proper is replaced by [`Body::new`]
    /// before any body byte is read.
    #[inline]
    pub(crate) fn reset_counts(&mut self) {
        (self.body_len, self.chunks, self.signals) = (0, 0, Signals::NONE);
    }

    pub(crate) fn new(framing: Framing) -> Body {
        let (st, remaining) = match framing {
            Framing::None | Framing::Length(0) => (St::Done, 0),
            Framing::Length(n) => (St::Length, n),
            Framing::Chunked => (St::Size, 0),
        };
        Body {
            st,
            remaining,
            size: 0,
            digits: 0,
            trailer_bytes: 0,
            trailers: Trailers::new(),
            body_len: 0,
            chunks: 0,
            signals: Signals::NONE,
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.st == St::Done
    }

    /// Reads from `input` (whose first byte is at message offset `base`),
    /// returning after at most one data segment.
    pub(crate) fn parse(&mut self, input: &[u8], base: usize, opts: &Options) -> Result<BodyStatus, Error> {
        let mut i = 0;
        while i < input.len() {
            let c = input[i];
            let pos = base + i;
            let err = |kind| Err(Error { kind, offset: pos });
            match self.st {
                St::Done => break,
                St::Length | St::Data => {
                    let n = (input.len() - i).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                    self.remaining -= n as u64;
                    self.body_len += n as u64;
                    if self.remaining == 0 {
                        self.st = if self.st == St::Length { St::Done } else { St::DataCr };
                    }
                    return Ok(BodyStatus { consumed: i + n, data: i..i + n, done: self.done() });
                }
                St::Size => match hex(c) {
                    Some(d) => {
                        self.size = d;
                        self.digits = 1;
                        self.st = St::SizeMore;
                    }
                    None => return err(ErrorKind::InvalidChunkSize),
                },
                St::SizeMore => match (hex(c), c) {
                    (Some(d), _) => {
                        self.digits += 1;
                        if self.digits > 16 {
                            return err(ErrorKind::ChunkSizeTooLong);
                        }
                        self.size = self.size << 4 | d;
                    }
                    (_, b';') => self.st = St::ExtStart,
                    (_, b'\r') => self.st = St::SizeCr,
                    (_, b'\n') => {
                        bare_lf(&mut self.signals, pos, opts)?;
                        self.size_line_done();
                    }
                    (_, b' ' | b'\t') if opts.lenient.contains(Lenient::SPACES_AFTER_CHUNK_SIZE) => {
                        self.signals.insert(Signals::SPACES_AFTER_CHUNK_SIZE);
                        self.st = St::SizeWs;
                    }
                    _ => return err(ErrorKind::InvalidChunkSize),
                },
                St::SizeWs => match c {
                    b' ' | b'\t' => {}
                    b';' => self.st = St::ExtStart,
                    b'\r' => self.st = St::SizeCr,
                    b'\n' => {
                        bare_lf(&mut self.signals, pos, opts)?;
                        self.size_line_done();
                    }
                    _ => return err(ErrorKind::InvalidChunkSize),
                },
                St::SizeCr => {
                    if c != b'\n' {
                        return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                    }
                    self.size_line_done();
                }
                St::ExtStart => match c {
                    _ if is_tchar(c) => self.st = St::ExtName,
                    _ => return err(ErrorKind::InvalidChunkExtension),
                },
                St::ExtName | St::ExtTok | St::ExtAfterQuoted => match c {
                    _ if is_tchar(c) && self.st != St::ExtAfterQuoted => {}
                    b'=' if self.st == St::ExtName => self.st = St::ExtValStart,
                    b';' => self.st = St::ExtStart,
                    b'\r' => self.st = St::SizeCr,
                    b'\n' => {
                        bare_lf(&mut self.signals, pos, opts)?;
                        self.size_line_done();
                    }
                    _ => return err(ErrorKind::InvalidChunkExtension),
                },
                St::ExtValStart => match c {
                    b'"' => self.st = St::ExtQuoted,
                    _ if is_tchar(c) => self.st = St::ExtTok,
                    _ => return err(ErrorKind::InvalidChunkExtension),
                },
                St::ExtQuoted => match c {
                    b'"' => self.st = St::ExtAfterQuoted,
                    b'\\' => self.st = St::ExtEscape,
                    _ if qdtext(c) => {}
                    _ => return err(ErrorKind::InvalidChunkExtension),
                },
                St::ExtEscape => match c {
                    b'\t' | b' '..=0x7E | 0x80..=0xFF => self.st = St::ExtQuoted,
                    _ => return err(ErrorKind::InvalidChunkExtension),
                },
                St::DataCr => match c {
                    b'\r' => self.st = St::DataLf,
                    b'\n' => {
                        bare_lf(&mut self.signals, pos, opts)?;
                        self.st = St::Size;
                    }
                    _ if opts.lenient.contains(Lenient::OPTIONAL_CRLF_AFTER_CHUNK) => {
                        self.signals.insert(Signals::MISSING_CRLF_AFTER_CHUNK);
                        // This byte starts the next chunk size.
                        self.st = St::Size;
                        continue;
                    }
                    _ => return err(ErrorKind::MissingCrlfAfterChunk),
                },
                St::DataLf => {
                    if c != b'\n' {
                        return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                    }
                    self.st = St::Size;
                }
                St::Trailers => {
                    // The section is bounded like a head: the byte past the
                    // limit is refused, unless an error came first.
                    let room = opts.max_head - self.trailer_bytes;
                    let r = self.trailers.feed(&input[i..input.len().min(i + room)], pos, opts);
                    self.signals.insert(self.trailers.signals);
                    let (took, done) = r?;
                    self.trailer_bytes += took;
                    i += took;
                    if done {
                        self.st = St::Done;
                        break;
                    }
                    if i < input.len() {
                        return Err(Error { kind: ErrorKind::HeadTooLarge, offset: base + i });
                    }
                    continue;
                }
            }
            i += 1;
        }
        Ok(BodyStatus { consumed: i, data: i..i, done: self.done() })
    }

    fn size_line_done(&mut self) {
        if self.size == 0 {
            self.st = St::Trailers;
        } else {
            self.chunks += 1;
            self.remaining = self.size;
            self.st = St::Data;
        }
    }
}

/// A bare LF where CRLF belongs: tolerated and signalled, or refused.
pub(crate) fn bare_lf(signals: &mut Signals, pos: usize, opts: &Options) -> Result<(), Error> {
    if opts.lenient.contains(Lenient::OPTIONAL_CR_BEFORE_LF) {
        signals.insert(Signals::BARE_LF);
        Ok(())
    } else {
        Err(Error { kind: ErrorKind::BareLf, offset: pos })
    }
}

/// Where the trailer reader is within a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    LineStart,
    Name,
    /// Whitespace between a name and its colon (a tolerance).
    NameWs,
    Value,
    /// A CR ended a field line; LF must follow.
    ValueCr,
    /// A CR began the empty line; LF must follow.
    EndCr,
}

/// The trailer section, from the first field line to the empty line: the
/// fast path's own reader. It takes runs of bytes at a time (a name, a
/// value) with slice searches and keeps only where it is in the line and
/// how many fields it has seen (trailers are dropped, not stored); the
/// reference steps a state per byte and records every field. Errors carry
/// the same kind and offset, which the differential tests check.
#[derive(Clone, Debug)]
pub(crate) struct Trailers {
    at: At,
    fields: usize,
    pub signals: Signals,
}

impl Trailers {
    pub(crate) fn new() -> Trailers {
        Trailers { at: At::LineStart, fields: 0, signals: Signals::NONE }
    }

    /// Reads `input` (its first byte at message offset `base`). Returns
    /// how many bytes it took and whether the empty line ended the section.
    pub(crate) fn feed(&mut self, input: &[u8], base: usize, opts: &Options) -> Result<(usize, bool), Error> {
        let mut i = 0;
        while i < input.len() {
            let pos = base + i;
            let err = |kind, offset| Err(Error { kind, offset });
            match self.at {
                At::LineStart => {
                    match input[i] {
                        b'\r' => self.at = At::EndCr,
                        b'\n' => {
                            bare_lf(&mut self.signals, pos, opts)?;
                            return Ok((i + 1, true));
                        }
                        b' ' | b'\t' => {
                            if !opts.lenient.contains(Lenient::OBS_FOLD) || self.fields == 0 {
                                return err(ErrorKind::ObsFold, pos);
                            }
                            self.signals.insert(Signals::OBS_FOLD);
                            self.at = At::Value;
                        }
                        c => {
                            if self.fields >= opts.max_headers {
                                return err(ErrorKind::TooManyHeaders, pos);
                            }
                            if !is_tchar(c) {
                                return err(ErrorKind::InvalidHeaderName, pos);
                            }
                            self.fields += 1;
                            self.at = At::Name;
                        }
                    }
                    i += 1;
                }
                At::Name => {
                    let Some(n) = input[i..].iter().position(|&c| !is_tchar(c)) else {
                        return Ok((input.len(), false));
                    };
                    i += n;
                    let pos = base + i;
                    match input[i] {
                        b':' => self.at = At::Value,
                        b' ' | b'\t' if opts.lenient.contains(Lenient::SPACE_BEFORE_COLON) => {
                            self.signals.insert(Signals::SPACE_BEFORE_COLON);
                            self.at = At::NameWs;
                        }
                        b' ' | b'\t' => return err(ErrorKind::SpaceBeforeColon, pos),
                        _ => return err(ErrorKind::InvalidHeaderName, pos),
                    }
                    i += 1;
                }
                At::NameWs => {
                    let Some(n) = input[i..].iter().position(|&c| c != b' ' && c != b'\t') else {
                        return Ok((input.len(), false));
                    };
                    i += n;
                    if input[i] != b':' {
                        return err(ErrorKind::InvalidHeaderName, base + i);
                    }
                    self.at = At::Value;
                    i += 1;
                }
                At::Value => {
                    // CR and LF are not value bytes: one search finds the
                    // line's end or a byte to refuse.
                    let Some(n) = input[i..].iter().position(|&c| !is_value_byte(c)) else {
                        return Ok((input.len(), false));
                    };
                    i += n;
                    let pos = base + i;
                    match input[i] {
                        b'\r' => self.at = At::ValueCr,
                        b'\n' => {
                            bare_lf(&mut self.signals, pos, opts)?;
                            self.at = At::LineStart;
                        }
                        _ if opts.lenient.contains(Lenient::HEADERS) => self.signals.insert(Signals::CTL_IN_VALUE),
                        _ => return err(ErrorKind::InvalidHeaderValue, pos),
                    }
                    i += 1;
                }
                At::ValueCr | At::EndCr => {
                    if input[i] != b'\n' {
                        return err(ErrorKind::LoneCr, pos - 1);
                    }
                    i += 1;
                    if self.at == At::EndCr {
                        return Ok((i, true));
                    }
                    self.at = At::LineStart;
                }
            }
        }
        Ok((i, false))
    }
}
