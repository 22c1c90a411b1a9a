//! Routing: which queue a call goes to. Node calls go to the queue of the node's ring
//! owner (the next conductor on the ring when that queue is gone), "any" calls to the
//! shared queue, host calls to that host's queue. The membership comes from a
//! [`Membership`] (implemented over the database in `ironic-db`).

use std::sync::Arc;

use ironic_model::Error;
use ironic_model::cluster::Membership;
use prost::Message;

use super::client::IsLost;
use super::{CallError, Client, Taker, Target};

/// How many times a call that is safe to repeat is sent again after its conductor died.
const MAX_REPEATS: u32 = 2;
use crate::contract::{Call, Reply, Route, decode};
use crate::{Context, NodeRef};

/// The conductors as an API process sees them: calls go where their [`Route`] says.
pub struct RemoteConductors {
    client: Arc<Client>,
    membership: Arc<dyn Membership>,
}

impl RemoteConductors {
    pub fn new(client: Arc<Client>, membership: Arc<dyn Membership>) -> Self {
        RemoteConductors { client, membership }
    }

    /// One call: encoded, routed, its reply decoded. When the conductor carrying it
    /// out is declared dead before it replies, a call that is safe to repeat
    /// ([`Call::retry_safe`]) goes again (to the node's new owner, or the shared queue)
    /// within the same deadline; any other gets an error saying what to check.
    pub async fn call<C: Call>(&self, ctx: &Context, req: C) -> Result<C::Reply, Error> {
        let route = req.route();
        let (safe, hint) = (req.retry_safe(), req.lost_hint());
        let body = req.to_wire().encode_to_vec();
        // One deadline for every attempt and re-route.
        let deadline = tokio::time::Instant::now() + self.client.call_timeout();
        let mut ctx = ctx.clone();
        let reply = loop {
            let is_lost = |t: &Taker| self.is_lost(t);
            let r = match &route {
                Route::Owner(n) => {
                    self.call_node(n, C::METHOD, &ctx, body.clone(), deadline, &is_lost)
                        .await
                }
                Route::Any => {
                    self.call_any(C::METHOD, &ctx, body.clone(), deadline, &is_lost)
                        .await
                }
                Route::Host(h) => {
                    self.client
                        .call_until(
                            &Target::Host(h.clone()),
                            C::METHOD,
                            &ctx,
                            body.clone(),
                            deadline,
                            &is_lost,
                        )
                        .await
                }
            };
            match r {
                Ok(b) => break b,
                Err(CallError::Lost { host }) if safe && ctx.attempt < MAX_REPEATS => {
                    ctx.attempt += 1;
                    metrics::counter!("ironic_rpc_repeats_total", "method" => C::METHOD)
                        .increment(1);
                    tracing::warn!(
                        method = C::METHOD,
                        host,
                        attempt = ctx.attempt,
                        "conductor died during the call; sending it again"
                    );
                    self.membership.refresh_soon().await;
                }
                // Never carried out: any call may go again (the conductors drop a copy
                // they take after the window, so it cannot run twice).
                Err(CallError::NotTaken(rk)) if ctx.attempt < MAX_REPEATS => {
                    ctx.attempt += 1;
                    metrics::counter!("ironic_rpc_repeats_total", "method" => C::METHOD)
                        .increment(1);
                    tracing::warn!(
                        method = C::METHOD,
                        routing_key = %rk,
                        attempt = ctx.attempt,
                        "no conductor took the call in time; sending it again"
                    );
                    self.membership.refresh_soon().await;
                }
                Err(CallError::Lost { host }) => {
                    return Err(Error::Unavailable(format!(
                        "Conductor {host} stopped while carrying out this request (request id {}); it may or may not have been carried out. {hint}",
                        ctx.request_id
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let wire = decode(&reply, "reply from a conductor")
            .map_err(|_| Error::internal("malformed reply from a conductor"))?;
        <C::Reply as Reply>::from_wire(wire)
            .map_err(|e| Error::internal_from("malformed reply from a conductor", e))
    }

    /// The run of a conductor carrying out a call is gone when the conductor has been
    /// declared dead, or when a later run of it has started (a restart quicker than
    /// the death verdict: the call died with the earlier run).
    fn is_lost(&self, t: &Taker) -> bool {
        self.membership.is_dead(&t.host)
            || t.incarnation
                .zip(self.membership.incarnation(&t.host))
                .is_some_and(|(took, latest)| latest > took)
    }

    fn owner(&self, n: &NodeRef) -> Option<String> {
        self.membership
            .owner(&n.conductor_group, &n.driver, &n.uuid)
    }

    /// Calls any live conductor through the shared queue (RabbitMQ balances); 503 at
    /// once when none is alive, instead of waiting for the call timeout.
    async fn call_any(
        &self,
        method: &str,
        ctx: &Context,
        body: Vec<u8>,
        deadline: tokio::time::Instant,
        is_lost: IsLost<'_>,
    ) -> Result<Vec<u8>, CallError> {
        if !self.membership.any_alive() {
            self.membership.refresh_soon().await;
            if !self.membership.any_alive() {
                return Err(Error::Unavailable(
                    "No conductor service is available to process the request; retry later.".into(),
                )
                .into());
            }
        }
        self.client
            .call_until(&Target::Any, method, ctx, body, deadline, is_lost)
            .await
    }

    async fn route(&self, n: &NodeRef) -> Result<String, Error> {
        if let Some(h) = self.owner(n) {
            return Ok(h);
        }
        self.membership.refresh_soon().await;
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
        deadline: tokio::time::Instant,
        is_lost: IsLost<'_>,
    ) -> Result<Vec<u8>, CallError> {
        let host = self.route(n).await?;
        match self
            .client
            .call_until(
                &Target::Host(host.clone()),
                method,
                ctx,
                body.clone(),
                deadline,
                is_lost,
            )
            .await
        {
            Err(CallError::Unroutable(rk)) => {
                // Rate-limited; the fallback below needs no fresh view anyway.
                self.membership.refresh_soon().await;
                let next = match self.owner(n) {
                    Some(h) if h != host => Some(h),
                    _ => {
                        self.membership
                            .owner_without(&n.conductor_group, &n.driver, &n.uuid, &host)
                    }
                };
                match next {
                    Some(h) => {
                        tracing::info!(from = %host, to = %h, "owner unreachable; calling the next conductor on the ring");
                        self.client
                            .call_until(&Target::Host(h), method, ctx, body, deadline, is_lost)
                            .await
                    }
                    None => Err(CallError::Unroutable(rk)),
                }
            }
            r => r,
        }
    }
}
