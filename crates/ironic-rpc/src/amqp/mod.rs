//! The AMQP transport (RabbitMQ): protobuf requests on a durable direct exchange,
//! replies on a private queue per caller, correlated by id.
//!
//! - Each conductor consumes its own queue `ironic.conductor_manager.<cluster>.<host>`
//!   (node calls, routed by the hash ring) and its deployment's shared queue
//!   `ironic.conductor_manager.<cluster>` (calls for any conductor; RabbitMQ balances
//!   them over the live consumers). `<cluster>` is the deployment's id from the
//!   database; every message also carries it in a header, checked on receipt, so two
//!   deployments on one vhost never take each other's calls by mistake.
//! - Every message is signed ([`signing`]: HMAC-SHA256 over its body and every header
//!   that routes it or gives it meaning, keyed by the deployment's secret); one that is
//!   unsigned or wrongly signed is dropped unrun and unanswered.
//! - Requests are published `mandatory` with publisher confirms: a call to a host whose
//!   queue is gone (the conductor stopped or crashed: its queue is exclusive to its
//!   connection) fails at once instead of waiting for the timeout.
//! - Every request carries an expiration equal to the call timeout and a deadline in its
//!   envelope: a conductor never runs a request its caller has given up on.
//! - Delivery is at most once (a conductor acknowledges on receipt, as oslo.messaging
//!   does): node operations are not idempotent, so a request is never run twice; a caller
//!   whose connection or conductor dies mid-call gets an error saying the outcome is
//!   unknown.
//! - Both sides reconnect by themselves with exponential backoff; queues and consumers
//!   are declared again on every connection. Calls made while the bus is down wait for
//!   it up to their timeout.

//!
//! Modules: [`client`] (the caller's end: one connection, a private reply queue),
//! [`routing`] (which queue a call goes to: the ring owner's, the shared one, a host's),
//! [`server`] (a conductor's consumers, its bounded concurrency and graceful drain) and
//! [`signing`] (the signature every message carries).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ironic_model::Error;
use lapin::options::ExchangeDeclareOptions;
use lapin::types::{FieldTable, LongString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod client;
mod routing;
mod server;
pub mod signing;

pub use client::Client;
pub use routing::RemoteConductors;
pub use server::Server;
pub use signing::{KeyError, SIGNATURE_HEADER, SigningKey, SigningKeys};

/// The topic: prefix of the shared queue and of the per-host queues.
pub const TOPIC: &str = "ironic.conductor_manager";

/// Prefix of the routing key of membership announcements: a conductor publishes one
/// when it registers or unregisters; every caller's reply queue is bound to it, so API
/// processes re-read the conductor list at once instead of at their next periodic
/// refresh.
pub const MEMBERSHIP: &str = "ironic.membership";

/// The message header that carries the sender's cluster id.
pub const CLUSTER_HEADER: &str = "x-ironic-cluster";

/// AMQP `type` of the notice a conductor sends to the caller when it takes a call
/// (headers [`HOST_HEADER`] and [`INCARNATION_HEADER`]: which run of which conductor
/// took it), so that the caller knows whose death or restart would lose the call.
pub const ACCEPTED: &str = "ironic.accepted";

/// The header naming the conductor that sent an [`ACCEPTED`] notice.
pub const HOST_HEADER: &str = "x-ironic-host";

/// The header carrying the incarnation (`conductors.incarnation`) of the conductor run
/// that sent an [`ACCEPTED`] notice.
pub const INCARNATION_HEADER: &str = "x-ironic-incarnation";

/// The conductor run carrying a call out, as the caller knows it: the host its call
/// went to (or that took it from the shared queue) and, once its [`ACCEPTED`] notice
/// has arrived, that run's incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taker {
    pub host: String,
    pub incarnation: Option<i64>,
}

