//! A progress bar on stderr when it is a terminal; nothing otherwise.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub fn bar(total: u64, unit_is_bytes: bool, enabled: bool) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = if unit_is_bytes {
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} packets ({per_sec}, eta {eta})"
    };
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style);
    }
    pb
}
