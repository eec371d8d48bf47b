//! Packet batches: the unit every stage hands on, recycled so that steady
//! state allocates nothing.
//!
//! A batch holds, per packet, where its bytes are, what the source knew
//! about it ([`Meta`]), its decoded summary (decoded once, right after the
//! source filled the batch; every later stage reads it), what to do with it
//! ([`Disposition`]) and, once judged, its [`Verdict`].
//!
//! The decoded summaries are an array of their own beside the packet
//! records, not a field of each record: a source (often another thread)
//! writes the records, the decoder writes the summaries. Kept inside the
//! record, the summary made every record 296 bytes, and a source filling a
//! recycled batch wrote all of them (a placeholder) on lines the decoding
//! thread had last written, so each packet moved five cache lines between
//! the cores instead of two.
//!
//! Bytes live in one of two places: the batch's own arena (packets a source
//! copied in, fragments reassembly held) or a shared read-only backing (a
//! mapped capture file) that packets borrow without a copy. A batch refers to
//! at most one backing.

use sluice_engine::Verdict;
use sluice_wire::capture::{Interface, Timestamp};
use sluice_wire::{decode_into, DecodeError, PacketSummary};
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
    /// Judge it by its own addresses, but steer it by its datagram's flow:
    /// a fragment of a reassembled datagram goes where the whole datagram
    /// goes, by its IP pair and these ports (TCP and UDP), or by the pair
    /// alone. Only the ports are kept (the pair is the packet's own): this
    /// value is in every packet record, which crosses between threads.
    JudgeAsFlow(Option<(u16, u16)>),
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
    pub disposition: Disposition,
    /// Set by the judge (or from a `Decided` disposition) before output.
    pub verdict: Verdict,
}

/// Packets with their metadata, decoded summaries and verdicts.
pub struct PacketBatch {
    backing: Option<Backing>,
    /// The backing's length, kept so `push_backed` checks a packet's range
    /// without a dynamic call per packet.
    backing_len: usize,
    arena: Vec<u8>,
    packets: Vec<Packet>,
    /// The decoder's results: `decoded[i]` is packet `i`'s for `i <
    /// decoded_len`; later packets are not decoded yet. Slots past that
    /// keep stale values from an earlier use of the batch, so that decoding
    /// rewrites them in place rather than pushing 212-byte values.
    decoded: Vec<Result<PacketSummary, DecodeError>>,
    decoded_len: usize,
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
        PacketBatch {
            backing: None,
            backing_len: 0,
            arena: Vec::new(),
            packets: Vec::with_capacity(capacity),
            decoded: Vec::new(),
            decoded_len: 0,
            capacity,
            seq: 0,
        }
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
        self.backing_len = 0;
        self.arena.clear();
        self.packets.clear();
        self.decoded_len = 0;
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
        self.backing_len = (**backing).as_ref().len();
        self.backing = Some(Arc::clone(backing));
    }

    /// Append a packet whose bytes are copied into the batch.
    pub fn push_copy(&mut self, meta: Meta, bytes: &[u8]) {
        let p = self.copied(meta, bytes, Disposition::Judge);
        self.packets.push(p);
    }

    /// Append a packet whose bytes are `backing[start..start + len]`, with
    /// `record_header` bytes of its stored record just before them.
    pub fn push_backed(&mut self, meta: Meta, start: usize, len: usize, record_header: u8) {
        assert!(self.backing.is_some(), "set_backing before push_backed");
        assert!(
            start >= usize::from(record_header) && start.checked_add(len).is_some_and(|end| end <= self.backing_len),
            "backed packet out of range"
        );
        self.packets.push(Packet {
            meta,
            start,
            len: len as u32,
            place: Place::Backing,
            record_header,
            disposition: Disposition::Judge,
            verdict: Verdict::Pass,
        });
    }

    /// Rewrite the batch in place, front to back (see [`Edit`]).
    pub fn edit(&mut self) -> Edit<'_> {
        self.align_decoded();
        Edit { batch: self, read: 0, write: 0 }
    }

    /// A packet whose bytes are copied into the arena, not yet placed.
    fn copied(&mut self, meta: Meta, bytes: &[u8], d: Disposition) -> Packet {
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        Packet {
            meta,
            start,
            len: bytes.len() as u32,
            place: Place::Arena,
            record_header: 0,
            disposition: d,
            verdict: Verdict::Pass,
        }
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

    /// Packet `i`'s decoded summary, once [`PacketBatch::decode_all`] ran
    /// (an undecoded packet reads as truncated at the link layer).
    pub fn decoded(&self, i: usize) -> &Result<PacketSummary, DecodeError> {
        if i < self.decoded_len {
            &self.decoded[i]
        } else {
            &NOT_DECODED
        }
    }

    /// Decode every packet once; later stages read [`PacketBatch::decoded`].
    pub fn decode_all(&mut self) {
        let backing = self.backing.as_ref().map(|b| (**b).as_ref());
        for (i, p) in self.packets.iter().enumerate() {
            let range = p.start..p.start + p.len as usize;
            let bytes = match p.place {
                Place::Arena => &self.arena[range],
                Place::Backing => &backing.expect("backed packet has a backing")[range],
            };
            let link = p.meta.interface.link_type;
            match self.decoded.get_mut(i) {
                Some(slot) => decode_into(link, bytes, slot),
                None => self.decoded.push(sluice_wire::decode(link, bytes)),
            }
        }
        self.decoded_len = self.packets.len();
    }

    /// Give every packet a decoded slot (the undecoded ones the placeholder)
    /// and no more, so an edit moves the two arrays alike.
    fn align_decoded(&mut self) {
        let n = self.packets.len();
        self.decoded.truncate(self.decoded_len.min(n));
        self.decoded.resize(n, NOT_DECODED);
        self.decoded_len = n;
    }
}

