//! The relay between an h2 stream and an HTTP/1.1 upstream: responses of
//! every framing, fed in any split, come out as exactly the generator's
//! status, end-to-end fields and body; a request and a 200 KB chunked
//! answer go through `ServerConn` end to end under flow control; broken
//! responses are each their own error.

mod common;

use common::*;
use proptest::prelude::*;
use sluice_h1::{parse_request, Options};
use sluice_h2::frame::{self, flag, kind};
use sluice_h2::hpack::Decoder;
use sluice_h2::relay::{pump, Fields, RelayError, RelayOut, RequestBody, ResponseRelay};
use sluice_h2::Event;

#[derive(Debug, Clone)]
enum Framing {
    Length,
    /// The body cut at these sizes (cycled), then trailers or not.
    Chunked(Vec<usize>, bool),
    Close,
}

#[derive(Debug, Clone)]
struct Response {
    status: u16,
    head_request: bool,
    interim: bool,
    /// End-to-end fields, names as the upstream spells them.
    fields: Vec<(String, String)>,
    /// Hop-by-hop field lines, each with where it goes among the others.
    hops: Vec<(String, prop::sample::Index)>,
    framing: Framing,
    body: Vec<u8>,
}

impl Response {
    fn has_body(&self) -> bool {
        !(self.head_request || self.status == 204 || self.status == 304)
    }

    /// The HTTP/1.1 bytes an upstream sends.
    fn serialise(&self) -> Vec<u8> {
        let mut t = Vec::new();
        if self.interim {
            t.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        t.extend(format!("HTTP/1.1 {} Some Reason\r\n", self.status).bytes());
        let mut lines: Vec<String> = self.fields.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
        match &self.framing {
            Framing::Length => lines.insert(0, format!("Content-Length: {}\r\n", self.body.len())),
            Framing::Chunked(..) => lines.insert(0, "Transfer-Encoding: chunked\r\n".to_string()),
            Framing::Close => {}
        }
        for (line, at) in &self.hops {
            lines.insert(at.index(lines.len() + 1), line.clone());
        }
        t.extend(lines.concat().bytes());
        t.extend_from_slice(b"\r\n");
        if !self.has_body() {
            return t;
        }
        match &self.framing {
            Framing::Length | Framing::Close => t.extend_from_slice(&self.body),
            Framing::Chunked(sizes, trailers) => {
                let mut rest = self.body.as_slice();
                for (i, size) in sizes.iter().cycle().enumerate() {
                    if rest.is_empty() {
                        break;
                    }
                    let (piece, tail) = rest.split_at((*size).min(rest.len()));
                    let ext = if i % 3 == 1 { ";ext=\"a b\"" } else { "" };
                    // Lower and upper case, and leading zeros up to the 16 digits allowed.
                    let size = match i % 4 {
                        0 => format!("{:x}", piece.len()),
                        1 => format!("{:X}", piece.len()),
                        2 => format!("{:016x}", piece.len()),
                        _ => format!("0{:x}", piece.len()),
                    };
                    t.extend(format!("{size}{ext}\r\n").bytes());
                    t.extend_from_slice(piece);
                    t.extend_from_slice(b"\r\n");
                    rest = tail;
                }
                t.extend_from_slice(if *trailers { b"0\r\nX-Trailer: v\r\nEtag: \"t\"\r\n\r\n" } else { b"0\r\n\r\n" });
            }
        }
        t
    }

    /// What HTTP/2 must carry: status, fields (names lower-case; the
    /// content-length first when the upstream sent one, but on a 204), body.
    fn expected(&self) -> (u16, Fields, Vec<u8>) {
        let mut fields = Vec::new();
        if matches!(self.framing, Framing::Length) && self.status != 204 {
            fields.push((b"content-length".to_vec(), self.body.len().to_string().into_bytes()));
        }
        fields.extend(self.fields.iter().map(|(n, v)| (n.to_ascii_lowercase().into_bytes(), v.clone().into_bytes())));
        let body = if self.has_body() { self.body.clone() } else { Vec::new() };
        (self.status, fields, body)
    }
}

fn response() -> impl Strategy<Value = Response> {
    let names = prop::sample::select(vec!["Content-Type", "x-custom", "ETag", "Set-Cookie", "Cache-Control", "Vary"]);
    let field = (names, "[!-~]([ -~]{0,20}[!-~])?").prop_map(|(n, v)| (n.to_string(), v));
    // Whole lines: a field a `connection` names comes with it.
    let hop = prop::sample::select(vec![
        "Connection: keep-alive, X-Hop\r\nX-Hop: named by connection\r\n",
        "Keep-Alive: timeout=5\r\n",
        "Proxy-Connection: keep-alive\r\n",
        "Upgrade: h2c\r\n",
        "TE: trailers\r\n",
        "connection: Keep-Alive\r\n",
    ]);
    let hop = (hop, any::<prop::sample::Index>()).prop_map(|(line, at)| (line.to_string(), at));
    let framing = prop_oneof![
        Just(Framing::Length),
        (prop::collection::vec(1usize..700, 1..6), any::<bool>()).prop_map(|(s, t)| Framing::Chunked(s, t)),
        Just(Framing::Close),
    ];
    (
        prop::sample::select(vec![200u16, 201, 204, 206, 301, 304, 404, 500, 503]),
        prop::bool::weighted(0.2),
        any::<bool>(),
        prop::collection::vec(field, 0..6),
        prop::collection::vec(hop, 0..5),
        framing,
        prop::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(status, head_request, interim, fields, hops, framing, body)| Response {
            status,
            head_request,
            interim,
            fields,
            hops,
            framing,
            body,
        })
}

/// Feeds `pieces` in turn (the unconsumed tail kept, as a connection
/// buffer does), polling with `poll_max` after each feed, `eof` at the
/// end when `close`: what came out, and the bytes left unconsumed.
fn relay_all(
    relay: &mut ResponseRelay,
    pieces: &[&[u8]],
    poll_max: usize,
    max_piece: usize,
    close: bool,
) -> Result<(Vec<RelayOut>, Vec<u8>), RelayError> {
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let drain = |relay: &mut ResponseRelay, out: &mut Vec<RelayOut>| {
        let mut any = false;
        while let Some(o) = relay.poll(poll_max) {
            if let RelayOut::Body(b) = &o {
                assert!(!b.is_empty() && b.len() <= poll_max.min(max_piece), "piece of {}", b.len());
            }
            out.push(o);
            any = true;
        }
        any
    };
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            let n = relay.feed(&buf)?;
            assert!(relay.pending() <= max_piece);
            buf.drain(..n);
            if !drain(relay, &mut out) && n == 0 {
                break;
            }
        }
    }
    if close {
        relay.eof()?;
        drain(relay, &mut out);
    }
    Ok((out, buf))
}

