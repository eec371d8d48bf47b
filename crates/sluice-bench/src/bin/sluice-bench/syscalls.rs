//! `sluice-bench syscalls`: small and 16 KiB messages over loopback TCP
//! pairs by plain `write`/`read` against io_uring batches, to decide by
//! measurement whether the guard's loop should submit its reads and writes
//! through io_uring (issue 43, item 1). The measuring is in
//! `sluice_bench::uring`.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use sluice_bench::median;
use sluice_bench::uring::{syscall_ns, Bed, Way};

#[derive(Args, Debug)]
pub struct SyscallsBenchArgs {
    /// Connected pairs: each round sends one message on every pair (the
    /// guard's connections with a request or response moving in one loop turn).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub pairs: Vec<usize>,
    /// Message sizes in bytes: each is a case of its own.
    #[arg(long, value_delimiter = ',', default_value = "128,16384")]
    pub sizes: Vec<usize>,
    /// Messages per way and repetition (spread over the pairs).
    #[arg(long, default_value_t = 200_000)]
    pub messages: usize,
    /// Repetitions, the ways alternating (median, min and max are reported).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
}

pub fn run(a: SyscallsBenchArgs) -> Result<()> {
    if a.reps == 0 || a.messages == 0 || a.pairs.contains(&0) || a.sizes.contains(&0) {
        bail!("--reps, --messages, --pairs and --sizes must be at least 1");
    }
    if let Some(s) = a.sizes.iter().find(|&&s| s > 64 << 10) {
        bail!("--sizes: {s} is over 64 KiB (every message of a round must fit the pair's socket buffers)");
    }
    let entry: Vec<f64> = (0..a.reps).map(|_| syscall_ns(1_000_000)).collect();
    println!("{}", json!({"case": "syscall_entry", "getppid_ns_median": median(&entry), "getppid_ns_reps": entry}));
    for &k in &a.pairs {
        for &size in &a.sizes {
            let mut bed =
                Bed::new(k, size).context("setting up the loopback pairs and the ring (is io_uring allowed here?)")?;
            let rounds = (a.messages / k).max(1);
            // One untimed round each: the ring's and the sockets' first use.
            for way in Way::ALL {
                bed.time(way, rounds / 10 + 1)?;
            }
            let mut ns = [vec![], vec![], vec![]];
            for _ in 0..a.reps {
                for (w, way) in Way::ALL.into_iter().enumerate() {
                    ns[w].push(bed.time(way, rounds)?);
                }
            }
            let med: Vec<f64> = ns.iter().map(|v| median(v)).collect();
            let mut row = json!({
                "case": format!("pairs{k}-size{size}"),
                "pairs": k,
                "size": size,
                "messages_per_rep": rounds * k,
            });
            for (w, way) in Way::ALL.into_iter().enumerate() {
                row[format!("{}_ns_per_message", way.name())] = json!(med[w]);
                row[format!("{}_ns_reps", way.name())] = json!(ns[w]);
            }
            // Time per message against the plain calls' (below 1: io_uring faster).
            row["uring_vs_syscalls"] = json!(med[1] / med[0]);
            row["uring_linked_vs_syscalls"] = json!(med[2] / med[0]);
            println!("{row}");
        }
    }
    Ok(())
}
