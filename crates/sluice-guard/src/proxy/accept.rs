//! A connection's opening: accepted (or refused, or room made for it at
//! `--max-connections`), admitted by its address (at accept, or once a
//! PROXY header names it), and over TLS its ClientHello judged before
//! rustls spends anything on it, the handshakes queued behind established
//! connections' requests.

use super::breach::reset;
use super::client::Client;
use super::shed::{Candidate, SCAN_SHARE};
use super::{add, After, Next, Phase, Worker, IN_CHUNK};
use crate::frame::{HttpRefusal, RequestFramer};
use crate::limits::Limit;
use crate::outbuf::OutBuf;
use crate::proxyproto::Parsed;
use crate::table::Admit;
use crate::timeouts::ProgressWatch;
use crate::tls::TlsConn;
use crate::{BlockAction, Serve};
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// New connections taken per loop turn: a flood of connects waits in the
/// kernel's backlog while the connections already open are served.
const ACCEPT_BATCH: usize = 64;

/// A response the client took no byte of for this long is stalled: at
/// `--max-connections` it may be shed to make room.
const STALLED: Duration = Duration::from_secs(1);

/// Time given to queued TLS handshakes per loop turn before the loop looks
/// at its other connections again: a handshake costs a signature and a key
/// exchange (~0.1-0.2 ms), so a flood of new TLS connections delays the
/// requests of established ones by at most about this much per turn.
const HELLO_SLICE: Duration = Duration::from_millis(2);

