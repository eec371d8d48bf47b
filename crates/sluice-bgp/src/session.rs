//! One BGP session to one peer, receive only (RFC 4271's FSM as a speaker
//! that announces nothing needs it): connect (or take a connection the
//! listener accepted), OPEN both ways, the hold time agreed as the lower
//! of the two, KEEPALIVEs every third of it, and every message after
//! ESTABLISHED handed on as an [`SessionEvent`]. Whatever ends the session sends
//! the NOTIFICATION that says why when there is one to send (a message
//! that does not decode, the hold timer, the peer's AS, stopping), reports
//! [`SessionEvent::Down`] with the reason, and the session is tried again after
//! `connect_retry` (doubling to 8 times it while the peer stays away).
//!
//! A thread per peer, blocking reads with a short timeout: a receive-only
//! speaker has a handful of peers, and the timers need no more.
//!
//! The events go through a bounded queue. When it is full the session
//! waits before reading on: the socket's buffers fill and TCP's window
//! holds the peer back, so a flood costs the peer's own progress, not the
//! bridge's memory. KEEPALIVEs go on meanwhile, so the peer keeps the
//! session.

use crate::message::{self, AfiSafi, Message, Open, SessionError, Update};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A peer as the flags describe it.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Where to connect (port 179 unless said).
    pub addr: SocketAddr,
    pub peer_as: u32,
    pub local_as: u32,
    pub router_id: Ipv4Addr,
    /// The hold time this side proposes (RFC 4271's suggested 90 s).
    pub hold_time: u16,
    pub families: Vec<AfiSafi>,
    /// How long the peer's routes are kept after the session drops when it
    /// announced graceful restart (its own restart time, at most this).
    pub restart_time: u16,
    pub connect_retry: Duration,
    /// Wait for the peer to connect (to the listener) instead of connecting.
    pub passive: bool,
    /// A TCP MD5 key (RFC 2385) for the connections to and from this peer.
    pub md5_key: Option<Vec<u8>>,
}

impl PeerConfig {
    pub fn new(addr: SocketAddr, peer_as: u32, local_as: u32, router_id: Ipv4Addr) -> PeerConfig {
        PeerConfig {
            addr,
            peer_as,
            local_as,
            router_id,
            hold_time: 90,
            families: vec![
                AfiSafi::IPV4_FLOWSPEC,
                AfiSafi::IPV6_FLOWSPEC,
                AfiSafi::IPV4_UNICAST,
                AfiSafi::IPV6_UNICAST,
            ],
            restart_time: 120,
            connect_retry: Duration::from_secs(5),
            passive: false,
            md5_key: None,
        }
    }
}

/// What a session tells its owner.
#[derive(Debug)]
pub enum SessionEvent {
    /// ESTABLISHED: the peer's OPEN, and the hold time agreed.
    Up {
        peer: SocketAddr,
        open: Open,
        hold_time: u16,
    },
    Update {
        peer: SocketAddr,
        update: Update,
    },
    Down {
        peer: SocketAddr,
        reason: String,
        /// How long its routes may be kept (graceful restart), or zero.
        keep_for: Duration,
    },
}

/// Why a session ended.
#[derive(Debug)]
enum End {
    /// Send this NOTIFICATION, then close.
    Notify(SessionError),
    /// The peer sent a NOTIFICATION, or the connection went.
    Gone(String),
    Stopped,
}

impl From<SessionError> for End {
    fn from(e: SessionError) -> End {
        End::Notify(e)
    }
}

/// How often, at most, a session waiting on a full queue tries again
/// (from 50 µs, doubling): short beside the hold time, and what another
/// peer's message waits at most for its turn at a freed place.
const QUEUE_RETRY: Duration = Duration::from_millis(2);

/// Reads whole messages off a connection, watching the hold timer and
/// sending KEEPALIVEs on time.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    /// Agreed hold time (zero: no timer, no KEEPALIVEs).
    hold: Duration,
    last_heard: Instant,
    last_sent: Instant,
    as4: bool,
}

