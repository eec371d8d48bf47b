//! Countries and networks (ASNs) as prefix sets, read from MaxMind DB
//! (`.mmdb`) files: GeoLite2, DB-IP Lite, IPinfo Lite, IPtoASN and the
//! ip-location-db builds of them.
//!
//! A country or an ASN is just the networks a database maps to it: [`GeoDb::networks`]
//! walks every network of the file once (the `maxminddb` crate's tree
//! iterator, aliases of the IPv4 subtree skipped) and keeps those whose
//! record holds one of the wanted values at the field path. Records are
//! shared by many networks, so each record's answer is decided once (by
//! its offset). The result is a prefix list like any other; the engine
//! builds its usual tables from it.

pub mod write;

use maxminddb::{PathElement, Reader, WithinOptions};
use serde::de::{self, Deserializer, Visitor};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

/// What a geo set selects by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// ISO 3166-1 alpha-2 country codes.
    Country,
    /// Autonomous system numbers.
    Asn,
}

impl Key {
    /// The field path GeoIP2-style databases hold this key at.
    pub fn default_field(self) -> &'static str {
        match self {
            Key::Country => "country.iso_code",
            Key::Asn => "autonomous_system_number",
        }
    }

    /// Where the databases sluice knows hold this key, in the order the
    /// shorthand flags try them: GeoIP2, DB-IP and IPtoASN's nested or
    /// named fields, then ip-location-db's and IPinfo Lite's flat ones.
    pub fn known_fields(self) -> &'static [&'static str] {
        match self {
            Key::Country => &["country.iso_code", "country_code"],
            Key::Asn => &["autonomous_system_number", "asn"],
        }
    }

    /// As written in a rule file: `country` or `asn`.
    pub fn name(self) -> &'static str {
        match self {
            Key::Country => "country",
            Key::Asn => "asn",
        }
    }

    /// A value as written (`cn`, `CN`; `4134`, `AS4134`), checked and in its
    /// one spelling (`CN`; `4134`).
    pub fn parse_value(self, text: &str) -> Result<String, String> {
        match self {
            Key::Country => {
                if text.len() == 2 && text.bytes().all(|b| b.is_ascii_alphabetic()) {
                    Ok(text.to_ascii_uppercase())
                } else {
                    Err(format!("`{text}` is not a country code (two letters, ISO 3166-1 alpha-2, like CN)"))
                }
            }
            Key::Asn => {
                let digits = text.strip_prefix("AS").or_else(|| text.strip_prefix("as")).unwrap_or(text);
                match digits.parse::<u32>() {
                    Ok(n) => Ok(n.to_string()),
                    Err(_) => Err(format!("`{text}` is not an AS number (0 to 4294967295, like 4134 or AS4134)")),
                }
            }
        }
    }
}

/// The networks a geo set holds: those whose record has one of `values`
/// at `field` (the key's default when None).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Select {
    pub key: Key,
    /// In their one spelling ([`Key::parse_value`]).
    pub values: Vec<String>,
    pub field: Option<String>,
}

impl Select {
    /// The field path in use.
    pub fn field(&self) -> &str {
        self.field.as_deref().unwrap_or(self.key.default_field())
    }
}

/// What a database says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbInfo {
    pub database_type: String,
    /// Unix time it was built.
    pub build_epoch: u64,
    pub ip_version: u16,
    pub node_count: u32,
}

/// The networks of a [`Select`], and how many each value has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Networks {
    /// Network address (host bits zero) and prefix length; IPv4 networks
    /// as IPv4.
    pub prefixes: Vec<(IpAddr, u8)>,
    /// `(value, networks)` in the order of [`Select::values`].
    pub per_value: Vec<(String, usize)>,
}

/// Where a geo set's networks came from, kept with the set for `ctl sets`
/// and `inspect`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GeoInfo {
    /// The file(s) read.
    pub database: String,
    /// The database's own name for its kind (`GeoLite2-Country`, ...).
    pub database_type: String,
    /// Unix time it was built.
    pub build_epoch: u64,
    /// `country` or `asn`.
    pub key: String,
    /// `(value, networks)` as selected.
    pub networks: Vec<(String, usize)>,
}

impl GeoInfo {
    /// `GeoLite2-Country built 2026-11-20: CN 8123, RU 9012 networks`.
    pub fn describe(&self) -> String {
        let counts: Vec<String> = self.networks.iter().map(|(v, n)| format!("{v} {n}")).collect();
        format!("{} built {}: {} networks", self.database_type, date(self.build_epoch), counts.join(", "))
    }
}

