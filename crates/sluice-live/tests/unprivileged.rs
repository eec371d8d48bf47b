//! Without capabilities every entry point fails with a `Permission` error
//! that names what is needed; with CAP_NET_RAW but without CAP_IPC_LOCK, a
//! UMEM over RLIMIT_MEMLOCK fails with a `Memlock` error that gives the
//! limit and the size. The test re-runs its own binary under `setpriv`
//! with the capabilities dropped, so it needs root to start.

use sluice_testkit::live as common;

use std::process::Command;

use sluice_live::{LiveError, PacketConfig, PacketSocket, Umem, XskMap};

const HELPER_ENV: &str = "SLUICE_NO_CAPS_HELPER";

/// With CAP_NET_RAW only (no CAP_IPC_LOCK, no CAP_SYS_RESOURCE), a UMEM
/// over RLIMIT_MEMLOCK is refused with the limit and the size in the error.
fn memlock_helper() {
    let limit = {
        let s = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = s.lines().find(|l| l.starts_with("Max locked memory")).unwrap().to_owned();
        line.split_whitespace().nth(3).unwrap().parse::<u64>().ok()
    };
    let Some(limit) = limit else {
        println!("RLIMIT_MEMLOCK is unlimited here: nothing to check");
        println!("HELPER-OK");
        return;
    };
    // Twice the limit (at least 2048 frames of 4096 bytes), rounded to whole frames.
    let frames = ((limit * 2) / 4096).max(2048) as u32;
    match Umem::new(frames, 4096) {
        Err(e @ LiveError::Memlock { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&limit.to_string()) && text.contains(&(u64::from(frames) * 4096).to_string()),
                "{text}"
            );
            println!("memlock: {text}");
        }
        other => panic!("expected a Memlock error, got {other:?}"),
    }
    println!("HELPER-OK");
}

fn helper() {
    let expect_perm = |what: &str, r: Result<(), LiveError>| match r {
        Err(e) if e.is_permission() => println!("{what}: {e}"),
        other => panic!("{what}: expected a permission error, got {other:?}"),
    };
    expect_perm("XSKMAP", XskMap::new(1).map(drop));
    expect_perm("AF_PACKET", PacketSocket::open("lo", &PacketConfig::default()).map(drop));
    expect_perm("AF_XDP", Umem::new(16, 2048).map(drop));
    let e = XskMap::new(1).unwrap_err().to_string();
    assert!(e.contains("CAP_BPF") && e.contains("run as root"), "{e}");
    println!("HELPER-OK");
}

#[test]
fn without_capabilities_errors_say_what_is_needed() {
    match std::env::var(HELPER_ENV).as_deref() {
        Ok("nocaps") => return helper(),
        Ok("memlock") => return memlock_helper(),
        _ => {}
    }
    if !common::live_or_skip("without_capabilities_errors_say_what_is_needed") {
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        if std::env::var("SLUICE_REQUIRE_LIVE").as_deref() == Ok("1") {
            panic!("setpriv (util-linux) is missing (SLUICE_REQUIRE_LIVE=1)");
        }
        common::skipped("without_capabilities_errors_say_what_is_needed: setpriv (util-linux) is missing");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let run = |mode: &str, caps: &[&str]| {
        let out = Command::new("setpriv")
            .args(caps)
            .arg("--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked")
            .arg(&exe)
            .args(["--exact", "without_capabilities_errors_say_what_is_needed", "--nocapture", "--test-threads=1"])
            .env(HELPER_ENV, mode)
            .output()
            .expect("run setpriv");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            out.status.success() && stdout.contains("HELPER-OK"),
            "{mode} helper failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("nocaps", &["--bounding-set=-all", "--inh-caps=-all"]);
    run("memlock", &["--bounding-set=-all,+net_raw", "--inh-caps=-all,+net_raw", "--ambient-caps=+net_raw"]);
}
