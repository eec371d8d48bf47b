//! The fast path's reading of what the fields mean for framing and the
//! connection, and of the request target's form. The reference reads them
//! its own way (`reference/meaning.rs`); the property tests compare the two.

use crate::types::*;

/// `Meaning::host` when no field is Host.
pub(crate) const NO_HOST: u32 = u32::MAX;

pub(crate) struct Meaning {
    pub framing: Framing,
    pub keep_alive: bool,
    /// The first Host field's index in the field list, or [`NO_HOST`]: an
    /// index, not a copy of the span, because a 20-byte `Option<FieldSpan>`
    /// written in parts and read back whole stalled store forwarding (perf
    /// put two of `interpret`'s top samples on such loads).
    pub host: u32,
    pub content_length: Option<u64>,
    pub signals: Signals,
}

#[inline]
fn get(buf: &[u8], r: (u32, u32)) -> &[u8] {
    buf.get(r.0 as usize..r.1 as usize).unwrap_or_default()
}

/// Transfer codings we know the name of; any other is answered 501.
const KNOWN_CODINGS: [&[u8]; 6] = [b"chunked", b"gzip", b"deflate", b"compress", b"x-gzip", b"x-compress"];

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Content-Length: digits only, at least one, fits in u64. A list form
/// (`5, 5`) is refused: RFC 9110 lets a recipient accept it, we do not.
fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &c in v {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(n)
}

/// Which of the four fields that matter a name is. Names are tchars only,
/// and among tchars OR-ing 0x20 maps exactly the upper-case letters onto
/// the lower-case ones and leaves `-` alone: so one OR and one compare per
/// word is an exact case-insensitive match. Length first: most names fail there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    Host,
    Connection,
    ContentLength,
    TransferEncoding,
    Other,
}

#[inline(always)]
fn word<const N: usize>(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w[..N].copy_from_slice(&b[at..at + N]);
    u64::from_le_bytes(w) | (0x2020_2020_2020_2020 & (u64::MAX >> (64 - 8 * N)))
}

#[inline(always)]
fn lit<const N: usize>(s: &[u8; N]) -> u64 {
    let mut w = [0u8; 8];
    w[..N].copy_from_slice(s);
    u64::from_le_bytes(w)
}

/// Bit `n` set: some name of length `n` is one of the four.
const KNOWN_LENS: u32 = (1 << 4) | (1 << 10) | (1 << 14) | (1 << 17);

/// Whether a name of `len` bytes may be one of the four fields `interpret`
/// reads: most names are of none of the four lengths, one shift and test.
#[inline(always)]
pub(crate) fn maybe_special(len: usize) -> bool {
    len <= 17 && (1u32 << len) & KNOWN_LENS != 0
}

/// Which of the four fields `interpret` reads `name` is, if any. The fast
/// parser asks this as it scans each name, while the bytes are at hand, so
/// that `interpret` visits only those fields (measured: cheaper than marking
/// by length alone and leaving `interpret` to compare the bytes of every
/// field of a candidate length, such as `User-Agent` or `Keep-Alive`).
#[inline(always)]
pub(crate) fn known(name: &[u8]) -> Known {
    if !maybe_special(name.len()) {
        return Known::Other;
    }
    match name.len() {
        4 if word::<4>(name, 0) == lit(b"host") => Known::Host,
        10 if word::<8>(name, 0) == lit(b"connecti") && word::<2>(name, 8) == lit(b"on") => Known::Connection,
        14 if word::<8>(name, 0) == lit(b"content-") && word::<6>(name, 8) == lit(b"length") => Known::ContentLength,
        17 if word::<8>(name, 0) == lit(b"transfer")
            && word::<8>(name, 8) == lit(b"-encodin")
            && word::<1>(name, 16) == lit(b"g") =>
        {
            Known::TransferEncoding
        }
        _ => Known::Other,
    }
}

/// (`close`, `keep-alive`) for one Connection token. The OR-0x20 compare is
/// exact here too: the only other byte it maps onto a letter or `-` is CR,
/// which is never inside a value.
#[inline]
fn connection_token(t: &[u8]) -> (bool, bool) {
    match t.len() {
        5 => (word::<5>(t, 0) == lit(b"close"), false),
        10 => (false, word::<8>(t, 0) == lit(b"keep-ali") && word::<2>(t, 8) == lit(b"ve")),
        _ => (false, false),
    }
}

