//! Where a run's rules come from: a rule file (text or compiled), or lists
//! behind the `--drop-src/--drop-dst/--drop-any` shorthands. [`RuleSpec`]
//! says which; [`RuleSpec::load`] reads every file and builds the
//! [`RuleSet`], and keeps what is needed to rebuild it when list entries
//! carry a timeout ([`Expiring`]).

use sluice_engine::compiled::{self, CompiledError};
use sluice_engine::dynamic::Elements;
use sluice_engine::{CompileError, CompileOptions, Origin, RuleSet};
use sluice_rules::{
    load_list, load_rules, Depth, LineError, ListError, ParsedList, Prefix, RuleFile, RuleLoadError, SetLoadError,
    SetSource,
};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The rules a run judges by, as plain data and as the flags that give it
/// (`filter`, `bridge`, `shield`, `compile` flatten it).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSpec {
    /// A rule file (nft-flavoured: `set`, `drop`/`pass`/`count` rules,
    /// `default`; see docs/rules.md), or a file made by `sluice compile`.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["drop_src", "drop_dst", "drop_any", "drop_country", "drop_asn", "inner"]
    )]
    pub rules: Option<PathBuf>,
    /// Drop packets whose source address is in LIST (repeatable; shorthand
    /// for the rule `drop saddr @LIST`).
    #[arg(long, value_name = "LIST")]
    pub drop_src: Vec<PathBuf>,
    /// Drop packets whose destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_dst: Vec<PathBuf>,
    /// Drop packets whose source or destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_any: Vec<PathBuf>,
    /// Drop packets whose source is in these countries' networks (ISO
    /// 3166-1 alpha-2 codes, comma-separated or repeated; read from
    /// --geo-db).
    #[arg(long, value_name = "CC,...", value_delimiter = ',', requires = "geo_db",
        value_parser = |s: &str| sluice_geo::Key::Country.parse_value(s))]
    pub drop_country: Vec<String>,
    /// Drop packets whose source is in these autonomous systems' networks
    /// (AS numbers, `4134` or `AS4134`; read from --geo-db).
    #[arg(long, value_name = "ASN,...", value_delimiter = ',', requires = "geo_db",
        value_parser = |s: &str| sluice_geo::Key::Asn.parse_value(s))]
    pub drop_asn: Vec<String>,
    /// A MaxMind DB file (.mmdb: GeoLite2, DB-IP, IPinfo, IPtoASN,
    /// ip-location-db) for --drop-country and --drop-asn (repeatable: a
    /// country file and an ASN file; each read at the first field it has of
    /// `sluice_geo::Key::known_fields`). A bridge or shield rereads it on
    /// SIGHUP and with --watch.
    #[arg(long, value_name = "FILE")]
    pub geo_db: Vec<PathBuf>,
    /// The --drop-* lists match the innermost IP header of tunnelled
    /// packets (GRE, IPIP, VXLAN, Geneve, GTP-U...) instead of the outer one.
    #[arg(long)]
    pub inner: bool,
    /// Look IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) up as IPv4, so IPv4
    /// entries match them.
    #[arg(long)]
    pub v4mapped: bool,
    /// Skip malformed list lines with a warning instead of stopping.
    #[arg(long)]
    pub lenient: bool,
    /// Build host tables without their front filters (10 bits per host,
    /// cache-resident; they answer "not listed" without touching the
    /// table). A compiled file keeps what it was compiled with.
    #[arg(long)]
    pub no_front_filter: bool,
    /// Dynamic sets a feed fills (CrowdSec): a rule file must define each
    /// as `set NAME dynamic`; with the shorthands (or no rules) each is
    /// added, its sources dropped.
    #[arg(skip)]
    pub feed_sets: Vec<String>,
}

/// A list in force and how many entries it had when last loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntries {
    /// `set NAME` for a rule file's set, `drop-src`/`drop-dst`/`drop-any`
    /// for a shorthand list.
    pub kind: String,
    pub path: String,
    pub entries: u64,
    /// A geo set's (or `--drop-country`'s) database and what it selected.
    pub geo: Option<sluice_geo::GeoInfo>,
}

/// The sum of the lists' entries.
pub fn total_entries(lists: &[ListEntries]) -> u64 {
    lists.iter().map(|l| l.entries).sum()
}

