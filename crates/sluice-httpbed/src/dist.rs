//! Distributions the server draws response sizes, delays and status codes
//! from: `fixed:N`, `uniform:A-B` (inclusive) and `list:N1@W1,N2@W2,...`
//! (values with integer weights). Sampling takes the caller's RNG, so a
//! thread seeded the same way draws the same sequence on every run.

use rand::Rng;
use std::fmt;
use std::str::FromStr;

/// Why a distribution string was refused; the message names the bad part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DistError(String);

fn err(s: impl Into<String>) -> DistError {
    DistError(s.into())
}

/// A distribution of non-negative integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dist {
    Fixed(u64),
    /// Inclusive bounds, `lo <= hi`.
    Uniform(u64, u64),
    List(WeightedList<u64>),
}

impl Dist {
    /// One draw. `Fixed` leaves the RNG untouched, so a fixed size costs nothing.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            Dist::Fixed(n) => *n,
            Dist::Uniform(lo, hi) => rng.random_range(*lo..=*hi),
            Dist::List(l) => *l.sample(rng),
        }
    }

    /// The largest value a draw can return (to size the body buffer once).
    pub fn max(&self) -> u64 {
        match self {
            Dist::Fixed(n) => *n,
            Dist::Uniform(_, hi) => *hi,
            Dist::List(l) => l.items.iter().map(|(v, _)| *v).max().unwrap_or(0),
        }
    }

    /// Always zero: lets the server skip timer work for `--delay fixed:0`.
    pub fn is_zero(&self) -> bool {
        self.max() == 0
    }
}

fn parse_u64(s: &str, what: &str) -> Result<u64, DistError> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!("{what} {s:?} is not a non-negative integer")));
    }
    s.parse().map_err(|_| err(format!("{what} {s:?} is too large")))
}

impl FromStr for Dist {
    type Err = DistError;

    fn from_str(s: &str) -> Result<Self, DistError> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| err(format!("{s:?}: expected fixed:N, uniform:A-B or list:N1@W1,N2@W2,...")))?;
        match kind.trim() {
            "fixed" => Ok(Dist::Fixed(parse_u64(rest, "fixed value")?)),
            "uniform" => {
                let (a, b) = rest
                    .split_once('-')
                    .ok_or_else(|| err(format!("uniform:{rest}: expected uniform:A-B (inclusive bounds)")))?;
                let (a, b) = (parse_u64(a, "uniform lower bound")?, parse_u64(b, "uniform upper bound")?);
                if a > b {
                    return Err(err(format!("uniform:{rest}: lower bound {a} is above upper bound {b}")));
                }
                Ok(Dist::Uniform(a, b))
            }
            "list" => Ok(Dist::List(rest.parse()?)),
            other => Err(err(format!("unknown distribution {other:?}: expected fixed, uniform or list"))),
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Fixed(n) => write!(f, "fixed:{n}"),
            Dist::Uniform(a, b) => write!(f, "uniform:{a}-{b}"),
            Dist::List(l) => write!(f, "list:{l}"),
        }
    }
}

/// Values with integer weights: `V1@W1,V2@W2,...` (`V` alone means weight 1).
/// Also the `--status-mix` syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedList<T> {
    items: Vec<(T, u64)>,
    /// Running sums of the weights, for a binary search per draw.
    cumulative: Vec<u64>,
}

impl<T> WeightedList<T> {
    /// Fails on an empty list or a zero total weight.
    pub fn new(items: Vec<(T, u64)>) -> Result<Self, DistError> {
        if items.is_empty() {
            return Err(err("the list is empty"));
        }
        let mut total = 0u64;
        let mut cumulative = Vec::with_capacity(items.len());
        for (_, w) in &items {
            total = total.checked_add(*w).ok_or_else(|| err("the weights add up to more than 2^64"))?;
            cumulative.push(total);
        }
        if total == 0 {
            return Err(err("all weights are zero"));
        }
        Ok(WeightedList { items, cumulative })
    }

    pub fn items(&self) -> &[(T, u64)] {
        &self.items
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> &T {
        if self.items.len() == 1 {
            return &self.items[0].0;
        }
        let total = *self.cumulative.last().expect("non-empty by construction");
        let x = rng.random_range(0..total);
        // The first running sum above x: zero-weight entries are never picked.
        let i = self.cumulative.partition_point(|&c| c <= x);
        &self.items[i].0
    }
}

impl<T: FromStr> FromStr for WeightedList<T> {
    type Err = DistError;

    fn from_str(s: &str) -> Result<Self, DistError> {
        let mut items = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (v, w) = match part.split_once('@') {
                Some((v, w)) => (v.trim(), parse_u64(w, &format!("weight in {part:?}"))?),
                None => (part, 1),
            };
            let value = v.parse::<T>().map_err(|_| err(format!("value {v:?} in {part:?} is not valid")))?;
            items.push((value, w));
        }
        WeightedList::new(items).map_err(|e| err(format!("{s:?}: {e}")))
    }
}

impl<T: fmt::Display> fmt::Display for WeightedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (v, w)) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{v}@{w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!("fixed:100".parse::<Dist>().unwrap(), Dist::Fixed(100));
        assert_eq!("uniform:10-20".parse::<Dist>().unwrap(), Dist::Uniform(10, 20));
        let l: Dist = "list:10@1,1000@3".parse().unwrap();
        assert_eq!(l.to_string(), "list:10@1,1000@3");
        assert_eq!(l.max(), 1000);
    }

    #[test]
    fn refuses_bad_input_with_a_reason() {
        for (s, needle) in [
            ("100", "expected fixed"),
            ("fixed:-1", "not a non-negative integer"),
            ("uniform:20-10", "above upper bound"),
            ("uniform:5", "expected uniform:A-B"),
            ("list:", "not valid"),
            ("list:1@0,2@0", "all weights are zero"),
            ("list:1@x", "weight"),
            ("gauss:1", "unknown distribution"),
        ] {
            let e = s.parse::<Dist>().unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn sampling_is_deterministic_and_stays_in_range() {
        let d: Dist = "uniform:5-9".parse().unwrap();
        let draw = |seed| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            (0..100).map(|_| d.sample(&mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert!(draw(1).iter().all(|v| (5..=9).contains(v)));
    }

    #[test]
    fn weights_are_respected() {
        let l: WeightedList<u16> = "200@95,404@3,503@2,500@0".parse().unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(7);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *counts.entry(*l.sample(&mut r)).or_insert(0u32) += 1;
        }
        assert!(!counts.contains_key(&500));
        assert!((94_000..96_000).contains(&counts[&200]), "{counts:?}");
        assert!((2_500..3_500).contains(&counts[&404]), "{counts:?}");
        assert!((1_500..2_500).contains(&counts[&503]), "{counts:?}");
    }
}
