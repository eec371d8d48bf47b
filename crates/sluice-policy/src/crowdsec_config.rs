//! `--crowdsec-config FILE`: CrowdSec's firewall bouncer's own YAML config
//! (`/etc/crowdsec/bouncers/crowdsec-firewall-bouncer.yaml`) read as the
//! `--crowdsec-*` flags it stands for, so a cs-firewall-bouncer user
//! switches by pointing at the file they have.
//!
//! It is read as the bouncer reads it (`cmd/root.go`, `pkg/cfg` and
//! go-cs-bouncer's `StreamBouncer`): `FILE.local`, when there is one, over
//! it key by key (Debian's package writes `mode` and `api_key` there), then
//! `${VAR}` and `$VAR` replaced by the environment's value where it has one
//! and left as written where it does not (go-cs-lib's
//! `csstring.StrictExpand`), then the first YAML document's keys.
//!
//! Taken: `api_url`, `api_key`, `update_frequency` (a Go duration),
//! `ca_cert_path`, `cert_path`, `key_path`, `origins`, `scopes`,
//! `scenarios_containing`, `scenarios_not_containing`,
//! `supported_decisions_types`, and `ipset_size` in modes `ipset` and
//! `iptables` (there it is the set's size: `--crowdsec-maxelem`).
//! `insecure_skip_verify: true` is refused over https (the API key would go
//! to whoever answers): sluice checks the LAPI's certificate against
//! `ca_cert_path` or `--crowdsec-ca`. The bouncer's keys for its own
//! firewall, logs and process (`mode`, `nftables`, `deny_action`,
//! `log_dir`, ...) are ignored with one warning naming them; any other key
//! is an error naming the file, the line and the key.
//!
//! The flags given win over the file's keys ([`CrowdsecFile::apply`]): a
//! credential given (`--crowdsec-key-file`, or `--crowdsec-cert` with
//! `--crowdsec-key`) replaces the file's (`api_key`, or `cert_path` with
//! `key_path`) whole. The API key is never printed: a message about it
//! names its file and line.

use crate::crowdsec::{go_duration, ApiKey, BouncerConfig, StreamFilters, DEFAULT_INTERVAL};
use sluice_control::lapi::{secret_file_warning, LapiTls};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The keys taken (see the module's documentation).
const TAKEN: &[&str] = &[
    "api_url",
    "api_key",
    "update_frequency",
    "insecure_skip_verify",
    "ca_cert_path",
    "cert_path",
    "key_path",
    "origins",
    "scopes",
    "scenarios_containing",
    "scenarios_not_containing",
    "supported_decisions_types",
    "ipset_size",
];

/// The bouncer's keys (of its config today and of its past ones) that
/// configure its own firewall, logs, metrics endpoint or process: nothing
/// sluice has. `supported_decisions_type` is an old misspelling the
/// bouncer has long ignored; `retry_initial_connect` is what sluice does
/// anyway (it retries with backoff).
const IGNORED: &[&str] = &[
    "mode",
    "pid_dir",
    "piddir",
    "daemonize",
    "log_mode",
    "log_dir",
    "log_level",
    "log_compression",
    "log_max_size",
    "log_max_backups",
    "log_max_files",
    "log_max_age",
    "compress_logs",
    "disable_ipv4",
    "disable_ipv6",
    "deny_action",
    "deny_log",
    "deny_log_prefix",
    "blacklists_ipv4",
    "blacklists_ipv6",
    "ipset_type",
    "ipset_disable_timeouts",
    "iptables_chains",
    "iptables_v4_chains",
    "iptables_v6_chains",
    "iptables_add_rule_comments",
    "nftables",
    "nftables_hooks",
    "nftables_table4",
    "nftables_table6",
    "nftables_chain4",
    "nftables_chain6",
    "pf",
    "prometheus",
    "retry_initial_connect",
    "supported_decisions_type",
];

/// The largest file read: the bouncer's is about 1.5 KB.
const MAX_FILE: u64 = 1 << 20;

/// The most nodes a file may have, aliases expanded: a config has a
/// hundred; this stops a file of nested aliases from growing without bound.
const MAX_NODES: usize = 100_000;

/// A file and a line in it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct At {
    path: PathBuf,
    line: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// A value of the file and where its key is.
#[derive(Clone, Debug)]
struct Val<T> {
    v: T,
    at: At,
}

/// The firewall bouncer's config, as far as sluice takes it (see the
/// module's documentation). Its `Debug` leaves the API key out.
#[derive(Clone)]
pub struct CrowdsecFile {
    path: PathBuf,
    url: Option<Val<String>>,
    key: Option<Val<String>>,
    interval: Option<Val<f64>>,
    insecure: Option<Val<bool>>,
    ca: Option<Val<PathBuf>>,
    cert: Option<Val<PathBuf>>,
    cert_key: Option<Val<PathBuf>>,
    origins: Option<Val<Vec<String>>>,
    scopes: Option<Val<Vec<String>>>,
    scenarios_containing: Option<Val<Vec<String>>>,
    scenarios_not_containing: Option<Val<Vec<String>>>,
    types: Option<Val<Vec<String>>>,
    maxelem: Option<Val<u32>>,
    /// The keys ignored, in file order (the base file's, then the local one's).
    ignored: Vec<String>,
    /// What an ignored key's value means that sluice does otherwise.
    notes: Vec<String>,
    /// The `${NAME}`s the environment does not set (left in the text).
    undefined: BTreeSet<String>,
    /// Whether `api_key`'s line names a variable (the key is then the
    /// environment's, not the file's).
    key_from_env: bool,
}

impl fmt::Debug for CrowdsecFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrowdsecFile")
            .field("path", &self.path)
            .field("url", &self.url)
            .field("key", &self.key.as_ref().map(|k| format!("(hidden, at {})", k.at)))
            .field("interval", &self.interval)
            .field("insecure", &self.insecure)
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("cert_key", &self.cert_key)
            .field("origins", &self.origins)
            .field("scopes", &self.scopes)
            .field("scenarios_containing", &self.scenarios_containing)
            .field("scenarios_not_containing", &self.scenarios_not_containing)
            .field("types", &self.types)
            .field("maxelem", &self.maxelem)
            .field("ignored", &self.ignored)
            .finish()
    }
}

