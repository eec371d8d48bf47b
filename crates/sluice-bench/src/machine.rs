//! The machine a benchmark ran on, recorded with its results so figures
//! from two machines are never compared by accident: CPU model, CPUs,
//! caches, memory, kernel, frequency governor and turbo where readable,
//! whether a PMU is there for `--pmc`, and whether it is a virtual machine.
//! Everything comes from /proc and /sys; what a machine does not expose is
//! `null`, never guessed.

use serde_json::{json, Value};
use std::fs;

/// One cache as the kernel describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cache {
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    pub bytes: u64,
    /// CPUs sharing one instance.
    pub shared_by: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub cpu_model: Option<String>,
    /// Online CPUs.
    pub cpus: usize,
    pub caches: Vec<Cache>,
    pub memory_bytes: Option<u64>,
    pub kernel: Option<String>,
    pub governor: Option<String>,
    /// Whether turbo/boost is on, where the driver says.
    pub turbo: Option<bool>,
    /// A hardware PMU (`/sys/bus/event_source/devices/cpu`) for `--pmc`.
    pub pmu: bool,
    /// The CPU flags say it runs under a hypervisor.
    pub virtualized: bool,
}

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// "32K", "2048K", "32M" as /sys writes cache sizes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// CPUs in a list such as "0-3,8,10-11".
pub fn count_cpu_list(s: &str) -> usize {
    s.trim()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => usize::from(part.parse::<usize>().is_ok()),
        })
        .sum()
}

impl Machine {
    /// Read this machine.
    pub fn read() -> Machine {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let cpus = read("/sys/devices/system/cpu/online")
            .map(|s| count_cpu_list(&s))
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut caches = Vec::new();
        for i in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let (Some(level), Some(kind), Some(size)) =
                (read(&format!("{dir}/level")), read(&format!("{dir}/type")), read(&format!("{dir}/size")))
            else {
                continue;
            };
            let (Ok(level), Some(bytes)) = (level.parse(), parse_size(&size)) else { continue };
            let shared_by = read(&format!("{dir}/shared_cpu_list")).map_or(1, |s| count_cpu_list(&s).max(1));
            caches.push(Cache { level, kind, bytes, shared_by });
        }
        let memory_bytes = read("/proc/meminfo").and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb << 10)
        });
        let turbo = read("/sys/devices/system/cpu/intel_pstate/no_turbo")
            .map(|v| v == "0")
            .or_else(|| read("/sys/devices/system/cpu/cpufreq/boost").map(|v| v == "1"));
        Machine {
            cpu_model: field("model name"),
            cpus,
            caches,
            memory_bytes,
            kernel: read("/proc/sys/kernel/osrelease"),
            governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            turbo,
            pmu: fs::metadata("/sys/bus/event_source/devices/cpu").is_ok(),
            virtualized: field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor")),
        }
    }

    /// The unified (or data) cache of `level`, if any.
    pub fn cache(&self, level: u32) -> Option<&Cache> {
        self.caches.iter().find(|c| c.level == level && c.kind != "Instruction")
    }

    pub fn json(&self) -> Value {
        let caches: Vec<Value> = self
            .caches
            .iter()
            .map(|c| json!({"level": c.level, "type": c.kind, "bytes": c.bytes, "shared_by_cpus": c.shared_by}))
            .collect();
        json!({
            "cpu_model": self.cpu_model,
            "cpus": self.cpus,
            "caches": caches,
            "l2_bytes": self.cache(2).map(|c| c.bytes),
            "llc_bytes": self.caches.iter().filter(|c| c.kind != "Instruction").map(|c| (c.level, c.bytes)).max().map(|c| c.1),
            "memory_bytes": self.memory_bytes,
            "kernel": self.kernel,
            "governor": self.governor,
            "turbo": self.turbo,
            "pmu": self.pmu,
            "virtualized": self.virtualized,
        })
    }

    /// The record a JSON run prints first: `{"scenario": "machine", "machine": {...}}`.
    pub fn record(&self) -> Value {
        json!({"scenario": "machine", "machine": self.json()})
    }

    /// One line for a person: "AMD EPYC, 2 CPUs, L2 2 MiB, L3 32 MiB, ...".
    pub fn line(&self) -> String {
        let mib = |b: u64| {
            if b >= 1 << 20 {
                format!("{} MiB", b >> 20)
            } else {
                format!("{} KiB", b >> 10)
            }
        };
        let mut parts =
            vec![self.cpu_model.clone().unwrap_or_else(|| "unknown CPU".into()), format!("{} CPUs", self.cpus)];
        for level in 1..=3 {
            if let Some(c) = self.cache(level) {
                parts.push(format!("L{level} {}", mib(c.bytes)));
            }
        }
        if let Some(m) = self.memory_bytes {
            parts.push(format!("{} GiB RAM", (m + (1 << 29)) >> 30));
        }
        parts.push(format!("kernel {}", self.kernel.as_deref().unwrap_or("?")));
        parts.push(format!("governor {}", self.governor.as_deref().unwrap_or("n/a")));
        parts.push(format!("turbo {}", self.turbo.map_or("n/a", |t| if t { "on" } else { "off" })));
        parts.push(format!("PMU {}", if self.pmu { "yes" } else { "no" }));
        if self.virtualized {
            parts.push("virtual machine".into());
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_lists_parse_as_sys_writes_them() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("2048K"), Some(2 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("266240K"), Some(266_240 << 10));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        assert_eq!(count_cpu_list("0-3,8,10-11"), 7);
        assert_eq!(count_cpu_list("0"), 1);
        assert_eq!(count_cpu_list(""), 0);
    }

    #[test]
    fn this_machine_reads() {
        let m = Machine::read();
        assert!(m.cpus >= 1);
        let j = m.json();
        for key in ["cpu_model", "cpus", "caches", "kernel", "governor", "turbo", "pmu", "virtualized"] {
            assert!(j.get(key).is_some(), "{key} missing");
        }
        assert!(m.kernel.is_some(), "every Linux has /proc/sys/kernel/osrelease");
        assert!(m.line().contains(&format!("{} CPUs", m.cpus)));
    }
}
