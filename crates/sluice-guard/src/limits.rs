//! The limits (named as Tempesta's frang names them) and what breaking each
//! one answers.

use std::str::FromStr;

/// Largest rate or burst: slot counters are `u16` and saturate above this.
pub const MAX_RATE: u32 = 60_000;

/// Ten `403,404:10:2`-style responses: that many upstream responses with
/// one of `codes` within `period_ms` is a breach (`http_resp_code_block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespCodeBlock {
    pub codes: Vec<u16>,
    pub limit: u32,
    pub period_ms: u64,
}

impl FromStr for RespCodeBlock {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected CODES:LIMIT:SECONDS, e.g. 403,404:10:2");
        let mut parts = s.split(':');
        let (Some(codes), Some(limit), Some(secs), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let codes = codes
            .split(',')
            .map(|c| c.trim().parse::<u16>().ok().filter(|c| (100..=599).contains(c)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        let limit = limit.parse::<u32>().ok().filter(|&l| l > 0 && l <= MAX_RATE).ok_or_else(bad)?;
        let secs = secs.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.008 && *s <= 86_400.0);
        let period_ms = (secs.ok_or_else(bad)? * 1000.0).round() as u64;
        Ok(RespCodeBlock { codes, limit, period_ms })
    }
}

/// Every limit is off (`None`/`false`) unless set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests per second, over 8 slots of 125 ms.
    pub request_rate: Option<u32>,
    /// Requests per 125 ms slot.
    pub request_burst: Option<u32>,
    pub connection_rate: Option<u32>,
    pub connection_burst: Option<u32>,
    pub concurrent_connections: Option<u32>,
    pub http_header_cnt: Option<u32>,
    /// Longest header line, name to value.
    pub http_field_len: Option<u32>,
    pub http_uri_len: Option<u32>,
    pub http_body_len: Option<u64>,
    /// Allowed methods (exact, case-sensitive as HTTP methods are).
    pub http_methods: Option<Vec<String>>,
    pub http_host_required: bool,
    pub http_resp_code_block: Option<RespCodeBlock>,
    /// TLS ClientHellos per second (before any crypto is spent on them).
    pub tls_handshake_rate: Option<u32>,
    /// TLS ClientHellos per 125 ms slot.
    pub tls_handshake_burst: Option<u32>,
}

impl Limits {
    /// Rates and bursts must fit the slot counters.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("request-rate", self.request_rate),
            ("request-burst", self.request_burst),
            ("connection-rate", self.connection_rate),
            ("connection-burst", self.connection_burst),
            ("tls-handshake-rate", self.tls_handshake_rate),
            ("tls-handshake-burst", self.tls_handshake_burst),
        ] {
            if let Some(v) = v {
                if v == 0 || v > MAX_RATE {
                    return Err(format!("--{name} must be 1..={MAX_RATE}"));
                }
            }
        }
        Ok(())
    }
}

macro_rules! limits {
    ($($variant:ident = $name:literal, $status:literal;)*) => {
        /// A limit that was broken.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Limit { $($variant),* }

        impl Limit {
            pub const ALL: &'static [Limit] = &[$(Limit::$variant),*];
            pub const COUNT: usize = Limit::ALL.len();

            /// Frang's name, in snake case (JSON keys, metric labels).
            pub fn name(self) -> &'static str {
                match self { $(Limit::$variant => $name),* }
            }

            /// The status `--block-action reply` answers with; 0: none fits
            /// (the response was already relayed), just close.
            pub fn status(self) -> u16 {
                match self { $(Limit::$variant => $status),* }
            }
        }
    };
}

