//! The reading side of [`ServerConn`]: the preface, frames assembled from
//! any split of the input, and each frame type's rules and budgets.

use super::{BlockFor, BreachKind, ConnError, Event, Pending, ServerConn, Stream};
use crate::frame::{
    self, kind, setting, ErrorCode, Frame, FrameError, FrameHeader, Priority, SettingsParams, HEADER_LEN, PREFACE,
};
use crate::head::HeadBuilder;
use crate::hpack::DecoderError;
use std::time::Instant;

use ErrorCode::{FlowControlError, ProtocolError, StreamClosed};

impl ServerConn {
    /// Reads `input` (plaintext from the TLS stream): returns how many
    /// bytes were taken. Fewer than `input.len()` when reading paused (the
    /// output is at `max_output`, or the queued events at
    /// `max_event_bytes`): keep the rest, write out `pending_output`, drain
    /// `poll_event`, and offer it again. Any split of the input gives the
    /// same events (a frame that arrives in pieces is kept, at most one
    /// frame of 16 KiB). An error ends the connection: its GOAWAY is in
    /// `pending_output`.
    pub fn recv(&mut self, input: &[u8], now: Instant) -> Result<usize, ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        self.tick(now)?;
        let mut pos = 0;
        while self.preface < PREFACE.len() {
            let Some(&b) = input.get(pos) else { return Ok(pos) };
            if PREFACE.get(self.preface) != Some(&b) {
                return Err(self.protocol(FrameError::conn(ProtocolError, "not the HTTP/2 client preface")));
            }
            self.preface += 1;
            pos += 1;
        }
        while pos < input.len() && !self.paused() {
            let rest = input.get(pos..).unwrap_or_default();
            if self.frame.is_empty() {
                // The common case: a whole frame in the input, read in place.
                if let Some(h) = FrameHeader::parse(rest) {
                    self.check_len(&h)?;
                    let total = HEADER_LEN + h.len as usize;
                    if let Some(whole) = rest.get(HEADER_LEN..total) {
                        self.handle(&h, whole)?;
                        pos += total;
                        continue;
                    }
                }
            }
            pos += self.accumulate(rest)?;
        }
        Ok(pos)
    }

    /// Reading waits: the output or the event queue is at its cap.
    fn paused(&self) -> bool {
        self.out.len() >= self.limits.max_output || self.event_bytes >= self.limits.max_event_bytes
    }

    fn check_len(&mut self, h: &FrameHeader) -> Result<(), ConnError> {
        if h.len > frame::DEFAULT_MAX_FRAME_SIZE {
            return Err(
                self.protocol(FrameError::conn(ErrorCode::FrameSizeError, "frame over SETTINGS_MAX_FRAME_SIZE"))
            );
        }
        Ok(())
    }

    /// Adds a piece of a frame to `self.frame`, handling it once whole.
    fn accumulate(&mut self, rest: &[u8]) -> Result<usize, ConnError> {
        let want = match FrameHeader::parse(&self.frame) {
            Some(h) => HEADER_LEN + h.len as usize,
            None => HEADER_LEN,
        };
        let take = want.saturating_sub(self.frame.len()).min(rest.len());
        self.frame.extend_from_slice(rest.get(..take).unwrap_or_default());
        let Some(h) = FrameHeader::parse(&self.frame) else { return Ok(take) };
        if self.frame.len() == HEADER_LEN {
            self.check_len(&h)?;
            self.frame.reserve_exact(h.len as usize);
        }
        if self.frame.len() == HEADER_LEN + h.len as usize {
            let buf = std::mem::take(&mut self.frame);
            let r = self.handle(&h, buf.get(HEADER_LEN..).unwrap_or_default());
            self.frame = buf;
            self.frame.clear();
            r?;
        }
        Ok(take)
    }

    fn handle(&mut self, h: &FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        self.stats.frames += 1;
        if self.pending.is_some() && h.kind != kind::CONTINUATION {
            return Err(self.protocol(FrameError::conn(ProtocolError, "frame between HEADERS and CONTINUATION")));
        }
        if h.stream != 0 && h.stream.is_multiple_of(2) && h.kind <= kind::CONTINUATION {
            return Err(self.protocol(FrameError::conn(ProtocolError, "even stream id from a client")));
        }
        let f = match Frame::parse(h, payload) {
            Ok(f) => f,
            Err(e) => return self.frame_error(e),
        };
        match f {
            Frame::Data { stream, data, end_stream, flow_len } => self.on_data(stream, data, end_stream, flow_len),
            Frame::Headers { stream, block, end_stream, end_headers, priority } => {
                self.on_headers(stream, block, end_stream, end_headers, priority)
            }
            Frame::Continuation { stream, block, end_headers } => self.on_continuation(stream, block, end_headers),
            Frame::Priority { stream, priority } => {
                if !self.priority.take(self.now) {
                    return Err(self.breach(BreachKind::PriorityFlood));
                }
                if priority.dependency == stream {
                    return self.stream_error(stream, ProtocolError);
                }
                Ok(())
            }
            Frame::RstStream { stream, .. } => self.on_rst(stream),
            Frame::Settings { ack, params } => self.on_settings(ack, params),
            Frame::Ping { ack, payload } => {
                if ack {
                    return Ok(());
                }
                if !self.pings.take(self.now) {
                    return Err(self.breach(BreachKind::PingFlood));
                }
                self.reply(|o| frame::write_ping(o, true, payload))
            }
            Frame::GoAway { last_stream, code, .. } => {
                self.push_event(Event::GoAway { last_stream, code });
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
            Frame::Unknown { .. } => Ok(()),
        }
    }

    fn frame_error(&mut self, e: FrameError) -> Result<(), ConnError> {
        match e.stream {
            Some(s) if s <= self.last_stream => self.stream_error(s, e.code),
            _ => Err(self.protocol(FrameError { stream: None, ..e })),
        }
    }

    /// A frame on a stream the client never opened (RFC 9113 5.1: idle).
    fn idle(&mut self, what: &'static str) -> Result<(), ConnError> {
        Err(self.protocol(FrameError::conn(ProtocolError, what)))
    }

    fn on_data(&mut self, stream: u32, data: &[u8], end_stream: bool, flow_len: u32) -> Result<(), ConnError> {
        if stream > self.last_stream {
            return self.idle("DATA on an idle stream");
        }
        let flow = i64::from(flow_len);
        if flow > self.recv_window {
            return Err(self.protocol(FrameError::conn(FlowControlError, "DATA over the connection window")));
        }
        self.recv_window -= flow;
        if data.is_empty() && !end_stream && !self.empty.take(self.now) {
            return Err(self.breach(BreachKind::EmptyFrames));
        }
        // Padding is flow-controlled but never the application's: credit
        // it back at once.
        let padding = flow_len - data.len() as u32;
        let Some(s) = self.streams.get_mut(&stream) else {
            // Closed (reset, or done): RFC 9113 6.1 still counts it against
            // the connection window; the bytes are dropped, so credited.
            self.credit_conn(flow_len);
            return Ok(());
        };
        if !s.recv_open {
            self.credit_conn(flow_len);
            return self.stream_error(stream, StreamClosed);
        }
        if flow > s.recv_window {
            self.credit_conn(flow_len);
            return self.stream_error(stream, FlowControlError);
        }
        s.recv_window -= flow;
        s.received += data.len() as u64;
        // At most the stream window: u32 holds it.
        s.unreleased = s.unreleased.saturating_add(data.len() as u32);
        let length_ok = match s.content_length {
            Some(cl) if end_stream => s.received == cl,
            Some(cl) => s.received <= cl,
            None => true,
        };
        if !length_ok {
            self.credit_conn(flow_len);
            return self.stream_error(stream, ProtocolError);
        }
        if end_stream {
            s.recv_open = false;
        }
        self.credit_conn(padding);
        self.push_event(Event::Data { stream, bytes: data.to_vec(), end_stream });
        self.maybe_done(stream);
        Ok(())
    }

    fn on_headers(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
    ) -> Result<(), ConnError> {
        if block.is_empty() && !end_stream && !self.empty.take(self.now) {
            return Err(self.breach(BreachKind::EmptyFrames));
        }
        let for_ = match self.streams.get(&stream) {
            Some(s) if s.recv_open => BlockFor::Trailers,
            // Half-closed (remote): decoded for the table, then
            // STREAM_CLOSED (RFC 9113 5.1); counted as a trailer block
            // without END_STREAM would be.
            Some(_) => BlockFor::Ignored,
            None if stream > self.last_stream => {
                self.last_stream = stream;
                if self.goaway_sent {
                    BlockFor::Ignored
                } else if self.streams.len() >= self.limits.max_concurrent_streams as usize {
                    BlockFor::Refused
                } else {
                    BlockFor::Request
                }
            }
            None => BlockFor::Ignored,
        };
        if block.len() > self.limits.max_head {
            return Err(self.breach(BreachKind::HeadTooLarge));
        }
        self.block.clear();
        self.block.extend_from_slice(block);
        let self_dependent = priority.is_some_and(|p| p.dependency == stream);
        self.pending = Some(Pending { stream, end_stream, for_, continuations: 0, self_dependent });
        if end_headers {
            return self.finish_block();
        }
        Ok(())
    }

    fn on_continuation(&mut self, stream: u32, block: &[u8], end_headers: bool) -> Result<(), ConnError> {
        let Some(p) = self.pending.as_mut().filter(|p| p.stream == stream) else {
            return Err(self.protocol(FrameError::conn(ProtocolError, "CONTINUATION without its HEADERS")));
        };
        p.continuations += 1;
        // Both bounds hold on the raw bytes, before any HPACK decoding.
        if p.continuations > self.limits.max_continuations {
            return Err(self.breach(BreachKind::ContinuationFlood));
        }
        if self.block.len() + block.len() > self.limits.max_head {
            return Err(self.breach(BreachKind::HeadTooLarge));
        }
        if block.is_empty() && !end_headers && !self.empty.take(self.now) {
            return Err(self.breach(BreachKind::EmptyFrames));
        }
        self.block.extend_from_slice(block);
        if end_headers {
            return self.finish_block();
        }
        Ok(())
    }

    /// The whole raw block is here: decoded once, then used as `for_` says.
    fn finish_block(&mut self) -> Result<(), ConnError> {
        let Some(p) = self.pending.take() else { return Ok(()) };
        let mut b = HeadBuilder::new(p.for_ == BlockFor::Trailers);
        let block = std::mem::take(&mut self.block);
        let r = self.decoder.decode(&block, self.limits.max_head, |n, v| b.field(n, v));
        self.block = block;
        self.block.clear();
        if self.block.capacity() > self.limits.max_head {
            self.block.shrink_to(self.limits.max_head);
        }
        match r {
            Ok(()) => {}
            // Decoded in full, so the table is in step: this stream only.
            Err(DecoderError::ListTooLarge) => return self.refuse(p, ProtocolError),
            Err(_) => return Err(self.protocol(FrameError::conn(ErrorCode::CompressionError, "HPACK decoding failed"))),
        }
        if p.self_dependent {
            return self.refuse(p, ProtocolError);
        }
        match p.for_ {
            BlockFor::Request => match b.finish(!p.end_stream) {
                Ok(head) => {
                    let s = Stream::new(&self.limits, self.peer_initial_window, &head, p.end_stream);
                    self.streams.insert(p.stream, s);
                    self.priority.give(self.limits.priority_per_stream);
                    self.stats.requests += 1;
                    self.push_event(Event::Request { stream: p.stream, head, end_stream: p.end_stream });
                    Ok(())
                }
                Err(_) => {
                    // A malformed request costs a decode and a reply and
                    // reaches no request budget of the guard's: counted
                    // with the resets.
                    if !self.resets_total.take(self.now) {
                        return Err(self.breach(BreachKind::RapidReset));
                    }
                    self.stats.stream_errors += 1;
                    self.reply(|o| frame::write_rst_stream(o, p.stream, ProtocolError))
                }
            },
            BlockFor::Trailers => {
                let ok = b.finish_trailers().is_ok() && p.end_stream;
                let length_ok =
                    self.streams.get(&p.stream).is_some_and(|s| s.content_length.is_none_or(|cl| cl == s.received));
                if !ok || !length_ok {
                    return self.stream_error(p.stream, ProtocolError);
                }
                if let Some(s) = self.streams.get_mut(&p.stream) {
                    s.recv_open = false;
                }
                self.push_event(Event::Data { stream: p.stream, bytes: Vec::new(), end_stream: true });
                self.maybe_done(p.stream);
                Ok(())
            }
            BlockFor::Refused => {
                // A stream opened past the limit is a reset in all but name:
                // counted with them (Rapid Reset's other form).
                if !self.resets_total.take(self.now) {
                    return Err(self.breach(BreachKind::RapidReset));
                }
                self.stats.refused += 1;
                self.reply(|o| frame::write_rst_stream(o, p.stream, ErrorCode::RefusedStream))
            }
            BlockFor::Ignored => {
                // A block for no stream: work for nothing, counted too.
                if !self.resets_total.take(self.now) {
                    return Err(self.breach(BreachKind::RapidReset));
                }
                if self.streams.contains_key(&p.stream) {
                    return self.stream_error(p.stream, StreamClosed);
                }
                Ok(())
            }
        }
    }

    fn refuse(&mut self, p: Pending, code: ErrorCode) -> Result<(), ConnError> {
        match p.for_ {
            BlockFor::Trailers => self.stream_error(p.stream, code),
            BlockFor::Ignored if !self.streams.contains_key(&p.stream) => Ok(()),
            _ => self.reply(|o| frame::write_rst_stream(o, p.stream, code)),
        }
    }

    fn on_rst(&mut self, stream: u32) -> Result<(), ConnError> {
        if stream > self.last_stream {
            return self.idle("RST_STREAM on an idle stream");
        }
        self.stats.client_resets += 1;
        let total = self.resets_total.take(self.now);
        let net = self.resets_net.take(self.now);
        if !total || !net {
            return Err(self.breach(BreachKind::RapidReset));
        }
        if self.drop_stream(stream) {
            self.push_event(Event::Reset { stream });
        }
        Ok(())
    }

    fn on_settings(&mut self, ack: bool, params: SettingsParams<'_>) -> Result<(), ConnError> {
        if ack {
            self.settings_sent_at = None;
            return Ok(());
        }
        if !self.settings.take(self.now) {
            return Err(self.breach(BreachKind::SettingsFlood));
        }
        for (id, v) in params {
            match id {
                setting::HEADER_TABLE_SIZE => self.size_update_due = true,
                setting::MAX_FRAME_SIZE => self.peer_max_frame = v as usize,
                setting::INITIAL_WINDOW_SIZE => {
                    let delta = i64::from(v) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = v;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > i64::from(frame::MAX_WINDOW) {
                            let e = FrameError::conn(FlowControlError, "INITIAL_WINDOW_SIZE overflows a window");
                            return Err(self.protocol(e));
                        }
                    }
                    self.wake();
                }
                _ => {}
            }
        }
        self.reply(frame::write_settings_ack)
    }

    fn on_window_update(&mut self, stream: u32, inc: u32) -> Result<(), ConnError> {
        if !self.window_updates.take(self.now) {
            return Err(self.breach(BreachKind::WindowUpdateFlood));
        }
        let max = i64::from(frame::MAX_WINDOW);
        if stream == 0 {
            self.send_window += i64::from(inc);
            if self.send_window > max {
                return Err(self.protocol(FrameError::conn(FlowControlError, "connection window over 2^31-1")));
            }
        } else if stream > self.last_stream {
            return self.idle("WINDOW_UPDATE on an idle stream");
        } else if let Some(s) = self.streams.get_mut(&stream) {
            s.send_window += i64::from(inc);
            if s.send_window > max {
                return self.stream_error(stream, FlowControlError);
            }
        }
        self.wake();
        Ok(())
    }

    /// Streams waiting for window that have some again: `Writable`, and
    /// their zero-window clocks stopped.
    fn wake(&mut self) {
        let conn = self.send_window;
        let mut woke = Vec::new();
        for (&id, s) in self.streams.iter_mut() {
            if s.send_window.min(conn) > 0 {
                s.stalled_since = None;
                if s.wants_write {
                    s.wants_write = false;
                    woke.push(id);
                }
            }
        }
        for stream in woke {
            self.push_event(Event::Writable { stream });
        }
    }
}
