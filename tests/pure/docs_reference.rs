//! The docs as a reference, checked against the tree: every quoted cross-reference
//! (`docs/policy.md "Sensing at L3"`, in a page or in a source comment) names a heading that
//! exists; no page is over [`MAX_PAGE_LINES`]; no date outside CHANGELOG.md (history lives
//! there, the pages say what is true now); no file cites an issue by number; and
//! docs/configuration.md lists every config key with its built-in default, its bounds as
//! `validate()` enforces them and what a reload does with it, so the page cannot drift from
//! the code.

use mergetune_logic::config::{Config, load_str};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The longest a docs page may be: past it, a page holds more than one topic.
const MAX_PAGE_LINES: usize = 600;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and every docs/*.md, by path relative to the root.
fn pages() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    out.sort();
    out.push("README.md".into());
    out
}

/// Every file a cross-reference may sit in: the pages and the tree's sources, configs and
/// scripts. CHANGELOG.md is left out: it is history, and names headings as they were then.
fn referring_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if [".rs", ".md", ".toml", ".yaml", ".sh", ".py"]
                .iter()
                .any(|x| name.ends_with(x))
                || ["Makefile", "build-deb", "run", "main"].contains(&name.as_str())
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for d in [
        "docs",
        "src",
        "crates",
        "lab-cli",
        "tests",
        "config",
        "packaging",
        "benches",
        "systemd",
        "vmlab",
        "workspace-hack",
        ".ci",
    ] {
        walk(&root().join(d), &mut out);
    }
    for f in ["README.md", "Cargo.toml", "Makefile"] {
        out.push(root().join(f));
    }
    out.sort();
    out
}

/// The headings of a markdown page (outside code blocks), as written after the `#`s.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(line[hashes..].trim().to_string());
        }
    }
    out
}

/// Whether `quoted` names `heading`: the heading itself, or the heading without a trailing
/// parenthesis (`Sensing at L3` names "Sensing at L3 (`[sense]`)").
fn names(quoted: &str, heading: &str) -> bool {
    quoted == heading
        || heading
            .strip_prefix(quoted)
            .is_some_and(|rest| rest.starts_with(" (") && rest.ends_with(')'))
}

/// A quoted reference: the page it names and the heading text.
#[derive(Debug)]
struct Reference {
    page: String,
    heading: String,
    at: String,
}

/// The quoted headings after byte `from` of `text`: `"A"`, then any `, "B"` or ` and "C"`.
fn quoted_after(text: &str, from: usize) -> Vec<String> {
    let rest = &text[from..];
    let mut out = Vec::new();
    let mut cur = match ["\"", " \"", ", \"", " (\"", ", (\""]
        .iter()
        .find(|p| rest.starts_with(*p))
    {
        Some(p) => &rest[p.len()..],
        None => return out,
    };
    while let Some(end) = cur.find('"') {
        let h = &cur[..end];
        if h.is_empty() || h.contains('\n') || !h.starts_with(|c: char| c.is_uppercase()) {
            break;
        }
        out.push(h.to_string());
        cur = &cur[end + 1..];
        match [", \"", " and \"", ", and \""]
            .iter()
            .find(|p| cur.starts_with(*p))
        {
            Some(p) => cur = &cur[p.len()..],
            None => break,
        }
    }
    out
}

/// Every quoted reference in `text` (the file `file`, a path relative to the root):
/// `docs/X.md "H"`, `docs/X.md, "H"`, `docs/X.md ("H"`, `README.md "H"`, a bare `X.md "H"`
/// inside docs/ (a page naming its neighbour), and `above, "H"` / `below, "H"` (this page).
fn references(file: &str, text: &str) -> Vec<Reference> {
    let line_of = |i: usize| text[..i].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (i, _) in text.match_indices(".md") {
        let start = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/')))
            .map_or(0, |s| s + 1);
        let name = &text[start..i];
        let page = if name == "README" {
            "README.md".to_string()
        } else if let Some(n) = name.strip_prefix("docs/") {
            format!("docs/{n}.md")
        } else if file.starts_with("docs/") && !name.contains('/') && !name.is_empty() {
            format!("docs/{name}.md")
        } else {
            continue;
        };
        for heading in quoted_after(text, i + 3) {
            out.push(Reference {
                page: page.clone(),
                heading,
                at: format!("{file}:{}", line_of(i)),
            });
        }
    }
    if file.ends_with(".md") {
        for word in ["above", "below"] {
            for (i, _) in text.match_indices(word) {
                for heading in quoted_after(text, i + word.len() + 1)
                    .into_iter()
                    .filter(|_| text[i + word.len()..].starts_with(","))
                {
                    out.push(Reference {
                        page: file.to_string(),
                        heading,
                        at: format!("{file}:{}", line_of(i)),
                    });
                }
            }
        }
    }
    out
}

#[test]
fn the_reference_parser_reads_every_form() {
    let text = "a docs/policy.md \"Sensing at L3\" and docs/fleet.md, \"Rolling out\"; \
                see docs/metrics.md (\"Cost\") and README.md \"Install\", \"Try it\" and \"Uninstall\"; \
                not \"docs/operator.md\"), \"x\"";
    let got: Vec<(String, String)> = references("src/x.rs", text)
        .into_iter()
        .map(|r| (r.page, r.heading))
        .collect();
    let want: Vec<(String, String)> = [
        ("docs/policy.md", "Sensing at L3"),
        ("docs/fleet.md", "Rolling out"),
        ("docs/metrics.md", "Cost"),
        ("README.md", "Install"),
        ("README.md", "Try it"),
        ("README.md", "Uninstall"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    let inside = references("docs/x.md", "policy.md \"Safety\"; below, \"Units\"");
    assert_eq!(inside.len(), 2, "{inside:?}");
    assert_eq!(inside[0].page, "docs/policy.md");
    assert_eq!(inside[1].page, "docs/x.md");
    assert!(names("Sensing at L3", "Sensing at L3 (`[sense]`)"));
    assert!(!names("Safety", "Safety rules"));
}

#[test]
fn every_quoted_cross_reference_names_a_heading_that_exists() {
    let mut heads: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pages() {
        heads.insert(p.clone(), headings(&read(&p)));
    }
    let mut checked = 0;
    let mut broken = Vec::new();
    for path in referring_files() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let rel = path.strip_prefix(root()).unwrap().to_string_lossy();
        if rel.ends_with("docs_reference.rs") {
            continue; // its own examples
        }
        for r in references(&rel, &text) {
            checked += 1;
            match heads.get(&r.page) {
                None => broken.push(format!("{}: {} does not exist", r.at, r.page)),
                Some(h) if !h.iter().any(|h| names(&r.heading, h)) => broken.push(format!(
                    "{}: {} has no heading {:?}",
                    r.at, r.page, r.heading
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        checked >= 30,
        "only {checked} references found: the parser is blind"
    );
    assert!(
        broken.is_empty(),
        "broken references:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_docs_page_is_longer_than_a_topic() {
    let long: Vec<String> = pages()
        .into_iter()
        .map(|p| (read(&p).lines().count(), p))
        .filter(|(n, _)| *n > MAX_PAGE_LINES)
        .map(|(n, p)| format!("{p}: {n} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_PAGE_LINES} lines, split by topic: {long:?}"
    );
}

/// Whether `s` holds an ISO date (`2026-12-04`).
fn iso_dates(s: &str) -> usize {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(9))
        .filter(|&i| {
            let d = |j: usize| b[i + j].is_ascii_digit();
            b[i] == b'2'
                && b[i + 1] == b'0'
                && d(2)
                && d(3)
                && b[i + 4] == b'-'
                && d(5)
                && d(6)
                && b[i + 7] == b'-'
                && d(8)
                && d(9)
                && (i == 0 || !b[i - 1].is_ascii_digit())
        })
        .count()
}

/// The lines of `files` that `offends` picks, each as `path:line: text` (the path from
/// the root).
fn lines_where(files: impl IntoIterator<Item = PathBuf>, offends: fn(&str) -> bool) -> Vec<String> {
    files
        .into_iter()
        .flat_map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let rel = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            text.lines()
                .enumerate()
                .filter(|(_, l)| offends(l))
                .map(|(i, l)| format!("{rel}:{}: {l}", i + 1))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn no_dates_outside_the_changelog() {
    // The pages say what is true now, each figure with its kernel, machine, command and
    // commit; when it changed is the CHANGELOG's.
    assert_eq!(
        iso_dates("on 2026-12-04, and 2026-12-05 too; not 12026-1-1"),
        2
    );
    let dated = lines_where(pages().iter().map(|p| root().join(p)), |l| iso_dates(l) > 0);
    assert!(
        dated.is_empty(),
        "dates outside CHANGELOG.md:\n{}",
        dated.join("\n")
    );
}

/// Whether `line` cites an issue of the project's tracker by number: the word, singular or
/// plural, then a number, with a space or a `#` between (the test below gives examples).
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue").any(|(i, word)| {
        let starts_a_word = !lower[..i].ends_with(|c: char| c.is_ascii_alphanumeric());
        let rest = lower[i + word.len()..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        starts_a_word && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn no_file_cites_an_issue_outside_the_changelog() {
    // A comment, test or page says what it pins and why in its own words: a tracker's
    // number explains nothing to a reader without the tracker, and what once broke is the
    // CHANGELOG's. (The examples are split so that this file passes its own test.)
    for cited in [
        concat!("/// Issue", " 35.11: a live run wrote"),
        concat!("(issue", " 34)"),
        concat!("issues", " 22 and 23"),
        concat!("see issue", " #4"),
    ] {
        assert!(cites_an_issue(cited), "{cited}");
    }
    for plain in [
        "an issue with a key",
        "the issues 'tis",
        "tissue 3",
        "issue: 3",
    ] {
        assert!(!cites_an_issue(plain), "{plain}");
    }
    let citing = lines_where(referring_files(), cites_an_issue);
    assert!(
        citing.is_empty(),
        "files that cite an issue by number:\n{}",
        citing.join("\n")
    );
}

/// A row of docs/configuration.md: `section.key` and its cells.
#[derive(Debug)]
struct KeyRow {
    key: String,
    default: String,
    bounds: String,
    reload: String,
}

/// The key tables of docs/configuration.md, each under its `## [section]` heading.
fn config_page() -> Vec<KeyRow> {
    let doc = read("docs/configuration.md");
    let mut section = None;
    let mut rows = Vec::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## [") {
            section = h.strip_suffix(']').map(str::to_string);
            continue;
        }
        let (Some(s), Some(rest)) = (&section, line.strip_prefix("| `")) else {
            continue;
        };
        let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
        assert!(cells.len() >= 6, "six columns: {line}");
        rows.push(KeyRow {
            key: format!("{s}.{}", cells[0].trim_end_matches('`')),
            default: cells[1].trim_matches('`').to_string(),
            bounds: cells[3].to_string(),
            reload: cells[4].to_string(),
        });
    }
    rows
}

/// Every key of the config and its built-in default, as TOML writes it: `section.key`.
fn defaults() -> BTreeMap<String, String> {
    let value: toml::Table = toml::from_str(&toml::to_string(&Config::default()).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for (section, table) in &value {
        for (key, v) in table.as_table().unwrap() {
            out.insert(format!("{section}.{key}"), v.to_string());
        }
    }
    out
}

#[test]
fn the_configuration_page_lists_every_key_once_with_its_built_in_default() {
    let rows = config_page();
    let want = defaults();
    assert!(want.len() > 40, "{want:?}");
    let mut seen = BTreeMap::new();
    for r in &rows {
        assert!(
            seen.insert(r.key.clone(), ()).is_none(),
            "{} listed twice",
            r.key
        );
        match want.get(&r.key) {
            None => panic!(
                "docs/configuration.md lists {}, which the config has not",
                r.key
            ),
            Some(d) => assert_eq!(&r.default, d, "the default of {}", r.key),
        }
    }
    let missing: Vec<&String> = want.keys().filter(|k| !seen.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}

/// `A..=B` at the start of a bounds cell, in backquotes.
fn range(cell: &str) -> Option<(f64, f64)> {
    let inner = cell.strip_prefix('`')?;
    let inner = &inner[..inner.find('`')?];
    let (lo, hi) = inner.split_once("..=")?;
    Some((lo.parse().ok()?, hi.parse().ok()?))
}

/// The config with `section.key` set to `value` (TOML syntax), loaded.
fn load_with(key: &str, value: &str) -> Result<Config, String> {
    let (section, key) = key.split_once('.').unwrap();
    load_str(&format!("[{section}]\n{key} = {value}\n"), "page.toml").map_err(|e| e.to_string())
}

#[test]
fn every_range_on_the_configuration_page_is_the_one_the_config_enforces() {
    let mut checked = 0;
    for r in config_page() {
        let Some((lo, hi)) = range(&r.bounds) else {
            continue;
        };
        let float = r.default.contains('.');
        let show = |v: f64| {
            if float {
                format!("{v:?}")
            } else {
                format!("{}", v as i64)
            }
        };
        let step = if float { 0.001 * hi.max(1.0) } else { 1.0 };
        let name = r.key.split_once('.').unwrap().1;
        for outside in [lo - step, hi + step] {
            match load_with(&r.key, &show(outside)) {
                Ok(_) => panic!(
                    "{} = {} loads, outside the page's {}",
                    r.key,
                    show(outside),
                    r.bounds
                ),
                Err(e) => assert!(e.contains(name), "{}: {e}", r.key),
            }
        }
        // The upper bound itself is allowed where no other key constrains it.
        if !r.bounds.contains(", ") {
            let at = show(hi);
            let upper = load_with(&r.key, &at);
            assert!(
                upper.is_ok() || r.key.ends_with("_percent"),
                "{} = {at}, the page's upper bound, is refused: {upper:?}",
                r.key
            );
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} ranges checked");
}

#[test]
fn the_reload_column_is_what_a_reload_does() {
    use mergetune_daemon::reload::vet;
    let rows = config_page();
    for r in &rows {
        assert!(
            ["next tick", "refused", "restart"].contains(&r.reload.as_str()),
            "{}: reload {:?}",
            r.key,
            r.reload
        );
    }
    // `refused` is the keys the daemon's reload check refuses.
    let old = Config::default();
    let mut moved = old.clone();
    moved.daemon.state_dir = "/run/elsewhere".into();
    assert!(vet(&old, &moved).is_err());
    let refused: Vec<&str> = rows
        .iter()
        .filter(|r| r.reload == "refused")
        .map(|r| r.key.as_str())
        .collect();
    assert_eq!(refused, ["daemon.state_dir"]);
    let mut other = old.clone();
    other.policy.cost_profile = "lkml-2008".into();
    other.daemon.interval_ms = 500;
    other.metrics.listen = String::new();
    assert!(vet(&old, &other).is_ok());
}

#[test]
fn help_and_man_pages_name_only_keys_of_the_configuration_page() {
    // The man pages are rendered from the same clap definition as `--help`
    // (src/cli/generate.rs): what the help says of a config key, the man page says.
    use clap::CommandFactory;
    let rows = config_page();
    let keys: BTreeMap<&str, &str> = rows
        .iter()
        .map(|r| (r.key.as_str(), r.default.as_str()))
        .collect();
    let sections: Vec<String> = defaults()
        .keys()
        .map(|k| k.split('.').next().unwrap().to_string())
        .collect();
    let mut named = 0;
    let cmd = mergetune::cli::args::Cli::command();
    let mut cmds = vec![cmd.clone()];
    cmds.extend(cmd.get_subcommands().cloned());
    for c in &cmds {
        for arg in c.get_arguments() {
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            for (i, _) in help.match_indices('.') {
                let before: String = help[..i]
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let after: String = help[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !sections.contains(&before) || after.is_empty() {
                    continue;
                }
                let key = format!("{before}.{after}");
                named += 1;
                let Some(default) = keys.get(key.as_str()) else {
                    panic!(
                        "`{} --{}` names {key}, not on docs/configuration.md",
                        c.get_name(),
                        arg.get_id()
                    );
                };
                for d in arg.get_default_values() {
                    assert_eq!(
                        d.to_string_lossy().trim_matches('"'),
                        default.trim_matches('"'),
                        "{key}: --help's default against the page's"
                    );
                }
            }
        }
    }
    assert!(named >= 3, "the overrides of run name their keys: {named}");
}
