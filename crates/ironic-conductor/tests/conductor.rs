#![allow(clippy::unwrap_used)]
//! The conductor's own checks, called directly (as an RPC server would), on both
//! backends.

use std::time::Duration;

use ironic_conductor::{Conductor, ConductorSettings};
use ironic_db::testing::TestDb;
use ironic_db::topology::Topology;
use ironic_model::node::{NodeDefaults, from_create_body};
use ironic_model::patch::parse;
use ironic_model::{Error, Version};
use ironic_rpc::calls::{CreateNode, UpdateNode};
use ironic_rpc::{Context, Handlers, NodeRef};
use serde_json::json;

fn settings() -> ConductorSettings {
    ConductorSettings {
        host: "c1".into(),
        conductor_group: String::new(),
        allow_deleting_available_nodes: true,
        automated_clean: true,
        lock_attempts: 2,
        lock_retry_interval: Duration::from_millis(20),
        heartbeat_interval: Duration::from_secs(10),
        liveness: ironic_db::Liveness::new(10, 60),
        check_allocations_interval: Duration::ZERO,
        allocation_delay: Duration::ZERO,
        oneview_check_interval: Duration::ZERO,
        node_history: true,
        node_history_max_entries: 300,
        node_history_cleanup_interval: Duration::ZERO,
        node_history_cleanup_batch_count: 1000,
        node_history_minimum_days: 0,
        inspector_add_ports: "pxe".into(),
        inspect_wait_timeout: Duration::from_secs(1800),
        max_conductor_wait_step_seconds: 30,
        deploy_callback_timeout: Duration::from_secs(1800),
        clean_callback_timeout: Duration::from_secs(1800),
        service_callback_timeout: Duration::from_secs(1800),
        check_provision_state_interval: Duration::ZERO,
        sync_power_state_interval: Duration::ZERO,
        sync_power_state_workers: 8,
        force_power_state_during_sync: true,
        power_state_sync_max_retries: 3,
        built_in_rules: None,
        mask_secrets: "always".into(),
        deploy: Default::default(),
        agent: Default::default(),
        pxe: Default::default(),
        boot: Default::default(),
        local_files: Default::default(),
    }
}

