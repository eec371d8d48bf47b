//! Each rule's hits and the default verdict's, as the summaries of
//! `filter` and `bridge` show them (JSON keys `rules` and `default`; a
//! text table).

use crate::RuleSet;

/// The per-rule counters of a run, for the summaries: (rule, packets, bytes).
pub fn rows(rules: &RuleSet, stats: &crate::Stats) -> Vec<serde_json::Value> {
    let same = stats.rules_id == rules.id();
    rules
        .rules()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let c = if same { stats.rule_hits.get(i).copied().unwrap_or_default() } else { Default::default() };
            let mut v = serde_json::json!({ "line": r.line, "text": r.text, "action": r.action.as_str(), "packets": c.packets, "bytes": c.bytes });
            if let Some(p) = rules.policer(i) {
                // The bucket's own count, across workers.
                v["police_dropped"] = p.over.load(std::sync::atomic::Ordering::Relaxed).into();
            }
            v
        })
        .collect()
}

/// The `rules` and `default` keys of a summary: each rule with its
/// counters, and the default verdict with the packets it decided.
pub fn json(rules: &RuleSet, stats: &crate::Stats, v: &mut serde_json::Value) {
    v["rules"] = rows(rules, stats).into();
    let d = stats.default_hits;
    let verdict = match rules.default_verdict() {
        crate::Verdict::Pass => "pass",
        crate::Verdict::Drop => "drop",
    };
    v["default"] = serde_json::json!({ "verdict": verdict, "packets": d.packets, "bytes": d.bytes });
}

/// The rules with their counters (text summaries); empty without rules.
pub fn text(rules: &RuleSet, stats: &crate::Stats) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    if rules.rules().is_empty() {
        return t;
    }
    let _ = writeln!(t, "rules");
    for row in rows(rules, stats) {
        let line = row["line"].as_u64().unwrap_or(0);
        // Line 0: a rule the --drop-* flags made, not a rule file's.
        let at = if line == 0 { "--drop-*".to_owned() } else { format!("line {line}") };
        let _ = writeln!(
            t,
            "  {:>12} pkts {:>14} bytes  {at:<9} {}",
            row["packets"].as_u64().unwrap_or(0),
            row["bytes"].as_u64().unwrap_or(0),
            row["text"].as_str().unwrap_or("")
        );
    }
    let d = stats.default_hits;
    let verdict = match rules.default_verdict() {
        crate::Verdict::Pass => "pass",
        crate::Verdict::Drop => "drop",
    };
    let _ = writeln!(t, "  {:>12} pkts {:>14} bytes  {:<9} default {verdict}", d.packets, d.bytes, "");
    t
}
