//! A conductor's end: its own queue and the shared queue, at most `prefetch` requests
//! at once, graceful drain.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use ironic_model::Error;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use super::{
    ACCEPTED, BusSettings, HOST_HEADER, INCARNATION_HEADER, MEMBERSHIP, STABLE_LINK, SigningKeys,
    cluster_headers, connect, declare_exchange, declare_exclusive_queue, now_ms, open_or_stop,
    pause, sender_cluster, signing, wait_until,
};
use crate::contract::method_label;
use crate::dispatch::{Dispatch, error_reply};
use crate::{Context, pb, trace};

/// A conductor's consumer of its own queue and the shared queue.
pub struct Server {
    stop: watch::Sender<bool>,
    consuming: watch::Receiver<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    channel: watch::Receiver<Option<Channel>>,
    settings: BusSettings,
}

impl Server {
    /// Starts consuming for `host` in the background (reconnecting as needed).
    /// `incarnation` names this run of the conductor in every call it takes (see
    /// [`ACCEPTED`]).
    pub fn start(
        settings: BusSettings,
        host: String,
        incarnation: i64,
        api: Arc<dyn Dispatch>,
    ) -> Server {
        let (stop, stop_rx) = watch::channel(false);
        let (consuming_tx, consuming) = watch::channel(false);
        let (channel_tx, channel) = watch::channel(None);
        let task = tokio::spawn(run_server(
            settings.clone(),
            host,
            incarnation,
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
            settings,
        }
    }

    /// Tells every API process that the set of conductors changed (best effort: without
    /// a connection, they notice at their next periodic refresh).
    pub async fn announce_membership(&self) {
        let channel = self.channel.borrow().clone();
        let Some(channel) = channel else {
            return;
        };
        let props = BasicProperties::default()
            .with_type(MEMBERSHIP.into())
            .with_headers(cluster_headers(&self.settings.cluster));
        let key = self.settings.membership_key();
        let props = self
            .settings
            .signing
            .sign(&self.settings.exchange, &key, props, &[]);
        let publish = channel.basic_publish(
            self.settings.exchange.as_str().into(),
            key.as_str().into(),
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

    /// Whether the queues are consumed right now (a receiver that follows it).
    pub fn consuming_watch(&self) -> watch::Receiver<bool> {
        self.consuming.clone()
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
    let own = s.host_queue(host);
    let topic = s.shared_queue();
    // Exclusive: the queue lives exactly as long as this connection, so calls to a dead
    // conductor are unroutable (fast failure) rather than queued for nobody.
    declare_exclusive_queue(&channel, &own).await?;
    channel
        .queue_declare(
            topic.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut tags = Vec::new();
    let mut consumers = Vec::new();
    for q in [own.as_str(), topic.as_str()] {
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
    incarnation: i64,
    api: Arc<dyn Dispatch>,
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
                tracing::info!(queue = %settings.host_queue(&host), shared = %settings.shared_queue(), "consuming RPC requests");
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
                    incarnation,
                    call_timeout: settings.call_timeout,
                    cluster: settings.cluster.clone(),
                    keys: settings.signing.clone(),
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
                metrics::counter!("ironic_bus_reconnects_total", "side" => "server").increment(1);
                tracing::warn!("reconnecting to the message bus");
            }
            Err(e) => {
                tracing::warn!(error = %ironic_model::error::chain(&e), retry_in_ms = backoff.as_millis() as u64, "cannot consume from the message bus");
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
    let queue = settings.host_queue(host);
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
    api: Arc<dyn Dispatch>,
    channel: Channel,
    host: String,
    incarnation: i64,
    call_timeout: Duration,
    cluster: String,
    keys: SigningKeys,
}

/// Clocks of callers and conductors differ a little; a request is dropped only when
/// its deadline passed longer ago than this (NTP keeps hosts far closer).
const CLOCK_SKEW_MS: u64 = 1_000;

/// Runs one request.
async fn handle(ctx: HandlerCtx, d: Delivery, _permit: OwnedSemaphorePermit) {
    let HandlerCtx {
        api,
        channel,
        host,
        incarnation,
        call_timeout,
        cluster,
        keys,
    } = ctx;
    // Nothing of a message that no process of this deployment signed is acted on: it
    // is dropped (rejected, not requeued) before the notice, the decoding and the
    // accept-window check, and answered with nothing.
    if let Err(why) = keys.verify_delivery(&d) {
        let ours = sender_cluster(&d.properties).as_deref() == Some(cluster.as_str());
        signing::refused("server", why, ours);
        let drop = BasicNackOptions {
            requeue: false,
            ..Default::default()
        };
        let _ = tokio::time::timeout(call_timeout, d.nack(drop)).await;
        return;
    }
    let reply_to = d.properties.reply_to().as_ref().map(|s| s.to_string());
    let corr = d.properties.correlation_id().clone();
    let decoded = pb::Request::decode(&d.data[..]);
    // Taken too late: the caller has given up waiting for the notice and may have sent
    // the call again, so this one is dropped unrun and unannounced.
    if let Ok(req) = &decoded
        && req.accept_by_unix_ms > 0
        && now_ms() > req.accept_by_unix_ms
    {
        tracing::warn!(
            method = %req.method,
            request_id = %req.request_id,
            late_ms = now_ms() - req.accept_by_unix_ms,
            "dropped a request taken after its accept window (the caller treats it as not carried out)"
        );
        metrics::counter!("ironic_rpc_dropped_late_total", "method" => method_label(&req.method))
            .increment(1);
        let _ = tokio::time::timeout(call_timeout, d.ack(BasicAckOptions::default())).await;
        return;
    }
    // Tell the caller which run of which conductor took the call *before*
    // acknowledging it, so that whenever this process dies after the acknowledgement
    // the caller knows whose death (or restart) to watch for; if it dies before, the
    // broker hands the request to another conductor, or to this host's next run.
    if sender_cluster(&d.properties).as_deref() == Some(cluster.as_str())
        && let (Some(reply_to), Some(corr)) = (&reply_to, &corr)
    {
        let mut headers = cluster_headers(&cluster);
        headers.insert(
            HOST_HEADER.into(),
            lapin::types::AMQPValue::LongString(host.clone().into()),
        );
        headers.insert(
            INCARNATION_HEADER.into(),
            lapin::types::AMQPValue::LongString(incarnation.to_string().into()),
        );
        let props = BasicProperties::default()
            .with_type(ACCEPTED.into())
            .with_correlation_id(corr.clone())
            .with_headers(headers);
        let props = keys.sign("", reply_to, props, &[]);
        let notice = channel.basic_publish(
            "".into(),
            reply_to.as_str().into(),
            BasicPublishOptions::default(),
            &[],
            props,
        );
        if !matches!(tokio::time::timeout(call_timeout, notice).await, Ok(Ok(_))) {
            tracing::warn!("could not tell a caller who took its call; handing the call back");
            let requeue = BasicNackOptions {
                requeue: true,
                ..Default::default()
            };
            let _ = tokio::time::timeout(call_timeout, d.nack(requeue)).await;
            return;
        }
    }
    // At most once: acknowledged on receipt (see the module documentation). A request
    // that could not be acknowledged may be delivered again elsewhere: not run here.
    match tokio::time::timeout(call_timeout, d.ack(BasicAckOptions::default())).await {
        Ok(Ok(true)) => {}
        other => {
            tracing::warn!(outcome = ?other.map(|r| r.map_err(|e| e.to_string())), "could not acknowledge a request; not running it");
            return;
        }
    }
    let sender = sender_cluster(&d.properties);
    let reply = match decoded {
        _ if sender.as_deref() != Some(cluster.as_str()) => {
            let theirs = sender.as_deref().unwrap_or("none");
            tracing::error!(
                this_cluster = %cluster,
                sender_cluster = theirs,
                "refused a request from another deployment (check [amqp] url and [database] url of every process)"
            );
            error_reply(&Error::Unavailable(format!(
                "Refused by a conductor of cluster {cluster}: the request came from cluster {theirs}."
            )))
        }
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
                attempt: req.attempt,
            };
            let started = Instant::now();
            async {
                let reply = api.wire(&ctx, &req.method, &req.body).await;
                let outcome = match &reply.result {
                    Some(pb::reply::Result::Error(e)) => {
                        let kind =
                            pb::ErrorKind::try_from(e.kind).unwrap_or(pb::ErrorKind::Internal);
                        // An internal error was logged with its causes by the dispatcher.
                        if kind == pb::ErrorKind::Unimplemented {
                            tracing::error!(error = %ironic_model::secrets::log_safe(&e.message), "rpc failed");
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
                metrics::counter!("ironic_rpc_handled_total", "method" => method_label(&req.method), "outcome" => outcome)
                    .increment(1);
                metrics::histogram!("ironic_rpc_handled_duration_seconds", "method" => method_label(&req.method))
                    .record(started.elapsed().as_secs_f64());
                reply
            }
            .instrument(span)
            .await
        }
    };
    let Some(reply_to) = reply_to else {
        return;
    };
    let mut props = BasicProperties::default()
        .with_content_type("application/x-protobuf".into())
        .with_headers(cluster_headers(&cluster));
    if let Some(c) = corr {
        props = props.with_correlation_id(c);
    }
    let payload = reply.encode_to_vec();
    let props = keys.sign("", &reply_to, props, &payload);
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
