//! Every flood ServerConn refuses, fed as real frames at a deterministic
//! `now`: the breach at the limit, and the same traffic just under it with
//! no breach (so each test can fail both ways).

mod common;

use common::*;
use sluice_h2::frame::{self, kind, setting, ErrorCode};
use sluice_h2::{BreachKind, ConnError, Event, Limits};

const CALM: u32 = 0xb;

fn assert_breach(p: &Peer, r: Result<(), ConnError>, kind: BreachKind) {
    assert_eq!(r, Err(ConnError::Breach(kind)));
    assert_eq!(p.breaches(), vec![kind.name()]);
}

fn open_and_reset(n: u32, first: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        let s = first + 2 * i;
        frame::write_headers(&mut b, s, &request_block("POST", "/", &[]), false, 16_384);
        b.extend(rst(s));
    }
    b
}

#[test]
fn rapid_reset_net() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&open_and_reset(50, 1), 1).unwrap();
    assert!(p.breaches().is_empty());
    assert_eq!(p.events.iter().filter(|e| matches!(e, Event::Reset { .. })).count(), 50);
    // A second later the bucket is full again: 50 more pass.
    p.feed(&open_and_reset(50, 101), 1001).unwrap();
    assert!(p.breaches().is_empty());
    // The 51st within that second is the flood.
    let r = p.feed(&open_and_reset(1, 201), 1001);
    assert_breach(&p, r, BreachKind::RapidReset);
    assert_eq!(p.goaway_code(), Some(CALM));
}

/// Streams completed between resets keep the net count down; the total
/// count (200 a second) still catches the flood.
#[test]
fn rapid_reset_total_with_completions() {
    let mut p = Peer::new();
    p.handshake();
    let mut result = Ok(());
    for i in 0..201u32 {
        let s = 1 + 2 * i;
        p.feed(&get(s), 5).unwrap();
        p.conn.send_headers(s, 204, &[], true).unwrap();
        result = p.feed(&rst(s), 5);
        if i < 200 {
            assert_eq!(result, Ok(()), "reset {i}");
        }
    }
    assert_breach(&p, result, BreachKind::RapidReset);
}

#[test]
fn streams_over_the_limit_are_refused() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    for i in 0..101u32 {
        frame::write_headers(&mut b, 1 + 2 * i, &request_block("POST", "/", &[]), false, 16_384);
    }
    p.feed(&b, 1).unwrap();
    assert_eq!(p.conn.open_streams(), 100);
    let rsts = p.sent(kind::RST_STREAM);
    assert_eq!(rsts.len(), 1);
    assert_eq!((rsts[0].stream, &rsts[0].payload[..]), (201, &ErrorCode::RefusedStream.to_u32().to_be_bytes()[..]));
}

fn continuation_frames(block: &[u8], parts: usize, end: bool) -> Vec<u8> {
    let size = block.len().div_ceil(parts);
    let mut chunks = block.chunks(size);
    let mut b = Vec::new();
    let first = chunks.next().unwrap();
    frame::write_header(&mut b, first.len(), kind::HEADERS, frame::flag::END_STREAM, 1);
    b.extend_from_slice(first);
    let rest: Vec<_> = chunks.collect();
    for (i, c) in rest.iter().enumerate() {
        frame::write_continuation(&mut b, 1, c, end && i + 1 == rest.len());
    }
    b
}

#[test]
fn continuation_flood_is_caught_before_hpack() {
    // Under: HEADERS + 8 CONTINUATION of a valid block: a request.
    let block = request_block("GET", "/a-long-enough-path-to-split-in-nine-parts", &[("accept", "*/*")]);
    let mut p = Peer::new();
    p.handshake();
    let frames = continuation_frames(&block, 9, true);
    assert_eq!(parse_all(&frames).len(), 9);
    p.feed(&frames, 1).unwrap();
    assert!(matches!(p.events.as_slice(), [Event::Request { stream: 1, .. }]));

    // Over: a block that is not valid HPACK (0xff bytes: an index whose
    // integer runs past 5 octets), in HEADERS + 9 CONTINUATION: the error
    // is the count, not COMPRESSION_ERROR: the decoder never saw it.
    let bad = vec![0xff; 40];
    let mut p = Peer::new();
    p.handshake();
    let frames = continuation_frames(&bad, 10, false);
    assert_eq!(parse_all(&frames).len(), 10);
    let r = p.feed(&frames, 1);
    assert_breach(&p, r, BreachKind::ContinuationFlood);
    assert_eq!(p.goaway_code(), Some(CALM));

    // The same invalid block in fewer frames does reach the decoder.
    let mut p = Peer::new();
    p.handshake();
    let r = p.feed(&continuation_frames(&bad, 2, true), 1);
    assert!(matches!(r, Err(ConnError::Protocol(e)) if e.code == ErrorCode::CompressionError), "{r:?}");
}

