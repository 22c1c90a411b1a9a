#![allow(clippy::unwrap_used)]
//! Signatures on a real RabbitMQ (a vhost per test): requests published straight to a
//! conductor's queues unsigned, signed with another key, or signed for another queue or
//! another body are dropped unrun, unanswered and counted, while a properly signed one
//! runs; forged replies and announcements do not answer a caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use ironic_model::{Error, Node, NodeUuid, Version};
use ironic_rpc::amqp::{
    ACCEPTED, BusSettings, CLUSTER_HEADER, Client, MEMBERSHIP, Server, SigningKey, SigningKeys,
    Target,
};
use ironic_rpc::calls::CreateNode;
use ironic_rpc::testing::TestBus;
use ironic_rpc::{Call, Context, Handlers, convert, dispatcher, pb};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use prost::Message;

struct Counting {
    runs: AtomicUsize,
}

impl Handlers for Counting {
    async fn create_node(&self, _: &Context, req: CreateNode) -> Result<Node, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(req.node)
    }
}

fn key(b: u8) -> SigningKeys {
    SigningKeys::new(SigningKey::new([b; 32]).unwrap())
}

fn settings(bus: &TestBus, signing: SigningKeys) -> BusSettings {
    BusSettings {
        url: bus.url.clone(),
        exchange: "ironic".into(),
        call_timeout: Duration::from_secs(10),
        prefetch: 8,
        accept_timeout: Duration::from_secs(5),
        tls_ca_pem: None,
        max_backoff: Duration::from_secs(1),
        connection_name: "signing-test".into(),
        cluster: "signed-cluster".into(),
        signing,
    }
}

/// The process's metrics (each test runs in a process of its own under nextest; the
/// counters only ever rise, so tests compare before and after).
fn metrics() -> &'static PrometheusHandle {
    static H: OnceLock<PrometheusHandle> = OnceLock::new();
    H.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

fn refused(side: &str, reason: &str) -> u64 {
    let text = metrics().render();
    text.lines()
        .filter(|l| l.starts_with("ironic_rpc_messages_refused_total{"))
        .filter(|l| l.contains(&format!("side=\"{side}\"")))
        .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn create_envelope() -> Vec<u8> {
    let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
    pb::Request {
        method: CreateNode::METHOD.into(),
        request_id: "req-signing".into(),
        body: pb::CreateNodeRequest {
            node: Some(convert::node_to_pb(&node)),
        }
        .encode_to_vec(),
        ..Default::default()
    }
    .encode_to_vec()
}

fn with_cluster(props: BasicProperties, cluster: &str) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert(
        CLUSTER_HEADER.into(),
        AMQPValue::LongString(cluster.to_string().into()),
    );
    props.with_headers(h)
}

