//! JA4 of real ClientHellos: `curl` and `openssl s_client` connect to a
//! loopback listener that only reads. Their hello is parsed by
//! `sluice_guard::ja4` and, independently, dissected by tshark (written to
//! a pcap as one TCP segment); every field JA4 reads must agree, and so must
//! the fingerprint built from Wireshark's fields. (Debian's tshark 4.0 has
//! no `tls.handshake.ja4` field of its own; where it is missing, the
//! fingerprint is composed from the fields it does have.)
//!
//! Without curl, openssl or tshark the test says `SKIPPED` and passes,
//! unless `SLUICE_REQUIRE_TOOLS=1` (CI), where it fails.

use sluice_guard::ja4::{self, ClientHello};
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn have(tool: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
        || Command::new(tool).arg("version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("SLUICE_REQUIRE_TOOLS").is_none(), "{tool} is required (SLUICE_REQUIRE_TOOLS is set)");
        println!("SKIPPED: {tool} is missing");
    }
    found
}

/// The ClientHello `client` (given the listener's port) sends first.
fn hello_of(client: impl FnOnce(u16) -> Command) -> (Vec<u8>, ClientHello) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut child = client(port).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let (mut buf, end) = (Vec::new(), Instant::now() + Duration::from_secs(5));
    let hello = loop {
        let mut chunk = [0u8; 4096];
        if let Ok(n) = s.read(&mut chunk) {
            buf.extend_from_slice(&chunk[..n]);
        }
        if let Some(h) = ja4::parse(&buf).expect("a ClientHello") {
            break h;
        }
        assert!(Instant::now() < end, "no whole ClientHello in 5 s: {} bytes", buf.len());
    };
    let _ = child.kill();
    let _ = child.wait();
    (buf, hello)
}

/// `payload` as the one TCP segment of an Ethernet/IPv4 frame to port 443, in a pcap.
fn pcap_of(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + payload.len()) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[127, 0, 0, 1]);
    f[30..34].copy_from_slice(&[127, 0, 0, 2]);
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&443u16.to_be_bytes());
    f[46] = 0x50; // data offset 5
    f[47] = 0x18; // PSH, ACK
    f[48..50].copy_from_slice(&65535u16.to_be_bytes());
    f.extend_from_slice(payload);
    let mut p = Vec::new();
    p.extend(0xa1b2_c3d4u32.to_le_bytes());
    p.extend(2u16.to_le_bytes());
    p.extend(4u16.to_le_bytes());
    p.extend([0u8; 8]);
    p.extend(65535u32.to_le_bytes());
    p.extend(1u32.to_le_bytes()); // Ethernet
    p.extend([0u8; 8]);
    p.extend((f.len() as u32).to_le_bytes());
    p.extend((f.len() as u32).to_le_bytes());
    p.extend(f);
    p
}

fn hex_u16s(field: &str) -> Vec<u16> {
    field
        .split(',')
        .filter(|v| !v.is_empty())
        .map(|v| match v.strip_prefix("0x") {
            Some(h) => u16::from_str_radix(h, 16).unwrap(),
            None => v.parse().unwrap(),
        })
        .collect()
}

/// The same hello as Wireshark dissects it.
fn tshark_hello(bytes: &[u8]) -> ClientHello {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hello.pcap");
    std::fs::write(&file, pcap_of(bytes)).unwrap();
    let fields = [
        "tls.handshake.version",
        "tls.handshake.ciphersuite",
        "tls.handshake.extension.type",
        "tls.handshake.sig_hash_alg",
        "tls.handshake.extensions_alpn_str",
        "tls.handshake.extensions.supported_version",
        "tls.handshake.extensions_server_name",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args(["-r", file.to_str().unwrap(), "-d", "tcp.port==443,tls", "-T", "fields", "-E", "separator=;"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<&str> = text.trim_end_matches('\n').split(';').collect();
    assert_eq!(v.len(), fields.len(), "{text}");
    ClientHello {
        version: hex_u16s(v[0])[0],
        ciphers: hex_u16s(v[1]),
        extensions: hex_u16s(v[2]),
        signature_algorithms: hex_u16s(v[3]),
        alpn: v[4].split(',').next().filter(|a| !a.is_empty()).map(|a| a.as_bytes().to_vec()),
        supported_versions: hex_u16s(v[5]),
        sni: (!v[6].is_empty()).then(|| v[6].as_bytes().to_vec()),
    }
}

fn check(name: &str, bytes: &[u8], ours: &ClientHello) -> String {
    let theirs = tshark_hello(bytes);
    // Wireshark lists the signature algorithms of every extension that has
    // some (delegated_credentials too); JA4 reads signature_algorithms'.
    if !ours.extensions.contains(&0x0022) {
        assert_eq!(ours.signature_algorithms, theirs.signature_algorithms, "{name}: signature algorithms");
    }
    assert_eq!(ours.version, theirs.version, "{name}");
    assert_eq!(ours.ciphers, theirs.ciphers, "{name}: ciphers");
    assert_eq!(ours.extensions, theirs.extensions, "{name}: extensions");
    assert_eq!(ours.alpn, theirs.alpn, "{name}: first ALPN protocol");
    assert_eq!(ours.supported_versions, theirs.supported_versions, "{name}: supported versions");
    assert_eq!(ours.sni, theirs.sni, "{name}: SNI");
    let ja4 = ours.ja4();
    let mut from_wireshark = theirs;
    from_wireshark.signature_algorithms = ours.signature_algorithms.clone();
    assert_eq!(ja4, from_wireshark.ja4(), "{name}");
    println!("{name}: {ja4}  ({})", ours.ja4_raw());
    ja4
}

#[test]
fn curl_and_openssl_hellos_fingerprint_as_wireshark_reads_them() {
    if !(have("curl") && have("openssl") && have("tshark")) {
        return;
    }
    let (bytes, hello) = hello_of(|port| {
        let mut c = Command::new("curl");
        c.args(["-sk", "--max-time", "3", "--resolve", &format!("sluice.test:{port}:127.0.0.1")]);
        c.arg(format!("https://sluice.test:{port}/"));
        c
    });
    let ja4 = check("curl", &bytes, &hello);
    assert_eq!(hello.sni.as_deref(), Some(&b"sluice.test"[..]));
    assert!(ja4.starts_with("t13d"), "curl offers TLS 1.3 with SNI: {ja4}");
    assert!(ja4[8..10] == *"h2" || ja4[8..10] == *"h1", "curl's first ALPN: {ja4}");
    // openssl s_client, one protocol offered, no SNI (an IP address).
    let (bytes, hello) = hello_of(|port| {
        let mut c = Command::new("openssl");
        c.args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-noservername", "-alpn", "http/1.1"]);
        c
    });
    let ja4 = check("openssl", &bytes, &hello);
    assert!(ja4.starts_with("t13i") && &ja4[8..10] == "h1", "{ja4}");
    // The same client twice: the same fingerprint (GREASE, random and key shares aside).
    let (_, again) = hello_of(|port| {
        let mut c = Command::new("openssl");
        c.args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-noservername", "-alpn", "http/1.1"]);
        c
    });
    assert_eq!(again.ja4(), ja4);
}
