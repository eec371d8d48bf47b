//! What a run of `sluice bridge` shows a person or a script besides
//! `/metrics`: the final summary (`--json`, docs/json.md, and text) and
//! the status line on stderr, from the same declared counts as the
//! exposition (`PortTotals`, [`LaneTotals`], [`BridgeTotals`], the
//! control plane's `ControlTotals`).

#[cfg(doc)]
use crate::counters::BridgeTotals;
use crate::counters::{LaneCounters, LaneTotals};
use crate::metrics::BridgeMetrics;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The keys the summary's bridge part has besides the declared counters'
/// names ([`BridgeTotals`], `PortTotals` in `per_port`, [`LaneTotals`] in
/// `per_lane`): what is not a count, or a count of several.
pub const SUMMARY_KEYS: &[&str] = &[
    "io",
    "per_port",
    "port",
    "iface",
    "packets",
    "bytes",
    "reloads",
    "lists",
    "per_lane",
    "per_queue",
    "queue",
    "cpu",
    "judged",
    "dry_run",
];

/// The text summary's lines of the bridge, by their first words.
pub const SUMMARY_LINES: &[&str] = &["io ", "port ", "reloads ", "workers ", "queue ", "fragments ", "dry run "];

impl BridgeMetrics {
    /// The final `--json` summary: the run's report, then the ports, the
    /// reloads and the lists (the rules' rows are added by the caller).
    pub fn summary_json(&self, report: &sluice_pipeline::RunReport, io: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(report.to_json()).expect("the report serialises");
        let (c, t) = (self.control.counts.totals(), self.totals());
        v["io"] = io.into();
        v["per_port"] = self.per_port_json();
        v["reloads"] = serde_json::json!({
            "ok": c.reloads_ok,
            "failed": c.reloads_failed,
            "sighup": c.sighups,
            "generation": t.generation,
        });
        v["lists"] = (self.control.lists().iter())
            .map(|e| serde_json::json!({ "list": e.kind, "path": e.path, "entries": e.entries }))
            .collect();
        v["frames_reclaimed"] = t.frames_reclaimed.into();
        if let Some(q) = self.per_lane_json(report) {
            // `per_queue`: the old name, kept for one release (docs/json.md).
            v["per_queue"] = q.clone();
            v["per_lane"] = q;
        }
        if self.inboxes.get().is_some() {
            v["fragments_resteered"] = t.fragments_resteered.into();
            v["fragments_resteer_full"] = t.fragments_resteer_full.into();
        }
        v["dry_run"] = (t.dry_run == 1).into();
        if t.dry_run == 1 {
            v["would_drop"] = v["dropped"].clone();
        }
        v
    }

    /// The text summary's lines after the run's own: io, ports, reloads, workers.
    pub fn summary_text(&self, report: &sluice_pipeline::RunReport, io: &str) -> String {
        use std::fmt::Write as _;
        let mut out = format!("io           {io}\n");
        for p in self.per_port_json().as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "port {} {:<8} in {} (pass {}, drop {}); sent {}; lost: rx ring {}, tx ring {}, unsendable {}, no buffer {}",
                p["port"],
                p["iface"].as_str().unwrap_or(""),
                p["packets"],
                p["passed"],
                p["dropped"],
                p["tx_packets"],
                p["rx_ring_drops"],
                p["tx_ring_full"],
                p["tx_invalid"],
                p["tx_no_buffer"]
            );
        }
        let (c, t) = (self.control.counts.totals(), self.totals());
        let _ = writeln!(out, "reloads      {} ok, {} failed ({} SIGHUP)", c.reloads_ok, c.reloads_failed, c.sighups);
        let _ = writeln!(out, "workers      {:?}", report.per_worker);
        for q in self.per_lane_json(report).as_ref().and_then(|v| v.as_array()).into_iter().flatten() {
            let _ = writeln!(
                out,
                "queue {:<6} on CPU {}: in {} (pass {}, drop {}); sent {}; judged {}",
                q["queue"], q["cpu"], q["rx_packets"], q["passed"], q["dropped"], q["tx_packets"], q["judged"]
            );
        }
        if self.inboxes.get().is_some() {
            let (moved, full) = (t.fragments_resteered, t.fragments_resteer_full);
            let _ =
                writeln!(out, "fragments    {moved} moved to the lane of their IP pair, {full} given up (inbox full)");
        }
        if t.dry_run == 1 {
            let n = report.stats.dropped;
            let _ = writeln!(
                out,
                "dry run      nothing was enforced: {n} packets would have been dropped, all were forwarded"
            );
        }
        out
    }

    /// A per-queue bridge's lanes, one object each (`None` for one thread):
    /// the queue, the CPU, what [`LaneTotals`] declares, and what it judged.
    pub fn per_lane_json(&self, report: &sluice_pipeline::RunReport) -> Option<serde_json::Value> {
        let lanes = self.ports.lanes.get()?;
        let lane = |(i, c): (usize, &LaneCounters)| {
            let mut v = serde_json::to_value(LaneTotals::of(c)).expect("counts serialize");
            v["queue"] = c.queue.into();
            v["cpu"] = c.cpu.into();
            v["judged"] = report.per_worker.get(i).copied().unwrap_or(0).into();
            v
        };
        Some(lanes.iter().enumerate().map(lane).collect())
    }

    /// Both ports, one object each: what `PortCounters` declares, the port,
    /// its interface, and what it received in all.
    pub fn per_port_json(&self) -> serde_json::Value {
        (0..2)
            .map(|p| {
                let t = self.ports.ports[p].totals();
                let mut v = serde_json::to_value(t).expect("counts serialize");
                v["port"] = p.into();
                v["iface"] = self.ifaces[p].clone().into();
                v["packets"] = (t.passed + t.dropped).into();
                v["bytes"] = (t.passed_bytes + t.dropped_bytes).into();
                v
            })
            .collect()
    }

    /// What the control thread runs every tick besides reloading: a status
    /// line on stderr every 2 s when `status`, and setting `stop` once
    /// `duration` seconds have passed (`--duration`).
    pub fn ticker(
        self: &Arc<Self>,
        status: bool,
        duration: Option<Duration>,
        stop: &Arc<std::sync::atomic::AtomicBool>,
    ) -> impl FnMut() + Send + 'static {
        let deadline = duration.map(|d| Instant::now() + d);
        let (shared, stop) = (Arc::clone(self), Arc::clone(stop));
        let mut last_status = Instant::now();
        let mut last_counts = [0u64; 2];
        move || {
            if status && last_status.elapsed() >= Duration::from_secs(2) {
                let since = last_status.elapsed();
                last_status = Instant::now();
                eprintln!("{}", shared.status_line(&mut last_counts, since));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// One status line: per port in/pass/drop and rate since the last line.
    pub fn status_line(&self, last: &mut [u64; 2], since: Duration) -> String {
        let mut s = format!("sluice: {:>7.1} s", self.started.elapsed().as_secs_f64());
        for (p, last) in last.iter_mut().enumerate() {
            let t = self.ports.ports[p].totals();
            let n = t.passed + t.dropped;
            let rate = (n - *last) as f64 / since.as_secs_f64().max(1e-3);
            *last = n;
            s += &format!(
                " | {} in {n} pass {} drop {} ({:.1} kpps) ring drops {}",
                self.ifaces[p],
                t.passed,
                t.dropped,
                rate / 1e3,
                t.rx_ring_drops + t.tx_ring_full
            );
        }
        let c = self.control.counts.totals();
        s += &format!(" | reloads {} ok {} failed", c.reloads_ok, c.reloads_failed);
        s
    }
}
