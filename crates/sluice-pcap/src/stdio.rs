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

/// Refuse outputs that would overwrite the input or each other before it is
/// read: `outputs` are (flag, path) pairs, e.g. `("--pass", Some(p))`.
pub fn check_distinct(input: &Path, outputs: &[(&str, Option<&Path>)]) -> Result<(), String> {
    let same = |a: &Path, b: &Path| a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    let given: Vec<(&str, &Path)> = outputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p))).collect();
    for (i, &(flag, out)) in given.iter().enumerate() {
        // `-` in and out are two streams.
        if !is_stdio(out) && same(out, input) {
            return Err(format!("{flag} {} is the input file; choose another path", out.display()));
        }
        for &(other, b) in &given[i + 1..] {
            if is_stdio(out) && is_stdio(b) {
                return Err(format!("{flag} - and {other} - both name standard output; choose a file for one of them"));
            }
            if same(out, b) {
                return Err(format!("{flag} and {other} name the same file {}", out.display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_must_differ_from_the_input_and_each_other() {
        let (i, a, b) = (Path::new("in.pcap"), Path::new("a.pcap"), Path::new("b.pcap"));
        assert_eq!(check_distinct(i, &[("--pass", Some(a)), ("--drop", Some(b)), ("--x", None)]), Ok(()));
        assert!(check_distinct(i, &[("--pass", Some(i))]).unwrap_err().contains("--pass in.pcap is the input"));
        let e = check_distinct(i, &[("--pass", Some(a)), ("--sample-drops", Some(a))]).unwrap_err();
        assert!(e.contains("--pass and --sample-drops name the same file"), "{e}");
        let dash = Path::new("-");
        let e = check_distinct(dash, &[("--pass", Some(dash)), ("--drop", Some(dash))]).unwrap_err();
        assert!(e.contains("both name standard output"), "{e}");
        assert_eq!(check_distinct(dash, &[("--pass", Some(dash))]), Ok(()));
    }
}
