//! A connection's pace: which connections the loop serves first when it
//! has more to do than time (an attack of addresses each under the
//! per-address limits, but together more than one thread serves).
//!
//! Each connection keeps a leaky count of its requests: every request adds
//! one, and the count leaks at an eighth of `--request-rate` per second. A
//! client asking at less than that (a reader, a browser between pages)
//! stays near zero; one asking faster climbs. While the count is under
//! two seconds' worth of the limit the connection is *calm*, and the loop
//! serves its events as they come; the others' events wait in a queue
//! served for a bounded slice of each loop turn (`proxy`'s `later`). A
//! connection from an address never served before starts one second of
//! leak above calm: under load, the clients a site has already served come
//! first, and a flood of new addresses waits behind them. Without load
//! the queue empties every turn and nothing waits.
//!
//! Why the leak is an eighth of the limit: the calm share of the loop is
//! then at most an eighth of what all addresses may ask, so an attack that
//! keeps every address just under the limit (served by design) cannot fill
//! it; and a client asking at less than that stays calm whatever its
//! bursts, as long as a burst is under two seconds of the limit.
//!
//! The count is the connection's: a browser's six connections are six
//! counts (each calm or not on its own). The model test below checks the
//! integer arithmetic against exact leaking.

/// Requests are counted in millionths: a leak of an eighth of the rate per
/// second is then a whole number per millisecond (125 per request/s), and
/// the count leaks exactly.
const ONE: u64 = 1_000_000;

/// The leak and the calm line, from the per-address request rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceRule {
    /// Millionths of a request leaked per millisecond.
    leak_per_ms: u64,
    /// Calm below this many millionths.
    calm_below: u64,
    /// The count's cap: nine seconds' leak over the line, so a client that
    /// stops is calm within 9 s, whatever it sent.
    cap: u64,
}

/// Requests/s assumed when `--request-rate` is off (the rule needs a scale).
pub const DEFAULT_RATE: u32 = 8;

impl PaceRule {
    /// From `--request-rate` (requests/s; None: [`DEFAULT_RATE`]).
    pub fn new(request_rate: Option<u32>) -> PaceRule {
        let rate = u64::from(request_rate.unwrap_or(DEFAULT_RATE).max(1));
        let leak_per_ms = rate * ONE / 8 / 1000;
        let calm_below = 2 * rate * ONE;
        PaceRule { leak_per_ms, calm_below, cap: calm_below + 9000 * leak_per_ms }
    }

    /// A new connection's pace: calm at once if its address was served
    /// before, else after a second without requests.
    pub fn start(&self, now_ms: u64, known: bool) -> Pace {
        let level = if known { 0 } else { self.calm_below + 1000 * self.leak_per_ms };
        Pace { level, at_ms: now_ms }
    }
}

/// One connection's leaky request count (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    level: u64,
    at_ms: u64,
}

impl Pace {
    /// The count at `now_ms` (a time before the last hit reads as that hit's).
    fn level_at(&self, rule: &PaceRule, now_ms: u64) -> u64 {
        self.level.saturating_sub(now_ms.saturating_sub(self.at_ms) * rule.leak_per_ms)
    }

    /// A request: counted.
    pub fn hit(&mut self, rule: &PaceRule, now_ms: u64) {
        self.level = (self.level_at(rule, now_ms) + ONE).min(rule.cap);
        self.at_ms = self.at_ms.max(now_ms);
    }

    /// Under the calm line now (its events are served as they come).
    pub fn calm(&self, rule: &PaceRule, now_ms: u64) -> bool {
        self.level_at(rule, now_ms) < rule.calm_below
    }

    /// A second of the limit or more over the calm line (three seconds'
    /// worth of it in all): `--calm-lane` sends such a connection back to
    /// its accepting thread. The band between the two lines is why a new
    /// client's first requests, which lift it just over the calm line for
    /// a few seconds, do not send it to and fro.
    pub fn well_over(&self, rule: &PaceRule, now_ms: u64) -> bool {
        self.level_at(rule, now_ms) >= rule.calm_below + rule.calm_below / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain model: the count in exact rationals (f64 is exact enough
    /// at these sizes), leaked continuously, capped as `hit` caps.
    fn model(rule: &PaceRule, known: bool, hits: &[u64], now_ms: u64) -> f64 {
        let leak = rule.leak_per_ms as f64;
        let cap = rule.cap as f64;
        let mut level = if known { 0.0 } else { (rule.calm_below + 1000 * rule.leak_per_ms) as f64 };
        let mut at = 0u64;
        for &t in hits {
            level = (level - (t - at) as f64 * leak).max(0.0);
            level = (level + ONE as f64).min(cap);
            at = t;
        }
        (level - (now_ms - at) as f64 * leak).max(0.0)
    }

    proptest! {
        /// The pace's calm answer is the model's (which has no integers to round).
        #[test]
        fn calm_follows_the_plain_model(
            rate in prop::option::of(1u32..200),
            known: bool,
            gaps in prop::collection::vec(0u64..3000, 0..40),
            after in 0u64..20_000,
        ) {
            let rule = PaceRule::new(rate);
            let mut pace = rule.start(0, known);
            let mut hits = Vec::new();
            let mut t = 0;
            for g in gaps {
                t += g;
                pace.hit(&rule, t);
                hits.push(t);
            }
            let now = t + after;
            let exact = model(&rule, known, &hits, now);
            let line = rule.calm_below as f64;
            prop_assert_eq!(pace.calm(&rule, now), exact < line, "level {} line {}", exact, line);
            prop_assert_eq!(pace.well_over(&rule, now), exact >= 1.5 * line, "level {} line {}", exact, line);
        }
    }

    #[test]
    fn a_new_address_is_calm_after_a_quiet_second_a_known_one_at_once() {
        let rule = PaceRule::new(Some(2));
        assert!(rule.start(0, true).calm(&rule, 0));
        let new = rule.start(0, false);
        assert!(!new.calm(&rule, 999));
        assert!(new.calm(&rule, 1001));
    }

    #[test]
    fn a_client_at_the_limit_is_not_calm_one_at_a_tenth_of_it_is() {
        let rule = PaceRule::new(Some(2));
        // Two requests a second, the limit: out of calm within a few seconds, and stays out.
        let mut fast = rule.start(0, true);
        let mut slow = rule.start(0, true);
        for k in 1..=40u64 {
            fast.hit(&rule, k * 500);
            if k % 10 == 0 {
                slow.hit(&rule, k * 500);
            }
        }
        assert!(!fast.calm(&rule, 20_000));
        assert!(slow.calm(&rule, 20_000));
        // Capped: calm again 9 s after it stops, not a second later.
        assert!(!fast.calm(&rule, 20_000 + 9_000));
        assert!(fast.calm(&rule, 20_000 + 9_001));
    }
}
