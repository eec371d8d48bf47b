//! A CrowdSec bouncer's flags (`bridge`, `shield`), mapped onto the
//! bouncer's config here, beside it, so each command only flattens them.

use crate::crowdsec::{ApiKey, BouncerConfig, GeoScopes, StreamFilters};
use crate::crowdsec_config::{BouncerFlags, CrowdsecFile};
use sluice_control::lapi::LapiTlsFlags;
use std::path::PathBuf;

/// Where the LAPI is (a flag, or the firewall bouncer's config), how to
/// authenticate (likewise; either gives both), which decisions, into which
/// set.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("crowdsec_lapi").multiple(true).args(["crowdsec_url", "crowdsec_config"])))]
#[command(group(
    clap::ArgGroup::new("crowdsec_creds").multiple(true).args(["crowdsec_key_file", "crowdsec_cert", "crowdsec_config"])
))]
pub struct CrowdsecFlags {
    /// Act as a CrowdSec bouncer: stream ban decisions from this Local API
    /// (http://127.0.0.1:8080, or https://...) into --crowdsec-set.
    #[arg(long, value_name = "URL", requires = "crowdsec_creds")]
    pub crowdsec_url: Option<String>,
    /// Act as a CrowdSec bouncer as CrowdSec's firewall bouncer's config
    /// says (/etc/crowdsec/bouncers/crowdsec-firewall-bouncer.yaml, with
    /// FILE.local over it): its api_url, api_key, update_frequency, TLS
    /// paths, origins, scopes, scenario filters and decision types. The
    /// --crowdsec-* flags given win over the file's keys; its firewall and
    /// log keys are ignored (one warning), an unknown key is an error.
    #[arg(long, value_name = "FILE")]
    pub crowdsec_config: Option<PathBuf>,
    #[command(flatten)]
    pub lapi_tls: LapiTlsFlags,
    /// A file holding the bouncer's API key (`cscli bouncers add NAME -o raw`).
    #[arg(long, value_name = "FILE", requires = "crowdsec_lapi", group = "crowdsec_auth")]
    pub crowdsec_key_file: Option<PathBuf>,
    /// Seconds between pulls of new and deleted decisions (default 10).
    #[arg(long, value_name = "S")]
    pub crowdsec_interval: Option<f64>,
    /// Seconds between full pulls, which repair what the stream missed.
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    pub crowdsec_resync: f64,
    /// Seconds between pushes of drops by origin to the LAPI's usage metrics (0: none).
    #[arg(long, value_name = "S", default_value_t = crate::usage::DEFAULT_METRICS_INTERVAL)]
    pub crowdsec_metrics_interval: f64,
    /// The dynamic set the decisions go into: with --rules, define it
    /// (`set crowdsec dynamic`) and use it (`drop saddr @crowdsec`); with
    /// the --drop-* shorthands or no rules, its sources are dropped.
    #[arg(long, value_name = "NAME", default_value = "crowdsec")]
    pub crowdsec_set: String,
    /// The largest answer read from the LAPI, in bytes: a larger one is
    /// refused whole (nothing applied, retried at the next pull).
    #[arg(long, value_name = "BYTES", default_value_t = crate::crowdsec::DEFAULT_MAX_ANSWER)]
    pub crowdsec_max_answer: u64,
    /// Only decisions of these origins (crowdsec, cscli, CAPI, lists, ...;
    /// comma-separated), as the LAPI filters its stream.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_origins: Vec<String>,
    /// Only decisions of these scopes (ip, range; comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scopes: Vec<String>,
    /// Only decisions whose scenario contains one of these (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scenarios_containing: Vec<String>,
    /// Only decisions whose scenario contains none of these (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scenarios_not_containing: Vec<String>,
    /// The decision types enforced as bans (comma-separated; default ban;
    /// the firewall bouncer's supported_decisions_types); others are counted.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_types: Vec<String>,
    /// The most elements --crowdsec-set holds (default 500000, unless its
    /// definition says `maxelem N`): decisions past it are refused and
    /// counted (sluice_set_refused{reason="full"}), the rest applied.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub crowdsec_maxelem: Option<u32>,
}

impl CrowdsecFlags {
    /// The bouncer these flags (and the bouncer's config file, when given)
    /// ask for, its Country and AS bans read from `geo_db`; and the feed
    /// set's `--crowdsec-maxelem`.
    pub fn bouncer(&self, geo_db: &[PathBuf]) -> anyhow::Result<(Option<BouncerConfig>, Option<u32>)> {
        let a = self.clone();
        let flags = BouncerFlags {
            url: a.crowdsec_url,
            key: a.crowdsec_key_file.map(ApiKey::File),
            tls: a.lapi_tls.lapi_tls(),
            interval: a.crowdsec_interval,
            filters: StreamFilters {
                origins: a.crowdsec_origins,
                scopes: a.crowdsec_scopes,
                scenarios_containing: a.crowdsec_scenarios_containing,
                scenarios_not_containing: a.crowdsec_scenarios_not_containing,
            },
            types: a.crowdsec_types,
            maxelem: a.crowdsec_maxelem,
            from_file: Vec::new(),
        };
        // The firewall bouncer's config fills in what the flags do not give.
        let flags = match &a.crowdsec_config {
            Some(file) => CrowdsecFile::load(file).and_then(|f| f.apply(flags)).map_err(anyhow::Error::msg)?,
            None => flags,
        };
        let maxelem = flags.maxelem;
        let metrics_interval =
            crate::usage::metrics_interval(a.crowdsec_metrics_interval).map_err(anyhow::Error::msg)?;
        let crowdsec = flags
            .bouncer(a.crowdsec_resync, &a.crowdsec_set, a.crowdsec_max_answer)
            .map_err(anyhow::Error::msg)?
            .map(|c| BouncerConfig { geo: GeoScopes::for_files(geo_db), metrics_interval, ..c });
        Ok((crowdsec, maxelem))
    }
}
