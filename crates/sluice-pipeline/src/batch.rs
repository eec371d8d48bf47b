//! Packet batches: the unit every stage hands on, recycled so that steady
//! state allocates nothing.
//!
//! A batch holds, per packet, where its bytes are, what the source knew
//! about it ([`Meta`]), its decoded summary (decoded once, right after the
//! source filled the batch; every later stage reads it), what to do with it
//! ([`Disposition`]) and, once judged, its [`Verdict`].
//!
//! Bytes live in one of two places: the batch's own arena (packets a source
//! copied in, fragments reassembly held) or a shared read-only backing (a
//! mapped capture file) that packets borrow without a copy. A batch refers to
//! at most one backing.

use sluice_engine::Verdict;
use sluice_steer::RssInput;
use sluice_wire::capture::{Interface, Timestamp};
use sluice_wire::{decode, DecodeError, PacketSummary};
use std::sync::Arc;

/// Bytes shared by many batches and never written while they are: a mapped
/// capture file. Packets point into it by offset.
pub type Backing = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Packets a batch holds unless asked otherwise: enough to fill the
/// classifier's prefetch batches several times over, few enough to stay in
/// L1/L2 while each stage walks them.
pub const DEFAULT_BATCH_PACKETS: usize = 256;

/// What the source knew about a packet besides its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The source's sequence number for it (a capture's record index).
    pub index: u64,
    /// Where the source found it (byte offset of a capture record), for errors.
    pub offset: u64,
    /// When it was seen, exactly as the source had it.
    pub timestamp: Timestamp,
    /// Length on the wire; the bytes may be fewer (snap length).
    pub wire_len: u32,
    /// Which interface or port it came in on (a capture's interface id).
    pub port: u32,
    /// That interface's link type, snap length and timestamp resolution.
    pub interface: Interface,
}

impl Meta {
    /// The timestamp in nanoseconds, saturated into a u64.
    pub fn time_ns(&self) -> u64 {
        u64::try_from(self.timestamp.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What the pipeline does with a packet: one value per packet, set by the
/// stages before judging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Judge it by its own headers (steered by them too).
    Judge,
    /// Judge it by its own addresses, but steer it by this flow: a fragment
    /// of a reassembled datagram goes where the whole datagram's 4-tuple goes.
    JudgeAsFlow(RssInput),
    /// Not judged: its verdict is already decided (reassembly gave its
    /// datagram up for overlap, limits or time).
    Decided(Verdict),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Arena,
    Backing,
}

/// One packet in a batch.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    pub meta: Meta,
    start: usize,
    len: u32,
    place: Place,
    /// Bytes of the stored record header just before the data in the
    /// backing (16 for a pcap record), so a sink can copy the whole record
    /// unchanged; 0 when there is none.
    record_header: u8,
    /// The decoder's result, filled by [`PacketBatch::decode_all`].
    pub decoded: Result<PacketSummary, DecodeError>,
    pub disposition: Disposition,
    /// Set by the judge (or from a `Decided` disposition) before output.
    pub verdict: Verdict,
}

/// Packets with their metadata, decoded summaries and verdicts.
pub struct PacketBatch {
    backing: Option<Backing>,
    arena: Vec<u8>,
    packets: Vec<Packet>,
    capacity: usize,
    /// Position in the run, set when the batch is dispatched (for ordered output).
    pub(crate) seq: u64,
}

impl Default for PacketBatch {
    fn default() -> Self {
        PacketBatch::with_capacity(DEFAULT_BATCH_PACKETS)
    }
}

impl std::fmt::Debug for PacketBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBatch")
            .field("packets", &self.packets.len())
            .field("arena_bytes", &self.arena.len())
            .field("backed", &self.backing.is_some())
            .finish()
    }
}

/// Placeholder until [`PacketBatch::decode_all`] runs.
const NOT_DECODED: Result<PacketSummary, DecodeError> = Err(DecodeError::Truncated(sluice_wire::Layer::Link));