/// "kind path: n, ..." for log lines.
pub fn describe(lists: &[ListEntries]) -> String {
    lists.iter().map(|l| format!("{} {}: {}", l.kind, l.path, l.entries)).collect::<Vec<_>>().join(", ")
}

/// The `path` of a dynamic set's [`ListEntries`]: it has no file.
pub const DYNAMIC_PATH: &str = "(dynamic)";

/// A built rule set and what went into it.
pub struct Loaded {
    pub rules: RuleSet,
    pub lists: Vec<ListEntries>,
    pub took: Duration,
    /// When some list entries carry a timeout: what rebuilds the rules as
    /// they expire.
    pub expiry: Option<Expiring>,
    /// What the caller should tell the user: lines skipped in lenient mode,
    /// rules that let every packet through.
    pub warnings: Vec<String>,
}

impl Loaded {
    /// The warnings logged (once, where the rules were loaded for a run).
    pub fn logged(self) -> Loaded {
        self.warnings.iter().for_each(|w| tracing::warn!("{w}"));
        self
    }
}

/// Why rules could not be loaded. Each variant's message names the file
/// (and line, where there is one) and says what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Rules(#[from] RuleLoadError),
    #[error(transparent)]
    Set(#[from] SetLoadError),
    #[error(transparent)]
    List(#[from] ListError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error("{path}: {error}")]
    Open { path: String, error: std::io::Error },
    /// `--drop-country`/`--drop-asn`'s databases (the error names them).
    #[error("{0}")]
    Geo(Box<sluice_geo::GeoError>),
    #[error("{path}: mapping: {error}")]
    Map { path: String, error: std::io::Error },
    #[error("{path}: a compiled rule file, refused: {error}")]
    Compiled { path: String, error: CompiledError },
    #[error(
        "{files}: {entries} list entries carry a timeout; a compiled file cannot expire them: load those lists as text"
    )]
    ExpiringInCompiled { entries: usize, files: String },
    #[error(
        "the rules have no set `{0}` for the feed to fill: define it with `set {0} dynamic` and use it, \
         e.g. `drop saddr @{0}`"
    )]
    NoFeedSet(String),
    /// The thread reading the files ended without an answer (it panicked).
    #[error("the thread reading the files ended without an answer")]
    Interrupted,
    #[error(
        "set `{0}` is filled by a feed, so it must be `set {0} dynamic` (runtime entries of a list's set \
         are dropped at every reload)"
    )]
    FeedSetNotDynamic(String),
}

/// Where a parsed list's entries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The rule file's set of this index.
    Set(usize),
    Src,
    Dst,
    Any,
}

/// What a program that runs the rules elsewhere needs: the rule file
/// (the shorthands' own for `--drop-*`), each set's entries (`sets[i]`
/// for `file.sets[i]`), what was read, and what to tell the user.
pub struct Plan {
    pub file: RuleFile,
    pub sets: Vec<Vec<Prefix>>,
    /// What gives the rule file and sets again as list entries time out
    /// ([`Expiring::plan`] with the seconds since this read).
    pub expiring: Expiring,
    pub lists: Vec<ListEntries>,
    pub warnings: Vec<String>,
}

/// The lists' live entries: per rule-file set, or per shorthand (src,
/// dst, any).
enum Entries {
    Sets(Vec<Vec<Prefix>>),
    Shorthands([Vec<Prefix>; 3]),
}

/// How the rules are built from their lists.
enum Source {
    File(RuleFile),
    Shorthand(Depth),
}

/// Lists whose entries expire (ipset `timeout`, nft `expires`), kept to
/// rebuild the rules when they do: tables are never changed in place, so an
/// expiry is a new rule set published like a reload.
pub struct Expiring {
    pub loaded_at: Instant,
    plan: Source,
    lists: Vec<(Target, ParsedList)>,
    opts: CompileOptions,
}

impl Expiring {
    /// The rules with the entries still live `elapsed` seconds after loading.
    pub fn build(&self, elapsed: u64) -> Result<RuleSet, CompileError> {
        match (&self.plan, self.entries(elapsed)) {
            (Source::File(f), Entries::Sets(sets)) => RuleSet::compile(f, &sets, &self.opts),
            (Source::Shorthand(depth), Entries::Shorthands([src, dst, any])) => {
                Ok(RuleSet::shorthand(&src, &dst, &any, *depth, &self.opts))
            }
            _ => unreachable!("entries follow the plan"),
        }
    }

