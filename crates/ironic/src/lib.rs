//! Wiring of the three services, each started by its own binary:
//!
//! - `ironic` ([`Role::AllInOne`]): the REST API and one conductor in one process, over
//!   the in-process transport (the conductor is called directly) and, by default, SQLite;
//! - `ironic-api` ([`Role::Api`]): the REST API; node calls go over AMQP to the conductor
//!   the hash ring names;
//! - `ironic-conductor` ([`Role::Conductor`]): a conductor serving RPC over AMQP.
//!
//! The same handlers and engine run in every role; only the transport differs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ironic_api::auth::{Auth, Htpasswd};
use ironic_api::{ApiSettings, AppState, Inner};
use ironic_conductor::service::{Service, bus_settings};
use ironic_config::{AuthStrategy, Config};
use ironic_db::topology::Topology;
use ironic_db::{Db, DbOptions};
use ironic_model::node::NodeDefaults;
use ironic_rpc::Conductors;
use ironic_rpc::amqp::{Client, RemoteConductors};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod cli;
pub mod oneview_migrate;
pub mod telemetry;

/// Which service a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    AllInOne,
    Api,
    Conductor,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::AllInOne => "ironic",
            Role::Api => "ironic-api",
            Role::Conductor => "ironic-conductor",
        }
    }
}

struct ApiServer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    refresher: JoinHandle<()>,
    /// Refreshes the topology on membership announcements (split deployment).
    watcher: Option<JoinHandle<()>>,
}

/// A running service.
pub struct Running {
    /// Where the REST API listens (none for a conductor).
    pub addr: Option<SocketAddr>,
    pub db: Db,
    api: Option<ApiServer>,
    conductor: Option<Service>,
    client: Option<Arc<Client>>,
}

impl Running {
    /// The REST API's address (`127.0.0.1:0` for a conductor-only process).
    pub fn api_addr(&self) -> SocketAddr {
        self.addr
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Graceful stop: the API stops accepting and finishes requests in flight, then the
    /// conductor goes offline and finishes what it accepted, then the bus closes.
    pub async fn shutdown(self) {
        if let Some(api) = self.api {
            let _ = api.stop.send(true);
            let _ = api.task.await;
            api.refresher.abort();
            if let Some(w) = api.watcher {
                w.abort();
            }
        }
        if let Some(c) = self.conductor {
            c.shutdown().await;
        }
        if let Some(c) = self.client {
            c.shutdown().await;
        }
        // Work abandoned at the drain timeout may still hold connections.
        if tokio::time::timeout(Duration::from_secs(5), self.db.close())
            .await
            .is_err()
        {
            tracing::warn!("database connections still busy at exit");
        }
    }
}

/// Why a service could not start. `Display` is what the binaries print.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Database(#[from] ironic_model::Error),
    #[error(transparent)]
    Conductor(#[from] ironic_conductor::service::StartError),
    /// The API's authentication is misconfigured (no user file, an unreadable one).
    #[error("{0}")]
    Auth(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The all-in-one service.
pub async fn start(cfg: Config) -> Result<Running, StartError> {
    start_role(cfg, Role::AllInOne).await
}

async fn open_db(cfg: &Config, role: Role) -> Result<Db, StartError> {
    let db = Db::connect(
        &cfg.database.url,
        &DbOptions {
            max_connections: cfg.database.max_connections,
            create: role == Role::AllInOne,
        },
    )
    .await?;
    if role == Role::AllInOne {
        db.migrate().await?;
    } else {
        db.check_schema().await?;
    }
    tracing::info!(url = %redact(&cfg.database.url), "database ready");
    Ok(db)
}

/// Starts the service of `role`.
pub async fn start_role(cfg: Config, role: Role) -> Result<Running, StartError> {
    let db = open_db(&cfg, role).await?;
    let cluster = db.cluster_id().await?;
    tracing::info!(cluster = %cluster, "deployment identified");
    let mut conductor = None;
    let mut client = None;
    let mut watcher = None;
    let api: Option<Conductors> = match role {
        Role::AllInOne => {
            let svc = Service::start(&cfg, db.clone(), None).await?;
            let local = Conductors::in_process(svc.conductor.clone());
            conductor = Some(svc);
            Some(local)
        }
        Role::Conductor => {
            let bus = bus_settings(&cfg, role.name(), &cluster);
            conductor = Some(Service::start(&cfg, db.clone(), Some(bus)).await?);
            None
        }
        Role::Api => None,
    };
    let mut running = Running {
        addr: None,
        db: db.clone(),
        api: None,
        conductor,
        client: None,
    };
    if role == Role::Conductor {
        tracing::info!(host = %cfg.default.host, "ironic-conductor serving");
        return Ok(running);
    }
    let topology = Arc::new(Topology::new(
        db.clone(),
        ironic_db::Liveness::new(
            cfg.conductor.heartbeat_interval,
            cfg.conductor.heartbeat_timeout,
        ),
        cfg.default.hash_partition_exponent,
    ));
    topology.refresh().await;
    let refresher = topology.spawn_refresher(Duration::from_secs(
        cfg.conductor.heartbeat_interval.clamp(1, 10),
    ));
    let conductors = match api {
        Some(a) => a,
        None => {
            let c = Client::start(bus_settings(&cfg, role.name(), &cluster));
            if !c.connected(Duration::from_secs(5)).await {
                tracing::warn!("the message bus is not reachable yet; calls will wait for it");
            }
            // Conductors announce (un)registrations: re-read the list at once.
            let (mut changes, t) = (c.membership(), topology.clone());
            watcher = Some(tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    t.refresh().await;
                    tracing::info!("conductor list re-read after a membership announcement");
                }
            }));
            client = Some(c.clone());
            Conductors::remote(RemoteConductors::new(c, topology.clone()))
        }
    };
    running.client = client;
    let auth = match cfg.api.auth_strategy {
        AuthStrategy::Noauth => Auth::NoAuth,
        AuthStrategy::HttpBasic => {
            let path = cfg
                .api
                .http_basic_auth_user_file
                .as_deref()
                .ok_or_else(|| StartError::Auth("http_basic needs a user file".into()))?;
            Auth::HttpBasic(Htpasswd::open(path).map_err(StartError::Auth)?)
        }
    };
    let listen = |source| StartError::Listen {
        addr: cfg.api.listen,
        source,
    };
    let listener = tokio::net::TcpListener::bind(cfg.api.listen)
        .await
        .map_err(listen)?;
    let addr = listener.local_addr().map_err(listen)?;
    let state = AppState(Arc::new(Inner {
        db,
        conductor: conductors,
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
    let (stop, mut stop_srv) = watch::channel(false);
    let task = tokio::spawn(async move {
        let res = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_srv.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = res {
            tracing::error!(error = %e, "server stopped with an error");
        }
    });
    tracing::info!(%addr, host = %cfg.default.host, "{} serving", role.name());
    running.addr = Some(addr);
    running.api = Some(ApiServer {
        stop,
        task,
        refresher,
        watcher,
    });
    Ok(running)
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
