//! Sets that change at runtime. A named set is its base tables (built from
//! a list or loaded from a compiled file, as before) plus a [`Delta`]: the
//! elements added since, and the base elements deleted since. A change
//! costs O(change) on the control side; the judge reads the base tables as
//! before and consults the delta only for a set that has one.
//!
//! Semantics are ipset's: an address matches when some element covering it
//! (a host or a prefix) is present, in the base or added, and not deleted; a
//! delete removes that exact element (a /8 still covers an address whose /32
//! was deleted); an element added with a timeout leaves on the wall clock.
//!
//! [`SetState`] is the control side's record of one set (what was added and
//! deleted, every deadline) and makes the immutable [`Delta`] the judge
//! reads; when the delta grows past a threshold, [`SetState::merge`] folds it
//! into a new base (the caller builds the tables from the list it returns,
//! off the fast path). No I/O here: time comes in as wall-clock nanoseconds.
//!
//! Publishing a change does not copy the delta: the two deltas published
//! last are kept, and the older one, once no reader holds it any more (a
//! worker moves to a new snapshot at its next batch), is brought up to
//! date with the edits made since it was published and published again
//! (`Arc::get_mut`: nothing else can see it while it changes). A commit
//! or an expiry so costs O(change). Only when a reader still holds it (a
//! worker idle since) is the delta copied whole, as every publication did
//! before: a copy of hash tables of `Copy` keys, at memory speed. The
//! judge's lookup is the same hash probe as before.

use foldhash::fast::RandomState;
use sluice_rules::Prefix;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::tags::Tags;

type Hashed<K> = HashSet<K, RandomState>;

pub(crate) fn mask4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

pub(crate) fn mask6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// Distinct elements (hosts and prefixes) by length, longest first: an
/// address is looked up with one hash probe per length present (a delta
/// mostly holds hosts, so usually one).
#[derive(Clone, Debug, Default)]
pub struct Elements {
    v4: Vec<(u8, Hashed<u32>)>,
    v6: Vec<(u8, Hashed<u128>)>,
    len: usize,
}

fn slot<K>(by_len: &mut Vec<(u8, Hashed<K>)>, len: u8) -> &mut Hashed<K> {
    let i = match by_len.binary_search_by(|(l, _)| len.cmp(l)) {
        Ok(i) => i,
        Err(i) => {
            by_len.insert(i, (len, Hashed::default()));
            i
        }
    };
    &mut by_len[i].1
}

impl Elements {
    pub fn new() -> Elements {
        Elements::default()
    }

    pub fn from_prefixes<'a>(prefixes: impl IntoIterator<Item = &'a Prefix>) -> Elements {
        let mut e = Elements::new();
        for p in prefixes {
            e.insert(*p);
        }
        e
    }

    /// Adds `p`; false if it was there.
    pub fn insert(&mut self, p: Prefix) -> bool {
        let new = match p {
            Prefix::V4 { addr, len } => slot(&mut self.v4, len).insert(addr),
            Prefix::V6 { addr, len } => slot(&mut self.v6, len).insert(addr),
        };
        self.len += usize::from(new);
        new
    }

    /// Removes exactly `p`; false if it was not there.
    pub fn remove(&mut self, p: &Prefix) -> bool {
        let gone = match *p {
            Prefix::V4 { addr, len } => remove_from(&mut self.v4, len, &addr),
            Prefix::V6 { addr, len } => remove_from(&mut self.v6, len, &addr),
        };
        self.len -= usize::from(gone);
        gone
    }

    /// Whether exactly `p` is an element.
    pub fn has(&self, p: &Prefix) -> bool {
        match *p {
            Prefix::V4 { addr, len } => self.v4.iter().any(|(l, s)| *l == len && s.contains(&addr)),
            Prefix::V6 { addr, len } => self.v6.iter().any(|(l, s)| *l == len && s.contains(&addr)),
        }
    }

    /// Whether some element covers `ip`.
    #[inline]
    pub fn covers(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|(len, s)| s.contains(&(a & mask4(*len))))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|(len, s)| s.contains(&(a & mask6(*len))))
            }
        }
    }

    /// Every element covering `ip`, longest first.
    pub fn covering(&self, ip: IpAddr) -> Vec<Prefix> {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .filter(|(len, s)| s.contains(&(a & mask4(*len))))
                    .map(|(len, _)| Prefix::V4 { addr: a & mask4(*len), len: *len })
                    .collect()
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .filter(|(len, s)| s.contains(&(a & mask6(*len))))
                    .map(|(len, _)| Prefix::V6 { addr: a & mask6(*len), len: *len })
                    .collect()
            }
        }
    }

    /// Every element, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = Prefix> + '_ {
        let v4 = self.v4.iter().flat_map(|(len, s)| s.iter().map(move |&addr| Prefix::V4 { addr, len: *len }));
        let v6 = self.v6.iter().flat_map(|(len, s)| s.iter().map(move |&addr| Prefix::V6 { addr, len: *len }));
        v4.chain(v6)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        *self = Elements::default();
    }
}

