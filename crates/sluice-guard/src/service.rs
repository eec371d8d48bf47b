//! The guard as a service runs it: the proxy's threads, and around them
//! the signal handlers (SIGINT and SIGTERM stop, SIGHUP rereads), the
//! metrics responder, the control socket and the block forwarder, started
//! in that order and stopped in reverse; `sluice http-guard` maps its
//! flags onto [`Services`] and prints the [`Report`].

use crate::block_forward::{ForwardCounters, Target};
use crate::{Config, Guard, GuardError, Report};
use sluice_control::product::{Handle, Running, Summary};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What runs around the proxy.
#[derive(Default)]
pub struct Services {
    /// Where new blocks are pushed (a bridge's control socket, a LAPI).
    pub targets: Vec<Target>,
    /// Serve Prometheus metrics here (loopback only: the counters say who
    /// is blocked).
    pub metrics: Option<SocketAddr>,
    /// Serve the control socket here, to its owner and whom the access
    /// names (`--control-group`, `--control-add-group`).
    pub control: Option<(PathBuf, sluice_control::socket::Access)>,
    /// Stop by itself after this many seconds.
    pub duration: Option<f64>,
}

/// Why the guard could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error("{what}: {error}")]
    Start { what: &'static str, error: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn start_err(what: &'static str) -> impl Fn(&dyn std::fmt::Display) -> ServiceError {
    move |e| ServiceError::Start { what, error: e.to_string() }
}

/// The guard as a service, running: the proxy and everything around it.
pub struct Service {
    addr: SocketAddr,
    listeners: Vec<crate::Listener>,
    running: crate::GuardThreads,
    control: Option<crate::control::GuardControl>,
    forwarder: Option<std::thread::JoinHandle<()>>,
    started: Instant,
}

/// How a guard ended: its counters and how long it ran.
#[derive(Debug, Clone)]
pub struct GuardSummary {
    pub report: Report,
    pub elapsed: Duration,
}

impl Summary for GuardSummary {
    fn text(&self) -> String {
        self.report.text(self.elapsed)
    }
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(&self.report).unwrap_or_default()
    }
}

/// Binds and starts the proxy, then (in this order) the signal handlers
/// (SIGINT and SIGTERM stop it, SIGHUP rereads), the metrics responder,
/// the control socket and the block forwarder.
pub fn start(mut config: Config, s: Services) -> Result<Service, ServiceError> {
    config.forward_blocks = !s.targets.is_empty();
    let (dry_run, tls) = (config.dry_run, !config.tls.is_empty());
    let guard = Guard::bind(config)?;
    let addr = guard.local_addr();
    let listeners = guard.listeners().to_vec();
    let running = guard.start()?;
    let stop = running.stop_flag();
    sluice_control::stop_on_interrupt(&stop).map_err(|e| start_err("installing the signal handlers")(&e))?;
    crate::control::reread_on_sighup(&running.shared()).map_err(|e| start_err("installing the SIGHUP handler")(&e))?;
    let counters = (!s.targets.is_empty()).then(|| Arc::new(ForwardCounters::new(&s.targets)));
    let socket = s.control.is_some().then(|| Arc::new(sluice_control::socket::SocketCounters::default()));
    if let Some(m) = s.metrics {
        let registry = crate::exporter::registry(running.shared(), counters.clone(), socket.clone());
        sluice_metrics::serve_flag(m, registry, "sluice http-guard").map_err(|e| start_err("--metrics")(&e))?;
    }
    let control = s
        .control
        .map(|(path, access)| {
            crate::control::serve(&path, access, running.shared(), socket.clone().unwrap_or_default())
        })
        .transpose()
        .map_err(|e| start_err("--control")(&e))?;
    let forwarder = counters
        .map(|c| crate::control::spawn_forwarder(&running.shared(), s.targets, Arc::clone(&stop), c))
        .transpose()
        .map_err(|e| start_err("starting the block forwarder")(&e))?;
    // After the threads run, so a client that reads these lines can connect
    // at once. The first is as it always was (scripts read the address off it).
    for (k, l) in listeners.iter().enumerate() {
        match l.serve {
            _ if k == 0 => tracing::info!("guarding on {}", l.addr),
            crate::Serve::Main => tracing::info!("guarding on {} ({})", l.addr, if tls { "tls" } else { "plain" }),
            crate::Serve::Plain => tracing::info!("guarding on {} (plain)", l.addr),
            crate::Serve::RedirectHttps => tracing::info!("redirecting to https on {}", l.addr),
        }
    }
    if dry_run {
        tracing::warn!("dry run: breaches are counted and would-be blocks logged, none is enforced");
    }
    Ok(Service { addr, listeners, running, control, forwarder, started: Instant::now() })
}

impl Service {
    /// Where its first listener listens (the port chosen, when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every listener, as bound.
    pub fn listeners(&self) -> &[crate::Listener] {
        &self.listeners
    }

    /// The live counters.
    pub fn shared(&self) -> Arc<crate::Shared> {
        self.running.shared()
    }
}

impl Running for Service {
    type Summary = GuardSummary;
    type Error = ServiceError;
    fn handle(&self) -> Handle {
        Handle::new(self.running.stop_flag())
    }
    fn finished(&self) -> bool {
        self.running.any_finished()
    }
    /// Stops the control socket, the proxy's threads, then the forwarder
    /// (its last push), and sums up.
    fn wait(self) -> Result<GuardSummary, ServiceError> {
        self.running.stop_flag().store(true, std::sync::atomic::Ordering::Relaxed);
        self.control.into_iter().for_each(crate::control::GuardControl::stop);
        let report = self.running.wait()?;
        if let Some(f) = self.forwarder {
            // The loops are done: the forwarder makes its last push and ends.
            let _ = f.join();
        }
        Ok(GuardSummary { report, elapsed: self.started.elapsed() })
    }
}

/// [`start`], then run until stopped (a signal, `duration`, a thread that
/// ended), and sum up.
pub fn run(config: Config, s: Services) -> Result<GuardSummary, ServiceError> {
    let duration = s.duration.map(|d| Duration::from_secs_f64(d.max(0.0)));
    let service = start(config, s)?;
    Ok(sluice_control::product::run_to_end(service, duration, false)?.0)
}
