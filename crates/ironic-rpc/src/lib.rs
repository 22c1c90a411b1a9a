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

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ironic_model::Error;
/// The request context and the node reference live in the domain crate (the engine
/// uses them without the transport); re-exported here under their old names.
pub use ironic_model::{Context, NodeRef};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub mod amqp;
pub mod calls;
pub mod contract;
pub mod convert;
pub mod dispatch;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;

pub use calls::{Handlers, InterfaceCheck};

// `route_calls!`: the conductor's `Handlers` impl, generated from the proto's
// `(call).room` of every call.
include!(concat!(env!("OUT_DIR"), "/routing.rs"));
pub use contract::{Call, Route};
pub use dispatch::{Dispatch, dispatcher};

/// The generated protobuf types, and the method table of the `Conductor` service
/// (`pb::conductor_methods`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/ironic.rpc.v1.rs"));
}

/// The conductors as a caller reaches them: every call goes through [`Conductors::call`]
/// whatever the transport.
#[derive(Clone)]
pub struct Conductors(Transport);

#[derive(Clone)]
enum Transport {
    /// The all-in-one binary: its own conductor, typed requests, no encoding.
    Local(Arc<Local>),
    /// The split deployment: AMQP, routed by the hash ring.
    Remote(Arc<amqp::RemoteConductors>),
}

/// The in-process transport: every call runs on a task of this tracker, so that a
/// graceful stop waits for the calls in flight ([`Conductors::shutdown_within`]).
struct Local {
    dispatch: Arc<dyn Dispatch>,
    calls: TaskTracker,
    /// False once the stop has begun: no call starts after that (held while a call is
    /// spawned, so that none slips past the wait).
    open: Mutex<bool>,
}

/// What a call that comes after the in-process conductor began stopping gets.
const STOPPING: &str = "The conductor is stopping; the request was not carried out.";

impl Conductors {
    /// Calls `handlers` in this process.
    pub fn in_process<H: Handlers>(handlers: Arc<H>) -> Conductors {
        Conductors(Transport::Local(Arc::new(Local {
            dispatch: dispatcher(handlers),
            calls: TaskTracker::new(),
            open: Mutex::new(true),
        })))
    }

    /// Calls conductors over the message bus.
    pub fn remote(remote: amqp::RemoteConductors) -> Conductors {
        Conductors(Transport::Remote(Arc::new(remote)))
    }

    /// Graceful stop of the in-process transport: calls from now on are refused
    /// (`Unavailable`, nothing carried out) and the calls in flight are waited for, at
    /// most `within`. Returns false if some did not finish in time: they are abandoned
    /// with the process, and whoever owns their nodes next recovers them, as after a
    /// crash. Over the bus there is nothing to wait for here (the conductors drain
    /// their own requests): true at once.
    pub async fn shutdown_within(&self, within: Duration) -> bool {
        let Transport::Local(l) = &self.0 else {
            return true;
        };
        {
            let mut open = l.open.lock().unwrap_or_else(PoisonError::into_inner);
            *open = false;
            l.calls.close();
        }
        let left = l.calls.len();
        if left > 0 {
            tracing::info!(calls = left, "waiting for in-process calls to finish");
        }
        tokio::time::timeout(within, l.calls.wait()).await.is_ok()
    }

    /// Calls in flight on the in-process transport (0 over the bus).
    pub fn in_flight(&self) -> usize {
        match &self.0 {
            Transport::Local(l) => l.calls.len(),
            Transport::Remote(_) => 0,
        }
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
            Transport::Local(l) => {
                let work = l
                    .dispatch
                    .local(ctx.clone(), C::METHOD, Box::new(req))
                    .instrument(tracing::Span::current());
                let task = {
                    let open = l.open.lock().unwrap_or_else(PoisonError::into_inner);
                    if !*open {
                        return Err(Error::Unavailable(STOPPING.into()));
                    }
                    l.calls.spawn(work)
                };
                task.await
                    .map_err(|e| Error::internal_from("conductor task failed", e))??
                    .downcast::<C::Reply>()
                    .map(|r| *r)
                    .map_err(|_| {
                        Error::internal(format!("reply of {} has the wrong type", C::METHOD))
                    })
            }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use tokio::sync::{Semaphore, mpsc};

    use super::*;
    use crate::calls::Ping;

    /// A conductor whose `ping` tells when it starts, then waits for a permit.
    struct Slow {
        started: mpsc::UnboundedSender<()>,
        release: Arc<Semaphore>,
    }

    impl Handlers for Slow {
        async fn ping(&self, _: &Context, _: Ping) -> Result<(), Error> {
            let _ = self.started.send(());
            let _permit = self.release.acquire().await;
            Ok(())
        }
    }

    fn slow() -> (Conductors, mpsc::UnboundedReceiver<()>, Arc<Semaphore>) {
        let (started, rx) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        let h = Arc::new(Slow {
            started,
            release: release.clone(),
        });
        (Conductors::in_process(h), rx, release)
    }

    /// A graceful stop of the in-process transport waits for the call in flight, even
    /// one whose caller went away; a call after the stop began is refused, not run.
    #[tokio::test]
    async fn a_stop_waits_for_the_calls_in_flight() {
        let (c, mut started, release) = slow();
        let caller = {
            let c = c.clone();
            tokio::spawn(async move { c.call(&Context::default(), Ping).await })
        };
        // A second call whose caller gives up at once: the call goes on all the same.
        let gone = {
            let c = c.clone();
            tokio::spawn(async move { c.call(&Context::default(), Ping).await })
        };
        started.recv().await.unwrap();
        started.recv().await.unwrap();
        gone.abort();
        assert_eq!(c.in_flight(), 2);

        let stop = tokio::spawn({
            let c = c.clone();
            async move { c.shutdown_within(Duration::from_secs(30)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!stop.is_finished(), "the stop did not wait for the calls");
        let refused = c.call(&Context::default(), Ping).await;
        assert!(
            matches!(&refused, Err(Error::Unavailable(m)) if m == STOPPING),
            "{refused:?}"
        );
        assert!(
            started.try_recv().is_err(),
            "a call ran after the stop began"
        );

        release.add_permits(2);
        assert!(stop.await.unwrap());
        assert!(caller.await.unwrap().is_ok());
        assert_eq!(c.in_flight(), 0);
    }

    /// The wait is bounded: a call that does not end is abandoned at the limit.
    #[tokio::test]
    async fn a_stop_gives_up_at_its_limit() {
        let (c, mut started, _release) = slow();
        let _caller = {
            let c = c.clone();
            tokio::spawn(async move { c.call(&Context::default(), Ping).await })
        };
        started.recv().await.unwrap();
        assert!(!c.shutdown_within(Duration::from_millis(50)).await);
        assert_eq!(c.in_flight(), 1);
    }
}
