//! The public vocabulary shared by the fast parser and the reference.

use std::borrow::Cow;
use std::fmt;

/// A set of tolerances, all off by default (strict). Names follow llhttp's
/// `lenient_*` flags where one exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lenient(pub u32);

impl Lenient {
    pub const NONE: Lenient = Lenient(0);
    /// Control bytes other than HTAB (but never CR or LF) in header values.
    pub const HEADERS: Lenient = Lenient(1 << 0);
    /// `Content-Length` together with `Transfer-Encoding`: the TE wins.
    pub const CHUNKED_LENGTH: Lenient = Lenient(1 << 1);
    /// A final coding other than `chunked`, or `chunked` not once and last.
    /// The body is then chunked if `chunked` appears at all, else absent.
    pub const TRANSFER_ENCODING: Lenient = Lenient(1 << 2);
    /// Any `HTTP/<digit>.<digit>`: reported as 1.1 if at least 1.1, else 1.0.
    pub const VERSION: Lenient = Lenient(1 << 3);
    /// Bare LF line ends (in the head, chunk framing and trailers).
    pub const OPTIONAL_CR_BEFORE_LF: Lenient = Lenient(1 << 4);
    /// Chunk data not followed by CRLF: the next chunk-size starts right away.
    pub const OPTIONAL_CRLF_AFTER_CHUNK: Lenient = Lenient(1 << 5);
    /// Spaces or tabs between the chunk size and its CRLF or `;`.
    pub const SPACES_AFTER_CHUNK_SIZE: Lenient = Lenient(1 << 6);
    /// obs-fold continuation lines: the value slice then spans the fold
    /// (CRLF and whitespace included); callers replace them with one SP.
    pub const OBS_FOLD: Lenient = Lenient(1 << 7);
    /// Spaces or tabs between a header name and its `:`.
    pub const SPACE_BEFORE_COLON: Lenient = Lenient(1 << 8);
    /// Differing duplicate `Content-Length`: the first one wins.
    pub const DUPLICATE_CONTENT_LENGTH: Lenient = Lenient(1 << 9);
    pub const ALL: Lenient = Lenient((1 << 10) - 1);

    const NAMES: [(&'static str, Lenient); 10] = [
        ("headers", Lenient::HEADERS),
        ("chunked-length", Lenient::CHUNKED_LENGTH),
        ("transfer-encoding", Lenient::TRANSFER_ENCODING),
        ("version", Lenient::VERSION),
        ("optional-cr-before-lf", Lenient::OPTIONAL_CR_BEFORE_LF),
        ("optional-crlf-after-chunk", Lenient::OPTIONAL_CRLF_AFTER_CHUNK),
        ("spaces-after-chunk-size", Lenient::SPACES_AFTER_CHUNK_SIZE),
        ("obs-fold", Lenient::OBS_FOLD),
        ("space-before-colon", Lenient::SPACE_BEFORE_COLON),
        ("duplicate-content-length", Lenient::DUPLICATE_CONTENT_LENGTH),
    ];

    /// Parses `"headers,obs-fold"` (kebab-case names of the consts; `all` and
    /// `none` too). The error names the bad one and lists the valid ones.
    pub fn from_names(s: &str) -> Result<Lenient, String> {
        let mut out = Lenient::NONE;
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            out = match name {
                "all" => out | Lenient::ALL,
                "none" => out,
                _ => match Self::NAMES.iter().find(|(n, _)| *n == name) {
                    Some(&(_, f)) => out | f,
                    None => {
                        let valid: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                        return Err(format!("unknown leniency {name:?}; valid: all, none, {}", valid.join(", ")));
                    }
                },
            };
        }
        Ok(out)
    }

    /// The kebab-case names of the flags set.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES.iter().filter(|(_, f)| self.contains(*f)).map(|(n, _)| *n).collect()
    }

    #[inline]
    pub fn contains(self, other: Lenient) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: Lenient) -> Lenient {
        Lenient(self.0 | other.0)
    }
}

