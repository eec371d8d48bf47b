//! ns/request for sluice-h1 (each scanner level), httparse and the reference
//! on the 703-byte request of httparse's and picohttpparser's benchmarks.
//! `cargo run -p sluice-h1 --release --example h1_bench [iterations]`

use sluice_h1::{reference, HeadStatus, Options, Parser, Simd};
use std::hint::black_box;
use std::time::Instant;

const REQ: &[u8] = b"\
GET /wp-content/uploads/2010/03/hello-kitty-darth-vader-pink.jpg HTTP/1.1\r\n\
Host: www.kittyhell.com\r\n\
User-Agent: Mozilla/5.0 (Macintosh; U; Intel Mac OS X 10.6; ja-JP-mac; rv:1.9.2.3) Gecko/20100401 Firefox/3.6.3 Pathtraq/0.9\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: ja,en-us;q=0.7,en;q=0.3\r\n\
Accept-Encoding: gzip,deflate\r\n\
Accept-Charset: Shift_JIS,utf-8;q=0.7,*;q=0.7\r\n\
Keep-Alive: 115\r\n\
Connection: keep-alive\r\n\
Cookie: wp_ozh_wsa_visits=2; wp_ozh_wsa_visit_lasttime=xxxxxxxxxx; __utma=xxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.x; __utmz=xxxxxxxxx.xxxxxxxxxx.x.x.utmccn=(referral)|utmcsr=reader.livedoor.com|utmcct=/reader/|utmcmd=referral\r\n\r\n";

/// ns per call of `f` over one round.
fn round(iters: u32, f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

/// The best of `rounds` rounds per contender, the contenders interleaved
/// round by round so that noise from other processes hits all alike.
fn time_all(iters: u32, rounds: u32, fs: &mut [(&str, &mut dyn FnMut())]) -> Vec<f64> {
    let mut best = vec![f64::INFINITY; fs.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in fs.iter_mut().enumerate() {
            best[i] = best[i].min(round(iters, *f));
        }
    }
    best
}

fn main() {
    let iters: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    // A second argument runs one side alone (for `perf stat`): httparse,
    // avx2, sse42, portable or reference.
    let only = std::env::args().nth(2).unwrap_or_default();
    let run = |name: &str| only.is_empty() || only.eq_ignore_ascii_case(name);
    assert_eq!(REQ.len(), 703, "{}", REQ.len());
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut httparse_fn = || {
        let mut req = httparse::Request::new(&mut headers);
        assert_eq!(req.parse(black_box(REQ)).unwrap(), httparse::Status::Complete(703));
        black_box(req.headers.len());
    };
    let mut parsers: Vec<Parser> = [Simd::Avx2, Simd::Sse42, Simd::Portable]
        .iter()
        .map(|&simd| Parser::new(Options { simd, ..Options::default() }))
        .collect();
    let levels: Vec<Simd> = parsers.iter().map(|p| p.simd()).collect();
    let [a, b, c] = &mut parsers[..] else { unreachable!() };
    let sluice = |p: &mut Parser| {
        p.reset();
        assert_eq!(p.parse_head(black_box(REQ)).unwrap(), HeadStatus::Complete(703));
        let head = p.head(REQ).unwrap();
        black_box((head.method, head.header_count()));
    };
    let mut fa = || sluice(a);
    let mut fb = || sluice(b);
    let mut fc = || sluice(c);
    let opts = Options::default();
    let mut fr = || {
        black_box(reference::parse_request(black_box(REQ), &opts).unwrap());
    };
    let mut all: Vec<(&str, &mut dyn FnMut())> = vec![
        ("httparse", &mut httparse_fn),
        ("avx2", &mut fa),
        ("sse42", &mut fb),
        ("portable", &mut fc),
        ("reference", &mut fr),
    ];
    all.retain(|(n, _)| run(n));
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    let t = time_all(iters, 15, &mut all);
    let h = names.iter().position(|n| *n == "httparse").map(|i| t[i]);
    for (i, n) in names.iter().enumerate() {
        let level = match *n {
            "avx2" => format!(" (level in use: {:?})", levels[0]),
            "sse42" => format!(" (level in use: {:?})", levels[1]),
            "portable" => format!(" (level in use: {:?})", levels[2]),
            _ => String::new(),
        };
        match h {
            Some(h) if *n != "httparse" => {
                println!("{n:<10} {:8.1} ns/request  {:.2}x httparse{level}", t[i], h / t[i])
            }
            _ => println!("{n:<10} {:8.1} ns/request{level}", t[i]),
        }
    }
}
