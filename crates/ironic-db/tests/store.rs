#![allow(clippy::unwrap_used)]
//! The node store's behaviour, run against SQLite and PostgreSQL alike.

use ironic_db::{Db, NodeFilter, NodeListQuery};
use ironic_model::node::{NodeDefaults, from_create_body};
use ironic_model::states::ProvisionState;
use ironic_model::{ConductorId, NodeId};
use ironic_model::{Error, Node, Version};
use serde_json::json;

ironic_db::on_both_backends!(
    create_and_read_back,
    unique_uuid_and_name,
    list_filters,
    keyset_pagination_walks_every_node_once,
    locks_are_exclusive,
    save_needs_the_lock,
    destroy_removes_node_and_traits,
    traits_add_replace_remove,
    conductors_register_and_heartbeat,
    allocation_take_over_has_one_winner,
    allocation_never_picks_a_retired_node,
    history_is_kept_in_order_and_pruned,
    bios_settings_follow_the_hardware,
    long_free_text_is_stored_and_sorted,
    allocation_claim_outcomes,
    concurrent_claims_take_distinct_nodes,
    claim_never_writes_a_locked_node,
    allocation_deletion_writes_only_a_held_node,
    deletion_racing_a_claim_leaves_no_half,
    unlocked_deletion_racing_a_holder,
    backfill_and_failure_need_the_allocation,
    allocation_meta_update_keeps_the_process_writes,
    nodes_by_ids_reads_whole_rows,
    node_states_page_by_id,
    description_search_follows_every_write,
    last_error_is_stored_masked_and_bounded,
    catalogues_page_by_key_then_id,
);

const HOST: &str = "test-host";

fn new_node(body: serde_json::Value) -> Node {
    from_create_body(&body, Version::MAX, &NodeDefaults::default()).expect("valid body")
}

async fn create(db: &Db, body: serde_json::Value) -> Node {
    db.node_create(&new_node(body)).await.expect("create")
}

/// Adds traits to a node under its lock (taken and given back here).
async fn add_traits(db: &Db, id: NodeId, traits: &[&str]) {
    let traits: Vec<String> = traits.iter().map(|t| t.to_string()).collect();
    db.node_reserve(id, HOST).await.unwrap();
    db.node_add_traits(id, &traits, false, 50, HOST)
        .await
        .unwrap();
    db.node_release(id, HOST).await.unwrap();
}

async fn create_and_read_back(db: &Db) {
    let mut n = new_node(
        json!({"driver": "fake-hardware", "name": "n1", "extra": {"a": [1, {"b": null}]},
               "properties": {"cpus": 8}, "resource_class": "rc", "owner": "p1"}),
    );
    // The fields of microversions above 1.62 are stored too.
    n.network_data
        .insert("links".into(), json!([{"id": "l0", "type": "phy"}]));
    n.boot_mode = Some("uefi".into());
    n.secure_boot = Some(true);
    n.shard = Some("s1".into());
    n.parent_node = ironic_model::NodeUuid::parse("5f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a");
    n.service_step.insert("step".into(), json!("x"));
    n.disable_power_off = true;
    n.instance_name = Some("vm-1".into());
    n.health = Some("OK".into());
    let n = db.node_create(&n).await.expect("create");
    assert!(n.id.0 > 0);
    let by_uuid = db
        .node_by_uuid(n.uuid.as_str())
        .await
        .unwrap()
        .expect("found by uuid");
    assert_eq!(by_uuid, n, "what we read back equals what we wrote");
    let by_name = db.node_by_name("n1").await.unwrap().expect("found by name");
    assert_eq!(by_name.uuid, n.uuid);
    assert_eq!(db.node_by_name("nope").await.unwrap(), None);
    assert_eq!(
        db.node_by_id(n.id).await.unwrap().map(|n| n.uuid),
        Some(n.uuid.clone())
    );
}

async fn unique_uuid_and_name(db: &Db) {
    let n = create(db, json!({"driver": "fake-hardware", "name": "dup"})).await;
    let err = db
        .node_create(&new_node(json!({"driver": "fake-hardware", "name": "dup"})))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Conflict("A node with name dup already exists.".into())
    );
    let err = db
        .node_create(&new_node(
            json!({"driver": "fake-hardware", "uuid": n.uuid.as_str()}),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Conflict(format!("A node with UUID {} already exists.", n.uuid))
    );
    // Several nodes without a name are fine.
    create(db, json!({"driver": "fake-hardware"})).await;
    create(db, json!({"driver": "fake-hardware"})).await;
}