/// `YYYY-MM-DD` (UTC) of a Unix time.
pub fn date(epoch: u64) -> String {
    // Howard Hinnant's days-to-civil.
    let z = (epoch / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// An address's network in a database and the value at a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub network: (IpAddr, u8),
    /// The value at the field, as text (None: the record has none there).
    pub value: Option<String>,
}

/// A database that could not be read, or a selection it cannot answer.
/// Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    #[error("{path}: cannot open: {error}")]
    Open { path: String, error: std::io::Error },
    #[error("{path}: not a MaxMind DB file ({message})")]
    Invalid { path: String, message: String },
    #[error("{path}: reading the database: {message}")]
    Read { path: String, message: String },
    #[error("{path}: no record has a value at field `{field}` (is it this schema's? e.g. `field country_code` for ip-location-db files)")]
    NoField { path: String, field: String },
    #[error("{path}: {key} {value} has no networks at field `{field}`")]
    NoNetworks { path: String, key: &'static str, value: String, field: String },
    #[error("{read}: {key} {value} has no networks")]
    NoNetworksIn { read: String, key: &'static str, value: String },
    #[error("{files}: no record has a {key} (fields tried: {fields})")]
    NoKey { files: String, key: &'static str, fields: String },
    #[error("{path}: walking the database took over {secs} s ({records} records read); refused")]
    TooSlow { path: String, secs: u64, records: u64 },
}

/// How long one walk of a database may take. A real file walks in well
/// under that (GeoLite2 Country's 1.18M networks in 0.15 s here,
/// BENCHMARKS.md "Countries as sets"); the tree check bounds the nodes,
/// and this bounds what it cannot see: records whose data is slow to
/// decode, on a slow or loaded machine.
pub const WALK_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A walk's clock: checked every 1024 records, from the first.
struct WalkClock<'a> {
    path: &'a str,
    started: std::time::Instant,
    limit: std::time::Duration,
    records: u64,
}

impl<'a> WalkClock<'a> {
    fn new(path: &'a str, limit: std::time::Duration) -> Self {
        WalkClock { path, started: std::time::Instant::now(), limit, records: 0 }
    }

    fn tick(&mut self) -> Result<(), GeoError> {
        let n = self.records;
        self.records += 1;
        if n.is_multiple_of(1024) && self.started.elapsed() > self.limit {
            return Err(GeoError::TooSlow { path: self.path.to_owned(), secs: self.limit.as_secs(), records: n });
        }
        Ok(())
    }
}

/// An open database.
pub struct GeoDb {
    reader: Reader<Vec<u8>>,
    path: String,
    /// How long a walk may take ([`WALK_LIMIT`] unless told).
    walk_limit: std::time::Duration,
}

impl fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeoDb").field("path", &self.path).field("info", &self.info()).finish()
    }
}