fn remove_from<K: std::hash::Hash + Eq>(by_len: &mut Vec<(u8, Hashed<K>)>, len: u8, k: &K) -> bool {
    let Some(i) = by_len.iter().position(|(l, _)| *l == len) else { return false };
    let gone = by_len[i].1.remove(k);
    if by_len[i].1.is_empty() {
        // An empty length would cost every lookup a probe.
        by_len.remove(i);
    }
    gone
}

/// What the judge reads beside a set's base tables; immutable once
/// published (a change publishes a new one).
#[derive(Debug)]
pub struct Delta {
    added: Elements,
    deleted: Elements,
    /// The base's elements, present when `deleted` is not empty: an address
    /// inside a deleted element may still be covered by another.
    base: Option<Arc<Elements>>,
    /// Its number, unique in the process ([`Delta::id`]).
    id: u64,
    /// The delta its set published just before it, and the edits that lead
    /// from that one to this (None when no list does: the first, or after
    /// a flush or a merge).
    since: Option<(u64, Vec<Edit>)>,
}

/// Numbers every delta published, process-wide (0 is none).
static DELTA_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Delta {
    /// Its number, unique in the process: a reader that keeps its own copy
    /// of the elements (the shield's kernel tables) knows by it which
    /// delta it copied.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// When the set published this delta right after the one numbered
    /// `prev`: how [`Delta::added_elements`] changed since, in order.
    /// O(changes), where comparing the two deltas' elements is O(elements).
    pub fn added_since(&self, prev: u64) -> Option<impl Iterator<Item = AddedEdit> + '_> {
        let (from, edits) = self.since.as_ref()?;
        (*from == prev).then(|| {
            edits.iter().filter_map(|e| match *e {
                Edit::Added(p, true) => Some(AddedEdit::Added(p)),
                Edit::Added(p, false) => Some(AddedEdit::Removed(p)),
                Edit::Retagged(p) => Some(AddedEdit::Retagged(p)),
                Edit::Deleted(..) => None,
            })
        })
    }

    /// The elements added since the base was built.
    pub fn added_elements(&self) -> &Elements {
        &self.added
    }

    /// The base's elements deleted since it was built.
    pub fn deleted_elements(&self) -> &Elements {
        &self.deleted
    }

    /// Whether `ip` is in the set, given whether the base tables hold it.
    #[inline]
    pub fn matches(&self, base_hit: bool, ip: IpAddr) -> bool {
        if !self.added.is_empty() && self.added.covers(ip) {
            return true;
        }
        if !base_hit {
            return false;
        }
        if self.deleted.is_empty() || !self.deleted.covers(ip) {
            return true;
        }
        // Rare: inside a deleted element. Some other base element may still
        // cover the address.
        self.base.as_ref().is_some_and(|b| b.covering(ip).iter().any(|e| !self.deleted.has(e)))
    }

    /// Applies one edit of the state it was made from (see [`SetState::delta`]).
    fn apply(&mut self, e: Edit) {
        match e {
            Edit::Added(p, true) => self.added.insert(p),
            Edit::Added(p, false) => self.added.remove(&p),
            Edit::Deleted(p, true) => self.deleted.insert(p),
            Edit::Deleted(p, false) => self.deleted.remove(&p),
            Edit::Retagged(_) => false,
        };
    }

    pub fn added(&self) -> usize {
        self.added.len()
    }

    pub fn deleted(&self) -> usize {
        self.deleted.len()
    }
}

/// Why a change was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{0} is not in the set")]
    NotInSet(Prefix),
    #[error(
        "{0} is not an element added at runtime, and this set's base came from a compiled file \
         (its elements are not known, only its tables): delete it from the list and compile again"
    )]
    BaseUnknown(Prefix),
    /// ipset's "set is full": the add would take the set past its maxelem.
    #[error("the set is full: it holds {maxelem} elements, its maxelem; {elem} is not added")]
    Full { elem: Prefix, maxelem: usize },
}

/// Where an address's match in a set comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// An element added at runtime.
    Added(Prefix),
    /// A base element.
    Base(Prefix),
    /// The base tables (loaded from a compiled file: which element is not known).
    BaseTables,
}