impl PacketBatch {
    /// A batch a source fills up to `capacity` packets.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        PacketBatch { backing: None, arena: Vec::new(), packets: Vec::with_capacity(capacity), capacity, seq: 0 }
    }

    /// How many packets a source should put in.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.packets.len() >= self.capacity
    }

    /// Empty it for reuse; its buffers keep their capacity.
    pub fn clear(&mut self) {
        self.backing = None;
        self.arena.clear();
        self.packets.clear();
    }

    pub fn backing(&self) -> Option<&Backing> {
        self.backing.as_ref()
    }

    /// The bytes packets pushed with [`PacketBatch::push_backed`] point into.
    /// A batch has one backing: setting another while backed packets are in
    /// it is a bug.
    pub fn set_backing(&mut self, backing: &Backing) {
        if let Some(old) = &self.backing {
            assert!(
                Arc::ptr_eq(old, backing) || !self.packets.iter().any(|p| p.place == Place::Backing),
                "a batch refers to one backing"
            );
        }
        self.backing = Some(Arc::clone(backing));
    }

    /// Append a packet whose bytes are copied into the batch.
    pub fn push_copy(&mut self, meta: Meta, bytes: &[u8]) {
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        self.packets.push(Packet {
            meta,
            start,
            len: bytes.len() as u32,
            place: Place::Arena,
            record_header: 0,
            decoded: NOT_DECODED,
            disposition: Disposition::Judge,
            verdict: Verdict::Pass,
        });
    }

    /// Append a packet whose bytes are `backing[start..start + len]`, with
    /// `record_header` bytes of its stored record just before them.
    pub fn push_backed(&mut self, meta: Meta, start: usize, len: usize, record_header: u8) {
        let backing = self.backing.as_ref().expect("set_backing before push_backed");
        let all = (**backing).as_ref();
        assert!(
            start >= usize::from(record_header) && start.checked_add(len).is_some_and(|end| end <= all.len()),
            "backed packet out of range"
        );
        self.packets.push(Packet {
            meta,
            start,
            len: len as u32,
            place: Place::Backing,
            record_header,
            decoded: NOT_DECODED,
            disposition: Disposition::Judge,
            verdict: Verdict::Pass,
        });
    }

    /// Append packet `i` of `other` with everything known about it. Its
    /// bytes are borrowed again when both batches share the backing, and
    /// copied otherwise.
    pub fn push_from(&mut self, other: &PacketBatch, i: usize) {
        let p = other.packets[i];
        if p.place == Place::Backing {
            let shared = other.backing.as_ref().expect("backed packet has a backing");
            if self.backing.as_ref().is_none_or(|b| Arc::ptr_eq(b, shared)) {
                if self.backing.is_none() {
                    self.backing = Some(Arc::clone(shared));
                }
                self.packets.push(p);
                return;
            }
        }
        self.push_copy(p.meta, other.bytes(i));
        let last = self.packets.last_mut().expect("just pushed");
        (last.decoded, last.disposition, last.verdict) = (p.decoded, p.disposition, p.verdict);
    }

    /// Append a packet held elsewhere (by reassembly), already decoded.
    pub fn push_decoded(
        &mut self,
        meta: Meta,
        bytes: &[u8],
        decoded: Result<PacketSummary, DecodeError>,
        d: Disposition,
    ) {
        self.push_copy(meta, bytes);
        let last = self.packets.last_mut().expect("just pushed");
        last.decoded = decoded;
        last.disposition = d;
    }

    pub fn packets(&self) -> &[Packet] {
        &self.packets
    }

    pub fn packets_mut(&mut self) -> &mut [Packet] {
        &mut self.packets
    }

    /// Packet `i`'s captured bytes.
    pub fn bytes(&self, i: usize) -> &[u8] {
        let p = &self.packets[i];
        let range = p.start..p.start + p.len as usize;
        match p.place {
            Place::Arena => &self.arena[range],
            Place::Backing => &(**self.backing.as_ref().expect("backed packet has a backing")).as_ref()[range],
        }
    }

    /// Where packet `i`'s bytes are in the backing, as (start, len), when it
    /// borrows them (a live port recovers the frame's buffer address from it).
    pub fn backed_range(&self, i: usize) -> Option<(usize, usize)> {
        let p = &self.packets[i];
        (p.place == Place::Backing).then_some((p.start, p.len as usize))
    }

    /// Packet `i`'s whole stored record (header and data) and where it
    /// starts in the backing, when the source lent it in place.
    pub fn stored_record(&self, i: usize) -> Option<(usize, &[u8])> {
        let p = &self.packets[i];
        if p.place != Place::Backing || p.record_header == 0 {
            return None;
        }
        let start = p.start - usize::from(p.record_header);
        let all = (**self.backing.as_ref()?).as_ref();
        Some((start, &all[start..p.start + p.len as usize]))
    }

    /// Decode every packet once; later stages read `Packet::decoded`.
    pub fn decode_all(&mut self) {
        let backing = self.backing.as_ref().map(|b| (**b).as_ref());
        for p in &mut self.packets {
            let range = p.start..p.start + p.len as usize;
            let bytes = match p.place {
                Place::Arena => &self.arena[range],
                Place::Backing => &backing.expect("backed packet has a backing")[range],
            };
            p.decoded = decode(p.meta.interface.link_type, bytes);
        }
    }
}

