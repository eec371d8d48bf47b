//! The peers the guard is measured beside: nginx (1 worker, `proxy_pass`)
//! and HAProxy (1 thread), each started on a loopback port in front of an
//! upstream, either with their defaults (the slow-attack bench) or with the
//! guard benchmark's limits written in their own terms ([`PeerLimits`]).

use anyhow::{bail, Context, Result};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::guard::Killed;

/// The guard benchmark's limits, for a peer to enforce the same: a
/// per-address request rate and burst, concurrent connections per
/// address, the header timeout, the longest request line or header line,
/// and the methods allowed (GET, HEAD, POST).
#[derive(Clone, Copy, Debug)]
pub struct PeerLimits {
    pub request_rate: u32,
    pub request_burst: u32,
    pub connection_rate: u32,
    pub concurrent_connections: u32,
    pub header_timeout_ms: u64,
    pub line_len: usize,
    /// Client connections the front must hold at once (HAProxy's
    /// `maxconn`, nginx's `worker_connections` less its upstream side).
    pub max_connections: u32,
}

/// The most files a process may open here (what no front can go past,
/// root or not, in a container without `CAP_SYS_RESOURCE`).
pub fn fd_hard_limit() -> u32 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = limits.lines().find_map(|l| l.strip_prefix("Max open files")?.split_whitespace().nth(1)?.parse().ok());
    // "unlimited" does not parse: no cap worth applying.
    hard.unwrap_or(u32::MAX)
}

/// HAProxy's `maxconn` for `wanted` client connections: it reserves two
/// files per connection and refuses to start past the file limit, so on
/// a machine whose limit is lower it holds fewer (the bench's rows say
/// how many).
pub fn haproxy_maxconn(wanted: u32) -> u32 {
    wanted.min(fd_hard_limit().saturating_sub(100) / 2)
}

/// A free loopback port (bound, then released for the contender to take).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub fn wait_listening(addr: SocketAddr) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listens on {addr}")
}

/// nginx's configuration: 1 worker in front of `upstream`; with `limits`,
/// keep-alive connections to the upstream (as the guard pools them) and
/// the limits as `limit_req`, `limit_conn`, `client_header_timeout`,
/// `large_client_header_buffers` and `limit_except`. nginx has no
/// per-address connection rate nor header count: those two are the
/// guard's alone.
pub fn nginx_conf(dir: &Path, port: u16, upstream: &str, limits: Option<&PeerLimits>) -> String {
    nginx_conf_listen(dir, &format!("listen 127.0.0.1:{port};"), upstream, limits)
}

/// [`nginx_conf`] with its `listen` directive (and whatever else the
/// server block needs beside it, such as TLS) given whole.
pub fn nginx_conf_listen(dir: &Path, listen: &str, upstream: &str, limits: Option<&PeerLimits>) -> String {
    let dir = dir.display();
    // A client connection and, while a request is proxied, an upstream one.
    let nofile = (limits.map_or(9000, |l| l.max_connections).max(9000) * 2 + 2000).min(fd_hard_limit());
    let workers = nofile - 1000;
    let (http, server, location) = match limits {
        None => (String::new(), String::new(), format!("proxy_pass http://{upstream};")),
        Some(l) => (
            format!(
                "limit_req_zone $binary_remote_addr zone=rate:16m rate={}r/s;\n\
                 limit_conn_zone $binary_remote_addr zone=conns:16m;\n\
                 upstream up {{ server {upstream}; keepalive 1024; keepalive_requests 100000; }}\n",
                l.request_rate
            ),
            format!(
                "limit_req zone=rate burst={} nodelay; limit_conn conns {};\n\
                 client_header_timeout {}ms; large_client_header_buffers 4 {}; keepalive_requests 100000;\n",
                l.request_burst, l.concurrent_connections, l.header_timeout_ms, l.line_len
            ),
            // GET allows HEAD too.
            "proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
             limit_except GET POST { deny all; }"
                .to_owned(),
        ),
    };
    format!(
        "worker_processes 1;\nworker_rlimit_nofile {nofile};\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
         events {{ worker_connections {workers}; }}\n\
         http {{ access_log off; client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n{http}\
           server {{ {listen}\n{server} location / {{ {location} }} }} }}\n"
    )
}