fn cut<'a>(whole: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c.index(whole.len() + 1)).collect();
    points.sort_unstable();
    let (mut pieces, mut last) = (Vec::new(), 0);
    for p in points.into_iter().chain([whole.len()]) {
        pieces.push(&whole[last..p]);
        last = p;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_split_relays_the_response_exactly(
        r in response(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        max_piece in 1usize..5000,
        poll_max in prop_oneof![Just(usize::MAX), 1usize..3000],
    ) {
        let mut whole = r.serialise();
        // What follows a response that ends by itself is the next one's.
        let next = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let delimited = !matches!(r.framing, Framing::Close) || !r.has_body();
        if delimited {
            whole.extend_from_slice(next);
        }
        let mut relay = ResponseRelay::new(r.head_request, 16 * 1024, max_piece);
        let (out, left) = relay_all(&mut relay, &cut(&whole, &cuts), poll_max, max_piece, !delimited).unwrap();
        prop_assert_eq!(left, if delimited { next.to_vec() } else { Vec::new() });
        let (status, fields, body) = r.expected();
        let mut got_body = Vec::new();
        let mut items = out.into_iter();
        prop_assert_eq!(items.next(), Some(RelayOut::Head { status, headers: fields }));
        let mut ended = false;
        for item in items {
            prop_assert!(!ended, "nothing after End");
            match item {
                RelayOut::Body(b) => got_body.extend_from_slice(&b),
                RelayOut::End => ended = true,
                RelayOut::Head { .. } => prop_assert!(false, "a second head"),
            }
        }
        prop_assert!(ended);
        prop_assert_eq!(got_body, body);
        prop_assert!(relay.finished());
        prop_assert_eq!(relay.upstream_closes(), Some(!delimited));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8), head in any::<bool>()) {
        let mut near = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        near.extend_from_slice(&bytes);
        for whole in [&bytes, &near] {
            let mut relay = ResponseRelay::new(head, 256, 64);
            let _ = relay_all(&mut relay, &cut(whole, &cuts), 50, 64, true);
        }
    }
}

fn error_of(text: &[u8], max_head: usize) -> RelayError {
    // Whole, and byte by byte: the same error.
    let whole = relay_all(&mut ResponseRelay::new(false, max_head, 1000), &[text], usize::MAX, 1000, true);
    let bytes: Vec<&[u8]> = text.chunks(1).collect();
    let split = relay_all(&mut ResponseRelay::new(false, max_head, 1000), &bytes, usize::MAX, 1000, true);
    assert_eq!(whole.as_ref().err(), split.as_ref().err());
    whole.expect_err("an error")
}

