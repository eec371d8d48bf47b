//! Response framing for the guard's upstreams and the load tester, small and
//! strict: a status line `HTTP/1.x NNN reason`, `name: value`
//! headers with CRLF line ends, a body of exactly `Content-Length` bytes, in
//! chunked coding (HTTP/1.1; walked by the request parser's own strict
//! chunk reader, extensions and trailers bounded like a head), or up to the
//! connection's close (neither: the reader's [`ResponseReader::eof`] ends
//! it). Interim responses (1xx but 101) come before the final one to the
//! same request and are heads alone. `101 Switching Protocols` ends the
//! framing: only when the request asked to upgrade
//! ([`ResponseReader::expect_upgrade`]), its head is the last response and
//! what follows is the new protocol's. `ResponseReader` walks a stream across
//! reads: the body is consumed as it arrives, never buffered.

use crate::body::Body;
use crate::types::{Framing, Options};

/// Longest response head accepted; a server sending more is broken for our purposes.
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    #[error("response head longer than {0} bytes")]
    HeadTooLarge(usize),
    #[error("bad chunked response body: {0}")]
    Chunk(&'static str),
}

/// What the load tester needs from one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The server will close after this response.
    pub close: bool,
    /// Body bytes (a chunked body's data, without its framing).
    pub body_len: u64,
    /// The body came in chunked coding.
    pub chunked: bool,
}

/// How a response's body is framed, from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framed {
    /// A 1xx but 101: a head alone, and the final response still to come.
    Interim,
    /// 101 to a request that asked to upgrade: the head ends HTTP here.
    Switched,
    /// No body.
    Empty,
    Length(u64),
    Chunked,
    /// Up to the connection's close (`close` is set).
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing can be consumed until more bytes arrive (a partial head, or
    /// an empty buffer in the middle of a body).
    NeedMore,
    /// This many bytes (a head or part of a body) belong to a response not
    /// yet complete; drop them and call again.
    Consumed(usize),
    /// A response ended after `consumed` more bytes.
    Done { consumed: usize, response: Response },
}

/// Frames consecutive responses on one connection.
#[derive(Debug, Clone)]
pub struct ResponseReader {
    max_head: usize,
    /// Inside a body: the response and where in its body the reader is.
    body: Option<(Response, Inside)>,
    /// The next response answers a HEAD: its head is all of it, whatever
    /// its Content-Length says.
    no_body: bool,
    /// The request asked to upgrade: a 101 may answer it.
    upgrade: bool,
}

/// Where a body ends.
#[derive(Debug, Clone)]
enum Inside {
    /// After this many more bytes.
    Length(u64),
    /// Where the chunk reader says (boxed: it is larger than the rest).
    Chunked(Box<Body>),
    /// At the connection's close.
    UntilClose,
}

impl ResponseReader {
    pub fn new(max_head: usize) -> Self {
        ResponseReader { max_head, body: None, no_body: false, upgrade: false }
    }

    /// The next response answers a HEAD request: it ends with its head.
    pub fn expect_no_body(&mut self) {
        self.no_body = true;
    }

    /// The next response answers a request that asked to upgrade the
    /// connection (`Connection: upgrade` and `Upgrade`): a `101 Switching
    /// Protocols` may answer it, which ends the framing (`Step::Done` with
    /// status 101: the bytes after its head are the new protocol's). A 101
    /// to any other request is malformed: accepting it would let an
    /// upstream turn a connection into a tunnel nobody asked for.
    pub fn expect_upgrade(&mut self) {
        self.upgrade = true;
    }

