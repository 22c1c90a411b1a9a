#![allow(clippy::unwrap_used)]
//! The AMQP transport on its own, against a real RabbitMQ (a vhost per test) and a
//! conductor stand-in that counts what it runs: unroutable calls fail fast, a call
//! without a reply fails at its timeout, and a request whose caller has given up is
//! never run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ironic_model::{Error, Node, NodeUuid, Version};
use ironic_rpc::amqp::{BusSettings, CallError, Client, Server, SigningKey, SigningKeys, Target};
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
        accept_timeout: Duration::from_secs(10).min(timeout / 2),
        tls_ca_pem: None,
        max_backoff: Duration::from_secs(1),
        connection_name: "bus-test".into(),
        cluster: cluster.into(),
        // One key for every deployment of these tests: a request from another cluster
        // is then refused for its cluster id (a wrong key is `signing.rs`'s subject).
        signing: SigningKeys::new(SigningKey::new([42u8; 32]).unwrap()),
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
        1,
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
        1,
        dispatcher(a.clone()),
    );
    let sb = Server::start(
        settings(&bus, Duration::from_secs(5), 1),
        "b".into(),
        1,
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
        1,
        dispatcher(a.clone()),
    );
    let sb = Server::start(
        in_cluster(&bus, t, 4, "beta"),
        "c1".into(),
        1,
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
    use lapin::options::BasicPublishOptions;
    use lapin::types::{AMQPValue, FieldTable};

    let bus = TestBus::new().unwrap();
    let s = in_cluster(&bus, Duration::from_secs(5), 4, "alpha");
    let a = counting();
    let server = Server::start(s.clone(), "c1".into(), 1, dispatcher(a.clone()));
    assert!(server.consuming(Duration::from_secs(10)).await);

    let ironic_rpc::testing::Party {
        conn,
        channel: ch,
        queue,
        inbox: mut replies,
    } = bus.party().await.unwrap();
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
    let body = envelope.encode_to_vec();
    let props = s.signing.sign(
        "ironic",
        &s.host_queue("c1"),
        lapin::BasicProperties::default()
            .with_correlation_id("x1".into())
            .with_reply_to(queue.as_str().into())
            .with_headers(headers),
        &body,
    );
    ch.basic_publish(
        "ironic".into(),
        s.host_queue("c1").as_str().into(),
        BasicPublishOptions::default(),
        &body,
        props,
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

/// A stand-in conductor that takes calls and, while `stalls` is set, never answers
/// them (as a conductor that died with the call in hand); it records the attempt
/// number of every call it runs.
struct Stalling {
    stalls: std::sync::atomic::AtomicBool,
    attempts: std::sync::Mutex<Vec<u32>>,
}

impl Stalling {
    fn new(stalls: bool) -> Arc<Stalling> {
        Arc::new(Stalling {
            stalls: std::sync::atomic::AtomicBool::new(stalls),
            attempts: std::sync::Mutex::new(Vec::new()),
        })
    }

    async fn run(&self, ctx: &Context) {
        self.attempts.lock().unwrap().push(ctx.attempt);
        if self.stalls.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
}

impl Handlers for Stalling {
    async fn change_node_power_state(
        &self,
        ctx: &Context,
        _req: ironic_rpc::calls::ChangeNodePowerState,
    ) -> Result<(), Error> {
        self.run(ctx).await;
        Ok(())
    }

    async fn create_allocation(
        &self,
        ctx: &Context,
        req: ironic_rpc::calls::CreateAllocation,
    ) -> Result<ironic_model::Allocation, Error> {
        self.run(ctx).await;
        let mut a =
            ironic_model::Allocation::new(req.allocation.uuid, req.allocation.resource_class);
        a.name = req.allocation.name;
        Ok(a)
    }
}

/// The cluster as the test declares it: who owns every node, who is dead.
#[derive(Default)]
struct Declared {
    owner: std::sync::Mutex<Option<String>>,
    dead: std::sync::Mutex<Vec<String>>,
    /// Host → the incarnation of its latest run.
    runs: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

impl ironic_model::cluster::Membership for Declared {
    fn owner(&self, _: &str, _: &str, _: &str) -> Option<String> {
        self.owner.lock().unwrap().clone()
    }
    fn owner_without(&self, _: &str, _: &str, _: &str, _: &str) -> Option<String> {
        None
    }
    fn any_alive(&self) -> bool {
        true
    }
    fn is_dead(&self, host: &str) -> bool {
        self.dead.lock().unwrap().iter().any(|h| h == host)
    }
    fn incarnation(&self, host: &str) -> Option<i64> {
        self.runs.lock().unwrap().get(host).copied()
    }
    fn refresh_soon(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// A call taken from the shared queue by a conductor that then dies: the caller learns
/// who took it (the conductor's notice), sees it declared dead, and, for a call that is
/// safe to repeat (an allocation: its uuid is fixed before it is sent), sends it again
/// to a survivor, which runs it as a repeat; the client gets the survivor's answer long
/// before the call timeout. A call that is not safe to repeat gets an error saying what
/// to check, also long before the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_conductor_dies_is_repeated_when_safe() {
    use ironic_rpc::amqp::RemoteConductors;
    use ironic_rpc::calls::CreateAllocation;

    let bus = TestBus::new().unwrap();
    // A long timeout: the outcome must come from the death, not from the timeout.
    let s = settings(&bus, Duration::from_secs(60), 4);
    let dying = Stalling::new(true);
    let a = Server::start(s.clone(), "a".into(), 1, dispatcher(dying.clone()));
    assert!(a.consuming(Duration::from_secs(10)).await);
    let client = Client::start(s.clone());
    assert!(client.connected(Duration::from_secs(10)).await);
    let cluster = Arc::new(Declared::default());
    let remote = Arc::new(RemoteConductors::new(client.clone(), cluster.clone()));

    let new = ironic_model::NewAllocation {
        uuid: ironic_model::AllocationUuid::new_v4(),
        name: Some("repeat-me".into()),
        resource_class: Some("rc".into()),
        candidate_nodes: vec![],
        traits: vec![],
        owner: None,
        extra: Default::default(),
    };
    let ctx = Context {
        request_id: "req-repeat".into(),
        attempt: 0,
    };
    let (r2, c2, n2) = (remote.clone(), ctx.clone(), new.clone());
    let call = tokio::spawn(async move {
        let started = Instant::now();
        let r = r2
            .call(
                &c2,
                CreateAllocation {
                    allocation: n2,
                    backfill: None,
                },
            )
            .await;
        (r, started.elapsed())
    });
    // "a" took it (and only "a" consumes the shared queue so far).
    let start = Instant::now();
    while dying.attempts.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "a took the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let survivor = Stalling::new(false);
    let b = Server::start(s.clone(), "b".into(), 1, dispatcher(survivor.clone()));
    assert!(b.consuming(Duration::from_secs(10)).await);
    // "a" dies (its consumers end with it) and is declared dead.
    assert!(!a.shutdown_within(Duration::ZERO).await);
    cluster.dead.lock().unwrap().push("a".into());
    let (r, took) = call.await.unwrap();
    let got = r.expect("the repeat's answer");
    assert_eq!(got.uuid, new.uuid);
    assert_eq!(
        *survivor.attempts.lock().unwrap(),
        vec![1],
        "b ran it once, as a repeat"
    );
    assert_eq!(*dying.attempts.lock().unwrap(), vec![0]);
    eprintln!("answered {} ms after the call started", took.as_millis());

    // Not safe to repeat: an error naming the dead conductor and what to check.
    assert!(b.shutdown_within(Duration::from_secs(10)).await);
    let dying = Stalling::new(true);
    let c = Server::start(s.clone(), "c".into(), 1, dispatcher(dying.clone()));
    assert!(c.consuming(Duration::from_secs(10)).await);
    // A node call, to the node's owner.
    *cluster.owner.lock().unwrap() = Some("c".into());
    let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
    let uuid = node.uuid.as_str().to_string();
    let r2 = remote.clone();
    // A reboot is not repeated: it would reboot twice.
    let reboot = ironic_rpc::calls::ChangeNodePowerState {
        node: ironic_rpc::NodeRef::from(&node),
        new_state: "rebooting".into(),
        timeout_secs: None,
    };
    let call = tokio::spawn(async move { r2.call(&Context::default(), reboot).await });
    let start = Instant::now();
    while dying.attempts.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "c took the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!c.shutdown_within(Duration::ZERO).await);
    cluster.dead.lock().unwrap().push("c".into());
    match call.await.unwrap() {
        Err(Error::Unavailable(m)) => {
            assert!(m.contains("Conductor c stopped while carrying out"), "{m}");
            assert!(m.contains(&format!("Read node {uuid}")), "{m}");
        }
        other => panic!("expected the lost-call error, got {other:?}"),
    }
    assert_eq!(*dying.attempts.lock().unwrap(), vec![0], "not repeated");
    client.shutdown().await;
}

/// A conductor that takes a call and is restarted under the same name before anyone
/// declares it dead (a quick `systemctl restart`, a kill and a supervisor's restart):
/// its notice named the run that took the call, so once the caller sees a later run the
/// call counts as lost and, being safe to repeat, goes again to the node's owner, now
/// the new run, instead of waiting for the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_conductor_restarts_at_once_is_repeated() {
    use ironic_rpc::amqp::RemoteConductors;

    let bus = TestBus::new().unwrap();
    // A long timeout: the outcome must come from the restart, not from the timeout.
    let s = settings(&bus, Duration::from_secs(60), 4);
    let dying = Stalling::new(true);
    let first = Server::start(s.clone(), "d".into(), 1, dispatcher(dying.clone()));
    assert!(first.consuming(Duration::from_secs(10)).await);
    let client = Client::start(s.clone());
    assert!(client.connected(Duration::from_secs(10)).await);
    let cluster = Arc::new(Declared::default());
    *cluster.owner.lock().unwrap() = Some("d".into());
    cluster.runs.lock().unwrap().insert("d".into(), 1);
    let remote = Arc::new(RemoteConductors::new(client.clone(), cluster.clone()));

    let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
    let power_on = ironic_rpc::calls::ChangeNodePowerState {
        node: ironic_rpc::NodeRef::from(&node),
        new_state: "power on".into(),
        timeout_secs: None,
    };
    let r2 = remote.clone();
    let call = tokio::spawn(async move { r2.call(&Context::default(), power_on).await });
    let start = Instant::now();
    while dying.attempts.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "d took the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first run dies; the next starts at once under the same name. Nobody declares
    // "d" dead: only its incarnation moves.
    assert!(!first.shutdown_within(Duration::ZERO).await);
    let survivor = Stalling::new(false);
    let second = Server::start(s.clone(), "d".into(), 2, dispatcher(survivor.clone()));
    assert!(second.consuming(Duration::from_secs(10)).await);
    cluster.runs.lock().unwrap().insert("d".into(), 2);
    tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("answered long before the call timeout")
        .unwrap()
        .expect("the repeat's answer");
    assert_eq!(*dying.attempts.lock().unwrap(), vec![0]);
    assert_eq!(
        *survivor.attempts.lock().unwrap(),
        vec![1],
        "the new run ran it once, as a repeat"
    );
    // The new run's own calls are not mistaken for lost ones.
    let again = ironic_rpc::calls::ChangeNodePowerState {
        node: ironic_rpc::NodeRef::from(&node),
        new_state: "power on".into(),
        timeout_secs: None,
    };
    remote.call(&Context::default(), again).await.unwrap();
    assert_eq!(*survivor.attempts.lock().unwrap(), vec![1, 0]);
    assert!(second.shutdown_within(Duration::from_secs(10)).await);
    client.shutdown().await;
}

/// Declares `queue` (exclusive to this connection or not) and binds it to the exchange
/// under its own name, as a conductor's queue is.
async fn declare_bound(ch: &lapin::Channel, s: &BusSettings, queue: &str, exclusive: bool) {
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            exclusive,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        queue.into(),
        s.exchange.as_str().into(),
        queue.into(),
        Default::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
}

/// A call that no conductor takes within the accept window (here its queue swallows the
/// first request and vanishes, as when the broker loses it) is not left waiting for the
/// call timeout: no notice came, so it was not carried out, and it goes again, even a
/// reboot, which is never repeated after a conductor that took it died. A copy taken
/// after the window is dropped unrun, and with nobody taking it at all the caller gets
/// a 503 saying it was not carried out, also long before the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_takes_goes_again_after_the_accept_window() {
    use futures_lite::StreamExt;
    use ironic_rpc::amqp::RemoteConductors;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions};
    use lapin::types::FieldTable;

    let bus = TestBus::new().unwrap();
    let mut s = settings(&bus, Duration::from_secs(60), 4);
    s.accept_timeout = Duration::from_secs(1);
    let client = Client::start(s.clone());
    assert!(client.connected(Duration::from_secs(10)).await);
    let cluster = Arc::new(Declared::default());
    *cluster.owner.lock().unwrap() = Some("ghost".into());
    let remote = Arc::new(RemoteConductors::new(client.clone(), cluster.clone()));

    // "ghost"'s queue, held by a consumer that takes the first request and drops it.
    let conn = lapin::Connection::connect(&bus.url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let queue = s.host_queue("ghost");
    declare_bound(&ch, &s, &queue, true).await;
    let mut swallow = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
    let reboot = ironic_rpc::calls::ChangeNodePowerState {
        node: ironic_rpc::NodeRef::from(&node),
        new_state: "rebooting".into(),
        timeout_secs: None,
    };
    let r2 = remote.clone();
    let call = tokio::spawn({
        let reboot = reboot.clone();
        async move {
            let started = Instant::now();
            (
                r2.call(&Context::default(), reboot).await,
                started.elapsed(),
            )
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(10), swallow.next())
        .await
        .expect("the request reached ghost's queue")
        .unwrap()
        .unwrap();
    first.ack(BasicAckOptions::default()).await.unwrap();
    drop(swallow);
    conn.close(0, "gone".into()).await.unwrap();
    // The real "ghost" comes up and takes the call when it goes again.
    let survivor = Stalling::new(false);
    let ghost = Server::start(s.clone(), "ghost".into(), 1, dispatcher(survivor.clone()));
    assert!(ghost.consuming(Duration::from_secs(10)).await);
    let (r, took) = call.await.unwrap();
    r.expect("the call's real outcome");
    assert_eq!(
        *survivor.attempts.lock().unwrap(),
        vec![1],
        "run once, as the second sending"
    );
    eprintln!("answered {} ms after the call started", took.as_millis());

    // Nobody takes it at all (the owner's queue exists, nobody consumes it): 503 "not
    // carried out" after the repeats, not the call timeout; the late copies are never run.
    assert!(ghost.shutdown_within(Duration::from_secs(10)).await);
    let conn = lapin::Connection::connect(&bus.url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    declare_bound(&ch, &s, &queue, false).await;
    match remote.call(&Context::default(), reboot.clone()).await {
        Err(Error::Unavailable(m)) => {
            assert!(m.contains("it was not carried out"), "{m}");
        }
        other => panic!("expected 503 not carried out, got {other:?}"),
    }
    ch.queue_delete(queue.as_str().into(), Default::default())
        .await
        .unwrap();

    // A copy a conductor takes after its window (it sat in a busy conductor's queue) is
    // dropped unrun: here one sent with a window already over, then a fresh call
    // behind it; when the fresh one is answered, the late one has been dropped.
    let counted = Stalling::new(false);
    let ghost = Server::start(s.clone(), "ghost".into(), 1, dispatcher(counted.clone()));
    assert!(ghost.consuming(Duration::from_secs(10)).await);
    let late = pb::Request {
        method: ironic_rpc::calls::ChangeNodePowerState::METHOD.into(),
        request_id: "req-late".into(),
        body: reboot.clone().to_wire().encode_to_vec(),
        accept_by_unix_ms: 1,
        ..Default::default()
    };
    let mut headers = FieldTable::default();
    headers.insert(
        ironic_rpc::amqp::CLUSTER_HEADER.into(),
        lapin::types::AMQPValue::LongString(s.cluster.clone().into()),
    );
    let body = late.encode_to_vec();
    let props = s.signing.sign(
        &s.exchange,
        &queue,
        lapin::BasicProperties::default().with_headers(headers),
        &body,
    );
    ch.basic_publish(
        s.exchange.as_str().into(),
        queue.as_str().into(),
        Default::default(),
        &body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap();
    remote.call(&Context::default(), reboot).await.unwrap();
    assert_eq!(
        *counted.attempts.lock().unwrap(),
        vec![0],
        "only the fresh call ran"
    );
    assert!(ghost.shutdown_within(Duration::from_secs(10)).await);
}

/// `amqps://`: the API's client and a conductor reach RabbitMQ over TLS (here through a
/// TLS terminator of the test in front of the broker, with a throwaway certificate that
/// `tls_ca_pem` trusts) and a call goes through; without that CA the connection is
/// refused (the certificate is not trusted), so TLS was really in the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_over_amqps() {
    use tokio::io::copy_bidirectional;

    let (dir, cert, key) = common::throwaway_certificate();
    let acceptor = ironic::ops::tls_acceptor(&cert, &key).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let seen = handshakes.clone();
    let terminator = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                seen.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await {
                    let _ = copy_bidirectional(&mut tls, &mut broker).await;
                }
            });
        }
    });

    let bus = TestBus::new().unwrap();
    let mut s = settings(&bus, Duration::from_secs(10), 4);
    let vhost = bus.url.rsplit('/').next().unwrap().to_string();
    s.url = format!("amqps://guest:guest@127.0.0.1:{port}/{vhost}");
    s.tls_ca_pem = Some(std::fs::read_to_string(&cert).unwrap());
    let a = counting();
    let server = Server::start(s.clone(), "tls-c".into(), 1, dispatcher(a.clone()));
    assert!(server.consuming(Duration::from_secs(10)).await);
    let client = Client::start(s.clone());
    assert!(client.connected(Duration::from_secs(10)).await);
    client
        .call(
            &Target::Any,
            CreateNode::METHOD,
            &Context::default(),
            create_body(),
        )
        .await
        .unwrap();
    assert_eq!(
        a.runs.load(Ordering::SeqCst),
        1,
        "the conductor ran the call"
    );
    assert!(
        handshakes.load(Ordering::SeqCst) >= 2,
        "both sides came over TLS"
    );

    // The same address without the CA: the broker's certificate is not trusted.
    let mut untrusted = s.clone();
    untrusted.tls_ca_pem = None;
    let refused = Client::start(untrusted);
    assert!(!refused.connected(Duration::from_secs(3)).await);
    assert!(server.shutdown_within(Duration::from_secs(10)).await);
    terminator.abort();
    let _ = std::fs::remove_dir_all(dir);
}
