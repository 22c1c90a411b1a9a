//! Registration in the `conductors` table, heartbeats, and the clean-up a conductor owes
//! after a crash (its own stale node locks).

use std::sync::Arc;

use tokio::sync::watch;

use crate::Conductor;

impl Conductor {
    /// At process start: releases node locks an earlier run of this conductor left
    /// behind (a crash), then registers as online.
    pub async fn start(self: &Arc<Self>) -> Result<(), ironic_model::Error> {
        let host = &self.settings.host;
        let released = self.db.node_release_all(host).await?;
        if released > 0 {
            tracing::warn!(
                host,
                released,
                "released node locks left by an earlier run of this conductor"
            );
        }
        self.register().await
    }

    /// Registers (again) as online. Never touches locks: operations of this process may
    /// hold some right now.
    async fn register(&self) -> Result<(), ironic_model::Error> {
        let host = &self.settings.host;
        let c = self
            .db
            .conductor_register(host, &self.settings.conductor_group, &self.drivers.names())
            .await?;
        tracing::info!(host, conductor_id = c.id, drivers = ?c.drivers, "conductor registered");
        Ok(())
    }

    /// Heartbeats every `heartbeat_interval` until `stop` turns true, then unregisters.
    pub async fn heartbeat_until(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let host = self.settings.host.clone();
        let mut tick = tokio::time::interval(self.settings.heartbeat_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    match self.db.conductor_heartbeat(&host).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(host, "conductor row vanished; registering again");
                            if let Err(e) = self.register().await {
                                tracing::error!(host, error = %e, "re-registration failed");
                            }
                        }
                        Err(e) => tracing::error!(host, error = %e, "heartbeat failed"),
                    }
                }
                _ = stop.changed() => break,
            }
        }
        match self.db.conductor_unregister(&host).await {
            Ok(()) => tracing::info!(host, "conductor unregistered"),
            Err(e) => tracing::error!(host, error = %e, "could not unregister"),
        }
    }
}
