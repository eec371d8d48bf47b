//! `sluice-bench guard`: `sluice http-load` straight to `sluice http-serve`
//! against the same load through `sluice http-guard` (limits set, none
//! reached), repetitions alternating, one JSON line per repetition and one
//! with the medians. The target (guarded >= 0.7 x direct) is reported, not
//! asserted: on a small machine the three processes share the cores.

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_bench::pmc::{self, Pmc, Reading};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

#[derive(Args, Debug)]
pub struct GuardBenchArgs {
    /// Seconds per contender per repetition.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Threads of each of http-load, http-serve and http-guard.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Source addresses of the connections (one per connection, so no one
    /// address carries the whole rate).
    #[arg(long, default_value = "127.6.0.0/24")]
    pub source: String,
    /// Open loop at this many requests/s in total (the same offered load
    /// both ways) instead of as fast as the loop closes: reports what each
    /// path delivers and its corrected p99 latency.
    #[arg(long, value_name = "R")]
    pub rate: Option<u64>,
    /// Counters over each side's runs: http-load, plus the guard on the
    /// guarded side (they are opened after the upstream starts and before
    /// the guard does, so the guard inherits them and the upstream not).
    #[arg(long)]
    pub pmc: bool,
}

/// A child killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `sluice ARGS` and read the address it announces on stderr after `prefix`.
fn spawn_announced(exe: &Path, args: &[&str], prefix: &str) -> Result<(Killed, String)> {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting sluice {}", args[0]))?;
    let stderr = child.stderr.take().context("stderr")?;
    let child = Killed(child);
    for line in BufReader::new(stderr).lines() {
        if let Some(a) = line?.strip_prefix(prefix) {
            return Ok((child, a.trim().to_owned()));
        }
    }
    bail!("sluice {} did not say where it listens", args[0])
}

use sluice_bench::median;

pub fn run(a: GuardBenchArgs) -> Result<()> {
    if a.reps == 0 || a.duration == 0 {
        bail!("--reps and --duration must be at least 1");
    }
    let exe = crate::sluice_exe()?;
    let total = (a.duration as usize * a.reps * 2 + 30).to_string();
    let threads = a.threads.to_string();
    let (_server, upstream) = spawn_announced(
        &exe,
        &["http-serve", "--listen", "127.0.0.1:0", "--threads", &threads, "--duration", &total],
        "sluice: serving on ",
    )?;
    // Every limit on, none reached: the accounting runs on every request.
    let guard_args = [
        "http-guard",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--threads",
        &threads,
        "--duration",
        &total,
        "--request-rate",
        "60000",
        "--request-burst",
        "60000",
        "--connection-rate",
        "1000",
        "--concurrent-connections",
        "1000",
        "--client-header-timeout",
        "5000",
        "--http-header-cnt",
        "64",
        "--http-uri-len",
        "4096",
        "--http-field-len",
        "4096",
        "--http-methods",
        "GET,HEAD,POST",
        "--http-host-required",
        "--ip-block",
        "10",
        // http-serve pins its thread 0 to CPU 0; pinning the guard there too
        // would put both on one core.
        "--no-pin",
    ];
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let (_guard, guarded) = spawn_announced(&exe, &guard_args, "sluice: guarding on ")?;
    let mut counts = (Reading::default(), Reading::default());
    let (conns, dur) = (a.connections.to_string(), a.duration.to_string());
    let rate = a.rate.map(|r| r.to_string());
    let rps = |addr: &str| -> Result<(f64, f64)> {
        let url = format!("http://{addr}/");
        let mut load = Command::new(&exe);
        load.args(["http-load", "--url", &url, "--threads", &threads, "--connections", &conns]).args([
            "--duration",
            &dur,
            "--source",
            &a.source,
            "--json",
        ]);
        if let Some(r) = &rate {
            load.args(["--rate", r]);
        }
        let out = load.output().context("running sluice http-load")?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("http-load printed no JSON report")?;
        let errors = v["errors"]
            .as_object()
            .map_or(0, |e| e.iter().filter(|(k, _)| *k != "status").filter_map(|(_, n)| n.as_u64()).sum::<u64>());
        if errors > 0 || v["errors"]["status"].as_object().is_some_and(|s| !s.is_empty()) {
            bail!("http-load to {addr} had errors (a limit was reached?): {}", v["errors"]);
        }
        let p99 = v["latency_us"]["p99"].as_f64().context("http-load's report has no p99")?;
        Ok((v["rps"].as_f64().context("http-load's report has no rps")?, p99))
    };
    let (mut direct, mut through, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..a.reps {
        // Alternate which goes first, so drift in the machine's state hits both.
        let mut run = |addr: &str, into: &mut Reading| -> Result<(f64, f64)> {
            let (r, reading) = pmc::maybe(&mut pmc, || rps(addr));
            if let Some(x) = reading {
                into.add(&x);
            }
            r
        };
        let (d, g) = if rep % 2 == 0 {
            let d = run(&upstream, &mut counts.0)?;
            (d, run(&guarded, &mut counts.1)?)
        } else {
            let g = run(&guarded, &mut counts.1)?;
            (run(&upstream, &mut counts.0)?, g)
        };
        let ((d, dp99), (g, gp99)) = (d, g);
        println!(
            "{}",
            serde_json::json!({
                "bench": "guard", "rep": rep, "direct_rps": d, "guarded_rps": g, "ratio": g / d,
                "direct_p99_us": dp99, "guarded_p99_us": gp99,
            })
        );
        direct.push(d);
        through.push(g);
        p99s.push((dp99, gp99));
    }
    let ratios: Vec<f64> = direct.iter().zip(&through).map(|(d, g)| g / d).collect();
    let (md, mg, mr) = (median(&direct), median(&through), median(&ratios));
    let side = |r: &Reading| {
        let (hw, sw) = Reading::json_fields(Some(r));
        serde_json::json!({ "hw": hw, "sw": sw })
    };
    let pmc_json = a.pmc.then(|| serde_json::json!({ "direct": side(&counts.0), "guarded": side(&counts.1) }));
    println!(
        "{}",
        serde_json::json!({
            "bench": "guard",
            "connections": a.connections,
            "threads": a.threads,
            "duration_s": a.duration,
            "reps": a.reps,
            "median_direct_rps": md,
            "median_guarded_rps": mg,
            "median_ratio": mr,
            "offered_rps": a.rate,
            "pmc": pmc_json,
            "median_direct_p99_us": median(&p99s.iter().map(|p| p.0).collect::<Vec<_>>()),
            "median_guarded_p99_us": median(&p99s.iter().map(|p| p.1).collect::<Vec<_>>()),
            // Below saturation both paths deliver the offered rate, so the
            // target is judged on the closed loop's peak only.
            "target": a.rate.is_none().then(|| serde_json::json!({ "min_ratio": 0.7, "met": mr >= 0.7 })),
        })
    );
    Ok(())
}