/// The control side's record of one set: what was added and deleted since
/// the base was built, and every deadline.
#[derive(Debug, Clone)]
pub struct SetState {
    /// The lifetime of an element added without one (`set NAME dynamic timeout S`).
    pub default_timeout: Option<u32>,
    /// The most elements the set holds: an add of a new element beyond it
    /// is refused ([`ChangeError::Full`]); renewing a present one is not.
    /// A set already past it (its maxelem lowered by a reload) keeps its
    /// elements and takes no new one until enough leave.
    pub maxelem: usize,
    /// The base's elements, when known (everything but a compiled file's tables).
    base: Option<Arc<Elements>>,
    /// How many elements the base holds (from its tables when not known).
    base_entries: usize,
    added: Elements,
    deleted: Elements,
    /// The wall-clock deadline (ns) of each element that has one, added or
    /// in the base (after a merge).
    deadline: HashMap<Prefix, u64, RandomState>,
    /// The same, in deadline order.
    queue: BTreeSet<(u64, Prefix)>,
    pub merges: u64,
    /// While a merge runs elsewhere: the changes made since it started,
    /// replayed onto its base when it is done ([`SetState::finish_merge`]).
    since_merge: Option<(u64, Vec<Change>)>,
    /// Numbers merges, so an abandoned one that finishes late is told apart.
    merge_seq: u64,
    /// The delta published last, and the one before it: the older one is
    /// brought up to date and published again once no reader holds it.
    published: Option<Arc<Delta>>,
    spare: Option<Arc<Delta>>,
    /// The edits to `added` and `deleted` since `spare` was made; those
    /// since `published` was made start at `mark`.
    journal: Vec<Edit>,
    mark: usize,
    /// Elements' tags (a feed's origins), when a feed tagged any; the copy
    /// published last, and whether they changed since.
    tags: Option<Tags>,
    tags_published: Option<Arc<Tags>>,
    tags_changed: bool,
}

/// One edit to a state's `added` or `deleted` (true: an insert), as
/// [`SetState::delta`] replays them into an older delta, or an element of
/// `added` given another tag (no change to either).
#[derive(Debug, Clone, Copy)]
enum Edit {
    Added(Prefix, bool),
    Deleted(Prefix, bool),
    Retagged(Prefix),
}

/// A change to a delta's added elements, as [`Delta::added_since`] lists
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddedEdit {
    Added(Prefix),
    Removed(Prefix),
    /// Still an element, of another tag ([`SetState::add_tagged`]): for a
    /// reader that keeps each element's tag beside it (the shield's kernel
    /// tables).
    Retagged(Prefix),
}

/// A change as the log of an unfinished merge keeps it.
#[derive(Debug, Clone, Copy)]
enum Change {
    Add(Prefix),
    Del(Prefix),
}

/// What a merge needs, taken in O(delta) so the O(set) work can run on
/// another thread: the base's elements (shared) and copies of the delta.
#[derive(Debug, Clone)]
pub struct MergeInput {
    base: Option<Arc<Elements>>,
    added: Elements,
    deleted: Elements,
}

impl MergeInput {
    /// Every element of the set at the time the merge started, sorted.
    pub fn elements(&self) -> Vec<Prefix> {
        let base = self.base.iter().flat_map(|b| b.iter()).filter(|p| !self.deleted.has(p));
        let mut all: Vec<Prefix> = base.chain(self.added.iter()).collect();
        all.sort_unstable();
        all
    }
}

impl SetState {
    /// A set whose base holds `base` (None: the base's elements are not
    /// known) of `base_entries` elements.
    pub fn new(base: Option<Elements>, base_entries: usize, default_timeout: Option<u32>) -> SetState {
        let base_entries = base.as_ref().map_or(base_entries, Elements::len);
        SetState {
            default_timeout,
            maxelem: usize::MAX,
            base: base.map(Arc::new),
            base_entries,
            added: Elements::new(),
            deleted: Elements::new(),
            deadline: HashMap::default(),
            queue: BTreeSet::new(),
            merges: 0,
            since_merge: None,
            merge_seq: 0,
            published: None,
            spare: None,
            journal: Vec::new(),
            mark: 0,
            tags: None,
            tags_published: None,
            tags_changed: false,
        }
    }

    /// [`SetState::add`], and `p` tagged `tag` (see [`crate::tags`]).
    pub fn add_tagged(&mut self, p: Prefix, timeout: Option<u32>, now: u64, tag: u16) -> Result<(), ChangeError> {
        let edits = self.journal.len();
        self.add(p, timeout, now)?;
        let tags = self.tags.get_or_insert_with(Tags::new);
        if tags.get(&p) != Some(tag) {
            tags.set(p, tag);
            self.tags_changed = true;
            // A present element under a new tag is an edit too, for a
            // reader that keeps each element's tag beside it.
            if self.journal.len() == edits && self.added.has(&p) {
                self.journal.push(Edit::Retagged(p));
            }
        }
        Ok(())
    }

    /// Names the tags (index = tag).
    pub fn name_tags(&mut self, names: &[String]) {
        if self.tags.get_or_insert_with(Tags::new).set_names(names) {
            self.tags_changed = true;
        }
    }

    /// The tags to publish with the delta: a copy when they changed since
    /// the last call, else the copy published before.
    pub fn tags(&mut self) -> Option<Arc<Tags>> {
        if std::mem::take(&mut self.tags_changed) {
            self.tags_published = self.tags.as_ref().map(|t| Arc::new(t.clone()));
        }
        self.tags_published.clone()
    }

    /// Exactly `p`'s tag, when it has one.
    pub fn tag_of(&self, p: &Prefix) -> Option<u16> {
        self.tags.as_ref()?.get(p)
    }

    fn untag(&mut self, p: &Prefix) {
        if let Some(t) = &mut self.tags {
            if t.remove(p) {
                self.tags_changed = true;
            }
        }
    }

