//! `sluice http-guard`: its flags are `sluice_guard::flags::GuardFlags`;
//! this runs the guard they configure and prints its summary.

use crate::Outcome;
use anyhow::{Context, Result};

#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    /// Read flags from a TOML file (keys are long flag names; the command line overrides).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub guard: sluice_guard::flags::GuardFlags,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GuardArgs) -> Result<Outcome> {
    let (config, services) = a.guard.config()?;
    let summary = sluice_guard::service::run(config, services).context("http-guard")?;
    print!("{}", sluice_control::product::print(&summary, a.json));
    Ok(Outcome::Complete)
}