async fn list_filters(db: &Db) {
    create(
        db,
        json!({"driver": "fake-hardware", "name": "a", "resource_class": "x", "owner": "o1"}),
    )
    .await;
    create(
        db,
        json!({"driver": "fake-hardware", "name": "b", "resource_class": "y", "maintenance": true}),
    )
    .await;
    let mut c = new_node(
        json!({"driver": "other", "name": "c", "resource_class": "x",
                                "description": "Rack 7 GPU box"}),
    );
    c.lessee = Some("o1".into());
    db.node_create(&c).await.unwrap();
    let names = |nodes: Vec<Node>| {
        nodes
            .into_iter()
            .map(|n| n.name.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let q = |f: NodeFilter| NodeListQuery {
        filter: f,
        ..NodeListQuery::default()
    };
    let run = |f| async { names(db.node_list(&q(f)).await.unwrap()) };
    assert_eq!(
        run(NodeFilter {
            resource_class: Some("x".into()),
            ..Default::default()
        })
        .await,
        ["a", "c"]
    );
    assert_eq!(
        run(NodeFilter {
            driver: Some("other".into()),
            ..Default::default()
        })
        .await,
        ["c"]
    );
    assert_eq!(
        run(NodeFilter {
            maintenance: Some(true),
            ..Default::default()
        })
        .await,
        ["b"]
    );
    assert_eq!(
        run(NodeFilter {
            maintenance: Some(false),
            ..Default::default()
        })
        .await,
        ["a", "c"]
    );
    assert_eq!(
        run(NodeFilter {
            owner: Some("o1".into()),
            ..Default::default()
        })
        .await,
        ["a"]
    );
    assert_eq!(
        run(NodeFilter {
            project: Some("o1".into()),
            ..Default::default()
        })
        .await,
        ["a", "c"]
    );
    assert_eq!(
        run(NodeFilter {
            description_contains: Some("GPU".into()),
            ..Default::default()
        })
        .await,
        ["c"]
    );
    assert_eq!(
        run(NodeFilter {
            description_contains: Some("gpu".into()),
            ..Default::default()
        })
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        run(NodeFilter {
            provision_state: Some(ProvisionState::Enroll),
            ..Default::default()
        })
        .await,
        ["a", "b", "c"]
    );
    assert_eq!(
        run(NodeFilter {
            retired: Some(true),
            ..Default::default()
        })
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        run(NodeFilter {
            associated: Some(false),
            ..Default::default()
        })
        .await,
        ["a", "b", "c"]
    );
    // ?project= (owner or lessee) with other filters, sorted, paged: a node both owns
    // and leases appears once.
    let mut d = new_node(
        json!({"driver": "other", "name": "d", "resource_class": "z",
                                "owner": "o1"}),
    );
    d.lessee = Some("o1".into());
    db.node_create(&d).await.unwrap();
    let page = |filter: NodeFilter, sort_key: &str, marker: Option<String>| NodeListQuery {
        filter,
        sort_key: sort_key.into(),
        sort_desc: true,
        limit: 2,
        marker,
        ..Default::default()
    };
    let o1 = || NodeFilter {
        project: Some("o1".into()),
        ..Default::default()
    };
    let first = db.node_list(&page(o1(), "name", None)).await.unwrap();
    let marker = first.last().map(|n| n.uuid.as_str().to_string());
    assert_eq!(names(first), ["d", "c"]);
    let rest = db.node_list(&page(o1(), "name", marker)).await.unwrap();
    assert_eq!(names(rest), ["a"]);
    // By id (the marker an id range in both branches), both directions.
    for (desc, want_first, want_rest) in [(true, ["d", "c"], ["a"]), (false, ["a", "c"], ["d"])] {
        let q = |marker| NodeListQuery {
            sort_desc: desc,
            ..page(o1(), "id", marker)
        };
        let first = db.node_list(&q(None)).await.unwrap();
        let marker = first.last().map(|n| n.uuid.as_str().to_string());
        assert_eq!(names(first), want_first, "desc={desc}");
        let rest = db.node_list(&q(marker)).await.unwrap();
        assert_eq!(names(rest), want_rest, "desc={desc}");
    }
    assert_eq!(
        run(NodeFilter {
            driver: Some("other".into()),
            ..o1()
        })
        .await,
        ["c", "d"]
    );
    assert_eq!(
        run(NodeFilter {
            project: Some(String::new()),
            ..Default::default()
        })
        .await,
        Vec::<String>::new()
    );
    let err = db
        .node_list(&NodeListQuery {
            sort_key: "driver_info".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)));
    let err = db
        .node_list(&NodeListQuery {
            marker: Some("11111111-2222-3333-4444-555555555555".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)));
}

/// `?description_contains=` reads `node_descriptions`, which triggers keep in step with
/// the nodes (migrations/*/0021_node_descriptions.sql): a description set at creation,
/// set later, changed, cleared, and a node deleted. A needle that matches more nodes
/// than the search hands on by id pages the same way.
async fn description_search_follows_every_write(db: &Db) {
    let search = |needle: &'static str| async move {
        db.node_list(&NodeListQuery {
            filter: NodeFilter {
                description_contains: Some(needle.into()),
                ..Default::default()
            },
            ..NodeListQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name.unwrap_or_default())
        .collect::<Vec<_>>()
    };
    let a = create(
        db,
        json!({"driver": "fake-hardware", "name": "a", "description": "rack 1 row A"}),
    )
    .await;
    let b = create(
        db,
        json!({"driver": "fake-hardware", "name": "b", "description": "rack 2 row B"}),
    )
    .await;
    let c = create(db, json!({"driver": "fake-hardware", "name": "c"})).await;
    assert_eq!(search("rack").await, ["a", "b"]);
    assert_eq!(search("rack 2").await, ["b"]);
    assert_eq!(search("nowhere").await, Vec::<String>::new());
    let describe = |id: NodeId, text: Option<&'static str>| async move {
        let mut n = db.node_reserve(id, HOST).await.unwrap();
        n.description = text.map(String::from);
        n.reservation = None;
        db.node_save(&n, HOST).await.unwrap();
    };
    describe(c.id, Some("rack 3 spare")).await;
    assert_eq!(search("rack 3").await, ["c"]);
    describe(a.id, None).await;
    assert_eq!(search("rack 1").await, Vec::<String>::new());
    assert_eq!(search("rack").await, ["b", "c"]);
    describe(b.id, Some("spare")).await;
    assert_eq!(search("rack 2").await, Vec::<String>::new());
    assert_eq!(search("spare").await, ["b", "c"]);
    // A write that leaves the description alone leaves the search alone.
    let mut n = db.node_reserve(b.id, HOST).await.unwrap();
    n.extra.insert("k".into(), json!("v"));
    n.reservation = None;
    db.node_save(&n, HOST).await.unwrap();
    assert_eq!(search("spare").await, ["b", "c"]);
    db.node_reserve(c.id, HOST).await.unwrap();
    db.node_destroy(c.id, HOST).await.unwrap();
    assert_eq!(search("spare").await, ["b"]);

    // More matches than the search hands on by id: pages by name, from a marker.
    let bulk = ironic_db::nodes::DESCRIPTION_IDS_MAX + 5;
    for i in 0..bulk {
        create(
            db,
            json!({"driver": "fake-hardware", "name": format!("bulk-{i:04}"),
                   "description": format!("bulk {i}"), "owner": format!("p-{}", i % 2)}),
        )
        .await;
    }
    // Few of them by id: bulk 100 and bulk 1000 up.
    assert_eq!(
        search("bulk 100").await,
        [
            "bulk-0100",
            "bulk-1000",
            "bulk-1001",
            "bulk-1002",
            "bulk-1003",
            "bulk-1004"
        ]
    );
    // Every page by name from a marker: all the matches (more than the bound), few of
    // them, and few of them owned or leased by one project.
    let walk = |needle: &'static str, project: Option<&'static str>, limit: u32| async move {
        let mut seen = Vec::new();
        let mut marker = None;
        for _ in 0..bulk {
            let page = db
                .node_list(&NodeListQuery {
                    filter: NodeFilter {
                        description_contains: Some(needle.into()),
                        project: project.map(String::from),
                        ..Default::default()
                    },
                    sort_key: "name".into(),
                    sort_desc: true,
                    limit,
                    marker: marker.take(),
                    ..NodeListQuery::default()
                })
                .await
                .unwrap();
            let Some(last) = page.last() else { break };
            marker = Some(last.uuid.to_string());
            seen.extend(page.into_iter().map(|n| n.name.unwrap_or_default()));
        }
        seen
    };
    let names = |ids: &mut dyn Iterator<Item = usize>| -> Vec<String> {
        ids.map(|i| format!("bulk-{i:04}")).collect()
    };
    assert_eq!(walk("bulk", None, 100).await, names(&mut (0..bulk).rev()));
    let bulk_10 = [10].into_iter().chain(100..110).chain(1000..bulk);
    let mut want: Vec<usize> = bulk_10.collect();
    want.sort_by_key(|i| std::cmp::Reverse(format!("bulk-{i:04}")));
    assert_eq!(
        walk("bulk 10", None, 5).await,
        names(&mut want.iter().copied())
    );
    assert_eq!(
        walk("bulk 10", Some("p-1"), 3).await,
        names(&mut want.iter().copied().filter(|i| i % 2 == 1))
    );
}

async fn keyset_pagination_walks_every_node_once(db: &Db) {
    // Names with ties and NULLs exercise the (key, id) ordering.
    let mut expected = Vec::new();
    for i in 0..57 {
        let body = if i % 5 == 0 {
            json!({"driver": "fake-hardware"})
        } else {
            json!({"driver": "fake-hardware", "name": format!("n{:02}", i % 23 + i / 23 * 100)})
        };
        expected.push(create(db, body).await.uuid);
    }
    for (key, desc) in [
        ("id", false),
        ("id", true),
        ("name", false),
        ("name", true),
        ("updated_at", false),
    ] {
        let mut seen = Vec::new();
        let mut marker = None;
        for _ in 0..100 {
            let page = db
                .node_list(&NodeListQuery {
                    sort_key: key.into(),
                    sort_desc: desc,
                    limit: 7,
                    marker: marker.clone(),
                    fields: Some(vec!["uuid".into(), "name".into()]),
                    with_traits: false,
                    ..Default::default()
                })
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            marker = page.last().map(|n| n.uuid.as_str().to_string());
            seen.extend(page.into_iter().map(|n| n.uuid));
        }
        let mut sorted_seen = seen.clone();
        sorted_seen.sort();
        let mut sorted_expected = expected.clone();
        sorted_expected.sort();
        assert_eq!(
            sorted_seen, sorted_expected,
            "every node exactly once sorting by {key} desc={desc}"
        );
        if key == "id" {
            let mut exp = expected.clone();
            if desc {
                exp.reverse();
            }
            assert_eq!(seen, exp);
        }
    }
}

async fn locks_are_exclusive(db: &Db) {
    let n = create(db, json!({"driver": "fake-hardware"})).await;
    let locked = db.node_reserve(n.id, "host-a").await.unwrap();
    assert_eq!(locked.reservation.as_deref(), Some("host-a"));
    let err = db.node_reserve(n.id, "host-b").await.unwrap_err();
    assert_eq!(err, Error::node_locked(n.uuid.as_str(), "host-a"));
    db.node_release(n.id, "host-b").await.unwrap();
    assert!(
        db.node_reserve(n.id, "host-b").await.is_err(),
        "only the holder releases"
    );
    db.node_release(n.id, "host-a").await.unwrap();
    db.node_reserve(n.id, "host-b").await.unwrap();
    assert_eq!(db.node_release_all("host-b").await.unwrap(), 1);
    assert_eq!(
        db.node_by_id(n.id).await.unwrap().unwrap().reservation,
        None
    );
    assert!(matches!(
        db.node_reserve(NodeId(999_999), "x").await,
        Err(Error::NotFound(_))
    ));
    // Concurrent reservations: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            db.node_reserve(n.id, &format!("h{i}")).await.is_ok()
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1);
}

