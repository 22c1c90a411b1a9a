#![allow(clippy::unwrap_used)]
//! Every list filter and sort key is served from an index on PostgreSQL: with tables
//! seeded large enough for the planner to prefer an index, and `ANALYZE` run, the plan
//! (`EXPLAIN (FORMAT JSON)`) of the query behind each filter, each sort key (both
//! directions, and from a marker) and the combinations clients send holds no sequential
//! scan of a big table. A filter or sort key added without an index fails here; the
//! destructurings below fail to compile until a new filter is added to the cases.

use ironic_db::allocations::{self, AllocationFilter};
use ironic_db::deploy_templates;
use ironic_db::nodes::sort_keys;
use ironic_db::ports::{NicListQuery, PORT_SORT_KEYS, PORTGROUP_SORT_KEYS};
use ironic_db::testing::TestDb;
use ironic_db::{Db, NodeFilter, NodeListQuery};
use ironic_model::NodeId;
use ironic_model::states::ProvisionState;
use serde_json::Value;
use sqlx::Connection;

const BIG: &[&str] = &[
    "nodes",
    "node_descriptions",
    "allocations",
    "ports",
    "portgroups",
    "deploy_templates",
];

/// A fleet as operators have it: most nodes available or active, a few in maintenance,
/// retired or faulty, owners and lessees among many projects, a few shards, chassis and
/// parents, most optional fields empty.
const SEED: &str = r#"
INSERT INTO nodes (uuid, name, driver, provision_state, target_provision_state,
    provision_updated_at, power_state, target_power_state, console_enabled, maintenance,
    maintenance_reason, fault, last_error, reservation, inspection_started_at,
    inspection_finished_at, resource_class, conductor_group, automated_clean, protected,
    protected_reason, owner, lessee, description, retired, retired_reason, boot_mode,
    secure_boot, shard, parent_node, disable_power_off, instance_uuid, instance_name,
    health, chassis_uuid, bios_interface, boot_interface, console_interface,
    deploy_interface, firmware_interface, inspect_interface, management_interface,
    network_interface, power_interface, raid_interface, rescue_interface,
    storage_interface, vendor_interface, created_at, updated_at)
SELECT md5('node' || g)::uuid::text,
    'node-' || g,
    (ARRAY['fake-hardware', 'redfish', 'ipmi'])[1 + g % 3],
    CASE WHEN g % 10 < 6 THEN 'available' WHEN g % 10 < 9 THEN 'active'
         WHEN g % 20 = 9 THEN 'manageable' ELSE 'deploying' END,
    CASE WHEN g % 20 = 19 THEN 'active' END,
    now() - g * interval '1 minute',
    CASE WHEN g % 100 = 7 THEN NULL WHEN g % 2 = 0 THEN 'power on' ELSE 'power off' END,
    CASE WHEN g % 500 = 3 THEN 'power on' END,
    g % 400 = 1,
    g % 100 = 1,
    CASE WHEN g % 100 = 1 THEN 'disk ' || g END,
    CASE WHEN g % 200 = 1 THEN 'power failure' WHEN g % 500 = 11 THEN 'clean failure' END,
    CASE WHEN g % 150 = 5 THEN 'failed ' || g END,
    CASE WHEN g % 300 = 2 THEN 'conductor-' || g % 3 END,
    CASE WHEN g % 50 = 4 THEN now() - g * interval '1 hour' END,
    CASE WHEN g % 50 = 4 THEN now() - g * interval '1 hour' + interval '5 minutes' END,
    'rc-' || g % 8,
    'group-' || g % 4,
    CASE WHEN g % 30 = 0 THEN g % 60 = 0 END,
    g % 250 = 6,
    CASE WHEN g % 250 = 6 THEN 'kept' END,
    'project-' || g % 200,
    CASE WHEN g % 7 = 0 THEN 'tenant-' || g % 300 END,
    -- Half the fleet described: 10,000 rows of node_descriptions, where a trigram
    -- index beats reading them all (at 2,000 it does not, and the planner knows it).
    CASE WHEN g % 2 = 0 THEN 'rack ' || g % 97 || ' row ' || g % 13 END,
    g % 100 = 2,
    CASE WHEN g % 100 = 2 THEN 'old' END,
    CASE WHEN g % 3 = 0 THEN 'uefi' WHEN g % 3 = 1 THEN 'bios' END,
    CASE WHEN g % 9 = 0 THEN g % 18 = 0 END,
    CASE WHEN g % 2 = 0 THEN 'shard-' || g % 16 END,
    CASE WHEN g % 1000 = 8 THEN md5('node' || (g - 8))::uuid::text END,
    g % 333 = 0,
    CASE WHEN g % 10 BETWEEN 6 AND 8 THEN md5('instance' || g)::uuid::text END,
    CASE WHEN g % 10 BETWEEN 6 AND 8 THEN 'server-' || g END,
    CASE WHEN g % 40 = 0 THEN 'Critical' WHEN g % 2 = 0 THEN 'OK' END,
    CASE WHEN g % 5 = 0 THEN md5('chassis' || g % 400)::uuid::text END,
    CASE WHEN g % 3 = 0 THEN 'redfish' END, CASE WHEN g % 3 = 0 THEN 'ipxe' END,
    CASE WHEN g % 11 = 0 THEN 'no-console' END, CASE WHEN g % 3 = 0 THEN 'direct' END,
    CASE WHEN g % 3 = 0 THEN 'redfish' END, CASE WHEN g % 3 = 0 THEN 'agent' END,
    CASE WHEN g % 3 = 0 THEN 'redfish' END, CASE WHEN g % 3 = 0 THEN 'flat' END,
    CASE WHEN g % 3 = 0 THEN 'redfish' END, CASE WHEN g % 13 = 0 THEN 'agent' END,
    CASE WHEN g % 17 = 0 THEN 'agent' END, CASE WHEN g % 19 = 0 THEN 'noop' END,
    CASE WHEN g % 23 = 0 THEN 'no-vendor' END,
    now() - g * interval '1 hour',
    CASE WHEN g % 4 <> 0 THEN now() - g * interval '1 second' END
