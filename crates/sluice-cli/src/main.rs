//! `sluice`: argument parsing, wiring, printing and exit codes. The work is
//! done by the library crates; this chooses which sources (pcap files,
//! standard input, the generator, live ports) and sinks to open, wires them
//! to the pipeline, and prints what the libraries report and log.
#![deny(unsafe_code)]

mod args;
mod cmd_bridge;
mod cmd_compile;
mod cmd_ctl;
mod cmd_decode;
mod cmd_demo;
mod cmd_filter;
mod cmd_gen;
mod cmd_guard;
mod cmd_h1;
mod cmd_http;
mod cmd_rss;
mod cmd_send;
mod cmd_shield;
mod cmd_udp;
mod progress;
mod report;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes (also in README.md).
mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// An error stopped the run (missing file, bad list line, write failure).
    pub const ERROR: u8 = 1;
    /// The command line itself was wrong (clap's, and [`super::Usage`]).
    pub const USAGE: u8 = 2;
    /// The input capture is truncated or corrupt: everything before the bad
    /// record was processed and written, and the position was reported.
    pub const INPUT_DAMAGED: u8 = 3;
    /// `sluice demo`: the observed drop count differs from the expected one.
    pub const DEMO_MISMATCH: u8 = 4;
    /// `sluice bridge`: a port's interface was deleted or renamed.
    pub const INTERFACE_GONE: u8 = 5;
}

pub use sluice_control::product::Usage;

/// Return a [`Usage`] error from the command.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new(sluice_control::product::Usage(format!($($t)*))))
    };
}
pub(crate) use usage;

/// How a command that did not fail ended.
pub enum Outcome {
    Complete,
    InputDamaged,
    DemoMismatch,
    /// `sluice http-parse`: the request was refused (the JSON says why).
    Refused,
    /// `sluice bridge`: a port's interface went away (the error is printed).
    InterfaceGone,
}

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Packet classification against huge address lists: decode, filter, generate"
)]
struct Cli {
    /// Log lines as `sluice: ...` text or as JSON objects (both on stderr).
    #[arg(long, value_enum, global = true, default_value = "text")]
    log_format: sluice_service::log::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a synthetic capture (pcap) with known properties.
    Gen(cmd_gen::GenArgs),
    /// Print one line per packet with its decoded fields (like tshark -T fields).
    Decode(cmd_decode::DecodeArgs),
    /// Split a capture into passed and dropped packets by rules or address lists.
    Filter(cmd_filter::FilterArgs),
    /// Build rules and lists once into a checked file that filter and bridge load in milliseconds.
    Compile(cmd_compile::CompileArgs),
    /// Verify a compiled rule file and print what it holds.
    Inspect(cmd_compile::InspectArgs),
    /// Generate a realistic capture, filter it against the embedded FireHOL list, compare with the expected drops.
    Demo(cmd_demo::DemoArgs),
    /// Where RSS steers a flow: its Toeplitz hash, indirection bucket and worker.
    Rss(cmd_rss::RssArgs),
    /// Forward between two interfaces (AF_XDP or AF_PACKET), dropping what the rules say.
    Bridge(Box<cmd_bridge::BridgeArgs>),
    /// Drop in XDP on this host's own interfaces what the rules say; the rest goes on to the kernel.
    Shield(Box<cmd_shield::ShieldArgs>),
    /// Change a running bridge's sets or a guard's blocks, and ask what they hold, over its control socket.
    Ctl(cmd_ctl::CtlArgs),
    /// Send a capture or generated frames out of an interface, paced (pkt-gen's role).
    Send(cmd_send::SendArgs),
    /// Multi-threaded UDP echo server, one SO_REUSEPORT socket per pinned worker (the seed's rss-udp-srv).
    UdpEcho(cmd_udp::EchoArgs),
    /// UDP load over Toeplitz-spread flows against udp-echo, with round-trip latency (the seed's udp-clt).
    UdpLoad(cmd_udp::LoadArgs),
    /// Serve HTTP/1.1 with controllable response sizes, delays and statuses (the load tester's target).
    HttpServe(cmd_http::ServeArgs),
    /// HTTP/1.1 load: open loop with coordinated-omission correction or closed loop, pipelining, many source addresses.
    HttpLoad(cmd_http::LoadArgs),
    /// Parse one HTTP/1.1 request strictly and print what it holds (or why it is refused) as JSON.
    HttpParse(cmd_h1::ParseArgs),
    /// Reverse proxy enforcing Tempesta frang-style limits per client IP; breaches can block the IP (ipset file).
    HttpGuard(Box<cmd_guard::GuardArgs>),
    /// Write the man pages and shell completions into DIR (for packaging).
    #[command(hide = true)]
    Assets { dir: std::path::PathBuf },
}

