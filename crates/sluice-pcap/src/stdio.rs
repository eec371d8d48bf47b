//! `-` names standard input or standard output, as it does for tcpdump,
//! tshark and editcap, so sluice can sit in a pipe:
//! `tcpdump -w - | sluice filter --in - --pass - | tshark -r -`.
//!
//! The standard streams are opened as `File`s on duplicates of descriptors 0
//! and 1: unbuffered by Rust (our own 1 MiB buffers do the batching; the
//! line buffering of `std::io::Stdout` would cut a binary stream at every
//! 0x0a byte) and of the same type as a named file, so nothing downstream
//! needs to know.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// Whether `path` is `-`.
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// `path` opened for reading, or standard input for `-`.
pub fn open(path: &Path) -> io::Result<File> {
    if is_stdio(path) {
        return Ok(File::from(io::stdin().as_fd().try_clone_to_owned()?));
    }
    File::open(path)
}

/// `path` created (truncated) for writing, or standard output for `-`.
pub fn create(path: &Path) -> io::Result<File> {
    if is_stdio(path) {
        return Ok(File::from(io::stdout().as_fd().try_clone_to_owned()?));
    }
    File::create(path)
}