impl Worker<'_> {
    /// Accept up to [`ACCEPT_BATCH`] connections from each listener with
    /// some pending (after this turn's events: open connections go first;
    /// a flood on one listener does not starve the others); its bit of
    /// `accept_pending` stays set while it may hold more.
    pub(super) fn accept_all(&mut self) {
        for k in 0..self.listeners.len() {
            if self.accept_pending & (1 << k) == 0 {
                continue;
            }
            let mut taken = 0;
            while taken < ACCEPT_BATCH {
                let (listener, serve) = &self.listeners[k];
                match listener.accept() {
                    Ok((sock, peer)) => {
                        let serve = *serve;
                        self.accept(sock, peer.ip().to_canonical(), serve);
                        taken += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // WouldBlock: all accepted; anything else (EMFILE...) ends this round too.
                    Err(_) => {
                        self.accept_pending &= !(1 << k);
                        break;
                    }
                }
            }
        }
    }

    /// One accepted connection: refused, or admitted, registered and
    /// (when it already broke a limit) answered.
    fn accept(&mut self, sock: TcpStream, ip: IpAddr, serve: Serve) {
        // At the cap: room is made by closing those that waited longest
        // for a request (idle or trickling), else this one goes.
        // An address shed lately does not displace another (`shed`).
        // The connections the calm lane holds for this thread count too.
        if self.open + self.lent() >= self.max_open {
            if self.shedder.shed_lately(self.shared.table.key(ip), self.now) {
                add(&self.n.refused_max_connections, 1);
                add(&self.n.refused_shed_lately, 1);
                return;
            }
            if !self.shed_one() {
                // Nothing of its own to shed: the lane sheds for the next one.
                self.ask_lane_to_shed();
                add(&self.n.refused_max_connections, 1);
                return;
            }
        }
        // Behind a load balancer the client is known only from the PROXY
        // header (admission waits for it: `Phase::Proxy`) or from each
        // request's `--client-ip-header` (no admission per connection).
        let trusted = self.trusted(ip);
        let forwarded = !self.cfg.proxy_protocol && trusted && self.cfg.client_ip_header.is_some();
        let admit = if self.cfg.proxy_protocol {
            if !trusted {
                add(&self.n.refused_untrusted_proxy, 1);
                return;
            }
            None
        } else if forwarded {
            None
        } else {
            Some(self.shared.table.on_accept(ip, self.now_ms()))
        };
        if let Some(a @ (Admit::Blocked | Admit::Full)) = admit {
            add(&self.n.refused_at_accept, 1);
            if a == Admit::Full {
                add(&self.n.refused_table_full, 1);
            }
            if self.cfg.action == BlockAction::Reset {
                reset(&sock);
            }
            return;
        }
        // A dry run admits a breaching connection, counted as open.
        let tracked = admit == Some(Admit::Ok) || (self.cfg.dry_run && matches!(admit, Some(Admit::Breach(_))));
        let _ = sock.set_nodelay(true);
        let tls = match if serve == Serve::Main { self.new_tls() } else { Ok(None) } {
            Ok(t) => t,
            Err(_) => {
                add(&self.n.tls_handshake_errors, 1);
                if tracked {
                    self.shared.table.on_close(ip);
                }
                return;
            }
        };
        let i = self.free_clients.pop().unwrap_or_else(|| {
            self.clients.push(None);
            self.clients.len() - 1
        });
        let mut c = self.new_client(sock, ip, forwarded, tracked, tls);
        // Paced by its own address only (see `crate::pace`).
        if admit.is_some() {
            let known = self.shared.table.standing(ip, self.now_ms()) == crate::table::Standing::Known;
            c.pace = Some(self.pace_rule.start(self.now_ms(), known));
        }
        c.redirect = serve == Serve::RedirectHttps;
        self.start_waiting(&mut c, true);
        if self.poll.registry().register(&mut c.sock, Token(2 * i), Interest::READABLE | Interest::WRITABLE).is_err() {
            if c.tracked {
                self.shared.table.on_close(ip);
            }
            self.free_clients.push(i);
            return;
        }
        add(&self.n.connections, 1);
        self.open += 1;
        self.clients[i] = Some(c);
        if let (Some(Admit::Breach(limit)), true) = (admit, self.cfg.dry_run) {
            self.note(ip, None, limit);
        } else if let Some(Admit::Breach(limit)) = admit {
            let mut c = self.clients[i].take().expect("just put");
            let after = self.refuse(&mut c, HttpRefusal { limit, status: limit.status(), reason: limit.name() });
            self.clients[i] = Some(c);
            match after {
                After::Keep => self.drive(i),
                After::Close => self.close_client(i, false),
                After::Reset => self.close_client(i, true),
            }
        }
    }

    /// A new connection's state, before its first byte.
    fn new_client(
        &mut self,
        sock: TcpStream,
        ip: IpAddr,
        forwarded: bool,
        tracked: bool,
        tls: Option<Box<TlsConn>>,
    ) -> Box<Client> {
        let now = Instant::now();
        let handshake_deadline = tls.as_ref().map(|_| now + self.cfg.tls_handshake_timeout);
        let serial = self.serials;
        self.serials += 1;
        // Boxed: a slot is taken out of `Worker::clients` and put back for
        // every event and every deadline sweep, and a pointer moves where
        // the whole state (800 bytes) would be copied twice.
        Box::new(Client {
            sock,
            ip,
            peer: ip,
            forwarded,
            tracked,
            inbuf: vec![0; IN_CHUNK.min(self.in_cap)],
            start: 0,
            end: 0,
            framer: RequestFramer::new(self.cfg.max_head).upgrading(self.upgrades.clone()),
            phase: if self.cfg.proxy_protocol { Phase::Proxy } else { Phase::Head },
            req: None,
            out: OutBuf::default(),
            sent: 0,
            received: 0,
            send_watch: ProgressWatch::new(0, now),
            body_watch: ProgressWatch::new(0, now),
            slow_noted: false,
            idle_deadline: None,
            progress_at: now,
            waiting_since: None,
            head_deadline: None,
            peer_eof: false,
            read_closed: false,
            readable: true,
            accepted: now,
            lent: false,
            body_len_noted: false,
            tls,
            handshake_deadline,
            ja4: None,
            hello_queued: false,
            send_queued: false,
            pace: None,
            later: false,
            serial,
            served: false,
            solo: false,
            as_new: false,
            tunnel: None,
            redirect: false,
            h2: None,
        })
    }

    /// Close one connection waiting for a request head (with nothing left
    /// to send it) or whose response has stalled (the client took nothing
    /// for [`STALLED`]): one not known first (never served: idle,
    /// trickling, still in a TLS handshake, or stalled on its first
    /// response; or near a limit), of those one over its calm pace
    /// (`crate::pace`) first; each kind oldest progress first. The ranking
    /// comes from a scan of every connection (a locked table lookup per
    /// candidate), whose best [`SCAN_SHARE`]th is taken one at a time
    /// (`shed`). Whether one was closed.
    fn shed_one(&mut self) -> bool {
        let now = Instant::now();
        let mut scanned = false;
        loop {
            let Some(cand) = self.shedder.next(now) else {
                if scanned {
                    return false;
                }
                scanned = true;
                self.rank_for_shedding(now);
                continue;
            };
            // Gone, or busy again, since the scan: the next.
            let Some(c) = self.clients.get(cand.slot).and_then(Option::as_ref) else { continue };
            if c.serial != cand.serial || waiting_since(c, now).is_none() {
                continue;
            }
            // Counted against its own address (not a balancer's
            // connection, nor one still waiting for its PROXY header).
            if !cand.known && c.tracked {
                self.shedder.note_shed(self.shared.table.key(c.ip), now);
            }
            self.close_client(cand.slot, false);
            add(&self.n.shed_waiting, 1);
            return true;
        }
    }

    /// Rank the connections that may be shed (`shed_one`) and keep the best
    /// 1/[`SCAN_SHARE`] of the open ones (at least one).
    fn rank_for_shedding(&mut self, now: Instant) {
        let now_ms = self.now_ms();
        let (table, rule) = (&self.shared.table, &self.pace_rule);
        let mut waiting: Vec<((bool, bool, Instant), Candidate)> = self
            .clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let c = c.as_ref()?;
                let since = waiting_since(c, now)?;
                // A connection served before whose client is well under its
                // limits goes last: a legitimate browser idles between
                // requests far longer than an attacker under the rate does,
                // so the oldest waiting alone would shed the real users first.
                // Of the rest, a calm one (`crate::pace`: a new address quiet
                // for a second) goes after those over their pace.
                let known = c.served && !table.near_limit(c.ip, now_ms);
                let calm = c.pace.is_none_or(|p| p.calm(rule, now_ms));
                Some(((known, calm, since), Candidate { slot: i, serial: c.serial, known }))
            })
            .collect();
        let k = (self.open / SCAN_SHARE).max(1).min(waiting.len());
        if k > 0 && k < waiting.len() {
            waiting.select_nth_unstable_by_key(k - 1, |w| w.0);
        }
        waiting.truncate(k);
        waiting.sort_unstable_by_key(|w| w.0);
        self.shedder.refill(waiting.into_iter().map(|w| w.1), now);
    }

    /// Whether `ip` is one of `--trusted-proxies`.
    pub(super) fn trusted(&self, ip: IpAddr) -> bool {
        self.cfg.trusted_proxies.iter().any(|p| p.contains(ip))
    }

    /// A PROXY header names the client; then it is admitted (or, behind a
    /// trusted proxy that names clients per request, framed at once).
    pub(super) fn proxy_header(&mut self, c: &mut Client) -> Next {
        if c.phase != Phase::Proxy || c.end == c.start {
            return Next::Go(false);
        }
        match crate::proxyproto::parse(&c.inbuf[c.start..c.end]) {
            Ok(Parsed::Incomplete) if !c.peer_eof => Next::Go(false),
            Ok(Parsed::Incomplete) | Err(_) => {
                add(&self.n.proxy_header_errors, 1);
                Next::End(After::Close)
            }
            Ok(Parsed::Header { len, source }) => {
                c.start += len;
                // What followed the header is the client's first TLS bytes.
                if let Some(t) = &mut c.tls {
                    t.push_early(&c.inbuf[c.start..c.end]);
                    (c.start, c.end, c.readable) = (0, 0, true);
                }
                // LOCAL/UNKNOWN: the balancer's own connection (a health check).
                if let Some(s) = source {
                    (c.ip, c.peer) = (s.ip().to_canonical(), s.ip().to_canonical());
                }
                // A proxy in front of the balancer names its requests' clients.
                c.forwarded = self.cfg.client_ip_header.is_some() && self.trusted(c.ip);
                if c.forwarded {
                    c.phase = Phase::Head;
                } else if let after @ (After::Close | After::Reset) = self.admit_client(c) {
                    return Next::End(after);
                }
                Next::Go(true)
            }
        }
    }

    /// Admission once the PROXY header named the client, as at accept
    /// without one: a blocked address or a full table is closed, a
    /// connection-rate breach refused.
    fn admit_client(&mut self, c: &mut Client) -> After {
        let admit = self.shared.table.on_accept(c.ip, self.now_ms());
        if matches!(admit, Admit::Blocked | Admit::Full) {
            add(&self.n.refused_at_accept, 1);
            if admit == Admit::Full {
                add(&self.n.refused_table_full, 1);
            }
            return if self.cfg.action == BlockAction::Reset { After::Reset } else { After::Close };
        }
        c.tracked = admit == Admit::Ok || (self.cfg.dry_run && matches!(admit, Admit::Breach(_)));
        c.phase = Phase::Head;
        match admit {
            Admit::Breach(limit) if self.cfg.dry_run => self.note(c.ip, c.ja4.as_deref(), limit),
            Admit::Breach(limit) => {
                return self.refuse(c, HttpRefusal { limit, status: limit.status(), reason: limit.name() })
            }
            _ => {}
        }
        After::Keep
    }

    /// A TLS connection for a new client when `--tls-cert` is on (the
    /// config as of the last reload).
    fn new_tls(&mut self) -> Result<Option<Box<TlsConn>>, crate::tls::TlsError> {
        let Some(store) = &self.shared.tls else { return Ok(None) };
        let generation = store.generation.load(Ordering::Acquire);
        if self.tls.as_ref().is_none_or(|(g, _)| *g != generation) {
            self.tls = Some((generation, store.current()));
        }
        let cfg = self.tls.as_ref().expect("just set").1.clone();
        let l = &self.cfg.limits;
        let judge =
            self.shared.ja4_block.is_some() || l.tls_handshake_rate.is_some() || l.tls_handshake_burst.is_some();
        TlsConn::new(cfg, judge).map(|t| Some(Box::new(t)))
    }

    /// A whole ClientHello, before rustls spends anything on it: its JA4
    /// is counted and checked against `--block-ja4`, the hello against the
    /// handshake rate (a trusted proxy's are not: it speaks for many).
    /// One that cannot be read breaks `tls_hello`, counted in the rate all
    /// the same.
    pub(super) fn hello(
        &mut self,
        c: &mut Client,
        hello: Result<&crate::ja4::ClientHello, &crate::ja4::HelloError>,
    ) -> After {
        let ja4 = hello.ok().map(|h| h.ja4());
        let listed = ja4.as_ref().is_some_and(|j| self.shared.ja4_block.as_ref().is_some_and(|b| b.contains(j)));
        let rate = if c.forwarded || self.trusted(c.ip) {
            None
        } else {
            Some(self.shared.table.on_hello(c.ip, self.now_ms()))
        };
        let limit = match (&ja4, listed) {
            (None, _) => Some(Limit::TlsHello),
            (_, true) => Some(Limit::TlsJa4),
            _ => rate.and_then(|r| r.err()),
        };
        if let Some(ja4) = ja4 {
            self.shared.ja4_stats.count(&ja4, limit.is_some() && !self.cfg.dry_run);
            c.ja4 = Some(ja4.into_boxed_str());
        }
        match limit {
            None => After::Keep,
            Some(limit) if self.cfg.dry_run => {
                self.note(c.ip, c.ja4.as_deref(), limit);
                After::Keep
            }
            Some(limit) => self.refuse(c, HttpRefusal { limit, status: limit.status(), reason: limit.name() }),
        }
    }

    /// Let rustls process queued ClientHellos, oldest first, for up to
    /// [`HELLO_SLICE`].
    pub(super) fn run_hellos(&mut self) {
        let until = Instant::now() + HELLO_SLICE;
        while let Some((i, serial)) = self.hellos.pop_front() {
            let Some(Some(c)) = self.clients.get_mut(i) else { continue };
            if c.serial != serial || !c.hello_queued {
                continue;
            }
            (c.hello_queued, c.readable) = (false, true);
            self.drive(i);
            if Instant::now() >= until {
                break;
            }
        }
    }

    /// A TLS handshake that just finished ends its deadline.
    #[inline]
    pub(super) fn tls_established(&mut self, c: &mut Client) -> Next {
        match c.tls.as_mut().filter(|t| !t.established && !t.is_handshaking()) {
            Some(t) => {
                t.established = true;
                let h2 = t.alpn() == Some(&b"h2"[..]);
                c.handshake_deadline = None;
                add(&self.n.tls_handshakes, 1);
                if h2 {
                    self.start_h2(c);
                }
                Next::Go(true)
            }
            None => Next::Go(false),
        }
    }
}

/// Since when `c` may be shed: waiting for a request head (with nothing
/// left to send it), or its response stalled for [`STALLED`].
fn waiting_since(c: &Client, now: Instant) -> Option<Instant> {
    if c.out.has_pending() {
        Some(c.progress_at).filter(|&t| now.duration_since(t) >= STALLED)
    } else {
        c.waiting_since
    }
}
