//! The all-in-one service: the REST API and one conductor in one process, wired to the
//! same engine and handlers as the split deployment, over an in-process transport
//! (the conductor is called directly) and, by default, SQLite.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ironic_api::auth::{Auth, Htpasswd};
use ironic_api::topology::Topology;
use ironic_api::{ApiSettings, AppState, Inner};
use ironic_conductor::{Conductor, ConductorSettings};
use ironic_config::{AuthStrategy, Config};
use ironic_db::{Db, DbOptions};
use ironic_model::node::NodeDefaults;
use ironic_rpc::InProcess;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running all-in-one service.
pub struct Running {
    pub addr: SocketAddr,
    pub db: Db,
    stop: watch::Sender<bool>,
    stop_api: watch::Sender<bool>,
    server: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
    refresher: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, unregisters the conductor.
    pub async fn shutdown(self) {
        // First the API: stop accepting and let requests in flight finish; then the
        // conductor goes offline.
        let _ = self.stop_api.send(true);
        let _ = self.server.await;
        let _ = self.stop.send(true);
        let _ = self.heartbeat.await;
        self.refresher.abort();
        self.db.close().await;
    }
}

/// Opens (and migrates) the database, registers the conductor and starts serving.
pub async fn start(cfg: Config) -> Result<Running, String> {
    let db = Db::connect(
        &cfg.database.url,
        &DbOptions {
            max_connections: cfg.database.max_connections,
            create: true,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    db.migrate().await.map_err(|e| e.to_string())?;
    tracing::info!(url = %redact(&cfg.database.url), "database ready");

    let drivers = ironic_drivers::Registry::new(&cfg.default.enabled_hardware_types)?;
    let conductor = Conductor::new(db.clone(), drivers, ConductorSettings::from_config(&cfg));
    conductor.start().await.map_err(|e| e.to_string())?;
    let (stop, stop_rx) = watch::channel(false);
    let heartbeat = tokio::spawn(conductor.clone().heartbeat_until(stop_rx));

    let topology = Arc::new(Topology::new(
        db.clone(),
        cfg.conductor.heartbeat_timeout,
        cfg.default.hash_partition_exponent,
    ));
    topology.refresh().await;
    let refresher = topology.spawn_refresher(Duration::from_secs(
        cfg.conductor.heartbeat_interval.clamp(1, 10),
    ));

    let auth = match cfg.api.auth_strategy {
        AuthStrategy::Noauth => Auth::NoAuth,
        AuthStrategy::HttpBasic => {
            let path = cfg
                .api
                .http_basic_auth_user_file
                .as_deref()
                .ok_or("http_basic needs a user file")?;
            Auth::HttpBasic(Htpasswd::open(path)?)
        }
    };
    let listener = tokio::net::TcpListener::bind(cfg.api.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.api.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let state = AppState(Arc::new(Inner {
        db: db.clone(),
        conductor: Arc::new(InProcess(conductor)),
        topology,
        auth,
        settings: ApiSettings {
            public_endpoint: cfg.api.public_endpoint.clone(),
            fallback_base: format!("http://{addr}"),
            max_limit: cfg.api.max_limit,
            max_body: cfg.api.max_request_body_bytes,
            defaults: NodeDefaults {
                conductor_group: cfg.default.default_conductor_group.to_ascii_lowercase(),
                resource_class: cfg.default.default_resource_class.clone(),
            },
        },
    }));
    let app = ironic_api::router(state);
    let (stop_api, mut stop_srv) = watch::channel(false);
    let server = tokio::spawn(async move {
        let res = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_srv.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = res {
            tracing::error!(error = %e, "server stopped with an error");
        }
    });
    tracing::info!(%addr, host = %cfg.default.host, "ironic all-in-one serving");
    Ok(Running {
        addr,
        db,
        stop,
        stop_api,
        server,
        heartbeat,
        refresher,
    })
}

/// A database URL without its password, for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            super::redact("sqlite://data/x.sqlite"),
            "sqlite://data/x.sqlite"
        );
    }
}
