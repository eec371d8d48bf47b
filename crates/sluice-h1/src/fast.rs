//! The fast parser. The head is parsed by straight-line code: each field is
//! one vector scan for the first byte not allowed in it, then a decision on
//! that byte. `St` and `Phase` exist only to resume at a call boundary: a
//! call that runs out of bytes records where it stood (and how far the scan
//! got), and the next call carries on from there. Fixed-size tokens (a CRLF,
//! the 8-byte version) are re-read when cut, which is O(1) per call.

use std::borrow::Cow;

use crate::body::Body;
use crate::semantics::{self, Meaning};
use crate::simd::{self, Kernel, Level, Scan};
use crate::types::*;

const CR: u8 = b'\r';
const LF: u8 = b'\n';
/// "Not set yet" for value offsets.
const UNSET: usize = usize::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Start,
    Method,
    Target,
    Version,
    Fields(Phase),
    Done,
    Failed,
}

/// Where inside the header section: also the order the code runs in, so
/// resuming at a phase runs that phase and every later one (`>=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    LineStart,
    Name,
    NameWs,
    Ows,
    Value,
}

/// The field being read (kept across a fold, which extends it).
#[derive(Clone, Copy, Debug)]
struct Cur {
    line_start: usize,
    name_end: usize,
    /// First non-whitespace value byte, or UNSET.
    vstart: usize,
    vend: usize,
    /// The first line's terminator (CR or bare LF): an empty value sits there.
    term: usize,
    /// Where this line's value bytes start (after OWS).
    seg: usize,
    folding: bool,
}

impl Cur {
    const FRESH: Cur = Cur { line_start: 0, name_end: 0, vstart: UNSET, vend: 0, term: 0, seg: 0, folding: false };

    /// The state a fold continues from, rebuilt from the field's span as
    /// last pushed (by either path). A span is `(vstart, vend)` with
    /// `vstart < vend` once the value has a byte (its first byte is not
    /// whitespace, so trimming stops after it), else `(term, term)`; `seg`
    /// is set by the fold's own OWS phase.
    #[inline]
    fn resume(f: &FieldSpan) -> Cur {
        let (v0, v1) = (f.value.0 as usize, f.value.1 as usize);
        Cur {
            line_start: f.name.0 as usize,
            name_end: f.name.1 as usize,
            vstart: if v0 < v1 { v0 } else { UNSET },
            vend: v1,
            term: v0,
            seg: v0,
            folding: true,
        }
    }
}

/// The fast, resumable request parser. Reusable: `reset` keeps the field
/// vector's capacity, so steady state does not allocate.
#[derive(Debug)]
pub struct Parser {
    opts: Options,
    level: Level,
    st: St,
    pos: usize,
    mstart: usize,
    tstart: usize,
    tend: usize,
    vstart: usize,
    version: Version,
    cur: Cur,
    fields: Vec<FieldSpan>,
    /// Which fields are among the four `semantics::interpret` reads, noted
    /// while each name is scanned: the first Host field's index (or UNSET),
    /// and a bit per other field (bit = field index).
    host: usize,
    special: u64,
    /// A special field at index 64 or beyond: `interpret` walks them all.
    special_far: bool,
    signals: Signals,
    head_len: usize,
    /// What the head means, valid once `st` is `Done`.
    decided: Decided,
    body: Body,
    body_pos: usize,
    error: Option<Error>,
}

/// A head's [`Meaning`] kept as scalars, each read back whole by `head`:
/// `Framing` and `Option<u64>` are written as tag and payload but copied
/// out as one 16-byte move, which cannot be forwarded from the two stores
/// just made (perf put `head`'s top sample on that load).
#[derive(Clone, Copy, Debug, Default)]
struct Decided {
    /// 0: no body, 1: `length` bytes, 2: chunked.
    framing: u8,
    length: u64,
    keep_alive: bool,
    host: u32,
    has_content_length: bool,
    content_length: u64,
}

impl Decided {
    #[inline(always)]
    fn new(m: &Meaning) -> Decided {
        let (framing, length) = match m.framing {
            Framing::None => (0, 0),
            Framing::Length(n) => (1, n),
            Framing::Chunked => (2, 0),
        };
        Decided {
            framing,
            length,
            keep_alive: m.keep_alive,
            host: m.host,
            has_content_length: m.content_length.is_some(),
            content_length: m.content_length.unwrap_or(0),
        }
    }

