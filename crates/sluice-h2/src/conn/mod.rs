//! [`ServerConn`]: one HTTP/2 connection, server side, sans I/O. Bytes in
//! (`recv`, from the TLS stream, any split), events out (`poll_event`),
//! responses in (`send_headers`, `send_data`), bytes out
//! (`pending_output`, `consume_output`), time in (`tick`, `next_deadline`).

mod limits;
mod recv;

pub use limits::{BreachKind, Limits, DEFAULT_MEMORY_BOUND};

use crate::frame::{self, setting, ErrorCode, FrameError};
use crate::head::RequestHead;
use crate::hpack::{self, Decoder};
use limits::{Bucket, FRAME_BUF, STREAM_COST};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// What the connection tells its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A request head, checked (RFC 9113 8.3.1 and 8.2); `end_stream`: no
    /// body follows.
    Request { stream: u32, head: RequestHead, end_stream: bool },
    /// Request body bytes (padding removed). Call `release(stream, n)`
    /// once they are forwarded, so the client may send more. An empty
    /// `bytes` with `end_stream` ends the body (after trailers, which are
    /// checked and dropped).
    Data { stream: u32, bytes: Vec<u8>, end_stream: bool },
    /// The stream is gone after its `Request` was delivered: the client
    /// reset it, or it broke a stream rule (content-length mismatch, a
    /// frame on it out of place) and we reset it. Cancel its upstream
    /// request; `send_*` on it does nothing from now on.
    Reset { stream: u32 },
    /// A stream that `send_data` turned away for want of flow-control
    /// window has window again.
    Writable { stream: u32 },
    /// A flood caught; the connection is ending (GOAWAY queued): block the
    /// client. `recv` or `tick` also returns it as the error.
    Breach(BreachKind),
    /// The client sent GOAWAY: it opens no more streams; finish those up
    /// to `last_stream` and close.
    GoAway { last_stream: u32, code: ErrorCode },
}

/// Why the connection ended. GOAWAY is already queued in the output (write
/// it out, then close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnError {
    /// The peer broke the protocol: the RFC code sent in GOAWAY.
    Protocol(FrameError),
    /// A flood.
    Breach(BreachKind),
    /// The connection already ended (by an earlier error or `goaway` and
    /// all streams done) and reads nothing more.
    Closed,
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Protocol(e) => write!(f, "{e}"),
            ConnError::Breach(b) => f.write_str(b.name()),
            ConnError::Closed => f.write_str("closed"),
        }
    }
}

impl std::error::Error for ConnError {}

/// Why `send_headers` could not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No such open stream (never opened, reset, or already answered).
    NoStream,
    /// The output buffer is at `max_output`: write it out, then retry.
    OutputFull,
    /// The encoded head is over `max_head`.
    TooLarge,
}

/// What a connection has seen, for the guard's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames read.
    pub frames: u64,
    /// Requests delivered (`Event::Request`).
    pub requests: u64,
    /// RST_STREAM frames from the client.
    pub client_resets: u64,
    /// Streams refused over the concurrency limit.
    pub refused: u64,
    /// Requests refused as malformed (RFC 9113 8.1.1), and streams we
    /// reset for breaking a stream rule.
    pub stream_errors: u64,
}

/// One open stream.
#[derive(Debug, Clone)]
struct Stream {
    /// The client may still send on it (no END_STREAM yet).
    recv_open: bool,
    /// We may still send on it.
    send_open: bool,
    headers_sent: bool,
    recv_window: i64,
    /// Released by the application, not yet granted by WINDOW_UPDATE.
    recv_credit: u32,
    /// Delivered in `Event::Data`, not yet released.
    unreleased: u32,
    send_window: i64,
    content_length: Option<u64>,
    received: u64,
    /// `send_data` turned bytes away for want of window.
    wants_write: bool,
    /// Since when it has bytes waiting with the window at 0.
    stalled_since: Option<Instant>,
}

/// What the pending header block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockFor {
    Request,
    Trailers,
    /// Over the concurrency limit: decoded (for the HPACK table), then
    /// RST_STREAM(REFUSED_STREAM).
    Refused,
    /// Decoded for the HPACK table only (a closed stream, after our GOAWAY).
    Ignored,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    stream: u32,
    end_stream: bool,
    for_: BlockFor,
    continuations: u32,
    self_dependent: bool,
}

