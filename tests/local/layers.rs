//! The folder layout is the architecture: every import points down a layer, and no module
//! imports one that imports it back, at any depth: between the top-level modules, and
//! between the files (and subfolders) of one folder, in bootlet and in the testplane. Read
//! from the sources (test code excluded), so a new `use crate::…` or `use super::…` that
//! breaks the layering fails here, not in a review.
mod sources;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sources::ModPath;

/// Each top-level module of `src/` → the top-level modules its non-test code names
/// (`lib.rs` and `main.rs` are `lib`).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources::crate_paths(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let top = |path: &ModPath| path.first().cloned().unwrap_or_else(|| "lib".into());
    let modules: BTreeSet<String> = files.keys().map(top).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, named) in &files {
        let from = top(module);
        let deps = graph.entry(from.clone()).or_default();
        for dep in named.iter().filter_map(|p| p.first()) {
            if *dep != from && modules.contains(dep) {
                deps.insert(dep.clone());
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    at: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    for next in graph.get(at).into_iter().flatten() {
        if next == start {
            let mut found = path.clone();
            found.push(next.clone());
            return Some(found);
        }
        if !path.contains(next) {
            path.push(next.clone());
            if let Some(c) = cycle_from(graph, start, next, path) {
                return Some(c);
            }
            path.pop();
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        if let Some(cycle) = cycle_from(&graph, start, start, &mut path) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn every_import_points_down_a_layer() {
    // Bottom to top. Imports within a layer are fine while they make no cycle (above).
    let layer = |m: &str| match m {
        "runtime" | "pki" | "checkid" | "defaults" | "metrics" | "version" | "purpose" => 0,
        "api" | "cli" | "config" => 1,
        "identity" | "lease" | "approve" => 2,
        "doctor" | "agent" | "error" => 3,
        "lib" | "main" => 4,
        other => panic!("src/{other}: put the new module in a layer here"),
    };
    let graph = imports();
    for (module, deps) in &graph {
        for dep in deps {
            assert!(
                layer(dep) <= layer(module),
                "{module} (layer {}) imports {dep} (layer {}): imports point down",
                layer(module),
                layer(dep)
            );
        }
    }
    // The bottom layer is leaves: runtime names only the check ids, pki only the
    // certificates' specs (purpose.rs, pure data), purpose nothing of ours.
    assert!(
        graph["runtime"].iter().all(|d| d == "checkid"),
        "runtime imports {:?}",
        graph["runtime"]
    );
    assert!(
        graph["pki"].iter().all(|d| d == "purpose"),
        "pki imports {:?}",
        graph["pki"]
    );
    assert!(
        graph["purpose"].is_empty(),
        "purpose imports {:?}",
        graph["purpose"]
    );
}

/// Edges between siblings: for every name a file uses, the two children of the nearest
/// common folder that the user and the used module sit in (neither inside the other: a
/// module and its own parent or child are one unit, as `mod` makes them).
fn sibling_edges(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = sources::crate_paths(src);
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (from, named) in &files {
        for path in named {
            // The module the path names: its longest prefix that is a file of the crate.
            let Some(to) = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| files.contains_key(p))
            else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                edges
                    .entry(from[..=common].to_vec())
                    .or_default()
                    .insert(to[..=common].to_vec());
            }
        }
    }
    edges
}

fn assert_no_sibling_cycle(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(crate_dir)
        .join("src");
    let edges: BTreeMap<String, BTreeSet<String>> = sibling_edges(&src)
        .into_iter()
        .map(|(k, v)| (k.join("/"), v.into_iter().map(|p| p.join("/")).collect()))
        .collect();
    assert!(
        !edges.is_empty(),
        "no imports found under {}",
        src.display()
    );
    let cycles: Vec<String> = edges
        .keys()
        .filter_map(|start| cycle_from(&edges, start, start, &mut vec![start.clone()]))
        .map(|cycle| cycle.join(" -> "))
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles in {crate_dir}/src:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_file_imports_a_sibling_that_imports_it_back() {
    assert_no_sibling_cycle(".");
}

#[test]
fn no_testplane_file_imports_a_sibling_that_imports_it_back() {
    assert_no_sibling_cycle("testplane");
}