async fn save_needs_the_lock(db: &Db) {
    let n = create(db, json!({"driver": "fake-hardware", "name": "s"})).await;
    let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
    locked.extra.insert("k".into(), json!("v"));
    locked.provision_state = ProvisionState::Manageable;
    locked.reservation = None;
    let saved = db.node_save(&locked, HOST).await.unwrap();
    assert!(saved.updated_at.is_some());
    let back = db.node_by_id(n.id).await.unwrap().unwrap();
    assert_eq!(back, saved);
    assert_eq!(
        back.reservation, None,
        "saving with reservation None unlocks"
    );
    // Without the lock nothing is written.
    let mut stale = back.clone();
    stale.extra.insert("k".into(), json!("lost"));
    assert!(matches!(
        db.node_save(&stale, HOST).await,
        Err(Error::Internal(_))
    ));
    assert_eq!(
        db.node_by_id(n.id).await.unwrap().unwrap().extra.get("k"),
        Some(&json!("v"))
    );
    // A rename onto a taken name is a conflict, and the lock stays with us.
    create(db, json!({"driver": "fake-hardware", "name": "taken"})).await;
    let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
    locked.name = Some("taken".into());
    assert!(matches!(
        db.node_save(&locked, HOST).await,
        Err(Error::Conflict(_))
    ));
    db.node_release(n.id, HOST).await.unwrap();
}

async fn destroy_removes_node_and_traits(db: &Db) {
    let n = create(db, json!({"driver": "fake-hardware"})).await;
    add_traits(db, n.id, &["CUSTOM_A"]).await;
    assert!(
        db.node_destroy(n.id, HOST).await.is_err(),
        "destroy needs the lock"
    );
    db.node_reserve(n.id, HOST).await.unwrap();
    db.node_destroy(n.id, HOST).await.unwrap();
    assert_eq!(db.node_by_id(n.id).await.unwrap(), None);
    assert_eq!(db.node_traits(n.id).await.unwrap(), Vec::<String>::new());
}

async fn traits_add_replace_remove(db: &Db) {
    let n = create(db, json!({"driver": "fake-hardware"})).await;
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Without the node's lock nothing is written.
    assert!(matches!(
        db.node_add_traits(n.id, &s(&["CUSTOM_A"]), false, 50, HOST)
            .await,
        Err(Error::Internal(_))
    ));
    db.node_reserve(n.id, "someone-else").await.unwrap();
    assert!(matches!(
        db.node_add_traits(n.id, &s(&["CUSTOM_A"]), false, 50, HOST)
            .await,
        Err(Error::Internal(_))
    ));
    assert!(db.node_traits(n.id).await.unwrap().is_empty());
    db.node_release(n.id, "someone-else").await.unwrap();
    db.node_reserve(n.id, HOST).await.unwrap();
    assert_eq!(
        db.node_add_traits(
            n.id,
            &s(&["CUSTOM_B", "CUSTOM_A", "CUSTOM_A"]),
            false,
            50,
            HOST
        )
        .await
        .unwrap(),
        s(&["CUSTOM_A", "CUSTOM_B"])
    );
    assert_eq!(
        db.node_add_traits(n.id, &s(&["CUSTOM_C"]), false, 50, HOST)
            .await
            .unwrap(),
        s(&["CUSTOM_A", "CUSTOM_B", "CUSTOM_C"])
    );
    assert_eq!(
        db.node_add_traits(n.id, &s(&["CUSTOM_Z"]), true, 50, HOST)
            .await
            .unwrap(),
        s(&["CUSTOM_Z"])
    );
    let err = db
        .node_add_traits(n.id, &s(&["CUSTOM_1", "CUSTOM_2"]), false, 2, HOST)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)));
    assert_eq!(
        db.node_traits(n.id).await.unwrap(),
        s(&["CUSTOM_Z"]),
        "a refused change leaves nothing behind"
    );
    assert!(
        !db.node_remove_traits(n.id, Some("CUSTOM_NOPE"), HOST)
            .await
            .unwrap()
    );
    assert!(
        db.node_remove_traits(n.id, Some("CUSTOM_Z"), HOST)
            .await
            .unwrap()
    );
    db.node_add_traits(n.id, &s(&["CUSTOM_X", "CUSTOM_Y"]), false, 50, HOST)
        .await
        .unwrap();
    // A removal by a process that does not hold the lock removes nothing.
    assert!(matches!(
        db.node_remove_traits(n.id, None, "someone-else").await,
        Err(Error::Internal(_))
    ));
    assert_eq!(
        db.node_traits(n.id).await.unwrap(),
        s(&["CUSTOM_X", "CUSTOM_Y"])
    );
    db.node_remove_traits(n.id, None, HOST).await.unwrap();
    assert!(db.node_traits(n.id).await.unwrap().is_empty());
    db.node_release(n.id, HOST).await.unwrap();
    let listed = db.node_list(&NodeListQuery::default()).await.unwrap();
    assert!(listed[0].traits.is_empty());
}

async fn conductors_register_and_heartbeat(db: &Db) {
    let c = db
        .conductor_register("c1", "", &["fake-hardware".into()])
        .await
        .unwrap();
    assert!(c.online);
    assert_eq!(c.drivers, vec!["fake-hardware".to_string()]);
    let now = chrono::Utc::now();
    let l = ironic_db::Liveness::new(10, 60);
    assert!(c.is_alive(now, &l));
    assert!(!c.is_alive(now + chrono::Duration::seconds(61), &l));
    assert!(db.conductor_heartbeat("c1").await.unwrap());
    assert!(!db.conductor_heartbeat("c2").await.unwrap());
    db.conductor_unregister("c1").await.unwrap();
    assert!(!db.conductor_get("c1").await.unwrap().online);
    let again = db.conductor_register("c1", "rack1", &[]).await.unwrap();
    assert_eq!(again.id, c.id, "re-registration keeps the id");
    assert!(again.online);
    assert_eq!(db.conductor_list().await.unwrap().len(), 1);
    assert!(matches!(
        db.conductor_get("zz").await,
        Err(Error::NotFound(_))
    ));
}

