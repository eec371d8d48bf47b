//! The guard's flags (`sluice http-guard`), mapped onto its [`Config`]
//! and the [`Services`] run around it, here beside them: the command only
//! flattens them and prints the summary.

use crate::block_forward;
use crate::service::Services;
use crate::timeouts::ms;
use crate::{BlockAction, Config, Limits, Listener, MinRate, RespCodeBlock, Serve, Timeouts};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use sluice_control::lapi::LapiTlsFlags;
use sluice_control::product::{metrics_addr, Usage};
use sluice_control::safety::SafetyFlags;
use sluice_control::socket::ControlFlags;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Every flag of `sluice http-guard` but `--config` and `--json`.
#[derive(clap::Args, Debug)]
pub struct GuardFlags {
    /// Address to serve the site on: TLS when --tls-cert is given, else plain
    /// HTTP; repeat for more (port 0: any free port; the bound one is printed
    /// on stderr). Default 127.0.0.1:8081, unless --listen-plain is given.
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,
    /// Address to serve the site on in plain HTTP, beside the TLS --listen
    /// ones (repeatable): the same limits, the same upstream.
    #[arg(long, value_name = "ADDR")]
    pub listen_plain: Vec<SocketAddr>,
    /// Address answering every plain HTTP request with a 308 to its https URL
    /// (the Host's name, the first TLS --listen's port unless 443, the path
    /// and query); no Host: 400. Limits apply; nothing goes upstream. Repeatable.
    #[arg(long, value_name = "ADDR")]
    pub redirect_https: Vec<SocketAddr>,
    /// The server to protect (requests are forwarded over keep-alive pools, one per thread).
    #[arg(long, value_name = "ADDR")]
    pub upstream: SocketAddr,
    /// Event-loop threads, each with its own SO_REUSEPORT socket and upstream pool.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,
    /// Beside each thread, one that takes over its connections open a
    /// second or more and calm, between their requests: under a flood of
    /// new connections their requests do not wait behind the flood's work.
    #[arg(long)]
    pub calm_lane: bool,
    /// Requests per second per client IP (frang request_rate; 8 slots of 125 ms).
    #[arg(long, value_name = "N")]
    pub request_rate: Option<u32>,
    /// Requests per 1/8 s per client IP (frang request_burst).
    #[arg(long, value_name = "N")]
    pub request_burst: Option<u32>,
    /// New connections per second per client IP.
    #[arg(long, value_name = "N")]
    pub connection_rate: Option<u32>,
    /// New connections per 1/8 s per client IP.
    #[arg(long, value_name = "N")]
    pub connection_burst: Option<u32>,
    /// Open connections per client IP.
    #[arg(long, value_name = "N")]
    pub concurrent_connections: Option<u32>,
    /// A request's head must be whole this many ms after accept, or after
    /// the first byte of a kept-alive connection's next request (slowloris; 0: off).
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub client_header_timeout: u64,
    /// No byte of a request's body for this many ms, while the guard would take one, is a breach (0: off).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub client_body_timeout: u64,
    /// A request body slower than this many bytes/s over a --min-rate-window is a breach (slow POST; 0: off).
    #[arg(long, value_name = "BYTES", default_value_t = 240)]
    pub min_request_body_rate: u64,
    /// No response byte taken by the client for this many ms closes it (0: off).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub send_timeout: u64,
    /// A client taking its response slower than this many bytes/s over a
    /// --min-rate-window is closed (slow read; 0: off).
    #[arg(long, value_name = "BYTES", default_value_t = 240)]
    pub min_response_rate: u64,
    /// The window (and grace) over which the minimum rates are averaged.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub min_rate_window: u64,
    /// A kept-alive connection waits this many ms for its next request (0: no limit).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub keepalive_timeout: u64,
    /// A new upstream connection must be accepted within this many ms (504; 0: off).
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub upstream_connect_timeout: u64,
    /// No byte from the upstream for this many ms while a response is owed: 504 (0: off).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub upstream_timeout: u64,
    /// Requests at the upstream at once, all threads together (0: no cap).
    /// Beyond, requests wait: clients served before and not near a limit
    /// first, new addresses in one slot of four while both wait.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub upstream_max_inflight: usize,
    /// Body-less GETs written together on one upstream connection, up to
    /// N each (1: off): fewer system calls when many clients ask at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub upstream_pipeline: usize,
    /// Send each request and response at once with its own system call,
    /// instead of a loop turn's together in one (io_uring; used only where
    /// the kernel allows it).
    #[arg(long)]
    pub plain_sends: bool,
    /// A request waiting this many ms for an upstream slot is answered 503 (0: no limit).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub upstream_queue_timeout: u64,
    /// A tunnel (a connection upgraded by a 101: WebSocket) that moves no
    /// byte either way for this many ms is closed (0: no limit).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub tunnel_timeout: u64,
    /// The protocols a request may ask to upgrade to (`Upgrade` header);
    /// a 101 turns its connection into a tunnel. A request offering any
    /// other (h2c: requests smuggled past the guard inside HTTP/2) goes as
    /// a plain request, and a 101 to it is a 502.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "websocket")]
    pub upgrade_protocols: Vec<String>,
    /// No upgrades at all: every 101 is a 502 (as `--upgrade-protocols ''`).
    #[arg(long)]
    pub no_upgrade: bool,
    /// Bytes held per direction per connection (response to the client,
    /// request body to the upstream); reads stop while it is full.
    #[arg(long, value_name = "BYTES", default_value_t = crate::DEFAULT_BUFFER_SIZE)]
    pub buffer_size: usize,
    /// Header lines per request.
    #[arg(long, value_name = "N")]
    pub http_header_cnt: Option<u32>,
    /// Bytes in one header line.
    #[arg(long, value_name = "N")]
    pub http_field_len: Option<u32>,
    /// Bytes in the request target.
    #[arg(long, value_name = "N")]
    pub http_uri_len: Option<u32>,
    /// Bytes in a request body (Content-Length, or chunked data as it arrives).
    #[arg(long, value_name = "N")]
    pub http_body_len: Option<u64>,
    /// Allowed methods, e.g. GET,HEAD,POST.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub http_methods: Option<Vec<String>>,
    /// Requests without a (non-empty) Host header are a breach.
    #[arg(long)]
    pub http_host_required: bool,
    /// CODES:LIMIT:SECONDS, e.g. 403,404:10:2: that many such upstream responses within the period is a breach.
    #[arg(long, value_name = "SPEC")]
    pub http_resp_code_block: Option<RespCodeBlock>,
    /// What a breach does to the connection: reply (429, or 400/405/408/413/414/431,
    /// then close) or reset (a TCP RST, no answer).
    #[arg(long, default_value = "reply", value_parser = PossibleValuesParser::new(["reply", "reset"])
        .map(|s| if s == "reset" { BlockAction::Reset } else { BlockAction::Reply }))]
    pub block_action: BlockAction,
    /// Also block the client IP for this many seconds (0: until restart): its
    /// connections are closed and new ones refused at accept.
    #[arg(long, value_name = "SECONDS")]
    pub ip_block: Option<u64>,
    /// The breach score that blocks (1..=255; 1: every breach blocks): a
    /// mistake (405, 414, no Host, a timeout...) is a point, leaking one a
    /// minute; a rate, a smuggling attempt or a listed JA4 blocks at once
    /// (docs/http-guard.md, "Breach scores").
    #[arg(long, value_name = "N", default_value_t = crate::DEFAULT_IP_BLOCK_AFTER,
        value_parser = clap::value_parser!(u8).range(1..), requires = "ip_block")]
    pub ip_block_after: u8,
    /// Publish the blocks here as `ipset save` lines (atomic rewrites, a few per second at most).
    #[arg(long, value_name = "FILE", requires = "ip_block")]
    pub block_file: Option<PathBuf>,
    /// Push each IP block into a local bridge's dynamic set over its control
    /// socket (`bridge --control PATH`), at most once a second, retried.
    #[arg(long, value_name = "PATH", requires = "ip_block")]
    pub block_ctl: Option<PathBuf>,
    /// The bridge's set for --block-ctl (`set guard dynamic` in its rules).
    #[arg(long, value_name = "NAME", default_value = "guard")]
    pub block_ctl_set: String,
    /// Push each IP block to this CrowdSec Local API as an alert with a ban
    /// decision (scenario sluice/http-LIMIT), so every bouncer enforces it.
    #[arg(long, value_name = "URL", requires_all = ["ip_block", "crowdsec_auth"], group = "crowdsec_lapi")]
    pub crowdsec_url: Option<String>,
    /// The machine login for --crowdsec-url (`cscli machines add NAME --password P`).
    #[arg(long, value_name = "NAME", requires = "crowdsec_password_file")]
    pub crowdsec_login: Option<String>,
    /// A file holding that machine's password.
    #[arg(long, value_name = "FILE", requires_all = ["crowdsec_url", "crowdsec_login"], group = "crowdsec_auth")]
    pub crowdsec_password_file: Option<PathBuf>,
    #[command(flatten)]
    pub lapi_tls: LapiTlsFlags,
    /// Client IPs tracked at most (idle ones are evicted, clock order); blocks have a table of this size too.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_clients: usize,
    /// Largest request head; longer ones get 431.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024)]
    pub max_head: usize,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback only; port 0 picks one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Stop after this many seconds (default: at SIGINT or SIGTERM).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Allow non-loopback listen and upstream addresses.
    #[arg(long)]
    pub allow_remote: bool,
    /// Do not pin thread i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    #[command(flatten)]
    pub control: ControlFlags,
    /// Key IPv4 clients (limits, blocks, published entries) by this prefix.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub key_prefix_v4: u8,
    /// Key IPv6 clients by this prefix (a host may use any address of its /64).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub key_prefix_v6: u8,
    /// Open client connections at most; beyond, those waiting longest for a
    /// request are closed (default: half the file limit, less a reserve).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Count breaches and the blocks they would make, enforce nothing (`would_block`).
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse blocked clients at accept only: no SYN filter in the kernel
    /// (which drops their SYNs before a connection exists, where it loads).
    #[arg(long)]
    pub no_syn_filter: bool,
    /// Every connection starts with a PROXY protocol header (v1 or v2) naming the client.
    #[arg(long, requires = "trusted_proxies")]
    pub proxy_protocol: bool,
    /// The load balancers (CIDRs, comma-separated) whose PROXY headers and --client-ip-header are believed.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub trusted_proxies: Vec<sluice_rules::Prefix>,
    /// Requests from --trusted-proxies name their client in this header (rightmost untrusted address).
    #[arg(long, value_name = "NAME", requires = "trusted_proxies")]
    pub client_ip_header: Option<String>,
    /// Terminate TLS with this certificate chain (PEM); repeat with --tls-key for more, chosen by SNI (the first is the default). SIGHUP rereads them.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Vec<PathBuf>,
    /// The private key (PEM) of the --tls-cert in the same position.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Vec<PathBuf>,
    /// A TLS handshake must finish this many ms after accept.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub tls_handshake_timeout: u64,
    /// Offer only HTTP/1.1 in the TLS handshake (ALPN), not HTTP/2.
    #[arg(long)]
    pub no_http2: bool,
    /// TLS ClientHellos per second per client, counted before any crypto; a hello the guard cannot read is refused.
    #[arg(long, value_name = "N")]
    pub tls_handshake_rate: Option<u32>,
    /// TLS ClientHellos per 1/8 s per client; a hello the guard cannot read is refused.
    #[arg(long, value_name = "N")]
    pub tls_handshake_burst: Option<u32>,
    /// Refuse ClientHellos whose JA4 is in FILE (one per line, # comments; SIGHUP rereads it), and any the guard cannot read.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub block_ja4: Option<PathBuf>,
    #[command(flatten)]
    pub safety: SafetyFlags,
}

