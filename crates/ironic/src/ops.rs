//! What operators watch and what protects the service: the Prometheus metrics recorder,
//! the `/healthz`, `/readyz` and `/metrics` endpoints (on the API port, and on the
//! conductor's own small listener), the hardened HTTP serving loop (header-read and
//! request timeouts, a global concurrency limit with 503 + `Retry-After`), and systemd
//! readiness and watchdog notifications. `docs/operations.md` lists every metric.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;
use tower::{BoxError, ServiceBuilder};

/// The process-wide metrics recorder (installed once, by the first service started in
/// the process).
static METRICS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Latency buckets, in seconds, of every `*_seconds` histogram.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn metrics() -> Option<PrometheusHandle> {
    METRICS
        .get_or_init(|| {
            let built = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .and_then(|b| b.install_recorder());
            match built {
                Ok(h) => {
                    // Histograms need their upkeep (draining samples into buckets) run
                    // now and then, whatever runtime is around: a thread of its own.
                    let upkeep = h.clone();
                    let spawned = std::thread::Builder::new()
                        .name("metrics-upkeep".into())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                upkeep.run_upkeep();
                            }
                        });
                    if let Err(e) = spawned {
                        tracing::warn!(error = %e, "no metrics upkeep thread; histograms are drained at each scrape only");
                    }
                    describe();
                    Some(h)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics are off: the recorder could not be installed");
                    None
                }
            }
        })
        .clone()
}

/// Every metric family this service exports: name, kind, help text. `docs/operations.md`
/// lists them, and the Grafana dashboard in `deploy/grafana/` uses them (a test checks
/// both).
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    (
        "ironic_api_requests_total",
        Kind::Counter,
        "REST API requests by route template, method and status",
    ),
    (
        "ironic_api_request_duration_seconds",
        Kind::Histogram,
        "REST API request latency by route template and method",
    ),
    (
        "ironic_api_requests_in_flight",
        Kind::Gauge,
        "REST API requests being served",
    ),
    (
        "ironic_api_requests_shed_total",
        Kind::Counter,
        "REST API requests refused with 503 because the concurrency limit was reached",
    ),
    (
        "ironic_api_ramdisk_requests_limited_total",
        Kind::Counter,
        "ramdisk-route requests refused with 429 because their client address was past its rate",
    ),
    (
        "ironic_api_login_lockouts_total",
        Kind::Counter,
        "(user, address) pairs and addresses that reached their failed-login limit",
    ),
    (
        "ironic_rpc_calls_total",
        Kind::Counter,
        "RPC calls made by this process, by method and outcome (ok, or the error kind)",
    ),
    (
        "ironic_rpc_call_duration_seconds",
        Kind::Histogram,
        "RPC call latency as the caller sees it, by method",
    ),
    (
        "ironic_rpc_handled_total",
        Kind::Counter,
        "RPC requests a conductor handled, by method and outcome",
    ),
    (
        "ironic_rpc_handled_duration_seconds",
        Kind::Histogram,
        "RPC handling time in the conductor, by method",
    ),
    (
        "ironic_rpc_repeats_total",
        Kind::Counter,
        "calls sent again because the conductor carrying them out died, by method",
    ),
    (
        "ironic_rpc_dropped_late_total",
        Kind::Counter,
        "requests a conductor took after their accept window and dropped unrun, by method",
    ),
    (
        "ironic_rpc_messages_refused_total",
        Kind::Counter,
        "messages on the bus dropped unrun and unanswered because they were unsigned or wrongly signed, by side (server, client) and reason (unsigned, bad_signature)",
    ),
    (
        "ironic_bus_reconnects_total",
        Kind::Counter,
        "connections to the message bus lost and opened again, by side (client, server)",
    ),
    (
        "ironic_conductor_nodes",
        Kind::Gauge,
        "nodes this conductor owns, by provision state, maintenance and power state",
    ),
    (
        "ironic_conductors",
        Kind::Gauge,
        "conductors as this process sees them, by state (alive, offline, dead)",
    ),
    (
        "ironic_conductor_deaths_total",
        Kind::Counter,
        "conductors this process declared dead, by rule (gone, silent)",
    ),
    (
        "ironic_node_lock_wait_seconds",
        Kind::Histogram,
        "time to take a node lock, by outcome (acquired, busy)",
    ),
    (
        "ironic_node_lock_release_failures_total",
        Kind::Counter,
        "node lock releases that failed and were retried",
    ),
    (
        "ironic_allocations_total",
        Kind::Counter,
        "allocations finished by this conductor, by outcome (active, error)",
    ),
    (
        "ironic_allocation_duration_seconds",
        Kind::Histogram,
        "time from an allocation's creation to its outcome, by outcome",
    ),
    (
        "ironic_step_duration_seconds",
        Kind::Histogram,
        "clean and deploy step durations, by kind (clean, deploy), step and outcome",
    ),
    (
        "ironic_periodic_runs_total",
        Kind::Counter,
        "periodic task runs, by task and outcome (ok, error)",
    ),
    (
        "ironic_periodic_running",
        Kind::Gauge,
        "runs of a periodic task in progress (1 while it runs, 0 between runs; absent until its first run), by task",
    ),
    (
        "ironic_periodic_duration_seconds",
        Kind::Histogram,
        "periodic task run time, by task",
    ),
    (
        "ironic_db_pool_connections",
        Kind::Gauge,
        "database pool connections, by state (idle, in_use, max)",
    ),
    (
        "ironic_db_errors_total",
        Kind::Counter,
        "database errors, by what was being done",
    ),
    (
        "ironic_oneview_requests_total",
        Kind::Counter,
        "requests to the OneView appliance, by method and outcome (the HTTP status class, or error)",
    ),
];

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

