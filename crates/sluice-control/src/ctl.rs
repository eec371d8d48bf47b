//! The control socket's language, shared by the server (the bridge) and the
//! client (`sluice ctl`): one command per line, as on the command line.
//!
//! ```text
//! add SET ELEM [timeout S]     del SET ELEM      flush SET
//! test SET ADDR                list SET          sets
//! stats                        reload
//! ```
//!
//! A request is one line, or several lines of `add`/`del`/`flush` (blank
//! lines and `#` comments skipped) applied as one atomic batch, like
//! `ipset restore` or `nft -f`: every line is checked first, and a bad one
//! fails the whole batch, named by its line, with nothing changed. The
//! reply is one JSON object (`"ok"`, and `"error"` with `"line"` when not).

use sluice_rules::Prefix;
use std::net::IpAddr;

/// One command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Add {
        set: String,
        elem: Prefix,
        timeout: Option<u32>,
    },
    Del {
        set: String,
        elem: Prefix,
    },
    Flush {
        set: String,
    },
    Test {
        set: String,
        addr: IpAddr,
    },
    List {
        set: String,
    },
    Sets,
    Stats,
    Reload,
    /// bridge: the BGP sessions.
    Bgp,
    /// bridge: the flows routers announced, in force.
    Flows,
    /// http-guard: the blocks in force.
    Blocks,
    /// http-guard: block a client (its address's network) now.
    Block {
        client: IpAddr,
        timeout: Option<u32>,
    },
    /// http-guard: lift a client's block now.
    Unblock {
        client: IpAddr,
    },
    /// http-guard: the clients with the highest request rates.
    Clients {
        top: usize,
    },
}

impl Command {
    /// Whether the command changes a set (and so may be batched).
    pub fn changes(&self) -> bool {
        matches!(self, Command::Add { .. } | Command::Del { .. } | Command::Flush { .. })
    }

    /// The word the command is spelled with.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Add { .. } => "add",
            Command::Del { .. } => "del",
            Command::Flush { .. } => "flush",
            Command::Test { .. } => "test",
            Command::List { .. } => "list",
            Command::Sets => "sets",
            Command::Stats => "stats",
            Command::Reload => "reload",
            Command::Bgp => "bgp",
            Command::Flows => "flows",
            Command::Blocks => "blocks",
            Command::Block { .. } => "block",
            Command::Unblock { .. } => "unblock",
            Command::Clients { .. } => "clients",
        }
    }
}

/// A request that could not be read: its line (1-based) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CtlError {
    pub line: usize,
    pub message: String,
}

fn elem(s: &str) -> Result<Prefix, String> {
    s.parse::<Prefix>().map_err(|e| format!("`{s}` is not an address or prefix: {e}"))
}

fn addr(s: &str) -> Result<IpAddr, String> {
    s.parse().map_err(|_| format!("`{s}` is not an IP address"))
}

fn timeout(t: &str) -> Result<u32, String> {
    match t.parse::<u32>() {
        Ok(s) if s > 0 => Ok(s),
        _ => Err(format!("`{t}` is not a timeout in seconds (1 to 4294967295)")),
    }
}