async fn checks(t: &TestDb) {
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let c = Conductor::new(t.db.clone(), drivers, settings());
    c.start().await.unwrap();
    let ctx = Context::default();
    let body = json!({"driver": "fake-hardware", "name": "n"});
    let node = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
    let node = c.create_node(&ctx, CreateNode { node }).await.unwrap();
    assert_eq!(
        node.interfaces.get("network"),
        Some("noop"),
        "defaults filled in"
    );

    // A group no conductor serves is refused under the lock, even if the API let it by.
    let req = |patch: serde_json::Value| UpdateNode {
        node: NodeRef::from(&node),
        ident: "n".into(),
        patch: parse(&patch).unwrap(),
        version: Version::MAX,
        reset_interfaces: None,
    };
    let err = c
        .update_node(
            &ctx,
            req(json!([{"op": "add", "path": "/conductor_group", "value": "g2"}])),
        )
        .await;
    assert_eq!(
        err.unwrap_err(),
        Error::no_valid_host("fake-hardware", "g2")
    );
    let ok = c
        .update_node(
            &ctx,
            req(json!([{"op": "add", "path": "/extra/a", "value": 1}])),
        )
        .await
        .unwrap();
    assert_eq!(ok.reservation, None);

    // A reference whose id and uuid disagree touches nothing.
    let forged = UpdateNode {
        node: NodeRef {
            uuid: ironic_model::NodeUuid::parse("9f1f5f4e-0000-4000-8000-000000000000").unwrap(),
            ..NodeRef::from(&node)
        },
        ..req(json!([{"op": "add", "path": "/extra/forged", "value": 1}]))
    };
    assert!(matches!(
        c.update_node(&ctx, forged).await,
        Err(Error::NotFound(_))
    ));
    let now = t.db.node_by_id(node.id).await.unwrap().unwrap();
    assert_eq!(now.extra.get("forged"), None);
    assert_eq!(now.reservation, None);

    // A lock held elsewhere: bounded retries, then 409 naming the holder; nothing changes.
    t.db.node_reserve(node.id, "other-host").await.unwrap();
    let err = c
        .update_node(
            &ctx,
            req(json!([{"op": "add", "path": "/extra/b", "value": 2}])),
        )
        .await;
    assert_eq!(
        err.unwrap_err(),
        Error::node_locked(node.uuid.as_str(), "other-host")
    );
    t.db.node_release(node.id, "other-host").await.unwrap();
    let now = t.db.node_by_id(node.id).await.unwrap().unwrap();
    assert_eq!(now.extra.get("b"), None);
    assert_eq!(now.reservation, None);

    // A crash leaves our lock behind; the next start releases it.
    t.db.node_reserve(node.id, "c1").await.unwrap();
    c.start().await.unwrap();
    assert_eq!(
        t.db.node_by_id(node.id).await.unwrap().unwrap().reservation,
        None
    );

    // Orphan locks: a dead conductor's lock on a node we own is released; the locks of
    // a live conductor, of one that is stopping (offline, still heartbeating) and of a
    // host we know nothing about stay.
    let mut nodes = Vec::new();
    for name in ["o1", "o2", "o3", "o4"] {
        let body = json!({"driver": "fake-hardware", "name": name});
        let n = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
        nodes.push(c.create_node(&ctx, CreateNode { node: n }).await.unwrap());
    }
    t.db.conductor_register("ghost", "", &["fake-hardware".into()])
        .await
        .unwrap();
    t.db.conductor_unregister("ghost").await.unwrap();
    t.db.conductor_touch("ghost", chrono::Utc::now() - chrono::Duration::seconds(120))
        .await
        .unwrap();
    t.db.conductor_register("busy", "", &[]).await.unwrap();
    t.db.conductor_register("leaving", "", &["fake-hardware".into()])
        .await
        .unwrap();
    t.db.conductor_unregister("leaving").await.unwrap();
    t.db.node_reserve(nodes[3].id, "leaving").await.unwrap();
    t.db.node_reserve(nodes[0].id, "ghost").await.unwrap();
    t.db.node_reserve(nodes[1].id, "busy").await.unwrap();
    t.db.node_reserve(nodes[2].id, "stranger").await.unwrap();
    let topology = Topology::new(t.db.clone(), ironic_db::Liveness::new(10, 60), 5);
    topology.refresh().await;
    assert_eq!(c.release_orphan_locks(&topology).await.unwrap(), 1);
    let holder = |i: usize| {
        let db = t.db.clone();
        let id = nodes[i].id;
        async move { db.node_by_id(id).await.unwrap().unwrap().reservation }
    };
    assert_eq!(holder(0).await, None);
    assert_eq!(holder(1).await.as_deref(), Some("busy"));
    assert_eq!(holder(2).await.as_deref(), Some("stranger"));
    assert_eq!(holder(3).await.as_deref(), Some("leaving"));

    // Each lock has one releaser: with a live peer on the ring, a dead conductor's locks
    // on the peer's nodes are the peer's to release, not ours.
    t.db.conductor_register("peer", "", &["fake-hardware".into()])
        .await
        .unwrap();
    let mut held = Vec::new();
    for i in 0..8 {
        let body = json!({"driver": "fake-hardware", "uuid": format!("{i}0000000-0000-4000-8000-000000000000")});
        let n = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
        let n = c.create_node(&ctx, CreateNode { node: n }).await.unwrap();
        t.db.node_reserve(n.id, "ghost").await.unwrap();
        held.push(n);
    }
    topology.refresh().await;
    let snap = topology.snapshot();
    let (mine, theirs): (Vec<_>, Vec<_>) = held
        .iter()
        .partition(|n| snap.owner("", "fake-hardware", n.uuid.as_str()) == Some("c1"));
    assert!(
        !mine.is_empty() && !theirs.is_empty(),
        "both conductors own some"
    );
    // A dead conductor that heartbeats again between our look and our release keeps
    // its locks.
    t.db.conductor_touch("ghost", chrono::Utc::now() - chrono::Duration::seconds(90))
        .await
        .unwrap();
    assert_eq!(c.release_orphan_locks(&topology).await.unwrap(), 0);
    topology.refresh().await;
    assert_eq!(c.release_orphan_locks(&topology).await.unwrap(), mine.len());
    for n in &mine {
        assert_eq!(
            t.db.node_by_id(n.id).await.unwrap().unwrap().reservation,
            None
        );
    }
    for n in &theirs {
        assert_eq!(
            t.db.node_by_id(n.id)
                .await
                .unwrap()
                .unwrap()
                .reservation
                .as_deref(),
            Some("ghost")
        );
    }
}

