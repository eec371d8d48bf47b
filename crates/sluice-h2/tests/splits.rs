//! Any split of the input gives the same events and the same output: one
//! cut at every offset (the 24-byte preface split everywhere included),
//! and many cuts at random (property test).

mod common;

use common::*;
use proptest::prelude::*;
use sluice_h2::frame::{self, flag, kind, setting};
use sluice_h2::{Event, Limits, ServerConn};
use std::time::Instant;

fn conversation() -> Vec<u8> {
    let mut b = frame::PREFACE.to_vec();
    frame::write_settings(&mut b, &[(setting::INITIAL_WINDOW_SIZE, 1000), (setting::HEADER_TABLE_SIZE, 0)]);
    frame::write_settings_ack(&mut b);
    b.extend(get(1));
    frame::write_headers(&mut b, 3, &request_block("POST", "/up", &[("content-length", "12")]), false, 16_384);
    frame::write_data(&mut b, 3, b"hello", false, 16_384);
    // A padded DATA frame: 3 bytes of padding.
    frame::write_header(&mut b, 1 + 4 + 3, kind::DATA, flag::PADDED, 3);
    b.extend_from_slice(&[3, b' ', b'w', b'o', b'r', 0, 0, 0]);
    frame::write_data(&mut b, 3, b"ld!", true, 16_384);
    frame::write_ping(&mut b, false, *b"12345678");
    frame::write_window_update(&mut b, 0, 5000);
    frame::write_priority(&mut b, 9, 1, 200);
    frame::write_header(&mut b, 3, 0x42, 0, 0); // unknown type: ignored
    b.extend_from_slice(b"???");
    // A head in HEADERS + CONTINUATION.
    let block = request_block("GET", "/split", &[("cookie", "a=1"), ("cookie", "b=2"), ("accept", "text/html")]);
    let (a, c) = block.split_at(10);
    frame::write_header(&mut b, a.len(), kind::HEADERS, flag::END_STREAM, 5);
    b.extend_from_slice(a);
    frame::write_continuation(&mut b, 5, c, true);
    // A body with trailers.
    frame::write_headers(&mut b, 7, &request_block("POST", "/t", &[("te", "trailers")]), false, 16_384);
    frame::write_data(&mut b, 7, b"part", false, 16_384);
    let mut trailer = Vec::new();
    sluice_h2::hpack::encode(&mut trailer, [(&b"x-checksum"[..], &b"abc"[..])]);
    frame::write_headers(&mut b, 7, &trailer, true, 16_384);
    b.extend(rst(1));
    b
}

fn run(input: &[u8], cuts: &[usize]) -> (Vec<Event>, Vec<u8>) {
    let t = Instant::now();
    let mut c = ServerConn::new(Limits::default(), t);
    let mut events = Vec::new();
    let mut out = Vec::new();
    let mut start = 0;
    let mut bounds: Vec<usize> = cuts.iter().map(|&x| x % (input.len() + 1)).collect();
    bounds.push(input.len());
    bounds.sort_unstable();
    for end in bounds {
        let n = c.recv(&input[start..end], t).unwrap();
        assert_eq!(n, end - start);
        start = end;
        while let Some(e) = c.poll_event() {
            events.push(e);
        }
        out.extend_from_slice(c.pending_output());
        c.consume_output(c.pending_output().len());
    }
    // Answer each request once all is read (answering between reads would
    // order the output by the cuts, which is the application's doing).
    for e in &events {
        if let Event::Request { stream, .. } = e {
            let _ = c.send_headers(*stream, 200, &[], false);
        }
    }
    out.extend_from_slice(c.pending_output());
    (events, out)
}

#[test]
fn the_conversation_is_read_whole() {
    let (events, out) = run(&conversation(), &[]);
    let requests = events.iter().filter(|e| matches!(e, Event::Request { .. })).count();
    assert_eq!(requests, 4, "{events:?}");
    assert!(events.contains(&Event::Data { stream: 3, bytes: b" wor".to_vec(), end_stream: false }));
    assert!(events.contains(&Event::Data { stream: 7, bytes: Vec::new(), end_stream: true }));
    assert!(events.contains(&Event::Reset { stream: 1 }));
    let h5 = events.iter().find_map(|e| match e {
        Event::Request { stream: 5, head, .. } => Some(head.to_h1()),
        _ => None,
    });
    assert_eq!(
        h5.unwrap(),
        b"GET /split HTTP/1.1\r\nhost: example.test\r\naccept: text/html\r\ncookie: a=1; b=2\r\n\r\n"
    );
    let frames = parse_all(&out);
    assert_eq!(frames.iter().filter(|f| f.kind == kind::PING).count(), 1);
    assert!(frames.iter().all(|f| f.kind != kind::GOAWAY && f.kind != kind::RST_STREAM));
    // The peer set its table to 0: our first block starts with a size update.
    let first = frames.iter().find(|f| f.kind == kind::HEADERS).unwrap();
    assert_eq!(first.payload[0], 0x20);
}

#[test]
fn one_cut_anywhere() {
    let input = conversation();
    let whole = run(&input, &[]);
    for cut in 0..=input.len() {
        assert_eq!(run(&input, &[cut]), whole, "cut at {cut}");
    }
}

proptest! {
    #[test]
    fn many_cuts(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
        let input = conversation();
        prop_assert_eq!(run(&input, &cuts), run(&input, &[]));
    }
}
