//! The fast parser (every scanner level, one shot and fed in pieces) agrees
//! with the reference on requests drawn from a grammar and then damaged.

mod common;
use common::*;
use proptest::prelude::*;
use sluice_h1::{Lenient, Options, Simd};

/// A small deterministic generator: proptest draws the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
    /// From `good` mostly, from `bad` with probability `pct_bad`%.
    fn either<T: Copy>(&mut self, good: &[T], bad: &[T], pct_bad: u64) -> T {
        if self.chance(pct_bad) {
            self.pick(bad)
        } else {
            self.pick(good)
        }
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

fn eol(r: &mut Rng) -> &'static [u8] {
    if r.chance(97) {
        b"\r\n"
    } else {
        r.pick(&[&b"\n"[..], b"\r", b"\r\r\n", b"\n\r"])
    }
}

fn chunked_body(r: &mut Rng, out: &mut Vec<u8>) {
    for _ in 0..r.below(4) {
        let n = r.pick(&[1usize, 2, 5, 16, 17, 40]);
        let size = if r.chance(85) {
            format!("{n:x}")
        } else {
            r.pick(&["", "g", "0000000000000000001", "ffffffffffffffff", "1 ", "1\t", "-1", "0x1"]).to_string()
        };
        out.extend_from_slice(size.as_bytes());
        if r.chance(20) {
            out.extend_from_slice(r.pick(&[
                &b";a"[..],
                b";a=b",
                b";a=\"q\\\"x\"",
                b";",
                b";a=",
                b"; a",
                b";a=\"x",
                b";a=\"x\"y",
                b";a=b=c",
                b";a=\"\\\x01\"",
                b";a;b=\"\"",
            ]));
        }
        out.extend_from_slice(eol(r));
        out.extend((0..n).map(|i| b'a' + (i % 26) as u8));
        if r.chance(90) {
            out.extend_from_slice(eol(r));
        }
    }
    out.extend_from_slice(b"0");
    out.extend_from_slice(eol(r));
    chunked_trailers(r, out);
    out.extend_from_slice(eol(r));
}

/// Trailer lines: the fast path reads them its own way, so the
/// differential test needs the bad ones too.
fn chunked_trailers(r: &mut Rng, out: &mut Vec<u8>) {
    for _ in 0..r.below(4) {
        out.extend_from_slice(r.either(
            &[&b"X-Trailer: v"[..], b"A:b", b"Checksum:\t \tabc \t", b"E:", b"T: \xff\x80 x"],
            &[
                b"Bad Name: v",
                b"N\xc3\xa9: v",
                b" folded",
                b"\tfolded: x",
                b"X: a\x01b",
                b"X: a\x7f",
                b"X : v",
                b"X \t : v",
                b"X :v y",
                b":v",
                b"X",
                b"X  x: v",
                b"X: v\rq",
            ],
            25,
        ));
        out.extend_from_slice(eol(r));
    }
}

