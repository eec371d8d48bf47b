//! The control socket's language: its frame, shared by every product, and
//! the commands that cross products.
//!
//! A request is text: one command per line, as on the command line (blank
//! lines and `#` comments skipped). It is one command, or several lines of
//! changes applied as one atomic batch, like `ipset restore` or `nft -f`:
//! every line is checked first, and a bad one fails the whole batch, named
//! by its line, with nothing changed. The reply is one JSON object
//! (`"ok"`, and `"error"` with `"line"` when not).
//!
//! Each product has a command type of its own (a [`Protocol`]: the L3
//! policy's in `sluice-policy`, the guard's in `sluice-guard`). The set
//! commands ([`SetCommand`]: `add`, `del`, `flush`, `test`, `list`) are
//! spoken across products (the guard forwards its blocks to a bridge's or
//! a shield's socket as `add` lines): they are typed here, encoded by
//! `Display` and parsed by [`SetCommand::parse`], the one place for both.

use sluice_rules::Prefix;
use std::net::IpAddr;

/// What a peer of the control socket may do. Root and the socket's owner
/// may do everything; a member of `--control-group` too; a member of
/// `--control-add-group` only what a guard forwarding its blocks needs
/// (add an element, test an address, list a set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// `add`, `test`, `list` (and a guard's `block`).
    Add,
    /// Everything.
    Admin,
}

impl Role {
    /// How a refusal names it.
    pub fn flag(self) -> &'static str {
        match self {
            Role::Add => "--control-add-group",
            Role::Admin => "--control-group",
        }
    }
}

/// A product's command type: how a line parses and what it may do.
pub trait Protocol: Sized + Send + 'static {
    /// One line; `Ok(None)` for a blank line or a comment; `Err` says what
    /// was wrong (without the line number).
    fn parse_line(line: &str) -> Result<Option<Self>, String>;
    /// The word it is spelled with (a refusal names it so).
    fn name(&self) -> &'static str;
    /// Whether it changes state and so may be batched with others.
    fn batchable(&self) -> bool;
    /// The least role that may send it.
    fn role(&self) -> Role;
}

/// A request that could not be read or may not be run: its line (1-based;
/// 0 for the request as a whole) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CtlError {
    pub line: usize,
    pub message: String,
}

/// A whole request: one command, or a batch of changes (with their lines).
pub fn parse_request<C: Protocol>(text: &str) -> Result<Vec<(usize, C)>, CtlError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match C::parse_line(line) {
            Ok(Some(c)) => out.push((i + 1, c)),
            Ok(None) => {}
            Err(message) => return Err(CtlError { line: i + 1, message }),
        }
    }
    if out.len() > 1 {
        if let Some((line, c)) = out.iter().find(|(_, c)| !c.batchable()) {
            return Err(CtlError {
                line: *line,
                message: format!("only changes can be batched, not `{}`: send it alone", c.name()),
            });
        }
    }
    if out.is_empty() {
        return Err(CtlError { line: 0, message: "empty request".into() });
    }
    Ok(out)
}

/// Whether a peer holding `role` may send every command of `cmds`: the
/// first one it may not, as the refusal.
pub fn check_role<C: Protocol>(cmds: &[(usize, C)], role: Role) -> Result<(), CtlError> {
    match cmds.iter().find(|(_, c)| c.role() > role) {
        None => Ok(()),
        Some((line, c)) => Err(CtlError {
            line: *line,
            message: format!(
                "`{}` is refused to this peer: it may use only add, test and list ({}); the rest needs {} or the socket's owner",
                c.name(),
                role.flag(),
                c.role().flag()
            ),
        }),
    }
}

/// A line's words, its `#` comment cut off.
pub fn words(line: &str) -> Vec<&str> {
    line.split('#').next().unwrap_or("").split_whitespace().collect()
}

/// `s` as a set element (an address or a prefix).
pub fn elem(s: &str) -> Result<Prefix, String> {
    s.parse::<Prefix>().map_err(|e| format!("`{s}` is not an address or prefix: {e}"))
}

/// `s` as an address.
pub fn addr(s: &str) -> Result<IpAddr, String> {
    s.parse().map_err(|_| format!("`{s}` is not an IP address"))
}

/// `t` as a timeout in whole seconds, at least 1.
pub fn timeout(t: &str) -> Result<u32, String> {
    match t.parse::<u32>() {
        Ok(s) if s > 0 => Ok(s),
        _ => Err(format!("`{t}` is not a timeout in seconds (1 to 4294967295)")),
    }
}

/// `Err(usage)` unless `args` has `n` words.
pub fn want(args: &[&str], n: usize, usage: &str) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("usage: {usage}"))
    }
}

/// A command on a named set, as a bridge, a shield and `sluice ctl` speak
/// it, and as the guard's forwarder sends its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetCommand {
    /// `add SET ELEM [timeout S]`
    Add { set: String, elem: Prefix, timeout: Option<u32> },
    /// `del SET ELEM`
    Del { set: String, elem: Prefix },
    /// `flush SET`
    Flush { set: String },
    /// `test SET ADDR`
    Test { set: String, addr: IpAddr },
    /// `list SET`
    List { set: String },
}

