use crate::Outcome;
use anyhow::Result;
use clap::Args;
use sluice_steer::{parse_key, Indirection, RssInput, Toeplitz, KEY_LEN, MICROSOFT_KEY, SYMMETRIC_KEY};
use std::net::IpAddr;

#[derive(Args, Debug)]
pub struct RssArgs {
    /// Source address.
    #[arg(long)]
    pub src: IpAddr,
    /// Destination address.
    #[arg(long)]
    pub dst: IpAddr,
    /// Source port: with --dport, hash the 4-tuple instead of the IP pair.
    #[arg(long, requires = "dport")]
    pub sport: Option<u16>,
    /// Destination port: with --sport, hash the 4-tuple.
    #[arg(long, requires = "sport")]
    pub dport: Option<u16>,
    /// 80 hex digits, "microsoft" (default) or "symmetric" (0x6d5a repeated).
    #[arg(long, default_value = "microsoft")]
    pub key: String,
    /// Workers behind the indirection table.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Indirection table entries (a power of two).
    #[arg(long, default_value_t = sluice_steer::DEFAULT_TABLE)]
    pub table: usize,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn key_from(text: &str) -> Result<[u8; KEY_LEN]> {
    Ok(match text {
        "microsoft" => MICROSOFT_KEY,
        "symmetric" => SYMMETRIC_KEY,
        hex => parse_key(hex)?,
    })
}

pub fn run(a: RssArgs) -> Result<Outcome> {
    if a.src.is_ipv4() != a.dst.is_ipv4() {
        crate::usage!("source and destination must both be IPv4 or both IPv6");
    }
    if !a.table.is_power_of_two() || a.table > 1 << 16 {
        crate::usage!("--table must be a power of two up to 65536, got {}", a.table);
    }
    if a.workers == 0 || a.workers > a.table {
        crate::usage!("--workers must be between 1 and the table size ({})", a.table);
    }
    let toeplitz = Toeplitz::new(&key_from(&a.key)?);
    let (input, tuple) = match (a.sport, a.dport) {
        (Some(sp), Some(dp)) => (RssInput::four_tuple(a.src, a.dst, sp, dp), "4-tuple"),
        _ => (RssInput::pair(a.src, a.dst), "2-tuple"),
    };
    let hash = toeplitz.hash_input(&input);
    let table = Indirection::round_robin(a.table, a.workers);
    let (bucket, worker) = (table.bucket(hash), table.worker(hash));
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "hash": format!("0x{hash:08x}"), "tuple": tuple, "bucket": bucket, "table": a.table, "worker": worker, "workers": a.workers })
        );
    } else {
        println!("0x{hash:08x}");
        println!("{tuple} hash 0x{hash:08x}  bucket {bucket} of {}  worker {worker} of {}", a.table, a.workers);
    }
    Ok(Outcome::Complete)
}
