//! A running `sluice bridge` for the live tests: started, waited for, its
//! stderr collected, its metrics scraped, stopped.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `sluice bridge`, its stderr collected line by line.
pub struct Bridge {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    rx: Receiver<String>,
    pub metrics: Option<String>,
}

impl Bridge {
    /// `sluice bridge ARGS`, once it is bridging.
    pub fn start(args: &[&str]) -> Bridge {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("bridge").args(args);
        Bridge::spawn(cmd)
    }

    /// `cmd` (which runs `sluice bridge ...`, perhaps under setpriv), once
    /// it is bridging; its stderr collected line by line.
    pub fn spawn(mut cmd: Command) -> Bridge {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel();
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        let mut b = Bridge { child, lines, rx, metrics: None };
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            // A JSON log line (--log-format json) says the same in its message.
            let text = |l: String| match serde_json::from_str::<serde_json::Value>(&l) {
                Ok(v) => format!("sluice: {}", v["message"].as_str().unwrap_or_default()),
                Err(_) => l,
            };
            match b.rx.recv_timeout(left).map(text) {
                Ok(l) if l.starts_with("sluice: bridging") => break,
                Ok(l) => {
                    if let Some(rest) = l.strip_prefix("sluice: metrics at http://") {
                        b.metrics = Some(rest.trim_end_matches("/metrics").to_owned());
                    }
                }
                Err(_) => panic!("the bridge did not come up: {}", b.stderr()),
            }
        }
        b
    }

    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap();
        assert!(st.success(), "kill {sig}");
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM and wait (exit 0 required): stdout and stderr.
    pub fn stop_output(mut self) -> (String, String) {
        self.signal("-TERM");
        let end = Instant::now() + Duration::from_secs(10);
        while self.running() {
            assert!(Instant::now() < end, "the bridge did not stop on SIGTERM: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = self.child.wait().unwrap();
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        // Let the reader thread take the last lines.
        std::thread::sleep(Duration::from_millis(50));
        let err = self.stderr();
        assert!(status.success(), "the bridge exited with {status}: {err}");
        (out, err)
    }

    /// [`Bridge::stop_output`] of a `--json` run: the summary parsed.
    pub fn stop(self) -> (Value, String) {
        let (out, err) = self.stop_output();
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {out}"));
        (v, err)
    }

    pub fn scrape(&self) -> String {
        let addr = self.metrics.as_ref().expect("started with --metrics");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
