#![allow(clippy::unwrap_used)]
//! The AMQP transport on its own, against a real RabbitMQ (a vhost per test) and a
//! conductor stand-in that counts what it runs: unroutable calls fail fast, a call
//! without a reply fails at its timeout, and a request whose caller has given up is
//! never run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ironic_model::{Error, Node, NodeUuid, Version};
use ironic_rpc::amqp::{BusSettings, CallError, Client, Server, Target};
use ironic_rpc::calls::CreateNode;
use ironic_rpc::testing::TestBus;
use ironic_rpc::{Call, Context, Handlers, convert, dispatcher, pb};
use prost::Message;

/// Runs `create_node` only: the first call takes `first_takes`, later ones are instant.
/// Every other call answers "not implemented" (the contract's default).
struct Counting {
    runs: AtomicUsize,
    /// Calls that have returned.
    finished: AtomicUsize,
    first_takes: Duration,
}

impl Handlers for Counting {
    async fn create_node(&self, _: &Context, req: CreateNode) -> Result<Node, Error> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::time::sleep(self.first_takes).await;
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(req.node)
    }
}

fn settings(bus: &TestBus, timeout: Duration, prefetch: u16) -> BusSettings {
    BusSettings {
        url: bus.url.clone(),
        exchange: "ironic".into(),
        call_timeout: timeout,
        prefetch,
        max_backoff: Duration::from_secs(1),
        connection_name: "bus-test".into(),
    }
}

fn create_body() -> Vec<u8> {
    let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
    pb::CreateNodeRequest {
        node: Some(convert::node_to_pb(&node)),
    }
    .encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_calls_fail_fast() {
    let bus = TestBus::new().unwrap();
    let client = Client::start(settings(&bus, Duration::from_secs(20), 8));
    assert!(client.connected(Duration::from_secs(10)).await);
    let started = Instant::now();
    let r = client
        .ping(&Target::Host("nobody".into()), &Context::default())
        .await;
    // Unroutable, not the timeout's "No reply": the call failed when the broker
    // returned it, without waiting 20 s (the time goes to the log, not an assertion).
    assert!(matches!(r, Err(CallError::Unroutable(_))), "{r:?}");
    eprintln!("unroutable after {:?}", started.elapsed());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_requests_are_never_run() {
    let bus = TestBus::new().unwrap();
    let api = Arc::new(Counting {
        runs: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        first_takes: Duration::from_secs(3),
    });
    // One slot: the second request waits behind the slow first one.
    let server = Server::start(
        settings(&bus, Duration::from_secs(1), 1),
        "solo".into(),
        dispatcher(api.clone()),
    );
    assert!(server.consuming(Duration::from_secs(10)).await);
    let client = Client::start(settings(&bus, Duration::from_secs(1), 8));
    assert!(client.connected(Duration::from_secs(10)).await);
    let target = Target::Host("solo".into());
    let ctx = Context::default();

    let (a, b) = tokio::join!(
        client.call(&target, CreateNode::METHOD, &ctx, create_body()),
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            client
                .call(&target, CreateNode::METHOD, &ctx, create_body())
                .await
        }
    );
    for r in [a, b] {
        match r {
            Err(CallError::Failed(Error::Unavailable(m))) => {
                assert!(m.starts_with("No reply from"), "{m}")
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    // The slow one finishes; the waiting one, whose caller gave up, is taken the moment
    // the slot frees up, and must not run. Something that must not happen has no event
    // to wait for: watch for a short, bounded while after the slot frees.
    let start = Instant::now();
    while api.finished.load(Ordering::SeqCst) < 1 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        api.finished.load(Ordering::SeqCst),
        1,
        "the slow call finished"
    );
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(700) {
        assert_eq!(
            api.runs.load(Ordering::SeqCst),
            1,
            "the expired request was not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The conductor is still fine: a fresh call runs.
    let c = client
        .call(&target, CreateNode::METHOD, &ctx, create_body())
        .await;
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(api.runs.load(Ordering::SeqCst), 2);
    client.shutdown().await;
    assert!(server.shutdown_within(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_for_any_conductor_are_shared_among_the_live_ones() {
    let bus = TestBus::new().unwrap();
    let counting = || {
        Arc::new(Counting {
            runs: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            first_takes: Duration::ZERO,
        })
    };
    let (a, b) = (counting(), counting());
    let sa = Server::start(
        settings(&bus, Duration::from_secs(5), 1),
        "a".into(),
        dispatcher(a.clone()),
    );
    let sb = Server::start(
        settings(&bus, Duration::from_secs(5), 1),
        "b".into(),
        dispatcher(b.clone()),
    );
    assert!(sa.consuming(Duration::from_secs(10)).await);
    assert!(sb.consuming(Duration::from_secs(10)).await);
    let client = Client::start(settings(&bus, Duration::from_secs(5), 8));
    assert!(client.connected(Duration::from_secs(10)).await);
    for _ in 0..10 {
        let r = client
            .call(
                &Target::Any,
                CreateNode::METHOD,
                &Context::default(),
                create_body(),
            )
            .await;
        assert!(r.is_ok(), "{r:?}");
    }
    let (na, nb) = (a.runs.load(Ordering::SeqCst), b.runs.load(Ordering::SeqCst));
    assert_eq!(na + nb, 10, "each call ran exactly once");
    assert!(na > 0 && nb > 0, "the broker shared them: {na} and {nb}");

    // One conductor stops gracefully: the other takes every call.
    assert!(sa.shutdown_within(Duration::from_secs(10)).await);
    for _ in 0..4 {
        let r = client
            .call(
                &Target::Any,
                CreateNode::METHOD,
                &Context::default(),
                create_body(),
            )
            .await;
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(b.runs.load(Ordering::SeqCst), nb + 4);
    client.shutdown().await;
    assert!(sb.shutdown_within(Duration::from_secs(10)).await);
}

/// Every method the proto's service declares is dispatched (never UNIMPLEMENTED, even by
/// a stand-in that serves one call), and a method outside it is UNIMPLEMENTED.
#[tokio::test]
async fn every_contract_method_is_dispatched() {
    let api = dispatcher(Arc::new(Counting {
        runs: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        first_takes: Duration::ZERO,
    }));
    let kind = |r: pb::Reply| match r.result {
        Some(pb::reply::Result::Error(e)) => e.kind,
        _ => pb::ErrorKind::Unspecified as i32,
    };
    for (m, _, _) in pb::conductor_methods::ALL {
        let r = api.wire(&Context::default(), m, &[]).await;
        assert_ne!(kind(r), pb::ErrorKind::Unimplemented as i32, "{m}");
    }
    let r = api.wire(&Context::default(), "fly", &[]).await;
    assert_eq!(kind(r), pb::ErrorKind::Unimplemented as i32);
}
