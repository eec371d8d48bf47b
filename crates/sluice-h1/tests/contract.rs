//! One test per contract bullet: accepted and refused, and each leniency
//! turning its refusal into an acceptance with a signal. Every case is also
//! checked against the reference.

mod common;
use common::*;
use sluice_h1::{ErrorKind, Framing, HeadStatus, Lenient, Options, Parser, Signals, Simd, Version};

fn opts(lenient: Lenient) -> Options {
    Options { lenient, ..Options::default() }
}

fn parse(buf: &[u8], lenient: Lenient) -> Result<Summary, sluice_h1::Error> {
    let o = opts(lenient);
    let got = fast(buf, &o);
    assert!(same(&got, &reference(buf, &o)), "fast and reference differ on {:?}", String::from_utf8_lossy(buf));
    for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
        assert!(same(&got, &fast(buf, &Options { simd, ..o })), "{simd:?} differs");
    }
    got
}

fn ok(buf: &[u8]) -> Summary {
    parse(buf, Lenient::NONE).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(buf)))
}

fn err(buf: &[u8]) -> ErrorKind {
    match parse(buf, Lenient::NONE) {
        Ok(s) => panic!("{:?} accepted: {s:?}", String::from_utf8_lossy(buf)),
        Err(e) => e.kind,
    }
}

/// Refused strictly with `kind`; accepted under `flag` with `signal`.
fn lenient_case(buf: &[u8], kind: ErrorKind, flag: Lenient, signal: Signals) -> Summary {
    assert_eq!(err(buf), kind, "{:?}", String::from_utf8_lossy(buf));
    let s =
        parse(buf, flag).unwrap_or_else(|e| panic!("{:?} refused under {flag:?}: {e:?}", String::from_utf8_lossy(buf)));
    assert!(s.signals.contains(signal), "{:?} lacks {signal:?}", s.signals);
    s
}

