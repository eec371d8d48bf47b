//! Debian's real fail2ban-server over a private copy of /etc/fail2ban,
//! banning through dist/fail2ban/action.d/sluice.conf into the set `f2b`
//! of a product's control socket (a bridge's or a shield's).

use super::p;
use serde_json::Value;
use sluice_testkit::live::{self, live_or_skip};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const ACTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/fail2ban/action.d/sluice.conf");

pub fn tool_or_skip(test: &str, tool: &str) -> bool {
    if !live_or_skip(test) {
        return false;
    }
    if Command::new(tool).arg("--version").output().is_err() {
        assert!(std::env::var("SLUICE_REQUIRE_TOOLS").is_err(), "{tool} is missing (apt-get install fail2ban)");
        live::skipped(&format!("{test}: {tool} is missing"));
        return false;
    }
    true
}

/// A fail2ban-server in the foreground over a private config directory,
/// killed on drop (no unbans run: the test's own product goes with it).
pub struct Fail2ban {
    child: Child,
    sock: PathBuf,
    log: PathBuf,
}

impl Drop for Fail2ban {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fail2ban {
    /// `jails`: (name, log file, bantime), each banning by the action into
    /// the set `f2b` of the bridge at `control`.
    pub fn start(dir: &Path, control: &Path, jails: &[(&str, &Path, i64)]) -> Fail2ban {
        let conf = dir.join("fail2ban");
        let st = Command::new("cp").args(["-r", "/etc/fail2ban", p(&conf)]).status().unwrap();
        assert!(st.success(), "cp -r /etc/fail2ban");
        std::fs::copy(ACTION, conf.join("action.d/sluice.conf")).unwrap();
        // The lines of an sshd log, without a date (fail2ban takes the time
        // it reads them).
        std::fs::write(
            conf.join("filter.d/sluice-test.conf"),
            "[Definition]\nfailregex = ^Failed password for \\S+ from <HOST> port \\d+ ssh2$\ndatepattern = {NONE}\n",
        )
        .unwrap();
        let log = dir.join("fail2ban.log");
        std::fs::write(
            conf.join("fail2ban.local"),
            format!("[DEFAULT]\nloglevel = INFO\nlogtarget = {}\ndbfile = :memory:\n", p(&log)),
        )
        .unwrap();
        // Debian's jail.d enables sshd over the system's log: off here.
        let mut local = "[sshd]\nenabled = false\n".to_owned();
        for (name, file, bantime) in jails {
            std::fs::write(file, "").unwrap();
            local += &format!(
                "\n[{name}]\nenabled = true\nfilter = sluice-test\nlogpath = {}\nbackend = polling\n\
                 maxretry = 3\nfindtime = 600\nbantime = {bantime}\n\
                 banaction = sluice[socket=\"{}\", set=\"f2b\", sluice=\"{SLUICE}\"]\n",
                p(file),
                p(control)
            );
        }
        std::fs::write(conf.join("jail.local"), local).unwrap();
        let sock = dir.join("f2b.sock");
        let out = std::fs::File::create(dir.join("fail2ban.out")).unwrap();
        let child = Command::new("fail2ban-server")
            .args(["-f", "-x", "-s", p(&sock), "-p", p(&dir.join("f2b.pid")), "-c", p(&conf)])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("run fail2ban-server");
        let mut f = Fail2ban { child, sock, log };
        for (name, _, _) in jails {
            let end = Instant::now() + Duration::from_secs(30);
            while !f.client(&["status", name]).status.success() {
                assert!(f.child.try_wait().unwrap().is_none(), "fail2ban-server exited: {}", f.logs(dir));
                assert!(Instant::now() < end, "jail {name} did not start: {}", f.logs(dir));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        f
    }

    pub fn client(&self, args: &[&str]) -> std::process::Output {
        Command::new("fail2ban-client").args(["-s", p(&self.sock)]).args(args).output().unwrap()
    }

    pub fn unban(&self, jail: &str, ip: &str) {
        let out = self.client(&["set", jail, "unbanip", ip]);
        assert!(out.status.success(), "unbanip {ip}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log and its own output, for a failure's message.
    pub fn logs(&self, dir: &Path) -> String {
        let out = std::fs::read_to_string(dir.join("fail2ban.out")).unwrap_or_default();
        format!("\n--- fail2ban.log:\n{}\n--- fail2ban-server output:\n{out}", self.log_text())
    }
}

/// Three failed logins of `ip` in `file`.
pub fn fail_logins(file: &Path, ip: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    for port in [40001, 40002, 40003] {
        writeln!(f, "Failed password for root from {ip} port {port} ssh2").unwrap();
    }
}

/// The set's elements: (element, seconds left or None).
pub fn elements(sock: &Path) -> Vec<(String, Option<u64>)> {
    let out = Command::new(SLUICE).args(["ctl", "--json", "--socket", p(sock), "list", "f2b"]).output().unwrap();
    assert!(out.status.success(), "ctl list: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["element"].as_str().unwrap().to_owned(), e["expires_in"].as_u64()))
        .collect()
}
