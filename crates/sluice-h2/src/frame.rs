//! RFC 9113 section 4 and 6: the 9-byte frame header, every frame type
//! parsed from a byte slice (never panicking, each malformation a
//! [`FrameError`] carrying the RFC error code and whether it is a stream or
//! a connection error), and encoders for what a server sends.

use std::fmt;

/// The length of a frame header.
pub const HEADER_LEN: usize = 9;
/// The largest frame payload before SETTINGS_MAX_FRAME_SIZE is raised
/// (RFC 9113 4.2); we never raise ours.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest value SETTINGS_MAX_FRAME_SIZE may take.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window (RFC 9113 6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The client connection preface (RFC 9113 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type codes (RFC 9113 6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 6).
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// The error codes of RFC 9113 section 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    NoError,
    ProtocolError,
    InternalError,
    FlowControlError,
    SettingsTimeout,
    StreamClosed,
    FrameSizeError,
    RefusedStream,
    Cancel,
    CompressionError,
    ConnectError,
    EnhanceYourCalm,
    InadequateSecurity,
    Http11Required,
    /// A code this crate does not know (a peer may send any; RFC 9113 7).
    Other(u32),
}

impl ErrorCode {
    /// The code on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            ErrorCode::NoError => 0x0,
            ErrorCode::ProtocolError => 0x1,
            ErrorCode::InternalError => 0x2,
            ErrorCode::FlowControlError => 0x3,
            ErrorCode::SettingsTimeout => 0x4,
            ErrorCode::StreamClosed => 0x5,
            ErrorCode::FrameSizeError => 0x6,
            ErrorCode::RefusedStream => 0x7,
            ErrorCode::Cancel => 0x8,
            ErrorCode::CompressionError => 0x9,
            ErrorCode::ConnectError => 0xa,
            ErrorCode::EnhanceYourCalm => 0xb,
            ErrorCode::InadequateSecurity => 0xc,
            ErrorCode::Http11Required => 0xd,
            ErrorCode::Other(c) => c,
        }
    }

    /// The code read from the wire.
    pub fn from_u32(c: u32) -> ErrorCode {
        match c {
            0x0 => ErrorCode::NoError,
            0x1 => ErrorCode::ProtocolError,
            0x2 => ErrorCode::InternalError,
            0x3 => ErrorCode::FlowControlError,
            0x4 => ErrorCode::SettingsTimeout,
            0x5 => ErrorCode::StreamClosed,
            0x6 => ErrorCode::FrameSizeError,
            0x7 => ErrorCode::RefusedStream,
            0x8 => ErrorCode::Cancel,
            0x9 => ErrorCode::CompressionError,
            0xa => ErrorCode::ConnectError,
            0xb => ErrorCode::EnhanceYourCalm,
            0xc => ErrorCode::InadequateSecurity,
            0xd => ErrorCode::Http11Required,
            c => ErrorCode::Other(c),
        }
    }
}

/// A malformed frame: the RFC error code, and the stream when it is a
/// stream error (RFC 9113 5.4.2; the connection survives), or None for a
/// connection error (5.4.1; GOAWAY and close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    pub code: ErrorCode,
    pub stream: Option<u32>,
    pub reason: &'static str,
}

impl FrameError {
    pub(crate) fn conn(code: ErrorCode, reason: &'static str) -> FrameError {
        FrameError { code, stream: None, reason }
    }
    pub(crate) fn stream(stream: u32, code: ErrorCode, reason: &'static str) -> FrameError {
        FrameError { code, stream: Some(stream), reason }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stream {
            Some(s) => write!(f, "stream {s}: {:?}: {}", self.code, self.reason),
            None => write!(f, "connection: {:?}: {}", self.code, self.reason),
        }
    }
}

impl std::error::Error for FrameError {}

/// The 9-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, the reserved bit cleared (RFC 9113 4.1: it
    /// MUST be ignored on receipt).
    pub stream: u32,
}

