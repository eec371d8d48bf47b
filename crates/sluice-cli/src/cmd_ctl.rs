//! `sluice ctl`: talks to a running bridge's control socket. The command
//! line is the request (`sluice ctl --socket S add blocks 192.0.2.1`), or
//! `-f FILE` (`-` for standard input) sends a batch applied atomically;
//! the reply is printed as text, or as the socket's JSON with `--json`.

use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;
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
        print_text(&reply);
    }
    if reply["ok"] != Value::Bool(true) {
        let line = reply["line"].as_u64().filter(|&l| l > 0);
        let at = match (&a.file, line) {
            (Some(f), Some(l)) => format!("{}:{l}: ", f.display()),
            (None, Some(l)) if request.lines().count() > 1 => format!("line {l}: "),
            _ => String::new(),
        };
        let msg = reply["error"].as_str().unwrap_or("the bridge refused the request");
        // The server's message already names the line.
        bail!("{at}{}", msg.strip_prefix(&format!("line {}: ", line.unwrap_or(0))).unwrap_or(msg));
    }
    Ok(Outcome::Complete)
}

fn print_text(r: &Value) {
    if r["ok"] != Value::Bool(true) {
        return;
    }
    if let Some(sets) = r["sets"].as_array() {
        println!("{:<20} {:<22} {:>10} {:>10} {:>10} {:>10}", "set", "kind", "entries", "base", "added", "deleted");
        for s in sets {
            println!(
                "{:<20} {:<22} {:>10} {:>10} {:>10} {:>10}",
                s["name"].as_str().unwrap_or(""),
                s["kind"].as_str().unwrap_or(""),
                s["entries"],
                s["base"],
                s["added"],
                s["deleted"]
            );
        }
    } else if let Some(elems) = r["elements"].as_array() {
        for e in elems {
            match e["expires_in"].as_u64() {
                Some(t) => println!("{} timeout {t}", e["element"].as_str().unwrap_or("")),
                None => println!("{}", e["element"].as_str().unwrap_or("")),
            }
        }
        if r["complete"] == Value::Bool(false) {
            eprintln!("sluice: the base came from a compiled file: only elements added at runtime are listed");
        }
    } else if r.get("match").is_some() {
        match (r["match"].as_bool(), r["element"].as_str(), r["from"].as_str()) {
            (Some(true), Some(e), Some(from)) => println!(
                "{} is in {} (element {e}, {from})",
                r["addr"].as_str().unwrap_or(""),
                r["set"].as_str().unwrap_or("")
            ),
            (Some(true), _, _) => {
                println!("{} is in {} (base tables)", r["addr"].as_str().unwrap_or(""), r["set"].as_str().unwrap_or(""))
            }
            _ => println!("{} is not in {}", r["addr"].as_str().unwrap_or(""), r["set"].as_str().unwrap_or("")),
        }
    } else if r.get("applied").is_some() {
        println!(
            "applied {} change(s); generation {} in force ({} us)",
            r["applied"], r["generation"], r["publish_us"]
        );
    } else if r.get("updates").is_some() {
        if let Some(o) = r.as_object() {
            for (k, v) in o.iter().filter(|(k, _)| *k != "ok") {
                println!("{k}: {v}");
            }
        }
    } else if r.get("generation").is_some() {
        println!("reloaded; generation {} in force", r["generation"]);
    }
}