/// Several conductors racing to take over the same orphaned allocation: exactly one
/// compare-and-set wins, and the former owner can no longer write it.
async fn allocation_take_over_has_one_winner(db: &Db) {
    let mut a =
        ironic_model::Allocation::new(ironic_model::AllocationUuid::new_v4(), Some("rc".into()));
    a.conductor_affinity = Some(ConductorId(1));
    let a = db.allocation_create(&a).await.unwrap();
    let racers: Vec<_> = (2..10)
        .map(|new| {
            let db = db.clone();
            tokio::spawn(async move {
                db.allocation_take_over(a.id, Some(ConductorId(1)), ConductorId(new))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut wins = 0;
    for r in racers {
        if r.await.unwrap() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1, "exactly one taker");
    let now = db.allocation_by_id(a.id).await.unwrap().unwrap();
    let winner = now.conductor_affinity.unwrap();
    assert!((2..10).contains(&winner.0));
    // The dead owner's late write is refused; the winner's goes through.
    assert!(
        !db.allocation_fail(a.id, ConductorId(1), "late")
            .await
            .unwrap()
    );
    assert!(db.allocation_fail(a.id, winner, "no nodes").await.unwrap());
    let done = db.allocation_by_id(a.id).await.unwrap().unwrap();
    assert_eq!(done.state, ironic_model::AllocationState::Error);
    assert_eq!(done.last_error.as_deref(), Some("no nodes"));
}

/// A retired node is never a candidate, even `available` (it cannot get there through
/// the API; the store does not rely on that).
async fn allocation_never_picks_a_retired_node(db: &Db) {
    let mut n = new_node(json!({"driver": "fake-hardware", "resource_class": "rc-r"}));
    n.provision_state = ProvisionState::Available;
    n.power_state = Some("power off".into());
    n.retired = true;
    let n = db.node_create(&n).await.unwrap();
    let mut a =
        ironic_model::Allocation::new(ironic_model::AllocationUuid::new_v4(), Some("rc-r".into()));
    a.conductor_affinity = Some(ConductorId(1));
    let a = db.allocation_create(&a).await.unwrap();
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
        ironic_db::allocations::Claim::NoneFree
    );
    assert_eq!(
        db.allocation_shortage(&a).await.unwrap(),
        ironic_db::allocations::Shortage::NoNodes
    );
    // The same node, not retired, is taken.
    let mut m = new_node(json!({"driver": "fake-hardware", "resource_class": "rc-r"}));
    m.provision_state = ProvisionState::Available;
    m.power_state = Some("power off".into());
    let m = db.node_create(&m).await.unwrap();
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
        ironic_db::allocations::Claim::Reserved(m.id, m.uuid.to_string())
    );
    assert!(
        db.node_by_id(n.id)
            .await
            .unwrap()
            .unwrap()
            .instance_uuid
            .is_none()
    );
}

async fn available(db: &Db, rc: &str, extra: serde_json::Value) -> Node {
    let mut body = json!({"driver": "fake-hardware", "resource_class": rc});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let mut n = new_node(body);
    n.provision_state = ProvisionState::Available;
    n.power_state = Some("power off".into());
    db.node_create(&n).await.unwrap()
}

async fn allocating(db: &Db, rc: &str, affinity: i64, traits: &[&str]) -> ironic_model::Allocation {
    let mut a =
        ironic_model::Allocation::new(ironic_model::AllocationUuid::new_v4(), Some(rc.into()));
    a.conductor_affinity = Some(ConductorId(affinity));
    a.traits = traits.iter().map(|t| t.to_string()).collect();
    db.allocation_create(&a).await.unwrap()
}

/// A claim by a conductor that no longer owns the allocation changes nothing; one by
/// the owner associates the node (instance uuid, allocation, instance_info.traits) and
/// activates the allocation together; a second claim of an active allocation is lost.
async fn allocation_claim_outcomes(db: &Db) {
    use ironic_db::allocations::Claim;
    let n = available(
        db,
        "rc-c",
        json!({"instance_info": {"image_source": "img"}}),
    )
    .await;
    add_traits(db, n.id, &["CUSTOM_GPU"]).await;
    let a = allocating(db, "rc-c", 1, &["CUSTOM_GPU"]).await;
    assert_eq!(
        db.allocation_claim(&a, ConductorId(2), None).await.unwrap(),
        Claim::Lost
    );
    let untouched = db.node_by_id(n.id).await.unwrap().unwrap();
    assert!(untouched.instance_uuid.is_none() && untouched.allocation_id.is_none());
    let still = db.allocation_by_id(a.id).await.unwrap().unwrap();
    assert_eq!(still.state, ironic_model::AllocationState::Allocating);
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), Some("no-such-name"))
            .await
            .unwrap(),
        Claim::NoneFree
    );
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
        Claim::Reserved(n.id, n.uuid.to_string())
    );
    let node = db.node_by_id(n.id).await.unwrap().unwrap();
    assert_eq!(node.instance_uuid.as_deref(), Some(a.uuid.as_str()));
    assert_eq!(node.allocation_id, Some(a.id));
    assert_eq!(node.instance_info["traits"], json!(["CUSTOM_GPU"]));
    assert_eq!(node.instance_info["image_source"], json!("img"));
    let done = db.allocation_by_id(a.id).await.unwrap().unwrap();
    assert_eq!(done.state, ironic_model::AllocationState::Active);
    assert_eq!(done.node_id, Some(n.id));
    // A free matching node exists, but the allocation is no longer `allocating`.
    let spare = available(db, "rc-c", json!({})).await;
    add_traits(db, spare.id, &["CUSTOM_GPU"]).await;
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
        Claim::Lost
    );
}

/// Twelve allocations race for eight nodes: each node goes to one allocation, eight
/// are reserved, four find none free, and every reserved allocation names its node.
async fn concurrent_claims_take_distinct_nodes(db: &Db) {
    use ironic_db::allocations::Claim;
    for _ in 0..8 {
        available(db, "rc-race", json!({})).await;
    }
    let mut racers = Vec::new();
    for _ in 0..12 {
        let a = allocating(db, "rc-race", 1, &[]).await;
        let db = db.clone();
        racers.push(tokio::spawn(async move {
            (
                a.id,
                db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
            )
        }));
    }
    let mut nodes = std::collections::HashSet::new();
    let mut none_free = 0;
    for r in racers {
        match r.await.unwrap() {
            (id, Claim::Reserved(node, _)) => {
                assert!(nodes.insert(node), "node {node:?} claimed twice");
                let a = db.allocation_by_id(id).await.unwrap().unwrap();
                assert_eq!(a.node_id, Some(node));
                let n = db.node_by_id(node).await.unwrap().unwrap();
                assert_eq!(n.allocation_id, Some(id));
            }
            (_, Claim::NoneFree) => none_free += 1,
            (_, Claim::Lost) => panic!("no allocation was taken over"),
        }
    }
    assert_eq!((nodes.len(), none_free), (8, 4));
}

async fn nodes_by_ids_reads_whole_rows(db: &Db) {
    let a = create(
        db,
        json!({"driver": "fake-hardware", "driver_info": {"ipmi_address": "10.0.0.1"}}),
    )
    .await;
    let b = create(db, json!({"driver": "fake-hardware", "name": "b"})).await;
    let got = db
        .nodes_by_ids(&[b.id, NodeId(999_999), a.id])
        .await
        .unwrap();
    let ids: Vec<NodeId> = got.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![a.id, b.id]);
    assert_eq!(got[0].driver_info["ipmi_address"], json!("10.0.0.1"));
    assert_eq!(got[1].name.as_deref(), Some("b"));
    assert!(db.nodes_by_ids(&[]).await.unwrap().is_empty());
}

/// The metrics' reading of node states: every node once, in id order, a page at a time.
async fn node_states_page_by_id(db: &Db) {
    let mut made = Vec::new();
    for i in 0..5 {
        let n = create(
            db,
            json!({"driver": "fake-hardware", "conductor_group": format!("g{i}")}),
        )
        .await;
        made.push((n.id.0, n.uuid.to_string(), format!("g{i}")));
    }
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut after = NodeId(0);
    for _ in 0..10 {
        let page = db.node_states(after, 2).await.unwrap();
        pages.push(page.len());
        let Some(last) = page.last() else { break };
        after = last.id;
        for n in page {
            assert_eq!(
                (n.driver.as_str(), n.provision_state.as_str(), n.maintenance),
                ("fake-hardware", "enroll", false)
            );
            assert_eq!(
                (n.power_state, n.target_power_state, n.fault, n.reservation),
                (None, None, None, None)
            );
            seen.push((n.id.0, n.uuid.to_string(), n.conductor_group));
        }
    }
    assert_eq!(pages, vec![2, 2, 1, 0]);
    assert_eq!(seen, made);
}

/// PostgreSQL over TLS: `sslmode=require` in the URL gives an encrypted session (the
/// server says so in `pg_stat_ssl`), `sslmode=disable` a plain one, and
/// `sslmode=verify-full` against a certificate the CA file does not vouch for is refused
/// with the reason. Needs a server with `ssl = on` (Debian's default, with its snakeoil
/// certificate); says so and checks nothing else when it is off.
#[tokio::test]
async fn postgres_sessions_use_tls_as_the_url_says() {
    let t = ironic_db::testing::TestDb::postgres().await.unwrap();
    let opts = ironic_db::DbOptions::default();
    let sep = if t.url.contains('?') { '&' } else { '?' };
    let plain = Db::connect(&format!("{}{sep}sslmode=disable", t.url), &opts)
        .await
        .unwrap();
    assert_eq!(plain.tls_in_use().await.unwrap(), Some(false));
    match Db::connect(&format!("{}{sep}sslmode=require", t.url), &opts).await {
        Ok(tls) => assert_eq!(tls.tls_in_use().await.unwrap(), Some(true)),
        Err(e) => {
            eprintln!("the PostgreSQL server has no TLS (ssl = off?): {e}; not checked");
            t.cleanup().await;
            return;
        }
    }
    // A CA that signed nothing of the server's: refused, naming the cause.
    let ca = std::env::temp_dir().join(format!("no-such-ca-{}.pem", std::process::id()));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=unrelated-ca", "-keyout", "/dev/null", "-out"])
        .arg(&ca)
        .output()
        .expect("openssl is installed");
    assert!(out.status.success());
    let strict = format!(
        "{}{sep}sslmode=verify-full&sslrootcert={}",
        t.url,
        ca.display()
    );
    let refused = Db::connect(&strict, &opts).await;
    let _ = std::fs::remove_file(&ca);
    match refused {
        Err(e) => assert!(e.to_string().to_lowercase().contains("certificate"), "{e}"),
        Ok(_) => panic!("a server certificate no trusted CA signed was accepted"),
    }
    t.cleanup().await;
}

