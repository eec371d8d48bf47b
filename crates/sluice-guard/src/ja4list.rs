//! `--block-ja4 FILE`: the JA4 fingerprints refused at the ClientHello
//! (reloaded whole on SIGHUP), and which fingerprints were seen how often
//! (the top-N in the summary and the metrics).

use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Distinct fingerprints counted at most; beyond, handshakes of new ones go
/// to `Ja4Stats::uncounted` (a flood of random hellos cannot grow memory).
pub const MAX_DISTINCT: usize = 10_000;

/// Why a `--block-ja4` line is not a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct ListError {
    pub line: usize,
    pub what: String,
}

/// Whether `s` has JA4's shape: `a_b_c`, `a` 10 characters (protocol
/// `t`/`q`/`d`, version, `d`/`i`, two 2-digit counts, the ALPN's two
/// characters), `b` and `c` 12 lowercase hex digits each.
pub fn check(s: &str) -> Result<(), String> {
    let parts: Vec<&str> = s.split('_').collect();
    let [a, b, c] = parts[..] else {
        return Err(format!("{s:?} is not a JA4 fingerprint (a_b_c, e.g. t13d1516h2_8daaf6152771_e5627efa2ab1)"));
    };
    let ab = a.as_bytes();
    let shape = ab.len() == 10
        && matches!(ab[0], b't' | b'q' | b'd')
        && ab[1..3].iter().all(u8::is_ascii_alphanumeric)
        && matches!(ab[3], b'd' | b'i')
        && ab[4..8].iter().all(u8::is_ascii_digit)
        && ab[8..10].iter().all(u8::is_ascii_alphanumeric);
    if !shape {
        return Err(format!("{a:?}: the first part must be like t13d1516h2 (protocol, version, d/i, counts, ALPN)"));
    }
    for h in [b, c] {
        if h.len() != 12 || !h.bytes().all(|x| x.is_ascii_digit() || (b'a'..=b'f').contains(&x)) {
            return Err(format!("{h:?}: the hash parts are 12 lowercase hex digits"));
        }
    }
    Ok(())
}

/// One fingerprint per line; `#` starts a comment; blank lines skipped.
pub fn parse(text: &str) -> Result<HashSet<Box<str>>, ListError> {
    let mut set = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let entry = line.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        check(entry).map_err(|what| ListError { line: i + 1, what })?;
        set.insert(entry.into());
    }
    Ok(set)
}

/// The list as loaded from its file.
#[derive(Debug)]
pub struct Ja4Block {
    path: PathBuf,
    set: RwLock<Arc<HashSet<Box<str>>>>,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

impl Ja4Block {
    fn read(path: &std::path::Path) -> Result<HashSet<Box<str>>, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn load(path: PathBuf) -> Result<Ja4Block, String> {
        let set = Self::read(&path)?;
        Ok(Ja4Block {
            path,
            set: RwLock::new(Arc::new(set)),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        })
    }