    fn added_insert(&mut self, p: Prefix) {
        if self.added.insert(p) {
            self.journal.push(Edit::Added(p, true));
        }
    }

    fn added_remove(&mut self, p: &Prefix) -> bool {
        let gone = self.added.remove(p);
        if gone {
            self.journal.push(Edit::Added(*p, false));
        }
        gone
    }

    fn deleted_insert(&mut self, p: Prefix) {
        if self.deleted.insert(p) {
            self.journal.push(Edit::Deleted(p, true));
        }
    }

    fn deleted_remove(&mut self, p: &Prefix) -> bool {
        let gone = self.deleted.remove(p);
        if gone {
            self.journal.push(Edit::Deleted(*p, false));
        }
        gone
    }

    /// `added` and `deleted` are rebuilt (a flush, a merge): no edit list
    /// leads from an older delta to them, so the next delta is a copy.
    fn rebuilt(&mut self) {
        self.added.clear();
        self.deleted.clear();
        self.published = None;
        self.spare = None;
        self.journal.clear();
        self.mark = 0;
    }

    fn in_base(&self, p: &Prefix) -> bool {
        self.base.as_ref().is_some_and(|b| b.has(p)) && !self.deleted.has(p)
    }

    fn set_deadline(&mut self, p: Prefix, deadline: Option<u64>) {
        if let Some(old) = self.deadline.remove(&p) {
            self.queue.remove(&(old, p));
        }
        if let Some(d) = deadline {
            self.deadline.insert(p, d);
            self.queue.insert((d, p));
        }
    }

    /// How many elements the set holds now (base - deleted + added).
    pub fn len(&self) -> usize {
        (self.base_entries + self.added.len()).saturating_sub(self.deleted.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `add(p)` would be refused for want of room.
    pub fn is_full_for(&self, p: &Prefix) -> bool {
        self.len() >= self.maxelem && !self.has(p)
    }

    /// Adds `p` (or renews it: a new timeout replaces the old, like
    /// `ipset add -exist`), to leave `timeout` seconds after `now` (the
    /// set's default when None; never when neither). Refused, nothing
    /// changed, when `p` is new and the set holds `maxelem` elements.
    pub fn add(&mut self, p: Prefix, timeout: Option<u32>, now: u64) -> Result<(), ChangeError> {
        if self.is_full_for(&p) {
            return Err(ChangeError::Full { elem: p, maxelem: self.maxelem });
        }
        if let Some((_, log)) = &mut self.since_merge {
            log.push(Change::Add(p));
        }
        if !self.deleted_remove(&p) && !self.in_base(&p) {
            self.added_insert(p);
        }
        let timeout = timeout.or(self.default_timeout);
        self.set_deadline(p, timeout.map(|s| now.saturating_add(u64::from(s) * 1_000_000_000)));
        Ok(())
    }

    /// Deletes exactly `p`.
    pub fn del(&mut self, p: Prefix) -> Result<(), ChangeError> {
        if self.added.has(&p) || self.in_base(&p) {
            if let Some((_, log)) = &mut self.since_merge {
                log.push(Change::Del(p));
            }
        }
        if self.added_remove(&p) {
        } else if self.in_base(&p) {
            self.deleted_insert(p);
        } else if self.base.is_none() {
            return Err(ChangeError::BaseUnknown(p));
        } else {
            return Err(ChangeError::NotInSet(p));
        }
        self.set_deadline(p, None);
        self.untag(&p);
        Ok(())
    }

    /// Whether exactly `p` is an element of the set now.
    pub fn has(&self, p: &Prefix) -> bool {
        self.added.has(p) || self.in_base(p)
    }

    /// Whether `del(p)` would succeed (for checking a batch before applying it).
    pub fn can_del(&self, p: &Prefix) -> Result<(), ChangeError> {
        if self.added.has(p) || self.in_base(p) {
            Ok(())
        } else if self.base.is_none() {
            Err(ChangeError::BaseUnknown(*p))
        } else {
            Err(ChangeError::NotInSet(*p))
        }
    }

    /// Removes every element whose deadline is at or before `now`; returns
    /// how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some(&(d, p)) = self.queue.first() {
            if d > now {
                break;
            }
            // Every element with a deadline is present, so this succeeds.
            if self.del(p).is_ok() {
                n += 1;
            } else {
                self.set_deadline(p, None);
            }
        }
        n
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.queue.first().map(|&(d, _)| d)
    }

    /// Empties the set: the base too (the caller publishes empty tables).
    pub fn flush(&mut self) {
        // A merge under way would bring back what this removes.
        self.since_merge = None;
        self.base = Some(Arc::new(Elements::new()));
        self.base_entries = 0;
        self.rebuilt();
        self.deadline.clear();
        self.queue.clear();
        if let Some(t) = &mut self.tags {
            t.clear();
            self.tags_changed = true;
        }
    }

