//! Prints `compare` tables for scenario files (a tuning aid; `simulate --compare` is the
//! user-facing command). MERGETUNE_CONFIG=path picks the daemon config.
use mergetune::config::{Config, load_file};
use mergetune::sim::Scenario;
fn main() {
    let cfg = match std::env::var("MERGETUNE_CONFIG") {
        Ok(p) => load_file(std::path::Path::new(&p)).unwrap(),
        Err(_) => Config::default(),
    };
    let mut all = Vec::new();
    for p in std::env::args().skip(1) {
        let sc = Scenario::load_file(std::path::Path::new(&p)).unwrap();
        all.push(mergetune::compare::compare(&sc, &cfg).unwrap());
    }
    print!(
        "{}",
        mergetune::compare::render(
            &all,
            cfg.daemon.interval_ms * u64::from(cfg.policy.window_ticks)
        )
    );
}
