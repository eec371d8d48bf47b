//! Every use of the request parser (`sluice-h1`) is here: heads parsed
//! strictly and resumably, their limits checked, bodies walked so the proxy
//! knows where a request ends (the bytes are forwarded verbatim).

use crate::limits::{Limit, Limits};
use sluice_h1::{BodyStatus, Framing, HeadStatus, Options, Parser, Version};
use std::net::IpAddr;

/// A refused request: the breach, the status to answer and the parser's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpRefusal {
    pub limit: Limit,
    pub status: u16,
    pub reason: &'static str,
}

impl HttpRefusal {
    fn limit(limit: Limit) -> HttpRefusal {
        HttpRefusal { limit, status: limit.status(), reason: limit.name() }
    }

    fn parse(e: sluice_h1::Error) -> HttpRefusal {
        HttpRefusal { limit: Limit::HttpParse, status: e.kind.status(), reason: e.kind.as_str() }
    }
}

/// A complete head that passed the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadInfo {
    pub len: usize,
    pub keep_alive: bool,
    /// HEAD: the response has no body whatever its Content-Length says.
    pub head_method: bool,
    pub has_body: bool,
    /// A GET without a body: idempotent and short to send, so it may wait
    /// behind others on one upstream connection (`--upstream-pipeline`)
    /// and be sent again on another one if that connection cannot answer it.
    pub pipelinable: bool,
    /// It asks to switch the connection to another protocol (`Connection:
    /// upgrade` and an `Upgrade` header, HTTP/1.1, no body), every one it
    /// offers allowed (`RequestFramer::upgrading`): a `101` turns the
    /// connection into a tunnel (WebSocket).
    pub upgrade: bool,
}

pub enum HeadStep {
    Partial,
    Complete(HeadInfo),
}

/// Whether a head asks to upgrade: a non-empty `Upgrade` header and
/// `upgrade` among the `Connection` tokens (RFC 9110 section 7.8: an
/// Upgrade not named in Connection is ignored, as a proxy may have
/// forwarded it unknowingly). `Some(true)` when every protocol it offers
/// is one of `allowed` (names before any `/version`, any case): the server
/// may switch only to one the client offered, so the tunnel can only be
/// one of those. `Some(false)` when it offers another: `h2c` through a
/// proxy is how requests are smuggled past it (HTTP/2 framed inside a
/// tunnel no limit sees), so only the protocols the operator names pass.
fn asks_upgrade<'b>(headers: impl Iterator<Item = (&'b [u8], &'b [u8])>, allowed: &[Box<str>]) -> Option<bool> {
    let (mut offered, mut all_allowed, mut listed) = (0, true, false);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case(b"upgrade") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty()) {
                let protocol = token.split(|&b| b == b'/').next().unwrap_or(token);
                offered += 1;
                all_allowed &= allowed.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(protocol));
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            listed |= value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
        }
    }
    (offered > 0 && listed).then_some(all_allowed)
}

/// One client connection's request framing.
pub struct RequestFramer {
    parser: Parser,
    /// The protocols a request may ask to upgrade to (lowercase).
    upgrades: std::sync::Arc<[Box<str>]>,
}

impl RequestFramer {
    /// A framer for which no request asks to upgrade (`HeadInfo::upgrade`
    /// is never set).
    pub fn new(max_head: usize) -> RequestFramer {
        RequestFramer { parser: Parser::new(Options { max_head, ..Options::default() }), upgrades: Default::default() }
    }

    /// Requests may ask to upgrade to these protocols (`--upgrade-protocols`).
    pub fn upgrading(mut self, protocols: std::sync::Arc<[Box<str>]>) -> RequestFramer {
        self.upgrades = protocols;
        self
    }

    /// Ready for the next request.
    pub fn reset(&mut self) {
        self.parser.reset();
    }

