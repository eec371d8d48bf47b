//! `sluice http-serve` and `sluice http-load`: their flags and configs are
//! `sluice_httpbed::flags`'s; this runs them until a signal or their end
//! and prints the report.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_httpbed::flags::{LoadFlags, ServeFlags};
use sluice_httpbed::{load, Server};
use std::io::IsTerminal;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub serve: ServeFlags,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn serve(a: ServeArgs) -> Result<Outcome> {
    let server = Server::bind(a.serve.config())?;
    let addr = server.local_addr();
    let running = server.start()?;
    let stop = running.stop_flag();
    sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
    // After the threads run, so a client that reads this line can connect at once.
    tracing::info!("serving on {addr}");
    let elapsed = sluice_control::wait_until_stopped(&stop, a.serve.duration, || false);
    let report = running.join().context("serving")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text(elapsed));
    }
    Ok(Outcome::Complete)
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub load: LoadFlags,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn load(a: LoadArgs) -> Result<Outcome> {
    let (pool, hdr_out) = (a.load.pool.clone(), a.load.hdr_out.clone());
    let (config, target) = a.load.config()?;
    if let Some(file) = &pool {
        let pools = sluice_httpbed::pools::read(file, &config, &target).map_err(anyhow::Error::msg)?;
        let stop = Arc::new(AtomicBool::new(false));
        sluice_control::stop_on_interrupt(&stop).context("installing the signal handlers")?;
        let report = sluice_httpbed::pools::run(pools, &stop)?;
        print_report(a.json, report.to_json(), &report.text());
        return Ok(Outcome::Complete);
    }
    let running = load::start(config)?;
    sluice_control::stop_on_interrupt(&running.stop_flag()).context("installing the signal handlers")?;
    let report = running.wait(std::io::stderr().is_terminal())?;
    if let Some(path) = &hdr_out {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        load::write_hgrm(report.latency(), &mut f).with_context(|| format!("writing {}", path.display()))?;
    }
    print_report(a.json, report.to_json(), &report.text());
    Ok(Outcome::Complete)
}

fn print_report(json: bool, j: serde_json::Value, text: &str) {
    print!("{}", if json { format!("{j}\n") } else { text.to_owned() });
}
