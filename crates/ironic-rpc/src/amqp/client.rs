//! The caller's end: one connection, one private reply queue (also bound to membership
//! announcements), any number of concurrent calls correlated by id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use ironic_model::Error;
use lapin::message::Delivery;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection};
use prost::Message;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{
    ACCEPTED, BusSettings, CallError, HOST_HEADER, INCARNATION_HEADER, MEMBERSHIP, STABLE_LINK,
    Taker, Target, bus_error, cluster_headers, connect, declare_exchange, declare_exclusive_queue,
    header_text, now_ms, open_or_stop, pause, sender_cluster, signing, stop_and_join, wait_until,
};
use crate::calls::Ping;
use crate::contract::Call;
use crate::convert::error_from_pb;
use crate::{Context, pb, trace};
use signing::REQUEST_ID_HEADER;

/// How long past the accept window a caller still waits for the notice of a conductor
/// that took the call: the clocks of the two hosts may differ a little (the conductor
/// judges the window by its own) and the notice takes a moment to arrive.
const ACCEPT_MARGIN: Duration = Duration::from_millis(1_500);

/// A call waiting for its reply, and for the notice naming the conductor run that took
/// it (`accepted`, taken by the first notice).
struct Waiter {
    reply: oneshot::Sender<Result<Vec<u8>, Error>>,
    accepted: Option<oneshot::Sender<Taker>>,
}

/// How often a caller checks whether the conductor carrying out its call is still alive.
const LOST_CHECK: Duration = Duration::from_millis(250);

