//! `sluice http-serve`: the load tester's target. The server itself lives in
//! `sluice-httpbed`; this parses flags, prints the bound address (tests listen on
//! port 0 and read it), waits for a signal or `--duration`, and prints the
//! counters. `sluice http-load`: flags, the URL pool, the report; the load
//! itself (and its progress line, and client pools) is `sluice_httpbed`.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_httpbed::load::{self, LoadConfig, SourceRange};
use sluice_httpbed::{Config, Dist, Server, Stall, WeightedList};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the bound one is printed
    /// on stderr). Only loopback addresses without --allow-remote.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Event-loop threads, each with its own SO_REUSEPORT socket.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,
    /// Response body size in bytes: fixed:N, uniform:A-B or list:N1@W1,N2@W2,...
    #[arg(long, value_name = "DIST", default_value = "fixed:128")]
    pub size: Dist,
    /// Response delay in milliseconds, same forms as --size.
    #[arg(long, value_name = "DIST", default_value = "fixed:0")]
    pub delay: Dist,
    /// Response statuses with weights, e.g. 200@95,404@3,503@2.
    #[arg(long, value_name = "MIX", default_value = "200@1")]
    pub status_mix: WeightedList<u16>,
    /// After N requests in total, the next response of each thread is delayed
    /// by --stall-ms, once (a one-time hiccup for coordinated-omission tests).
    #[arg(long, value_name = "N")]
    pub stall_after: Option<u64>,
    /// Length of the --stall-after hiccup.
    #[arg(long, value_name = "MS", default_value_t = 1000, requires = "stall_after")]
    pub stall_ms: u64,
    /// Largest request head accepted; longer ones get 431.
    #[arg(long, value_name = "BYTES", default_value_t = sluice_httpbed::request::DEFAULT_MAX_HEAD)]
    pub max_head: usize,
    /// Stop after this many seconds (default: at SIGINT or SIGTERM).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Seed of the size, delay and status draws (thread i uses seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Allow a non-loopback listen address (exposes the server to the network).
    #[arg(long)]
    pub allow_remote: bool,
    /// Do not pin thread i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Answer a request with a body only once the whole body came (as an
    /// application reading a form does), not at its head.
    #[arg(long)]
    pub after_body: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn serve(a: ServeArgs) -> Result<Outcome> {
    let config = Config {
        listen: a.listen,
        threads: a.threads,
        size: a.size,
        delay_ms: a.delay,
        status_mix: a.status_mix,
        stall: a.stall_after.map(|after| Stall { after, ms: a.stall_ms }),
        max_head: a.max_head.max(64),
        seed: a.seed,
        allow_remote: a.allow_remote,
        pin: !a.no_pin,
        after_body: a.after_body,
    };
    let server = Server::bind(config)?;
    let addr = server.local_addr();
    let running = server.start()?;
    let stop = running.stop_flag();
    sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
    // After the threads run, so a client that reads this line can connect at once.
    tracing::info!("serving on {addr}");
    let elapsed = sluice_control::wait_until_stopped(&stop, a.duration, || false);
    let report = running.join().context("serving")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text(elapsed));
    }
    Ok(Outcome::Complete)
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// http://HOST:PORT/PATH (or https://) to load; with --urls, only its host and port are used.
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Paths to request, one `PATH [WEIGHT]` per line (or full URLs on the same host:port).
    #[arg(long, value_name = "FILE")]
    pub urls: Option<PathBuf>,
    /// Weight the --urls lines by Zipf rank (line k gets 1/k^S) instead of their weights.
    #[arg(long, value_name = "S", requires = "urls")]
    pub zipf: Option<f64>,
    /// TCP connections in total, split across the threads.
    #[arg(long, value_name = "C", default_value_t = 16)]
    pub connections: usize,
    /// Event-loop threads.
    #[arg(long, value_name = "T", default_value_t = 2)]
    pub threads: usize,
    /// Seconds to issue requests (default 10 unless --requests is given).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Requests to issue in total.
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Open loop: requests per second in total, each on a fixed schedule;
    /// latency is measured from the scheduled time (coordinated omission corrected).
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Requests outstanding per connection, at most.
    #[arg(long, value_name = "D", default_value_t = 1)]
    pub pipeline: usize,
    /// Bind connections across this range (ADDR/LEN), connection j to host j.
    #[arg(long, value_name = "CIDR")]
    pub source: Option<String>,
    /// Closed loop: milliseconds to wait after each response (fixed:N, uniform:A-B, list:...).
    #[arg(long, value_name = "DIST", conflicts_with = "rate")]
    pub think: Option<Dist>,
    /// A request unanswered this long is a timeout error.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub timeout_ms: u64,
    /// Seed of the URL and think-time draws (thread i uses seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Allow a target that is not a loopback address.
    #[arg(long)]
    pub allow_remote: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Write the latency histogram (corrected with --rate) as an HdrHistogram .hgrm percentile file.
    #[arg(long, value_name = "FILE")]
    pub hdr_out: Option<PathBuf>,
    /// The request method (POST and PUT send Content-Length bodies).
    #[arg(long, default_value = "GET")]
    pub method: String,
    /// Request body sizes in bytes (fixed:N, uniform:A-B, list:...), one draw per request.
    #[arg(long, value_name = "DIST")]
    pub body_size: Option<Dist>,
    /// Several client pools at once from a TOML file, each reported under `pools` (docs/http-load.md).
    #[arg(long, value_name = "FILE")]
    pub pool: Option<PathBuf>,
    /// Speak TLS whatever the URL's scheme says (an https:// URL always does).
    #[arg(long)]
    pub tls: bool,
    /// https:// URLs: trust these CA certificates (PEM) instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// https:// URLs: accept any server certificate (signatures are still checked).
    #[arg(long, conflicts_with = "tls_ca")]
    pub tls_insecure: bool,
    /// https:// URLs: the name sent as SNI and checked against the certificate (default: the URL's host).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