/// (`close`, `keep-alive`) for a Connection value that is one token, or
/// `None` for a list. The common single token goes without the list
/// machinery: a value that is exactly `close` or `keep-alive` has no comma,
/// and one with no comma is one token (as the list loop would see).
#[inline(always)]
pub(crate) fn connection_single(v: &[u8]) -> Option<(bool, bool)> {
    let (c, k) = connection_token(v);
    (c || k || !v.contains(&b',')).then_some((c, k))
}

/// Whether the connection stays open after this request.
#[inline(always)]
pub(crate) fn keep_alive(version: Version, close: bool, keep: bool) -> bool {
    match version {
        Version::Http11 => !close,
        Version::Http10 => keep && !close,
    }
}

/// Reads the fields that decide framing, keep-alive and Host, in order; the
/// first offending field is the one reported (offset: its value's start).
/// What the fields said so far (see `interpret`).
struct Acc {
    signals: Signals,
    host: u32,
    cl: Option<u64>,
    te_first: Option<usize>,
    te_last: usize,
    chunked_count: u32,
    last_is_chunked: bool,
    close: bool,
    keep: bool,
}

impl Default for Acc {
    fn default() -> Acc {
        Acc {
            signals: Signals::NONE,
            host: NO_HOST,
            cl: None,
            te_first: None,
            te_last: 0,
            chunked_count: 0,
            last_is_chunked: false,
            close: false,
            keep: false,
        }
    }
}

impl Acc {
    #[inline(always)]
    fn field(&mut self, buf: &[u8], i: usize, f: &FieldSpan, lenient: Lenient) -> Result<(), Error> {
        let Acc { signals, host, cl, te_first, te_last, chunked_count, last_is_chunked, close, keep } = self;
        let at = f.value.0 as usize;
        match known(get(buf, f.name)) {
            Known::Other => {}
            Known::Host => {
                if *host == NO_HOST {
                    *host = i as u32;
                }
            }
            Known::Connection => {
                let v = get(buf, f.value);
                if let Some((c, k)) = connection_single(v) {
                    *close |= c;
                    *keep |= k;
                } else {
                    for t in v.split(|&c| c == b',') {
                        let (c, k) = connection_token(trim_ows(t));
                        *close |= c;
                        *keep |= k;
                    }
                }
            }
            Known::ContentLength => {
                let n = content_length(get(buf, f.value))
                    .ok_or(Error { kind: ErrorKind::InvalidContentLength, offset: at })?;
                match *cl {
                    None => *cl = Some(n),
                    Some(old) if old == n => signals.insert(Signals::REPEATED_CONTENT_LENGTH),
                    Some(_) if lenient.contains(Lenient::DUPLICATE_CONTENT_LENGTH) => {
                        signals.insert(Signals::CONFLICTING_CONTENT_LENGTH)
                    }
                    Some(_) => return Err(Error { kind: ErrorKind::ConflictingContentLength, offset: at }),
                }
            }
            Known::TransferEncoding => {
                te_first.get_or_insert(at);
                *te_last = at;
                let mut any = false;
                // Empty list elements are allowed by the list rule (RFC 9110 5.6.1).
                for t in get(buf, f.value).split(|&c| c == b',').map(trim_ows).filter(|t| !t.is_empty()) {
                    any = true;
                    if !t.iter().all(|&c| is_tchar(c)) {
                        return Err(Error { kind: ErrorKind::InvalidTransferEncoding, offset: at });
                    }
                    if !KNOWN_CODINGS.iter().any(|k| t.eq_ignore_ascii_case(k)) {
                        return Err(Error { kind: ErrorKind::UnknownTransferCoding, offset: at });
                    }
                    *last_is_chunked = t.eq_ignore_ascii_case(b"chunked");
                    *chunked_count += u32::from(*last_is_chunked);
                }
                if !any {
                    return Err(Error { kind: ErrorKind::InvalidTransferEncoding, offset: at });
                }
            }
        }
        Ok(())
    }
}

