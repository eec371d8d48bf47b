//! Arbitrary bytes through the HTTP/1.1 request parser: never panics; the
//! fast parser at every scanner level, one shot and fed in two pieces, and
//! the reference all agree; and where both it and httparse accept a head,
//! they read the same method, path, version and fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h1::{parse_request, reference, HeadStatus, Lenient, Options, Parser, Simd};

type Summary =
    (Vec<u8>, Vec<u8>, sluice_h1::Version, Vec<(Vec<u8>, Vec<u8>)>, sluice_h1::Framing, usize, u64, bool, usize, u32);

fn fast(buf: &[u8], opts: &Options) -> Result<Summary, sluice_h1::Error> {
    let r = parse_request(buf, opts)?;
    let h = &r.head;
    Ok((
        h.method.as_bytes().to_vec(),
        h.target.as_bytes().to_vec(),
        h.version,
        h.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
        h.framing,
        h.len,
        r.body_len,
        r.complete,
        r.consumed,
        r.signals.0,
    ))
}

fn reference(buf: &[u8], opts: &Options) -> Result<Summary, sluice_h1::Error> {
    let r = reference::parse_request(buf, opts)?;
    Ok((
        r.method,
        r.target,
        r.version,
        r.headers,
        r.framing,
        r.head_len,
        r.body_len,
        r.complete,
        r.consumed,
        r.signals.0,
    ))
}

/// The head through a growing buffer cut at `cut`, then the body in the
/// same two pieces: (head result, body bytes, done, consumed).
fn two_pieces(buf: &[u8], cut: usize, opts: &Options) -> Option<Result<(usize, u64, bool, usize), sluice_h1::Error>> {
    let mut p = Parser::new(*opts);
    let (len, fed) = match p.parse_head(&buf[..cut]) {
        Err(e) => return Some(Err(e)),
        Ok(HeadStatus::Complete(n)) => (n, cut),
        Ok(HeadStatus::Partial) => match p.parse_head(buf) {
            Err(e) => return Some(Err(e)),
            Ok(HeadStatus::Complete(n)) => (n, buf.len()),
            Ok(HeadStatus::Partial) => return None,
        },
    };
    let mut consumed = len;
    for piece in [&buf[len..fed], &buf[fed..]] {
        let mut input = piece;
        while !input.is_empty() && !p.body_done() {
            match p.parse_body(input) {
                Err(e) => return Some(Err(e)),
                Ok(s) => {
                    assert!(s.data.end <= s.consumed && s.consumed <= input.len());
                    consumed += s.consumed;
                    input = &input[s.consumed..];
                }
            }
        }
    }
    Some(Ok((len, p.body_len(), p.body_done(), consumed)))
}

fuzz_target!(|data: &[u8]| {
    let [l0, l1, cut, ref buf @ ..] = *data else { return };
    // Half the inputs strict (where httparse is compared), half with some
    // tolerances on.
    let lenient =
        if l0 & 1 == 0 { Lenient::NONE } else { Lenient((u32::from(l0 >> 1) | u32::from(l1) << 7) & Lenient::ALL.0) };
    let opts = Options { lenient, max_head: 4096, max_headers: 32, simd: Simd::Auto };
    let want = reference(buf, &opts);
    for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
        let got = fast(buf, &Options { simd, ..opts });
        assert_eq!(got, want, "{simd:?}");
    }
    let cut = usize::from(cut) * buf.len() / 255;
    match (two_pieces(buf, cut, &opts), &want) {
        (None, Err(e)) => assert_eq!(e.kind, sluice_h1::ErrorKind::IncompleteHead),
        (Some(Err(e)), Err(w)) => assert_eq!(&e, w),
        (Some(Ok((len, body, done, consumed))), Ok(w)) => assert_eq!((len, body, done, consumed), (w.5, w.6, w.7, w.8)),
        (got, want) => panic!("two pieces at {cut}: {got:?} vs {want:?}"),
    }

    // Against httparse, strict mode only, where both accept the head.
    if lenient != Lenient::NONE {
        return;
    }
    let Ok(ours) = &want else { return };
    let mut headers = [httparse::EMPTY_HEADER; 40];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => {
            assert_eq!(n, ours.5, "head length");
            assert_eq!(req.method.unwrap().as_bytes(), ours.0);
            assert_eq!(req.path.unwrap().as_bytes(), ours.1);
            assert_eq!(req.version.unwrap(), if ours.2 == sluice_h1::Version::Http11 { 1 } else { 0 });
            let theirs: Vec<(Vec<u8>, Vec<u8>)> =
                req.headers.iter().map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec())).collect();
            assert_eq!(theirs, ours.3, "fields");
        }
        Ok(httparse::Status::Partial) => panic!("httparse wants more of a head we accepted"),
        Err(e) => panic!("httparse refuses a head we accepted: {e}"),
    }
});
