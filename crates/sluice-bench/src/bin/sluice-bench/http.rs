//! `sluice-bench http`: HTTP/1.1 request parsers side by side (sluice-h1 at
//! each SIMD level and its switch-driven reference, httparse,
//! picohttpparser) on the seed's cases and the 703-byte request, with the
//! ratios the issue and the seed ask for. The measuring is in
//! `sluice_bench::http_parse`.

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use sluice_bench::http_parse::{inputs, measure, median, parse_once, seed_ms, Contender, Input};
use sluice_bench::pmc::{self, Pmc, Reading};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct HttpParseBenchArgs {
    /// Repetitions; the parsers alternate within each.
    #[arg(long, default_value_t = 15)]
    pub reps: usize,
    /// Milliseconds per parser, input and repetition.
    #[arg(long, default_value_t = 70)]
    pub ms: u64,
    /// Only these inputs (comma-separated: request-line, header-lines, big-header-line, req-703).
    #[arg(long, value_delimiter = ',')]
    pub input: Vec<String>,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Count cycles, instructions, cache misses (and the software counters)
    /// per parser and input through perf_event_open, summed over repetitions.
    #[arg(long)]
    pub pmc: bool,
}

pub fn run(a: HttpParseBenchArgs) -> Result<()> {
    if a.reps == 0 || a.ms == 0 {
        bail!("--reps and --ms must be at least 1");
    }
    let all = inputs();
    for want in &a.input {
        if !all.iter().any(|i| i.name == want) {
            let names: Vec<_> = all.iter().map(|i| i.name).collect();
            bail!("--input {want}: no such input (have: {})", names.join(", "));
        }
    }
    let chosen: Vec<_> =
        all.into_iter().filter(|i| a.input.is_empty() || a.input.iter().any(|w| w == i.name)).collect();
    let contenders = Contender::all();
    let budget = Duration::from_millis(a.ms);

    agree(&chosen, &contenders)?;

    let (rps, counts) = time_all(&a, &chosen, &contenders, budget);

    print_rates(&a, &chosen, &contenders, &rps, &counts);
    print_ratios(a.json, &chosen, &rps);
    Ok(())
}

/// Check every parser reads every input the same before timing any.
fn agree(chosen: &[Input], contenders: &[Contender]) -> Result<()> {
    for input in chosen {
        let want = parse_once(Contender::Httparse, &input.bytes)
            .map_err(|e| anyhow::anyhow!("httparse on {}: {e}", input.name))?;
        for &c in contenders {
            let got =
                parse_once(c, &input.bytes).map_err(|e| anyhow::anyhow!("{} on {}: {e}", c.name(), input.name))?;
            if got != want {
                bail!("{} reads {} differently: {got:?} vs httparse {want:?}", c.name(), input.name);
            }
        }
    }
    Ok(())
}

/// Rates per (parser, input), one per repetition, and their counter readings.
type Rates<'a> = HashMap<(&'a str, &'a str), Vec<f64>>;

/// Time every contender on every input, `a.reps` times, the order rotated.
fn time_all<'a>(
    a: &HttpParseBenchArgs,
    chosen: &'a [Input],
    contenders: &[Contender],
    budget: Duration,
) -> (Rates<'a>, HashMap<(&'a str, &'a str), Reading>) {
    let mut rps: HashMap<(&str, &str), Vec<f64>> = HashMap::new();
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let mut counts: HashMap<(&str, &str), Reading> = HashMap::new();
    for rep in 0..a.reps {
        for input in chosen {
            // Rotate the starting contender each repetition so none always runs first.
            for k in 0..contenders.len() {
                let c = contenders[(k + rep) % contenders.len()];
                let (r, reading) = pmc::maybe(&mut pmc, || measure(c, &input.bytes, budget));
                rps.entry((c.name(), input.name)).or_default().push(r);
                if let Some(reading) = reading {
                    counts.entry((c.name(), input.name)).or_default().add(&reading);
                }
            }
        }
        if !a.json {
            eprint!("\rrepetition {}/{}", rep + 1, a.reps);
        }
    }
    if !a.json {
        eprintln!();
    }
    (rps, counts)
}