/// HAProxy's configuration: 1 thread in front of `upstream`; with
/// `limits`, a stick table per source address tracking the request rate,
/// the connection rate and the open connections, each over its limit
/// refused as the guard refuses it (429 for requests, closed connections),
/// `timeout http-request` and the methods.
pub fn haproxy_conf(port: u16, upstream: &str, limits: Option<&PeerLimits>) -> String {
    haproxy_conf_bind(&format!("bind 127.0.0.1:{port}"), "", upstream, limits)
}

/// [`haproxy_conf`] with its `bind` line given whole (TLS and ALPN on it,
/// say) and `backend` lines added to the backend (each ending in a newline).
pub fn haproxy_conf_bind(bind: &str, backend: &str, upstream: &str, limits: Option<&PeerLimits>) -> String {
    let maxconn = haproxy_maxconn(limits.map_or(9000, |l| l.max_connections).max(9000));
    let (timeout, frontend) = match limits {
        None => ("10s".to_owned(), String::new()),
        Some(l) => (
            format!("{}ms", l.header_timeout_ms),
            format!(
                "  stick-table type ip size 200k expire 30s store http_req_rate(1s),conn_rate(1s),conn_cur\n\
                 \x20 tcp-request connection track-sc0 src\n\
                 \x20 tcp-request connection reject if {{ sc_conn_rate(0) gt {} }} || {{ sc_conn_cur(0) gt {} }}\n\
                 \x20 http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {} }}\n\
                 \x20 http-request deny deny_status 405 unless METH_GET || METH_HEAD || METH_POST\n",
                l.connection_rate,
                l.concurrent_connections,
                l.request_rate.max(l.request_burst)
            ),
        ),
    };
    format!(
        "global\n  maxconn {maxconn}\n  nbthread 1\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n  timeout http-request {timeout}\n\
         frontend f\n  {bind}\n{frontend}  default_backend b\n\
         backend b\n{backend}  server s {upstream}\n"
    )
}

/// nginx's configuration for tunnels: 1 worker passing upgrades on (the
/// `Upgrade` and `Connection` headers are hop-by-hop: nginx forwards them
/// only when told to, as its WebSocket guide shows).
pub fn nginx_tunnel_conf(dir: &Path, port: u16, upstream: &str) -> String {
    let dir = dir.display();
    format!(
        "worker_processes 1;\nworker_rlimit_nofile 20000;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
         events {{ worker_connections 19000; }}\n\
         http {{ access_log off; client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
           server {{ listen 127.0.0.1:{port};\n location / {{ proxy_pass http://{upstream}; proxy_http_version 1.1;\n\
             proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection \"upgrade\"; }} }} }}\n"
    )
}

/// Start nginx or HAProxy on `port` in front of `upstream` (its files in
/// `dir`), and wait until it listens.
pub fn peer(name: &str, upstream: &str, port: u16, dir: &Path, limits: Option<&PeerLimits>) -> Result<Killed> {
    let conf = match name {
        "nginx" => nginx_conf(dir, port, upstream, limits),
        _ => haproxy_conf(port, upstream, limits),
    };
    peer_with(name, port, dir, &conf)
}

/// Start nginx or HAProxy with the configuration `conf` (which listens on
/// `port`; files in `dir`), and wait until it listens.
pub fn peer_with(name: &str, port: u16, dir: &Path, conf_text: &str) -> Result<Killed> {
    let mut cmd = match name {
        "nginx" => {
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, conf_text)?;
            let mut c = Command::new("nginx");
            c.args(["-p", &dir.display().to_string(), "-c", &conf.display().to_string(), "-g", "daemon off;"]);
            c
        }
        "haproxy" => {
            let conf = dir.join("haproxy.cfg");
            std::fs::write(&conf, conf_text)?;
            let mut c = Command::new("haproxy");
            c.args(["-f", &conf.display().to_string(), "-db"]);
            c
        }
        other => bail!("unknown peer {other:?}: nginx or haproxy"),
    };
    let log = dir.join(format!("{name}.stderr"));
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting {name} (apt-get install {name})"))?;
    let child = Killed(child);
    if let Err(e) = wait_listening(SocketAddr::from(([127, 0, 0, 1], port))) {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("{name}: {e}: {}", said.trim());
    }
    Ok(child)
}