async fn publish(ch: &Channel, exchange: &str, rk: &str, body: &[u8], props: BasicProperties) {
    ch.basic_publish(
        exchange.into(),
        rk.into(),
        BasicPublishOptions::default(),
        body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// Forgeries published straight to a conductor's queues are never run nor answered,
/// nor left to loop in the queue; they are counted by reason. A request signed with the
/// deployment's key, published the same way, runs, and what the conductor sends back
/// is signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_requests_are_dropped_unrun() {
    let bus = TestBus::new().unwrap();
    let (ours, theirs) = (key(1), key(2));
    let s = settings(&bus, ours.clone());
    let api = Arc::new(Counting {
        runs: AtomicUsize::new(0),
    });
    let server = Server::start(s.clone(), "c1".into(), 1, dispatcher(api.clone()));
    assert!(server.consuming(Duration::from_secs(10)).await);
    let (unsigned0, bad0) = (
        refused("server", "unsigned"),
        refused("server", "bad_signature"),
    );

    let ironic_rpc::testing::Party {
        conn,
        channel: ch,
        queue: replies,
        mut inbox,
    } = bus.party().await.unwrap();
    let own = s.host_queue("c1");
    let shared = s.shared_queue();
    let base = |corr: &str| {
        with_cluster(
            BasicProperties::default()
                .with_correlation_id(corr.into())
                .with_reply_to(replies.as_str().into())
                .with_type(CreateNode::METHOD.into()),
            &s.cluster,
        )
    };
    let body = create_envelope();
    // Unsigned, to the conductor's own queue and to the shared queue.
    publish(&ch, "ironic", &own, &body, base("unsigned-own")).await;
    publish(&ch, "ironic", &shared, &body, base("unsigned-shared")).await;
    // Signed with another deployment's key.
    let p = theirs.sign("ironic", &own, base("wrong-key"), &body);
    publish(&ch, "ironic", &own, &body, p).await;
    // Signed with the right key for another conductor's queue, sent to this one.
    let p = ours.sign("ironic", &s.host_queue("c2"), base("other-target"), &body);
    publish(&ch, "ironic", &own, &body, p).await;
    // Signed with the right key, then a body byte changed.
    let p = ours.sign("ironic", &own, base("tampered"), &body);
    let mut changed = body.clone();
    let last = changed.len() - 1;
    changed[last] ^= 1;
    publish(&ch, "ironic", &own, &changed, p).await;
    // Signed with the right key, but another reply queue named after signing.
    let p = ours.sign("ironic", &own, base("redirected"), &body);
    let p = p.with_reply_to("amq.gen-elsewhere".into());
    publish(&ch, "ironic", &own, &body, p).await;
    // Genuine.
    let p = ours.sign("ironic", &own, base("genuine"), &body);
    publish(&ch, "ironic", &own, &body, p).await;

    // The genuine one is taken (notice) and answered (reply), both signed.
    let mut got = Vec::new();
    let start = Instant::now();
    while got.iter().filter(|(c, _)| c == "genuine").count() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "answered: {got:?}"
        );
        let d = tokio::time::timeout(Duration::from_secs(10), inbox.next())
            .await
            .expect("a message")
            .unwrap()
            .unwrap();
        assert_eq!(
            ours.verify_delivery(&d),
            Ok(()),
            "what a conductor sends is signed"
        );
        let corr = d.properties.correlation_id().as_ref().unwrap().to_string();
        let kind = d.properties.kind().as_ref().map(|k| k.to_string());
        got.push((corr, kind.clone()));
        if kind.as_deref() != Some(ACCEPTED) {
            let reply = pb::Reply::decode(&d.data[..]).unwrap();
            assert!(
                matches!(reply.result, Some(pb::reply::Result::Ok(_))),
                "{reply:?}"
            );
        }
    }
    // Every forgery was taken and refused: two unsigned, four wrongly signed.
    until("the forgeries counted", Duration::from_secs(10), || {
        refused("server", "unsigned") == unsigned0 + 2
            && refused("server", "bad_signature") == bad0 + 4
    })
    .await;
    // Nothing else arrives, nothing runs twice, nothing loops back into the queues.
    tokio::time::sleep(Duration::from_millis(700)).await;
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(100), inbox.next()).await
    {
        let corr = d
            .properties
            .correlation_id()
            .as_ref()
            .map(|c| c.to_string());
        got.push((corr.unwrap_or_default(), None));
    }
    assert!(
        got.iter().all(|(c, _)| c == "genuine"),
        "only the genuine call was answered or announced: {got:?}"
    );
    assert_eq!(
        api.runs.load(Ordering::SeqCst),
        1,
        "only the genuine call ran"
    );
    assert_eq!(
        refused("server", "unsigned"),
        unsigned0 + 2,
        "not redelivered"
    );
    assert_eq!(
        refused("server", "bad_signature"),
        bad0 + 4,
        "not redelivered"
    );
    let q = ch
        .queue_declare(
            shared.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 0, "the shared queue holds no forgery");

    let _ = conn.close(200, "done".into()).await;
    assert!(server.shutdown_within(Duration::from_secs(10)).await);
}

