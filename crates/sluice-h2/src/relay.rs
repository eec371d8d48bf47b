//! The guard's HTTP/2 on top of its HTTP/1.1 machinery, without I/O: each
//! h2 stream becomes the HTTP/1.1 request the guard already knows how to
//! forward ([`RequestBody`]: the head from [`RequestHead::to_h1`], DATA
//! chunk-encoded or verbatim), and the HTTP/1.1 response bytes the guard
//! would have written to an HTTP/1.1 client are turned back into HEADERS
//! and DATA here ([`ResponseRelay`], written to a [`ServerConn`] by
//! [`pump`]). It lives in sluice-h2, not in the guard, so the translation
//! is tested (and fuzzed) with the connection it feeds and no socket.
//!
//! # The response side
//!
//! [`ResponseRelay`] takes one upstream response per stream, in any split
//! (`feed`), framed by sluice-h1's [`ResponseReader`] (the same strict
//! reader the guard frames its upstreams with: Content-Length, chunked
//! with extensions and trailers, close-delimited until [`ResponseRelay::eof`],
//! no body for HEAD, 204 and 304). Out come [`RelayOut`]s: one `Head`
//! (status, names lower-cased, the hop-by-hop fields left out), `Body`
//! pieces (the payload, de-chunked), then `End`. Interim 1xx heads (100
//! Continue, 103) are dropped; a 101 is [`RelayError::Upgrade`]: HTTP/2
//! has no upgrade (RFC 9113 8.6). Trailers are dropped, as the request
//! side drops them.
//!
//! # Bounds
//!
//! A relay holds at most `max_head` bytes of raw head (over it:
//! [`RelayError::TooLarge`]), then the parsed head (no more than the raw
//! one, plus a `Vec` per field), and at most `max_piece` bytes of body:
//! `feed` takes no more body bytes than there is room for, and returns how
//! many it took, so the caller keeps the rest in its own (bounded) upstream
//! buffer and feeds it again once [`pump`] or [`ResponseRelay::poll`] has
//! made room. The chunk decoder keeps a few words of state, never a
//! buffer. `feed` never takes a byte past the response's end, so what
//! follows (the upstream's next response) stays the caller's.

use crate::conn::{SendError, ServerConn};
use crate::head::{chunk, RequestHead};
use sluice_h1::response::{ResponseError, ResponseReader, Step};

/// Why a response cannot be relayed. The stream gets a 502 (if its head
/// was not delivered: [`ResponseRelay::head_delivered`]) or a reset, and
/// the upstream connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayError {
    /// The head is malformed (sluice-h1's reason, or a field value HTTP/2
    /// cannot carry), or the upstream closed before a head.
    Head(&'static str),
    /// The body's framing is broken (a bad chunk), or the upstream closed
    /// inside a body that only its length or last chunk can end.
    Framing(&'static str),
    /// A 101 Switching Protocols: no upgrade over HTTP/2.
    Upgrade,
    /// The head is longer than `max_head` (given).
    TooLarge(usize),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Head(why) => write!(f, "bad upstream response head: {why}"),
            RelayError::Framing(why) => write!(f, "bad upstream response body: {why}"),
            RelayError::Upgrade => f.write_str("101 Switching Protocols cannot be relayed over HTTP/2"),
            RelayError::TooLarge(max) => write!(f, "upstream response head longer than {max} bytes"),
        }
    }
}

impl std::error::Error for RelayError {}

/// Header fields: (name, value), names lower-case.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// One step of a response, as HTTP/2 sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayOut {
    /// The final head: its status and end-to-end fields (names lower-case,
    /// in the upstream's order).
    Head { status: u16, headers: Fields },
    /// Payload bytes, at most `max_piece`.
    Body(Vec<u8>),
    /// The response is complete.
    End,
}