    /// The delta the judge reads, or None when the base alone is the set;
    /// the caller publishes it (it is kept, to be reused two calls later).
    /// O(edits since the delta before the last) when no reader holds that
    /// one any more, else a copy of the delta.
    pub fn delta(&mut self) -> Option<Arc<Delta>> {
        let new = if self.added.is_empty() && self.deleted.is_empty() {
            None
        } else {
            let base = if self.deleted.is_empty() { None } else { self.base.clone() };
            let id = DELTA_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // The edits since the delta published last lead from it to
            // this one (`rebuilt` leaves none published: no list then).
            let mut since = self.published.as_ref().map(|d| (d.id, self.journal[self.mark..].to_vec()));
            let mut spare = self.spare.take();
            let reused = match spare.as_mut().and_then(Arc::get_mut) {
                Some(d) => {
                    // Only this state holds it: no reader can see it change.
                    for &e in &self.journal {
                        d.apply(e);
                    }
                    d.base = base.clone();
                    d.id = id;
                    d.since = since.take();
                    spare
                }
                None => None,
            };
            Some(reused.unwrap_or_else(|| {
                Arc::new(Delta { added: self.added.clone(), deleted: self.deleted.clone(), base, id, since })
            }))
        };
        // The delta published until now becomes the spare; it lacks the
        // edits made since it was made.
        self.spare = std::mem::replace(&mut self.published, new.clone());
        self.journal.drain(..self.mark);
        self.mark = self.journal.len();
        new
    }

    /// Whether the delta has grown enough to fold into the base: past
    /// `min` elements and past `1/ratio` of the base. Never for a base whose
    /// elements are not known.
    pub fn wants_merge(&self, min: usize, ratio: usize) -> bool {
        let delta = self.added.len() + self.deleted.len();
        self.base.is_some() && delta > min && delta > self.base_entries / ratio.max(1)
    }

    /// Starts a merge to run elsewhere: what it needs (with the merge's
    /// number, for [`SetState::finish_merge`]), and from now on a log of the
    /// changes made meanwhile. None when one is already running or the
    /// base's elements are not known.
    pub fn start_merge(&mut self) -> Option<(u64, MergeInput)> {
        if self.since_merge.is_some() || self.base.is_none() {
            return None;
        }
        self.merge_seq += 1;
        self.since_merge = Some((self.merge_seq, Vec::new()));
        Some((
            self.merge_seq,
            MergeInput { base: self.base.clone(), added: self.added.clone(), deleted: self.deleted.clone() },
        ))
    }

    /// Forgets a merge that will not finish (its thread died).
    pub fn merge_abandoned(&mut self) {
        self.since_merge = None;
    }

    /// Whether a merge started by [`SetState::start_merge`] is running.
    pub fn merging(&self) -> bool {
        self.since_merge.is_some()
    }

    /// Ends merge number `seq`: `base` holds the elements
    /// [`MergeInput::elements`] gave; the changes made since are replayed as
    /// the new delta. False (nothing changed) when that merge was abandoned
    /// meanwhile (a flush, a merge done here, another merge started).
    pub fn finish_merge(&mut self, seq: u64, base: Elements) -> bool {
        if self.since_merge.as_ref().is_none_or(|(n, _)| *n != seq) {
            return false;
        }
        let Some((_, log)) = self.since_merge.take() else { return false };
        self.base_entries = base.len();
        self.base = Some(Arc::new(base));
        self.rebuilt();
        for c in log {
            match c {
                Change::Add(p) => {
                    if !self.deleted_remove(&p) && !self.in_base(&p) {
                        self.added_insert(p);
                    }
                }
                Change::Del(p) => {
                    if !self.added_remove(&p) && self.in_base(&p) {
                        self.deleted_insert(p);
                    }
                }
            }
        }
        self.merges += 1;
        true
    }

    /// Folds the delta into a new base and returns its elements (the caller
    /// builds the tables and publishes them with `delta()`, now None).
    /// Deadlines stay: an element that expires after a merge is deleted
    /// from the base.
    pub fn merge(&mut self) -> Vec<Prefix> {
        self.since_merge = None;
        let base = self.base.iter().flat_map(|b| b.iter()).filter(|p| !self.deleted.has(p));
        let mut all: Vec<Prefix> = base.chain(self.added.iter()).collect();
        all.sort_unstable();
        self.base_entries = all.len();
        self.base = Some(Arc::new(Elements::from_prefixes(&all)));
        self.rebuilt();
        self.merges += 1;
        all
    }

    /// Which element puts `ip` in the set, given whether the base tables
    /// hold it; None when it is not in the set.
    pub fn find(&self, base_hit: bool, ip: IpAddr) -> Option<Found> {
        if let Some(p) = self.added.covering(ip).first() {
            return Some(Found::Added(*p));
        }
        if !base_hit {
            return None;
        }
        match &self.base {
            None => Some(Found::BaseTables),
            Some(b) => b.covering(ip).into_iter().find(|p| !self.deleted.has(p)).map(Found::Base),
        }
    }

