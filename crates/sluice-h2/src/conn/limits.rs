//! The limits of one connection, each with the reason for its default, the
//! floods they catch ([`BreachKind`]), and the token buckets that count
//! them against a caller-supplied clock.

use std::time::{Duration, Instant};

/// Per-connection limits. The defaults are what `sluice http-guard` runs
/// with; each says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS, advertised. 100 is RFC 9113's
    /// recommended minimum and what browsers expect; each stream holds an
    /// upstream request in the guard. A HEADERS over it is refused with
    /// RST_STREAM(REFUSED_STREAM) and counted like a reset.
    pub max_concurrent_streams: u32,
    /// The raw header block (HEADERS + CONTINUATION payloads) and the
    /// decoded field list (RFC 7541 sizes) are each bounded by this; 16 KiB
    /// is the guard's --max-head. Checked on the raw bytes before any
    /// HPACK decoding; advertised as SETTINGS_MAX_HEADER_LIST_SIZE.
    pub max_head: usize,
    /// CONTINUATION frames after one HEADERS. A 16 KiB head fits in one
    /// HEADERS frame at the default frame size; 8 leaves room for a peer
    /// that splits small, and refuses the 2024 CONTINUATION flood.
    pub max_continuations: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table, RFC 7541's
    /// default 4096 (not advertised as anything else: no gain for the cost).
    pub header_table_size: usize,
    /// SETTINGS_INITIAL_WINDOW_SIZE, each stream's receive window: the RFC
    /// default 65535; request bodies are small next to responses.
    pub stream_window: u32,
    /// The connection's receive window: 128 KiB, two streams' worth, so a
    /// body upload is not stalled by the RFC's 65535 while bounding what a
    /// client can make us hold before the guard forwards it.
    pub conn_window: u32,
    /// Rapid Reset (CVE-2023-44487): a breach when client resets run more
    /// than this many per second ahead of streams completed normally.
    pub resets_net_per_sec: u32,
    /// Rapid Reset, the cruder count: resets per second regardless of
    /// completions. Streams we refuse (over the concurrency limit, or
    /// malformed) and header blocks for no open stream count here too:
    /// each costs a decode and reaches no request budget of the guard's.
    pub resets_total_per_sec: u32,
    /// SETTINGS frames: a burst of this many, then `settings_per_sec`
    /// (each costs an ack; CVE-2019-9515).
    pub settings_burst: u32,
    pub settings_per_sec: u32,
    /// PING frames per second, burst the same (each costs an ack;
    /// CVE-2019-9512).
    pub pings_per_sec: u32,
    /// PRIORITY frames: this many, plus `priority_per_stream` per stream
    /// opened (CVE-2019-9513, the resource loop; we schedule nothing by
    /// priority but the frames still cost a parse each).
    pub priority_base: u32,
    pub priority_per_stream: u32,
    /// WINDOW_UPDATE frames per second, plus `window_updates_per_data` per
    /// DATA frame we sent (a client acknowledging our data is normal).
    pub window_updates_per_sec: u32,
    pub window_updates_per_data: u32,
    /// DATA or HEADERS frames with no payload and no END_STREAM, per
    /// connection (CVE-2019-9518): they cost work and do nothing.
    pub empty_frames: u32,
    /// Replies owed to the peer (SETTINGS and PING acks, RST_STREAMs) not
    /// yet taken by `consume_output`: past this the peer is not reading
    /// (CVE-2019-9512/9515's queueing half) and the connection is closed.
    pub max_control_backlog: usize,
    /// The client must acknowledge our SETTINGS within this (RFC 9113
    /// 6.5.3 lets us close with SETTINGS_TIMEOUT); 10 s covers a slow
    /// mobile round trip many times over.
    pub settings_ack_timeout: Duration,
    /// A stream with response bytes waiting while the client's window stays
    /// at 0 this long is reset (CVE-2019-9517, the zero-window hold).
    pub zero_window_timeout: Duration,
    /// Output bytes queued before frames that need replies stop being read
    /// and `send_data` stops accepting: 64 KiB is four full frames, enough
    /// to keep a TLS writer busy.
    pub max_output: usize,
    /// Bytes held in queued events (request heads, DATA) before reading
    /// pauses until the caller drains them with `poll_event`.
    pub max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_concurrent_streams: 100,
            max_head: 16 * 1024,
            max_continuations: 8,
            header_table_size: 4096,
            stream_window: 65_535,
            conn_window: 128 * 1024,
            resets_net_per_sec: 50,
            resets_total_per_sec: 200,
            settings_burst: 10,
            settings_per_sec: 2,
            pings_per_sec: 10,
            priority_base: 100,
            priority_per_stream: 100,
            window_updates_per_sec: 100,
            window_updates_per_data: 2,
            empty_frames: 100,
            max_control_backlog: 64,
            settings_ack_timeout: Duration::from_secs(10),
            zero_window_timeout: Duration::from_secs(10),
            max_output: 64 * 1024,
            max_event_bytes: 64 * 1024,
        }
    }
}

/// What one stream's state may take on the heap and inline, counted
/// generously (its map node included).
pub(crate) const STREAM_COST: usize = 256;
/// A partial frame: the header and the largest payload we accept.
pub(crate) const FRAME_BUF: usize = crate::frame::HEADER_LEN + crate::frame::DEFAULT_MAX_FRAME_SIZE as usize;
/// The fixed part of a connection (the struct, buckets, small queues).
pub(crate) const FIXED_COST: usize = 4096;

