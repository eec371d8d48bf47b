//! SIGHUP in every sluice command: a command that can reread something
//! (a bridge its rules, a guard its certificates and JA4 list) says what
//! with [`on_sighup`]; in any other the signal is logged ("SIGHUP: nothing
//! to reread") and the run goes on.
//!
//! Never the default action: that ends the process at once, without its
//! summary (a `--json` file left empty, exit 129), and a `kill -HUP
//! $(pidof sluice)` meant for a bridge would end every guard and server on
//! the host with it. One handler for the whole process, installed before
//! any command starts, so no command can be left out; what it does is a
//! slot each command fills, so a reread never also logs "nothing".

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

type Reread = Box<dyn FnMut() + Send>;

/// What SIGHUP does now; `None`: there is nothing to reread.
static REREAD: Mutex<Option<Reread>> = Mutex::new(None);

/// Whether the handler thread runs.
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// Take SIGHUP away from its default action for the rest of the process
/// (idempotent): from now on it runs what [`on_sighup`] set, or logs that
/// there is nothing to reread.
pub fn install() -> std::io::Result<()> {
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if *installed {
        return Ok(());
    }
    let mut signals = Signals::new([SIGHUP])?;
    std::thread::Builder::new().name("sluice-sighup".into()).spawn(move || {
        for _ in signals.forever() {
            let mut reread = REREAD.lock().unwrap_or_else(PoisonError::into_inner);
            match reread.as_mut() {
                Some(f) => f(),
                None => tracing::info!("SIGHUP: nothing to reread"),
            }
        }
    })?;
    *installed = true;
    Ok(())
}

/// On each SIGHUP from now on, call `reread` (in place of whatever was set
/// before); installs the handler if it is not yet.
pub fn on_sighup(reread: impl FnMut() + Send + 'static) -> std::io::Result<()> {
    *REREAD.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(reread));
    install()
}

/// Back to logging that there is nothing to reread (what a command set is
/// over: a bridge whose control loop has ended).
pub fn nothing_to_reread() {
    *REREAD.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// SIGINT and SIGTERM set `stop`, so a run ends cleanly (outputs flushed,
/// summary printed) instead of being killed; SIGHUP, unless the command
/// rereads something on it, is logged and changes nothing
/// .
pub fn stop_on_interrupt(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(stop))?;
    }
    install()
}

/// A second SIGINT or SIGTERM, once `stop` is set, ends the process at
/// once (exit 130): a run blocked reading a pipe that says nothing would
/// otherwise not notice the first. Call before [`stop_on_interrupt`]
/// (signal-hook runs a signal's actions in the order registered).
pub fn exit_on_second_interrupt(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(stop))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// The only test in this crate that raises SIGHUP: the handler is
    /// installed first, so the test process survives it.
    #[test]
    fn sighup_runs_the_reread_set_last_and_never_ends_the_process() {
        let (first, second) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let f = Arc::clone(&first);
        on_sighup(move || {
            f.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let s = Arc::clone(&second);
        on_sighup(move || {
            s.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        install().unwrap();
        signal_hook::low_level::raise(SIGHUP).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while second.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < end, "SIGHUP did not reach the reread");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(first.load(Ordering::Relaxed), 0, "replaced, not added to");
        nothing_to_reread();
        signal_hook::low_level::raise(SIGHUP).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(second.load(Ordering::Relaxed), 1, "cleared: logged, not reread");
    }
}
