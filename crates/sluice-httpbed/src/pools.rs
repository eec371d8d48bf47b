//! Client pools: several kinds of client in one `http-load` run (the seed's
//! "client pools with their own behaviour"), e.g. a thousand addresses
//! browsing politely beside ten thousand flooding, each reported on its
//! own. A pool file is TOML, one `[[pool]]` table per pool:
//!
//! ```toml
//! [[pool]]
//! name = "browsers"
//! source = "127.1.0.0/22"      # bind connections across these addresses
//! connections = 1000
//! rate = 500                   # open loop, requests/s (or think = "uniform:200-800")
//! url = "https://127.0.0.1:8443/"  # a target of its own (TLS on with https)
//! delay = 2                    # join the run 2 s after it starts
//! tls = true                   # TLS on (or off) whatever the URL's scheme
//! urls = "urls.txt"            # PATH [WEIGHT] lines, relative to this file
//! zipf = 1.0
//! method = "POST"
//! body_size = "uniform:100-2000"
//! ```
//!
//! Keys are `http-load`'s long flags (`name` aside); what a pool does not
//! say comes from the command line. Every pool runs its own threads at once
//! against the same target; the run's report is the pools' sum, with each
//! pool's own under `pools`.

use crate::dist::Dist;
use crate::load::{self, LoadConfig, LoadError, LoadReport, SourceRange};
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_control::product::{Handle, Running, Summary};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    pool: Vec<Spec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Spec {
    name: String,
    url: Option<String>,
    tls: Option<bool>,
    source: Option<String>,
    connections: Option<usize>,
    threads: Option<usize>,
    rate: Option<f64>,
    think: Option<String>,
    urls: Option<String>,
    zipf: Option<f64>,
    method: Option<String>,
    #[serde(alias = "body_size")]
    body_size: Option<String>,
    duration: Option<f64>,
    delay: Option<f64>,
    requests: Option<u64>,
    pipeline: Option<usize>,
    #[serde(alias = "timeout_ms")]
    timeout_ms: Option<u64>,
    seed: Option<u64>,
}

/// One pool: its name and what it runs.
#[derive(Debug, Clone)]
pub struct Pool {
    pub name: String,
    pub config: LoadConfig,
}

/// Read a pool file: each pool is `base` with the keys it gives. Errors
/// name the file (and TOML's line and column).
pub fn read(path: &Path, base: &LoadConfig, target: &load::Target) -> Result<Vec<Pool>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text, path, base, target)
}