/// The `--crowdsec-*` flags of a bouncer, as given (`None` or an empty
/// list: not given), before defaults: what [`CrowdsecFile::apply`] fills
/// in and [`BouncerFlags::bouncer`] turns into a [`BouncerConfig`].
#[derive(Clone, Debug, Default)]
pub struct BouncerFlags {
    /// `--crowdsec-url`.
    pub url: Option<String>,
    /// `--crowdsec-key-file` (or the file's `api_key`).
    pub key: Option<ApiKey>,
    /// `--crowdsec-ca`, `--crowdsec-cert`, `--crowdsec-key`.
    pub tls: LapiTls,
    /// `--crowdsec-interval` in seconds (default [`DEFAULT_INTERVAL`]).
    pub interval: Option<f64>,
    /// `--crowdsec-origins`, `--crowdsec-scopes`, `--crowdsec-scenarios-*`.
    pub filters: StreamFilters,
    /// `--crowdsec-types` (default `ban`).
    pub types: Vec<String>,
    /// `--crowdsec-maxelem`.
    pub maxelem: Option<u32>,
    /// The flags whose value came from a file, each with what to call it
    /// instead in a message (`ca_cert_path (FILE:LINE)`); empty for flags.
    pub from_file: Vec<(&'static str, String)>,
}

impl BouncerFlags {
    /// The bouncer these flags describe: none without a URL and a
    /// credential (a key, or a client certificate); the defaults filled in.
    pub fn bouncer(self, resync: f64, set: &str, max_answer: u64) -> Result<Option<BouncerConfig>, String> {
        let Some(url) = self.url.as_deref() else { return Ok(None) };
        if self.key.is_none() && !self.tls.has_cert() {
            return Ok(None);
        }
        let interval = self.interval.unwrap_or(DEFAULT_INTERVAL);
        let c = BouncerConfig::with_key(url, self.key.as_ref(), &self.tls, interval, resync, set, max_answer)
            .map_err(|e| self.relabel(e))?;
        let types = if self.types.is_empty() { c.types.clone() } else { self.types.clone() };
        Ok(Some(BouncerConfig { filters: self.filters, types, ..c }))
    }

    /// A message about a flag whose value came from the file, naming the
    /// file's key and line instead.
    fn relabel(&self, e: String) -> String {
        for (flag, label) in &self.from_file {
            if let Some(rest) = e.strip_prefix(flag).filter(|r| r.starts_with(' ')) {
                return format!("{label}{rest}");
            }
        }
        e
    }
}

impl CrowdsecFile {
    /// Read `path`, and `path.local` over it when there is one, with the
    /// process's environment.
    pub fn load(path: &Path) -> Result<CrowdsecFile, String> {
        let base = read(path)?.ok_or_else(|| format!("--crowdsec-config {}: no such file", path.display()))?;
        let local_path = PathBuf::from(format!("{}.local", path.display()));
        let local = read(&local_path)?;
        let lookup = |name: &str| std::env::var(name).ok();
        CrowdsecFile::parse(path, &base, local.as_deref().map(|t| (local_path.as_path(), t)), &lookup)
    }

