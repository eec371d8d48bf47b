//! The kernel's exact table at a size the verdict test does not reach:
//! tens of thousands of random hosts (with a few prefixes beside them),
//! tables filled to every fill the shield builds, each member and as many
//! random addresses run through the program (`BPF_PROG_TEST_RUN`); the
//! program drops exactly the addresses a plain `HashSet` of the hosts, or
//! a prefix scan, says are in the set.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use common::{udp_from, udp_from6, xorshift};
use sluice_rules::{parse_rules, Prefix};
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::tables::Layout;
use sluice_shield::{Compiled, Options};
use std::collections::HashSet;

/// Buckets per table: each case has as many hosts as fill this many to
/// the case's fill (tables are a power of two of buckets, so any other
/// count would leave the table emptier than asked and its chains short).
const BUCKETS: usize = 4096;
/// The fullest an exact table is built (`V4ExactSet` clamps there).
const MAX_FILL: f64 = 0.9;
/// Prefixes beside the hosts (the prefix table's part of a mixed set).
const PREFIXES: usize = 40;

fn ip4(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

#[test]
fn the_kernel_exact_table_holds_exactly_its_hosts() {
    if !common::can_load() {
        return;
    }
    for (case, max_load) in
        [sluice_sets::DEFAULT_MAX_LOAD, Layout::default().max_load, MAX_FILL].into_iter().enumerate()
    {
        let mut next = xorshift(0x9e37_79b9 + case as u64);
        let n = (max_load * (sluice_sets::V4_SLOTS * BUCKETS) as f64) as usize;
        let mut hosts = HashSet::new();
        while hosts.len() < n {
            hosts.insert(next() as u32);
        }
        let prefixes: Vec<(u32, u8)> = (0..PREFIXES)
            .map(|_| {
                let len = 16 + (next() % 15) as u8;
                (next() as u32 & (u32::MAX << (32 - u32::from(len))), len)
            })
            .collect();
        let mut items: Vec<String> = hosts.iter().map(|&a| ip4(a)).collect();
        items.extend(prefixes.iter().map(|&(a, l)| format!("{}/{l}", ip4(a))));
        let text = format!("set s {{ {} }}\ndrop saddr @s\n", items.join(", "));
        let file = parse_rules("exact.rules", &text, std::path::Path::new(".")).unwrap();
        let sets: Vec<Vec<Prefix>> = file
            .sets
            .iter()
            .map(|s| match &s.source {
                sluice_rules::SetSource::Inline(p) => p.clone(),
                _ => Vec::new(),
            })
            .collect();
        for early_keys in [true, false] {
            let layout = Layout { max_load, early_keys, ..Layout::default() };
            let kernel = Compiled::with_layout(&file, &sets, &Options::default(), &layout).unwrap();
            let inside = |a: u32| {
                hosts.contains(&a) || prefixes.iter().any(|&(n, l)| a & (u32::MAX << (32 - u32::from(l))) == n)
            };
            let randoms: Vec<u32> = (0..n).map(|_| next() as u32).collect();
            for &a in hosts.iter().chain(&randoms) {
                let want = if inside(a) { XDP_DROP } else { XDP_PASS } as u32;
                assert_eq!(
                    kernel.test_run(&udp_from(a)).unwrap(),
                    want,
                    "{} (fill {max_load}, early {early_keys})",
                    ip4(a)
                );
            }
        }
    }
}

#[test]
fn the_kernel_v6_exact_table_holds_exactly_its_hosts() {
    if !common::can_load() {
        return;
    }
    for (case, max_load) in
        [sluice_sets::DEFAULT_MAX_LOAD, Layout::default().max_load, MAX_FILL].into_iter().enumerate()
    {
        let mut next = xorshift(0x51ce + case as u64);
        let n = (max_load * (sluice_sets::V6_SLOTS * BUCKETS) as f64) as usize;
        let mut hosts = HashSet::new();
        while hosts.len() < n {
            // Within one /64 half the time: keys that differ in one half only.
            let hi = if next().is_multiple_of(2) { 0x2001_0db8_0000_0001 } else { next() };
            hosts.insert(u128::from(hi) << 64 | u128::from(next()));
        }
        let items: Vec<String> = hosts.iter().map(|&a| std::net::Ipv6Addr::from(a).to_string()).collect();
        let text = format!("set s {{ {} }}\ndrop saddr @s\n", items.join(", "));
        let file = parse_rules("exact6.rules", &text, std::path::Path::new(".")).unwrap();
        let sets: Vec<Vec<Prefix>> = file
            .sets
            .iter()
            .map(|s| match &s.source {
                sluice_rules::SetSource::Inline(p) => p.clone(),
                _ => Vec::new(),
            })
            .collect();
        let layout = Layout { max_load, ..Layout::default() };
        let kernel = Compiled::with_layout(&file, &sets, &Options::default(), &layout).unwrap();
        // Members, members with one half changed, random addresses.
        let others: Vec<u128> = hosts.iter().map(|a| a ^ u128::from(next() | 1)).take(n / 2).collect();
        let randoms: Vec<u128> = (0..n / 2).map(|_| u128::from(next()) << 64 | u128::from(next())).collect();
        for &a in hosts.iter().chain(&others).chain(&randoms) {
            let want = if hosts.contains(&a) { XDP_DROP } else { XDP_PASS } as u32;
            let shown = std::net::Ipv6Addr::from(a);
            assert_eq!(kernel.test_run(&udp_from6(a)).unwrap(), want, "{shown} (fill {max_load})");
        }
    }
}