impl GuardFlags {
    /// The guard's config and its services, or why these flags make none
    /// (a [`Usage`] error: the command line's fault).
    pub fn config(self) -> anyhow::Result<(Config, Services)> {
        let a = self;
        // A flag that makes no sense without another is the command line's
        // fault (exit 2), said before anything starts.
        let mut listen = a.listen.clone();
        if listen.is_empty() && a.listen_plain.is_empty() {
            listen.push(SocketAddr::from(([127, 0, 0, 1], 8081)));
        }
        let listeners: Vec<Listener> = (listen.iter().map(|&l| Listener::new(l, Serve::Main)))
            .chain(a.listen_plain.iter().map(|&l| Listener::new(l, Serve::Plain)))
            .chain(a.redirect_https.iter().map(|&l| Listener::new(l, Serve::RedirectHttps)))
            .collect();
        if let Some(l) = listeners.iter().find(|l| !a.allow_remote && !l.addr.ip().is_loopback()) {
            let flag = match l.serve {
                Serve::Main => "--listen",
                Serve::Plain => "--listen-plain",
                Serve::RedirectHttps => "--redirect-https",
            };
            let msg = format!("{flag} {}: not a loopback address (pass --allow-remote to serve it)", l.addr);
            return Err(Usage(msg).into());
        }
        let (login, password_file, tls) = (a.crowdsec_login, a.crowdsec_password_file, a.lapi_tls.lapi_tls());
        let crowdsec = a.crowdsec_url.map(|url| block_forward::WatcherFlags { url, login, password_file, tls });
        let ctl = a.block_ctl.as_deref().map(|p| (p, a.block_ctl_set.as_str()));
        let targets = block_forward::targets(ctl, crowdsec.as_ref()).map_err(anyhow::Error::msg)?;
        let limits = Limits {
            request_rate: a.request_rate,
            request_burst: a.request_burst,
            connection_rate: a.connection_rate,
            connection_burst: a.connection_burst,
            concurrent_connections: a.concurrent_connections,
            http_header_cnt: a.http_header_cnt,
            http_field_len: a.http_field_len,
            http_uri_len: a.http_uri_len,
            http_body_len: a.http_body_len,
            http_methods: a.http_methods,
            http_host_required: a.http_host_required,
            http_resp_code_block: a.http_resp_code_block,
            tls_handshake_rate: a.tls_handshake_rate,
            tls_handshake_burst: a.tls_handshake_burst,
        };
        let safety = a.safety.load()?;
        // Loopback only: the counters say who is blocked.
        let metrics = a.metrics.as_deref().map(|m| metrics_addr(m, false)).transpose()?;
        let services = Services { targets, metrics, control: a.control.access()?, duration: a.duration };
        let config = Config {
            listeners,
            upstream: a.upstream,
            threads: a.threads,
            calm_lane: a.calm_lane,
            limits,
            timeouts: Timeouts {
                client_header: ms(a.client_header_timeout),
                client_body: ms(a.client_body_timeout),
                min_request_body_rate: MinRate::new(a.min_request_body_rate, Duration::from_millis(a.min_rate_window)),
                keepalive: ms(a.keepalive_timeout),
                send: ms(a.send_timeout),
                min_response_rate: MinRate::new(a.min_response_rate, Duration::from_millis(a.min_rate_window)),
                upstream_connect: ms(a.upstream_connect_timeout),
                upstream_response: ms(a.upstream_timeout),
                upstream_queue: ms(a.upstream_queue_timeout),
                tunnel: ms(a.tunnel_timeout),
            },
            buffer_size: a.buffer_size,
            upstream_max_inflight: a.upstream_max_inflight,
            upstream_pipeline: a.upstream_pipeline,
            plain_sends: a.plain_sends,
            upgrade_protocols: match a.no_upgrade {
                true => Vec::new(),
                false => a.upgrade_protocols.iter().filter(|p| !p.is_empty()).cloned().collect(),
            },
            action: a.block_action,
            ip_block: a.ip_block,
            ip_block_after: a.ip_block_after,
            block_file: a.block_file,
            max_clients: a.max_clients,
            max_head: a.max_head.max(64),
            allow_remote: a.allow_remote,
            pin: !a.no_pin,
            forward_blocks: false,
            dry_run: a.dry_run,
            syn_filter: !a.no_syn_filter,
            max_connections: a.max_connections.unwrap_or(0),
            key_prefixes: crate::KeyPrefixes { v4: a.key_prefix_v4, v6: a.key_prefix_v6 },
            proxy_protocol: a.proxy_protocol,
            trusted_proxies: a.trusted_proxies,
            client_ip_header: a.client_ip_header,
            tls: crate::tls::CertFiles::pairs(a.tls_cert, a.tls_key).map_err(anyhow::Error::msg)?,
            tls_handshake_timeout: Duration::from_millis(a.tls_handshake_timeout),
            http2: !a.no_http2,
            block_ja4: a.block_ja4,
            safety,
        };
        Ok((config, services))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        guard: GuardFlags,
    }

