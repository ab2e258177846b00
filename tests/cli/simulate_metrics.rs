//! `simulate --metrics-listen ADDR --speed X` serves the simulated devices' metrics while
//! the scenario runs, through the same exporter as the daemon.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::{free_port, http_get as get};

#[test]
fn simulate_serves_metrics_while_running() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["-q", "simulate", "--metrics-listen", &addr, "--speed", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut body = String::new();
    // The default scenario steps sda down the ladder within its first 30 simulated
    // seconds (1.5 s at 20x): wait for a decision to show.
    while Instant::now() < deadline {
        if let Some(b) = get(&addr, "/metrics")
            && b.contains("device=\"sda\"")
            && b.contains("mergetune_decisions_total{")
        {
            body = b;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("mergetune_device_ladder_level{device=\"sda\"}"),
        "{body}"
    );
    assert!(body.contains("mergetune_build_info"), "{body}");
}

#[test]
fn speed_without_metrics_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["simulate", "--speed", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--speed"));
}
