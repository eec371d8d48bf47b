//! The guard as a CrowdSec watcher over https: a LAPI of the test's own
//! (Debian's `crowdsec -no-cs`, certificates made with openssl) that admits
//! agents by a client certificate of OU `agent-ou`. A block pushed with the
//! certificate (no login, no password) becomes a decision `cscli` lists; a
//! CA that did not sign the LAPI's certificate is refused, and said so.

use sluice_testkit::lapi;

use sluice_control::lapi::LapiTls;
use sluice_guard::block_forward::{targets, Destination, ForwardedBlock, Target, WatcherFlags};

fn block(ip: &str) -> ForwardedBlock {
    ForwardedBlock { ip: ip.parse().unwrap(), len: 32, secs: 600, limit: "request_rate".into() }
}

fn watcher(flags: &WatcherFlags) -> Target {
    targets(None, Some(flags)).unwrap().pop().expect("the watcher")
}

#[test]
fn a_tls_lapi_admits_the_watcher_by_its_client_certificate() {
    let Some(bin) = lapi::crowdsec_or_skip("a_tls_lapi_admits_the_watcher_by_its_client_certificate") else { return };
    let lapi = lapi::Lapi::with_tls(bin);
    let t = lapi.tls_dir();
    lapi::make_cert(&t, "ca", "agent", "/OU=agent-ou/CN=sluice-guard", "extendedKeyUsage=clientAuth");
    let tls = LapiTls { ca: Some(t.join("ca.crt")), cert: Some(t.join("agent.crt")), key: Some(t.join("agent.key")) };
    let flags = WatcherFlags { url: lapi.url.clone(), tls: tls.clone(), ..WatcherFlags::default() };
    let mut w = watcher(&flags);
    w.push(&[block("198.51.100.77")]).expect("pushed over TLS with the certificate");
    assert!(lapi.decided_ips().contains(&"198.51.100.77".to_owned()), "{:?}", lapi.decided_ips());
    // The LAPI named the machine after the certificate's CN.
    let machines = lapi.cscli(&["machines", "list", "-o", "json"]);
    assert!(machines.contains("sluice-guard@127.0.0.1"), "{machines}");

    // A CA that did not sign the LAPI's certificate.
    lapi::make_ca(&t, "other");
    let wrong = WatcherFlags { tls: LapiTls { ca: Some(t.join("other.crt")), ..tls.clone() }, ..flags.clone() };
    let e = watcher(&wrong).push(&[block("198.51.100.78")]).unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    // A certificate of an OU the LAPI does not admit for agents.
    lapi::make_cert(&t, "ca", "stranger", "/OU=elsewhere/CN=stranger", "extendedKeyUsage=clientAuth");
    let stranger = LapiTls { cert: Some(t.join("stranger.crt")), key: Some(t.join("stranger.key")), ..tls.clone() };
    let e = watcher(&WatcherFlags { tls: stranger, ..flags.clone() }).push(&[block("198.51.100.79")]).unwrap_err();
    assert!(e.contains("401") || e.contains("403"), "{e}");
    assert!(!lapi.decided_ips().contains(&"198.51.100.79".to_owned()));
    // http with TLS flags, and no way to log in: errors that say what to give.
    let http = WatcherFlags { url: lapi.url.replace("https://", "http://"), ..flags.clone() };
    let e = targets(None, Some(&http)).err().unwrap();
    assert!(e.contains("need an https:// URL"), "{e}");
    let bare = WatcherFlags { url: lapi.url.clone(), ..WatcherFlags::default() };
    let e = targets(None, Some(&bare)).err().unwrap();
    assert!(e.contains("--crowdsec-cert"), "{e}");
}
