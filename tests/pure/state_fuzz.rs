//! Fuzz-style property for state.json: whatever bytes sit in `<dir>/state.json`,
//! `FileStore::load` gives Ok or an error naming the file, never a panic. Written against
//! the public `FileStore::load` only (through `StateStore`), so it holds whatever the
//! format inside becomes; the seed document below is the version-1 format and only feeds
//! the mutations.

use mergetune_daemon::state::{FileStore, StateStore};
use proptest::prelude::*;

const SEED: &str = r#"{
  "version": 1,
  "pid": 4242,
  "devices": {
    "sda": {
      "queue/nomerges": { "original": "0", "last_written": "2" },
      "queue/iosched/front_merges": { "original": "1", "last_written": null }
    },
    "nvme0n1": { "queue/nomerges": { "original": "0", "last_written": "1" } }
  }
}
"#;

fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    std::fs::write(&path, bytes).unwrap();
    let store = FileStore::new(dir.path());
    let got = std::panic::catch_unwind(|| store.load().map(|_| ()).map_err(|e| e.to_string()));
    match got {
        Err(_) => prop_assert!(
            false,
            "load panicked on {:?}",
            String::from_utf8_lossy(bytes)
        ),
        Ok(Ok(())) => {}
        Ok(Err(msg)) => {
            let p = path.display().to_string();
            prop_assert!(msg.contains(&p), "{} does not name {}", msg, p);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_load_or_name_the_file(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_state_loads_or_names_the_file(
        edits in proptest::collection::vec((0.0..1.0f64, any::<u8>(), 0..3u8), 1..8),
    ) {
        let mut v = SEED.as_bytes().to_vec();
        for (p, b, op) in edits {
            let i = ((p * v.len() as f64) as usize).min(v.len().saturating_sub(1));
            match op {
                0 if !v.is_empty() => v[i] = b,
                1 => v.insert(i, b),
                _ if !v.is_empty() => {
                    v.remove(i);
                }
                _ => {}
            }
        }
        check(&v)?;
    }

    #[test]
    fn hostile_values_in_a_valid_document_load_or_name_the_file(
        value in prop_oneof![
            Just("\"../../../../etc/passwd\"".to_string()),
            Just("\"/tmp/x/victim\"".to_string()),
            Just("18446744073709551616".to_string()),
            Just("-1".to_string()),
            Just("null".to_string()),
            Just("[]".to_string()),
            Just("{}".to_string()),
            "\"[^\"\\\\]{0,40}\"",
        ],
        slot in 0usize..4,
    ) {
        let doc = match slot {
            0 => SEED.replace("4242", &value),
            1 => SEED.replace("\"sda\"", &value),
            2 => SEED.replace("\"queue/nomerges\"", &value),
            _ => SEED.replace("\"1\"", &value),
        };
        check(doc.as_bytes())?;
    }
}

#[test]
fn a_huge_state_file_is_an_error_or_loads_never_a_panic() {
    // 20 MB of one JSON string: no line structure to lean on.
    let mut doc = String::from("{\"version\": 1, \"pid\": 1, \"devices\": {\"");
    doc.push_str(&"a".repeat(20 << 20));
    doc.push_str("\": {}}}");
    check(doc.as_bytes()).unwrap();
}
