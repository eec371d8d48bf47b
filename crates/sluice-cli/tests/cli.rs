//! End-to-end behaviour of the `sluice` binary: exact filtering, byte-exact
//! round trips, and bad inputs that stop with a position and lose nothing.

mod common;
use common::*;
use serde_json::Value;
use sluice_pcap::CaptureReader;
use sluice_rules::Prefix;
use sluice_wire::decode;
use std::path::Path;
use std::process::Command;

/// (data, timestamp ns) of every record.
fn records(path: &Path) -> Vec<(Vec<u8>, u128)> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        v.push((rec.data.to_vec(), rec.timestamp.as_nanos()));
    }
    v
}

#[test]
fn filter_drops_exactly_the_listed_packets() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("demo.pcap");
    let demo: Value =
        serde_json::from_str(&ok(&["demo", "--packets", "100000", "--seed", "3", "--keep", p(&capture), "--json"]))
            .unwrap();
    assert_eq!(demo["match"], true);
    let list = firehol_file(dir.path());
    let (pass, drop) = (dir.path().join("pass.pcap"), dir.path().join("drop.pcap"));
    let summary: Value = serde_json::from_str(&ok(&[
        "filter",
        "--in",
        p(&capture),
        "--drop-any",
        p(&list),
        "--pass",
        p(&pass),
        "--drop",
        p(&drop),
        "--json",
    ]))
    .unwrap();

    // Independent computation: a linear scan of every prefix for each packet.
    let prefixes: Vec<Prefix> =
        sluice_rules::parse_list("l", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false).unwrap().prefixes;
    let (mut want_pass, mut want_drop) = (Vec::new(), Vec::new());
    for rec in records(&capture) {
        let s = decode(sluice_wire::LinkType::ETHERNET, &rec.0).unwrap();
        let ip = s.ip.unwrap();
        if prefixes.iter().any(|p| p.contains(ip.src) || p.contains(ip.dst)) {
            want_drop.push(rec);
        } else {
            want_pass.push(rec);
        }
    }
    assert_eq!(summary["packets"], 100_000);
    assert_eq!(summary["dropped"].as_u64().unwrap(), want_drop.len() as u64);
    assert_eq!(summary["passed"].as_u64().unwrap(), want_pass.len() as u64);
    assert_eq!(demo["expected_dropped"].as_u64().unwrap(), want_drop.len() as u64);
    assert!(want_drop.len() > 9_000, "the demo draws 10% of sources from the list");
    // Same packets, same order, same timestamps.
    assert!(records(&drop) == want_drop, "dropped output differs from the independent computation");
    assert!(records(&pass) == want_pass, "passed output differs from the independent computation");
    // Reading by mmap, and on one thread, writes the same bytes.
    for extra in [["--read", "map"], ["--no-read-ahead", "--unordered"]] {
        let (pass2, drop2) = (dir.path().join("pass2.pcap"), dir.path().join("drop2.pcap"));
        let mut args =
            vec!["filter", "--in", p(&capture), "--drop-any", p(&list), "--pass", p(&pass2), "--drop", p(&drop2)];
        args.extend_from_slice(&extra);
        ok(&args);
        assert_eq!(std::fs::read(&pass2).unwrap(), std::fs::read(&pass).unwrap(), "{extra:?}");
        assert_eq!(std::fs::read(&drop2).unwrap(), std::fs::read(&drop).unwrap(), "{extra:?}");
    }
}

#[test]
fn generator_output_round_trips_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    for nanos in [false, true] {
        let (gen, copy) = (dir.path().join("g.pcap"), dir.path().join("copy.pcap"));
        let mut args = vec![
            "gen",
            "--out",
            p(&gen),
            "--count",
            "20000",
            "--ipv6",
            "0.3",
            "--size",
            "imix",
            "--qinq",
            "0.2",
            "--frag",
            "0.1",
        ];
        if nanos {
            args.push("--nanos");
        }
        ok(&args);
        ok(&["filter", "--in", p(&gen), "--pass", p(&copy)]);
        assert!(std::fs::read(&gen).unwrap() == std::fs::read(&copy).unwrap(), "nanos={nanos}");
    }
}

