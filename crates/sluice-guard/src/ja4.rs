//! The TLS ClientHello, read from the bytes a client sends first, and its
//! JA4 fingerprint (FoxIO's JA4 TLS client fingerprint, as its technical
//! details define it: `technical_details/JA4.md` of FoxIO-LLC/ja4).
//!
//! The parser is our own: it reads only what JA4 needs (versions, cipher
//! suites, extension types, SNI, the first ALPN protocol, signature
//! algorithms), checks every length against the bytes there are, never
//! panics (the fuzz target `client_hello` holds it to that) and says when
//! the hello is not all there yet, so a server can wait for more bytes.
//! A hello spread over several records is read whole ([`HelloReader`];
//! the fuzz target `client_hello_split` holds it to the JA4 of the same
//! hello in one record).

use sha2::{Digest, Sha256};
use std::fmt::Write;

/// What JA4 reads of a ClientHello. GREASE values are kept here, as sent;
/// [`ClientHello::ja4`] drops them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// `legacy_version` of the hello (not the record's).
    pub version: u16,
    pub ciphers: Vec<u16>,
    /// Extension types in the order sent.
    pub extensions: Vec<u16>,
    /// The first `host_name` of the server_name extension.
    pub sni: Option<Vec<u8>>,
    /// The first protocol of the ALPN extension.
    pub alpn: Option<Vec<u8>>,
    /// The supported_versions extension's list.
    pub supported_versions: Vec<u16>,
    /// The signature_algorithms extension's list, in order.
    pub signature_algorithms: Vec<u16>,
}

/// Why bytes are not a ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("not a TLS handshake record")]
    NotHandshake,
    #[error("not a ClientHello")]
    NotClientHello,
    #[error("the ClientHello is longer than {0} bytes")]
    TooLong(usize),
    #[error("the records carrying the ClientHello are longer than {0} bytes")]
    TooManyRecordBytes(usize),
    #[error("the ClientHello is cut short or its lengths disagree: {0}")]
    Malformed(&'static str),
}

/// The longest ClientHello read, its handshake header left out (a
/// post-quantum key share makes Chrome's about 1.8 KB; 16 KiB is a whole
/// record).
pub const MAX_HELLO: usize = 16 << 10;

/// The most bytes, record headers included, the records carrying one
/// ClientHello may take. A hello of [`MAX_HELLO`] fits with 400 records'
/// headers to spare. It stays under what rustls buffers unprocessed
/// (16 KiB + 2 KiB + a 5-byte header): the guard holds rustls back while
/// the hello is read, so a longer one would fill rustls's buffer first and
/// fail as a read error instead of as this.
pub const MAX_HELLO_RECORDS: usize = 18 << 10;

/// The longest TLSPlaintext fragment (RFC 8446, 5.1: 2^14).
const MAX_RECORD: usize = 1 << 14;

/// TLS's GREASE values (RFC 8701): 0x0a0a, 0x1a1a, ... 0xfafa.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// A cursor that fails instead of panicking.
struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed(what));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a length prefix of `prefix` bytes (1 or 2).
    fn vec(&mut self, prefix: usize, what: &'static str) -> Result<Rd<'a>, HelloError> {
        let n = if prefix == 1 { usize::from(self.u8(what)?) } else { usize::from(self.u16(what)?) };
        Ok(Rd(self.take(n, what)?))
    }
    fn u16s(mut self, what: &'static str) -> Result<Vec<u16>, HelloError> {
        if !self.0.len().is_multiple_of(2) {
            return Err(HelloError::Malformed(what));
        }
        let mut v = Vec::with_capacity(self.0.len() / 2);
        while !self.0.is_empty() {
            v.push(self.u16(what)?);
        }
        Ok(v)
    }
}

/// Read the ClientHello at the start of a TLS connection (`buf` from its
/// first byte, the record header included). `Ok(None)`: not all of it yet.
/// The same as one [`HelloReader::push`] of `buf`.
pub fn parse(buf: &[u8]) -> Result<Option<ClientHello>, HelloError> {
    HelloReader::default().push(buf)
}