impl Limits {
    /// The hard cap of the output buffer: `max_output` plus one response
    /// head (bounded by `max_head`, with its frame headers) and the few
    /// small replies one frame read can add after the soft cap was reached.
    pub fn output_cap(&self) -> usize {
        self.max_output + self.max_head + self.max_head / 1024 * 9 + 1024
    }

    /// The most one event can weigh (a request head at `max_head`, each
    /// field's vector overhead included; or one DATA frame).
    pub(crate) fn max_event(&self) -> usize {
        (self.max_head + self.max_head / 32 * 16 + 512).max(FRAME_BUF + 64)
    }

    /// The most memory one connection holds at these limits, in bytes: the
    /// partial frame buffer, the raw header block, the HPACK table (with
    /// its entries' overhead), the decoded head being built, the queued
    /// events, the streams, and the output buffer at its hard cap. At the
    /// defaults this is [`DEFAULT_MEMORY_BOUND`]. Every buffer is capped, so
    /// this holds whatever the peer sends.
    pub fn memory_bound(&self) -> usize {
        FIXED_COST
            + FRAME_BUF
            + self.max_head
            + crate::hpack::Decoder::memory_bound(self.header_table_size)
            + self.max_event()
            + self.max_event_bytes
            + self.max_event()
            + self.max_concurrent_streams as usize * STREAM_COST
            + self.output_cap()
    }
}

/// [`Limits::memory_bound`] at the defaults: about 272 KiB per connection.
pub const DEFAULT_MEMORY_BOUND: usize = 278_009;

/// A flood caught: the guard blocks the client. Every breach also ends the
/// connection with GOAWAY (ENHANCE_YOUR_CALM, or SETTINGS_TIMEOUT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreachKind {
    RapidReset,
    ContinuationFlood,
    HeadTooLarge,
    SettingsFlood,
    PingFlood,
    PriorityFlood,
    WindowUpdateFlood,
    EmptyFrames,
    ControlBacklog,
    ZeroWindowStall,
    SettingsTimeout,
}

impl BreachKind {
    /// A stable name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            BreachKind::RapidReset => "h2_rapid_reset",
            BreachKind::ContinuationFlood => "h2_continuation_flood",
            BreachKind::HeadTooLarge => "h2_head_too_large",
            BreachKind::SettingsFlood => "h2_settings_flood",
            BreachKind::PingFlood => "h2_ping_flood",
            BreachKind::PriorityFlood => "h2_priority_flood",
            BreachKind::WindowUpdateFlood => "h2_window_update_flood",
            BreachKind::EmptyFrames => "h2_empty_frames",
            BreachKind::ControlBacklog => "h2_control_backlog",
            BreachKind::ZeroWindowStall => "h2_zero_window_stall",
            BreachKind::SettingsTimeout => "h2_settings_timeout",
        }
    }
}

/// A token bucket in thousandths of a token: `cap` tokens of burst,
/// refilled at `rate` per second by the `now` each call is given (no clock
/// read here, so tests are exact). `give` may lift it up to `ceiling`
/// (above `cap`: credit earned, e.g. by DATA sent, is not lost to the cap).
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    level: u64,
    cap: u64,
    ceiling: u64,
    rate: u64,
    at: Option<Instant>,
}

const MILLI: u64 = 1000;

impl Bucket {
    pub(crate) fn new(cap: u32, rate: u32) -> Bucket {
        let cap = u64::from(cap) * MILLI;
        Bucket { level: cap, cap, ceiling: cap, rate: u64::from(rate), at: None }
    }

    pub(crate) fn with_ceiling(mut self, ceiling: u64) -> Bucket {
        self.ceiling = ceiling.saturating_mul(MILLI).max(self.cap);
        self
    }

    fn refill(&mut self, now: Instant) {
        let Some(at) = self.at else {
            self.at = Some(now);
            return;
        };
        let micros = u64::try_from(now.saturating_duration_since(at).as_micros()).unwrap_or(u64::MAX);
        // rate tokens/s = rate thousandths per millisecond.
        let add = micros.saturating_mul(self.rate) / 1000;
        if add > 0 {
            if self.level < self.cap {
                self.level = (self.level + add).min(self.cap);
            }
            self.at = Some(now);
        }
    }

    /// Takes one token; false when there is none (the flood).
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.level >= MILLI {
            self.level -= MILLI;
            true
        } else {
            false
        }
    }

    /// Gives `n` tokens back, up to the ceiling.
    pub(crate) fn give(&mut self, n: u32) {
        self.level = self.level.saturating_add(u64::from(n) * MILLI).min(self.ceiling.max(self.level));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_burst_then_rate() {
        let t = Instant::now();
        let mut b = Bucket::new(10, 2);
        assert!((0..10).all(|_| b.take(t)));
        assert!(!b.take(t));
        assert!(!b.take(t + Duration::from_millis(499)));
        assert!(b.take(t + Duration::from_millis(1000)));
        b.give(5);
        // One token left from the second's refill of two, and the five given.
        assert!((0..6).all(|_| b.take(t + Duration::from_millis(1000))));
        assert!(!b.take(t + Duration::from_millis(1000)));
    }

    #[test]
    fn default_memory_bound_is_the_documented_constant() {
        assert_eq!(Limits::default().memory_bound(), DEFAULT_MEMORY_BOUND);
    }
}
