//! The field scans: index of the first byte at or after `p` that is not
//! allowed in the field (or `b.len()`). Targets and header values, 32 bytes
//! at a time with AVX2, 16 with SSE (the `Sse42` level, gated on SSE4.2
//! though the compares are SSE2), or through a byte-class table. Header
//! names, at every level, through the table (byte by byte, four per bounds
//! check): they are short, and a loop whose exit the CPU predicts lets it
//! run ahead into the value, where a vector scan's result is a data
//! dependency it must wait for (measured: the vector name scan was ~10%
//! slower per request). The exception is the common header line under
//! AVX2 (`Scan::line`): one 32-byte load at the line's start classifies
//! the name, the colon and the value together, so the name costs no
//! latency of its own. The property tests run every level against the
//! reference, and the line step against the per-field scans.
#![allow(unsafe_code)]

use crate::types::{is_target_byte, is_tchar, is_value_byte, Simd};

/// A resolved level: only [`resolve`] makes one, after checking the CPU, so
/// holding `Level(Simd::Avx2)` means AVX2 is present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Level(Simd);

impl Level {
    pub(crate) fn get(self) -> Simd {
        self.0
    }
}

pub(crate) fn resolve(s: Simd) -> Simd {
    level(s).0
}

pub(crate) fn level(s: Simd) -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        let sse42 = std::arch::is_x86_feature_detected!("sse4.2");
        Level(match s {
            Simd::Auto if avx2 => Simd::Avx2,
            Simd::Auto if sse42 => Simd::Sse42,
            Simd::Avx2 if avx2 => Simd::Avx2,
            Simd::Sse42 if sse42 => Simd::Sse42,
            _ => Simd::Portable,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = s;
        Level(Simd::Portable)
    }
}

const fn value_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = is_value_byte(i as u8);
        i += 1;
    }
    t
}
const fn target_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = is_target_byte(i as u8);
        i += 1;
    }
    t
}
const fn tchar_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = is_tchar(i as u8);
        i += 1;
    }
    t
}
static VALUE: [bool; 256] = value_table();
static TARGET: [bool; 256] = target_table();
pub(crate) static TCHAR: [bool; 256] = tchar_table();

#[inline(always)]
fn portable(t: &[bool; 256], b: &[u8], mut p: usize) -> usize {
    // Eight at a time: one well-predicted branch per eight bytes; the byte
    // loop then finds which one stopped it. Spelled out rather than through
    // iterator adapters, whose code LLVM made ~40% slower or faster as
    // unrelated code around it changed.
    while let Some(&[c0, c1, c2, c3, c4, c5, c6, c7]) = b.get(p..p.wrapping_add(8)) {
        let ok = t[c0 as usize]
            & t[c1 as usize]
            & t[c2 as usize]
            & t[c3 as usize]
            & t[c4 as usize]
            & t[c5 as usize]
            & t[c6 as usize]
            & t[c7 as usize];
        if !ok {
            break;
        }
        p += 8;
    }
    while let Some(&c) = b.get(p) {
        if !t[c as usize] {
            break;
        }
        p += 1;
    }
    p
}

/// The three field scans, as one scanner level provides them. The parser's
/// head code is generic over this and compiled once per level, so a whole
/// head runs inside one level's code (for AVX2: one `target_feature`
/// function, without leaving and re-entering vector code per field, which
/// costs a stall on some CPUs).
pub(crate) trait Scan {
    /// First byte at or after `p` that is not a header-value byte.
    fn value(b: &[u8], p: usize) -> usize;
    /// First byte at or after `p` that is not a request-target byte.
    fn target(b: &[u8], p: usize) -> usize;
    /// First byte at or after `p` that is not a tchar.
    fn name(b: &[u8], p: usize) -> usize;
    /// The common header line's shape from its start `ns`: `(ne, v, ve)`
    /// when the name `ns..ne` is not empty and ends in `:`, `v` is after
    /// it and at most one SP, the byte at `v` (if any) is not SP or HTAB,
    /// and `ve` is the first non-value byte at or after `v`; `None` when
    /// the line is not of that shape (the caller's general way decides).
    #[inline(always)]
    fn line(b: &[u8], ns: usize) -> Option<(usize, usize, usize)> {
        line_by_fields::<Self>(b, ns)
    }
}

