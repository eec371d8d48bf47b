//! Request framing for the server's own needs: where each request head ends,
//! its method, target and version, how many body bytes follow
//! (`Content-Length`) and whether the connection stays open. It is strict
//! (CRLF line ends, no obs-fold, token methods and header names, one version
//! form) because a lenient framer is how request smuggling starts; anything it
//! does not understand is a 400 and the connection closes. A full parser is a
//! separate piece of work; this one only has to frame correctly.

use std::ops::Range;

/// Default bound on a request head (request line plus headers plus the blank line).
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// One parsed request head. `method` and `target` are byte ranges into the
/// buffer the head was parsed from, so parsing allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: Range<usize>,
    pub target: Range<usize>,
    pub version: Version,
    /// Body bytes that follow the head (0 without `Content-Length`).
    pub content_length: u64,
    /// False after `Connection: close`, or for HTTP/1.0 without `Connection: keep-alive`.
    pub keep_alive: bool,
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
}

impl Head {
    pub fn is_head_method(&self, buf: &[u8]) -> bool {
        &buf[self.method.clone()] == b"HEAD"
    }
}

/// Why a request was refused: the status the server answers with before closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("request head larger than the limit")]
    HeadTooLarge,
}

impl FrameError {
    pub fn status(self) -> u16 {
        match self {
            FrameError::BadRequest(_) => 400,
            FrameError::HeadTooLarge => 431,
        }
    }
}

/// RFC 9110 `tchar`: what methods and header names are made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parse one complete request head at the start of `buf`. `Ok(None)`: not
/// complete yet (and within `max_head`); the caller reads more and retries.
pub fn parse_head(buf: &[u8], max_head: usize) -> Result<Option<Head>, FrameError> {
    parse_head_from(buf, max_head, 0)
}