    /// `buf`: the message from its first byte, grown since the last call.
    pub fn head(&mut self, buf: &[u8], limits: &Limits) -> Result<HeadStep, HttpRefusal> {
        let len = match self.parser.parse_head(buf).map_err(HttpRefusal::parse)? {
            HeadStatus::Partial => return Ok(HeadStep::Partial),
            HeadStatus::Complete(n) => n,
        };
        if let Some(limit) = self.over_limits(buf, limits) {
            return Err(HttpRefusal::limit(limit));
        }
        let h = self.parser.head(buf).expect("a complete head");
        let has_body = match h.framing {
            Framing::None | Framing::Length(0) => false,
            Framing::Length(_) | Framing::Chunked => true,
        };
        // One asking for a protocol not allowed goes as a plain request: a
        // 101 to it is an upstream error.
        let asks = asks_upgrade(h.headers(), &self.upgrades);
        let upgrade = !has_body && h.version == Version::Http11 && asks == Some(true);
        // Never behind another on a connection, asked for or not.
        let (head_method, pipelinable) = (h.method == "HEAD", h.method == "GET" && !has_body && asks.is_none());
        let keep_alive = h.keep_alive;
        Ok(HeadStep::Complete(HeadInfo { len, keep_alive, head_method, has_body, pipelinable, upgrade }))
    }

    /// The first limit a complete head in `buf` breaks, if any (a dry run
    /// parses with no limits and asks this after).
    pub fn over_limits(&self, buf: &[u8], limits: &Limits) -> Option<Limit> {
        let h = self.parser.head(buf)?;
        let over = |limit: Option<u32>, v: usize| limit.is_some_and(|l| v > l as usize);
        if over(limits.http_uri_len, h.target.len()) {
            return Some(Limit::HttpUriLen);
        }
        if over(limits.http_header_cnt, h.header_count()) {
            return Some(Limit::HttpHeaderCnt);
        }
        if over(limits.http_field_len, h.longest_header_line()) {
            return Some(Limit::HttpFieldLen);
        }
        if limits.http_methods.as_ref().is_some_and(|m| !m.iter().any(|m| m == h.method)) {
            return Some(Limit::HttpMethods);
        }
        if limits.http_host_required && h.host().is_none_or(<[u8]>::is_empty) {
            return Some(Limit::HttpHostRequired);
        }
        match (limits.http_body_len, h.content_length()) {
            (Some(max), Some(n)) if n > max => Some(Limit::HttpBodyLen),
            _ => None,
        }
    }

    /// The client a complete head in `buf` names in `header` (from a
    /// trusted `peer`): see [`crate::forwarded::client`].
    pub fn forwarded_client(&self, buf: &[u8], header: &str, peer: IpAddr, trusted: &[sluice_rules::Prefix]) -> IpAddr {
        let Some(h) = self.parser.head(buf) else { return peer };
        let values = h.headers().filter(|(n, _)| n.eq_ignore_ascii_case(header.as_bytes())).map(|(_, v)| v);
        crate::forwarded::client(values, peer, trusted)
    }

    /// The https URL a complete head in `buf` asks for, at `port` (see
    /// [`https_location`]); `None` when it names no host to send it to.
    pub fn https_location(&self, buf: &[u8], port: u16) -> Option<String> {
        let h = self.parser.head(buf)?;
        https_location(h.target, h.host(), port)
    }

    /// Body bytes of this request so far.
    pub fn body_len(&self) -> u64 {
        self.parser.body_len()
    }

    /// Walk body bytes `input` (new bytes only): how many belong to this
    /// request and whether it ended. Chunked bodies are checked against
    /// `--http-body-len` as they arrive.
    pub fn body(&mut self, input: &[u8], limits: &Limits) -> Result<(usize, bool), HttpRefusal> {
        let mut at = 0;
        loop {
            let BodyStatus { consumed, done, .. } = self.parser.parse_body(&input[at..]).map_err(HttpRefusal::parse)?;
            at += consumed;
            if limits.http_body_len.is_some_and(|max| self.parser.body_len() > max) {
                return Err(HttpRefusal::limit(Limit::HttpBodyLen));
            }
            if done || consumed == 0 || at == input.len() {
                return Ok((at, done));
            }
        }
    }
}

/// A host and an optional port as a `Host` header (or an absolute
/// target's authority) gives them: the host, if it is one. A Location is
/// built from it, so only what a host can be passes (a name's letters,
/// digits, `-._~%`, or a bracketed IPv6 literal); a `/`, `@` or `\` would
/// send the client elsewhere than it asked.
fn host_of(authority: &[u8]) -> Option<&str> {
    let authority = std::str::from_utf8(authority).ok()?;
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let (literal, after) = (&rest[..end], &rest[end + 1..]);
        if literal.is_empty() || !literal.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        (&authority[..end + 2], after.strip_prefix(':').or(after.is_empty().then_some(""))?)
    } else {
        let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
        let name = |b: u8| b.is_ascii_alphanumeric() || b"-._~%".contains(&b);
        if host.is_empty() || !host.bytes().all(name) {
            return None;
        }
        (host, port)
    };
    let port_ok = port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    (port_ok && host.len() <= 255).then_some(host)
}