/// A batch being rewritten in place, front to back: each packet not yet
/// read is kept or taken out, and new packets (copied in) are inserted
/// where the cursor is. Taken packets leave room that later insertions
/// fill, so a stage that takes fragments out and puts their datagram back
/// a few packets later (reassembly: a datagram's fragments usually arrive
/// together) moves no packet it keeps. Only an insertion with no room left
/// shifts the unread rest, once per insertion of `reserve`d packets. When
/// the edit is dropped, the packets not read are kept and the room left
/// closes.
pub struct Edit<'b> {
    batch: &'b mut PacketBatch,
    /// The next packet to read.
    read: usize,
    /// Where the next kept or inserted packet goes (`write <= read`).
    write: usize,
}

impl Edit<'_> {
    /// The next packet to read, if any.
    pub fn peek(&self) -> Option<&Packet> {
        self.batch.packets.get(self.read)
    }

    /// The next packet's decoded summary.
    pub fn peek_decoded(&self) -> &Result<PacketSummary, DecodeError> {
        self.batch.decoded(self.read)
    }

    /// The next packet's bytes.
    pub fn peek_bytes(&self) -> &[u8] {
        self.batch.bytes(self.read)
    }

    /// Keep the next packet where the edit has got to.
    pub fn keep(&mut self) {
        if self.write != self.read {
            let b = &mut *self.batch;
            b.packets[self.write] = b.packets[self.read];
            b.decoded[self.write] = b.decoded[self.read];
        }
        self.write += 1;
        self.read += 1;
    }

    /// Take the next packet out.
    pub fn take(&mut self) {
        assert!(self.read < self.batch.packets.len(), "a packet to take");
        self.read += 1;
    }

    /// Make room for `n` insertions at once, shifting the unread packets
    /// once rather than once per insertion.
    pub fn reserve(&mut self, n: usize) {
        let extra = n.saturating_sub(self.read - self.write);
        if extra > 0 && self.read < self.batch.packets.len() {
            let b = &mut *self.batch;
            let filler = b.packets[self.read];
            b.packets.splice(self.read..self.read, std::iter::repeat_n(filler, extra));
            b.decoded.splice(self.read..self.read, std::iter::repeat_n(NOT_DECODED, extra));
            b.decoded_len = b.packets.len();
            self.read += extra;
        }
    }

    /// Insert a packet held elsewhere (by reassembly), already decoded, its
    /// bytes copied into the batch.
    pub fn insert(&mut self, meta: Meta, bytes: &[u8], decoded: Result<PacketSummary, DecodeError>, d: Disposition) {
        let b = &mut *self.batch;
        let p = b.copied(meta, bytes, d);
        if self.write < self.read {
            b.packets[self.write] = p;
            b.decoded[self.write] = decoded;
        } else {
            b.packets.insert(self.write, p);
            b.decoded.insert(self.write, decoded);
            b.decoded_len = b.packets.len();
            self.read += 1;
        }
        self.write += 1;
    }
}