#[test]
fn generator_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
    for path in [&a, &b] {
        ok(&[
            "gen",
            "--out",
            p(path),
            "--count",
            "5000",
            "--seed",
            "42",
            "--flows",
            "100",
            "--zipf",
            "1.0",
            "--listed",
            "0.2",
        ]);
    }
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
}

#[test]
fn pcapng_input_to_pcap_and_pcapng_keeps_every_packet() {
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "3000", "--ipv6", "0.5", "--nanos"]);
    // pcap -> pcapng with our writer, then pcapng -> pcap.
    let (ng, back) = (dir.path().join("g.pcapng"), dir.path().join("back.pcap"));
    ok(&["filter", "--in", p(&gen), "--pass", p(&ng)]);
    assert_eq!(CaptureReader::open(&ng).unwrap().format(), sluice_pcap::Format::Pcapng);
    ok(&["filter", "--in", p(&ng), "--pass", p(&back)]);
    assert!(records(&gen) == records(&ng));
    assert!(std::fs::read(&gen).unwrap() == std::fs::read(&back).unwrap(), "pcap -> pcapng -> pcap is lossless");
    // A pcapng written by Wireshark's own tools, when present.
    if have_tool("editcap") {
        let theirs = dir.path().join("editcap.pcapng");
        let st = Command::new("editcap").args(["-F", "pcapng", p(&gen), p(&theirs)]).status().unwrap();
        assert!(st.success());
        let out = dir.path().join("from-editcap.pcap");
        ok(&["filter", "--in", p(&theirs), "--pass", p(&out)]);
        assert!(records(&out) == records(&gen), "editcap's pcapng read back with every packet and timestamp");
    }
}

#[test]
fn outputs_open_in_tshark_with_original_timestamps() {
    if !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "2000", "--listed", "0.5", "--nanos"]);
    let list = firehol_file(dir.path());
    for ext in ["pcap", "pcapng"] {
        let drop = dir.path().join(format!("drop.{ext}"));
        ok(&["filter", "--in", p(&gen), "--drop-src", p(&list), "--drop", p(&drop)]);
        let out = Command::new("tshark")
            .args(["-r", p(&drop), "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len"])
            .output()
            .unwrap();
        assert!(out.status.success(), "tshark cannot read our {ext}: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
        let ours = records(&drop);
        assert_eq!(lines.len(), ours.len());
        assert!(ours.len() > 800);
        for (line, (data, ns)) in lines.iter().zip(&ours) {
            let (t, len) = line.split_once('\t').unwrap();
            let (secs, frac) = t.split_once('.').unwrap();
            let tshark_ns = secs.parse::<u128>().unwrap() * 1_000_000_000 + frac.parse::<u128>().unwrap();
            assert_eq!(tshark_ns, *ns, "timestamp in {ext}");
            assert_eq!(len.parse::<usize>().unwrap(), data.len());
        }
    }
}

// ---- Bad inputs

#[test]
fn truncated_capture_keeps_everything_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "1000", "--size", "100"]);
    let bytes = std::fs::read(&gen).unwrap();
    // Each record is 16 + 100 bytes: cut inside record 700.
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..24 + 700 * 116 + 50]).unwrap();
    let pass = dir.path().join("pass.pcap");
    let (code, stdout, stderr) = stderr_of(&["filter", "--in", p(&cut), "--pass", p(&pass), "--json"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("record 700 at byte offset 81224"), "{stderr}");
    assert!(stderr.contains("file ends inside the record data (34 of 100 bytes)"), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["packets"], 700);
    assert_eq!(v["stopped_at"]["record"], 700);
    assert_eq!(records(&pass), records(&gen)[..700].to_vec());
    // decode stops at the same place, after printing the 700 packets.
    let (code, stdout, stderr) = stderr_of(&["decode", "--in", p(&cut)]);
    assert_eq!(code, 3);
    assert_eq!(stdout.lines().count(), 700);
    assert!(stderr.contains("record 700 at byte offset 81224"), "{stderr}");
}