/// Tells whether the conductor run carrying a call out is gone: declared dead, or
/// replaced by a later run of the same host.
pub type IsLost<'a> = &'a (dyn Fn(&Taker) -> bool + Send + Sync);

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
            let _ = w.reply.send(Err(Error::Unavailable(why.to_string())));
        }
    }

    fn deliver(&self, d: Delivery) {
        let mine = &self.settings.cluster;
        // A reply, notice or announcement nobody of this deployment signed is ignored: a
        // call it claims to answer goes on waiting for the real reply.
        if let Err(why) = self.settings.signing.verify_delivery(&d) {
            let ours = sender_cluster(&d.properties).as_deref() == Some(mine.as_str());
            signing::refused("client", why, ours);
            return;
        }
        match sender_cluster(&d.properties) {
            Some(c) if c == *mine => {}
            other => {
                let theirs = other.as_deref().unwrap_or("none");
                tracing::error!(
                    this_cluster = %mine,
                    sender_cluster = theirs,
                    "refused a message from another deployment (check [amqp] url and [database] url of every process)"
                );
                // A caller waiting for this reply learns why instead of timing out.
                let corr = d
                    .properties
                    .correlation_id()
                    .as_ref()
                    .map(|c| c.to_string());
                if let Some(w) = corr.and_then(|c| self.waiters().remove(&c)) {
                    let _ = w.reply.send(Err(Error::Unavailable(format!(
                        "A process of another deployment (cluster {theirs}) answered this call; this deployment is cluster {mine}. Check that every process of this deployment uses the same database."
                    ))));
                }
                return;
            }
        }
        let kind = d.properties.kind().as_ref().map(|k| k.to_string());
        if kind.as_deref() == Some(MEMBERSHIP) {
            self.membership.send_modify(|g| *g += 1);
            return;
        }
        if kind.as_deref() == Some(ACCEPTED) {
            let corr = d
                .properties
                .correlation_id()
                .as_ref()
                .map(|c| c.to_string());
            let host = header_text(&d.properties, HOST_HEADER);
            let incarnation =
                header_text(&d.properties, INCARNATION_HEADER).and_then(|i| i.parse::<i64>().ok());
            if let (Some(corr), Some(host)) = (corr, host)
                && let Some(tx) = self
                    .waiters()
                    .get_mut(&corr)
                    .and_then(|w| w.accepted.take())
            {
                let _ = tx.send(Taker { host, incarnation });
            }
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
        let w = w.reply;
        let res = match pb::Reply::decode(&d.data[..]) {
            Ok(pb::Reply {
                result: Some(pb::reply::Result::Ok(b)),
            }) => Ok(b),
            Ok(pb::Reply {
                result: Some(pb::reply::Result::Error(e)),
            }) => Err(error_from_pb(e)),
            Ok(pb::Reply { result: None }) | Err(_) => {
                Err(Error::internal("malformed reply from a conductor"))
            }
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
        self.call(target, Ping::METHOD, ctx, Ping.to_wire().encode_to_vec())
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
        self.call_until(target, method, ctx, body, deadline, &|_| false)
            .await
    }

    /// One round trip that gives up at `deadline`, whatever it is waiting for (the
    /// connection, the broker's flow control, the confirm, the reply), and as soon as
    /// `is_lost` says the conductor run carrying the call out (the target host, or the
    /// one that took it from the shared queue, as its [`super::ACCEPTED`] notice names
    /// it) is gone: then [`CallError::Lost`].
    pub async fn call_until(
        &self,
        target: &Target,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
        deadline: tokio::time::Instant,
        is_lost: IsLost<'_>,
    ) -> Result<Vec<u8>, CallError> {
        let rk = self.inner.settings.routing_key(target);
        let span = tracing::info_span!("rpc.client", rpc.method = method, rpc.target = %rk, rpc.attempt = ctx.attempt);
        let host = match target {
            Target::Host(h) => Some(h.clone()),
            Target::Any => None,
        };
        self.call_in(rk, host, method, ctx, body, &span, deadline, is_lost)
            .instrument(span.clone())
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_in(
        &self,
        rk: String,
        host: Option<String>,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
        span: &tracing::Span,
        deadline: tokio::time::Instant,
        is_lost: IsLost<'_>,
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
        // A conductor must take the call within the accept window, or it is dropped
        // unrun (by the broker, or by a conductor that takes it late).
        let window = self.inner.settings.accept_timeout.min(remaining);
        let accept_by = tokio::time::Instant::now() + window + ACCEPT_MARGIN;
        let corr = uuid::Uuid::new_v4().simple().to_string();
        let (tx, mut rx) = oneshot::channel();
        let (acc_tx, mut acc_rx) = oneshot::channel();
        self.inner.waiters().insert(
            corr.clone(),
            Waiter {
                reply: tx,
                accepted: Some(acc_tx),
            },
        );
        let _guard = WaiterGuard {
            inner: &self.inner,
            corr: corr.clone(),
        };
        let trace = trace::of(span);
        let mut headers = cluster_headers(&self.inner.settings.cluster);
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
            REQUEST_ID_HEADER.into(),
            AMQPValue::LongString(ctx.request_id.clone().into()),
        );
        let envelope = pb::Request {
            method: method.to_string(),
            request_id: ctx.request_id.clone(),
            context: Some(pb::CallerContext::default()),
            trace: Some(trace),
            deadline_unix_ms: now_ms() + remaining.as_millis() as u64,
            body,
            attempt: ctx.attempt,
            accept_by_unix_ms: now_ms() + window.as_millis() as u64,
        };
        let props = BasicProperties::default()
            .with_correlation_id(corr.as_str().into())
            .with_reply_to(link.reply_to.as_str().into())
            .with_expiration(ShortString::from(window.as_millis().max(1).to_string()))
            .with_content_type("application/x-protobuf".into())
            .with_type(method.into())
            .with_headers(headers);
        let timed_out = || {
            Error::Unavailable(format!(
                "No reply from {rk} within {}s; the request may or may not have been carried out.",
                timeout.as_secs()
            ))
        };
        let payload = envelope.encode_to_vec();
        let settings = &self.inner.settings;
        let props = settings
            .signing
            .sign(&settings.exchange, &rk, props, &payload);
        // Bounded too: the broker may block publishers (memory or disk alarm).
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
        tracing::debug!(correlation_id = %corr, "request queued");
        // Wait for the reply; meanwhile, watch the conductor carrying the call out.
        let mut check = tokio::time::interval(LOST_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut taker = host.map(|host| Taker {
            host,
            incarnation: None,
        });
        let mut awaiting_notice = true;
        loop {
            tokio::select! {
                r = &mut rx => return match r {
                    Ok(r) => r.map_err(CallError::Failed),
                    Err(_) => Err(Error::Unavailable(
                        "The call was abandoned before its reply arrived.".into(),
                    )
                    .into()),
                },
                t = &mut acc_rx, if awaiting_notice => {
                    awaiting_notice = false;
                    if let Ok(t) = t {
                        tracing::debug!(host = %t.host, incarnation = ?t.incarnation, "call taken");
                        taker = Some(t);
                    }
                }
                _ = tokio::time::sleep_until(accept_by), if awaiting_notice => {
                    tracing::warn!(routing_key = %rk, window_ms = window.as_millis() as u64, "no conductor took the call in time; it was not carried out");
                    return Err(CallError::NotTaken(rk));
                }
                _ = check.tick(), if taker.is_some() => {
                    if let Some(t) = taker.as_ref().filter(|t| is_lost(t)) {
                        tracing::warn!(host = %t.host, incarnation = ?t.incarnation, "the conductor run carrying out the call is gone");
                        return Err(CallError::Lost { host: t.host.clone() });
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Err(timed_out().into()),
            }
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
    let reply_to = declare_exclusive_queue(&channel, "").await?;
    channel
        .queue_bind(
            reply_to.as_str().into(),
            s.exchange.as_str().into(),
            s.membership_key().as_str().into(),
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
                metrics::counter!("ironic_bus_reconnects_total", "side" => "client").increment(1);
                tracing::warn!("reconnecting to the message bus");
            }
            Err(e) => {
                tracing::warn!(error = %ironic_model::error::chain(&e), retry_in_ms = backoff.as_millis() as u64, "cannot connect to the message bus");
            }
        }
        if !pause(&mut backoff, inner.settings.max_backoff, &mut stop).await {
            inner.fail_all("The RPC client is shutting down.");
            return;
        }
    }
}