    /// The rule file and each of its sets' entries still live `elapsed`
    /// seconds after loading (the shorthands as the file they stand for).
    pub fn plan(&self, elapsed: u64) -> (RuleFile, Vec<Vec<Prefix>>) {
        match (&self.plan, self.entries(elapsed)) {
            (Source::File(f), Entries::Sets(sets)) => (f.clone(), sets),
            (Source::Shorthand(depth), Entries::Shorthands(by)) => {
                let present = [!by[0].is_empty(), !by[1].is_empty(), !by[2].is_empty()];
                let file = sluice_engine::shorthand_file(present, *depth, &self.opts.feed_sets);
                let mut sets: Vec<Vec<Prefix>> = by.into_iter().filter(|l| !l.is_empty()).collect();
                sets.extend(self.opts.feed_sets.iter().map(|_| Vec::new()));
                (file, sets)
            }
            _ => unreachable!("entries follow the plan"),
        }
    }

    /// The lists' entries still live `elapsed` seconds after loading, by
    /// where they go.
    fn entries(&self, elapsed: u64) -> Entries {
        let live = |list: &ParsedList| {
            if list.timeouts.is_empty() {
                list.prefixes.clone()
            } else {
                list.live_after(elapsed)
            }
        };
        match &self.plan {
            Source::File(f) => {
                let mut sets: Vec<Vec<Prefix>> = vec![Vec::new(); f.sets.len()];
                for (t, list) in &self.lists {
                    if let Target::Set(i) = t {
                        sets[*i].extend(live(list));
                    }
                }
                Entries::Sets(sets)
            }
            Source::Shorthand(_) => {
                let mut by: [Vec<Prefix>; 3] = Default::default();
                for (t, list) in &self.lists {
                    match t {
                        Target::Src => by[0].extend(live(list)),
                        Target::Dst => by[1].extend(live(list)),
                        Target::Any => by[2].extend(live(list)),
                        Target::Set(_) => {}
                    }
                }
                Entries::Shorthands(by)
            }
        }
    }

    /// Seconds after loading of the first expiry after `elapsed`.
    pub fn next_after(&self, elapsed: u64) -> Option<u64> {
        self.lists.iter().filter_map(|(_, l)| l.next_expiry_after(elapsed)).min().map(u64::from)
    }

    /// Entries still live `elapsed` seconds after loading.
    pub fn live_entries(&self, elapsed: u64) -> usize {
        self.lists
            .iter()
            .map(|(_, l)| if l.timeouts.is_empty() { l.prefixes.len() } else { l.live_after(elapsed).len() })
            .sum()
    }

    /// Entries that carry a timeout.
    pub fn expiring_entries(&self) -> usize {
        self.lists.iter().map(|(_, l)| l.timeouts.len()).sum()
    }
}

impl Loaded {
    /// `(set, description)` of each geo set (and of `--drop-country`/
    /// `--drop-asn`, whose networks are `drop-src`'s): what a compiled
    /// file keeps for `inspect`.
    pub fn geo_notes(&self) -> Vec<(String, String)> {
        self.lists
            .iter()
            .filter_map(|l| {
                let set = l.kind.strip_prefix("set ").unwrap_or("drop-src").to_owned();
                l.geo.as_ref().map(|g| (set, g.describe()))
            })
            .collect()
    }
}

impl RuleSpec {
    /// Whether any rule source was given.
    pub fn given(&self) -> bool {
        self.rules.is_some()
            || !self.drop_src.is_empty()
            || !self.drop_dst.is_empty()
            || !self.drop_any.is_empty()
            || !self.drop_country.is_empty()
            || !self.drop_asn.is_empty()
    }