    /// Look at the unconsumed bytes `buf`. After an error the stream cannot
    /// be framed any more; the caller drops the connection.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, ResponseError> {
        if let Some((response, inside)) = &mut self.body {
            if buf.is_empty() {
                return Ok(Step::NeedMore);
            }
            let (consumed, done) = match inside {
                Inside::Length(remaining) => {
                    let n = (*remaining).min(buf.len() as u64) as usize;
                    *remaining -= n as u64;
                    (n, *remaining == 0)
                }
                Inside::Chunked(body) => {
                    // Strict (no leniency), trailers bounded like the head.
                    let opts = Options { max_head: self.max_head, ..Options::default() };
                    let status = body.parse(buf, 0, &opts).map_err(|e| ResponseError::Chunk(e.kind.as_str()))?;
                    response.body_len = body.body_len;
                    (status.consumed, status.done)
                }
                Inside::UntilClose => {
                    response.body_len += buf.len() as u64;
                    (buf.len(), false)
                }
            };
            if done {
                let response = *response;
                self.body = None;
                return Ok(Step::Done { consumed, response });
            }
            // Every byte given is taken (a chunk's framing is kept in the
            // reader's state, never re-read): none only if none was given.
            debug_assert!(consumed > 0);
            return Ok(Step::Consumed(consumed));
        }
        let Some(end) = head_end(buf, self.max_head)? else {
            return Ok(Step::NeedMore);
        };
        let (response, framed) = parse_head(&buf[..end], self.no_body, self.upgrade)?;
        let inside = match framed {
            // The final response is still to come, to the same request.
            Framed::Interim => return Ok(Step::Consumed(end)),
            Framed::Empty | Framed::Length(0) | Framed::Switched => None,
            Framed::Length(n) => Some(Inside::Length(n)),
            Framed::Chunked => Some(Inside::Chunked(Box::new(Body::new(Framing::Chunked)))),
            Framed::UntilClose => Some(Inside::UntilClose),
        };
        (self.no_body, self.upgrade) = (false, false);
        match inside {
            None => Ok(Step::Done { consumed: end, response }),
            Some(inside) => {
                self.body = Some((response, inside));
                Ok(Step::Consumed(end))
            }
        }
    }

    /// The connection closed: the response it ended, if its body was
    /// delimited by the close (else a response cut short, or none begun).
    pub fn eof(&mut self) -> Option<Response> {
        match self.body.take() {
            Some((response, Inside::UntilClose)) => Some(response),
            other => {
                self.body = other;
                None
            }
        }
    }

    /// Inside a body that only the connection's close ends.
    pub fn until_close(&self) -> bool {
        matches!(self.body, Some((_, Inside::UntilClose)))
    }
}