/// One line: `Ok(None)` for a blank line or a comment.
pub fn parse_line(line: &str) -> Result<Option<Command>, String> {
    let line = line.split('#').next().unwrap_or("");
    let w: Vec<&str> = line.split_whitespace().collect();
    let Some(&verb) = w.first() else { return Ok(None) };
    let args = &w[1..];
    let want = |n: usize, usage: &str| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("usage: {usage}"))
        }
    };
    let cmd = match verb {
        "add" => {
            if !(args.len() == 2 || args.len() == 4 && args[2] == "timeout") {
                return Err("usage: add SET ELEM [timeout SECONDS]".into());
            }
            let timeout = args.get(3).map(|t| timeout(t)).transpose()?;
            Command::Add { set: args[0].into(), elem: elem(args[1])?, timeout }
        }
        "del" => {
            want(2, "del SET ELEM")?;
            Command::Del { set: args[0].into(), elem: elem(args[1])? }
        }
        "flush" => {
            want(1, "flush SET")?;
            Command::Flush { set: args[0].into() }
        }
        "test" => {
            want(2, "test SET ADDR")?;
            Command::Test { set: args[0].into(), addr: addr(args[1])? }
        }
        "list" => {
            want(1, "list SET")?;
            Command::List { set: args[0].into() }
        }
        "sets" => {
            want(0, "sets")?;
            Command::Sets
        }
        "stats" => {
            want(0, "stats")?;
            Command::Stats
        }
        "reload" => {
            want(0, "reload")?;
            Command::Reload
        }
        "bgp" => {
            want(0, "bgp")?;
            Command::Bgp
        }
        "flows" => {
            want(0, "flows")?;
            Command::Flows
        }
        "blocks" => {
            want(0, "blocks")?;
            Command::Blocks
        }
        "block" => {
            if !(args.len() == 1 || args.len() == 3 && args[1] == "timeout") {
                return Err("usage: block ADDR [timeout SECONDS]".into());
            }
            Command::Block { client: addr(args[0])?, timeout: args.get(2).map(|t| timeout(t)).transpose()? }
        }
        "unblock" => {
            want(1, "unblock ADDR")?;
            Command::Unblock { client: addr(args[0])? }
        }
        "clients" => {
            if args.len() > 1 {
                return Err("usage: clients [N]".into());
            }
            let top = match args.first() {
                None => 20,
                Some(n) => n.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("`{n}` is not a count"))?,
            };
            Command::Clients { top }
        }
        v => {
            return Err(format!(
                "unknown command `{v}` (bridge: add, del, flush, test, list, sets, stats, reload, bgp, flows; \
                 http-guard: blocks, block, unblock, clients, stats)"
            ))
        }
    };
    Ok(Some(cmd))
}

/// A whole request: one command, or a batch of changes (with their lines).
pub fn parse_request(text: &str) -> Result<Vec<(usize, Command)>, CtlError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line) {
            Ok(Some(c)) => out.push((i + 1, c)),
            Ok(None) => {}
            Err(message) => return Err(CtlError { line: i + 1, message }),
        }
    }
    if out.len() > 1 {
        if let Some((line, c)) = out.iter().find(|(_, c)| !c.changes()) {
            return Err(CtlError {
                line: *line,
                message: format!("only add, del and flush can be batched, not `{}`: send it alone", c.name()),
            });
        }
    }
    if out.is_empty() {
        return Err(CtlError { line: 0, message: "empty request".into() });
    }
    Ok(out)
}

