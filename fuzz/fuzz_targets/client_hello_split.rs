//! A ClientHello re-cut (issue 39): the handshake message the first record
//! carries is cut into records at fuzz-chosen points, and the stream into
//! reads at others. The reader never panics, answers the same however the
//! bytes arrive (errors too), and reads the re-cut stream as the one it was
//! cut from: the same hello, the same JA4; the one answer allowed to differ
//! is the bound on the records' bytes, which the extra headers may pass.
//!
//! Input: a byte n, n big-endian u16 record cuts (offsets into the first
//! record's fragment, modulo its length), a byte m, m u16 read cuts (modulo
//! the stream's length), then the stream, its record header first (the
//! seeds: FoxIO's captured hellos, as the `client_hello` target's).
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_guard::ja4::{parse, ClientHello, HelloError, HelloReader};

/// Up to 7 cut points taken from the front of `data`.
fn cuts(data: &mut &[u8]) -> Option<Vec<usize>> {
    let (&n, rest) = data.split_first()?;
    let n = 2 * usize::from(n % 8);
    let bytes = rest.get(..n)?;
    *data = &rest[n..];
    Some(bytes.chunks(2).map(|c| usize::from(u16::from_be_bytes([c[0], c[1]]))).collect())
}

/// `bytes` pushed in pieces cut at `reads`: the last answer.
fn pushed(bytes: &[u8], reads: &[usize]) -> Result<Option<ClientHello>, HelloError> {
    let mut at: Vec<usize> = reads.iter().map(|c| c % (bytes.len() + 1)).chain([0, bytes.len()]).collect();
    at.sort_unstable();
    let mut r = HelloReader::default();
    let mut last = r.push(&[]);
    for w in at.windows(2) {
        last = r.push(&bytes[w[0]..w[1]]);
    }
    last
}

fuzz_target!(|data: &[u8]| {
    let mut data = data;
    let (Some(records), Some(reads)) = (cuts(&mut data), cuts(&mut data)) else { return };
    let whole = parse(data);
    assert_eq!(pushed(data, &reads), whole, "read in pieces");
    // The first record re-cut, if it is all there and one the reader takes.
    let Some(head) = data.get(..5) else { return };
    let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
    if head[0] != 22 || head[1] != 3 || len == 0 || len > 1 << 14 || data.len() < 5 + len {
        return;
    }
    let mut at: Vec<usize> = records.iter().map(|c| c % len).chain([0, len]).collect();
    at.sort_unstable();
    at.dedup();
    let mut split = Vec::with_capacity(data.len() + 5 * at.len());
    for w in at.windows(2) {
        split.extend_from_slice(&head[..3]);
        split.extend_from_slice(&u16::try_from(w[1] - w[0]).expect("within a record").to_be_bytes());
        split.extend_from_slice(&data[5 + w[0]..5 + w[1]]);
    }
    split.extend_from_slice(&data[5 + len..]);
    let got = pushed(&split, &reads);
    if !matches!(got, Err(HelloError::TooManyRecordBytes(_))) {
        assert_eq!(got, whole, "cut at {at:?}");
    }
    if let (Ok(Some(g)), Ok(Some(h))) = (&got, &whole) {
        assert_eq!(g.ja4(), h.ja4());
    }
});
