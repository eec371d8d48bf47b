//! `-` as standard input and output: sluice in a pipe between tcpdump-like
//! tools gives exactly what the same run through files gives, and says what
//! it did on stderr only.

mod common;
use common::*;
use std::process::{Command, Stdio};

fn sluice_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// `sluice gen --out - | sluice filter --in - --drop-any LIST --pass - | tcpdump -r -`
/// against the same three steps through files.
#[test]
fn gen_filter_tcpdump_pipe_matches_the_file_run() {
    if !have_tool("tcpdump") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let list = firehol_file(dir.path());
    let gen_args = ["gen", "--count", "30000", "--seed", "5", "--listed", "0.1", "--frag", "0.05", "--size", "imix"];

    // Through files.
    let file = dir.path().join("g.pcap");
    ok(&[&gen_args[..], &["--out", p(&file)]].concat());
    let pass = dir.path().join("pass.pcap");
    ok(&["filter", "--in", p(&file), "--drop-any", p(&list), "--pass", p(&pass)]);
    let tcpdump = |input: Stdio| {
        let out =
            Command::new("tcpdump").args(["-r", "-", "-nn", "-tt", "-v"]).stdin(input).output().expect("run tcpdump");
        assert!(out.status.success(), "tcpdump: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let expected = tcpdump(Stdio::from(std::fs::File::open(&pass).unwrap()));
    assert!(expected.lines().count() > 20_000, "{} lines", expected.lines().count());

    // Through a pipe: gen | filter | tcpdump.
    let mut gen =
        sluice_cmd().args(gen_args).args(["--out", "-"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut filter = sluice_cmd()
        .args(["filter", "--in", "-", "--drop-any", p(&list), "--pass", "-", "--json"])
        .stdin(gen.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let piped = tcpdump(Stdio::from(filter.stdout.take().unwrap()));
    let filter_out = filter.wait_with_output().unwrap();
    let gen_out = gen.wait_with_output().unwrap();
    assert!(gen_out.status.success() && filter_out.status.success(), "{filter_out:?}");
    assert_eq!(piped, expected, "the pipe and the files disagree");

    // The reports went to stderr, and they say the same as the file run.
    assert!(String::from_utf8_lossy(&gen_out.stderr).contains("wrote 30000 packets"));
    let summary: serde_json::Value = serde_json::from_slice(&filter_out.stderr).expect("the JSON summary on stderr");
    assert_eq!(summary["packets"], 30000);
    assert_eq!(summary["input"], "-");
}

/// The filter's stdout is byte for byte the file it writes, and `decode --in -`
/// reads what `decode --in FILE` reads.
#[test]
fn stdin_and_stdout_carry_the_same_bytes_as_files() {
    let dir = tempfile::tempdir().unwrap();
    let list = firehol_file(dir.path());
    let file = dir.path().join("g.pcap");
    ok(&["gen", "--count", "5000", "--listed", "0.2", "--ipv6", "0.3", "--out", p(&file)]);
    let drop = dir.path().join("drop.pcap");
    ok(&["filter", "--in", p(&file), "--drop-any", p(&list), "--drop", p(&drop)]);
    let out = sluice_cmd()
        .args(["filter", "--in", "-", "--drop-any", p(&list), "--drop", "-"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, std::fs::read(&drop).unwrap(), "--drop - writes the bytes --drop FILE writes");
    assert!(String::from_utf8_lossy(&out.stderr).contains("dropped"), "the text summary is on stderr");

    let decoded = ok(&["decode", "--in", p(&file)]);
    let out = sluice_cmd().args(["decode", "--in", "-"]).stdin(std::fs::File::open(&file).unwrap()).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), decoded);
}

#[test]
fn both_outputs_on_stdout_are_refused_and_errors_name_their_cause_once() {
    let out = sluice(&["filter", "--in", "-", "--pass", "-", "--drop", "-"]);
    assert_eq!(out.status.code(), Some(2), "a wrong command line");
    assert!(String::from_utf8_lossy(&out.stderr).contains("both name standard output"));
    let out = sluice(&["filter", "--in", "/nonexistent/x.pcap"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}
