//! The conductor RPC: the contract (one request type per call, [`calls`], checked
//! against the proto's `Conductor` service, generated into [`pb`]), the one client
//! call for both transports ([`Conductors::call`]), and the one server-side dispatch
//! table ([`dispatch`]) over a conductor's [`Handlers`]:
//!
//! - in process: the all-in-one binary calls its own conductor directly;
//! - [`amqp`]: the split deployment, RabbitMQ request/reply with protobuf payloads
//!   (`docs/rpc.md` describes exchange, queues, headers, timeouts and errors).
//!
//! Architecture invariant: no business logic here, only the contract, its encoding and
//! its routing.

use std::sync::Arc;

use ironic_model::{Error, Node};

pub mod amqp;
pub mod calls;
pub mod contract;
pub mod convert;
pub mod dispatch;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;

pub use calls::{Handlers, InterfaceCheck};
pub use contract::{Call, Route};
pub use dispatch::{Dispatch, dispatcher};

/// The generated protobuf types, and the method table of the `Conductor` service
/// (`pb::conductor_methods`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/ironic.rpc.v1.rs"));
}

/// Who asked, carried with every call for logs and traces.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub request_id: String,
    /// 0 for the first attempt; more when the caller repeats a call whose conductor
    /// died mid-call ([`Call::retry_safe`]): the handler then recognises what the
    /// earlier attempt may have done.
    pub attempt: u32,
}

/// A node as the caller routes on it: the hash ring key is (conductor_group, driver),
/// the position on the ring the uuid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub id: ironic_model::NodeId,
    pub uuid: String,
    pub driver: String,
    pub conductor_group: String,
}

impl From<&Node> for NodeRef {
    fn from(n: &Node) -> Self {
        NodeRef {
            id: n.id,
            uuid: n.uuid.as_str().to_string(),
            driver: n.driver.clone(),
            conductor_group: n.conductor_group.clone(),
        }
    }
}

/// The conductors as a caller reaches them: every call goes through [`Conductors::call`]
/// whatever the transport.
#[derive(Clone)]
pub struct Conductors(Transport);

#[derive(Clone)]
enum Transport {
    /// The all-in-one binary: its own conductor, typed requests, no encoding.
    Local(Arc<dyn Dispatch>),
    /// The split deployment: AMQP, routed by the hash ring.
    Remote(Arc<amqp::RemoteConductors>),
}

impl Conductors {
    /// Calls `handlers` in this process.
    pub fn in_process<H: Handlers>(handlers: Arc<H>) -> Conductors {
        Conductors(Transport::Local(dispatcher(handlers)))
    }

    /// Calls conductors over the message bus.
    pub fn remote(remote: amqp::RemoteConductors) -> Conductors {
        Conductors(Transport::Remote(Arc::new(remote)))
    }

    /// One call, to where its [`Route`] says (counted in `ironic_rpc_calls_total` and
    /// `ironic_rpc_call_duration_seconds`).
    pub async fn call<C: Call>(&self, ctx: &Context, req: C) -> Result<C::Reply, Error> {
        let started = std::time::Instant::now();
        let r = self.call_on(ctx, req).await;
        let outcome = match &r {
            Ok(_) => "ok",
            Err(e) => outcome_of(e),
        };
        metrics::counter!("ironic_rpc_calls_total", "method" => C::METHOD, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("ironic_rpc_call_duration_seconds", "method" => C::METHOD)
            .record(started.elapsed().as_secs_f64());
        r
    }

    async fn call_on<C: Call>(&self, ctx: &Context, req: C) -> Result<C::Reply, Error> {
        match &self.0 {
            Transport::Local(d) => d
                .local(ctx.clone(), C::METHOD, Box::new(req))
                .await?
                .downcast::<C::Reply>()
                .map(|r| *r)
                .map_err(|_| Error::internal(format!("reply of {} has the wrong type", C::METHOD))),
            Transport::Remote(r) => r.call(ctx, req).await,
        }
    }
}

/// The metrics label of an error: its RPC error kind (`NOT_FOUND`, `UNAVAILABLE`, ...).
pub fn outcome_of(e: &Error) -> &'static str {
    pb::ErrorKind::try_from(convert::error_to_pb(e).kind)
        .unwrap_or(pb::ErrorKind::Internal)
        .as_str_name()
}