limits! {
    RequestRate = "request_rate", 429;
    RequestBurst = "request_burst", 429;
    ConnectionRate = "connection_rate", 429;
    ConnectionBurst = "connection_burst", 429;
    ConcurrentConnections = "concurrent_connections", 429;
    ClientHeaderTimeout = "client_header_timeout", 408;
    ClientBodyTimeout = "client_body_timeout", 408;
    // A body under --min-request-body-rate (slowhttptest -B).
    MinRequestBodyRate = "min_request_body_rate", 408;
    // The client took no response byte for --send-timeout, or took them
    // under --min-response-rate (slowhttptest -X): closed, nothing to say.
    SendTimeout = "send_timeout", 0;
    MinResponseRate = "min_response_rate", 0;
    HttpHeaderCnt = "http_header_cnt", 431;
    HttpFieldLen = "http_field_len", 431;
    HttpUriLen = "http_uri_len", 414;
    HttpBodyLen = "http_body_len", 413;
    HttpMethods = "http_methods", 405;
    HttpHostRequired = "http_host_required", 400;
    HttpRespCodeBlock = "http_resp_code_block", 0;
    // Refused at the ClientHello, before the handshake: nothing can be answered.
    TlsHandshakeRate = "tls_handshake_rate", 0;
    TlsHandshakeBurst = "tls_handshake_burst", 0;
    // The hello's JA4 is on the --block-ja4 list.
    TlsJa4 = "tls_ja4", 0;
    // A ClientHello that cannot be read (not a handshake, over 16 KiB,
    // malformed) while --block-ja4 or a handshake rate is on: it cannot be judged.
    TlsHello = "tls_hello", 0;
    // HTTP/2 floods and stalls (sluice_h2::BreachKind, the same names):
    // the connection ends with GOAWAY, nothing else is said.
    H2RapidReset = "h2_rapid_reset", 0;
    H2ContinuationFlood = "h2_continuation_flood", 0;
    H2HeadTooLarge = "h2_head_too_large", 0;
    H2SettingsFlood = "h2_settings_flood", 0;
    H2PingFlood = "h2_ping_flood", 0;
    H2PriorityFlood = "h2_priority_flood", 0;
    H2WindowUpdateFlood = "h2_window_update_flood", 0;
    H2EmptyFrames = "h2_empty_frames", 0;
    H2ControlBacklog = "h2_control_backlog", 0;
    H2ZeroWindowStall = "h2_zero_window_stall", 0;
    H2SettingsTimeout = "h2_settings_timeout", 0;
    // Any request the parser refuses (answered with its own status: 400, 431 or 501).
    HttpParse = "http_parse", 400;
}

impl Limit {
    /// The limit an HTTP/2 breach counts under.
    pub fn from_h2(kind: sluice_h2::BreachKind) -> Limit {
        use sluice_h2::BreachKind::*;
        match kind {
            RapidReset => Limit::H2RapidReset,
            ContinuationFlood => Limit::H2ContinuationFlood,
            HeadTooLarge => Limit::H2HeadTooLarge,
            SettingsFlood => Limit::H2SettingsFlood,
            PingFlood => Limit::H2PingFlood,
            PriorityFlood => Limit::H2PriorityFlood,
            WindowUpdateFlood => Limit::H2WindowUpdateFlood,
            EmptyFrames => Limit::H2EmptyFrames,
            ControlBacklog => Limit::H2ControlBacklog,
            ZeroWindowStall => Limit::H2ZeroWindowStall,
            SettingsTimeout => Limit::H2SettingsTimeout,
        }
    }

    pub fn index(self) -> usize {
        Limit::ALL.iter().position(|&l| l == self).expect("listed")
    }

