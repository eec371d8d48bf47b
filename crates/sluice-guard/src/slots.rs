//! Frang's rate accounting: a window of 8 slots (`FRANG_FREQ`), each an
//! eighth of the period (125 ms for the per-second limits). A hit lands in
//! the slot of its time; the *burst* is the hits in the current slot, the
//! *rate* the hits in the current slot and the 7 before it. Tempesta keeps a
//! timestamp per slot; here one `last` slot number per window is enough:
//! advancing it zeroes the slots skipped over, which gives the same counts
//! in fewer bytes (the per-client state stays within 84 bytes).

/// Slots per window, as frang's `FRANG_FREQ`.
pub const SLOTS: usize = 8;

/// `K` counters sharing one clock (requests and connections advance together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring<const K: usize> {
    /// Slot number (time / slot width) of the latest hit or advance.
    last: u32,
    counts: [[u16; SLOTS]; K],
}

/// What one hit saw: hits in its slot and in the whole window, itself included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub burst: u32,
    pub rate: u32,
}

impl<const K: usize> Default for Ring<K> {
    fn default() -> Self {
        Ring { last: 0, counts: [[0; SLOTS]; K] }
    }
}

impl<const K: usize> Ring<K> {
    /// Move the clock to slot `now`, zeroing the slots that fell out of the
    /// window. A `now` behind the clock (two threads read the time in one
    /// order and lock in the other) counts as the current slot.
    fn advance(&mut self, now: u32) {
        if now <= self.last {
            return;
        }
        if now - self.last >= SLOTS as u32 {
            self.counts = [[0; SLOTS]; K];
        } else {
            for s in self.last + 1..=now {
                for c in &mut self.counts {
                    c[s as usize % SLOTS] = 0;
                }
            }
        }
        self.last = now;
    }

    /// Hits of counter `k` in the window ending at slot `now`, without
    /// counting one (for `sluice ctl clients`).
    pub fn rate(&self, k: usize, now: u32) -> u32 {
        (0..SLOTS as u32)
            .filter_map(|d| self.last.checked_sub(d))
            .filter(|&slot| slot + SLOTS as u32 > now)
            .map(|slot| u32::from(self.counts[k][slot as usize % SLOTS]))
            .sum()
    }

    /// Count one hit of counter `k` in slot `now`. Counts saturate at
    /// `u16::MAX` per slot, so limits are capped below that (see `Limits`).
    pub fn hit(&mut self, k: usize, now: u32) -> Hit {
        self.advance(now);
        let c = &mut self.counts[k];
        let cur = &mut c[self.last as usize % SLOTS];
        *cur = cur.saturating_add(1);
        Hit { burst: u32::from(*cur), rate: c.iter().map(|&n| u32::from(n)).sum() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain reference: every timestamp kept; a hit at slot `s` sees the
    /// hits before it (and itself) in slot `s`, and in slots `s-7..=s`.
    fn reference(times: &[u64], width: u64) -> Vec<Hit> {
        (0..times.len())
            .map(|i| {
                let s = times[i] / width;
                let seen = &times[..=i];
                Hit {
                    burst: seen.iter().filter(|&&t| t / width == s).count() as u32,
                    rate: seen.iter().filter(|&&t| s - t / width < SLOTS as u64).count() as u32,
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn matches_a_reference_that_keeps_every_timestamp(
            gaps in proptest::collection::vec(prop_oneof![0u64..20, 0u64..400, 0u64..3000], 1..300),
            width in prop_oneof![Just(125u64), 1u64..500],
        ) {
            // Sorted arrival times in ms from the gaps.
            let times: Vec<u64> = gaps.iter().scan(0, |t, g| { *t += g; Some(*t) }).collect();
            let mut ring = Ring::<2>::default();
            let got: Vec<Hit> = times.iter().map(|&t| ring.hit(1, (t / width) as u32)).collect();
            prop_assert_eq!(got, reference(&times, width));
            // Read later without a hit, the rate is the hits still in the window.
            let last = (times[times.len() - 1] / width) as u32;
            for now in last..last + 10 {
                let want = times.iter().filter(|&&t| (t / width) as u32 + SLOTS as u32 > now).count() as u32;
                prop_assert_eq!(ring.rate(1, now), want);
                prop_assert_eq!(ring.rate(0, now), 0);
            }
        }

        #[test]
        fn counters_sharing_a_clock_stay_independent(
            events in proptest::collection::vec((0u64..300, 0usize..2), 1..200),
        ) {
            let times: Vec<(u64, usize)> =
                events.iter().scan(0, |t, &(g, k)| { *t += g; Some((*t, k)) }).collect();
            for k in 0..2 {
                let mine: Vec<u64> = times.iter().filter(|e| e.1 == k).map(|e| e.0).collect();
                let mut ring = Ring::<2>::default();
                let got: Vec<Hit> = times
                    .iter()
                    .filter_map(|&(t, kk)| {
                        let h = ring.hit(kk, (t / 125) as u32);
                        (kk == k).then_some(h)
                    })
                    .collect();
                prop_assert_eq!(got, reference(&mine, 125));
            }
        }
    }

    #[test]
    fn a_second_of_silence_empties_the_window() {
        let mut r = Ring::<1>::default();
        for _ in 0..5 {
            r.hit(0, 3);
        }
        assert_eq!(r.hit(0, 10), Hit { burst: 1, rate: 6 });
        assert_eq!(r.hit(0, 11), Hit { burst: 1, rate: 2 }, "slot 3 left the window at slot 11");
        assert_eq!(r.hit(0, 30), Hit { burst: 1, rate: 1 });
        // A time behind the clock counts in the current slot.
        assert_eq!(r.hit(0, 29), Hit { burst: 2, rate: 2 });
    }
}
