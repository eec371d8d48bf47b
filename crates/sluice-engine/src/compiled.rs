//! Compiled rule files: a [`RuleSet`]'s built tables in a
//! [`container`](crate::container) file, so that loading skips parsing and
//! hashing tens of millions of list lines.
//!
//! Sections: `meta` (JSON: where the rules came from, the sets and their
//! kinds, options), `rules` (the rule file's text, reparsed on load: it is
//! small), and one `set.N` per named set in definition order: the
//! `AddressSet`'s tables as `AddressSet::save` wrote them, or, for a set
//! small enough to be scanned, its prefixes as text. Works on bytes; the CLI
//! reads the file.

use crate::container::{self, ContainerError, Section};
use crate::rules::{CompileError, CompileOptions, Origin, RuleSet, SavedSet, SetEntries};
use serde::{Deserialize, Serialize};
use sluice_rules::{parse_rules, Depth, Prefix, RuleError};
use sluice_sets::{AddressSet, PersistError};
use std::path::Path;

/// What the `meta` section says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledMeta {
    /// "file" or "shorthand".
    pub origin: String,
    /// The rule file's name when compiled (for messages).
    pub source: String,
    /// Shorthand lists given: src, dst, any; and whether at the inner layer.
    pub shorthand: [bool; 3],
    pub inner: bool,
    pub v4mapped: bool,
    pub sets: Vec<CompiledSet>,
    /// The sluice version that wrote it.
    pub written_by: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledSet {
    pub name: String,
    /// "table" or "small".
    pub kind: String,
    pub entries: usize,
    pub bytes: usize,
    /// A geo set's database and what it selected, as the load described
    /// it (`GeoLite2-Country built 2026-11-20: CN 8123 networks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<String>,
}