    /// What a breach of this limit weighs toward an IP block (`--ip-block`):
    /// `reason` is the parser's error for [`Limit::HttpParse`] (its
    /// `ErrorKind` name), ignored for the others. The table in
    /// docs/http-guard.md ("Breach scores") says the same.
    pub fn weight(self, reason: &str) -> Weight {
        use Limit::*;
        match self {
            // Rates and counts the operator set: the breach is already
            // many events, and it is the harm.
            RequestRate
            | RequestBurst
            | ConnectionRate
            | ConnectionBurst
            | ConcurrentConnections
            | HttpRespCodeBlock
            | TlsHandshakeRate
            | TlsHandshakeBurst => Weight::AtOnce,
            // A fingerprint the operator listed as hostile.
            TlsJa4 => Weight::AtOnce,
            // Floods of frames no browser sends at these rates: each is
            // already hundreds of frames over a limit.
            H2RapidReset | H2ContinuationFlood | H2SettingsFlood | H2PingFlood | H2PriorityFlood
            | H2WindowUpdateFlood | H2EmptyFrames | H2ControlBacklog => Weight::AtOnce,
            // A big cookie, a phone that stopped reading or lost the
            // SETTINGS ack on a poor link: mistakes, as their HTTP/1.1 kin.
            H2HeadTooLarge | H2ZeroWindowStall | H2SettingsTimeout => Weight::Points(1),
            // What a real client sends by mistake or from a poor link: a
            // mistyped URL or method, a stale form, a huge cookie, a
            // stalled phone, https:// typed to a plain port (or the reverse).
            ClientHeaderTimeout | ClientBodyTimeout | MinRequestBodyRate | SendTimeout | MinResponseRate
            | HttpHeaderCnt | HttpFieldLen | HttpUriLen | HttpBodyLen | HttpMethods | HttpHostRequired | TlsHello => {
                Weight::Points(1)
            }
            HttpParse if PARSE_MISTAKES.contains(&reason) => Weight::Points(1),
            // Framing no client library produces and parsers disagree on:
            // Content-Length with Transfer-Encoding, duplicate lengths, bare
            // LF, obs-fold, bad chunks. That is what a request smuggling
            // attempt looks like.
            HttpParse => Weight::AtOnce,
        }
    }
}

/// The parser's errors a real client may cause: a head too big (cookies),
/// cut short, or not HTTP at all (TLS to a plain port, a raw space in a
/// hand-typed target). Each is a point; every other parser error blocks
/// at once.
pub const PARSE_MISTAKES: &[&str] =
    &["head-too-large", "too-many-headers", "incomplete-head", "invalid-method", "invalid-version", "invalid-target"];

/// What one breach weighs toward an IP block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Blocks the address at once.
    AtOnce,
    /// Adds this many points to its score: blocked once the score reaches
    /// `--ip-block-after` (a point leaks away each
    /// [`SCORE_LEAK_SECS`](crate::table::SCORE_LEAK_SECS)).
    Points(u8),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_code_block_parses() {
        let r: RespCodeBlock = "403,404:10:2".parse().unwrap();
        assert_eq!(r, RespCodeBlock { codes: vec![403, 404], limit: 10, period_ms: 2000 });
        for bad in ["403:10", "403:0:2", "abc:1:2", "403:1:2:3", "99:1:1", "403:1:-1"] {
            assert!(bad.parse::<RespCodeBlock>().is_err(), "{bad}");
        }
    }

    #[test]
    fn smuggling_blocks_at_once_and_a_mistake_is_a_point() {
        for reason in ["content-length-with-transfer-encoding", "conflicting-content-length", "bare-lf", "obs-fold"] {
            assert_eq!(Limit::HttpParse.weight(reason), Weight::AtOnce, "{reason}");
        }
        for reason in ["head-too-large", "invalid-method", "invalid-target"] {
            assert_eq!(Limit::HttpParse.weight(reason), Weight::Points(1), "{reason}");
        }
        assert_eq!(Limit::HttpMethods.weight("http_methods"), Weight::Points(1));
        assert_eq!(Limit::HttpHostRequired.weight("no host to redirect to"), Weight::Points(1));
        assert_eq!(Limit::RequestRate.weight("request_rate"), Weight::AtOnce);
        // The names are the parser's (a rename there must not silently
        // turn a mistake into a block).
        for kind in PARSE_MISTAKES {
            assert!(sluice_h1::ErrorKind::ALL.iter().any(|k| k.as_str() == *kind), "{kind}");
        }
    }

    #[test]
    fn h2_breaches_keep_their_names() {
        use sluice_h2::BreachKind::*;
        let all = [
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
        ];
        for kind in all {
            assert_eq!(Limit::from_h2(kind).name(), kind.name());
        }
        assert_eq!(Limit::ALL.iter().filter(|l| l.name().starts_with("h2_")).count(), all.len());
    }

    #[test]
    fn names_are_unique_and_indexed() {
        let mut names: Vec<_> = Limit::ALL.iter().map(|l| l.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Limit::COUNT);
        assert_eq!(Limit::HttpParse.index(), Limit::COUNT - 1);
    }
}
