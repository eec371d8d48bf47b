//! The rule file parser and compiler never panic. A parsed file compiles
//! (or is refused with an error), and the compiled rules agree with the
//! one-rule-at-a-time reference on packets built from the same input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_engine::{CompileOptions, Decision, RuleSet, Verdict};
use sluice_rules::{parse_rules, Prefix, SetSource};
use sluice_wire::{decode, LinkType};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // The text up to the first NUL is the rule file; what follows is raw
    // frames (2-byte length, bytes) to evaluate.
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(text) = std::str::from_utf8(&data[..split]) else { return };
    let Ok(file) = parse_rules("fuzz.rules", text, Path::new("/nonexistent")) else { return };
    // List files are not read here: a file set is given a fixed small list.
    let sets: Vec<Vec<Prefix>> = file
        .sets
        .iter()
        .map(|s| match &s.source {
            SetSource::Inline(p) => p.clone(),
            SetSource::Dynamic { .. } => Vec::new(),
            SetSource::File(_) | SetSource::Geo { .. } => {
                vec!["10.0.0.0/8".parse().unwrap(), "2001:db8::1".parse().unwrap()]
            }
        })
        .collect();
    let ifaces = vec!["a".to_owned(), "b".to_owned()];
    let Ok(rules) = RuleSet::compile(&file, &sets, &CompileOptions { ifaces, ..CompileOptions::default() }) else {
        return;
    };
    let mut rest = data.get(split + 1..).unwrap_or_default();
    let mut frames = Vec::new();
    while rest.len() >= 2 && frames.len() < 64 {
        let n = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        frames.push(&rest[2..2 + n]);
        rest = &rest[2 + n..];
    }
    let decoded: Vec<_> = frames.iter().filter_map(|f| decode(LinkType::ETHERNET, f).ok()).collect();
    let pkts: Vec<_> = decoded.iter().enumerate().map(|(i, p)| (p, 60 + i as u32, (i % 3) as u32)).collect();
    let mut out = vec![Decision { verdict: Verdict::Pass, rule: None }; pkts.len()];
    // `police` rules: each evaluator with buckets of its own, on one clock.
    let Ok(reference) = RuleSet::compile(
        &file,
        &sets,
        &CompileOptions { ifaces: vec!["a".into(), "b".into()], ..CompileOptions::default() },
    ) else {
        return;
    };
    rules.evaluate_batch_at(&pkts, &mut out, 8, 1_000_000, |_, _| {});
    for (p, o) in pkts.iter().zip(&out) {
        assert_eq!(reference.evaluate_reference_at(p.0, p.1, p.2, 1_000_000, |_| {}), *o);
    }
});
