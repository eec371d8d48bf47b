//! What the names tests of `sluice-guard` and `sluice-bridge` share: key
//! paths of a summary, metric families of an exposition, and the check
//! against a kept list (`SLUICE_BLESS=1` rewrites the list instead).

use std::collections::BTreeSet;
use std::path::Path;

/// Every key path of `v`: `a`, `a.b`, `a[].b` (arrays: the union of their
/// elements' keys); the children of the keys in `data_keyed` (maps keyed
/// by what occurred, such as reasons) are data, not names.
pub fn key_paths(v: &serde_json::Value, at: &str, data_keyed: &[&str], out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                out.insert(p.clone());
                if !data_keyed.contains(&k.as_str()) {
                    key_paths(v, &p, data_keyed, out);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| key_paths(i, &format!("{at}[]"), data_keyed, out)),
        _ => {}
    }
}

/// The metric families of an exposition (`# TYPE NAME KIND` lines).
pub fn metric_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// `names` against the list in `path` (one per line).
pub fn same_as_listed(names: &BTreeSet<String>, path: &Path) {
    if std::env::var("SLUICE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(path, names.iter().map(|n| format!("{n}\n")).collect::<String>()).unwrap();
        return;
    }
    let listed: BTreeSet<String> =
        std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    let gone: Vec<_> = listed.difference(names).collect();
    let new: Vec<_> = names.difference(&listed).collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "{}: no longer served {gone:?}; new, not listed {new:?}",
        path.display()
    );
}