    #[inline(always)]
    fn framing(&self) -> Framing {
        match self.framing {
            0 => Framing::None,
            1 => Framing::Length(self.length),
            _ => Framing::Chunked,
        }
    }
}

impl std::fmt::Debug for Meaning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Meaning({:?})", self.framing)
    }
}

impl Parser {
    pub fn new(opts: Options) -> Parser {
        Parser {
            opts,
            level: simd::level(opts.simd),
            st: St::Start,
            pos: 0,
            mstart: 0,
            tstart: 0,
            tend: 0,
            vstart: 0,
            version: Version::Http11,
            cur: Cur::FRESH,
            fields: Vec::with_capacity(16),
            host: UNSET,
            special: 0,
            special_far: false,
            signals: Signals::NONE,
            head_len: 0,
            decided: Decided::default(),
            body: Body::new(Framing::None),
            body_pos: 0,
            error: None,
        }
    }

    /// The scanner level in use (after detection and fallback).
    pub fn simd(&self) -> Simd {
        self.level.get()
    }

    /// Ready for the next message; keeps the field vector's capacity.
    pub fn reset(&mut self) {
        self.st = St::Start;
        self.pos = 0;
        self.fields.clear();
        self.host = UNSET;
        self.special = 0;
        self.special_far = false;
        self.signals = Signals::NONE;
        self.head_len = 0;
        // Until the next head is done (which sets the whole body state),
        // only the body's counters can be read.
        self.body.reset_counts();
        self.body_pos = 0;
        self.error = None;
    }

    fn fail(&mut self, e: Error) -> Error {
        self.st = St::Failed;
        self.error = Some(e);
        self.signals.set_error(e.kind);
        e
    }

    /// `buf` holds the message from its first byte; each call passes the
    /// same bytes as before plus whatever arrived since.
    pub fn parse_head(&mut self, buf: &[u8]) -> Result<HeadStatus, Error> {
        match self.st {
            St::Done => return Ok(HeadStatus::Complete(self.head_len)),
            St::Failed => return Err(self.error.expect("failed has an error")),
            _ => {}
        }
        let limit = buf.len().min(self.opts.max_head);
        match simd::dispatch(self.level, self, &buf[..limit]) {
            Ok(HeadStatus::Partial) if buf.len() > self.opts.max_head => {
                Err(self.fail(Error { kind: ErrorKind::HeadTooLarge, offset: self.opts.max_head }))
            }
            Ok(s) => Ok(s),
            Err(e) => Err(self.fail(e)),
        }
    }

    #[inline]
    fn bare_lf(&mut self, p: usize) -> Result<(), Error> {
        crate::body::bare_lf(&mut self.signals, p, &self.opts)
    }

    #[inline]
    fn partial(&mut self, st: St, p: usize) -> Result<HeadStatus, Error> {
        self.st = st;
        self.pos = p;
        Ok(HeadStatus::Partial)
    }