FROM generate_series(1, 20000) g;

INSERT INTO portgroups (uuid, name, address, node_id, mode, standalone_ports_supported,
    physical_network, category, dynamic_portgroup, created_at, updated_at)
SELECT md5('pg' || g)::uuid::text, CASE WHEN g % 2 = 0 THEN 'bond-' || g END,
    '52:54:01' || regexp_replace(lpad(to_hex(g), 6, '0'), '(..)', ':\1', 'g'),
    g * 10, CASE WHEN g % 3 = 0 THEN '802.3ad' ELSE 'active-backup' END, g % 5 <> 0,
    CASE WHEN g % 2 = 0 THEN 'physnet' || g % 4 END, CASE WHEN g % 6 = 0 THEN 'fast' END,
    g % 20 = 0, now() - g * interval '1 hour',
    CASE WHEN g % 3 <> 0 THEN now() - g * interval '1 second' END
FROM generate_series(1, 2000) g;

INSERT INTO ports (uuid, address, node_id, portgroup_id, pxe_enabled, physical_network,
    is_smartnic, name, description, vendor, category, available_for_dynamic_portgroup,
    created_at, updated_at)
SELECT md5('port' || g)::uuid::text,
    '52:54:00' || regexp_replace(lpad(to_hex(g), 6, '0'), '(..)', ':\1', 'g'),
    1 + (g - 1) % 20000, CASE WHEN g % 20 = 0 THEN g / 20 END, g % 2 = 0,
    CASE WHEN g % 3 = 0 THEN 'physnet' || g % 4 END, g % 100 = 0,
    CASE WHEN g % 4 = 0 THEN 'eth-' || g END,
    CASE WHEN g % 10 = 0 THEN 'uplink to switch ' || g % 77 END,
    CASE WHEN g % 5 = 0 THEN 'mellanox' END, CASE WHEN g % 6 = 0 THEN 'storage' END,
    g % 9 <> 0, now() - g * interval '1 hour',
    CASE WHEN g % 3 <> 0 THEN now() - g * interval '1 second' END
FROM generate_series(1, 40000) g;

INSERT INTO allocations (uuid, name, node_id, state, owner, last_error, resource_class,
    conductor_affinity, created_at, updated_at)
SELECT md5('alloc' || g)::uuid::text, CASE WHEN g % 2 = 0 THEN 'alloc-' || g END,
    CASE WHEN g % 50 <> 0 THEN g END,
    CASE WHEN g % 50 = 0 THEN 'error' WHEN g % 97 = 0 THEN 'allocating' ELSE 'active' END,
    CASE WHEN g % 3 <> 0 THEN 'project-' || g % 200 END,
    CASE WHEN g % 50 = 0 THEN 'no node' END, 'rc-' || g % 8,
    NULL::bigint, now() - g * interval '1 minute',
    CASE WHEN g % 5 <> 0 THEN now() - g * interval '1 second' END
FROM generate_series(1, 10000) g;

INSERT INTO deploy_templates (uuid, name, extra, created_at, updated_at)
SELECT md5('tpl' || g)::uuid::text, 'CUSTOM_TEMPLATE_' || g, '{}',
    now() - g * interval '1 hour', CASE WHEN g % 2 = 0 THEN now() END
FROM generate_series(1, 3000) g;
"#;

/// The sequential scans of big tables in a plan.
fn seq_scans(plan: &Value, found: &mut Vec<String>) {
    match plan {
        Value::Object(o) => {
            if o.get("Node Type").and_then(Value::as_str) == Some("Seq Scan") {
                let rel = o
                    .get("Relation Name")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                if BIG.contains(&rel) {
                    found.push(rel.to_string());
                }
            }
            o.values().for_each(|v| seq_scans(v, found));
        }
        Value::Array(a) => a.iter().for_each(|v| seq_scans(v, found)),
        _ => {}
    }
}

struct Check {
    failures: Vec<String>,
    checked: usize,
}

impl Check {
    fn plan(&mut self, what: &str, plan: Value) {
        self.checked += 1;
        let mut found = Vec::new();
        seq_scans(&plan, &mut found);
        if !found.is_empty() {
            self.failures
                .push(format!("{what}: sequential scan of {found:?}\n{plan:#}"));
        }
    }
}

