//! Arbitrary bytes after a valid client preface, fed to sluice-h2's
//! ServerConn in arbitrary pieces at an advancing clock, with an
//! application that answers requests, releases bodies and writes out only
//! part of the output at times: never panics, never takes more than it was
//! given, and the output and the whole connection stay within their
//! documented bounds; and a passive reader gets the same events and output
//! whether the bytes come whole or in pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h2::frame::{self, PREFACE};
use sluice_h2::{BreachKind, ConnError, Event, Limits, ServerConn};
use std::time::{Duration, Instant};

/// A passive reader (events drained, output written, nothing answered)
/// fed `input` `piece` bytes at a time: the events, the output, and how
/// it ended.
fn passive(input: &[u8], piece: usize) -> (Vec<Event>, Vec<u8>, Option<ConnError>) {
    let t0 = Instant::now();
    let mut c = ServerConn::new(Limits::default(), t0);
    let (mut events, mut out) = (Vec::new(), Vec::new());
    let mut pos = 0;
    let mut end = None;
    while pos < input.len() {
        let stop = (pos + piece).min(input.len());
        let r = c.recv(&input[pos..stop], t0);
        while let Some(e) = c.poll_event() {
            events.push(e);
        }
        out.extend_from_slice(c.pending_output());
        c.consume_output(c.pending_output().len());
        match r {
            Ok(n) => pos += n,
            Err(e) => {
                end = Some(e);
                break;
            }
        }
    }
    (events, out, end)
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else { return };
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    frame::write_settings_ack(&mut input);
    input.extend_from_slice(rest);

    // Any split reads the same (unless replies piled up unread within one
    // large read: the control backlog depends on the reader's pace).
    let whole = passive(&input, input.len());
    let cut = passive(&input, usize::from(shape % 23) + 1);
    let backlog = Some(ConnError::Breach(BreachKind::ControlBacklog));
    if whole.2 != backlog && cut.2 != backlog {
        assert_eq!(whole, cut, "a split changed what was read");
    }

    let limits = Limits::default();
    let bound = limits.memory_bound();
    let out_cap = limits.output_cap();
    let t0 = Instant::now();
    let mut c = ServerConn::new(limits, t0);
    let mut pos = 0;
    let mut step = 0u64;
    let mut piece = usize::from(shape % 61) + 1;
    while pos < input.len() {
        step += 1;
        let now = t0 + Duration::from_millis(step * u64::from(shape % 7) * 40);
        let end = (pos + piece).min(input.len());
        let r = c.recv(&input[pos..end], now);
        while let Some(e) = c.poll_event() {
            match e {
                Event::Request { stream, head, end_stream } => {
                    let _ = head.to_h1();
                    if end_stream {
                        let _ = c.send_headers(stream, 200, &[(b"x-a", b"b")], false);
                        c.send_data(stream, &[b'z'; 3000], true);
                    }
                }
                Event::Data { stream, bytes, .. } => c.release(stream, bytes.len()),
                Event::Writable { stream } => {
                    c.send_data(stream, &[b'w'; 20_000], step % 3 == 0);
                }
                _ => {}
            }
        }
        assert!(c.pending_output().len() <= out_cap, "output {} over {out_cap}", c.pending_output().len());
        assert!(c.memory_in_use() <= bound, "memory {} over {bound}", c.memory_in_use());
        // A reader that sometimes takes only part of what is owed.
        let out = c.pending_output().len();
        c.consume_output(if step % 4 == 0 { out / 2 } else { out });
        match r {
            Ok(n) => {
                assert!(n <= end - pos);
                pos += n;
                if n == 0 && c.pending_output().is_empty() && end > pos {
                    // Paused with nothing to write: only events can hold it,
                    // and they were drained: it must read on next time.
                    let again = c.recv(&input[pos..end], now);
                    if let Ok(m) = again {
                        assert!(m > 0, "stuck with nothing owed");
                        pos += m;
                    } else {
                        break;
                    }
                }
            }
            Err(_) => break,
        }
        piece = (piece * 7 + 3) % 97 + 1;
        let _ = c.tick(now);
    }
});
