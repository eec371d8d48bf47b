//! `sluice http-parse`: one request through sluice-h1, printed as one JSON
//! object. Flags and glue only.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};
use sluice_h1::{parse_request_with, Framing, Lenient, Options, Parser};
use std::io::Read;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ParseArgs {
    /// The request bytes (`-` for stdin).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    /// Tolerances, comma-separated (headers, chunked-length, transfer-encoding,
    /// version, optional-cr-before-lf, optional-crlf-after-chunk,
    /// spaces-after-chunk-size, obs-fold, space-before-colon,
    /// duplicate-content-length, all). Default: strict.
    #[arg(long, value_name = "FLAG,...", value_parser = Lenient::from_names, default_value = "")]
    pub lenient: Lenient,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit 0 with `"ok": true` when accepted, 1 with `"ok": false` when refused.
pub fn parse(a: ParseArgs) -> Result<Outcome> {
    let buf = if a.input.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v).context("stdin")?;
        v
    } else {
        std::fs::read(&a.input).with_context(|| a.input.display().to_string())?
    };
    let opts = Options { lenient: a.lenient, ..Options::default() };
    let mut parser = Parser::new(opts);
    let (out, outcome) = match parse_request_with(&mut parser, &buf) {
        Ok(r) => {
            let h = &r.head;
            let headers: Vec<Value> = h.headers().map(|(n, v)| json!([text(n), text(v)])).collect();
            let framing = match h.framing {
                Framing::None => "none",
                Framing::Length(_) => "length",
                Framing::Chunked => "chunked",
            };
            let v = json!({
                "ok": true,
                "method": h.method,
                "target": h.target,
                "version": h.version.as_str(),
                "headers": headers,
                "framing": framing,
                "content_length": h.content_length(),
                "keep_alive": h.keep_alive,
                "body_len": r.body_len,
                "complete": r.complete,
                "consumed": r.consumed,
                "signals": r.signals.names(),
            });
            (v, Outcome::Complete)
        }
        Err(e) => {
            let v = json!({
                "ok": false,
                "error": e.kind.as_str(),
                "message": e.kind.to_string(),
                "status": e.kind.status(),
                "offset": e.offset,
                "signals": parser.signals().names(),
            });
            (v, Outcome::Refused)
        }
    };
    println!("{out}");
    Ok(outcome)
}