/// Why a compiled file was refused.
#[derive(Debug, thiserror::Error)]
pub enum CompiledError {
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error("no `{0}` section: not a compiled rule file, or damaged")]
    Missing(&'static str),
    #[error("the `meta` section is not valid: {0}")]
    CompiledMeta(String),
    #[error("set `{name}`: {error}")]
    Set { name: String, error: PersistError },
    #[error("set `{name}`: {why}")]
    SetText { name: String, why: String },
    #[error("the stored rules do not parse: {0}")]
    Rules(RuleError),
    #[error("the stored rules do not compile: {0}")]
    Compile(#[from] CompileError),
}

/// The file's bytes for `rules`.
pub fn save(rules: &RuleSet) -> Vec<u8> {
    save_with_notes(rules, &[])
}

/// [`save`], with `(set, description)` of the geo sets kept in the meta.
pub fn save_with_notes(rules: &RuleSet, geo: &[(String, String)]) -> Vec<u8> {
    let (origin, source, text, shorthand, inner) = match rules.origin() {
        Origin::File { source, text } => ("file", source.clone(), text.clone(), [false; 3], false),
        Origin::Shorthand { src, dst, any, inner } => {
            ("shorthand", "(flags)".to_owned(), String::new(), [*src, *dst, *any], *inner)
        }
    };
    let mut blobs = Vec::new();
    let mut sets = Vec::new();
    for (name, saved) in rules.named_sets() {
        let mut blob = Vec::new();
        let (kind, entries, bytes) = match saved {
            SavedSet::Table(s) => {
                s.save(&mut blob);
                ("table", s.len(), s.bytes())
            }
            SavedSet::Small(p) => {
                for x in &p {
                    blob.extend_from_slice(x.to_string().as_bytes());
                    blob.push(b'\n');
                }
                ("small", p.len(), blob.len())
            }
        };
        let geo: Vec<&str> = geo.iter().filter(|(set, _)| set == name).map(|(_, d)| d.as_str()).collect();
        let geo = (!geo.is_empty()).then(|| geo.join("; "));
        sets.push(CompiledSet { name: name.to_owned(), kind: kind.to_owned(), entries, bytes, geo });
        blobs.push(blob);
    }
    let meta = CompiledMeta {
        origin: origin.to_owned(),
        source,
        shorthand,
        inner,
        v4mapped: rules.v4mapped(),
        sets,
        written_by: format!("sluice {}", env!("CARGO_PKG_VERSION")),
    };
    let meta = serde_json::to_vec(&meta).expect("meta serialises");
    let names: Vec<String> = (0..blobs.len()).map(|i| format!("set.{i}")).collect();
    let mut sections = vec![Section { name: "meta", bytes: &meta }, Section { name: "rules", bytes: text.as_bytes() }];
    sections.extend(names.iter().zip(&blobs).map(|(n, b)| Section { name: n, bytes: b }));
    container::encode(&sections)
}

/// Whether `bytes` start like a compiled file (the container's magic).
pub fn is_compiled(bytes: &[u8]) -> bool {
    bytes.starts_with(&container::MAGIC)
}

/// What `sluice inspect` shows of a compiled file.
pub struct Inspected {
    pub meta: CompiledMeta,
    /// The rule file's text (empty for the shorthands).
    pub rules: String,
    /// Each section's name and size.
    pub sections: Vec<(String, usize)>,
}

/// Check the file and read its `meta` (for `sluice inspect`): the whole file
/// is verified, nothing is built.
pub fn inspect(bytes: &[u8]) -> Result<Inspected, CompiledError> {
    let sections = container::decode(bytes)?;
    let meta = meta_of(&sections)?;
    let text = section(&sections, "rules")?;
    let sizes = sections.iter().map(|s| (s.name.to_owned(), s.bytes.len())).collect();
    Ok(Inspected { meta, rules: String::from_utf8_lossy(text).into_owned(), sections: sizes })
}

/// Load a compiled file: verify it, load each set's tables as saved (no
/// hashing, no sorting), and compile the stored rules over them. `opts`
/// supplies the live ports; `v4mapped` is on if the file or `opts` says so.
pub fn load(bytes: &[u8], opts: &CompileOptions) -> Result<RuleSet, CompiledError> {
    let sections = container::decode(bytes)?;
    let meta = meta_of(&sections)?;
    let mut entries = Vec::with_capacity(meta.sets.len());
    for (i, set) in meta.sets.iter().enumerate() {
        let blob = container::find(&sections, &format!("set.{i}"))
            .ok_or_else(|| CompiledError::SetText { name: set.name.clone(), why: "its section is missing".into() })?;
        entries.push(match set.kind.as_str() {
            "table" => SetEntries::Built(Box::new(
                AddressSet::load(blob).map_err(|error| CompiledError::Set { name: set.name.clone(), error })?,
            )),
            "small" => SetEntries::List(small_set(&set.name, blob)?),
            other => return Err(CompiledError::CompiledMeta(format!("set `{}` has unknown kind `{other}`", set.name))),
        });
    }
    let opts = CompileOptions { v4mapped: opts.v4mapped || meta.v4mapped, ..opts.clone() };
    match meta.origin.as_str() {
        "file" => {
            let text = std::str::from_utf8(section(&sections, "rules")?)
                .map_err(|_| CompiledError::CompiledMeta("the stored rules are not UTF-8".into()))?;
            // List paths in the text are not read: the sets come from the file.
            let file = parse_rules(&meta.source, text, Path::new("")).map_err(CompiledError::Rules)?;
            let names: Vec<&str> = file.sets.iter().map(|s| s.name.as_str()).collect();
            let stored: Vec<&str> = meta.sets.iter().map(|s| s.name.as_str()).collect();
            if names != stored {
                return Err(CompiledError::CompiledMeta(format!(
                    "sets {stored:?} do not match the rules' sets {names:?}"
                )));
            }
            Ok(RuleSet::compile_sets(&file, entries, &opts)?)
        }
        "shorthand" => {
            let mut it = entries.into_iter();
            let lists = meta.shorthand.map(|given| if given { it.next() } else { None });
            if lists.iter().flatten().count() != meta.sets.len() {
                return Err(CompiledError::CompiledMeta("shorthand lists do not match the sets".into()));
            }
            let depth = if meta.inner { Depth::Inner } else { Depth::Outer };
            Ok(RuleSet::shorthand_sets(lists, depth, &opts))
        }
        other => Err(CompiledError::CompiledMeta(format!("unknown origin `{other}`"))),
    }
}

fn section<'a>(sections: &[Section<'a>], name: &'static str) -> Result<&'a [u8], CompiledError> {
    container::find(sections, name).ok_or(CompiledError::Missing(name))
}

