//! A CrowdSec Local API of a test's own: Debian's `crowdsec` run as
//! `crowdsec -c CONFIG -no-cs` (no agent, no online API) with a sqlite
//! database and a free loopback port, and `cscli` against it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The directory holding `crowdsec` and `cscli`, if they are installed.
pub fn crowdsec_bin() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("SLUICE_CROWDSEC_BIN") {
        return Some(PathBuf::from(d));
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(PathBuf::from)
        .find(|d| d.join("crowdsec").exists() && d.join("cscli").exists())
}

/// The directory holding CrowdSec v1.7's `crowdsec` and `cscli` (built
/// from the Go module proxy by `.ci/run`; Debian's 1.4.6 has no usage
/// metrics): `SLUICE_CROWDSEC17_BIN`, or a missing one is a skip (a
/// failure under `SLUICE_REQUIRE_TOOLS=1`).
pub fn crowdsec17_or_skip(test: &str) -> Option<PathBuf> {
    let dir = std::env::var("SLUICE_CROWDSEC17_BIN").ok().map(PathBuf::from);
    match dir.filter(|d| d.join("crowdsec").exists() && d.join("cscli").exists()) {
        Some(d) => Some(d),
        None if std::env::var("SLUICE_REQUIRE_TOOLS").is_ok_and(|v| v == "1") => {
            panic!("{test}: CrowdSec v1.7 not found (SLUICE_CROWDSEC17_BIN, a directory with crowdsec and cscli)")
        }
        None => {
            println!("SKIPPED: {test}: CrowdSec v1.7 not built (SLUICE_CROWDSEC17_BIN)");
            None
        }
    }
}

pub fn crowdsec_or_skip(test: &str) -> Option<PathBuf> {
    match crowdsec_bin() {
        Some(d) => Some(d),
        None if std::env::var("SLUICE_REQUIRE_TOOLS").is_ok_and(|v| v == "1") => {
            panic!("{test}: crowdsec and cscli not found (PATH or SLUICE_CROWDSEC_BIN)")
        }
        None => {
            println!("SKIPPED: {test}: crowdsec not installed");
            None
        }
    }
}

/// The machine every test LAPI has (a watcher can log in with it).
pub const MACHINE: &str = "sluice-test";
pub const PASSWORD: &str = "sluice-test-password-1";

/// A Local API of its own: config, sqlite, a free loopback port.
pub struct Lapi {
    pub bin: PathBuf,
    pub dir: tempfile::TempDir,
    pub url: String,
    child: Option<Child>,
}

/// openssl, failing the test on error.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
pub fn make_ca(dir: &Path, name: &str) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    let subj = format!("/CN={name}");
    openssl(
        dir,
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj],
    );
}

/// A certificate `NAME.crt`/`NAME.key` signed by `ca`, for `subj`, with
/// the extensions `ext` (a server's SAN, a client's usage).
pub fn make_cert(dir: &Path, ca: &str, name: &str, subj: &str, ext: &str) {
    let (crt, key, csr, extf) =
        (format!("{name}.crt"), format!("{name}.key"), format!("{name}.csr"), format!("{name}.ext"));
    std::fs::write(
        dir.join(&extf),
        format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n{ext}\n"),
    )
    .unwrap();
    openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subj]);
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &extf,
        ],
    );
}

impl Lapi {
    pub fn new(bin: PathBuf) -> Lapi {
        Lapi::build(bin, false, false)
    }

    /// A LAPI with its Prometheus endpoint on (on a free loopback port):
    /// `cscli metrics show bouncers` reads the usage metrics bouncers push.
    pub fn with_metrics(bin: PathBuf) -> Lapi {
        Lapi::build(bin, false, true)
    }

    /// A LAPI on https (`tls/ca.crt` signs its certificate) that admits
    /// bouncers by a client certificate of OU `bouncer-ou`
    /// (`tls/bouncer.crt`, `tls/bouncer.key`); cscli talks to it without
    /// checking the certificate.
    pub fn with_tls(bin: PathBuf) -> Lapi {
        Lapi::build(bin, true, false)
    }

    /// The directory of the TLS files (`with_tls`).
    pub fn tls_dir(&self) -> PathBuf {
        self.dir.path().join("tls")
    }