/// A ClientHello read from a connection's bytes as they arrive, in pieces
/// cut anywhere, and reassembled from as many handshake records as the
/// client spread it over (TLS allows any split, and a client that splits
/// must be judged like one that does not: issue 39).
///
/// Nothing is copied but the handshake message (at most [`MAX_HELLO`] + 4
/// bytes) and a partial record header; each byte is looked at once, so a
/// client sending one byte at a time costs no more than one sending all.
/// Bytes after the hello's last byte (the rest of its record, later
/// records) are not read: rustls reads them.
#[derive(Debug, Default)]
pub struct HelloReader {
    /// The header of the next record, while it is cut short.
    head: [u8; 5],
    head_len: usize,
    /// Bytes of the current record's fragment still to come.
    left: usize,
    /// A record was read already: the next ones continue the hello.
    more: bool,
    /// The handshake message so far, its 4-byte header first.
    msg: Vec<u8>,
    /// Bytes taken so far, record headers included.
    taken: usize,
    /// The answer, once given: given again to any later push.
    done: Option<Result<ClientHello, HelloError>>,
}

impl HelloReader {
    /// The connection's next bytes. `Ok(None)`: the hello is not whole yet.
    /// Once it is whole or refused, the same answer for every later push.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<ClientHello>, HelloError> {
        if self.done.is_none() {
            match self.take(bytes) {
                Ok(None) => return Ok(None),
                Ok(Some(h)) => self.done = Some(Ok(h)),
                Err(e) => self.done = Some(Err(e)),
            }
            // Only the answer is kept.
            self.msg = Vec::new();
        }
        self.done.clone().transpose()
    }

    fn take(&mut self, mut bytes: &[u8]) -> Result<Option<ClientHello>, HelloError> {
        while !bytes.is_empty() {
            if self.left == 0 {
                let n = (5 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                (self.head_len, self.taken, bytes) = (self.head_len + n, self.taken + n, &bytes[n..]);
                self.record_head()?;
            } else {
                // The message's header first, then as many bytes as it says.
                let want = match self.msg_len() {
                    None => 4 - self.msg.len(),
                    Some(len) => len + 4 - self.msg.len(),
                };
                let n = self.left.min(bytes.len()).min(want);
                self.msg.extend_from_slice(&bytes[..n]);
                (self.left, self.taken, bytes) = (self.left - n, self.taken + n, &bytes[n..]);
                // Handshake header: type 1 (client_hello), 24-bit length.
                if self.msg.first().is_some_and(|&t| t != 1) {
                    return Err(HelloError::NotClientHello);
                }
                if let Some(len) = self.msg_len() {
                    if len > MAX_HELLO {
                        return Err(HelloError::TooLong(MAX_HELLO));
                    }
                    if self.msg.len() == len + 4 {
                        return hello(&self.msg[4..]).map(Some);
                    }
                }
            }
            // Checked after every step, record headers too, so it always
            // answers before rustls's buffer could fill.
            if self.taken > MAX_HELLO_RECORDS {
                return Err(HelloError::TooManyRecordBytes(MAX_HELLO_RECORDS));
            }
        }
        Ok(None)
    }

    /// Check what there is of a record header: type 22 (handshake),
    /// version 3.x, a length of 1 to 2^14 (RFC 8446, 5.1: a handshake
    /// fragment is never empty, a fragment never longer).
    fn record_head(&mut self) -> Result<(), HelloError> {
        let bad = |what| if self.more { HelloError::Malformed(what) } else { HelloError::NotHandshake };
        if self.head[0] != 22 {
            return Err(bad("a record of another type inside the hello"));
        }
        if self.head_len >= 2 && self.head[1] != 3 {
            return Err(bad("a record of another version inside the hello"));
        }
        if self.head_len < 5 {
            return Ok(());
        }
        let len = usize::from(u16::from_be_bytes([self.head[3], self.head[4]]));
        if len == 0 {
            return Err(HelloError::Malformed("an empty handshake record"));
        }
        if len > MAX_RECORD {
            return Err(HelloError::Malformed("a record longer than 2^14 bytes"));
        }
        (self.left, self.head_len, self.more) = (len, 0, true);
        Ok(())
    }

    /// The handshake message's length, once its header is whole.
    fn msg_len(&self) -> Option<usize> {
        let h = self.msg.get(..4)?;
        Some((usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]))
    }
}