/// `--redirect-https`: the https URL of a request for `target` carrying
/// `host` (its `Host` header): the same host without its port (at `port`
/// unless that is 443), the same path and query. An absolute target names
/// its own host (RFC 9112, section 3.2.2). `None`: no host to name (none,
/// an empty or malformed one, or a target of another form: `*`, CONNECT's
/// authority).
pub fn https_location(target: &str, host: Option<&[u8]>, port: u16) -> Option<String> {
    let (authority, path) = if target.starts_with('/') {
        (host?, target)
    } else {
        let scheme_end = target.find("://")?;
        if !["http", "https"].iter().any(|s| target[..scheme_end].eq_ignore_ascii_case(s)) {
            return None;
        }
        let rest = &target[scheme_end + 3..];
        let cut = rest.find(['/', '?']).unwrap_or(rest.len());
        (&rest.as_bytes()[..cut], &rest[cut..])
    };
    // The parser lets no such byte into a target; a Location must not
    // carry one whoever calls this.
    if !path.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return None;
    }
    let host = host_of(authority)?;
    let port = if port == 443 { String::new() } else { format!(":{port}") };
    let slash = if path.starts_with('/') { "" } else { "/" };
    Some(format!("https://{host}{port}{slash}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever a client sends, a Location is one header value (no
        /// control byte, space or non-ASCII) naming the https URL of the
        /// host it gave, never another one: its authority ends at the
        /// first `/` and holds no `@` or `\`.
        #[test]
        fn a_location_names_only_the_host_sent(
            target in "(/|https?://|[a-z*])[ -~]{0,20}",
            host in proptest::option::of("[a-f0-9.:@/\\\\\\[\\]%~ \u{e9}-]{0,16}"),
            port in 1u16..,
        ) {
            if let Some(l) = https_location(&target, host.as_deref().map(str::as_bytes), port) {
                proptest::prop_assert!(l.bytes().all(|b| (0x21..0x7f).contains(&b)), "{l:?}");
                let rest = l.strip_prefix("https://").expect("https");
                let authority = &rest[..rest.find('/').expect("a path")];
                proptest::prop_assert!(!authority.contains(['@', '\\', '?', '#']), "{l:?}");
                let name = if authority.starts_with('[') { &authority[..=authority.find(']').unwrap()] } else {
                    authority.split(':').next().unwrap()
                };
                let sent = match target.starts_with('/') {
                    true => host.unwrap(),
                    false => target.split_once("://").unwrap().1.to_owned(),
                };
                proptest::prop_assert!(sent.starts_with(name), "{l:?} from {sent:?}");
            }
        }
    }

    #[test]
    fn https_locations_keep_the_path_and_name_only_a_host() {
        let at = |target: &str, host: Option<&str>, port| https_location(target, host.map(str::as_bytes), port);
        assert_eq!(at("/a/b?c=d&e", Some("example.org"), 443).as_deref(), Some("https://example.org/a/b?c=d&e"));
        assert_eq!(at("/", Some("example.org:80"), 8443).as_deref(), Some("https://example.org:8443/"));
        assert_eq!(at("/x", Some("[2001:db8::1]:8080"), 443).as_deref(), Some("https://[2001:db8::1]/x"));
        assert_eq!(at("/x", Some("[::1]"), 443).as_deref(), Some("https://[::1]/x"));
        assert_eq!(at("http://a.test:80/p?q", Some("b.test"), 443).as_deref(), Some("https://a.test/p?q"));
        assert_eq!(at("HTTP://a.test?q", None, 443).as_deref(), Some("https://a.test/?q"));
        for (target, host) in [
            ("/", None),
            ("/", Some("")),
            ("/", Some(":80")),
            ("/", Some("evil.test/x")),
            ("/", Some("user@evil.test")),
            ("/", Some("a.test:8o")),
            ("/", Some("[::1")),
            ("/", Some("[::1]x")),
            ("/", Some("a b")),
            ("*", Some("a.test")),
            ("a.test:443", Some("a.test")),
            ("ftp://a.test/", Some("a.test")),
        ] {
            assert_eq!(at(target, host, 443), None, "{target} {host:?}");
        }
    }

    fn head(raw: &[u8], limits: &Limits) -> Result<Option<HeadInfo>, HttpRefusal> {
        let mut f = RequestFramer::new(16 << 10);
        Ok(match f.head(raw, limits)? {
            HeadStep::Partial => None,
            HeadStep::Complete(h) => Some(h),
        })
    }

    #[test]
    fn head_limits_refuse_with_their_status() {
        let l = Limits {
            http_uri_len: Some(8),
            http_header_cnt: Some(2),
            http_field_len: Some(20),
            http_methods: Some(vec!["GET".into(), "HEAD".into()]),
            http_host_required: true,
            http_body_len: Some(10),
            ..Limits::default()
        };
        let ok = head(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n", &l).unwrap().unwrap();
        assert!(ok.head_method && ok.keep_alive && !ok.has_body);
        let cases: [(&[u8], Limit, u16); 7] = [
            (b"GET /123456789 HTTP/1.1\r\nHost: x\r\n\r\n", Limit::HttpUriLen, 414),
            (b"GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\n\r\n", Limit::HttpHeaderCnt, 431),
            (b"GET / HTTP/1.1\r\nHost: x\r\nA: 123456789012345678\r\n\r\n", Limit::HttpFieldLen, 431),
            (b"PUT / HTTP/1.1\r\nHost: x\r\n\r\n", Limit::HttpMethods, 405),
            (b"GET / HTTP/1.1\r\nA: 1\r\n\r\n", Limit::HttpHostRequired, 400),
            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", Limit::HttpBodyLen, 413),
            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", Limit::HttpParse, 400),
        ];
        for (raw, limit, status) in cases {
            let r = head(raw, &l).unwrap_err();
            assert_eq!((r.limit, r.status), (limit, status), "{}", String::from_utf8_lossy(raw));
        }
        assert!(head(b"GET / HTTP/1.1\r\nHo", &l).unwrap().is_none());
    }

    #[test]
    fn an_upgrade_is_asked_with_both_headers_on_http11_without_a_body() {
        let l = Limits::default();
        let allowed: std::sync::Arc<[Box<str>]> = vec!["websocket".into(), "foo".into()].into();
        let framed = |raw: &[u8]| {
            let mut f = RequestFramer::new(16 << 10).upgrading(allowed.clone());
            match f.head(raw, &l).unwrap() {
                HeadStep::Complete(h) => h,
                HeadStep::Partial => panic!("partial"),
            }
        };
        let ws = b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n";
        let h = framed(ws);
        assert!(h.upgrade && !h.pipelinable, "an upgrade is never pipelined");
        assert!(!head(ws, &l).unwrap().unwrap().upgrade, "a framer allowing none");
        assert!(framed(b"GET / HTTP/1.1\r\nUpgrade: WebSocket, foo/2\r\nConnection: upgrade\r\n\r\n").upgrade);
        // h2c (request smuggling through a tunnel), or any protocol not
        // allowed among those offered: a plain request, never pipelined.
        for raw in [
            &b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nUpgrade: websocket, h2c\r\nConnection: upgrade\r\n\r\n",
        ] {
            let h = framed(raw);
            assert!(!h.upgrade && !h.pipelinable, "{}", String::from_utf8_lossy(raw));
        }
        let not: [&[u8]; 5] = [
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade:\r\nConnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: upgrade\r\nContent-Length: 1\r\n\r\n",
        ];
        for raw in not {
            assert!(!framed(raw).upgrade, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn chunked_bodies_are_walked_and_bounded() {
        let l = Limits { http_body_len: Some(5), ..Limits::default() };
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut f = RequestFramer::new(1024);
        assert!(matches!(f.head(raw, &l), Ok(HeadStep::Complete(HeadInfo { has_body: true, .. }))));
        assert_eq!(f.body(b"3\r\nabc\r\n0\r\n\r\nGET", &l), Ok((13, true)));
        let mut f = RequestFramer::new(1024);
        f.head(raw, &l).ok();
        assert_eq!(f.body(b"3\r\nabc\r\n", &l), Ok((8, false)));
        assert_eq!(f.body(b"3\r\nabc\r\n", &l).unwrap_err().limit, Limit::HttpBodyLen);
    }
}
