#![allow(clippy::unwrap_used)]
//! The conductor as a service (all-in-one): its graceful stop waits for the in-process
//! calls still running.

use std::time::Duration;

use ironic_conductor::service::Service;
use ironic_db::testing::TestDb;
use ironic_model::node::{NodeDefaults, from_create_body};
use ironic_model::{Context, NodeRef, Version};
use ironic_rpc::calls::{CreateNode, SetMaintenance};
use serde_json::json;

/// A call waiting for a node lock another host holds is in flight when the stop
/// begins: the stop waits for it, and it completes once the lock is free.
#[tokio::test]
async fn a_graceful_stop_waits_for_an_in_process_call() {
    let t = TestDb::sqlite().await.unwrap();
    let mut cfg = ironic_config::Config::default();
    cfg.default.host = "c1".into();
    cfg.default.enabled_hardware_types = vec!["fake-hardware".into()];
    cfg.conductor.node_locked_retry_attempts = 500;
    cfg.conductor.node_locked_retry_interval_ms = 20;
    cfg.conductor.graceful_shutdown_timeout = 30;
    let mut svc = Service::start(&cfg, t.db.clone(), None).await.unwrap();
    let conductors = svc.in_process();
    let body = json!({"driver": "fake-hardware", "name": "n1"});
    let node = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
    let node = conductors
        .call(&Context::default(), CreateNode { node })
        .await
        .unwrap();

    t.db.node_reserve(node.id, "other-host").await.unwrap();
    let call = tokio::spawn({
        let c = conductors.clone();
        let node = NodeRef::from(&node);
        async move {
            let req = SetMaintenance {
                node,
                on: true,
                reason: Some("fan".into()),
            };
            c.call(&Context::default(), req).await
        }
    });
    while conductors.in_flight() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stop = tokio::spawn(svc.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stop.is_finished(), "the stop did not wait for the call");
    assert!(!call.is_finished());

    t.db.node_release(node.id, "other-host").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), stop)
        .await
        .unwrap()
        .unwrap();
    let done = call.await.unwrap().unwrap();
    assert!(done.maintenance);
    assert_eq!(conductors.in_flight(), 0);
    t.cleanup().await;
}
