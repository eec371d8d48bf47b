//! HTTP/1.1 request parsers side by side: sluice-h1 (its fast path at each
//! SIMD level, and its byte-at-a-time reference, the switch-driven style the
//! seed measured nginx's parser in), `httparse` and picohttpparser, on the
//! seed's request-line and header-line cases and on the 703-byte request
//! that picohttpparser's and httparse's own benchmarks use.
//!
//! Every parser parses the whole input as one request head, the way a server
//! calls it, and its answer is checked once before timing (same method,
//! target and header count), so a parser that stops early cannot look fast.
//! Repetitions alternate the parsers; the median of the repetitions is
//! reported.

use crate::pico;
use sluice_h1::{HeadStatus, Options, Parser, Simd};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One benchmark input: a complete request head.
pub struct Input {
    pub name: &'static str,
    /// What the seed's table calls the same case, when it has one.
    pub seed_case: Option<&'static str>,
    pub bytes: Vec<u8>,
}

/// The request of picohttpparser's bench.c and httparse's benches (703 bytes).
pub const REQ_703: &[u8] = b"GET /wp-content/uploads/2010/03/hello-kitty-darth-vader-pink.jpg HTTP/1.1\r\n\
Host: www.kittyhell.com\r\n\
User-Agent: Mozilla/5.0 (Macintosh; U; Intel Mac OS X 10.6; ja-JP-mac; rv:1.9.2.3) Gecko/20100401 Firefox/3.6.3 Pathtraq/0.9\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: ja,en-us;q=0.7,en;q=0.3\r\n\
Accept-Encoding: gzip,deflate\r\n\
Accept-Charset: Shift_JIS,utf-8;q=0.7,*;q=0.7\r\n\
Keep-Alive: 115\r\n\
Connection: keep-alive\r\n\
Cookie: wp_ozh_wsa_visits=2; wp_ozh_wsa_visit_lasttime=xxxxxxxxxx; __utma=xxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.x; __utmz=xxxxxxxxx.xxxxxxxxxx.x.x.utmccn=(referral)|utmcsr=reader.livedoor.com|utmcct=/reader/|utmcmd=referral\r\n\
\r\n";

/// The inputs: the seed's three cases (a request line alone; ordinary
/// header lines; one big header line) and the 703-byte request.
pub fn inputs() -> Vec<Input> {
    let request_line = sluice_h1::samples::REQUEST_LINE.to_vec();
    let header_lines = sluice_h1::samples::header_lines();
    let mut big = b"GET / HTTP/1.1\r\nCookie: ".to_vec();
    let mut n = 0u32;
    while big.len() < 4000 {
        big.extend_from_slice(format!("session{n}=0123456789abcdef0123456789abcdef; ").as_bytes());
        n += 1;
    }
    big.extend_from_slice(b"last=1\r\n\r\n");
    vec![
        Input { name: "request-line", seed_case: Some("request_line"), bytes: request_line },
        Input { name: "header-lines", seed_case: Some("header_line"), bytes: header_lines },
        Input { name: "big-header-line", seed_case: Some("big_header_line"), bytes: big },
        Input { name: "req-703", seed_case: None, bytes: REQ_703.to_vec() },
    ]
}

/// The parsers measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// sluice-h1's fast path at this SIMD level.
    Sluice(Simd),
    /// sluice-h1's byte-at-a-time reference (switch per byte, as nginx).
    Reference,
    Httparse,
    Picohttpparser,
}

impl Contender {
    pub fn name(self) -> &'static str {
        match self {
            Contender::Sluice(Simd::Auto) => "sluice",
            Contender::Sluice(Simd::Avx2) => "sluice-avx2",
            Contender::Sluice(Simd::Sse42) => "sluice-sse42",
            Contender::Sluice(Simd::Portable) => "sluice-portable",
            Contender::Reference => "sluice-reference",
            Contender::Httparse => "httparse",
            Contender::Picohttpparser => "picohttpparser",
        }
    }

    pub fn all() -> Vec<Contender> {
        vec![
            Contender::Sluice(Simd::Auto),
            Contender::Sluice(Simd::Avx2),
            Contender::Sluice(Simd::Sse42),
            Contender::Sluice(Simd::Portable),
            Contender::Reference,
            Contender::Httparse,
            Contender::Picohttpparser,
        ]
    }
}

/// What a parser found, to check the contenders agree before timing them.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub method: String,
    pub target: String,
    pub headers: usize,
    pub len: usize,
}

/// Header lines each parser accepts: sluice-h1's default, given to the
/// peers too so all three refuse the same requests.
pub const MAX_HEADERS: usize = 128;

fn opts(simd: Simd) -> Options {
    Options { simd, ..Options::default() }
}