impl GeoDb {
    /// Read `path` whole (the set is built once per load; the file is not
    /// kept open, so a replaced file is read anew at the next reload).
    pub fn open(path: &Path) -> Result<GeoDb, GeoError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|error| GeoError::Open { path: name.clone(), error })?;
        GeoDb::from_bytes(bytes, name)
    }

    /// A database in memory; `name` names it in errors.
    ///
    /// The search tree is checked before anything walks it
    /// ([`check_tree`]): a tree whose nodes share children (a few hundred
    /// bytes can hold 2^32 paths, and a walk of them runs for hours and
    /// grows without bound), a cycle, or a record pointing outside the data
    /// section is refused here, named, in time linear in the file. Data
    /// that does not decode is an error naming the file when a walk reads
    /// it (the crate's decoder is bounded). Not the crate's own `verify`:
    /// it refuses real files (ip-location-db's have an empty
    /// `description`), and it walks networks, not nodes, so it took the
    /// shared-node file above, after two minutes.
    pub fn from_bytes(bytes: Vec<u8>, name: String) -> Result<GeoDb, GeoError> {
        let invalid = |e: maxminddb::MaxMindDbError| GeoError::Invalid { path: name.clone(), message: e.to_string() };
        let m = Reader::from_source(&bytes[..]).map_err(invalid)?.metadata().clone();
        check_tree(&bytes, m.node_count as usize, m.record_size, m.ip_version)
            .map_err(|message| GeoError::Invalid { path: name.clone(), message })?;
        let reader = Reader::from_source(bytes).map_err(invalid)?;
        Ok(GeoDb { reader, path: name, walk_limit: WALK_LIMIT })
    }

    /// The same database with another bound on a walk's time.
    pub fn with_walk_limit(mut self, limit: std::time::Duration) -> GeoDb {
        self.walk_limit = limit;
        self
    }

    /// What [`GeoDb::networks`] of `sel` found, as kept with the set.
    pub fn geo_info(&self, sel: &Select, n: &Networks) -> GeoInfo {
        GeoInfo {
            database: self.path.clone(),
            database_type: self.info().database_type,
            build_epoch: self.info().build_epoch,
            key: sel.key.name().into(),
            networks: n.per_value.clone(),
        }
    }

    pub fn info(&self) -> DbInfo {
        let m = self.reader.metadata();
        DbInfo {
            database_type: m.database_type.clone(),
            build_epoch: m.build_epoch,
            ip_version: m.ip_version,
            node_count: m.node_count,
        }
    }

    fn read_err(&self, e: maxminddb::MaxMindDbError) -> GeoError {
        GeoError::Read { path: self.path.clone(), message: e.to_string() }
    }

    /// Every network whose record holds one of `sel.values` at its field.
    /// A field no record has, or a value no network has, is an error (a
    /// typo would otherwise build an empty set that blocks nothing).
    pub fn networks(&self, sel: &Select) -> Result<Networks, GeoError> {
        // No field given: the first of the key's known fields the records
        // have (GeoLite2's `country.iso_code`, ip-location-db's flat
        // `country_code`), as the shorthand flags read them.
        let mut found = None;
        if sel.field.is_none() {
            for field in sel.key.known_fields() {
                if let Some(n) = self.collect(&Select { field: Some((*field).to_owned()), ..sel.clone() })? {
                    found = Some((n, *field));
                    break;
                }
            }
        } else {
            found = self.collect(sel)?.map(|n| (n, sel.field()));
        }
        let Some((n, field)) = found else {
            return Err(GeoError::NoField { path: self.path.clone(), field: sel.field().to_owned() });
        };
        if let Some((value, _)) = n.per_value.iter().find(|(_, c)| *c == 0) {
            return Err(GeoError::NoNetworks {
                path: self.path.clone(),
                key: sel.key.name(),
                value: value.clone(),
                field: field.to_owned(),
            });
        }
        Ok(n)
    }

    /// The networks of `sel`, values without any included; None when no
    /// record has a value at the field.
    fn collect(&self, sel: &Select) -> Result<Option<Networks>, GeoError> {
        let field = sel.field();
        let path = path_elements(field);
        let wanted: HashMap<&str, usize> = sel.values.iter().enumerate().map(|(i, v)| (v.as_str(), i)).collect();
        let mut counts = vec![0usize; sel.values.len()];
        // Record offset -> the value's index (None: not wanted, or no value).
        let mut decided: HashMap<usize, Option<usize>> = HashMap::new();
        let mut field_seen = false;
        let mut prefixes = Vec::new();
        let iter = self.reader.networks(WithinOptions::default()).map_err(|e| self.read_err(e))?;
        let mut clock = WalkClock::new(&self.path, self.walk_limit);
        for r in iter {
            clock.tick()?;
            let r = r.map_err(|e| self.read_err(e))?;
            let Some(offset) = r.offset() else { continue };
            let hit = match decided.get(&offset) {
                Some(&h) => h,
                None => {
                    let leaf: Option<Leaf> = r.decode_path(&path).map_err(|e| self.read_err(e))?;
                    field_seen |= leaf.is_some();
                    let h = leaf.and_then(|l| l.spelled(sel.key)).and_then(|v| wanted.get(v.as_str()).copied());
                    decided.insert(offset, h);
                    h
                }
            };
            if let Some(i) = hit {
                let n = r.network().map_err(|e| self.read_err(e))?;
                prefixes.push((n.network(), n.prefix()));
                counts[i] += 1;
            }
        }
        Ok(field_seen.then(|| Networks { prefixes, per_value: sel.values.iter().cloned().zip(counts).collect() }))
    }

    /// Every value of `key` the database has at `field`, with its number of
    /// networks, most networks first (ties by value).
    pub fn values(&self, key: Key, field: &str) -> Result<Vec<(String, usize)>, GeoError> {
        let mut out: Vec<(String, usize)> = self.by_value(key, field)?.into_iter().map(|(v, n)| (v, n.len())).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// Every value of `key` at `field` with its networks, in one walk of
    /// the database (empty when no record has a value there).
    pub fn by_value(&self, key: Key, field: &str) -> Result<HashMap<String, Vec<(IpAddr, u8)>>, GeoError> {
        let path = path_elements(field);
        let mut by_offset: HashMap<usize, Option<String>> = HashMap::new();
        let mut nets: HashMap<String, Vec<(IpAddr, u8)>> = HashMap::new();
        let iter = self.reader.networks(WithinOptions::default()).map_err(|e| self.read_err(e))?;
        let mut clock = WalkClock::new(&self.path, self.walk_limit);
        for r in iter {
            clock.tick()?;
            let r = r.map_err(|e| self.read_err(e))?;
            let Some(offset) = r.offset() else { continue };
            let value = match by_offset.entry(offset) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let leaf: Option<Leaf> = r.decode_path(&path).map_err(|e| self.read_err(e))?;
                    e.insert(leaf.and_then(|l| l.spelled(key)))
                }
            };
            if let Some(v) = value {
                let n = r.network().map_err(|e| self.read_err(e))?;
                nets.entry(v.clone()).or_default().push((n.network(), n.prefix()));
            }
        }
        Ok(nets)
    }

    /// The network `addr` is in, and the value at `field`; None when the
    /// database has no record for it.
    pub fn lookup(&self, addr: IpAddr, field: &str) -> Result<Option<Found>, GeoError> {
        let r = self.reader.lookup(addr).map_err(|e| self.read_err(e))?;
        if !r.has_data() {
            return Ok(None);
        }
        let n = r.network().map_err(|e| self.read_err(e))?;
        let leaf: Option<Leaf> = r.decode_path(&path_elements(field)).map_err(|e| self.read_err(e))?;
        Ok(Some(Found { network: (n.network(), n.prefix()), value: leaf.map(|l| l.to_string()) }))
    }
}

