//! BGP peers for the tests, on loopback: Debian's `gobgpd` (passive, its
//! API on a port of its own, routes added with the `gobgp` CLI), BIRD 2
//! and ExaBGP (routes from their configuration). Each is killed (and
//! reaped) on drop. A missing daemon is a skip, or a failure under
//! `SLUICE_REQUIRE_TOOLS` (CI).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on loopback (free when asked).
pub fn free_port() -> u16 {
    try_free_port().unwrap()
}

/// The same, an error rather than a panic.
pub fn try_free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether `tool` runs (`TOOL --version`); when not, a failure under
/// `SLUICE_REQUIRE_TOOLS` ("TOOL is missing (apt-get install PACKAGES)"),
/// else `skipped: TOOL is missing` on stderr and false.
pub fn have(tool: &str, packages: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok();
    if !ok {
        assert!(std::env::var("SLUICE_REQUIRE_TOOLS").is_err(), "{tool} is missing (apt-get install {packages})");
        eprintln!("skipped: {tool} is missing");
    }
    ok
}

/// A child process killed on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a gobgpd is configured with: AS 65001, router id 192.0.2.1, on
/// 127.0.0.1:`port`, one passive neighbor 127.0.0.1 of AS 65002.
#[derive(Clone, Debug)]
pub struct GobgpdConfig {
    /// Its BGP port.
    pub port: u16,
    /// The neighbor's address families (`ipv4-flowspec`, `ipv4-unicast`...).
    pub families: Vec<&'static str>,
    /// Graceful restart announced with this restart time.
    pub restart: Option<u16>,
    /// TCP MD5 required with this password.
    pub password: Option<String>,
}

impl GobgpdConfig {
    /// On `port`: IPv4 FlowSpec and unicast, no graceful restart, no MD5.
    pub fn on(port: u16) -> GobgpdConfig {
        GobgpdConfig { port, families: vec!["ipv4-flowspec", "ipv4-unicast"], restart: None, password: None }
    }

    /// The same announcing graceful restart with restart time `t`.
    pub fn restart(self, t: u16) -> GobgpdConfig {
        GobgpdConfig { restart: Some(t), ..self }
    }

    /// The same requiring TCP MD5 with `password`.
    pub fn password(self, password: &str) -> GobgpdConfig {
        GobgpdConfig { password: Some(password.to_owned()), ..self }
    }

    /// The same with these address families.
    pub fn families(self, families: &[&'static str]) -> GobgpdConfig {
        GobgpdConfig { families: families.to_vec(), ..self }
    }

    /// gobgpd's TOML configuration.
    pub fn toml(&self) -> String {
        let (gr, mp_gr) = match self.restart {
            Some(t) => (
                format!("  [neighbors.graceful-restart.config]\n    enabled = true\n    restart-time = {t}\n"),
                "    [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n",
            ),
            None => (String::new(), ""),
        };
        let auth = self.password.as_ref().map(|p| format!("    auth-password = \"{p}\"\n")).unwrap_or_default();
        let port = self.port;
        format!(
            "[global.config]\n  as = 65001\n  router-id = \"192.0.2.1\"\n  port = {port}\n  local-address-list = [\"127.0.0.1\"]\n\
             [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"127.0.0.1\"\n    peer-as = 65002\n{auth}  \
             [neighbors.transport.config]\n    passive-mode = true\n{gr}\
             {}",
            self.families
                .iter()
                .map(|f| format!(
                    "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{f}\"\n{mp_gr}"
                ))
                .collect::<String>()
        )
    }
}

/// gobgpd, killed on drop.
pub struct Gobgpd {
    child: Child,
    /// Its gRPC API's port (for `gobgp -p`).
    pub api: u16,
    /// Its BGP port.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Gobgpd {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Gobgpd {
    /// Whether gobgpd is installed (see [`have`]).
    pub fn installed() -> bool {
        have("gobgpd", "gobgpd")
    }

    /// gobgpd with `config`, its API on a free port, or None when it is
    /// not installed (a failure under `SLUICE_REQUIRE_TOOLS`).
    pub fn start_or_skip(config: &GobgpdConfig) -> Option<Gobgpd> {
        if !Gobgpd::installed() {
            return None;
        }
        Some(Gobgpd::spawn(config).unwrap())
    }

    /// gobgpd with `config`, its API on a free port; the caller has
    /// checked that it is installed.
    pub fn start(config: &GobgpdConfig) -> Gobgpd {
        Gobgpd::spawn(config).expect("gobgpd (apt-get install gobgpd)")
    }

