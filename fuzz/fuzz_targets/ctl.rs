//! What reaches the control plane from outside: any bytes as a control
//! socket request, and as a CrowdSec LAPI decision stream. Neither panics;
//! a request that parses is applied to a rule set with a dynamic set and a
//! list's set, all or nothing (a refused batch leaves every set as it was);
//! a stream that parses becomes a feed whose every element applies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_control::command::parse_request;
use sluice_control::safety::Gate;
use sluice_control::safety::Safety;
use sluice_control::SetCommand;
use sluice_engine::dynamic::Elements;
use sluice_engine::{CompileOptions, RuleSet};
use sluice_policy::crowdsec::{go_duration, parse};
use sluice_policy::sets::RuntimeSets;
use sluice_rules::{parse_rules, Prefix};
use std::path::Path;
use std::sync::Arc;

const RULES: &str =
    "set f { 10.0.0.0/8, 10.1.2.3, 2001:db8::/32 }\nset d dynamic timeout 60\ndrop saddr @d\ndrop daddr @f\n";

fn rules() -> RuleSet {
    let file = parse_rules("f.rules", RULES, Path::new(".")).unwrap();
    let sets: Vec<Vec<Prefix>> = file.load_sets(false).unwrap().into_iter().map(|l| l.prefixes).collect();
    RuleSet::compile(&file, &sets, &CompileOptions::default()).unwrap()
}

fn base_of(r: &RuleSet, i: usize) -> Option<Elements> {
    (r.named_set_info()[i].name == "f")
        .then(|| Elements::from_prefixes(&["10.0.0.0/8", "10.1.2.3", "2001:db8::/32"].map(|s| s.parse().unwrap())))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = go_duration(&text);
    let rules = rules();
    let mut sets = RuntimeSets::new();
    sets.merge_min = 2;
    // Every product's language: none panics.
    let _ = parse_request::<sluice_policy::Command>(&text);
    let _ = parse_request::<sluice_guard::control::GuardCommand>(&text);
    if let Ok(batch) = parse_request::<SetCommand>(&text) {
        if batch[0].1.changes() {
            let before = sets.rows(&rules);
            match sets.stage(&rules, &batch, 1_000_000_000, &base_of) {
                Ok(n) => {
                    assert_eq!(n, batch.len());
                    let (new, _) = sets.commit(&rules);
                    assert!(new.is_some());
                }
                Err(e) => {
                    assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}");
                    let after = sets.rows(&rules);
                    assert_eq!(format!("{before:?}"), format!("{after:?}"), "a refused batch changed a set");
                }
            }
        }
    }
    // The bridge's default net (no never-block file, /8 and /16 at least):
    // a ban it refuses is left out of the feed.
    let gate = Gate { safety: Arc::new(Safety::load(None, 8, 16).unwrap()), refusals: Arc::default() };
    // Every type a ban, on odd second bytes: the types filter is walked too.
    let types: Vec<String> =
        if data.get(1).is_some_and(|b| b & 1 == 1) { vec!["ban".into(), "captcha".into()] } else { Vec::new() };
    if let Ok((feed, _)) =
        parse(data, None, "d", data.first().is_some_and(|b| b & 1 == 1), 1 << 20, &gate, None, &types)
    {
        let n = feed.adds.len();
        for (p, _) in &feed.adds {
            assert!(gate.safety.net().check(p).is_ok(), "{p} passed a net that refuses it");
        }
        let out = sets.feed(&rules, &feed, 1_000_000_000, &base_of).unwrap();
        assert!(out.added <= n);
        let (new, _) = sets.commit(&rules);
        let new = new.unwrap();
        let d = new.named_index("d").unwrap();
        for (p, _) in &feed.adds {
            assert!(new.set_contains(d, p.addr()), "{p} fed but not in the set");
        }
    }
});