fn hello(body: &[u8]) -> Result<ClientHello, HelloError> {
    let mut r = Rd(body);
    let version = r.u16("legacy_version")?;
    r.take(32, "random")?;
    let sid = r.vec(1, "session_id")?;
    if sid.0.len() > 32 {
        return Err(HelloError::Malformed("session_id over 32 bytes"));
    }
    let ciphers = r.vec(2, "cipher_suites")?.u16s("cipher_suites")?;
    if r.vec(1, "compression_methods")?.0.is_empty() {
        return Err(HelloError::Malformed("no compression method"));
    }
    let mut h = ClientHello {
        version,
        ciphers,
        extensions: Vec::new(),
        sni: None,
        alpn: None,
        supported_versions: Vec::new(),
        signature_algorithms: Vec::new(),
    };
    // A hello without extensions ends here (TLS 1.2 and before).
    if r.0.is_empty() {
        return Ok(h);
    }
    let mut exts = r.vec(2, "extensions")?;
    if !r.0.is_empty() {
        return Err(HelloError::Malformed("bytes after the extensions"));
    }
    while !exts.0.is_empty() {
        let ty = exts.u16("extension type")?;
        let mut data = exts.vec(2, "extension data")?;
        h.extensions.push(ty);
        match ty {
            0x0000 if h.sni.is_none() => {
                let mut names = data.vec(2, "server_name_list")?;
                while !names.0.is_empty() {
                    let kind = names.u8("server name type")?;
                    let name = names.vec(2, "server name")?;
                    if kind == 0 && h.sni.is_none() {
                        h.sni = Some(name.0.to_vec());
                    }
                }
            }
            0x0010 if h.alpn.is_none() => {
                let mut list = data.vec(2, "ALPN list")?;
                if !list.0.is_empty() {
                    h.alpn = Some(list.vec(1, "ALPN protocol")?.0.to_vec());
                }
            }
            0x002b => h.supported_versions = data.vec(1, "supported_versions")?.u16s("supported_versions")?,
            0x000d => {
                h.signature_algorithms = data.vec(2, "signature_algorithms")?.u16s("signature_algorithms")?;
            }
            _ => {}
        }
    }
    Ok(h)
}

/// Two characters for a version (the table of the JA4 specification).
fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// The first 12 hex digits of SHA-256 of `s`, or twelve zeros for nothing.
fn hash12(s: &str) -> String {
    if s.is_empty() {
        return "000000000000".into();
    }
    let d = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(12);
    for b in &d[..6] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn hex_list(v: &[u16]) -> String {
    let mut s = String::with_capacity(v.len() * 5);
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{x:04x}");
    }
    s
}

impl ClientHello {
    /// The JA4 fingerprint, e.g. `t13d1516h2_8daaf6152771_e5627efa2ab1`.
    pub fn ja4(&self) -> String {
        let (a, ciphers, exts) = self.parts();
        format!("{a}_{}_{}", hash12(&ciphers), hash12(&exts))
    }

    /// JA4_r: the same with the sorted lists in place of their hashes.
    pub fn ja4_raw(&self) -> String {
        let (a, ciphers, exts) = self.parts();
        format!("{a}_{ciphers}_{exts}")
    }

    /// The `a` part, the sorted cipher list, and the sorted extension list
    /// (SNI and ALPN left out) with the signature algorithms after `_`.
    fn parts(&self) -> (String, String, String) {
        let ciphers: Vec<u16> = self.ciphers.iter().copied().filter(|&c| !is_grease(c)).collect();
        let exts: Vec<u16> = self.extensions.iter().copied().filter(|&e| !is_grease(e)).collect();
        let version = self.supported_versions.iter().copied().filter(|&v| !is_grease(v)).max().unwrap_or(self.version);
        let sni = if self.extensions.contains(&0x0000) { 'd' } else { 'i' };
        let a = format!(
            "t{}{sni}{:02}{:02}{}",
            version_code(version),
            ciphers.len().min(99),
            exts.len().min(99),
            alpn_code(self.alpn.as_deref())
        );
        let mut sorted = ciphers;
        sorted.sort_unstable();
        let mut ext_sorted: Vec<u16> = exts.into_iter().filter(|&e| e != 0x0000 && e != 0x0010).collect();
        ext_sorted.sort_unstable();
        let mut ext_str = hex_list(&ext_sorted);
        let sigs: Vec<u16> = self.signature_algorithms.iter().copied().filter(|&s| !is_grease(s)).collect();
        if !ext_str.is_empty() && !sigs.is_empty() {
            ext_str.push('_');
            ext_str.push_str(&hex_list(&sigs));
        }
        (a, hex_list(&sorted), ext_str)
    }
}