/// A crash in a transient state: once the dead holder's lock is released, the node's
/// owner fails the state with a message; nothing stays transient.
async fn stuck_states(t: &TestDb) {
    use ironic_model::states::ProvisionState as P;
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let c = Conductor::new(t.db.clone(), drivers, settings());
    c.start().await.unwrap();
    let ctx = Context::default();
    t.db.conductor_register("ghost", "", &["fake-hardware".into()])
        .await
        .unwrap();
    t.db.conductor_touch("ghost", chrono::Utc::now() - chrono::Duration::seconds(120))
        .await
        .unwrap();
    let cases = [
        (P::Deploying, Some(P::Active), P::DeployFailed),
        (P::Verifying, Some(P::Manageable), P::Enroll),
        (P::Deleting, Some(P::Available), P::Error),
        (P::Cleaning, Some(P::Available), P::CleanFailed),
    ];
    let mut ids = Vec::new();
    for (i, (state, target, _)) in cases.iter().enumerate() {
        let body = json!({"driver": "fake-hardware", "name": format!("s{i}")});
        let n = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
        let mut n = c.create_node(&ctx, CreateNode { node: n }).await.unwrap();
        // The ghost was working on it when it died.
        let mut locked = t.db.node_reserve(n.id, "ghost").await.unwrap();
        locked.provision_state = *state;
        locked.target_provision_state = *target;
        n = t.db.node_save(&locked, "ghost").await.unwrap();
        ids.push(n.id);
    }
    let topology = Topology::new(t.db.clone(), ironic_db::Liveness::new(10, 60), 5);
    topology.refresh().await;
    // Locked by the dead conductor: nothing happens before its lock is released.
    assert_eq!(c.fail_orphaned_work(&topology).await.unwrap(), 0);
    assert_eq!(
        c.release_orphan_locks(&topology).await.unwrap(),
        cases.len()
    );
    assert_eq!(c.fail_orphaned_work(&topology).await.unwrap(), cases.len());
    for (id, (before, _, after)) in ids.iter().zip(cases) {
        let n = t.db.node_by_id(*id).await.unwrap().unwrap();
        assert_eq!(n.provision_state, after, "{before}");
        assert_eq!(n.reservation, None);
        let err = n.last_error.unwrap_or_default();
        assert!(
            err.contains(&format!("The {before} state can't be resumed")),
            "{before}: {err}"
        );
    }
    assert_eq!(
        c.fail_orphaned_work(&topology).await.unwrap(),
        0,
        "done once"
    );
}