/// Parse `buf` once with `c` (not timed): the answer the timed loop repeats.
pub fn parse_once(c: Contender, buf: &[u8]) -> Result<Parsed, String> {
    match c {
        Contender::Sluice(simd) => {
            let mut p = Parser::new(opts(simd));
            match p.parse_head(buf).map_err(|e| e.kind.as_str().to_string())? {
                HeadStatus::Complete(len) => {
                    let h = p.head(buf).ok_or("no head after Complete")?;
                    Ok(Parsed { method: h.method.into(), target: h.target.into(), headers: h.header_count(), len })
                }
                HeadStatus::Partial => Err("partial".into()),
            }
        }
        Contender::Reference => {
            let r = sluice_h1::reference::parse_request(buf, &Options::default())
                .map_err(|e| e.kind.as_str().to_string())?;
            Ok(Parsed {
                method: String::from_utf8_lossy(&r.method).into(),
                target: String::from_utf8_lossy(&r.target).into(),
                headers: r.headers.len(),
                len: r.head_len,
            })
        }
        Contender::Httparse => {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf).map_err(|e| e.to_string())? {
                httparse::Status::Complete(len) => Ok(Parsed {
                    method: req.method.unwrap_or_default().into(),
                    target: req.path.unwrap_or_default().into(),
                    headers: req.headers.len(),
                    len,
                }),
                httparse::Status::Partial => Err("partial".into()),
            }
        }
        Contender::Picohttpparser => {
            let r = pico::Headers::new().parse_request(buf).ok_or("picohttpparser refused it")?;
            Ok(Parsed { method: r.method, target: r.target, headers: r.headers, len: r.len })
        }
    }
}

/// Parse `buf` repeatedly for about `budget`; requests per second. The
/// parsers' state lives outside the loop, as in a server's connection.
pub fn measure(c: Contender, buf: &[u8], budget: Duration) -> f64 {
    // Check the clock every `step` requests so reading it costs nothing.
    let step = 256u64;
    let mut done = 0u64;
    let start = Instant::now();
    match c {
        Contender::Sluice(simd) => {
            let mut p = Parser::new(opts(simd));
            loop {
                for _ in 0..step {
                    p.reset();
                    let r = p.parse_head(black_box(buf));
                    if let Ok(HeadStatus::Complete(_)) = r {
                        // What a server reads first, and what picohttpparser
                        // hands back: the method, the target and the fields.
                        black_box(p.head(buf).map(|h| (h.method.len(), h.target.len(), h.header_count())));
                    }
                    black_box(&r);
                }
                done += step;
                if start.elapsed() >= budget {
                    break;
                }
            }
        }
        Contender::Reference => {
            let mut p = sluice_h1::reference::Parser::new(Options::default());
            loop {
                for _ in 0..step {
                    p.reset();
                    let r = p.feed(black_box(buf)).is_ok();
                    black_box((r, p.head_len()));
                }
                done += step;
                if start.elapsed() >= budget {
                    break;
                }
            }
        }
        Contender::Httparse => {
            // The header array lives outside the loop, as a server keeps it
            // per connection: initialising it per request would charge
            // httparse for memset, not parsing.
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            loop {
                for _ in 0..step {
                    let mut req = httparse::Request::new(&mut headers);
                    let r = req.parse(black_box(buf)).ok();
                    black_box((r, req.headers.len()));
                }
                done += step;
                if start.elapsed() >= budget {
                    break;
                }
            }
        }
        Contender::Picohttpparser => {
            let mut headers = pico::Headers::new();
            loop {
                for _ in 0..step {
                    black_box(headers.parse_len(black_box(buf)));
                }
                done += step;
                if start.elapsed() >= budget {
                    break;
                }
            }
        }
    }
    done as f64 / start.elapsed().as_secs_f64()
}

/// The seed's figures (Haswell i7-4650U, ms for its fixed count): nginx's
/// switch-driven parser against the goto-driven automaton, per case.
pub fn seed_ms(case: &str) -> Option<(f64, f64)> {
    match case {
        "request_line" => Some((730.0, 470.0)),
        "header_line" => Some((422.0, 237.0)),
        "big_header_line" => Some((1725.0, 589.0)),
        _ => None,
    }
}

/// Median of a non-empty slice.
pub use crate::stats::median;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_request_is_703_bytes() {
        assert_eq!(REQ_703.len(), 703);
    }

    #[test]
    fn every_contender_reads_every_input_the_same() {
        for input in inputs() {
            let want = parse_once(Contender::Httparse, &input.bytes).unwrap();
            assert_eq!(want.len, input.bytes.len(), "{}", input.name);
            for c in Contender::all() {
                assert_eq!(parse_once(c, &input.bytes).as_ref(), Ok(&want), "{} on {}", c.name(), input.name);
            }
        }
    }

    #[test]
    fn measuring_counts_requests() {
        let rps = measure(Contender::Sluice(Simd::Auto), REQ_703, Duration::from_millis(5));
        assert!(rps > 0.0);
    }
}
