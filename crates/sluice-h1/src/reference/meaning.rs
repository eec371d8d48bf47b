//! The reference's reading of the fields that decide framing and the
//! connection, and of the request target's form: every field in order,
//! names compared case-insensitively as strings, values split as lists.
//! Written apart from the fast path's `semantics.rs` (which marks the few
//! fields while scanning and compares words) so that the property tests
//! compare two readings.

use super::chars::tchar;
use crate::types::*;

pub(super) struct Meaning {
    pub framing: Framing,
    pub keep_alive: bool,
    pub signals: Signals,
}

/// Transfer codings we know the name of; any other is answered 501.
const KNOWN_CODINGS: [&str; 6] = ["chunked", "gzip", "deflate", "compress", "x-gzip", "x-compress"];

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&c| c != b' ' && c != b'\t').unwrap_or(s.len());
    let end = s.iter().rposition(|&c| c != b' ' && c != b'\t').map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

/// A list value's elements, trimmed.
fn elements(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&c| c == b',').map(trim)
}

/// 1*DIGIT that fits in a u64 (no sign, no list form).
fn content_length(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(super) fn interpret(
    buf: &[u8],
    fields: &[FieldSpan],
    version: Version,
    lenient: Lenient,
) -> Result<Meaning, Error> {
    let text = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
    let mut signals = Signals::NONE;
    let mut host = false;
    let mut length: Option<u64> = None;
    // (value offset of each Transfer-Encoding field, its codings)
    let mut te: Vec<(usize, Vec<&[u8]>)> = Vec::new();
    let (mut close, mut keep) = (false, false);
    for f in fields {
        let name = text(f.name).to_ascii_lowercase();
        let value = text(f.value);
        let at = f.value.0 as usize;
        match &name[..] {
            b"host" => host = true,
            b"connection" => {
                for t in elements(value) {
                    close |= t.eq_ignore_ascii_case(b"close");
                    keep |= t.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            b"content-length" => {
                let n = content_length(value).ok_or(Error { kind: ErrorKind::InvalidContentLength, offset: at })?;
                match length {
                    None => length = Some(n),
                    Some(m) if m == n => signals.insert(Signals::REPEATED_CONTENT_LENGTH),
                    Some(_) if lenient.contains(Lenient::DUPLICATE_CONTENT_LENGTH) => {
                        signals.insert(Signals::CONFLICTING_CONTENT_LENGTH)
                    }
                    Some(_) => return Err(Error { kind: ErrorKind::ConflictingContentLength, offset: at }),
                }
            }
            b"transfer-encoding" => {
                // Empty list elements are allowed (RFC 9110 5.6.1); a field
                // with none at all is not.
                let codings: Vec<&[u8]> = elements(value).filter(|t| !t.is_empty()).collect();
                if codings.is_empty() {
                    return Err(Error { kind: ErrorKind::InvalidTransferEncoding, offset: at });
                }
                // Each coding in turn: the first bad one decides the error.
                for t in &codings {
                    if !t.iter().all(|&c| tchar(c)) {
                        return Err(Error { kind: ErrorKind::InvalidTransferEncoding, offset: at });
                    }
                    if !KNOWN_CODINGS.iter().any(|k| t.eq_ignore_ascii_case(k.as_bytes())) {
                        return Err(Error { kind: ErrorKind::UnknownTransferCoding, offset: at });
                    }
                }
                te.push((at, codings));
            }
            _ => {}
        }
    }
    if !host {
        signals.insert(Signals::MISSING_HOST);
    }
    let framing = match (te.first(), te.last()) {
        (Some(&(first, _)), Some((last, _))) => {
            if version == Version::Http10 {
                return Err(Error { kind: ErrorKind::TransferEncodingHttp10, offset: first });
            }
            if length.is_some() {
                if !lenient.contains(Lenient::CHUNKED_LENGTH) {
                    return Err(Error { kind: ErrorKind::ContentLengthWithTransferEncoding, offset: first });
                }
                signals.insert(Signals::CL_AND_TE);
            }
            let all: Vec<&[u8]> = te.iter().flat_map(|(_, c)| c.iter().copied()).collect();
            let chunked = all.iter().filter(|t| t.eq_ignore_ascii_case(b"chunked")).count();
            let chunked_last = all.last().is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            if chunked == 1 && chunked_last {
                Framing::Chunked
            } else if lenient.contains(Lenient::TRANSFER_ENCODING) {
                signals.insert(Signals::BAD_TRANSFER_ENCODING);
                if chunked > 0 {
                    Framing::Chunked
                } else {
                    Framing::None
                }
            } else {
                return Err(Error { kind: ErrorKind::ChunkedNotLast, offset: *last });
            }
        }
        _ => length.map_or(Framing::None, Framing::Length),
    };
    let keep_alive = match version {
        Version::Http11 => !close,
        Version::Http10 => keep && !close,
    };
    Ok(Meaning { framing, keep_alive, signals })
}

/// Whether `target` has a form `method` allows: CONNECT takes only the
/// authority form `host:port`; the others the origin form (`/...`), `*`,
/// or the absolute form `scheme://...`.
pub(super) fn target_ok(method: &[u8], target: &[u8]) -> bool {
    let Ok(t) = std::str::from_utf8(target) else { return false };
    if method == b"CONNECT" {
        let Some((host, port)) = t.rsplit_once(':') else { return false };
        return !host.is_empty()
            && !port.is_empty()
            && port.bytes().all(|c| c.is_ascii_digit())
            && !host.contains(['/', '?', '#', '@']);
    }
    if t.starts_with('/') || t == "*" {
        return true;
    }
    match t.split_once("://") {
        Some((scheme, _)) => {
            let mut b = scheme.bytes();
            b.next().is_some_and(|c| c.is_ascii_alphabetic())
                && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
        }
        None => false,
    }
}