/// A request from the grammar, with mutations.
fn request(r: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..r.below(2) {
        out.extend_from_slice(eol(r));
    }
    let connect = r.chance(10);
    let method: &[u8] =
        if connect { b"CONNECT" } else { r.either(&[&b"GET"[..], b"POST", b"OPTIONS", b"X-Y_z"], &[b"G@T", b""], 3) };
    out.extend_from_slice(method);
    out.extend_from_slice(r.either(&[&b" "[..]], &[b"  ", b"\t"], 3));
    let good: &[&[u8]] = if connect {
        &[b"example.com:443", b"[::1]:80"]
    } else {
        &[b"/", b"/a/b?c=d&e=%20", b"/\"|<>{}^`", b"*", b"http://example.com/x"]
    };
    out.extend_from_slice(r.either(good, &[b"ex:ample", b"", b"/\x7f", b"/caf\xc3\xa9", b"example.com:443", b"/x"], 5));
    if r.chance(97) {
        out.extend_from_slice(r.either(&[&b" "[..]], &[b"  "], 3));
        out.extend_from_slice(r.either(
            &[&b"HTTP/1.1"[..], b"HTTP/1.0"],
            &[b"HTTP/2.0", b"HTTP/1.2", b"HTTP/0.9", b"http/1.1", b"HTTP/1.10", b"HTTP/1"],
            5,
        ));
    }
    out.extend_from_slice(eol(r));
    let mut framing_te = false;
    let mut framing_cl = None;
    for _ in 0..r.below(7) {
        // (name, good values, bad values)
        type Field<'a> = (&'a [u8], &'a [&'a [u8]], &'a [&'a [u8]]);
        let fields: &[Field] = &[
            (b"Host", &[b"example.com", b""], &[b"a\x01b"]),
            (b"Content-Length", &[b"5", b"0", b"05", b"6"], &[b"5, 5", b"-1", b"", b"99999999999999999999", b"+5"]),
            (
                b"Transfer-Encoding",
                &[b"chunked", b"gzip, chunked", b"Chunked", b",chunked"],
                &[b"chunked, gzip", b"chunked, chunked", b"foo", b"", b"gzip", b"a b"],
            ),
            (b"Connection", &[b"close", b"keep-alive", b"Keep-Alive, Upgrade", b"x"], &[]),
            (
                b"X-Long",
                &[b"0123456789abcdef0123456789abcdef0123456789abcdef!", b"\xff\x80", b"tab\there", b"a \"b\" c"],
                &[b"a\x00b", b"a\x7fb"],
            ),
            (b"A", &[b"b"], &[]),
            (b"Bad Name", &[], &[b"v"]),
            (b"", &[], &[b"v"]),
            (b"N\xc3\xa9", &[], &[b"v"]),
        ];
        let (name, good, bad) = if r.chance(5) { r.pick(&fields[6..]) } else { r.pick(&fields[..6]) };
        let value = if bad.is_empty() || good.is_empty() {
            r.pick(if good.is_empty() { bad } else { good })
        } else {
            r.either(good, bad, 10)
        };
        if name == b"Transfer-Encoding" {
            framing_te = true;
        }
        if name == b"Content-Length" {
            framing_cl = std::str::from_utf8(value).ok().and_then(|v| v.parse::<usize>().ok());
        }
        out.extend_from_slice(name);
        out.extend_from_slice(r.either(&[&b": "[..], b": ", b":", b":\t", b":  "], &[b" : ", b"\t:"], 3));
        out.extend_from_slice(value);
        if r.chance(10) {
            out.extend_from_slice(b" \t");
        }
        if r.chance(2) {
            out.extend_from_slice(eol(r));
            out.extend_from_slice(r.pick(&[&b" folded"[..], b"\tmore", b"  "]));
        }
        out.extend_from_slice(eol(r));
    }
    out.extend_from_slice(eol(r));
    if framing_te || r.chance(10) {
        chunked_body(r, &mut out);
    } else if let Some(n) = framing_cl {
        out.extend((0..n.min(64)).map(|i| b'0' + (i % 10) as u8));
    }
    if r.chance(20) {
        out.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
    }
    // Damage, half the time.
    let damage = if r.chance(50) { 0 } else { 1 + r.below(2) };
    for _ in 0..damage {
        if out.is_empty() {
            break;
        }
        let at = r.below(out.len() + 1);
        let any = (r.next() & 0xFF) as u8;
        let byte = r.pick(&[b'\r', b'\n', b' ', 0, b'\t', b':', b'a', 0x7F, 0x80, b';', b'"', any]);
        match r.below(3) {
            0 if at < out.len() => out[at] = byte,
            1 if at < out.len() => {
                out.remove(at);
            }
            _ => out.insert(at, byte),
        }
    }
    if r.chance(10) {
        let n = r.below(out.len() + 1);
        out.truncate(n);
    }
    out
}