/// The networks of `values` (countries or AS numbers) over several
/// databases, each read at the first of [`Key::known_fields`] its records
/// have (a country database and an ASN database may be given together):
/// the shorthand flags' way. A database with none of the fields adds
/// nothing; a value no database has is an error, as for one database.
pub fn select_in(dbs: &[&Path], key: Key, values: &[String]) -> Result<(Networks, GeoInfo), GeoError> {
    let mut all = Networks { prefixes: Vec::new(), per_value: values.iter().map(|v| (v.clone(), 0)).collect() };
    let mut read_at = Vec::new();
    let (mut types, mut built) = (Vec::new(), 0);
    for path in dbs {
        let db = GeoDb::open(path)?;
        for field in key.known_fields() {
            let sel = Select { key, values: values.to_vec(), field: Some((*field).to_owned()) };
            if let Some(n) = db.collect(&sel)? {
                all.prefixes.extend(n.prefixes);
                for (sum, (_, c)) in all.per_value.iter_mut().zip(n.per_value) {
                    sum.1 += c;
                }
                read_at.push(format!("{} ({field})", db.path));
                types.push(db.info().database_type);
                built = built.max(db.info().build_epoch);
                break;
            }
        }
    }
    let files = dbs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if read_at.is_empty() {
        return Err(GeoError::NoKey { files, key: key.name(), fields: key.known_fields().join(", ") });
    }
    if let Some((value, _)) = all.per_value.iter().find(|(_, c)| *c == 0) {
        return Err(GeoError::NoNetworksIn { read: read_at.join(", "), key: key.name(), value: value.clone() });
    }
    let info = GeoInfo {
        database: read_at.join(", "),
        database_type: types.join(", "),
        build_epoch: built,
        key: key.name().into(),
        networks: all.per_value.clone(),
    };
    Ok((all, info))
}

/// Every value of `key` with its networks over several databases, each
/// read once at the first of [`Key::known_fields`] its records have: for
/// a feed whose values are not known in advance (CrowdSec's Country and AS
/// bans), looked up by value afterwards in constant time.
pub fn index_in(dbs: &[&Path], key: Key) -> Result<HashMap<String, Vec<(IpAddr, u8)>>, GeoError> {
    let mut all: HashMap<String, Vec<(IpAddr, u8)>> = HashMap::new();
    for path in dbs {
        let db = GeoDb::open(path)?;
        for field in key.known_fields() {
            let nets = db.by_value(key, field)?;
            if !nets.is_empty() {
                for (v, n) in nets {
                    all.entry(v).or_default().extend(n);
                }
                break;
            }
        }
    }
    Ok(all)
}