impl FrameHeader {
    /// The header at the start of `buf`, or None when fewer than 9 bytes.
    pub fn parse(buf: &[u8]) -> Option<FrameHeader> {
        // A fixed-size array: the indexes below are checked at compile time.
        let b = buf.first_chunk::<HEADER_LEN>()?;
        let len = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW;
        Some(FrameHeader { len, kind: b[3], flags: b[4], stream })
    }

    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// The dependency of a HEADERS (priority flag) or PRIORITY frame. The
/// guard schedules nothing by it (RFC 9113 5.3.2 deprecates the scheme);
/// it is parsed to find a self-dependency and the frame's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub exclusive: bool,
    pub dependency: u32,
    pub weight: u8,
}

/// One parsed frame, borrowing its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `data` is without padding; `flow_len` is the whole payload, padding
    /// included, which is what flow control counts (RFC 9113 6.1).
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
        flow_len: u32,
    },
    Headers {
        stream: u32,
        block: &'a [u8],
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: ErrorCode,
    },
    Settings {
        ack: bool,
        params: SettingsParams<'a>,
    },
    Ping {
        ack: bool,
        payload: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        block: &'a [u8],
        end_headers: bool,
    },
    /// A type this crate does not know: ignored (RFC 9113 4.1, 5.5).
    Unknown {
        kind: u8,
        stream: u32,
    },
}

/// The parameters of a SETTINGS frame, iterated without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingsParams<'a>(&'a [u8]);

impl<'a> Iterator for SettingsParams<'a> {
    type Item = (u16, u32);
    fn next(&mut self) -> Option<(u16, u32)> {
        let (p, rest) = self.0.split_first_chunk::<6>()?;
        self.0 = rest;
        Some((u16::from_be_bytes([p[0], p[1]]), u32::from_be_bytes([p[2], p[3], p[4], p[5]])))
    }
}

fn be32(b: &[u8]) -> Option<u32> {
    let c = b.first_chunk::<4>()?;
    Some(u32::from_be_bytes(*c))
}

/// Strips the padding of a DATA or HEADERS payload (RFC 9113 6.1, 6.2).
fn unpad<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    if !h.has(flag::PADDED) {
        return Ok(payload);
    }
    let (&pad, rest) =
        payload.split_first().ok_or(FrameError::conn(ErrorCode::FrameSizeError, "padded frame without pad length"))?;
    let keep = rest
        .len()
        .checked_sub(pad as usize)
        .ok_or(FrameError::conn(ErrorCode::ProtocolError, "padding longer than the payload"))?;
    Ok(rest.get(..keep).unwrap_or_default())
}

fn parse_priority(b: &[u8]) -> Option<Priority> {
    let dep = be32(b)?;
    let weight = *b.get(4)?;
    Some(Priority { exclusive: dep & 0x8000_0000 != 0, dependency: dep & MAX_WINDOW, weight })
}

