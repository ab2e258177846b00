//! docs/operator.md's "What it will and will not touch" table against the code: the default
//! of every row switched by a config key is that key's built-in default, every tunable
//! mergetune can write has a row that is not "never", and what the "never" rows name is
//! nothing it can write.

use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;

struct Row {
    what: String,
    default: String,
    switch: String,
}

fn table() -> Vec<Row> {
    let doc = crate::repo::text("docs/operator.md");
    let at = doc
        .find("## What it will and will not touch")
        .expect("the section");
    let section = &doc[at..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let rows: Vec<Row> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---") && !l.starts_with("| what "))
        .map(|l| {
            let cells: Vec<String> = l
                .trim()
                .trim_start_matches('|')
                .trim_end_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect();
            assert_eq!(cells.len(), 4, "four columns: {l}");
            Row {
                what: cells[0].clone(),
                default: cells[1].clone(),
                switch: cells[3].clone(),
            }
        })
        .collect();
    assert!(rows.len() >= 5, "{section}");
    rows
}

#[test]
fn each_switched_row_says_the_built_in_default() {
    let defaults = toml::Value::try_from(Config::default()).unwrap();
    let mut checked = 0;
    for row in table() {
        // "`[slices] enabled`": a boolean key of the config.
        let switch = row.switch.trim_matches('`');
        let Some((section, key)) = switch.strip_prefix('[').and_then(|s| s.split_once("] ")) else {
            continue;
        };
        let value = &defaults[section][key];
        if let Some(on) = value.as_bool() {
            let want = if on { "on" } else { "off" };
            assert_eq!(row.default, want, "{}: [{section}] {key} = {on}", row.what);
            checked += 1;
        }
    }
    assert!(checked >= 3, "policy, slices and sense rows");
}

#[test]
fn every_tunable_it_can_write_has_a_row_and_the_never_rows_name_none() {
    let rows = table();
    for t in Tunable::ALL {
        let name = format!("`{}`", t.file_name());
        let path = format!("`{}`", t.rel_path());
        let row = rows
            .iter()
            .find(|r| r.what.contains(&name) || r.what.contains(&path))
            .unwrap_or_else(|| panic!("{} has no row", t.rel_path()));
        assert_ne!(row.default, "never", "{}: it can write it", t.rel_path());
    }
    for row in rows.iter().filter(|r| r.default == "never") {
        for t in Tunable::ALL {
            assert!(
                !row.what.contains(&format!("`{}`", t.file_name())),
                "{} is writable but listed as never: {}",
                t.file_name(),
                row.what
            );
        }
    }
}

#[test]
fn by_default_only_nomerges_and_front_merges_are_written() {
    // The table's first claim, against the config: the slice tuner is off.
    let cfg = Config::default();
    assert!(cfg.policy.enabled);
    assert!(!cfg.slices.enabled, "the slice tuner is opt-in");
    let written: Vec<String> = table()
        .into_iter()
        .filter(|r| r.default == "on" && r.what.contains("queue/"))
        .map(|r| r.what)
        .collect();
    assert_eq!(
        written,
        [
            "`queue/nomerges`",
            "`queue/iosched/front_merges` (mq-deadline)"
        ],
        "tunables written by default"
    );
}
