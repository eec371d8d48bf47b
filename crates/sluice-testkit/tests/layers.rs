//! The house's layering, checked from the crates' manifests (what
//! `cargo tree -e normal` shows): no product crate depends on another
//! product's crate, directly or through a shared one, and the control
//! plane every product shares depends on no engine, set or product.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crates a user runs as a product (one shape: config, `start`,
/// `Running`, a summary).
const PRODUCTS: &[&str] = &["sluice-filter", "sluice-bridge", "sluice-shield", "sluice-guard", "sluice-httpbed"];

/// Each workspace crate's normal (not dev, not build) dependencies on
/// other workspace crates.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut g = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
        let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = doc["package"]["name"].as_str().unwrap().to_owned();
        let deps = doc.get("dependencies").and_then(|d| d.as_table()).cloned().unwrap_or_default();
        g.insert(name, deps.keys().filter(|k| k.starts_with("sluice-")).cloned().collect());
    }
    g
}

/// Everything `name` depends on, however far down.
fn below(g: &BTreeMap<String, BTreeSet<String>>, name: &str) -> BTreeSet<String> {
    let (mut seen, mut todo) = (BTreeSet::new(), vec![name.to_owned()]);
    while let Some(n) = todo.pop() {
        for d in g.get(&n).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn no_product_depends_on_another_and_the_control_plane_on_no_engine() {
    let g = graph();
    assert!(g.len() > 20 && PRODUCTS.iter().all(|p| g.contains_key(*p)), "read {} manifests: {:?}", g.len(), g.keys());
    for p in PRODUCTS {
        let reached: Vec<_> = below(&g, p).into_iter().filter(|d| PRODUCTS.contains(&d.as_str())).collect();
        assert!(reached.is_empty(), "{p} depends on the product crates {reached:?}");
    }
    let control = below(&g, "sluice-control");
    let forbidden: Vec<_> = ["sluice-engine", "sluice-sets", "sluice-pipeline", "sluice-policy", "sluice-bgp"]
        .into_iter()
        .chain(PRODUCTS.iter().copied())
        .filter(|c| control.contains(*c))
        .collect();
    assert!(forbidden.is_empty(), "sluice-control depends on {forbidden:?}");
}
