//! Hardware and software counters around a measured region, through
//! `perf_event_open` (the syscalls are in `sys`). Hardware counters (cycles,
//! instructions, LLC misses, stalled cycles) need a PMU; VMs often have none
//! and the open fails with ENOENT or EOPNOTSUPP, in which case the benches
//! say so once and print the rest. Software counters (task clock, page
//! faults, context switches) are kept by the kernel and work everywhere
//! perf events are allowed at all.

use crate::sys;
use serde_json::{json, Value};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Once;

const HW: u32 = 0;
const SW: u32 = 1;

/// Generic events, so AMD and Intel both map them (the kernel translates).
const HW_EVENTS: [(&str, u64); 5] = [
    ("cycles", 0),
    ("instructions", 1),
    ("cache_misses", 3),
    ("stalled_cycles_frontend", 7),
    ("stalled_cycles_backend", 8),
];
const SW_EVENTS: [(&str, u64); 3] = [("task_clock_ns", 1), ("page_faults", 2), ("context_switches", 3)];

/// Open counters; `measure` counts a closure.
pub struct Pmc {
    hw: Vec<(&'static str, OwnedFd)>,
    sw: Vec<(&'static str, OwnedFd)>,
    hw_error: Option<String>,
}

/// Counts over one or more measured regions (summed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// Hardware counts by name; empty when there are none.
    pub hw: Vec<(&'static str, u64)>,
    pub sw: Vec<(&'static str, u64)>,
}

impl Reading {
    pub fn add(&mut self, other: &Reading) {
        for (dst, src) in [(&mut self.hw, &other.hw), (&mut self.sw, &other.sw)] {
            for &(name, v) in src {
                match dst.iter_mut().find(|(n, _)| *n == name) {
                    Some(e) => e.1 += v,
                    None => dst.push((name, v)),
                }
            }
        }
    }

    fn get(list: &[(&'static str, u64)], name: &str) -> Option<u64> {
        list.iter().find(|(n, _)| *n == name).map(|e| e.1)
    }

    pub fn ipc(&self) -> Option<f64> {
        let c = Reading::get(&self.hw, "cycles")?;
        let i = Reading::get(&self.hw, "instructions")?;
        (c > 0).then(|| i as f64 / c as f64)
    }

    /// `{"pmc": hardware or null, "pmc_sw": software or null}` fields.
    pub fn json_fields(r: Option<&Reading>) -> (Value, Value) {
        let Some(r) = r else { return (Value::Null, Value::Null) };
        let hw = if r.hw.is_empty() {
            Value::Null
        } else {
            let mut m: serde_json::Map<String, Value> = r.hw.iter().map(|(n, v)| ((*n).to_owned(), json!(v))).collect();
            m.insert("ipc".into(), json!(r.ipc()));
            Value::Object(m)
        };
        let sw = if r.sw.is_empty() {
            Value::Null
        } else {
            Value::Object(r.sw.iter().map(|(n, v)| ((*n).to_owned(), json!(v))).collect())
        };
        (hw, sw)
    }

    /// One short line for the tables.
    pub fn line(&self) -> String {
        let mut s = String::from("pmc:");
        if let Some(c) = Reading::get(&self.hw, "cycles") {
            s += &format!(" cycles {c}");
        }
        if let Some(i) = Reading::get(&self.hw, "instructions") {
            s += &format!(" instr {i}");
        }
        if let Some(ipc) = self.ipc() {
            s += &format!(" IPC {ipc:.2}");
        }
        for (name, label) in [
            ("cache_misses", "LLC-miss"),
            ("stalled_cycles_frontend", "stall-fe"),
            ("stalled_cycles_backend", "stall-be"),
        ] {
            if let Some(v) = Reading::get(&self.hw, name) {
                s += &format!(" {label} {v}");
            }
        }
        if self.hw.is_empty() {
            s += " (no hw)";
        }
        if let Some(t) = Reading::get(&self.sw, "task_clock_ns") {
            s += &format!(" task-clock {:.1} ms", t as f64 / 1e6);
        }
        if let Some(v) = Reading::get(&self.sw, "page_faults") {
            s += &format!(" page-faults {v}");
        }
        if let Some(v) = Reading::get(&self.sw, "context_switches") {
            s += &format!(" ctx-sw {v}");
        }
        s
    }
}

fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENODEV) => "ENODEV",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOSYS) => "ENOSYS",
        _ => return e.to_string(),
    };
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    format!("{name}: {text}")
}

/// Opens one event; retries excluding the kernel when the paranoia level
/// forbids counting it.
fn open(type_: u32, config: u64) -> io::Result<OwnedFd> {
    match sys::perf_event_open(&sys::perf_attr(type_, config, false)) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
            sys::perf_event_open(&sys::perf_attr(type_, config, true))
        }
        r => r,
    }
}

impl Pmc {
    /// Opens what this machine has. Never fails: missing hardware counters
    /// are recorded in [`Pmc::hw_error`].
    pub fn open() -> Pmc {
        let mut p = Pmc { hw: Vec::new(), sw: Vec::new(), hw_error: None };
        for (i, (name, config)) in HW_EVENTS.into_iter().enumerate() {
            match open(HW, config) {
                Ok(fd) => p.hw.push((name, fd)),
                // Without cycles the rest is not worth having; later events
                // (stalls) are optional: not every CPU or VM has them.
                Err(e) if i == 0 => {
                    p.hw_error = Some(errno_name(&e));
                    break;
                }
                Err(_) => {}
            }
        }
        for (name, config) in SW_EVENTS {
            if let Ok(fd) = open(SW, config) {
                p.sw.push((name, fd));
            }
        }
        p
    }