/// `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct BusSettings {
    /// `amqp://user:password@host:port/vhost` (vhost URL-encoded, `%2f` for `/`).
    pub url: String,
    /// The durable direct exchange every request goes through.
    pub exchange: String,
    /// How long a caller waits for a reply (and how long a request may wait in a queue).
    pub call_timeout: Duration,
    /// Requests a conductor takes from the broker before finishing earlier ones.
    pub prefetch: u16,
    /// With `amqps://`: PEM certificates of the authorities to trust besides the
    /// built-in web roots (`[amqp] tls_cacert_file`, read at start).
    pub tls_ca_pem: Option<String>,
    /// How long a request may wait to be taken by a conductor (see
    /// `Request.accept_by_unix_ms`); past it, it is dropped unrun.
    pub accept_timeout: Duration,
    /// Largest wait between reconnection attempts.
    pub max_backoff: Duration,
    /// Shown in RabbitMQ's connection list, e.g. `ironic-conductor@host-a`.
    pub connection_name: String,
    /// The deployment's identity (`Db::cluster_id`): part of every queue name and
    /// routing key, and sent in the [`CLUSTER_HEADER`] of every message, so that two
    /// deployments on one vhost never take each other's calls by mistake.
    pub cluster: String,
    /// The keys every message is signed and verified with (`[amqp] signing_key_file`,
    /// else `Db::bus_signing_key`).
    pub signing: SigningKeys,
}

impl std::fmt::Debug for BusSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusSettings")
            .field("url", &ironic_model::secrets::redact_url(&self.url))
            .field("exchange", &self.exchange)
            .field("call_timeout", &self.call_timeout)
            .field("prefetch", &self.prefetch)
            .field("tls_ca_pem", &self.tls_ca_pem.as_ref().map(|_| "(set)"))
            .field("accept_timeout", &self.accept_timeout)
            .field("max_backoff", &self.max_backoff)
            .field("connection_name", &self.connection_name)
            .field("cluster", &self.cluster)
            .field("signing", &self.signing)
            .finish()
    }
}

impl BusSettings {
    /// The shared queue of this deployment: calls any of its conductors may take.
    pub fn shared_queue(&self) -> String {
        format!("{TOPIC}.{}", self.cluster)
    }

    /// The queue of one conductor of this deployment.
    pub fn host_queue(&self, host: &str) -> String {
        format!("{TOPIC}.{}.{host}", self.cluster)
    }

    /// The routing key of this deployment's membership announcements.
    pub fn membership_key(&self) -> String {
        format!("{MEMBERSHIP}.{}", self.cluster)
    }

    /// The queue a call to `target` goes to.
    pub fn routing_key(&self, target: &Target) -> String {
        match target {
            Target::Host(h) => self.host_queue(h),
            Target::Any => self.shared_queue(),
        }
    }
}

/// The cluster a message says it comes from, if it says.
pub fn sender_cluster(p: &lapin::BasicProperties) -> Option<String> {
    header_text(p, CLUSTER_HEADER)
}

/// A string header of a message.
pub(crate) fn header_text(p: &lapin::BasicProperties, name: &str) -> Option<String> {
    let headers = p.headers().as_ref()?;
    match headers.inner().get(name)? {
        lapin::types::AMQPValue::LongString(s) => Some(s.to_string()),
        lapin::types::AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// A message header table carrying this deployment's id.
pub(crate) fn cluster_headers(cluster: &str) -> FieldTable {
    let mut h = FieldTable::default();
    h.insert(
        CLUSTER_HEADER.into(),
        lapin::types::AMQPValue::LongString(cluster.to_string().into()),
    );
    h
}

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One conductor's own queue.
    Host(String),
    /// The shared queue: whichever live conductor takes it first.
    Any,
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// Nobody consumes the target queue (the conductor is gone).
    Unroutable(String),
    /// The conductor carrying the call out was declared dead before it replied: the
    /// call may or may not have been carried out.
    Lost {
        host: String,
    },
    /// No conductor took the call within the accept window: it was not carried out
    /// (conductors drop what they take later, the broker what is left unread).
    NotTaken(String),
    Failed(Error),
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        CallError::Failed(e)
    }
}