/// [`read`] of `text`, with `path` naming it (and the directory `urls` are relative to).
pub fn parse(text: &str, path: &Path, base: &LoadConfig, target: &load::Target) -> Result<Vec<Pool>, String> {
    let at = |m: String| format!("{}: {m}", path.display());
    let file: File = toml::from_str(text).map_err(|e| at(e.to_string().trim_end().replace('\n', " ")))?;
    if file.pool.is_empty() {
        return Err(at("no [[pool]]".into()));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut pools: Vec<Pool> = Vec::new();
    for (i, s) in file.pool.into_iter().enumerate() {
        let pool_at = |m: String| at(format!("pool {} ({:?}): {m}", i + 1, s.name));
        if s.name.is_empty() || pools.iter().any(|p| p.name == s.name) {
            return Err(pool_at("every pool needs a name of its own".into()));
        }
        let mut c = base.clone();
        let own_target;
        let target = match &s.url {
            Some(u) => {
                let t = load::parse_url(u).map_err(|e| pool_at(format!("url: {e}")))?;
                (c.target, c.host, c.paths) = (t.addr, t.host.clone(), vec![(t.path.clone(), 1)]);
                c.tls = crate::tls::for_target(&t, false, &c.tls_options).map_err(|e| pool_at(e.to_string()))?;
                own_target = t;
                &own_target
            }
            None => target,
        };
        match s.tls {
            Some(true) if c.tls.is_none() => {
                c.tls = crate::tls::for_target(target, true, &c.tls_options).map_err(|e| pool_at(e.to_string()))?;
            }
            Some(false) => c.tls = None,
            _ => {}
        }
        if let Some(v) = &s.source {
            c.source = Some(v.parse::<SourceRange>().map_err(|e| pool_at(format!("source: {e}")))?);
        }
        c.connections = s.connections.unwrap_or(c.connections);
        c.threads = s.threads.unwrap_or(1);
        if s.rate.is_some() || s.think.is_some() {
            c.rate = s.rate;
            c.think_ms =
                s.think.as_deref().map(str::parse::<Dist>).transpose().map_err(|e| pool_at(format!("think: {e}")))?;
        }
        if s.rate.is_some() && s.think.is_some() {
            return Err(pool_at("rate (open loop) and think (closed loop) exclude each other".into()));
        }
        if let Some(u) = &s.urls {
            let f = dir.join(u);
            let t = std::fs::read_to_string(&f).map_err(|e| pool_at(format!("urls {}: {e}", f.display())))?;
            c.paths = load::parse_url_file(&t, target).map_err(|e| pool_at(format!("urls {}: {e}", f.display())))?;
        }
        if let Some(z) = s.zipf {
            if !(z.is_finite() && z >= 0.0) {
                return Err(pool_at("zipf must be a non-negative number".into()));
            }
            let weights = load::zipf_weights(c.paths.len(), z);
            for ((_, w), z) in c.paths.iter_mut().zip(weights) {
                *w = z;
            }
        }
        c.method = s.method.unwrap_or(c.method);
        if let Some(b) = &s.body_size {
            c.body_size = Some(b.parse::<Dist>().map_err(|e| pool_at(format!("body-size: {e}")))?);
        }
        if let Some(d) = s.duration {
            c.duration = Some(
                Duration::try_from_secs_f64(d)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| pool_at("duration must be positive".into()))?,
            );
        }
        if let Some(d) = s.delay {
            c.start_delay =
                Duration::try_from_secs_f64(d).map_err(|_| pool_at("delay must be 0 or more seconds".into()))?;
        }
        c.requests = s.requests.or(c.requests);
        c.pipeline = s.pipeline.unwrap_or(c.pipeline);
        c.timeout = s.timeout_ms.map_or(c.timeout, |ms| Duration::from_millis(ms.max(1)));
        // Pools draw apart unless told: pool k's seed is the base's plus k.
        c.seed = s.seed.unwrap_or(base.seed.wrapping_add(1000 * i as u64));
        pools.push(Pool { name: s.name, config: c });
    }
    Ok(pools)
}

/// Every pool's report and their sum.
#[derive(Debug)]
pub struct PoolsReport {
    pub total: LoadReport,
    pub pools: Vec<(String, LoadReport)>,
}

impl PoolsReport {
    /// The sum's keys, as a single run's, and `pools`: each pool's own.
    pub fn to_json(&self) -> Value {
        let mut j = self.total.to_json();
        let pools: serde_json::Map<String, Value> = self.pools.iter().map(|(n, r)| (n.clone(), r.to_json())).collect();
        j["pools"] = json!(pools);
        j
    }

    pub fn text(&self) -> String {
        let mut out = self.total.text();
        for (n, r) in &self.pools {
            out.push_str(&format!("pool {n}: {}", r.text()));
        }
        out
    }
}

/// Every pool running: one stop for all of them.
pub struct PoolsRun {
    stop: Arc<AtomicBool>,
    runs: Vec<(String, load::LoadRun)>,
}

/// Start every pool.
pub fn start(pools: Vec<Pool>) -> Result<PoolsRun, LoadError> {
    let mut runs = Vec::with_capacity(pools.len());
    for p in pools {
        runs.push((p.name, load::start(p.config)?));
    }
    Ok(PoolsRun { stop: Arc::new(AtomicBool::new(false)), runs })
}

