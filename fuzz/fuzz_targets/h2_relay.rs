//! Arbitrary bytes as an upstream's HTTP/1.1 response through sluice-h2's
//! relay (what the guard's HTTP/2 turns into HEADERS and DATA): never
//! panics, never takes more than it was given, never holds more body than
//! `max_piece` nor hands out a bigger piece, puts out one Head first, End
//! last, nothing after it; and relays the same response (or fails) whether
//! the bytes come whole or in pieces; the two chunk readers inside never
//! disagree; and a response relayed is what `pump` writes on a
//! `ServerConn` stream under flow control: the body in DATA, END_STREAM once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h2::frame::{self, flag, kind, FrameHeader, HEADER_LEN, PREFACE};
use sluice_h2::relay::{pump, RelayError, RelayOut, ResponseRelay};
use sluice_h2::{hpack, Limits, ServerConn};
use std::time::Instant;

/// What one response became: its head, its body, and whether it ended;
/// the bytes taken; or the error.
type Relayed = Result<(Option<RelayOut>, Vec<u8>, bool, usize), RelayError>;

fn relay(data: &[u8], piece: usize, head_request: bool, max_head: usize, max_piece: usize, poll_max: usize) -> Relayed {
    let mut r = ResponseRelay::new(head_request, max_head, max_piece);
    let (mut head, mut body, mut ended) = (None, Vec::new(), false);
    let (mut taken, mut end) = (0, 0);
    let mut collect = |r: &mut ResponseRelay| {
        let mut any = false;
        while let Some(out) = r.poll(poll_max) {
            assert!(!ended, "{out:?} after End");
            match out {
                RelayOut::Head { .. } => {
                    assert!(head.is_none(), "a second head");
                    head = Some(out);
                }
                RelayOut::Body(b) => {
                    assert!(head.is_some(), "a body before the head");
                    assert!(!b.is_empty() && b.len() <= max_piece.min(poll_max), "a piece of {}", b.len());
                    body.extend_from_slice(&b);
                }
                RelayOut::End => {
                    assert!(head.is_some(), "End before the head");
                    ended = true;
                }
            }
            any = true;
        }
        any
    };
    loop {
        let n = r.feed(&data[taken..end])?;
        assert!(n <= end - taken, "took {n} of {}", end - taken);
        assert!(r.pending() <= max_piece, "holds {} > {max_piece}", r.pending());
        taken += n;
        if collect(&mut r) || n > 0 {
            continue;
        }
        if end == data.len() {
            break;
        }
        end = (end + piece).min(data.len());
    }
    if !r.ended() {
        r.eof()?;
    }
    collect(&mut r);
    assert!(body.len() <= taken, "more body than bytes");
    Ok((head, body, ended, taken))
}

/// `data` relayed onto stream 1 of a connection (a GET, or a HEAD), the
/// client granting back the window as DATA arrives: the DATA bytes, and
/// whether END_STREAM came (on HEADERS or DATA).
fn pumped(data: &[u8], head_request: bool, max_head: usize, max_piece: usize) -> (Vec<u8>, bool) {
    let now = Instant::now();
    let mut conn = ServerConn::new(Limits::default(), now);
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    frame::write_settings_ack(&mut input);
    let mut block = Vec::new();
    let method: &[u8] = if head_request { b"HEAD" } else { b"GET" };
    hpack::encode(
        &mut block,
        [(&b":method"[..], method), (b":scheme", b"https"), (b":path", b"/"), (b":authority", b"x")],
    );
    frame::write_headers(&mut input, 1, &block, true, 16_384);
    assert_eq!(conn.recv(&input, now), Ok(input.len()));
    while conn.poll_event().is_some() {}
    let mut relay = ResponseRelay::new(head_request, max_head, max_piece);
    let (mut out, mut taken) = (Vec::new(), 0);
    let (mut body, mut fin, mut granted) = (Vec::new(), false, 0);
    for _ in 0..100_000 {
        let n = relay.feed(&data[taken..]).expect("relayed once already");
        taken += n;
        if taken == data.len() && !relay.ended() {
            relay.eof().expect("relayed once already");
        }
        let did = pump(&mut conn, 1, &mut relay).expect("stream 1 is open");
        out.extend_from_slice(conn.pending_output());
        conn.consume_output(conn.pending_output().len());
        while let Some(h) = FrameHeader::parse(&out) {
            let total = HEADER_LEN + h.len as usize;
            if out.len() < total {
                break;
            }
            let end = h.flags & flag::END_STREAM != 0 && (h.kind == kind::DATA || h.kind == kind::HEADERS);
            if h.stream == 1 && end {
                assert!(!fin, "END_STREAM twice");
                fin = true;
            }
            if h.kind == kind::DATA && h.stream == 1 {
                assert!(!fin || end, "DATA after END_STREAM");
                body.extend_from_slice(&out[HEADER_LEN..total]);
            }
            out.drain(..total);
        }
        if did.finished {
            assert!(relay.finished());
            return (body, fin);
        }
        if n == 0 && did.body == 0 {
            // The client read it all: the window back.
            let grant = (body.len() - granted) as u32;
            assert!(grant > 0, "stalled with a window open");
            let mut wu = Vec::new();
            frame::write_window_update(&mut wu, 0, grant);
            frame::write_window_update(&mut wu, 1, grant);
            assert_eq!(conn.recv(&wu, now), Ok(wu.len()));
            while conn.poll_event().is_some() {}
            granted = body.len();
        }
    }
    panic!("the relay never finished");
}

fuzz_target!(|data: &[u8]| {
    let Some((&[k1, k2], data)) = data.split_first_chunk::<2>() else { return };
    let max_head = 32 + usize::from(k1 & 0x3f) * 8;
    let head_request = k1 & 0x40 != 0;
    let max_piece = 1 + usize::from(k2 & 0x0f) * 37;
    let poll_max = if k1 & 0x80 != 0 { usize::MAX } else { 1 + usize::from(k2 >> 4) * 5 };
    let whole = relay(data, data.len().max(1), head_request, max_head, max_piece, usize::MAX);
    match &whole {
        Ok((_, body, ended, taken)) => {
            assert!(ended, "a relay that did not fail ended");
            assert_eq!(pumped(&data[..*taken], head_request, max_head, max_piece), (body.clone(), true));
        }
        // Our chunk decoder is lenient where sluice-h1's reader is strict:
        // they may never disagree on a body the reader accepts.
        Err(e) => assert!(
            !matches!(
                e,
                RelayError::Framing("chunk framing read two ways")
                    | RelayError::Head("the reader did not frame the whole head")
            ),
            "{e:?}"
        ),
    }
    for piece in [1, 7, 64] {
        let split = relay(data, piece, head_request, max_head, max_piece, poll_max);
        match (&whole, &split) {
            (Ok(w), Ok(s)) => assert_eq!(w, s, "piece {piece}"),
            (Err(w), Err(s)) => assert_eq!(std::mem::discriminant(w), std::mem::discriminant(s), "piece {piece}"),
            _ => panic!("whole {whole:?}, in pieces of {piece} {split:?}"),
        }
    }
});
