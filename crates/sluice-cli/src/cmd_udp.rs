//! `sluice udp-echo` and `sluice udp-load`: the seed's RSS UDP test
//! (`rss-udp-srv` and `udp-clt`) over real sockets. Flags and printing only;
//! the work is in `sluice_traffic::udp`.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_traffic::udp::{self, EchoConfig, EchoServer, IncomingCpu, LoadConfig, StopAfter};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum IncomingCpuArg {
    /// On unless the listen address is loopback (where the receiving CPU is
    /// the sender's, so flows would follow the client thread).
    Auto,
    On,
    Off,
}

#[derive(Args, Debug)]
pub struct EchoArgs {
    /// Address and port every worker's socket binds (SO_REUSEPORT); port 0
    /// lets the kernel pick, the bound address is printed on stderr.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Worker threads, one socket each, each pinned to a CPU.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// CPUs for the workers, comma separated, cycled (default: 0, 1, ...).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// SO_INCOMING_CPU on each socket (the kernel's CPU steering for SO_REUSEPORT).
    #[arg(long, value_enum, default_value = "auto")]
    pub incoming_cpu: IncomingCpuArg,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print the counters as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The echo server; must be loopback unless --allow-remote.
    #[arg(long)]
    pub target: SocketAddr,
    /// Flows: one socket per flow, each on its own source port.
    #[arg(long, default_value_t = 8)]
    pub flows: usize,
    /// Workers the source ports are spread over by Toeplitz hash (as the seed chose its addresses).
    #[arg(long, default_value_t = 2)]
    pub workers_hint: usize,
    /// Datagrams per second over all flows (0: unpaced).
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// UDP payload bytes (the seed used 510).
    #[arg(long, default_value_t = 510)]
    pub size: usize,
    /// Send for this many seconds (default 5 when --count is not given).
    #[arg(long, conflicts_with = "count")]
    pub duration: Option<f64>,
    /// Send this many datagrams.
    #[arg(long)]
    pub count: Option<u64>,
    /// Local address for the flows (default: 127.0.0.1 or ::1, as the target).
    #[arg(long)]
    pub source: Option<IpAddr>,
    /// First source port tried.
    #[arg(long, default_value_t = 20_000)]
    pub first_port: u16,
    /// Milliseconds to wait for echoes after the last send.
    #[arg(long, default_value_t = 500)]
    pub grace_ms: u64,
    /// Allow a target that is not a loopback address.
    #[arg(long)]
    pub allow_remote: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn seconds(s: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s).ok().filter(|d| !d.is_zero()).with_context(|| format!("{flag} must be positive"))
}

/// SIGINT/SIGTERM set the flag, so both commands end cleanly and still print.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
    Ok(stop)
}

pub fn echo(a: EchoArgs) -> Result<Outcome> {
    if a.workers == 0 {
        crate::usage!("--workers must be at least 1");
    }
    let duration = a.duration.map(|d| seconds(d, "--duration")).transpose()?;
    let stop = stop_on_signals()?;
    let server = EchoServer::bind(EchoConfig {
        listen: a.listen,
        workers: a.workers,
        cpus: a.cpus,
        incoming_cpu: match a.incoming_cpu {
            IncomingCpuArg::Auto => IncomingCpu::Auto,
            IncomingCpuArg::On => IncomingCpu::On,
            IncomingCpuArg::Off => IncomingCpu::Off,
        },
        duration,
    })
    .with_context(|| format!("binding {} workers to {}", a.workers, a.listen))?;
    // Tests and scripts read the port from this line (port 0 picks one).
    eprintln!("udp-echo: listening on {} with {} workers", server.local_addr(), a.workers);
    let report = server.run(stop).context("running the echo workers")?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.text());
    }
    Ok(Outcome::Complete)
}

pub fn load(a: LoadArgs) -> Result<Outcome> {
    let limit = match (a.count, a.duration) {
        (Some(n), _) => StopAfter::Count(n),
        (None, Some(d)) => StopAfter::Duration(seconds(d, "--duration")?),
        // Bounded by default: a load test always stops by itself.
        (None, None) => StopAfter::Duration(Duration::from_secs(5)),
    };
    let source = a.source.unwrap_or(match a.target.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    });
    let stop = stop_on_signals()?;
    let config = LoadConfig {
        target: a.target,
        source,
        flows: a.flows,
        workers_hint: a.workers_hint,
        rate: a.rate,
        size: a.size,
        limit,
        grace: Duration::from_millis(a.grace_ms),
        first_port: a.first_port,
        allow_remote: a.allow_remote,
    };
    let report = udp::run_load(&config, stop)?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.text());
    }
    Ok(Outcome::Complete)
}