    #[inline(always)]
    fn run<S: Scan>(&mut self, b: &[u8]) -> Result<HeadStatus, Error> {
        let mut p = self.pos;
        let err = |kind, offset| Err(Error { kind, offset });
        if self.st == St::Start {
            // Leading empty lines (RFC 9112 2.2 lets a server ignore them).
            loop {
                match b.get(p) {
                    None => return self.partial(St::Start, p),
                    Some(&CR) => match b.get(p + 1) {
                        None => return self.partial(St::Start, p),
                        Some(&LF) => p += 2,
                        Some(_) => return err(ErrorKind::LoneCr, p),
                    },
                    Some(&LF) => {
                        self.bare_lf(p)?;
                        p += 1;
                    }
                    Some(_) => break,
                }
                self.signals.insert(Signals::LEADING_EMPTY_LINES);
            }
            self.mstart = p;
            self.st = St::Method;
        }
        if self.st == St::Method {
            // Methods are short: the table is as quick as a vector here.
            // `GET ` (most requests) is one 4-byte compare.
            if b.get(p..p + 4) == Some(b"GET ") {
                p += 3;
            } else {
                while p < b.len() && simd::TCHAR[b[p] as usize] {
                    p += 1;
                }
            }
            match b.get(p) {
                None => return self.partial(St::Method, p),
                Some(&b' ') if p > self.mstart => {}
                Some(_) => return err(ErrorKind::InvalidMethod, p),
            }
            p += 1;
            self.tstart = p;
            self.st = St::Target;
        }
        if self.st == St::Target {
            p = S::target(b, p);
            match b.get(p) {
                None => return self.partial(St::Target, p),
                Some(b' ' | &CR | &LF) if p == self.tstart => return err(ErrorKind::InvalidTarget, p),
                Some(b' ') => {}
                Some(&CR | &LF) => return err(ErrorKind::InvalidVersion, p),
                Some(_) => return err(ErrorKind::InvalidTarget, p),
            }
            if !semantics::target_ok(&b[self.mstart..self.tstart - 1], &b[self.tstart..p]) {
                return err(ErrorKind::InvalidTarget, self.tstart);
            }
            self.tend = p;
            p += 1;
            self.vstart = p;
            self.st = St::Version;
        }
        if self.st == St::Version {
            let v = &b[p..];
            let lenient = self.opts.lenient.contains(Lenient::VERSION);
            if v.len() >= 8 && &v[..8] == b"HTTP/1.1" {
                self.version = Version::Http11;
            } else {
                // The uncommon and the cut-short: check what is there.
                for (i, &c) in v.iter().take(8).enumerate() {
                    let ok = match i {
                        0..=4 => c == b"HTTP/"[i],
                        5 => c == b'1' || (lenient && c.is_ascii_digit()),
                        6 => c == b'.',
                        _ => c == b'0' || c == b'1' || (lenient && c.is_ascii_digit()),
                    };
                    if !ok {
                        return err(ErrorKind::InvalidVersion, p);
                    }
                }
                if v.len() >= 8 {
                    let mm = [v[5], v[7]];
                    if mm != *b"11" && mm != *b"10" {
                        self.signals.insert(Signals::OTHER_VERSION);
                    }
                    self.version = if mm >= *b"11" { Version::Http11 } else { Version::Http10 };
                }
            }
            match v.get(8) {
                None => return self.partial(St::Version, p),
                Some(&CR) => match v.get(9) {
                    None => return self.partial(St::Version, p),
                    Some(&LF) => p += 10,
                    Some(_) => return err(ErrorKind::LoneCr, p + 8),
                },
                Some(&LF) => {
                    self.bare_lf(p + 8)?;
                    p += 9;
                }
                Some(_) => return err(ErrorKind::InvalidVersion, p),
            }
            self.st = St::Fields(Phase::LineStart);
            if b.get(p..p + 2) == Some(b"\r\n") {
                // A head without fields ends here: checked once, so such a
                // head scans no name, and a head with fields pays one compare.
                return self.complete(b, p + 2);
            }
        }
        let St::Fields(phase) = self.st else { unreachable!("head states run in order") };
        self.fields::<S>(b, p, phase)
    }