impl SetCommand {
    /// The verbs it is spelled with.
    pub const VERBS: [&'static str; 5] = ["add", "del", "flush", "test", "list"];

    /// A line's command when `verb` is one of [`SetCommand::VERBS`] (None
    /// otherwise): the command, or what is wrong with its arguments.
    pub fn parse(verb: &str, args: &[&str]) -> Option<Result<SetCommand, String>> {
        let parsed = match verb {
            "add" => (|| {
                if !(args.len() == 2 || args.len() == 4 && args[2] == "timeout") {
                    return Err("usage: add SET ELEM [timeout SECONDS]".to_owned());
                }
                let timeout = args.get(3).map(|t| timeout(t)).transpose()?;
                Ok(SetCommand::Add { set: args[0].into(), elem: elem(args[1])?, timeout })
            })(),
            "del" => want(args, 2, "del SET ELEM")
                .and_then(|()| Ok(SetCommand::Del { set: args[0].into(), elem: elem(args[1])? })),
            "flush" => want(args, 1, "flush SET").map(|()| SetCommand::Flush { set: args[0].into() }),
            "test" => want(args, 2, "test SET ADDR")
                .and_then(|()| Ok(SetCommand::Test { set: args[0].into(), addr: addr(args[1])? })),
            "list" => want(args, 1, "list SET").map(|()| SetCommand::List { set: args[0].into() }),
            _ => return None,
        };
        Some(parsed)
    }

    /// The set it names.
    pub fn set(&self) -> &str {
        match self {
            SetCommand::Add { set, .. }
            | SetCommand::Del { set, .. }
            | SetCommand::Flush { set }
            | SetCommand::Test { set, .. }
            | SetCommand::List { set } => set,
        }
    }

    /// The word it is spelled with.
    pub fn name(&self) -> &'static str {
        match self {
            SetCommand::Add { .. } => "add",
            SetCommand::Del { .. } => "del",
            SetCommand::Flush { .. } => "flush",
            SetCommand::Test { .. } => "test",
            SetCommand::List { .. } => "list",
        }
    }

    /// Whether it changes the set (and so may be batched).
    pub fn changes(&self) -> bool {
        matches!(self, SetCommand::Add { .. } | SetCommand::Del { .. } | SetCommand::Flush { .. })
    }

    /// The least role that may send it: adding, testing and listing are
    /// what a guard needs; deleting and flushing lift what others put in.
    pub fn role(&self) -> Role {
        match self {
            SetCommand::Add { .. } | SetCommand::Test { .. } | SetCommand::List { .. } => Role::Add,
            SetCommand::Del { .. } | SetCommand::Flush { .. } => Role::Admin,
        }
    }
}

/// A host as its address alone (`192.0.2.1`), a network as `ADDR/LEN`:
/// as people write them, and as short as the line can be.
struct Elem<'a>(&'a Prefix);

impl std::fmt::Display for Elem<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.0;
        if p.len() == if p.addr().is_ipv4() { 32 } else { 128 } {
            write!(f, "{}", p.addr())
        } else {
            write!(f, "{p}")
        }
    }
}

/// The line [`SetCommand::parse`] reads back as the same command.
impl std::fmt::Display for SetCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetCommand::Add { set, elem, timeout: None } => write!(f, "add {set} {}", Elem(elem)),
            SetCommand::Add { set, elem, timeout: Some(t) } => write!(f, "add {set} {} timeout {t}", Elem(elem)),
            SetCommand::Del { set, elem } => write!(f, "del {set} {}", Elem(elem)),
            SetCommand::Flush { set } => write!(f, "flush {set}"),
            SetCommand::Test { set, addr } => write!(f, "test {set} {addr}"),
            SetCommand::List { set } => write!(f, "list {set}"),
        }
    }
}

/// A set command alone is a protocol too: what a peer that speaks only the
/// cross-product commands parses (the guard's forwarder reading back what
/// it sends, tests).
impl Protocol for SetCommand {
    fn parse_line(line: &str) -> Result<Option<SetCommand>, String> {
        let w = words(line);
        let Some((verb, args)) = w.split_first() else { return Ok(None) };
        match SetCommand::parse(verb, args) {
            Some(r) => r.map(Some),
            None => Err(format!("unknown command `{verb}` (add, del, flush, test, list)")),
        }
    }
    fn name(&self) -> &'static str {
        SetCommand::name(self)
    }
    fn batchable(&self) -> bool {
        self.changes()
    }
    fn role(&self) -> Role {
        SetCommand::role(self)
    }
}

