//! Server side: the one dispatch table ([`crate::calls`] generates it) behind a trait
//! object, so both transports reach any [`Handlers`] implementation the same way: the
//! AMQP server with encoded bodies, the in-process transport with typed requests.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::calls::{Handlers, serve_local, serve_wire};
use crate::contract::not_served;
use crate::convert::error_to_pb;
use crate::{Context, pb};
use ironic_model::Error;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A conductor's handlers, type-erased.
pub trait Dispatch: Send + Sync {
    /// Runs an encoded request and returns the reply to send back.
    fn wire<'a>(
        &'a self,
        ctx: &'a Context,
        method: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, pb::Reply>;
    /// Runs a typed request. The in-process transport ([`crate::Conductors`]) runs the
    /// returned future on a tracked task of its own: as over a real bus, a caller that
    /// goes away mid-call cannot cancel conductor work half-way (between taking a node
    /// lock and giving it back), and a graceful stop waits for it.
    fn local(
        &self,
        ctx: Context,
        method: &'static str,
        req: Box<dyn Any + Send>,
    ) -> BoxFuture<'static, Result<Box<dyn Any + Send>, Error>>;
}

struct Served<H>(Arc<H>);

impl<H: Handlers> Dispatch for Served<H> {
    fn wire<'a>(
        &'a self,
        ctx: &'a Context,
        method: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, pb::Reply> {
        Box::pin(async move {
            match serve_wire(self.0.as_ref(), ctx, method, body).await {
                Some(Ok(b)) => pb::Reply {
                    result: Some(pb::reply::Result::Ok(b)),
                },
                Some(Err(e)) => {
                    if let Error::Internal(_) = &e {
                        // Only the context crosses the bus: the causes are logged here,
                        // once.
                        tracing::error!(
                            error = %ironic_model::secrets::log_safe(&ironic_model::error::chain(&e)),
                            "rpc failed"
                        );
                    }
                    error_reply(&e)
                }
                None => pb::Reply {
                    result: Some(pb::reply::Result::Error(pb::RpcError {
                        kind: pb::ErrorKind::Unimplemented as i32,
                        message: not_served(method).message().to_string(),
                    })),
                },
            }
        })
    }

    fn local(
        &self,
        ctx: Context,
        method: &'static str,
        req: Box<dyn Any + Send>,
    ) -> BoxFuture<'static, Result<Box<dyn Any + Send>, Error>> {
        let h = self.0.clone();
        Box::pin(async move { serve_local(h.as_ref(), &ctx, method, req).await })
    }
}

/// The dispatch table over `handlers`.
pub fn dispatcher<H: Handlers>(handlers: Arc<H>) -> Arc<dyn Dispatch> {
    Arc::new(Served(handlers))
}

pub fn error_reply(e: &Error) -> pb::Reply {
    pb::Reply {
        result: Some(pb::reply::Result::Error(error_to_pb(e))),
    }
}
