//! TLS termination (rustls, ring provider): the certificates, chosen by SNI
//! and reloaded on demand, and one connection's TLS state between its
//! socket and the proxy's plaintext buffers.
//!
//! The proxy loops stay non-blocking: [`TlsConn::read`] and the writes move
//! what the socket takes and say `WouldBlock` otherwise. Until the
//! ClientHello is whole, the bytes read are also handed to a
//! [`HelloReader`], and rustls is held back, so the hello can be judged
//! (JA4, the handshake rate) *before* rustls does any crypto for it: a
//! handshake flood is refused for the price of a parse. The bytes stay in
//! rustls's own buffer meanwhile, untouched, so what it then processes is
//! exactly what the client sent, however it split its hello into records.

use crate::ja4::{ClientHello, HelloError, HelloReader};
use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ResolvesServerCert, ServerConfig, ServerConnection};
use rustls::sign::CertifiedKey;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// TLS bytes a connection may have queued for its socket before the proxy
/// stops handing it plaintext (backpressure, as the plain path's buffer).
const TLS_OUT_LIMIT: usize = 256 << 10;

/// A staging buffer grown past this (a large response sent in a batch) is
/// given back once sent, so a quiet connection keeps no more than this.
const STAGED_KEEP: usize = 16 << 10;

/// One certificate chain and its key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// `--tls-cert` and `--tls-key` paired in the order given.
    pub fn pairs(certs: Vec<PathBuf>, keys: Vec<PathBuf>) -> Result<Vec<CertFiles>, String> {
        if certs.len() != keys.len() {
            return Err(format!(
                "{} --tls-cert but {} --tls-key: give one key per certificate",
                certs.len(),
                keys.len()
            ));
        }
        Ok(certs.into_iter().zip(keys).map(|(cert, key)| CertFiles { cert, key }).collect())
    }
}

/// The certificates as served now; [`TlsStore::reload`] swaps them whole.
#[derive(Debug)]
pub struct TlsStore {
    files: Vec<CertFiles>,
    /// ALPN offers `h2`.
    http2: bool,
    current: RwLock<Arc<ServerConfig>>,
    /// Bumped on each successful reload, so loops re-read `current` only then.
    pub generation: AtomicU64,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

/// The first certificate whose names cover the SNI; the first one given
/// when none does or the client sent no SNI (as nginx's default server).
#[derive(Debug)]
struct BySni {
    keys: Vec<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().and_then(|n| ServerName::try_from(n).ok());
        name.and_then(|name| {
            self.keys.iter().find(|k| {
                k.end_entity_cert().is_ok_and(|der| {
                    webpki::EndEntityCert::try_from(der)
                        .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
                })
            })
        })
        .or_else(|| self.keys.first())
        .cloned()
    }
}

fn load_pair(f: &CertFiles) -> Result<Arc<CertifiedKey>, String> {
    let (cert, key) = (f.cert.display(), f.key.display());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&f.cert)
        .map_err(|e| format!("{cert}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{cert}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{cert}: no CERTIFICATE in it"));
    }
    if let Err(e) = webpki::EndEntityCert::try_from(&chain[0]) {
        return Err(format!("{cert}: the first certificate does not parse: {e}"));
    }
    let der = PrivateKeyDer::from_pem_file(&f.key).map_err(|e| format!("{key}: {e}"))?;
    let provider = default_provider();
    CertifiedKey::from_der(chain, der, &provider).map(Arc::new).map_err(|e| format!("{key} (for {cert}): {e}"))
}

/// A server config for these pairs: TLS 1.3 and 1.2, ALPN `h2` (when
/// `http2`: preferred, as the server's order decides), `http/1.1` and
/// `http/1.0` (one parser serves both; a client offering only the latest,
/// `curl --http1.0`, would otherwise fail the handshake with
/// `no_application_protocol`).
pub fn server_config(files: &[CertFiles], http2: bool) -> Result<ServerConfig, String> {
    if files.is_empty() {
        return Err("no certificate given".into());
    }
    let keys = files.iter().map(load_pair).collect::<Result<Vec<_>, _>>()?;
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(BySni { keys }));
    cfg.alpn_protocols = vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    if http2 {
        cfg.alpn_protocols.insert(0, b"h2".to_vec());
    }
    Ok(cfg)
}