/// The check of the waiting nodes (`check_waits`): a wait for an event that saw none
/// within its flow's callback timeout fails (with maintenance where a step was
/// running: cleaning, servicing); a recent one is left alone; a timed wait whose time
/// is past (its process is gone) is continued here to the end of its steps; one whose
/// time is to come is left to its timer.
async fn step_waits(t: &TestDb) {
    use ironic_model::states::ProvisionState as P;
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let c = Conductor::new(t.db.clone(), drivers, settings());
    c.start().await.unwrap();
    let ctx = Context::default();
    let topology = Topology::new(t.db.clone(), ironic_db::Liveness::new(10, 60), 5);
    let now = chrono::Utc::now();
    let ms = |d: chrono::Duration| (now + d).timestamp_millis();
    let step = |name: &str| json!({"step": name, "interface": "deploy", "args": {"seconds": 1}, "priority": 0, "abortable": true});
    // (state, target, waited since, resume at, where it ends, the error it starts with)
    let cases = [
        (
            P::CleanWait,
            P::Manageable,
            chrono::Duration::hours(-1),
            None,
            P::CleanFailed,
            Some("Timeout reached while cleaning the node."),
        ),
        (
            P::DeployWait,
            P::Active,
            chrono::Duration::hours(-1),
            None,
            P::DeployFailed,
            Some("Timeout reached while waiting for callback for node"),
        ),
        (
            P::ServiceWait,
            P::Active,
            chrono::Duration::hours(-1),
            None,
            P::ServiceFailed,
            Some("Timeout reached while servicing the node."),
        ),
        (
            P::CleanWait,
            P::Manageable,
            chrono::Duration::minutes(-1),
            None,
            P::CleanWait,
            None,
        ),
        (
            P::CleanWait,
            P::Manageable,
            chrono::Duration::minutes(-1),
            Some(ms(chrono::Duration::seconds(-30))),
            P::Manageable,
            None,
        ),
        (
            P::ServiceWait,
            P::Active,
            chrono::Duration::minutes(-1),
            Some(ms(chrono::Duration::seconds(-30))),
            P::Active,
            None,
        ),
        (
            P::DeployWait,
            P::Active,
            chrono::Duration::hours(-1),
            Some(ms(chrono::Duration::minutes(10))),
            P::DeployWait,
            None,
        ),
    ];
    let mut ids = Vec::new();
    for (i, (state, target, since, resume_at, ..)) in cases.iter().enumerate() {
        let flow = match state {
            P::CleanWait => "clean",
            P::DeployWait => "deploy",
            _ => "service",
        };
        let body = json!({"driver": "fake-hardware", "name": format!("wait{i}")});
        let n = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
        let n = c.create_node(&ctx, CreateNode { node: n }).await.unwrap();
        let mut locked = t.db.node_reserve(n.id, "c1").await.unwrap();
        locked.provision_state = *state;
        locked.target_provision_state = Some(*target);
        locked.provision_updated_at = Some(now + *since);
        let waiting = step("sleep");
        match flow {
            "clean" => locked.clean_step = waiting.as_object().cloned().unwrap(),
            "deploy" => locked.deploy_step = waiting.as_object().cloned().unwrap(),
            _ => locked.service_step = waiting.as_object().cloned().unwrap(),
        }
        let dii = &mut locked.driver_internal_info;
        dii.insert(format!("{flow}_steps"), json!([waiting, step("sleep")]));
        dii.insert(format!("{flow}_step_index"), json!(0));
        dii.insert(format!("{flow}_step_runner"), json!("gone/boot/token"));
        if let Some(at) = resume_at {
            dii.insert(format!("{flow}_step_resume_at"), json!(at));
        }
        locked.reservation = None;
        t.db.node_save(&locked, "c1").await.unwrap();
        ids.push(n.id);
    }
    topology.refresh().await;
    let done = c.check_waits(&topology).await.unwrap();
    assert_eq!((done.timed_out, done.resumed), (3, 2));
    for (id, (before, _, _, _, after, error)) in ids.iter().zip(cases) {
        // A continued wait runs its next step (a wait of 1 s) and ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let n = loop {
            let n = t.db.node_by_id(*id).await.unwrap().unwrap();
            if n.provision_state == after || std::time::Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(n.provision_state, after, "{before}: {:?}", n.last_error);
        assert_eq!(n.reservation, None, "{before}");
        match error {
            Some(e) => {
                let got = n.last_error.clone().unwrap_or_default();
                assert!(got.starts_with(e), "{before}: {got}");
                assert_eq!(
                    n.maintenance,
                    before != P::DeployWait,
                    "{before}: a step was running"
                );
                assert!(!n.driver_internal_info.contains_key("clean_step_runner"));
            }
            None => assert_eq!(n.last_error, None, "{before}"),
        }
    }
    assert_eq!(
        c.check_waits(&topology).await.unwrap(),
        Default::default(),
        "done once"
    );
    assert!(c.work().shutdown(Duration::from_secs(30)).await);
}

/// The conductor serves every call of the contract: none answers the contract's
/// default "not implemented" (an empty body is a malformed request, or a valid one
/// naming nothing, whatever the handler makes of it).
#[tokio::test]
async fn serves_every_call_of_the_contract() {
    let t = TestDb::sqlite().await.unwrap();
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let c = Conductor::new(t.db.clone(), drivers, settings());
    c.start().await.unwrap();
    let d = ironic_rpc::dispatcher(c.clone());
    for m in ironic_rpc::calls::METHODS {
        let r = d.wire(&Context::default(), m, &[]).await;
        if let Some(ironic_rpc::pb::reply::Result::Error(e)) = r.result {
            assert!(!e.message.contains("not implemented"), "{m}: {}", e.message);
        }
    }
    assert!(c.work().shutdown(Duration::from_secs(30)).await);
    t.cleanup().await;
}