/// The index just past the head's blank line, if it is complete.
fn head_end(buf: &[u8], max_head: usize) -> Result<Option<usize>, ResponseError> {
    let window = &buf[..buf.len().min(max_head)];
    match window.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => Ok(Some(i + 4)),
        None if buf.len() >= max_head => Err(ResponseError::HeadTooLarge(max_head)),
        None => Ok(None),
    }
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parse a complete head (ending in CRLF CRLF); `no_body`: it answers a
/// HEAD, and is all of its response; `upgrade`: it answers a request that
/// asked to upgrade. The response, and how its body is framed.
fn parse_head(head: &[u8], no_body: bool, upgrade: bool) -> Result<(Response, Framed), ResponseError> {
    use ResponseError::Malformed;
    // Drop the blank line's CRLF: every line left ends in CRLF.
    let head = &head[..head.len() - 2];
    let mut lines = head.split_inclusive(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r\n"));
    let status_line = lines.next().flatten().ok_or(Malformed("status line without CRLF"))?;
    // "HTTP/1.x NNN" then an optional " reason".
    if status_line.len() < 12 || &status_line[..7] != b"HTTP/1." || status_line[8] != b' ' {
        return Err(Malformed("status line is not HTTP/1.x NNN"));
    }
    let http10 = match status_line[7] {
        b'0' => true,
        b'1' => false,
        _ => return Err(Malformed("unknown HTTP version")),
    };
    let code = &status_line[9..12];
    if !code.iter().all(u8::is_ascii_digit) || (status_line.len() > 12 && status_line[12] != b' ') {
        return Err(Malformed("status code is not three digits"));
    }
    let status = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    if !(100..=599).contains(&status) {
        return Err(Malformed("status code outside 100-599"));
    }
    // 101 turns the connection into another protocol: only one the request asked for.
    if status == 101 && (!upgrade || http10) {
        return Err(Malformed("101 Switching Protocols to a request that did not ask to upgrade"));
    }
    let (mut length, mut close, mut keep_alive, mut upgrade_named) = (None::<u64>, false, false, false);
    // Transfer codings over every Transfer-Encoding line: how many say
    // `chunked`, and whether the last one does.
    let (mut codings, mut chunked_count, mut chunked_last) = (0u32, 0u32, false);
    for line in lines {
        let line = line.ok_or(Malformed("header line without CRLF"))?;
        let colon = line.iter().position(|&b| b == b':').ok_or(Malformed("header line without a colon"))?;
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Err(Malformed("bad header name"));
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            if value.is_empty() || value.len() > 15 || !value.iter().all(u8::is_ascii_digit) {
                return Err(Malformed("bad Content-Length"));
            }
            let n = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            if length.is_some_and(|l| l != n) {
                return Err(Malformed("two different Content-Lengths"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            for token in value.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty()) {
                codings += 1;
                chunked_last = token.eq_ignore_ascii_case(b"chunked");
                chunked_count += u32::from(chunked_last);
            }
            if codings == 0 {
                return Err(Malformed("empty Transfer-Encoding"));
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade_named |= !value.is_empty();
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let close = close || (http10 && !keep_alive);
    let response = |close, body_len, chunked| Response { status, close, body_len, chunked };
    if status == 101 {
        // RFC 9110 section 15.2.2: a 101 names the protocol it switches to.
        if !upgrade_named {
            return Err(Malformed("101 Switching Protocols without an Upgrade header"));
        }
        return Ok((response(false, 0, false), Framed::Switched));
    }
    // Interim (100 Continue, 103 Early Hints...): a head alone.
    if status < 200 {
        return Ok((response(close, 0, false), Framed::Interim));
    }
    // 204 and 304 never have a body, whatever they say.
    if no_body || status == 204 || status == 304 {
        return Ok((response(close, 0, false), Framed::Empty));
    }
    if codings > 0 {
        // Both framings at once is how responses are split and smuggled
        // (RFC 9112 section 6.3: "ought to be handled as an error").
        if length.is_some() {
            return Err(Malformed("both Transfer-Encoding and Content-Length"));
        }
        // An HTTP/1.0 server cannot send a transfer coding.
        if http10 {
            return Err(Malformed("Transfer-Encoding in an HTTP/1.0 response"));
        }
        if chunked_count > 1 || (chunked_count == 1 && !chunked_last) {
            return Err(Malformed("chunked not once and last among the transfer codings"));
        }
        // A final coding other than chunked: delimited by the close.
        if !chunked_last {
            return Ok((response(true, 0, false), Framed::UntilClose));
        }
        return Ok((response(close, 0, true), Framed::Chunked));
    }
    Ok(match length {
        Some(n) => (response(close, n, false), Framed::Length(n)),
        None => (response(true, 0, false), Framed::UntilClose),
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Frame `chunks` as if each arrived in its own read, keeping the
    /// unconsumed tail like the load tester's connection buffer does.
    fn frame(chunks: &[&[u8]]) -> (Vec<Response>, Option<ResponseError>) {
        let mut reader = ResponseReader::new(DEFAULT_MAX_HEAD);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                match reader.step(&buf) {
                    Ok(Step::NeedMore) => break,
                    Ok(Step::Consumed(n)) => {
                        buf.drain(..n);
                    }
                    Ok(Step::Done { consumed, response }) => {
                        buf.drain(..consumed);
                        out.push(response);
                    }
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        // The stream ends: the close ends a body delimited by it.
        out.extend(reader.eof());
        (out, None)
    }

    #[test]
    fn frames_statuses_lengths_and_close() {
        let text = b"HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\ncontent-length:0\r\n\r\nHTTP/1.1 204\r\nContent-Length: 9\r\n\r\nHTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 503 Busy\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nab";
        let (got, err) = frame(&[text]);
        assert_eq!(err, None);
        let short: Vec<_> = got.iter().map(|r| (r.status, r.close, r.body_len)).collect();
        assert_eq!(short, vec![(200, false, 5), (404, false, 0), (204, false, 0), (200, true, 1), (503, true, 2)]);
    }

    #[test]
    fn frames_chunked_bodies_with_extensions_and_trailers() {
        let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n5;ext=\"a b\";x\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nEtag: x\r\nX-T: 1\r\n\r\nHTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n";
        let (got, err) = frame(&[text]);
        assert_eq!(err, None);
        let short: Vec<_> = got.iter().map(|r| (r.status, r.close, r.body_len, r.chunked)).collect();
        assert_eq!(short, vec![(200, false, 31, true), (201, true, 0, true)]);
        // Byte by byte, the same.
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(frame(&bytes), (got, None));
        // Gzip then chunked is no framing error; chunked then more is
        // (see `refuses_what_cannot_be_framed`). A 204 has no body even
        // when it says chunked.
        let (got, err) = frame(&[b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]);
        assert_eq!((got.len(), err), (2, None));
    }

    #[test]
    fn a_body_without_length_or_chunks_ends_at_the_close() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
            // A final coding other than chunked.
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
            assert_eq!(r.step(head), Ok(Step::Consumed(head.len())));
            assert!(r.until_close());
            // Whatever follows is body, a head-like line too.
            let body = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
            assert_eq!(r.step(body), Ok(Step::Consumed(body.len())));
            assert_eq!(r.step(b""), Ok(Step::NeedMore));
            let done = Response { status: 200, close: true, body_len: body.len() as u64, chunked: false };
            assert_eq!(r.eof(), Some(done));
            assert!(!r.until_close());
        }
        // A close in the middle of a length or of chunks ends nothing.
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        assert!(matches!(r.step(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab"), Ok(Step::Consumed(_))));
        assert_eq!(r.eof(), None);
    }

    #[test]
    fn interim_responses_come_before_the_final_one() {
        let text = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        let (got, err) = frame(&[text]);
        assert_eq!(err, None);
        assert_eq!(got, vec![Response { status: 201, close: false, body_len: 2, chunked: false }]);
        // An interim answer to HEAD leaves the final one bodiless still.
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        r.expect_no_body();
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(r.step(interim), Ok(Step::Consumed(interim.len())));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert!(matches!(r.step(head), Ok(Step::Done { consumed, .. }) if consumed == head.len()));
    }

    #[test]
    fn a_101_ends_the_framing_only_when_the_request_asked_to_upgrade() {
        let switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        let frames = b"\x81\x05hello";
        let stream = [&switch[..], frames].concat();
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        r.expect_upgrade();
        // After an interim response too; the bytes after its head are not framed.
        assert_eq!(r.step(b"HTTP/1.1 100 Continue\r\n\r\n"), Ok(Step::Consumed(25)));
        let done = Response { status: 101, close: false, body_len: 0, chunked: false };
        assert_eq!(r.step(&stream), Ok(Step::Done { consumed: switch.len(), response: done }));
        // Not asked for (or asked once, already answered otherwise): malformed.
        assert!(matches!(ResponseReader::new(DEFAULT_MAX_HEAD).step(switch), Err(ResponseError::Malformed(_))));
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        r.expect_upgrade();
        let declined = b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(r.step(declined), Ok(Step::Done { response: Response { status: 426, .. }, .. })));
        assert!(r.step(switch).is_err(), "the next request did not ask");
        // A 101 names its protocol, and HTTP/1.0 has none to switch from.
        for head in [&b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..], b"HTTP/1.0 101 OK\r\nUpgrade: x\r\n\r\n"] {
            let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
            r.expect_upgrade();
            assert!(matches!(r.step(head), Err(ResponseError::Malformed(_))), "{head:?}");
        }
    }

    #[test]
    fn an_answer_to_head_ends_with_its_head_and_keeps_its_close() {
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        r.expect_no_body();
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n";
        let done = Response { status: 200, close: true, body_len: 0, chunked: false };
        assert_eq!(r.step(head), Ok(Step::Done { consumed: head.len(), response: done }));
        // Chunked or without a length: still only a head.
        r.expect_no_body();
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(r.step(head), Ok(Step::Done { consumed, .. }) if consumed == head.len()));
        // Only the one response: the next has its body.
        let next = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab";
        assert_eq!(r.step(next), Ok(Step::Consumed(next.len() - 2)));
    }

    #[test]
    fn refuses_what_cannot_be_framed() {
        let bad = |t: &[u8]| frame(&[t]).1.expect("an error");
        assert!(matches!(
            bad(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"),
            ResponseError::Malformed(_)
        ));
        assert!(matches!(bad(b"HTTP/1.1 099 Early\r\n\r\n"), ResponseError::Malformed(_)));
        for smuggling in [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n".as_slice(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(matches!(bad(smuggling), ResponseError::Malformed(_)), "{:?}", String::from_utf8_lossy(smuggling));
        }
        // Chunk framing is strict: a size that is not hex, a bare LF, data
        // longer than its size, trailers past the head's bound.
        for body in [&b"zz\r\n"[..], b"3\nabc\r\n0\r\n\r\n", b"3\r\nabcd\r\n0\r\n\r\n", b"0\r\nX\r\n\r\n"] {
            let text = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice(), body].concat();
            assert!(matches!(bad(&text), ResponseError::Chunk(_)), "{:?}", String::from_utf8_lossy(body));
        }
        let long_trailer = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ".as_slice(),
            &vec![b'a'; DEFAULT_MAX_HEAD],
        ]
        .concat();
        assert!(matches!(bad(&long_trailer), ResponseError::Chunk(_)));
        assert!(matches!(bad(b"HTTP/2 200 OK\r\n\r\n"), ResponseError::Malformed(_)));
        assert!(matches!(
            bad(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            ResponseError::Malformed(_)
        ));
        assert!(matches!(bad(b"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n"), ResponseError::Malformed(_)));
        let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &vec![b'a'; DEFAULT_MAX_HEAD]].concat();
        assert_eq!(bad(&huge), ResponseError::HeadTooLarge(DEFAULT_MAX_HEAD));
    }

    fn response_text() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(vec![200u16, 201, 204, 301, 404, 500, 503]),
            0usize..300,
            any::<bool>(),
            any::<bool>(),
            // Chunked (HTTP/1.1 only): the body cut into pieces of these
            // sizes, then a trailer or not.
            prop::option::of((prop::collection::vec(1usize..40, 0..6), any::<bool>())),
        )
            .prop_map(|(status, len, close, http10, chunked)| {
                let chunked = chunked.filter(|_| !http10);
                let framing = match &chunked {
                    Some(_) => "Transfer-Encoding: chunked\r\n".to_string(),
                    None => format!("Content-Length: {len}\r\n"),
                };
                let mut t = format!(
                    "HTTP/1.{} {status} Reason Phrase\r\nServer: x\r\n{framing}{}\r\n",
                    if http10 { 0 } else { 1 },
                    if close { "Connection: close\r\n" } else { "" }
                )
                .into_bytes();
                if status == 204 {
                    return t;
                }
                match chunked {
                    None => t.extend(std::iter::repeat_n(b'z', len)),
                    Some((sizes, trailer)) => {
                        for (i, size) in sizes.into_iter().enumerate() {
                            t.extend(format!("{size:x}{}\r\n", if i % 2 == 1 { ";e=1" } else { "" }).bytes());
                            t.extend(std::iter::repeat_n(b'c', size));
                            t.extend_from_slice(b"\r\n");
                        }
                        t.extend_from_slice(if trailer { b"0\r\nT: v\r\n\r\n" } else { b"0\r\n\r\n" });
                    }
                }
                t
            })
    }

    proptest! {
        #[test]
        fn split_anywhere_frames_the_same(
            responses in prop::collection::vec(response_text(), 1..12),
            interim in prop::collection::vec(any::<bool>(), 12),
            until_close in prop::option::of(0usize..300),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            // Some responses after a 100 Continue; the last one, maybe, a
            // body ended by the close.
            let mut whole = Vec::new();
            for (r, interim) in responses.iter().zip(&interim) {
                if *interim {
                    whole.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                whole.extend_from_slice(r);
            }
            if let Some(len) = until_close {
                whole.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
                whole.extend(std::iter::repeat_n(b'u', len));
            }
            let (expected, err) = frame(&[&whole]);
            prop_assert_eq!(err, None);
            prop_assert_eq!(expected.len(), responses.len() + usize::from(until_close.is_some()));
            if let Some(len) = until_close {
                let last = expected.last().unwrap();
                prop_assert_eq!((last.close, last.body_len), (true, len as u64));
            }
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(whole.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points.into_iter().chain([whole.len()]) {
                chunks.push(&whole[last..p]);
                last = p;
            }
            let (split, err) = frame(&chunks);
            prop_assert_eq!(err, None);
            prop_assert_eq!(split, expected);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), split in 0usize..400) {
            let split = split.min(bytes.len());
            let _ = frame(&[&bytes[..split], &bytes[split..]]);
            // Near-valid heads reach the header parser, not just the status line.
            let mut near = b"HTTP/1.1 200 OK\r\n".to_vec();
            near.extend_from_slice(&bytes);
            near.extend_from_slice(b"\r\n\r\n");
            let _ = frame(&[&near]);
        }
    }
}