fn describe() {
    for (name, kind, help) in FAMILIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *help),
            Kind::Gauge => metrics::describe_gauge!(*name, *help),
            Kind::Histogram => {
                metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help)
            }
        }
    }
}

/// Why a readiness check failed: `/readyz` says its chain
/// (`ironic_model::error::chain`) after the check's name.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The database did not answer a round trip.
    #[error(transparent)]
    Database(#[from] ironic_db::PingError),
    /// The schema is older than this build, or could not be read.
    #[error(transparent)]
    Schema(#[from] ironic_model::Error),
    /// A check that waited this long for the database.
    #[error("the database did not answer within {} ms", .0.as_millis())]
    DatabaseTimeout(Duration),
    /// A conductor that does not consume its queues.
    #[error("not consuming RPC requests (no connection to the message bus)")]
    NotConsuming,
    /// An API process without a connection to the bus.
    #[error("no connection to the message bus")]
    NoBus,
    #[error("no heartbeat recorded for {} ms", .0.as_millis())]
    HeartbeatLate(Duration),
    #[error("no heartbeat recorded yet")]
    NoHeartbeat,
}

/// One readiness check: `Ok` or why not.
pub type Check =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), NotReady>> + Send>> + Send + Sync>;

/// Makes a [`Check`] from an async closure.
pub fn check<F, Fut>(f: F) -> Check
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
{
    Arc::new(move || Box::pin(f()))
}

/// The readiness checks of a process, by name.
#[derive(Clone, Default)]
pub struct Readiness(pub Vec<(&'static str, Check)>);

impl Readiness {
    /// Runs every check; `(all passed, one line per check)`.
    pub async fn run(&self) -> (bool, String) {
        let mut ok = true;
        let mut out = String::new();
        for (name, c) in &self.0 {
            match c().await {
                Ok(()) => out.push_str(&format!("{name}: ok\n")),
                Err(e) => {
                    ok = false;
                    let why = ironic_model::error::chain(&e);
                    out.push_str(&format!("{name}: {why}\n"));
                }
            }
        }
        (ok, out)
    }
}

/// `/healthz` (the process answers), `/readyz` (every readiness check passes: 200,
/// else 503 with the failing checks) and `/metrics` (Prometheus text format).
pub fn router(ready: Readiness) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { text(StatusCode::OK, "ok\n".into()) }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    let (ok, body) = ready.run().await;
                    if !ok {
                        tracing::warn!(checks = %body.trim().replace('\n', "; "), "not ready");
                    }
                    let status = if ok {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    text(status, body)
                }
            }),
        )
        .route(
            "/metrics",
            get(|| async {
                match metrics() {
                    Some(h) => {
                        let mut r = text(StatusCode::OK, h.render());
                        r.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                        );
                        r
                    }
                    None => text(StatusCode::NOT_FOUND, "metrics are off\n".into()),
                }
            }),
        )
}

