//! Arbitrary bytes through the upstream response framer (what the guard
//! reads from the servers it protects: lengths, chunks, interim heads,
//! bodies up to the close, a 101 ending HTTP when an upgrade was asked): never panics, never consumes more than it was
//! given, and frames the same responses whether the stream arrives at once
//! or cut into pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h1::response::{Response, ResponseError, ResponseReader, Step};

/// The responses framed from `data` fed `piece` bytes at a time, and the
/// error that stopped it, if any.
fn frame(data: &[u8], piece: usize, max_head: usize, upgrade: bool) -> (Vec<Response>, Option<ResponseError>) {
    let mut reader = ResponseReader::new(max_head);
    if upgrade {
        reader.expect_upgrade();
    }
    let mut done = Vec::new();
    let (mut start, mut end) = (0, 0);
    loop {
        match reader.step(&data[start..end]) {
            Ok(Step::NeedMore) => {
                if end == data.len() {
                    // The stream ends: a body delimited by the close ends.
                    done.extend(reader.eof());
                    return (done, None);
                }
                end = (end + piece).min(data.len());
            }
            Ok(Step::Consumed(n)) => {
                assert!(n > 0 && n <= end - start, "consumed {n} of {}", end - start);
                start += n;
            }
            Ok(Step::Done { consumed, response }) => {
                assert!(consumed <= end - start, "consumed {consumed} of {}", end - start);
                // A 101 only as the first final answer to a request that asked.
                assert!(response.status != 101 || (upgrade && done.is_empty()), "a 101 not asked for");
                start += consumed;
                done.push(response);
            }
            Err(e) => return (done, Some(e)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, data)) = data.split_first() else { return };
    let max_head = 64 + usize::from(knobs & 0x1f) * 16;
    let upgrade = knobs & 0x20 != 0;
    let whole = frame(data, data.len().max(1), max_head, upgrade);
    let piece = usize::from(knobs >> 6) + 1;
    let cut = frame(data, piece, max_head, upgrade);
    // Fed in pieces, a head may be refused as too long only once it is
    // longer than max_head: the same as in one piece.
    assert_eq!(whole, cut, "one shot and pieces of {piece} disagree");
});
