//! The shape of every conductor call. A call is one Rust request type that implements
//! [`Call`]: it names its method (a constant generated from the proto's `Conductor`
//! service, so a method the proto does not declare does not compile), its reply type,
//! its wire message and its [`Route`]. The list of calls ([`crate::calls`]) generates
//! the [`crate::Handlers`] trait a conductor implements and the one server-side
//! dispatch table; [`crate::Conductors::call`] is the one client call for both
//! transports.

use prost::{Message, Name};

use ironic_model::Error;

use crate::NodeRef;

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The conductor that owns the node on the hash ring (the next one on the ring if
    /// that one's queue is gone).
    Owner(NodeRef),
    /// Any live conductor, through the shared queue.
    Any,
    /// One named conductor.
    Host(String),
}

/// A reply type and its wire message.
pub trait Reply: Sized + Send + 'static {
    type Wire: Message + Name + Default;
    fn to_wire(self) -> Self::Wire;
    /// Checks what it reads: a malformed reply is an error, never a panic.
    fn from_wire(w: Self::Wire) -> Result<Self, Error>;
}

/// The Rust reply of a reply message: how a generated call names its reply type
/// (`type Reply = <pb::NodeReply as WireReply>::Reply`). Implemented next to each
/// [`Reply`].
pub trait WireReply {
    type Reply: Reply<Wire = Self>;
}

/// One conductor call.
pub trait Call: Sized + Send + 'static {
    /// The method, from the proto's service (`service::conductor_methods`).
    const METHOD: &'static str;
    type Reply: Reply;
    type Wire: Message + Name + Default;
    fn route(&self) -> Route;
    fn to_wire(self) -> Self::Wire;
    /// Checks what it reads: a malformed request from a third-party client is an
    /// `Invalid` error, never a panic.
    fn from_wire(w: Self::Wire) -> Result<Self, Error>;

    /// Whether the caller may send the call again when the conductor carrying it out
    /// dies mid-call: it reads only, or its handler recognises a repeat
    /// ([`crate::Context::attempt`]) and answers with what the first attempt did.
    fn retry_safe(&self) -> bool {
        false
    }

    /// What a client should check when the conductor carrying the call out died and
    /// the call could not be repeated (the end of the error message).
    fn lost_hint(&self) -> String {
        match self.route() {
            Route::Owner(n) => format!(
                "Read node {} to see whether the change was made before trying again.",
                n.uuid
            ),
            _ => "Check whether the change was made before trying again.".into(),
        }
    }
}

/// Decodes a request or reply body.
pub(crate) fn decode<M: Message + Default>(body: &[u8], what: &str) -> Result<M, Error> {
    M::decode(body).map_err(|e| Error::Invalid(format!("Malformed RPC {what}: {e}")))
}

/// A method name as a metric label: the contract's own `&'static str` for a method of
/// the contract, `"unknown"` for anything else, so that whoever sends a message cannot
/// add label values (every label value is one of [`crate::calls::METHODS`]).
pub fn method_label(method: &str) -> &'static str {
    crate::calls::METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("unknown")
}

/// The error of a method this side does not serve.
pub fn not_served(method: &str) -> Error {
    Error::internal(format!(
        "Method {method:?} is not implemented by this conductor."
    ))
}

/// Generates, from the list of calls `Type => handler`: the [`crate::Handlers`]
/// trait (one method per call; a conductor implements them all, a test stand-in only
/// those it needs), the method list, the signature table the proto is checked
/// against, and the dispatch of an encoded request (AMQP) and of a typed one
/// (in-process).
macro_rules! contract {
    ($( $(#[$doc:meta])* $ty:ident => $handler:ident $({ $($default:tt)* })? ),* $(,)?) => {
        /// The handlers of the conductor calls, one per call of the contract. Each
        /// defaults to "not implemented" so that a stand-in implements only what it
        /// serves; the conductor implements every one (a test checks it).
        pub trait Handlers: Send + Sync + 'static {
            $(
                $(#[$doc])*
                fn $handler(
                    &self,
                    ctx: &$crate::Context,
                    req: $ty,
                ) -> impl ::std::future::Future<
                    Output = ::std::result::Result<
                        <$ty as $crate::contract::Call>::Reply,
                        ::ironic_model::Error,
                    >,
                > + Send {
                    let _ = (ctx, req);
                    $crate::contract::default_body!($ty, $($($default)*)?)
                }
            )*
        }

        /// Every method of the contract.
        pub const METHODS: &[&str] = &[$( <$ty as $crate::contract::Call>::METHOD ),*];

        /// `(method, request message, reply message)` of every Rust call, to compare
        /// with the proto's service.
        pub fn signatures() -> Vec<(&'static str, &'static str, &'static str)> {
            vec![$(
                (
                    <$ty as $crate::contract::Call>::METHOD,
                    <<$ty as $crate::contract::Call>::Wire as ::prost::Name>::NAME,
                    <<<$ty as $crate::contract::Call>::Reply as $crate::contract::Reply>::Wire as ::prost::Name>::NAME,
                ),
            )*]
        }

        /// Runs an encoded request; `None` for a method not in the contract.
        pub(crate) async fn serve_wire<H: Handlers + ?Sized>(
            h: &H,
            ctx: &$crate::Context,
            method: &str,
            body: &[u8],
        ) -> Option<::std::result::Result<Vec<u8>, ::ironic_model::Error>> {
            use $crate::contract::{Call, Reply};
            use ::prost::Message;
            $(
                if method == <$ty as Call>::METHOD {
                    return Some(async {
                        let wire = $crate::contract::decode(body, "request body")?;
                        let req = <$ty as Call>::from_wire(wire)?;
                        // Boxed: the handlers' futures are large, and one dispatch
                        // function holding every one of them inline made a stack
                        // frame (in debug builds) that overflowed a worker thread.
                        let reply = Box::pin(h.$handler(ctx, req)).await?;
                        Ok(Reply::to_wire(reply).encode_to_vec())
                    }.await);
                }
            )*
            None
        }

        /// Runs a typed request (the in-process transport); the reply comes back as
        /// the call's reply type.
        pub(crate) async fn serve_local<H: Handlers + ?Sized>(
            h: &H,
            ctx: &$crate::Context,
            method: &'static str,
            req: Box<dyn ::std::any::Any + Send>,
        ) -> ::std::result::Result<Box<dyn ::std::any::Any + Send>, ::ironic_model::Error> {
            use $crate::contract::Call;
            $(
                if method == <$ty as Call>::METHOD {
                    let req = req.downcast::<$ty>().map_err(|_| {
                        ::ironic_model::Error::internal(format!("request of {method} has the wrong type"))
                    })?;
                    // Boxed, as in `serve_wire`.
                    return Ok(Box::new(Box::pin(h.$handler(ctx, *req)).await?));
                }
            )*
            Err($crate::contract::not_served(method))
        }
    };
}

/// A handler's default: the body given in the list, else "not implemented".
macro_rules! default_body {
    ($ty:ident, ) => {
        async { Err($crate::contract::not_served(<$ty as $crate::contract::Call>::METHOD)) }
    };
    ($ty:ident, $($default:tt)+) => {
        async { $($default)+ }
    };
}

pub(crate) use {contract, default_body};