    /// The files a reload should watch: the rule file and the lists it
    /// names (as of now), or the shorthand lists.
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.rules {
            Some(path) => {
                let mut v = vec![path.clone()];
                if let Ok(f) = load_rules(path) {
                    v.extend(f.sets.iter().filter_map(|s| match &s.source {
                        SetSource::File(p) | SetSource::Geo { db: p, .. } => Some(p.clone()),
                        SetSource::Inline(_) | SetSource::Dynamic { .. } => None,
                    }));
                }
                v
            }
            None => {
                self.drop_src.iter().chain(&self.drop_dst).chain(&self.drop_any).chain(&self.geo_db).cloned().collect()
            }
        }
    }

    fn options(&self, ifaces: &[String]) -> CompileOptions {
        CompileOptions {
            v4mapped: self.v4mapped,
            ifaces: ifaces.to_vec(),
            no_front_filter: self.no_front_filter,
            feed_sets: self.feed_sets.clone(),
        }
    }

    /// Parse every file and build the rule set; `ifaces` names the live
    /// ports for `iface` matches (empty for files). A bad line or a missing
    /// file is an error naming file:line, and nothing is built.
    pub fn load(&self, ifaces: &[String]) -> Result<Loaded, LoadError> {
        let loaded = self.load_unchecked(ifaces)?;
        for name in &self.feed_sets {
            let i = loaded.rules.named_index(name).ok_or_else(|| LoadError::NoFeedSet(name.clone()))?;
            if !matches!(loaded.rules.named_set_info()[i].kind, sluice_engine::SetKind::Dynamic { .. }) {
                return Err(LoadError::FeedSetNotDynamic(name.clone()));
            }
        }
        Ok(loaded)
    }

    fn load_unchecked(&self, ifaces: &[String]) -> Result<Loaded, LoadError> {
        let started = Instant::now();
        let opts = self.options(ifaces);
        if let Some(path) = self.rules.as_deref().filter(|p| is_compiled_file(p)) {
            let (rules, lists) = load_compiled(path, &opts)?;
            return Ok(Loaded { rules, lists, took: started.elapsed(), expiry: None, warnings: Vec::new() });
        }
        let (mut expiring, entries, mut warnings) = self.read(started, opts)?;
        let rules = expiring.build(0)?;
        if !self.given() && self.feed_sets.is_empty() {
            warnings.push("no rules given (--rules or --drop-*); every decodable packet passes".into());
        } else if rules.is_empty() {
            warnings.push("the rules are empty; every decodable packet passes".into());
        }
        // Keep the lists only when entries will expire.
        let expiry = if expiring.next_after(0).is_some() {
            expiring.lists.iter_mut().for_each(|(_, l)| l.skipped.clear());
            Some(expiring)
        } else {
            None
        };
        Ok(Loaded { rules, lists: entries, took: started.elapsed(), expiry, warnings })
    }

    /// The rules as a rule file and each of its sets' entries, for a
    /// program that runs them elsewhere (`sluice shield`'s kernel
    /// program): the shorthand flags become the rule file they stand for.
    /// A compiled file is refused (its lists are tables, not entries).
    pub fn load_plan(&self) -> Result<Plan, LoadError> {
        if let Some(path) = self.rules.as_deref().filter(|p| is_compiled_file(p)) {
            return Err(LoadError::Open {
                path: path.display().to_string(),
                error: std::io::Error::other(
                    "a compiled rule file holds tables, not entries: give the rule file itself",
                ),
            });
        }
        let (expiring, lists, mut warnings) = self.read(Instant::now(), self.options(&[]))?;
        if !self.given() && self.feed_sets.is_empty() {
            warnings.push("no rules given (--rules or --drop-*); every decodable packet passes".into());
        }
        let (file, sets) = expiring.plan(0);
        Ok(Plan { file, sets, expiring, lists, warnings })
    }

    /// Reads every list: what builds the rules (and rebuilds them as
    /// entries expire), what was read, and the lines skipped.
    fn read(
        &self,
        started: Instant,
        opts: CompileOptions,
    ) -> Result<(Expiring, Vec<ListEntries>, Vec<String>), LoadError> {
        let mut entries = Vec::new();
        let mut lists: Vec<(Target, ParsedList)> = Vec::new();
        let plan = match &self.rules {
            Some(path) => {
                let file = load_rules(path)?;
                for (i, (def, list)) in file.sets.iter().zip(file.load_sets(self.lenient)?).enumerate() {
                    let path = match &def.source {
                        SetSource::File(p) | SetSource::Geo { db: p, .. } => p.display().to_string(),
                        SetSource::Inline(_) => "(inline)".into(),
                        SetSource::Dynamic { .. } => DYNAMIC_PATH.into(),
                    };
                    entries.push(ListEntries {
                        kind: format!("set {}", def.name),
                        path,
                        entries: list.prefixes.len() as u64,
                        geo: list.geo.clone(),
                    });
                    lists.push((Target::Set(i), list));
                }
                Source::File(file)
            }
            None => {
                for (target, kind, paths) in [
                    (Target::Src, "drop-src", &self.drop_src),
                    (Target::Dst, "drop-dst", &self.drop_dst),
                    (Target::Any, "drop-any", &self.drop_any),
                ] {
                    for path in paths {
                        let list = load_list(path, self.lenient)?;
                        entries.push(ListEntries {
                            kind: kind.into(),
                            path: path.display().to_string(),
                            entries: list.prefixes.len() as u64,
                            geo: None,
                        });
                        lists.push((target, list));
                    }
                }
                for (kind, list) in self.geo_shorthands()? {
                    let path = self.geo_db.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
                    let geo = list.geo.clone();
                    entries.push(ListEntries { kind: kind.into(), path, entries: list.prefixes.len() as u64, geo });
                    lists.push((Target::Src, list));
                }
                Source::Shorthand(if self.inner { Depth::Inner } else { Depth::Outer })
            }
        };
        let warnings: Vec<String> =
            lists.iter().flat_map(|(_, l)| &l.skipped).map(|s: &LineError| format!("{s} (line skipped)")).collect();
        Ok((Expiring { loaded_at: started, plan, lists, opts }, entries, warnings))
    }

    /// `drop-country` and `drop-asn`: their networks from the geo
    /// databases, as lists of sources to drop.
    fn geo_shorthands(&self) -> Result<Vec<(&'static str, ParsedList)>, LoadError> {
        let dbs: Vec<&Path> = self.geo_db.iter().map(PathBuf::as_path).collect();
        let mut out = Vec::new();
        for (kind, key, values) in [
            ("drop-country", sluice_geo::Key::Country, &self.drop_country),
            ("drop-asn", sluice_geo::Key::Asn, &self.drop_asn),
        ] {
            if values.is_empty() {
                continue;
            }
            let (n, info) = sluice_geo::select_in(&dbs, key, values).map_err(|e| LoadError::Geo(Box::new(e)))?;
            let prefixes: Vec<Prefix> = n.prefixes.iter().map(|&(a, l)| Prefix::new(a, l)).collect();
            out.push((kind, ParsedList { lines: prefixes.len(), prefixes, geo: Some(info), ..ParsedList::default() }));
        }
        Ok(out)
    }

    /// [`RuleSpec::load`] for `sluice compile`, which only builds tables:
    /// entries that expire are refused (a compiled file would keep them).
    pub fn load_for_compile(&self) -> Result<Loaded, LoadError> {
        let loaded = self.load(&[])?;
        if let Some(e) = &loaded.expiry {
            // `lists` is in the order the lists were read, as `e`'s are.
            let files: Vec<&str> = e
                .lists
                .iter()
                .zip(&loaded.lists)
                .filter(|((_, l), _)| !l.timeouts.is_empty())
                .map(|(_, entries)| entries.path.as_str())
                .collect();
            return Err(LoadError::ExpiringInCompiled { entries: e.expiring_entries(), files: files.join(", ") });
        }
        Ok(loaded)
    }
}

