//! The one shape every product a user runs has (the bridge, the guard, the
//! HTTP server and load tester, and the shield to come): a config struct,
//! a `start` that returns a [`Running`] product, whose [`Handle`] stops it
//! from anywhere (a signal, a deadline, a test) and whose
//! [`Running::wait`] ends it and returns its [`Summary`]; the summary
//! prints as text or as one JSON object through [`print`], the same for
//! all of them. [`run_to_end`] is the loop a command runs a product with.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a product's run ends with.
pub trait Summary {
    /// As people read it (several lines, each ending in a newline).
    fn text(&self) -> String;
    /// As one JSON object (docs/json.md names its keys).
    fn json(&self) -> serde_json::Value;
}

/// Stops a running product; cheap to clone and to hand to another thread.
#[derive(Clone, Debug, Default)]
pub struct Handle {
    stop: Arc<AtomicBool>,
}

impl Handle {
    /// A handle over the product's own stop flag.
    pub fn new(stop: Arc<AtomicBool>) -> Handle {
        Handle { stop }
    }

    /// Ask the product to stop; its `wait` then returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether it was asked to.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The flag itself (what a signal handler sets).
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.stop
    }
}

/// A started product.
pub trait Running: Sized {
    type Summary: Summary;
    type Error;
    /// What stops it.
    fn handle(&self) -> Handle;
    /// Whether it ended by itself (a source that ran out, a thread that
    /// failed): nothing is left to wait for.
    fn finished(&self) -> bool {
        false
    }
    /// Stops every thread (after the handle was told, or by itself) and
    /// sums up.
    fn wait(self) -> Result<Self::Summary, Self::Error>;
}

/// Runs `running` until its handle is told to stop (SIGINT and SIGTERM
/// tell it, when `signals`), `duration` passes or it ends by itself, then
/// waits for it: the summary and how long it ran.
pub fn run_to_end<R: Running>(
    running: R,
    duration: Option<Duration>,
    signals: bool,
) -> Result<(R::Summary, Duration), R::Error>
where
    R::Error: From<std::io::Error>,
{
    let handle = running.handle();
    if signals {
        crate::signals::stop_on_interrupt(handle.flag())?;
    }
    let started = Instant::now();
    while !handle.is_stopped() && duration.is_none_or(|d| started.elapsed() < d) && !running.finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    handle.stop();
    Ok((running.wait()?, elapsed))
}

/// A command line that clap accepts but that makes no sense (two
/// interfaces the same, a loopback-only address off loopback): the
/// products' flag groups and the CLI raise it, and the CLI exits 2 for it
/// as for a command line clap refuses.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `--metrics ADDR`, checked: an address that is not loopback without
/// `allow_remote` is a wrong command line.
pub fn metrics_addr(s: &str, allow_remote: bool) -> anyhow::Result<std::net::SocketAddr> {
    Ok(sluice_metrics::check_addr(s, allow_remote).map_err(|e| Usage(e.to_string()))?)
}

/// `--metrics ADDR` and `--metrics-allow-remote`, as the bridge and the
/// shield take them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsFlags {
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback only unless
    /// --metrics-allow-remote; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address other than loopback.
    #[arg(long)]
    pub metrics_allow_remote: bool,
}

impl MetricsFlags {
    /// The address to serve at, checked ([`metrics_addr`]).
    pub fn addr(&self) -> anyhow::Result<Option<std::net::SocketAddr>> {
        self.metrics.as_deref().map(|m| metrics_addr(m, self.metrics_allow_remote)).transpose()
    }
}

/// A summary as a command prints it on standard output: its text, or its
/// JSON on one line.
pub fn print(summary: &impl Summary, json: bool) -> String {
    if json {
        format!("{}\n", summary.json())
    } else {
        summary.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A product that counts until stopped, or ends by itself at `end`.
    struct Counter {
        stop: Arc<AtomicBool>,
        ticks: Arc<std::sync::atomic::AtomicU64>,
        thread: std::thread::JoinHandle<()>,
        end: Option<u64>,
    }

    struct Counted(u64);

    impl Summary for Counted {
        fn text(&self) -> String {
            format!("ticks {}\n", self.0)
        }
        fn json(&self) -> serde_json::Value {
            serde_json::json!({ "ticks": self.0 })
        }
    }

    fn start(end: Option<u64>) -> Counter {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, t) = (Arc::clone(&stop), Arc::clone(&ticks));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) && end.is_none_or(|e| t.load(Ordering::Relaxed) < e) {
                t.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Counter { stop, ticks, thread, end }
    }

    impl Running for Counter {
        type Summary = Counted;
        type Error = std::io::Error;
        fn handle(&self) -> Handle {
            Handle::new(Arc::clone(&self.stop))
        }
        fn finished(&self) -> bool {
            self.end.is_some_and(|e| self.ticks.load(Ordering::Relaxed) >= e)
        }
        fn wait(self) -> Result<Counted, std::io::Error> {
            self.thread.join().map_err(|_| std::io::Error::other("panicked"))?;
            Ok(Counted(self.ticks.load(Ordering::Relaxed)))
        }
    }

    #[test]
    fn a_run_ends_at_its_deadline_its_handle_or_its_own_end() {
        let (s, took) = run_to_end(start(None), Some(Duration::from_millis(60)), false).unwrap();
        assert!(took >= Duration::from_millis(60) && s.0 > 0, "{took:?} {}", s.0);
        let c = start(None);
        let h = c.handle();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            h.stop();
        });
        let (_, took) = run_to_end(c, None, false).unwrap();
        assert!(took < Duration::from_secs(5), "{took:?}");
        let (s, _) = run_to_end(start(Some(5)), None, false).unwrap();
        assert_eq!(s.0, 5, "ended by itself, nothing to stop");
        assert_eq!(print(&s, false), "ticks 5\n");
        assert_eq!(print(&s, true), "{\"ticks\":5}\n");
    }
}
