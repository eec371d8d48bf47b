//! Response framing for the guard's upstreams and the load tester, small and
//! strict: a status line `HTTP/1.x NNN reason`, `name: value`
//! headers with CRLF line ends, a body of exactly `Content-Length` bytes.
//! Bodies delimited by chunking or by the connection's close cannot be
//! pipelined behind, so they are refused ([`ResponseError::NoLength`]); the
//! load tester counts them as bad responses. `ResponseReader` walks a
//! stream across reads: the body is consumed as it arrives, never buffered.

/// Longest response head accepted; a server sending more is broken for our purposes.
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    #[error("response head longer than {0} bytes")]
    HeadTooLarge(usize),
    #[error("response body without Content-Length (chunked or delimited by close) is not supported")]
    NoLength,
}

/// What the load tester needs from one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The server will close after this response.
    pub close: bool,
    pub body_len: u64,
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
    /// Inside a body: the response and the bytes of it still to come.
    body: Option<(Response, u64)>,
    /// The next response answers a HEAD: its head is all of it, whatever
    /// its Content-Length says.
    no_body: bool,
}

impl ResponseReader {
    pub fn new(max_head: usize) -> Self {
        ResponseReader { max_head, body: None, no_body: false }
    }

    /// The next response answers a HEAD request: it ends with its head.
    pub fn expect_no_body(&mut self) {
        self.no_body = true;
    }

    /// Look at the unconsumed bytes `buf`. After an error the stream cannot
    /// be framed any more; the caller drops the connection.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, ResponseError> {
        if let Some((response, remaining)) = &mut self.body {
            if buf.is_empty() {
                return Ok(Step::NeedMore);
            }
            let n = (*remaining).min(buf.len() as u64) as usize;
            *remaining -= n as u64;
            if *remaining == 0 {
                let response = *response;
                self.body = None;
                return Ok(Step::Done { consumed: n, response });
            }
            return Ok(Step::Consumed(n));
        }
        let Some(end) = head_end(buf, self.max_head)? else {
            return Ok(Step::NeedMore);
        };
        let response = parse_head(&buf[..end], std::mem::take(&mut self.no_body))?;
        if response.body_len == 0 {
            Ok(Step::Done { consumed: end, response })
        } else {
            self.body = Some((response, response.body_len));
            Ok(Step::Consumed(end))
        }
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
/// HEAD, and is all of its response.
fn parse_head(head: &[u8], no_body: bool) -> Result<Response, ResponseError> {
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
    // A 1xx would be followed by the real response to the same request; we
    // never send Expect or Upgrade, so one here is a protocol error.
    if !(200..=599).contains(&status) {
        return Err(Malformed("status code outside 200-599"));
    }
    let (mut length, mut chunked, mut close, mut keep_alive) = (None::<u64>, false, false, false);
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
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    // 204 and 304 never have a body, whatever they say.
    let body_len = if no_body || status == 204 || status == 304 {
        0
    } else if chunked {
        return Err(ResponseError::NoLength);
    } else {
        length.ok_or(ResponseError::NoLength)?
    };
    Ok(Response { status, close: close || (http10 && !keep_alive), body_len })
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
    fn an_answer_to_head_ends_with_its_head_and_keeps_its_close() {
        let mut r = ResponseReader::new(DEFAULT_MAX_HEAD);
        r.expect_no_body();
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n";
        let done = Response { status: 200, close: true, body_len: 0 };
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
        assert_eq!(bad(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), ResponseError::NoLength);
        assert_eq!(bad(b"HTTP/1.1 200 OK\r\n\r\n"), ResponseError::NoLength);
        assert!(matches!(bad(b"HTTP/2 200 OK\r\n\r\n"), ResponseError::Malformed(_)));
        assert!(matches!(bad(b"HTTP/1.1 100 Continue\r\n\r\n"), ResponseError::Malformed(_)));
        assert!(matches!(
            bad(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            ResponseError::Malformed(_)
        ));
        assert!(matches!(bad(b"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n"), ResponseError::Malformed(_)));
        let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &vec![b'a'; DEFAULT_MAX_HEAD]].concat();
        assert_eq!(bad(&huge), ResponseError::HeadTooLarge(DEFAULT_MAX_HEAD));
    }

    fn response_text() -> impl Strategy<Value = Vec<u8>> {
        (prop::sample::select(vec![200u16, 201, 204, 301, 404, 500, 503]), 0usize..300, any::<bool>(), any::<bool>())
            .prop_map(|(status, len, close, http10)| {
                let mut t = format!(
                    "HTTP/1.{} {status} Reason Phrase\r\nServer: x\r\nContent-Length: {len}\r\n{}\r\n",
                    if http10 { 0 } else { 1 },
                    if close { "Connection: close\r\n" } else { "" }
                )
                .into_bytes();
                if status != 204 {
                    t.extend(std::iter::repeat_n(b'z', len));
                }
                t
            })
    }

    proptest! {
        #[test]
        fn split_anywhere_frames_the_same(
            responses in prop::collection::vec(response_text(), 1..12),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let whole: Vec<u8> = responses.concat();
            let (expected, err) = frame(&[&whole]);
            prop_assert_eq!(err, None);
            prop_assert_eq!(expected.len(), responses.len());
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
