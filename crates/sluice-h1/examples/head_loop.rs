//! The per-head cost on its own: `reset`, `parse_head` and `head`, the
//! calls `sluice-bench http` times, in a tight loop on one input, printing
//! the best of 7 runs in ns per head. Used for A/B comparisons of parser
//! changes (BENCHMARKS.md, "Short heads"), where the benchmark's rotation
//! over seven parsers is too noisy to see a few percent:
//!
//! ```sh
//! cargo run --release -p sluice-h1 --example head_loop -- request-line
//! cargo run --release -p sluice-h1 --example head_loop -- header-lines 5000000
//! ```

use sluice_h1::{HeadStatus, Options, Parser};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "request-line".into());
    let n: u64 = args.next().map_or(20_000_000, |v| v.parse().expect("a request count"));
    let buf: Vec<u8> = match which.as_str() {
        "minimal" => b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        "request-line" => sluice_h1::samples::REQUEST_LINE.to_vec(),
        "header-lines" => sluice_h1::samples::header_lines(),
        other => {
            eprintln!("{other}: no such input (have: minimal, request-line, header-lines)");
            std::process::exit(2);
        }
    };
    let mut p = Parser::new(Options::default());
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..n {
            p.reset();
            let r = p.parse_head(black_box(&buf));
            if let Ok(HeadStatus::Complete(_)) = r {
                // What a server reads first, and what picohttpparser hands
                // back: the method, the target and the fields.
                black_box(p.head(&buf).map(|h| (h.method.len(), h.target.len(), h.header_count())));
            }
            black_box(&r);
        }
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    println!("{which}: {best:.1} ns per head (best of 7 runs of {n})");
}
