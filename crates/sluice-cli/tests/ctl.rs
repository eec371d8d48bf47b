//! `sluice ctl` against a running bridge's control socket: every command,
//! ipset semantics (a deleted host still covered by its prefix), timeouts,
//! an atomic batch whose bad line changes nothing and is named, a reload
//! that keeps a dynamic set and drops runtime changes to a list's set, and
//! peers refused by the socket's mode and by SO_PEERCRED.
//!
//! Needs root (a veth pair for the bridge): `SKIPPED` unless
//! `SLUICE_REQUIRE_LIVE=1`, when it fails instead.

use sluice_testkit::live;

use live::{live_or_skip, Topology};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A running bridge, and its metrics address when `--metrics` was given.
struct Bridge(Child, Option<String>);

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Bridge {
    /// One series' value from /metrics, by its line's start (name and labels).
    fn metric(&self, series: &str) -> Option<f64> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.1.as_deref()?).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

fn start(topo: &Topology, rules: &Path, socket: &Path, extra: &[&str]) -> Bridge {
    let mut child = Command::new(SLUICE)
        .args(["bridge", "--iface", &topo.a.near, "--iface", &topo.b.near, "--io", "afpacket"])
        .args(["--rules", p(rules), "--control", p(socket)])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut metrics = None;
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "the bridge did not come up: {seen}");
        seen += &line;
        if let Some(m) = line.trim().strip_prefix("sluice: metrics at http://") {
            metrics = Some(m.trim_end_matches("/metrics").to_owned());
        }
        if line.starts_with("sluice: bridging") {
            break;
        }
    }
    std::thread::spawn(move || for _ in r.lines() {});
    Bridge(child, metrics)
}

fn ctl_output(socket: &Path, args: &[&str]) -> Output {
    Command::new(SLUICE).args(["ctl", "--socket", p(socket)]).args(args).output().unwrap()
}

