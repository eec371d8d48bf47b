//! Config files: `sluice bridge --config FILE` reads a TOML file whose keys
//! are the subcommand's long flags (`iface = ["eth0", "eth1"]`,
//! `workers = 2`, `dry-run = true`) and runs as if those flags had been
//! given, with the flags of the command line overriding the file's.
//!
//! The file is turned into flags before clap parses anything, so a config
//! file and the equivalent command line are parsed by the same code and give
//! the same behaviour by construction. What only the file can get wrong is
//! checked here and reported with the file and line: an unknown key (with
//! the closest flag), a table, a list for a one-value flag, a non-boolean
//! for a switch. A bad value (`workers = "many"`) is found by clap's own
//! value parser; [`try_parse`] puts the file and line of the key in front
//! of clap's message.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Command};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use toml::{Spanned, Value};

/// The flag that names a config file; a subcommand that declares it takes one.
pub const FLAG: &str = "config";

/// A config file that cannot be used: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based; `None` when the file as a whole is the problem (unreadable).
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why the command line could not be parsed.
#[derive(Debug)]
pub enum ParseError {
    /// clap's own (including `--help` and `--version`, which are not errors).
    Clap(clap::Error),
    Config(ConfigError),
}

impl ParseError {
    /// Print the message and exit as clap does: 0 for help and version, 2 otherwise.
    pub fn exit(self) -> ! {
        match self {
            ParseError::Clap(e) => e.exit(),
            ParseError::Config(e) => {
                eprintln!("error: {e}");
                std::process::exit(2)
            }
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Clap(e) => write!(f, "{e}"),
            ParseError::Config(e) => write!(f, "{e}"),
        }
    }
}

/// A command line with its config file's flags spliced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    pub args: Vec<OsString>,
    /// The config file, when one was given.
    pub path: Option<PathBuf>,
    /// Flag name → the line of the file that gave it, for flags taken from the file.
    pub lines: BTreeMap<String, usize>,
}

/// Parse `args` (the program name first) into `T`, reading the config file
/// a subcommand's `--config FILE` names.
pub fn try_parse<T: clap::Parser>(args: impl IntoIterator<Item = OsString>) -> Result<T, ParseError> {
    let cmd = T::command();
    let expanded = expand(&cmd, args.into_iter().collect()).map_err(ParseError::Config)?;
    let matches = switches_take_a_value(cmd).try_get_matches_from(&expanded.args).map_err(|e| expanded.explain(e))?;
    T::from_arg_matches(&matches).map_err(|e| ParseError::Clap(e.format(&mut T::command())))
}

/// Every switch (`--dry-run`) also takes `=true` or `=false`, so one a
/// config file turns on can be turned off on the command line
/// (`--dry-run=false`: the command line's flag wins, and the file's key is
/// left out). Alone it still means true; a value must follow `=`, so the
/// next argument is never taken as one.
pub fn switches_take_a_value(cmd: Command) -> Command {
    let switches: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| matches!(a.get_action(), ArgAction::SetTrue))
        .map(|a| a.get_id().clone())
        .collect();
    let cmd = switches.into_iter().fold(cmd, |cmd, id| {
        cmd.mut_arg(id, |a| {
            a.action(ArgAction::Set)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .default_value("false")
                .value_parser(clap::value_parser!(bool))
                .hide_possible_values(true)
                .hide_default_value(true)
                .value_name("true|false")
        })
    });
    let subs: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    subs.into_iter().fold(cmd, |cmd, name| cmd.mut_subcommand(name, switches_take_a_value))
}

impl Expanded {
    /// Put the file and line in front of a clap error about a flag the file gave.
    pub fn explain(&self, e: clap::Error) -> ParseError {
        let Some(path) = &self.path else { return ParseError::Clap(e) };
        let flag = match e.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(s)) => flag_name(s),
            _ => None,
        };
        let line = flag.and_then(|f| self.lines.get(f).map(|&l| (f, l)));
        match (line, e.kind()) {
            (
                Some((flag, line)),
                ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::WrongNumberOfValues,
            ) => {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                ParseError::Config(ConfigError {
                    path: path.clone(),
                    line: Some(line),
                    message: format!("`{flag}`: {first}"),
                })
            }
            _ => ParseError::Clap(e),
        }
    }
}

/// `--workers <N>` or `--workers=..` → `workers`.
fn flag_name(s: &str) -> Option<&str> {
    let s = s.strip_prefix("--")?;
    Some(s.split([' ', '=']).next().unwrap_or(s))
}