impl TlsStore {
    /// Load every pair (an error names the file and what is wrong with it).
    /// `http2`: ALPN offers `h2` too.
    pub fn load(files: Vec<CertFiles>, http2: bool) -> Result<TlsStore, String> {
        let cfg = server_config(&files, http2)?;
        Ok(TlsStore {
            files,
            http2,
            current: RwLock::new(Arc::new(cfg)),
            generation: AtomicU64::new(0),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        })
    }

    /// Read the files again. On any error the certificates served stay as
    /// they were (a half-written file on disk never takes TLS down).
    pub fn reload(&self) -> Result<(), String> {
        match server_config(&self.files, self.http2) {
            Ok(cfg) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(cfg);
                self.generation.fetch_add(1, Ordering::Release);
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Plaintext in, TLS records out, staged ones first; `WouldBlock` while
/// staged records wait or once rustls's queue is at its limit.
pub struct PlainWriter<'a, S> {
    tls: &'a mut TlsConn,
    sock: &'a mut S,
}

impl<S: Write> Write for PlainWriter<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tls.flush(self.sock)?;
        let n = self.tls.encrypt(buf);
        self.tls.flush(self.sock)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tls.flush(self.sock).map(drop)
    }
}

/// What [`TlsConn::read`] found.
#[derive(Debug)]
pub enum Input {
    /// This many plaintext bytes (0: the client closed).
    Data(usize),
    /// The socket has nothing more now.
    WouldBlock,
    /// The ClientHello just arrived whole, not yet processed: judge it,
    /// then read again (which processes it) or close. `Err`: the first
    /// bytes are no ClientHello the guard can read (not a handshake, over
    /// [`crate::ja4::MAX_HELLO`], malformed), said only by a connection
    /// made to judge hellos (see [`TlsConn::new`]); reading again lets
    /// rustls decide.
    Hello(Result<Box<ClientHello>, HelloError>),
}

/// Why a TLS connection ends.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads the socket into rustls, after any bytes read before TLS began
/// (`early`), showing what it read to `hello` while the hello is wanted.
struct Source<'a, S> {
    early: &'a mut Vec<u8>,
    sock: &'a mut S,
    hello: Option<&'a mut HelloReader>,
    /// What `hello` answered, once it did.
    judged: Option<Result<ClientHello, HelloError>>,
}

impl<S: Read> Read for Source<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.early.is_empty() {
            self.sock.read(buf)?
        } else {
            let n = self.early.len().min(buf.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            n
        };
        if let (Some(r), None) = (self.hello.as_deref_mut(), &self.judged) {
            match r.push(&buf[..n]) {
                Ok(None) => {}
                Ok(Some(h)) => self.judged = Some(Ok(h)),
                Err(e) => self.judged = Some(Err(e)),
            }
        }
        Ok(n)
    }
}

/// One client connection's TLS side.
pub struct TlsConn {
    conn: ServerConnection,
    /// The ClientHello as read so far; `None` once it was answered.
    hello: Option<HelloReader>,
    /// A hello that cannot be read is said (`Input::Hello(Err)`), not left
    /// to rustls: with `--block-ja4` or a handshake rate, a client must not
    /// escape them by sending what only rustls reads.
    judge: bool,
    /// Read from the socket, not yet processed by rustls (the hello, held
    /// back while it is judged).
    unprocessed: bool,
    /// TLS bytes read before TLS began (behind a PROXY header), read first.
    early: Vec<u8>,
    eof: bool,
    close_sent: bool,
    /// Records taken out of rustls for a batched send (`stage`), from
    /// `staged_pos` on not yet on the socket: they go before anything
    /// rustls queues after them, and no plaintext is encrypted while any
    /// wait (so staged and queued records together stay within
    /// [`TLS_OUT_LIMIT`], as rustls's queue alone did).
    staged: Vec<u8>,
    staged_pos: usize,
    /// The handshake finished (counted once).
    pub established: bool,
}

impl TlsConn {
    /// `judge`: say a ClientHello that cannot be read instead of leaving
    /// it to rustls (on when anything is decided at the hello).
    pub fn new(cfg: Arc<ServerConfig>, judge: bool) -> Result<TlsConn, TlsError> {
        let mut conn = ServerConnection::new(cfg)?;
        conn.set_buffer_limit(Some(TLS_OUT_LIMIT));
        Ok(TlsConn {
            conn,
            hello: Some(HelloReader::default()),
            judge,
            unprocessed: false,
            early: Vec::new(),
            eof: false,
            close_sent: false,
            staged: Vec::new(),
            staged_pos: 0,
            established: false,
        })
    }