/// A call repeated because the conductor of its first attempt died (`attempt` > 0)
/// answers with what the first attempt did; the same call as a first attempt gets the
/// plain error.
async fn repeats(t: &TestDb) {
    use ironic_rpc::calls::{DestroyNode, RemoveNodeTraits};
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let c = Conductor::new(t.db.clone(), drivers, settings());
    c.start().await.unwrap();
    let first = Context::default();
    let repeat = Context {
        request_id: "req-repeat".into(),
        attempt: 1,
    };
    let body = json!({"driver": "fake-hardware", "name": "rep"});
    let node = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
    let created = c
        .create_node(&first, CreateNode { node: node.clone() })
        .await
        .unwrap();
    // The same node again: a conflict as a first attempt, the stored node as a repeat.
    let again = c
        .create_node(&first, CreateNode { node: node.clone() })
        .await;
    assert!(matches!(again, Err(Error::Conflict(_))), "{again:?}");
    let again = c
        .create_node(&repeat, CreateNode { node: node.clone() })
        .await
        .unwrap();
    assert_eq!(again.uuid, created.uuid);
    // Another node under that uuid is still a conflict, even as a repeat.
    let mut other = node.clone();
    other.name = Some("someone-else".into());
    let r = c.create_node(&repeat, CreateNode { node: other }).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");

    let nref = NodeRef::from(&created);
    let gone = || RemoveNodeTraits {
        node: nref.clone(),
        one: Some("CUSTOM_NEVER".into()),
    };
    assert!(matches!(
        c.remove_node_traits(&first, gone()).await,
        Err(Error::NotFound(_))
    ));
    c.remove_node_traits(&repeat, gone()).await.unwrap();

    // Node writes carry the request id: a repeat whose first attempt was applied does
    // not apply it twice (here: an append to a list).
    let call = Context {
        request_id: "req-append".into(),
        attempt: 0,
    };
    let append = || UpdateNode {
        node: nref.clone(),
        ident: "rep".into(),
        patch: parse(&json!([{"op": "add", "path": "/extra/l", "value": []}])).unwrap(),
        version: Version::MAX,
        reset_interfaces: None,
    };
    c.update_node(&call, append()).await.unwrap();
    let push = || UpdateNode {
        patch: parse(&json!([{"op": "add", "path": "/extra/l/-", "value": 1}])).unwrap(),
        ..append()
    };
    let call = Context {
        request_id: "req-push".into(),
        attempt: 0,
    };
    let once = c.update_node(&call, push()).await.unwrap();
    assert_eq!(once.extra["l"], json!([1]));
    let again = Context { attempt: 1, ..call };
    let n = c.update_node(&again, push()).await.unwrap();
    assert_eq!(n.extra["l"], json!([1]), "the repeat did not append again");
    let other = Context {
        request_id: "req-push-2".into(),
        attempt: 0,
    };
    let n = c.update_node(&other, push()).await.unwrap();
    assert_eq!(n.extra["l"], json!([1, 1]), "another call appends");
    // A provisioning verb: the repeat of an applied `manage` is accepted, not refused
    // as a move from `manageable`.
    let manage = |ctx: Context| {
        let c = &c;
        let nref = nref.clone();
        async move {
            c.do_provisioning_action(
                &ctx,
                ironic_rpc::calls::DoProvisioningAction {
                    node: nref,
                    action: "manage".into(),
                },
            )
            .await
        }
    };
    let verb = Context {
        request_id: "req-manage".into(),
        attempt: 0,
    };
    manage(verb.clone()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while t
        .db
        .node_by_uuid(nref.uuid.as_str())
        .await
        .unwrap()
        .unwrap()
        .provision_state
        != ironic_model::states::ProvisionState::Manageable
    {
        assert!(std::time::Instant::now() < deadline, "manageable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    manage(Context { attempt: 1, ..verb }).await.unwrap();
    let refused = manage(Context {
        request_id: "req-manage-2".into(),
        attempt: 0,
    })
    .await;
    assert!(refused.is_err(), "{refused:?}");

    let destroy = || DestroyNode { node: nref.clone() };
    c.destroy_node(&first, destroy()).await.unwrap();
    assert!(matches!(
        c.destroy_node(&first, destroy()).await,
        Err(Error::NotFound(_))
    ));
    c.destroy_node(&repeat, destroy()).await.unwrap();
}

/// A power-sync round reads the table page by page (1,000 nodes a page, a pause between
/// pages): with 2,100 nodes every page is reached, the nodes to skip are skipped on
/// every page, and the whole rows are read (a BMC read made to fail through
/// `driver_info` on the last page fails).
async fn power_sync_reads_every_page(t: &TestDb) {
    use ironic_model::states::ProvisionState as P;
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    let mut s = settings();
    s.sync_power_state_interval = Duration::from_millis(400);
    let c = Conductor::new(t.db.clone(), drivers, s);
    c.start().await.unwrap();
    let total = 2100;
    let mut ids = Vec::with_capacity(total);
    for i in 0..total {
        let mut body = json!({"driver": "fake-hardware", "name": format!("n{i}")});
        if i == total - 1 {
            body["driver_info"] = json!({"fake_fail": ["power.get_power_state"]});
        }
        let mut n = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
        n.provision_state = P::Manageable;
        n.power_state = Some("power off".into());
        // Skipped: one in maintenance (page 1), one in `deploy wait` (page 2), one with a
        // power change in progress (page 3).
        match i {
            10 => n.maintenance = true,
            1500 => n.provision_state = P::DeployWait,
            2050 => n.target_power_state = Some("power on".into()),
            _ => {}
        }
        ids.push(t.db.node_create(&n).await.unwrap().id);
    }
    // And one locked by someone else, on page 2.
    t.db.node_reserve(ids[1200], "other").await.unwrap();
    let topology = Topology::new(t.db.clone(), ironic_db::Liveness::new(10, 60), 5);
    topology.refresh().await;
    let round = c.power_sync_round(&topology).await.unwrap();
    assert_eq!(round.checked, total - 4, "{round:?}");
    assert_eq!(round.failed, 1, "{round:?}");
    assert_eq!(round.updated + round.forced + round.to_maintenance, 0);
}

/// A ramdisk's lookup of a node another operation holds fails at once with the lock's
/// 409 (upstream's: lookups must not stack up in the conductor waiting for a lock), and
/// hands out no token; once the lock is free, the lookup gets one.
async fn lookup_of_a_locked_node_fails_at_once(t: &TestDb) {
    use ironic_model::agent;
    use ironic_rpc::calls::GetNodeWithToken;
    let drivers = ironic_drivers::Registry::new(&["fake-hardware".into()]).unwrap();
    // A patient lock would wait 100 × 50 ms = 5 s before giving up.
    let mut s = settings();
    s.lock_attempts = 100;
    s.lock_retry_interval = Duration::from_millis(50);
    let c = Conductor::new(t.db.clone(), drivers, s);
    c.start().await.unwrap();
    let ctx = Context::default();
    let body = json!({"driver": "fake-hardware", "name": "lk"});
    let node = from_create_body(&body, Version::MAX, &NodeDefaults::default()).unwrap();
    let node = c.create_node(&ctx, CreateNode { node }).await.unwrap();
    let lookup = || GetNodeWithToken {
        node: NodeRef::from(&node),
    };

    t.db.node_reserve(node.id, "other-host").await.unwrap();
    let started = std::time::Instant::now();
    let r = c.get_node_with_token(&ctx, lookup()).await;
    let took = started.elapsed();
    assert_eq!(
        r.unwrap_err(),
        Error::node_locked(node.uuid.as_str(), "other-host")
    );
    assert!(took < Duration::from_secs(2), "no retries: {took:?}");
    let now = t.db.node_by_id(node.id).await.unwrap().unwrap();
    assert!(!now.driver_internal_info.contains_key(agent::TOKEN));
    assert_eq!(now.reservation.as_deref(), Some("other-host"));

    t.db.node_release(node.id, "other-host").await.unwrap();
    let got = c.get_node_with_token(&ctx, lookup()).await.unwrap();
    let token = got.driver_internal_info[agent::TOKEN].as_str().unwrap();
    assert_ne!(token, ironic_model::secrets::MASK);
    let now = t.db.node_by_id(node.id).await.unwrap().unwrap();
    assert_eq!(now.driver_internal_info[agent::TOKEN], json!(token));
    assert_eq!(now.reservation, None);
}

// Each scenario on both backends: `sqlite::<name>` and `postgres::<name>`.

ironic_db::on_both_backends!(
    checks,
    stuck_states,
    step_waits,
    repeats,
    power_sync_reads_every_page,
    lookup_of_a_locked_node_fails_at_once
);