pub fn load(a: LoadArgs) -> Result<Outcome> {
    let target = load::parse_url(&a.url)?;
    let paths = load::request_paths(&target, a.urls.as_deref(), a.zipf)?;
    let duration = load::run_length(a.duration, a.requests)?;
    let tls_options =
        sluice_httpbed::tls::TlsOptions { ca: a.tls_ca, insecure: a.tls_insecure, server_name: a.tls_server_name };
    let source = a.source.as_deref().map(str::parse::<SourceRange>).transpose()?;
    let config = LoadConfig {
        paths,
        connections: a.connections,
        threads: a.threads,
        duration,
        requests: a.requests,
        rate: a.rate,
        pipeline: a.pipeline,
        source,
        think_ms: a.think,
        timeout: Duration::from_millis(a.timeout_ms.max(1)),
        seed: a.seed,
        allow_remote: a.allow_remote,
        method: a.method,
        body_size: a.body_size,
        tls: sluice_httpbed::tls::for_target(&target, a.tls, &tls_options)?,
        tls_options,
        ..LoadConfig::new(target.addr, target.host.clone(), String::new())
    };
    if let Some(file) = &a.pool {
        let pools = sluice_httpbed::pools::read(file, &config, &target).map_err(anyhow::Error::msg)?;
        let stop = Arc::new(AtomicBool::new(false));
        sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
        let report = sluice_httpbed::pools::run(pools, &stop)?;
        print_report(a.json, report.to_json(), &report.text());
        return Ok(Outcome::Complete);
    }
    let running = load::start(config)?;
    sluice_control::stop_on_interrupt(&running.stop_flag()).context("installing the signal handlers")?;
    let report = running.wait(std::io::stderr().is_terminal())?;
    if let Some(path) = &a.hdr_out {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        load::write_hgrm(report.latency(), &mut f).with_context(|| format!("writing {}", path.display()))?;
    }
    print_report(a.json, report.to_json(), &report.text());
    Ok(Outcome::Complete)
}

fn print_report(json: bool, j: serde_json::Value, text: &str) {
    print!("{}", if json { format!("{j}\n") } else { text.to_owned() });
}