impl RuleSpec {
    /// The elements named set `set` of `rules` was built from, read again
    /// (its list files, or its inline prefixes), for runtime changes that
    /// need them (a delete, `list`, `test`); None for tables loaded from a
    /// compiled file, or when a list cannot be read now.
    pub fn base_elements(&self, rules: &RuleSet, set: usize) -> Option<Elements> {
        if self.rules.as_deref().is_some_and(is_compiled_file) {
            return None;
        }
        let name = &rules.named_set_info().get(set)?.name;
        let read = |paths: &[&PathBuf]| -> Option<Elements> {
            let mut e = Elements::new();
            for p in paths {
                for x in load_list(p, self.lenient).ok()?.prefixes {
                    e.insert(x);
                }
            }
            Some(e)
        };
        match rules.origin() {
            Origin::Shorthand { .. } => match name.as_str() {
                "drop-src" => {
                    let mut e = read(&self.drop_src.iter().collect::<Vec<_>>())?;
                    for (_, list) in self.geo_shorthands().ok()? {
                        for p in list.prefixes {
                            e.insert(p);
                        }
                    }
                    Some(e)
                }
                "drop-dst" => read(&self.drop_dst.iter().collect::<Vec<_>>()),
                "drop-any" => read(&self.drop_any.iter().collect::<Vec<_>>()),
                _ => None,
            },
            Origin::File { source, text } => {
                let dir = Path::new(source).parent().unwrap_or(Path::new("."));
                let file = sluice_rules::parse_rules(source, text, dir).ok()?;
                match &file.sets.get(file.set_index(name)?)?.source {
                    SetSource::File(p) => read(&[p]),
                    SetSource::Geo { db, select } => {
                        sluice_rules::load_geo(db, select).ok().map(|l| Elements::from_prefixes(&l.prefixes))
                    }
                    SetSource::Inline(p) => Some(Elements::from_prefixes(p)),
                    SetSource::Dynamic { .. } => Some(Elements::new()),
                }
            }
        }
    }
}