fn main() -> ExitCode {
    let cli: Cli = sluice_service::config::try_parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    sluice_service::log::init(cli.log_format);
    // Before any command runs, whatever it is: SIGHUP's default action would
    // end it without its summary (a guard, a server, a load run hit by a
    // `kill -HUP` meant for a bridge). Commands that reread something on
    // SIGHUP say what later; the rest log it and go on.
    if let Err(e) = sluice_control::signals::install() {
        tracing::warn!("no SIGHUP handler ({e}): a SIGHUP would end this run");
    }
    let result = match cli.command {
        Command::Gen(a) => cmd_gen::run(a),
        Command::Decode(a) => cmd_decode::run(a),
        Command::Filter(a) => cmd_filter::run(a),
        Command::Compile(a) => cmd_compile::compile(a),
        Command::Inspect(a) => cmd_compile::inspect(a),
        Command::Demo(a) => cmd_demo::run(a),
        Command::Rss(a) => cmd_rss::run(a),
        Command::Bridge(a) => cmd_bridge::run(*a),
        Command::Shield(a) => cmd_shield::run(*a),
        Command::Ctl(a) => cmd_ctl::run(a),
        Command::Send(a) => cmd_send::run(a),
        Command::UdpEcho(a) => cmd_udp::echo(a),
        Command::UdpLoad(a) => cmd_udp::load(a),
        Command::HttpServe(a) => cmd_http::serve(a),
        Command::HttpLoad(a) => cmd_http::load(a),
        Command::HttpParse(a) => cmd_h1::parse(a),
        Command::HttpGuard(a) => cmd_guard::run(*a),
        Command::Assets { dir } => sluice_service::dist::write_assets(Cli::command(), &dir)
            .map(|_| Outcome::Complete)
            .map_err(|e| anyhow::anyhow!("writing into {}: {e}", dir.display())),
    };
    ExitCode::from(match result {
        Ok(Outcome::Complete) => exit::OK,
        Ok(Outcome::InputDamaged) => exit::INPUT_DAMAGED,
        Ok(Outcome::DemoMismatch) => exit::DEMO_MISMATCH,
        Ok(Outcome::Refused) => exit::ERROR,
        Ok(Outcome::InterfaceGone) => exit::INTERFACE_GONE,
        Err(e) if e.downcast_ref::<Usage>().is_some() => {
            tracing::error!("{e:#} (see --help)");
            exit::USAGE
        }
        Err(e) => {
            tracing::error!("{e:#}");
            exit::ERROR
        }
    })
}

#[cfg(test)]
mod tests {
    /// Flag groups flattened from several crates never share an id or a
    /// long name within a command (clap checks this only in debug builds;
    /// the tests run in release).
    #[test]
    fn no_two_flags_of_a_command_share_an_id_or_a_name() {
        let cli = <super::Cli as clap::CommandFactory>::command();
        for cmd in cli.get_subcommands() {
            let mut ids = std::collections::BTreeSet::new();
            let mut longs = std::collections::BTreeSet::new();
            for arg in cmd.get_arguments() {
                assert!(ids.insert(arg.get_id().as_str()), "{}: id {} twice", cmd.get_name(), arg.get_id());
                if let Some(l) = arg.get_long() {
                    assert!(longs.insert(l), "{}: --{l} twice", cmd.get_name());
                }
            }
        }
    }

    #[test]
    fn every_subcommand_and_flag_has_help() {
        let missing = sluice_service::help::without_help(&<super::Cli as clap::CommandFactory>::command());
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