/// `sluice ctl --json ...`, which must succeed.
fn ctl(socket: &Path, args: &[&str]) -> Value {
    let out = ctl_output(socket, &[&["--json"], args].concat());
    assert!(out.status.success(), "ctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sluice ctl ...`, which must fail; its stderr.
fn ctl_fails(socket: &Path, args: &[&str]) -> String {
    let out = ctl_output(socket, args);
    assert!(!out.status.success(), "ctl {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn elements(socket: &Path, set: &str) -> Vec<String> {
    let v = ctl(socket, &["list", set]);
    v["elements"].as_array().unwrap().iter().map(|e| e["element"].as_str().unwrap().to_owned()).collect()
}

fn matches(socket: &Path, set: &str, addr: &str) -> Option<(String, String)> {
    let v = ctl(socket, &["test", set, addr]);
    v["match"]
        .as_bool()
        .unwrap()
        .then(|| (v["element"].as_str().unwrap_or("").to_owned(), v["from"].as_str().unwrap().to_owned()))
}

#[test]
fn ctl_every_command() {
    if !live_or_skip("ctl_every_command") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fh.txt"), "10.0.0.0/8\n10.1.2.3\n203.0.113.0/24\n").unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "set blocks dynamic timeout 3600\nset fh from \"fh.txt\"\ndrop saddr @blocks\ndrop saddr @fh\n",
    )
    .unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("ct");
    let _bridge = start(&topo, &rules, &sock, &[]);

    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is the owner's only");

    // sets
    let sets = ctl(&sock, &["sets"]);
    let row =
        |v: &Value, name: &str| v["sets"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap();
    assert_eq!(row(&sets, "blocks")["kind"], "dynamic timeout 3600");
    assert_eq!(row(&sets, "fh")["entries"], 3);

    // add, test, list; the set's default timeout applies
    let r = ctl(&sock, &["add", "blocks", "192.0.2.1"]);
    assert_eq!(r["applied"], 1);
    assert!(r["generation"].as_u64().unwrap() >= 1);
    assert_eq!(matches(&sock, "blocks", "192.0.2.1"), Some(("192.0.2.1/32".into(), "added".into())));
    assert_eq!(matches(&sock, "blocks", "192.0.2.2"), None);
    let l = ctl(&sock, &["list", "blocks"]);
    let t = l["elements"][0]["expires_in"].as_u64().unwrap();
    assert!((3590..=3600).contains(&t), "default timeout: {l}");

    // a timeout of its own, expired on the clock
    ctl(&sock, &["add", "blocks", "198.51.100.0/24", "timeout", "1"]);
    assert!(matches(&sock, "blocks", "198.51.100.7").is_some());
    let end = Instant::now() + Duration::from_secs(5);
    while matches(&sock, "blocks", "198.51.100.7").is_some() {
        assert!(Instant::now() < end, "the 1 s element did not expire");
        std::thread::sleep(Duration::from_millis(100));
    }

    // ipset semantics on a list's set: a deleted host is still covered by its /8
    ctl(&sock, &["del", "fh", "10.1.2.3"]);
    assert_eq!(matches(&sock, "fh", "10.1.2.3"), Some(("10.0.0.0/8".into(), "base".into())));
    ctl(&sock, &["del", "fh", "10.0.0.0/8"]);
    assert_eq!(matches(&sock, "fh", "10.1.2.3"), None);
    let e = ctl_fails(&sock, &["del", "fh", "10.0.0.0/8"]);
    assert!(e.contains("10.0.0.0/8 is not in the set"), "{e}");
    assert_eq!(elements(&sock, "fh"), vec!["203.0.113.0/24"]);
    let sets = ctl(&sock, &["sets"]);
    assert_eq!((row(&sets, "fh")["base"].clone(), row(&sets, "fh")["deleted"].clone()), (3.into(), 2.into()));

    // a batch with a bad line changes nothing and names the line
    let before = elements(&sock, "blocks");
    let batch = dir.path().join("batch.txt");
    std::fs::write(&batch, "# three adds\nadd blocks 192.0.2.10\nadd blocks 192.0.2.300\nadd blocks 192.0.2.11\n")
        .unwrap();
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("batch.txt:3:") && e.contains("192.0.2.300"), "{e}");
    std::fs::write(&batch, "add blocks 192.0.2.10\ndel blocks 192.0.2.99\nadd blocks 192.0.2.11\n").unwrap();
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("batch.txt:2:") && e.contains("not in the set"), "checked by the bridge: {e}");
    assert_eq!(elements(&sock, "blocks"), before, "nothing changed");
    let e = ctl_fails(&sock, &["add", "nosuch", "192.0.2.1"]);
    assert!(e.contains("no set `nosuch`") && e.contains("blocks, fh"), "{e}");
    // A query in a batch is named as it is spelled, not as Rust prints it.
    std::fs::write(&batch, "add blocks 192.0.2.10\ntest blocks 192.0.2.10\n").unwrap();
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("batch.txt:2:") && e.contains("not `test`"), "{e}");
    // `--json` after the command is the flag.
    let out = Command::new(SLUICE).args(["ctl", "--socket", p(&sock), "sets", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v, ctl(&sock, &["sets"]));

    // a good batch from standard input is applied as one publication
    let mut child = Command::new(SLUICE)
        .args(["ctl", "--json", "--socket", p(&sock), "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let lines: String = (1..=200).map(|i| format!("add blocks 100.64.{}.{}\n", i / 100, i % 100)).collect();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["applied"], 200);
    assert_eq!(elements(&sock, "blocks").len(), 201);

    // text output
    let out = ctl_output(&sock, &["test", "blocks", "100.64.1.5"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100.64.1.5 is in blocks (element 100.64.1.5/32, added)");

    // stats
    let s = ctl(&sock, &["stats"]);
    assert!(s["updates"].as_u64().unwrap() >= 204, "{s}");
    assert!(s["ctl_failed"].as_u64().unwrap() >= 3, "{s}");
    assert!(s["expired"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["publish_p99_us"].as_u64().is_some(), "{s}");

    // reload: the dynamic set keeps its elements, the list's set is read again
    let r = ctl(&sock, &["reload"]);
    assert!(r["generation"].as_u64().is_some());
    assert_eq!(elements(&sock, "blocks").len(), 201, "a dynamic set survives a reload");
    assert_eq!(matches(&sock, "fh", "10.1.2.3"), Some(("10.1.2.3/32".into(), "base".into())));

    // flush
    ctl(&sock, &["flush", "blocks"]);
    assert!(elements(&sock, "blocks").is_empty());
    assert_eq!(matches(&sock, "blocks", "100.64.1.5"), None);
}

/// The safety net: `--never-block` refuses an add that covers a listed
/// address or lies within a listed prefix, `--min-prefix-*` one wider than
/// allowed; a batch with such a line is refused whole naming the line and
/// why, each refusal counted; SIGHUP rereads the list.
#[test]
fn ctl_adds_the_safety_net_refuses() {
    if !live_or_skip("ctl_adds_the_safety_net_refuses") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set blocks dynamic\ndrop saddr @blocks\n").unwrap();
    let never = dir.path().join("never.txt");
    std::fs::write(&never, "# the office\n10.1.2.3\n2001:db8:1::/48\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("cn");
    let bridge = start(&topo, &rules, &sock, &["--never-block", p(&never)]);

    for (elem, why) in [
        ("10.0.0.0/8", "refused (never_block): it overlaps 10.1.2.3/32, which is on the never-block list"),
        ("10.1.2.3", "refused (never_block)"),
        ("2001:db8:1:7::/64", "it overlaps 2001:db8:1::/48"),
        ("0.0.0.0/1", "refused (min_prefix): it is wider than /8, the widest a runtime add may be (--min-prefix-v4 8)"),
        ("2000::/15", "(--min-prefix-v6 16)"),
        ("0.0.0.0/0", "refused (min_prefix)"),
    ] {
        let e = ctl_fails(&sock, &["add", "blocks", elem]);
        assert!(e.contains(&format!("add blocks {}", elem.parse::<sluice_rules::Prefix>().unwrap())), "{elem}: {e}");
        assert!(e.contains(why) && e.contains("nothing applied"), "{elem}: {e}");
    }
    assert!(elements(&sock, "blocks").is_empty());
    // Beside them, and exactly as wide as allowed, adds go in.
    for elem in ["10.1.2.4", "11.0.0.0/8", "2001:db8:2::/48", "2a00::/16"] {
        assert_eq!(ctl(&sock, &["add", "blocks", elem])["applied"], 1, "{elem}");
    }

    // A batch with refused lines is refused whole, naming the first and
    // counting the others; the JSON reply lists them all.
    let batch = dir.path().join("batch.txt");
    std::fs::write(
        &batch,
        "add blocks 192.0.2.1\nadd blocks 128.0.0.0/1\nadd blocks 192.0.2.2\nadd blocks 10.1.0.0/16\n",
    )
    .unwrap();
    let before = elements(&sock, "blocks");
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("batch.txt:2: add blocks 128.0.0.0/1 refused (min_prefix)"), "{e}");
    assert!(e.contains("(2 lines refused in all)"), "{e}");
    let out = ctl_output(&sock, &["--json", "-f", p(&batch)]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["line"].clone(), v["refused_lines"].clone()), (2.into(), serde_json::json!([2, 4])), "{v}");
    assert_eq!(elements(&sock, "blocks"), before, "nothing of the batch applied");
    let s = ctl(&sock, &["stats"]);
    assert_eq!((s["refused_never_block"].as_u64(), s["refused_min_prefix"].as_u64()), (Some(5), Some(5)), "{s}");

    // SIGHUP rereads the list: 10.1.2.3 may be blocked now, 192.0.2.0/24 not.
    let tmp = dir.path().join("never.tmp");
    std::fs::write(&tmp, "192.0.2.0/24\n").unwrap();
    std::fs::rename(&tmp, &never).unwrap();
    let hup = Command::new("kill").args(["-HUP", &bridge.0.id().to_string()]).status().unwrap();
    assert!(hup.success());
    let end = Instant::now() + Duration::from_secs(5);
    while !ctl_output(&sock, &["add", "blocks", "10.1.2.3"]).status.success() {
        assert!(Instant::now() < end, "the list was not reread on SIGHUP");
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = ctl_fails(&sock, &["add", "blocks", "192.0.2.77"]);
    assert!(e.contains("it overlaps 192.0.2.0/24"), "{e}");
    // A list that no longer reads keeps the one in force.
    std::fs::write(&never, "192.0.2.0/24\nnot an address\n").unwrap();
    ctl(&sock, &["reload"]);
    assert!(ctl_fails(&sock, &["add", "blocks", "192.0.2.77"]).contains("never_block"));
}

/// Bad safety-net flags stop either command at start, before anything
/// opens, naming what is wrong.
#[test]
fn bad_safety_net_flags_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never.txt");
    std::fs::write(&never, "10.1.2.3\n10.1.2.300\n").unwrap();
    let bridge = |extra: &[&str]| {
        let out = Command::new(SLUICE)
            .args(["bridge", "--iface", "sluice-nope0", "--iface", "sluice-nope1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = bridge(&["--never-block", p(&never)]);
    assert!(e.contains(&format!("--never-block {}:2: not an IPv4 or IPv6 address: \"10.1.2.300\"", p(&never))), "{e}");
    assert!(bridge(&["--min-prefix-v4", "0"]).contains("--min-prefix-v4 0: give 1 to 32"));
    assert!(bridge(&["--min-prefix-v6", "129"]).contains("--min-prefix-v6 129: give 1 to 128"));
    let guard = |extra: &[&str]| {
        let sock = dir.path().join("g.sock");
        let out = guard_command(&sock, 1).args(extra).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(guard(&["--never-block", p(&never)]).contains(&format!("--never-block {}:2:", p(&never))));
    let e = guard(&["--key-prefix-v4", "4"]);
    assert!(e.contains("--key-prefix-v4 4 is wider than --min-prefix-v4 8: every block would be refused"), "{e}");
}

#[test]
fn a_full_set_refuses_adds_counts_them_and_takes_renewals() {
    if !live_or_skip("a_full_set_refuses_adds_counts_them_and_takes_renewals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set small dynamic maxelem 3 timeout 600\nset big dynamic\ndrop saddr @small\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("cf");
    let bridge = start(&topo, &rules, &sock, &["--metrics", "127.0.0.1:0"]);

    let sets = ctl(&sock, &["sets"]);
    let row =
        |v: &Value, name: &str| v["sets"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap();
    assert_eq!(
        (row(&sets, "small")["maxelem"].clone(), row(&sets, "big")["maxelem"].clone()),
        (3.into(), 1_000_000.into())
    );

    for a in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        ctl(&sock, &["add", "small", a]);
    }
    let e = ctl_fails(&sock, &["add", "small", "192.0.2.4"]);
    assert!(
        e.contains(
            "add small 192.0.2.4/32: the set is full: it holds 3 elements, its maxelem; 192.0.2.4/32 is not added"
        ),
        "{e}"
    );
    // Renewing a present element is not refused.
    ctl(&sock, &["add", "small", "192.0.2.3", "timeout", "60"]);
    // A batch that would overflow is refused whole, naming its line.
    let batch = dir.path().join("batch.txt");
    std::fs::write(&batch, "del small 192.0.2.1\nadd small 192.0.2.5\nadd small 192.0.2.6\nadd small 192.0.2.1\n")
        .unwrap();
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("batch.txt:3:") && e.contains("the set is full") && e.contains("refused whole"), "{e}");
    assert_eq!(elements(&sock, "small"), vec!["192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32"], "nothing changed");
    // Deletes first make room in the same batch.
    std::fs::write(&batch, "del small 192.0.2.1\nadd small 192.0.2.5\n").unwrap();
    assert_eq!(ctl(&sock, &["-f", p(&batch)])["applied"], 2);
    // One single add and three add lines of the batch were refused.
    assert_eq!(bridge.metric("sluice_set_refused_total{set=\"small\",reason=\"full\"}"), Some(4.0));
    assert_eq!(bridge.metric("sluice_set_maxelem{set=\"small\"}"), Some(3.0));
    let out = ctl_output(&sock, &["sets"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().contains("maxelem"), "{text}");
    assert!(
        text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..4] == ["small", "dynamic", "timeout", "600"]
            && l.split_whitespace().nth(4) == Some("3")
            && l.split_whitespace().nth(5) == Some("3")),
        "{text}"
    );
}

#[test]
fn ctl_refuses_other_users() {
    if !live_or_skip("ctl_refuses_other_users") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set blocks dynamic\ndrop saddr @blocks\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("cu");
    let _bridge = start(&topo, &rules, &sock, &[]);
    let as_nobody = |sock: &Path| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                SLUICE,
                "ctl",
                "--socket",
                p(sock),
                "sets",
            ])
            .output()
            .unwrap()
    };
    // The socket's mode keeps other users out...
    let out = as_nobody(&sock);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    // ...and were it opened up, SO_PEERCRED still refuses them.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody(&sock);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused: uid 65534"), "{err}");
    assert!(ctl(&sock, &["add", "blocks", "192.0.2.1"])["ok"] == true, "root still may");

    // --control-group lets that group in.
    let sock2 = dir.path().join("ctl2.sock");
    let topo2 = Topology::new("cg");
    let _bridge2 = start(&topo2, &rules, &sock2, &["--control-group", "65534"]);
    let meta = std::fs::metadata(&sock2).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let out = as_nobody(&sock2);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The group as a supplementary one (primary gid 1) is let in too.
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "1", "--groups", "65534", SLUICE, "ctl", "--socket", p(&sock2), "sets"])
        .output()
        .unwrap();
    assert!(out.status.success(), "supplementary group: {}", String::from_utf8_lossy(&out.stderr));
    // And a user in neither is refused by the socket's mode.
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "1", "--clear-groups", SLUICE, "ctl", "--socket", p(&sock2), "sets"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A peer in `--control-group` as a supplementary group (as the guard's
/// user is in the bridge's, under systemd) is let in where the socket's
/// owner cannot see the peer's /proc entry: the units' ProtectProc=invisible
/// hides other users' processes, so the groups are taken from the socket
/// (SO_PEERGROUPS). Forty groups: more than the first guess of room.
#[test]
fn a_supplementary_group_gets_in_where_proc_is_hidden() {
    if !live_or_skip("a_supplementary_group_gets_in_where_proc_is_hidden") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The server's user makes its socket here, and gives it to its group
    // 4242 (which takes being in it, as the bridge's user is in sluice-ctl).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = dir.path().join("guard.sock");
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let guard = format!(
        "mount -t proc -o hidepid=invisible proc /proc && exec setpriv --reuid 65534 --regid 65534 --groups 4242 \
         {SLUICE} http-guard --listen 127.0.0.1:0 --upstream {} --control {} --control-group 4242",
        upstream.local_addr().unwrap(),
        p(&sock)
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &guard])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = Bridge(child, None);
    let end = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(Instant::now() < end, "the guard made no socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    let as_peer = |groups: &str| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65533",
                "--regid",
                "1",
                "--groups",
                groups,
                SLUICE,
                "ctl",
                "--socket",
                p(&sock),
                "blocks",
            ])
            .output()
            .unwrap()
    };
    let groups: Vec<String> = (5000..5039).map(|g| g.to_string()).chain(["4242".into()]).collect();
    let out = as_peer(&groups.join(","));
    assert!(out.status.success(), "a member by a supplementary group: {}", String::from_utf8_lossy(&out.stderr));
    // Not a member: refused, by SO_PEERCRED even with the file opened up.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_peer("5000");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused: uid 65533"), "{out:?}");
}

/// Our frames for the update test: UDP/IPv4 from 10.201.0.S with a payload
/// of a magic, the source index, a sequence number and the send time.
const UPD_MAGIC: &[u8; 8] = b"SLUICEUP";

fn upd_frame(src: u8, seq: u32, sent_ns: u64) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let payload_len = 8 + 8 + 4 + 4 + 8;
    let total = 20 + payload_len;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 201, 0, src]);
    f.extend_from_slice(&[10, 202, 0, 1]);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, (payload_len) as u8, 0, 0]);
    f.extend_from_slice(UPD_MAGIC);
    f.extend_from_slice(&u32::from(src).to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&sent_ns.to_be_bytes());
    f
}