/// [`parse_head`], knowing the first `scanned` bytes were seen before without
/// an end of head or a bad byte: a head arriving a few bytes per read is then
/// scanned once in all, not once per read.
fn parse_head_from(buf: &[u8], max_head: usize, scanned: usize) -> Result<Option<Head>, FrameError> {
    let limit = buf.len().min(max_head);
    let from = scanned.saturating_sub(3).min(limit);
    let end = match find_head_end(&buf[from..limit]) {
        Some(end) => from + end,
        None if buf.len() >= max_head => return Err(FrameError::HeadTooLarge),
        None => {
            // Fail early on bytes no head may hold, rather than waiting for
            // 16 KiB of garbage: a bare LF or a control byte in what we have.
            check_partial(buf, scanned.min(buf.len()))?;
            return Ok(None);
        }
    };
    let head = &buf[..end - 2]; // each line still ends in CRLF
    let mut lines = Lines { buf: head, pos: 0 };
    let line = lines.next_line()?.ok_or(FrameError::BadRequest("empty request line"))?;

    // request-line = method SP request-target SP HTTP-version
    let sp1 = line.clone().find(|&i| head[i] == b' ').ok_or(FrameError::BadRequest("no target"))?;
    let method = line.start..sp1;
    if method.is_empty() || !head[method.clone()].iter().all(|&b| is_tchar(b)) {
        return Err(FrameError::BadRequest("bad method"));
    }
    let sp2 = (sp1 + 1..line.end).find(|&i| head[i] == b' ').ok_or(FrameError::BadRequest("no version"))?;
    let target = sp1 + 1..sp2;
    if target.is_empty() || !head[target.clone()].iter().all(|&b| (0x21..=0x7e).contains(&b)) {
        return Err(FrameError::BadRequest("bad target"));
    }
    let version = match &head[sp2 + 1..line.end] {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        _ => return Err(FrameError::BadRequest("unsupported version")),
    };

    let mut content_length: Option<u64> = None;
    let mut close = false;
    let mut keep_alive_token = false;
    while let Some(line) = lines.next_line()? {
        let l = &head[line];
        let colon = l.iter().position(|&b| b == b':').ok_or(FrameError::BadRequest("header without colon"))?;
        let name = &l[..colon];
        // Also refuses obs-fold (a line starting with SP or HTAB) and
        // whitespace before the colon, both smuggling vectors.
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(FrameError::BadRequest("bad header name"));
        }
        let value = trim_ows(&l[colon + 1..]);
        if !value.iter().all(|&b| b == b'\t' || b >= 0x20 && b != 0x7f) {
            return Err(FrameError::BadRequest("bad header value"));
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
                return Err(FrameError::BadRequest("bad content-length"));
            }
            let n = value.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
            // Two different lengths: which one frames the body is ambiguous.
            if content_length.is_some_and(|c| c != n) {
                return Err(FrameError::BadRequest("conflicting content-length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Chunked bodies are not framed here; guessing would desynchronise
            // the connection, so refuse instead.
            return Err(FrameError::BadRequest("transfer-encoding not supported"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim_ows) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let keep_alive = !close && (version == Version::Http11 || keep_alive_token);
    Ok(Some(Head { method, target, version, content_length: content_length.unwrap_or(0), keep_alive, len: end }))
}

fn check_partial(buf: &[u8], from: usize) -> Result<(), FrameError> {
    for (i, &b) in buf.iter().enumerate().skip(from) {
        if b == b'\n' && (i == 0 || buf[i - 1] != b'\r') {
            return Err(FrameError::BadRequest("bare LF"));
        }
        if b < 0x20 && b != b'\r' && b != b'\n' && b != b'\t' || b == 0x7f {
            return Err(FrameError::BadRequest("control byte in head"));
        }
    }
    Ok(())
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// CRLF-terminated lines of a head; a CR or LF anywhere else is an error.
struct Lines<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Lines<'_> {
    fn next_line(&mut self) -> Result<Option<Range<usize>>, FrameError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let mut i = start;
        while i < self.buf.len() {
            match self.buf[i] {
                b'\r' => {
                    if self.buf.get(i + 1) != Some(&b'\n') {
                        return Err(FrameError::BadRequest("bare CR"));
                    }
                    self.pos = i + 2;
                    return Ok(Some(start..i));
                }
                b'\n' => return Err(FrameError::BadRequest("bare LF")),
                _ => i += 1,
            }
        }
        Err(FrameError::BadRequest("unterminated line"))
    }
}

/// What one [`Framer::step`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A complete head; `consumed` bytes (the head) are done with.
    Request(Head),
    /// `n` body bytes of the current request were skipped.
    Body(usize),
    /// Nothing complete in the buffer: read more.
    NeedMore,
}

/// Walks a byte stream request by request: heads are parsed, bodies skipped
/// (which may span many reads). The caller drops the consumed bytes from the
/// front of its buffer after each step.
#[derive(Debug)]
pub struct Framer {
    body_left: u64,
    max_head: usize,
    /// Bytes of the current partial head already scanned (the caller only
    /// appends to an unfinished head, never changes it).
    scanned: usize,
}

impl Framer {
    pub fn new(max_head: usize) -> Self {
        Framer { body_left: 0, max_head, scanned: 0 }
    }

    /// Consumed bytes: `Request(h)` → `h.len`, `Body(n)` → `n`, `NeedMore` → 0.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, FrameError> {
        if self.body_left > 0 {
            if buf.is_empty() {
                return Ok(Step::NeedMore);
            }
            let n = (buf.len() as u64).min(self.body_left) as usize;
            self.body_left -= n as u64;
            return Ok(Step::Body(n));
        }
        match parse_head_from(buf, self.max_head, self.scanned)? {
            Some(h) => {
                self.body_left = h.content_length;
                self.scanned = 0;
                Ok(Step::Request(h))
            }
            None => {
                self.scanned = buf.len();
                Ok(Step::NeedMore)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(s: &str) -> Result<Option<Head>, FrameError> {
        parse_head(s.as_bytes(), DEFAULT_MAX_HEAD)
    }

    #[test]
    fn parses_a_simple_get() {
        let s = "GET /x?y=1 HTTP/1.1\r\nHost: a\r\n\r\nrest";
        let h = one(s).unwrap().unwrap();
        assert_eq!(&s[h.method.clone()], "GET");
        assert_eq!(&s[h.target.clone()], "/x?y=1");
        assert_eq!(h.version, Version::Http11);
        assert!(h.keep_alive);
        assert_eq!(h.len, s.len() - 4);
    }

    #[test]
    fn connection_semantics() {
        assert!(!one("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(!one("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(!one("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(one("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap().unwrap().keep_alive);
    }

    #[test]
    fn partial_heads_wait() {
        assert_eq!(one("GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        assert_eq!(one(""), Ok(None));
    }

    #[test]
    fn malformed_is_400() {
        for s in [
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET /  HTTP/1.1\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "\r\n\r\n",
            "GET\r\n\r\n",
            "\x16\x03\x01",
        ] {
            assert!(matches!(one(s), Err(FrameError::BadRequest(_))), "{s:?}: {:?}", one(s));
        }
    }

    #[test]
    fn oversized_head_is_431() {
        let s = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(DEFAULT_MAX_HEAD));
        assert_eq!(one(&s), Err(FrameError::HeadTooLarge));
        // A head that fits exactly is fine.
        let mut s = String::from("GET / HTTP/1.1\r\nX: ");
        s.push_str(&"a".repeat(DEFAULT_MAX_HEAD - s.len() - 4));
        s.push_str("\r\n\r\n");
        assert_eq!(s.len(), DEFAULT_MAX_HEAD);
        assert!(one(&s).unwrap().is_some());
    }

    #[test]
    fn bodies_are_skipped() {
        let s = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n\r\n";
        let expected = Ok(vec![req("POST", "/a", 5, true), req("GET", "/b", 0, true)]);
        assert_eq!(frame_all(s, &[]), expected);
        // One byte per read: the incremental scan must not miss a CRLF CRLF
        // that straddles reads.
        assert_eq!(frame_all(s, &(0..s.len()).collect::<Vec<_>>()), expected);
        // A bad byte arriving late in a partial head is still caught.
        assert!(frame_all(b"GET / HTTP/1.1\r\nX: a\x01", &[5, 10, 17]).is_err());
    }

    type Req = (String, String, u64, bool);

    fn req(m: &str, t: &str, cl: u64, ka: bool) -> Req {
        (m.into(), t.into(), cl, ka)
    }

    /// Feed `input` in pieces cut at `cuts` (a byte stream arriving in reads),
    /// keeping unconsumed bytes like the server does; returns the requests.
    fn frame_all(input: &[u8], cuts: &[usize]) -> Result<Vec<Req>, FrameError> {
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
        bounds.push(input.len());
        bounds.sort_unstable();
        let mut framer = Framer::new(DEFAULT_MAX_HEAD);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut prev = 0;
        for b in bounds {
            buf.extend_from_slice(&input[prev..b]);
            prev = b;
            loop {
                match framer.step(&buf)? {
                    Step::NeedMore => break,
                    Step::Body(n) => drop(buf.drain(..n)),
                    Step::Request(h) => {
                        let s = |r: Range<usize>| String::from_utf8(buf[r].to_vec()).unwrap();
                        out.push((s(h.method.clone()), s(h.target.clone()), h.content_length, h.keep_alive));
                        buf.drain(..h.len);
                    }
                }
            }
        }
        Ok(out)
    }

    fn request_strategy() -> impl Strategy<Value = (Vec<u8>, Req)> {
        (
            prop_oneof![Just("GET".to_string()), Just("POST".to_string()), Just("HEAD".to_string()), "[A-Z]{1,8}"],
            "/[a-zA-Z0-9/?=&%._-]{0,40}",
            any::<bool>(),
            prop::option::of(prop_oneof![Just("close"), Just("keep-alive"), Just("Upgrade, Close")]),
            prop::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,15}", "[ -~]{0,30}"), 0..5),
            prop::option::of(prop::collection::vec(any::<u8>(), 0..64)),
        )
            .prop_map(|(method, target, http10, conn, headers, body)| {
                let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
                let mut s = format!("{method} {target} {version}\r\nHost: example\r\n");
                for (n, v) in headers {
                    // Skip names the framer gives meaning to; they are generated explicitly.
                    let lower = n.to_ascii_lowercase();
                    if ["content-length", "connection", "transfer-encoding"].contains(&lower.as_str()) {
                        continue;
                    }
                    s.push_str(&format!("{n}: {v}\r\n"));
                }
                if let Some(c) = conn {
                    s.push_str(&format!("Connection: {c}\r\n"));
                }
                let cl = body.as_ref().map_or(0, |b| b.len() as u64);
                if body.is_some() {
                    s.push_str(&format!("Content-Length: {cl}\r\n"));
                }
                s.push_str("\r\n");
                let mut bytes = s.into_bytes();
                bytes.extend(body.unwrap_or_default());
                let close = conn.is_some_and(|c| c.to_ascii_lowercase().contains("close"));
                let ka = !close && (!http10 || conn == Some("keep-alive"));
                (bytes, req(&method, &target, cl, ka))
            })
    }

    proptest! {
        #[test]
        fn split_pipelines_frame_like_whole_ones(
            reqs in prop::collection::vec(request_strategy(), 1..12),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let input: Vec<u8> = reqs.iter().flat_map(|(b, _)| b.clone()).collect();
            let expected: Vec<Req> = reqs.into_iter().map(|(_, r)| r).collect();
            let whole = frame_all(&input, &[]).unwrap();
            prop_assert_eq!(&whole, &expected);
            let cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            prop_assert_eq!(frame_all(&input, &cuts).unwrap(), expected);
        }

        #[test]
        fn random_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..2048),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            let _ = frame_all(&bytes, &cuts);
            let _ = parse_head(&bytes, 64);
        }

        #[test]
        fn near_valid_mutations_never_panic(
            (bytes, _) in request_strategy(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = bytes;
            for (i, b) in flips {
                let i = i.index(bytes.len());
                bytes[i] = b;
            }
            let _ = frame_all(&bytes, &[bytes.len() / 2]);
        }
    }
}
