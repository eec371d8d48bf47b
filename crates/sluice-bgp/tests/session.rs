//! A session against a peer the test plays byte by byte: the OPEN
//! exchange, then what the session does with a malformed UPDATE (the
//! NOTIFICATION RFC 7606 asks for, the session down with the reason), a
//! peer of the wrong AS, a silent peer (the hold timer), and stopping
//! (a Cease).

use sluice_bgp::message::{self, AfiSafi, Message};
use sluice_bgp::session::{run, PeerConfig, SessionEvent};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads one whole message off `s`.
fn read_msg(s: &mut TcpStream) -> Vec<u8> {
    let mut head = [0u8; 19];
    s.read_exact(&mut head).unwrap();
    let n = message::frame_len(&head).unwrap().unwrap();
    let mut m = head.to_vec();
    m.resize(n, 0);
    s.read_exact(&mut m[19..]).unwrap();
    m
}

/// A session thread to a peer listening here, and the peer's end once the
/// OPENs and KEEPALIVEs are exchanged (the peer's AS `peer_as`, hold `hold`).
fn established(
    peer_as: u32,
    hold: u16,
) -> (TcpStream, Receiver<SessionEvent>, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = PeerConfig::new(l.local_addr().unwrap(), 65001, 65002, Ipv4Addr::new(192, 0, 2, 2));
    cfg.connect_retry = Duration::from_millis(200);
    let (tx, rx) = sync_channel(64);
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || run(cfg, tx, stop, None))
    };
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let Message::Open(o) = message::decode(&read_msg(&mut s), true).unwrap() else { panic!("no OPEN") };
    assert_eq!((o.asn(), o.hold_time), (65002, 90));
    assert!(o.capabilities.multiprotocol.contains(&AfiSafi::IPV6_FLOWSPEC));
    s.write_all(&message::open(peer_as, hold, Ipv4Addr::new(192, 0, 2, 1), &[AfiSafi::IPV4_FLOWSPEC], 60)).unwrap();
    (s, rx, stop, t)
}

fn finish(mut s: TcpStream) -> TcpStream {
    assert_eq!(message::decode(&read_msg(&mut s), true).unwrap(), Message::Keepalive);
    s.write_all(&message::keepalive()).unwrap();
    s
}

fn down(rx: &Receiver<SessionEvent>) -> (String, Duration) {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())).expect("the session went down") {
            SessionEvent::Down { reason, keep_for, .. } => return (reason, keep_for),
            _ => continue,
        }
    }
}

#[test]
fn a_malformed_update_ends_the_session_with_its_notification() {
    let (s, rx, stop, t) = established(65001, 90);
    let mut s = finish(s);
    let Ok(SessionEvent::Up { open, hold_time, .. }) = rx.recv_timeout(Duration::from_secs(5)) else {
        panic!("not up")
    };
    assert_eq!((open.asn(), hold_time), (65001, 90));
    // MP_REACH with a FlowSpec NLRI that ends inside its prefix.
    let mp = [0, 1, 133, 0, 0, 4, 1, 24, 192, 0];
    let mut attrs = vec![0x80, 14, mp.len() as u8];
    attrs.extend_from_slice(&mp);
    let mut body = vec![0, 0];
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(&attrs);
    s.write_all(&message::frame(message::UPDATE, &body)).unwrap();
    let Message::Notification { code, subcode, .. } = message::decode(&read_msg(&mut s), true).unwrap() else {
        panic!("no NOTIFICATION")
    };
    assert_eq!((code, subcode), (message::UPDATE_ERROR, 9));
    let (reason, keep_for) = down(&rx);
    assert!(reason.contains("sent NOTIFICATION 3/9") && reason.contains("FlowSpec NLRI, byte"), "{reason}");
    assert_eq!(keep_for, Duration::from_secs(60), "the peer announced graceful restart, 60 s");
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

#[test]
fn a_peer_of_another_as_is_refused() {
    let (mut s, rx, stop, t) = established(64999, 90);
    let Message::Notification { code, subcode, .. } = message::decode(&read_msg(&mut s), true).unwrap() else {
        panic!("no NOTIFICATION")
    };
    assert_eq!((code, subcode), (message::OPEN_ERROR, 2), "bad peer AS");
    assert!(down(&rx).0.contains("the peer's AS is 64999, not 65001"));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

#[test]
fn a_silent_peer_runs_out_its_hold_time() {
    let (s, rx, stop, t) = established(65001, 3);
    let mut s = finish(s);
    let started = Instant::now();
    // KEEPALIVEs come every second (a third of 3 s); the peer sends none.
    let mut keepalives = 0;
    let code = loop {
        match message::decode(&read_msg(&mut s), true).unwrap() {
            Message::Keepalive => keepalives += 1,
            Message::Notification { code, .. } => break code,
            m => panic!("{m:?}"),
        }
    };
    assert_eq!(code, message::HOLD_TIMER_EXPIRED);
    assert!(keepalives >= 2, "{keepalives} KEEPALIVEs in {:?}", started.elapsed());
    assert!(started.elapsed() >= Duration::from_millis(2500), "{:?}", started.elapsed());
    assert!(down(&rx).0.contains("hold time"));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

#[test]
fn stopping_says_cease() {
    let (s, rx, stop, t) = established(65001, 90);
    let mut s = finish(s);
    assert!(matches!(rx.recv_timeout(Duration::from_secs(5)), Ok(SessionEvent::Up { .. })));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert_eq!(
        message::decode(&read_msg(&mut s), true).unwrap(),
        Message::Notification { code: message::CEASE, subcode: 2, data: vec![] }
    );
}