/// Which fields `interpret` must read.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Specials {
    /// Any of them: look at every name.
    All,
    /// The first `Host` field (its index, if any), and the Connection,
    /// Content-Length and Transfer-Encoding fields: those whose index is a
    /// set bit (all of them below 64). The first `Host` is all `interpret`
    /// takes from Host fields, and it cannot fail, so the caller finding it
    /// saves a visit without changing which error comes first.
    Marked { host: Option<usize>, rest: u64 },
}

#[inline]
pub(crate) fn interpret(
    buf: &[u8],
    fields: &[FieldSpan],
    specials: Specials,
    version: Version,
    lenient: Lenient,
) -> Result<Meaning, Error> {
    let mut acc = Acc::default();
    match specials {
        Specials::All => {
            for (i, f) in fields.iter().enumerate() {
                if maybe_special(f.name.1.wrapping_sub(f.name.0) as usize) {
                    acc.field(buf, i, f, lenient)?;
                }
            }
        }
        Specials::Marked { host, rest: mut m } => {
            acc.host = host.filter(|&i| i < fields.len()).map_or(NO_HOST, |i| i as u32);
            // In index order, as the full walk: the first offender is the one reported.
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                if let Some(f) = fields.get(i) {
                    acc.field(buf, i, f, lenient)?;
                }
                m &= m - 1;
            }
        }
    }
    let Acc { mut signals, host, cl, te_first, te_last, chunked_count, last_is_chunked, close, keep } = acc;
    if host == NO_HOST {
        signals.insert(Signals::MISSING_HOST);
    }
    let framing = if let Some(te_at) = te_first {
        if version == Version::Http10 {
            return Err(Error { kind: ErrorKind::TransferEncodingHttp10, offset: te_at });
        }
        if cl.is_some() {
            if !lenient.contains(Lenient::CHUNKED_LENGTH) {
                return Err(Error { kind: ErrorKind::ContentLengthWithTransferEncoding, offset: te_at });
            }
            signals.insert(Signals::CL_AND_TE);
        }
        if chunked_count == 1 && last_is_chunked {
            Framing::Chunked
        } else if lenient.contains(Lenient::TRANSFER_ENCODING) {
            signals.insert(Signals::BAD_TRANSFER_ENCODING);
            if chunked_count > 0 {
                Framing::Chunked
            } else {
                Framing::None
            }
        } else {
            return Err(Error { kind: ErrorKind::ChunkedNotLast, offset: te_last });
        }
    } else {
        match cl {
            Some(n) => Framing::Length(n),
            None => Framing::None,
        }
    };
    let keep_alive = keep_alive(version, close, keep);
    Ok(Meaning { framing, keep_alive, host, content_length: cl, signals })
}

/// Whether `target` (non-empty, bytes 0x21-0x7E) has a form allowed for `method`.
/// The origin form (`/...`) of any method but CONNECT is decided inline;
/// the rest out of line.
#[inline(always)]
pub(crate) fn target_ok(method: &[u8], target: &[u8]) -> bool {
    if target.first() == Some(&b'/') && method.len() != 7 {
        return true;
    }
    target_ok_other(method, target)
}

#[inline(never)]
fn target_ok_other(method: &[u8], target: &[u8]) -> bool {
    if method == b"CONNECT" {
        return authority_form(target);
    }
    match target {
        [b'/', ..] | [b'*'] => true,
        _ => absolute_form(target),
    }
}

/// `scheme "://" ...`: requiring the authority's `//` is what tells an
/// absolute target apart from `host:port`, which is CONNECT's alone.
fn absolute_form(t: &[u8]) -> bool {
    let Some((&first, rest)) = t.split_first() else { return false };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    let n = rest.iter().take_while(|&&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.')).count();
    rest[n..].starts_with(b"://")
}

/// `host ":" port`, port 1*DIGIT, host non-empty without `/?#@`.
fn authority_form(t: &[u8]) -> bool {
    let Some(colon) = t.iter().rposition(|&c| c == b':') else { return false };
    let (host, port) = (&t[..colon], &t[colon + 1..]);
    !host.is_empty()
        && !port.is_empty()
        && port.iter().all(u8::is_ascii_digit)
        && !host.iter().any(|c| matches!(c, b'/' | b'?' | b'#' | b'@'))
}
