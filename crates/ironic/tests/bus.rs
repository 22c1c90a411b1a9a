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
    in_cluster(bus, timeout, prefetch, "test-cluster")
}

fn in_cluster(bus: &TestBus, timeout: Duration, prefetch: u16, cluster: &str) -> BusSettings {
    BusSettings {
        url: bus.url.clone(),
        exchange: "ironic".into(),
        call_timeout: timeout,
        prefetch,
        max_backoff: Duration::from_secs(1),
        connection_name: "bus-test".into(),
        cluster: cluster.into(),
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

fn counting() -> Arc<Counting> {
    Arc::new(Counting {
        runs: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        first_takes: Duration::ZERO,
    })
}

/// Two deployments on one vhost, with the same conductor host name: calls to "any
/// conductor" and to the host each reach only their own deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_on_one_vhost_take_only_their_own_calls() {
    let bus = TestBus::new().unwrap();
    let t = Duration::from_secs(5);
    let (a, b) = (counting(), counting());
    let sa = Server::start(
        in_cluster(&bus, t, 4, "alpha"),
        "c1".into(),
        dispatcher(a.clone()),
    );
    let sb = Server::start(
        in_cluster(&bus, t, 4, "beta"),
        "c1".into(),
        dispatcher(b.clone()),
    );
    assert!(sa.consuming(Duration::from_secs(10)).await);
    assert!(sb.consuming(Duration::from_secs(10)).await);
    let ca = Client::start(in_cluster(&bus, t, 4, "alpha"));
    let cb = Client::start(in_cluster(&bus, t, 4, "beta"));
    assert!(ca.connected(Duration::from_secs(10)).await);
    assert!(cb.connected(Duration::from_secs(10)).await);
    let ctx = Context::default();
    for target in [Target::Any, Target::Host("c1".into())] {
        for _ in 0..5 {
            let r = ca
                .call(&target, CreateNode::METHOD, &ctx, create_body())
                .await;
            assert!(r.is_ok(), "{r:?}");
        }
        for _ in 0..3 {
            let r = cb
                .call(&target, CreateNode::METHOD, &ctx, create_body())
                .await;
            assert!(r.is_ok(), "{r:?}");
        }
    }
    assert_eq!(a.runs.load(Ordering::SeqCst), 10);
    assert_eq!(b.runs.load(Ordering::SeqCst), 6);
    ca.shutdown().await;
    cb.shutdown().await;
    assert!(sa.shutdown_within(Duration::from_secs(10)).await);
    assert!(sb.shutdown_within(Duration::from_secs(10)).await);
}

/// A request that names another deployment (a misconfigured process publishing into
/// this deployment's queue) is refused, answered with an error naming both ids, and
/// never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_another_deployment_is_refused() {
    use futures_lite::StreamExt;
    use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
    use lapin::types::{AMQPValue, FieldTable};

    let bus = TestBus::new().unwrap();
    let s = in_cluster(&bus, Duration::from_secs(5), 4, "alpha");
    let a = counting();
    let server = Server::start(s.clone(), "c1".into(), dispatcher(a.clone()));
    assert!(server.consuming(Duration::from_secs(10)).await);

    let conn = lapin::Connection::connect(&bus.url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut replies = ch
        .basic_consume(
            q.name().as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut headers = FieldTable::default();
    headers.insert(
        ironic_rpc::amqp::CLUSTER_HEADER.into(),
        AMQPValue::LongString("beta".into()),
    );
    let envelope = pb::Request {
        method: CreateNode::METHOD.into(),
        body: create_body(),
        ..Default::default()
    };
    ch.basic_publish(
        "ironic".into(),
        s.host_queue("c1").as_str().into(),
        BasicPublishOptions::default(),
        &envelope.encode_to_vec(),
        lapin::BasicProperties::default()
            .with_correlation_id("x1".into())
            .with_reply_to(q.name().clone())
            .with_headers(headers),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .expect("a reply")
        .unwrap()
        .unwrap();
    let reply = pb::Reply::decode(&d.data[..]).unwrap();
    match reply.result {
        Some(pb::reply::Result::Error(e)) => {
            assert!(
                e.message.contains("alpha") && e.message.contains("beta"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        a.runs.load(Ordering::SeqCst),
        0,
        "the foreign request was not run"
    );
    let _ = conn.close(200, "done".into()).await;
    assert!(server.shutdown_within(Duration::from_secs(10)).await);
}
