//! The metrics endpoint as the live loop's [`Exporter`]: a tick's results go into the
//! [`Metrics`] the endpoint serves, and the loop's stop closes the endpoint.

use crate::http::ServerHandle;
use crate::metrics::Metrics;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::service::Exporter;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_logic::decision::Decision;
use std::sync::Arc;

/// The served metrics and the server serving them.
pub struct Endpoint {
    pub metrics: Arc<Metrics>,
    /// `None` once shut down.
    pub server: Option<ServerHandle>,
}

impl Exporter for Endpoint {
    fn refresh(&self, daemon: &Daemon, decisions: &[Decision], timing: TickTiming) {
        self.metrics.update(daemon, decisions, timing);
    }
    fn observe_tick(&self, timing: TickTiming) {
        self.metrics.observe_tick(timing);
    }
    fn config_reload(&self, ok: bool) {
        self.metrics.config_reload(ok);
    }
    fn shutdown(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
    }
}
