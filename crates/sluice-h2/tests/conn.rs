//! ServerConn's ordinary paths: a GET answered, a POST with a body and its
//! content-length checked, flow control on the response, the HTTP/1.1
//! form of a request.

mod common;

use common::*;
use sluice_h2::frame::{self, kind, ErrorCode};
use sluice_h2::Event;

#[test]
fn get_then_response_with_flow_control() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&get(1), 1).unwrap();
    let Some(Event::Request { stream: 1, head, end_stream: true }) = p.events.first().cloned() else {
        panic!("{:?}", p.events)
    };
    assert_eq!(head.to_h1(), b"GET / HTTP/1.1\r\nhost: example.test\r\n\r\n");
    let upstream: [(&[u8], &[u8]); 5] = [
        (b"Content-Type", b"text/plain"),
        (b"Connection", b"close, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Transfer-Encoding", b"chunked"),
    ];
    p.conn.send_headers(1, 200, &upstream, false).unwrap();
    let body = vec![b'x'; 100_000];
    let mut sent = 0;
    loop {
        let n = p.conn.send_data(1, &body[sent..], true);
        p.drain();
        sent += n;
        if n == 0 {
            break;
        }
    }
    // The stream's initial window is 65535: that much, no more.
    assert_eq!(sent, 65_535);
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 0, 40_000);
    frame::write_window_update(&mut wu, 1, 40_000);
    p.feed(&wu, 2).unwrap();
    assert!(p.events.contains(&Event::Writable { stream: 1 }));
    while sent < body.len() {
        let n = p.conn.send_data(1, &body[sent..], true);
        assert!(n > 0);
        p.drain();
        sent += n;
    }
    let data: usize = p.sent(kind::DATA).iter().map(|f| f.payload.len()).sum();
    assert_eq!(data, 100_000);
    assert_eq!(p.sent(kind::DATA).last().unwrap().flags & frame::flag::END_STREAM, 1);
    assert_eq!(p.conn.open_streams(), 0);
    // The response head: :status 200 indexed, the hop-by-hop fields dropped.
    let h = &p.sent(kind::HEADERS)[0].payload;
    let mut d = sluice_h2::hpack::Decoder::default();
    let mut got = Vec::new();
    d.decode(h, usize::MAX, |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
    assert_eq!(got, vec![(b":status".to_vec(), b"200".to_vec()), (b"content-type".to_vec(), b"text/plain".to_vec())]);
}

#[test]
fn post_body_and_content_length() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    frame::write_headers(&mut b, 1, &request_block("POST", "/up", &[("content-length", "5")]), false, 16_384);
    frame::write_data(&mut b, 1, b"hello", true, 16_384);
    // Stream 3: says 5, sends 6: reset with PROTOCOL_ERROR.
    frame::write_headers(&mut b, 3, &request_block("POST", "/up", &[("content-length", "5")]), false, 16_384);
    frame::write_data(&mut b, 3, b"hello!", true, 16_384);
    // Stream 5: no content-length: chunked in HTTP/1.1.
    frame::write_headers(&mut b, 5, &request_block("POST", "/c", &[]), false, 16_384);
    frame::write_data(&mut b, 5, b"abc", true, 16_384);
    p.feed(&b, 1).unwrap();
    assert!(p.events.contains(&Event::Data { stream: 1, bytes: b"hello".to_vec(), end_stream: true }));
    assert!(p.events.contains(&Event::Reset { stream: 3 }));
    let rsts = p.sent(kind::RST_STREAM);
    assert_eq!(rsts.len(), 1);
    assert_eq!((rsts[0].stream, rsts[0].payload.as_slice()), (3, &ErrorCode::ProtocolError.to_u32().to_be_bytes()[..]));
    let h5 = p.events.iter().find_map(|e| match e {
        Event::Request { stream: 5, head, .. } => Some(head.clone()),
        _ => None,
    });
    let h1 = String::from_utf8(h5.unwrap().to_h1()).unwrap();
    assert!(h1.ends_with("transfer-encoding: chunked\r\n\r\n"), "{h1}");
    let st = p.conn.stats();
    assert_eq!((st.requests, st.stream_errors, st.client_resets, st.refused), (3, 1, 0, 0));
}

#[test]
fn malformed_request_is_refused_on_its_stream_only() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    frame::write_headers(&mut b, 1, &request_block("GET", "/", &[("connection", "close")]), true, 16_384);
    b.extend(get(3));
    p.feed(&b, 1).unwrap();
    assert_eq!(p.sent(kind::RST_STREAM).len(), 1);
    assert!(matches!(p.events.as_slice(), [Event::Request { stream: 3, .. }]), "{:?}", p.events);
}

#[test]
fn frame_after_unfinished_headers_is_a_connection_error() {
    let mut p = Peer::new();
    p.handshake();
    let block = request_block("GET", "/", &[]);
    let mut b = Vec::new();
    frame::write_header(&mut b, block.len(), kind::HEADERS, 0, 1);
    b.extend_from_slice(&block);
    frame::write_ping(&mut b, false, [0; 8]);
    p.feed(&b[..b.len() - 20], 1).unwrap();
    assert!(p.conn.reading_partial());
    assert!(p.feed(&b[b.len() - 20..], 1).is_err());
    assert_eq!(p.goaway_code(), Some(ErrorCode::ProtocolError.to_u32()));
}

/// A reset stream's unreleased body bytes go back to the connection
/// window when it goes; a late `release` for it changes nothing.
#[test]
fn reset_stream_window_is_reclaimed() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    for s in [1, 3] {
        frame::write_headers(&mut b, s, &request_block("POST", "/", &[]), false, 16_384);
        frame::write_data(&mut b, s, &[b'a'; 40_000], false, 16_384);
        b.extend(rst(s));
    }
    p.feed(&b, 1).unwrap();
    assert!(p.events.contains(&Event::Reset { stream: 3 }));
    // 80 000 reclaimed, over half the 128 KiB window: granted at once
    // (after the 65 537 that raised the window from the RFC's 65 535).
    let wu: Vec<_> = p.sent(kind::WINDOW_UPDATE).into_iter().filter(|f| f.stream == 0).cloned().collect();
    let granted: Vec<u32> = wu.iter().map(|f| u32::from_be_bytes(f.payload[..4].try_into().unwrap())).collect();
    assert_eq!(granted, vec![128 * 1024 - 65_535, 80_000]);
    p.conn.release(1, 40_000);
    p.conn.release(3, 40_000);
    p.drain();
    assert_eq!(p.sent(kind::WINDOW_UPDATE).len(), wu.len());
}