/// Find the subcommand and its `--config FILE` in `args`; return the
/// arguments with the file's flags inserted right after the subcommand's
/// name (so a flag also on the command line, given later, wins; and such
/// flags are left out of the file's share, so lists are not merged either).
pub fn expand(cmd: &Command, args: Vec<OsString>) -> Result<Expanded, ConfigError> {
    let mut cmd = cmd.clone();
    cmd.build();
    let none = Expanded { args: args.clone(), path: None, lines: BTreeMap::new() };
    let Some((sub_at, sub)) = find_subcommand(&cmd, &args) else { return Ok(none) };
    if !sub.get_arguments().any(|a| a.get_long() == Some(FLAG)) {
        return Ok(none);
    }
    let rest = &args[sub_at + 1..];
    let Some(path) = config_path(rest) else { return Ok(none) };
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
        path: path.clone(),
        line: None,
        message: format!("cannot read: {e}"),
    })?;
    // Global flags count wherever they are given, before the subcommand too.
    let given: Vec<OsString> = args[1..sub_at].iter().chain(rest).cloned().collect();
    let (flags, lines) = to_flags(sub, &path, &text, &given)?;
    let mut out = args[..=sub_at].to_vec();
    out.extend(flags);
    out.extend_from_slice(rest);
    Ok(Expanded { args: out, path: Some(path), lines })
}

/// The position and definition of the subcommand named in `args`, skipping
/// the program name and global flags (and their values) before it.
fn find_subcommand<'c>(cmd: &'c Command, args: &[OsString]) -> Option<(usize, &'c Command)> {
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_str()?;
        if a == "--" {
            return None;
        }
        if let Some(long) = a.strip_prefix("--") {
            let takes =
                cmd.get_arguments().find(|x| x.get_long() == Some(long)).is_some_and(|x| x.get_action().takes_values());
            i += if takes { 2 } else { 1 };
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        return cmd.find_subcommand(a).map(|s| (i, s));
    }
    None
}

/// `--config FILE` or `--config=FILE` among a subcommand's arguments.
fn config_path(rest: &[OsString]) -> Option<PathBuf> {
    let flag = format!("--{FLAG}");
    for (i, a) in rest.iter().enumerate() {
        if a == OsStr::new("--") {
            break;
        }
        if *a == *flag {
            return rest.get(i + 1).map(PathBuf::from);
        }
        if let Some(v) = a.to_str().and_then(|s| s.strip_prefix(&format!("{flag}="))) {
            return Some(PathBuf::from(v));
        }
    }
    None
}

/// Whether the command line gives `arg` itself (long, alias or short form).
fn on_command_line(arg: &clap::Arg, rest: &[OsString]) -> bool {
    let longs: Vec<String> =
        arg.get_long().into_iter().chain(arg.get_all_aliases().unwrap_or_default()).map(String::from).collect();
    let short = arg.get_short();
    rest.iter().take_while(|a| *a != OsStr::new("--")).filter_map(|a| a.to_str()).any(|a| {
        if let Some(l) = a.strip_prefix("--") {
            let name = l.split('=').next().unwrap_or(l);
            return longs.iter().any(|x| x == name);
        }
        match (short, a.strip_prefix('-')) {
            (Some(c), Some(s)) => s.starts_with(c),
            _ => false,
        }
    })
}

type Table = BTreeMap<Spanned<String>, Spanned<Value>>;

fn to_flags(
    sub: &Command,
    path: &Path,
    text: &str,
    rest: &[OsString],
) -> Result<(Vec<OsString>, BTreeMap<String, usize>), ConfigError> {
    let line_of = |offset: usize| text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
    let err =
        |offset: usize, message: String| ConfigError { path: path.to_owned(), line: Some(line_of(offset)), message };
    let table: Table = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        err(at, format!("not valid TOML: {}", e.message()))
    })?;
    // In file order, so the flags (and any error) follow the file.
    let mut entries: Vec<(&Spanned<String>, &Spanned<Value>)> = table.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    let (mut flags, mut lines) = (Vec::new(), BTreeMap::new());
    for (key, value) in entries {
        let name = key.get_ref().as_str();
        let at = key.span().start;
        if name == FLAG {
            return Err(err(at, "`config` cannot be set in a config file".into()));
        }
        let Some(arg) = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|al| al.contains(&name)))
        else {
            let hint = closest(sub, name).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
            return Err(err(
                at,
                format!("unknown key `{name}`: `sluice {}` has no flag --{name}{hint}", sub.get_name()),
            ));
        };
        if arg.is_hide_set() && matches!(name, "help" | "version") {
            return Err(err(at, format!("`{name}` cannot be set in a config file")));
        }
        // The command line overrides the key: the same flag, or one that
        // conflicts with it (`--drop-src` given, `rules` in the file).
        if on_command_line(arg, rest) || sub.get_arg_conflicts_with(arg).iter().any(|c| on_command_line(c, rest)) {
            continue;
        }
        lines.insert(arg.get_long().unwrap_or(name).to_owned(), line_of(at));
        let flag = format!("--{}", arg.get_long().unwrap_or(name));
        let v = value.get_ref();
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => match v {
                Value::Boolean(true) => flags.push(flag.into()),
                Value::Boolean(false) => {}
                other => return Err(err(at, format!("`{name}` is a switch: give true or false, not {}", kind(other)))),
            },
            ArgAction::Count => match v {
                Value::Integer(n) if (0..=255).contains(n) => flags.extend((0..*n).map(|_| OsString::from(&flag))),
                other => return Err(err(at, format!("`{name}` counts: give a small integer, not {}", kind(other)))),
            },
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version => {
                return Err(err(at, format!("`{name}` cannot be set in a config file")));
            }
            _ => {
                let many = matches!(arg.get_action(), ArgAction::Append)
                    || arg.get_value_delimiter().is_some()
                    || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
                let values: Vec<&Value> = match v {
                    Value::Array(items) if many => items.iter().collect(),
                    Value::Array(_) => return Err(err(at, format!("`{name}` takes one value, not a list"))),
                    one => vec![one],
                };
                for item in values {
                    let s = scalar(item).ok_or_else(|| err(at, format!("`{name}`: {} is not a value", kind(item))))?;
                    flags.push(format!("{flag}={s}").into());
                }
            }
        }
    }
    Ok((flags, lines))
}