impl<'a> Frame<'a> {
    /// Parses a frame's payload (the header already read; `payload` is
    /// exactly `h.len` bytes). The caller checks the length against its
    /// SETTINGS_MAX_FRAME_SIZE first (a FRAME_SIZE_ERROR before buffering).
    pub fn parse(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        use ErrorCode::{FrameSizeError as Size, ProtocolError as Proto};
        let on_stream = |what| if h.stream == 0 { Err(FrameError::conn(Proto, what)) } else { Ok(()) };
        let on_conn = |what| if h.stream != 0 { Err(FrameError::conn(Proto, what)) } else { Ok(()) };
        match h.kind {
            kind::DATA => {
                on_stream("DATA on stream 0")?;
                let data = unpad(h, payload)?;
                Ok(Frame::Data { stream: h.stream, data, end_stream: h.has(flag::END_STREAM), flow_len: h.len })
            }
            kind::HEADERS => Self::headers(h, payload),
            kind::PRIORITY => {
                on_stream("PRIORITY on stream 0")?;
                let priority = match (payload.len(), parse_priority(payload)) {
                    (5, Some(p)) => p,
                    _ => return Err(FrameError::stream(h.stream, Size, "PRIORITY not 5 bytes")),
                };
                Ok(Frame::Priority { stream: h.stream, priority })
            }
            kind::RST_STREAM => {
                on_stream("RST_STREAM on stream 0")?;
                match (payload.len(), be32(payload)) {
                    (4, Some(c)) => Ok(Frame::RstStream { stream: h.stream, code: ErrorCode::from_u32(c) }),
                    _ => Err(FrameError::conn(Size, "RST_STREAM not 4 bytes")),
                }
            }
            kind::SETTINGS => Self::settings(h, payload),
            kind::PUSH_PROMISE => Err(FrameError::conn(Proto, "PUSH_PROMISE from a client")),
            kind::PING => {
                on_conn("PING on a stream")?;
                match payload.first_chunk::<8>() {
                    Some(p) if payload.len() == 8 => Ok(Frame::Ping { ack: h.has(flag::ACK), payload: *p }),
                    _ => Err(FrameError::conn(Size, "PING not 8 bytes")),
                }
            }
            kind::GOAWAY => {
                on_conn("GOAWAY on a stream")?;
                match (be32(payload), payload.get(4..).and_then(be32), payload.get(8..)) {
                    (Some(last), Some(code), Some(debug)) => {
                        Ok(Frame::GoAway { last_stream: last & MAX_WINDOW, code: ErrorCode::from_u32(code), debug })
                    }
                    _ => Err(FrameError::conn(Size, "GOAWAY under 8 bytes")),
                }
            }
            kind::WINDOW_UPDATE => {
                let inc = match (payload.len(), be32(payload)) {
                    (4, Some(v)) => v & MAX_WINDOW,
                    _ => return Err(FrameError::conn(Size, "WINDOW_UPDATE not 4 bytes")),
                };
                if inc == 0 {
                    return Err(match h.stream {
                        0 => FrameError::conn(Proto, "WINDOW_UPDATE of 0"),
                        s => FrameError::stream(s, Proto, "WINDOW_UPDATE of 0"),
                    });
                }
                Ok(Frame::WindowUpdate { stream: h.stream, increment: inc })
            }
            kind::CONTINUATION => {
                on_stream("CONTINUATION on stream 0")?;
                Ok(Frame::Continuation { stream: h.stream, block: payload, end_headers: h.has(flag::END_HEADERS) })
            }
            k => Ok(Frame::Unknown { kind: k, stream: h.stream }),
        }
    }

    fn headers(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        if h.stream == 0 {
            return Err(FrameError::conn(ErrorCode::ProtocolError, "HEADERS on stream 0"));
        }
        let rest = unpad(h, payload)?;
        let (priority, block) = if h.has(flag::PRIORITY) {
            let p = parse_priority(rest)
                .ok_or(FrameError::conn(ErrorCode::FrameSizeError, "HEADERS too short for its priority"))?;
            (Some(p), rest.get(5..).unwrap_or_default())
        } else {
            (None, rest)
        };
        Ok(Frame::Headers {
            stream: h.stream,
            block,
            end_stream: h.has(flag::END_STREAM),
            end_headers: h.has(flag::END_HEADERS),
            priority,
        })
    }

    fn settings(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        if h.stream != 0 {
            return Err(FrameError::conn(ErrorCode::ProtocolError, "SETTINGS on a stream"));
        }
        let ack = h.has(flag::ACK);
        if ack && !payload.is_empty() {
            return Err(FrameError::conn(ErrorCode::FrameSizeError, "SETTINGS ack with a payload"));
        }
        if !payload.len().is_multiple_of(6) {
            return Err(FrameError::conn(ErrorCode::FrameSizeError, "SETTINGS not a multiple of 6 bytes"));
        }
        for (id, v) in SettingsParams(payload) {
            match id {
                setting::ENABLE_PUSH if v > 1 => {
                    return Err(FrameError::conn(ErrorCode::ProtocolError, "ENABLE_PUSH not 0 or 1"))
                }
                setting::INITIAL_WINDOW_SIZE if v > MAX_WINDOW => {
                    return Err(FrameError::conn(ErrorCode::FlowControlError, "INITIAL_WINDOW_SIZE over 2^31-1"))
                }
                setting::MAX_FRAME_SIZE if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&v) => {
                    return Err(FrameError::conn(ErrorCode::ProtocolError, "MAX_FRAME_SIZE out of range"))
                }
                _ => {}
            }
        }
        Ok(Frame::Settings { ack, params: SettingsParams(payload) })
    }
}