    /// The file's text (and its local file's), the environment given by
    /// `lookup`.
    pub fn parse(
        path: &Path,
        text: &str,
        local: Option<(&Path, &str)>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CrowdsecFile, String> {
        let mut undefined = BTreeSet::new();
        let mut keys = top_level(path, &expand(text, lookup, &mut undefined))?;
        if let Some((lpath, ltext)) = local {
            // Key by key, the local file's win, in the base's order (a
            // mapping there would be merged into the base's, but no key
            // sluice takes is one).
            for (k, v) in top_level(lpath, &expand(ltext, lookup, &mut undefined))? {
                match keys.iter_mut().find(|(b, _)| b.v == k.v) {
                    Some(old) => *old = (k, v),
                    None => keys.push((k, v)),
                }
            }
        }
        let mut f = CrowdsecFile {
            path: path.to_owned(),
            url: None,
            key: None,
            interval: None,
            insecure: None,
            ca: None,
            cert: None,
            cert_key: None,
            origins: None,
            scopes: None,
            scenarios_containing: None,
            scenarios_not_containing: None,
            types: None,
            maxelem: None,
            ignored: Vec::new(),
            notes: Vec::new(),
            undefined: BTreeSet::new(),
            key_from_env: false,
        };
        let mode = keys.iter().find(|(k, _)| k.v == "mode").and_then(|(_, v)| v.scalar()).unwrap_or("").to_owned();
        for (k, node) in &keys {
            let name = k.v.as_str();
            let at = k.at.clone();
            let v = Value { key: name, node, at: &at };
            match name {
                "api_url" => f.url = v.string()?.map(|url| Val { v: url, at: at.clone() }),
                "api_key" => f.key = v.string()?.filter(|k| !k.is_empty()).map(|key| Val { v: key, at: at.clone() }),
                "update_frequency" => f.interval = v.duration()?.map(|s| Val { v: s, at: at.clone() }),
                "insecure_skip_verify" => f.insecure = v.boolean()?.map(|b| Val { v: b, at: at.clone() }),
                "ca_cert_path" => f.ca = v.path()?,
                "cert_path" => f.cert = v.path()?,
                "key_path" => f.cert_key = v.path()?,
                "origins" => f.origins = v.list()?,
                "scopes" => f.scopes = v.list()?,
                "scenarios_containing" => f.scenarios_containing = v.list()?,
                "scenarios_not_containing" => f.scenarios_not_containing = v.list()?,
                "supported_decisions_types" => f.types = v.list()?,
                "ipset_size" if matches!(mode.as_str(), "ipset" | "iptables") => f.maxelem = v.size()?,
                _ if name == "ipset_size" || IGNORED.contains(&name) => {
                    f.ignored.push(name.to_owned());
                    let truthy = v.node.scalar().is_some_and(|s| yaml11_bool(s) == Some(true));
                    match name {
                        "mode" if v.node.scalar() == Some("dry-run") => f.notes.push(
                            "mode: dry-run enforces nothing, but sluice does (give --dry-run to only count)".into(),
                        ),
                        "disable_ipv4" | "disable_ipv6" if truthy => {
                            let family = if name == "disable_ipv4" { "IPv4" } else { "IPv6" };
                            f.notes.push(format!("{name}: true, but sluice enforces {family} bans too"));
                        }
                        _ => {}
                    }
                }
                _ => {
                    let hint = closest(name).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
                    return Err(format!(
                        "--crowdsec-config {at}: unknown key `{name}`{hint}: not a key of CrowdSec's firewall bouncer"
                    ));
                }
            }
        }
        f.undefined = undefined;
        if let Some(k) = &f.key {
            let raw = match local {
                Some((lpath, ltext)) if k.at.path == lpath => ltext,
                _ => text,
            };
            f.key_from_env = raw.lines().nth(k.at.line - 1).is_some_and(|l| l.contains('$'));
        }
        Ok(f)
    }

    /// The keys ignored (see the module's documentation), in file order.
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// The one warning the ignored keys are worth; None when there are none.
    pub fn ignored_warning(&self) -> Option<String> {
        if self.ignored.is_empty() {
            return None;
        }
        let mut w = format!(
            "--crowdsec-config {}: ignored, as they set up the firewall bouncer's own firewall, logs or process: {}",
            self.path.display(),
            self.ignored.join(", ")
        );
        for n in &self.notes {
            w += "; ";
            w += n;
        }
        Some(w)
    }

    /// `flags` with the file's values where a flag was not given (the
    /// flags win), each checked as it is taken; the ignored keys, and a
    /// file holding the API key that others can read, are warnings.
    pub fn apply(&self, flags: BouncerFlags) -> Result<BouncerFlags, String> {
        let mut out = flags.clone();
        let mut f = self.clone();
        let file = self.path.display();
        let label = |key: &str, at: &At| format!("`{key}` ({at})");
        // The URL.
        if out.url.is_none() {
            let Some(u) = &self.url else {
                return Err(format!("--crowdsec-config {file}: no `api_url` in it, and no --crowdsec-url"));
            };
            self.defined("api_url", &u.v, &u.at)?;
            if !(u.v.starts_with("http://") || u.v.starts_with("https://")) {
                return Err(format!(
                    "--crowdsec-config {}: `api_url` {:?}: expected http://HOST:PORT/ or https://HOST:PORT/",
                    u.at, u.v
                ));
            }
            out.url = Some(u.v.clone());
            out.from_file.push(("--crowdsec-url", label("api_url", &u.at)));
        }
        let url = out.url.clone().unwrap_or_default();
        let https = url.starts_with("https://");
        // The TLS keys taken, to say which one an http URL makes meaningless.
        let mut tls_taken: Vec<(&str, &At)> = Vec::new();
        // The credential: the flags' whole, or the file's.
        if flags.key.is_none() && flags.tls.cert.is_none() {
            self.credential(&mut out, &mut tls_taken)?;
        }
        if out.tls.ca.is_none() {
            if let Some(ca) = &self.ca {
                self.defined("ca_cert_path", &ca.v.to_string_lossy(), &ca.at)?;
                out.tls.ca = Some(ca.v.clone());
                out.from_file.push(("--crowdsec-ca", label("ca_cert_path", &ca.at)));
                tls_taken.push(("ca_cert_path", &ca.at));
            }
        }
        if let Some((key, at)) = tls_taken.first().filter(|_| !https) {
            return Err(format!("--crowdsec-config {at}: `{key}` is for https, but the LAPI's URL is {url}"));
        }
        match &self.insecure {
            Some(Val { v: true, at }) if https && flags.tls.ca.is_none() => {
                return Err(format!(
                    "--crowdsec-config {at}: `insecure_skip_verify: true` is refused: sluice always checks the LAPI's \
                     certificate, as the API key would go to whoever answers; set `ca_cert_path` (or --crowdsec-ca) \
                     to the CA that signed the LAPI's certificate and remove `insecure_skip_verify`"
                ));
            }
            Some(Val { v: true, .. }) => {
                f.ignored.push("insecure_skip_verify".into());
                f.notes.push(if https {
                    "insecure_skip_verify: true, but sluice checks the LAPI's certificate against --crowdsec-ca".into()
                } else {
                    format!("insecure_skip_verify: true means nothing over {url}")
                });
            }
            _ => {}
        }
        if out.interval.is_none() {
            if let Some(i) = &self.interval {
                out.interval = Some(i.v);
                out.from_file.push(("--crowdsec-interval", label("update_frequency", &i.at)));
            }
        }
        let lists = [
            (&mut out.filters.origins, &self.origins),
            (&mut out.filters.scopes, &self.scopes),
            (&mut out.filters.scenarios_containing, &self.scenarios_containing),
            (&mut out.filters.scenarios_not_containing, &self.scenarios_not_containing),
            (&mut out.types, &self.types),
        ];
        for (flag, file) in lists {
            if let (true, Some(v)) = (flag.is_empty(), file) {
                flag.clone_from(&v.v);
            }
        }
        if out.maxelem.is_none() {
            out.maxelem = self.maxelem.as_ref().map(|m| m.v);
        }
        if let Some(w) = f.ignored_warning() {
            tracing::warn!("{w}");
        }
        Ok(out)
    }

    /// The file's credential into `out` (no flag gave one): an API key, or
    /// a client certificate and its key (noted in `tls_taken`), never both.
    fn credential<'a>(
        &'a self,
        out: &mut BouncerFlags,
        tls_taken: &mut Vec<(&'static str, &'a At)>,
    ) -> Result<(), String> {
        let file = self.path.display();
        let label = |key: &str, at: &At| format!("`{key}` ({at})");
        match (&self.key, &self.cert, &self.cert_key) {
            (Some(k), Some(c), _) | (Some(k), None, Some(c)) => {
                return Err(format!(
                    "--crowdsec-config {}: `api_key` and a client certificate ({}) both given: give one (the bouncer refuses both too)",
                    k.at, c.at
                ));
            }
            (Some(k), None, None) => {
                if let Some(var) = self.undefined_in(&k.v) {
                    return Err(format!(
                        "--crowdsec-config {}: `api_key` is ${{{var}}}, which the environment does not set: \
                         put the key there (`cscli bouncers add NAME -o raw`) or in {file}.local, or set {var}",
                        k.at
                    ));
                }
                if k.v.contains(char::is_whitespace) {
                    return Err(format!(
                        "--crowdsec-config {}: `api_key` is not one API key (it has white space); \
                         `cscli bouncers add NAME -o raw` prints one",
                        k.at
                    ));
                }
                if let Some(w) = secret_file_warning("--crowdsec-config", &k.at.path).filter(|_| !self.key_from_env) {
                    tracing::warn!("{w}");
                }
                out.key = Some(ApiKey::Given { key: k.v.clone(), from: k.at.to_string() });
            }
            (None, Some(c), Some(k)) => {
                self.defined("cert_path", &c.v.to_string_lossy(), &c.at)?;
                self.defined("key_path", &k.v.to_string_lossy(), &k.at)?;
                out.tls.cert = Some(c.v.clone());
                out.tls.key = Some(k.v.clone());
                out.from_file.push(("--crowdsec-cert", label("cert_path", &c.at)));
                out.from_file.push(("--crowdsec-key", label("key_path", &k.at)));
                tls_taken.push(("cert_path", &c.at));
            }
            (None, Some(c), None) => {
                return Err(format!("--crowdsec-config {}: `cert_path` needs `key_path` (its private key)", c.at));
            }
            (None, None, Some(k)) => {
                return Err(format!("--crowdsec-config {}: `key_path` needs `cert_path` (its certificate)", k.at));
            }
            (None, None, None) => {
                return Err(format!(
                    "--crowdsec-config {file}: no `api_key`, nor `cert_path` and `key_path`, in it (nor in {file}.local), \
                     and no --crowdsec-key-file or --crowdsec-cert"
                ));
            }
        }
        Ok(())
    }

