//! Arbitrary bytes as an upstream's HTTP/1.1 response through sluice-h2's
//! relay (what the guard's HTTP/2 turns into HEADERS and DATA): never
//! panics, never takes more than it was given, never holds more body than
//! `max_piece` nor hands out a bigger piece, puts out one Head first, End
//! last, nothing after it; and relays the same response (or fails) whether
//! the bytes come whole or in pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h2::relay::{RelayError, RelayOut, ResponseRelay};

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

fuzz_target!(|data: &[u8]| {
    let Some((&[k1, k2], data)) = data.split_first_chunk::<2>() else { return };
    let max_head = 32 + usize::from(k1 & 0x3f) * 8;
    let head_request = k1 & 0x40 != 0;
    let max_piece = 1 + usize::from(k2 & 0x0f) * 37;
    let poll_max = if k1 & 0x80 != 0 { usize::MAX } else { 1 + usize::from(k2 >> 4) * 5 };
    let whole = relay(data, data.len().max(1), head_request, max_head, max_piece, usize::MAX);
    if let Ok((_, _, ended, _)) = &whole {
        assert!(ended, "a relay that did not fail ended");
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