// ===== encoders (what a server sends) =====

/// Writes a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// A SETTINGS frame with these parameters.
pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    write_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// A SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// A PING (acknowledgement or not) with this opaque payload.
pub fn write_ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    write_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

/// A GOAWAY with no debug data.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode) {
    write_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&code.to_u32().to_be_bytes());
}

/// An RST_STREAM.
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_u32().to_be_bytes());
}

/// A WINDOW_UPDATE (stream 0: the connection's window).
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

/// A PRIORITY frame (tests and clients; a server never needs it).
pub fn write_priority(out: &mut Vec<u8>, stream: u32, dependency: u32, weight: u8) {
    write_header(out, 5, kind::PRIORITY, 0, stream);
    out.extend_from_slice(&(dependency & MAX_WINDOW).to_be_bytes());
    out.push(weight);
}

/// A header block as HEADERS and, past `max_frame` bytes, CONTINUATION
/// frames (RFC 9113 4.3: one contiguous sequence).
pub fn write_headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame);
    let first = chunks.next().unwrap_or_default();
    let mut rest = chunks.peekable();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(c) = rest.next() {
        let f = if rest.peek().is_none() { flag::END_HEADERS } else { 0 };
        write_header(out, c.len(), kind::CONTINUATION, f, stream);
        out.extend_from_slice(c);
    }
}

/// A CONTINUATION frame (tests and clients).
pub fn write_continuation(out: &mut Vec<u8>, stream: u32, block: &[u8], end_headers: bool) {
    write_header(out, block.len(), kind::CONTINUATION, if end_headers { flag::END_HEADERS } else { 0 }, stream);
    out.extend_from_slice(block);
}