    /// Every element with its deadline, when known (the base's elements
    /// only when known).
    pub fn elements(&self) -> Vec<(Prefix, Option<u64>)> {
        let base = self.base.iter().flat_map(|b| b.iter()).filter(|p| !self.deleted.has(p));
        let mut v: Vec<(Prefix, Option<u64>)> =
            base.chain(self.added.iter()).map(|p| (p, self.deadline.get(&p).copied())).collect();
        v.sort_unstable();
        v
    }

    /// Base elements (before deletes), added, deleted.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.base_entries, self.added.len(), self.deleted.len())
    }

    /// Whether the base's elements are known.
    pub fn base_known(&self) -> bool {
        self.base.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_delta_lists_the_edits_since_the_one_before_it() {
        let mut s = SetState::new(Some(Elements::new()), 0, None);
        s.add(p("10.0.0.1"), None, 0).unwrap();
        let d1 = s.delta().unwrap();
        assert!(d1.added_since(0).is_none(), "the first has no delta before it");
        s.add(p("10.0.0.2"), None, 0).unwrap();
        s.add(p("10.0.0.3"), None, 0).unwrap();
        s.del(p("10.0.0.1")).unwrap();
        let d2 = s.delta().unwrap();
        let edits: Vec<AddedEdit> = d2.added_since(d1.id()).unwrap().collect();
        use AddedEdit::{Added, Removed, Retagged};
        assert_eq!(edits, [Added(p("10.0.0.2")), Added(p("10.0.0.3")), Removed(p("10.0.0.1"))]);
        drop(d1);
        // The third reuses the first's allocation; its list starts at the second.
        s.add(p("10.0.0.4"), None, 0).unwrap();
        let d3 = s.delta().unwrap();
        assert!(d3.added_since(d2.id() + 1).is_none(), "not published after that one");
        assert_eq!(d3.added_since(d2.id()).unwrap().collect::<Vec<_>>(), [Added(p("10.0.0.4"))]);
        // A present element of a new tag is listed; of the same tag, not.
        s.add_tagged(p("10.0.0.4"), None, 0, 1).unwrap();
        let d4 = s.delta().unwrap();
        assert_eq!(d4.added_since(d3.id()).unwrap().collect::<Vec<_>>(), [Retagged(p("10.0.0.4"))]);
        s.add_tagged(p("10.0.0.4"), None, 0, 1).unwrap();
        s.add_tagged(p("10.0.0.6"), None, 0, 2).unwrap();
        let d5 = s.delta().unwrap();
        assert_eq!(d5.added_since(d4.id()).unwrap().collect::<Vec<_>>(), [Added(p("10.0.0.6"))]);
        assert!(d5.matches(false, ip("10.0.0.4")) && d5.matches(false, ip("10.0.0.6")));
        s.flush();
        s.add(p("10.0.0.5"), None, 0).unwrap();
        assert!(s.delta().unwrap().added_since(d5.id()).is_none(), "a flush leaves no list");
    }

    #[test]
    fn a_deleted_host_is_still_covered_by_its_prefix() {
        let base = Elements::from_prefixes(&[p("10.0.0.0/8"), p("10.1.2.3")]);
        let mut s = SetState::new(Some(base), 0, None);
        s.del(p("10.1.2.3")).unwrap();
        let d = s.delta().unwrap();
        assert!(d.matches(true, ip("10.1.2.3")), "the /8 still covers it");
        s.del(p("10.0.0.0/8")).unwrap();
        let d = s.delta().unwrap();
        assert!(!d.matches(true, ip("10.1.2.3")));
        assert!(!d.matches(true, ip("10.9.9.9")));
        assert_eq!(s.del(p("10.0.0.0/8")), Err(ChangeError::NotInSet(p("10.0.0.0/8"))));
        s.add(p("10.1.2.3"), None, 0).unwrap();
        assert!(s.delta().unwrap().matches(true, ip("10.1.2.3")), "re-added base element");
        assert_eq!(s.counts(), (2, 0, 1));
    }

    #[test]
    fn timeouts_expire_on_the_clock_and_renew() {
        let mut s = SetState::new(Some(Elements::new()), 0, Some(10));
        s.add(p("192.0.2.1"), None, 0).unwrap();
        s.add(p("192.0.2.2"), Some(5), 0).unwrap();
        s.add(p("192.0.2.3"), Some(5), 0).unwrap();
        s.add(p("192.0.2.3"), Some(20), 1_000_000_000).unwrap();
        assert_eq!(s.next_deadline(), Some(5_000_000_000));
        assert_eq!(s.expire(5_000_000_000), 1);
        assert_eq!(s.expire(10_000_000_000), 1);
        let left: Vec<Prefix> = s.elements().into_iter().map(|e| e.0).collect();
        assert_eq!(left, vec![p("192.0.2.3")]);
        assert_eq!(s.expire(21_000_000_000), 1);
        assert!(s.delta().is_none());
    }

    #[test]
    fn a_compiled_base_takes_adds_and_refuses_unknown_deletes() {
        let mut s = SetState::new(None, 1000, None);
        s.add(p("198.51.100.0/24"), None, 0).unwrap();
        assert_eq!(s.find(false, ip("198.51.100.7")), Some(Found::Added(p("198.51.100.0/24"))));
        assert_eq!(s.find(true, ip("203.0.113.1")), Some(Found::BaseTables));
        assert!(matches!(s.del(p("203.0.113.1")), Err(ChangeError::BaseUnknown(_))));
        s.del(p("198.51.100.0/24")).unwrap();
        assert!(!s.wants_merge(0, 1), "never merges a base it cannot list");
    }

    #[test]
    fn a_delta_no_one_holds_is_brought_up_to_date_not_copied() {
        let mut s = SetState::new(Some(Elements::new()), 0, None);
        s.add(p("192.0.2.1"), None, 0).unwrap();
        let first = Arc::as_ptr(&s.delta().unwrap());
        s.add(p("192.0.2.2"), None, 0).unwrap();
        let second = s.delta().unwrap();
        s.add(p("192.0.2.3"), None, 0).unwrap();
        let third = s.delta().unwrap();
        assert!(std::ptr::eq(Arc::as_ptr(&third), first), "the first delta, no one holding it, is reused");
        assert!(["192.0.2.1", "192.0.2.2", "192.0.2.3"].iter().all(|a| third.matches(false, ip(a))));
        assert_eq!(s.journal.len(), 1, "only the edits the spare lacks are kept");
        // `second` is held, as by a worker: it is not reused, nor changed.
        s.del(p("192.0.2.1")).unwrap();
        let fourth = s.delta().unwrap();
        assert!(!std::ptr::eq(Arc::as_ptr(&fourth), Arc::as_ptr(&second)));
        assert!(second.matches(false, ip("192.0.2.1")) && !second.matches(false, ip("192.0.2.3")));
        assert!(!fourth.matches(false, ip("192.0.2.1")) && fourth.matches(false, ip("192.0.2.3")));
    }

    #[test]
    fn a_full_set_refuses_new_elements_and_renews_present_ones() {
        let base = Elements::from_prefixes(&[p("10.0.0.1"), p("10.0.0.2")]);
        let mut s = SetState::new(Some(base), 0, None);
        s.maxelem = 3;
        s.add(p("10.0.0.3"), Some(5), 0).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.add(p("10.0.0.4"), None, 0), Err(ChangeError::Full { elem: p("10.0.0.4"), maxelem: 3 }));
        assert_eq!(
            s.add(p("10.0.0.4"), None, 0).unwrap_err().to_string(),
            "the set is full: it holds 3 elements, its maxelem; 10.0.0.4/32 is not added"
        );
        assert!(!s.has(&p("10.0.0.4")), "nothing changed");
        s.add(p("10.0.0.3"), Some(50), 0).unwrap();
        s.add(p("10.0.0.1"), Some(50), 0).unwrap();
        // A base element deleted makes room; so does an expiry.
        s.del(p("10.0.0.2")).unwrap();
        s.add(p("10.0.0.4"), None, 0).unwrap();
        assert!(s.add(p("10.0.0.5"), None, 0).is_err());
        assert_eq!(s.expire(50_000_000_000), 2);
        s.add(p("10.0.0.5"), None, 0).unwrap();
        assert_eq!(s.len(), 2);
    }

    /// The plain model: every element present, with its deadline; an
    /// address matches when some present element covers it.
    #[derive(Default, Clone)]
    struct Model {
        elems: HashMap<Prefix, Option<u64>>,
    }

    impl Model {
        fn contains(&self, ip: IpAddr) -> bool {
            self.elems.keys().any(|e| e.contains(ip))
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(Prefix, Option<u32>),
        Del(Prefix),
        Tick(u64),
        Merge,
        Flush,
        /// A merge elsewhere: started, then finished some ops later.
        StartMerge,
        FinishMerge,
    }

    /// Prefixes from a small space so that adds, deletes and lookups meet:
    /// nested lengths inside 10.0.0.0/16 and 2001:db8::/56.
    fn arb_prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            (0u32..64, prop::sample::select(vec![16u8, 20, 24, 28, 30, 32])).prop_map(|(a, len)| Prefix::new(
                IpAddr::from((0x0a00_0000u32 | (a * 1031 % 65536)).to_be_bytes()),
                len
            )),
            (0u128..64, prop::sample::select(vec![56u8, 60, 64, 120, 128])).prop_map(|(a, len)| Prefix::new(
                IpAddr::from(
                    ((0x2001_0db8_0000_0000u128 << 64) | (a * 0x0001_0003_0000_0007 % (1 << 72))).to_be_bytes()
                ),
                len
            )),
        ]
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (arb_prefix(), prop::option::of(1u32..5)).prop_map(|(p, t)| Op::Add(p, t)),
            4 => arb_prefix().prop_map(Op::Del),
            2 => (0u64..3).prop_map(Op::Tick),
            1 => Just(Op::Merge),
            1 => Just(Op::Flush),
            2 => Just(Op::StartMerge),
            2 => Just(Op::FinishMerge),
        ]
    }

    proptest! {
        /// Random adds, deletes, timeouts, merges and flushes over a random
        /// base, interleaved with lookups: the base tables (a plain cover
        /// test over the last merged base) plus the published delta equal the
        /// model, and a refused delete (or add, past a random maxelem) is
        /// refused by both.
        #[test]
        fn equals_the_model(
            base in prop::collection::vec(arb_prefix(), 0..20),
            ops in prop::collection::vec(arb_op(), 1..60),
            probes in prop::collection::vec(arb_prefix(), 8),
            maxelem in prop_oneof![Just(usize::MAX), 0usize..24],
            keep in prop::collection::vec(any::<bool>(), 1..8),
        ) {
            let secs = 1_000_000_000u64;
            let mut now = 0u64;
            let mut model = Model::default();
            for b in &base {
                model.elems.insert(*b, None);
            }
            let mut tables: Vec<Prefix> = base.clone();
            let mut s = SetState::new(Some(Elements::from_prefixes(&base)), 0, None);
            s.maxelem = maxelem;
            let ips: Vec<IpAddr> = probes.iter().map(|p| p.addr()).collect();
            let mut running: Option<(u64, Vec<Prefix>)> = None;
            let addrs: Vec<IpAddr> = ips.iter().copied().chain(base.iter().map(|b| b.addr())).collect();
            let mut published = Vec::new();
            // A reader's own copy of the added elements, kept as the shield's
            // mirror keeps it: the edits since the delta it copied when they
            // lead from there, else the elements whole.
            let mut copy: HashSet<Prefix> = HashSet::new();
            let mut copied: Option<u64> = None;
            for (k, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Add(p, t) => {
                        let full = !model.elems.contains_key(&p) && model.elems.len() >= maxelem;
                        prop_assert_eq!(s.add(p, t, now).is_err(), full, "add {} to {} of {}", p, model.elems.len(), maxelem);
                        if !full {
                            model.elems.insert(p, t.map(|t| now + u64::from(t) * secs));
                        }
                    }
                    Op::Del(p) => {
                        let r = s.del(p);
                        prop_assert_eq!(r.is_ok(), model.elems.remove(&p).is_some(), "del {}", p);
                    }
                    Op::Tick(n) => {
                        now += n * secs;
                        s.expire(now);
                        model.elems.retain(|_, d| d.is_none_or(|d| d > now));
                    }
                    Op::Merge => tables = s.merge(),
                    Op::Flush => {
                        s.flush();
                        tables.clear();
                        model.elems.clear();
                    }
                    Op::StartMerge => {
                        if let Some((seq, input)) = s.start_merge() {
                            running = Some((seq, input.elements()));
                        }
                    }
                    Op::FinishMerge => {
                        if let Some((seq, list)) = running.take() {
                            if s.finish_merge(seq, Elements::from_prefixes(&list)) {
                                tables = list;
                            }
                        }
                    }
                }
                let delta = s.delta();
                match (&delta, copied.and_then(|c| delta.as_ref()?.added_since(c))) {
                    (_, Some(edits)) => {
                        for e in edits {
                            let done = match e {
                                AddedEdit::Added(p) => copy.insert(p),
                                AddedEdit::Removed(p) => copy.remove(&p),
                                AddedEdit::Retagged(p) => copy.contains(&p),
                            };
                            prop_assert!(done, "edit {:?}", e);
                        }
                    }
                    (Some(d), None) => copy = d.added_elements().iter().collect(),
                    (None, None) => copy.clear(),
                }
                copied = delta.as_ref().map(|d| d.id());
                let want: HashSet<Prefix> = delta.as_ref().map(|d| d.added_elements().iter().collect()).unwrap_or_default();
                prop_assert_eq!(&copy, &want, "the copy kept by edits");
                for &a in &addrs {
                    let base_hit = tables.iter().any(|t| t.contains(a));
                    let got = delta.as_ref().map_or(base_hit, |d| d.matches(base_hit, a));
                    prop_assert_eq!(got, model.contains(a), "{} after {:?}", a, s.elements());
                    prop_assert_eq!(s.find(base_hit, a).is_some(), model.contains(a));
                }
                // Some deltas are held to the end, as a reader would; the
                // others are dropped, so later ones reuse them.
                if keep[k % keep.len()] {
                    published.push((k, delta, tables.clone(), model.clone()));
                }
                let mut want: Vec<Prefix> = model.elems.keys().copied().collect();
                want.sort_unstable();
                let got: Vec<Prefix> = s.elements().into_iter().map(|e| e.0).collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(s.len(), model.elems.len());
            }
            // A delta a reader holds is never changed, even when the state
            // reuses those no one holds: every one kept still answers as the
            // model did when it was made, whatever changed since.
            for (n, delta, tables, model) in &published {
                for &a in &addrs {
                    let base_hit = tables.iter().any(|t| t.contains(a));
                    let got = delta.as_ref().map_or(base_hit, |d| d.matches(base_hit, a));
                    prop_assert_eq!(got, model.contains(a), "{} in the delta published after op {}", a, n);
                }
            }
        }
    }
}