    /// The header section. The hot path enters at `LineStart` and runs every
    /// phase in order for each line without going back through `St`. The
    /// field being read lives in a local (registers) and is stored back only
    /// when the call runs out of bytes.
    #[inline(always)]
    fn fields<S: Scan>(&mut self, b: &[u8], mut p: usize, mut phase: Phase) -> Result<HeadStatus, Error> {
        let err = |kind, offset| Err(Error { kind, offset });
        let lenient = self.opts.lenient;
        let max_headers = self.opts.max_headers;
        // A call that starts at a line's start (every complete head's first
        // call) sets each field of `cur` before reading it, so only a resumed
        // line loads the stored one: copying it in cost 20 of the ~520
        // instructions of a minimal head.
        let mut cur = if phase == Phase::LineStart { Cur::FRESH } else { self.cur };
        // Locals like `cur`, stored back only when the call returns.
        let mut host = self.host;
        let mut special = self.special;
        macro_rules! partial {
            ($phase:expr) => {{
                self.cur = cur;
                self.host = host;
                self.special = special;
                return self.partial(St::Fields($phase), p);
            }};
        }
        // Notes whether the field about to be pushed (name `ns..ne`) is one
        // `interpret` must read.
        macro_rules! note_name {
            ($ns:expr, $ne:expr) => {{
                // The length first: most names are of none of the four
                // lengths, and the test needs no slice (whose bounds
                // checks were most of this step's instructions).
                let (ns, ne): (usize, usize) = ($ns, $ne);
                let k = if semantics::maybe_special(ne.wrapping_sub(ns)) {
                    semantics::known(b.get(ns..ne).unwrap_or_default())
                } else {
                    semantics::Known::Other
                };
                if k != semantics::Known::Other {
                    let i = self.fields.len();
                    if i >= 64 {
                        self.special_far = true;
                    } else if k != semantics::Known::Host {
                        special |= 1 << i;
                    } else if host == UNSET {
                        host = i;
                    }
                }
            }};
        }
        loop {
            if phase == Phase::LineStart {
                // The common line, `name: value CRLF` whole in the buffer,
                // taken in one go; anything else (the end of the head, a
                // fold, odd whitespace, a control byte, a bare LF, a line
                // cut short, the field limit) goes the general way below,
                // which starts from the same place: nothing is committed
                // here unless the whole line checked out.
                let ns = p;
                if self.fields.len() < max_headers {
                    if let Some((ne, v, ve)) = S::line(b, ns) {
                        if b.get(ve..ve + 2) == Some(b"\r\n") {
                            let mut e = ve;
                            while e > v && matches!(b.get(e - 1), Some(b' ' | b'\t')) {
                                e -= 1;
                            }
                            // `cur` is left alone: a fold rebuilds it from
                            // the span (`Cur::resume`), which keeps seven
                            // stores per line off this path.
                            let value = if e > v { (v as u32, e as u32) } else { (ve as u32, ve as u32) };
                            note_name!(ns, ne);
                            self.fields.push(FieldSpan { name: (ns as u32, ne as u32), value });
                            p = ve + 2;
                            continue;
                        }
                    }
                }
                let Some(&c) = b.get(p) else { partial!(Phase::LineStart) };
                if c == CR {
                    match b.get(p + 1) {
                        None => partial!(Phase::LineStart),
                        Some(&LF) => {
                            (self.host, self.special) = (host, special);
                            return self.complete(b, p + 2);
                        }
                        Some(_) => return err(ErrorKind::LoneCr, p),
                    }
                }
                if c == LF {
                    self.bare_lf(p)?;
                    (self.host, self.special) = (host, special);
                    return self.complete(b, p + 1);
                }
                if c == b' ' || c == b'\t' {
                    let Some(last) = self.fields.last().filter(|_| lenient.contains(Lenient::OBS_FOLD)) else {
                        return err(ErrorKind::ObsFold, p);
                    };
                    self.signals.insert(Signals::OBS_FOLD);
                    cur = Cur::resume(last);
                    phase = Phase::Ows;
                } else {
                    if self.fields.len() >= max_headers {
                        return err(ErrorKind::TooManyHeaders, p);
                    }
                    cur.line_start = p;
                    cur.vstart = UNSET;
                    cur.folding = false;
                    phase = Phase::Name;
                }
            }
            if phase == Phase::Name {
                p = S::name(b, p);
                let Some(&c) = b.get(p) else { partial!(Phase::Name) };
                if c == b':' && p > cur.line_start {
                    cur.name_end = p;
                    note_name!(cur.line_start, p);
                    p += 1;
                    phase = Phase::Ows;
                } else if p == cur.line_start {
                    return err(ErrorKind::InvalidHeaderName, p);
                } else if c == b' ' || c == b'\t' {
                    if !lenient.contains(Lenient::SPACE_BEFORE_COLON) {
                        return err(ErrorKind::SpaceBeforeColon, p);
                    }
                    self.signals.insert(Signals::SPACE_BEFORE_COLON);
                    cur.name_end = p;
                    note_name!(cur.line_start, p);
                    phase = Phase::NameWs;
                } else {
                    return err(ErrorKind::InvalidHeaderName, p);
                }
            }
            if phase == Phase::NameWs {
                while let Some(b' ' | b'\t') = b.get(p) {
                    p += 1;
                }
                match b.get(p) {
                    None => partial!(Phase::NameWs),
                    Some(b':') => p += 1,
                    Some(_) => return err(ErrorKind::InvalidHeaderName, p),
                }
                phase = Phase::Ows;
            }
            if phase == Phase::Ows {
                // Usually exactly one SP.
                if b.get(p) == Some(&b' ') {
                    p += 1;
                }
                while let Some(b' ' | b'\t') = b.get(p) {
                    p += 1;
                }
                let Some(&c) = b.get(p) else { partial!(Phase::Ows) };
                cur.seg = p;
                if cur.vstart == UNSET && c != CR && c != LF {
                    cur.vstart = p;
                }
            }
            // Phase::Value
            let c = loop {
                p = S::value(b, p);
                let Some(&c) = b.get(p) else { partial!(Phase::Value) };
                if c == CR || c == LF {
                    break c;
                }
                if !lenient.contains(Lenient::HEADERS) {
                    return err(ErrorKind::InvalidHeaderValue, p);
                }
                self.signals.insert(Signals::CTL_IN_VALUE);
                p += 1;
            };
            let term = p;
            if c == CR {
                match b.get(p + 1) {
                    None => partial!(Phase::Value),
                    Some(&LF) => p += 2,
                    Some(_) => return err(ErrorKind::LoneCr, p),
                }
            } else {
                self.bare_lf(p)?;
                p += 1;
            }
            // Trim trailing OWS, within this line's segment only.
            let mut e = term;
            while e > cur.seg && matches!(b.get(e - 1), Some(b' ' | b'\t')) {
                e -= 1;
            }
            if e > cur.seg {
                cur.vend = e;
            }
            if !cur.folding {
                cur.term = term;
            }
            let value = if cur.vstart == UNSET {
                (cur.term as u32, cur.term as u32)
            } else {
                (cur.vstart as u32, cur.vend as u32)
            };
            let span = FieldSpan { name: (cur.line_start as u32, cur.name_end as u32), value };
            if cur.folding {
                if let Some(last) = self.fields.last_mut() {
                    *last = span;
                }
            } else {
                self.fields.push(span);
            }
            phase = Phase::LineStart;
        }
    }