/// A reply as `sluice ctl` prints it without `--json` (empty for a
/// refusal, which [`failure`] words).
pub fn render_text(r: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let str_of = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    if r["ok"] != true {
        return out;
    }
    if let Some(sets) = r["sets"].as_array() {
        // Columns as wide as their widest cell: a long set name or kind
        // does not push its row out of line.
        let width = |k: &str, min: usize| sets.iter().map(|s| str_of(&s[k]).len()).max().unwrap_or(0).max(min);
        let (wn, wk) = (width("name", 3), width("kind", 4));
        let _ = writeln!(
            out,
            "{:<wn$} {:<wk$} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "set", "kind", "entries", "maxelem", "base", "added", "deleted"
        );
        for s in sets {
            let (name, kind) = (str_of(&s["name"]), str_of(&s["kind"]));
            // As strings: a JSON value's Display ignores width and alignment.
            let n = |k: &str| s[k].to_string();
            let (e, m, b, a, d) = (n("entries"), n("maxelem"), n("base"), n("added"), n("deleted"));
            let _ = writeln!(out, "{name:<wn$} {kind:<wk$} {e:>10} {m:>10} {b:>10} {a:>10} {d:>10}");
        }
        // Where the geo sets' networks came from, under the table.
        for s in sets {
            for g in s["geo"].as_array().into_iter().flatten() {
                let counts: Vec<String> = g["networks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{} {}", str_of(&p[0]), p[1]))
                    .collect();
                let built = g["build_epoch"].as_u64().map(sluice_geo::date).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "# {}: {} {} built {built} ({}): {} networks",
                    str_of(&s["name"]),
                    str_of(&g["key"]),
                    str_of(&g["database_type"]),
                    str_of(&g["database"]),
                    counts.join(", ")
                );
            }
        }
    } else if let Some(flows) = r["flows"].as_array() {
        // In the order they apply; counters after the flow.
        let _ = writeln!(
            out,
            "# flows from BGP peers, {} the rule file's rules",
            match r["placement"].as_str() {
                Some("last") => "after",
                _ => "before",
            }
        );
        for f in flows {
            let unsupported: Vec<String> = f["unsupported"].as_array().into_iter().flatten().map(str_of).collect();
            let _ = writeln!(
                out,
                "{:>5} {:<9} {} => {}{}{} (from {}; {} packets, {} bytes, {} dropped)",
                f["index"].to_string(),
                str_of(&f["kind"]),
                str_of(&f["flow"]),
                str_of(&f["action"]),
                if f["go_on"] == true { ", go on" } else { "" },
                if unsupported.is_empty() { String::new() } else { format!(", not taken: {}", unsupported.join(", ")) },
                str_of(&f["source"]),
                f["packets"],
                f["bytes"],
                f["dropped"]
            );
        }
    } else if let Some(sessions) = r["sessions"].as_array() {
        for s in sessions {
            let routes: Vec<String> = s["routes"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, n)| n.as_u64() != Some(0))
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "{} AS {}: {} for {} s; routes: {}{}{}",
                str_of(&s["peer"]),
                s["peer_as"],
                str_of(&s["state"]),
                s["seconds"],
                if routes.is_empty() { "none".to_string() } else { routes.join(", ") },
                if s["stale"] == true { " (stale: kept past the session's end)" } else { "" },
                s["last_error"].as_str().map(|e| format!("; last down: {e}")).unwrap_or_default()
            );
        }
    } else if let Some(elems) = r["elements"].as_array() {
        for e in elems {
            let _ = match e["expires_in"].as_u64() {
                Some(t) => writeln!(out, "{} timeout {t}", str_of(&e["element"])),
                None => writeln!(out, "{}", str_of(&e["element"])),
            };
        }
        if r["complete"] == false {
            out += "# the base came from a compiled file: only elements added at runtime are listed\n";
        }
    } else if r.get("match").is_some() {
        let (addr, set) = (str_of(&r["addr"]), str_of(&r["set"]));
        let _ = match (r["match"].as_bool(), r["element"].as_str(), r["from"].as_str()) {
            (Some(true), Some(e), Some(from)) => writeln!(out, "{addr} is in {set} (element {e}, {from})"),
            (Some(true), _, _) => writeln!(out, "{addr} is in {set} (base tables)"),
            _ => writeln!(out, "{addr} is not in {set}"),
        };
        let g = &r["geo"];
        if let Some(db) = g["database"].as_str() {
            let _ = match (g["network"].as_str(), g.get("country").or(g.get("asn")).and_then(|v| v.as_str())) {
                (Some(n), Some(v)) => writeln!(out, "# {db}: {n} is {v}"),
                (Some(n), None) => writeln!(out, "# {db}: {n} has no value at the set's field"),
                _ => writeln!(out, "# {db}: no record for {addr}"),
            };
        }
    } else if r.get("applied").is_some() {
        let (n, g, us) = (&r["applied"], &r["generation"], &r["publish_us"]);
        let _ = writeln!(out, "applied {n} change(s); generation {g} in force ({us} us)");
    } else if let Some(o) = r.as_object().filter(|o| o.contains_key("updates")) {
        for (k, v) in o.iter().filter(|(k, _)| *k != "ok") {
            let _ = writeln!(out, "{k}: {v}");
        }
    } else if r.get("generation").is_some() {
        let _ = writeln!(out, "reloaded; generation {} in force", r["generation"]);
    } else if let Some(blocks) = r["blocks"].as_array() {
        for b in blocks {
            let _ = match b["expires_in"].as_u64() {
                Some(t) => writeln!(out, "{} timeout {t}", str_of(&b["client"])),
                None => writeln!(out, "{}", str_of(&b["client"])),
            };
        }
    } else if let Some(clients) = r["clients"].as_array() {
        let _ = writeln!(out, "{:<40} {:>10} {:>12} {:>8}", "client", "req/s", "connections", "blocked");
        for c in clients {
            // As strings: a JSON value's Display ignores width and alignment.
            let (n, k, b) = (c["requests_per_s"].to_string(), c["connections"].to_string(), c["blocked"].to_string());
            let _ = writeln!(out, "{:<40} {n:>10} {k:>12} {b:>8}", str_of(&c["client"]));
        }
    } else if let Some(client) = r["client"].as_str() {
        let _ = writeln!(out, "{client}: {}", str_of(&r["done"]));
    }
    out
}