async fn history_is_kept_in_order_and_pruned(db: &Db) {
    let a = create(db, json!({"driver": "fake-hardware", "name": "h1"})).await;
    let b = create(db, json!({"driver": "fake-hardware", "name": "h2"})).await;
    let entry = |node: &Node, i: usize| ironic_model::history::HistoryEntry {
        id: 0,
        uuid: uuid::Uuid::new_v4().to_string(),
        node_id: node.id.0,
        conductor: Some(HOST.into()),
        event_type: "provisioning".into(),
        severity: "INFO".into(),
        event: format!("event {i}"),
        user: None,
        project: None,
        state: Some("enroll".into()),
        target_provision_state: None,
        duration_seconds: Some(i as i64),
        created_at: ironic_model::node::now(),
    };
    let list_a: Vec<_> = (0..5).map(|i| entry(&a, i)).collect();
    db.history_record(&list_a).await.unwrap();
    db.history_record(&[entry(&b, 0)]).await.unwrap();
    let events = |l: Vec<ironic_model::history::HistoryEntry>| {
        l.into_iter().map(|e| e.event).collect::<Vec<_>>()
    };
    let all = db.history_list(a.id.0, None, false, 100).await.unwrap();
    assert_eq!(
        events(all.clone()),
        ["event 0", "event 1", "event 2", "event 3", "event 4"]
    );
    assert_eq!(
        all[3],
        ironic_model::history::HistoryEntry {
            id: all[3].id,
            ..list_a[3].clone()
        }
    );
    let page = db
        .history_list(a.id.0, Some(all[1].id), false, 2)
        .await
        .unwrap();
    assert_eq!(events(page), ["event 2", "event 3"]);
    let back = db
        .history_list(a.id.0, Some(all[2].id), true, 10)
        .await
        .unwrap();
    assert_eq!(events(back), ["event 1", "event 0"]);
    assert_eq!(
        db.history_get(a.id.0, &all[0].uuid).await.unwrap().event,
        "event 0"
    );
    assert!(
        db.history_get(b.id.0, &all[0].uuid).await.is_err(),
        "another node's entry"
    );
    // Entries younger than the cut-off stay, whatever the count.
    let long_ago = ironic_model::node::now() - chrono::Duration::days(1);
    assert_eq!(db.history_prune(2, long_ago, 100).await.unwrap(), 0);
    // Beyond the newest two of each node, in batches.
    let soon = ironic_model::node::now() + chrono::Duration::seconds(1);
    assert_eq!(db.history_prune(2, soon, 2).await.unwrap(), 2);
    assert_eq!(db.history_prune(2, soon, 100).await.unwrap(), 1);
    let left = db.history_list(a.id.0, None, false, 100).await.unwrap();
    assert_eq!(events(left), ["event 3", "event 4"]);
    assert_eq!(
        db.history_list(b.id.0, None, false, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    // A node's history goes with it.
    db.node_reserve(a.id, HOST).await.unwrap();
    db.node_destroy(a.id, HOST).await.unwrap();
    assert!(
        db.history_list(a.id.0, None, false, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The BIOS cache: new settings added, a changed value updated (with `updated_at`), an
/// unchanged one left alone, one the hardware no longer reports removed; a node's go
/// with it.
async fn bios_settings_follow_the_hardware(db: &Db) {
    let n = create(db, json!({"driver": "redfish"})).await;
    let set = |pairs: &[(&str, Option<&str>)]| -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    };
    db.bios_cache(
        n.id.0,
        &set(&[("A", Some("1")), ("B", Some("x")), ("C", None)]),
    )
    .await
    .unwrap();
    let first = db.bios_list(n.id.0).await.unwrap();
    assert_eq!(
        first
            .iter()
            .map(|b| (b.name.as_str(), b.value.as_deref()))
            .collect::<Vec<_>>(),
        [("A", Some("1")), ("B", Some("x")), ("C", None)]
    );
    assert!(first.iter().all(|b| b.updated_at.is_none()));
    db.bios_cache(n.id.0, &set(&[("A", Some("2")), ("C", None)]))
        .await
        .unwrap();
    let second = db.bios_list(n.id.0).await.unwrap();
    assert_eq!(second.len(), 2, "{second:?}");
    assert_eq!(
        (second[0].value.as_deref(), second[0].updated_at.is_some()),
        (Some("2"), true)
    );
    assert_eq!(second[0].created_at, first[0].created_at);
    assert_eq!((second[1].name.as_str(), second[1].updated_at), ("C", None));
    // What PostgreSQL could not store does not fail the rest: an overlong name is left
    // out, NUL characters are dropped from a value.
    let long = "X".repeat(300);
    db.bios_cache(
        n.id.0,
        &set(&[("C", None), (long.as_str(), Some("v")), ("N", Some("a\0b"))]),
    )
    .await
    .unwrap();
    let third = db.bios_list(n.id.0).await.unwrap();
    assert_eq!(
        third
            .iter()
            .map(|b| (b.name.as_str(), b.value.as_deref()))
            .collect::<Vec<_>>(),
        [("C", None), ("N", Some("ab"))]
    );
    db.node_reserve(n.id, HOST).await.unwrap();
    db.node_destroy(n.id, HOST).await.unwrap();
    assert!(db.bios_list(n.id.0).await.unwrap().is_empty());
}

/// Text that does not compress: `n` characters of three bytes each, pseudo-random.
fn incompressible(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_u32(0x4E00 + (x % 20_000) as u32).unwrap()
        })
        .collect()
}

/// A description, a maintenance reason and a last error as long as the API allows (or
/// longer: a driver's error) are written and lists sort by them: PostgreSQL's index of a
/// free-text key holds its first characters only (a btree entry may not exceed 2704
/// bytes; these are ~12 KB).
async fn long_free_text_is_stored_and_sorted(db: &Db) {
    let mut uuids = Vec::new();
    for seed in 1..=3u64 {
        let n = create(
            db,
            json!({"driver": "fake-hardware", "description": incompressible(4096, seed)}),
        )
        .await;
        let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
        locked.last_error = Some(incompressible(5000, seed + 10));
        locked.maintenance_reason = Some(incompressible(4096, seed + 20));
        db.node_save(&locked, HOST).await.unwrap();
        uuids.push(n.uuid.to_string());
    }
    for key in ["description", "last_error", "maintenance_reason"] {
        let mut seen = Vec::new();
        let mut marker = None;
        for _ in 0..4 {
            let q = NodeListQuery {
                sort_key: key.into(),
                limit: 1,
                marker: marker.clone(),
                ..Default::default()
            };
            let page = db.node_list(&q).await.unwrap();
            let Some(n) = page.first() else { break };
            marker = Some(n.uuid.to_string());
            seen.push(n.uuid.to_string());
        }
        let mut all = seen.clone();
        all.sort();
        let mut want = uuids.clone();
        want.sort();
        assert_eq!(all, want, "{key}: each node once, page by page");
    }
}

/// A pooled PostgreSQL connection that the server dropped while it sat idle is noticed
/// before use and replaced: the pool checks a connection with a round trip only after it
/// idled for a second (not at every use, which was a second round trip per request), and
/// the next statement after such an idle works.
#[tokio::test]
async fn postgres_connection_dropped_while_idle_is_replaced() {
    use sqlx::Connection;
    let t = ironic_db::testing::TestDb::postgres().await.unwrap();
    let opts = ironic_db::DbOptions {
        max_connections: 1,
        ..Default::default()
    };
    // The test database's own pool closed: the one session left is the pool's under test.
    t.db.close().await;
    let db = Db::connect(&t.url, &opts).await.unwrap();
    let within = std::time::Duration::from_secs(5);
    db.ping(within).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND backend_type = 'client backend') t",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(dropped, 1, "the pool's one connection");
    // The pool's connection idles past the check's threshold (time itself is the
    // condition here).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    db.ping(within).await.unwrap();
    let _ = admin.close().await;
    db.close().await;
    t.cleanup().await;
}

/// `last_error` is stored as readers may see it, whoever writes it: secrets masked, cut
/// to 4 KiB (`secrets::stored_text`); the node a write returns holds what was stored,
/// and a stored text saved again with the rest of its node stays as it is (a cut text
/// is not cut anew). The same for an allocation's.
async fn last_error_is_stored_masked_and_bounded(db: &Db) {
    use ironic_model::secrets::TEXT_MAX;
    let stored = |id| async move { db.node_by_id(id).await.unwrap().unwrap().last_error };
    let mut n = new_node(json!({"driver": "fake-hardware", "name": "le"}));
    n.last_error = Some("Failed: password=hunter2".into());
    let n = db.node_create(&n).await.unwrap();
    assert_eq!(n.last_error.as_deref(), Some("Failed: password=******"));
    assert_eq!(stored(n.id).await, n.last_error);

    // A long error with secrets before and after the cut.
    let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
    let long = format!(
        "ipmi_password=s3cret {} token=after-the-cut",
        "x".repeat(3 * TEXT_MAX)
    );
    locked.last_error = Some(long);
    locked.reservation = None;
    let saved = db.node_save(&locked, HOST).await.unwrap();
    let text = saved.last_error.clone().unwrap();
    assert!(text.starts_with("ipmi_password=****** xxx"), "{text}");
    // Its beginning and its end, masked, with how much was left out between them.
    assert!(text.contains(" bytes left out) "), "{text}");
    assert!(text.ends_with("xxx token=******"), "{text}");
    assert!(text.len() <= TEXT_MAX, "{}", text.len());
    assert!(!text.contains("s3cret") && !text.contains("after-the-cut"));
    assert_eq!(stored(n.id).await, saved.last_error);

    // Saved again with the rest of the node, as read back: unchanged.
    for _ in 0..2 {
        let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
        locked.extra.insert("k".into(), json!(1));
        locked.reservation = None;
        let again = db.node_save(&locked, HOST).await.unwrap();
        assert_eq!(again.last_error, saved.last_error);
        assert_eq!(stored(n.id).await, saved.last_error);
    }

    // Cleared, and set again.
    let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
    locked.last_error = None;
    assert_eq!(db.node_save(&locked, HOST).await.unwrap().last_error, None);
    assert_eq!(stored(n.id).await, None);
    locked.last_error = Some("auth_token: abc, then".into());
    locked.reservation = None;
    let saved = db.node_save(&locked, HOST).await.unwrap();
    assert_eq!(
        saved.last_error.as_deref(),
        Some("auth_token: ******, then")
    );
    assert_eq!(stored(n.id).await, saved.last_error);

    let mut a = ironic_model::Allocation::new(ironic_model::AllocationUuid::new_v4(), None);
    a.last_error = Some("password=one".into());
    a.conductor_affinity = Some(ConductorId(1));
    let a = db.allocation_create(&a).await.unwrap();
    assert_eq!(a.last_error.as_deref(), Some("password=******"));
    assert!(
        db.allocation_fail(
            a.id,
            ConductorId(1),
            &format!("secret=two {}", "y".repeat(2 * TEXT_MAX))
        )
        .await
        .unwrap()
    );
    let back = db.allocation_by_id(a.id).await.unwrap().unwrap();
    let text = back.last_error.unwrap();
    assert!(text.starts_with("secret=****** yyy"), "{text}");
    assert!(text.len() < TEXT_MAX + 64, "{}", text.len());
}

/// The claim writes a node without taking its lock: one UPDATE guarded by
/// `reservation IS NULL` (docs/architecture.md, "The allocation claim and the node
/// lock"). Raced against a locked update of the same node (reserve, read, hold, save
/// and unlock, as a conductor's operation does), the node is never written by both:
/// while the lock is held every claim finds the node busy and writes nothing; a claim
/// that came first is in the row the lock holder reads, so its save keeps it; at the
/// end both writes are there. Both orders are seen.
async fn claim_never_writes_a_locked_node(db: &Db) {
    use ironic_db::allocations::Claim;
    use std::time::Duration;
    let (mut claim_first, mut claim_waited) = (0, 0);
    for round in 0..20u64 {
        let rc = format!("rc-lock-{round}");
        let n = available(db, &rc, json!({})).await;
        let a = allocating(db, &rc, 1, &[]).await;
        // Even rounds: the lock is taken first; odd rounds: the claim runs first.
        let (lock_after, claim_after) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        let holder = {
            let db = db.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(lock_after)).await;
                let mut locked = db.node_reserve(n.id, HOST).await.unwrap();
                let seen = (locked.instance_uuid.clone(), locked.allocation_id);
                // Held long enough that a claim started 1 ms later runs while it is,
                // even on a loaded machine (5 ms was not, once, beside the real-machine
                // test).
                tokio::time::sleep(Duration::from_millis(100)).await;
                let during = db.node_by_id(n.id).await.unwrap().unwrap();
                assert_eq!(
                    (
                        during.instance_uuid.clone(),
                        during.allocation_id,
                        &during.instance_info,
                        during.updated_at
                    ),
                    (
                        seen.0.clone(),
                        seen.1,
                        &locked.instance_info,
                        locked.updated_at
                    ),
                    "nobody writes a node while its lock is held"
                );
                locked.extra.insert("round".into(), json!(round));
                locked.reservation = None;
                db.node_save(&locked, HOST).await.unwrap();
                seen.0.is_some()
            })
        };
        let claimer = {
            let (db, a) = (db.clone(), a.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(claim_after)).await;
                let mut busy = 0;
                for _ in 0..500 {
                    match db.allocation_claim(&a, ConductorId(1), None).await.unwrap() {
                        Claim::Reserved(node, _) => return (node, busy),
                        Claim::NoneFree => {
                            busy += 1;
                            tokio::time::sleep(Duration::from_micros(500)).await;
                        }
                        Claim::Lost => panic!("the allocation was not taken over"),
                    }
                }
                panic!("the node was never freed")
            })
        };
        let came_first = holder.await.unwrap();
        let (node, busy) = claimer.await.unwrap();
        assert_eq!(node, n.id);
        if came_first {
            claim_first += 1;
            assert_eq!(busy, 0, "a claim that came first was not refused");
        } else {
            assert!(busy > 0, "a claim ran while the lock was held");
            claim_waited += 1;
        }
        // Nothing lost: the claim's association and the holder's update are both there.
        let end = db.node_by_id(n.id).await.unwrap().unwrap();
        assert_eq!(end.extra.get("round"), Some(&json!(round)));
        assert_eq!(end.instance_uuid.as_deref(), Some(a.uuid.as_str()));
        assert_eq!(end.allocation_id, Some(a.id));
        assert_eq!(end.reservation, None);
        let a = db.allocation_by_id(a.id).await.unwrap().unwrap();
        assert_eq!(a.state, ironic_model::AllocationState::Active);
        assert_eq!(a.node_id, Some(n.id));
    }
    assert!(
        claim_first > 0 && claim_waited > 0,
        "both orders: {claim_first}/{claim_waited}"
    );
}