impl RuleSpec {
    /// For `ctl test` on a geo set of the rule file: the network its
    /// database puts `addr` in and the value there (`{"network", "country"
    /// or "asn", "database"}`), `{"network": null}` when the database has
    /// no record for it; None for any other set, or when the database
    /// cannot be read now.
    pub fn geo_lookup(&self, rules: &RuleSet, set: &str, addr: std::net::IpAddr) -> Option<serde_json::Value> {
        let Origin::File { source, text } = rules.origin() else { return self.shorthand_geo_lookup(set, addr) };
        let dir = Path::new(source).parent().unwrap_or(Path::new("."));
        let file = sluice_rules::parse_rules(source, text, dir).ok()?;
        let SetSource::Geo { db, select } = &file.sets.get(file.set_index(set)?)?.source else { return None };
        let found = sluice_geo::GeoDb::open(db).ok()?.lookup(addr, select.field()).ok()?;
        let mut v = serde_json::json!({ "database": db.display().to_string(), "network": null });
        if let Some(f) = found {
            v["network"] = format!("{}/{}", f.network.0, f.network.1).into();
            v[select.key.name()] = f.value.into();
        }
        Some(v)
    }

    /// [`RuleSpec::geo_lookup`] for `drop-src` when `--drop-country` or
    /// `--drop-asn` filled it: the address's country and ASN as the
    /// `--geo-db` files give them (the first file and field that has one),
    /// with the network of the first found.
    fn shorthand_geo_lookup(&self, set: &str, addr: std::net::IpAddr) -> Option<serde_json::Value> {
        if set != "drop-src" || (self.drop_country.is_empty() && self.drop_asn.is_empty()) {
            return None;
        }
        let dbs: Vec<String> = self.geo_db.iter().map(|p| p.display().to_string()).collect();
        let mut v = serde_json::json!({ "database": dbs.join(", "), "network": null });
        let keys = [(sluice_geo::Key::Country, &self.drop_country), (sluice_geo::Key::Asn, &self.drop_asn)];
        for (key, _) in keys.iter().filter(|(_, values)| !values.is_empty()) {
            'key: for path in &self.geo_db {
                let Ok(db) = sluice_geo::GeoDb::open(path) else { continue };
                for field in key.known_fields() {
                    let Ok(Some(f)) = db.lookup(addr, field) else { continue };
                    let Some(value) = f.value else { continue };
                    if v["network"].is_null() {
                        v["network"] = format!("{}/{}", f.network.0, f.network.1).into();
                        v["database"] = path.display().to_string().into();
                    }
                    v[key.name()] = value.into();
                    break 'key;
                }
            }
        }
        Some(v)
    }
}

fn load_compiled(path: &Path, opts: &CompileOptions) -> Result<(RuleSet, Vec<ListEntries>), LoadError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|error| LoadError::Open { path: name.clone(), error })?;
    let bytes = sluice_sets::mem::map_file(&file).map_err(|error| LoadError::Map { path: name.clone(), error })?;
    let rules = compiled::load(&bytes, opts).map_err(|error| LoadError::Compiled { path: name.clone(), error })?;
    let lists = rules
        .named_set_info()
        .iter()
        .map(|s| ListEntries {
            kind: format!("set {}", s.name),
            path: name.clone(),
            entries: s.entries as u64,
            geo: None,
        })
        .collect();
    Ok((rules, lists))
}

