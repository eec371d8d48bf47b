//! The reassembly stage between reading and judging.
//!
//! It rewrites each batch into the order packets are written in: packets
//! that are not fragments as they come; fragments held until their datagram
//! completes and then all of them together, where it completed; fragments of
//! datagrams given up (overlap, malformed, limits, timeout, end of input)
//! with their verdict already decided, so they are not judged. A completed
//! datagram's fragments carry the datagram's flow (its 4-tuple, from the
//! reassembled transport header) so workers get them by flow, not by IP
//! pair. Reassembly runs here, in the steering stage, rather than on the
//! IP-pair worker the fragments would otherwise meet on. Fragments cut
//! short by the capture's snap length cannot be reassembled and are judged
//! one by one, like any packet, by their addresses.

use crate::cmd_filter::{OwnedRecord, RecordBatch};
use sluice_engine::defrag::{DatagramKey, DefragStats, DropCause, Fragment, Limits, Outcome, Reassembler, Released};
use sluice_engine::Verdict;
use sluice_steer::RssInput;
use sluice_wire::{decode, ip_proto, FragmentInfo, IpSummary};

/// A fragment held until its datagram completes.
pub struct Held {
    meta: OwnedRecord,
    data: Vec<u8>,
}

pub struct Reassembly {
    r: Reassembler<Held>,
    /// Verdict for datagrams that never complete.
    incomplete: Verdict,
}

impl Reassembly {
    pub fn new(limits: Limits, incomplete: Verdict) -> Self {
        Reassembly { r: Reassembler::new(limits), incomplete }
    }

    pub fn stats(&self) -> DefragStats {
        self.r.stats()
    }

    fn verdict_for(&self, cause: DropCause) -> Verdict {
        match cause {
            DropCause::Evicted | DropCause::TimedOut | DropCause::Incomplete => self.incomplete,
            DropCause::Overlap | DropCause::Malformed | DropCause::TooManyFragments => Verdict::Drop,
        }
    }

    fn emit_released(&self, out: &mut RecordBatch, released: &mut Released<Held>) {
        for (held, cause) in released.drain(..) {
            let v = self.verdict_for(cause);
            for h in held {
                out.push_owned(h.meta, &h.data, Some(v), None);
            }
        }
    }

    /// Put one batch through reassembly (see the module comment).
    pub fn process(&mut self, input: RecordBatch) -> RecordBatch {
        // Decode once: which packets are fragments, and where their data is.
        let found: Vec<Option<(IpSummary, FragmentInfo, usize)>> = (0..input.len())
            .map(|i| {
                let frame = input.batch.frame(i);
                let ip = decode(frame.link, frame.data).ok()?.ip?;
                let f = ip.fragment?;
                let start = ip.l4_offset? as usize;
                (!ip.cut_short).then_some((ip, f, start))
            })
            .collect();
        let mut released = Vec::new();
        // Most traffic has no fragments: then the batch goes on untouched,
        // unless held datagrams have timed out by its last timestamp.
        if found.iter().all(Option::is_none) {
            if let Some(last) = input.metas.last() {
                self.r.expire(u64::try_from(last.timestamp.as_nanos()).unwrap_or(u64::MAX), &mut released);
            }
            if released.is_empty() {
                return input;
            }
        }
        let mut out = RecordBatch::default();
        self.emit_released(&mut out, &mut released);
        let RecordBatch { batch, metas, forced, flow } = input;
        for (i, (((meta, forced), flow), found)) in metas.into_iter().zip(forced).zip(flow).zip(found).enumerate() {
            let frame = batch.frame(i);
            let Some((ip, f, start)) = found else {
                out.push_owned(meta, frame.data, forced, flow);
                continue;
            };
            let now = u64::try_from(meta.timestamp.as_nanos()).unwrap_or(u64::MAX);
            let key = DatagramKey {
                src: ip.src,
                dst: ip.dst,
                ident: f.ident,
                protocol: if ip.is_ipv6() { 0 } else { ip.protocol },
            };
            let data = &frame.data[start..ip.l3_end as usize];
            let piece = Fragment { offset: u32::from(f.offset), more: f.more, data };
            let held = Held { meta, data: frame.data.to_vec() };
            let outcome = self.r.add(key, piece, held, now, &mut released);
            self.emit_released(&mut out, &mut released);
            match outcome {
                Outcome::Held => {}
                Outcome::Atomic(h) => out.push_owned(h.meta, &h.data, None, None),
                Outcome::Complete { fragments, payload } => {
                    // Re-steer the whole datagram by its flow, as if it had
                    // arrived in one piece (the seed's netisr re-injection).
                    let flow = match ip.protocol {
                        ip_proto::TCP | ip_proto::UDP if payload.len() >= 4 => {
                            let port = |at: usize| u16::from_be_bytes([payload[at], payload[at + 1]]);
                            RssInput::four_tuple(ip.src, ip.dst, port(0), port(2))
                        }
                        _ => RssInput::pair(ip.src, ip.dst),
                    };
                    for h in fragments {
                        out.push_owned(h.meta, &h.data, None, Some(flow));
                    }
                }
                Outcome::Dropped { fragments, cause } => {
                    let v = self.verdict_for(cause);
                    for h in fragments {
                        out.push_owned(h.meta, &h.data, Some(v), None);
                    }
                }
            }
        }
        out
    }

    /// At the end of the input: every datagram still incomplete.
    pub fn finish(&mut self) -> RecordBatch {
        let mut out = RecordBatch::default();
        let mut rest = self.r.drain();
        self.emit_released(&mut out, &mut rest);
        out
    }
}