/// Each parser's rate on each input, as a table or JSON lines.
fn print_rates(
    a: &HttpParseBenchArgs,
    chosen: &[Input],
    contenders: &[Contender],
    rps: &Rates,
    counts: &HashMap<(&str, &str), Reading>,
) {
    let med = |c: Contender, input: &str| median(&rps[&(c.name(), input)]);
    if !a.json {
        println!("{:<18} {:<17} {:>10} {:>8} {:>9} {:>9}", "input", "parser", "Mreq/s", "GB/s", "ns/req", "spread");
    }
    for input in chosen {
        for &c in contenders {
            let runs = &rps[&(c.name(), input.name)];
            let m = med(c, input.name);
            let (lo, hi) = runs.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let gbps = m * input.bytes.len() as f64 / 1e9;
            let reading = counts.get(&(c.name(), input.name));
            if a.json {
                let mut v = json!({
                    "bench": "http", "parser": c.name(), "input": input.name, "bytes": input.bytes.len(),
                    "mreq_per_s": m / 1e6, "gb_per_s": gbps, "ns_per_req": 1e9 / m,
                    "min_mreq_per_s": lo / 1e6, "max_mreq_per_s": hi / 1e6, "reps": runs.len(),
                });
                if a.pmc {
                    let (hw, sw) = Reading::json_fields(reading);
                    v["pmc"] = hw;
                    v["pmc_sw"] = sw;
                }
                println!("{v}");
            } else {
                let spread = if m > 0.0 { (hi - lo) / m * 100.0 } else { 0.0 };
                println!(
                    "{:<18} {:<17} {:>10.2} {:>8.2} {:>9.1} {:>8.1}%",
                    input.name,
                    c.name(),
                    m / 1e6,
                    gbps,
                    1e9 / m,
                    spread
                );
                if let Some(r) = reading {
                    println!("{:<36} {}", "", r.line());
                }
            }
        }
    }
}

/// The ratios: sluice against httparse (target >= 1.25 on req-703), and
/// the seed's goto-vs-switch comparison: sluice's straight-line fast path
/// against its byte-at-a-time reference, beside the seed's goto/nginx.
fn print_ratios(json: bool, chosen: &[Input], rps: &Rates) {
    // A ratio is the median over repetitions of the two parsers' rates in
    // the same repetition, run within a few hundred ms of each other, so a
    // shared machine's drift over seconds moves both sides of each pair.
    let paired = |a: Contender, b: Contender, input: &str| {
        let (x, y) = (&rps[&(a.name(), input)], &rps[&(b.name(), input)]);
        median(&x.iter().zip(y).map(|(x, y)| x / y).collect::<Vec<_>>())
    };
    // And of each parser's best repetition: noise on a shared machine only
    // slows a CPU-bound loop down, so the best is the least disturbed.
    let best = |a: Contender, b: Contender, input: &str| {
        let top = |c: Contender| rps[&(c.name(), input)].iter().copied().fold(0f64, f64::max);
        top(a) / top(b)
    };
    let sluice = Contender::Sluice(sluice_h1::Simd::Auto);
    if !json {
        println!();
    }
    for input in chosen {
        let vs_httparse = paired(sluice, Contender::Httparse, input.name);
        let vs_pico = paired(sluice, Contender::Picohttpparser, input.name);
        let vs_reference = paired(sluice, Contender::Reference, input.name);
        let seed = input.seed_case.and_then(seed_ms).map(|(ngx, goto)| ngx / goto);
        if json {
            println!(
                "{}",
                json!({
                    "bench": "http", "ratio": true, "input": input.name,
                    "sluice_vs_httparse": vs_httparse, "sluice_vs_picohttpparser": vs_pico,
                    "sluice_vs_reference": vs_reference,
                    "best_sluice_vs_httparse": best(sluice, Contender::Httparse, input.name),
                    "best_sluice_vs_picohttpparser": best(sluice, Contender::Picohttpparser, input.name),
                    "seed_case": input.seed_case, "seed_goto_vs_nginx": seed,
                    "target_vs_httparse": (input.name == "req-703").then_some(1.25),
                })
            );
        } else {
            let seed = seed.map_or("-".to_string(), |s| format!("{s:.2}x (seed: goto vs nginx)"));
            println!(
                "{:<18} sluice/httparse {:>5.2}x ({:.2}x best)  sluice/picohttpparser {:>5.2}x ({:.2}x best)  fast/reference {:>5.2}x  {seed}",
                input.name,
                vs_httparse,
                best(sluice, Contender::Httparse, input.name),
                vs_pico,
                best(sluice, Contender::Picohttpparser, input.name),
                vs_reference
            );
        }
    }
}
