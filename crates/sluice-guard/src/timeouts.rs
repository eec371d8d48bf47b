//! A deadline on every phase of a connection, on by default, and the watch
//! that tells a stalled or trickling peer from a slow but honest one.
//!
//! The defaults are chosen so that a real browser on a poor mobile link is
//! never cut and a slow attacker (slowloris, slow body, slow read) is:
//!
//! - A browser sends a request head in one segment (a few hundred bytes to
//!   a few KiB). Even on GPRS (about 5 KB/s) with a 2 s round trip and a
//!   retransmission or two it arrives within seconds: **20 s** for the head
//!   (Apache's `mod_reqtimeout` allows 20-40 s, nginx 60 s).
//! - Data rates: 2G EDGE carries 10-25 KB/s, GPRS about 5 KB/s; a client
//!   that moves less than **240 B/s** (Kestrel's default for both request
//!   bodies and responses) over a **10 s** window is not a browser on a
//!   bad link but a connection held open on purpose. The window is twice
//!   Kestrel's 5 s grace so a burst of retransmission back-off (1, 2, 4 s)
//!   does not trip it; a slow reader is still cut within about 20 s.
//! - No progress at all for **60 s** while sending or receiving a body is
//!   nginx's `send_timeout` / `client_body_timeout`; the rate window above
//!   usually acts first.
//! - Upstream: a local server that does not accept a connection in **5 s**
//!   is down (HAProxy's usual `timeout connect`); one that sends nothing for
//!   **60 s** while a response is owed is hung (nginx's `proxy_read_timeout`).
//!   Time the guard spends not reading the upstream because the client has
//!   not taken what was read is not counted against the upstream.
//! - An idle kept-alive connection is closed after **60 s** (nginx: 75 s);
//!   at `--max-connections` idle ones are shed first anyway.
//! - A tunnel (an upgraded connection: WebSocket) that moves no byte either
//!   way for **60 s** is closed (nginx's `proxy_read_timeout` closes one
//!   whose upstream is quiet that long); WebSocket applications ping more
//!   often than that (Socket.IO every 25 s), and HAProxy users commonly set
//!   `timeout tunnel` to an hour where they do not.
//!
//! Each is settable, and 0 turns it off.

use std::time::{Duration, Instant};

/// Bytes per second, averaged over windows of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    pub bytes_per_sec: u64,
    /// Also the grace: no verdict before a whole window has passed.
    pub window: Duration,
}

impl MinRate {
    /// `None` when `bytes_per_sec` or `window` is 0 (off).
    pub fn new(bytes_per_sec: u64, window: Duration) -> Option<MinRate> {
        (bytes_per_sec > 0 && !window.is_zero()).then_some(MinRate { bytes_per_sec, window })
    }
}

/// The deadlines of a connection's phases; `None`: off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// A request head must be complete this long after accept (or, on a
    /// kept-alive connection, after its first byte). Breach: 408.
    pub client_header: Option<Duration>,
    /// No request body byte for this long (while the guard could take one). Breach: 408.
    pub client_body: Option<Duration>,
    /// A request body slower than this (while the guard could take more). Breach: 408.
    pub min_request_body_rate: Option<MinRate>,
    /// A kept-alive connection waits this long for its next request's first byte.
    pub keepalive: Option<Duration>,
    /// No response byte taken by the client for this long. Breach, closed.
    pub send: Option<Duration>,
    /// A client that takes response bytes slower than this. Breach, closed.
    pub min_response_rate: Option<MinRate>,
    /// A new upstream connection must be accepted this soon. 504.
    pub upstream_connect: Option<Duration>,
    /// No byte from the upstream for this long while a response is owed
    /// (and the client has room for it). 504, or closed once the response began.
    pub upstream_response: Option<Duration>,
    /// A request waiting for an upstream slot (`--upstream-max-inflight`)
    /// this long is answered 503.
    pub upstream_queue: Option<Duration>,
    /// A tunnel (an upgraded connection) that moves no byte either way for
    /// this long is closed.
    pub tunnel: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        let rate = MinRate::new(240, Duration::from_secs(10));
        Timeouts {
            client_header: Some(Duration::from_secs(20)),
            client_body: Some(Duration::from_secs(60)),
            min_request_body_rate: rate,
            keepalive: Some(Duration::from_secs(60)),
            send: Some(Duration::from_secs(60)),
            min_response_rate: rate,
            upstream_connect: Some(Duration::from_secs(5)),
            upstream_response: Some(Duration::from_secs(60)),
            upstream_queue: Some(Duration::from_secs(10)),
            tunnel: Some(Duration::from_secs(60)),
        }
    }
}

impl Timeouts {
    /// Every deadline off (as before they existed; tests of other things).
    pub fn none() -> Timeouts {
        Timeouts {
            client_header: None,
            client_body: None,
            min_request_body_rate: None,
            keepalive: None,
            send: None,
            min_response_rate: None,
            upstream_connect: None,
            upstream_response: None,
            upstream_queue: None,
            tunnel: None,
        }
    }
}