    /// The first `${NAME}` in `value` that the environment does not set.
    fn undefined_in(&self, value: &str) -> Option<&str> {
        self.undefined.iter().find(|n| value.contains(&format!("${{{n}}}"))).map(String::as_str)
    }

    /// An error when `value` (of `key`, at `at`) names a `${NAME}` the
    /// environment does not set.
    fn defined(&self, key: &str, value: &str, at: &At) -> Result<(), String> {
        match self.undefined_in(value) {
            Some(var) => {
                Err(format!("--crowdsec-config {at}: `{key}` uses ${{{var}}}, which the environment does not set"))
            }
            None => Ok(()),
        }
    }
}

/// A file's text; None when it does not exist.
fn read(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("--crowdsec-config {}: {e}", path.display())),
    };
    let mut text = String::new();
    f.take(MAX_FILE + 1).read_to_string(&mut text).map_err(|e| format!("--crowdsec-config {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("--crowdsec-config {}: over {MAX_FILE} bytes: not a bouncer's config", path.display()));
    }
    Ok(Some(text))
}

/// `${NAME}` and `$NAME` replaced by `lookup`'s value where it has one,
/// else left as written, as go-cs-lib's `csstring.StrictExpand` does
/// (the bouncer expands its whole file so before it parses it). A value
/// put in is not expanded again. The names of `${NAME}` left are added to
/// `undefined`.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>, undefined: &mut BTreeSet<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(braced) = after.strip_prefix('{') {
            if let Some(j) = braced.find('}') {
                let name = &braced[..j];
                match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        undefined.insert(name.to_owned());
                        out.push_str(&rest[i..i + 3 + j]);
                    }
                }
                rest = &braced[j + 1..];
                continue;
            }
        } else {
            let n = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            if n > 0 {
                if let Some(v) = lookup(&after[..n]) {
                    out.push_str(&v);
                    rest = &after[n..];
                    continue;
                }
            }
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    out
}

/// One value of the file: what each key takes it as.
struct Value<'a> {
    key: &'a str,
    node: &'a Node,
    at: &'a At,
}

impl Value<'_> {
    fn err(&self, what: &str) -> String {
        format!("--crowdsec-config {}: `{}`: {what}", self.at, self.key)
    }

    /// A scalar's text (as Go's yaml.v2 reads any scalar into a string
    /// field); None for null.
    fn string(&self) -> Result<Option<String>, String> {
        match &self.node.kind {
            Kind::Scalar(s, style) if is_null(s, *style) => Ok(None),
            Kind::Scalar(s, _) => Ok(Some(s.clone())),
            other => Err(self.err(&format!("expected a string, not {}", other.name()))),
        }
    }

    /// A path; None for null or empty.
    fn path(&self) -> Result<Option<Val<PathBuf>>, String> {
        let Some(s) = self.string()?.filter(|s| !s.is_empty()) else { return Ok(None) };
        Ok(Some(Val { v: PathBuf::from(s), at: self.at.clone() }))
    }

    /// A Go duration (`10s`, `1m30s`, `500ms`) in seconds, at least 50 ms.
    fn duration(&self) -> Result<Option<f64>, String> {
        let Some(s) = self.string()? else { return Ok(None) };
        match go_duration(&s) {
            Some(secs) if secs >= 0.05 => Ok(Some(secs)),
            Some(_) => Err(self.err(&format!("{s:?}: sluice pulls at most every 50ms"))),
            None => Err(self.err(&format!("{s:?} is not a Go duration (such as 10s, 1m30s or 500ms)"))),
        }
    }

    /// A boolean as YAML 1.1 (Go's yaml.v2) spells it: `true`, `yes`, `on`, ...
    fn boolean(&self) -> Result<Option<bool>, String> {
        match &self.node.kind {
            Kind::Scalar(s, style) if is_null(s, *style) => Ok(None),
            Kind::Scalar(s, TScalarStyle::Plain) if yaml11_bool(s).is_some() => Ok(yaml11_bool(s)),
            _ => Err(self.err("expected true or false")),
        }
    }

    /// A list of strings; None for null or an empty list.
    fn list(&self) -> Result<Option<Val<Vec<String>>>, String> {
        let items = match &self.node.kind {
            Kind::Scalar(s, style) if is_null(s, *style) => return Ok(None),
            Kind::Seq(items) => items,
            other => {
                return Err(self.err(&format!("expected a list (one `- item` a line, or [a, b]), not {}", other.name())))
            }
        };
        let mut v = Vec::with_capacity(items.len());
        for item in items {
            match &item.kind {
                Kind::Scalar(s, style) if !is_null(s, *style) => v.push(s.clone()),
                other => {
                    return Err(format!(
                        "--crowdsec-config {}:{}: `{}`: expected strings in the list, not {}",
                        self.at.path.display(),
                        item.line,
                        self.key,
                        other.name()
                    ))
                }
            }
        }
        Ok((!v.is_empty()).then(|| Val { v, at: self.at.clone() }))
    }

    /// A set size: a positive integer.
    fn size(&self) -> Result<Option<Val<u32>>, String> {
        let Some(s) = self.string()? else { return Ok(None) };
        match s.parse::<u32>() {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(Val { v: n, at: self.at.clone() })),
            Err(_) => Err(self.err(&format!("{s:?} is not a number of elements"))),
        }
    }
}