    /// Bytes the connection read before TLS began (what followed a PROXY
    /// header): the first TLS bytes.
    pub fn push_early(&mut self, bytes: &[u8]) {
        self.early.extend_from_slice(bytes);
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Plaintext into `buf`, reading and processing TLS records as needed;
    /// any TLS the processing produced (handshake messages, alerts) is sent.
    pub fn read<S: Read + Write>(&mut self, sock: &mut S, buf: &mut [u8]) -> Result<Input, TlsError> {
        loop {
            if self.unprocessed {
                self.unprocessed = false;
                let processed = self.conn.process_new_packets();
                // Send what it produced, an alert for an error too.
                self.flush(sock)?;
                processed?;
            }
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(Input::Data(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without a close_notify: an EOF all the same
                // (HTTP framing says whether the request was whole).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Input::Data(0)),
                Err(e) => return Err(e.into()),
            }
            if self.eof {
                return Ok(Input::Data(0));
            }
            let mut src = Source { early: &mut self.early, sock, hello: self.hello.as_mut(), judged: None };
            let got = self.conn.read_tls(&mut src);
            let judged = src.judged;
            match got {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Input::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            self.unprocessed = true;
            if let Some(judged) = judged {
                self.hello = None;
                match judged {
                    Ok(h) => return Ok(Input::Hello(Ok(Box::new(h)))),
                    Err(e) if self.judge => return Ok(Input::Hello(Err(e))),
                    // Nothing is decided at the hello: rustls judges it alone.
                    Err(_) => {}
                }
            }
        }
    }

    /// Send queued TLS records (those staged first) until the socket would
    /// block; the bytes sent.
    pub fn flush<S: Write>(&mut self, sock: &mut S) -> io::Result<usize> {
        let mut sent = 0;
        while self.staged_pos < self.staged.len() {
            match sock.write(&self.staged[self.staged_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.staged_sent(n);
                    sent += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(sent),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(sent + sluice_tcp::tls::flush(&mut self.conn, sock)?)
    }

    /// TLS records are still queued for the socket (in rustls or staged).
    pub fn wants_write(&self) -> bool {
        self.staged_pos < self.staged.len() || self.conn.wants_write()
    }

    /// Plaintext into records, not sent (the turn's end sends them with
    /// its other sends: [`TlsConn::stage`]): the bytes taken. None while
    /// staged records wait, or once rustls's queue is at its limit.
    pub fn encrypt(&mut self, plain: &[u8]) -> usize {
        if self.staged_pos < self.staged.len() {
            return 0;
        }
        self.conn.writer().write(plain).unwrap_or(0)
    }

    /// Every record rustls has queued, taken out of it for one send: the
    /// bytes to send now (what an earlier stage left unsent, if any, and
    /// then nothing new). Report what went with [`TlsConn::staged_sent`];
    /// [`TlsConn::flush`] sends the rest.
    pub fn stage(&mut self) -> &[u8] {
        if self.staged_pos == self.staged.len() {
            self.staged.clear();
            self.staged_pos = 0;
            // Writing into a Vec takes every record, and never fails.
            while self.conn.wants_write() {
                match self.conn.write_tls(&mut self.staged) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        &self.staged[self.staged_pos..]
    }

    /// Staged records not yet sent.
    pub fn staged(&self) -> &[u8] {
        &self.staged[self.staged_pos..]
    }

    /// `n` staged bytes went out.
    pub fn staged_sent(&mut self, n: usize) {
        self.staged_pos = (self.staged_pos + n).min(self.staged.len());
        if self.staged_pos == self.staged.len() {
            self.staged.clear();
            self.staged_pos = 0;
            if self.staged.capacity() > STAGED_KEEP {
                self.staged = Vec::new();
            }
        }
    }

    /// Queue a close_notify (once); true if it was queued now.
    pub fn close(&mut self) -> bool {
        if self.close_sent {
            return false;
        }
        self.close_sent = true;
        self.conn.send_close_notify();
        true
    }

    /// A writer of plaintext for `sluice_tcp::write_pending`: records
    /// out as they are made, after any staged ones.
    pub fn writer<'a, S: Write>(&'a mut self, sock: &'a mut S) -> PlainWriter<'a, S> {
        PlainWriter { tls: self, sock }
    }

    /// The protocol ALPN chose (`h2`, `http/1.1`...), once the handshake is done.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The negotiated version, for the counters (`None` while handshaking).
    pub fn version(&self) -> Option<rustls::ProtocolVersion> {
        self.conn.protocol_version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use std::collections::VecDeque;
    use std::path::Path;

    const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/testdata");

    fn files(names: &[&str]) -> Vec<CertFiles> {
        let at = |f: String| Path::new(TESTDATA).join(f);
        names.iter().map(|n| CertFiles { cert: at(format!("tls-{n}.pem")), key: at(format!("tls-{n}.key")) }).collect()
    }

    /// A non-blocking socket in memory: reads what the peer wrote (at most
    /// `max_read` bytes a read, if set), else WouldBlock.
    #[derive(Default)]
    struct Pipe {
        input: VecDeque<u8>,
        output: Vec<u8>,
        max_read: Option<usize>,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.input.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.max_read.unwrap_or(buf.len()).min(buf.len());
            self.input.read(&mut buf[..n])
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn client(sni: &str) -> rustls::ClientConnection {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(Path::new(TESTDATA).join("tls-ca.pem")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from(sni.to_owned()).unwrap()).unwrap()
    }

    /// A handshake and one request/response between a rustls client and
    /// [`TlsConn`] over [`Pipe`]s, moving whatever is ready each round: the
    /// hello seen (once, before processing), the certificate served, the
    /// request's plaintext as the server read it.
    fn exchange(store: &TlsStore, sni: &str) -> (Option<ClientHello>, CertificateDer<'static>, Vec<u8>) {
        exchange_recut(store, sni, &|b| b.to_vec(), None)
    }

    /// [`exchange`] with the client's first flight (its hello, one record)
    /// passed through `recut`, and the server reading `max_read` bytes at
    /// most at a time.
    fn exchange_recut(
        store: &TlsStore,
        sni: &str,
        recut: &dyn Fn(&[u8]) -> Vec<u8>,
        max_read: Option<usize>,
    ) -> (Option<ClientHello>, CertificateDer<'static>, Vec<u8>) {
        let mut c = client(sni);
        let mut server = TlsConn::new(store.current(), true).unwrap();
        let mut sock = Pipe { max_read, ..Pipe::default() };
        let (mut hello, mut got) = (None, Vec::new());
        let mut sent = false;
        for round in 0..20 {
            let flight = client_flight(&mut c);
            sock.input.extend(if round == 0 { recut(&flight) } else { flight });
            let mut buf = [0u8; 512];
            loop {
                match server.read(&mut sock, &mut buf).unwrap() {
                    Input::Hello(h) => {
                        assert!(hello.is_none(), "one hello");
                        // Judged before rustls answers it: no ServerHello yet.
                        assert!(sock.output.is_empty() && !server.wants_write());
                        hello = Some(*h.expect("a hello the guard reads"));
                    }
                    Input::Data(n) => {
                        assert!(n > 0, "no EOF here");
                        got.extend_from_slice(&buf[..n]);
                    }
                    Input::WouldBlock => break,
                }
            }
            to_client(&mut server, &mut sock, &mut c);
            if !c.is_handshaking() && !sent {
                c.writer().write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                sent = true;
            }
            if got.ends_with(b"\r\n\r\n") {
                break;
            }
        }
        let cert = c.peer_certificates().expect("a certificate")[0].clone().into_owned();
        (hello, cert, got)
    }

    /// What the client has to send now.
    fn client_flight(c: &mut rustls::ClientConnection) -> Vec<u8> {
        let mut flight = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut flight).unwrap();
        }
        flight
    }

    /// The server's pending output flushed into the pipe and read by the client.
    fn to_client(server: &mut TlsConn, sock: &mut Pipe, c: &mut rustls::ClientConnection) {
        server.flush(sock).unwrap();
        let mut from_server = &sock.output[..];
        while !from_server.is_empty() {
            c.read_tls(&mut from_server).unwrap();
            c.process_new_packets().unwrap();
        }
        sock.output.clear();
    }

    fn leaf(name: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(Path::new(TESTDATA).join(format!("tls-{name}.pem"))).unwrap()
    }

    /// Records staged for a batched send and sent in part go out before
    /// anything encrypted after them: the client reads the plaintext in
    /// order, whole. No plaintext is encrypted while staged bytes wait.
    #[test]
    fn staged_records_go_before_later_ones() {
        let store = TlsStore::load(files(&["a.test"]), false).unwrap();
        let mut c = client("a.test");
        let mut server = TlsConn::new(store.current(), false).unwrap();
        let mut sock = Pipe::default();
        let mut buf = [0u8; 512];
        for _ in 0..10 {
            let flight = client_flight(&mut c);
            sock.input.extend(flight);
            while !matches!(server.read(&mut sock, &mut buf).unwrap(), Input::WouldBlock) {}
            to_client(&mut server, &mut sock, &mut c);
        }
        assert!(!c.is_handshaking() && !server.is_handshaking());
        let first = vec![b'a'; 40_000];
        assert_eq!(server.encrypt(&first), first.len());
        let staged = server.stage().to_vec();
        assert!(staged.len() > first.len() && server.wants_write());
        let half = staged.len() / 2;
        server.staged_sent(half);
        assert_eq!(server.staged(), &staged[half..]);
        assert_eq!(server.encrypt(b"held back"), 0, "nothing encrypted while staged bytes wait");
        assert_eq!(server.stage(), &staged[half..], "a second stage adds nothing");
        // The plain writer sends the rest of the staged bytes first.
        let n = sluice_tcp::write_pending(&mut server.writer(&mut sock), b"second", &mut 0).unwrap();
        assert_eq!(n, 6);
        assert!(sock.output.starts_with(&staged[half..]));
        assert!(!server.wants_write() && server.staged().is_empty());
        let mut wire = staged[..half].to_vec();
        wire.extend_from_slice(&sock.output);
        let (mut from_server, mut got) = (&wire[..], Vec::new());
        while !from_server.is_empty() {
            c.read_tls(&mut from_server).unwrap();
            c.process_new_packets().unwrap();
            while let Ok(n @ 1..) = c.reader().read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        let mut want = first;
        want.extend_from_slice(b"second");
        assert_eq!(got, want);
    }

    #[test]
    fn the_hello_is_seen_before_processing_and_sni_picks_the_certificate() {
        let store = TlsStore::load(files(&["a.test", "b.test"]), false).unwrap();
        for (sni, want) in [("b.test", "b.test"), ("www.b.test", "b.test"), ("a.test", "a.test")] {
            let (hello, cert, got) = exchange(&store, sni);
            let hello = hello.expect("the hello was handed over");
            assert_eq!(hello.sni.as_deref(), Some(sni.as_bytes()));
            assert_eq!(hello.alpn.as_deref(), Some(&b"http/1.1"[..]));
            assert!(hello.ja4().starts_with("t13d"), "{}", hello.ja4());
            assert_eq!(cert, leaf(want), "SNI {sni}");
            assert_eq!(got, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        }
    }

    /// The hello's handshake message cut into records at `cuts` (offsets
    /// into the message), each with the first record's header.
    fn recut(flight: &[u8], cuts: &[usize]) -> Vec<u8> {
        let len = usize::from(u16::from_be_bytes([flight[3], flight[4]]));
        assert_eq!(flight.len(), 5 + len, "the first flight is the hello's record");
        let mut at: Vec<usize> = cuts.iter().copied().chain([0, len]).collect();
        at.sort_unstable();
        at.dedup();
        let mut out = Vec::new();
        for w in at.windows(2) {
            out.extend_from_slice(&flight[..3]);
            out.extend_from_slice(&u16::try_from(w[1] - w[0]).unwrap().to_be_bytes());
            out.extend_from_slice(&flight[5 + w[0]..5 + w[1]]);
        }
        out
    }

    /// Issue 39: a hello split over records, and over reads, is judged as
    /// the same hello sent whole, and rustls, given the very bytes the
    /// client sent, completes the handshake.
    #[test]
    fn a_hello_split_over_records_and_reads_is_judged_whole_then_served() {
        let store = TlsStore::load(files(&["a.test"]), false).unwrap();
        let (whole, _, _) = exchange(&store, "a.test");
        let whole = whole.expect("the whole hello");
        let cases: &[(&[usize], Option<usize>)] = &[
            (&[1], None),
            (&[3], None),
            (&[4], None),
            (&[100], Some(1)),
            (&[60, 61], Some(7)),
            (&[2, 40, 200], Some(5)),
        ];
        for &(cuts, max_read) in cases {
            let (hello, cert, got) = exchange_recut(&store, "a.test", &|f| recut(f, cuts), max_read);
            let hello = hello.unwrap_or_else(|| panic!("no hello judged for cuts {cuts:?}"));
            assert_eq!(hello.ja4(), whole.ja4(), "cuts {cuts:?}");
            assert_eq!(hello.sni, whole.sni);
            assert_eq!(cert, leaf("a.test"));
            assert_eq!(got, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "served after cuts {cuts:?}");
        }
    }

    /// What the first reads say about `bytes` sent as a connection's first:
    /// the first answer other than "would block" while bytes are left.
    fn first_answer(judge: bool, bytes: &[u8]) -> Result<Input, TlsError> {
        let store = TlsStore::load(files(&["a.test"]), false).unwrap();
        let mut server = TlsConn::new(store.current(), judge).unwrap();
        let mut sock = Pipe { max_read: Some(4096), ..Pipe::default() };
        sock.input.extend(bytes);
        let mut buf = [0u8; 512];
        loop {
            match server.read(&mut sock, &mut buf) {
                Ok(Input::WouldBlock) if !sock.input.is_empty() => continue,
                Ok(Input::Hello(Err(e))) => {
                    // Said before rustls saw anything: nothing answered yet.
                    assert!(sock.output.is_empty() && !server.wants_write());
                    return Ok(Input::Hello(Err(e)));
                }
                other => return other,
            }
        }
    }

    #[test]
    fn a_hello_that_cannot_be_read_is_said_when_judging_and_left_to_rustls_otherwise() {
        // A 16 KiB hello in 8-byte records: over 18 KiB of records.
        let mut msg = vec![1, 0, 0x40, 0];
        msg.resize(4 + (16 << 10), 0);
        let eights: Vec<u8> = msg.chunks(8).flat_map(|c| [&[22, 3, 1, 0, c.len() as u8][..], c].concat()).collect();
        let cases: [(&[u8], HelloError); 4] = [
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", HelloError::NotHandshake),
            (&[22, 3, 1, 0, 4, 2, 0, 0, 0], HelloError::NotClientHello),
            (&[22, 3, 1, 0, 2, 1, 0, 22, 3, 1, 0, 2, 0x40, 1], HelloError::TooLong(crate::ja4::MAX_HELLO)),
            (&eights, HelloError::TooManyRecordBytes(crate::ja4::MAX_HELLO_RECORDS)),
        ];
        for (bytes, want) in cases {
            match first_answer(true, bytes) {
                Ok(Input::Hello(Err(e))) => assert_eq!(e, want),
                other => panic!("{want}: {other:?}"),
            }
            // Not judging: rustls refuses each itself, or waits for more.
            let lax = first_answer(false, bytes);
            assert!(matches!(lax, Err(TlsError::Tls(_)) | Ok(Input::WouldBlock)), "{want}: {lax:?}");
        }
    }

    #[test]
    fn a_reload_swaps_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let copy = |from: &CertFiles, to: &str| {
            let f = CertFiles { cert: dir.path().join(format!("{to}.pem")), key: dir.path().join(format!("{to}.key")) };
            std::fs::copy(&from.cert, &f.cert).unwrap();
            std::fs::copy(&from.key, &f.key).unwrap();
            f
        };
        let src = files(&["a.test", "b.test"]);
        let mine = copy(&src[0], "site");
        let store = TlsStore::load(vec![mine.clone()], false).unwrap();
        assert_eq!(exchange(&store, "a.test").1, leaf("a.test"));
        // Renewed on disk (here: b.test's files), then SIGHUP.
        copy(&src[1], "site");
        store.reload().unwrap();
        assert_eq!(store.generation.load(Ordering::Relaxed), 1);
        assert_eq!(exchange(&store, "b.test").1, leaf("b.test"));
        // A key that does not match its certificate: refused, the old pair stays.
        std::fs::copy(&src[0].key, &mine.key).unwrap();
        let err = store.reload().unwrap_err();
        assert!(err.contains("site.key"), "{err}");
        assert_eq!((store.generation.load(Ordering::Relaxed), store.reloads_failed.load(Ordering::Relaxed)), (1, 1));
        assert_eq!(exchange(&store, "b.test").1, leaf("b.test"));
    }

    #[test]
    fn bad_files_are_named() {
        let f = files(&["a.test"]);
        let swapped = vec![CertFiles { cert: f[0].cert.clone(), key: files(&["b.test"])[0].key.clone() }];
        assert!(TlsStore::load(swapped, false).unwrap_err().contains("tls-b.test.key"));
        let missing = vec![CertFiles { cert: "/nonexistent.pem".into(), key: f[0].key.clone() }];
        assert!(TlsStore::load(missing, false).unwrap_err().contains("/nonexistent.pem"));
        let key_as_cert = vec![CertFiles { cert: f[0].key.clone(), key: f[0].key.clone() }];
        assert!(TlsStore::load(key_as_cert, false).unwrap_err().contains("no CERTIFICATE"));
        assert!(CertFiles::pairs(vec!["a".into()], vec![]).is_err());
    }
}
