//! Any sequence of fragments (offsets, flags, lengths, times, a handful of
//! datagram keys): reassembly never panics, never holds more than its
//! limits, completes only whole payloads, and hands every fragment back
//! exactly once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_defrag::{DatagramKey, DefragLimits, Outcome, Reassembler};
use std::net::IpAddr;

struct Token(usize, Vec<u8>);

impl AsRef<[u8]> for Token {
    fn as_ref(&self) -> &[u8] {
        &self.1
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = DefragLimits { max_datagrams: 4, max_bytes: 4096, max_fragments: 8, timeout_ns: 1000 };
    let mut r = Reassembler::new(limits);
    let mut released = Vec::new();
    let mut back = vec![0u8; data.len() / 6 + 1];
    let mut now = 0u64;
    for (token, chunk) in data.chunks_exact(6).enumerate() {
        let v6 = chunk[0] & 1 != 0;
        let src: IpAddr = if v6 {
            IpAddr::from([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, chunk[0] >> 6])
        } else {
            IpAddr::from([10, 0, 0, chunk[0] >> 6])
        };
        let dst: IpAddr = if v6 {
            IpAddr::from([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2])
        } else {
            IpAddr::from([10, 0, 0, 2])
        };
        let key = DatagramKey { src, dst, ident: u32::from(chunk[1] & 3), protocol: if v6 { 0 } else { 17 } };
        let offset = u32::from(u16::from_be_bytes([chunk[2], chunk[3]]) & 0x1fff) * 8 % 4096;
        let more = chunk[4] & 1 != 0;
        let len = usize::from(chunk[4] >> 1) * 8 + usize::from(chunk[5] & 7);
        now += u64::from(chunk[5] >> 3) * 10;
        // The handle: its id and its frame (two header bytes, then the data).
        let mut frame = vec![0xee; 2];
        frame.resize(2 + len, chunk[1]);
        let out = r.add(key, (offset, more), 2..2 + len, Token(token, frame), now, &mut released);
        assert!(r.in_progress() <= limits.max_datagrams);
        assert!(r.bytes_held() <= limits.max_bytes);
        let mut mark = |Token(t, _): Token| {
            back[t] += 1;
            assert_eq!(back[t], 1, "fragment {t} handed back twice");
        };
        match out {
            Outcome::Held => {}
            Outcome::Atomic(t) => mark(t),
            Outcome::Complete { fragments, payload } => {
                assert!(payload.len() <= 65_535);
                let whole = payload.to_vec(&fragments);
                assert_eq!(whole.len(), payload.len());
                assert!(whole.iter().all(|&b| (b & 3) == key.ident as u8 & 3), "only this datagram's bytes");
                fragments.into_iter().for_each(&mut mark);
            }
            Outcome::Dropped { fragments, .. } => fragments.into_iter().for_each(&mut mark),
        }
        for (tokens, _) in released.drain(..) {
            tokens.into_iter().for_each(&mut mark);
        }
    }
    for (tokens, _) in r.drain() {
        for Token(t, _) in tokens {
            back[t] += 1;
            assert_eq!(back[t], 1);
        }
    }
    let n = data.len() / 6;
    assert!(back[..n].iter().all(|&b| b == 1), "every fragment comes back once");
});
