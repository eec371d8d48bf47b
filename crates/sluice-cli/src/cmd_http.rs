//! `sluice http-serve` and `sluice http-load`: their flags and configs are
//! `sluice_httpbed::flags`'s; this runs them (each a product: `start`,
//! then `Running::wait`) until a signal or their end and prints the
//! summary.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_control::product::{self, Running};
use sluice_httpbed::flags::{LoadFlags, ServeFlags};
use sluice_httpbed::{load, Server};
use std::io::IsTerminal;
use std::time::Duration;

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
    let duration = (a.serve.duration.map(|s| Duration::try_from_secs_f64(s.max(0.0))).transpose())
        .map_err(|_| product::Usage("--duration: a number of seconds, please".into()))?;
    // After the threads run, so a client that reads this line can connect at once.
    tracing::info!("serving on {addr}");
    let (summary, _) = product::run_to_end(running, duration, true).context("serving")?;
    print!("{}", product::print(&summary, a.json));
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
    let (mut config, target) = a.load.config()?;
    if let Some(file) = &pool {
        let pools = sluice_httpbed::pools::read(file, &config, &target).map_err(anyhow::Error::msg)?;
        let running = sluice_httpbed::pools::start(pools)?;
        sluice_control::stop_on_interrupt(running.handle().flag()).context("installing the signal handlers")?;
        print!("{}", product::print(&running.wait()?, a.json));
        return Ok(Outcome::Complete);
    }
    config.progress = std::io::stderr().is_terminal();
    let running = load::start(config)?;
    sluice_control::stop_on_interrupt(running.handle().flag()).context("installing the signal handlers")?;
    let report = running.wait()?;
    if let Some(path) = &hdr_out {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        load::write_hgrm(report.latency(), &mut f).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", product::print(&report, a.json));
    Ok(Outcome::Complete)
}