/// Null as YAML spells it (an empty value too).
fn is_null(s: &str, style: TScalarStyle) -> bool {
    style == TScalarStyle::Plain && matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

/// A YAML 1.1 boolean, as Go's yaml.v2 resolves a plain scalar.
fn yaml11_bool(s: &str) -> Option<bool> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// The known key nearest to a misspelt one, if one is near.
fn closest(name: &str) -> Option<&'static str> {
    TAKEN
        .iter()
        .chain(IGNORED)
        .copied()
        .map(|k| (distance(name, k), k))
        .filter(|&(d, k)| d <= 2.max(k.len() / 4))
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A node of the YAML document, with the line it starts on.
#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    line: usize,
    /// Nodes in it, itself included (to bound aliases).
    size: usize,
}

#[derive(Clone, Debug)]
enum Kind {
    Scalar(String, TScalarStyle),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Scalar(..) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// A non-null scalar's text.
    fn scalar(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar(s, style) if !is_null(s, *style) => Some(s),
            _ => None,
        }
    }
}

/// A collection being read.
enum Open {
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>, Option<Node>),
}

/// Builds the first document's tree from the parser's events.
#[derive(Default)]
struct Builder {
    open: Vec<(Open, usize, usize)>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
    /// The first error: line, message.
    error: Option<(usize, String)>,
}