fn filters(uuid_of: impl Fn(i64) -> String) -> Vec<(String, NodeFilter)> {
    // Every field of NodeFilter: one more fails to compile here until it has a case.
    let NodeFilter {
        driver: _,
        provision_state: _,
        maintenance: _,
        retired: _,
        associated: _,
        instance_uuid: _,
        chassis_uuid: _,
        resource_class: _,
        conductor_group: _,
        fault: _,
        owner: _,
        lessee: _,
        project: _,
        description_contains: _,
        instance_name: _,
        shards: _,
        sharded: _,
        parent_node: _,
        exclude_children: _,
    } = NodeFilter::default();
    let s = |v: &str| Some(v.to_string());
    let base = NodeFilter::default;
    vec![
        (
            "driver".into(),
            NodeFilter {
                driver: s("ipmi"),
                ..base()
            },
        ),
        (
            "provision_state".into(),
            NodeFilter {
                provision_state: Some(ProvisionState::Manageable),
                ..base()
            },
        ),
        (
            "maintenance".into(),
            NodeFilter {
                maintenance: Some(true),
                ..base()
            },
        ),
        (
            "not maintenance".into(),
            NodeFilter {
                maintenance: Some(false),
                ..base()
            },
        ),
        (
            "retired".into(),
            NodeFilter {
                retired: Some(true),
                ..base()
            },
        ),
        (
            "associated".into(),
            NodeFilter {
                associated: Some(true),
                ..base()
            },
        ),
        (
            "unassociated".into(),
            NodeFilter {
                associated: Some(false),
                ..base()
            },
        ),
        (
            "instance_uuid".into(),
            NodeFilter {
                instance_uuid: s("0b8ad7ea-7aac-6b0c-9b9e-b0a4e0f8a7c1"),
                ..base()
            },
        ),
        (
            "chassis_uuid".into(),
            NodeFilter {
                chassis_uuid: Some(uuid_of(5)),
                ..base()
            },
        ),
        (
            "resource_class".into(),
            NodeFilter {
                resource_class: s("rc-3"),
                ..base()
            },
        ),
        (
            "conductor_group".into(),
            NodeFilter {
                conductor_group: s("group-2"),
                ..base()
            },
        ),
        (
            "fault".into(),
            NodeFilter {
                fault: s("power failure"),
                ..base()
            },
        ),
        (
            "owner".into(),
            NodeFilter {
                owner: s("project-17"),
                ..base()
            },
        ),
        (
            "lessee".into(),
            NodeFilter {
                lessee: s("tenant-42"),
                ..base()
            },
        ),
        (
            "project".into(),
            NodeFilter {
                project: s("project-17"),
                ..base()
            },
        ),
        (
            "description_contains".into(),
            NodeFilter {
                description_contains: s("rack 42 row"),
                ..base()
            },
        ),
        (
            "instance_name".into(),
            NodeFilter {
                instance_name: s("server-1007"),
                ..base()
            },
        ),
        (
            "shard".into(),
            NodeFilter {
                shards: Some(vec!["shard-4".into()]),
                ..base()
            },
        ),
        (
            "shards".into(),
            NodeFilter {
                shards: Some(vec!["shard-4".into(), "shard-6".into()]),
                ..base()
            },
        ),
        (
            "sharded".into(),
            NodeFilter {
                sharded: Some(true),
                ..base()
            },
        ),
        (
            "unsharded".into(),
            NodeFilter {
                sharded: Some(false),
                ..base()
            },
        ),
        (
            "parent_node".into(),
            NodeFilter {
                parent_node: Some(uuid_of(1000)),
                ..base()
            },
        ),
        (
            "exclude_children".into(),
            NodeFilter {
                exclude_children: true,
                ..base()
            },
        ),
        // What clients send: Nova's resource tracker and instance lists, the CLI's
        // defaults from 1.83, metal3's and placement-style candidate lists.
        (
            "nova: conductor_group + shard".into(),
            NodeFilter {
                conductor_group: s("group-1"),
                shards: Some(vec!["shard-2".into()]),
                exclude_children: true,
                ..base()
            },
        ),
        (
            "nova: associated in a conductor group".into(),
            NodeFilter {
                associated: Some(true),
                conductor_group: s("group-3"),
                ..base()
            },
        ),
        (
            "available of a resource class".into(),
            NodeFilter {
                provision_state: Some(ProvisionState::Available),
                resource_class: s("rc-5"),
                exclude_children: true,
                ..base()
            },
        ),
        (
            "a project's active nodes".into(),
            NodeFilter {
                project: s("project-9"),
                provision_state: Some(ProvisionState::Active),
                ..base()
            },
        ),
        (
            "maintenance of a driver".into(),
            NodeFilter {
                maintenance: Some(true),
                driver: s("redfish"),
                ..base()
            },
        ),
    ]
}

