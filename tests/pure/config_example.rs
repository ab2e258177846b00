//! The shipped example config (also the package's conffile) documents every key with its
//! built-in default, and sets none: every key is commented out (`#key = value`), so the
//! binary supplies the defaults and a default changed in a new version reaches an upgraded
//! host, whose conffile dpkg keeps.

use mergetune_logic::config::{Config, load_file, load_str};

fn shipped() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mergetune.toml"),
    )
    .unwrap()
}

/// The shipped file with every commented-out key (`#key = value`) set.
pub fn uncommented(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if is_key_line(rest) => rest.to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn is_key_line(l: &str) -> bool {
    l.split_once(" = ").is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    })
}

#[test]
fn example_config_loads_and_equals_the_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mergetune.toml");
    let cfg = load_file(&path).unwrap();
    assert_eq!(
        cfg,
        Config::default(),
        "config/mergetune.toml drifted from the defaults"
    );
}

#[test]
fn the_shipped_config_sets_no_key() {
    let table: toml::Table = toml::from_str(&shipped()).unwrap();
    for (section, t) in &table {
        let t = t.as_table().expect("only sections at the top");
        assert!(
            t.is_empty(),
            "config/mergetune.toml sets [{section}] {:?}: a conffile that sets a key keeps its value on upgraded hosts when the default changes; comment it out (#key = value)",
            t.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_commented_values_are_the_defaults() {
    // What the comments say is what the binary does: set, they give the defaults.
    let cfg = load_str(&uncommented(&shipped()), "uncommented.toml").unwrap();
    assert_eq!(
        cfg,
        Config::default(),
        "a commented value in config/mergetune.toml is not the default"
    );
}

#[test]
fn example_config_names_every_key() {
    let text = shipped();
    let defaults = toml::to_string(&Config::default()).unwrap();
    let value: toml::Table = toml::from_str(&defaults).unwrap();
    for (section, table) in &value {
        assert!(
            text.contains(&format!("[{section}]")),
            "missing section [{section}]"
        );
        for key in table.as_table().unwrap().keys() {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("#{key} = "))),
                "config/mergetune.toml does not document {section}.{key} as `#{key} = DEFAULT`"
            );
        }
    }
}