    fn config(args: &[&str]) -> anyhow::Result<Config> {
        let cli = Cli::try_parse_from([&["http-guard", "--upstream", "127.0.0.1:9"], args].concat())?;
        Ok(cli.guard.config()?.0)
    }

    #[test]
    fn listeners_default_repeat_and_say_what_they_serve() {
        let one = |addr: &str, serve| Listener::new(addr.parse().unwrap(), serve);
        assert_eq!(config(&[]).unwrap().listeners, [one("127.0.0.1:8081", Serve::Main)]);
        let c = config(&["--listen", "127.0.0.1:443", "--listen", "[::1]:443", "--redirect-https", "127.0.0.1:80"]);
        let want = [
            one("127.0.0.1:443", Serve::Main),
            one("[::1]:443", Serve::Main),
            one("127.0.0.1:80", Serve::RedirectHttps),
        ];
        assert_eq!(c.unwrap().listeners, want);
        // --listen-plain alone: no default --listen beside it.
        assert_eq!(config(&["--listen-plain", "127.0.0.1:80"]).unwrap().listeners, [one("127.0.0.1:80", Serve::Plain)]);
        let e = config(&["--redirect-https", "0.0.0.0:80"]).unwrap_err().to_string();
        assert!(e.contains("--redirect-https 0.0.0.0:80: not a loopback address"), "{e}");
    }

    #[test]
    fn ip_block_after_needs_ip_block_and_defaults_to_5() {
        assert_eq!(config(&["--ip-block", "60"]).unwrap().ip_block_after, 5);
        assert_eq!(config(&["--ip-block", "60", "--ip-block-after", "1"]).unwrap().ip_block_after, 1);
        assert!(config(&["--ip-block-after", "3"]).is_err(), "without --ip-block");
        assert!(config(&["--ip-block", "60", "--ip-block-after", "0"]).is_err());
    }
}