impl Running for PoolsRun {
    type Summary = PoolsReport;
    type Error = LoadError;
    fn handle(&self) -> Handle {
        Handle::new(self.stop.clone())
    }
    fn finished(&self) -> bool {
        self.runs.iter().all(|(_, r)| r.is_finished())
    }
    /// Waits for every pool (the handle stops them all), then sums them.
    fn wait(self) -> Result<PoolsReport, LoadError> {
        while !self.finished() {
            if self.stop.load(Ordering::Relaxed) {
                for (_, r) in &self.runs {
                    r.stop_flag().store(true, Ordering::Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut reports = Vec::with_capacity(self.runs.len());
        for (n, r) in self.runs {
            reports.push((n, r.join()?));
        }
        let Some(((_, first), rest)) = reports.split_first() else {
            return Err(LoadError::Invalid("no pools to run".into()));
        };
        let mut total = first.clone();
        for (_, r) in rest {
            total.add(r);
        }
        Ok(PoolsReport { total, pools: reports })
    }
}

impl Summary for PoolsReport {
    fn text(&self) -> String {
        PoolsReport::text(self)
    }
    fn json(&self) -> Value {
        self.to_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> (LoadConfig, load::Target) {
        let t = load::parse_url("http://127.0.0.1:8080/").unwrap();
        (LoadConfig::new(t.addr, t.host.clone(), t.path.clone()), t)
    }

    #[test]
    fn pools_take_their_keys_and_the_rest_from_the_command_line() {
        let (b, t) = base();
        let text = "[[pool]]\nname = \"browsers\"\nsource = \"127.1.0.0/22\"\nconnections = 100\nrate = 50\nmethod = \"POST\"\nbody-size = \"uniform:10-20\"\n\n[[pool]]\nname = \"flood\"\nthink = \"fixed:0\"\nthreads = 2\n";
        let p = parse(text, Path::new("/tmp/pools.toml"), &b, &t).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].name.as_str(), p[0].config.connections, p[0].config.rate), ("browsers", 100, Some(50.0)));
        assert_eq!(p[0].config.method, "POST");
        assert!(p[0].config.body_size.is_some() && p[0].config.source.is_some());
        assert_eq!((p[1].config.connections, p[1].config.threads, p[1].config.method.as_str()), (16, 2, "GET"));
        assert_ne!(p[0].config.seed, p[1].config.seed, "pools draw apart");
        let p = parse("[[pool]]\nname = \"late\"\ndelay = 1.5\n", Path::new("p.toml"), &b, &t).unwrap();
        assert_eq!(p[0].config.start_delay, Duration::from_millis(1500));
        assert!(parse("[[pool]]\nname = \"x\"\ndelay = -1\n", Path::new("p.toml"), &b, &t).is_err());
    }

    #[test]
    fn a_pool_with_an_https_url_speaks_tls_to_its_own_target() {
        let (mut b, t) = base();
        b.tls_options.insecure = true;
        let text = "[[pool]]\nname = \"tls\"\nurl = \"https://127.0.0.1:9443/x\"\n\n[[pool]]\nname = \"plain\"\n";
        let p = parse(text, Path::new("pools.toml"), &b, &t).unwrap();
        assert_eq!((p[0].config.target.port(), p[0].config.paths[0].0.as_str()), (9443, "/x"));
        assert!(p[0].config.tls.is_some());
        assert_eq!((p[1].config.target.port(), p[1].config.tls.is_some()), (8080, false));
        let text = "[[pool]]\nname = \"on\"\ntls = true\n\n[[pool]]\nname = \"off\"\nurl = \"https://127.0.0.1:9443/\"\ntls = false\n";
        let p = parse(text, Path::new("pools.toml"), &b, &t).unwrap();
        assert_eq!((p[0].config.tls.is_some(), p[1].config.tls.is_some()), (true, false));
    }

    #[test]
    fn bad_pool_files_say_where() {
        let (b, t) = base();
        let f = Path::new("pools.toml");
        let err = |text: &str| parse(text, f, &b, &t).unwrap_err();
        assert!(err("[[pool]]\nname = \"a\"\nconections = 3\n").contains("unknown field `conections`"));
        assert!(err("[[pool]]\nname = \"a\"\nconnections = \n").contains("line 3"));
        assert!(err("[[pool]]\nname = \"a\"\n[[pool]]\nname = \"a\"\n").contains("a name of its own"));
        assert!(err("[[pool]]\nname = \"a\"\nrate = 5\nthink = \"fixed:1\"\n").contains("exclude each other"));
        assert!(err("[[pool]]\nname = \"a\"\nbody-size = \"nope\"\n").contains("body-size"));
        assert!(err("[[pool]]\nname = \"a\"\nurls = \"missing.txt\"\n").contains("missing.txt"));
        assert!(err("[[pool]]\nname = \"a\"\nurl = \"ftp://x/\"\n").contains("url: "));
        assert!(err("").contains("pool"));
    }
}