#[test]
fn raw_block_over_max_head_is_caught_before_hpack() {
    let bad = vec![0xff; 16 * 1024 + 1];
    let mut p = Peer::new();
    p.handshake();
    let r = p.feed(&continuation_frames(&bad, 2, true), 1);
    assert_breach(&p, r, BreachKind::HeadTooLarge);
    // Exactly max_head of a valid block is fine: 16 KiB of one header.
    let pad = "v".repeat(16 * 1024 - 300);
    let block = request_block("GET", "/", &[("x-pad", &pad)]);
    assert!(block.len() <= 16 * 1024);
    let mut p = Peer::new();
    p.handshake();
    p.feed(&continuation_frames(&block, 2, true), 1).unwrap();
    assert!(matches!(p.events.as_slice(), [Event::Request { .. }]));
}

fn settings(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..n {
        frame::write_settings(&mut b, &[(setting::MAX_FRAME_SIZE, 16_384)]);
    }
    b
}

#[test]
fn settings_flood() {
    let mut p = Peer::new();
    p.handshake(); // one SETTINGS already
    p.feed(&settings(9), 1).unwrap();
    // Refilled at 2 a second: one more after half a second.
    p.feed(&settings(1), 501).unwrap();
    assert!(p.breaches().is_empty());
    assert_eq!(p.sent(kind::SETTINGS).iter().filter(|f| f.flags == 1).count(), 11);
    let r = p.feed(&settings(1), 501);
    assert_breach(&p, r, BreachKind::SettingsFlood);
}

fn pings(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        frame::write_ping(&mut b, false, (i as u64).to_be_bytes());
    }
    b
}

#[test]
fn ping_flood() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&pings(10), 1).unwrap();
    p.feed(&pings(10), 1001).unwrap();
    assert!(p.breaches().is_empty());
    assert_eq!(p.sent(kind::PING).len(), 20);
    let r = p.feed(&pings(1), 1001);
    assert_breach(&p, r, BreachKind::PingFlood);
}

fn priorities(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        frame::write_priority(&mut b, 1001 + 2 * i, 0, 16);
    }
    b
}

#[test]
fn priority_flood() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&priorities(100), 1).unwrap();
    // A stream opened earns 100 more.
    p.feed(&get(1), 1).unwrap();
    p.feed(&priorities(100), 1).unwrap();
    assert!(p.breaches().is_empty());
    let r = p.feed(&priorities(1), 100_000);
    assert_breach(&p, r, BreachKind::PriorityFlood);
}

fn window_updates(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..n {
        frame::write_window_update(&mut b, 0, 1);
    }
    b
}

#[test]
fn window_update_flood() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&window_updates(100), 1).unwrap();
    assert!(p.breaches().is_empty());
    // Ten DATA frames sent earn twenty more.
    p.feed(&get(1), 1).unwrap();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    for _ in 0..10 {
        assert_eq!(p.conn.send_data(1, b"x", false), 1);
    }
    p.feed(&window_updates(20), 1).unwrap();
    assert!(p.breaches().is_empty());
    let r = p.feed(&window_updates(1), 1);
    assert_breach(&p, r, BreachKind::WindowUpdateFlood);
}

#[test]
fn empty_frames() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    frame::write_headers(&mut b, 1, &request_block("POST", "/", &[]), false, 16_384);
    for _ in 0..100 {
        frame::write_data(&mut b, 1, b"", false, 16_384);
    }
    p.feed(&b, 1).unwrap();
    assert!(p.breaches().is_empty());
    let mut b = Vec::new();
    frame::write_data(&mut b, 1, b"", false, 16_384);
    let r = p.feed(&b, 1);
    assert_breach(&p, r, BreachKind::EmptyFrames);
}

