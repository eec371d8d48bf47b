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

/// Run `sluice-bench ARGS`.
pub fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(args)
        .env("SLUICE_BIN", sluice_bin())
        .output()
        .expect("run sluice-bench")
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
