//! The docs `make install` (and so the package) installs link only to docs it installs:
//! every `docs/NAME.md` and `img/NAME` an installed page names is in the Makefile's lists.

use std::collections::BTreeSet;

fn installed() -> BTreeSet<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let make = std::fs::read_to_string(format!("{root}/Makefile")).unwrap();
    let mut set = BTreeSet::new();
    let mut in_list = false;
    for line in make.lines() {
        let l = line.trim();
        if l.starts_with("DOCS =") || l.starts_with("DOCIMG =") {
            in_list = true;
        }
        if in_list {
            for w in l.split_whitespace() {
                if w.starts_with("docs/") {
                    set.insert(w.to_string());
                }
            }
            in_list = l.ends_with('\\');
        }
    }
    set
}

#[test]
fn installed_docs_link_only_to_installed_docs() {
    let root = env!("CARGO_MANIFEST_DIR");
    let installed = installed();
    assert!(installed.contains("docs/operator.md"), "{installed:?}");
    let mut missing = Vec::new();
    for page in installed.iter().filter(|p| p.ends_with(".md")) {
        let text = std::fs::read_to_string(format!("{root}/{page}")).unwrap();
        for (i, _) in text.match_indices("docs/") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '_' | '-' | '.'))
                .collect();
            let name = name.trim_end_matches('.');
            if name.ends_with(".md") && !installed.contains(name) {
                missing.push(format!("{page} names {name}"));
            }
        }
        for (i, _) in text.match_indices("](img/") {
            let name: String = text[i + 2..].chars().take_while(|c| *c != ')').collect();
            let path = format!("docs/{name}");
            if !installed.contains(&path) {
                missing.push(format!("{page} shows {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "not installed: {missing:?}");
}
