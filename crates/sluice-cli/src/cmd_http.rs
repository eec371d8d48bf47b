//! `sluice http-serve`: the load tester's target. The server itself lives in
//! `sluice-http`; this parses flags, prints the bound address (tests listen on
//! port 0 and read it), waits for a signal or `--duration`, and prints the
//! counters.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_http::{Config, Dist, Report, Server, Stall, WeightedList};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
    #[arg(long, value_name = "BYTES", default_value_t = sluice_http::request::DEFAULT_MAX_HEAD)]
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
    };
    let server = Server::bind(config)?;
    let addr = server.local_addr();
    let running = server.start()?;
    let stop = running.stop_flag();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing the signal handlers")?;
    }
    // After the threads run, so a client that reads this line can connect at once.
    eprintln!("sluice: serving on {addr}");
    let started = Instant::now();
    let until = a.duration.map(|s| started + Duration::from_secs_f64(s.max(0.0)));
    while !stop.load(Ordering::Relaxed) && until.is_none_or(|t| Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    let report = running.join().context("serving")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_summary(&report, elapsed);
    }
    Ok(Outcome::Complete)
}

fn print_summary(r: &Report, elapsed: Duration) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    println!(
        "{} requests in {:.1} s ({:.0} req/s over the whole run), {} connections, {} bytes out, {} bad requests, {} heads too large",
        r.requests,
        secs,
        r.requests as f64 / secs,
        r.connections,
        r.bytes,
        r.errors.bad_request,
        r.errors.header_too_large
    );
    for t in &r.per_thread {
        println!("  thread {}: {} requests, {} connections, {} bytes", t.thread, t.requests, t.connections, t.bytes);
    }
}