#[test]
fn broken_responses_are_each_their_own_error() {
    let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    long.resize(300, b'a');
    long.extend_from_slice(b"\r\n\r\n");
    assert_eq!(error_of(&long, 256), RelayError::TooLarge(256));
    // Exactly at the bound, it passes.
    let mut fits = b"HTTP/1.1 204 No Content\r\nX: ".to_vec();
    fits.resize(252, b'a');
    fits.extend_from_slice(b"\r\n\r\n");
    assert_eq!(fits.len(), 256);
    let (out, _) = relay_all(&mut ResponseRelay::new(false, 256, 10), &[&fits], 10, 10, false).unwrap();
    assert_eq!(out.last(), Some(&RelayOut::End));

    let bad_size = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
    assert!(matches!(error_of(bad_size, 1024), RelayError::Framing(_)), "{:?}", error_of(bad_size, 1024));
    let digits =
        |n: usize| format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:0n$x}\r\nx\r\n0\r\n\r\n", 1);
    let (out, _) =
        relay_all(&mut ResponseRelay::new(false, 1024, 10), &[digits(16).as_bytes()], 10, 10, false).unwrap();
    assert_eq!(out.get(1), Some(&RelayOut::Body(b"x".to_vec())));
    assert!(matches!(error_of(digits(17).as_bytes(), 1024), RelayError::Framing(_)));
    let too_long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n";
    assert!(matches!(error_of(too_long, 1024), RelayError::Framing(_)));

    let upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    assert_eq!(error_of(upgrade, 1024), RelayError::Upgrade);
    // After a 100 Continue too.
    let upgrade = [&b"HTTP/1.1 100 Continue\r\n\r\n"[..], upgrade].concat();
    assert_eq!(error_of(&upgrade, 1024), RelayError::Upgrade);

    for head in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
    ] {
        assert!(matches!(error_of(head, 1024), RelayError::Head(_)), "{:?}", String::from_utf8_lossy(head));
    }
    // Cut short: before the head ends, inside a length, inside the chunks.
    assert!(matches!(error_of(b"HTTP/1.1 200 OK\r\n", 1024), RelayError::Head(_)));
    assert!(matches!(error_of(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", 1024), RelayError::Framing(_)));
    let cut_chunks = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel";
    assert!(matches!(error_of(cut_chunks, 1024), RelayError::Framing(_)));

    // A head parsed before the body broke is never delivered.
    let mut relay = ResponseRelay::new(false, 1024, 100);
    assert!(matches!(relay.feed(bad_size), Err(RelayError::Framing(_))));
    assert_eq!(relay.poll(usize::MAX), None);
    assert!(!relay.head_delivered());
    // An error is final.
    let mut relay = ResponseRelay::new(false, 1024, 100);
    assert_eq!(relay.feed(upgrade.as_slice()), Err(RelayError::Upgrade));
    assert_eq!(relay.feed(b"HTTP/1.1 200 OK\r\n\r\n"), Err(RelayError::Upgrade));
    assert_eq!(relay.eof(), Err(RelayError::Upgrade));
}

#[test]
fn feed_holds_back_what_it_has_no_room_for() {
    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
    let mut relay = ResponseRelay::new(false, 1024, 4);
    let head_len = text.len() - 10;
    // The head and four body bytes, no more, until the body is taken.
    assert_eq!(relay.feed(text), Ok(head_len + 4));
    assert_eq!((relay.pending(), relay.room()), (4, 0));
    assert_eq!(relay.feed(&text[head_len + 4..]), Ok(0));
    assert!(matches!(relay.poll(usize::MAX), Some(RelayOut::Head { status: 200, .. })));
    assert_eq!(relay.poll(3), Some(RelayOut::Body(b"012".to_vec())));
    assert_eq!(relay.feed(&text[head_len + 4..]), Ok(3));
    assert_eq!(relay.poll(0), None);
    assert_eq!(relay.poll(usize::MAX), Some(RelayOut::Body(b"3456".to_vec())));
    assert_eq!(relay.feed(&text[head_len + 7..]), Ok(3));
    assert!(relay.ended());
    assert_eq!(relay.poll(usize::MAX), Some(RelayOut::Body(b"789".to_vec())));
    assert_eq!(relay.poll(usize::MAX), Some(RelayOut::End));
    assert_eq!(relay.poll(usize::MAX), None);
    assert_eq!(relay.feed(b"more"), Ok(0));
}

#[test]
fn request_body_frames_data_as_the_head_says() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    frame::write_headers(&mut b, 1, &request_block("POST", "/c", &[]), false, 16_384);
    frame::write_data(&mut b, 1, b"abc", false, 16_384);
    frame::write_data(&mut b, 1, b"", false, 16_384);
    frame::write_data(&mut b, 1, b"defgh", true, 16_384);
    frame::write_headers(&mut b, 3, &request_block("PUT", "/l", &[("content-length", "4")]), false, 16_384);
    frame::write_data(&mut b, 3, b"wxyz", true, 16_384);
    frame::write_headers(&mut b, 5, &request_block("GET", "/g", &[]), true, 16_384);
    // Stream 7: chunked, then trailers, which end the body and are dropped.
    frame::write_headers(&mut b, 7, &request_block("POST", "/t", &[]), false, 16_384);
    frame::write_data(&mut b, 7, b"tr", false, 16_384);
    let mut trailers = Vec::new();
    sluice_h2::hpack::encode(&mut trailers, [(&b"x-trailer"[..], &b"secret"[..])]);
    frame::write_headers(&mut b, 7, &trailers, true, 16_384);
    p.feed(&b, 1).unwrap();
    let mut upstream: [(Option<RequestBody>, Vec<u8>); 4] = Default::default();
    for e in &p.events {
        match e {
            Event::Request { stream, head, end_stream } => {
                let (body, out) = &mut upstream[(*stream / 2) as usize];
                *body = Some(RequestBody::start(head, *end_stream, out));
            }
            Event::Data { stream, bytes, end_stream } => {
                let (body, out) = &mut upstream[(*stream / 2) as usize];
                body.as_mut().unwrap().data(bytes, *end_stream, out);
            }
            _ => {}
        }
    }
    let want: [(&str, &str, &[u8]); 4] =
        [("POST", "/c", b"abcdefgh"), ("PUT", "/l", b"wxyz"), ("GET", "/g", b""), ("POST", "/t", b"tr")];
    for ((body, bytes), (method, target, payload)) in upstream.iter().zip(want) {
        assert!(body.unwrap().finished());
        let r = parse_request(bytes, &Options::default()).unwrap();
        assert!(r.complete, "{}", String::from_utf8_lossy(bytes));
        assert_eq!(r.consumed, bytes.len());
        assert_eq!((r.head.method.as_bytes(), r.head.target.as_bytes()), (method.as_bytes(), target.as_bytes()));
        assert_eq!(r.body_len, payload.len() as u64);
        assert!(bytes.ends_with(payload) || method == "POST");
    }
    assert!(upstream[0].1.ends_with(b"3\r\nabc\r\n5\r\ndefgh\r\n0\r\n\r\n"));
    assert!(upstream[3].1.ends_with(b"\r\n\r\n2\r\ntr\r\n0\r\n\r\n"));
    assert!(!upstream[3].1.windows(6).any(|w| w == b"secret"));
    // Nothing after the end.
    let (body, out) = &mut upstream[1];
    let before = out.len();
    body.as_mut().unwrap().data(b"late", true, out);
    assert_eq!(out.len(), before);
}

/// A deterministic body that is not one repeated byte.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn a_request_and_a_200k_chunked_answer_end_to_end() {
    let mut p = Peer::new();
    p.handshake();
    let mut b = Vec::new();
    frame::write_headers(&mut b, 1, &request_block("GET", "/big", &[("accept", "*/*")]), true, 16_384);
    p.feed(&b, 1).unwrap();
    let Some(Event::Request { stream: 1, head, end_stream: true }) = p.events.first().cloned() else {
        panic!("{:?}", p.events)
    };
    // The upstream reads the request as any HTTP/1.1 request.
    let mut request = Vec::new();
    assert!(RequestBody::start(&head, true, &mut request).finished());
    let r = parse_request(&request, &Options::default()).unwrap();
    assert!(r.complete);
    assert_eq!((r.head.method.as_bytes(), r.head.target.as_bytes()), (&b"GET"[..], &b"/big"[..]));
    let fields: Vec<(&[u8], &[u8])> = r.head.headers().collect();
    assert!(fields.contains(&(&b"accept"[..], &b"*/*"[..])));

    // Its answer: 200 KB in chunks of uneven sizes, trailers, hop-by-hop fields.
    let body = pattern(200 * 1024);
    let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: keep-alive, X-Hop\r\n\
X-Hop: 1\r\nTransfer-Encoding: chunked\r\nX-End: to-end\r\n\r\n"
        .to_vec();
    for (i, piece) in body.chunks(7001).enumerate() {
        let piece = if i % 2 == 0 { piece } else { &piece[..piece.len() / 2] };
        answer.extend(format!("{:x}\r\n", piece.len()).bytes());
        answer.extend_from_slice(piece);
        answer.extend_from_slice(b"\r\n");
    }
    // The odd chunks were halved: the body is what was written.
    let mut sent_body = Vec::new();
    for (i, piece) in body.chunks(7001).enumerate() {
        sent_body.extend_from_slice(if i % 2 == 0 { piece } else { &piece[..piece.len() / 2] });
    }
    answer.extend_from_slice(b"0\r\nX-Trailer: dropped\r\n\r\n");

    let mut relay = ResponseRelay::for_request(&head, 16 * 1024, 16 * 1024);
    let (mut upstream, mut granted, mut updates) = (&answer[..], 0usize, 0);
    for round in 0..10_000 {
        // The upstream's bytes arrive 4 KB at a time, taken as there is room.
        let read = &upstream[..upstream.len().min(4096)];
        let n = relay.feed(read).unwrap();
        upstream = &upstream[n..];
        let did = pump(&mut p.conn, 1, &mut relay).unwrap();
        p.drain();
        if did.finished {
            break;
        }
        let received: usize = p.sent(kind::DATA).iter().map(|f| f.payload.len()).sum();
        let client_got = received;
        if n == 0 && did.body == 0 && !did.head_sent {
            // Stalled on the window: the client reads what it got and grants it back.
            let grant = (client_got - granted) as u32;
            assert!(grant > 0, "stalled with nothing to grant, round {round}");
            let mut wu = Vec::new();
            frame::write_window_update(&mut wu, 0, grant);
            frame::write_window_update(&mut wu, 1, grant);
            p.feed(&wu, 2).unwrap();
            granted = client_got;
            updates += 1;
        }
    }
    assert!(relay.finished());
    assert!(updates > 0, "flow control was in play");
    let headers = p.sent(kind::HEADERS);
    assert_eq!(headers.len(), 1);
    let mut fields = Vec::new();
    Decoder::default().decode(&headers[0].payload, usize::MAX, |n, v| fields.push((n.to_vec(), v.to_vec()))).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> =
        [(":status", "200"), ("content-type", "application/octet-stream"), ("x-end", "to-end")]
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
    assert_eq!(fields, want);
    let data = p.sent(kind::DATA);
    let got: Vec<u8> = data.iter().flat_map(|f| f.payload.iter().copied()).collect();
    assert_eq!(got.len(), sent_body.len());
    assert!(got == sent_body, "the body differs");
    assert!(data.iter().all(|f| f.payload.len() <= 16_384));
    assert_eq!(data.last().unwrap().flags & flag::END_STREAM, flag::END_STREAM);
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn pump_on_a_reset_stream_says_so() {
    let mut p = Peer::new();
    p.handshake();
    p.feed(&get(1), 1).unwrap();
    p.feed(&rst(1), 2).unwrap();
    let mut relay = ResponseRelay::new(false, 1024, 1024);
    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(relay.feed(text), Ok(text.len()));
    assert_eq!(pump(&mut p.conn, 1, &mut relay), Err(sluice_h2::SendError::NoStream));
    p.drain();
    assert!(p.sent(kind::HEADERS).is_empty() && p.sent(kind::DATA).is_empty());
}

#[test]
fn pump_ends_a_bodiless_answer_with_its_headers() {
    for (method, text) in [
        ("HEAD", &b"HTTP/1.1 200 OK\r\nContent-Length: 123\r\n\r\n"[..]),
        ("GET", b"HTTP/1.1 204 No Content\r\n\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ] {
        let mut p = Peer::new();
        p.handshake();
        let mut b = Vec::new();
        frame::write_headers(&mut b, 1, &request_block(method, "/", &[]), true, 16_384);
        p.feed(&b, 1).unwrap();
        let Some(Event::Request { head, .. }) = p.events.first().cloned() else { panic!() };
        let mut relay = ResponseRelay::for_request(&head, 1024, 1024);
        assert_eq!(relay.feed(text), Ok(text.len()));
        let did = pump(&mut p.conn, 1, &mut relay).unwrap();
        p.drain();
        assert!(did.head_sent && did.finished, "{method} {:?}", String::from_utf8_lossy(text));
        let h = p.sent(kind::HEADERS);
        assert_eq!((h.len(), h[0].flags & flag::END_STREAM), (1, flag::END_STREAM));
        assert!(p.sent(kind::DATA).is_empty());
        assert_eq!(p.conn.open_streams(), 0);
    }
}
