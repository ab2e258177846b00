//! Docs that describe files say what the files hold: the comparison suite of
//! docs/simulator.md is the directory's, and the dashboard rows docs/operator.md lists are
//! the dashboard's, in its order.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_comparison_suite_in_simulator_md_is_the_directory() {
    let doc = read("docs/simulator.md");
    let at = doc
        .find("`config/scenarios/compare/` holds the suite")
        .expect("the suite paragraph");
    let para = &doc[at..at + doc[at..].find("\n\n").unwrap()];
    let mut named: Vec<String> = para
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".toml"))
        .map(str::to_string)
        .collect();
    named.sort();
    let mut files: Vec<String> = std::fs::read_dir(root().join("config/scenarios/compare"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    files.sort();
    assert_eq!(named, files, "{para}");
    let count = [
        "", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    if let Some(word) = count.get(files.len()) {
        assert!(
            para.contains(&format!("{word} scenarios")),
            "the paragraph should say {word} scenarios: {para}"
        );
    }
}

#[test]
fn the_dashboard_rows_in_operator_md_are_the_dashboards() {
    let dash: serde_json::Value =
        serde_json::from_str(&read("config/grafana/mergetune.json")).unwrap();
    let mut rows: Vec<(i64, String)> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| {
            let title = p["title"].as_str().unwrap();
            // "Fleet (recording rules of config/mixin)": the name before any comment.
            let name = title.split(" (").next().unwrap().trim().to_string();
            (p["gridPos"]["y"].as_i64().unwrap(), name)
        })
        .collect();
    rows.sort();
    let doc = read("docs/operator.md");
    let at = doc
        .find("- Grafana: import `config/grafana/mergetune.json`.")
        .expect("the dashboard paragraph");
    let para = &doc[at..at + doc[at..].find("\n\n").unwrap()];
    let named: Vec<&str> = para.split("**").skip(1).step_by(2).collect();
    let want: Vec<&str> = rows.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(named, want, "rows top to bottom: {para}");
}
