//! Request framing for the server's own needs: where each request head ends,
//! its method, target and version, where its body ends (`Content-Length` or
//! chunked) and whether the connection stays open. The parsing is
//! `sluice-h1`'s, strict by default, because a lenient framer is how request
//! smuggling starts; anything it refuses gets its status (400, 431 or 501)
//! and the connection closes.

use sluice_h1::{Framing, HeadStatus, Options, Parser};
use std::ops::Range;

/// Default bound on a request head (request line plus headers plus the blank line).
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

pub use sluice_h1::Version;

/// One parsed request head. `method` and `target` are byte ranges into the
/// buffer the head was parsed from, so parsing allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedHead {
    pub method: Range<usize>,
    pub target: Range<usize>,
    pub version: Version,
    /// Body bytes that follow the head: the `Content-Length` (0 without
    /// one, or for a chunked body, whose end the framer finds itself).
    pub content_length: u64,
    /// False after `Connection: close`, or for HTTP/1.0 without `Connection: keep-alive`.
    pub keep_alive: bool,
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
}

impl FramedHead {
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
    #[error("not implemented: {0}")]
    NotImplemented(&'static str),
}

impl FrameError {
    pub fn status(self) -> u16 {
        match self {
            FrameError::BadRequest(_) => 400,
            FrameError::HeadTooLarge => 431,
            FrameError::NotImplemented(_) => 501,
        }
    }
}

impl From<sluice_h1::Error> for FrameError {
    fn from(e: sluice_h1::Error) -> FrameError {
        match e.kind.status() {
            431 => FrameError::HeadTooLarge,
            501 => FrameError::NotImplemented(e.kind.as_str()),
            _ => FrameError::BadRequest(e.kind.as_str()),
        }
    }
}

fn options(max_head: usize) -> Options {
    Options { max_head, ..Options::default() }
}

/// Parse one complete request head at the start of `buf`. `Ok(None)`: not
/// complete yet (and within `max_head`); the caller reads more and retries.
pub fn parse_head(buf: &[u8], max_head: usize) -> Result<Option<FramedHead>, FrameError> {
    let mut parser = Parser::new(options(max_head));
    head_of(&mut parser, buf)
}

/// The head `parser` finds in `buf` (which starts at the request's first byte).
fn head_of(parser: &mut Parser, buf: &[u8]) -> Result<Option<FramedHead>, FrameError> {
    let len = match parser.parse_head(buf)? {
        HeadStatus::Partial => return Ok(None),
        HeadStatus::Complete(len) => len,
    };
    let h = parser.head(buf).expect("a complete head");
    // The head's fields are slices of `buf`; the server wants ranges so
    // the head does not borrow its input buffer.
    let at = |f: &str| {
        let start = f.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + f.len()
    };
    Ok(Some(FramedHead {
        method: at(h.method),
        target: at(h.target),
        version: h.version,
        content_length: match h.framing {
            Framing::Length(n) => n,
            Framing::None | Framing::Chunked => 0,
        },
        keep_alive: h.keep_alive,
        len,
    }))
}

/// What one [`Framer::step`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A complete head; `consumed` bytes (the head) are done with.
    Request(FramedHead),
    /// `n` body bytes of the current request were skipped.
    Body(usize),
    /// Nothing complete in the buffer: read more.
    NeedMore,
}

/// Walks a byte stream request by request: heads are parsed, bodies skipped
/// (which may span many reads). The caller drops the consumed bytes from the
/// front of its buffer after each step.
pub struct Framer {
    /// Keeps its state between reads: a head arriving a few bytes per read
    /// is scanned once in all, not once per read.
    parser: Parser,
    in_body: bool,
}

impl std::fmt::Debug for Framer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framer").field("in_body", &self.in_body).finish_non_exhaustive()
    }
}

impl Framer {
    pub fn new(max_head: usize) -> Self {
        Framer { parser: Parser::new(options(max_head)), in_body: false }
    }

    /// Inside a request's body (its head was returned, its body is not done).
    pub fn in_body(&self) -> bool {
        self.in_body
    }

    /// Consumed bytes: `Request(h)` → `h.len`, `Body(n)` → `n`, `NeedMore` → 0.
    /// `buf` starts where the last step's consumed bytes ended, and only
    /// grows at its end between steps that return `NeedMore`.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, FrameError> {
        if self.in_body {
            let st = self.parser.parse_body(buf)?;
            if st.done {
                self.in_body = false;
                self.parser.reset();
            }
            return Ok(if st.consumed == 0 && !st.done { Step::NeedMore } else { Step::Body(st.consumed) });
        }
        let Some(h) = head_of(&mut self.parser, buf)? else { return Ok(Step::NeedMore) };
        if self.parser.body_done() {
            self.parser.reset();
        } else {
            self.in_body = true;
        }
        Ok(Step::Request(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(s: &str) -> Result<Option<FramedHead>, FrameError> {
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
        // Empty lines before a request line are allowed (RFC 9112 2.2).
        assert_eq!(one("\r\n\r\n"), Ok(None));
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
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "GET\r\n\r\n",
            "\x16\x03\x01",
        ] {
            assert!(matches!(one(s), Err(FrameError::BadRequest(_))), "{s:?}: {:?}", one(s));
        }
    }

    #[test]
    fn chunked_bodies_are_framed() {
        let s = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
        let expected = Ok(vec![req("POST", "/a", 0, true), req("GET", "/b", 0, true)]);
        assert_eq!(frame_all(s, &[]), expected);
        assert_eq!(frame_all(s, &(0..s.len()).collect::<Vec<_>>()), expected);
        assert!(frame_all(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", &[]).is_err());
        let te = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: frob, chunked\r\n\r\n", DEFAULT_MAX_HEAD);
        assert_eq!(te.map_err(FrameError::status), Err(501));
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