impl std::ops::BitOr for Lenient {
    type Output = Lenient;
    fn bitor(self, rhs: Lenient) -> Lenient {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for Lenient {
    fn bitor_assign(&mut self, rhs: Lenient) {
        *self = self.union(rhs);
    }
}

/// Which scanner the fast parser uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Simd {
    /// The best the CPU has, detected once at run time.
    #[default]
    Auto,
    Avx2,
    Sse42,
    /// A byte-class table; no vector instructions.
    Portable,
}

impl Simd {
    /// The level actually used: `Auto` resolved, and a forced level the CPU
    /// lacks falls back to `Portable`.
    pub fn resolve(self) -> Simd {
        crate::simd::resolve(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub lenient: Lenient,
    /// Largest head (leading empty lines, request line, fields, final CRLF);
    /// also bounds a trailer section.
    pub max_head: usize,
    /// Most header fields (and, separately, trailer fields).
    pub max_headers: usize,
    pub simd: Simd,
}

impl Default for Options {
    fn default() -> Options {
        Options { lenient: Lenient::NONE, max_head: 64 * 1024, max_headers: 128, simd: Simd::Auto }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadStatus {
    Partial,
    /// The head's length, final CRLF included.
    Complete(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyStatus {
    pub consumed: usize,
    /// Body data inside `input[..consumed]`; may be empty.
    pub data: std::ops::Range<usize>,
    pub done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    Length(u64),
    Chunked,
}

/// Where one header field is in the buffer: name and value as
/// `[start, end)` byte offsets (value trimmed of OWS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FieldSpan {
    pub name: (u32, u32),
    pub value: (u32, u32),
}

/// A parsed head, borrowing the caller's buffer.
#[derive(Clone, Debug)]
pub struct Head<'b> {
    pub method: &'b str,
    pub target: &'b str,
    pub version: Version,
    pub framing: Framing,
    pub keep_alive: bool,
    /// Length of the head, leading empty lines and final CRLF included.
    pub len: usize,
    pub(crate) buf: &'b [u8],
    pub(crate) fields: Cow<'b, [FieldSpan]>,
    /// Index of the first Host field in `fields` (out of range: none).
    pub(crate) host: u32,
    pub(crate) content_length: Option<u64>,
}

impl<'b> Head<'b> {
    /// The fields in order, as (name, value) with the value trimmed.
    pub fn headers(&self) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + '_ {
        let buf = self.buf;
        self.fields.iter().map(move |f| span_pair(buf, f))
    }

    pub fn header_count(&self) -> usize {
        self.fields.len()
    }

    /// The first `Host` field's value.
    pub fn host(&self) -> Option<&'b [u8]> {
        self.fields.get(self.host as usize).map(|f| span_pair(self.buf, f).1)
    }

    /// The `Content-Length` in force (also when TE won under
    /// `CHUNKED_LENGTH`, this is what the field said).
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The longest header line, from the name to the end of the value
    /// (a folded value counts whole).
    pub fn longest_header_line(&self) -> usize {
        self.fields.iter().map(|f| (f.value.1.max(f.name.1) - f.name.0) as usize).max().unwrap_or(0)
    }

    /// The raw spans (offsets into the buffer).
    pub fn field_spans(&self) -> &[FieldSpan] {
        &self.fields
    }
}

#[inline]
fn span_pair<'b>(buf: &'b [u8], f: &FieldSpan) -> (&'b [u8], &'b [u8]) {
    (
        buf.get(f.name.0 as usize..f.name.1 as usize).unwrap_or_default(),
        buf.get(f.value.0 as usize..f.value.1 as usize).unwrap_or_default(),
    )
}

/// What [`crate::parse_request`] returns.
#[derive(Clone, Debug)]
pub struct Request<'b> {
    pub head: Head<'b>,
    pub body_len: u64,
    /// The whole message (head and body) was in the buffer.
    pub complete: bool,
    /// Where the message ends (or where the input did).
    pub consumed: usize,
    pub signals: Signals,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// Byte offset in the message where it was detected (for chunked body
    /// errors: from the message's first byte too).
    pub offset: usize,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.kind, self.offset)
    }
}

