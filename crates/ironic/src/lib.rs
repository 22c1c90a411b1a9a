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

use ironic_api::auth::{Auth, Basic, Htpasswd, LoginLimiter, RolesFile};
use ironic_api::{ApiSettings, AppState, Inner};
use ironic_conductor::service::{Service, bus_settings};
use ironic_config::{AuthStrategy, Config};
use ironic_db::topology::Topology;
use ironic_db::{Db, DbOptions};
use ironic_model::node::NodeDefaults;
use ironic_rpc::Conductors;
use ironic_rpc::amqp::{Client, RemoteConductors, SigningKey, SigningKeys};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// mimalloc for every service binary: under concurrent requests glibc's malloc spent a
/// tenth of the API's CPU waiting for its arena lock (perf, issue 19).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod cli;
mod image_server;
pub mod oneview_migrate;
pub mod ops;
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

/// The conductor's own small HTTP listener (`/healthz`, `/readyz`, `/metrics`).
struct OpsServer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// A running service.
pub struct Running {
    /// Where the REST API listens (none for a conductor).
    pub addr: Option<SocketAddr>,
    /// Where a conductor serves `/healthz`, `/readyz` and `/metrics` (`[conductor]
    /// http_listen`; the API and the all-in-one serve them on the API port).
    pub ops_addr: Option<SocketAddr>,
    /// Where the image server serves `[deploy] http_root` (`image_server.rs`; none when
    /// `[deploy] http_listen` is empty, and for an API-only process).
    pub images_addr: Option<SocketAddr>,
    pub db: Db,
    api: Option<ApiServer>,
    ops: Option<OpsServer>,
    images: Option<OpsServer>,
    /// Keeps the database pool gauges current.
    pool_gauges: JoinHandle<()>,
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
        ops::notify_stopping();
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
        for o in [self.ops, self.images].into_iter().flatten() {
            let _ = o.stop.send(true);
            let _ = o.task.await;
        }
        self.pool_gauges.abort();
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

impl Running {
    /// After a start that failed half way: whatever started stops at once, and a
    /// registered conductor unregisters (no settling, no drain: it served nothing).
    async fn abandon(self) {
        if let Some(api) = self.api {
            let _ = api.stop.send(true);
            api.task.abort();
            api.refresher.abort();
            if let Some(w) = api.watcher {
                w.abort();
            }
        }
        for o in [self.ops, self.images].into_iter().flatten() {
            let _ = o.stop.send(true);
            o.task.abort();
        }
        if let Some(c) = self.conductor {
            c.abandon().await;
        }
        self.pool_gauges.abort();
        if let Some(c) = self.client {
            c.shutdown().await;
        }
    }
}

/// Why a service could not start. The binaries print its chain
/// (`ironic_model::error::chain`): each cause once.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Database(#[from] ironic_model::Error),
    #[error(transparent)]
    Conductor(#[from] ironic_conductor::service::StartError),
    /// The API's authentication is misconfigured (no user file named).
    #[error("{0}")]
    Auth(String),
    /// The API's user or roles file cannot be read or is malformed.
    #[error(transparent)]
    AuthFile(#[from] ironic_api::auth::AuthFileError),
    /// The API's certificate or key cannot be used (the display names the file).
    #[error("TLS: {0}")]
    ApiTls(#[from] ops::TlsError),
    /// TLS for the message bus cannot be set up, or there is no bus to serve with.
    #[error("TLS: {0}")]
    Tls(String),
    /// No usable key to sign messages on the bus.
    #[error("bus signing key")]
    SigningKey(#[source] ironic_rpc::amqp::KeyError),
    #[error("cannot listen on {addr}")]
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
            acquire_timeout: Duration::from_secs(cfg.database.acquire_timeout.max(1)),
            statement_timeout: Some(Duration::from_millis(cfg.database.statement_timeout_ms)),
        },
    )
    .await?;
    if role == Role::AllInOne {
        db.migrate().await?;
    } else {
        db.check_schema().await?;
    }
    let tls = match db.tls_in_use().await {
        Ok(Some(true)) => "on",
        Ok(Some(false)) => "off",
        Ok(None) => "local file",
        Err(_) => "unknown",
    };
    tracing::info!(url = %redact(&cfg.database.url), tls, "database ready");
    Ok(db)
}

fn limits(cfg: &Config) -> ops::HttpLimits {
    ops::HttpLimits {
        header_read_timeout: Duration::from_secs(cfg.api.header_read_timeout.max(1)),
        request_timeout: Duration::from_secs(cfg.api.request_timeout.max(1)),
        max_concurrent_requests: cfg.api.max_concurrent_requests.max(1),
        ramdisk: ops::RamdiskBudget {
            max_concurrent_requests: cfg.api.ramdisk_max_concurrent_requests.max(1),
            per_second: cfg.api.ramdisk_requests_per_second,
            burst: cfg.api.ramdisk_burst.max(1),
        },
        tls: None,
        max_connections: None,
        connection_lifetime: None,
        trusted_proxies: cfg
            .api
            .trusted_proxies
            .iter()
            .filter_map(|p| ironic_config::parse_network(p))
            .collect(),
    }
}

/// The checks every process's `/readyz` runs: the database answers and its schema is
/// current.
fn database_checks(db: &Db) -> Vec<(&'static str, ops::Check)> {
    let (a, b) = (db.clone(), db.clone());
    vec![
        (
            "database",
            ops::check(move || {
                let db = a.clone();
                async move { Ok(db.ping(Duration::from_secs(2)).await?) }
            }),
        ),
        (
            "schema",
            ops::check(move || {
                let db = b.clone();
                async move {
                    let wait = Duration::from_secs(2);
                    match tokio::time::timeout(wait, db.check_schema()).await {
                        Ok(r) => Ok(r?),
                        Err(_) => Err(ops::NotReady::DatabaseTimeout(wait)),
                    }
                }
            }),
        ),
    ]
}

/// Sets `ironic_db_pool_connections` every 5 s.
fn spawn_pool_gauges(db: Db) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            let (open, idle, max) = db.pool_stats();
            let idle = idle as f64;
            metrics::gauge!("ironic_db_pool_connections", "state" => "idle").set(idle);
            metrics::gauge!("ironic_db_pool_connections", "state" => "in_use")
                .set((f64::from(open) - idle).max(0.0));
            metrics::gauge!("ironic_db_pool_connections", "state" => "max").set(f64::from(max));
        }
    })
}

