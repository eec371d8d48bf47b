//! A test client: frames built with the crate's own encoders, fed to a
//! `ServerConn` at a given time, and what the server wrote read back.
#![allow(dead_code)]

use sluice_h2::frame::{self, Frame, FrameHeader, HEADER_LEN, PREFACE};
use sluice_h2::hpack;
use sluice_h2::{ConnError, Event, Limits, ServerConn};
use std::time::{Duration, Instant};

/// A frame the server sent, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Out {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

pub struct Peer {
    pub conn: ServerConn,
    pub t0: Instant,
    pub events: Vec<Event>,
    pub frames: Vec<Out>,
    out_buf: Vec<u8>,
}

impl Peer {
    pub fn new() -> Peer {
        Peer::with(Limits::default())
    }

    pub fn with(limits: Limits) -> Peer {
        let t0 = Instant::now();
        Peer { conn: ServerConn::new(limits, t0), t0, events: Vec::new(), frames: Vec::new(), out_buf: Vec::new() }
    }

    pub fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Feeds `bytes` at `ms`, draining events and output as it goes (so
    /// reading never pauses), until all is taken or an error.
    pub fn feed(&mut self, bytes: &[u8], ms: u64) -> Result<(), ConnError> {
        let now = self.at(ms);
        let mut pos = 0;
        loop {
            let r = self.conn.recv(&bytes[pos..], now);
            self.drain();
            let n = r?;
            pos += n;
            if pos == bytes.len() {
                return Ok(());
            }
            assert!(n > 0 || self.conn.pending_output().is_empty(), "no progress");
        }
    }

    pub fn drain(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
        let out = self.conn.pending_output().to_vec();
        self.conn.consume_output(out.len());
        self.out_buf.extend_from_slice(&out);
        while let Some(h) = FrameHeader::parse(&self.out_buf) {
            let total = HEADER_LEN + h.len as usize;
            if self.out_buf.len() < total {
                break;
            }
            let payload = self.out_buf[HEADER_LEN..total].to_vec();
            self.frames.push(Out { kind: h.kind, flags: h.flags, stream: h.stream, payload });
            self.out_buf.drain(..total);
        }
    }

    /// The preface, an empty SETTINGS and the ack of the server's.
    pub fn handshake(&mut self) {
        let mut b = PREFACE.to_vec();
        frame::write_settings(&mut b, &[]);
        frame::write_settings_ack(&mut b);
        self.feed(&b, 0).unwrap();
    }

    pub fn breaches(&self) -> Vec<&'static str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Breach(k) => Some(k.name()),
                _ => None,
            })
            .collect()
    }

    pub fn sent(&self, kind: u8) -> Vec<&Out> {
        self.frames.iter().filter(|f| f.kind == kind).collect()
    }

    pub fn goaway_code(&self) -> Option<u32> {
        self.sent(frame::kind::GOAWAY).last().map(|f| u32::from_be_bytes(f.payload[4..8].try_into().unwrap()))
    }
}

pub fn request_block(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", method.as_bytes()),
        (b":scheme", b"https"),
        (b":path", path.as_bytes()),
        (b":authority", b"example.test"),
    ];
    fields.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let mut block = Vec::new();
    hpack::encode(&mut block, fields);
    block
}

/// A GET on `stream` with END_STREAM.
pub fn get(stream: u32) -> Vec<u8> {
    let mut b = Vec::new();
    frame::write_headers(&mut b, stream, &request_block("GET", "/", &[]), true, 16_384);
    b
}

pub fn rst(stream: u32) -> Vec<u8> {
    let mut b = Vec::new();
    frame::write_rst_stream(&mut b, stream, frame::ErrorCode::Cancel);
    b
}

pub fn parse_all(buf: &[u8]) -> Vec<Out> {
    let mut v = Vec::new();
    let mut pos = 0;
    while let Some(h) = FrameHeader::parse(&buf[pos..]) {
        let total = HEADER_LEN + h.len as usize;
        let _ = Frame::parse(&h, &buf[pos + HEADER_LEN..pos + total]);
        v.push(Out {
            kind: h.kind,
            flags: h.flags,
            stream: h.stream,
            payload: buf[pos + HEADER_LEN..pos + total].to_vec(),
        });
        pos += total;
    }
    v
}