/// A deletion frees its node only under the node's lock: with no lock, or another
/// holder's, it writes nothing and names the node; under the caller's lock the node is
/// freed and the allocation gone together. A node deleted by a holder whose lock is
/// gone keeps its allocation too.
async fn allocation_deletion_writes_only_a_held_node(db: &Db) {
    use ironic_db::allocations::{Claim, Deletion, NodeGuard};
    let n = available(db, "rc-del", json!({})).await;
    let a = allocating(db, "rc-del", 1, &[]).await;
    assert_eq!(
        db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
        Claim::Reserved(n.id, n.uuid.to_string())
    );
    let (aid, auuid) = (a.id, a.uuid.clone());
    let unchanged = |db: &Db| {
        let (db, auuid) = (db.clone(), auuid.clone());
        async move {
            let node = db.node_by_id(n.id).await.unwrap().unwrap();
            assert_eq!(node.allocation_id, Some(aid));
            assert_eq!(node.instance_uuid.as_deref(), Some(auuid.as_str()));
            assert!(db.allocation_by_id(aid).await.unwrap().is_some());
        }
    };
    assert_eq!(
        db.allocation_destroy(&a, NodeGuard::None).await.unwrap(),
        Deletion::NodeHeld(n.id)
    );
    unchanged(db).await;
    db.node_reserve(n.id, "someone-else").await.unwrap();
    assert_eq!(
        db.allocation_destroy(&a, NodeGuard::Holder(HOST))
            .await
            .unwrap(),
        Deletion::NodeHeld(n.id)
    );
    unchanged(db).await;
    // A node deletion by a holder whose lock is gone deletes nothing, its allocation
    // included.
    assert!(db.node_destroy(n.id, HOST).await.is_err());
    unchanged(db).await;
    db.node_release(n.id, "someone-else").await.unwrap();
    db.node_reserve(n.id, HOST).await.unwrap();
    assert_eq!(
        db.allocation_destroy(&a, NodeGuard::Holder(HOST))
            .await
            .unwrap(),
        Deletion::Deleted
    );
    let node = db.node_by_id(n.id).await.unwrap().unwrap();
    assert_eq!((node.allocation_id, node.instance_uuid), (None, None));
    assert_eq!(
        node.reservation.as_deref(),
        Some(HOST),
        "the lock stays the caller's"
    );
    assert!(db.allocation_by_id(a.id).await.unwrap().is_none());
    assert!(matches!(
        db.allocation_destroy(&a, NodeGuard::Holder(HOST)).await,
        Err(Error::NotFound(_))
    ));
    // Without a node, no lock is needed.
    let b = allocating(db, "rc-none", 1, &[]).await;
    assert_eq!(
        db.allocation_destroy(&b, NodeGuard::None).await.unwrap(),
        Deletion::Deleted
    );

    // Without the lock, as the claim writes: only an unlocked node whose state allows
    // it; a locked or refusing node is named and keeps its allocation.
    let m = available(db, "rc-unlocked", json!({})).await;
    let c = allocating(db, "rc-unlocked", 1, &[]).await;
    assert_eq!(
        db.allocation_claim(&c, ConductorId(1), None).await.unwrap(),
        Claim::Reserved(m.id, m.uuid.to_string())
    );
    let kept = |db: &Db| {
        let (db, cid) = (db.clone(), c.id);
        async move {
            let node = db.node_by_id(m.id).await.unwrap().unwrap();
            assert_eq!(node.allocation_id, Some(cid));
            assert!(db.allocation_by_id(cid).await.unwrap().is_some());
        }
    };
    let mut node = db.node_reserve(m.id, "someone-else").await.unwrap();
    assert_eq!(
        db.allocation_destroy(&c, NodeGuard::Unlocked)
            .await
            .unwrap(),
        Deletion::NodeHeld(m.id),
        "a locked node"
    );
    kept(db).await;
    node.provision_state = ProvisionState::Active;
    let mut node = db.node_save(&node, "someone-else").await.unwrap();
    db.node_release(m.id, "someone-else").await.unwrap();
    assert_eq!(
        db.allocation_destroy(&c, NodeGuard::Unlocked)
            .await
            .unwrap(),
        Deletion::NodeHeld(m.id),
        "an active node out of maintenance"
    );
    kept(db).await;
    db.node_reserve(m.id, "someone-else").await.unwrap();
    node.maintenance = true;
    db.node_save(&node, "someone-else").await.unwrap();
    db.node_release(m.id, "someone-else").await.unwrap();
    assert_eq!(
        db.allocation_destroy(&c, NodeGuard::Unlocked)
            .await
            .unwrap(),
        Deletion::Deleted,
        "an unlocked node in maintenance"
    );
    let node = db.node_by_id(m.id).await.unwrap().unwrap();
    assert_eq!((node.allocation_id, node.instance_uuid), (None, None));
    assert_eq!(node.reservation, None);
    assert!(db.allocation_by_id(c.id).await.unwrap().is_none());
}