/// Serves `app` in the background with the configured limits.
fn spawn_server(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ops::HttpLimits,
) -> (watch::Sender<bool>, JoinHandle<()>) {
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(ops::serve(listener, app, limits, stop_rx));
    (stop, task)
}

/// The keys that sign and verify messages on the bus: `[amqp] signing_key_file`, else
/// the deployment's key in the database; `[amqp] accept_signing_key_file` is accepted
/// too. An unreadable or short key stops the start.
async fn bus_keys(cfg: &Config, db: &Db) -> Result<SigningKeys, StartError> {
    let signs = match &cfg.amqp.signing_key_file {
        Some(path) => SigningKey::from_file(path),
        None => SigningKey::new(db.bus_signing_key().await?),
    }
    .map_err(StartError::SigningKey)?;
    let keys = SigningKeys::new(signs);
    match &cfg.amqp.accept_signing_key_file {
        Some(path) => {
            Ok(keys.also_accepting(SigningKey::from_file(path).map_err(StartError::SigningKey)?))
        }
        None => Ok(keys),
    }
}

/// What a service process creates is its user's and group's only: ISOs carrying the
/// agent's token, instance images, collected logs, the SQLite database (the network
/// boot files a TFTP server reads are made readable on purpose, `ironic-conductor` `boot_files.rs`).
const UMASK: u32 = 0o027;

