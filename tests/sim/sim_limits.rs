//! The simulator's cap on bios in flight: a workload that would keep
//! more bios alive than [`mergetune_sim::scenario::MAX_IN_FLIGHT_BIOS`] stops the run with
//! a clear error instead of growing memory without bound.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
}

/// 64 MiB bios through a dm-stripe of 4 KiB chunks: 16,384 pieces each, 32 in flight.
const PIECES_SCENARIO: &str = "name = \"pieces\"\n\
    [[device]]\nname = \"sdb\"\nkind = \"ssd\"\n\
    [[device]]\nname = \"sdc\"\nkind = \"ssd\"\n\
    [[device]]\nname = \"dm-0\"\nkind = \"dm-stripe\"\nmembers = [\"sdb\", \"sdc\"]\nchunk_kb = 4\n\
    [[phase]]\nname = \"p\"\nduration_s = 10.0\n\
    [[phase.job]]\nname = \"big\"\ndevice = \"dm-0\"\nblock_size_kb = 65536\niodepth = 32\n";

#[test]
fn bios_in_flight_are_capped_with_a_clear_error() {
    use mergetune_sim::engine::SimError;
    use mergetune_sim::engine::Simulation;
    use mergetune_sim::scenario::Scenario;
    let sc = Scenario::from_toml_str(PIECES_SCENARIO, "pieces.toml", None).unwrap();
    let mut sim = Simulation::new(&sc).unwrap();
    sim.run_to_end();
    match sim.halted() {
        Some(SimError::TooManyInFlight { cap, job, .. }) => {
            assert_eq!(*cap, mergetune_sim::scenario::MAX_IN_FLIGHT_BIOS);
            assert_eq!(job, "big");
        }
        other => panic!("expected the in-flight cap, got {other:?}"),
    }
    // The command line says so and fails, rather than printing a partial report.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pieces.toml");
    std::fs::write(&p, PIECES_SCENARIO).unwrap();
    let out = bin()
        .args(["simulate", "--policy", "off"])
        .arg(&p)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("bios in flight"), "{stderr}");
}