/// `Scan::line` through the per-field scans.
#[inline(always)]
fn line_by_fields<S: Scan + ?Sized>(b: &[u8], ns: usize) -> Option<(usize, usize, usize)> {
    let ne = S::name(b, ns);
    if ne == ns || b.get(ne) != Some(&b':') {
        return None;
    }
    let mut v = ne + 1;
    if b.get(v) == Some(&b' ') {
        v += 1;
    }
    if matches!(b.get(v), Some(b' ' | b'\t')) {
        return None;
    }
    Some((ne, v, S::value(b, v)))
}

/// What runs under a level: the parser's head code.
pub(crate) trait Kernel {
    type Out;
    fn run<S: Scan>(&mut self, b: &[u8]) -> Self::Out;
}

/// Runs `k` with the scanner of level `l`.
#[inline]
pub(crate) fn dispatch<K: Kernel>(l: Level, k: &mut K, b: &[u8]) -> K::Out {
    match l.0 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Level(Avx2)` exists only if the CPU has AVX2 (see `level`).
        Simd::Avx2 => unsafe { avx2_entry(k, b) },
        #[cfg(target_arch = "x86_64")]
        Simd::Sse42 => sse_entry(k, b),
        _ => portable_entry(k, b),
    }
}

// Each level out of line, as `avx2_entry` is: inlined into the caller, the
// other levels' code gave it a large frame and a dozen register saves that
// the AVX2 path paid on every call.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn sse_entry<K: Kernel>(k: &mut K, b: &[u8]) -> K::Out {
    k.run::<Sse>(b)
}

#[inline(never)]
fn portable_entry<K: Kernel>(k: &mut K, b: &[u8]) -> K::Out {
    k.run::<Portable>(b)
}

/// Runs kernel `k` with the AVX2 scanner, compiled with AVX2 enabled so the
/// scanner's intrinsics inline into one function.
///
/// # Safety
///
/// The CPU must support AVX2: only a `Simd::Avx2` level (made by `level`
/// after run-time detection) calls this.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_entry<K: Kernel>(k: &mut K, b: &[u8]) -> K::Out {
    k.run::<Avx2>(b)
}

pub(crate) struct Portable;

impl Scan for Portable {
    #[inline(always)]
    fn value(b: &[u8], p: usize) -> usize {
        portable(&VALUE, b, p)
    }
    #[inline(always)]
    fn target(b: &[u8], p: usize) -> usize {
        portable(&TARGET, b, p)
    }
    #[inline(always)]
    fn name(b: &[u8], p: usize) -> usize {
        portable(&TCHAR, b, p)
    }
}

/// A plain loop: names are short, and a loop whose exit the CPU predicts
/// lets it run ahead into the value, where a vector scan's result is a data
/// dependency it must wait for.
///
/// Four bytes per bounds check: the one-at-a-time loop spent more on the
/// bounds check and index updates (5 instructions) than on the test (3),
/// and names are ~30% of the bytes the head code touches one by one. The
/// four tests are ANDed into one branch while the block is all name; only
/// the block holding the end is tested byte by byte (more instructions,
/// fewer branches: 8 header lines 95.3 -> 93.3 ns).
#[inline(always)]
fn name_bytes(b: &[u8], mut p: usize) -> usize {
    while let Some(&[c0, c1, c2, c3]) = b.get(p..p + 4) {
        if TCHAR[c0 as usize] & TCHAR[c1 as usize] & TCHAR[c2 as usize] & TCHAR[c3 as usize] {
            p += 4;
            continue;
        }
        if !TCHAR[c0 as usize] {
            return p;
        }
        if !TCHAR[c1 as usize] {
            return p + 1;
        }
        if !TCHAR[c2 as usize] {
            return p + 2;
        }
        if !TCHAR[c3 as usize] {
            return p + 3;
        }
        p += 4;
    }
    while let Some(&c) = b.get(p) {
        if !TCHAR[c as usize] {
            break;
        }
        p += 1;
    }
    p
}

#[cfg(target_arch = "x86_64")]
struct Sse;

#[cfg(target_arch = "x86_64")]
impl Scan for Sse {
    #[inline(always)]
    fn value(b: &[u8], p: usize) -> usize {
        x86::value_sse(b, p)
    }
    #[inline(always)]
    fn target(b: &[u8], p: usize) -> usize {
        x86::target_sse(b, p)
    }
    #[inline(always)]
    fn name(b: &[u8], p: usize) -> usize {
        name_bytes(b, p)
    }
}

/// Private to this module and used only by `avx2_entry`, which runs only
/// when the CPU has AVX2: that is what makes the calls below sound.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Scan for Avx2 {
    #[inline(always)]
    fn value(b: &[u8], p: usize) -> usize {
        // SAFETY: see `Avx2`: only reached with AVX2 present.
        unsafe { x86::value_avx2(b, p) }
    }
    #[inline(always)]
    fn target(b: &[u8], p: usize) -> usize {
        // SAFETY: see `Avx2`.
        unsafe { x86::target_avx2(b, p) }
    }
    #[inline(always)]
    fn name(b: &[u8], p: usize) -> usize {
        name_bytes(b, p)
    }
    #[inline(always)]
    fn line(b: &[u8], ns: usize) -> Option<(usize, usize, usize)> {
        // SAFETY: see `Avx2`.
        match unsafe { x86::line_avx2(b, ns) } {
            x86::Window::Line(l) => Some(l),
            x86::Window::Not => None,
            x86::Window::Beyond => line_by_fields::<Self>(b, ns),
        }
    }
}

/// `b` as a `&str`: callers pass the method (tchars) or the target
/// (0x21-0x7E), both checked byte by byte, so `b` is ASCII; the function
/// checks it again rather than trust them (an empty string otherwise), so
/// it is sound whatever a future caller passes. `is_ascii` is a word-at-a-
/// time scan: on the 703-byte request `sluice-bench http` measured
/// 1.33x httparse and 0.98x picohttpparser with it, against 1.30x and
/// 1.02-1.06x unchecked, and 1.23-1.29x and 0.92-0.95x with `from_utf8`.
#[inline]
pub(crate) fn ascii_str(b: &[u8]) -> &str {
    if is_ascii(b) {
        // SAFETY: ASCII is valid UTF-8 (checked just above).
        unsafe { std::str::from_utf8_unchecked(b) }
    } else {
        ""
    }
}

/// Whether every byte of `b` is below 0x80: the OR of its 16-byte (or
/// 8- or 4-byte) words, the last one overlapping, then one test, so a
/// method or target costs a few loads. `<[u8]>::is_ascii` aligns first
/// and loops per byte at the ends: on the request line alone this took
/// 34.0 to 32.0 ns per request (min of 3 runs each, this VM).
#[inline]
fn is_ascii(b: &[u8]) -> bool {
    let n = b.len();
    #[cfg(target_arch = "x86_64")]
    if n >= 16 {
        use std::arch::x86_64::*;
        let ptr = b.as_ptr();
        // SAFETY: SSE2 is part of x86-64; every load is of 16 bytes at
        // i <= n - 16, inside `b`; loadu has no alignment need.
        return unsafe {
            let mut acc = _mm_loadu_si128(ptr.add(n - 16).cast());
            let mut i = 0;
            while i + 16 < n {
                acc = _mm_or_si128(acc, _mm_loadu_si128(ptr.add(i).cast()));
                i += 16;
            }
            _mm_movemask_epi8(acc) == 0
        };
    }
    let word = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    if n >= 8 {
        let mut acc = word(n - 8);
        let mut i = 0;
        while i + 8 < n {
            acc |= word(i);
            i += 8;
        }
        acc & 0x8080_8080_8080_8080 == 0
    } else if n >= 4 {
        let half = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        (half(0) | half(n - 4)) & 0x8080_8080 == 0
    } else if n > 0 {
        // 1-3 bytes (a method such as GET, a target of "/"): first, middle, last.
        (b[0] | b[n / 2] | b[n - 1]) < 0x80
    } else {
        true
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{portable, TARGET, VALUE};
    use std::arch::x86_64::*;

    // Each function walks whole vectors while they fit inside `b`, then hands
    // the tail to the narrower level: no load ever reads past the slice.

    // The AVX2 scans carry no `target_feature` of their own: they are
    // `inline(always)` into `avx2_entry`, which has it, so the intrinsics
    // inline there too. With their own `target_feature` they could only be
    // `#[inline]`, and LLVM kept the value scan out of line (a call per
    // field, ~15% of the instructions per request).

    /// # Safety
    /// The CPU must have AVX2: call only from code under `avx2_entry`.
    #[inline(always)]
    pub(super) unsafe fn value_avx2(b: &[u8], mut p: usize) -> usize {
        let ptr = b.as_ptr();
        // SAFETY (whole block): SSE2 is baseline; the load is of 16 bytes
        // with p + 16 <= b.len(); loadu has no alignment need.
        unsafe {
            // One 16-byte step first: most field values are shorter, and
            // the 32-byte load is split in two on this build's tuning. On
            // 8 short header lines: 118 -> 106 ns per head (min of 3 runs
            // each); long lines lose nothing measurable.
            if p + 16 <= b.len() {
                let m = value_mask16(ptr.add(p));
                if m != 0 {
                    return p + m.trailing_zeros() as usize;
                }
                p += 16;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { value_avx2_wide(b, p) }
    }

    /// `value_avx2` without its first 16-byte step: for a value already
    /// known to be long (past a line's first 32 bytes), where that step
    /// only shifted the 32-byte loads off their alignment (the 4 KB
    /// cookie line measured 4% slower with it).
    ///
    /// # Safety
    /// As `value_avx2`.
    #[inline(always)]
    pub(super) unsafe fn value_avx2_wide(b: &[u8], mut p: usize) -> usize {
        let ptr = b.as_ptr();
        // SAFETY (whole block): AVX2 is present (the caller's contract);
        // each load is of 32 bytes with p + 32 <= b.len(); loadu has no
        // alignment need.
        unsafe {
            let c1f = _mm256_set1_epi8(0x1F);
            let tab = _mm256_set1_epi8(0x09);
            let del = _mm256_set1_epi8(0x7F);
            while p + 32 <= b.len() {
                let v = _mm256_loadu_si256(ptr.add(p).cast());
                let low = _mm256_cmpeq_epi8(_mm256_min_epu8(v, c1f), v);
                let bad =
                    _mm256_or_si256(_mm256_andnot_si256(_mm256_cmpeq_epi8(v, tab), low), _mm256_cmpeq_epi8(v, del));
                let m = _mm256_movemask_epi8(bad) as u32;
                if m != 0 {
                    return p + m.trailing_zeros() as usize;
                }
                p += 32;
            }
        }
        value_sse(b, p)
    }

    /// # Safety
    /// As `value_avx2`.
    #[inline(always)]
    pub(super) unsafe fn target_avx2(b: &[u8], mut p: usize) -> usize {
        let ptr = b.as_ptr();
        // SAFETY (whole block): AVX2 is present (the caller's contract);
        // p + 32 <= b.len() per load.
        unsafe {
            let lo = _mm256_set1_epi8(0x21);
            let span = _mm256_set1_epi8(0x5D);
            while p + 32 <= b.len() {
                let v = _mm256_loadu_si256(ptr.add(p).cast());
                let t = _mm256_sub_epi8(v, lo);
                let ok = _mm256_cmpeq_epi8(_mm256_min_epu8(t, span), t);
                let m = !(_mm256_movemask_epi8(ok) as u32);
                if m != 0 {
                    return p + m.trailing_zeros() as usize;
                }
                p += 32;
            }
        }
        target_sse(b, p)
    }

    /// What one 32-byte window at a header line's start showed.
    pub(super) enum Window {
        /// `(ne, v, ve)` as `Scan::line` returns it.
        Line((usize, usize, usize)),
        /// Not the common line's shape.
        Not,
        /// The window does not fit in `b`, or the name or its `: ` run
        /// past it: the per-field scans decide.
        Beyond,
    }

    /// Per low nibble, a bit for each high nibble (2-7) that makes a tchar
    /// with it; `TCHAR_HI` maps a high nibble to its bit (none for 0-1 and
    /// 8-F, where no byte is a tchar). A byte is a tchar when the two
    /// lookups share a bit.
    const fn tchar_lo() -> [u8; 16] {
        let mut t = [0u8; 16];
        let mut c = 0;
        while c < 128 {
            if crate::types::is_tchar(c as u8) {
                t[c & 15] |= 1 << (c >> 4);
            }
            c += 1;
        }
        t
    }
    static TCHAR_LO: [u8; 16] = tchar_lo();
    static TCHAR_HI: [u8; 16] = [0, 0, 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 0, 0, 0, 0, 0, 0, 0, 0];

    /// The common header line (`Scan::line`) from one 32-byte load at its
    /// start: the name's end, the colon, the optional SP and the value's
    /// end all come out of masks of the same vector, so a line of up to
    /// 32 bytes costs one load-to-mask latency, where the per-field scans
    /// cost two in series (the name's end, then the value's load from
    /// it), and about a third of their instructions.
    ///
    /// # Safety
    /// As `value_avx2`.
    #[inline(always)]
    pub(super) unsafe fn line_avx2(b: &[u8], ns: usize) -> Window {
        if ns + 32 > b.len() {
            return Window::Beyond;
        }
        // SAFETY (whole block): AVX2 is present (the caller's contract);
        // the load is of 32 bytes at ns with ns + 32 <= b.len().
        let (name_stop, colon, sp, tab, bad) = unsafe {
            let v = _mm256_loadu_si256(b.as_ptr().add(ns).cast());
            let nib = _mm256_set1_epi8(0x0F);
            let lo = _mm256_shuffle_epi8(
                _mm256_broadcastsi128_si256(_mm_loadu_si128(TCHAR_LO.as_ptr().cast())),
                _mm256_and_si256(v, nib),
            );
            let hi = _mm256_shuffle_epi8(
                _mm256_broadcastsi128_si256(_mm_loadu_si128(TCHAR_HI.as_ptr().cast())),
                _mm256_and_si256(_mm256_srli_epi16(v, 4), nib),
            );
            let not_tchar = _mm256_cmpeq_epi8(_mm256_and_si256(lo, hi), _mm256_setzero_si256());
            let is_tab = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0x09));
            let is_sp = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0x20));
            let low = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1F)), v);
            let bad = _mm256_or_si256(_mm256_andnot_si256(is_tab, low), _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0x7F)));
            let mask = |m| _mm256_movemask_epi8(m) as u32;
            (
                mask(not_tchar),
                mask(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b':' as i8))),
                mask(is_sp),
                mask(is_tab),
                mask(bad),
            )
        };
        let n = name_stop.trailing_zeros();
        // The name, the colon, an SP and the value's first byte must all
        // be inside the window: n + 2 <= 31.
        if n > 29 {
            return Window::Beyond;
        }
        if n == 0 || colon >> n & 1 == 0 {
            return Window::Not;
        }
        let v = n + 1 + (sp >> (n + 1) & 1);
        if (sp | tab) >> v & 1 != 0 {
            return Window::Not;
        }
        let rest = bad >> v;
        let ve = if rest != 0 {
            ns + (v + rest.trailing_zeros()) as usize
        } else {
            // SAFETY: the caller's contract (AVX2 present).
            unsafe { value_avx2_wide(b, ns + 32) }
        };
        Window::Line((ns + n as usize, ns + v as usize, ve))
    }

    // SSE2 is part of the x86_64 baseline: no target_feature needed.

    /// A bit per byte of the 16 at `at` that may not be in a field value.
    ///
    /// # Safety
    /// `at` must be valid for reading 16 bytes (SSE2 is baseline).
    #[inline(always)]
    unsafe fn value_mask16(at: *const u8) -> u32 {
        // SAFETY: the caller's contract; loadu has no alignment need.
        unsafe {
            let v = _mm_loadu_si128(at.cast());
            let low = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
            let tab = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x09));
            let bad = _mm_or_si128(_mm_andnot_si128(tab, low), _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7F)));
            _mm_movemask_epi8(bad) as u32
        }
    }

    // `inline(always)`: kept out of line otherwise (see the AVX2 scans).
    #[inline(always)]
    pub(super) fn value_sse(b: &[u8], mut p: usize) -> usize {
        let ptr = b.as_ptr();
        // SAFETY (whole block): SSE2 is baseline; each load is of 16 bytes
        // at an offset at most b.len() - 16.
        unsafe {
            while p + 16 <= b.len() {
                let m = value_mask16(ptr.add(p));
                if m != 0 {
                    return p + m.trailing_zeros() as usize;
                }
                p += 16;
            }
            // Fewer than 16 bytes left: the slice's last 16, the ones
            // before `p` shifted out (a value that ends a short read, or
            // the last field before the final CRLF).
            if p < b.len() && b.len() >= 16 {
                let m = value_mask16(ptr.add(b.len() - 16)) >> (p + 16 - b.len());
                return if m != 0 { p + m.trailing_zeros() as usize } else { b.len() };
            }
        }
        portable(&VALUE, b, p)
    }

    // `inline(always)`: kept out of line otherwise (see the AVX2 scans).
    #[inline(always)]
    pub(super) fn target_sse(b: &[u8], mut p: usize) -> usize {
        let ptr = b.as_ptr();
        // SAFETY (whole block): SSE2 is baseline; each load is of 16 bytes
        // at an offset at most b.len() - 16.
        unsafe {
            let lo = _mm_set1_epi8(0x21);
            let span = _mm_set1_epi8(0x5D);
            let bad = |at: usize| {
                let v = _mm_loadu_si128(ptr.add(at).cast());
                let t = _mm_sub_epi8(v, lo);
                let ok = _mm_cmpeq_epi8(_mm_min_epu8(t, span), t);
                !(_mm_movemask_epi8(ok) as u32) & 0xFFFF
            };
            while p + 16 <= b.len() {
                let m = bad(p);
                if m != 0 {
                    return p + m.trailing_zeros() as usize;
                }
                p += 16;
            }
            // The tail as in `value_sse`: the last 16 bytes, shifted.
            if p < b.len() && b.len() >= 16 {
                let m = bad(b.len() - 16) >> (p + 16 - b.len());
                return if m != 0 { p + m.trailing_zeros() as usize } else { b.len() };
            }
        }
        portable(&TARGET, b, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time ASCII test equals the standard library's on
        /// every length (the 1-3, 4-7, 8-15 and 16+ byte paths) and with a
        /// high byte anywhere.
        #[test]
        fn is_ascii_matches_std(mut b in prop::collection::vec(0u8..0x80, 0..80), at in any::<usize>(), high in 0x80u8..) {
            prop_assert!(is_ascii(&b));
            if !b.is_empty() {
                let i = at % b.len();
                b[i] = high;
            }
            prop_assert_eq!(is_ascii(&b), b.is_ascii());
            for n in 0..b.len() {
                prop_assert_eq!(is_ascii(&b[n..]), b[n..].is_ascii());
                prop_assert_eq!(is_ascii(&b[..n]), b[..n].is_ascii());
            }
        }

        /// Each level's one-step line equals the per-field scans' answer,
        /// from every start, on bytes drawn mostly from what a header line
        /// holds (and any byte now and then, which checks the nibble tables
        /// against `is_tchar` too).
        #[test]
        fn line_matches_the_field_scans(b in prop_oneof![prop::collection::vec(line_byte(), 0..100), shaped_line()]) {
            for ns in 0..=b.len() {
                let want = line_by_fields::<Portable>(&b, ns);
                #[cfg(target_arch = "x86_64")]
                {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 was just detected.
                        let got = unsafe { avx2_line(&b, ns) };
                        prop_assert_eq!(got, want, "avx2 from {}", ns);
                    }
                    prop_assert_eq!(Sse::line(&b, ns), want, "sse from {}", ns);
                }
                prop_assert_eq!(Portable::line(&b, ns), want);
            }
        }
    }

    proptest! {
        /// Each level's value and target scans stop where the byte table's
        /// do, from every start (the vector loops and their tails).
        #[test]
        fn scans_match_the_tables(b in prop::collection::vec(prop_oneof![
            8 => prop::sample::select(b"aZ0 \t!~".to_vec()),
            1 => any::<u8>(),
        ], 0..80)) {
            for p in 0..=b.len() {
                let (value, target) = (portable(&VALUE, &b, p), portable(&TARGET, &b, p));
                #[cfg(target_arch = "x86_64")]
                {
                    prop_assert_eq!(Sse::value(&b, p), value, "sse value from {}", p);
                    prop_assert_eq!(Sse::target(&b, p), target, "sse target from {}", p);
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 was just detected.
                        prop_assert_eq!(unsafe { avx2_scans(&b, p) }, (value, target), "avx2 from {}", p);
                    }
                }
            }
        }
    }

    /// `Avx2`'s value and target scans under AVX2 enabled.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_scans(b: &[u8], p: usize) -> (usize, usize) {
        (Avx2::value(b, p), Avx2::target(b, p))
    }

    /// `name sep value CRLF` and some more, with a name of any length
    /// about the window's edge, and one byte changed now and then.
    fn shaped_line() -> impl Strategy<Value = Vec<u8>> {
        let name = prop::collection::vec(prop::sample::select(b"aZ09-_.!~".to_vec()), 0..40);
        let sep = prop::sample::select(vec![&b":"[..], b": ", b":  ", b":\t", b": \t", b" :"]);
        let value = prop::collection::vec(prop::sample::select(b"ab \t\x80~\"".to_vec()), 0..40);
        let tail = prop::collection::vec(line_byte(), 0..40);
        (name, sep, value, tail, any::<usize>(), line_byte(), any::<bool>()).prop_map(
            |(n, s, v, t, at, byte, change)| {
                let mut b = [n, s.to_vec(), v, b"\r\n".to_vec(), t].concat();
                if change {
                    let at = at % b.len();
                    b[at] = byte;
                }
                b
            },
        )
    }

    fn line_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            8 => prop::sample::select(b"aZ09-_.!~|`^'*+#$%&".to_vec()),
            2 => prop::sample::select(b": \t\r\n".to_vec()),
            1 => any::<u8>(),
        ]
    }

    /// `Avx2::line` under AVX2 enabled, as `avx2_entry` runs it.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_line(b: &[u8], ns: usize) -> Option<(usize, usize, usize)> {
        Avx2::line(b, ns)
    }
}
