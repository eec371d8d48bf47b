#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `sluice` binary the file, HTTP and guard experiments run: the one in
/// this build's target directory, built first when this package's tests run
/// alone (`cargo test -p sluice-bench` builds only this package's binaries).
fn sluice_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bench = Path::new(env!("CARGO_BIN_EXE_sluice-bench"));
        let bin = bench.with_file_name("sluice");
        if !bin.is_file() {
            let release = bench.parent().and_then(Path::file_name).is_some_and(|d| d == "release");
            let mut build = Command::new(env!("CARGO"));
            build.args(["build", "-p", "sluice-cli", "--bin", "sluice"]);
            if release {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build for the sluice binary");
            assert!(status.success(), "building the sluice binary failed");
        }
        bin
    })
}

/// Run `sluice-bench ARGS`. Its first line, the machine it ran on (a JSON
/// record, or `machine: ...` for a person), is checked and taken off, so
/// the tests read the experiment's own lines.
pub fn bench(args: &[&str]) -> Output {
    let mut out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(args)
        .env("SLUICE_BIN", sluice_bin())
        .output()
        .expect("run sluice-bench");
    if out.status.success() {
        let text = String::from_utf8(out.stdout).expect("UTF-8 output");
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        if let Some(line) = first.strip_prefix("machine: ") {
            assert!(line.contains(" CPUs") && line.contains("kernel "), "machine line: {line}");
        } else {
            let v: serde_json::Value =
                serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: first line {first}"));
            assert_eq!(v["scenario"], "machine", "the first record is the machine: {first}");
            assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1 && v["machine"]["kernel"].is_string(), "{first}");
            for key in ["cpu_model", "caches", "llc_bytes", "governor", "turbo", "pmu", "virtualized"] {
                assert!(v["machine"].get(key).is_some(), "machine record without {key}: {first}");
            }
        }
        out.stdout = rest.as_bytes().to_vec();
    }
    out
}

/// Run `sluice-bench ARGS`, which must succeed; its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "sluice-bench {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Whether an external tool is on PATH. When `SLUICE_REQUIRE_TOOLS=1` (CI), a
/// missing tool fails the test instead of skipping it.
pub fn have_tool(name: &str) -> bool {
    let found = Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("SLUICE_REQUIRE_TOOLS").is_some() {
            panic!("{name} is required (SLUICE_REQUIRE_TOOLS is set) but was not found");
        }
        eprintln!("SKIPPED: {name} not found on PATH");
    }
    found
}