fn options(r: &mut Rng) -> Options {
    let lenient = if r.chance(50) { Lenient::NONE } else { Lenient((r.next() as u32) & Lenient::ALL.0) };
    Options {
        lenient,
        max_head: if r.chance(5) { 8 + r.below(120) } else { 64 * 1024 },
        max_headers: if r.chance(5) { r.below(4) } else { 128 },
        simd: Simd::Auto,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn fast_agrees_with_reference(seed in 1u64..) {
        let mut r = Rng(seed);
        let buf = request(&mut r);
        let opts = options(&mut r);
        let want = reference(&buf, &opts);
        for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
            let o = Options { simd, ..opts };
            let got = fast(&buf, &o);
            prop_assert!(same(&got, &want), "{simd:?} on {:?} {:?}:\n fast {got:?}\n  ref {want:?}", String::from_utf8_lossy(&buf), opts);
        }
    }

    #[test]
    fn any_pieces_parse_like_one_shot(seed in 1u64..) {
        let mut r = Rng(seed);
        let buf = request(&mut r);
        let opts = options(&mut r);
        let whole = fast(&buf, &opts);
        // Two pieces at every split point, then a few random cuttings.
        let mut cuttings: Vec<Vec<usize>> = (0..=buf.len()).map(|c| vec![c]).collect();
        for _ in 0..4 {
            let mut c: Vec<usize> = (0..r.below(8)).map(|_| r.below(buf.len() + 1)).collect();
            c.sort_unstable();
            cuttings.push(c);
        }
        // Every byte on its own.
        cuttings.push((1..buf.len()).collect());
        for cuts in &cuttings {
            for simd in [Simd::Avx2, Simd::Portable] {
                let got = fast_pieces(&buf, cuts, &Options { simd, ..opts });
                prop_assert!(same(&got, &whole), "cuts {cuts:?} {simd:?} on {:?} {opts:?}:\n pieces {got:?}\n  whole {whole:?}", String::from_utf8_lossy(&buf));
            }
            let got = reference_pieces(&buf, cuts, &opts);
            prop_assert!(same(&got, &reference(&buf, &opts)), "reference cuts {cuts:?} on {:?}", String::from_utf8_lossy(&buf));
        }
    }

    /// `host()` and `content_length()`, which the summary above does not
    /// carry, read from the field list: the first Host field's value, and
    /// the first Content-Length (the one in force when a lenient parse lets
    /// later ones differ).
    #[test]
    fn host_and_content_length_come_from_the_fields(seed in 1u64..) {
        let mut r = Rng(seed);
        let buf = request(&mut r);
        let opts = options(&mut r);
        for simd in [Simd::Avx2, Simd::Sse42, Simd::Portable] {
            let Ok(req) = sluice_h1::parse_request(&buf, &Options { simd, ..opts }) else { continue };
            let fields: Vec<_> = req.head.headers().collect();
            let named = |n: &[u8]| -> Vec<&[u8]> { fields.iter().filter(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| *v).collect() };
            prop_assert_eq!(req.head.host(), named(b"host").first().copied(), "{:?}", String::from_utf8_lossy(&buf));
            let cl = named(b"content-length").first().map(|v| std::str::from_utf8(v).unwrap().parse::<u64>().unwrap());
            prop_assert_eq!(req.head.content_length(), cl, "{:?}", String::from_utf8_lossy(&buf));
        }
    }

    /// The trailer section alone, where the fast path has its own reader:
    /// the lines above plus arbitrary bytes, with tolerances and limits
    /// that bite there (a trailer section is bounded by `max_head` too).
    #[test]
    fn trailers_agree(seed in 1u64.., noise in prop::collection::vec(any::<u8>(), 0..12)) {
        let mut r = Rng(seed);
        let mut buf = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n".to_vec();
        let head = buf.len();
        chunked_trailers(&mut r, &mut buf);
        if r.chance(30) {
            let at = head + r.below(buf.len() - head + 1);
            buf.splice(at..at, noise);
        }
        buf.extend_from_slice(eol(&mut r));
        let mut opts = options(&mut r);
        if r.chance(30) {
            opts.max_head = 48 + r.below(40);
        }
        if r.chance(20) {
            opts.max_headers = r.below(3);
        }
        let want = reference(&buf, &opts);
        let got = fast(&buf, &opts);
        prop_assert!(same(&got, &want), "on {:?} {opts:?}:\n fast {got:?}\n  ref {want:?}", String::from_utf8_lossy(&buf));
        for cut in head..=buf.len() {
            let got = fast_pieces(&buf, &[cut], &opts);
            prop_assert!(same(&got, &want), "cut {cut} on {:?} {opts:?}:\n pieces {got:?}\n  ref {want:?}", String::from_utf8_lossy(&buf));
        }
    }

    /// Arbitrary bytes (not from the grammar): no panic, and agreement.
    #[test]
    fn random_bytes_agree(buf in prop::collection::vec(any::<u8>(), 0..64), lenient in any::<u32>()) {
        let opts = Options { lenient: Lenient(lenient & Lenient::ALL.0), ..Options::default() };
        let want = reference(&buf, &opts);
        let got = fast(&buf, &opts);
        prop_assert!(same(&got, &want), "{:?}: {got:?} vs {want:?}", String::from_utf8_lossy(&buf));
    }
}

/// The generator is not degenerate: it yields accepted requests (complete
/// and cut short, with every framing) and most kinds of refusal.
#[test]
fn grammar_reaches_accepts_and_most_errors() {
    use std::collections::BTreeMap;
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut ok, mut complete, mut chunked) = (0, 0, 0);
    for seed in 1..20_000u64 {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let buf = request(&mut r);
        let opts = options(&mut r);
        match reference(&buf, &opts) {
            Ok(s) => {
                ok += 1;
                complete += usize::from(s.complete);
                chunked += usize::from(s.framing == sluice_h1::Framing::Chunked && s.complete);
            }
            Err(e) => *kinds.entry(e.kind.as_str()).or_default() += 1,
        }
    }
    println!("ok {ok} (complete {complete}, chunked {chunked}); errors {kinds:?}");
    assert!(ok > 2000 && complete > 1000 && chunked > 100, "ok {ok} complete {complete} chunked {chunked}");
    assert!(kinds.len() >= 18, "only {} kinds: {kinds:?}", kinds.len());
}
