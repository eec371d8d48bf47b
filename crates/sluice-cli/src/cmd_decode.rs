use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_pcap::CaptureReader;
use sluice_wire::decode;
use sluice_wire::fields::{json_line, text_line};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// Input capture (pcap or pcapng; `-`: standard input).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    /// One JSON object per line instead of tab-separated fields.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// One line per packet: `sluice_wire::fields` says what is in it.
pub fn run(a: DecodeArgs) -> Result<Outcome> {
    let mut reader = CaptureReader::open(&a.input).with_context(|| a.input.display().to_string())?;
    for w in reader.warnings() {
        tracing::warn!("{}: {w}", a.input.display());
    }
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = String::with_capacity(256);
    let limit = a.count.unwrap_or(u64::MAX);
    let stopped = loop {
        if reader.records_read() >= limit {
            break None;
        }
        match reader.next_record() {
            Ok(Some(rec)) => {
                line.clear();
                let result = decode(rec.interface.link_type, rec.data);
                if a.json {
                    json_line(&mut line, rec.index, &result);
                } else {
                    text_line(&mut line, rec.index, &result);
                }
                if let Err(e) = out.write_all(line.as_bytes()) {
                    return quiet_on_broken_pipe(e);
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    if let Err(e) = out.flush() {
        return quiet_on_broken_pipe(e);
    }
    match stopped {
        None => Ok(Outcome::Complete),
        Some(e) => {
            let before = if e.record == 1 { "packet before it was" } else { "packets before it were" };
            tracing::info!("error: {}: stopped at {e}; the {} {before} decoded", a.input.display(), e.record);
            Ok(Outcome::InputDamaged)
        }
    }
}

/// `sluice decode | head` is not an error.
fn quiet_on_broken_pipe(e: io::Error) -> Result<Outcome> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(Outcome::Complete)
    } else {
        Err(e).context("writing to standard output")
    }
}