impl Conn {
    /// Writes one message, within the hold time (240 s before it is
    /// agreed or when it is 0): a peer that stops reading ends its session
    /// instead of holding this thread, and the bridge's stop, for ever.
    ///
    /// The deadline is for the whole message: the socket's timeout bounds
    /// one `write`, and a peer that takes a few bytes now and then would
    /// restart it with each (a 64 MiB write took three hold times so).
    fn send(&mut self, bytes: &[u8]) -> Result<(), End> {
        self.last_sent = Instant::now();
        let limit = if self.hold.is_zero() { Duration::from_secs(240) } else { self.hold };
        let end = self.last_sent + limit;
        let mut rest = bytes;
        while !rest.is_empty() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(End::Gone(format!(
                    "writing: the peer took {} bytes in {limit:?}",
                    bytes.len() - rest.len()
                )));
            }
            let _ = self.s.set_write_timeout(Some(left));
            match self.s.write(rest) {
                Ok(0) => return Err(End::Gone("writing: the connection is closed".into())),
                Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Gone(format!("writing: {e}"))),
            }
        }
        Ok(())
    }

    /// A KEEPALIVE when a third of the hold time passed since the last
    /// message sent.
    fn keepalive_if_due(&mut self) -> Result<(), End> {
        if !self.hold.is_zero() && self.last_sent.elapsed() >= self.hold / 3 {
            self.send(&message::keepalive())?;
        }
        Ok(())
    }

    /// Hands `e` on, waiting while the queue is full (see the module's
    /// doc): KEEPALIVEs go out on time meanwhile, and the hold timer
    /// starts again once reading does, since the silence was this side's.
    fn hand_on(
        &mut self,
        events: &SyncSender<SessionEvent>,
        mut e: SessionEvent,
        stop: &AtomicBool,
    ) -> Result<(), End> {
        let (mut waited, mut pause) = (false, Duration::from_micros(50));
        loop {
            match events.try_send(e) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(End::Stopped),
                Err(TrySendError::Full(back)) => {
                    if stop.load(Ordering::Relaxed) {
                        return Err(End::Stopped);
                    }
                    e = back;
                    waited = true;
                    self.keepalive_if_due()?;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(QUEUE_RETRY);
                }
            }
        }
        if waited {
            self.last_heard = Instant::now();
        }
        Ok(())
    }

    /// The next message, or why there is none.
    fn next(&mut self, stop: &AtomicBool) -> Result<Message, End> {
        loop {
            if let Some(n) = message::frame_len(&self.buf)? {
                if self.buf.len() >= n {
                    let m: Vec<u8> = self.buf.drain(..n).collect();
                    self.last_heard = Instant::now();
                    return Ok(message::decode(&m, self.as4)?);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Err(End::Stopped);
            }
            if !self.hold.is_zero() {
                if self.last_heard.elapsed() >= self.hold {
                    return Err(End::Notify(SessionError {
                        code: message::HOLD_TIMER_EXPIRED,
                        subcode: 0,
                        message: format!("nothing heard for the hold time ({} s)", self.hold.as_secs()),
                    }));
                }
                self.keepalive_if_due()?;
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.s.read(&mut chunk) {
                Ok(0) => return Err(End::Gone("the peer closed the connection".into())),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(End::Gone(format!("reading: {e}"))),
            }
        }
    }
}

/// OPEN both ways and the first KEEPALIVE: the peer's OPEN and the hold
/// time agreed.
fn establish(c: &mut Conn, cfg: &PeerConfig, stop: &AtomicBool) -> Result<(Open, u16), End> {
    c.send(&message::open(cfg.local_as, cfg.hold_time, cfg.router_id, &cfg.families, cfg.restart_time))?;
    // Until the OPEN, the hold timer is the large one RFC 4271 suggests (4 min).
    c.hold = Duration::from_secs(240);
    let open = match c.next(stop)? {
        Message::Open(o) => o,
        Message::Notification { code, subcode, data } => {
            return Err(End::Gone(notification_text(code, subcode, &data)))
        }
        m => return Err(fsm_error(&m)),
    };
    if open.asn() != cfg.peer_as {
        return Err(End::Notify(SessionError {
            code: message::OPEN_ERROR,
            subcode: 2,
            message: format!("the peer's AS is {}, not {}", open.asn(), cfg.peer_as),
        }));
    }
    let hold = open.hold_time.min(cfg.hold_time);
    c.as4 = open.capabilities.as4.is_some();
    c.hold = Duration::from_secs(u64::from(hold));
    c.send(&message::keepalive())?;
    match c.next(stop)? {
        Message::Keepalive => Ok((open, hold)),
        Message::Notification { code, subcode, data } => Err(End::Gone(notification_text(code, subcode, &data))),
        m => Err(fsm_error(&m)),
    }
}

fn fsm_error(m: &Message) -> End {
    End::Notify(SessionError { code: message::FSM_ERROR, subcode: 0, message: format!("unexpected {m:?}") })
}

fn notification_text(code: u8, subcode: u8, data: &[u8]) -> String {
    let what = match code {
        message::HEADER_ERROR => "message header error",
        message::OPEN_ERROR => "OPEN error",
        message::UPDATE_ERROR => "UPDATE error",
        message::HOLD_TIMER_EXPIRED => "hold timer expired",
        message::FSM_ERROR => "FSM error",
        message::CEASE => "cease",
        _ => "error",
    };
    let text: String = String::from_utf8_lossy(data).chars().filter(|c| !c.is_control()).take(128).collect();
    format!(
        "the peer sent NOTIFICATION {code}/{subcode} ({what}){}",
        if text.is_empty() { String::new() } else { format!(": {text}") }
    )
}

/// One session on `s`, until it ends: events out, the reason back.
fn session(s: TcpStream, cfg: &PeerConfig, events: &SyncSender<SessionEvent>, stop: &AtomicBool) -> (End, Duration) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = s.set_nodelay(true);
    let now = Instant::now();
    let mut c = Conn { s, buf: Vec::new(), hold: Duration::ZERO, last_heard: now, last_sent: now, as4: false };
    let mut keep_for = Duration::ZERO;
    let end = (|| {
        let (open, hold_time) = establish(&mut c, cfg, stop)?;
        if let Some((t, _)) = &open.capabilities.graceful_restart {
            keep_for = Duration::from_secs(u64::from((*t).min(cfg.restart_time)));
        }
        c.hand_on(events, SessionEvent::Up { peer: cfg.addr, open, hold_time }, stop)?;
        loop {
            match c.next(stop)? {
                Message::Update(update) => c.hand_on(events, SessionEvent::Update { peer: cfg.addr, update }, stop)?,
                Message::Keepalive | Message::RouteRefresh(_) => {}
                Message::Notification { code, subcode, data } => {
                    return Err(End::Gone(notification_text(code, subcode, &data)))
                }
                m @ Message::Open(_) => return Err(fsm_error(&m)),
            }
        }
    })();
    let end = match end {
        Ok(()) => End::Stopped,
        Err(e) => e,
    };
    match &end {
        End::Notify(e) => {
            let _ = c.s.write_all(&message::notification(e.code, e.subcode, &[]));
        }
        End::Stopped => {
            // Cease, administrative shutdown.
            let _ = c.s.write_all(&message::notification(message::CEASE, 2, &[]));
        }
        End::Gone(_) => {}
    }
    (end, keep_for)
}