fn text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Limits of the HTTP server (`[api]` options).
#[derive(Clone)]
pub struct HttpLimits {
    /// A client must send its request headers within this time.
    pub header_read_timeout: Duration,
    /// A request (reading its body included) must be answered within this time: 503.
    pub request_timeout: Duration,
    /// Requests served at once; more get 503 with `Retry-After` at once.
    pub max_concurrent_requests: usize,
    /// The ramdisk routes' own budget, apart from `max_concurrent_requests`.
    pub ramdisk: RamdiskBudget,
    /// HTTPS: every connection is a TLS one (its handshake bounded by
    /// `header_read_timeout`). `None`: plain HTTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Connections open at once (a slow reader of a large image holds one for as long
    /// as it reads, past `request_timeout`, which ends at the response's head); more
    /// are closed at once. `None`: as many as come.
    pub max_connections: Option<usize>,
    /// How long one connection may stay open, whatever it does. `None`: no limit.
    pub connection_lifetime: Option<Duration>,
    /// `[api] trusted_proxies`: whose `X-Forwarded-For` names the client
    /// (`ironic_api::client_address`).
    pub trusted_proxies: Arc<[(std::net::IpAddr, u8)]>,
}

/// The budget of the ramdisk routes (`ironic_api::is_ramdisk_route`: public, no
/// credentials): slots of their own, so that clients holding them all (slow bodies, a
/// flood) never make an authenticated call wait or fail, and a rate per client address.
#[derive(Debug, Clone)]
pub struct RamdiskBudget {
    /// Ramdisk requests served at once; more get 503 with `Retry-After` at once.
    pub max_concurrent_requests: usize,
    /// Requests per second per client address; 0: no limit.
    pub per_second: u32,
    /// Requests one address may make at once above the rate.
    pub burst: u32,
}

/// Requests per client address (governor's GCRA, keyed by address).
type AddressLimiter = governor::DefaultKeyedRateLimiter<std::net::IpAddr>;

impl RamdiskBudget {
    fn limiter(&self) -> Option<Arc<AddressLimiter>> {
        let rate = std::num::NonZeroU32::new(self.per_second)?;
        let burst = std::num::NonZeroU32::new(self.burst).unwrap_or(rate);
        Some(Arc::new(governor::RateLimiter::keyed(
            governor::Quota::per_second(rate).allow_burst(burst),
        )))
    }
}

/// 429 for a client address past its rate on the ramdisk routes, with how long to wait.
fn too_many(wait: Duration) -> Response {
    metrics::counter!("ironic_api_ramdisk_requests_limited_total").increment(1);
    ironic_api::error::ApiError::TooManyRequests(wait).into_response()
}

/// Why the API's certificate and key cannot serve TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {}", path.display())]
    CertificateChain {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("cannot read the private key {}", path.display())]
    PrivateKey {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The crypto provider refused the protocol versions (not expected with ring).
    #[error("no TLS protocol version")]
    Protocols(#[source] rustls::Error),
    #[error("the certificate and key do not make a TLS identity")]
    Identity(#[source] rustls::Error),
}

/// A TLS acceptor from a PEM certificate chain and private key (`[api] tls_cert_file`,
/// `tls_key_file`): TLS 1.2 and 1.3, HTTP/1.1.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|source| TlsError::CertificateChain {
            path: cert.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::PrivateKey {
        path: key.to_path_buf(),
        source,
    })?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Protocols)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Identity)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

