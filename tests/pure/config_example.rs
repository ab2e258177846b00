//! The shipped example config documents every key, with the built-in defaults.

use mergetune_logic::config::{Config, load_file};

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
fn example_config_names_every_key() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mergetune.toml"),
    )
    .unwrap();
    let defaults = toml::to_string(&Config::default()).unwrap();
    let value: toml::Table = toml::from_str(&defaults).unwrap();
    for (section, table) in &value {
        assert!(
            text.contains(&format!("[{section}]")),
            "missing section [{section}]"
        );
        for key in table.as_table().unwrap().keys() {
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{key} ="))),
                "config/mergetune.toml does not document {section}.{key}"
            );
        }
    }
}
