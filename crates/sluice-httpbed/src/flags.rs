//! The server's and the load tester's flags (`sluice http-serve`,
//! `sluice http-load`), mapped onto their configs here, beside them.

use crate::load::{self, LoadConfig, SourceRange, Target};
use crate::{Config, Dist, Stall, WeightedList};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `sluice http-serve`'s flags but `--json`.
#[derive(clap::Args, Debug)]
pub struct ServeFlags {
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
    #[arg(long, value_name = "BYTES", default_value_t = crate::request::DEFAULT_MAX_HEAD)]
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
}

impl ServeFlags {
    /// The server these flags describe.
    pub fn config(&self) -> Config {
        Config {
            listen: self.listen,
            threads: self.threads,
            size: self.size.clone(),
            delay_ms: self.delay.clone(),
            status_mix: self.status_mix.clone(),
            stall: self.stall_after.map(|after| Stall { after, ms: self.stall_ms }),
            max_head: self.max_head.max(64),
            seed: self.seed,
            allow_remote: self.allow_remote,
            pin: !self.no_pin,
            after_body: self.after_body,
        }
    }
}

/// `sluice http-load`'s flags but `--json`.
#[derive(clap::Args, Debug)]
pub struct LoadFlags {
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

impl LoadFlags {
    /// The load these flags describe, and the target it goes to.
    pub fn config(self) -> anyhow::Result<(LoadConfig, Target)> {
        let a = self;
        let target = load::parse_url(&a.url)?;
        let paths = load::request_paths(&target, a.urls.as_deref(), a.zipf)?;
        let duration = load::run_length(a.duration, a.requests)?;
        let tls_options =
            crate::tls::TlsOptions { ca: a.tls_ca, insecure: a.tls_insecure, server_name: a.tls_server_name };
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
            tls: crate::tls::for_target(&target, a.tls, &tls_options)?,
            tls_options,
            ..LoadConfig::new(target.addr, target.host.clone(), String::new())
        };
        Ok((config, target))
    }
}