/// A duration in milliseconds where 0 means off.
pub fn ms(v: u64) -> Option<Duration> {
    (v > 0).then(|| Duration::from_millis(v))
}

/// Watches one direction of a connection for progress: fires when the
/// peer owes bytes and moved none for `stall`, or fewer than the minimum
/// rate over a whole window. Time when nothing is owed (the guard itself
/// is not reading, or has nothing to send) restarts the watch, so the
/// peer is never charged for the guard's own back-pressure.
#[derive(Debug, Clone, Copy)]
pub struct ProgressWatch {
    /// Bytes moved as of the last progress, and when.
    moved: u64,
    at: Instant,
    /// Bytes moved when the current rate window began, and when.
    window_moved: u64,
    window_at: Instant,
}

/// Why a watch fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stalled {
    /// No byte for the whole `stall` duration.
    NoProgress,
    /// Bytes moved, but under the minimum rate over a window.
    TooSlow,
}

impl ProgressWatch {
    pub fn new(moved: u64, now: Instant) -> ProgressWatch {
        ProgressWatch { moved, at: now, window_moved: moved, window_at: now }
    }

    /// Look at the direction now: `moved` is its running byte count,
    /// `owing` whether the peer is expected to move bytes.
    pub fn check(
        &mut self,
        owing: bool,
        moved: u64,
        now: Instant,
        stall: Option<Duration>,
        rate: Option<MinRate>,
    ) -> Option<Stalled> {
        if !owing {
            *self = ProgressWatch::new(moved, now);
            return None;
        }
        if moved != self.moved {
            (self.moved, self.at) = (moved, now);
        }
        if stall.is_some_and(|d| now.duration_since(self.at) >= d) {
            return Some(Stalled::NoProgress);
        }
        if let Some(r) = rate {
            let elapsed = now.duration_since(self.window_at);
            if elapsed >= r.window {
                let need = (r.bytes_per_sec as u128 * elapsed.as_millis() / 1000) as u64;
                if moved - self.window_moved < need {
                    return Some(Stalled::TooSlow);
                }
                (self.window_moved, self.window_at) = (moved, now);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_stalled_peer_fires_after_the_stall_and_progress_resets_it() {
        let t0 = Instant::now();
        let mut w = ProgressWatch::new(0, t0);
        assert_eq!(w.check(true, 0, t0 + 9 * S, Some(10 * S), None), None);
        assert_eq!(w.check(true, 1, t0 + 9 * S, Some(10 * S), None), None, "one byte is progress");
        assert_eq!(w.check(true, 1, t0 + 18 * S, Some(10 * S), None), None);
        assert_eq!(w.check(true, 1, t0 + 19 * S, Some(10 * S), None), Some(Stalled::NoProgress));
    }

    #[test]
    fn time_not_owed_is_not_charged() {
        let t0 = Instant::now();
        let mut w = ProgressWatch::new(0, t0);
        // The guard paused (its buffer full) for 100 s: nothing owed.
        assert_eq!(w.check(false, 0, t0 + 100 * S, Some(10 * S), None), None);
        assert_eq!(w.check(true, 0, t0 + 105 * S, Some(10 * S), None), None);
        assert_eq!(w.check(true, 0, t0 + 110 * S, Some(10 * S), None), Some(Stalled::NoProgress));
    }

    #[test]
    fn a_trickle_under_the_rate_fires_at_the_end_of_a_window() {
        let rate = MinRate::new(240, 10 * S);
        let t0 = Instant::now();
        let mut w = ProgressWatch::new(0, t0);
        // 5 bytes every 2 s (slowhttptest's slow read): progress, but 25 B in 10 s.
        let mut fired = None;
        for k in 1..=10u32 {
            fired = w.check(true, 5 * k as u64, t0 + 2 * k * S, Some(60 * S), rate);
            if fired.is_some() {
                assert_eq!(k, 5, "at the end of the first window");
                break;
            }
        }
        assert_eq!(fired, Some(Stalled::TooSlow));
        // A mobile link at 5 KB/s never fires; each window starts afresh.
        let mut w = ProgressWatch::new(0, t0);
        for k in 1..=100u32 {
            assert_eq!(w.check(true, 5000 * k as u64, t0 + k * S, Some(60 * S), rate), None, "{k}");
        }
    }

    #[test]
    fn zero_is_off() {
        assert_eq!(ms(0), None);
        assert_eq!(ms(5), Some(Duration::from_millis(5)));
        assert_eq!(MinRate::new(0, S), None);
        assert_eq!(MinRate::new(1, Duration::ZERO), None);
        let t0 = Instant::now();
        let mut w = ProgressWatch::new(0, t0);
        assert_eq!(w.check(true, 0, t0 + 1000 * S, None, None), None);
    }
}
