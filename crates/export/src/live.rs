//! The simulator's live exporter: `mergetune simulate --metrics-listen ADDR --speed X`
//! serves the metrics of the simulated devices while the scenario runs, paced so that
//! virtual time runs at `speed` times wall time. The metrics say they are simulated
//! (`mergetune_simulated 1`, [`Metrics::simulated`]).

use crate::http::{Limits, ServerHandle, serve};
use crate::metrics::Metrics;
use mergetune_daemon::controller::Controller;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_logic::config::parse_listen;
use mergetune_logic::decision::Decision;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serves the metrics of a simulated run while it runs: `mergetune simulate
/// --metrics-listen ADDR --speed X`. The simulator calls [`LiveExporter::on_tick`] after
/// each controller tick; it updates the metrics and sleeps so that virtual time runs at
/// `speed` times real time.
pub struct LiveExporter {
    metrics: Arc<Metrics>,
    server: Option<ServerHandle>,
    speed: Option<f64>,
    started: Instant,
    ticks: u64,
}

impl LiveExporter {
    /// Binds `listen` (e.g. "127.0.0.1:9725") and starts serving. `speed`: virtual seconds
    /// per wall second (None or a non-positive value: as fast as possible).
    pub fn start(listen: &str, speed: Option<f64>) -> anyhow::Result<LiveExporter> {
        let metrics = Arc::new(Metrics::simulated());
        let server = match parse_listen(listen).map_err(anyhow::Error::msg)? {
            Some(addr) => Some(serve(addr, metrics.clone(), Limits::default())?),
            None => None,
        };
        Ok(LiveExporter {
            metrics,
            server,
            speed: speed.filter(|s| s.is_finite() && *s > 0.0),
            started: Instant::now(),
            ticks: 0,
        })
    }

    /// The bound address (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|s| s.local_addr())
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// After each tick of the simulated run: `controller` the one just ticked, `decisions`
    /// what that tick returned, `now_ms` its virtual time, `tick_seconds` the wall time
    /// `controller.tick` took. Controllers other than the adaptive daemon export nothing
    /// per device. Then waits until wall time catches up with `now_ms / speed`.
    pub fn on_tick(
        &mut self,
        controller: &dyn Controller,
        decisions: &[Decision],
        now_ms: u64,
        tick_seconds: f64,
    ) {
        self.ticks += 1;
        self.metrics.update(
            controller,
            decisions,
            TickTiming {
                now_ms,
                duration_seconds: tick_seconds,
                lag_seconds: 0.0,
            },
        );
        if let Some(speed) = self.speed {
            let target = Duration::from_secs_f64(now_ms as f64 / 1000.0 / speed);
            let elapsed = self.started.elapsed();
            if target > elapsed {
                std::thread::sleep(target - elapsed);
            }
        }
    }
}