/// (source, seq, sent ns) of one of our frames.
fn upd_parse(f: &[u8]) -> Option<(u8, u32, u64)> {
    let at = 14 + 20 + 8;
    if f.len() < at + 24 || &f[at..at + 8] != UPD_MAGIC {
        return None;
    }
    let src = u32::from_be_bytes(f[at + 8..at + 12].try_into().ok()?) as u8;
    let seq = u32::from_be_bytes(f[at + 12..at + 16].try_into().ok()?);
    let ns = u64::from_be_bytes(f[at + 16..at + 24].try_into().ok()?);
    Some((src, seq, ns))
}

/// Adds and deletes streamed through the control socket while traffic
/// flows through a bridge of two workers, with a background stream of
/// batches (100 adds every 10 ms, 10,000/s) so that publications, merges
/// and coalescing happen all along. A frame is judged somewhere between
/// its sending and its arrival (or, dropped, before the next frame of its
/// flow arrives: the bridge keeps a flow's order), so without any
/// assumption about how fast the bridge is: no frame sent after its
/// source's add was published and arrived before its delete was requested
/// passes; none sent after its delete was published is dropped; none
/// judged before its add was requested is dropped.
#[test]
fn ctl_updates_under_traffic_give_no_wrong_verdict() {
    if !live_or_skip("ctl_updates_under_traffic_give_no_wrong_verdict") {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set blocks dynamic\ndrop saddr @blocks\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("cw");
    let _bridge = start(&topo, &rules, &sock, &["--workers", "2"]);

    const SOURCES: u8 = 48;
    let t0 = Instant::now();
    let now = move || t0.elapsed().as_nanos() as u64;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tx = live::Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut rx = live::Endpoint::open(&topo.ns_b.name, &topo.b.far);

    let receiver = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // (source, seq) -> arrival ns.
            let mut got = std::collections::HashMap::new();
            let mut quiet_since: Option<Instant> = None;
            loop {
                rx.sock.poll_rx(5).unwrap();
                let n = rx.sock.rx_batch(4096, |f, _| {
                    if let Some((s, q, _)) = upd_parse(f) {
                        assert!(got.insert((s, q), now()).is_none(), "frame {s}/{q} arrived twice");
                    }
                });
                if stop.load(Ordering::Relaxed) {
                    // Drain for 200 ms after the sender stopped.
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if n == 0 && since.elapsed() > Duration::from_millis(200) {
                        return got;
                    }
                }
            }
        })
    };
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut seq = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // 20 frames a millisecond: 20,000 a second over all sources.
                for _ in 0..20 {
                    let src = (seq % u32::from(SOURCES)) as u8;
                    let t = now();
                    let f = upd_frame(src, seq, t);
                    while !tx.sock.send(&f).unwrap() {
                        tx.sock.flush_wait().unwrap();
                    }
                    log.push((src, seq, t));
                    seq += 1;
                }
                tx.sock.flush().unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            tx.sock.flush_wait().unwrap();
            log
        })
    };
    // Background: 100 unrelated adds every 10 ms.
    let noise = {
        let (stop, sock) = (Arc::clone(&stop), sock.clone());
        std::thread::spawn(move || {
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let text: String = (0..100)
                    .map(|_| {
                        k += 1;
                        format!("add blocks 198.18.{}.{} timeout 2\n", k >> 8 & 0xff, k & 0xff)
                    })
                    .collect();
                let r = sluice_control::socket::request(&sock, &text, Duration::from_secs(10)).unwrap();
                assert_eq!(r["ok"], true, "{r}");
                std::thread::sleep(Duration::from_millis(10));
            }
            k
        })
    };

    // Each source: added at some point, most deleted later; the times of
    // each request (before) and its reply (after), in send-clock ns.
    std::thread::sleep(Duration::from_millis(300));
    let mut add: Vec<Option<(u64, u64)>> = vec![None; usize::from(SOURCES)];
    let mut del: Vec<Option<(u64, u64)>> = vec![None; usize::from(SOURCES)];
    let ctl = |text: String| {
        let before = now();
        let r = sluice_control::socket::request(&sock, &text, Duration::from_secs(10)).unwrap();
        assert_eq!(r["ok"], true, "{text}: {r}");
        (before, now())
    };
    for s in 0..SOURCES {
        add[usize::from(s)] = Some(ctl(format!("add blocks 10.201.0.{s}")));
        std::thread::sleep(Duration::from_millis(15));
        if s >= 8 {
            let d = s - 8;
            del[usize::from(d)] = Some(ctl(format!("del blocks 10.201.0.{d}")));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let log = sender.join().unwrap();
    let got = receiver.join().unwrap();
    let noise_adds = noise.join().unwrap();

    // Per source, in sending order: the arrival of the next frame that
    // arrived bounds when a dropped frame was judged (a flow keeps its
    // order through the bridge, checked here too).
    let mut judged_by: Vec<Option<u64>> = vec![None; log.len()];
    let mut next_arrival: Vec<Option<(u32, u64)>> = vec![None; usize::from(SOURCES)];
    for (i, &(s, q, _)) in log.iter().enumerate().rev() {
        let next = &mut next_arrival[usize::from(s)];
        judged_by[i] = got.get(&(s, q)).copied().or(next.map(|(_, r)| r));
        if let Some(&r) = got.get(&(s, q)) {
            if let Some((nq, nr)) = *next {
                assert!(r <= nr, "source {s}: frame {q} arrived after frame {nq}, sent later");
            }
            *next = Some((q, r));
        }
    }
    let (mut leaked, mut lost, mut checked_blocked, mut checked_open) = (Vec::new(), Vec::new(), 0, 0);
    for (i, &(s, q, t)) in log.iter().enumerate() {
        let (a, d) = (add[usize::from(s)], del[usize::from(s)]);
        let arrival = got.get(&(s, q)).copied();
        // Judged inside [t, judged_by]: wholly inside the time the element
        // was surely in the set, or surely not.
        // A dropped frame sent while its element was in the set counts as
        // checked: had it passed, it would have arrived before the delete.
        let by = judged_by[i];
        let sent_blocked = a.is_some_and(|(_, ar)| t > ar) && d.is_none_or(|(db, _)| t < db);
        let surely_blocked = sent_blocked && d.is_none_or(|(db, _)| arrival.is_none_or(|r| r < db));
        let surely_open = d.is_some_and(|(_, dr)| t > dr) || a.is_none_or(|(ab, _)| by.is_some_and(|by| by < ab));
        if surely_blocked {
            checked_blocked += 1;
            if arrival.is_some() {
                leaked.push((s, q, t));
            }
        } else if surely_open {
            checked_open += 1;
            if arrival.is_none() {
                lost.push((s, q, t));
            }
        }
    }
    println!(
        "{} frames sent, {} arrived; checked {checked_blocked} that must be dropped, {checked_open} that must pass; \
         {noise_adds} background adds",
        log.len(),
        got.len()
    );
    assert!(checked_blocked > 1000 && checked_open > 1000, "the test checked too little");
    if !leaked.is_empty() {
        // Each source's leak as a window (first and last sent ns, frames)
        // beside its add and delete, and the merges the bridge did: whether
        // a publication lost an element for a moment or for good.
        let mut windows: std::collections::BTreeMap<u8, (u64, u64, usize)> = std::collections::BTreeMap::new();
        for &(s, _, t) in &leaked {
            let w = windows.entry(s).or_insert((t, t, 0));
            (w.0, w.1, w.2) = (w.0.min(t), w.1.max(t), w.2 + 1);
        }
        let stats = sluice_control::socket::request(&sock, "stats", Duration::from_secs(10)).unwrap();
        let detail: Vec<String> = windows
            .iter()
            .map(|(s, (a, b, n))| {
                format!(
                    "source {s}: {n} frames sent {a}..{b} ns; add (before, after) {:?}, del {:?}",
                    add[usize::from(*s)],
                    del[usize::from(*s)]
                )
            })
            .collect();
        panic!(
            "{} frames passed after their add was published:\n{}\nthe bridge's merges {}, publishes {}, generation {}",
            leaked.len(),
            detail.join("\n"),
            stats["merges"],
            stats["publishes"],
            stats["generation"]
        );
    }
    assert!(
        lost.is_empty(),
        "{} frames dropped while surely unblocked, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

/// A request whose 64 MiB limit falls inside its last add, so that cut
/// there it would add `10.0.0.0/2` (a quarter of the address space), with
/// 1 MiB of comment lines after it: 65 MiB in all.
fn over_the_limit(set: &str) -> String {
    let max = sluice_control::socket::MAX_REQUEST as usize;
    let cut = format!("add {set} 10.0.0.0/2");
    let mut text = String::with_capacity(max + (2 << 20));
    // Leaves room for a last comment line of at least `#` and `\n`.
    while text.len() + 1001 + 2 + cut.len() < max {
        text += &format!("#{}\n", "-".repeat(999));
    }
    text += &format!("#{}\n", "-".repeat(max - text.len() - cut.len() - 2));
    assert_eq!(text.len() + cut.len(), max);
    text += &format!("add {set} 10.0.0.0/24\n");
    while text.len() < 65 << 20 {
        text += &format!("#{}\n", "-".repeat(999));
    }
    text
}

/// `sluice ctl -f -` with `text` on its standard input.
fn ctl_stdin(socket: &Path, text: String) -> Output {
    let mut child = Command::new(SLUICE)
        .args(["ctl", "--socket", p(socket), "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // It stops reading one byte past the limit: the rest may not be taken.
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

#[test]
fn ctl_a_request_over_64_mib_changes_nothing() {
    if !live_or_skip("ctl_a_request_over_64_mib_changes_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set blocks dynamic\ndrop saddr @blocks\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let topo = Topology::new("cl");
    let _bridge = start(&topo, &rules, &sock, &[]);
    ctl(&sock, &["add", "blocks", "192.0.2.1"]);
    let text = over_the_limit("blocks");
    let batch = dir.path().join("big.txt");
    std::fs::write(&batch, &text).unwrap();

    // `sluice ctl` refuses it before sending, from a file or from stdin.
    let e = ctl_fails(&sock, &["-f", p(&batch)]);
    assert!(e.contains("big.txt: over 64 MiB") && e.contains("nothing was sent") && e.contains("Split"), "{e}");
    let out = ctl_stdin(&sock, text.clone());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("standard input: over 64 MiB"), "{e}");

    // Another client sending it anyway is refused whole.
    let r = sluice_control::socket::request(&sock, &text, Duration::from_secs(30)).unwrap();
    let e = r["error"].as_str().unwrap_or_default();
    assert!(r["ok"] == false && e.starts_with("request over 64 MiB") && e.contains("nothing applied"), "{r}");

    assert_eq!(elements(&sock, "blocks"), vec!["192.0.2.1/32"], "nothing changed");
    assert_eq!(matches(&sock, "blocks", "10.1.2.3"), None, "10.0.0.0/2 was not added");
    let s = ctl(&sock, &["stats"]);
    assert_eq!(s["updates"], 1, "{s}");
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An http-guard (no root needed) serving its control socket at `socket`.
fn guard_command(socket: &Path, secs: u32) -> Command {
    let mut c = Command::new(SLUICE);
    c.args(["http-guard", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--threads", "1", "--no-pin"])
        .args(["--duration", &secs.to_string(), "--control", p(socket)]);
    c
}

fn start_guard(socket: &Path) -> Guard {
    let mut child = guard_command(socket, 60).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut r = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "the guard did not come up: {seen}");
        seen += &line;
        if line.starts_with("sluice: guarding on") {
            break;
        }
    }
    std::thread::spawn(move || for _ in r.lines() {});
    Guard(child)
}

/// The guard's socket: a request over 64 MiB is refused whole (cut, it
/// would block 192.0.2.1), and beyond 8 connections at once a client is
/// told `busy` at once.
#[test]
fn guard_ctl_refuses_a_request_over_64_mib_and_a_ninth_connection() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("guard.sock");
    let _guard = start_guard(&sock);

    let mut text = "block 192.0.2.1 # ".to_owned();
    text += &"-".repeat((65 << 20) - text.len());
    let r = sluice_control::socket::request(&sock, &text, Duration::from_secs(30)).unwrap();
    assert!(r["ok"] == false && r["error"].as_str().unwrap_or_default().starts_with("request over 64 MiB"), "{r}");
    assert_eq!(ctl(&sock, &["blocks"])["blocks"], serde_json::json!([]), "nothing was blocked");

    let held: Vec<_> = (0..8)
        .map(|_| {
            let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
            c.write_all(b"block 192.0.2").unwrap();
            c
        })
        .collect();
    let t = Instant::now();
    let e = ctl_fails(&sock, &["blocks"]);
    assert!(e.contains("busy: 8 requests in progress"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "told at once: {:?}", t.elapsed());
    drop(held);
    let end = Instant::now() + Duration::from_secs(5);
    while !ctl_output(&sock, &["blocks"]).status.success() {
        assert!(Instant::now() < end, "the places were not given back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ctl(&sock, &["blocks"])["blocks"], serde_json::json!([]), "the cut requests were not applied");
}

/// A file that is not a socket at `--control PATH` is an error, and stays.
#[test]
fn a_file_at_the_control_path_is_an_error_and_left_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me\n").unwrap();
    let out = guard_command(&file, 1).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(e.contains(&format!("control socket {}: exists and is not a socket", file.display())), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
}

/// `ctl block` and `unblock` write the log lines a limit's block does
/// (docs/http-guard.md), and a dry run says so when it starts.
#[test]
fn guard_manual_blocks_are_logged_and_a_dry_run_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("guard.sock");
    let mut child =
        guard_command(&sock, 60).arg("--dry-run").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || r.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    let _guard = Guard(child);
    let wait_for = |what: &str| -> String {
        let end = Instant::now() + Duration::from_secs(10);
        let mut seen = String::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(l) => seen += &(l + "\n"),
                Err(_) => panic!("no line with {what:?}; seen:\n{seen}"),
            }
        }
    };
    wait_for("guarding on");
    wait_for("dry run: ");
    let r = ctl(&sock, &["block", "192.0.2.9", "timeout", "30"]);
    assert_eq!(r["new"], true, "{r}");
    let line = wait_for("blocked 192.0.2.9");
    assert!(line.contains("manual") && line.contains("30 s"), "{line}");
    ctl(&sock, &["unblock", "192.0.2.9"]);
    wait_for("unblocked 192.0.2.9");
}
