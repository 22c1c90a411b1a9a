//! The AMQP transport (RabbitMQ): protobuf requests on a durable direct exchange,
//! replies on a private queue per caller, correlated by id.
//!
//! - Each conductor consumes its own queue `ironic.conductor_manager.<host>` (node calls,
//!   routed by the hash ring) and the shared queue `ironic.conductor_manager` (calls for
//!   any conductor; RabbitMQ balances them over the live consumers).
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

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_lite::StreamExt;
use ironic_db::topology::Topology;
use ironic_model::{Allocation, Error, Node};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::convert::{
    allocation_from_pb, allocation_to_pb, error_from_pb, node_from_pb, node_ref_to_pb, node_to_pb,
    patch_to_pb, steps_to_pb,
};
use crate::dispatch::{dispatch, error_reply};
use crate::{
    CleanStep, ConductorApi, Context, InterfaceCheck, NodeRef, RpcFuture, UpdateNode, pb, trace,
};

/// The topic: name of the shared queue and prefix of the per-host queues.
pub const TOPIC: &str = "ironic.conductor_manager";

/// Routing key of membership announcements: a conductor publishes one when it
/// registers or unregisters; every caller's reply queue is bound to it, so API processes
/// re-read the conductor list at once instead of at their next periodic refresh.
pub const MEMBERSHIP: &str = "ironic.membership";

/// The queue of one conductor.
pub fn host_queue(host: &str) -> String {
    format!("{TOPIC}.{host}")
}

#[derive(Debug, Clone)]
pub struct BusSettings {
    /// `amqp://user:password@host:port/vhost` (vhost URL-encoded, `%2f` for `/`).
    pub url: String,
    /// The durable direct exchange every request goes through.
    pub exchange: String,
    /// How long a caller waits for a reply (and how long a request may wait in a queue).
    pub call_timeout: Duration,
    /// Requests a conductor takes from the broker before finishing earlier ones.
    pub prefetch: u16,
    /// Largest wait between reconnection attempts.
    pub max_backoff: Duration,
    /// Shown in RabbitMQ's connection list, e.g. `ironic-conductor@host-a`.
    pub connection_name: String,
}

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One conductor's own queue.
    Host(String),
    /// The shared queue: whichever live conductor takes it first.
    Any,
}

impl Target {
    pub fn routing_key(&self) -> String {
        match self {
            Target::Host(h) => host_queue(h),
            Target::Any => TOPIC.to_string(),
        }
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// Nobody consumes the target queue (the conductor is gone).
    Unroutable(String),
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
            CallError::Failed(e) => e,
        }
    }
}

fn bus_error(what: &str, e: lapin::Error) -> Error {
    Error::Unavailable(format!("The message bus is unavailable ({what}: {e})."))
}

async fn connect(s: &BusSettings) -> lapin::Result<Connection> {
    let props = ConnectionProperties::default()
        .with_connection_name(LongString::from(s.connection_name.clone()));
    Connection::connect(&s.url, props).await
}