    /// Read the file again; on an error the old list stays.
    pub fn reload(&self) -> Result<usize, String> {
        match Self::read(&self.path) {
            Ok(set) => {
                let n = set.len();
                *self.set.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    pub fn contains(&self, ja4: &str) -> bool {
        self.set.read().unwrap_or_else(PoisonError::into_inner).contains(ja4)
    }

    pub fn len(&self) -> usize {
        self.set.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One row of [`Ja4Stats::top`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ja4Row {
    pub ja4: String,
    /// ClientHellos with this fingerprint.
    pub handshakes: u64,
    /// Of those, refused (`--block-ja4`, or a handshake limit).
    pub refused: u64,
}

/// ClientHellos by fingerprint (one lock per hello: a hello costs a
/// handshake's crypto, far more than the lock).
#[derive(Debug, Default)]
pub struct Ja4Stats {
    seen: Mutex<HashMap<Box<str>, (u64, u64)>>,
    /// Hellos of fingerprints not counted (over [`MAX_DISTINCT`]).
    pub uncounted: AtomicU64,
}

impl Ja4Stats {
    pub fn count(&self, ja4: &str, refused: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let full = seen.len() >= MAX_DISTINCT;
        match seen.get_mut(ja4) {
            Some(e) => *e = (e.0 + 1, e.1 + u64::from(refused)),
            None if full => {
                self.uncounted.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                seen.insert(ja4.into(), (1, u64::from(refused)));
            }
        }
    }

    /// The `n` most frequent fingerprints, most first (ties by name).
    pub fn top(&self, n: usize) -> Vec<Ja4Row> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rows: Vec<Ja4Row> =
            seen.iter().map(|(k, &(handshakes, refused))| Ja4Row { ja4: k.to_string(), handshakes, refused }).collect();
        drop(seen);
        rows.sort_unstable_by(|a, b| b.handshakes.cmp(&a.handshakes).then_with(|| a.ja4.cmp(&b.ja4)));
        rows.truncate(n);
        rows
    }

    pub fn distinct(&self) -> usize {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";

    #[test]
    fn lists_parse_with_comments_and_name_the_bad_line() {
        let set = parse(&format!("# bots\n{CHROME}  # a headless browser\n\nt12i0407h1_aaaaaaaaaaaa_000000000000\n"))
            .unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.contains(CHROME));
        for (bad, line) in [
            (format!("{CHROME}\nt13d1516h2_8daaf6152771\n"), 2),
            ("x13d1516h2_8daaf6152771_e5627efa2ab1".into(), 1),
            ("t13d1516h2_8DAAF6152771_e5627efa2ab1".into(), 1),
            ("t13x1516h2_8daaf6152771_e5627efa2ab1".into(), 1),
            ("t13d15a6h2_8daaf6152771_e5627efa2ab1".into(), 1),
            ("\n\nt13d1516h2_8daaf6152771_e5627efa2ab".into(), 3),
        ] {
            assert_eq!(parse(&bad).unwrap_err().line, line, "{bad}");
        }
    }

    #[test]
    fn every_computed_fingerprint_passes_the_check() {
        for hex in [include_str!("testdata/tls12.hex"), include_str!("testdata/tls-alpn-h2.hex")] {
            let bytes: Vec<u8> = (0..hex.trim().len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex.trim()[i..i + 2], 16).unwrap())
                .collect();
            let ja4 = crate::ja4::parse(&bytes).unwrap().unwrap().ja4();
            check(&ja4).unwrap_or_else(|e| panic!("{ja4}: {e}"));
        }
    }

    #[test]
    fn stats_rank_and_cap() {
        let s = Ja4Stats::default();
        for _ in 0..3 {
            s.count(CHROME, false);
        }
        s.count("t12i0407h1_aaaaaaaaaaaa_000000000000", true);
        let top = s.top(1);
        assert_eq!(top, vec![Ja4Row { ja4: CHROME.into(), handshakes: 3, refused: 0 }]);
        assert_eq!(s.top(5)[1].refused, 1);
        for i in 0..MAX_DISTINCT + 5 {
            s.count(&format!("x{i}"), false);
        }
        assert_eq!((s.distinct(), s.uncounted.load(Ordering::Relaxed)), (MAX_DISTINCT, 7));
    }

    #[test]
    fn a_reload_keeps_the_old_list_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ja4.txt");
        std::fs::write(&f, format!("{CHROME}\n")).unwrap();
        let b = Ja4Block::load(f.clone()).unwrap();
        assert!(b.contains(CHROME));
        std::fs::write(&f, "nonsense\n").unwrap();
        let err = b.reload().unwrap_err();
        assert!(err.contains("ja4.txt: line 1"), "{err}");
        assert!(b.contains(CHROME));
        std::fs::write(&f, "# empty now\n").unwrap();
        assert_eq!(b.reload(), Ok(0));
        assert!(!b.contains(CHROME));
    }
}