    #[inline(always)]
    fn complete(&mut self, b: &[u8], len: usize) -> Result<HeadStatus, Error> {
        if !self.special_far {
            // The common heads: no Content-Length or Transfer-Encoding
            // field, and Connection fields (if any) of one token each. No
            // body, nothing that can fail; `interpret` would reach the same
            // meaning through its accumulator (the property tests compare
            // both with the reference). Connection is the only one of the
            // three names 10 bytes long.
            let (mut close, mut keep) = (false, false);
            let mut m = self.special;
            while m != 0 {
                let Some(f) = self.fields.get(m.trailing_zeros() as usize) else { break };
                if f.name.1.wrapping_sub(f.name.0) != 10 {
                    break;
                }
                let v = b.get(f.value.0 as usize..f.value.1 as usize).unwrap_or_default();
                let Some((c, k)) = semantics::connection_single(v) else { break };
                close |= c;
                keep |= k;
                m &= m - 1;
            }
            if m == 0 {
                // `self.host` is UNSET or the index of a pushed field.
                let host = if self.host < self.fields.len() { self.host as u32 } else { semantics::NO_HOST };
                let m = Meaning {
                    framing: Framing::None,
                    keep_alive: semantics::keep_alive(self.version, close, keep),
                    host,
                    content_length: None,
                    signals: if host == semantics::NO_HOST { Signals::MISSING_HOST } else { Signals::NONE },
                };
                return Ok(self.done(m, len));
            }
        }
        self.interpret(b, len)
    }

    /// `complete` for heads with a field that bears on framing or the
    /// connection, out of line so the common case stays small.
    #[inline(never)]
    fn interpret(&mut self, b: &[u8], len: usize) -> Result<HeadStatus, Error> {
        let specials = if self.special_far {
            semantics::Specials::All
        } else {
            let host = (self.host != UNSET).then_some(self.host);
            semantics::Specials::Marked { host, rest: self.special }
        };
        let m = semantics::interpret(b, &self.fields, specials, self.version, self.opts.lenient)?;
        Ok(self.done(m, len))
    }