/// The server side of one HTTP/2 connection. See the crate docs.
#[derive(Debug)]
pub struct ServerConn {
    limits: Limits,
    now: Instant,
    preface: usize,
    /// A frame that arrived in pieces, its header first.
    frame: Vec<u8>,
    decoder: Decoder,
    /// The raw header block being assembled (HEADERS + CONTINUATION).
    block: Vec<u8>,
    pending: Option<Pending>,
    streams: BTreeMap<u32, Stream>,
    /// The highest client stream id seen (RFC 9113 5.1.1).
    last_stream: u32,
    out: Vec<u8>,
    /// Bytes taken by `consume_output` so far, and where each queued reply
    /// (ack, RST) ends in that count: the replies not yet taken.
    out_taken: u64,
    replies: VecDeque<u64>,
    events: VecDeque<Event>,
    event_bytes: usize,
    peer_initial_window: u32,
    peer_max_frame: usize,
    /// Our HPACK encoder owes a size update (the peer changed its table).
    size_update_due: bool,
    send_window: i64,
    recv_window: i64,
    recv_credit: u32,
    settings_sent_at: Option<Instant>,
    resets_net: Bucket,
    resets_total: Bucket,
    settings: Bucket,
    pings: Bucket,
    priority: Bucket,
    window_updates: Bucket,
    empty: Bucket,
    goaway_sent: bool,
    dead: Option<ConnError>,
    pub(super) stats: Stats,
}

impl ServerConn {
    /// A connection after the TLS handshake chose h2; our SETTINGS and the
    /// connection window's raise are queued in the output at once (RFC 9113
    /// 3.4: the server preface).
    pub fn new(limits: Limits, now: Instant) -> ServerConn {
        let settings_cap = limits.settings_burst;
        let mut c = ServerConn {
            now,
            preface: 0,
            frame: Vec::new(),
            decoder: Decoder::new(limits.header_table_size),
            block: Vec::new(),
            pending: None,
            streams: BTreeMap::new(),
            last_stream: 0,
            out: Vec::new(),
            out_taken: 0,
            replies: VecDeque::new(),
            events: VecDeque::new(),
            event_bytes: 0,
            peer_initial_window: 65_535,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE as usize,
            size_update_due: false,
            send_window: 65_535,
            recv_window: 65_535,
            recv_credit: 0,
            settings_sent_at: Some(now),
            resets_net: Bucket::new(limits.resets_net_per_sec, limits.resets_net_per_sec),
            resets_total: Bucket::new(limits.resets_total_per_sec, limits.resets_total_per_sec),
            settings: Bucket::new(settings_cap, limits.settings_per_sec),
            pings: Bucket::new(limits.pings_per_sec, limits.pings_per_sec),
            priority: Bucket::new(limits.priority_base, 0).with_ceiling(u64::MAX / 1000),
            window_updates: Bucket::new(limits.window_updates_per_sec, limits.window_updates_per_sec)
                .with_ceiling(u64::from(limits.window_updates_per_sec) + 4096),
            empty: Bucket::new(limits.empty_frames, 0),
            goaway_sent: false,
            dead: None,
            stats: Stats::default(),
            limits,
        };
        let l = &c.limits;
        let params = [
            (setting::HEADER_TABLE_SIZE, u32::try_from(l.header_table_size).unwrap_or(u32::MAX)),
            (setting::ENABLE_PUSH, 0),
            (setting::MAX_CONCURRENT_STREAMS, l.max_concurrent_streams),
            (setting::INITIAL_WINDOW_SIZE, l.stream_window.min(frame::MAX_WINDOW)),
            (setting::MAX_FRAME_SIZE, frame::DEFAULT_MAX_FRAME_SIZE),
            (setting::MAX_HEADER_LIST_SIZE, u32::try_from(l.max_head).unwrap_or(u32::MAX)),
        ];
        frame::write_settings(&mut c.out, &params);
        let raise = i64::from(l.conn_window.min(frame::MAX_WINDOW)) - c.recv_window;
        if raise > 0 {
            frame::write_window_update(&mut c.out, 0, raise as u32);
            c.recv_window += raise;
        }
        c
    }

