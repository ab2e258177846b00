//! The layers point one way: kernel, logic, daemon, export, sim, lab, then the command line
//! (the root package). Each layer is a crate of the workspace, so the compiler already
//! refuses a crate that uses one it does not depend on, and cargo refuses a cycle of crates.
//! What is left to check is that no crate's Cargo.toml adds a dependency that points up
//! (export depending on sim would compile), and that no modules inside a crate use each
//! other in a circle.
//!
//! The module graph is read from the source text: every `crate::a::b` path, every
//! `mergetune_x::a` path (and `super::b` inside a folder) outside a comment is an edge from
//! the file to the module file it names. The binary (`src/main.rs`) is the top of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: [&str; 7] = ["kernel", "logic", "daemon", "export", "sim", "lab", "cli"];

/// Module path (`["sim", "engine"]`) of a file under a crate's src/: the crate's layer name
/// first (`home`; empty for the root package, whose only module is `cli`).
fn module_of(home: &str, src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = (!home.is_empty())
        .then(|| home.to_string())
        .into_iter()
        .chain(rel.iter().map(|c| c.to_string_lossy().into_owned()))
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The longest prefix of `path` that is a module with a file of its own.
fn resolve(modules: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

fn idents_after(line: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut path = Vec::new();
        let mut tail = rest;
        loop {
            let n = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if n == 0 {
                break;
            }
            path.push(tail[..n].to_string());
            tail = &tail[n..];
            match tail.strip_prefix("::") {
                Some(t) => tail = t,
                None => break,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

struct Graph {
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

/// Every source file of the workspace with its crate's layer name ("" for the root).
fn workspace_files() -> Vec<(String, PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut homes = vec![(String::new(), root.join("src"))];
    for l in &LAYERS[..LAYERS.len() - 1] {
        homes.push((l.to_string(), root.join("crates").join(l).join("src")));
    }
    for (home, src) in homes {
        let mut files = Vec::new();
        rs_files(&src, &mut files);
        files.retain(|f| !f.ends_with("main.rs"));
        out.extend(files.into_iter().map(|f| (home.clone(), src.clone(), f)));
    }
    out
}

fn graph() -> Graph {
    let files = workspace_files();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|(h, src, f)| module_of(h, src, f))
        .collect();
    let mut edges = BTreeMap::new();
    for (home, src, f) in &files {
        let me = module_of(home, src, f);
        let own: Vec<String> = (!home.is_empty())
            .then(|| home.clone())
            .into_iter()
            .collect();
        // `super::b` in module a::m names a::b (no file is a mod.rs: see below).
        let parent: Vec<String> = me[..me.len().saturating_sub(1)].to_vec();
        let text = std::fs::read_to_string(f).unwrap();
        let mut to = BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap();
            for p in idents_after(code, "crate::") {
                let mut full = own.clone();
                full.extend(p);
                if let Some(m) = resolve(&modules, &full) {
                    to.insert(m);
                }
            }
            for l in LAYERS {
                for p in idents_after(code, &format!("mergetune_{l}::")) {
                    let mut full = vec![l.to_string()];
                    full.extend(p);
                    if let Some(m) = resolve(&modules, &full) {
                        to.insert(m);
                    }
                }
            }
            for p in idents_after(code, "super::") {
                let mut full = parent.clone();
                full.extend(p);
                if let Some(m) = resolve(&modules, &full)
                    && m.len() > parent.len()
                {
                    to.insert(m);
                }
            }
        }
        to.remove(&me);
        edges.insert(me, to);
    }
    Graph { edges }
}

fn layer_rank(m: &[String]) -> Option<usize> {
    LAYERS
        .iter()
        .position(|l| m.first().is_some_and(|f| f == l))
}

#[test]
fn modules_use_one_style_a_file_beside_its_folder_never_mod_rs() {
    let mod_rs: Vec<String> = workspace_files()
        .into_iter()
        .filter(|(_, _, f)| f.ends_with("mod.rs"))
        .map(|(_, _, f)| f.display().to_string())
        .collect();
    assert!(
        mod_rs.is_empty(),
        "write foo.rs beside foo/, not foo/mod.rs: {mod_rs:?}"
    );
}

#[test]
fn every_module_lives_in_a_layer() {
    let g = graph();
    let homeless: Vec<String> = g
        .edges
        .keys()
        .filter(|m| !m.is_empty() && layer_rank(m).is_none())
        .map(|m| m.join("::"))
        .collect();
    assert!(
        homeless.is_empty(),
        "modules outside every layer: {homeless:?}"
    );
}

/// The `mergetune-*` dependencies (normal and dev) a Cargo.toml names.
fn layer_deps(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    let mut out = Vec::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = doc.get(section).and_then(|v| v.as_table()) {
            out.extend(
                t.keys()
                    .filter_map(|k| k.strip_prefix("mergetune-"))
                    // No code, only features turned on (workspace-hack/Cargo.toml): no layer.
                    .filter(|k| *k != "workspace-hack")
                    .map(String::from),
            );
        }
    }
    out
}

#[test]
fn every_layer_is_a_crate_and_each_depends_only_on_layers_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    let mut want: Vec<String> = LAYERS[..LAYERS.len() - 1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    want.sort();
    assert_eq!(
        crates, want,
        "crates/ holds one crate per layer below the CLI"
    );
    let mut upward = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let manifest = if *layer == "cli" {
            root.join("Cargo.toml")
        } else {
            root.join("crates").join(layer).join("Cargo.toml")
        };
        for dep in layer_deps(&manifest) {
            let r = LAYERS.iter().position(|l| *l == dep);
            assert!(
                r.is_some(),
                "{}: mergetune-{dep} is no layer",
                manifest.display()
            );
            if r.is_some_and(|r| r >= rank) {
                upward.push(format!("{layer} -> {dep}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "crate dependencies that point up: {upward:?}"
    );
    assert_eq!(
        layer_deps(&root.join("crates/sim/Cargo.toml")),
        ["daemon", "kernel", "logic"],
        "the manifest reader sees the dependencies"
    );
}

#[test]
fn no_module_uses_a_later_layer() {
    let g = graph();
    let mut upward = Vec::new();
    for (from, tos) in &g.edges {
        let Some(rf) = layer_rank(from) else { continue };
        for to in tos {
            if layer_rank(to).is_some_and(|rt| rt > rf) {
                upward.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "edges that point up the layers:\n  {}",
        upward.join("\n  ")
    );
}

/// Known cycles still being taken apart; each entry is the sorted set of modules in one.
/// The list must end empty: a cycle not in it fails, and so does an entry that no longer is
/// a cycle (so the list cannot go stale).
const KNOWN_CYCLES: &[&[&str]] = &[];

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph();
    // Tarjan's strongly connected components.
    struct St<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        next: usize,
        sccs: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a Vec<String>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.g.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.sccs.push(comp);
            }
        }
    }
    let mut s = St {
        g: &g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in g.edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    let cycles: Vec<Vec<String>> = s.sccs;
    let known: Vec<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    let new: Vec<&Vec<String>> = cycles.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<&Vec<String>> = known.iter().filter(|k| !cycles.contains(k)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "modules that use each other in a circle: {new:?}\nKNOWN_CYCLES entries that are no longer cycles: {gone:?}"
    );
}

#[test]
fn the_scanner_sees_edges() {
    // A check on the checker: the adaptive controller uses the pure policy, and the
    // simulator's engine uses the trace parser, so the graph must hold those edges.
    let g = graph();
    let has = |a: &str, b: &str| {
        let a: Vec<String> = a.split("::").map(String::from).collect();
        let b: Vec<String> = b.split("::").map(String::from).collect();
        g.edges.get(&a).is_some_and(|t| t.contains(&b))
    };
    assert!(has("daemon::adaptive", "logic::policy"));
    assert!(has("sim::engine", "kernel::trace"));
    assert!(has("sim::engine", "sim::scenario"), "super:: paths count");
}

/// Each package of the resolved graph with its features, as `cargo tree` prints them for
/// the given kinds of dependency edges (`normal,build` is what `cargo build` compiles,
/// `normal,build,dev` what `cargo test` does).
fn features_by_package(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--offline", "--workspace", "--prefix", "none"])
        .args(["-e", edges, "-f", "{p} [{f}]"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -e {edges}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, features)) = line.split_once(" [") else {
            continue;
        };
        let Some(features) = features.split(']').next() else {
            continue;
        };
        // `name vX.Y.Z`, then `(proc-macro)` or a path: the package is its name and version.
        let package: Vec<&str> = package.split_whitespace().take(2).collect();
        packages.entry(package.join(" ")).or_default().extend(
            features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(String::from),
        );
    }
    packages
}

/// `cargo build --release` and then `cargo test --release` (the README's two commands) must
/// not compile a crate twice: where a dev-dependency turns on a feature of a crate the
/// binary also uses, cargo builds that crate again for the tests, and every crate above it
/// (serde's `alloc`, turned on by criterion, rebuilt all of mergetune). The fix for a
/// failure here is a line in workspace-hack/Cargo.toml.
#[test]
fn the_test_build_reuses_the_release_builds_crates() {
    let build = features_by_package("normal,build");
    let test = features_by_package("normal,build,dev");
    assert!(
        build.keys().any(|p| p.starts_with("serde v")),
        "the reader sees the graph: {:?}",
        build.keys().take(5).collect::<Vec<_>>()
    );
    let differ: Vec<String> = build
        .iter()
        .filter_map(|(package, features)| {
            let in_test = test.get(package)?;
            (in_test != features).then(|| {
                let more: Vec<&String> = in_test.difference(features).collect();
                format!("{package}: the tests add {more:?}")
            })
        })
        .collect();
    assert!(
        differ.is_empty(),
        "crates the test build would compile a second time: {differ:?}"
    );
}
