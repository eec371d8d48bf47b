//! The plain parser: one byte at a time through a `match state`, the nginx
//! style. It implements the same contract as the fast [`crate::Parser`] and
//! is what the property tests hold it to. Resumable by nature: [`Parser::feed`]
//! takes the bytes in any pieces.

mod body;
mod chars;
mod meaning;

use crate::types::{Error, ErrorKind, FieldSpan, Framing, Lenient, Options, Signals, Version};
use body::BodyReader;
use chars::{target_byte as is_target_byte, tchar as is_tchar, value_byte as is_value_byte};

/// An owned parse result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: Vec<u8>,
    pub target: Vec<u8>,
    pub version: Version,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub framing: Framing,
    pub keep_alive: bool,
    pub head_len: usize,
    pub body_len: u64,
    pub complete: bool,
    pub consumed: usize,
    pub signals: Signals,
}

/// One-shot parse of a whole buffer, with the fast parser's conventions:
/// a head cut short is `IncompleteHead`; a body cut short is `complete: false`.
pub fn parse_request(buf: &[u8], opts: &Options) -> Result<Request, Error> {
    let mut p = Parser::new(*opts);
    p.feed(buf)?;
    p.finish()
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

/// The header (or trailer) section, byte by byte, from the first field line
/// to the empty line.
#[derive(Clone, Debug)]
pub(super) struct Fields {
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

impl Fields {
    pub(super) fn new() -> Fields {
        Fields {
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
    pub(super) fn step(&mut self, c: u8, pos: usize, opts: &Options) -> Result<bool, Error> {
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

fn bare_lf(signals: &mut Signals, pos: usize, opts: &Options) -> Result<(), Error> {
    if opts.lenient.contains(Lenient::OPTIONAL_CR_BEFORE_LF) {
        signals.insert(Signals::BARE_LF);
        Ok(())
    } else {
        Err(Error { kind: ErrorKind::BareLf, offset: pos })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Start,
    StartCr,
    Method,
    Target,
    /// Bytes of the version seen so far.
    Version(u8),
    VersionCr,
    Fields,
    Body,
    Done,
}

/// The resumable reference parser.
#[derive(Clone, Debug)]
pub struct Parser {
    opts: Options,
    st: State,
    pos: usize,
    signals: Signals,
    method: (usize, usize),
    target: (usize, usize),
    version_start: usize,
    version: [u8; 2],
    fields: Fields,
    /// Every byte fed so far (the reference keeps a copy; it is the simple side).
    seen: Vec<u8>,
    head_len: usize,
    framing: Framing,
    keep_alive: bool,
    body: Option<BodyReader>,
    error: Option<Error>,
}

impl Parser {
    pub fn new(opts: Options) -> Parser {
        Parser {
            opts,
            st: State::Start,
            pos: 0,
            signals: Signals::NONE,
            method: (0, 0),
            target: (0, 0),
            version_start: 0,
            version: [0; 2],
            fields: Fields::new(),
            seen: Vec::new(),
            head_len: 0,
            framing: Framing::None,
            keep_alive: false,
            body: None,
            error: None,
        }
    }

    /// Feeds the next bytes of the message (each call only the new ones).
    /// Bytes after the end of the message are not taken.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let r = self.feed_inner(bytes);
        if let Err(e) = r {
            self.error = Some(e);
            self.signals.set_error(e.kind);
        }
        r
    }

    fn feed_inner(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let mut i = 0;
        while i < bytes.len() {
            if self.st == State::Body {
                let body = self.body.as_mut().expect("body state has a body");
                let consumed = body.feed(&bytes[i..], self.pos, &self.opts)?;
                i += consumed;
                self.pos += consumed;
                if body.done() {
                    self.st = State::Done;
                }
                continue;
            }
            if self.st == State::Done {
                return Ok(());
            }
            let c = bytes[i];
            self.seen.push(c);
            self.step(c)?;
            self.pos += 1;
            i += 1;
        }
        Ok(())
    }

    fn step(&mut self, c: u8) -> Result<(), Error> {
        let pos = self.pos;
        let opts = self.opts;
        if pos >= opts.max_head {
            return Err(Error { kind: ErrorKind::HeadTooLarge, offset: pos });
        }
        let err = |kind| Err(Error { kind, offset: pos });
        match self.st {
            State::Start => match c {
                b'\r' => self.st = State::StartCr,
                b'\n' => {
                    bare_lf(&mut self.signals, pos, &opts)?;
                    self.signals.insert(Signals::LEADING_EMPTY_LINES);
                }
                _ => {
                    self.method.0 = pos;
                    self.st = State::Method;
                    return self.step(c);
                }
            },
            State::StartCr => {
                if c != b'\n' {
                    return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                }
                self.signals.insert(Signals::LEADING_EMPTY_LINES);
                self.st = State::Start;
            }
            State::Method => match c {
                _ if is_tchar(c) => {}
                b' ' if pos > self.method.0 => {
                    self.method.1 = pos;
                    self.target.0 = pos + 1;
                    self.st = State::Target;
                }
                _ => return err(ErrorKind::InvalidMethod),
            },
            State::Target => match c {
                _ if is_target_byte(c) => {}
                b' ' | b'\r' | b'\n' if pos == self.target.0 => return err(ErrorKind::InvalidTarget),
                b' ' => {
                    self.target.1 = pos;
                    let m = &self.seen[self.method.0..self.method.1];
                    let t = &self.seen[self.target.0..pos];
                    if !meaning::target_ok(m, t) {
                        return Err(Error { kind: ErrorKind::InvalidTarget, offset: self.target.0 });
                    }
                    self.version_start = pos + 1;
                    self.st = State::Version(0);
                }
                b'\r' | b'\n' => return err(ErrorKind::InvalidVersion),
                _ => return err(ErrorKind::InvalidTarget),
            },
            State::Version(i) => {
                let lenient = opts.lenient.contains(Lenient::VERSION);
                let ok = match i {
                    0..=4 => c == b"HTTP/"[i as usize],
                    5 => c == b'1' || (lenient && c.is_ascii_digit()),
                    6 => c == b'.',
                    7 => c == b'0' || c == b'1' || (lenient && c.is_ascii_digit()),
                    _ => matches!(c, b'\r' | b'\n'),
                };
                if !ok {
                    return Err(Error { kind: ErrorKind::InvalidVersion, offset: self.version_start });
                }
                match i {
                    5 => self.version[0] = c,
                    7 => self.version[1] = c,
                    8 if c == b'\r' => self.st = State::VersionCr,
                    8 => {
                        bare_lf(&mut self.signals, pos, &opts)?;
                        self.st = State::Fields;
                    }
                    _ => {}
                }
                if i < 8 {
                    self.st = State::Version(i + 1);
                }
            }
            State::VersionCr => {
                if c != b'\n' {
                    return Err(Error { kind: ErrorKind::LoneCr, offset: pos - 1 });
                }
                self.st = State::Fields;
            }
            State::Fields => {
                if self.fields.step(c, pos, &opts)? {
                    self.head_done(pos + 1)?;
                }
            }
            State::Body | State::Done => unreachable!("handled in feed"),
        }
        Ok(())
    }

    fn head_done(&mut self, len: usize) -> Result<(), Error> {
        self.head_len = len;
        self.signals.insert(self.fields.signals);
        let version = self.version();
        if !matches!(self.version, [b'1', b'0'] | [b'1', b'1']) {
            self.signals.insert(Signals::OTHER_VERSION);
        }
        let m = meaning::interpret(&self.seen, &self.fields.spans, version, self.opts.lenient)?;
        self.signals.insert(m.signals);
        self.framing = m.framing;
        self.keep_alive = m.keep_alive;
        let body = BodyReader::new(m.framing);
        self.st = if body.done() { State::Done } else { State::Body };
        self.body = Some(body);
        Ok(())
    }

    fn version(&self) -> Version {
        if self.version >= [b'1', b'1'] {
            Version::Http11
        } else {
            Version::Http10
        }
    }

    /// The result so far: `IncompleteHead` if the head is not complete.
    pub fn finish(&self) -> Result<Request, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !matches!(self.st, State::Body | State::Done) {
            return Err(Error { kind: ErrorKind::IncompleteHead, offset: self.pos });
        }
        let s = &self.seen;
        let get = |r: (u32, u32)| s[r.0 as usize..r.1 as usize].to_vec();
        let body = self.body.as_ref().expect("past the head");
        Ok(Request {
            method: s[self.method.0..self.method.1].to_vec(),
            target: s[self.target.0..self.target.1].to_vec(),
            version: self.version(),
            headers: self.fields.spans.iter().map(|f| (get(f.name), get(f.value))).collect(),
            framing: self.framing,
            keep_alive: self.keep_alive,
            head_len: self.head_len,
            body_len: body.body_len,
            complete: self.st == State::Done,
            consumed: self.pos,
            signals: self.signals | body.signals(),
        })
    }

    pub fn signals(&self) -> Signals {
        self.signals | self.body.as_ref().map_or(Signals::NONE, BodyReader::signals)
    }

    /// The head's length once it is complete.
    pub fn head_len(&self) -> Option<usize> {
        matches!(self.st, State::Body | State::Done).then_some(self.head_len)
    }

    /// Ready for the next message, keeping the buffers' capacity: what a
    /// server does per request, so `sluice-bench http` times the state
    /// machine rather than the allocator.
    pub fn reset(&mut self) {
        let (mut seen, mut spans) = (std::mem::take(&mut self.seen), std::mem::take(&mut self.fields.spans));
        seen.clear();
        spans.clear();
        *self = Parser::new(self.opts);
        self.seen = seen;
        self.fields.spans = spans;
    }
}