/// Starts the service of `role`.
pub async fn start_role(cfg: Config, role: Role) -> Result<Running, StartError> {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(UMASK));
    if role != Role::Conductor && cfg.public_noauth() && !cfg.api.allow_public_noauth {
        return Err(StartError::Auth(format!(
            "auth_strategy is noauth and the API would listen on {}: anyone who can reach it would have full control. Use http_basic (docs/security.md), listen on loopback, or set [api] allow_public_noauth = true if that is meant",
            cfg.api.listen
        )));
    }
    // Fail before anything starts on a certificate that cannot be used.
    let tls = match (&cfg.api.tls_cert_file, &cfg.api.tls_key_file) {
        (Some(cert), Some(key)) if role != Role::Conductor => Some(ops::tls_acceptor(cert, key)?),
        _ => None,
    };
    ops::metrics();
    let db = open_db(&cfg, role).await?;
    let cluster = db.cluster_id().await?;
    tracing::info!(cluster = %cluster, "deployment identified");
    // Everything that can fail is done before the conductor registers: a conductor in
    // the list takes a share of the nodes, so one that cannot serve must never show
    // there. Every listener is bound (a taken port fails here), the API's users and
    // roles are read, the bus settings made.
    let bus = match role {
        Role::AllInOne => None,
        _ => {
            let keys = bus_keys(&cfg, &db).await?;
            Some(
                bus_settings(&cfg, role.name(), &cluster, keys)
                    .map_err(|e| StartError::Tls(e.to_string()))?,
            )
        }
    };
    let prepared = match role {
        Role::Conductor => Prepared::Conductor(match cfg.conductor.http_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        }),
        Role::AllInOne | Role::Api => {
            let (listener, addr) = bind(cfg.api.listen).await?;
            Prepared::Api {
                listener,
                addr,
                auth: api_auth(&cfg)?,
                bus: bus.clone(),
            }
        }
    };
    // The image server's listener, bound now for the same reason; the addresses the
    // agent and the BMCs are given follow from what was bound, unless configured.
    let images = match (role, cfg.deploy.http_listen) {
        (Role::AllInOne | Role::Conductor, Some(a)) => Some(bind(a).await?),
        _ => None,
    };
    let mut cfg = cfg;
    if let Some((_, bound)) = &images
        && cfg.deploy.http_url.is_none()
        && !bound.ip().is_unspecified()
    {
        cfg.deploy.http_url = Some(format!("http://{bound}"));
    }
    if let Prepared::Api { addr, .. } = &prepared
        && role == Role::AllInOne
        && cfg.deploy.external_callback_url.is_none()
        && cfg.api.public_endpoint.is_none()
        && !addr.ip().is_unspecified()
    {
        let scheme = if tls.is_some() { "https" } else { "http" };
        cfg.deploy.external_callback_url = Some(format!("{scheme}://{addr}"));
    }
    let cfg = cfg;
    let conductor = match role {
        Role::AllInOne => Some(Service::start(&cfg, db.clone(), None).await?),
        Role::Conductor => Some(Service::start(&cfg, db.clone(), bus).await?),
        Role::Api => None,
    };
    let mut running = Running {
        addr: None,
        ops_addr: None,
        db: db.clone(),
        api: None,
        ops: None,
        images_addr: None,
        images: None,
        pool_gauges: spawn_pool_gauges(db.clone()),
        conductor,
        client: None,
    };
    if let Some((listener, bound)) = images {
        let app = image_server::router(&cfg.deploy.http_root);
        let limits = ops::HttpLimits {
            max_concurrent_requests: cfg.deploy.http_max_connections,
            max_connections: Some(cfg.deploy.http_max_connections),
            connection_lifetime: Some(Duration::from_secs(
                cfg.deploy.http_connection_lifetime.max(1),
            )),
            ..limits(&cfg)
        };
        let (stop, task) = spawn_server(listener, app, limits);
        running.images = Some(OpsServer { stop, task });
        running.images_addr = Some(bound);
        tracing::info!(
            addr = %bound,
            root = %cfg.deploy.http_root.display(),
            "image server serving [deploy] http_root"
        );
    }
    match serve(&cfg, role, &mut running, prepared, tls).await {
        Ok(()) => Ok(running),
        Err(e) => {
            // Registered and then failed: gone from the list at once, not counted
            // alive until its heartbeat times out.
            running.abandon().await;
            Err(e)
        }
    }
}

/// A listener bound, and the address it got (port 0 picks one).
async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let listen = |source| StartError::Listen { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
    let bound = listener.local_addr().map_err(listen)?;
    Ok((listener, bound))
}

/// What a process serves, made ready (listeners bound, users read) before its conductor
/// registers.
#[allow(clippy::large_enum_variant)] // One value per process start.
enum Prepared {
    /// A conductor's `/healthz`, `/readyz` and `/metrics` (`[conductor] http_listen`;
    /// none when it is empty).
    Conductor(Option<(tokio::net::TcpListener, SocketAddr)>),
    /// The REST API (`[api] listen`), its authentication, and in a split deployment the
    /// bus to the conductors.
    Api {
        listener: tokio::net::TcpListener,
        addr: SocketAddr,
        auth: Auth,
        bus: Option<ironic_rpc::amqp::BusSettings>,
    },
}

/// The API's authentication, from `[api]`.
fn api_auth(cfg: &Config) -> Result<Auth, StartError> {
    Ok(match cfg.api.auth_strategy {
        AuthStrategy::Noauth => Auth::NoAuth,
        AuthStrategy::HttpBasic => {
            let missing = |what: &str| StartError::Auth(format!("http_basic needs {what}"));
            let users = cfg
                .api
                .http_basic_auth_user_file
                .as_deref()
                .ok_or_else(|| missing("a user file"))?;
            let roles = cfg
                .api
                .http_basic_roles_file
                .as_deref()
                .ok_or_else(|| missing("a roles file"))?;
            Auth::HttpBasic(Box::new(Basic {
                users: Htpasswd::open(users)?,
                roles: RolesFile::open(roles)?,
                limiter: LoginLimiter::new(
                    cfg.api.max_failed_logins,
                    cfg.api.max_failed_logins_per_address,
                    Duration::from_secs(cfg.api.failed_login_window),
                ),
            }))
        }
    })
}