/// A refusal's message as `sluice ctl` prints it, its line named as
/// `FILE:LINE:` when the request came from `file`, `line N:` for a batch
/// from elsewhere; None when the reply is not a refusal.
pub fn failure(r: &serde_json::Value, request: &str, file: Option<&std::path::Path>) -> Option<String> {
    if r["ok"] == true {
        return None;
    }
    let line = r["line"].as_u64().filter(|&l| l > 0);
    let at = match (file, line) {
        (Some(f), Some(l)) => format!("{}:{l}: ", f.display()),
        (None, Some(l)) if request.lines().count() > 1 => format!("line {l}: "),
        _ => String::new(),
    };
    let msg = r["error"].as_str().unwrap_or("the socket refused the request");
    // The server's message names the line already.
    Some(format!("{at}{}", msg.strip_prefix(&format!("line {}: ", line.unwrap_or(0))).unwrap_or(msg)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(s: &str) -> Result<Option<SetCommand>, String> {
        SetCommand::parse_line(s)
    }

    #[test]
    fn set_commands_parse() {
        assert_eq!(
            line("add blocks 192.0.2.1 timeout 60").unwrap(),
            Some(SetCommand::Add { set: "blocks".into(), elem: "192.0.2.1".parse().unwrap(), timeout: Some(60) })
        );
        assert_eq!(
            line("  del blocks 2001:db8::/32  # why").unwrap(),
            Some(SetCommand::Del { set: "blocks".into(), elem: "2001:db8::/32".parse().unwrap() })
        );
        assert_eq!(line("# nothing").unwrap(), None);
        assert!(line("add blocks 300.1.1.1").unwrap_err().contains("not an address"));
        assert!(line("add blocks 1.2.3.4 timeout 0").unwrap_err().contains("timeout"));
        assert!(line("add blocks 1.2.3.4 60").unwrap_err().contains("usage"));
        assert!(line("nuke").unwrap_err().contains("unknown command"));
        assert!(line("test blocks 10.0.0.0/8").unwrap_err().contains("not an IP address"));
    }

    #[test]
    fn a_batch_names_its_bad_line() {
        let e = parse_request::<SetCommand>("add a 1.2.3.4\n\n# c\nadd a 1.2.3\n").unwrap_err();
        assert_eq!(e.line, 4);
        let e = parse_request::<SetCommand>("add a 1.2.3.4\ntest a 1.2.3.4\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("not `test`"), "{e}");
        assert_eq!(parse_request::<SetCommand>("add a 1.2.3.4\ndel a 1.2.3.4\nflush a").unwrap().len(), 3);
        assert_eq!(parse_request::<SetCommand>("\n").unwrap_err().line, 0);
    }

    #[test]
    fn the_add_role_may_add_test_and_list_only() {
        let cmds = parse_request::<SetCommand>("add a 1.2.3.4\nadd a 10.0.0.0/8 timeout 5").unwrap();
        assert_eq!(check_role(&cmds, Role::Add), Ok(()));
        for q in ["test a 1.2.3.4", "list a"] {
            assert_eq!(check_role(&parse_request::<SetCommand>(q).unwrap(), Role::Add), Ok(()));
        }
        let cmds = parse_request::<SetCommand>("add a 1.2.3.4\ndel a 1.2.3.5\nflush a").unwrap();
        let e = check_role(&cmds, Role::Add).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.starts_with("`del` is refused to this peer"), "{e}");
        assert_eq!(check_role(&cmds, Role::Admin), Ok(()));
    }

    #[test]
    fn failures_name_their_file_and_line() {
        let r = serde_json::json!({"ok": false, "error": "line 2: del b 192.0.2.9/32: 192.0.2.9/32 is not in the set", "line": 2});
        let f = std::path::Path::new("x.txt");
        assert_eq!(
            failure(&r, "a\nb", Some(f)).unwrap(),
            "x.txt:2: del b 192.0.2.9/32: 192.0.2.9/32 is not in the set"
        );
        assert_eq!(failure(&serde_json::json!({"ok": true}), "sets", None), None);
    }

    fn prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            (any::<u32>(), 0u8..=32).prop_map(|(a, l)| Prefix::new(IpAddr::from(a.to_be_bytes()), l)),
            (any::<u128>(), 0u8..=128).prop_map(|(a, l)| Prefix::new(IpAddr::from(a.to_be_bytes()), l)),
        ]
    }

    fn set_command() -> impl Strategy<Value = SetCommand> {
        let set = "[a-z][a-z0-9_-]{0,12}";
        prop_oneof![
            (set, prefix(), proptest::option::of(1u32..)).prop_map(|(set, elem, timeout)| SetCommand::Add {
                set,
                elem,
                timeout
            }),
            (set, prefix()).prop_map(|(set, elem)| SetCommand::Del { set, elem }),
            set.prop_map(|set| SetCommand::Flush { set }),
            (set, prefix()).prop_map(|(set, p)| SetCommand::Test { set, addr: p.addr() }),
            set.prop_map(|set| SetCommand::List { set }),
        ]
    }

    proptest! {
        /// What the forwarder writes is what the server reads.
        #[test]
        fn a_set_command_reads_back_as_itself(c in set_command()) {
            prop_assert_eq!(SetCommand::parse_line(&c.to_string()), Ok(Some(c)));
        }

        #[test]
        fn any_text_parses_or_errs_without_panic(s in "\\PC{0,80}") {
            let _ = parse_request::<SetCommand>(&s);
        }
    }
}