/// A scalar as the command line would spell it.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Boolean(b) => Some(b.to_string()),
        Value::Datetime(d) => Some(d.to_string()),
        Value::Array(_) | Value::Table(_) => None,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "a list",
        Value::Table(_) => "a table",
    }
}

/// The subcommand's long flag nearest to `name` (at most 3 edits), for the
/// unknown-key message.
fn closest<'c>(sub: &'c Command, name: &str) -> Option<&'c str> {
    sub.get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| *l != FLAG)
        .map(|l| (edits(l, name), l))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, l)| l)
}

/// Levenshtein distance.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, CommandFactory, Parser, Subcommand};

    #[derive(Parser, Debug, PartialEq)]
    struct Cli {
        #[arg(long, global = true, default_value = "text")]
        log_format: String,
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Subcommand, Debug, PartialEq)]
    enum Cmd {
        Run(RunArgs),
        Other {
            #[arg(long)]
            n: Option<u32>,
        },
    }

    #[derive(Args, Debug, PartialEq)]
    struct RunArgs {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long = "iface", required = true)]
        ifaces: Vec<String>,
        #[arg(long, default_value_t = 1)]
        workers: usize,
        #[arg(long, value_delimiter = ',')]
        cpus: Vec<usize>,
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        rate: Option<f64>,
        #[arg(short = 'j', long)]
        json: bool,
        #[arg(long, conflicts_with = "drop_src")]
        rules: Option<String>,
        #[arg(long)]
        drop_src: Vec<String>,
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn parse(args: &[&str]) -> Result<Cli, ParseError> {
        try_parse::<Cli>(args.iter().map(OsString::from))
    }

    fn run(c: Cli) -> RunArgs {
        match c.cmd {
            Cmd::Run(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_and_flags_give_the_same_arguments() {
        let f = file(
            "iface = [\"a\", \"b\"]\nworkers = 3\ncpus = [0, 1]\ndry-run = true\nrate = 2.5\nlog-format = \"json\"\n",
        );
        let p = f.path().to_str().unwrap();
        let from_file = parse(&["sluice", "run", "--config", p]).unwrap();
        let from_flags = parse(&[
            "sluice",
            "run",
            "--config",
            p,
            "--iface",
            "a",
            "--iface",
            "b",
            "--workers",
            "3",
            "--cpus",
            "0,1",
            "--dry-run",
            "--rate",
            "2.5",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(from_file, from_flags);
        assert_eq!(from_file.log_format, "json");
        let r = run(from_file);
        assert_eq!(
            (r.ifaces, r.workers, r.cpus, r.dry_run, r.rate),
            (vec!["a".into(), "b".into()], 3, vec![0, 1], true, Some(2.5))
        );
    }

    #[test]
    fn a_switch_the_file_turns_on_is_turned_off_on_the_command_line() {
        let f = file("iface = [\"a\", \"b\"]\ndry-run = true\njson = true\n");
        let p = f.path().to_str().unwrap();
        assert!(run(parse(&["sluice", "run", "--config", p]).unwrap()).dry_run);
        let r = run(parse(&["sluice", "run", "--config", p, "--dry-run=false", "-j=false"]).unwrap());
        assert_eq!((r.dry_run, r.json), (false, false));
        let r = run(parse(&["sluice", "run", "--iface", "a", "--dry-run", "--json=true"]).unwrap());
        assert_eq!((r.dry_run, r.json), (true, true));
        let r = run(parse(&["sluice", "run", "--iface", "a"]).unwrap());
        assert_eq!((r.dry_run, r.json), (false, false));
        // A value only after `=`: the next argument is never taken.
        let r = run(parse(&["sluice", "run", "--dry-run", "--iface", "a"]).unwrap());
        assert_eq!((r.dry_run, r.ifaces), (true, vec!["a".to_owned()]));
        assert!(parse(&["sluice", "run", "--iface", "a", "--dry-run=maybe"]).is_err());
    }

    #[test]
    fn command_line_flags_override_the_file() {
        let f = file("iface = [\"a\", \"b\"]\nworkers = 3\njson = true\n");
        let p = f.path().to_str().unwrap();
        let r = run(parse(&["sluice", "run", "--workers", "5", "--config", p, "--iface=c", "--iface", "d"]).unwrap());
        assert_eq!((r.workers, r.ifaces, r.json), (5, vec!["c".to_owned(), "d".to_owned()], true));
        // Before the subcommand, a global flag's value is not taken for the subcommand.
        let r = parse(&["sluice", "--log-format", "json", "run", "--config", p, "-j"]).unwrap();
        assert_eq!(r.log_format, "json");
        assert!(run(r).json);
    }

    #[test]
    fn the_command_line_wins_wherever_it_says_so() {
        let f = file("iface = [\"a\"]\nlog-format = \"json\"\nrules = \"edge.rules\"\nworkers = 2\n");
        let p = f.path().to_str().unwrap();
        // A global flag before the subcommand overrides the file's.
        let c = parse(&["sluice", "--log-format", "text", "run", "--config", p]).unwrap();
        assert_eq!(c.log_format, "text");
        // A flag that conflicts with a key replaces it instead of clashing.
        let r = run(parse(&["sluice", "run", "--config", p, "--drop-src", "x.txt"]).unwrap());
        assert_eq!((r.rules, r.drop_src), (None, vec!["x.txt".to_owned()]));
        assert_eq!(run(parse(&["sluice", "run", "--config", p]).unwrap()).rules.as_deref(), Some("edge.rules"));
        // A bad value on the command line is the command line's error, not the file's.
        match parse(&["sluice", "run", "--config", p, "--workers", "x"]) {
            Err(ParseError::Clap(e)) => assert_eq!(e.kind(), ErrorKind::ValueValidation),
            other => panic!("{other:?}"),
        }
    }

    fn config_err(text: &str, extra: &[&str]) -> ConfigError {
        let f = file(text);
        let p = f.path().to_str().unwrap().to_owned();
        let mut args = vec!["sluice", "run", "--config", &p];
        args.extend_from_slice(extra);
        match parse(&args) {
            Err(ParseError::Config(e)) => {
                assert_eq!(e.path, f.path());
                e
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        let e = config_err("iface = [\"a\", \"b\"]\n\nworkerz = 2\n", &[]);
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("unknown key `workerz`") && e.message.contains("did you mean `workers`"), "{e}");
        let e = config_err("iface = [\"a\", \"b\"]\nworkers = \"many\"\n", &[]);
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("`workers`") && e.message.contains("many"), "{e}");
        let e = config_err("dry-run = 1\n", &[]);
        assert_eq!(e.line, Some(1));
        assert!(e.message.contains("switch"), "{e}");
        let e = config_err("iface = [\"a\"]\nworkers = [1, 2]\n", &[]);
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("one value"), "{e}");
        let e = config_err("iface = [\"a\"]\n[table]\nx = 1\n", &[]);
        assert_eq!(e.line, Some(2));
        let e = config_err("workers = = 2\n", &[]);
        assert_eq!(e.line, Some(1));
        assert!(e.message.contains("TOML"), "{e}");
        let e = config_err("config = \"x\"\n", &[]);
        assert!(e.message.contains("cannot be set"), "{e}");
        let e = config_err("iface = [\"a\", \"b\"]\nrate = \"fast\"\n", &[]);
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn a_missing_file_is_named() {
        match parse(&["sluice", "run", "--config", "/nonexistent/x.toml"]) {
            Err(ParseError::Config(e)) => {
                assert_eq!(e.line, None);
                assert!(e.to_string().starts_with("/nonexistent/x.toml: cannot read"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn commands_without_the_flag_are_untouched() {
        let args: Vec<OsString> = ["sluice", "other", "--n", "4"].iter().map(OsString::from).collect();
        let e = expand(&Cli::command(), args.clone()).unwrap();
        assert_eq!((e.args, e.path), (args, None));
        // A bad value on the command line stays clap's error.
        assert!(matches!(parse(&["sluice", "run", "--iface", "a", "--workers", "x"]), Err(ParseError::Clap(_))));
    }

    #[test]
    fn edit_distance() {
        assert_eq!(edits("workers", "workerz"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("dry-run", "dryrun"), 1);
    }
}