async fn refuse(e: BoxError) -> Response {
    let (status, msg) = if e.is::<tower::load_shed::error::Overloaded>() {
        metrics::counter!("ironic_api_requests_shed_total").increment(1);
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "The server is busy: too many requests at once. Please retry.",
        )
    } else if e.is::<tower::timeout::error::Elapsed>() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "The request took too long and was abandoned; it may or may not have been carried out.",
        )
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "Internal error.")
    };
    let body = serde_json::json!({
        "error_message": serde_json::json!({
            "faultstring": msg, "faultcode": "Server", "debuginfo": null
        }).to_string()
    });
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// Serves `app` on `listener` until `stop` turns true, then stops accepting and waits
/// for the connections in flight to finish. Every connection must send its headers
/// within `header_read_timeout`; every request is bounded by `request_timeout`; past
/// `max_concurrent_requests` requests at once, the next get 503 + `Retry-After` at once.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
) {
    let stack = |slots: usize| {
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(refuse))
            .load_shed()
            .concurrency_limit(slots.max(1))
            .timeout(limits.request_timeout)
            .service(app.clone())
    };
    // Two pools of slots: the ramdisk routes' and everything else's.
    let main = stack(limits.max_concurrent_requests);
    let ramdisk = stack(limits.ramdisk.max_concurrent_requests);
    let limiter = limits.ramdisk.limiter();
    if let Some(l) = &limiter {
        // Addresses that went quiet are forgotten, so the table stays small; the sweep
        // ends with the server.
        let (l, mut stop) = (l.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        l.retain_recent();
                        l.shrink_to_fit();
                    }
                    _ = stopped(&mut stop) => break,
                }
            }
        });
    }
    let connections = limits
        .max_connections
        .map(|n| std::sync::Arc::new(tokio::sync::Semaphore::new(n.max(1))));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, say: pause rather than spin.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let slot = match &connections {
            None => None,
            Some(c) => match c.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    metrics::counter!("ironic_http_connections_refused_total").increment(1);
                    tracing::debug!(%peer, "connection refused: every connection slot is taken");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (main, ramdisk, limiter) = (main.clone(), ramdisk.clone(), limiter.clone());
        let trusted = limits.trusted_proxies.clone();
        let routed =
            tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                // The client: the connection's peer, or the address a trusted proxy names.
                let client = ironic_api::client_address(
                    peer.ip(),
                    req.headers()
                        .get("x-forwarded-for")
                        .and_then(|v| v.to_str().ok()),
                    &trusted,
                );
                // Handlers see the client's address (failed-login limits, the audit log).
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(SocketAddr::new(
                        client,
                        peer.port(),
                    )));
                let pool = if ironic_api::is_ramdisk_route(req.uri().path()) {
                    if let Some(l) = &limiter
                        && let Err(not_until) = l.check_key(&ironic_api::rate_key(client))
                    {
                        let wait = not_until.wait_time_from(governor::clock::Clock::now(l.clock()));
                        return Box::pin(std::future::ready(Ok(too_many(wait)))) as Routed;
                    }
                    ramdisk.clone()
                } else {
                    main.clone()
                };
                Box::pin(tower::ServiceExt::oneshot(pool, req)) as Routed
            });
        let svc = routed;
        let (http, watcher) = (http.clone(), graceful.watcher());
        let (tls, handshake_timeout) = (limits.tls.clone(), limits.header_read_timeout);
        let lifetime = limits.connection_lifetime;
        tokio::spawn(async move {
            let _slot = slot;
            let svc = TowerToHyperService::new(svc);
            // `None`: the TLS handshake failed (logged).
            let served = async {
                match tls {
                    None => Some(
                        watcher
                            .watch(http.serve_connection(TokioIo::new(stream), svc))
                            .await,
                    ),
                    Some(acceptor) => {
                        match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await
                        {
                            Ok(Ok(tls)) => Some(
                                watcher
                                    .watch(http.serve_connection(TokioIo::new(tls), svc))
                                    .await,
                            ),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                None
                            }
                        }
                    }
                }
            };
            let ended = match lifetime {
                None => served.await,
                Some(most) => match tokio::time::timeout(most, served).await {
                    Ok(ended) => ended,
                    Err(_) => {
                        tracing::info!(%peer, seconds = most.as_secs(), "connection closed: open longer than allowed");
                        None
                    }
                },
            };
            if let Some(Err(e)) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// What a routed request gives: its pool's answer, or a 429 at once.
type Routed = Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Tells systemd (`Type=notify`) that the service is ready, and starts the watchdog
/// pings if the unit has `WatchdogSec=`: `WATCHDOG=1` every half period from a task on
/// the main runtime, so a wedged runtime stops them and systemd restarts the service.
/// Does nothing outside systemd.
pub fn notify_ready() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::debug!(error = %e, "could not notify systemd");
    }
    let mut usec = 0u64;
    if sd_notify::watchdog_enabled(false, &mut usec) && usec > 0 {
        let every = Duration::from_micros(usec / 2);
        tracing::info!(
            every_ms = every.as_millis() as u64,
            "systemd watchdog enabled"
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
            }
        });
    }
}

/// Tells systemd the service is stopping.
pub fn notify_stopping() {
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

#[cfg(test)]
mod tests {
    use super::FAMILIES;

    fn names_in(text: &str) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while let Some(at) = text[i..].find("ironic_") {
            let start = i + at;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
                end += 1;
            }
            let name = &text[start..end];
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            out.insert(base.to_string());
            i = end.max(start + 1);
        }
        out
    }

    /// The dashboard uses only families the service exports.
    #[test]
    fn the_dashboard_uses_exported_families() {
        let dash = include_str!("../../../deploy/grafana/ironic.json");
        let known: std::collections::BTreeSet<&str> = FAMILIES.iter().map(|f| f.0).collect();
        for n in names_in(dash) {
            assert!(
                known.contains(n.as_str()),
                "the dashboard uses {n}, which is not exported"
            );
        }
    }

    /// The operations guide lists every family.
    #[test]
    fn the_operations_guide_lists_every_family() {
        let doc = include_str!("../../../docs/operations.md");
        for (name, _, _) in FAMILIES {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/operations.md does not list {name}"
            );
        }
    }
}