/// What a process serves once its conductor (if any) runs: a conductor's ops listener,
/// or the REST API. An error here leaves `running` to be abandoned.
async fn serve(
    cfg: &Config,
    role: Role,
    running: &mut Running,
    prepared: Prepared,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<(), StartError> {
    let db = running.db.clone();
    let (listener, addr, auth, bus) = match prepared {
        Prepared::Api {
            listener,
            addr,
            auth,
            bus,
        } => (listener, addr, auth, bus),
        Prepared::Conductor(ops_listener) => {
            if let (Some((listener, bound)), Some(svc)) = (ops_listener, &running.conductor) {
                let mut checks = database_checks(&db);
                if let Some(rx) = svc.consuming_watch() {
                    checks.push((
                        "message bus",
                        ops::check(move || {
                            let up = *rx.borrow();
                            async move {
                                if up {
                                    Ok(())
                                } else {
                                    Err(ops::NotReady::NotConsuming)
                                }
                            }
                        }),
                    ));
                }
                let (c, limit) = (
                    svc.conductor.clone(),
                    svc.conductor.settings().liveness.timeout,
                );
                checks.push((
                    "heartbeat",
                    ops::check(move || {
                        let since = c.since_last_heartbeat();
                        async move {
                            match since {
                                Some(t) if t < limit => Ok(()),
                                Some(t) => Err(ops::NotReady::HeartbeatLate(t)),
                                None => Err(ops::NotReady::NoHeartbeat),
                            }
                        }
                    }),
                ));
                let (stop, task) =
                    spawn_server(listener, ops::router(ops::Readiness(checks)), limits(cfg));
                running.ops = Some(OpsServer { stop, task });
                running.ops_addr = Some(bound);
                tracing::info!(addr = %bound, "serving /healthz, /readyz and /metrics");
            }
            tracing::info!(host = %cfg.default.host, "ironic-conductor serving");
            return Ok(());
        }
    };
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
    let mut watcher = None;
    let conductors = match (&mut running.conductor, bus) {
        (Some(svc), _) => svc.in_process(),
        (None, None) => {
            refresher.abort();
            return Err(StartError::Tls(
                "an API without a conductor needs the message bus".into(),
            ));
        }
        (None, Some(bus)) => {
            let c = Client::start(bus);
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
            running.client = Some(c.clone());
            Conductors::remote(RemoteConductors::new(c, topology.clone()))
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = AppState(Arc::new(Inner {
        db: db.clone(),
        conductor: conductors,
        topology,
        auth,
        settings: ApiSettings {
            public_endpoint: cfg.api.public_endpoint.clone(),
            fallback_base: format!("{scheme}://{addr}"),
            scheme,
            max_limit: cfg.api.max_limit,
            max_body: cfg.api.max_request_body_bytes,
            provision_max_body: cfg.api.provision_max_body_bytes,
            inspection_max_body: cfg.api.inspection_max_body_bytes,
            configdrive_max_bytes: cfg.deploy.configdrive_max_bytes,
            body_timeout: Duration::from_secs(cfg.api.body_read_timeout.max(1)),
            max_json_values: cfg.api.max_json_values,
            large_body_json_values: cfg.api.large_body_json_values,
            large_bodies: Arc::new(tokio::sync::Semaphore::new(
                cfg.api.large_bodies_at_once.max(1),
            )),
            defaults: NodeDefaults {
                conductor_group: cfg.default.default_conductor_group.to_ascii_lowercase(),
                resource_class: cfg.default.default_resource_class.clone(),
            },
            ramdisk: ironic_api::ramdisk::RamdiskSettings {
                enabled: cfg.api.enable_ramdisk_endpoints,
                restrict_lookup: cfg.api.restrict_lookup,
                heartbeat_timeout: cfg.api.ramdisk_heartbeat_timeout,
                heartbeat_max_body: cfg.api.heartbeat_max_body_bytes,
                require_tls: cfg.agent.require_tls,
                fast_track: cfg.deploy.fast_track,
                allow_md5_checksum: cfg.agent.allow_md5_checksum,
            },
        },
    }));
    let mut checks = database_checks(&db);
    if let Some(c) = running.client.clone() {
        checks.push((
            "message bus",
            ops::check(move || {
                let c = c.clone();
                async move {
                    if c.connected(Duration::ZERO).await {
                        Ok(())
                    } else {
                        Err(ops::NotReady::NoBus)
                    }
                }
            }),
        ));
    }
    let app = ironic_api::router(state).merge(ops::router(ops::Readiness(checks)));
    let (stop, task) = spawn_server(listener, app, ops::HttpLimits { tls, ..limits(cfg) });
    tracing::info!(%addr, %scheme, host = %cfg.default.host, "{} serving", role.name());
    running.addr = Some(addr);
    running.api = Some(ApiServer {
        stop,
        task,
        refresher,
        watcher,
    });
    Ok(())
}

/// A database URL without its password, for logs.
pub use ironic_config::redact_url as redact;