    /// gobgpd started, or why not. It does not listen yet: see
    /// [`Gobgpd::wait_api`] and [`Gobgpd::connect`].
    pub fn spawn(config: &GobgpdConfig) -> std::io::Result<Gobgpd> {
        let tmp = tempfile::tempdir()?;
        let api = try_free_port()?;
        let file = tmp.path().join("gobgpd.toml");
        std::fs::write(&file, config.toml())?;
        let child = Command::new("gobgpd")
            .arg("-f")
            .arg(&file)
            .args(["-t", "toml", "--api-hosts", &format!("127.0.0.1:{api}"), "--disable-stdlog"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Gobgpd { child, api, port: config.port, _dir: tmp })
    }

    /// Killed (SIGKILL, no NOTIFICATION, as in a crash) and reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `gobgp ARGS` against this daemon, once: how long it took, or its
    /// stderr.
    pub fn try_cli(&self, args: &str) -> Result<Duration, String> {
        let t = Instant::now();
        let out = Command::new("gobgp")
            .args(["-u", "127.0.0.1", "-p", &self.api.to_string()])
            .args(args.split_whitespace())
            .output()
            .map_err(|e| format!("gobgp {args}: {e}"))?;
        if !out.status.success() {
            return Err(format!("gobgp {args}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(t.elapsed())
    }

    /// `gobgp ARGS`, failing the test if it fails.
    pub fn cli_once(&self, args: &str) {
        let out = Command::new("gobgp")
            .args(["-u", "127.0.0.1", "-p", &self.api.to_string()])
            .args(args.split_whitespace())
            .output()
            .unwrap();
        assert!(out.status.success(), "gobgp {args}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `gobgp ARGS`, tried again every 100 ms for 10 s (the API may not
    /// listen yet), failing the test if it never succeeds.
    pub fn cli(&self, args: &str) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let out = Command::new("gobgp")
                .args(["-u", "127.0.0.1", "-p", &self.api.to_string()])
                .args(args.split_whitespace())
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            // The API may not listen yet.
            assert!(Instant::now() < end, "gobgp {args}: {}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Until the API answers (`gobgp global`), tried every 100 ms for
    /// `timeout`.
    pub fn wait_api(&self, timeout: Duration) -> Result<(), String> {
        let end = Instant::now() + timeout;
        while self.try_cli("global").is_err() {
            if Instant::now() >= end {
                return Err("gobgpd did not answer".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// A connection to its BGP port, tried every 100 ms for 20 s.
    pub fn connect(&self) -> TcpStream {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            match TcpStream::connect(("127.0.0.1", self.port)) {
                Ok(s) => break s,
                Err(e) => assert!(Instant::now() < end, "gobgpd did not listen: {e}"),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// BIRD 2 in the foreground with `conf` (written to DIR/bird.conf), its
/// control socket DIR/bird.ctl; killed on drop.
pub struct Bird {
    pub process: Killed,
    /// Its control socket (for `birdc -s`).
    pub ctl: PathBuf,
}

impl Bird {
    pub fn start(dir: &Path, conf: &str) -> Bird {
        let file = dir.join("bird.conf");
        std::fs::write(&file, conf).unwrap();
        let ctl = dir.join("bird.ctl");
        let process = Killed(
            Command::new("bird")
                .arg("-f")
                .arg("-c")
                .arg(&file)
                .arg("-s")
                .arg(&ctl)
                .arg("-P")
                .arg(dir.join("bird.pid"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        Bird { process, ctl }
    }
}

/// `birdc -s CTL WHAT`, failing the test if it fails.
pub fn birdc(ctl: &Path, what: &str) {
    let out = Command::new("birdc").arg("-s").arg(ctl).args(what.split_whitespace()).output().unwrap();
    assert!(out.status.success(), "birdc {what}: {}", String::from_utf8_lossy(&out.stderr));
}

/// ExaBGP with `conf` (written to DIR/exabgp.conf), listening on
/// 127.0.0.1:`port`, logging to DIR/exabgp.log; killed on drop.
pub fn exabgp(dir: &Path, conf: &str, port: u16) -> Killed {
    let file = dir.join("exabgp.conf");
    std::fs::write(&file, conf).unwrap();
    Killed(
        Command::new("exabgp")
            .arg(&file)
            .env("exabgp.tcp.bind", "127.0.0.1")
            .env("exabgp.tcp.port", port.to_string())
            .env("exabgp.daemon.user", "root")
            .env("exabgp.log.destination", dir.join("exabgp.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}