#[test]
fn versions() {
    assert_eq!(ok(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").version, Version::Http11);
    assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n").version, Version::Http10);
    assert_eq!(err(b"GET /\r\n\r\n"), ErrorKind::InvalidVersion); // HTTP/0.9
    for v in ["HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "http/1.1", "HTTP/1.10", "HTTP/1", "HTTP/1.1 "] {
        assert_eq!(err(format!("GET / {v}\r\n\r\n").as_bytes()), ErrorKind::InvalidVersion, "{v}");
    }
    let s =
        lenient_case(b"GET / HTTP/1.2\r\n\r\n", ErrorKind::InvalidVersion, Lenient::VERSION, Signals::OTHER_VERSION);
    assert_eq!(s.version, Version::Http11);
    let s =
        lenient_case(b"GET / HTTP/0.9\r\n\r\n", ErrorKind::InvalidVersion, Lenient::VERSION, Signals::OTHER_VERSION);
    assert_eq!(s.version, Version::Http10);
}

#[test]
fn request_line_spacing_and_method() {
    assert_eq!(err(b"GET  / HTTP/1.1\r\n\r\n"), ErrorKind::InvalidTarget);
    assert_eq!(err(b"GET /  HTTP/1.1\r\n\r\n"), ErrorKind::InvalidVersion);
    assert_eq!(err(b" GET / HTTP/1.1\r\n\r\n"), ErrorKind::InvalidMethod);
    assert_eq!(err(b"GET\t/ HTTP/1.1\r\n\r\n"), ErrorKind::InvalidMethod);
    assert_eq!(err(b"G(T / HTTP/1.1\r\n\r\n"), ErrorKind::InvalidMethod);
    assert_eq!(ok(b"X-MY_Method!~ / HTTP/1.1\r\n\r\n").method, b"X-MY_Method!~");
}

#[test]
fn targets() {
    for t in ["/", "/a?b=\"c\"|<x>{y}", "*", "http://h/x", "https://h:8/", "a+b.c-d://x"] {
        assert_eq!(ok(format!("OPTIONS {t} HTTP/1.1\r\n\r\n").as_bytes()).target, t.as_bytes());
    }
    assert_eq!(ok(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n").target, b"example.com:443");
    assert_eq!(ok(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n").target, b"[::1]:443");
    for t in ["example.com:443", "x", "1http://h/", "mailto:a", "/\x7f", "/\x01", "/caf\u{e9}", "**"] {
        assert_eq!(err(format!("GET {t} HTTP/1.1\r\n\r\n").as_bytes()), ErrorKind::InvalidTarget, "{t}");
    }
    for t in ["/", "example.com", "example.com:", ":443", "a/b:1"] {
        assert_eq!(err(format!("CONNECT {t} HTTP/1.1\r\n\r\n").as_bytes()), ErrorKind::InvalidTarget, "{t}");
    }
}

#[test]
fn line_ends() {
    let s = lenient_case(
        b"GET / HTTP/1.1\nHost: a\n\n",
        ErrorKind::BareLf,
        Lenient::OPTIONAL_CR_BEFORE_LF,
        Signals::BARE_LF,
    );
    assert_eq!(s.headers, vec![(b"Host".to_vec(), b"a".to_vec())]);
    assert_eq!(err(b"GET / HTTP/1.1\r\nHost: a\n\r\n"), ErrorKind::BareLf);
    for b in [&b"GET / HTTP/1.1\rX\n\r\n"[..], b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", b"GET / HTTP/1.1\r\n\rx"] {
        assert_eq!(err(b), ErrorKind::LoneCr);
        assert_eq!(parse(b, Lenient::ALL).unwrap_err().kind, ErrorKind::LoneCr, "a lone CR is never tolerated");
    }
    let s = ok(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n");
    assert!(s.signals.contains(Signals::LEADING_EMPTY_LINES));
    assert_eq!(s.head_len, 22);
}

#[test]
fn header_names() {
    assert_eq!(err(b"GET / HTTP/1.1\r\n: v\r\n\r\n"), ErrorKind::InvalidHeaderName);
    assert_eq!(err(b"GET / HTTP/1.1\r\nA(b: v\r\n\r\n"), ErrorKind::InvalidHeaderName);
    assert_eq!(err(b"GET / HTTP/1.1\r\nNoColon\r\n\r\n"), ErrorKind::InvalidHeaderName);
    // Whitespace before the colon, on any field, not only the framing ones.
    let s = lenient_case(
        b"GET / HTTP/1.1\r\nX-Any : v\r\n\r\n",
        ErrorKind::SpaceBeforeColon,
        Lenient::SPACE_BEFORE_COLON,
        Signals::SPACE_BEFORE_COLON,
    );
    assert_eq!(s.headers, vec![(b"X-Any".to_vec(), b"v".to_vec())]);
    assert_eq!(err(b"GET / HTTP/1.1\r\nContent-Length\t: 0\r\n\r\n"), ErrorKind::SpaceBeforeColon);
}

#[test]
fn header_values() {
    let s = ok(b"GET / HTTP/1.1\r\nA: \t x \t y \t\r\nB:\r\nC:   \r\nD: \xff\x80\"\r\n\r\n");
    let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"A".to_vec(), b"x \t y".to_vec()),
        (b"B".to_vec(), b"".to_vec()),
        (b"C".to_vec(), b"".to_vec()),
        (b"D".to_vec(), b"\xff\x80\"".to_vec()),
    ];
    assert_eq!(s.headers, want);
    for c in [0u8, 1, 0x1F, 0x7F, 0x0B] {
        let buf = [&b"GET / HTTP/1.1\r\nA: x"[..], &[c], b"y\r\n\r\n"].concat();
        let s = lenient_case(&buf, ErrorKind::InvalidHeaderValue, Lenient::HEADERS, Signals::CTL_IN_VALUE);
        assert_eq!(s.headers[0].1, [b'x', c, b'y']);
    }
}

#[test]
fn obs_fold() {
    let s = lenient_case(
        b"GET / HTTP/1.1\r\nA: x\r\n  y\r\nB: z\r\n\r\n",
        ErrorKind::ObsFold,
        Lenient::OBS_FOLD,
        Signals::OBS_FOLD,
    );
    // The value spans the fold, zero-copy.
    assert_eq!(s.headers[0].1, b"x\r\n  y");
    assert_eq!(s.headers[1].1, b"z");
    // No field to continue: refused even when folds are tolerated.
    assert_eq!(parse(b"GET / HTTP/1.1\r\n x\r\n\r\n", Lenient::OBS_FOLD).unwrap_err().kind, ErrorKind::ObsFold);
}

/// A fold continues the field the line before it ended, whichever path
/// parsed that line (whole lines take a shortcut that does not keep the
/// field's state; the fold rebuilds it from the field's span): empty first
/// values, trailing whitespace, folds of folds, and a special field whose
/// value arrives only in the fold, each at every split point.
#[test]
fn folds_continue_any_line() {
    let cases: [&[u8]; 6] = [
        b"GET / HTTP/1.1\r\nA:\r\n  y\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\nA: x \t\r\n\t\r\n  y  \r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\nA: \r\n \r\n\t\r\nB:x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n 5\r\n\r\nhello",
        b"GET / HTTP/1.1\r\nConnection: keep-alive,\r\n close\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection:\r\n keep-alive\r\nA: 1\r\n b\r\n\r\n",
    ];
    let o = opts(Lenient::OBS_FOLD);
    for buf in cases {
        let whole = parse(buf, Lenient::OBS_FOLD);
        assert!(whole.is_ok(), "{:?}: {whole:?}", String::from_utf8_lossy(buf));
        for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
            let o = Options { simd, ..o };
            for cut in 1..buf.len() {
                let got = fast_pieces(buf, &[cut], &o);
                assert!(same(&whole, &got), "{simd:?} cut at {cut} of {:?}: {got:?}", String::from_utf8_lossy(buf));
            }
        }
    }
}

#[test]
fn missing_host_is_a_signal() {
    assert!(ok(b"GET / HTTP/1.1\r\n\r\n").signals.contains(Signals::MISSING_HOST));
    assert!(!ok(b"GET / HTTP/1.1\r\nhOsT: a\r\n\r\n").signals.contains(Signals::MISSING_HOST));
}

#[test]
fn content_length() {
    let s = ok(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcXYZ");
    assert_eq!((s.framing, s.body_len, s.complete, s.consumed), (Framing::Length(3), 3, true, 41));
    for v in ["", "+1", "-1", "1 2", "0x1", "1,1", "5, 5", "18446744073709551616"] {
        assert_eq!(
            err(format!("POST / HTTP/1.1\r\nContent-Length: {v}\r\n\r\n").as_bytes()),
            ErrorKind::InvalidContentLength,
            "{v}"
        );
    }
    assert_eq!(
        ok(b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n").framing,
        Framing::Length(u64::MAX)
    );
    let s = ok(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 01\r\n\r\nx");
    assert!(s.signals.contains(Signals::REPEATED_CONTENT_LENGTH));
    let s = lenient_case(
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
        ErrorKind::ConflictingContentLength,
        Lenient::DUPLICATE_CONTENT_LENGTH,
        Signals::CONFLICTING_CONTENT_LENGTH,
    );
    assert_eq!(s.framing, Framing::Length(1), "the first wins");
}

#[test]
fn transfer_encoding() {
    let s = ok(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: , CHUNKED\r\n\r\n0\r\n\r\n");
    assert_eq!((s.framing, s.complete), (Framing::Chunked, true));
    for v in ["chunked, chunked", "chunked, gzip", "gzip"] {
        let buf = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {v}\r\n\r\n");
        lenient_case(
            buf.as_bytes(),
            ErrorKind::ChunkedNotLast,
            Lenient::TRANSFER_ENCODING,
            Signals::BAD_TRANSFER_ENCODING,
        );
    }
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ErrorKind::ChunkedNotLast
    );
    assert_eq!(err(b"POST / HTTP/1.1\r\nTransfer-Encoding: foo, chunked\r\n\r\n"), ErrorKind::UnknownTransferCoding);
    assert_eq!(ErrorKind::UnknownTransferCoding.status(), 501);
    assert_eq!(err(b"POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n"), ErrorKind::InvalidTransferEncoding);
    assert_eq!(err(b"POST / HTTP/1.1\r\nTransfer-Encoding: a b\r\n\r\n"), ErrorKind::InvalidTransferEncoding);
    assert_eq!(err(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), ErrorKind::TransferEncodingHttp10);
    let s = lenient_case(
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ErrorKind::ContentLengthWithTransferEncoding,
        Lenient::CHUNKED_LENGTH,
        Signals::CL_AND_TE,
    );
    assert_eq!(s.framing, Framing::Chunked, "TE wins");
}

fn chunked(body: &[u8], lenient: Lenient) -> Result<Summary, sluice_h1::Error> {
    parse(&[&b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"[..], body].concat(), lenient)
}

#[test]
fn chunked_bodies() {
    let body = b"5;a=b;c=\"d\\\"e\";f\r\nhello\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\nextra";
    let s = chunked(body, Lenient::NONE).unwrap();
    assert_eq!((s.body_len, s.complete), (15, true));
    assert_eq!(s.consumed, 47 + body.len() - "extra".len());
    for (body, kind) in [
        (&b"\r\n"[..], ErrorKind::InvalidChunkSize),
        (b"g\r\n", ErrorKind::InvalidChunkSize),
        (b"-1\r\n", ErrorKind::InvalidChunkSize),
        (b"1x\r\n", ErrorKind::InvalidChunkSize),
        (b"00000000000000001\r\n", ErrorKind::ChunkSizeTooLong),
        (b"1;\r\n", ErrorKind::InvalidChunkExtension),
        (b"1;a=\r\n", ErrorKind::InvalidChunkExtension),
        (b"1;a=\"x\r\n", ErrorKind::InvalidChunkExtension),
        (b"1; a\r\n", ErrorKind::InvalidChunkExtension),
        (b"1\r\nab\r\n", ErrorKind::MissingCrlfAfterChunk),
        (b"0\r\nBad Trailer: x\r\n\r\n", ErrorKind::SpaceBeforeColon),
    ] {
        assert_eq!(chunked(body, Lenient::NONE).unwrap_err().kind, kind, "{:?}", String::from_utf8_lossy(body));
    }
    assert!(!chunked(b"ffffffffffffffff\r\n", Lenient::NONE).unwrap().complete);
    // Leniencies.
    assert_eq!(chunked(b"1 \r\na\r\n0\r\n\r\n", Lenient::NONE).unwrap_err().kind, ErrorKind::InvalidChunkSize);
    let s = chunked(b"1 \r\na\r\n0\r\n\r\n", Lenient::SPACES_AFTER_CHUNK_SIZE).unwrap();
    assert!(s.complete && s.signals.contains(Signals::SPACES_AFTER_CHUNK_SIZE));
    let s = chunked(b"1\r\na0\r\n\r\n", Lenient::OPTIONAL_CRLF_AFTER_CHUNK).unwrap();
    assert!(s.complete && s.signals.contains(Signals::MISSING_CRLF_AFTER_CHUNK));
    assert_eq!(chunked(b"1\na\r\n0\r\n\r\n", Lenient::NONE).unwrap_err().kind, ErrorKind::BareLf);
    assert!(chunked(b"1\na\n0\n\n", Lenient::OPTIONAL_CR_BEFORE_LF).unwrap().complete);
}

#[test]
fn keep_alive() {
    assert!(ok(b"GET / HTTP/1.1\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(ok(b"GET / HTTP/1.0\r\nConnection: foo,Keep-Alive\r\n\r\n").keep_alive);
}

#[test]
fn incomplete_input() {
    assert_eq!(err(b"GET / HTTP/1.1\r\nHost: a\r\n"), ErrorKind::IncompleteHead);
    let s = ok(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    assert_eq!((s.body_len, s.complete, s.consumed), (3, false, 42));
    let s = ok(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
    assert_eq!((s.body_len, s.complete), (2, false));
    // The body so far is checked.
    assert_eq!(err(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nz"), ErrorKind::InvalidChunkSize);
    // Bytes after a complete message are left.
    let s = ok(b"GET / HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    assert_eq!((s.complete, s.consumed), (true, 18));
}

#[test]
fn limits() {
    let o = Options { max_head: 20, ..Options::default() };
    let e = fast(b"GET / HTTP/1.1\r\nA: bcdefg\r\n\r\n", &o).unwrap_err();
    assert_eq!((e.kind, e.offset, e.kind.status()), (ErrorKind::HeadTooLarge, 20, 431));
    assert!(fast(b"GET / HTTP/1.1\r\nA:\r\n\r\n", &Options { max_head: 22, ..o }).is_ok());
    let o = Options { max_headers: 2, ..Options::default() };
    assert!(fast(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", &o).is_ok());
    let e = fast(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &o).unwrap_err();
    assert_eq!((e.kind, e.offset, e.kind.status()), (ErrorKind::TooManyHeaders, 28, 431));
}

#[test]
fn lenient_names_round_trip() {
    assert_eq!(Lenient::from_names("headers, obs-fold").unwrap(), Lenient::HEADERS | Lenient::OBS_FOLD);
    assert_eq!(Lenient::from_names("all").unwrap(), Lenient::ALL);
    assert_eq!(Lenient::from_names(&Lenient::ALL.names().join(",")).unwrap(), Lenient::ALL);
    let e = Lenient::from_names("headers,bogus").unwrap_err();
    assert!(e.contains("bogus") && e.contains("obs-fold"), "{e}");
    assert_eq!(Lenient::ALL.names().len(), 10);
    let mut kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), ErrorKind::ALL.len(), "as_str names are distinct");
}

#[test]
fn error_is_in_the_signals() {
    let mut p = Parser::new(Options::default());
    assert_eq!(p.parse_head(b"GET / HTTP/1.1\r\n\r\n").unwrap(), HeadStatus::Complete(18));
    p.reset();
    let e = p.parse_head(b"GET / HTTP/1.1\r\nA : b\r\n\r\n").unwrap_err();
    assert_eq!(p.signals().error(), Some(e.kind));
    assert_eq!(p.signals().names().last(), Some(&"space-before-colon"));
}

/// `host()` is the first Host field's value, however the head arrives and
/// wherever the field is (past 64 fields the parser finds the fields that
/// matter another way).
#[test]
fn first_host_wins() {
    let mut msgs = vec![b"GET / HTTP/1.1\r\nA: 1\r\nhOST: first\r\nHost: second\r\nConnection: close\r\n\r\n".to_vec()];
    let mut long = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..70 {
        long.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    long.extend_from_slice(b"Host: first\r\nHOST: second\r\n\r\n");
    msgs.push(long);
    for msg in &msgs {
        for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
            for cut in 1..msg.len() {
                let mut p = Parser::new(Options { simd, ..Options::default() });
                assert_eq!(p.parse_head(&msg[..cut]).unwrap(), HeadStatus::Partial);
                assert_eq!(p.parse_head(msg).unwrap(), HeadStatus::Complete(msg.len()));
                assert_eq!(p.head(msg).unwrap().host(), Some(&b"first"[..]), "{simd:?} cut at {cut}");
            }
        }
    }
}

/// The parser is reused across messages and resumes where it stopped.
#[test]
fn reuse_and_trickle() {
    let msg = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody";
    let mut p = Parser::new(Options::default());
    for _ in 0..3 {
        let mut calls = 0;
        let mut status = HeadStatus::Partial;
        for end in 1..=msg.len() {
            calls += 1;
            status = p.parse_head(&msg[..end]).unwrap();
            if status != HeadStatus::Partial {
                break;
            }
        }
        assert_eq!(status, HeadStatus::Complete(msg.len() - 4));
        assert_eq!(calls, msg.len() - 4);
        let head = p.head(msg).unwrap();
        assert_eq!(
            (head.method, head.target, head.host(), head.content_length()),
            ("POST", "/x", Some(&b"h"[..]), Some(4))
        );
        assert_eq!(head.longest_header_line(), "Content-Length: 4".len());
        let s = p.parse_body(b"bo").unwrap();
        assert_eq!((s.consumed, s.data, s.done), (2, 0..2, false));
        let s = p.parse_body(b"dyGET").unwrap();
        assert_eq!((s.consumed, s.data, s.done), (2, 0..2, true));
        assert_eq!(p.body_len(), 4);
        p.reset();
    }
}

/// A reused parser: after `reset`, nothing of the last message's body shows
/// (its length, chunk count, signals, doneness), while a new head is read.
#[test]
fn reset_forgets_the_last_body() {
    let o = Options { lenient: Lenient::SPACES_AFTER_CHUNK_SIZE, ..Options::default() };
    let mut p = Parser::new(o);
    let first = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    let n = match p.parse_head(first) {
        Ok(HeadStatus::Complete(n)) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(n, first.len());
    let body = b"3 \r\nabc\r\n0\r\n\r\n";
    let mut at = 0;
    while !p.body_done() {
        let s = p.parse_body(&body[at..]).expect("a valid chunked body");
        assert!(s.consumed > 0, "stuck at {at}");
        at += s.consumed;
    }
    assert_eq!((p.body_len(), p.chunks()), (3, 1));
    assert!(p.signals().contains(Signals::SPACES_AFTER_CHUNK_SIZE));
    p.reset();
    assert_eq!((p.body_len(), p.chunks(), p.body_done()), (0, 0, false));
    assert_eq!(p.signals(), Signals::NONE);
    let second = b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
    assert!(matches!(p.parse_head(second), Ok(HeadStatus::Complete(n)) if n == second.len()));
    assert_eq!((p.body_len(), p.chunks(), p.body_done()), (0, 0, true));
    assert_eq!(p.signals(), Signals::NONE);
    assert_eq!(p.head(second).map(|h| h.target), Some("/x"));
}
