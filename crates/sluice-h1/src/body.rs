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
                    if self.trailer_bytes >= opts.max_head {
                        return err(ErrorKind::HeadTooLarge);
                    }
                    self.trailer_bytes += 1;
                    let r = self.trailers.step(c, pos, opts);
                    self.signals.insert(self.trailers.signals);
                    if r? {
                        self.st = St::Done;
                        i += 1;
                        break;
                    }
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldState {
    LineStart,
    Name,
    NameWs,
    Value,
    ValueCr,
    EndCr,
}

/// The trailer section, byte by byte, from the first field line to the
/// empty line: the fast path's own (trailers are rare, so no scanner). It
/// is a copy of the reference's field reader, so for trailers alone the two
/// sides are one implementation; that reader is itself held to the fast
/// head scanner on every header section the property tests generate, which
/// is the same grammar. Replacing this with the head scanner would make the
/// trailers independent too.
#[derive(Clone, Debug)]
pub(crate) struct Trailers {
    st: FieldState,
    pub spans: Vec<FieldSpan>,
    pub signals: Signals,
    folding: bool,
    line_start: usize,
    name_end: usize,
    vstart: Option<usize>,
    vend: usize,
    term: usize,
}

impl Trailers {
    pub(crate) fn new() -> Trailers {
        Trailers {
            st: FieldState::LineStart,
            spans: Vec::new(),
            signals: Signals::NONE,
            folding: false,
            line_start: 0,
            name_end: 0,
            vstart: None,
            vend: 0,
            term: 0,
        }
    }

    fn finish_field(&mut self) {
        let value = match self.vstart {
            Some(s) => (s as u32, self.vend as u32),
            None => (self.term as u32, self.term as u32),
        };
        let span = FieldSpan { name: (self.line_start as u32, self.name_end as u32), value };
        if self.folding {
            if let Some(last) = self.spans.last_mut() {
                *last = span;
            }
        } else {
            self.spans.push(span);
        }
        self.st = FieldState::LineStart;
    }

    /// One byte at message offset `pos`; `Ok(true)` once the empty line ended.
    pub(crate) fn step(&mut self, c: u8, pos: usize, opts: &Options) -> Result<bool, Error> {
        let err = |kind| Err(Error { kind, offset: pos });
        match self.st {
            FieldState::LineStart => match c {
                b'\r' => self.st = FieldState::EndCr,
                b'\n' => {
                    bare_lf(&mut self.signals, pos, opts)?;
                    return Ok(true);
                }
                b' ' | b'\t' => {
                    if !opts.lenient.contains(Lenient::OBS_FOLD) || self.spans.is_empty() {
                        return err(ErrorKind::ObsFold);
                    }
                    self.signals.insert(Signals::OBS_FOLD);
                    self.folding = true;
                    self.st = FieldState::Value;
                }
                _ => {
                    if self.spans.len() >= opts.max_headers {
                        return err(ErrorKind::TooManyHeaders);
                    }
                    if !is_tchar(c) {
                        return err(ErrorKind::InvalidHeaderName);
                    }
                    self.folding = false;
                    self.line_start = pos;
                    self.vstart = None;
                    self.st = FieldState::Name;
                }
            },
            FieldState::Name => match c {
                _ if is_tchar(c) => {}
                b':' => {
                    self.name_end = pos;
                    self.st = FieldState::Value;
                }
                b' ' | b'\t' => {
                    if !opts.lenient.contains(Lenient::SPACE_BEFORE_COLON) {
                        return err(ErrorKind::SpaceBeforeColon);
                    }
                    self.signals.insert(Signals::SPACE_BEFORE_COLON);
                    self.name_end = pos;
                    self.st = FieldState::NameWs;
                }
                _ => return err(ErrorKind::InvalidHeaderName),
            },
            FieldState::NameWs => match c {
                b' ' | b'\t' => {}
                b':' => self.st = FieldState::Value,
                _ => return err(ErrorKind::InvalidHeaderName),
            },
            FieldState::Value => match c {
                b' ' | b'\t' => {}
                b'\r' => {
                    if !self.folding {
                        self.term = pos;
                    }
                    self.st = FieldState::ValueCr;
                }
                b'\n' => {
                    bare_lf(&mut self.signals, pos, opts)?;
                    if !self.folding {
                        self.term = pos;
                    }
                    self.finish_field();
                }
                _ => {
                    if !is_value_byte(c) {
                        if !opts.lenient.contains(Lenient::HEADERS) {
                            return err(ErrorKind::InvalidHeaderValue);
                        }
                        self.signals.insert(Signals::CTL_IN_VALUE);
                    }
                    self.vstart.get_or_insert(pos);
                    self.vend = pos + 1;
                }
            },
            FieldState::ValueCr => {
                if c != b'\n' {
                    return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                }
                self.finish_field();
            }
            FieldState::EndCr => {
                if c != b'\n' {
                    return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                }
                return Ok(true);
            }
        }
        Ok(false)
    }
}
