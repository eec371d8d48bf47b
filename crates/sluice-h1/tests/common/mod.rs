//! Shared by the tests: one comparable summary of a parse, from the fast
//! parser (one shot or fed in pieces) and from the reference.
#![allow(dead_code)]

use sluice_h1::{reference, BodyStatus, Error, ErrorKind, HeadStatus, Options, Parser};

/// The reference's owned result is the comparable summary: the fast
/// parser's answers are turned into the same type.
pub type Summary = reference::Request;

pub fn fast(buf: &[u8], opts: &Options) -> Result<Summary, Error> {
    let r = sluice_h1::parse_request(buf, opts)?;
    Ok(Summary {
        method: r.head.method.as_bytes().to_vec(),
        target: r.head.target.as_bytes().to_vec(),
        version: r.head.version,
        headers: r.head.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
        framing: r.head.framing,
        keep_alive: r.head.keep_alive,
        head_len: r.head.len,
        body_len: r.body_len,
        complete: r.complete,
        consumed: r.consumed,
        signals: r.signals,
    })
}

pub fn reference(buf: &[u8], opts: &Options) -> Result<Summary, Error> {
    reference::parse_request(buf, opts)
}

/// The reference fed in the given pieces.
pub fn reference_pieces(buf: &[u8], cuts: &[usize], opts: &Options) -> Result<Summary, Error> {
    let mut p = reference::Parser::new(*opts);
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&buf.len())) {
        p.feed(&buf[last..c])?;
        last = c;
    }
    let r = p.finish()?;
    Ok(Summary {
        method: r.method,
        target: r.target,
        version: r.version,
        headers: r.headers,
        framing: r.framing,
        keep_alive: r.keep_alive,
        head_len: r.head_len,
        body_len: r.body_len,
        complete: r.complete,
        consumed: r.consumed,
        signals: r.signals,
    })
}

/// The fast parser fed `buf` in pieces ending at `cuts` (sorted, inside
/// `buf`): the head through a growing buffer, then the body piece by piece.
pub fn fast_pieces(buf: &[u8], cuts: &[usize], opts: &Options) -> Result<Summary, Error> {
    let mut p = Parser::new(*opts);
    let ends: Vec<usize> = cuts.iter().copied().chain(std::iter::once(buf.len())).collect();
    let mut head_len = None;
    let mut i = 0;
    while i < ends.len() {
        let end = ends[i];
        i += 1;
        if let HeadStatus::Complete(n) = p.parse_head(&buf[..end])? {
            head_len = Some((n, end));
            break;
        }
    }
    let Some((len, mut fed)) = head_len else {
        return Err(Error { kind: ErrorKind::IncompleteHead, offset: buf.len() });
    };
    let mut consumed = len;
    let mut done = false;
    let mut body = Vec::new();
    // Bytes already in the buffer after the head, then the later pieces.
    let mut pieces = vec![(len, fed)];
    for &e in &ends[i..] {
        pieces.push((fed, e));
        fed = e;
    }
    'outer: for (s, e) in pieces {
        let mut input = &buf[s..e];
        while !input.is_empty() {
            let BodyStatus { consumed: c, data, done: d } = p.parse_body(input)?;
            assert!(data.end <= c);
            body.extend_from_slice(&input[data]);
            consumed += c;
            input = &input[c..];
            if d {
                done = true;
                break 'outer;
            }
            if c == 0 {
                break 'outer;
            }
        }
    }
    assert_eq!(body.len() as u64, p.body_len());
    let head = p.head(&buf[..len]).expect("complete head");
    let done = done || p.body_done();
    Ok(Summary {
        method: head.method.as_bytes().to_vec(),
        target: head.target.as_bytes().to_vec(),
        version: head.version,
        headers: head.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
        framing: head.framing,
        keep_alive: head.keep_alive,
        head_len: head.len,
        body_len: p.body_len(),
        complete: done,
        consumed,
        signals: p.signals(),
    })
}

/// Ok summaries equal, or errors of the same kind at the same offset.
pub fn same(a: &Result<Summary, Error>, b: &Result<Summary, Error>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}
