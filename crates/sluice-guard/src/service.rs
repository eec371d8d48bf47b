//! The guard as a service runs it: the proxy's threads, and around them
//! the signal handlers (SIGINT and SIGTERM stop, SIGHUP rereads), the
//! metrics responder, the control socket and the block forwarder, started
//! in that order and stopped in reverse; `sluice http-guard` maps its
//! flags onto [`Services`] and prints the [`Report`].

use crate::block_forward::{ForwardCounters, Target};
use crate::{Config, Guard, GuardError, Report};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
}

fn start_err(what: &'static str) -> impl Fn(&dyn std::fmt::Display) -> ServiceError {
    move |e| ServiceError::Start { what, error: e.to_string() }
}

/// Binds, runs until stopped (a signal, `duration`, a thread that ended),
/// and sums up: the report and how long it ran.
pub fn run(mut config: Config, s: Services) -> Result<(Report, Duration), ServiceError> {
    config.forward_blocks = !s.targets.is_empty();
    let dry_run = config.dry_run;
    let guard = Guard::bind(config)?;
    let addr = guard.local_addr();
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
    // After the threads run, so a client that reads this line can connect at once.
    tracing::info!("guarding on {addr}");
    if dry_run {
        tracing::warn!("dry run: breaches are counted and would-be blocks logged, none is enforced");
    }
    let elapsed = sluice_control::wait_until_stopped(&stop, s.duration, || running.any_finished());
    control.into_iter().for_each(crate::control::GuardControl::stop);
    let report = running.join()?;
    if let Some(f) = forwarder {
        // The loops are done: the forwarder makes its last push and ends.
        let _ = f.join();
    }
    Ok((report, elapsed))
}
