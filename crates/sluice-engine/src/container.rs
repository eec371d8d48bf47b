//! A file of named byte sections behind a versioned, checksummed header:
//! what `sluice compile` writes and `filter`/`bridge` load. It knows
//! nothing of what the sections hold, and does no I/O: the CLI reads or
//! maps the file and hands the bytes here.
//!
//! # Layout (format 1)
//!
//! All integers little-endian.
//!
//! ```text
//! header, 64 bytes:
//!   0  [u8; 8]  magic "SLUICE\0R"
//!   8  u32      format version (1)
//!   12 u32      number of sections n
//!   16 u64      length of the whole file
//!   24 u64      checksum: XXH3-64 (seed 0) of bytes 32.. of the file, with
//!               the XXH3-64 of bytes 0..24 as its seed, so it covers every
//!               byte but itself
//!   32 ..64     zero
//! section table, n entries of 32 bytes from offset 64:
//!   0  [u8; 16] name: UTF-8, not empty, zero-padded
//!   16 u64      offset of the section in the file
//!   24 u64      length of the section
//! sections, in table order: each at the first multiple of 4096 after the
//! table or the section before (so each can be mapped in place), zeros in
//! between; the file ends where the last section (or the table) ends.
//! ```
//!
//! Every byte is accounted for, so [`encode`] of what [`decode`] returns
//! gives back the same file.

use sluice_sets::persist::{get32, get64};
use std::collections::HashSet;

/// The first bytes of every compiled file.
pub const MAGIC: [u8; 8] = *b"SLUICE\0R";
/// The format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Where sections start: a page, so a section can be mapped on its own.
pub const SECTION_ALIGN: usize = 4096;
/// Longest section name, in bytes.
pub const MAX_NAME: usize = 16;

const HEADER_LEN: usize = 64;
const ENTRY_LEN: usize = 32;
const CHECKSUM_AT: usize = 24;

/// One named section: on encode, what to write; on decode, borrowed from
/// the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// Why bytes are not a compiled file this build can read. The messages are
/// written for the person who named the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    #[error("not a sluice compiled rule file (magic bytes are {found}, expected {expected})")]
    NotASluiceFile { found: String, expected: String },
    #[error("made by a different sluice version: file format {found}, this build reads {supported}")]
    Version { found: u32, supported: u32 },
    #[error("truncated: {found} bytes, shorter than the {HEADER_LEN}-byte header")]
    TruncatedHeader { found: u64 },
    #[error("truncated: header says {expected} bytes, file has {found}")]
    Truncated { expected: u64, found: u64 },
    #[error("damaged: header says {expected} bytes, file has {found} (data after the end)")]
    TooLong { expected: u64, found: u64 },
    #[error("damaged: checksum mismatch (stored {stored:016x}, computed {computed:016x})")]
    Checksum { stored: u64, computed: u64 },
    #[error("damaged: bad section table: {0}")]
    BadSectionTable(String),
}

/// The checksum of `file` (whole, header included).
///
/// XXH3-64 (the `xxhash-rust` crate): it hashes at memory speed (~10 GB/s
/// with the SSE2 every x86_64 has), so checking 100 MB of tables costs
/// milliseconds, and 64 bits leave no real chance that damage goes unseen.
/// It guards against accidents (disk, copy, truncation), not against a
/// forger, who could recompute it: loading still validates every structure.
/// The crate is pure Rust with no dependencies and widely used.
fn checksum(file: &[u8]) -> u64 {
    let seed = xxhash_rust::xxh3::xxh3_64(&file[..CHECKSUM_AT]);
    xxhash_rust::xxh3::xxh3_64_with_seed(&file[CHECKSUM_AT + 8..], seed)
}