#[test]
fn control_backlog() {
    // The peer reads nothing: 64 replies owed are tolerated, the 65th not.
    let run = |replies: usize| {
        let mut p = Peer::new();
        let mut b = frame::PREFACE.to_vec();
        frame::write_settings_ack(&mut b);
        b.extend(pings(10));
        b.extend(settings(9));
        for i in 0..(replies - 19) as u32 {
            // A malformed request each: an RST_STREAM each.
            let block = request_block("GET", "/", &[("connection", "x")]);
            frame::write_headers(&mut b, 1 + 2 * i, &block, true, 16_384);
        }
        let r = p.conn.recv(&b, p.at(1)).map(|_| ());
        p.drain();
        (p, r)
    };
    let (p, r) = run(64);
    assert_eq!(r, Ok(()));
    assert!(p.breaches().is_empty());
    let (p, r) = run(65);
    assert_breach(&p, r, BreachKind::ControlBacklog);
}

#[test]
fn zero_window_stall() {
    let mut p = Peer::new();
    let mut b = frame::PREFACE.to_vec();
    frame::write_settings(&mut b, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    frame::write_settings_ack(&mut b);
    b.extend(get(1));
    p.feed(&b, 0).unwrap();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"waiting", true), 0);
    assert_eq!(p.conn.next_deadline(), Some(p.at(10_000)));
    assert_eq!(p.conn.tick(p.at(9_999)), Ok(()));
    let r = p.conn.tick(p.at(10_000));
    p.drain();
    assert_breach(&p, r, BreachKind::ZeroWindowStall);
    assert!(p.events.contains(&Event::Reset { stream: 1 }));
    assert_eq!(p.sent(kind::RST_STREAM).len(), 1);

    // Under: the window opens at 9.9 s; the clock stops.
    let mut p = Peer::new();
    p.feed(&b, 0).unwrap();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"waiting", true), 0);
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 1, 100);
    p.feed(&wu, 9_900).unwrap();
    assert!(p.events.contains(&Event::Writable { stream: 1 }));
    assert_eq!(p.conn.tick(p.at(20_000)), Ok(()));
    assert_eq!(p.conn.send_data(1, b"waiting", true), 7);
}

#[test]
fn settings_ack_timeout() {
    let mut p = Peer::new();
    let mut b = frame::PREFACE.to_vec();
    frame::write_settings(&mut b, &[]);
    p.feed(&b, 0).unwrap();
    assert_eq!(p.conn.tick(p.at(9_999)), Ok(()));
    let r = p.conn.tick(p.at(10_000));
    p.drain();
    assert_breach(&p, r, BreachKind::SettingsTimeout);
    assert_eq!(p.goaway_code(), Some(ErrorCode::SettingsTimeout.to_u32()));
    // With the ack, no deadline at all.
    let mut p = Peer::new();
    p.handshake();
    assert_eq!(p.conn.next_deadline(), None);
    assert_eq!(p.conn.tick(p.at(60_000)), Ok(()));
}

#[test]
fn limits_are_configurable() {
    let mut p = Peer::with(Limits { pings_per_sec: 2, ..Limits::default() });
    p.handshake();
    p.feed(&pings(2), 1).unwrap();
    let r = p.feed(&pings(1), 1);
    assert_breach(&p, r, BreachKind::PingFlood);
}

/// Malformed requests (each refused with RST_STREAM) count with the
/// resets: 200 a second pass, the 201st is the flood.
#[test]
fn malformed_request_flood() {
    let malformed = |first: u32, n: u32| {
        let mut b = Vec::new();
        for i in 0..n {
            let block = request_block("GET", "/", &[("upgrade", "x")]);
            frame::write_headers(&mut b, first + 2 * i, &block, true, 16_384);
        }
        b
    };
    let mut p = Peer::new();
    p.handshake();
    for k in 0..4 {
        // 50 per feed, so the unread-replies bound is not what trips.
        p.feed(&malformed(1 + 100 * k, 50), 1).unwrap();
    }
    assert!(p.breaches().is_empty());
    assert_eq!(p.sent(kind::RST_STREAM).len(), 200);
    let r = p.feed(&malformed(401, 1), 1);
    assert_breach(&p, r, BreachKind::RapidReset);
}
