//! Receive-side scaling in software, as NICs do it in hardware: a Toeplitz
//! hash of the IP pair (or 4-tuple) and an indirection table from the hash's
//! low bits to a worker. The same flow always lands on the same worker; with
//! the symmetric key, both directions of a flow do.
#![deny(unsafe_code)]

mod toeplitz;

pub use toeplitz::{
    hash_reference, parse_key, KeyError, RssInput, Toeplitz, KEY_LEN, MAX_INPUT, MICROSOFT_KEY, SYMMETRIC_KEY,
};

/// Default indirection-table size (as on most NICs).
pub const DEFAULT_TABLE: usize = 128;

/// Maps hash values to workers through a table indexed by the low bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indirection {
    table: Vec<u16>,
}

impl Indirection {
    /// `entries` (a power of two) filled round-robin over `workers`.
    pub fn round_robin(entries: usize, workers: usize) -> Self {
        assert!(entries.is_power_of_two(), "indirection table size must be a power of two");
        assert!((1..=usize::from(u16::MAX)).contains(&workers), "1 to 65535 workers");
        Indirection { table: (0..entries).map(|i| (i % workers) as u16).collect() }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The table entry a hash selects.
    #[inline]
    pub fn bucket(&self, hash: u32) -> usize {
        hash as usize & (self.table.len() - 1)
    }

    /// The worker a hash selects.
    #[inline]
    pub fn worker(&self, hash: u32) -> usize {
        usize::from(self.table[self.bucket(hash)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_spreads_evenly() {
        let t = Indirection::round_robin(128, 3);
        let mut counts = [0; 3];
        for h in 0..128u32 {
            counts[t.worker(h)] += 1;
        }
        assert_eq!(counts, [43, 43, 42]);
        assert_eq!(t.bucket(0x51cc_c178), 0x78);
    }
}
