//! A request head as HTTP/2 sends it, checked at decode time against RFC
//! 9113 8.2 and 8.3.1, and written as the HTTP/1.1 head the guard's strict
//! parser (sluice-h1) reads unchanged: nothing that passes here can smuggle
//! a second line into that head (no CR, LF or NUL in any value; no space in
//! the method, path or authority).

use crate::hpack::Field;

/// A checked request head.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestHead {
    pub method: Vec<u8>,
    pub scheme: Vec<u8>,
    /// `:authority`, or the `host` field when there is no `:authority`.
    pub authority: Vec<u8>,
    pub path: Vec<u8>,
    /// The regular fields in order, `host` left out (it is `authority`),
    /// the cookie crumbs joined into one `cookie` field at the end (RFC
    /// 9113 8.2.3).
    pub fields: Vec<Field>,
    /// The `content-length`, checked against the DATA received.
    pub content_length: Option<u64>,
    /// A body follows (the HEADERS frame had no END_STREAM).
    pub has_body: bool,
}

impl RequestHead {
    /// The HTTP/1.1 head: `METHOD path HTTP/1.1`, `host`, the fields, and
    /// `transfer-encoding: chunked` when a body comes without a
    /// content-length (then send the body through [`chunk`]).
    pub fn to_h1(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>());
        out.extend_from_slice(&self.method);
        out.push(b' ');
        out.extend_from_slice(&self.path);
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(&self.authority);
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.fields {
            out.extend_from_slice(n);
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        if self.chunked() {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// The HTTP/1.1 body is chunked (a body without a content-length).
    pub fn chunked(&self) -> bool {
        self.has_body && self.content_length.is_none()
    }

    /// A field's value (the first of that name).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }
}

/// Appends `data` as one HTTP/1.1 chunk (nothing when empty), and the last
/// chunk (no trailers) when `last`.
pub fn chunk(out: &mut Vec<u8>, data: &[u8], last: bool) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    if last {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

/// tchar (RFC 9110 5.6.2) without upper case: what an HTTP/2 field name
/// may hold (RFC 9113 8.2.1, 8.2).
fn name_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// RFC 9113 8.2.1: no NUL, CR or LF; no leading or trailing SP or HTAB.
fn value_ok(v: &[u8]) -> bool {
    let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    !v.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n')) && !edge(v.first()) && !edge(v.last())
}

/// Visible ASCII, no space: a request-target or authority for HTTP/1.1.
fn visible(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| (0x21..0x7f).contains(&b))
}

pub(crate) const CONNECTION_SPECIFIC: [&[u8]; 5] =
    [b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"];

/// Builds a [`RequestHead`] (or checks a trailer block) one decoded field
/// at a time, keeping the first reason it is malformed; decoding goes on
/// regardless (the HPACK table must stay in step).
#[derive(Debug, Default)]
pub(crate) struct HeadBuilder {
    head: RequestHead,
    host: Option<Vec<u8>>,
    cookie: Vec<u8>,
    seen: u8,
    regular: bool,
    trailers: bool,
    error: Option<&'static str>,
}

const METHOD: u8 = 1;
const SCHEME: u8 = 2;
const PATH: u8 = 4;
const AUTHORITY: u8 = 8;

impl HeadBuilder {
    pub(crate) fn new(trailers: bool) -> HeadBuilder {
        HeadBuilder { trailers, ..HeadBuilder::default() }
    }

    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.check(name, value) {
                self.error = Some(e);
            }
        }
    }

    fn pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if self.regular {
            return Err("pseudo-header after a regular field");
        }
        if self.trailers {
            return Err("pseudo-header in trailers");
        }
        let (bit, slot) = match name {
            b":method" => (METHOD, &mut self.head.method),
            b":scheme" => (SCHEME, &mut self.head.scheme),
            b":path" => (PATH, &mut self.head.path),
            b":authority" => (AUTHORITY, &mut self.head.authority),
            _ => return Err("unknown pseudo-header"),
        };
        if self.seen & bit != 0 {
            return Err("repeated pseudo-header");
        }
        self.seen |= bit;
        *slot = value.to_vec();
        Ok(())
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if !value_ok(value) {
            return Err("field value with NUL, CR, LF or edge whitespace");
        }
        if name.first() == Some(&b':') {
            return self.pseudo(name, value);
        }
        self.regular = true;
        if name.is_empty() || !name.iter().all(|&b| name_byte(b)) {
            return Err("field name not lower-case token characters");
        }
        if CONNECTION_SPECIFIC.contains(&name) {
            return Err("connection-specific field");
        }
        if self.trailers {
            return Ok(());
        }
        match name {
            b"te" if value != b"trailers" => Err("te other than trailers"),
            b"cookie" => {
                if !self.cookie.is_empty() {
                    self.cookie.extend_from_slice(b"; ");
                }
                self.cookie.extend_from_slice(value);
                Ok(())
            }
            b"host" => {
                if self.host.is_some() {
                    return Err("repeated host");
                }
                self.host = Some(value.to_vec());
                Ok(())
            }
            b"content-length" => {
                if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
                    return Err("content-length not a number");
                }
                let n = value.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0'));
                if self.head.content_length.is_some_and(|c| c != n) {
                    return Err("conflicting content-length");
                }
                if self.head.content_length.is_none() {
                    self.head.content_length = Some(n);
                    self.head.fields.push((name.to_vec(), value.to_vec()));
                }
                Ok(())
            }
            _ => {
                self.head.fields.push((name.to_vec(), value.to_vec()));
                Ok(())
            }
        }
    }

    /// A trailer block: whether it was well-formed.
    pub(crate) fn finish_trailers(self) -> Result<(), &'static str> {
        self.error.map_or(Ok(()), Err)
    }

    /// The request head, or why it is malformed.
    pub(crate) fn finish(mut self, has_body: bool) -> Result<RequestHead, &'static str> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.seen & METHOD != 0 && self.head.method == b"CONNECT" {
            return Err("CONNECT refused");
        }
        if self.seen & (METHOD | SCHEME | PATH) != METHOD | SCHEME | PATH {
            return Err("missing :method, :scheme or :path");
        }
        let h = &mut self.head;
        if !token(&h.method) {
            return Err(":method not a token");
        }
        if h.scheme != b"https" && h.scheme != b"http" {
            return Err(":scheme not http or https");
        }
        let asterisk = h.path == b"*" && h.method == b"OPTIONS";
        if !visible(&h.path) || !(h.path.first() == Some(&b'/') || asterisk) {
            return Err(":path not an origin-form target");
        }
        match (self.seen & AUTHORITY != 0, self.host) {
            (true, Some(host)) if host != h.authority => return Err("host differs from :authority"),
            (false, Some(host)) => h.authority = host,
            (false, None) => return Err("neither :authority nor host"),
            _ => {}
        }
        if !visible(&h.authority) || h.authority.contains(&b'@') {
            return Err(":authority not a host[:port]");
        }
        if !self.cookie.is_empty() {
            h.fields.push((b"cookie".to_vec(), self.cookie));
        }
        if !has_body && h.content_length.is_some_and(|c| c != 0) {
            return Err("content-length without a body");
        }
        h.has_body = has_body;
        Ok(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(fields: &[(&str, &str)], body: bool) -> Result<RequestHead, &'static str> {
        let mut b = HeadBuilder::new(false);
        for (n, v) in fields {
            b.field(n.as_bytes(), v.as_bytes());
        }
        b.finish(body)
    }

    const BASE: [(&str, &str); 4] =
        [(":method", "GET"), (":scheme", "https"), (":path", "/a?b"), (":authority", "x.test")];

    #[test]
    fn to_h1_joins_cookies_and_chunks_a_body() {
        let mut f = BASE.to_vec();
        f[0] = (":method", "POST");
        f.extend([("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2"), ("te", "trailers")]);
        let h = build(&f, true).unwrap();
        assert_eq!(
            String::from_utf8(h.to_h1()).unwrap(),
            "POST /a?b HTTP/1.1\r\nhost: x.test\r\naccept: */*\r\nte: trailers\r\ncookie: a=1; b=2\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
        let mut out = Vec::new();
        chunk(&mut out, b"hello", false);
        chunk(&mut out, b"", true);
        assert_eq!(out, b"5\r\nhello\r\n0\r\n\r\n");
    }

    #[test]
    fn refusals() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("accept", "x"), (":method", "GET")], "after a regular"),
            (&[(":status", "200")], "unknown pseudo"),
            (&[(":method", "GET"), (":method", "GET")], "repeated"),
            (&[("Accept", "x")], "lower-case"),
            (&[("connection", "close")], "connection-specific"),
            (&[("transfer-encoding", "chunked")], "connection-specific"),
            (&[("te", "gzip")], "te other"),
            (&[("x", "a\r\nb: c")], "CR, LF"),
            (&[("x", " a")], "edge"),
            (&[("host", "y.test")], "differs"),
            (&[("content-length", "1x")], "not a number"),
            (&[("content-length", "1"), ("content-length", "2")], "conflicting"),
        ];
        for (extra, why) in cases {
            let mut f = BASE.to_vec();
            f.extend_from_slice(extra);
            if extra.first().is_some_and(|(n, _)| n.starts_with(':'))
                || extra.first().is_some_and(|(n, _)| *n == "accept")
            {
                // Put the pseudo cases before BASE so the ordering rule is the one hit.
                f = extra.to_vec();
                f.extend_from_slice(&BASE[1..]);
            }
            let e = build(&f, false).unwrap_err();
            assert!(e.contains(why), "{extra:?}: {e}");
        }
        assert!(build(&BASE[..2], false).unwrap_err().contains("missing"));
        let mut f = BASE.to_vec();
        f[0] = (":method", "CONNECT");
        assert_eq!(build(&f, false).unwrap_err(), "CONNECT refused");
        f[0] = (":method", "GET");
        f[2] = (":path", "/a b");
        assert!(build(&f, false).is_err());
        f[2] = (":path", "/");
        f[3] = (":authority", "u@x.test");
        assert!(build(&f, false).is_err());
    }
}