async fn seeded() -> (TestDb, Db) {
    let t = TestDb::postgres().await.unwrap();
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::raw_sql(SEED).execute(&mut c).await.unwrap();
    // As autovacuum leaves tables: statistics, and the trigram indexes' pending
    // entries merged.
    sqlx::raw_sql("VACUUM ANALYZE")
        .execute(&mut c)
        .await
        .unwrap();
    let _ = c.close().await;
    let db = t.db.clone();
    (t, db)
}

#[tokio::test]
async fn every_list_filter_and_sort_key_is_served_from_an_index() {
    let (t, db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let node_uuid = |g: i64| format!("SELECT md5('node' || {g})::uuid::text");
    let mut uuids = std::collections::HashMap::new();
    for g in [5, 1000, 10_000] {
        let u: String = sqlx::query_scalar(sqlx::AssertSqlSafe(node_uuid(g)))
            .fetch_one(&mut c)
            .await
            .unwrap();
        uuids.insert(g, u);
    }
    let chassis: String = sqlx::query_scalar("SELECT md5('chassis' || 5)::uuid::text")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let _ = c.close().await;
    let mut check = Check {
        failures: Vec::new(),
        checked: 0,
    };
    let page = |filter: NodeFilter, key: &str, desc: bool, marker: Option<String>| NodeListQuery {
        filter,
        sort_key: key.into(),
        sort_desc: desc,
        limit: 100,
        marker,
        fields: None,
        with_traits: true,
    };

    // Each filter (and the combinations clients send), by id, as lists come by default.
    let cases = filters(|g| {
        if g == 5 {
            chassis.clone()
        } else {
            uuids[&g].clone()
        }
    });
    for (what, f) in &cases {
        let plan = db
            .node_list_plan(&page(f.clone(), "id", false, None))
            .await
            .unwrap();
        check.plan(&format!("nodes ?{what}"), plan);
    }
    // Each sort key, both ways, from the start and from a marker in the middle; and
    // with the filters of the issue's slow lists.
    let marker = uuids[&10_000].clone();
    for key in sort_keys() {
        for desc in [false, true] {
            for m in [None, Some(marker.clone())] {
                let what = format!("nodes sort_key={key} desc={desc} marker={}", m.is_some());
                let plan = db
                    .node_list_plan(&page(NodeFilter::default(), key, desc, m))
                    .await;
                check.plan(&what, plan.unwrap());
            }
        }
    }
    for (what, f, key) in [
        (
            "available of a resource class by name",
            NodeFilter {
                provision_state: Some(ProvisionState::Available),
                resource_class: Some("rc-2".into()),
                ..Default::default()
            },
            "name",
        ),
        (
            "a driver by updated_at",
            NodeFilter {
                driver: Some("fake-hardware".into()),
                ..Default::default()
            },
            "updated_at",
        ),
        (
            "maintenance by provision_updated_at",
            NodeFilter {
                maintenance: Some(true),
                ..Default::default()
            },
            "provision_updated_at",
        ),
    ] {
        let plan = db.node_list_plan(&page(f, key, false, None)).await.unwrap();
        check.plan(&format!("nodes {what}"), plan);
    }

    // Allocations: each filter, each sort key.
    let AllocationFilter {
        state: _,
        resource_class: _,
        node_id: _,
        owner: _,
    } = AllocationFilter::default();
    let alloc_filters = [
        AllocationFilter {
            state: Some("error".into()),
            ..Default::default()
        },
        AllocationFilter {
            resource_class: Some("rc-1".into()),
            ..Default::default()
        },
        AllocationFilter {
            node_id: Some(NodeId(4242)),
            ..Default::default()
        },
        AllocationFilter {
            owner: Some("project-7".into()),
            ..Default::default()
        },
    ];
    for f in &alloc_filters {
        let plan = db
            .allocation_list_plan(f, "id", false, None, 100)
            .await
            .unwrap();
        check.plan(&format!("allocations {f:?}"), plan);
    }
    for key in allocations::SORT_KEYS {
        for desc in [false, true] {
            let plan = db
                .allocation_list_plan(&AllocationFilter::default(), key, desc, None, 100)
                .await
                .unwrap();
            check.plan(&format!("allocations sort_key={key} desc={desc}"), plan);
        }
    }

    // The node an allocation takes: by resource class, with traits, among candidates,
    // for an owner, by name.
    let wanting = |traits: &[&str], candidates: &[&str], owner: Option<&str>| {
        let mut a = ironic_model::Allocation::new(
            ironic_model::AllocationUuid::new_v4(),
            Some("rc-3".into()),
        );
        a.traits = traits.iter().map(|t| t.to_string()).collect();
        a.candidate_nodes = candidates
            .iter()
            .map(|t| ironic_model::NodeUuid::parse(t).unwrap())
            .collect();
        a.owner = owner.map(str::to_string);
        a
    };
    for (what, a, name) in [
        ("resource class", wanting(&[], &[], None), None),
        (
            "traits",
            wanting(&["CUSTOM_GPU", "CUSTOM_RAID"], &[], None),
            None,
        ),
        (
            "candidates",
            wanting(&[], &["11111111-1111-1111-1111-111111111111"], None),
            None,
        ),
        ("owner", wanting(&[], &[], Some("project-7")), None),
        ("name", wanting(&[], &[], None), Some("node-42")),
    ] {
        let plan = db.allocation_candidate_plan(&a, name).await.unwrap();
        check.plan(&format!("allocation candidate by {what}"), plan);
    }

    // Ports and port groups: each filter, each sort key.
    let NicListQuery {
        node_id: _,
        portgroup_id: _,
        address: _,
        project: _,
        conductor_groups: _,
        shards: _,
        description_contains: _,
        sort_key: _,
        sort_desc: _,
        marker: _,
        limit: _,
    } = NicListQuery::default();
    let nic = |q: NicListQuery| NicListQuery {
        sort_key: "id".into(),
        limit: 100,
        ..q
    };
    let nic_filters = [
        (
            "node",
            nic(NicListQuery {
                node_id: Some(NodeId(77)),
                ..Default::default()
            }),
        ),
        (
            "portgroup",
            nic(NicListQuery {
                portgroup_id: Some(42),
                ..Default::default()
            }),
        ),
        (
            "address",
            nic(NicListQuery {
                address: Some("52:54:00:00:10:00".into()),
                ..Default::default()
            }),
        ),
        (
            "project",
            nic(NicListQuery {
                project: Some("project-3".into()),
                ..Default::default()
            }),
        ),
        (
            "conductor_groups",
            nic(NicListQuery {
                conductor_groups: Some(vec!["group-1".into()]),
                ..Default::default()
            }),
        ),
        (
            "shards",
            nic(NicListQuery {
                shards: Some(vec!["shard-8".into()]),
                ..Default::default()
            }),
        ),
        (
            "description_contains",
            nic(NicListQuery {
                description_contains: Some("switch 42".into()),
                ..Default::default()
            }),
        ),
    ];
    for (what, q) in &nic_filters {
        check.plan(
            &format!("ports ?{what}"),
            db.port_list_plan(q).await.unwrap(),
        );
    }
    for key in PORT_SORT_KEYS {
        for desc in [false, true] {
            for marker in [None, Some(10_000)] {
                let q = nic(NicListQuery {
                    sort_key: key.to_string(),
                    sort_desc: desc,
                    marker,
                    ..Default::default()
                });
                let what = format!("ports sort_key={key} desc={desc} marker={marker:?}");
                check.plan(&what, db.port_list_plan(&q).await.unwrap());
            }
        }
    }
    for key in PORTGROUP_SORT_KEYS {
        for desc in [false, true] {
            let q = nic(NicListQuery {
                sort_key: key.to_string(),
                sort_desc: desc,
                ..Default::default()
            });
            let what = format!("portgroups sort_key={key} desc={desc}");
            check.plan(&what, db.portgroup_list_plan(&q).await.unwrap());
        }
    }

    // Deploy templates: each sort key.
    for key in deploy_templates::SORT_KEYS {
        for desc in [false, true] {
            let plan = db
                .deploy_template_list_plan(key, desc, None, 100)
                .await
                .unwrap();
            check.plan(
                &format!("deploy_templates sort_key={key} desc={desc}"),
                plan,
            );
        }
    }

    let Check { failures, checked } = check;
    t.cleanup().await;
    assert!(checked > 250, "only {checked} plans were checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} list queries scan a whole table:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The conductors' periodic checks of waiting nodes (the step engine's) and of work a
/// crash interrupted read only the nodes in those states, through the
/// `provision_state` index, not the whole table.
#[tokio::test]
async fn the_checks_of_waiting_and_stuck_nodes_read_an_index() {
    let (t, db) = seeded().await;
    let mut check = Check {
        failures: Vec::new(),
        checked: 0,
    };
    let waits = ["clean wait", "wait call-back", "service wait"];
    let stuck = [
        "deploying",
        "cleaning",
        "verifying",
        "inspecting",
        "adopting",
        "servicing",
        "deleting",
        "inspect wait",
    ];
    for (what, states) in [("waits", &waits[..]), ("stuck", &stuck[..])] {
        let plan = db.nodes_unlocked_in_plan(states).await.unwrap();
        check.plan(what, plan);
    }
    t.cleanup().await;
    assert_eq!(check.checked, 2);
    assert!(check.failures.is_empty(), "{}", check.failures.join("\n"));
}

/// The test can fail: a list by a column without an index is a sequential scan.
#[tokio::test]
async fn a_list_without_an_index_is_caught() {
    let (t, db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::query("DROP INDEX nodes_fault_key_idx")
        .execute(&mut c)
        .await
        .unwrap();
    sqlx::query("ANALYZE nodes").execute(&mut c).await.unwrap();
    let _ = c.close().await;
    let q = NodeListQuery {
        filter: NodeFilter {
            fault: Some("power failure".into()),
            ..Default::default()
        },
        sort_key: "fault".into(),
        limit: 100,
        ..Default::default()
    };
    let mut found = Vec::new();
    seq_scans(&db.node_list_plan(&q).await.unwrap(), &mut found);
    t.cleanup().await;
    assert_eq!(found, vec!["nodes".to_string()]);
}

/// Rows the scans of `nodes` in a plan run with `ANALYZE` read: those they kept and
/// those their filters (or a bitmap's recheck) removed, over all their loops.
fn rows_read(plan: &Value) -> f64 {
    match plan {
        Value::Object(o) => {
            let num = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let own = if o.get("Relation Name").and_then(Value::as_str) == Some("nodes") {
                (num("Actual Rows")
                    + num("Rows Removed by Filter")
                    + num("Rows Removed by Index Recheck"))
                    * num("Actual Loops").max(1.0)
            } else {
                0.0
            };
            own + o.values().map(rows_read).sum::<f64>()
        }
        Value::Array(a) => a.iter().map(rows_read).sum(),
        _ => 0.0,
    }
}

/// A page sorted by id reads about the rows it returns (at most three times a page),
/// whatever ids the matching nodes have.
/// Claims take the lowest free ids, so after a burst of allocations the associated nodes
/// are the first 2,000 by id and the statistics still say otherwise (autovacuum
/// re-analyses after a tenth of the table changed): `?associated=false` walking the
/// primary key passed all of them, `?associated=true` read all of them to sort them by
/// id, and `?project=` (owner or lessee; 100 of the 20,000 nodes, pages of 20) walked
/// the primary key filtering, about 200 rows per row kept (or, as a plain union, read
/// all of the project's nodes).
#[tokio::test]
async fn a_page_reads_about_what_it_returns() {
    let (t, db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    // Statistics stay those of the seed (30% associated, everywhere) on a server whose
    // autovacuum would re-analyse the table during the test.
    sqlx::raw_sql(
        "ALTER TABLE nodes SET (autovacuum_enabled = false);
         UPDATE nodes SET instance_uuid = NULL, instance_name = NULL;
         UPDATE nodes SET instance_uuid = md5('claimed' || id)::uuid::text WHERE id <= 2000;",
    )
    .execute(&mut c)
    .await
    .unwrap();
    let _ = c.close().await;
    let s = |v: &str| Some(v.to_string());
    let mut failures = Vec::new();
    // (case, filter, page, rows it returns, most rows it may read): project-17 owns 100
    // nodes, tenant-42 leases 10 and owns none.
    for (what, filter, limit, rows, most) in [
        (
            "associated",
            NodeFilter {
                associated: Some(true),
                ..Default::default()
            },
            100,
            100,
            300.0,
        ),
        (
            "unassociated",
            NodeFilter {
                associated: Some(false),
                ..Default::default()
            },
            100,
            100,
            300.0,
        ),
        (
            "project",
            NodeFilter {
                project: s("project-17"),
                ..Default::default()
            },
            20,
            20,
            60.0,
        ),
        (
            "project, leased",
            NodeFilter {
                project: s("tenant-42"),
                ..Default::default()
            },
            20,
            10,
            60.0,
        ),
    ] {
        for desc in [false, true] {
            let q = NodeListQuery {
                filter: filter.clone(),
                sort_key: "id".into(),
                sort_desc: desc,
                limit,
                ..Default::default()
            };
            let plan = db.node_list_run_plan(&q).await.unwrap();
            let read = rows_read(&plan);
            let returned = db.node_list(&q).await.unwrap().len();
            assert_eq!(returned, rows, "?{what} desc={desc}");
            if read > most {
                failures.push(format!(
                    "?{what} desc={desc}: read {read} rows for {returned}\n{plan:#}"
                ));
            }
        }
    }
    t.cleanup().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A burst of claims the statistics do not know of: every node unassociated, the table
/// vacuumed and analysed (autovacuum off for it), then the nodes `claimed` (an SQL
/// condition) associated. Returns the uuids of the nodes `markers` (ids), for pages on
/// either side of the claimed block.
async fn claim_after_statistics(
    c: &mut sqlx::PgConnection,
    claimed: &str,
    markers: [i64; 2],
) -> [String; 2] {
    // One statement each: VACUUM cannot run inside the implicit transaction of several.
    for sql in [
        "ALTER TABLE nodes SET (autovacuum_enabled = false)".to_string(),
        "UPDATE nodes SET instance_uuid = NULL, instance_name = NULL".to_string(),
        "VACUUM ANALYZE nodes".to_string(),
        format!(
            "UPDATE nodes SET instance_uuid = md5('claimed' || id)::uuid::text WHERE {claimed}"
        ),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut *c)
            .await
            .unwrap();
    }
    let mut uuids = [String::new(), String::new()];
    for (uuid, id) in uuids.iter_mut().zip(markers) {
        *uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT uuid FROM nodes WHERE id = {id}"
        )))
        .fetch_one(&mut *c)
        .await
        .unwrap();
    }
    uuids
}

/// When the statistics were gathered before any node was associated and a burst of
/// claims then associated a block of 2,000 ids, the unassociated page by id still reads
/// just the page: the pages on either side of the block, both directions, with child
/// nodes left out (1.83), with a filter nearly every node passes. Written
/// `instance_uuid IS NULL`, each was planned as a walk of the primary key (or of the
/// filter's index) through the whole block: both paths cost the same to the planner
/// (migrations/postgres/0019_unassociated_index.sql). Then, with the table's rows out of
/// id order and fresh statistics, a page of 1,000 is still read in order, not as every
/// unassociated node read and sorted.
#[tokio::test]
async fn unassociated_page_after_a_burst_on_statistics_from_before_it() {
    let (t, db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let [before, after] =
        claim_after_statistics(&mut c, "id BETWEEN 101 AND 2100", [100, 2101]).await;
    let mut failures = Vec::new();
    let unassociated = |exclude_children: bool, maintenance: Option<bool>| NodeFilter {
        associated: Some(false),
        exclude_children,
        maintenance,
        ..Default::default()
    };
    // (case, filter, descending, marker, page, rows it returns)
    let mut cases = vec![
        (
            "up into the block",
            unassociated(false, None),
            false,
            &before,
            100,
            100,
        ),
        (
            "down into the block",
            unassociated(false, None),
            true,
            &after,
            100,
            100,
        ),
        (
            "children left out",
            unassociated(true, None),
            false,
            &before,
            100,
            100,
        ),
        (
            // Nodes 100 to 1 but node 8, a child.
            "children left out, down",
            unassociated(true, None),
            true,
            &after,
            100,
            99,
        ),
        (
            "not in maintenance",
            unassociated(false, Some(false)),
            false,
            &before,
            100,
            100,
        ),
    ];
    let mut shuffled = false;
    loop {
        for (what, filter, desc, marker, limit, rows) in cases.drain(..) {
            let q = NodeListQuery {
                filter,
                sort_key: "id".into(),
                sort_desc: desc,
                limit,
                marker: Some(marker.clone()),
                ..Default::default()
            };
            let plan = db.node_list_run_plan(&q).await.unwrap();
            let read = rows_read(&plan);
            let page = db.node_list(&q).await.unwrap();
            assert_eq!(page.len(), rows, "{what}");
            assert!(page.iter().all(|n| n.instance_uuid.is_none()), "{what}");
            let ids: Vec<i64> = page.iter().map(|n| n.id.0).collect();
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            if desc {
                sorted.reverse();
            }
            assert_eq!(ids, sorted, "{what}");
            if read > 3.0 * f64::from(limit) {
                failures.push(format!(
                    "{what}: read {read} rows for a page of {limit}\n{plan:#}"
                ));
            }
        }
        if shuffled {
            break;
        }
        // Every third row rewritten (to the end of the table), statistics gathered.
        for sql in [
            "UPDATE nodes SET updated_at = now() WHERE id % 3 = 0",
            "ANALYZE nodes",
        ] {
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
        cases.push((
            "a page of 1,000, rows out of order",
            unassociated(false, None),
            false,
            &after,
            1000,
            1000,
        ));
        shuffled = true;
    }
    let _ = c.close().await;
    t.cleanup().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A scheduler's list, `?associated=false&resource_class=X` by id, right after a burst
/// claimed 2,000 nodes of class X (the lowest free ids of that class) and before the
/// statistics knew: the pages on either side of the claimed block still read about the
/// page.
///
/// A known miss, kept to be fixed: the planner walks the unassociated index (0019) and
/// passes every unassociated node of the other classes in the block, ~14,700 rows (10 ms
/// here) for a page of 100. A partial index of a class's unassociated nodes in id order
/// (`(COALESCE(resource_class, ''), id) WHERE num_nulls(instance_uuid) > 0`) would read
/// just the page, but the planner does not take it: it costs its 100 rows as random
/// heap reads (the index leads with the class, so it has no correlation with the
/// table's order) against ~800 rows of the unassociated index in table order.
#[tokio::test]
#[ignore = "known miss: ?associated=false&resource_class= right after a burst walks the other classes' unassociated nodes"]
async fn unassociated_page_of_the_class_a_burst_claimed_from() {
    let (t, db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    // Class rc-1 is every eighth id from 1; ids 101..=16100 hold 2,000 of them.
    let markers = claim_after_statistics(
        &mut c,
        "id BETWEEN 101 AND 16100 AND resource_class = 'rc-1'",
        [100, 16101],
    )
    .await;
    let claimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM nodes WHERE instance_uuid IS NOT NULL AND resource_class = 'rc-1'",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(claimed, 2000);
    let mut failures = Vec::new();
    // (case, descending, marker, rows it returns): up from id 100 into the block (the
    // first 100 of the ~490 unclaimed rc-1 nodes above it); down from 16101 (rc-1 ids
    // 1, 9, ..., 97 below it).
    for (what, desc, marker, rows) in [
        ("up into the block", false, &markers[0], 100),
        ("down into the block", true, &markers[1], 13),
    ] {
        let q = NodeListQuery {
            filter: NodeFilter {
                associated: Some(false),
                resource_class: Some("rc-1".into()),
                ..Default::default()
            },
            sort_key: "id".into(),
            sort_desc: desc,
            limit: 100,
            marker: Some(marker.clone()),
            ..Default::default()
        };
        let plan = db.node_list_run_plan(&q).await.unwrap();
        let read = rows_read(&plan);
        let page = db.node_list(&q).await.unwrap();
        assert_eq!(page.len(), rows, "{what}");
        assert!(
            page.iter()
                .all(|n| n.instance_uuid.is_none() && n.resource_class.as_deref() == Some("rc-1")),
            "{what}"
        );
        if read > 300.0 {
            failures.push(format!("{what}: read {read} rows for {rows}\n{plan:#}"));
        }
    }
    let _ = c.close().await;
    t.cleanup().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A description search with fewer matches than `DESCRIPTION_IDS_MAX` is answered by
/// its first statement (ids gathered through the trigram index, the page read by them),
/// not by the whole search that follows an empty page.
#[tokio::test]
async fn description_search_answers_from_its_first_statement() {
    let (t, db) = seeded().await;
    let q = NodeListQuery {
        filter: NodeFilter {
            description_contains: Some("rack 42 row".into()),
            ..Default::default()
        },
        sort_key: "name".into(),
        limit: 20,
        ..Default::default()
    };
    let plan = db.node_list_run_plan(&q).await.unwrap();
    let listed = db.node_list(&q).await.unwrap().len();
    t.cleanup().await;
    assert_eq!(listed, 20);
    assert_eq!(
        plan[0]["Plan"]["Actual Rows"].as_f64(),
        Some(20.0),
        "{plan:#}"
    );
}

/// Every GIN index (the trigram indexes of `?description_contains=`) takes new entries
/// into the index itself, not into a pending list that every search reads whole until a
/// vacuum merges it (migrations/postgres/0020_trigram_no_pending_list.sql), and node
/// writes that leave the description alone do not write `node_descriptions`
/// (migrations/postgres/0021_node_descriptions.sql): after 5,000 such writes of
/// described nodes its rows are the same row versions; after 5,000 changed descriptions
/// the search reads the index pages it read before, give or take a few. A GIN index
/// added without `fastupdate = off` fails the first check; a trigger that copies
/// descriptions on every node write, the row versions'.
#[tokio::test]
async fn description_search_reads_no_pending_list_after_writes() {
    let (t, _db) = seeded().await;
    let mut c = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let lenient: Vec<String> = sqlx::query_scalar(
        "SELECT i.relname::text FROM pg_class i JOIN pg_am a ON a.oid = i.relam \
         WHERE a.amname = 'gin' AND i.relnamespace = 'public'::regnamespace \
         AND NOT coalesce('fastupdate=off' = ANY (i.reloptions), false) ORDER BY 1",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert!(
        lenient.is_empty(),
        "GIN indexes with a pending list: {lenient:?}"
    );
    let search = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT node_id FROM node_descriptions \
                  WHERE description LIKE '%rack 42 %' LIMIT 1001";
    let mut index_pages = Vec::new();
    let mut versions = Vec::new();
    for write in [
        None,
        // Not a HOT update (instance_uuid is indexed): a new entry in every index.
        Some(
            "UPDATE nodes SET instance_uuid = md5('claimed' || id)::uuid::text \
             WHERE id IN (SELECT id FROM nodes WHERE description IS NOT NULL LIMIT 5000)",
        ),
        // Descriptions changed (still matching): new entries in the trigram index.
        Some(
            "UPDATE nodes SET description = description || ' ' \
             WHERE id IN (SELECT id FROM nodes WHERE description IS NOT NULL LIMIT 5000)",
        ),
    ] {
        if let Some(w) = write {
            sqlx::raw_sql(w).execute(&mut c).await.unwrap();
        }
        let plan: Value = sqlx::query_scalar(search).fetch_one(&mut c).await.unwrap();
        index_pages.push(index_scan_pages(&plan, "node_descriptions_trgm_idx"));
        let v: Vec<String> =
            sqlx::query_scalar("SELECT xmin::text FROM node_descriptions ORDER BY node_id")
                .fetch_all(&mut c)
                .await
                .unwrap();
        versions.push(v);
    }
    let _ = c.close().await;
    t.cleanup().await;
    // Every search through the trigram index (not a scan of the table).
    assert!(index_pages.iter().all(|p| *p > 0.0), "{index_pages:?}");
    assert!(versions[0].len() >= 5000, "{}", versions[0].len());
    assert!(
        versions[0] == versions[1],
        "node writes rewrote rows of node_descriptions"
    );
    assert_ne!(versions[1], versions[2], "descriptions changed, rows kept");
    assert!(
        index_pages[2] <= index_pages[0] + 10.0,
        "index pages read before and after 5,000 new descriptions: {index_pages:?}"
    );
}

/// Buffers (shared, hit or read) of the scans of `index` in a JSON plan.
fn index_scan_pages(plan: &Value, index: &str) -> f64 {
    match plan {
        Value::Object(o) => {
            let num = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let own = if o.get("Index Name").and_then(Value::as_str) == Some(index) {
                num("Shared Hit Blocks") + num("Shared Read Blocks")
            } else {
                0.0
            };
            own + o
                .iter()
                .filter(|(k, _)| k.as_str() == "Plan" || k.as_str() == "Plans")
                .map(|(_, v)| index_scan_pages(v, index))
                .sum::<f64>()
        }
        Value::Array(a) => a.iter().map(|v| index_scan_pages(v, index)).sum(),
        _ => 0.0,
    }
}