/// DATA frames carrying `data`, each at most `max_frame` bytes; END_STREAM
/// on the last (an empty DATA frame when `data` is empty).
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool, max_frame: usize) {
    let max_frame = max_frame.max(1);
    if data.is_empty() {
        write_header(out, 0, kind::DATA, if end_stream { flag::END_STREAM } else { 0 }, stream);
        return;
    }
    let mut chunks = data.chunks(max_frame).peekable();
    while let Some(c) = chunks.next() {
        let f = if end_stream && chunks.peek().is_none() { flag::END_STREAM } else { 0 };
        write_header(out, c.len(), kind::DATA, f, stream);
        out.extend_from_slice(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<Frame<'_>, FrameError> {
        let h = FrameHeader::parse(buf).ok_or(FrameError::conn(ErrorCode::FrameSizeError, "short"))?;
        Frame::parse(&h, buf.get(HEADER_LEN..).unwrap_or_default())
    }

    #[test]
    fn round_trips() {
        let mut b = Vec::new();
        write_ping(&mut b, true, *b"abcdefgh");
        assert_eq!(parse(&b), Ok(Frame::Ping { ack: true, payload: *b"abcdefgh" }));
        b.clear();
        write_goaway(&mut b, 7, ErrorCode::EnhanceYourCalm);
        assert_eq!(parse(&b), Ok(Frame::GoAway { last_stream: 7, code: ErrorCode::EnhanceYourCalm, debug: &[] }));
        b.clear();
        write_window_update(&mut b, 3, 100);
        assert_eq!(parse(&b), Ok(Frame::WindowUpdate { stream: 3, increment: 100 }));
        b.clear();
        write_rst_stream(&mut b, 5, ErrorCode::Cancel);
        assert_eq!(parse(&b), Ok(Frame::RstStream { stream: 5, code: ErrorCode::Cancel }));
        b.clear();
        write_settings(&mut b, &[(setting::MAX_CONCURRENT_STREAMS, 100)]);
        match parse(&b) {
            Ok(Frame::Settings { ack: false, params }) => {
                assert_eq!(params.collect::<Vec<_>>(), vec![(setting::MAX_CONCURRENT_STREAMS, 100)])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn padding_and_priority() {
        // HEADERS, PADDED|PRIORITY|END_HEADERS, pad 2, dep 3 weight 16, block "ab".
        let mut b = Vec::new();
        write_header(&mut b, 1 + 5 + 2 + 2, kind::HEADERS, flag::PADDED | flag::PRIORITY | flag::END_HEADERS, 1);
        b.extend_from_slice(&[2, 0, 0, 0, 3, 16, b'a', b'b', 0, 0]);
        let f = parse(&b).unwrap();
        assert_eq!(
            f,
            Frame::Headers {
                stream: 1,
                block: b"ab",
                end_stream: false,
                end_headers: true,
                priority: Some(Priority { exclusive: false, dependency: 3, weight: 16 })
            }
        );
        // Padding as long as the rest: PROTOCOL_ERROR.
        let mut b = Vec::new();
        write_header(&mut b, 3, kind::DATA, flag::PADDED, 1);
        b.extend_from_slice(&[3, 0, 0]);
        assert_eq!(parse(&b).unwrap_err().code, ErrorCode::ProtocolError);
    }

    #[test]
    fn malformed_codes() {
        type Case<'a> = (u8, u8, u32, &'a [u8], ErrorCode, bool);
        let cases: &[Case<'_>] = &[
            (kind::PING, 0, 0, b"1234567", ErrorCode::FrameSizeError, false),
            (kind::PING, 0, 1, b"12345678", ErrorCode::ProtocolError, false),
            (kind::SETTINGS, flag::ACK, 0, b"123456", ErrorCode::FrameSizeError, false),
            (kind::SETTINGS, 0, 0, b"12345", ErrorCode::FrameSizeError, false),
            (kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2], ErrorCode::ProtocolError, false),
            (kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0], ErrorCode::FlowControlError, false),
            (kind::SETTINGS, 0, 0, &[0, 5, 0, 0, 0, 1], ErrorCode::ProtocolError, false),
            (kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 0], ErrorCode::ProtocolError, true),
            (kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0], ErrorCode::FrameSizeError, false),
            (kind::PRIORITY, 0, 1, &[0, 0, 0, 0], ErrorCode::FrameSizeError, true),
            (kind::RST_STREAM, 0, 0, &[0, 0, 0, 0], ErrorCode::ProtocolError, false),
            (kind::PUSH_PROMISE, 0, 1, &[], ErrorCode::ProtocolError, false),
            (kind::GOAWAY, 0, 0, &[0; 7], ErrorCode::FrameSizeError, false),
            (kind::DATA, 0, 0, &[], ErrorCode::ProtocolError, false),
            (kind::HEADERS, flag::PRIORITY, 1, &[0; 4], ErrorCode::FrameSizeError, false),
        ];
        for &(k, f, s, p, code, is_stream) in cases {
            let mut b = Vec::new();
            write_header(&mut b, p.len(), k, f, s);
            b.extend_from_slice(p);
            let e = parse(&b).unwrap_err();
            assert_eq!((e.code, e.stream.is_some()), (code, is_stream), "type {k} {e}");
        }
        let mut b = Vec::new();
        write_header(&mut b, 0, 0x42, 0, 0);
        assert_eq!(parse(&b), Ok(Frame::Unknown { kind: 0x42, stream: 0 }));
    }

    #[test]
    fn headers_split_into_continuations() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut b = Vec::new();
        write_headers(&mut b, 1, &block, true, 16);
        let mut pos = 0;
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        while let Some(h) = FrameHeader::parse(&b[pos..]) {
            let f = Frame::parse(&h, &b[pos + 9..pos + 9 + h.len as usize]).unwrap();
            kinds.push((h.kind, h.flags));
            match f {
                Frame::Headers { block, .. } | Frame::Continuation { block, .. } => got.extend_from_slice(block),
                _ => panic!(),
            }
            pos += 9 + h.len as usize;
        }
        assert_eq!(got, block);
        assert_eq!(
            kinds,
            vec![(kind::HEADERS, flag::END_STREAM), (kind::CONTINUATION, 0), (kind::CONTINUATION, flag::END_HEADERS)]
        );
    }
}
