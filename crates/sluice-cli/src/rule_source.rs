//! Where a run's rules come from: `--rules FILE` or the `--drop-*`
//! shorthands, shared by `filter`, `bridge` and `compile`: flags onto
//! `sluice_policy::RuleSpec`, and the rule counters in the summaries.

use anyhow::Result;
use clap::Args;
use sluice_policy::{Loaded, RuleSpec};
use std::path::PathBuf;

/// The rules a run judges by (shared by `filter`, `bridge` and `compile`).
#[derive(Args, Debug, Clone)]
pub struct RuleArgs {
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
    #[arg(long, value_name = "CC,...", value_delimiter = ',', requires = "geo_db", value_parser = country)]
    pub drop_country: Vec<String>,
    /// Drop packets whose source is in these autonomous systems' networks
    /// (AS numbers, `4134` or `AS4134`; read from --geo-db).
    #[arg(long, value_name = "ASN,...", value_delimiter = ',', requires = "geo_db", value_parser = asn)]
    pub drop_asn: Vec<String>,
    /// A MaxMind DB file (.mmdb: GeoLite2, DB-IP, IPinfo, IPtoASN,
    /// ip-location-db) for --drop-country and --drop-asn (repeatable: a
    /// country file and an ASN file). A bridge rereads it on SIGHUP and
    /// with --watch.
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
}

impl RuleArgs {
    /// The library's plain spec of these flags.
    pub fn spec(&self) -> RuleSpec {
        RuleSpec {
            rules: self.rules.clone(),
            drop_src: self.drop_src.clone(),
            drop_dst: self.drop_dst.clone(),
            drop_any: self.drop_any.clone(),
            drop_country: self.drop_country.clone(),
            drop_asn: self.drop_asn.clone(),
            geo_db: self.geo_db.clone(),
            inner: self.inner,
            v4mapped: self.v4mapped,
            lenient: self.lenient,
            no_front_filter: self.no_front_filter,
            feed_sets: Vec::new(),
        }
    }

    /// Load the rules (see [`RuleSpec::load`]) and print their warnings.
    pub fn load(&self, ifaces: &[String]) -> Result<Loaded> {
        load(&self.spec(), ifaces)
    }
}

/// [`RuleSpec::load`], printing the warnings.
pub fn load(spec: &RuleSpec, ifaces: &[String]) -> Result<Loaded> {
    Ok(warned(spec.load(ifaces)?))
}

impl RuleArgs {
    /// [`RuleSpec::load_for_compile`], printing the warnings.
    pub fn load_for_compile(&self) -> Result<Loaded> {
        Ok(warned(self.spec().load_for_compile()?))
    }
}

fn warned(loaded: Loaded) -> Loaded {
    loaded.warnings.iter().for_each(|w| tracing::warn!("{w}"));
    loaded
}

/// `--drop-country`'s values, checked and in their one spelling.
fn country(s: &str) -> Result<String, String> {
    sluice_geo::Key::Country.parse_value(s)
}

/// `--drop-asn`'s values, checked and in their one spelling.
fn asn(s: &str) -> Result<String, String> {
    sluice_geo::Key::Asn.parse_value(s)
}
