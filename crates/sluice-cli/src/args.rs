//! Flag parsers the CLI's own commands share. The flag groups live beside
//! what they configure (`sluice_control`, `sluice_policy`, `sluice_pipeline`,
//! `sluice_gen`, `sluice_guard`).

/// `--workers` of bridge: `auto` (a worker per AF_XDP queue: `None`) or 1 to 256.
pub fn bridge_workers(s: &str) -> Result<Option<usize>, String> {
    (s != "auto")
        .then(|| sluice_pipeline::flags::workers(s))
        .transpose()
        .map_err(|e| format!("{e}, or auto (a worker per queue)"))
}