    fn build(bin: PathBuf, tls: bool, metrics: bool) -> Lapi {
        let dir = tempfile::tempdir().unwrap();
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let port = free();
        let prometheus = if metrics {
            format!(
                "prometheus:\n  enabled: true\n  level: full\n  listen_addr: 127.0.0.1\n  listen_port: {}\n",
                free()
            )
        } else {
            "prometheus:\n  enabled: false\n".to_owned()
        };
        let d = dir.path().display().to_string();
        for sub in ["data", "hub", "notifications", "plugins"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("acquis.yaml"), "").unwrap();
        std::fs::write(dir.path().join("simulation.yaml"), "simulation: false\n").unwrap();
        std::fs::write(
            dir.path().join("profiles.yaml"),
            "name: default_ip_remediation\nfilters:\n - Alert.Remediation == true && Alert.GetScope() == \"Ip\"\n\
             decisions:\n - type: ban\n   duration: 4h\non_success: break\n",
        )
        .unwrap();
        let tls_server = if tls {
            let t = dir.path().join("tls");
            std::fs::create_dir_all(&t).unwrap();
            make_ca(&t, "ca");
            make_cert(&t, "ca", "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth");
            make_cert(&t, "ca", "bouncer", "/OU=bouncer-ou/CN=sluice-bouncer", "extendedKeyUsage=clientAuth");
            let t = t.display();
            format!(
                "    tls:\n      cert_file: {t}/server.crt\n      key_file: {t}/server.key\n      \
                 client_verification: VerifyClientCertIfGiven\n      ca_cert_path: {t}/ca.crt\n      \
                 bouncers_allowed_ou:\n        - bouncer-ou\n      agents_allowed_ou:\n        - agent-ou\n"
            )
        } else {
            String::new()
        };
        let config = format!(
            "common:\n  daemonize: false\n  log_media: stdout\n  log_level: warning\n  working_dir: .\n\
             config_paths:\n  config_dir: {d}/\n  data_dir: {d}/data/\n  simulation_path: {d}/simulation.yaml\n  \
             hub_dir: {d}/hub/\n  index_path: {d}/hub/.index.json\n  notification_dir: {d}/notifications/\n  plugin_dir: {d}/plugins/\n\
             crowdsec_service:\n  acquisition_path: {d}/acquis.yaml\n\
             cscli:\n  output: human\n\
             db_config:\n  log_level: warning\n  type: sqlite\n  db_path: {d}/data/crowdsec.db\n  use_wal: true\n\
             api:\n  client:\n    insecure_skip_verify: false\n    credentials_path: {d}/local_api_credentials.yaml\n  \
             server:\n    log_level: warning\n    listen_uri: 127.0.0.1:{port}\n    profiles_path: {d}/profiles.yaml\n    \
             trusted_ips:\n      - 127.0.0.1\n{tls_server}{prometheus}"
        );
        let config =
            if tls { config.replace("insecure_skip_verify: false", "insecure_skip_verify: true") } else { config };
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        let url = format!("{}://127.0.0.1:{port}", if tls { "https" } else { "http" });
        let mut l = Lapi { bin, dir, url, child: None };
        l.cscli(&[
            "machines",
            "add",
            "sluice-test",
            "--password",
            "sluice-test-password-1",
            "-f",
            &format!("{d}/local_api_credentials.yaml"),
            "--url",
            &l.url.clone(),
        ]);
        l.start();
        l
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    pub fn start(&mut self) {
        let child = Command::new(self.bin.join("crowdsec"))
            .args(["-c", p(&self.config()), "-no-cs"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let addr = self.url.trim_start_matches("http://").trim_start_matches("https://").to_owned();
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < end, "the LAPI did not come up on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Runs cscli with this config; its stdout. SQLite's "database is
    /// locked" (bouncers pulling at the same moment) is retried.
    pub fn cscli(&self, args: &[&str]) -> String {
        for attempt in 0.. {
            let out = Command::new(self.bin.join("cscli")).args(["-c", p(&self.config())]).args(args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && err.contains("database is locked") && attempt < 10 {
                std::thread::sleep(std::time::Duration::from_millis(200));
                continue;
            }
            assert!(out.status.success(), "cscli {args:?}: {err}");
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        unreachable!("the loop returns")
    }

    /// A new bouncer's API key, written to a file.
    pub fn bouncer_key(&self, name: &str) -> PathBuf {
        let key = self.cscli(&["bouncers", "add", name, "-o", "raw"]);
        let f = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&f, key.trim()).unwrap();
        f
    }
}

impl Drop for Lapi {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Lapi {
    /// The machine's password, in a file.
    pub fn password_file(&self) -> PathBuf {
        let f = self.dir.path().join("machine.password");
        std::fs::write(&f, PASSWORD).unwrap();
        f
    }

    /// The IP values of the decisions in force.
    pub fn decided_ips(&self) -> Vec<String> {
        let out = self.cscli(&["decisions", "list", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or(serde_json::Value::Null);
        let mut ips = Vec::new();
        for alert in v.as_array().into_iter().flatten() {
            for d in alert["decisions"].as_array().into_iter().flatten() {
                ips.extend(d["value"].as_str().map(str::to_owned));
            }
        }
        ips
    }

    /// The usage metrics `cscli metrics show bouncers -o json` holds for
    /// `bouncer`: (origin, metric name, unit) -> value.
    pub fn usage(&self, bouncer: &str) -> std::collections::BTreeMap<(String, String, String), i64> {
        let out = self.cscli(&["metrics", "show", "bouncers", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut found = std::collections::BTreeMap::new();
        let by_origin = v.get("bouncers").unwrap_or(&v).get(bouncer);
        for (origin, names) in by_origin.and_then(|b| b.as_object()).into_iter().flatten() {
            for (name, units) in names.as_object().into_iter().flatten() {
                for (unit, n) in units.as_object().into_iter().flatten() {
                    found.insert((origin.clone(), name.clone(), unit.clone()), n.as_i64().unwrap_or(-1));
                }
            }
        }
        found
    }
}

/// What an exporter's `sluice_crowdsec_*` series say, summed over
/// `ip_type` as `cscli metrics show bouncers` shows them: (origin, metric
/// name, unit) -> value, to compare with [`Lapi::usage`].
pub fn exported_usage(metrics: &str) -> std::collections::BTreeMap<(String, String, String), i64> {
    let mut want = std::collections::BTreeMap::new();
    for line in metrics.lines().filter(|l| l.starts_with("sluice_crowdsec_")) {
        let (name, unit) = match line.split('{').next().unwrap_or_default() {
            "sluice_crowdsec_dropped_packets_total" => ("dropped", "packet"),
            "sluice_crowdsec_dropped_bytes_total" => ("dropped", "byte"),
            "sluice_crowdsec_active_decisions" => ("active_decisions", "ip"),
            _ => continue,
        };
        let Some(origin) = line.split("origin=\"").nth(1).and_then(|o| o.split('"').next()) else { continue };
        let n: i64 = line.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(-1);
        *want.entry((origin.to_owned(), name.to_owned(), unit.to_owned())).or_insert(0) += n;
    }
    want
}
