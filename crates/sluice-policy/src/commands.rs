//! The commands the L3 data planes (a bridge, a shield) answer on their
//! control socket, and their replies as text. The set commands (`add`,
//! `del`, `flush`, `test`, `list`) are the shared control plane's
//! [`SetCommand`], which the guard's forwarder speaks too; the rest are
//! this policy's own:
//!
//! ```text
//! add SET ELEM [timeout S]     del SET ELEM      flush SET
//! test SET ADDR                list SET          sets
//! stats                        reload            bgp          flows
//! ```
//!
//! The request's frame (lines, batches, roles) is `sluice_control::command`'s.

use sluice_control::command::{want, words, Protocol, Role, SetCommand};

/// One command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A change to a set, or a question about one.
    Set(SetCommand),
    /// Every set with its size.
    Sets,
    /// The control plane's counters.
    Stats,
    /// Read the rule files again.
    Reload,
    /// The BGP sessions.
    Bgp,
    /// The flows routers announced, in force.
    Flows,
    /// What the product is and how it runs (a shield: each interface's XDP
    /// mode and program).
    Status,
}

impl Command {
    /// The verbs, for a refusal's list.
    pub const VERBS: &'static str = "add, del, flush, test, list, sets, stats, status, reload, bgp, flows";
}

impl Protocol for Command {
    fn parse_line(line: &str) -> Result<Option<Command>, String> {
        let w = words(line);
        let Some((&verb, args)) = w.split_first() else { return Ok(None) };
        if let Some(set) = SetCommand::parse(verb, args) {
            return set.map(|c| Some(Command::Set(c)));
        }
        let (cmd, usage) = match verb {
            "sets" => (Command::Sets, "sets"),
            "stats" => (Command::Stats, "stats"),
            "reload" => (Command::Reload, "reload"),
            "bgp" => (Command::Bgp, "bgp"),
            "flows" => (Command::Flows, "flows"),
            "status" => (Command::Status, "status"),
            v => {
                return Err(format!(
                    "unknown command `{v}` (this socket is a bridge's or a shield's: {})",
                    Command::VERBS
                ))
            }
        };
        want(args, 0, usage)?;
        Ok(Some(cmd))
    }

    fn name(&self) -> &'static str {
        match self {
            Command::Set(c) => c.name(),
            Command::Sets => "sets",
            Command::Stats => "stats",
            Command::Reload => "reload",
            Command::Bgp => "bgp",
            Command::Flows => "flows",
            Command::Status => "status",
        }
    }

    fn batchable(&self) -> bool {
        matches!(self, Command::Set(c) if c.changes())
    }

    fn role(&self) -> Role {
        match self {
            Command::Set(c) => c.role(),
            Command::Sets | Command::Stats | Command::Status | Command::Reload | Command::Bgp | Command::Flows => {
                Role::Admin
            }
        }
    }
}

/// A reply as `sluice ctl` prints it without `--json` (empty for a
/// refusal, which [`failure`] words).
pub fn render_text(r: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if r["ok"] != true {
        return out;
    }
    if let Some(status) = r["status"].as_object() {
        status_text(&mut out, status);
    } else if let Some(sets) = r["sets"].as_array() {
        sets_text(&mut out, sets);
    } else if let Some(flows) = r["flows"].as_array() {
        flows_text(&mut out, r, flows);
    } else if let Some(sessions) = r["sessions"].as_array() {
        sessions_text(&mut out, sessions);
    } else if let Some(elems) = r["elements"].as_array() {
        elements_text(&mut out, r, elems);
    } else if r.get("match").is_some() {
        test_text(&mut out, r);
    } else if r.get("applied").is_some() {
        let (n, g, us) = (&r["applied"], &r["generation"], &r["publish_us"]);
        let _ = writeln!(out, "applied {n} change(s); generation {g} in force ({us} us)");
    } else if let Some(o) = r.as_object().filter(|o| o.contains_key("updates")) {
        for (k, v) in o.iter().filter(|(k, _)| *k != "ok") {
            let _ = writeln!(out, "{k}: {v}");
        }
    } else if r.get("generation").is_some() {
        let _ = writeln!(out, "reloaded; generation {} in force", r["generation"]);
    }
    out
}

/// `status`: one `key: value` line each; a list of objects (a shield's
/// interfaces) one indented line per object.
fn status_text(out: &mut String, status: &serde_json::Map<String, serde_json::Value>) {
    use std::fmt::Write as _;
    for (k, v) in status {
        match v.as_array() {
            Some(rows) => {
                let _ = writeln!(out, "{k}:");
                for row in rows {
                    let fields: Vec<String> = match row.as_object() {
                        Some(o) => {
                            o.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| format!("{k} {}", plain(v))).collect()
                        }
                        None => vec![plain(row)],
                    };
                    let _ = writeln!(out, "  {}", fields.join(", "));
                }
            }
            None => {
                let _ = writeln!(out, "{k}: {}", plain(v));
            }
        }
    }
}

/// `sets`: a table, then where the geo sets' networks came from.
fn sets_text(out: &mut String, sets: &[serde_json::Value]) {
    use std::fmt::Write as _;
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
            let counts: Vec<String> =
                g["networks"].as_array().into_iter().flatten().map(|p| format!("{} {}", str_of(&p[0]), p[1])).collect();
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
}

