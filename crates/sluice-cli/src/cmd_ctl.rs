//! `sluice ctl`: talks to a running bridge's control socket. The command
//! line is the request (`sluice ctl --socket S add blocks 192.0.2.1`), or
//! `-f FILE` (`-` for standard input) sends a batch applied atomically;
//! the reply is printed as text, or as the socket's JSON with `--json`.

use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The bridge's control socket (its --control PATH).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Send the lines of FILE (`-`: standard input) as one atomic batch of
    /// add/del/flush, like `ipset restore` or `nft -f`.
    #[arg(short = 'f', long = "file", value_name = "FILE", conflicts_with = "command")]
    pub file: Option<PathBuf>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the reply.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// add SET ELEM [timeout S] | del SET ELEM | flush SET | test SET ADDR |
    /// list SET | sets | stats | reload
    #[arg(value_name = "COMMAND", num_args = 0.., trailing_var_arg = true)]
    pub command: Vec<String>,
}

pub fn run(a: CtlArgs) -> Result<Outcome> {
    let request = match &a.file {
        Some(f) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
            s
        }
        Some(f) => std::fs::read_to_string(f).with_context(|| f.display().to_string())?,
        None if a.command.is_empty() => {
            bail!("give a command (add, del, flush, test, list, sets, stats, reload) or -f FILE")
        }
        None => a.command.join(" "),
    };
    // Checked here too, so a typo is named before anything is sent.
    if let Err(e) = sluice_control::ctl::parse_request(&request) {
        match &a.file {
            Some(f) => bail!("{}:{}: {}", f.display(), e.line, e.message),
            None => bail!("{}", e.message),
        }
    }
    let timeout = Duration::from_secs_f64(a.timeout.max(0.1));
    let reply = sluice_control::socket::request(&a.socket, &request, timeout)
        .with_context(|| format!("control socket {}", a.socket.display()))?;
    if a.json {
        println!("{reply}");
    } else {
        print!("{}", sluice_control::ctl::render_text(&reply));
    }
    if let Some(e) = sluice_control::ctl::failure(&reply, &request, a.file.as_deref()) {
        bail!("{e}");
    }
    Ok(Outcome::Complete)
}