/// Whether `path` starts like a file `sluice compile` wrote.
fn is_compiled_file(path: &Path) -> bool {
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    compiled::is_compiled(&head[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::Verdict;
    use sluice_wire::{IpSummary, PacketSummary};

    fn drops(rules: &RuleSet, src: &str, dst: &str) -> bool {
        let ip = IpSummary { src: src.parse().unwrap(), dst: dst.parse().unwrap(), ..IpSummary::UNSPECIFIED };
        let p = PacketSummary { ip: Some(ip), ..PacketSummary::EMPTY };
        rules.evaluate_reference(&p, 60, 0, |_| {}).verdict == Verdict::Drop
    }

    #[test]
    fn entries_with_a_timeout_stop_matching_when_it_passes() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("flood.ipset");
        std::fs::write(&list, "create flood hash:ip timeout 300\nadd flood 10.0.0.1 timeout 5\nadd flood 10.0.0.2\nadd flood 10.0.0.3 timeout 9\n").unwrap();
        let spec = RuleSpec { drop_src: vec![list], ..RuleSpec::default() };
        let loaded = spec.load(&[]).unwrap();
        let d = |r: &RuleSet, a: &str| drops(r, a, "192.0.2.1");
        assert!(d(&loaded.rules, "10.0.0.1") && d(&loaded.rules, "10.0.0.2") && d(&loaded.rules, "10.0.0.3"));
        let e = loaded.expiry.expect("entries expire");
        assert_eq!(e.next_after(0), Some(5));
        let later = e.build(5).unwrap();
        assert!(!d(&later, "10.0.0.1") && d(&later, "10.0.0.2") && d(&later, "10.0.0.3"));
        assert_eq!(e.next_after(5), Some(9));
        let last = e.build(9).unwrap();
        assert!(!d(&last, "10.0.0.3") && d(&last, "10.0.0.2"));
        assert_eq!(e.next_after(9), None);
        assert_eq!(e.live_entries(9), 1);
        assert_eq!(e.expiring_entries(), 2);
        // A compiled file cannot expire entries: refused.
        assert!(matches!(spec.load_for_compile(), Err(LoadError::ExpiringInCompiled { entries: 2, .. })));
    }

    #[test]
    fn each_shorthand_list_keeps_its_side_through_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let src = write("src.ipset", "add s 10.0.0.1 timeout 5\nadd s 10.0.0.9\n");
        let dst = write("dst.txt", "10.0.0.2\n");
        let any = write("any.txt", "10.0.0.3\n");
        let spec =
            RuleSpec { drop_src: vec![src], drop_dst: vec![dst], drop_any: vec![any.clone()], ..RuleSpec::default() };
        let loaded = spec.load(&[]).unwrap();
        assert_eq!(
            loaded.lists.iter().map(|l| l.kind.as_str()).collect::<Vec<_>>(),
            ["drop-src", "drop-dst", "drop-any"]
        );
        assert_eq!(total_entries(&loaded.lists), 4);
        let e = loaded.expiry.expect("one entry expires");
        for rules in [&loaded.rules, &e.build(6).unwrap()] {
            // Source list: only as a source; destination list: only as a destination.
            assert!(drops(rules, "10.0.0.9", "192.0.2.1") && !drops(rules, "192.0.2.1", "10.0.0.9"));
            assert!(drops(rules, "192.0.2.1", "10.0.0.2") && !drops(rules, "10.0.0.2", "192.0.2.1"));
            assert!(drops(rules, "10.0.0.3", "192.0.2.1") && drops(rules, "192.0.2.1", "10.0.0.3"));
        }
        assert!(drops(&loaded.rules, "10.0.0.1", "192.0.2.1"));
        assert!(!drops(&e.build(6).unwrap(), "10.0.0.1", "192.0.2.1"));
        assert_eq!(spec.files(), [dir.path().join("src.ipset"), dir.path().join("dst.txt"), any]);
    }

    #[test]
    fn a_bad_line_names_file_and_line_and_lenient_turns_it_into_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("bad.txt");
        std::fs::write(&list, "10.0.0.1\nnot-an-address\n").unwrap();
        let spec = RuleSpec { drop_any: vec![list.clone()], ..RuleSpec::default() };
        let err = spec.load(&[]).err().expect("a bad line fails the load").to_string();
        assert!(err.contains(&format!("{}:2:", list.display())), "{err}");
        let lenient = RuleSpec { lenient: true, ..spec };
        let loaded = lenient.load(&[]).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].ends_with("(line skipped)"));
        assert_eq!(total_entries(&loaded.lists), 1);
    }

    #[test]
    fn no_rules_is_a_warning_not_an_error() {
        let loaded = RuleSpec::default().load(&[]).unwrap();
        assert!(loaded.rules.is_empty());
        assert_eq!(loaded.warnings, ["no rules given (--rules or --drop-*); every decodable packet passes"]);
    }
}