    #[inline(always)]
    fn done(&mut self, m: Meaning, len: usize) -> HeadStatus {
        self.signals.insert(m.signals);
        self.body = Body::new(m.framing);
        self.decided = Decided::new(&m);
        self.head_len = len;
        self.pos = len;
        self.st = St::Done;
        HeadStatus::Complete(len)
    }

    /// The head, once `parse_head` said `Complete` (slices into `buf`).
    /// Inlined: a view built in the caller's registers, not written out
    /// whole (about 130 bytes) and read back (callgrind: 100 of the ~520
    /// instructions of a minimal head went to building it).
    #[inline]
    pub fn head<'b>(&'b self, buf: &'b [u8]) -> Option<Head<'b>> {
        self.build_head(buf, Cow::Borrowed(&self.fields))
    }

    /// Inlined: passed out of line, the `Cow` was stored in parts and
    /// loaded whole, a store-forwarding stall that held a third of this
    /// function's samples on the request line.
    #[inline(always)]
    fn build_head<'b>(&self, buf: &'b [u8], fields: Cow<'b, [FieldSpan]>) -> Option<Head<'b>> {
        if self.st != St::Done || buf.len() < self.head_len {
            return None;
        }
        let m = &self.decided;
        Some(Head {
            method: simd::ascii_str(&buf[self.mstart..self.tstart - 1]),
            target: simd::ascii_str(&buf[self.tstart..self.tend]),
            version: self.version,
            framing: m.framing(),
            keep_alive: m.keep_alive,
            len: self.head_len,
            buf,
            fields,
            host: m.host,
            content_length: m.has_content_length.then_some(m.content_length),
        })
    }

    /// After the head: the body bytes as they arrive, each call only the new
    /// ones. Returns after at most one data segment.
    pub fn parse_body(&mut self, input: &[u8]) -> Result<BodyStatus, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.st != St::Done {
            return Ok(BodyStatus { consumed: 0, data: 0..0, done: false });
        }
        match self.body.parse(input, self.head_len + self.body_pos, &self.opts) {
            Ok(s) => {
                self.body_pos += s.consumed;
                Ok(s)
            }
            Err(e) => {
                self.error = Some(e);
                self.signals.set_error(e.kind);
                Err(e)
            }
        }
    }

    pub fn body_len(&self) -> u64 {
        self.body.body_len
    }

    pub fn chunks(&self) -> u64 {
        self.body.chunks
    }

    pub fn signals(&self) -> Signals {
        self.signals | self.body.signals
    }

    pub fn body_done(&self) -> bool {
        self.st == St::Done && self.body.done()
    }
}

impl Kernel for Parser {
    type Out = Result<HeadStatus, Error>;
    #[inline(always)]
    fn run<S: Scan>(&mut self, b: &[u8]) -> Self::Out {
        Parser::run::<S>(self, b)
    }
}

/// One-shot parse of a whole buffer: a head cut short is `IncompleteHead`;
/// a body cut short is `complete: false`; bytes after the message are left.
pub fn parse_request<'b>(buf: &'b [u8], opts: &Options) -> Result<Request<'b>, Error> {
    parse_request_with(&mut Parser::new(*opts), buf)
}

/// [`parse_request`] with a caller's parser (reset first), so that after an
/// error its [`Parser::signals`] tell what was met on the way.
pub fn parse_request_with<'b>(p: &mut Parser, buf: &'b [u8]) -> Result<Request<'b>, Error> {
    p.reset();
    let len = match p.parse_head(buf)? {
        HeadStatus::Complete(n) => n,
        HeadStatus::Partial => {
            let e = Error { kind: ErrorKind::IncompleteHead, offset: buf.len() };
            p.signals.set_error(e.kind);
            return Err(e);
        }
    };
    let mut rest = &buf[len..];
    let mut consumed = len;
    loop {
        if p.body_done() || rest.is_empty() {
            break;
        }
        let s = p.parse_body(rest)?;
        consumed += s.consumed;
        rest = &rest[s.consumed..];
        if s.consumed == 0 {
            break;
        }
    }
    let complete = p.body_done();
    let head = p.build_head(buf, Cow::Owned(p.fields.clone())).expect("complete head");
    Ok(Request { body_len: p.body_len(), complete, consumed, signals: p.signals(), head })
}