    /// The limits this connection runs with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        self.event_bytes = self.event_bytes.saturating_sub(event_weight(&e));
        Some(e)
    }

    fn push_event(&mut self, e: Event) {
        self.event_bytes += event_weight(&e);
        self.events.push_back(e);
    }

    /// Bytes to write to the peer.
    pub fn pending_output(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of `pending_output` were written.
    pub fn consume_output(&mut self, n: usize) {
        let n = n.min(self.out.len());
        self.out.drain(..n);
        self.out_taken += n as u64;
        while self.replies.front().is_some_and(|&end| end <= self.out_taken) {
            self.replies.pop_front();
        }
        if self.out.is_empty() && self.out.capacity() > self.limits.max_output {
            // Give back a buffer that grew for a burst.
            self.out = Vec::new();
        }
    }

    /// The connection is over: an error ended it, or our GOAWAY was sent
    /// and no stream is left. Write out `pending_output`, then close.
    pub fn is_closed(&self) -> bool {
        self.dead.is_some() || (self.goaway_sent && self.streams.is_empty())
    }

    /// What this connection has seen so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// A frame or a header block is half read: the client owes the rest.
    /// The guard's header timeout applies (a client that starts a head and
    /// never finishes it holds up to `max_head`).
    pub fn reading_partial(&self) -> bool {
        self.pending.is_some() || !self.frame.is_empty()
    }

    /// Streams open now (the client's concurrency).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// What this connection holds now, in bytes, counted the way
    /// [`Limits::memory_bound`] bounds it.
    pub fn memory_in_use(&self) -> usize {
        limits::FIXED_COST
            + self.frame.capacity()
            + self.block.capacity()
            + self.decoder.memory_in_use()
            + self.event_bytes
            + self.streams.len() * STREAM_COST
            + self.out.capacity()
    }

    /// The most this connection can hold (its limits' memory bound).
    pub fn memory_bound(&self) -> usize {
        self.limits.memory_bound()
    }

    /// Queues a reply the peer owes us reading (ack, RST): counted until
    /// `consume_output` takes it; past `max_control_backlog` the peer is not
    /// reading and the connection ends.
    fn reply(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Result<(), ConnError> {
        write(&mut self.out);
        self.replies.push_back(self.out_taken + self.out.len() as u64);
        if self.replies.len() > self.limits.max_control_backlog {
            return Err(self.breach(BreachKind::ControlBacklog));
        }
        Ok(())
    }

    /// Ends the connection for a flood: GOAWAY (ENHANCE_YOUR_CALM, or
    /// SETTINGS_TIMEOUT) and the breach as an event.
    fn breach(&mut self, kind: BreachKind) -> ConnError {
        let code = match kind {
            BreachKind::SettingsTimeout => ErrorCode::SettingsTimeout,
            _ => ErrorCode::EnhanceYourCalm,
        };
        self.push_event(Event::Breach(kind));
        self.fail(ConnError::Breach(kind), code)
    }

    /// Ends the connection: GOAWAY with `code` (once), nothing read after.
    fn fail(&mut self, e: ConnError, code: ErrorCode) -> ConnError {
        if self.dead.is_none() {
            frame::write_goaway(&mut self.out, self.last_stream, code);
            self.goaway_sent = true;
            self.dead = Some(e);
        }
        e
    }

    fn protocol(&mut self, e: FrameError) -> ConnError {
        self.fail(ConnError::Protocol(e), e.code)
    }

    /// A stream error (RFC 9113 5.4.2): RST_STREAM with `code`; if the
    /// application knew the stream, `Event::Reset`.
    fn stream_error(&mut self, stream: u32, code: ErrorCode) -> Result<(), ConnError> {
        if self.drop_stream(stream) {
            self.push_event(Event::Reset { stream });
        }
        self.stats.stream_errors += 1;
        self.reply(|o| frame::write_rst_stream(o, stream, code))
    }

    /// The time-driven checks: the SETTINGS ack deadline and zero-window
    /// stalls. Call at `next_deadline` (or any time; it is cheap).
    pub fn tick(&mut self, now: Instant) -> Result<(), ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        self.now = now;
        if self.settings_sent_at.is_some_and(|t| now.saturating_duration_since(t) >= self.limits.settings_ack_timeout) {
            return Err(self.breach(BreachKind::SettingsTimeout));
        }
        let timeout = self.limits.zero_window_timeout;
        let stalled = self
            .streams
            .iter()
            .find(|(_, s)| s.stalled_since.is_some_and(|t| now.saturating_duration_since(t) >= timeout))
            .map(|(&id, _)| id);
        if let Some(id) = stalled {
            self.drop_stream(id);
            self.push_event(Event::Reset { stream: id });
            frame::write_rst_stream(&mut self.out, id, ErrorCode::Cancel);
            return Err(self.breach(BreachKind::ZeroWindowStall));
        }
        Ok(())
    }

    /// When `tick` next has something to check, if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.dead.is_some() {
            return None;
        }
        let settings = self.settings_sent_at.map(|t| t + self.limits.settings_ack_timeout);
        let stall =
            self.streams.values().filter_map(|s| s.stalled_since).min().map(|t| t + self.limits.zero_window_timeout);
        match (settings, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ===== the application's side =====

    /// The response head on `stream`: `:status` and `headers` (names are
    /// lower-cased; connection-specific fields, which HTTP/2 forbids, are
    /// left out, and so are the fields a `connection` field names: RFC 9113
    /// 8.2.2, so an HTTP/1.1 upstream's head can be passed as it is). Sent as HEADERS, and CONTINUATION past
    /// the peer's max frame size.
    pub fn send_headers(
        &mut self,
        stream: u32,
        status: u16,
        headers: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> Result<(), SendError> {
        match self.streams.get(&stream) {
            Some(s) if s.send_open && !s.headers_sent && self.dead.is_none() => {}
            _ => return Err(SendError::NoStream),
        }
        if self.out.len() >= self.limits.max_output {
            return Err(SendError::OutputFull);
        }
        let mut block = Vec::new();
        if self.size_update_due {
            // We keep no dynamic table: 0 always fits the peer's setting.
            hpack::encode_size_update(&mut block, 0);
        }
        let status = status.to_string();
        hpack::encode(&mut block, [(&b":status"[..], status.as_bytes())]);
        // RFC 9110 7.6.1: the fields a `connection` field names are hop-by-hop
        // too (an HTTP/1.1 upstream's answer passes through here).
        let named: Vec<Vec<u8>> = headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .map(|t| t.trim_ascii().to_ascii_lowercase())
            .collect();
        let mut lower = Vec::new();
        for (n, v) in headers {
            lower.clear();
            lower.extend(n.iter().map(u8::to_ascii_lowercase));
            let hop = crate::head::CONNECTION_SPECIFIC.contains(&lower.as_slice()) || named.contains(&lower);
            if hop || lower.first() == Some(&b':') {
                continue;
            }
            hpack::encode(&mut block, [(lower.as_slice(), *v)]);
        }
        if block.len() > self.limits.max_head {
            return Err(SendError::TooLarge);
        }
        self.size_update_due = false;
        frame::write_headers(&mut self.out, stream, &block, end_stream, self.peer_max_frame);
        if let Some(s) = self.streams.get_mut(&stream) {
            s.headers_sent = true;
            if end_stream {
                s.send_open = false;
            }
        }
        self.maybe_done(stream);
        Ok(())
    }

    /// How many body bytes `stream` can take now (its window, the
    /// connection's, and room in the output).
    pub fn send_capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(s) if s.send_open && s.headers_sent && self.dead.is_none() => {
                let win = s.send_window.min(self.send_window).max(0) as usize;
                win.min(self.output_room())
            }
            _ => 0,
        }
    }

    fn output_room(&self) -> usize {
        let room = self.limits.max_output.saturating_sub(self.out.len());
        room.saturating_sub((room / self.peer_max_frame.max(1) + 1) * frame::HEADER_LEN)
    }

    /// Response body bytes on `stream`: how many were taken (bounded by
    /// the stream's and the connection's send windows and the output
    /// room). The rest waits: `Event::Writable` says when the window opens
    /// again; after `consume_output` there may be room again. END_STREAM
    /// goes only with the last byte (an empty `data` with `end_stream`
    /// ends the stream).
    pub fn send_data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> usize {
        let cap = self.send_capacity(stream);
        let n = data.len().min(cap);
        if n == 0 && !(data.is_empty() && end_stream && self.streams.get(&stream).is_some_and(|s| s.send_open)) {
            self.note_short(stream, data.len());
            return 0;
        }
        let fin = end_stream && n == data.len();
        let before = self.out.len();
        let chunk = data.get(..n).unwrap_or_default();
        frame::write_data(&mut self.out, stream, chunk, fin, self.peer_max_frame);
        let frames = (self.out.len() - before - n) / frame::HEADER_LEN;
        self.window_updates.give((frames as u32).saturating_mul(self.limits.window_updates_per_data));
        self.send_window -= n as i64;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send_window -= n as i64;
            if fin {
                s.send_open = false;
            }
        }
        if n < data.len() {
            self.note_short(stream, data.len() - n);
        }
        self.maybe_done(stream);
        n
    }

    /// `send_data` left bytes waiting: note it, and start the zero-window
    /// clock when the window (not the output room) is what stopped them.
    fn note_short(&mut self, stream: u32, left: usize) {
        let conn_window = self.send_window;
        let now = self.now;
        if let Some(s) = self.streams.get_mut(&stream) {
            if left > 0 && s.send_open && s.headers_sent {
                s.wants_write = true;
                if s.send_window.min(conn_window) <= 0 && s.stalled_since.is_none() {
                    s.stalled_since = Some(now);
                }
            }
        }
    }

    /// Resets `stream` (RST_STREAM with `code`); no event follows for it.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if self.dead.is_none() && self.drop_stream(stream) {
            frame::write_rst_stream(&mut self.out, stream, code);
        }
    }

    /// Sends GOAWAY (`code`; NO_ERROR for a graceful close): the streams
    /// open go on, new ones are ignored; `is_closed` once they are done.
    pub fn goaway(&mut self, code: ErrorCode) {
        if !self.goaway_sent && self.dead.is_none() {
            frame::write_goaway(&mut self.out, self.last_stream, code);
            self.goaway_sent = true;
        }
    }

    /// The application has forwarded `n` bytes of `stream`'s DATA: the
    /// client may send that many more (WINDOW_UPDATE, batched to half a
    /// window). Bytes of a stream that is gone were reclaimed when it went:
    /// nothing to do then.
    pub fn release(&mut self, stream: u32, n: usize) {
        let half = self.limits.stream_window / 2;
        if self.dead.is_some() {
            return;
        }
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let n = u32::try_from(n).unwrap_or(u32::MAX).min(s.unreleased);
        s.unreleased -= n;
        let open = s.recv_open;
        self.credit_conn(n);
        // A stream the client finished sending on needs no more window.
        if let Some(s) = self.streams.get_mut(&stream).filter(|_| open) {
            s.recv_credit = s.recv_credit.saturating_add(n);
            if s.recv_credit >= half.max(1) {
                let inc = s.recv_credit;
                s.recv_credit = 0;
                s.recv_window += i64::from(inc);
                frame::write_window_update(&mut self.out, stream, inc);
            }
        }
    }

    /// Connection receive credit back (bytes released, or dropped with a
    /// stream), granted in WINDOW_UPDATEs of at least half the window.
    fn credit_conn(&mut self, n: u32) {
        self.recv_credit = self.recv_credit.saturating_add(n);
        if self.recv_credit >= (self.limits.conn_window / 2).max(1) && self.dead.is_none() {
            let inc = self.recv_credit.min(frame::MAX_WINDOW);
            self.recv_credit -= inc;
            self.recv_window += i64::from(inc);
            frame::write_window_update(&mut self.out, 0, inc);
        }
    }

    /// Forgets a stream; the body bytes it delivered that the application
    /// has not released are reclaimed for the connection window now (a
    /// `release` for it later is ignored), so a reset stream cannot leak
    /// the connection's window.
    pub(super) fn drop_stream(&mut self, stream: u32) -> bool {
        match self.streams.remove(&stream) {
            Some(s) => {
                self.credit_conn(s.unreleased);
                true
            }
            None => false,
        }
    }

    /// A stream both sides finished is dropped, and counts as completed
    /// (Rapid Reset's net count).
    fn maybe_done(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(|s| !s.recv_open && !s.send_open) {
            self.drop_stream(stream);
            self.resets_net.give(1);
        }
    }
}

/// How much an event weighs in the queue (its heap bytes, roughly).
fn event_weight(e: &Event) -> usize {
    match e {
        Event::Request { head, .. } => {
            128 + head.method.len()
                + head.scheme.len()
                + head.authority.len()
                + head.path.len()
                + head.fields.iter().map(|(n, v)| n.len() + v.len() + 48).sum::<usize>()
        }
        Event::Data { bytes, .. } => 64 + bytes.len(),
        _ => 64,
    }
}

impl Stream {
    fn new(limits: &Limits, peer_initial_window: u32, head: &RequestHead, end_stream: bool) -> Stream {
        Stream {
            recv_open: !end_stream,
            send_open: true,
            headers_sent: false,
            recv_window: i64::from(limits.stream_window),
            recv_credit: 0,
            unreleased: 0,
            send_window: i64::from(peer_initial_window),
            content_length: head.content_length,
            received: 0,
            wants_write: false,
            stalled_since: None,
        }
    }
}

const _: () = assert!(FRAME_BUF == 16_393);