/// The first and last characters of the first ALPN protocol: themselves
/// when both are ASCII letters or digits, else the first and last hex
/// digits of the whole value; `00` without one.
fn alpn_code(alpn: Option<&[u8]>) -> String {
    let Some(v) = alpn.filter(|v| !v.is_empty()) else { return "00".into() };
    let (first, last) = (v[0], v[v.len() - 1]);
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        return format!("{}{}", first as char, last as char);
    }
    let hex = format!("{first:02x}{last:02x}");
    format!("{}{}", &hex[..1], &hex[3..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn the_specifications_own_examples() {
        // JA4.md: the cipher and extension lists and their hashes.
        let ciphers = "002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9";
        assert_eq!(hash12(ciphers), "8daaf6152771");
        let exts = "0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01";
        assert_eq!(hash12(&format!("{exts}_0403,0804,0401,0503,0805,0501,0806,0601")), "e5627efa2ab1");
        assert_eq!(hash12(exts), "6d807ffa2a79");
        assert_eq!(hash12(""), "000000000000");
        // Its ALPN rules.
        for (v, want) in [
            (&b"h2"[..], "h2"),
            (b"http/1.1", "h1"),
            (b"a", "aa"),
            (b"\xab", "ab"),
            (b"\x20", "20"),
            (b"\xab\xcd", "ad"),
            (b"\x20\x61", "21"),
            (b"\x30\xab", "3b"),
            (b"\x61\x20", "60"),
            (b"\x30\x31\xab\xcd", "3d"),
            (b"\x30\xab\xcd\x31", "01"),
            (b"", "00"),
        ] {
            assert_eq!(alpn_code(Some(v)), want, "{v:?}");
        }
        assert_eq!(alpn_code(None), "00");
        assert!(is_grease(0x0a0a) && is_grease(0xfafa) && !is_grease(0x0a1a) && !is_grease(0xefef));
    }

    /// ClientHellos from FoxIO-LLC/ja4's own test captures (`pcap/`), with
    /// the JA4 and JA4_r its test data (`python/test/testdata/*.json`)
    /// gives for them.
    #[test]
    fn foxios_test_captures() {
        let cases = [
            (
                include_str!("testdata/tls12.hex"),
                "t13d1715h2_5b57614c22b0_3d5424432f57",
                "t13d1715h2_002f,0035,009c,009d,1301,1302,1303,c009,c00a,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0015,0017,001c,0022,0023,002b,002d,0033,ff01_0403,0503,0603,0804,0805,0806,0401,0501,0601,0203,0201",
            ),
            (
                include_str!("testdata/tls-alpn-h2.hex"),
                "t12d4605h2_85626a9a5f7f_aaf95bb78ec9",
                "t12d4605h2_0004,0005,000a,0016,002f,0033,0035,0039,003c,003d,0041,0045,0067,006b,0081,0084,0088,009c,009d,009e,009f,00ba,00be,00c0,00c4,00ff,c007,c008,c009,c00a,c011,c012,c013,c014,c023,c024,c027,c028,c02b,c02c,c02f,c030,cca8,cca9,ccaa,ff85_000a,000b,000d_0601,0603,efef,0501,0503,0401,0403,eeee,eded,0301,0303,0201,0203",
            ),
            // The first ALPN protocol is 0xba 0xad. FoxIO's test data says
            // `99` here: its Rust and Python tools replace a non-ASCII
            // character with '9', an older rule; the specification now takes
            // the first and last hex digits (its own examples: 0xAB 0xCD is
            // "ad"), which is `bd`. The hashes are the test data's.
            (
                include_str!("testdata/tls-non-ascii-alpn.hex"),
                "t13d1516bd_8daaf6152771_e5627efa2ab1",
                "t13d1516bd_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601",
            ),
            (
                include_str!("testdata/badcurveball.hex"),
                "t13d1615h2_46e7e9700bed_45f260be83e2",
                "t13d1615h2_000a,002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,ff01_0403,0804,0401,0503,0805,0501,0806,0601,0201",
            ),
        ];
        for (hex, ja4, raw) in cases {
            let bytes = unhex(hex);
            let h = parse(&bytes).unwrap().expect("a whole hello");
            assert_eq!(h.ja4_raw(), raw);
            assert_eq!(h.ja4(), ja4);
            // Every prefix is "not yet", never an error or another answer.
            for n in 0..bytes.len() {
                assert_eq!(parse(&bytes[..n]), Ok(None), "prefix {n}");
            }
        }
        let h = parse(&unhex(include_str!("testdata/tls12.hex"))).unwrap().unwrap();
        assert_eq!(h.sni.as_deref(), Some(&b"contile.services.mozilla.com"[..]));
        assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]));
    }

    #[test]
    fn what_is_not_a_client_hello() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(HelloError::NotHandshake));
        assert_eq!(parse(&[22, 3, 1, 0, 5, 2, 0, 0, 1, 0]), Err(HelloError::NotClientHello));
        assert_eq!(parse(&[22, 3, 1, 0xff, 0xff]), Err(HelloError::Malformed("a record longer than 2^14 bytes")));
        assert_eq!(parse(&[22, 3, 1, 0, 5, 1, 0x01, 0, 1]), Err(HelloError::TooLong(MAX_HELLO)));
        assert!(matches!(parse(&[22, 3, 1, 0, 8, 1, 0, 0, 4, 3, 3, 0, 0]), Err(HelloError::Malformed(_))));
        let mut bytes = unhex(include_str!("testdata/tls12.hex"));
        bytes[9 + 2 + 32] = 40; // a session id over 32 bytes
        assert!(matches!(parse(&bytes), Err(HelloError::Malformed(_))));
    }

    /// The four captured hellos, each one whole record.
    fn captures() -> Vec<Vec<u8>> {
        let hex = [
            include_str!("testdata/tls12.hex"),
            include_str!("testdata/tls-alpn-h2.hex"),
            include_str!("testdata/tls-non-ascii-alpn.hex"),
            include_str!("testdata/badcurveball.hex"),
        ];
        hex.iter().map(|h| unhex(h)).collect()
    }

    /// A whole one-record hello with its handshake message cut into records
    /// at `cuts` (offsets into the message, taken modulo its length), each
    /// record with the whole one's type and version.
    fn split(whole: &[u8], cuts: &[usize]) -> Vec<u8> {
        let msg = &whole[5..];
        assert_eq!(msg.len(), usize::from(u16::from_be_bytes([whole[3], whole[4]])), "one whole record");
        records(&whole[..3], msg, cuts)
    }

    fn records(head: &[u8], msg: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % msg.len()).chain([0, msg.len()]).collect();
        at.sort_unstable();
        at.dedup();
        let mut out = Vec::new();
        for w in at.windows(2) {
            out.extend_from_slice(head);
            out.extend_from_slice(&u16::try_from(w[1] - w[0]).unwrap().to_be_bytes());
            out.extend_from_slice(&msg[w[0]..w[1]]);
        }
        out
    }

    /// `bytes` pushed in pieces cut at `segs`: the last answer.
    fn pushed(bytes: &[u8], segs: &[usize]) -> Result<Option<ClientHello>, HelloError> {
        let mut at: Vec<usize> = segs.iter().map(|c| c % (bytes.len() + 1)).chain([0, bytes.len()]).collect();
        at.sort_unstable();
        let mut r = HelloReader::default();
        let mut last = Ok(None);
        for w in at.windows(2) {
            last = r.push(&bytes[w[0]..w[1]]);
        }
        last
    }

    #[test]
    fn a_hello_split_into_two_records_at_any_byte_reads_as_whole() {
        for whole in captures() {
            let h = parse(&whole).unwrap().unwrap();
            for cut in 1..whole.len() - 5 {
                let two = split(&whole, &[cut]);
                assert_eq!(two.len(), whole.len() + 5);
                // One byte at a time: "not yet" up to the last byte.
                let mut r = HelloReader::default();
                for (i, b) in two.iter().enumerate() {
                    let got = r.push(std::slice::from_ref(b)).unwrap();
                    assert_eq!(got.is_some(), i == two.len() - 1, "cut {cut}, byte {i}");
                    if let Some(got) = got {
                        assert_eq!(got, h, "cut {cut}");
                        assert_eq!(got.ja4(), h.ja4());
                    }
                }
                assert_eq!(parse(&two).unwrap().unwrap().ja4(), h.ja4(), "cut {cut}");
            }
        }
    }

    #[test]
    fn a_hello_in_three_records_and_in_one_byte_records_reads_as_whole() {
        let whole = &captures()[0];
        let h = parse(whole).unwrap().unwrap();
        let n = whole.len() - 5;
        for a in (1..n).step_by(3) {
            for b in (a + 1..n).step_by(5) {
                assert_eq!(parse(&split(whole, &[a, b])).unwrap().as_ref(), Some(&h), "cuts {a} {b}");
            }
        }
        let every: Vec<usize> = (1..n).collect();
        let ones = split(whole, &every);
        assert_eq!(ones.len(), n * 6);
        assert_eq!(parse(&ones).unwrap().unwrap().ja4(), h.ja4());
    }

    /// A TLS 1.3 ClientHello message whose padding extension makes it
    /// `len` bytes long, header included.
    fn padded(len: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        let pad = len - 4 - body.len() - 2 - 7 - 4;
        let mut exts = vec![0x00, 0x2b, 0, 3, 2, 3, 4, 0x00, 0x15];
        exts.extend(u16::try_from(pad).unwrap().to_be_bytes());
        exts.resize(exts.len() + pad, 0);
        body.extend(u16::try_from(exts.len()).unwrap().to_be_bytes());
        body.extend(exts);
        let mut msg = vec![1, 0];
        msg.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
        msg.extend(body);
        assert_eq!(msg.len(), len);
        msg
    }

    fn in_records_of(msg: &[u8], size: usize) -> Vec<u8> {
        let cuts: Vec<usize> = (size..msg.len()).step_by(size).collect();
        records(&[22, 3, 1], msg, &cuts)
    }

    #[test]
    fn the_bounds_a_whole_hello_and_its_records_are_held_to() {
        // The longest hello, in two records and in records of 64 bytes
        // (17,920 bytes in all): read.
        let longest = padded(MAX_HELLO + 4);
        let h = parse(&in_records_of(&longest, 1 << 14)).unwrap().expect("whole");
        // sha256("1301"), sha256("0015,002b"): one cipher, two extensions.
        assert_eq!(h.ja4(), "t13i010200_0f2cb44170f4_7418e7913c75");
        assert_eq!(parse(&in_records_of(&longest, 64)).unwrap(), Some(h));
        // A byte longer: refused at its header, whatever the records.
        let mut over = longest.clone();
        over[3] += 1;
        assert_eq!(parse(&in_records_of(&over, 4)), Err(HelloError::TooLong(MAX_HELLO)));
        // The longest in records of 8 bytes: over 18 KiB of records.
        let eights = in_records_of(&longest, 8);
        assert_eq!(parse(&eights), Err(HelloError::TooManyRecordBytes(MAX_HELLO_RECORDS)));
        assert_eq!(parse(&eights[..MAX_HELLO_RECORDS]), Ok(None), "refused as the bound is passed");
        // A hello of 2 KiB is read in any records at all, one byte each too.
        let small = padded(2048);
        let h = parse(&in_records_of(&small, 2048)).unwrap().unwrap();
        assert_eq!(parse(&in_records_of(&small, 1)).unwrap(), Some(h));
    }

    #[test]
    fn what_cannot_be_reassembled_is_refused() {
        let whole = &captures()[1];
        let two = split(whole, &[100]);
        let second = 5 + 100;
        let with = |at: usize, b: u8| {
            let mut v = two.clone();
            v[at] = b;
            v
        };
        // Another record type, or version, where the hello's next record should be.
        for (at, b) in [(second, 21), (second, 23), (second, 20), (second + 1, 2)] {
            assert!(matches!(parse(&with(at, b)), Err(HelloError::Malformed(_))), "{at} {b}");
        }
        // An empty record (TLS forbids them for handshakes), first or between.
        let mut empty = vec![22, 3, 1, 0, 0];
        assert_eq!(parse(&empty), Err(HelloError::Malformed("an empty handshake record")));
        empty = [&two[..second], &[22, 3, 1, 0, 0], &two[second..]].concat();
        assert_eq!(parse(&empty), Err(HelloError::Malformed("an empty handshake record")));
        // Not a hello: another handshake message cut over records, or no
        // handshake at all.
        assert_eq!(parse(&[22, 3, 1, 0, 1, 2]), Err(HelloError::NotClientHello));
        assert_eq!(parse(&[0x80, 0x2e, 1, 3, 1]), Err(HelloError::NotHandshake));
        // The message header across records, its length over the bound.
        assert_eq!(parse(&[22, 3, 1, 0, 2, 1, 0, 22, 3, 1, 0, 2, 0x40, 1]), Err(HelloError::TooLong(MAX_HELLO)));
        // A hello whose lengths disagree stays malformed however it is cut.
        let mut bad = whole.clone();
        bad[9 + 2 + 32] = 40;
        for cut in [1, 3, 4, 50, 200] {
            assert!(matches!(parse(&split(&bad, &[cut])), Err(HelloError::Malformed(_))), "{cut}");
        }
    }

    #[test]
    fn bytes_after_the_hello_are_left_alone() {
        let whole = &captures()[0];
        let h = parse(whole);
        assert!(matches!(h, Ok(Some(_))));
        // The same record carrying another message after the hello.
        let mut longer = whole.clone();
        longer.extend([20, 0, 0, 0]);
        let len = u16::from_be_bytes([whole[3], whole[4]]) + 4;
        longer[3..5].copy_from_slice(&len.to_be_bytes());
        assert_eq!(parse(&longer), h);
        // Other records after it (a change_cipher_spec, data), or garbage.
        let after = [&split(whole, &[77])[..], &[20, 3, 3, 0, 1, 1, 23, 3, 3, 0, 2, 9, 9]].concat();
        assert_eq!(parse(&after), h);
        assert_eq!(parse(&[&whole[..], b"GET / HTTP/1.1\r\n"].concat()), h);
        // Pushed again after the answer: the same answer.
        let mut r = HelloReader::default();
        assert_eq!(r.push(whole), h);
        assert_eq!(r.push(b"anything"), h);
        let mut r = HelloReader::default();
        assert_eq!(r.push(b"GET"), Err(HelloError::NotHandshake));
        assert_eq!(r.push(whole), Err(HelloError::NotHandshake));
    }

    proptest! {
        #[test]
        fn split_and_segmented_reads_as_whole(
            which in 0usize..4,
            cuts in proptest::collection::vec(any::<u16>(), 0..8),
            segs in proptest::collection::vec(any::<u16>(), 0..8),
        ) {
            let whole = &captures()[which];
            let cuts: Vec<usize> = cuts.into_iter().map(usize::from).collect();
            let segs: Vec<usize> = segs.into_iter().map(usize::from).collect();
            let h = parse(whole).unwrap().unwrap();
            let got = pushed(&split(whole, &cuts), &segs).unwrap().unwrap();
            prop_assert_eq!(got.ja4(), h.ja4());
            prop_assert_eq!(got, h);
        }

        #[test]
        fn how_bytes_arrive_never_changes_the_answer(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            segs in proptest::collection::vec(any::<u16>(), 0..8),
        ) {
            // Random bytes behind a handshake record header, and alone:
            // pieces answer as one push, errors included.
            let mut b = vec![22, 3, 1];
            b.extend(u16::try_from(bytes.len()).unwrap().to_be_bytes());
            b.extend(&bytes);
            let segs: Vec<usize> = segs.into_iter().map(usize::from).collect();
            prop_assert_eq!(pushed(&b, &segs), parse(&b));
            prop_assert_eq!(pushed(&bytes, &segs), parse(&bytes));
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_hostile_bytes(body in proptest::collection::vec(any::<u8>(), 0..400), cut in any::<u16>()) {
            // A valid record and handshake header around random bytes, and
            // random bytes alone.
            let mut b = vec![22, 3, 1];
            b.extend(((body.len() + 4) as u16).to_be_bytes());
            b.extend([1, 0]);
            b.extend((body.len() as u16).to_be_bytes());
            b.extend(&body);
            let n = usize::from(cut) % (b.len() + 1);
            let _ = parse(&b[..n]).map(|h| h.map(|h| (h.ja4(), h.ja4_raw())));
            let _ = parse(&body).map(|h| h.map(|h| h.ja4()));
        }
    }
}
