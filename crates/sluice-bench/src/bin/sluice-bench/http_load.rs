//! `sluice-bench http-load`: `sluice http-load` against `wrk` on the same
//! `sluice http-serve`, in one run, repetitions alternating, as JSON.

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_bench::pmc::{self, Pmc, Reading};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

#[derive(Args, Debug)]
pub struct HttpBenchArgs {
    /// Seconds per contender per repetition.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// Connections the load keeps open.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Client threads (wrk -t, http-load --threads) and server threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Repetitions, the contenders alternating (median, min and max are reported).
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Pipelining depth of the third contender.
    #[arg(long, default_value_t = 16)]
    pub pipeline: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Counters of each load tool (the client side only: they are opened
    /// after the server starts, so only the tools run under them inherit
    /// them), summed over the repetitions.
    #[arg(long)]
    pub pmc: bool,
}

/// The server, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wrk_available() -> bool {
    Command::new("wrk").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// `Requests/sec:   12345.67` from wrk's report.
fn wrk_rps(out: &str) -> Option<f64> {
    out.lines().find_map(|l| l.trim().strip_prefix("Requests/sec:").and_then(|v| v.trim().parse().ok()))
}

pub fn run(a: HttpBenchArgs) -> Result<()> {
    if a.reps == 0 || a.duration == 0 {
        bail!("--reps and --duration must be at least 1");
    }
    let exe = crate::sluice_exe()?;
    let total = (a.duration as usize * a.reps * 3 + 30).to_string();
    let threads = a.threads.to_string();
    let mut child = Command::new(&exe)
        .args(["http-serve", "--listen", "127.0.0.1:0", "--threads", &threads, "--duration", &total])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting sluice http-serve")?;
    let stderr = child.stderr.take().context("http-serve's stderr")?;
    let server = Server(child);
    let mut addr = None;
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        if let Some(a) = line.strip_prefix("sluice: serving on ") {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    let addr = addr.context("http-serve did not say where it serves")?;
    let url = format!("http://{addr}/");
    let (conns, dur) = (a.connections.to_string(), a.duration.to_string());
    let have_wrk = wrk_available();
    let mut runs: Vec<(&str, Vec<f64>)> =
        vec![("wrk", Vec::new()), ("http-load", Vec::new()), ("http-load-pipelined", Vec::new())];
    let depth = a.pipeline.to_string();
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let mut counts: Vec<Option<Reading>> = vec![None; runs.len()];
    for rep in 0..a.reps {
        for (k, (name, rps)) in runs.iter_mut().enumerate() {
            if *name == "wrk" && !have_wrk {
                continue;
            }
            let (r, reading) = pmc::maybe(&mut pmc, || -> Result<f64> {
                Ok(match *name {
                    "wrk" => {
                        let out = Command::new("wrk")
                            .args(["-t", &threads, "-c", &conns, "-d", &format!("{dur}s"), &url])
                            .output()
                            .context("running wrk")?;
                        wrk_rps(&String::from_utf8_lossy(&out.stdout)).context("wrk printed no Requests/sec")?
                    }
                    _ => {
                        let mut args = vec!["http-load", "--url", &url, "--threads", &threads, "--connections", &conns];
                        args.extend(["--duration", &dur, "--json"]);
                        if *name == "http-load-pipelined" {
                            args.extend(["--pipeline", &depth]);
                        }
                        let out = Command::new(&exe).args(&args).output().context("running sluice http-load")?;
                        let v: serde_json::Value =
                            serde_json::from_slice(&out.stdout).context("http-load printed no JSON report")?;
                        v["rps"].as_f64().context("http-load's report has no rps")?
                    }
                })
            });
            let r = r?;
            if let Some(x) = reading {
                counts[k].get_or_insert_with(Reading::default).add(&x);
            }
            if !a.json {
                eprintln!("rep {rep}: {name} {r:.0} req/s");
            }
            rps.push(r);
        }
    }
    drop(server);
    let best = |name: &str| runs.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.iter().copied().reduce(f64::max));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let (w, l, p) = (best("wrk"), best("http-load"), best("http-load-pipelined"));
    let mut v = serde_json::json!({
        "bench": "http-load",
        "url": url,
        "connections": a.connections,
        "threads": a.threads,
        "duration_s": a.duration,
        "reps": a.reps,
        "runs_rps": runs.iter().map(|(n, v)| (n.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "best_rps": { "wrk": w, "http_load": l, "http_load_pipelined": p },
        "wrk": if have_wrk { serde_json::Value::Null } else { "skipped: wrk not on PATH (apt-get install wrk)".into() },
        "ratios": {
            "http_load_over_wrk": ratio(l, w),
            "pipelined_over_wrk": ratio(p, w),
        },
        "targets": {
            "http_load_over_wrk": { "min": 1.0, "met": ratio(l, w).map(|r| r >= 1.0) },
            "pipelined_over_wrk": { "min": 3.0, "met": ratio(p, w).map(|r| r >= 3.0) },
        },
    });
    if a.pmc {
        let per_tool: serde_json::Map<_, _> = runs
            .iter()
            .zip(&counts)
            .filter_map(|((n, _), c)| {
                let (hw, sw) = Reading::json_fields(c.as_ref()?.into());
                Some((n.to_string(), serde_json::json!({ "hw": hw, "sw": sw })))
            })
            .collect();
        v["pmc"] = per_tool.into();
    }
    if a.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}