#[test]
fn record_longer_than_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "10", "--size", "60"]);
    let mut bytes = std::fs::read(&gen).unwrap();
    // Record 9's captured length claims 5000 bytes.
    let at = 24 + 9 * 76 + 8;
    bytes[at..at + 4].copy_from_slice(&5000u32.to_le_bytes());
    let bad = dir.path().join("long.pcap");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, stdout, stderr) = stderr_of(&["filter", "--in", p(&bad), "--json"]);
    assert_eq!(code, 3);
    assert!(
        stderr.contains("record 9 at byte offset 708: file ends inside the record data (60 of 5000 bytes)"),
        "{stderr}"
    );
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["packets"], 9);
}

#[test]
fn wrong_magic_snaplen_zero_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&junk)]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("junk.pcap") && stderr.contains("not a pcap or pcapng file (magic number 0x74686973)"),
        "{stderr}"
    );

    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "10"]);
    let mut bytes = std::fs::read(&gen).unwrap();
    bytes[16..20].copy_from_slice(&0u32.to_le_bytes());
    let zero = dir.path().join("snap0.pcap");
    std::fs::write(&zero, &bytes).unwrap();
    let (code, stdout, stderr) = stderr_of(&["filter", "--in", p(&zero), "--json"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("snap length is 0; treating it as 262144"), "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["packets"], 10);

    let (code, _, stderr) = stderr_of(&["filter", "--in", "/nonexistent/in.pcap"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/in.pcap") && stderr.contains("No such file"), "{stderr}");
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&gen), "--drop-src", "/nonexistent/list.txt"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/list.txt: No such file"), "{stderr}");
}

#[test]
fn bad_list_line_is_named_or_skipped_with_lenient() {
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "10"]);
    let list = dir.path().join("bad.netset");
    std::fs::write(&list, "# a list\n1.2.3.0/24\n10.0.0.0/33\n2001:db8::/32\n").unwrap();
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&gen), "--drop-any", p(&list)]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("bad.netset:3: prefix length 33 is out of range for IPv4 (0-32): \"10.0.0.0/33\""),
        "{stderr}"
    );
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&gen), "--drop-any", p(&list), "--lenient"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("bad.netset:3:") && stderr.contains("(line skipped)"), "{stderr}");
}