/// Batches returned after output, handed out again to sources and stages.
#[derive(Debug)]
pub struct Recycler {
    free: Vec<PacketBatch>,
    capacity: usize,
}

impl Recycler {
    pub fn new(packets_per_batch: usize) -> Self {
        Recycler { free: Vec::new(), capacity: packets_per_batch.max(1) }
    }

    /// An empty batch: a recycled one when there is one.
    pub fn get(&mut self) -> PacketBatch {
        self.free.pop().unwrap_or_else(|| PacketBatch::with_capacity(self.capacity))
    }

    /// A free batch beyond the few kept at hand, to hand to another thread.
    pub fn take_spare(&mut self) -> Option<PacketBatch> {
        (self.free.len() > 2).then(|| self.free.pop()).flatten()
    }

    /// Take a batch back for reuse.
    pub fn put(&mut self, mut batch: PacketBatch) {
        batch.clear();
        // Bounded: a burst of reassembled output must not pin memory forever.
        if self.free.len() < 64 {
            self.free.push(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::capture::TsResolution;
    use sluice_wire::LinkType;

    pub(crate) fn meta(index: u64) -> Meta {
        Meta {
            index,
            offset: 0,
            timestamp: Timestamp::Split { secs: 1, frac: index as u32, nanos: true },
            wire_len: 20,
            port: 0,
            interface: Interface { link_type: LinkType::RAW, snaplen: 65535, ts_resolution: TsResolution::NANOS },
        }
    }

    #[test]
    fn backed_and_copied_bytes_and_records() {
        let file: Vec<u8> = (0..100u8).collect();
        let backing: Backing = Arc::new(file);
        let mut b = PacketBatch::with_capacity(4);
        b.set_backing(&backing);
        b.push_backed(meta(0), 16, 10, 16);
        b.push_copy(meta(1), &[9, 9, 9]);
        assert_eq!(b.bytes(0), &(16..26).collect::<Vec<u8>>()[..]);
        assert_eq!(b.bytes(1), &[9, 9, 9]);
        assert_eq!(b.stored_record(0).unwrap().0, 0);
        assert_eq!(b.stored_record(0).unwrap().1.len(), 26);
        assert!(b.stored_record(1).is_none());
        let mut other = PacketBatch::with_capacity(4);
        other.push_from(&b, 0);
        other.push_from(&b, 1);
        assert_eq!(other.bytes(0), b.bytes(0));
        assert_eq!(other.bytes(1), b.bytes(1));
        assert!(Arc::ptr_eq(other.backing().unwrap(), &backing), "shared, not copied");
        let mut r = Recycler::new(4);
        r.put(other);
        let again = r.get();
        assert!(again.is_empty() && again.backing().is_none());
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn backed_range_is_checked() {
        let backing: Backing = Arc::new(vec![0u8; 10]);
        let mut b = PacketBatch::default();
        b.set_backing(&backing);
        b.push_backed(meta(0), 4, 7, 0);
    }
}