async fn declare_exchange(ch: &Channel, s: &BusSettings) -> lapin::Result<()> {
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Sleeps `backoff` unless asked to stop; doubles it up to `max`. Returns false on stop.
async fn pause(backoff: &mut Duration, max: Duration, stop: &mut watch::Receiver<bool>) -> bool {
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
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A link that lived at least this long counts as a success: the next reconnection
/// starts from the shortest backoff again. One that died sooner keeps backing off.
const STABLE_LINK: Duration = Duration::from_secs(5);

/// Runs a connection attempt unless asked to stop first (`None`), bounded by
/// [`CONNECT_TIMEOUT`].
async fn open_or_stop<T>(
    open: impl Future<Output = lapin::Result<T>>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Result<T, String>> {
    tokio::select! {
        r = tokio::time::timeout(CONNECT_TIMEOUT, open) => Some(match r {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
        }),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// Waits (at most `timeout`) until the watched value satisfies `f`.
async fn wait_until<T>(
    mut rx: watch::Receiver<T>,
    timeout: Duration,
    f: impl FnMut(&T) -> bool,
) -> bool {
    tokio::time::timeout(timeout, rx.wait_for(f))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Asks a background task to stop and waits for it (once).
async fn stop_and_join(stop: &watch::Sender<bool>, task: &Mutex<Option<JoinHandle<()>>>) {
    let _ = stop.send(true);
    let task = task.lock().ok().and_then(|mut t| t.take());
    if let Some(t) = task {
        let _ = t.await;
    }
}

// ---------------------------------------------------------------------------------------
// Caller side

type Waiter = oneshot::Sender<Result<Vec<u8>, Error>>;

struct Link {
    channel: Channel,
    reply_to: String,
}

struct ClientInner {
    settings: BusSettings,
    link: watch::Sender<Option<Arc<Link>>>,
    pending: Mutex<HashMap<String, Waiter>>,
    /// Bumped on every membership announcement and every (re)connection (announcements
    /// may have been missed while disconnected).
    membership: watch::Sender<u64>,
}

impl ClientInner {
    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail_all(&self, why: &str) {
        let drained: Vec<Waiter> = self.waiters().drain().map(|(_, w)| w).collect();
        if !drained.is_empty() {
            tracing::warn!(calls = drained.len(), "{why}");
        }
        for w in drained {
            let _ = w.send(Err(Error::Unavailable(why.to_string())));
        }
    }

    fn deliver(&self, d: Delivery) {
        if d.properties.kind().as_ref().map(|k| k.as_str()) == Some(MEMBERSHIP) {
            self.membership.send_modify(|g| *g += 1);
            return;
        }
        let Some(corr) = d
            .properties
            .correlation_id()
            .as_ref()
            .map(|c| c.to_string())
        else {
            return;
        };
        let Some(w) = self.waiters().remove(&corr) else {
            tracing::debug!(correlation_id = %corr, "late reply dropped");
            return;
        };
        let res = match pb::Reply::decode(&d.data[..]) {
            Ok(pb::Reply {
                result: Some(pb::reply::Result::Ok(b)),
            }) => Ok(b),
            Ok(pb::Reply {
                result: Some(pb::reply::Result::Error(e)),
            }) => Err(error_from_pb(e)),
            Ok(pb::Reply { result: None }) | Err(_) => Err(Error::Internal(
                "malformed reply from a conductor".to_string(),
            )),
        };
        let _ = w.send(res);
    }
}

/// Removes a call's waiter however the call ends (reply, error, timeout, cancellation).
struct WaiterGuard<'a> {
    inner: &'a ClientInner,
    corr: String,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.inner.waiters().remove(&self.corr);
    }
}

/// The caller's end: one connection, one private reply queue, any number of concurrent
/// calls.
pub struct Client {
    inner: Arc<ClientInner>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Client {
    /// Starts connecting in the background; calls wait for the connection up to their
    /// timeout.
    pub fn start(settings: BusSettings) -> Arc<Client> {
        let inner = Arc::new(ClientInner {
            settings,
            link: watch::channel(None).0,
            pending: Mutex::new(HashMap::new()),
            membership: watch::channel(0).0,
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise_client(inner.clone(), stop_rx));
        Arc::new(Client {
            inner,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Changes whenever the set of conductors may have changed (an announcement, or a
    /// reconnection after which announcements may have been missed).
    pub fn membership(&self) -> watch::Receiver<u64> {
        self.inner.membership.subscribe()
    }

    /// Waits until connected, at most `timeout`.
    pub async fn connected(&self, timeout: Duration) -> bool {
        wait_until(self.inner.link.subscribe(), timeout, Option::is_some).await
    }

    /// Closes the connection; calls still waiting get an error.
    pub async fn shutdown(&self) {
        stop_and_join(&self.stop, &self.task).await;
    }

    /// A round trip to `target` that touches nothing.
    pub async fn ping(&self, target: &Target, ctx: &Context) -> Result<(), CallError> {
        self.call(target, "ping", ctx, pb::PingRequest {}.encode_to_vec())
            .await
            .map(|_| ())
    }

    pub fn call_timeout(&self) -> Duration {
        self.inner.settings.call_timeout
    }

    /// One request/reply round trip, bounded by the call timeout.
    pub async fn call(
        &self,
        target: &Target,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, CallError> {
        let deadline = tokio::time::Instant::now() + self.inner.settings.call_timeout;
        self.call_until(target, method, ctx, body, deadline).await
    }

    /// One round trip that gives up at `deadline`, whatever it is waiting for (the
    /// connection, the broker's flow control, the confirm, the reply).
    pub async fn call_until(
        &self,
        target: &Target,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<u8>, CallError> {
        let rk = target.routing_key();
        let span = tracing::info_span!("rpc.client", rpc.method = method, rpc.target = %rk);
        self.call_in(rk, method, ctx, body, &span, deadline)
            .instrument(span.clone())
            .await
    }

    async fn call_in(
        &self,
        rk: String,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
        span: &tracing::Span,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<u8>, CallError> {
        let timeout = self.inner.settings.call_timeout;
        let mut links = self.inner.link.subscribe();
        let link = match tokio::time::timeout_at(deadline, links.wait_for(Option::is_some)).await {
            Ok(Ok(l)) => l.clone(),
            _ => None,
        };
        let Some(link) = link else {
            return Err(Error::Unavailable(format!(
                "The message bus has been unreachable for {}s; the request was not sent.",
                timeout.as_secs()
            ))
            .into());
        };
        // Whatever waiting for the connection used up is gone: the conductor gets only
        // the time this caller will still wait.
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let corr = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = oneshot::channel();
        self.inner.waiters().insert(corr.clone(), tx);
        let _guard = WaiterGuard {
            inner: &self.inner,
            corr: corr.clone(),
        };
        let trace = trace::of(span);
        let mut headers = FieldTable::default();
        if !trace.traceparent.is_empty() {
            headers.insert(
                "traceparent".into(),
                AMQPValue::LongString(trace.traceparent.clone().into()),
            );
            if !trace.tracestate.is_empty() {
                headers.insert(
                    "tracestate".into(),
                    AMQPValue::LongString(trace.tracestate.clone().into()),
                );
            }
        }
        headers.insert(
            "x-openstack-request-id".into(),
            AMQPValue::LongString(ctx.request_id.clone().into()),
        );
        let envelope = pb::Request {
            method: method.to_string(),
            request_id: ctx.request_id.clone(),
            context: Some(pb::CallerContext::default()),
            trace: Some(trace),
            deadline_unix_ms: now_ms() + remaining.as_millis() as u64,
            body,
        };
        let props = BasicProperties::default()
            .with_correlation_id(corr.as_str().into())
            .with_reply_to(link.reply_to.as_str().into())
            .with_expiration(ShortString::from(remaining.as_millis().max(1).to_string()))
            .with_content_type("application/x-protobuf".into())
            .with_type(method.into())
            .with_headers(headers);
        let timed_out = || {
            Error::Unavailable(format!(
                "No reply from {rk} within {}s; the request may or may not have been carried out.",
                timeout.as_secs()
            ))
        };
        // Bounded too: the broker may block publishers (memory or disk alarm).
        let payload = envelope.encode_to_vec();
        let publish = link.channel.basic_publish(
            self.inner.settings.exchange.as_str().into(),
            rk.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            &payload,
            props,
        );
        let confirm = match tokio::time::timeout_at(deadline, publish).await {
            Err(_) => return Err(timed_out().into()),
            Ok(r) => r.map_err(|e| bus_error("publish", e))?,
        };
        match tokio::time::timeout_at(deadline, confirm).await {
            Err(_) => return Err(timed_out().into()),
            Ok(Err(e)) => {
                return Err(Error::Unavailable(format!(
                    "The message bus connection failed while sending ({e}); the request may or may not have been queued."
                ))
                .into());
            }
            Ok(Ok(Confirmation::Ack(Some(_)) | Confirmation::Nack(Some(_)))) => {
                return Err(CallError::Unroutable(rk));
            }
            Ok(Ok(Confirmation::Nack(None))) => {
                return Err(Error::Unavailable(
                    "The message bus refused the request; it was not sent.".into(),
                )
                .into());
            }
            Ok(Ok(Confirmation::Ack(None) | Confirmation::NotRequested)) => {}
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r.map_err(CallError::Failed),
            Ok(Err(_)) => Err(Error::Unavailable(
                "The call was abandoned before its reply arrived.".into(),
            )
            .into()),
            Err(_) => Err(timed_out().into()),
        }
    }
}

async fn open_client_link(s: &BusSettings) -> lapin::Result<(Connection, Link, lapin::Consumer)> {
    let conn = connect(s).await?;
    let channel = conn.create_channel().await?;
    declare_exchange(&channel, s).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let q = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let reply_to = q.name().to_string();
    channel
        .queue_bind(
            reply_to.as_str().into(),
            s.exchange.as_str().into(),
            MEMBERSHIP.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let consumer = channel
        .basic_consume(
            reply_to.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok((conn, Link { channel, reply_to }, consumer))
}

async fn supervise_client(inner: Arc<ClientInner>, mut stop: watch::Receiver<bool>) {
    let first = Duration::from_millis(100);
    let mut backoff = first;
    loop {
        let Some(opened) = open_or_stop(open_client_link(&inner.settings), &mut stop).await else {
            inner.fail_all("The RPC client is shutting down.");
            return;
        };
        match opened {
            Ok((conn, link, mut replies)) => {
                let linked_at = Instant::now();
                tracing::info!(reply_queue = %link.reply_to, "connected to the message bus");
                inner.link.send_replace(Some(Arc::new(link)));
                inner.membership.send_modify(|g| *g += 1);
                let stopping = loop {
                    tokio::select! {
                        d = replies.next() => match d {
                            Some(Ok(d)) => inner.deliver(d),
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "message bus connection failed");
                                break false;
                            }
                            None => break false,
                        },
                        _ = stop.wait_for(|s| *s) => break true,
                    }
                };
                inner.link.send_replace(None);
                if stopping {
                    inner.fail_all("The RPC client is shutting down.");
                    let _ = conn.close(200, "shutdown".into()).await;
                    return;
                }
                inner.fail_all(
                    "The connection to the message bus was lost before the reply arrived; the request may or may not have been carried out.",
                );
                if linked_at.elapsed() >= STABLE_LINK {
                    backoff = first;
                }
                tracing::warn!("reconnecting to the message bus");
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot connect to the message bus");
            }
        }
        if !pause(&mut backoff, inner.settings.max_backoff, &mut stop).await {
            inner.fail_all("The RPC client is shutting down.");
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Routing: the ConductorApi of an API process

/// The conductors as the API sees them: node calls go to the ring owner's queue.
pub struct RemoteConductors {
    client: Arc<Client>,
    topology: Arc<Topology>,
}

impl RemoteConductors {
    pub fn new(client: Arc<Client>, topology: Arc<Topology>) -> Self {
        RemoteConductors { client, topology }
    }

    fn owner(&self, n: &NodeRef) -> Option<String> {
        self.topology
            .snapshot()
            .owner(&n.conductor_group, &n.driver, &n.uuid)
            .map(str::to_owned)
    }

    /// Calls any live conductor through the shared queue (RabbitMQ balances); 503 at
    /// once when none is alive, instead of waiting for the call timeout.
    async fn call_any(&self, method: &str, ctx: &Context, body: Vec<u8>) -> Result<Vec<u8>, Error> {
        let alive = |s: &ironic_db::topology::Snapshot| s.conductors.iter().any(|(_, a)| *a);
        if !alive(&self.topology.snapshot()) {
            self.topology.refresh_soon().await;
            if !alive(&self.topology.snapshot()) {
                return Err(Error::Unavailable(
                    "No conductor service is available to process the request; retry later.".into(),
                ));
            }
        }
        Ok(self.client.call(&Target::Any, method, ctx, body).await?)
    }

    async fn route(&self, n: &NodeRef) -> Result<String, Error> {
        if let Some(h) = self.owner(n) {
            return Ok(h);
        }
        self.topology.refresh_soon().await;
        self.owner(n)
            .ok_or_else(|| Error::no_valid_host(&n.driver, &n.conductor_group))
    }

    /// Calls the owner of `n`. When the owner's queue is gone (it crashed or is
    /// stopping, and its heartbeat has not timed out yet), the membership is read again
    /// at once and the call goes to the ring's next choice: the new owner if the ring
    /// changed, else the owner of the ring without that conductor. Node locks live in
    /// the database, so any conductor serving the driver handles the call correctly.
    async fn call_node(
        &self,
        n: &NodeRef,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        // One deadline for the call and its re-route.
        let deadline = tokio::time::Instant::now() + self.client.call_timeout();
        let host = self.route(n).await?;
        match self
            .client
            .call_until(
                &Target::Host(host.clone()),
                method,
                ctx,
                body.clone(),
                deadline,
            )
            .await
        {
            Err(CallError::Unroutable(rk)) => {
                // Rate-limited; the fallback below needs no fresh view anyway.
                self.topology.refresh_soon().await;
                let next = match self.owner(n) {
                    Some(h) if h != host => Some(h),
                    _ => self
                        .topology
                        .owner_without(&n.conductor_group, &n.driver, &n.uuid, &host),
                };
                match next {
                    Some(h) => {
                        tracing::info!(from = %host, to = %h, "owner unreachable; calling the next conductor on the ring");
                        Ok(self
                            .client
                            .call_until(&Target::Host(h), method, ctx, body, deadline)
                            .await?)
                    }
                    None => Err(CallError::Unroutable(rk).into()),
                }
            }
            r => Ok(r?),
        }
    }
}

fn decode_reply<M: Message + Default>(b: &[u8]) -> Result<M, Error> {
    M::decode(b).map_err(|_| Error::Internal("malformed reply from a conductor".into()))
}

fn node_reply(b: &[u8]) -> Result<Node, Error> {
    let r: pb::NodeReply = decode_reply(b)?;
    node_from_pb(
        r.node
            .ok_or_else(|| Error::Internal("conductor reply without a node".into()))?,
    )
}

impl ConductorApi for RemoteConductors {
    fn create_node(&self, ctx: &Context, node: Node) -> RpcFuture<'_, Node> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let nref = NodeRef::from(&node);
            let body = pb::CreateNodeRequest {
                node: Some(node_to_pb(&node)),
            }
            .encode_to_vec();
            node_reply(&self.call_node(&nref, "create_node", &ctx, body).await?)
        })
    }

    fn update_node(&self, ctx: &Context, req: UpdateNode) -> RpcFuture<'_, Node> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::UpdateNodeRequest {
                node: Some(node_ref_to_pb(&req.node)),
                ident: req.ident.clone(),
                patch: patch_to_pb(&req.patch),
                api_minor: u32::from(req.version.minor),
                reset_interfaces: req.reset_interfaces,
            }
            .encode_to_vec();
            node_reply(&self.call_node(&req.node, "update_node", &ctx, body).await?)
        })
    }

    fn set_maintenance(
        &self,
        ctx: &Context,
        node: NodeRef,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::SetMaintenanceRequest {
                node: Some(node_ref_to_pb(&node)),
                on,
                reason,
            }
            .encode_to_vec();
            node_reply(&self.call_node(&node, "set_maintenance", &ctx, body).await?)
        })
    }

    fn destroy_node(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DestroyNodeRequest {
                node: Some(node_ref_to_pb(&node)),
            }
            .encode_to_vec();
            self.call_node(&node, "destroy_node", &ctx, body).await?;
            Ok(())
        })
    }

    fn add_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::AddNodeTraitsRequest {
                node: Some(node_ref_to_pb(&node)),
                traits,
                replace,
            }
            .encode_to_vec();
            let r: pb::TraitsReply =
                decode_reply(&self.call_node(&node, "add_node_traits", &ctx, body).await?)?;
            Ok(r.traits)
        })
    }

    fn remove_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        one: Option<String>,
    ) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::RemoveNodeTraitsRequest {
                node: Some(node_ref_to_pb(&node)),
                r#trait: one,
            }
            .encode_to_vec();
            self.call_node(&node, "remove_node_traits", &ctx, body)
                .await?;
            Ok(())
        })
    }

    fn do_provisioning_action(
        &self,
        ctx: &Context,
        node: NodeRef,
        action: String,
    ) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DoProvisioningActionRequest {
                node: Some(node_ref_to_pb(&node)),
                action,
            }
            .encode_to_vec();
            self.call_node(&node, "do_provisioning_action", &ctx, body)
                .await?;
            Ok(())
        })
    }

    fn do_node_clean(
        &self,
        ctx: &Context,
        node: NodeRef,
        steps: Vec<CleanStep>,
        disable_ramdisk: Option<bool>,
    ) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DoNodeCleanRequest {
                node: Some(node_ref_to_pb(&node)),
                clean_steps: steps_to_pb(&steps),
                disable_ramdisk,
            }
            .encode_to_vec();
            self.call_node(&node, "do_node_clean", &ctx, body).await?;
            Ok(())
        })
    }

    fn do_node_deploy(
        &self,
        ctx: &Context,
        node: NodeRef,
        rebuild: bool,
        configdrive: Option<serde_json::Value>,
    ) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DoNodeDeployRequest {
                node: Some(node_ref_to_pb(&node)),
                rebuild,
                configdrive_json: configdrive.map(|c| c.to_string()),
                deploy_steps: Vec::new(),
            }
            .encode_to_vec();
            self.call_node(&node, "do_node_deploy", &ctx, body).await?;
            Ok(())
        })
    }

    fn do_node_tear_down(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DoNodeTearDownRequest {
                node: Some(node_ref_to_pb(&node)),
            }
            .encode_to_vec();
            self.call_node(&node, "do_node_tear_down", &ctx, body)
                .await?;
            Ok(())
        })
    }

    fn change_node_power_state(
        &self,
        ctx: &Context,
        node: NodeRef,
        new_state: String,
        timeout_secs: Option<u32>,
    ) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::ChangeNodePowerStateRequest {
                node: Some(node_ref_to_pb(&node)),
                new_state,
                timeout_secs,
            }
            .encode_to_vec();
            self.call_node(&node, "change_node_power_state", &ctx, body)
                .await?;
            Ok(())
        })
    }

    fn get_clean_steps(
        &self,
        ctx: &Context,
        node: NodeRef,
        min_priority: u32,
    ) -> RpcFuture<'_, Option<Vec<serde_json::Value>>> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::GetCleanStepsRequest {
                node: Some(node_ref_to_pb(&node)),
                min_priority,
            }
            .encode_to_vec();
            let r: pb::StepsReply =
                decode_reply(&self.call_node(&node, "get_clean_steps", &ctx, body).await?)?;
            if r.pending {
                return Ok(None);
            }
            Ok(Some(
                r.steps
                    .into_iter()
                    .map(|s| {
                        serde_json::json!({
                            "interface": s.interface,
                            "step": s.step,
                            "priority": s.priority,
                            "abortable": s.abortable,
                            "argsinfo": serde_json::from_str::<serde_json::Value>(&s.argsinfo_json)
                                .unwrap_or(serde_json::Value::Null),
                        })
                    })
                    .collect(),
            ))
        })
    }

    fn validate_driver_interfaces(
        &self,
        ctx: &Context,
        node: NodeRef,
    ) -> RpcFuture<'_, Vec<InterfaceCheck>> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::ValidateDriverInterfacesRequest {
                node: Some(node_ref_to_pb(&node)),
            }
            .encode_to_vec();
            let r: pb::ValidateReply = decode_reply(
                &self
                    .call_node(&node, "validate_driver_interfaces", &ctx, body)
                    .await?,
            )?;
            Ok(r.interfaces
                .into_iter()
                .map(|(interface, v)| InterfaceCheck {
                    interface,
                    result: v.supported.then_some(v.result),
                    reason: v.reason,
                })
                .collect())
        })
    }

    fn create_allocation(
        &self,
        ctx: &Context,
        allocation: Allocation,
        backfill: Option<NodeRef>,
    ) -> RpcFuture<'_, Allocation> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::CreateAllocationRequest {
                allocation: Some(allocation_to_pb(&allocation)),
                backfill_node: backfill.as_ref().map(node_ref_to_pb),
            }
            .encode_to_vec();
            let reply = match &backfill {
                Some(n) => self.call_node(n, "create_allocation", &ctx, body).await?,
                None => self.call_any("create_allocation", &ctx, body).await?,
            };
            let r: pb::AllocationReply = decode_reply(&reply)?;
            allocation_from_pb(r.allocation)
        })
    }

    fn destroy_allocation(&self, ctx: &Context, allocation: Allocation) -> RpcFuture<'_, ()> {
        let ctx = ctx.clone();
        Box::pin(async move {
            let body = pb::DestroyAllocationRequest {
                allocation: Some(allocation_to_pb(&allocation)),
            }
            .encode_to_vec();
            self.call_any("destroy_allocation", &ctx, body).await?;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------
// Conductor side

/// A conductor's consumer of its own queue and the shared queue.
pub struct Server {
    stop: watch::Sender<bool>,
    consuming: watch::Receiver<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    channel: watch::Receiver<Option<Channel>>,
    exchange: String,
}

impl Server {
    /// Starts consuming for `host` in the background (reconnecting as needed).
    pub fn start(settings: BusSettings, host: String, api: Arc<dyn ConductorApi>) -> Server {
        let (stop, stop_rx) = watch::channel(false);
        let (consuming_tx, consuming) = watch::channel(false);
        let (channel_tx, channel) = watch::channel(None);
        let exchange = settings.exchange.clone();
        let task = tokio::spawn(run_server(
            settings,
            host,
            api,
            stop_rx,
            consuming_tx,
            channel_tx,
        ));
        Server {
            stop,
            consuming,
            task: Mutex::new(Some(task)),
            channel,
            exchange,
        }
    }

    /// Tells every API process that the set of conductors changed (best effort: without
    /// a connection, they notice at their next periodic refresh).
    pub async fn announce_membership(&self) {
        let channel = self.channel.borrow().clone();
        let Some(channel) = channel else {
            return;
        };
        let props = BasicProperties::default().with_type(MEMBERSHIP.into());
        let publish = channel.basic_publish(
            self.exchange.as_str().into(),
            MEMBERSHIP.into(),
            BasicPublishOptions::default(),
            &[],
            props,
        );
        match tokio::time::timeout(Duration::from_secs(5), publish).await {
            Ok(Ok(_)) => tracing::debug!("membership change announced"),
            _ => tracing::warn!(
                "could not announce a membership change; API processes will notice at their next refresh"
            ),
        }
    }

    /// Waits until the queues are consumed, at most `timeout`.
    pub async fn consuming(&self, timeout: Duration) -> bool {
        wait_until(self.consuming.clone(), timeout, |c| *c).await
    }

    /// Graceful drain: stops taking requests, finishes (and answers) those in hand, then
    /// closes the connection. After `within`, gives up waiting and aborts what is left
    /// (returns false).
    pub async fn shutdown_within(&self, within: Duration) -> bool {
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        let Some(mut t) = task else {
            return true;
        };
        match tokio::time::timeout(within, &mut t).await {
            Ok(_) => true,
            Err(_) => {
                t.abort();
                false
            }
        }
    }
}

struct ServerLink {
    conn: Connection,
    channel: Channel,
    /// The own queue's consumer and the shared queue's.
    consumers: (lapin::Consumer, lapin::Consumer),
    tags: Vec<String>,
}

async fn open_server_link(s: &BusSettings, host: &str) -> lapin::Result<ServerLink> {
    let conn = connect(s).await?;
    let channel = conn.create_channel().await?;
    declare_exchange(&channel, s).await?;
    channel
        .basic_qos(s.prefetch, BasicQosOptions::default())
        .await?;
    let own = host_queue(host);
    // Exclusive: the queue lives exactly as long as this connection, so calls to a dead
    // conductor are unroutable (fast failure) rather than queued for nobody.
    channel
        .queue_declare(
            own.as_str().into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    channel
        .queue_declare(
            TOPIC.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut tags = Vec::new();
    let mut consumers = Vec::new();
    for q in [own.as_str(), TOPIC] {
        channel
            .queue_bind(
                q.into(),
                s.exchange.as_str().into(),
                q.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let tag = format!("{host}:{q}");
        consumers.push(
            channel
                .basic_consume(
                    q.into(),
                    tag.as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?,
        );
        tags.push(tag);
    }
    let shared = consumers.pop();
    let own = consumers.pop();
    match (own, shared) {
        (Some(own), Some(shared)) => Ok(ServerLink {
            conn,
            channel,
            consumers: (own, shared),
            tags,
        }),
        _ => unreachable!("two consumers were created above"),
    }
}

async fn run_server(
    settings: BusSettings,
    host: String,
    api: Arc<dyn ConductorApi>,
    mut stop: watch::Receiver<bool>,
    consuming: watch::Sender<bool>,
    current: watch::Sender<Option<Channel>>,
) {
    let first = Duration::from_millis(100);
    let mut backoff = first;
    let mut inflight: JoinSet<()> = JoinSet::new();
    // At most `prefetch` requests run at once; the rest wait in the broker (requests
    // are acknowledged when they start, so the broker's prefetch alone would not bound
    // them).
    let permits = Arc::new(Semaphore::new(usize::from(settings.prefetch.max(1))));
    loop {
        let Some(opened) = open_or_stop(open_server_link(&settings, &host), &mut stop).await else {
            break;
        };
        match opened {
            Ok(link) => {
                let linked_at = Instant::now();
                tracing::info!(queue = %host_queue(&host), shared = TOPIC, "consuming RPC requests");
                let ServerLink {
                    conn,
                    channel,
                    consumers: (mut own, mut shared),
                    tags,
                } = link;
                current.send_replace(Some(channel.clone()));
                consuming.send_replace(true);
                let ctx = HandlerCtx {
                    api: api.clone(),
                    channel: channel.clone(),
                    host: host.clone(),
                    call_timeout: settings.call_timeout,
                };
                let stopping = loop {
                    // Take a delivery only with a free slot in hand.
                    let permit = tokio::select! {
                        p = permits.clone().acquire_owned() => match p {
                            Ok(p) => p,
                            Err(_) => break true,
                        },
                        Some(_) = inflight.join_next(), if !inflight.is_empty() => continue,
                        _ = stop.wait_for(|s| *s) => break true,
                    };
                    tokio::select! {
                        d = own.next() => match d {
                            Some(Ok(d)) => { inflight.spawn(handle(ctx.clone(), d, permit)); }
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "message bus connection failed");
                                break false;
                            }
                            None => break false,
                        },
                        d = shared.next() => match d {
                            Some(Ok(d)) => { inflight.spawn(handle(ctx.clone(), d, permit)); }
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "message bus connection failed");
                                break false;
                            }
                            None => break false,
                        },
                        Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
                        _ = stop.wait_for(|s| *s) => break true,
                    }
                };
                consuming.send_replace(false);
                if !stopping {
                    current.send_replace(None);
                }
                if stopping {
                    let consumers = (&mut own, &mut shared);
                    drain(
                        &settings,
                        &host,
                        &tags,
                        consumers,
                        &mut inflight,
                        &ctx,
                        &permits,
                    )
                    .await;
                    let _ = conn.close(200, "shutdown".into()).await;
                    tracing::info!("stopped consuming RPC requests");
                    return;
                }
                if linked_at.elapsed() >= STABLE_LINK {
                    backoff = first;
                }
                tracing::warn!("reconnecting to the message bus");
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot consume from the message bus");
            }
        }
        if !pause(&mut backoff, settings.max_backoff, &mut stop).await {
            break;
        }
    }
    while inflight.join_next().await.is_some() {}
}

/// Graceful drain. The own queue is unbound first, so new calls to this host become
/// unroutable at once (callers go to the next conductor on the ring) instead of
/// queueing for nobody. The shared queue's consumer is cancelled and what it had
/// received but not started goes back to the queue (`nack` with requeue) for the
/// others. The own queue's consumer is cancelled after a quiet moment and everything it
/// had received still runs. Then the requests in hand finish.
async fn drain(
    settings: &BusSettings,
    host: &str,
    tags: &[String],
    (own, shared): (&mut lapin::Consumer, &mut lapin::Consumer),
    inflight: &mut JoinSet<()>,
    ctx: &HandlerCtx,
    permits: &Arc<Semaphore>,
) {
    let channel = &ctx.channel;
    let queue = host_queue(host);
    if let Err(e) = channel
        .queue_unbind(
            queue.as_str().into(),
            settings.exchange.as_str().into(),
            queue.as_str().into(),
            FieldTable::default(),
        )
        .await
    {
        tracing::warn!(error = %e, "could not unbind the conductor's queue");
    }
    let bound = tokio::time::Instant::now() + settings.call_timeout;
    if let Some(t) = tags.get(1) {
        let _ = channel
            .basic_cancel(t.as_str().into(), BasicCancelOptions::default())
            .await;
        let mut returned = 0;
        while let Ok(Some(Ok(d))) = tokio::time::timeout_at(bound, shared.next()).await {
            let _ = d
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await;
            returned += 1;
        }
        if returned > 0 {
            tracing::info!(
                returned,
                "handed requests not started back to the shared queue"
            );
        }
    }
    // Whatever is still on its way to the own queue arrives within a moment.
    let quiet = Duration::from_millis(300);
    while let Ok(Some(Ok(d))) =
        tokio::time::timeout_at(bound.min(tokio::time::Instant::now() + quiet), own.next()).await
    {
        if let Ok(p) = permits.clone().acquire_owned().await {
            inflight.spawn(handle(ctx.clone(), d, p));
        }
    }
    if let Some(t) = tags.first() {
        let _ = channel
            .basic_cancel(t.as_str().into(), BasicCancelOptions::default())
            .await;
        // The consumer ends once what it had buffered is out; all of it still runs.
        while let Ok(Some(Ok(d))) = tokio::time::timeout_at(bound, own.next()).await {
            if let Ok(p) = permits.clone().acquire_owned().await {
                inflight.spawn(handle(ctx.clone(), d, p));
            }
        }
    }
    let n = inflight.len();
    if n > 0 {
        tracing::info!(in_flight = n, "finishing requests in hand");
    }
    while inflight.join_next().await.is_some() {}
}

/// What every request handler needs.
#[derive(Clone)]
struct HandlerCtx {
    api: Arc<dyn ConductorApi>,
    channel: Channel,
    host: String,
    call_timeout: Duration,
}

/// Clocks of callers and conductors differ a little; a request is dropped only when
/// its deadline passed longer ago than this (NTP keeps hosts far closer).
const CLOCK_SKEW_MS: u64 = 1_000;

async fn handle(ctx: HandlerCtx, d: Delivery, _permit: OwnedSemaphorePermit) {
    let HandlerCtx {
        api,
        channel,
        host,
        call_timeout,
    } = ctx;
    // At most once: acknowledged on receipt (see the module documentation). A request
    // that could not be acknowledged may be delivered again elsewhere: not run here.
    match tokio::time::timeout(call_timeout, d.ack(BasicAckOptions::default())).await {
        Ok(Ok(true)) => {}
        other => {
            tracing::warn!(outcome = ?other.map(|r| r.map_err(|e| e.to_string())), "could not acknowledge a request; not running it");
            return;
        }
    }
    let reply_to = d.properties.reply_to().as_ref().map(|s| s.to_string());
    let corr = d.properties.correlation_id().clone();
    let reply = match pb::Request::decode(&d.data[..]) {
        Err(e) => error_reply(&Error::Invalid(format!("Malformed RPC request: {e}"))),
        Ok(req) if req.deadline_unix_ms > 0 && req.deadline_unix_ms + CLOCK_SKEW_MS < now_ms() => {
            tracing::warn!(method = %req.method, request_id = %req.request_id, "not running a request whose caller has given up");
            error_reply(&Error::Unavailable(
                "The request reached the conductor after its deadline and was not carried out."
                    .into(),
            ))
        }
        Ok(req) => {
            let span = tracing::info_span!(
                "rpc.server",
                rpc.method = %req.method,
                request_id = %req.request_id,
                host = %host,
            );
            if let Some(t) = &req.trace {
                trace::attach(&span, t);
            }
            let ctx = Context {
                request_id: req.request_id.clone(),
            };
            let started = Instant::now();
            async {
                let reply = dispatch(api.as_ref(), &ctx, &req.method, &req.body).await;
                let outcome = match &reply.result {
                    Some(pb::reply::Result::Error(e)) => {
                        let kind =
                            pb::ErrorKind::try_from(e.kind).unwrap_or(pb::ErrorKind::Internal);
                        if matches!(kind, pb::ErrorKind::Internal | pb::ErrorKind::Unimplemented) {
                            tracing::error!(error = %e.message, "rpc failed");
                        }
                        kind.as_str_name()
                    }
                    _ => "ok",
                };
                tracing::info!(
                    outcome,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "rpc handled"
                );
                reply
            }
            .instrument(span)
            .await
        }
    };
    let Some(reply_to) = reply_to else {
        return;
    };
    let mut props = BasicProperties::default().with_content_type("application/x-protobuf".into());
    if let Some(c) = corr {
        props = props.with_correlation_id(c);
    }
    let payload = reply.encode_to_vec();
    let publish = channel.basic_publish(
        "".into(),
        reply_to.as_str().into(),
        BasicPublishOptions::default(),
        &payload,
        props,
    );
    match tokio::time::timeout(call_timeout, publish).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not send a reply; the caller will see an error")
        }
        Err(_) => {
            tracing::warn!("the broker did not take a reply in time; the caller will see an error")
        }
    }
}