impl std::error::Error for Error {}

macro_rules! error_kinds {
    ($( $v:ident = $name:literal, $status:literal, $msg:literal; )*) => {
        /// One variant per distinct reason a request is refused.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum ErrorKind { $( $v, )* }

        impl ErrorKind {
            pub const ALL: &'static [ErrorKind] = &[$( ErrorKind::$v, )*];
            /// A stable kebab-case name (a JSON key).
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorKind::$v => $name, )* }
            }
            /// The status a server would answer with.
            pub fn status(self) -> u16 {
                match self { $( ErrorKind::$v => $status, )* }
            }
            fn message(self) -> &'static str {
                match self { $( ErrorKind::$v => $msg, )* }
            }
        }
    };
}

error_kinds! {
    IncompleteHead = "incomplete-head", 400, "The input ended inside the request head.";
    InvalidMethod = "invalid-method", 400, "The method is empty or not a token.";
    InvalidTarget = "invalid-target", 400, "The request target is empty, has a byte outside 0x21-0x7E, or is not origin-, absolute-, asterisk- or (CONNECT only) authority-form.";
    InvalidVersion = "invalid-version", 400, "The version is missing or not HTTP/1.0 or HTTP/1.1.";
    BareLf = "bare-lf", 400, "A line ends in LF without CR.";
    LoneCr = "lone-cr", 400, "A CR is not followed by LF.";
    InvalidHeaderName = "invalid-header-name", 400, "A header name is empty, not a token, or has no colon.";
    SpaceBeforeColon = "space-before-colon", 400, "Whitespace between a header name and its colon.";
    InvalidHeaderValue = "invalid-header-value", 400, "A header value holds a control byte.";
    ObsFold = "obs-fold", 400, "A header line starts with whitespace (obs-fold).";
    HeadTooLarge = "head-too-large", 431, "The request head (or trailer section) is larger than the limit.";
    TooManyHeaders = "too-many-headers", 431, "More header (or trailer) fields than the limit.";
    InvalidContentLength = "invalid-content-length", 400, "Content-Length is not a plain decimal number that fits in 64 bits.";
    ConflictingContentLength = "conflicting-content-length", 400, "Content-Length fields with different values.";
    InvalidTransferEncoding = "invalid-transfer-encoding", 400, "Transfer-Encoding is empty or has an element that is not a token.";
    UnknownTransferCoding = "unknown-transfer-coding", 501, "Transfer-Encoding names a coding this parser does not know.";
    ChunkedNotLast = "chunked-not-last", 400, "Transfer-Encoding does not end in chunked, or names chunked more than once.";
    TransferEncodingHttp10 = "transfer-encoding-http10", 400, "Transfer-Encoding in an HTTP/1.0 request.";
    ContentLengthWithTransferEncoding = "content-length-with-transfer-encoding", 400, "Both Content-Length and Transfer-Encoding.";
    InvalidChunkSize = "invalid-chunk-size", 400, "A chunk size is empty or not hexadecimal, or is followed by junk.";
    ChunkSizeTooLong = "chunk-size-too-long", 400, "A chunk size has more than 16 hex digits.";
    InvalidChunkExtension = "invalid-chunk-extension", 400, "A chunk extension is not `;name[=token|quoted-string]`.";
    MissingCrlfAfterChunk = "missing-crlf-after-chunk", 400, "Chunk data is not followed by CRLF.";
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// Every anomaly met in this message: tolerated leniencies, accepted
/// oddities, and (in the top byte) the [`ErrorKind`] that ended parsing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals(pub u32);

impl Signals {
    pub const NONE: Signals = Signals(0);
    pub const LEADING_EMPTY_LINES: Signals = Signals(1 << 0);
    pub const MISSING_HOST: Signals = Signals(1 << 1);
    pub const BARE_LF: Signals = Signals(1 << 2);
    pub const OBS_FOLD: Signals = Signals(1 << 3);
    pub const SPACE_BEFORE_COLON: Signals = Signals(1 << 4);
    pub const CTL_IN_VALUE: Signals = Signals(1 << 5);
    pub const CL_AND_TE: Signals = Signals(1 << 6);
    pub const BAD_TRANSFER_ENCODING: Signals = Signals(1 << 7);
    pub const OTHER_VERSION: Signals = Signals(1 << 8);
    pub const SPACES_AFTER_CHUNK_SIZE: Signals = Signals(1 << 9);
    pub const MISSING_CRLF_AFTER_CHUNK: Signals = Signals(1 << 10);
    /// Differing duplicate Content-Length, tolerated (first wins).
    pub const CONFLICTING_CONTENT_LENGTH: Signals = Signals(1 << 11);
    /// The same Content-Length given more than once (always accepted).
    pub const REPEATED_CONTENT_LENGTH: Signals = Signals(1 << 12);

    const NAMES: [(&'static str, Signals); 13] = [
        ("leading-empty-lines", Signals::LEADING_EMPTY_LINES),
        ("missing-host", Signals::MISSING_HOST),
        ("bare-lf", Signals::BARE_LF),
        ("obs-fold", Signals::OBS_FOLD),
        ("space-before-colon", Signals::SPACE_BEFORE_COLON),
        ("ctl-in-value", Signals::CTL_IN_VALUE),
        ("cl-and-te", Signals::CL_AND_TE),
        ("bad-transfer-encoding", Signals::BAD_TRANSFER_ENCODING),
        ("other-version", Signals::OTHER_VERSION),
        ("spaces-after-chunk-size", Signals::SPACES_AFTER_CHUNK_SIZE),
        ("missing-crlf-after-chunk", Signals::MISSING_CRLF_AFTER_CHUNK),
        ("conflicting-content-length", Signals::CONFLICTING_CONTENT_LENGTH),
        ("repeated-content-length", Signals::REPEATED_CONTENT_LENGTH),
    ];

    #[inline]
    pub fn contains(self, other: Signals) -> bool {
        self.0 & other.0 == other.0
    }

    #[inline]
    pub fn insert(&mut self, other: Signals) {
        self.0 |= other.0;
    }

    /// The error that ended parsing, if one did.
    pub fn error(self) -> Option<ErrorKind> {
        let i = (self.0 >> 24) as usize;
        i.checked_sub(1).and_then(|i| ErrorKind::ALL.get(i).copied())
    }

    pub(crate) fn set_error(&mut self, kind: ErrorKind) {
        self.0 = (self.0 & 0x00FF_FFFF) | ((kind as u32 + 1) << 24);
    }

    /// The names of the anomalies (and the error's `as_str`, last).
    pub fn names(self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = Self::NAMES.iter().filter(|(_, s)| self.contains(*s)).map(|(n, _)| *n).collect();
        if let Some(k) = self.error() {
            v.push(k.as_str());
        }
        v
    }
}

impl std::ops::BitOr for Signals {
    type Output = Signals;
    fn bitor(self, rhs: Signals) -> Signals {
        Signals(self.0 | rhs.0)
    }
}

/// RFC 9110 tchar.
pub(crate) const fn is_tchar(b: u8) -> bool {
    matches!(b, b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        || b.is_ascii_alphanumeric()
}

/// A header value byte: HTAB, SP, VCHAR, obs-text.
pub(crate) const fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7F)
}

/// A request-target byte.
pub(crate) const fn is_target_byte(b: u8) -> bool {
    b >= 0x21 && b <= 0x7E
}