    /// [`Pmc::open`], saying once per process on stderr when there are no
    /// hardware counters.
    pub fn open_reporting() -> Pmc {
        static SAID: Once = Once::new();
        let p = Pmc::open();
        if let Some(e) = &p.hw_error {
            SAID.call_once(|| eprintln!("{}", unavailable_message(e)));
        }
        p
    }

    pub fn hw_available(&self) -> bool {
        self.hw_error.is_none()
    }

    pub fn hw_error(&self) -> Option<&str> {
        self.hw_error.as_deref()
    }

    /// Runs `f` with every counter reset and enabled around it.
    pub fn measure<R>(&mut self, f: impl FnOnce() -> R) -> (R, Reading) {
        let all = || self.hw.iter().chain(self.sw.iter());
        // Read before and after rather than trusting the reset: with
        // inherit, the counts of threads and children that exited earlier
        // stay in the value through PERF_EVENT_IOC_RESET.
        let read_all = |v: &[(&'static str, OwnedFd)]| -> Vec<Option<[u64; 3]>> {
            v.iter().map(|(_, fd)| sys::perf_read(fd).ok()).collect()
        };
        for (_, fd) in all() {
            let _ = sys::perf_reset(fd);
        }
        let (hw0, sw0) = (read_all(&self.hw), read_all(&self.sw));
        for (_, fd) in all() {
            let _ = sys::perf_enable(fd);
        }
        let r = f();
        for (_, fd) in all() {
            let _ = sys::perf_disable(fd);
        }
        let diff = |v: &[(&'static str, OwnedFd)], before: &[Option<[u64; 3]>]| -> Vec<(&'static str, u64)> {
            v.iter()
                .zip(before)
                .filter_map(|((n, fd), b)| {
                    let (a, b) = (sys::perf_read(fd).ok()?, (*b)?);
                    Some((*n, scaled(a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1]), a[2].saturating_sub(b[2]))))
                })
                .collect()
        };
        let reading = Reading { hw: diff(&self.hw, &hw0), sw: diff(&self.sw, &sw0) };
        (r, reading)
    }
}

/// A count scaled by enabled/running time when the kernel multiplexed it.
fn scaled(value: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 {
        0
    } else if running < enabled {
        (value as f64 * enabled as f64 / running as f64) as u64
    } else {
        value
    }
}

/// The one stderr line the benches print when hardware counters are missing.
pub fn unavailable_message(err: &str) -> String {
    format!("pmc: hardware counters unavailable here ({err}); printing the rest")
}

/// Measures `f` with `pmc` when there is one.
pub fn maybe<R>(pmc: &mut Option<Pmc>, f: impl FnOnce() -> R) -> (R, Option<Reading>) {
    match pmc {
        Some(p) => {
            let (r, reading) = p.measure(f);
            (r, Some(reading))
        }
        None => (f(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_counters_works_or_says_why() {
        let mut p = Pmc::open();
        match p.hw_error() {
            None => assert!(!p.hw.is_empty()),
            Some(e) => {
                assert!(!e.is_empty());
                assert!(unavailable_message(e).starts_with("pmc: hardware counters unavailable here ("));
            }
        }
        let (sum, r) = p.measure(|| (0..100_000u64).map(std::hint::black_box).sum::<u64>());
        assert_eq!(sum, 4_999_950_000);
        if p.hw_available() {
            assert!(r.hw.iter().any(|(n, v)| *n == "cycles" && *v > 0), "{r:?}");
        } else {
            assert!(r.hw.is_empty());
            assert_eq!(Reading::json_fields(Some(&r)).0, Value::Null);
        }
        let _ = r.line();
    }

    fn task_clock(r: &Reading) -> u64 {
        r.sw.iter().find(|(n, _)| *n == "task_clock_ns").map_or(0, |e| e.1)
    }

    /// A thread spawned inside the region is counted, and only in that
    /// region: its count must not leak into the next one (the reset ioctl
    /// does not clear exited threads' counts, hence the reads around it).
    #[test]
    fn spawned_threads_count_in_their_region_only() {
        let mut p = Pmc::open();
        if !p.sw.iter().any(|(n, _)| *n == "task_clock_ns") {
            return; // No software counters at all: nothing to check here.
        }
        // Fixed work, not fixed wall time: CPU time is what is counted, and
        // a loaded machine stretches wall time. 100M steps take tens of ms.
        let spin = || (0..100_000_000u64).fold(0u64, |a, i| std::hint::black_box(a ^ i));
        let (_, busy) = p.measure(|| std::thread::spawn(spin).join().unwrap());
        assert!(task_clock(&busy) >= 5_000_000, "the spawned thread's work: {busy:?}");
        let ((), idle) = p.measure(|| std::hint::black_box(()));
        assert!(task_clock(&idle) < 5_000_000, "an empty region after it: {idle:?}");
    }
}