impl Drop for Edit<'_> {
    fn drop(&mut self) {
        let b = &mut *self.batch;
        if self.write < self.read {
            let gone = self.read - self.write;
            b.packets.copy_within(self.read.., self.write);
            b.packets.truncate(b.packets.len() - gone);
            b.decoded.copy_within(self.read.., self.write);
            b.decoded.truncate(b.decoded.len() - gone);
            b.decoded_len = b.packets.len();
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
    use proptest::prelude::*;
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
        let mut r = Recycler::new(4);
        r.put(b);
        let again = r.get();
        assert!(again.is_empty() && again.backing().is_none());
    }

    /// The batch's packets as (index, bytes, disposition, decoded).
    type Listed = (u64, Vec<u8>, Disposition, Result<PacketSummary, DecodeError>);
    fn listing(b: &PacketBatch) -> Vec<Listed> {
        let p = b.packets();
        (0..b.len()).map(|i| (p[i].meta.index, b.bytes(i).to_vec(), p[i].disposition, *b.decoded(i))).collect()
    }

    /// What an edit does, on a plain list: the reference the edits are
    /// compared with.
    #[derive(Clone, Debug)]
    enum Step {
        Keep,
        Take,
        /// Insert this many packets (indexes from 1000 up), reserving first or not.
        Insert(usize, bool),
    }

    proptest! {
        #[test]
        fn edits_in_place_equal_a_rebuilt_list(
            n in 0usize..40,
            undecoded in 0usize..4,
            reuse in any::<bool>(),
            steps in proptest::collection::vec(
                prop_oneof![
                    3 => Just(Step::Keep),
                    2 => Just(Step::Take),
                    2 => (1usize..6, any::<bool>()).prop_map(|(k, r)| Step::Insert(k, r)),
                ],
                0..60,
            ),
        ) {
            let file: Vec<u8> = (0..=255u8).collect();
            let backing: Backing = Arc::new(file);
            let mut b = PacketBatch::with_capacity(n);
            if reuse {
                // A recycled batch: stale decoded slots from its last use.
                b.set_backing(&backing);
                for i in 0..50 {
                    b.push_backed(meta(i), 0, 1, 0);
                }
                b.decode_all();
                b.clear();
            }
            b.set_backing(&backing);
            for i in 0..n {
                // Every third packet copied in, the others borrowed; each of
                // an unknown link type of its own, so each decodes to an
                // error of its own that must stay with it.
                let mut m = meta(i as u64);
                m.interface.link_type = LinkType(1000 + i as u32);
                if i % 3 == 0 {
                    b.push_copy(m, &[i as u8; 3]);
                } else {
                    b.push_backed(m, i, 5, 0);
                }
                // Some batches decoded before the last packets came in.
                if i + 1 == n.saturating_sub(undecoded) {
                    b.decode_all();
                }
            }
            let mut expected = listing(&b);
            let mut at = 0;
            let mut next = 1000u64;
            {
                let mut e = b.edit();
                for step in steps {
                    match step {
                        Step::Keep | Step::Take if e.peek().is_none() => {}
                        Step::Keep => {
                            e.keep();
                            at += 1;
                        }
                        Step::Take => {
                            e.take();
                            let _ = expected.remove(at);
                        }
                        Step::Insert(k, reserve) => {
                            if reserve {
                                e.reserve(k);
                            }
                            for _ in 0..k {
                                let bytes = vec![next as u8, 7];
                                let d = Disposition::Decided(Verdict::Drop);
                                let decoded = Ok(PacketSummary { ethertype: next as u16, ..PacketSummary::EMPTY });
                                e.insert(meta(next), &bytes, decoded, d);
                                expected.insert(at, (next, bytes, d, decoded));
                                at += 1;
                                next += 1;
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(listing(&b), expected);
        }
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
