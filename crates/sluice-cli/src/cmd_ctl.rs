//! `sluice ctl`: talks to a running bridge's control socket. The command
//! line is the request (`sluice ctl --socket S add blocks 192.0.2.1`), or
//! `-f FILE` (`-` for standard input) sends a batch applied atomically;
//! the reply is printed as text, or as the socket's JSON with `--json`.

use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_control::CtlError;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// A bridge's or an http-guard's control socket (its --control PATH).
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
    /// A bridge: add SET ELEM [timeout S] | del SET ELEM | flush SET |
    /// test SET ADDR | list SET | sets | stats | reload | bgp | flows. An http-guard:
    /// blocks | block ADDR [timeout S] | unblock ADDR | clients [N] | stats.
    #[arg(value_name = "COMMAND", num_args = 0.., trailing_var_arg = true)]
    pub command: Vec<String>,
}

pub fn run(a: CtlArgs) -> Result<Outcome> {
    use sluice_control::socket::MAX_REQUEST;
    let from = match &a.file {
        Some(f) if f.as_os_str() == "-" => "standard input".to_owned(),
        Some(f) => f.display().to_string(),
        None => "the request".to_owned(),
    };
    // `--json` after the command (`ctl --socket S sets --json`) is the
    // flag, not a word of the command: no command has such a word.
    let json = a.json || a.command.iter().any(|w| w == "--json");
    let command: Vec<&str> = a.command.iter().map(String::as_str).filter(|w| *w != "--json").collect();
    let request: Vec<u8> = match &a.file {
        // One byte past the limit is enough to know the request is over it.
        Some(f) if f.as_os_str() == "-" => {
            let mut s = Vec::new();
            std::io::stdin().take(MAX_REQUEST + 1).read_to_end(&mut s).context("reading standard input")?;
            s
        }
        Some(f) => {
            let mut s = Vec::new();
            let file = std::fs::File::open(f).with_context(|| from.clone())?;
            file.take(MAX_REQUEST + 1).read_to_end(&mut s).with_context(|| from.clone())?;
            s
        }
        None if command.is_empty() => {
            crate::usage!(
                "give a command (a bridge's add, del, flush, test, list, sets, stats, reload, bgp, flows; \
                 a guard's blocks, block, unblock, clients, stats) or -f FILE"
            )
        }
        None => command.join(" ").into_bytes(),
    };
    // The socket would refuse it whole; said here, before sending any.
    if request.len() as u64 > MAX_REQUEST {
        bail!(
            "{from}: over {} MiB, the most one request may be; nothing was sent. \
             Split the batch into several -f runs (each is applied atomically on its own)",
            MAX_REQUEST >> 20
        );
    }
    let request = String::from_utf8(request).map_err(|_| anyhow::anyhow!("{from}: not UTF-8 text"))?;
    // Checked here too, so a typo is named before anything is sent: in a
    // bridge's language or a guard's (the socket checks it in its own).
    if let Err(e) = check(&request) {
        match &a.file {
            Some(f) => bail!("{}:{}: {}", f.display(), e.line, e.message),
            None => crate::usage!("{}", e.message),
        }
    }
    let timeout = Duration::from_secs_f64(a.timeout.max(0.1));
    let reply = sluice_control::socket::request(&a.socket, &request, timeout)
        .with_context(|| format!("control socket {}", a.socket.display()))?;
    if json {
        println!("{reply}");
    } else {
        let text = sluice_policy::commands::render_text(&reply);
        match text.is_empty() {
            true => print!("{}", sluice_guard::control::render_text(&reply)),
            false => print!("{text}"),
        }
    }
    if let Some(e) = sluice_control::command::failure(&reply, &request, a.file.as_deref()) {
        bail!("{e}");
    }
    Ok(Outcome::Complete)
}

/// The request in a bridge's or a guard's language; neither: the error of
/// the one whose verb it is, or both lists for a verb of neither.
fn check(request: &str) -> Result<(), CtlError> {
    use sluice_control::command::parse_request;
    use sluice_guard::control::GuardCommand;
    let bridge = parse_request::<sluice_policy::Command>(request).err();
    let guard = parse_request::<GuardCommand>(request).err();
    match (bridge, guard) {
        (None, _) | (_, None) => Ok(()),
        (Some(b), Some(g)) if b.message.starts_with("unknown command") && g.message.starts_with("unknown command") => {
            let verb = b.message.split('`').nth(1).unwrap_or_default();
            Err(CtlError {
                line: b.line,
                message: format!(
                    "unknown command `{verb}` (a bridge's or a shield's: {}; an http-guard's: {})",
                    sluice_policy::Command::VERBS,
                    GuardCommand::VERBS
                ),
            })
        }
        (Some(b), Some(g)) if b.message.starts_with("unknown command") => Err(g),
        (Some(b), Some(_)) => Err(b),
    }
}
