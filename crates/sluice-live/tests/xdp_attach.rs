//! The hand-assembled XDP program: it loads, runs, attaches in skb and
//! driver mode on a veth, refuses a second attach, and detaches on drop.

use sluice_testkit::live as common;

use common::{live_or_skip, unique, Veth};
use sluice_live::bpf::{XDP_PASS, XDP_REDIRECT};
use sluice_live::netlink::xdp_query;
use sluice_live::{LiveError, XdpMode, XdpProgram, XdpRedirect, XskMap};

#[test]
fn program_loads_and_passes_when_no_socket_is_registered() {
    if !live_or_skip("program_loads_and_passes_when_no_socket_is_registered") {
        return;
    }
    let map = XskMap::new(4).expect("XSKMAP");
    let prog = XdpProgram::redirect(&map).expect("load");
    let frame = common::frame(1, None, 64);
    // Empty slot: bpf_redirect_map returns the flags' low bits, XDP_PASS.
    assert_eq!(prog.test_run(&frame).expect("test run"), XDP_PASS);
}

#[test]
fn verifier_log_is_in_the_error() {
    if !live_or_skip("verifier_log_is_in_the_error") {
        return;
    }
    // `exit` with r0 never written: the verifier must refuse it and say why.
    let bad = [sluice_live::bpf::Insn { code: 0x95, regs: 0, off: 0, imm: 0 }];
    match XdpProgram::load(&bad) {
        Err(LiveError::XdpRefused { log, .. }) => {
            assert!(log.contains("R0"), "log should name R0: {log}");
            println!("verifier said: {log}");
        }
        other => panic!("expected XdpRefused, got {other:?}"),
    }
}

#[test]
fn attaches_in_skb_and_driver_mode_and_detaches() {
    if !live_or_skip("attaches_in_skb_and_driver_mode_and_detaches") {
        return;
    }
    let p = unique("x");
    let veth = Veth::new(&format!("{p}0"), &format!("{p}1"), None);
    let ifindex = sluice_live::sys::ifindex(&veth.near).unwrap();
    assert_eq!(xdp_query(ifindex).unwrap(), None);
    for (mode, name) in [(XdpMode::Skb, "skb"), (XdpMode::Driver, "driver")] {
        let r = XdpRedirect::attach(&veth.near, 1, mode).unwrap_or_else(|e| panic!("{name}: {e}"));
        let q = xdp_query(ifindex).unwrap().expect("attached");
        assert_eq!(q.mode, name);
        assert!(q.prog_id > 0);
        println!("{name} mode: attached as program id {}", q.prog_id);

        // A second program on the same interface is refused, by name.
        let err = XdpRedirect::attach(&veth.near, 1, mode).expect_err("second attach");
        let text = err.to_string();
        assert!(matches!(err, LiveError::XdpBusy { .. }), "{text}");
        assert!(text.contains(&veth.near) && text.contains(&q.prog_id.to_string()), "{text}");
        println!("second attach: {text}");

        // The program still redirects nothing without a socket.
        assert_ne!(r.program().test_run(&common::frame(2, None, 64)).unwrap(), XDP_REDIRECT);
        drop(r);
        // Closing the link detaches it; the kernel may finish that on a
        // work queue a moment later, so give it up to two seconds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while xdp_query(ifindex).unwrap().is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(xdp_query(ifindex).unwrap(), None, "{name}: detached on drop");
    }
}

#[test]
fn clear_errors_for_missing_and_down_interfaces() {
    if !live_or_skip("clear_errors_for_missing_and_down_interfaces") {
        return;
    }
    let err = XdpRedirect::attach("nosuch0", 1, XdpMode::Skb).expect_err("missing");
    assert!(matches!(&err, LiveError::NoSuchInterface { name } if name == "nosuch0"), "{err}");
    let p = unique("d");
    let veth = Veth::new(&format!("{p}0"), &format!("{p}1"), None);
    common::run(&["ip", "link", "set", "dev", &veth.near, "down"]);
    let err = XdpRedirect::attach(&veth.near, 1, XdpMode::Skb).expect_err("down");
    assert!(matches!(&err, LiveError::InterfaceDown { .. }), "{err}");
    assert!(err.to_string().contains("ip link set dev"), "{err}");
}