/// A deletion racing a claim of the same allocation: either the claim commits first
/// and the deletion, made without a node lock, writes nothing and names the node, or
/// the deletion wins and the claim writes nothing. Never a node associated with a
/// deleted allocation, never a deleted allocation's node half freed.
async fn deletion_racing_a_claim_leaves_no_half(db: &Db) {
    use ironic_db::allocations::{Claim, Deletion, NodeGuard};
    let (mut claims, mut deletions) = (0, 0);
    for round in 0..20u64 {
        let rc = format!("rc-race-del-{round}");
        let n = available(db, &rc, json!({})).await;
        let a = allocating(db, &rc, 1, &[]).await;
        let claim = {
            let (db, a) = (db.clone(), a.clone());
            tokio::spawn(
                async move { db.allocation_claim(&a, ConductorId(1), None).await.unwrap() },
            )
        };
        let delete = {
            let (db, a) = (db.clone(), a.clone());
            tokio::spawn(async move { db.allocation_destroy(&a, NodeGuard::None).await.unwrap() })
        };
        let (claim, delete) = (claim.await.unwrap(), delete.await.unwrap());
        let node = db.node_by_id(n.id).await.unwrap().unwrap();
        let alloc = db.allocation_by_id(a.id).await.unwrap();
        match (claim, delete) {
            (Claim::Reserved(id, _), Deletion::NodeHeld(held)) => {
                claims += 1;
                assert_eq!((id, held), (n.id, n.id));
                assert_eq!(node.allocation_id, Some(a.id));
                assert_eq!(alloc.map(|a| a.node_id), Some(Some(n.id)));
            }
            (Claim::Lost, Deletion::Deleted) => {
                deletions += 1;
                assert_eq!((node.allocation_id, node.instance_uuid), (None, None));
                assert!(alloc.is_none());
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    assert_eq!(claims + deletions, 20);
}

/// A deletion without the node lock ([`NodeGuard::Unlocked`]) racing a holder that
/// locks the node, saves it (every column, from what it read) and releases it: either the
/// deletion commits first and the holder reads (and saves) the freed node, or the holder
/// locked first and the deletion wrote nothing. Never an allocation deleted while its node
/// still names it, never a holder's save undoing the deletion.
async fn unlocked_deletion_racing_a_holder(db: &Db) {
    use ironic_db::allocations::{Claim, Deletion, NodeGuard};
    let (mut first, mut held) = (0, 0);
    for round in 0..20u64 {
        let rc = format!("rc-race-unl-{round}");
        let n = available(db, &rc, json!({})).await;
        let a = allocating(db, &rc, 1, &[]).await;
        assert!(matches!(
            db.allocation_claim(&a, ConductorId(1), None).await.unwrap(),
            Claim::Reserved(..)
        ));
        let holder = {
            let db = db.clone();
            tokio::spawn(async move {
                let mut node = db.node_reserve(n.id, "holder").await.unwrap();
                node.description = Some("saved by the holder".into());
                db.node_save(&node, "holder").await.unwrap();
                db.node_release(n.id, "holder").await.unwrap();
            })
        };
        let delete = {
            let (db, a) = (db.clone(), a.clone());
            tokio::spawn(async move {
                db.allocation_destroy(&a, NodeGuard::Unlocked)
                    .await
                    .unwrap()
            })
        };
        holder.await.unwrap();
        let delete = delete.await.unwrap();
        let node = db.node_by_id(n.id).await.unwrap().unwrap();
        let alloc = db.allocation_by_id(a.id).await.unwrap();
        assert_eq!(node.description.as_deref(), Some("saved by the holder"));
        match delete {
            Deletion::Deleted => {
                first += 1;
                assert_eq!(
                    (node.allocation_id, node.instance_uuid),
                    (None, None),
                    "round {round}"
                );
                assert!(alloc.is_none());
            }
            Deletion::NodeHeld(id) => {
                held += 1;
                assert_eq!(id, n.id);
                assert_eq!(node.allocation_id, Some(a.id), "round {round}");
                assert!(alloc.is_some());
            }
        }
    }
    assert_eq!(first + held, 20);
}

/// The writes of a backfill and of its failure are conditional on the allocation
/// still being this conductor's `allocating` one: a conductor that lost it (taken
/// over, deleted) changes nothing, node included; without the node's lock nothing is
/// written either.
async fn backfill_and_failure_need_the_allocation(db: &Db) {
    use ironic_db::allocations::Backfill;
    let n = create(
        db,
        json!({"driver": "fake-hardware", "resource_class": "rc-bf"}),
    )
    .await;
    let a = allocating(db, "rc-bf", 1, &[]).await;
    let aid = a.id;
    let untouched = |db: &Db| {
        let db = db.clone();
        async move {
            let node = db.node_by_id(n.id).await.unwrap().unwrap();
            assert_eq!((node.allocation_id, node.instance_uuid), (None, None));
            let a = db.allocation_by_id(aid).await.unwrap().unwrap();
            assert_eq!(a.state, ironic_model::AllocationState::Allocating);
            assert_eq!(a.node_id, None);
        }
    };
    // Without the node's lock.
    assert_eq!(
        db.allocation_backfill(&a, n.id, HOST, ConductorId(1))
            .await
            .unwrap(),
        Backfill::NodeTaken
    );
    untouched(db).await;
    db.node_reserve(n.id, HOST).await.unwrap();
    // Taken over by conductor 2: conductor 1's backfill and failure write nothing.
    assert!(
        db.allocation_take_over(a.id, Some(ConductorId(1)), ConductorId(2))
            .await
            .unwrap()
    );
    assert_eq!(
        db.allocation_backfill(&a, n.id, HOST, ConductorId(1))
            .await
            .unwrap(),
        Backfill::Lost
    );
    untouched(db).await;
    assert!(
        !db.allocation_fail(a.id, ConductorId(1), "late")
            .await
            .unwrap()
    );
    untouched(db).await;
    // The owner's goes through.
    assert_eq!(
        db.allocation_backfill(&a, n.id, HOST, ConductorId(2))
            .await
            .unwrap(),
        Backfill::Done
    );
    let node = db.node_by_id(n.id).await.unwrap().unwrap();
    assert_eq!(node.allocation_id, Some(a.id));
    assert_eq!(node.instance_uuid.as_deref(), Some(a.uuid.as_str()));
    let done = db.allocation_by_id(a.id).await.unwrap().unwrap();
    assert_eq!(done.state, ironic_model::AllocationState::Active);
    // Active now: a late failure of the owner itself writes nothing either.
    assert!(
        !db.allocation_fail(a.id, ConductorId(2), "late")
            .await
            .unwrap()
    );
    assert_eq!(
        db.allocation_by_id(a.id).await.unwrap().unwrap().state,
        ironic_model::AllocationState::Active
    );
}

/// The API's PATCH writes `name` and `extra` only, columns no conductor writes: saved
/// from a copy read before a claim or a take-over, it keeps what they wrote.
async fn allocation_meta_update_keeps_the_process_writes(db: &Db) {
    use ironic_db::allocations::Claim;
    let n = available(db, "rc-meta", json!({})).await;
    let stale = allocating(db, "rc-meta", 1, &[]).await;
    assert_eq!(
        db.allocation_claim(&stale, ConductorId(1), None)
            .await
            .unwrap(),
        Claim::Reserved(n.id, n.uuid.to_string())
    );
    let mut patch = stale.clone();
    patch.name = Some("renamed".into());
    patch.extra.insert("k".into(), json!(1));
    let saved = db.allocation_update_meta(&patch).await.unwrap();
    assert_eq!(saved.name.as_deref(), Some("renamed"));
    assert_eq!(saved.extra.get("k"), Some(&json!(1)));
    assert_eq!(saved.state, ironic_model::AllocationState::Active);
    assert_eq!(saved.node_id, Some(n.id));

    let stale = allocating(db, "rc-meta-2", 1, &[]).await;
    assert!(
        db.allocation_take_over(stale.id, Some(ConductorId(1)), ConductorId(2))
            .await
            .unwrap()
    );
    let mut patch = stale.clone();
    patch.extra.insert("k".into(), json!(2));
    let saved = db.allocation_update_meta(&patch).await.unwrap();
    assert_eq!(saved.extra.get("k"), Some(&json!(2)));
    assert_eq!(saved.conductor_affinity, Some(ConductorId(2)));
    assert_eq!(saved.state, ironic_model::AllocationState::Allocating);
}

/// Runbooks and inspection rules are paged in the database: by the sort key then id, in
/// both directions, a page after the marker; a project sees public runbooks and its own;
/// priorities sort as numbers.
async fn catalogues_page_by_key_then_id(db: &Db) {
    use ironic_model::inspection_rule::InspectionRule;
    use ironic_model::runbook::Runbook;
    let at = chrono::Utc::now();
    for (i, (owner, public)) in [
        (Some("p1"), false),
        (None, true),
        (Some("p2"), false),
        (Some("p1"), false),
    ]
    .into_iter()
    .enumerate()
    {
        db.runbook_create(&Runbook {
            id: 0,
            uuid: ironic_model::RunbookUuid::new_v4(),
            name: format!("CUSTOM_RB_{}", 3 - i),
            description: None,
            steps: Vec::new(),
            traits: Vec::new(),
            disable_ramdisk: false,
            public,
            owner: owner.map(str::to_string),
            extra: Default::default(),
            created_at: at,
            updated_at: None,
        })
        .await
        .unwrap();
    }
    let names = |l: Vec<Runbook>| l.into_iter().map(|r| r.name).collect::<Vec<_>>();
    let all = db
        .runbook_list("name", false, None, 10, None)
        .await
        .unwrap();
    assert_eq!(
        names(all.clone()),
        ["CUSTOM_RB_0", "CUSTOM_RB_1", "CUSTOM_RB_2", "CUSTOM_RB_3"]
    );
    let next = db
        .runbook_list("name", false, Some(&all[1]), 1, None)
        .await
        .unwrap();
    assert_eq!(names(next), ["CUSTOM_RB_2"]);
    let back = db
        .runbook_list("name", true, Some(&all[2]), 10, None)
        .await
        .unwrap();
    assert_eq!(names(back), ["CUSTOM_RB_1", "CUSTOM_RB_0"]);
    let p1 = db
        .runbook_list("id", false, None, 10, Some("p1"))
        .await
        .unwrap();
    assert_eq!(names(p1), ["CUSTOM_RB_3", "CUSTOM_RB_2", "CUSTOM_RB_0"]);
    let p1_after = db
        .runbook_list("id", false, Some(&all[2]), 10, Some("p1"))
        .await
        .unwrap();
    assert_eq!(names(p1_after), ["CUSTOM_RB_0"]);
    let r = db.runbook_list("steps", false, None, 10, None).await;
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");

    for (priority, description) in [(10, "ten"), (2, "two"), (100, "hundred"), (2, "two again")] {
        db.inspection_rule_create(&InspectionRule {
            id: 0,
            uuid: ironic_model::RuleUuid::new_v4(),
            description: Some(description.into()),
            priority,
            sensitive: false,
            phase: "main".into(),
            conditions: Vec::new(),
            actions: Vec::new(),
            built_in: false,
            created_at: at,
            updated_at: None,
        })
        .await
        .unwrap();
    }
    let descs = |l: Vec<InspectionRule>| {
        l.into_iter()
            .map(|r| r.description.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let by_priority = db
        .inspection_rule_list("priority", false, None, 10)
        .await
        .unwrap();
    assert_eq!(
        descs(by_priority.clone()),
        ["two", "two again", "ten", "hundred"]
    );
    let page = db
        .inspection_rule_list("priority", true, Some(&by_priority[2]), 2)
        .await
        .unwrap();
    assert_eq!(descs(page), ["two again", "two"]);
}