fn meta_of(sections: &[Section<'_>]) -> Result<CompiledMeta, CompiledError> {
    serde_json::from_slice(section(sections, "meta")?).map_err(|e| CompiledError::CompiledMeta(e.to_string()))
}

fn small_set(name: &str, blob: &[u8]) -> Result<Vec<Prefix>, CompiledError> {
    let text =
        std::str::from_utf8(blob).map_err(|_| CompiledError::SetText { name: name.into(), why: "not UTF-8".into() })?;
    text.lines()
        .map(|l| {
            l.parse::<Prefix>().map_err(|e| CompiledError::SetText { name: name.into(), why: format!("{l:?}: {e}") })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use sluice_wire::{decode, LinkType};

    fn frame(src: [u8; 4], dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[192, 0, 2, 1]);
        let mut t = vec![0u8; 20];
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 0x50;
        f.extend_from_slice(&t);
        f
    }

    fn verdicts(rules: &RuleSet) -> Vec<Verdict> {
        (0..=255u8)
            .map(|h| {
                let f = frame([10, 0, h / 16, h], u16::from(h) * 100);
                let d = decode(LinkType::ETHERNET, &f).unwrap();
                rules.evaluate_reference(&d, f.len() as u32, 0, |_| {}).verdict
            })
            .collect()
    }

    #[test]
    fn round_trip_file_and_shorthand_and_damage_refused() {
        let text = "set big from \"big.txt\"\nset few { 10.0.0.7, 10.0.3.0/24 }\npass tcp dport 0-999\ndrop saddr @big\ndrop saddr @few\ndefault pass\n";
        let file = parse_rules("t.rules", text, Path::new(".")).unwrap();
        let big: Vec<Prefix> = (0..200u32).map(|i| Prefix::V4 { addr: 0x0a00_0000 | (i * 3), len: 32 }).collect();
        let few = vec!["10.0.0.7".parse().unwrap(), "10.0.3.0/24".parse().unwrap()];
        let rules = RuleSet::compile(&file, &[big.clone(), few], &CompileOptions::default()).unwrap();
        let bytes = save(&rules);
        let back = load(&bytes, &CompileOptions::default()).unwrap();
        assert_eq!(verdicts(&back), verdicts(&rules));
        assert!(verdicts(&rules).contains(&Verdict::Drop));
        assert_eq!(back.rules(), rules.rules());
        let shown = inspect(&bytes).unwrap();
        assert_eq!(shown.meta.sets[0].kind, "table");
        assert_eq!(shown.meta.sets[1].kind, "small");
        assert_eq!(shown.rules, text);

        let sh = RuleSet::shorthand(
            &big,
            &[],
            &big,
            Depth::Inner,
            &CompileOptions { v4mapped: true, ..CompileOptions::default() },
        );
        let back = load(&save(&sh), &CompileOptions::default()).unwrap();
        assert_eq!(back.rules(), sh.rules());
        assert!(back.v4mapped());
        assert_eq!(verdicts(&back), verdicts(&sh));

        let mut flipped = bytes.clone();
        let at = bytes.len() / 2;
        flipped[at] ^= 0x40;
        assert!(load(&flipped, &CompileOptions::default()).is_err());
        assert!(load(&bytes[..bytes.len() - 1], &CompileOptions::default()).is_err());
        assert!(load(b"# a text rule file\ndrop\n", &CompileOptions::default()).is_err());
    }
}