#[test]
fn refuses_to_overwrite_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("g.pcap");
    ok(&["gen", "--out", p(&gen), "--count", "10"]);
    let before = std::fs::read(&gen).unwrap();
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&gen), "--pass", p(&dir.path().join(".").join("g.pcap"))]);
    assert_eq!(code, 2, "a wrong command line");
    assert!(stderr.contains("is the input file"), "{stderr}");
    assert_eq!(std::fs::read(&gen).unwrap(), before);
    let out = dir.path().join("o.pcap");
    let (code, _, stderr) = stderr_of(&["filter", "--in", p(&gen), "--pass", p(&out), "--drop", p(&out)]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--pass and --drop name the same file"), "{stderr}");
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, stderr) = stderr_of(&["filter"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--in <FILE>"), "{stderr}");
    let (code, _, stderr) = stderr_of(&["gen", "--out", "/tmp/x.pcap", "--size", "12"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("neither \"imix\" nor a frame size"), "{stderr}");
    // What a newcomer trips on, each a wrong command line (README: exit 2).
    let (code, _, stderr) = stderr_of(&["gen", "--out", "/tmp/x.pcap", "--ipv6", "1.5"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("1.5 is not a share: give a number from 0 to 1"), "{stderr}");
    let (code, _, stderr) = stderr_of(&["http-guard", "--listen", "0.0.0.0:0", "--upstream", "127.0.0.1:9"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a loopback address (pass --allow-remote"), "{stderr}");
    let (code, _, stderr) = stderr_of(&["ctl", "--socket", "/nonexistent/ctl.sock", "frobnicate"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("unknown command `frobnicate` (a bridge's or a shield's: add, del,")
            && stderr.contains("an http-guard's: blocks"),
        "{stderr}"
    );
}

#[test]
fn rss_command_reproduces_the_microsoft_suite() {
    // (destination, source, IP pair, 4-tuple), as published.
    let vectors = [
        ("161.142.100.80:1766", "66.9.149.187:2794", "0x323e8fc2", "0x51ccc178"),
        ("65.69.140.83:4739", "199.92.111.2:14230", "0xd718262a", "0xc626b0ea"),
        ("12.22.207.184:38024", "24.19.198.95:12898", "0xd2d0a5de", "0x5c2b394a"),
        ("209.142.163.6:2217", "38.27.205.30:48228", "0x82989176", "0xafc7327f"),
        ("202.188.127.2:1303", "153.39.163.191:44251", "0x5d1809c5", "0x10e828a2"),
        ("[3ffe:2501:200:3::1]:1766", "[3ffe:2501:200:1fff::7]:2794", "0x2cc18cd5", "0x40207d3d"),
        ("[ff02::1]:4739", "[3ffe:501:8::260:97ff:fe40:efab]:14230", "0x0f0c461c", "0xdde51bbf"),
        ("[fe80::200:f8ff:fe21:67cf]:38024", "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251", "0x4b61e985", "0x02d1feef"),
    ];
    for (dst, src, pair, four) in vectors {
        let (d, s): (std::net::SocketAddr, std::net::SocketAddr) = (dst.parse().unwrap(), src.parse().unwrap());
        let (sip, dip, sp, dp) = (s.ip().to_string(), d.ip().to_string(), s.port().to_string(), d.port().to_string());
        let out = ok(&["rss", "--src", &sip, "--dst", &dip]);
        assert_eq!(out.lines().next().unwrap(), pair, "{src} -> {dst}");
        let out =
            ok(&["rss", "--src", &sip, "--dst", &dip, "--sport", &sp, "--dport", &dp, "--workers", "4", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hash"], four, "{src} -> {dst} with ports");
        let hash = u32::from_str_radix(four.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(v["bucket"], (hash & 127) as u64);
        assert_eq!(v["worker"], ((hash & 127) % 4) as u64);
    }
    let (code, _, stderr) = stderr_of(&["rss", "--src", "1.2.3.4", "--dst", "::1"]);
    assert_eq!(code, 2, "a wrong command line");
    assert!(stderr.contains("both be IPv4 or both IPv6"), "{stderr}");
}

#[test]
fn workers_write_the_same_packets_in_the_same_order() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("d.pcap");
    ok(&[
        "gen",
        "--out",
        p(&capture),
        "--count",
        "30000",
        "--ipv6",
        "0.3",
        "--size",
        "imix",
        "--qinq",
        "0.1",
        "--frag",
        "0.05",
        "--listed",
        "0.2",
    ]);
    let list = firehol_file(dir.path());
    let run = |workers: &str, extra: &[&str]| {
        let (pass, drop) = (dir.path().join(format!("p{workers}.pcap")), dir.path().join(format!("x{workers}.pcap")));
        let mut args = vec![
            "filter",
            "--in",
            p(&capture),
            "--drop-any",
            p(&list),
            "--pass",
            p(&pass),
            "--drop",
            p(&drop),
            "--json",
            "--workers",
            workers,
        ];
        args.extend_from_slice(extra);
        let v: Value = serde_json::from_str(&ok(&args)).unwrap();
        (std::fs::read(pass).unwrap(), std::fs::read(drop).unwrap(), v)
    };
    let (p1, d1, v1) = run("1", &[]);
    for w in ["2", "3"] {
        let (pw, dw, vw) = run(w, &[]);
        assert!(pw == p1 && dw == d1, "--workers {w} output differs from --workers 1");
        assert_eq!(vw["dropped"], v1["dropped"]);
        let per: Vec<u64> = vw["workers"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.len(), w.parse::<usize>().unwrap());
        assert_eq!(per.iter().sum::<u64>(), 30_000);
        assert!(per.iter().all(|&n| n > 5_000), "RSS spread the flows: {per:?}");
    }
    // Unordered: the same packets, in some order.
    let (pu, du, _) = run("2", &["--unordered"]);
    assert_eq!(records_of(&pu), records_of(&p1));
    assert_eq!(records_of(&du), records_of(&d1));
}

/// Every record's bytes, sorted (order-insensitive comparison).
fn records_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut r = CaptureReader::new(bytes).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        v.push(rec.data.to_vec());
    }
    v.sort();
    v
}

#[test]
fn a_worker_that_panics_ends_the_run_with_an_error_and_valid_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("in.pcap");
    ok(&["gen", "--out", p(&capture), "--count", "30000", "--listed", "0.2", "--frag", "0.05"]);
    let list = firehol_file(dir.path());
    let (pass, drop) = (dir.path().join("pass.pcap"), dir.path().join("drop.pcap"));
    let args = [
        "filter",
        "--in",
        p(&capture),
        "--drop-any",
        p(&list),
        "--pass",
        p(&pass),
        "--drop",
        p(&drop),
        "--workers",
        "2",
        "--debug-panic-worker",
        "1:20",
    ];
    // No hang: the command must end by itself.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("sluice filter hung after a worker panicked");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code 1 (error); stderr: {stderr}");
    assert!(stderr.contains("worker 1") && stderr.contains("panicked"), "the error names the worker: {stderr}");
    // Both outputs are complete captures, and together they are a prefix of
    // the input in input order: every packet judged before the failure.
    let input = records(&capture);
    let (passed, dropped) = (records(&pass), records(&drop));
    let written = passed.len() + dropped.len();
    assert!(written > 0 && written < input.len(), "a prefix was written ({written} of {})", input.len());
    let (mut pi, mut di) = (passed.iter().peekable(), dropped.iter().peekable());
    for rec in &input[..written] {
        if pi.peek() == Some(&rec) {
            pi.next();
        } else {
            assert_eq!(di.next(), Some(rec), "outputs are the input's first {written} packets in order");
        }
    }
}

/// `--config FILE`: a bad key or value is refused before anything starts,
/// naming the file and line; so is a config file given to a command that
/// takes none. Logs come as JSON objects with `--log-format json`.
#[test]
fn config_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("edge.toml");
    std::fs::write(&cfg, "# edge box\niface = [\"a0\", \"b0\"]\n\nworkers = \"two\"\n").unwrap();
    let (code, _, err) = stderr_of(&["bridge", "--config", p(&cfg)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{}:4: `workers`: invalid value 'two'", cfg.display())), "{err}");
    std::fs::write(&cfg, "upstream = \"127.0.0.1:1\"\nrequest-rat = 5\n").unwrap();
    let (code, _, err) = stderr_of(&["http-guard", "--config", p(&cfg)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(":2: unknown key `request-rat`") && err.contains("did you mean `request-rate`"), "{err}");
    // The shield's (sluice-shield@.service), as the others'.
    std::fs::write(&cfg, "iface = [\"eth0\"]\nxdp-mod = \"generic\"\n").unwrap();
    let (code, _, err) = stderr_of(&["shield", "--config", p(&cfg)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(":2: unknown key `xdp-mod`") && err.contains("did you mean `xdp-mode`"), "{err}");
    std::fs::write(&cfg, "iface = [\"eth0\"]\ndrop-src = \"x.txt\"\n\nxdp-mode = \"fast\"\n").unwrap();
    let (code, _, err) = stderr_of(&["shield", "--config", p(&cfg)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{}:4: `xdp-mode`: invalid value 'fast'", cfg.display())), "{err}");
    let (code, _, err) = stderr_of(&["decode", "--config", p(&cfg)]);
    assert_eq!(code, 2, "decode takes no config file: {err}");
    // An interface that does not exist: the error is a JSON event.
    std::fs::write(&cfg, "iface = [\"nope-a0\", \"nope-b0\"]\nio = \"afpacket\"\n").unwrap();
    let (code, _, err) = stderr_of(&["--log-format", "json", "bridge", "--config", p(&cfg)]);
    assert_eq!(code, 1, "{err}");
    for line in err.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
    }
    assert!(err.contains("\"level\":\"ERROR\"") && err.contains("nope-a0"), "{err}");
}

/// An Ethernet/IPv4/UDP frame carrying `payload` (header checksums filled).
fn udp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip.chunks(2).fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let len = (8 + payload.len()) as u16;
    f.extend_from_slice(&[(sport >> 8) as u8, sport as u8, (dport >> 8) as u8, dport as u8]);
    f.extend_from_slice(&[(len >> 8) as u8, len as u8, 0, 0]);
    f.extend_from_slice(payload);
    f
}

/// `--steer inner`: one VXLAN endpoint pair carrying 400 inner flows lands
/// on one worker when software RSS hashes the outer headers, and spreads
/// over both when it hashes the inner ones; the verdicts are the same.
#[test]
fn inner_steering_spreads_one_tunnel_over_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<Vec<u8>> = (0..400u16)
        .map(|i| {
            let inner = udp_frame([192, 0, 2, (i % 200) as u8 + 1], [198, 51, 100, 1], 1000 + i, 53, b"query");
            let mut vxlan = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
            vxlan.extend_from_slice(&inner);
            udp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 4789, &vxlan)
        })
        .collect();
    let capture = dir.path().join("vxlan.pcap");
    std::fs::write(&capture, pcap(&frames)).unwrap();
    let rules = dir.path().join("inner.rules");
    std::fs::write(&rules, "drop inner saddr 192.0.2.0/26\n").unwrap();
    let run = |steer: &str| -> Value {
        serde_json::from_str(&ok(&[
            "filter",
            "--in",
            p(&capture),
            "--rules",
            p(&rules),
            "--workers",
            "2",
            "--steer",
            steer,
            "--json",
        ]))
        .unwrap()
    };
    let (outer, inner) = (run("outer"), run("inner"));
    let workers =
        |v: &Value| -> Vec<u64> { v["workers"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect() };
    let (wo, wi) = (workers(&outer), workers(&inner));
    assert_eq!(wo.iter().filter(|&&n| n > 0).count(), 1, "one endpoint pair, one worker: {wo:?}");
    assert!(wi.iter().all(|&n| n >= 100), "inner flows spread: {wi:?}");
    assert_eq!(wo.iter().sum::<u64>(), 400);
    for k in ["packets", "passed", "dropped", "dropped_by_rule", "dropped_by_src"] {
        assert_eq!(outer[k], inner[k], "{k}");
    }
    // 192.0.2.1-63 of 1-200, twice each: 126 packets dropped.
    assert_eq!(inner["dropped"], 126, "{inner}");
}

/// Offline, drop samples are never lost: the run waits for the sample
/// writer rather than shed (as a live bridge does), so with no rate cap
/// every drop is written and ten runs write the same file. 200,000 packets,
/// half of them dropped, outpace the writer: before the run waited, each
/// run here lost a different 27-45% of its samples (`lost_queue_full`).
#[test]
fn offline_drop_samples_are_all_written_and_the_same_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("half_listed.pcap");
    ok(&["gen", "--out", p(&capture), "--count", "200000", "--listed", "0.5", "--seed", "7"]);
    let list = firehol_file(dir.path());
    let mut first: Option<Vec<u8>> = None;
    for run in 0..10 {
        let samples = dir.path().join(format!("drops-{run}.pcapng"));
        let out = sluice(&[
            "filter",
            "--in",
            p(&capture),
            "--drop-src",
            p(&list),
            "--sample-drops",
            p(&samples),
            "--sample-max-pps",
            "0",
            "--json",
            "--no-progress",
        ]);
        assert!(out.status.success(), "run {run}: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (dropped, s) = (v["dropped"].as_u64().unwrap(), &v["samples"]);
        assert!(dropped > 90_000, "{v}");
        assert_eq!((s["written"].as_u64(), s["lost_queue_full"].as_u64()), (Some(dropped), Some(0)), "run {run}: {s}");
        let bytes = std::fs::read(&samples).unwrap();
        match &first {
            None => first = Some(bytes),
            Some(f) => assert!(*f == bytes, "run {run} wrote other samples than run 0"),
        }
        // Nothing to warn of (a shedding sampler's first loss would be).
        assert!(out.stderr.is_empty(), "run {run}: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::remove_file(&samples).unwrap();
    }
}

/// The fenced block after `marker` in docs/decode.md, its lines.
fn decode_doc_block(marker: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/decode.md")).unwrap();
    let after = &doc[doc.find(marker).unwrap_or_else(|| panic!("docs/decode.md has no {marker}"))..];
    let body = after.split("```").nth(1).expect("a fenced block after the marker");
    body.lines().skip(1).map(|l| l.replace('→', "\t")).collect()
}

#[test]
fn decode_prints_what_docs_decode_md_shows() {
    // An ARP frame, an IPv4 header cut short, and a UDP first fragment
    // (MF set) behind VLAN 100.
    let eth = |ty: u16| [[2u8; 6].as_slice(), &[4u8; 6], &ty.to_be_bytes()].concat();
    let arp = [eth(0x0806), vec![0; 28]].concat();
    let cut = [eth(0x0800), vec![0x45, 0, 0]].concat();
    let mut tagged = [[2u8; 6].as_slice(), &[4u8; 6], &[0x81, 0x00, 0, 100, 0x08, 0x00]].concat();
    tagged.extend_from_slice(&[0x45, 0, 0, 0x1c, 0, 1, 0x20, 0, 0x40, 0x11, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
    tagged.extend_from_slice(&[0x04, 0xd2, 0, 53, 0, 8, 0, 0]);
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("three.pcap");
    std::fs::write(&capture, pcap(&[arp, cut, tagged])).unwrap();
    let text: Vec<String> = ok(&["decode", "--in", p(&capture)]).lines().map(str::to_owned).collect();
    assert_eq!(text, decode_doc_block("<!-- decode-text-example"));
    let json: Vec<String> = ok(&["decode", "--in", p(&capture), "--json"]).lines().map(str::to_owned).collect();
    assert_eq!(json, decode_doc_block("<!-- decode-json-example"));

    // Cut inside the second record: the first is printed, then the error
    // line the docs show, exit 3.
    let whole = std::fs::read(&capture).unwrap();
    let short = dir.path().join("cut.pcap");
    std::fs::write(&short, &whole[..24 + 16 + 42 + 16 + 5]).unwrap();
    let (code, out, err) = stderr_of(&["decode", "--in", p(&short)]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        err.contains(": stopped at record 1 at byte offset 82: file ends inside the record data (5 of 17 bytes); the 1 packet before it was decoded"),
        "{err}"
    );
}

/// SIGINT ends `sluice filter` where its input is, as its library's handle
/// does: the packets read are judged and written (the outputs whole), and
/// the summary says it was interrupted (a killed run wrote none). The
/// input trickles into standard input and never ends by itself.
#[test]
fn filter_writes_its_summary_and_whole_outputs_at_sigint() {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let (pass, drop) = (dir.path().join("pass.pcap"), dir.path().join("drop.pcap"));
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "10.9.0.0/16\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["filter", "--in", "-", "--drop-src", p(&list), "--pass", p(&pass), "--drop", p(&drop), "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (done, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let writer = {
        let (done, sent) = (Arc::clone(&done), Arc::clone(&sent));
        std::thread::spawn(move || {
            let header = pcap(&[]);
            if stdin.write_all(&header).is_err() {
                return;
            }
            let mut i = 0u32;
            while !done.load(Ordering::Relaxed) {
                let frames: Vec<_> = (0..100)
                    .map(|k| {
                        let n = i * 100 + k;
                        let src = if n.is_multiple_of(4) { [10, 9, (n >> 8) as u8, n as u8] } else { [172, 16, 0, 1] };
                        udp_frame(src, [192, 0, 2, 1], 1234, 53, b"x")
                    })
                    .collect();
                // A broken pipe: the filter has ended.
                if stdin.write_all(&pcap(&frames)[24..]).is_err() {
                    return;
                }
                sent.fetch_add(100, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    // 1.3 MB through a 64 KiB pipe: the filter has read several of its
    // 256 KiB chunks, so it has judged packets.
    while sent.load(Ordering::Relaxed) < 22_000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let started = std::time::Instant::now();
    let out = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "filter still running 10 s after SIGINT");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(out.success(), "{out}: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let v: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(v["interrupted"], true, "{v}");
    let (passed, dropped) = (records(&pass).len() as u64, records(&drop).len() as u64);
    assert_eq!(v["packets"], passed + dropped, "{v}");
    assert_eq!(v["dropped"], dropped, "{v}");
    assert!(dropped > 0 && passed > 0 && passed + dropped <= sent.load(Ordering::Relaxed), "{v}");
}