/// A caller takes only replies and announcements signed with its deployment's key: a
/// forged reply (unsigned, or signed with another key) that arrives first does not
/// answer its call, and a forged announcement does not make it re-read the conductors.
/// The request the caller sends is itself signed for the queue it went to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replies_and_announcements_are_ignored() {
    let bus = TestBus::new().unwrap();
    let (ours, theirs) = (key(1), key(2));
    let s = settings(&bus, ours.clone());
    let client = Client::start(s.clone());
    assert!(client.connected(Duration::from_secs(10)).await);
    let (unsigned0, bad0) = (
        refused("client", "unsigned"),
        refused("client", "bad_signature"),
    );

    // A stand-in conductor "fake" on a connection of the test's own, that answers with
    // two forged replies before the genuine one.
    let ironic_rpc::testing::Party {
        conn, channel: ch, ..
    } = bus.party().await.unwrap();
    let queue = s.host_queue("fake");
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        queue.as_str().into(),
        "ironic".into(),
        queue.as_str().into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut requests = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let (ch2, ours2, theirs2, cluster) =
        (ch.clone(), ours.clone(), theirs.clone(), s.cluster.clone());
    let fake = tokio::spawn(async move {
        let d = requests.next().await.unwrap().unwrap();
        let request_ok = ours2.verify_delivery(&d);
        d.ack(BasicAckOptions::default()).await.unwrap();
        let reply_to = d.properties.reply_to().as_ref().unwrap().to_string();
        let corr = d.properties.correlation_id().clone().unwrap();
        let reply = |b: &[u8]| {
            pb::Reply {
                result: Some(pb::reply::Result::Ok(b.to_vec())),
            }
            .encode_to_vec()
        };
        let props = with_cluster(
            BasicProperties::default().with_correlation_id(corr),
            &cluster,
        );
        let forged = reply(b"forged");
        publish(&ch2, "", &reply_to, &forged, props.clone()).await;
        let p = theirs2.sign("", &reply_to, props.clone(), &forged);
        publish(&ch2, "", &reply_to, &forged, p).await;
        let genuine = reply(b"genuine");
        let p = ours2.sign("", &reply_to, props, &genuine);
        publish(&ch2, "", &reply_to, &genuine, p).await;
        request_ok
    });
    let got = client
        .call(
            &Target::Host("fake".into()),
            "ping",
            &Context::default(),
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        got, b"genuine",
        "the forged replies that came first were ignored"
    );
    assert_eq!(fake.await.unwrap(), Ok(()), "the request was signed");
    until("the forged replies counted", Duration::from_secs(5), || {
        refused("client", "unsigned") == unsigned0 + 1
            && refused("client", "bad_signature") == bad0 + 1
    })
    .await;

    // Announcements: a forged one does not count, the genuine one behind it does.
    let mut changes = client.membership();
    let before = *changes.borrow_and_update();
    let announce = with_cluster(
        BasicProperties::default().with_type(MEMBERSHIP.into()),
        &s.cluster,
    );
    let key = s.membership_key();
    publish(&ch, "ironic", &key, &[], announce.clone()).await;
    let p = theirs.sign("ironic", &key, announce.clone(), &[]);
    publish(&ch, "ironic", &key, &[], p).await;
    let p = ours.sign("ironic", &key, announce, &[]);
    publish(&ch, "ironic", &key, &[], p).await;
    tokio::time::timeout(Duration::from_secs(5), changes.changed())
        .await
        .unwrap()
        .unwrap();
    // The forgeries went first (one channel delivers in order): once they are counted,
    // whatever they would have changed has changed.
    until(
        "the forged announcements counted",
        Duration::from_secs(10),
        || {
            refused("client", "unsigned") >= unsigned0 + 2
                && refused("client", "bad_signature") >= bad0 + 2
        },
    )
    .await;
    assert_eq!(
        *changes.borrow(),
        before + 1,
        "only the genuine announcement counted"
    );
    assert_eq!(refused("client", "unsigned"), unsigned0 + 2);
    assert_eq!(refused("client", "bad_signature"), bad0 + 2);

    let _ = conn.close(200, "done".into()).await;
    client.shutdown().await;
}
