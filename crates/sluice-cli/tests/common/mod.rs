#![allow(dead_code)]

pub mod bridge;
pub mod fail2ban;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).output().expect("run sluice")
}

pub fn ok(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(out.status.success(), "sluice {args:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Exit code, standard output and standard error of `sluice ARGS`.
pub fn stderr_of(args: &[&str]) -> (i32, String, String) {
    let out = sluice(args);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
        eprintln!("SKIPPED: {name} not found on PATH; install it (apt-get install tshark) to run this check");
    }
    found
}

pub fn firehol_file(dir: &Path) -> PathBuf {
    let path = dir.join("firehol_level1.netset");
    std::fs::write(&path, sluice_rules::FIREHOL_LEVEL1).unwrap();
    path
}

/// Whether /usr/bin/python3 has scapy (same SLUICE_REQUIRE_TOOLS rule).
pub fn have_scapy() -> bool {
    let ok = Command::new("/usr/bin/python3").args(["-c", "import scapy"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("SLUICE_REQUIRE_TOOLS").is_some() {
            panic!("scapy is required (SLUICE_REQUIRE_TOOLS is set): apt-get install python3-scapy");
        }
        eprintln!("SKIPPED: scapy not found for /usr/bin/python3 (apt-get install python3-scapy)");
    }
    ok
}

/// A `sluice http-serve` child on 127.0.0.1 (port from its stderr).
pub struct Served {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

/// `http-serve` for `secs` seconds, 2 threads, JSON summary, with `extra` flags.
pub fn http_serve(secs: u32, extra: &[&str]) -> Served {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-serve", "--listen", "127.0.0.1:0", "--threads", "2", "--json", "--no-pin"])
        .args(["--duration", &secs.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("sluice: serving on ").unwrap_or_else(|| panic!("{line:?}")).parse().unwrap();
    Served { child, addr }
}

impl Served {
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Wait for `--duration` to end; the JSON summary.
    pub fn summary(self) -> serde_json::Value {
        let out = self.child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// A pcap of Ethernet frames, written by hand.
pub fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0];
    for f in frames {
        out.extend_from_slice(&[0u8; 8]);
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// The top-level keys docs/json.md lists under the heading that names
/// `command` (e.g. "sluice filter --json"): the backticked names before the
/// colon of each bullet.
pub fn documented_keys(command: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/json.md")).unwrap();
    let heading = format!("## `{command}`");
    let section = doc.split("\n## ").find(|s| format!("## {s}").starts_with(&heading)).expect("a section");
    let keys: Vec<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split_once(':').map(|(names, _)| names))
        .flat_map(|names| names.split(", "))
        .map(|k| k.trim().trim_matches('`').to_owned())
        .collect();
    assert!(!keys.is_empty(), "no keys under {heading}");
    keys
}

/// Keys docs/json.md lists that a flag adds: `samples` (`--sample-drops`,
/// `--log-drops`), `would_drop` (`--dry-run`).
pub const FLAG_KEYS: &[&str] = &["samples", "would_drop"];

/// Every key docs/json.md lists for `command` is in `v` (but those a flag
/// adds, [`FLAG_KEYS`]).
pub fn assert_documented_keys(command: &str, v: &serde_json::Value) {
    let keys = documented_keys(command);
    let missing: Vec<&String> =
        keys.iter().filter(|k| v.get(k.as_str()).is_none() && !FLAG_KEYS.contains(&k.as_str())).collect();
    assert!(missing.is_empty(), "`{command}` prints no {missing:?} (docs/json.md lists them): {v}");
}

/// The comment and interface name of every frame of a drop-sample pcapng,
/// as tshark reads them.
pub fn sample_comments(path: &Path) -> Vec<(String, String)> {
    let out = Command::new("tshark")
        .args([
            "-n",
            "-r",
            p(path),
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.comment",
            "-e",
            "frame.interface_name",
        ])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark -r {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (c, i) = l.split_once('\t').unwrap_or((l, ""));
            (c.to_owned(), i.to_owned())
        })
        .collect()
}

/// A sample comment's `key=value` (a quoted value unquoted).
pub fn comment_field(comment: &str, key: &str) -> String {
    let at = comment.find(&format!(" {key}=")).unwrap_or_else(|| panic!("no {key} in {comment}")) + key.len() + 2;
    let rest = &comment[at..];
    match rest.strip_prefix('"') {
        Some(q) => q[..q.find('"').expect("closing quote")].to_owned(),
        None => rest.split(' ').next().unwrap().to_owned(),
    }
}

/// Every `reason=rule` comment names a line of `rules` whose statement is the comment's rule text.
pub fn assert_comments_name_rule_lines(comments: &[(String, String)], rules: &str) {
    for (c, _) in comments {
        assert!(c.starts_with("sluice drop reason="), "{c}");
        if comment_field(c, "reason") != "rule" {
            continue;
        }
        let line: usize = comment_field(c, "rule_line").parse().unwrap_or_else(|_| panic!("{c}"));
        let text = comment_field(c, "rule");
        let written = rules.lines().nth(line - 1).unwrap_or_else(|| panic!("no line {line}: {c}"));
        assert!(written.trim().starts_with(&text), "line {line} is `{written}`, the comment says `{text}`");
    }
}

/// Whether `iface` has an XDP program attached (as `ip -d link` shows it).
pub fn xdp_attached(iface: &str) -> bool {
    let out = std::process::Command::new("ip").args(["-d", "link", "show", "dev", iface]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Whether neither interface has an XDP program within 2 s: closing the
/// last descriptor of a BPF link detaches its program from a kernel work
/// queue, not at once (`bpf_link_put` defers the release), so a loaded
/// machine can show it attached for a moment after the run.
pub fn xdp_detached(ifaces: &[&str]) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if !ifaces.iter().any(|i| xdp_attached(i)) {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