/// A refusal's message, its line named as `FILE:LINE:` when the request
/// came from `file`, `line N:` for a batch from elsewhere; None when the
/// reply is not a refusal.
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
    let msg = r["error"].as_str().unwrap_or("the bridge refused the request");
    // The server's message names the line already.
    Some(format!("{at}{}", msg.strip_prefix(&format!("line {}: ", line.unwrap_or(0))).unwrap_or(msg)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commands_parse() {
        assert_eq!(
            parse_line("add blocks 192.0.2.1 timeout 60").unwrap(),
            Some(Command::Add { set: "blocks".into(), elem: "192.0.2.1".parse().unwrap(), timeout: Some(60) })
        );
        assert_eq!(
            parse_line("  del blocks 2001:db8::/32  # why").unwrap(),
            Some(Command::Del { set: "blocks".into(), elem: "2001:db8::/32".parse().unwrap() })
        );
        assert_eq!(parse_line("# nothing").unwrap(), None);
        assert!(parse_line("add blocks 300.1.1.1").unwrap_err().contains("not an address"));
        assert!(parse_line("add blocks 1.2.3.4 timeout 0").unwrap_err().contains("timeout"));
        assert!(parse_line("add blocks 1.2.3.4 60").unwrap_err().contains("usage"));
        assert!(parse_line("nuke").unwrap_err().contains("unknown command"));
        assert!(parse_line("test blocks 10.0.0.0/8").unwrap_err().contains("not an IP address"));
    }

    #[test]
    fn replies_render() {
        let r = serde_json::json!({"ok": true, "set": "b", "addr": "192.0.2.1", "match": true, "element": "192.0.2.0/24", "from": "added"});
        assert_eq!(render_text(&r), "192.0.2.1 is in b (element 192.0.2.0/24, added)\n");
        let r = serde_json::json!({"ok": true, "sets": [
            {"name": "b", "kind": "dynamic", "entries": 3, "maxelem": 1000000, "base": 0, "added": 3, "deleted": 0},
            {"name": "a_long_set_name_indeed", "kind": "list", "entries": 12, "maxelem": null, "base": 12, "added": 0, "deleted": 0},
        ]});
        let text = render_text(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "b                      dynamic          3    1000000          0          3          0");
        // Every row as long as the header: the columns line up.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{text}");
        let r = serde_json::json!({"ok": true, "clients": [
            {"client": "192.0.2.1", "requests_per_s": 7, "connections": 12, "blocked": false},
            {"client": "2001:db8::1", "requests_per_s": 1234, "connections": 1, "blocked": true},
        ]});
        let text = render_text(&r);
        assert!(text.lines().all(|l| l.len() == text.lines().next().unwrap().len()), "{text}");
        let r = serde_json::json!({"ok": true, "set": "b", "complete": true, "elements": [{"element": "192.0.2.1/32", "expires_in": 5}]});
        assert_eq!(render_text(&r), "192.0.2.1/32 timeout 5\n");
        let r = serde_json::json!({"ok": false, "error": "line 2: del b 192.0.2.9/32: 192.0.2.9/32 is not in the set", "line": 2});
        let f = std::path::Path::new("x.txt");
        assert_eq!(
            failure(&r, "a\nb", Some(f)).unwrap(),
            "x.txt:2: del b 192.0.2.9/32: 192.0.2.9/32 is not in the set"
        );
        assert_eq!(render_text(&r), "");
    }

    #[test]
    fn a_batch_names_its_bad_line() {
        let e = parse_request("add a 1.2.3.4\n\n# c\nadd a 1.2.3\n").unwrap_err();
        assert_eq!(e.line, 4);
        let e = parse_request("add a 1.2.3.4\nsets\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(parse_request("add a 1.2.3.4\ndel a 1.2.3.4\nflush a").unwrap().len(), 3);
        assert_eq!(parse_request("\n").unwrap_err().line, 0);
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errs_without_panic(s in "\\PC{0,80}") {
            let _ = parse_request(&s);
        }
    }
}