/// The search tree checked as a tree, before anything walks it: from the
/// root, every record is a node, empty, or a pointer into the data
/// section, no path is longer than an address, and the walk visits at most
/// four times as many nodes as there are (a valid file's IPv4 subtree is
/// reached three ways in an IPv6 tree: `::/96`, `::ffff:0:0/96` and
/// `2002::/16`). Nodes that share children multiply the paths (32 nodes
/// can hold 2^32), and a walk of them is what this refuses; so is a cycle.
/// The crate's `verify` walks networks, not nodes, and takes such a file.
fn check_tree(bytes: &[u8], node_count: usize, record_size: u16, ip_version: u16) -> Result<(), String> {
    const MARKER: &[u8] = b"\xAB\xCD\xEFMaxMind.com";
    let node_bytes = usize::from(record_size) / 4;
    let tree_end = node_count.checked_mul(node_bytes).ok_or("the search tree's size overflows")?;
    let marker = bytes.windows(MARKER.len()).rposition(|w| w == MARKER).ok_or("no metadata marker")?;
    let data_len = tree_end
        .checked_add(16)
        .and_then(|start| marker.checked_sub(start))
        .ok_or("the search tree runs into the metadata")?;
    let depth_max = if ip_version == 6 { 128 } else { 32 };
    let record = |node: usize, right: bool| -> u64 {
        let b = &bytes[node * node_bytes..(node + 1) * node_bytes];
        let be = |s: &[u8]| s.iter().fold(0u64, |v, &x| v << 8 | u64::from(x));
        match (record_size, right) {
            (24, false) => be(&b[0..3]),
            (24, true) => be(&b[3..6]),
            (28, false) => u64::from(b[3] >> 4) << 24 | be(&b[0..3]),
            (28, true) => u64::from(b[3] & 0x0f) << 24 | be(&b[4..7]),
            (_, false) => be(&b[0..4]),
            (_, true) => be(&b[4..8]),
        }
    };
    let cap = node_count.saturating_mul(4).saturating_add(64);
    let (mut visits, mut stack) = (0usize, vec![(0usize, 0u32)]);
    while let Some((node, depth)) = stack.pop() {
        visits += 1;
        if visits > cap {
            return Err(format!(
                "the search tree is not a tree: its {node_count} nodes share children or form a cycle (over {cap} visits); refused before it is walked"
            ));
        }
        for right in [false, true] {
            let r = record(node, right);
            let n = node_count as u64;
            if r < n {
                if depth + 1 >= depth_max {
                    return Err(format!("the search tree is deeper than an IPv{ip_version} address at node {node}"));
                }
                stack.push((r as usize, depth + 1));
            } else if r > n && r.checked_sub(n + 16).is_none_or(|off| off >= data_len as u64) {
                return Err(format!(
                    "node {node} points outside the data section ({data_len} bytes): record {r}, {node_count} nodes"
                ));
            }
        }
    }
    Ok(())
}

/// `country.iso_code` as path elements; a number is an array index
/// (`subdivisions.0.iso_code`).
fn path_elements(field: &str) -> Vec<PathElement<'_>> {
    field
        .split('.')
        .map(|p| match p.parse::<usize>() {
            Ok(i) => PathElement::Index(i),
            Err(_) => PathElement::Key(p),
        })
        .collect()
}

/// A value at a field: text or a number (anything else is a decoding
/// error: the field names a map or an array, not a value).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Leaf {
    Text(String),
    Number(u128),
}

impl Leaf {
    /// In the key's one spelling, if it is one.
    fn spelled(self, key: Key) -> Option<String> {
        match self {
            Leaf::Text(t) => key.parse_value(&t).ok(),
            Leaf::Number(n) => (key == Key::Asn).then(|| n.to_string()),
        }
    }
}

impl fmt::Display for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leaf::Text(t) => f.write_str(t),
            Leaf::Number(n) => write!(f, "{n}"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Leaf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Leaf, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Leaf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number (the field names a map or an array: name a value inside it)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Leaf, E> {
                Ok(Leaf::Text(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Leaf, E> {
                Ok(Leaf::Number(u128::from(v)))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Leaf, E> {
                Ok(Leaf::Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Leaf, E> {
                u128::try_from(v).map(Leaf::Number).map_err(|_| E::custom("a negative number"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
