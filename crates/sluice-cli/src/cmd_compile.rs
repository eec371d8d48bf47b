//! `sluice compile` (rules and lists into one checked file of built tables)
//! and `sluice inspect` (what such a file holds).

use crate::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use sluice_engine::compiled;
use sluice_policy::RuleSpec;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct CompileArgs {
    #[command(flatten)]
    pub rules: RuleSpec,
    /// Where to write the compiled file (replaced atomically).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: PathBuf,
    /// Print what was written as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A file written by `sluice compile`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn compile(a: CompileArgs) -> Result<Outcome> {
    if !a.rules.given() {
        crate::usage!("nothing to compile: give --rules FILE or --drop-src/--drop-dst/--drop-any LIST");
    }
    let loaded = a.rules.load_for_compile()?.logged();
    let started = Instant::now();
    let bytes = compiled::save_with_notes(&loaded.rules, &loaded.geo_notes());
    sluice_rules::write_atomic(&a.out, &bytes).with_context(|| format!("writing {}", a.out.display()))?;
    let entries: u64 = loaded.lists.iter().map(|e| e.entries).sum();
    // The sets as the file holds them, read back as `inspect` reads them:
    // the two commands give a set the same size.
    let written = compiled::inspect(&bytes).context("reading back what was written")?;
    let v = serde_json::json!({
        "out": a.out.display().to_string(),
        "bytes": bytes.len(),
        "rules": loaded.rules.rules().len(),
        "sets": written.meta.sets,
        "entries": entries,
        "parse_and_build_ms": loaded.took.as_secs_f64() * 1e3,
        "write_ms": started.elapsed().as_secs_f64() * 1e3,
    });
    if a.json {
        println!("{v}");
    } else {
        println!(
            "wrote {} ({} bytes): {} rules, {} entries; parsed and built in {:.1} ms",
            a.out.display(),
            bytes.len(),
            loaded.rules.rules().len(),
            entries,
            loaded.took.as_secs_f64() * 1e3
        );
    }
    Ok(Outcome::Complete)
}

pub fn inspect(a: InspectArgs) -> Result<Outcome> {
    let bytes = std::fs::read(&a.file).with_context(|| a.file.display().to_string())?;
    let started = Instant::now();
    let compiled::Inspected { meta, rules: text, sections } =
        compiled::inspect(&bytes).with_context(|| format!("{}: refused", a.file.display()))?;
    let checked_ms = started.elapsed().as_secs_f64() * 1e3;
    if a.json {
        let v = serde_json::json!({
            "file": a.file.display().to_string(),
            "bytes": bytes.len(),
            "checked_ms": checked_ms,
            "meta": meta,
            "rules": text,
            "sections": sections.iter().map(|(n, b)| serde_json::json!({"name": n, "bytes": b})).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(Outcome::Complete);
    }
    println!(
        "{}: {} bytes, checksum good ({checked_ms:.1} ms), written by {}",
        a.file.display(),
        bytes.len(),
        meta.written_by
    );
    match meta.origin.as_str() {
        "shorthand" => {
            let names: Vec<&str> = ["--drop-src", "--drop-dst", "--drop-any"]
                .iter()
                .zip(meta.shorthand)
                .filter(|(_, g)| *g)
                .map(|(n, _)| *n)
                .collect();
            println!("rules: the shorthands {}{}", names.join(" "), if meta.inner { " --inner" } else { "" });
        }
        _ => println!("rules: from {}", meta.source),
    }
    if meta.v4mapped {
        println!("options: --v4mapped");
    }
    println!("sets:");
    for s in &meta.sets {
        println!("  {:<24} {:>10} entries  {:>12} bytes  ({})", s.name, s.entries, s.bytes, s.kind);
        if let Some(g) = &s.geo {
            println!("  {:<24} geo: {g}", "");
        }
    }
    if !text.is_empty() {
        println!("rule file:");
        for l in text.lines() {
            println!("  {l}");
        }
    }
    Ok(Outcome::Complete)
}