fn escaped(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

/// Where each section goes: (offset, end) in the file, and the file's length.
fn layout(count: usize, lengths: impl Iterator<Item = u64>) -> Option<(Vec<(u64, u64)>, u64)> {
    let mut end = u64::try_from(count).ok()?.checked_mul(ENTRY_LEN as u64)?.checked_add(HEADER_LEN as u64)?;
    let mut at = Vec::with_capacity(count);
    for len in lengths {
        let start = end.checked_next_multiple_of(SECTION_ALIGN as u64)?;
        end = start.checked_add(len)?;
        at.push((start, end));
    }
    Some((at, end))
}

/// The file holding `sections`, in order.
///
/// # Panics
/// If a name is empty, longer than [`MAX_NAME`] bytes, holds a NUL, or is
/// used twice: names are the caller's constants, so that is a bug.
pub fn encode(sections: &[Section<'_>]) -> Vec<u8> {
    let mut seen = HashSet::new();
    for s in sections {
        assert!(
            !s.name.is_empty() && s.name.len() <= MAX_NAME && !s.name.contains('\0'),
            "section name {:?}: 1 to {MAX_NAME} bytes, no NUL",
            s.name
        );
        assert!(seen.insert(s.name), "section {:?} twice", s.name);
    }
    let (at, total) =
        layout(sections.len(), sections.iter().map(|s| s.bytes.len() as u64)).expect("file size fits u64");
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
    out.resize(HEADER_LEN, 0); // checksum (filled in last) and reserved
    for (s, &(start, _)) in sections.iter().zip(&at) {
        let mut name = [0u8; MAX_NAME];
        name[..s.name.len()].copy_from_slice(s.name.as_bytes());
        out.extend_from_slice(&name);
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&(s.bytes.len() as u64).to_le_bytes());
    }
    for (s, &(start, _)) in sections.iter().zip(&at) {
        out.resize(start as usize, 0);
        out.extend_from_slice(s.bytes);
    }
    debug_assert_eq!(out.len() as u64, total);
    let sum = checksum(&out);
    out[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    out
}

/// The sections of `file`, borrowed from it, after checking the magic
/// bytes, the version, the length, the checksum and the section table.
/// Never panics, and allocates only the returned list (bounded by the
/// file's length).
pub fn decode(file: &[u8]) -> Result<Vec<Section<'_>>, ContainerError> {
    let found = file.len() as u64;
    let head = &file[..file.len().min(MAGIC.len())];
    if file.is_empty() || head != &MAGIC[..head.len()] {
        let found = if file.is_empty() { "none (the file is empty)".to_string() } else { escaped(head) };
        return Err(ContainerError::NotASluiceFile { found, expected: escaped(&MAGIC) });
    }
    if file.len() < HEADER_LEN {
        return Err(ContainerError::TruncatedHeader { found });
    }
    // The version first: a newer file should say so, not look damaged.
    let version = get32(file, 8);
    if version != FORMAT_VERSION {
        return Err(ContainerError::Version { found: version, supported: FORMAT_VERSION });
    }
    let expected = get64(file, 16);
    if expected > found {
        return Err(ContainerError::Truncated { expected, found });
    }
    if expected < found {
        return Err(ContainerError::TooLong { expected, found });
    }
    let (stored, computed) = (get64(file, CHECKSUM_AT), checksum(file));
    if stored != computed {
        return Err(ContainerError::Checksum { stored, computed });
    }
    // Past the checksum the bytes are as written, unless written by
    // something else: check the table anyway, since a bad offset would
    // otherwise be an out-of-bounds slice.
    let bad = |why: String| Err(ContainerError::BadSectionTable(why));
    if file[32..HEADER_LEN].iter().any(|&b| b != 0) {
        return bad("reserved header bytes are not zero".into());
    }
    let count = get32(file, 12) as u64;
    if count > (found - HEADER_LEN as u64) / ENTRY_LEN as u64 {
        return bad(format!("{count} sections do not fit in {found} bytes"));
    }
    let count = count as usize;
    let table = &file[HEADER_LEN..HEADER_LEN + count * ENTRY_LEN];
    let lengths = table.chunks_exact(ENTRY_LEN).map(|e| get64(e, 24));
    let Some((at, total)) = layout(count, lengths) else {
        return bad("section lengths overflow".into());
    };
    if total != found {
        return bad(format!("sections end at byte {total}, the file has {found}"));
    }
    let mut sections = Vec::with_capacity(count);
    let mut prev_end = HEADER_LEN + count * ENTRY_LEN;
    for (i, (e, &(start, end))) in table.chunks_exact(ENTRY_LEN).zip(&at).enumerate() {
        let raw = &e[..MAX_NAME];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        let name = match std::str::from_utf8(&raw[..len]) {
            Ok(n) if !n.is_empty() && raw[len..].iter().all(|&b| b == 0) => n,
            _ => return bad(format!("section {i} has a bad name {}", escaped(raw))),
        };
        if sections.iter().any(|s: &Section<'_>| s.name == name) {
            return bad(format!("section {name:?} appears twice"));
        }
        if get64(e, 16) != start {
            return bad(format!("section {name:?} at offset {}, expected {start}", get64(e, 16)));
        }
        // start <= end == at most `total` == the file's length: in bounds.
        let (start, end) = (start as usize, end as usize);
        if file[prev_end..start].iter().any(|&b| b != 0) {
            return bad(format!("padding before section {name:?} is not zero"));
        }
        sections.push(Section { name, bytes: &file[start..end] });
        prev_end = end;
    }
    Ok(sections)
}

/// The bytes of the section called `name`, if there is one.
pub fn find<'a>(sections: &[Section<'a>], name: &str) -> Option<&'a [u8]> {
    sections.iter().find(|s| s.name == name).map(|s| s.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        let big: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        encode(&[
            Section { name: "meta", bytes: b"{\"rules\": 3}" },
            Section { name: "empty", bytes: b"" },
            Section { name: "sixteen-bytes-ab", bytes: &big },
            Section { name: "tail", bytes: &[1, 2, 3] },
        ])
    }

    #[test]
    fn round_trip_and_layout() {
        let file = sample();
        let s = decode(&file).unwrap();
        assert_eq!(s.iter().map(|s| s.name).collect::<Vec<_>>(), ["meta", "empty", "sixteen-bytes-ab", "tail"]);
        assert_eq!(find(&s, "meta"), Some(&b"{\"rules\": 3}"[..]));
        assert_eq!(find(&s, "tail"), Some(&[1u8, 2, 3][..]));
        assert_eq!(find(&s, "sixteen-bytes-ab").unwrap().len(), 10_000);
        assert_eq!(find(&s, "nope"), None);
        for sec in &s {
            let off = sec.bytes.as_ptr() as usize - file.as_ptr() as usize;
            assert_eq!(off % SECTION_ALIGN, 0, "{}", sec.name);
        }
        assert_eq!(encode(&s), file, "encode(decode(f)) == f");
        assert_eq!(&file[..8], b"SLUICE\0R");
        // No sections at all is a valid (if useless) file.
        let empty = encode(&[]);
        assert_eq!(empty.len(), HEADER_LEN);
        assert!(decode(&empty).unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn round_trips(sections in proptest::collection::vec(("[a-z0-9.]{1,16}", proptest::collection::vec(any::<u8>(), 0..9000)), 0..5)) {
            let mut names = HashSet::new();
            let sections: Vec<Section<'_>> = sections.iter()
                .filter(|(n, _)| names.insert(n.clone()))
                .map(|(n, b)| Section { name: n, bytes: b }).collect();
            let file = encode(&sections);
            prop_assert_eq!(decode(&file).unwrap(), sections);
        }

        #[test]
        fn random_damage_is_refused(flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..5)) {
            let mut file = sample();
            let n = file.len();
            // Distinct positions, so no two flips cancel.
            let mut at = HashSet::new();
            for (i, x) in flips {
                if at.insert(i % n) {
                    file[i % n] ^= x;
                }
            }
            prop_assert!(decode(&file).is_err());
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
            let mut b = bytes;
            if magic && b.len() >= 12 {
                b[..8].copy_from_slice(&MAGIC);
                b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            }
            let _ = decode(&b);
        }
    }

    #[test]
    fn every_byte_flip_at_sampled_positions_is_refused() {
        let mut file = sample();
        // Every byte of the header and section table, then a sample of the
        // padding and sections, and the last bytes.
        let positions = (0..HEADER_LEN + 4 * ENTRY_LEN)
            .chain((HEADER_LEN + 4 * ENTRY_LEN..file.len()).step_by(97))
            .chain(file.len() - 16..file.len());
        for i in positions {
            for x in [0x01, 0x80, 0xff] {
                file[i] ^= x;
                assert!(decode(&file).is_err(), "flip {x:#x} at {i} accepted");
                file[i] ^= x;
            }
        }
        assert!(decode(&file).is_ok());
    }

    #[test]
    fn every_truncation_is_refused() {
        let file = sample();
        for n in 0..file.len() {
            let err = decode(&file[..n]).expect_err("truncated file accepted");
            let msg = err.to_string();
            match n {
                0 => assert!(matches!(err, ContainerError::NotASluiceFile { .. }), "{msg}"),
                n if n < HEADER_LEN => assert!(matches!(err, ContainerError::TruncatedHeader { .. }), "{msg}"),
                _ => assert_eq!(msg, format!("truncated: header says {} bytes, file has {n}", file.len())),
            }
        }
    }

    #[test]
    fn foreign_files_are_not_sluice_files() {
        let pcap = b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\x01\x00\x00\x00";
        let pcapng = b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a";
        for bytes in [&pcap[..], pcapng, b"", b"# firehol level1\n1.2.3.0/24\n", b"SLUICE", b"SLUICE\0X........"] {
            let err = decode(bytes).unwrap_err();
            assert!(matches!(err, ContainerError::NotASluiceFile { .. }) || bytes == b"SLUICE", "{err}");
        }
        let msg = decode(pcap).unwrap_err().to_string();
        assert_eq!(
            msg,
            r#"not a sluice compiled rule file (magic bytes are "\xd4\xc3\xb2\xa1\x02\x00\x04\x00", expected "SLUICE\x00R")"#
        );
        assert!(decode(b"").unwrap_err().to_string().contains("the file is empty"));
        // A prefix of the magic is a truncated file, not a foreign one.
        assert!(matches!(decode(b"SLUICE").unwrap_err(), ContainerError::TruncatedHeader { found: 6 }));
    }

    #[test]
    fn errors_read_well() {
        let file = sample();
        let mut v2 = file.clone();
        v2[8] = 2;
        assert_eq!(
            decode(&v2).unwrap_err().to_string(),
            "made by a different sluice version: file format 2, this build reads 1"
        );
        let mut longer = file.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().to_string().starts_with("damaged: header says"));
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let msg = decode(&flipped).unwrap_err().to_string();
        assert!(msg.starts_with("damaged: checksum mismatch (stored "), "{msg}");
        // A table that is wrong but checksummed (written by something else).
        let mut forged = file.clone();
        forged[HEADER_LEN + 16] += 1; // first section's offset
        let sum = checksum(&forged);
        forged[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(
            decode(&forged).unwrap_err().to_string(),
            "damaged: bad section table: section \"meta\" at offset 4097, expected 4096"
        );
    }

    #[test]
    #[should_panic(expected = "section name")]
    fn long_names_are_a_bug() {
        encode(&[Section { name: "seventeen-bytes-x", bytes: b"" }]);
    }
}