impl From<CallError> for Error {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unroutable(rk) => Error::Unavailable(format!(
                "No conductor is listening on {rk}: it stopped or is restarting. Please retry."
            )),
            CallError::NotTaken(rk) => Error::Unavailable(format!(
                "No conductor took the request from {rk} in time (the conductors are overloaded or the message bus lost it); it was not carried out. Please retry."
            )),
            CallError::Lost { host } => Error::Unavailable(format!(
                "Conductor {host} stopped while carrying out the request; it may or may not have been carried out."
            )),
            CallError::Failed(e) => e,
        }
    }
}

pub(crate) fn bus_error(what: &str, e: lapin::Error) -> Error {
    Error::Unavailable(format!("The message bus is unavailable ({what}: {e})."))
}

/// Opens a connection: `amqp://` plain, `amqps://` over TLS (rustls), verified against
/// the built-in web roots and [`BusSettings::tls_ca_pem`].
pub(crate) async fn connect(s: &BusSettings) -> lapin::Result<Connection> {
    let props = ConnectionProperties::default()
        .with_connection_name(LongString::from(s.connection_name.clone()));
    let tls = lapin::tcp::OwnedTLSConfig {
        identity: None,
        cert_chain: s.tls_ca_pem.clone(),
    };
    Connection::connect_with_config(&s.url, props, tls, lapin::runtime::default_runtime()?).await
}

/// Declares a queue that lives exactly as long as this connection (an empty name lets
/// the broker choose one); returns its name.
pub(crate) async fn declare_exclusive_queue(ch: &Channel, name: &str) -> lapin::Result<String> {
    let q = ch
        .queue_declare(
            name.into(),
            lapin::options::QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(q.name().to_string())
}

pub(crate) async fn declare_exchange(ch: &Channel, s: &BusSettings) -> lapin::Result<()> {
    ch.exchange_declare(
        s.exchange.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Sleeps `backoff` unless asked to stop; doubles it up to `max`. Returns false on stop.
pub(crate) async fn pause(
    backoff: &mut Duration,
    max: Duration,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(max);
    let slept = tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = stop.wait_for(|s| *s) => false,
    };
    slept && !*stop.borrow()
}

/// Longest wait for one connection attempt (a black-holed broker would otherwise take
/// minutes for TCP to give up).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A link that lived at least this long counts as a success: the next reconnection
/// starts from the shortest backoff again. One that died sooner keeps backing off.
pub(crate) const STABLE_LINK: Duration = Duration::from_secs(5);

/// Why a connection attempt failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error(transparent)]
    Bus(#[from] lapin::Error),
    #[error("no answer within {}s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
}

/// Runs a connection attempt unless asked to stop first (`None`), bounded by
/// [`CONNECT_TIMEOUT`].
pub(crate) async fn open_or_stop<T>(
    open: impl Future<Output = lapin::Result<T>>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Result<T, OpenError>> {
    tokio::select! {
        r = tokio::time::timeout(CONNECT_TIMEOUT, open) => Some(match r {
            Ok(r) => r.map_err(OpenError::Bus),
            Err(_) => Err(OpenError::Timeout),
        }),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// Waits (at most `timeout`) until the watched value satisfies `f`.
pub(crate) async fn wait_until<T>(
    mut rx: watch::Receiver<T>,
    timeout: Duration,
    f: impl FnMut(&T) -> bool,
) -> bool {
    tokio::time::timeout(timeout, rx.wait_for(f))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Asks a background task to stop and waits for it (once).
pub(crate) async fn stop_and_join(
    stop: &watch::Sender<bool>,
    task: &Mutex<Option<JoinHandle<()>>>,
) {
    let _ = stop.send(true);
    let task = task.lock().ok().and_then(|mut t| t.take());
    if let Some(t) = task {
        let _ = t.await;
    }
}