/// The fields HTTP/2 forbids (RFC 9113 8.2.2), `te` with them: it is a
/// request field, and `te: trailers` means nothing in a response.
const HOP_BY_HOP: [&[u8]; 6] =
    [b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"];

/// Where in the response the relay is.
#[derive(Debug)]
enum Phase {
    Head,
    /// Ends where the reader says (Content-Length), or at the close.
    Raw,
    Chunked(Dechunk),
    /// `End` reached (maybe not yet delivered).
    Done,
    Failed(RelayError),
}

/// Turns one upstream HTTP/1.1 response into HTTP/2 pieces. See the module
/// docs.
#[derive(Debug)]
pub struct ResponseRelay {
    reader: ResponseReader,
    max_head: usize,
    max_piece: usize,
    phase: Phase,
    /// The head so far (up to its blank line, never past it).
    head_buf: Vec<u8>,
    /// How much of CR LF CR LF ends `head_buf`.
    crlf: u8,
    head: Option<(u16, Fields)>,
    head_delivered: bool,
    body: Vec<u8>,
    end_delivered: bool,
    /// From the reader, once the response ended: the upstream closes after it.
    closes: Option<bool>,
}

impl ResponseRelay {
    /// A relay for one response; `head_request`: it answers HEAD (a head
    /// alone, whatever its framing fields say). `max_head` bounds the raw
    /// head, `max_piece` (at least 1) the body held and each `Body`.
    pub fn new(head_request: bool, max_head: usize, max_piece: usize) -> ResponseRelay {
        let mut reader = ResponseReader::new(max_head);
        if head_request {
            reader.expect_no_body();
        }
        ResponseRelay {
            reader,
            max_head,
            max_piece: max_piece.max(1),
            phase: Phase::Head,
            head_buf: Vec::new(),
            crlf: 0,
            head: None,
            head_delivered: false,
            body: Vec::new(),
            end_delivered: false,
            closes: None,
        }
    }

    /// A relay for the response to `head` (HEAD or not).
    pub fn for_request(head: &RequestHead, max_head: usize, max_piece: usize) -> ResponseRelay {
        ResponseRelay::new(head.method == b"HEAD", max_head, max_piece)
    }

    /// Takes upstream bytes: how many (fewer than given when the body held
    /// is at `max_piece`, or when the response ended: the rest is not
    /// this response's). An error is final: every later call returns it.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, RelayError> {
        let mut taken = 0;
        loop {
            let rest = input.get(taken..).unwrap_or_default();
            let step = match &self.phase {
                Phase::Failed(e) => return Err(*e),
                Phase::Done => return Ok(taken),
                _ if rest.is_empty() => return Ok(taken),
                Phase::Head => self.feed_head(rest),
                Phase::Raw => self.feed_raw(rest),
                Phase::Chunked(_) => self.feed_chunked(rest),
            };
            match step {
                Ok(0) if !matches!(self.phase, Phase::Done | Phase::Failed(_)) => return Ok(taken),
                Ok(n) => taken += n,
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// The upstream closed: ends a close-delimited body; anywhere else the
    /// response was cut short.
    pub fn eof(&mut self) -> Result<(), RelayError> {
        let e = match &self.phase {
            Phase::Done => return Ok(()),
            Phase::Failed(e) => *e,
            Phase::Raw if self.reader.until_close() => {
                self.closes = self.reader.eof().map(|r| r.close);
                self.phase = Phase::Done;
                return Ok(());
            }
            Phase::Head => RelayError::Head("the upstream closed before a complete response head"),
            Phase::Raw | Phase::Chunked(_) => RelayError::Framing("the upstream closed inside the body"),
        };
        Err(self.fail(e))
    }

    /// Ends the relay with `e`: nothing more comes out (a head parsed but
    /// not delivered is dropped, so a broken response is never begun).
    fn fail(&mut self, e: RelayError) -> RelayError {
        self.phase = Phase::Failed(e);
        (self.head, self.body) = (None, Vec::new());
        e
    }

    /// The next piece, oldest first: `Head`, then `Body` pieces of at most
    /// `max` (and `max_piece`) bytes, then `End` once. `None`: nothing is
    /// ready (feed more), or all was delivered. `max == 0` holds the body
    /// back (and `End` behind it).
    pub fn poll(&mut self, max: usize) -> Option<RelayOut> {
        if let Some((status, headers)) = self.head.take() {
            self.head_delivered = true;
            return Some(RelayOut::Head { status, headers });
        }
        if !self.body.is_empty() {
            let n = max.min(self.body.len());
            return (n > 0).then(|| RelayOut::Body(self.body.drain(..n).collect()));
        }
        if self.ended() && self.head_delivered && !self.end_delivered {
            self.end_delivered = true;
            return Some(RelayOut::End);
        }
        None
    }

    /// The status of a head parsed and not yet delivered (what the next
    /// `pump` or `poll` sends), for the caller's response-code limits.
    pub fn pending_status(&self) -> Option<u16> {
        self.head.as_ref().map(|(status, _)| *status)
    }

    /// Body bytes held, not yet delivered.
    pub fn pending(&self) -> usize {
        self.body.len()
    }

    /// How many body bytes `feed` would take now.
    pub fn room(&self) -> usize {
        self.max_piece.saturating_sub(self.body.len())
    }

    /// The whole response was read (its `End` may still be held).
    pub fn ended(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// The `Head` was delivered (by `poll` or `pump`): after an error, the
    /// stream is reset; before, it may still be answered with a 502.
    pub fn head_delivered(&self) -> bool {
        self.head_delivered
    }

    /// `End` was delivered (by `poll` or `pump`): the stream is answered.
    pub fn finished(&self) -> bool {
        self.end_delivered
    }

    /// Once the response ended: whether the upstream closes the connection
    /// after it (else it may carry the next request).
    pub fn upstream_closes(&self) -> Option<bool> {
        self.closes
    }

    /// Head bytes up to and including the blank line, bounded by `max_head`.
    fn feed_head(&mut self, input: &[u8]) -> Result<usize, RelayError> {
        let room = self.max_head.saturating_sub(self.head_buf.len());
        let mut end = None;
        for (i, &b) in input.iter().take(room).enumerate() {
            // A matcher for CR LF CR LF that survives any split.
            self.crlf = match (self.crlf, b) {
                (0 | 2, b'\r') => self.crlf + 1,
                (1 | 3, b'\n') => self.crlf + 1,
                (_, b'\r') => 1,
                _ => 0,
            };
            if self.crlf == 4 {
                end = Some(i + 1);
                break;
            }
        }
        let Some(end) = end else {
            if input.len() >= room {
                return Err(RelayError::TooLarge(self.max_head));
            }
            self.head_buf.extend_from_slice(input);
            return Ok(input.len());
        };
        self.head_buf.extend_from_slice(input.get(..end).unwrap_or_default());
        self.crlf = 0;
        self.finish_head()?;
        Ok(end)
    }

    /// A complete head in `head_buf`: framed by the reader, then parsed for
    /// its fields; interim heads are dropped.
    fn finish_head(&mut self) -> Result<(), RelayError> {
        let head = std::mem::take(&mut self.head_buf);
        // A 101 is refused by the reader too, but as a malformed head; this
        // one is for the caller to tell apart.
        if head.starts_with(b"HTTP/1.") && head.get(9..12) == Some(b"101") {
            return Err(RelayError::Upgrade);
        }
        let done = match self.reader.step(&head).map_err(map_reader_error)? {
            Step::Consumed(n) if n == head.len() => None,
            Step::Done { consumed, response } if consumed == head.len() => Some(response.close),
            _ => return Err(RelayError::Head("the reader did not frame the whole head")),
        };
        let (status, headers, chunked) = parse_fields(&head)?;
        if status < 200 {
            return Ok(());
        }
        self.head = Some((status, headers));
        self.phase = match done {
            Some(close) => {
                self.closes = Some(close);
                Phase::Done
            }
            None if chunked && !self.reader.until_close() => Phase::Chunked(Dechunk::default()),
            None => Phase::Raw,
        };
        Ok(())
    }

    /// Content-Length or close-delimited payload: the reader says how much
    /// is this response's.
    fn feed_raw(&mut self, input: &[u8]) -> Result<usize, RelayError> {
        let give = input.get(..self.room().min(input.len())).unwrap_or_default();
        if give.is_empty() {
            return Ok(0);
        }
        let n = match self.reader.step(give).map_err(map_reader_error)? {
            Step::Consumed(n) => n,
            Step::Done { consumed, response } => {
                self.closes = Some(response.close);
                self.phase = Phase::Done;
                consumed
            }
            Step::NeedMore => 0,
        };
        self.body.extend_from_slice(give.get(..n).unwrap_or_default());
        Ok(n)
    }

    /// Chunked payload: our decoder picks the payload out (as much as there
    /// is room for), and the same bytes go through the reader, whose strict
    /// checks and end decide; the two must agree.
    fn feed_chunked(&mut self, input: &[u8]) -> Result<usize, RelayError> {
        let room = self.room();
        let Phase::Chunked(dechunk) = &mut self.phase else { return Ok(0) };
        let before = self.body.len();
        let taken = dechunk.run(input, room, &mut self.body).map_err(RelayError::Framing)?;
        let ours_done = dechunk.done();
        let give = input.get(..taken).unwrap_or_default();
        if give.is_empty() {
            return Ok(0);
        }
        // The reader returns after each chunk's data: step until it has
        // read all we did.
        let mut read = 0;
        while read < taken {
            match self.reader.step(give.get(read..).unwrap_or_default()) {
                Err(e) => {
                    self.body.truncate(before);
                    return Err(map_reader_error(e));
                }
                Ok(Step::Consumed(n)) if n > 0 => read += n,
                Ok(Step::Done { consumed, response }) if read + consumed == taken && ours_done => {
                    self.closes = Some(response.close);
                    self.phase = Phase::Done;
                    return Ok(taken);
                }
                Ok(_) => break,
            }
        }
        if read == taken && !ours_done {
            return Ok(taken);
        }
        self.body.truncate(before);
        Err(RelayError::Framing("chunk framing read two ways"))
    }
}

fn map_reader_error(e: ResponseError) -> RelayError {
    match e {
        ResponseError::Malformed(why) => RelayError::Head(why),
        ResponseError::HeadTooLarge(max) => RelayError::TooLarge(max),
        ResponseError::Chunk(why) => RelayError::Framing(why),
    }
}

/// The status, the end-to-end fields and whether the body is chunked, from
/// a head the reader accepted (so its lines are `name: value` CR LF).
/// `content-length` is kept (once) but on a 204, which cannot have one: for
/// a body framed by its length it is that length; on a HEAD answer or a
/// 304 it is the representation's, which RFC 9110 lets pass (RFC 9113
/// 8.1.1: no DATA need match it). A chunked or close-delimited body has
/// none (the reader refuses one next to Transfer-Encoding).
fn parse_fields(head: &[u8]) -> Result<(u16, Fields, bool), RelayError> {
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .get(9..12)
        .filter(|d| d.iter().all(u8::is_ascii_digit))
        .map(|d| d.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0')))
        .ok_or(RelayError::Head("status line"))?;
    let mut fields = Vec::new();
    let mut named: Vec<Vec<u8>> = Vec::new();
    let mut chunked = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let colon = line.iter().position(|&b| b == b':').ok_or(RelayError::Head("header line without a colon"))?;
        let (name, value) = line.split_at(colon);
        let name = name.to_ascii_lowercase();
        let value = value.get(1..).unwrap_or_default().trim_ascii();
        // RFC 9113 8.2.1: HTTP/2 cannot carry these (the reader lets a lone
        // CR or a NUL through in a value; a client would refuse the head).
        if value.iter().any(|&b| b == 0 || b == b'\r') {
            return Err(RelayError::Head("field value with NUL or CR"));
        }
        match name.as_slice() {
            b"connection" => {
                named.extend(value.split(|&b| b == b',').map(|t| t.trim_ascii().to_ascii_lowercase()));
            }
            b"transfer-encoding" => {
                // The reader checked chunked is at most once and last.
                let last = value.split(|&b| b == b',').map(<[u8]>::trim_ascii).rfind(|t| !t.is_empty());
                chunked = last.is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            }
            _ => {}
        }
        fields.push((name, value.to_vec()));
    }
    let mut seen_length = false;
    fields.retain(|(name, _)| {
        if HOP_BY_HOP.contains(&name.as_slice()) || named.contains(name) {
            return false;
        }
        if name == b"content-length" {
            let keep = status != 204 && !seen_length;
            seen_length = true;
            return keep;
        }
        true
    });
    Ok((status, fields, chunked))
}

/// A chunked body's payload picked out of its framing. Lenient where the
/// reader is strict (it reads the same bytes and refuses what is not
/// exactly RFC 9112 7.1): here only the sizes and the ends matter.
#[derive(Debug, Clone, Copy, Default)]
enum Dechunk {
    /// In a size line: the size so far and its digits.
    #[default]
    SizeStart,
    Size {
        n: u64,
        digits: u8,
    },
    /// After the size, up to LF (extensions).
    Ext {
        n: u64,
    },
    Data(u64),
    /// After a chunk's data, up to LF.
    DataEnd,
    /// In the trailer section: the length of the line so far.
    Trailer(usize),
    Done,
}

impl Dechunk {
    fn done(&self) -> bool {
        matches!(self, Dechunk::Done)
    }

    /// Reads framing and payload from `input`, appending payload to `out`
    /// while it holds fewer than `room` new bytes: how many bytes were read.
    fn run(&mut self, input: &[u8], room: usize, out: &mut Vec<u8>) -> Result<usize, &'static str> {
        let (mut pos, limit) = (0, out.len() + room);
        while let Some(&b) = input.get(pos) {
            *self = match *self {
                Dechunk::Done => break,
                Dechunk::Data(left) => {
                    let n = (left.min((input.len() - pos) as u64) as usize).min(limit - out.len());
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(input.get(pos..pos + n).unwrap_or_default());
                    pos += n;
                    let left = left - n as u64;
                    *self = if left == 0 { Dechunk::DataEnd } else { Dechunk::Data(left) };
                    continue;
                }
                Dechunk::SizeStart => Dechunk::Size { n: hex(b).ok_or("chunk size not hex")?, digits: 1 },
                Dechunk::Size { n, digits } => match hex(b) {
                    // 16 hex digits, the reader's bound (leading zeros
                    // included), still fit a u64.
                    Some(_) if digits >= 16 => return Err("chunk size too long"),
                    Some(d) => Dechunk::Size { n: n << 4 | d, digits: digits + 1 },
                    None if b == b'\n' => Dechunk::after_size(n),
                    None => Dechunk::Ext { n },
                },
                Dechunk::Ext { n } if b == b'\n' => Dechunk::after_size(n),
                Dechunk::Ext { n } => Dechunk::Ext { n },
                Dechunk::DataEnd if b == b'\n' => Dechunk::SizeStart,
                Dechunk::DataEnd => Dechunk::DataEnd,
                // A line of nothing but CR: the end of the trailers.
                Dechunk::Trailer(len) if b == b'\n' && len <= 1 => Dechunk::Done,
                Dechunk::Trailer(_) if b == b'\n' => Dechunk::Trailer(0),
                Dechunk::Trailer(len) => Dechunk::Trailer(len.saturating_add(1)),
            };
            pos += 1;
        }
        Ok(pos)
    }

    fn after_size(n: u64) -> Dechunk {
        if n == 0 {
            Dechunk::Trailer(0)
        } else {
            Dechunk::Data(n)
        }
    }
}

fn hex(b: u8) -> Option<u64> {
    char::from(b).to_digit(16).map(u64::from)
}

/// What [`pump`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pumped {
    /// The HEADERS went out in this call.
    pub head_sent: bool,
    /// Body bytes sent in this call.
    pub body: usize,
    /// The stream is answered (END_STREAM sent, or the stream is gone).
    pub finished: bool,
}

/// Writes what `relay` has ready to `stream` on `conn`: the head with
/// `send_headers` (with END_STREAM when the response has no body), then as
/// much body as `send_data` takes (the stream's and the connection's
/// windows, the output room), END_STREAM with the last byte. What did not
/// fit stays in the relay (its `room` shrinks, so `feed` takes less) and
/// goes on the next call: pump again after each `feed`, on
/// `Event::Writable` for the stream, and after `consume_output`.
/// `SendError::OutputFull` on the head is not an error here (the head
/// waits, `head_sent` false); `NoStream` (reset) and `TooLarge` are: the
/// stream cannot be answered with this head. Use `pump` or `poll`, not both.
pub fn pump(conn: &mut ServerConn, stream: u32, relay: &mut ResponseRelay) -> Result<Pumped, SendError> {
    let mut did = Pumped { finished: relay.end_delivered, ..Pumped::default() };
    if let Some((status, headers)) = &relay.head {
        let fields: Vec<(&[u8], &[u8])> = headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())).collect();
        let fin = relay.ended() && relay.body.is_empty();
        match conn.send_headers(stream, *status, &fields, fin) {
            Ok(()) => {}
            Err(SendError::OutputFull) => return Ok(did),
            Err(e) => return Err(e),
        }
        relay.head = None;
        relay.head_delivered = true;
        relay.end_delivered = fin;
        did.head_sent = true;
    }
    if !relay.head_delivered || relay.end_delivered {
        did.finished = relay.end_delivered;
        return Ok(did);
    }
    if !relay.body.is_empty() {
        let n = conn.send_data(stream, &relay.body, relay.ended());
        relay.body.drain(..n.min(relay.body.len()));
        did.body = n;
        relay.end_delivered = relay.ended() && relay.body.is_empty();
    } else if relay.ended() {
        // A body that ended on a boundary already sent: an empty DATA
        // with END_STREAM (not flow-controlled).
        conn.send_data(stream, &[], true);
        relay.end_delivered = true;
    }
    did.finished = relay.end_delivered;
    Ok(did)
}

/// The HTTP/1.1 request an h2 stream becomes, for the upstream: the head
/// from [`RequestHead::to_h1`], then the DATA, chunk-encoded (the last
/// chunk when the stream ends) when the head says `chunked`, else as they
/// come (the connection checked them against the content-length).
/// Trailers are dropped (`ServerConn` checks and drops them, and ends the
/// body with an empty `Data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBody {
    chunked: bool,
    open: bool,
}

impl RequestBody {
    /// From `Event::Request`: appends the head to `out`.
    pub fn start(head: &RequestHead, end_stream: bool, out: &mut Vec<u8>) -> RequestBody {
        out.extend_from_slice(&head.to_h1());
        RequestBody { chunked: head.chunked(), open: !end_stream }
    }

    /// From `Event::Data`: appends the body bytes in HTTP/1.1's framing
    /// (nothing once the body ended).
    pub fn data(&mut self, bytes: &[u8], end_stream: bool, out: &mut Vec<u8>) {
        if !self.open {
            return;
        }
        if self.chunked {
            chunk(out, bytes, end_stream);
        } else {
            out.extend_from_slice(bytes);
        }
        self.open = !end_stream;
    }

    /// The whole request was written.
    pub fn finished(&self) -> bool {
        !self.open
    }
}