impl Builder {
    fn put(&mut self, node: Node, anchor: usize) {
        self.nodes += node.size;
        if self.nodes > MAX_NODES && self.error.is_none() {
            self.error =
                Some((node.line, format!("over {MAX_NODES} values (aliases expanded): not a bouncer's config")));
        }
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.open.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some((Open::Seq(items), ..)) => items.push(node),
            Some((Open::Map(pairs, key), ..)) => match key.take() {
                None => *key = Some(node),
                Some(k) => pairs.push((k, node)),
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line();
        match ev {
            Event::Scalar(text, style, anchor, _) => {
                self.put(Node { kind: Kind::Scalar(text, style), line, size: 1 }, anchor);
            }
            Event::SequenceStart(anchor, _) => self.open.push((Open::Seq(Vec::new()), line, anchor)),
            Event::MappingStart(anchor, _) => self.open.push((Open::Map(Vec::new(), None), line, anchor)),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((open, line, anchor)) = self.open.pop() {
                    let kind = match open {
                        Open::Seq(items) => Kind::Seq(items),
                        Open::Map(pairs, _) => Kind::Map(pairs),
                    };
                    let size = 1 + match &kind {
                        Kind::Seq(items) => items.iter().map(|n| n.size).sum::<usize>(),
                        Kind::Map(pairs) => pairs.iter().map(|(k, v)| k.size + v.size).sum(),
                        Kind::Scalar(..) => 0,
                    };
                    // Its children were counted as they came.
                    self.nodes -= size - 1;
                    self.put(Node { kind, line, size }, anchor);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(n) => self.put(Node { line, ..n }, 0),
                None => self.error = Some((line, "an alias to no anchor".into())),
            },
            _ => {}
        }
    }
}

/// The top-level keys of the file's first YAML document, in file order,
/// with their values; a duplicate key is an error, as in the bouncer.
fn top_level(path: &Path, text: &str) -> Result<Vec<(Val<String>, Node)>, String> {
    let at = |line: usize| At { path: path.to_owned(), line };
    let mut b = Builder::default();
    Parser::new_from_str(text).load(&mut b, false).map_err(|e| {
        // The scanner's messages are fixed texts (one names a character):
        // no value of the file is in them.
        format!("--crowdsec-config {}: not YAML: {}", at(e.marker().line()), e.info())
    })?;
    if let Some((line, e)) = b.error {
        return Err(format!("--crowdsec-config {}: {e}", at(line)));
    }
    let pairs = match b.root {
        None => return Ok(Vec::new()),
        Some(Node { kind: Kind::Scalar(s, style), .. }) if is_null(&s, style) => return Ok(Vec::new()),
        Some(Node { kind: Kind::Map(pairs), .. }) => pairs,
        Some(n) => {
            return Err(format!(
                "--crowdsec-config {}: expected the bouncer's keys (`api_url: ...`), not {}",
                at(n.line),
                n.kind.name()
            ))
        }
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut keys = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let Kind::Scalar(name, _) = &k.kind else {
            return Err(format!("--crowdsec-config {}: a key that is {}", at(k.line), k.kind.name()));
        };
        if let Some(first) = seen.insert(name.clone(), k.line) {
            return Err(format!("--crowdsec-config {}: `{name}` given twice (first at line {first})", at(k.line)));
        }
        keys.push((Val { v: name.clone(), at: at(k.line) }, v));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    fn parse(text: &str) -> Result<CrowdsecFile, String> {
        CrowdsecFile::parse(Path::new("/etc/cs.yaml"), text, None, &env(&[]))
    }

    #[test]
    fn yaml_lines_are_one_based() {
        let keys = top_level(Path::new("f"), "a: 1\n\nb:\n  - x\n").unwrap();
        assert_eq!(keys.iter().map(|(k, _)| (k.v.as_str(), k.at.line)).collect::<Vec<_>>(), [("a", 1), ("b", 3)]);
    }

    #[test]
    fn expansion_is_strict_expand() {
        let mut undefined = BTreeSet::new();
        let lookup = env(&[("A", "1"), ("B_2", "two"), ("D", "$A")]);
        assert_eq!(
            expand("x ${A} $B_2 $B_2z ${C} $C $ $$A ${A", &lookup, &mut undefined),
            "x 1 two $B_2z ${C} $C $ $1 ${A"
        );
        assert_eq!(undefined, BTreeSet::from(["C".to_owned()]));
        assert_eq!(expand("${D}", &lookup, &mut undefined), "$A", "a value put in is not expanded again");
        assert_eq!(expand("end$", &lookup, &mut undefined), "end$");
    }

    /// The default config cs-firewall-bouncer ships, key for key (the
    /// current one from its repository's `config/crowdsec-firewall-bouncer.yaml`,
    /// and `pid_dir` and `daemonize`, which v0.0.25 as Debian 12 packages it
    /// still has), with the URL and the key its installer fills in given.
    const SHIPPED: &str = "\
mode: ${BACKEND}
pid_dir: /var/run/
update_frequency: 10s
daemonize: true
log_mode: file
log_dir: /var/log/
log_level: info
log_compression: true
log_max_size: 100
log_max_backups: 3
log_max_age: 30
api_url: http://127.0.0.1:8080/
api_key: ${API_KEY}
# commented out, as shipped:
# cert_path: /etc/crowdsec/tls/cert.pem
insecure_skip_verify: false
disable_ipv6: false
deny_action: DROP
deny_log: false
supported_decisions_types:
  - ban
blacklists_ipv4: crowdsec-blacklists
blacklists_ipv6: crowdsec6-blacklists
ipset_type: nethash
iptables_chains:
  - INPUT
iptables_add_rule_comments: true

nftables:
  ipv4:
    enabled: true
    set-only: false
    table: crowdsec
    chain: crowdsec-chain
    priority: -10
  ipv6:
    enabled: true
    set-only: false
    table: crowdsec6
    chain: crowdsec6-chain
    priority: -10

nftables_hooks:
  - input
  - forward

pf:
  anchor_name: \"\"

prometheus:
  enabled: false
  listen_addr: 127.0.0.1
  listen_port: 60601
";

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    /// The flags the file stands for, none given.
    fn applied(f: &CrowdsecFile) -> BouncerFlags {
        f.apply(BouncerFlags::default()).unwrap()
    }

    #[test]
    fn the_shipped_default_maps_onto_the_flags() {
        let lookup = env(&[("API_KEY", KEY), ("BACKEND", "nftables")]);
        let f = CrowdsecFile::parse(Path::new("/etc/cs.yaml"), SHIPPED, None, &lookup).unwrap();
        assert_eq!(
            f.ignored(),
            [
                "mode",
                "pid_dir",
                "daemonize",
                "log_mode",
                "log_dir",
                "log_level",
                "log_compression",
                "log_max_size",
                "log_max_backups",
                "log_max_age",
                "disable_ipv6",
                "deny_action",
                "deny_log",
                "blacklists_ipv4",
                "blacklists_ipv6",
                "ipset_type",
                "iptables_chains",
                "iptables_add_rule_comments",
                "nftables",
                "nftables_hooks",
                "pf",
                "prometheus"
            ]
        );
        let w = f.ignored_warning().unwrap();
        assert!(w.starts_with("--crowdsec-config /etc/cs.yaml: ignored, as they set up the firewall bouncer's own firewall, logs or process: mode, pid_dir,"), "{w}");
        assert!(!w.contains(';'), "no note for the defaults: {w}");
        let b = applied(&f);
        assert_eq!(b.url.as_deref(), Some("http://127.0.0.1:8080/"));
        assert_eq!(b.key, Some(ApiKey::Given { key: KEY.into(), from: "/etc/cs.yaml:13".into() }));
        assert_eq!(b.interval, Some(10.0));
        assert_eq!(b.types, ["ban"]);
        assert_eq!(b.filters, StreamFilters::default());
        assert_eq!(b.tls, LapiTls::default());
        assert_eq!(b.maxelem, None);
        // The same as --crowdsec-url and a key file would give.
        let c = b.bouncer(300.0, "crowdsec", 1 << 20).unwrap().unwrap();
        assert_eq!((c.url.as_str(), c.key.as_str()), ("http://127.0.0.1:8080/", KEY));
        assert_eq!(c.interval, Duration::from_secs(10));
        assert_eq!(c.types, ["ban"]);
        assert!(!format!("{c:?}").contains(KEY) && !format!("{f:?}").contains(KEY), "Debug shows the key");
    }

    use std::time::Duration;

    #[test]
    fn every_key_taken_maps_onto_its_flag() {
        let text = "\
api_url: https://lapi.example:8443/
cert_path: /etc/crowdsec/tls/cert.pem
key_path: /etc/crowdsec/tls/key.pem
ca_cert_path: /etc/crowdsec/tls/ca.crt
insecure_skip_verify: no
update_frequency: 1m30s
origins: [crowdsec, cscli]
scopes:
  - ip
  - range
scenarios_containing: [ssh, http]
scenarios_not_containing:
  - http-probing
supported_decisions_types: [ban, captcha]
mode: ipset
ipset_size: 65536
";
        let f = parse(text).unwrap();
        assert_eq!(f.ignored(), ["mode"]);
        let b = applied(&f);
        assert_eq!(b.url.as_deref(), Some("https://lapi.example:8443/"));
        assert_eq!(b.key, None);
        assert_eq!(
            b.tls,
            LapiTls {
                ca: Some("/etc/crowdsec/tls/ca.crt".into()),
                cert: Some("/etc/crowdsec/tls/cert.pem".into()),
                key: Some("/etc/crowdsec/tls/key.pem".into())
            }
        );
        assert_eq!(b.interval, Some(90.0));
        assert_eq!(
            b.filters,
            StreamFilters {
                origins: vec!["crowdsec".into(), "cscli".into()],
                scopes: vec!["ip".into(), "range".into()],
                scenarios_containing: vec!["ssh".into(), "http".into()],
                scenarios_not_containing: vec!["http-probing".into()],
            }
        );
        assert_eq!(b.types, ["ban", "captcha"]);
        assert_eq!(b.maxelem, Some(65536));
        // ipset_size is the set's size in modes ipset and iptables only.
        let f = parse("api_url: http://127.0.0.1:8080\napi_key: k\nmode: nftables\nipset_size: 65536\n").unwrap();
        assert_eq!(f.ignored(), ["mode", "ipset_size"]);
        assert_eq!(applied(&f).maxelem, None);
    }

    #[test]
    fn go_durations() {
        for (d, secs) in
            [("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5m", 90.0), ("50ms", 0.05)]
        {
            let f = parse(&format!("update_frequency: {d}\n")).unwrap();
            assert_eq!(f.interval.unwrap().v, secs, "{d}");
        }
        for (d, why) in [
            ("10", "is not a Go duration"),
            ("ten seconds", "is not a Go duration"),
            ("-5s", "sluice pulls at most every 50ms"),
            ("0", "sluice pulls at most every 50ms"),
            ("10ms", "sluice pulls at most every 50ms"),
        ] {
            let e = parse(&format!("api_url: x\nupdate_frequency: {d}\n")).unwrap_err();
            assert!(e.starts_with("--crowdsec-config /etc/cs.yaml:2: `update_frequency`: "), "{e}");
            assert!(e.contains(why), "{d}: {e}");
        }
        // No key: the default, as the bouncer's.
        let b = applied(&parse("api_url: http://127.0.0.1:8080/\napi_key: k\n").unwrap());
        assert_eq!(b.bouncer(300.0, "crowdsec", 1 << 20).unwrap().unwrap().interval, Duration::from_secs(10));
    }

    #[test]
    fn env_references_are_expanded_and_an_unset_key_is_said() {
        let text = "api_url: http://${LAPI_HOST}:8080/\napi_key: ${API_KEY}\norigins: [$ORIGIN]\n";
        let lookup = env(&[("LAPI_HOST", "10.0.0.1"), ("API_KEY", KEY), ("ORIGIN", "cscli")]);
        let f = CrowdsecFile::parse(Path::new("/etc/cs.yaml"), text, None, &lookup).unwrap();
        assert!(f.key_from_env, "a file naming the key's variable does not hold the key");
        let b = applied(&f);
        assert_eq!(b.url.as_deref(), Some("http://10.0.0.1:8080/"));
        assert!(matches!(&b.key, Some(ApiKey::Given { key, .. }) if key == KEY));
        assert_eq!(b.filters.origins, ["cscli"]);
        // Unset: left as written, as the bouncer leaves it; the key it is
        // cannot be one, so it is said.
        let f = CrowdsecFile::parse(Path::new("/etc/cs.yaml"), text, None, &env(&[("LAPI_HOST", "h")])).unwrap();
        let e = f.apply(BouncerFlags::default()).unwrap_err();
        assert!(
            e.starts_with(
                "--crowdsec-config /etc/cs.yaml:2: `api_key` is ${API_KEY}, which the environment does not set"
            ),
            "{e}"
        );
        // A key file on the command line makes the file's key moot.
        let b = f.apply(BouncerFlags { key: Some(ApiKey::File("/k".into())), ..BouncerFlags::default() }).unwrap();
        assert_eq!(b.key, Some(ApiKey::File("/k".into())));
        let e = CrowdsecFile::parse(Path::new("/etc/cs.yaml"), "api_url: ${URL}\napi_key: k\n", None, &env(&[]))
            .unwrap()
            .apply(BouncerFlags::default())
            .unwrap_err();
        assert_eq!(e, "--crowdsec-config /etc/cs.yaml:1: `api_url` uses ${URL}, which the environment does not set");
    }

    #[test]
    fn the_local_file_wins_key_by_key() {
        // Debian's package: the key and the mode in FILE.local.
        let local = format!("mode: nftables\napi_key: {KEY}\nupdate_frequency: ~\n");
        let f = CrowdsecFile::parse(
            Path::new("/etc/cs.yaml"),
            SHIPPED,
            Some((Path::new("/etc/cs.yaml.local"), &local)),
            &env(&[]),
        )
        .unwrap();
        assert!(!f.key_from_env);
        let b = applied(&f);
        assert_eq!(b.key, Some(ApiKey::Given { key: KEY.into(), from: "/etc/cs.yaml.local:2".into() }));
        assert_eq!(b.interval, None, "a null there unsets it");
        assert_eq!(f.ignored()[0], "mode", "in the base file's order");
        let e = CrowdsecFile::parse(
            Path::new("/etc/cs.yaml"),
            SHIPPED,
            Some((Path::new("/etc/cs.yaml.local"), "api_key: k\napi_kye: k\n")),
            &env(&[]),
        )
        .unwrap_err();
        assert!(e.starts_with("--crowdsec-config /etc/cs.yaml.local:2: unknown key `api_kye`"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let e = parse("api_url: http://127.0.0.1:8080/\n\n# a comment\nupdate_frequencey: 10s\n").unwrap_err();
        assert_eq!(
            e,
            "--crowdsec-config /etc/cs.yaml:4: unknown key `update_frequencey` (did you mean `update_frequency`?): \
             not a key of CrowdSec's firewall bouncer"
        );
        let e = parse("api_url: x\nfoo: 1\n").unwrap_err();
        assert_eq!(e, "--crowdsec-config /etc/cs.yaml:2: unknown key `foo`: not a key of CrowdSec's firewall bouncer");
        // Nested keys of an ignored one are the bouncer's business.
        assert!(parse("nftables:\n  ipv4:\n    whatever: 1\n").is_ok());
    }

    #[test]
    fn what_is_not_the_bouncer_config_is_said_with_its_line() {
        for (text, want) in [
            ("api_url: a\napi_url: b\n", "/etc/cs.yaml:2: `api_url` given twice (first at line 1)"),
            ("api_url: [a]\n", "/etc/cs.yaml:1: `api_url`: expected a string, not a list"),
            (
                "origins: cscli\n",
                "/etc/cs.yaml:1: `origins`: expected a list (one `- item` a line, or [a, b]), not a string",
            ),
            ("origins:\n  - a\n  - [b]\n", "/etc/cs.yaml:3: `origins`: expected strings in the list, not a list"),
            ("insecure_skip_verify: maybe\n", "/etc/cs.yaml:1: `insecure_skip_verify`: expected true or false"),
            ("- api_url\n", "/etc/cs.yaml:1: expected the bouncer's keys (`api_url: ...`), not a list"),
            ("api_url: x\n  bad: indent\n", "/etc/cs.yaml:2: not YAML: mapping values are not allowed in this context"),
            ("api_url: \"x\n", "/etc/cs.yaml:1: not YAML: while scanning a quoted scalar"),
            ("a: *nothing\n", "/etc/cs.yaml:1: "),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with(&format!("--crowdsec-config {want}")), "{text:?}: {e}");
        }
        // A file of nested aliases does not grow without bound.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..8 {
            bomb += &format!(
                "b{i}: &b{i} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                p = if i == 0 { "a".to_owned() } else { format!("b{}", i - 1) }
            );
        }
        assert!(parse(&bomb).unwrap_err().contains("over 100000 values"));
        // Empty, and comments only: no key at all.
        assert_eq!(parse("").unwrap().ignored().len(), 0);
        let e = parse("# nothing\n").unwrap().apply(BouncerFlags::default()).unwrap_err();
        assert_eq!(e, "--crowdsec-config /etc/cs.yaml: no `api_url` in it, and no --crowdsec-url");
    }

    #[test]
    fn the_key_is_never_in_a_message() {
        let secret = "s3cr3t-key-value";
        let lookup = env(&[]);
        for text in [
            format!("api_url: http://127.0.0.1:8080/\napi_key: {secret} x\n"),
            format!("api_url: http://127.0.0.1:8080/\napi_key: {secret}\ncert_path: /c\nkey_path: /k\n"),
            format!("api_url: http://127.0.0.1:8080/\napi_key: {secret}\napi_key: {secret}\n"),
            format!("api_url: http://127.0.0.1:8080/\napi_key: [{secret}]\n"),
            format!("api_url: http://127.0.0.1:8080/\napi_key: \"{secret}\n"),
            format!("api_url: http://127.0.0.1:8080/\napi_key: {secret}\n  x: y\n"),
        ] {
            let e = CrowdsecFile::parse(Path::new("/etc/cs.yaml"), &text, None, &lookup)
                .and_then(|f| f.apply(BouncerFlags::default()))
                .unwrap_err();
            assert!(!e.contains(secret), "{e}");
            assert!(e.starts_with("--crowdsec-config /etc/cs.yaml:"), "{e}");
        }
        let e = parse(&format!("api_url: http://127.0.0.1:8080/\napi_key: {secret}\n\ncert_path: /c\n"))
            .unwrap()
            .apply(BouncerFlags::default())
            .unwrap_err();
        assert_eq!(
            e,
            "--crowdsec-config /etc/cs.yaml:2: `api_key` and a client certificate (/etc/cs.yaml:4) both given: \
             give one (the bouncer refuses both too)"
        );
    }

    #[test]
    fn insecure_skip_verify_is_refused_over_https() {
        let text = "api_url: https://lapi:8443/\napi_key: k\ninsecure_skip_verify: true\n";
        let e = parse(text).unwrap().apply(BouncerFlags::default()).unwrap_err();
        assert!(e.starts_with("--crowdsec-config /etc/cs.yaml:3: `insecure_skip_verify: true` is refused"), "{e}");
        // With --crowdsec-ca it is moot: said, not refused.
        let f = parse(text).unwrap();
        let b = f
            .apply(BouncerFlags {
                tls: LapiTls { ca: Some("/ca.pem".into()), ..LapiTls::default() },
                ..BouncerFlags::default()
            })
            .unwrap();
        assert_eq!(b.tls.ca.as_deref(), Some(Path::new("/ca.pem")));
        // Over http it means nothing, as for the bouncer.
        let f = parse("api_url: http://127.0.0.1:8080/\napi_key: k\ninsecure_skip_verify: yes\n").unwrap();
        assert!(f.apply(BouncerFlags::default()).is_ok());
        // The file's TLS keys with an http URL are said.
        let e = parse("api_url: http://127.0.0.1:8080/\napi_key: k\nca_cert_path: /ca.pem\n")
            .unwrap()
            .apply(BouncerFlags::default())
            .unwrap_err();
        assert_eq!(e, "--crowdsec-config /etc/cs.yaml:3: `ca_cert_path` is for https, but the LAPI's URL is http://127.0.0.1:8080/");
    }

    #[test]
    fn notes_for_ignored_values_sluice_does_otherwise() {
        let f =
            parse("api_url: http://h/\napi_key: k\nmode: dry-run\ndisable_ipv6: true\ndisable_ipv4: false\n").unwrap();
        let w = f.ignored_warning().unwrap();
        assert!(w.ends_with(
            "mode, disable_ipv6, disable_ipv4; mode: dry-run enforces nothing, but sluice does (give --dry-run to only count); \
             disable_ipv6: true, but sluice enforces IPv6 bans too"
        ), "{w}");
        assert_eq!(parse("api_url: x\n").unwrap().ignored_warning(), None);
    }

    #[test]
    fn the_flags_given_win_over_the_file() {
        let text = "\
api_url: https://lapi:8443/
api_key: file-key
ca_cert_path: /file-ca.pem
update_frequency: 30s
origins: [crowdsec]
scopes: [ip]
supported_decisions_types: [ban, captcha]
mode: iptables
ipset_size: 1000
";
        let f = parse(text).unwrap();
        let flags = BouncerFlags {
            url: Some("https://other:8443".into()),
            key: Some(ApiKey::File("/etc/sluice/crowdsec.key".into())),
            tls: LapiTls { ca: Some("/flag-ca.pem".into()), ..LapiTls::default() },
            interval: Some(2.0),
            filters: StreamFilters { origins: vec!["cscli".into()], ..StreamFilters::default() },
            types: vec!["ban".into()],
            maxelem: Some(5000),
            from_file: Vec::new(),
        };
        let b = f.apply(flags).unwrap();
        assert_eq!(b.url.as_deref(), Some("https://other:8443"));
        assert_eq!(b.key, Some(ApiKey::File("/etc/sluice/crowdsec.key".into())));
        assert_eq!(b.tls.ca.as_deref(), Some(Path::new("/flag-ca.pem")));
        assert_eq!(b.interval, Some(2.0));
        assert_eq!(b.filters.origins, ["cscli"]);
        assert_eq!(b.filters.scopes, ["ip"], "a list not given is the file's");
        assert_eq!(b.types, ["ban"]);
        assert_eq!(b.maxelem, Some(5000));
        assert!(b.from_file.is_empty(), "{:?}", b.from_file);
        // A client certificate given replaces the file's key.
        let b = f
            .apply(BouncerFlags {
                tls: LapiTls { cert: Some("/c.pem".into()), key: Some("/k.pem".into()), ca: None },
                ..BouncerFlags::default()
            })
            .unwrap();
        assert_eq!(b.key, None);
        assert_eq!(b.tls.ca.as_deref(), Some(Path::new("/file-ca.pem")));
        // A message about a value from the file names the file's key.
        let e = b.bouncer(300.0, "crowdsec", 1 << 20).unwrap_err();
        assert!(e.starts_with("`ca_cert_path` (/etc/cs.yaml:3) /file-ca.pem: "), "{e}");
    }

    #[test]
    fn types_choose_what_is_enforced() {
        let json = r#"{"new":[{"duration":"1h","origin":"cscli","scope":"Ip","type":"ban","value":"192.0.2.1"},
                              {"duration":"1h","origin":"cscli","scope":"Ip","type":"captcha","value":"192.0.2.2"}]}"#;
        let gate = sluice_control::safety::Gate::default();
        let adds = |types: &[String]| {
            let (f, _) =
                crate::crowdsec::parse(json.as_bytes(), None, "crowdsec", false, 1 << 20, &gate, None, types).unwrap();
            f.adds.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(adds(&[]), ["192.0.2.1/32"]);
        assert_eq!(adds(&["Ban".into(), "captcha".into()]), ["192.0.2.1/32", "192.0.2.2/32"]);
        assert_eq!(adds(&["captcha".into()]), ["192.0.2.2/32"]);
    }
}
