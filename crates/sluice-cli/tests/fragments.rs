//! Reassembly end to end, on captures crafted by scapy: shuffled and
//! duplicated fragments, the Novak overlap pattern, IPv6 overlaps and atomic
//! fragments, incomplete datagrams, and a flood that must stay in bounds.

mod common;
use common::*;
use serde_json::Value;
use sluice_pcap::CaptureReader;
use std::path::Path;
use std::process::Command;

fn craft(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scapy/fragments.py");
    let out = Command::new("/usr/bin/python3").arg(&script).arg(dir).output().unwrap();
    assert!(out.status.success(), "scapy: {}", String::from_utf8_lossy(&out.stderr));
}

fn filter(input: &Path, extra: &[&str]) -> (Value, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = input.parent().unwrap();
    let (pass, drop) = (dir.join("pass.pcap"), dir.join("drop.pcap"));
    let mut args = vec!["filter", "--in", p(input), "--pass", p(&pass), "--drop", p(&drop), "--json"];
    args.extend_from_slice(extra);
    let v: Value = serde_json::from_str(&ok(&args)).unwrap();
    (v, frames(&pass), frames(&drop))
}

fn frames(path: &Path) -> Vec<Vec<u8>> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        v.push(rec.data.to_vec());
    }
    v
}

#[test]
fn scapy_crafted_fragment_cases() {
    if !have_scapy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    craft(dir.path());

    // Shuffled and duplicated: all pass, the fragments written together
    // where the datagram completes, between the two plain packets.
    let input = frames(&dir.path().join("valid.pcap"));
    let (v, pass, drop) = filter(&dir.path().join("valid.pcap"), &[]);
    assert_eq!(v["reassembly"]["completed"], 1, "{v}");
    assert_eq!(v["reassembly"]["duplicates"], 1);
    assert!(drop.is_empty());
    assert_eq!(pass.len(), input.len());
    assert_eq!(pass.first(), input.first());
    assert_eq!(pass.last(), input.last());

    // Novak: every fragment dropped, even with no rules at all; the plain
    // packets pass.
    let (v, pass, drop) = filter(&dir.path().join("novak.pcap"), &[]);
    assert_eq!(drop.len(), 6, "{v}");
    assert_eq!(pass.len(), 2);
    assert_eq!(v["dropped_fragments"], 6);
    assert_eq!(v["reassembly"]["completed"], 0);

    // IPv6: the overlapping datagram is dropped whole; the atomic fragment
    // is judged on its own and passes.
    let (v, pass, drop) = filter(&dir.path().join("v6.pcap"), &[]);
    assert_eq!(drop.len(), 3, "{v}");
    assert_eq!(pass.len(), 1);
    assert_eq!(v["reassembly"]["atomic"], 1);
    assert!(v["reassembly"]["overlaps"].as_u64().unwrap() >= 1);

    // Incomplete datagrams: dropped at the end of input, or passed on request.
    let (v, pass, drop) = filter(&dir.path().join("incomplete.pcap"), &[]);
    assert_eq!((pass.len(), drop.len()), (1, 5), "{v}");
    assert_eq!(v["reassembly"]["incomplete"], 5);
    let (_, pass, drop) = filter(&dir.path().join("incomplete.pcap"), &["--incomplete", "pass"]);
    assert_eq!((pass.len(), drop.len()), (6, 0));

    // A flood of 3000 incomplete datagrams with room for 100: never more
    // than 100 held (100 x 512 bytes), the rest evicted, nothing lost.
    let (v, pass, drop) = filter(&dir.path().join("flood.pcap"), &["--frag-max-datagrams", "100"]);
    assert_eq!(pass.len() + drop.len(), 3000);
    assert_eq!(v["reassembly"]["evicted"], 2900, "{v}");
    assert!(v["reassembly"]["peak_bytes"].as_u64().unwrap() <= 100 * 512, "{v}");
    // And the same through two workers: the same verdicts, the same order.
    let (_, pass2, drop2) = filter(&dir.path().join("flood.pcap"), &["--frag-max-datagrams", "100", "--workers", "2"]);
    assert!(pass2 == pass && drop2 == drop);
}

#[test]
fn generated_shuffled_and_duplicated_fragments_reassemble() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("g.pcap");
    let gen: Value = serde_json::from_str(&ok(&[
        "gen",
        "--out",
        p(&capture),
        "--count",
        "40000",
        "--ipv6",
        "0.4",
        "--frag",
        "0.3",
        "--frag-shuffle",
        "--frag-dup",
        "0.5",
        "--listed",
        "0.1",
        "--qinq",
        "0.1",
        "--json",
    ]))
    .unwrap();
    assert!(gen["duplicated_fragments"].as_u64().unwrap() > 100, "{gen}");
    let list = firehol_file(dir.path());
    for workers in ["1", "2"] {
        let v: Value = serde_json::from_str(&ok(&[
            "filter",
            "--in",
            p(&capture),
            "--drop-any",
            p(&list),
            "--json",
            "--workers",
            workers,
        ]))
        .unwrap();
        let r = &v["reassembly"];
        assert_eq!(r["completed"], gen["fragmented_datagrams"], "{v}");
        assert_eq!(r["duplicates"], gen["duplicated_fragments"]);
        assert_eq!(r["overlaps"], 0);
        assert_eq!(r["incomplete"], 0);
        assert_eq!(v["dropped_fragments"], 0);
        // Every fragment of a listed datagram has a listed source: the drop
        // count is still exactly the generator's.
        assert_eq!(v["dropped"], gen["listed"], "{v}");
        assert_eq!(v["packets"], 40_000);
    }
}