/// Runs the sessions to one peer until `stop`: connects (or takes the
/// listener's connections from `accepted` when passive), and after each
/// session reports it down and tries again. `events` is bounded: see the
/// module's doc.
pub fn run(
    cfg: PeerConfig,
    events: SyncSender<SessionEvent>,
    stop: Arc<AtomicBool>,
    accepted: Option<Receiver<TcpStream>>,
) {
    let mut wait = cfg.connect_retry;
    while !stop.load(Ordering::Relaxed) {
        let conn = match &accepted {
            Some(rx) => rx.recv_timeout(Duration::from_millis(100)).map_err(|e| e.to_string()),
            None => match &cfg.md5_key {
                Some(key) => crate::md5::connect(cfg.addr, key, Duration::from_secs(5)),
                None => TcpStream::connect_timeout(&cfg.addr, Duration::from_secs(5)),
            }
            .map_err(|e| e.to_string()),
        };
        let (reason, keep_for) = match conn {
            Ok(s) => {
                let started = Instant::now();
                let (end, keep_for) = session(s, &cfg, &events, &stop);
                if started.elapsed() > cfg.connect_retry * 4 {
                    wait = cfg.connect_retry;
                }
                let reason = match end {
                    End::Stopped => return,
                    End::Notify(e) => format!("sent NOTIFICATION {}/{}: {}", e.code, e.subcode, e.message),
                    End::Gone(why) => why,
                };
                (reason, keep_for)
            }
            // A passive peer that has not connected yet: keep waiting.
            Err(_) if accepted.is_some() => continue,
            Err(e) => (format!("connecting to {}: {e}", cfg.addr), Duration::ZERO),
        };
        let _ = events.send(SessionEvent::Down { peer: cfg.addr, reason, keep_for });
        let until = Instant::now() + wait;
        wait = (wait * 2).min(cfg.connect_retry * 8);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowspec::{Component, Family, Flow, PrefixMatch};
    use std::net::TcpListener;
    use std::sync::mpsc::sync_channel;

    /// An UPDATE announcing the IPv4 flow `destination 10.0.0.N/32` with
    /// traffic-rate 0.
    fn update(n: u8) -> Vec<u8> {
        let flow = Flow {
            family: Family::V4,
            components: vec![Component::Destination(PrefixMatch::new([10, 0, 0, n].into(), 32))],
        };
        message::flowspec_discard(&flow.to_bytes(), 0)
    }

    /// A peer that stops reading cannot hold a session's writes (and so
    /// the bridge's stop) past the hold time: with the kernel's buffers
    /// full, `send` gives up at the deadline instead of blocking for ever.
    #[test]
    fn a_peer_that_stops_reading_ends_the_write_at_the_hold_time() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap(); // never read
        let now = Instant::now();
        let hold = Duration::from_secs(2);
        let mut c = Conn { s, buf: Vec::new(), hold, last_heard: now, last_sent: now, as4: false };
        // Far more than the socket buffers of both ends hold.
        let big = vec![0u8; 64 << 20];
        let t = Instant::now();
        let r = c.send(&big);
        let took = t.elapsed();
        assert!(matches!(r, Err(End::Gone(_))), "the write should have failed");
        let early = hold - Duration::from_millis(50);
        assert!(took >= early && took < hold + Duration::from_secs(1), "gave up after {took:?}, hold {hold:?}");
    }

    /// The types of the whole messages in `buf`, taken out of it.
    fn types(buf: &mut Vec<u8>) -> Vec<u8> {
        let mut out = Vec::new();
        while buf.len() >= 19 {
            let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
            if buf.len() < len {
                break;
            }
            out.push(buf[18]);
            buf.drain(..len);
        }
        out
    }

    /// Nobody takes the session's events: the peer's writes stop once the
    /// socket's buffers are full (TCP's window, not a queue in the bridge),
    /// KEEPALIVEs keep coming for twice the hold time and no NOTIFICATION
    /// ends the session; taken again, every UPDATE written arrives.
    #[test]
    fn a_full_queue_holds_the_peer_back_and_keeps_the_session() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut cfg = PeerConfig::new(l.local_addr().unwrap(), 65001, 65002, Ipv4Addr::new(192, 0, 2, 2));
        cfg.hold_time = 3;
        let (tx, rx) = sync_channel(64);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let t = std::thread::spawn(move || run(cfg, tx, flag, None));
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&message::open(65001, 3, Ipv4Addr::new(192, 0, 2, 3), &[AfiSafi::IPV4_FLOWSPEC], 0)).unwrap();
        s.write_all(&message::keepalive()).unwrap();
        let mut got = Vec::new();
        s.set_nonblocking(true).unwrap();
        let read = |s: &mut TcpStream, got: &mut Vec<u8>| {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut chunk) {
                got.extend_from_slice(&chunk[..n]);
            }
            types(got)
        };
        // The Up event and 63 UPDATEs fill the queue; the rest wait in the
        // socket's buffers, then in the peer's.
        let batch: Vec<u8> = (0..200u8).flat_map(update).collect();
        let per = update(0).len();
        let (mut written, mut blocked_since, mut seen) = (0usize, None, Vec::new());
        let start = Instant::now();
        while blocked_since.is_none_or(|b: Instant| b.elapsed() < Duration::from_millis(500)) {
            assert!(start.elapsed() < Duration::from_secs(30), "the peer was never held back");
            let at = written % batch.len();
            match s.write(&batch[at..]) {
                Ok(n) => {
                    written += n;
                    blocked_since = None;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    blocked_since.get_or_insert_with(Instant::now);
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("writing: {e}"),
            }
            seen.extend(read(&mut s, &mut got));
        }
        // Held back, for twice the hold time: KEEPALIVEs (every second), no
        // NOTIFICATION.
        let held = Instant::now();
        while held.elapsed() < Duration::from_secs(6) {
            seen.extend(read(&mut s, &mut got));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!seen.contains(&3), "no NOTIFICATION: {seen:?}");
        let keepalives = seen.iter().filter(|&&t| t == 4).count();
        assert!(keepalives >= 6, "{keepalives} KEEPALIVEs while held back 6 s and more (hold time 3 s)");
        // The rest of the last message, then everything is taken.
        let rest = (per - written % per) % per;
        let at = written % batch.len();
        s.set_nonblocking(false).unwrap();
        let (tail, mut s2) = (batch[at..at + rest].to_vec(), s.try_clone().unwrap());
        let w = std::thread::spawn(move || s2.write_all(&tail).unwrap());
        let messages = (written + rest) / per;
        assert!(messages > 1_000, "only {messages} UPDATEs before the window closed");
        eprintln!("held back after {messages} UPDATEs ({} bytes); {keepalives} KEEPALIVEs in 6 s", written + rest);
        let mut updates = 0;
        while updates < messages {
            match rx.recv_timeout(Duration::from_secs(10)).expect("every UPDATE written arrives") {
                SessionEvent::Up { .. } => {}
                SessionEvent::Update { .. } => updates += 1,
                SessionEvent::Down { reason, .. } => panic!("down: {reason}"),
            }
        }
        w.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        drop(rx);
        t.join().unwrap();
    }
}