/// `flows`: in the order they apply, counters after each flow.
fn flows_text(out: &mut String, r: &serde_json::Value, flows: &[serde_json::Value]) {
    use std::fmt::Write as _;
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
}

/// `bgp`: a line per session.
fn sessions_text(out: &mut String, sessions: &[serde_json::Value]) {
    use std::fmt::Write as _;
    for s in sessions {
        // `KEY N` for each count of a JSON object that is not 0.
        let nonzero = |v: &serde_json::Value| -> Vec<String> {
            let counts = v.as_object().into_iter().flatten();
            counts.filter(|(_, n)| n.as_u64() != Some(0)).map(|(k, n)| format!("{k} {n}")).collect()
        };
        let (routes, refused) = (nonzero(&s["routes"]), nonzero(&s["refused_by"]));
        let _ = writeln!(
            out,
            "{} AS {}: {} for {} s; routes: {}{}{}{}{}",
            str_of(&s["peer"]),
            s["peer_as"],
            str_of(&s["state"]),
            s["seconds"],
            if routes.is_empty() { "none".to_string() } else { routes.join(", ") },
            if s["stale"] == true { " (stale: kept past the session's end)" } else { "" },
            // What the routes held cost against --bgp-max-peer-bytes.
            s["bytes"].as_u64().filter(|&b| b > 0).map(|b| format!(" ({b} bytes)")).unwrap_or_default(),
            if refused.is_empty() { String::new() } else { format!("; refused: {}", refused.join(", ")) },
            s["last_error"].as_str().map(|e| format!("; last down: {e}")).unwrap_or_default()
        );
    }
}

/// `list`: an element a line.
fn elements_text(out: &mut String, r: &serde_json::Value, elems: &[serde_json::Value]) {
    use std::fmt::Write as _;
    for e in elems {
        let _ = match e["expires_in"].as_u64() {
            Some(t) => writeln!(out, "{} timeout {t}", str_of(&e["element"])),
            None => writeln!(out, "{}", str_of(&e["element"])),
        };
    }
    if r["complete"] == false {
        *out += "# the base came from a compiled file: only elements added at runtime are listed\n";
    }
}

/// `test`: whether the address is in the set, and why.
fn test_text(out: &mut String, r: &serde_json::Value) {
    use std::fmt::Write as _;
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
}

/// A value as a person reads it: a string without its quotes, anything
/// else as JSON.
fn plain(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn str_of(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_control::command::parse_request;

    fn line(s: &str) -> Result<Option<Command>, String> {
        Command::parse_line(s)
    }

    #[test]
    fn commands_parse() {
        assert_eq!(
            line("add blocks 192.0.2.1 timeout 60").unwrap(),
            Some(Command::Set(SetCommand::Add {
                set: "blocks".into(),
                elem: "192.0.2.1".parse().unwrap(),
                timeout: Some(60)
            }))
        );
        assert_eq!(line("  sets  # why").unwrap(), Some(Command::Sets));
        assert!(line("sets x").unwrap_err().contains("usage: sets"));
        assert!(line("nuke").unwrap_err().contains("unknown command `nuke` (this socket is a bridge's"));
        assert!(line("block 192.0.2.1").unwrap_err().contains("unknown command"), "a guard's command");
        assert_eq!(Command::Set(SetCommand::Flush { set: "b".into() }).role(), Role::Admin);
        assert_eq!(Command::Reload.role(), Role::Admin);
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
        let r = serde_json::json!({"ok": true, "set": "b", "complete": true, "elements": [{"element": "192.0.2.1/32", "expires_in": 5}]});
        assert_eq!(render_text(&r), "192.0.2.1/32 timeout 5\n");
        let r = serde_json::json!({"ok": false, "error": "line 2: del b 192.0.2.9/32: 192.0.2.9/32 is not in the set", "line": 2});
        assert_eq!(render_text(&r), "");
    }

    #[test]
    fn status_renders_a_line_per_key_and_per_interface() {
        assert_eq!(line("status").unwrap(), Some(Command::Status));
        let r = serde_json::json!({ "ok": true, "status": { "product": "shield", "interfaces": [
            { "iface": "eth0", "mode": "native", "auto": null }, { "iface": "eth1", "mode": "generic" } ], "rules": 2 } });
        assert_eq!(
            render_text(&r),
            "interfaces:\n  iface eth0, mode native\n  iface eth1, mode generic\nproduct: shield\nrules: 2\n"
        );
    }

    #[test]
    fn a_batch_names_its_bad_line() {
        let e = parse_request::<Command>("add a 1.2.3.4\n\n# c\nadd a 1.2.3\n").unwrap_err();
        assert_eq!(e.line, 4);
        let e = parse_request::<Command>("add a 1.2.3.4\nsets\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(parse_request::<Command>("add a 1.2.3.4\ndel a 1.2.3.4\nflush a").unwrap().len(), 3);
        assert_eq!(parse_request::<Command>("\n").unwrap_err().line, 0);
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errs_without_panic(s in "\\PC{0,80}") {
            let _ = parse_request::<Command>(&s);
        }
    }
}
