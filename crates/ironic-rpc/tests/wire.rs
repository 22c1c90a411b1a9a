//! The wire bytes of every call are stable: one request of each method, with every
//! field set, encodes to the bytes recorded in `tests/wire.golden` and decodes back to
//! itself. A change to the contract's encoding (a renumbered field, another
//! conversion) fails here; adding a method adds a line (`IRONIC_BLESS=1` rewrites the
//! file, to be reviewed like code).
#![allow(clippy::unwrap_used)]

use std::fmt::Debug;

use chrono::DateTime;
use ironic_catalog::steps::Requested;
use ironic_model::deploy_template::TemplateStep;
use ironic_model::node::JsonObject;
use ironic_model::patch::{Op, PatchOp};
use ironic_model::port::{Port, Portgroup};
use ironic_model::volume::{VolumeConnector, VolumeTarget};
use ironic_model::{
    AllocationId, AllocationRef, AllocationUuid, ConnectorUuid, NewAllocation, Node, NodeId,
    NodeRef, NodeUuid, PortUuid, PortgroupUuid, TargetUuid, Version,
};
use ironic_rpc::Call;
use ironic_rpc::calls::*;
use prost::Message;
use serde_json::json;

fn node_ref() -> NodeRef {
    NodeRef {
        id: NodeId(42),
        uuid: NodeUuid::parse("6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a").unwrap(),
        driver: "fake-hardware".into(),
        conductor_group: "g1".into(),
    }
}

fn obj(v: serde_json::Value) -> JsonObject {
    v.as_object().unwrap().clone()
}

fn patch() -> Vec<PatchOp> {
    vec![
        PatchOp {
            op: Op::Add,
            path: "/extra/rack".into(),
            value: Some(json!("r12")),
        },
        PatchOp {
            op: Op::Remove,
            path: "/description".into(),
            value: None,
        },
    ]
}

fn at() -> chrono::DateTime<chrono::Utc> {
    DateTime::from_timestamp(1_700_000_000, 123_000).unwrap()
}

fn node() -> Node {
    let mut n = Node::blank(
        NodeUuid::parse("6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a").unwrap(),
        "fake-hardware".into(),
        Version::new(51),
    );
    n.id = NodeId(42);
    n.name = Some("node-1".into());
    n.extra = obj(json!({"a": [1, 2], "b": {"c": null}}));
    n.interfaces.0[3] = Some("fake".into());
    n.traits = vec!["CUSTOM_A".into(), "CUSTOM_B".into()];
    n.created_at = at();
    n.updated_at = Some(at());
    n
}

fn port() -> Port {
    Port {
        id: 7,
        uuid: PortUuid::parse("b0b8b1c2-7ab5-4a61-b1e4-2a0b0d0a0b01").unwrap(),
        address: "52:54:00:00:00:01".into(),
        node_id: NodeId(42),
        node_uuid: node_ref().uuid,
        portgroup_id: Some(3),
        portgroup_uuid: Some(PortgroupUuid::parse("c1c1c1c1-0000-4000-8000-00000000c1c1").unwrap()),
        extra: obj(json!({"x": 1})),
        internal_info: JsonObject::new(),
        local_link_connection: obj(json!({"switch_id": "s"})),
        pxe_enabled: true,
        physical_network: Some("physnet1".into()),
        is_smartnic: false,
        name: Some("p0".into()),
        description: None,
        vendor: Some("v".into()),
        category: None,
        available_for_dynamic_portgroup: true,
        created_at: at(),
        updated_at: None,
    }
}

fn connector() -> VolumeConnector {
    VolumeConnector {
        id: 9,
        uuid: ConnectorUuid::parse("0c0c0c0c-0000-4000-8000-000000000c0c").unwrap(),
        node_id: NodeId(42),
        node_uuid: node_ref().uuid,
        connector_type: "iqn".into(),
        connector_id: "iqn.2017-10.org.openstack:node-1".into(),
        extra: obj(json!({"x": 1})),
        created_at: at(),
        updated_at: Some(at()),
    }
}

fn target() -> VolumeTarget {
    VolumeTarget {
        id: 10,
        uuid: TargetUuid::parse("07070707-0000-4000-8000-000000000707").unwrap(),
        node_id: NodeId(42),
        node_uuid: node_ref().uuid,
        volume_type: "iscsi".into(),
        volume_id: "vol-1".into(),
        boot_index: 0,
        properties: obj(json!({"target_lun": 0})),
        extra: obj(json!({"y": 2})),
        created_at: at(),
        updated_at: Some(at()),
    }
}

fn portgroup() -> Portgroup {
    Portgroup {
        id: 3,
        uuid: PortgroupUuid::parse("c1c1c1c1-0000-4000-8000-00000000c1c1").unwrap(),
        name: Some("bond0".into()),
        address: Some("52:54:00:00:00:02".into()),
        node_id: NodeId(42),
        node_uuid: node_ref().uuid,
        extra: JsonObject::new(),
        internal_info: obj(json!({"k": "v"})),
        mode: "active-backup".into(),
        properties: obj(json!({"miimon": 100})),
        standalone_ports_supported: true,
        physical_network: None,
        category: Some("c".into()),
        dynamic_portgroup: false,
        created_at: at(),
        updated_at: Some(at()),
    }
}

/// One line: the method and the hex of its request, after checking that it decodes
/// back to the same request.
fn line<C: Call + Clone + PartialEq + Debug>(c: C) -> String {
    let bytes = c.clone().to_wire().encode_to_vec();
    let back = C::from_wire(C::Wire::decode(bytes.as_slice()).unwrap()).unwrap();
    assert_eq!(back, c, "{}", C::METHOD);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} {hex}", C::METHOD)
}

fn all() -> Vec<String> {
    let n = node_ref;
    let steps = || {
        vec![
            Requested {
                interface: "deploy".into(),
                step: "erase_devices".into(),
                args: obj(json!({"seconds": 1})),
            },
            Requested {
                interface: "bios".into(),
                step: "apply_configuration".into(),
                args: JsonObject::new(),
            },
        ]
    };
    vec![
        line(Ping),
        line(CreateNode { node: node() }),
        line(UpdateNode {
            node: n(),
            ident: "node-1".into(),
            patch: patch(),
            version: Version::new(94),
            reset_interfaces: Some(false),
        }),
        line(SetMaintenance {
            node: n(),
            on: true,
            reason: Some("broken fan".into()),
        }),
        line(DestroyNode { node: n() }),
        line(AddNodeTraits {
            node: n(),
            traits: vec!["CUSTOM_X".into(), "CUSTOM_Y".into()],
            replace: true,
        }),
        line(RemoveNodeTraits {
            node: n(),
            one: Some("CUSTOM_X".into()),
        }),
        line(DoProvisioningAction {
            node: n(),
            action: "provide".into(),
        }),
        line(DoNodeClean {
            node: n(),
            steps: steps(),
            disable_ramdisk: Some(true),
        }),
        line(DoNodeService {
            node: n(),
            steps: steps(),
            disable_ramdisk: Some(false),
        }),
        line(DoNodeDeploy {
            node: n(),
            rebuild: true,
            configdrive: Some(json!({"meta_data": {"k": "v"}})),
            deploy_steps: vec![TemplateStep {
                interface: "deploy".into(),
                step: "deploy".into(),
                args: obj(json!({"a": true})),
                priority: 80,
            }],
        }),
        line(DoNodeTearDown { node: n() }),
        line(ChangeNodePowerState {
            node: n(),
            new_state: "power on".into(),
            timeout_secs: Some(30),
        }),
        line(ValidateDriverInterfaces { node: n() }),
        line(GetCleanSteps {
            node: n(),
            min_priority: 10,
        }),
        line(CreateAllocation {
            allocation: NewAllocation {
                uuid: AllocationUuid::parse("a5a7f0a2-1b3c-4d5e-8f90-0a1b2c3d4e5f").unwrap(),
                name: Some("alloc".into()),
                resource_class: Some("baremetal".into()),
                candidate_nodes: vec![
                    NodeUuid::parse("6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a").unwrap(),
                ],
                traits: vec!["CUSTOM_X".into()],
                owner: Some("p".into()),
                extra: obj(json!({"e": 1})),
            },
            backfill: Some(n()),
        }),
        line(DestroyAllocation {
            allocation: AllocationRef {
                id: AllocationId(9),
                uuid: AllocationUuid::parse("a5a7f0a2-1b3c-4d5e-8f90-0a1b2c3d4e5f").unwrap(),
            },
        }),
        line(CreatePort {
            node: n(),
            port: port(),
        }),
        line(UpdatePort {
            node: n(),
            port_uuid: port().uuid,
            patch: patch(),
            version: Version::new(88),
        }),
        line(DestroyPort {
            node: n(),
            port_uuid: port().uuid,
        }),
        line(CreatePortgroup {
            node: n(),
            portgroup: portgroup(),
        }),
        line(UpdatePortgroup {
            node: n(),
            portgroup_uuid: PortgroupUuid::parse("c1c1c1c1-0000-4000-8000-00000000c1c1").unwrap(),
            patch: patch(),
        }),
        line(DestroyPortgroup {
            node: n(),
            portgroup_uuid: PortgroupUuid::parse("c1c1c1c1-0000-4000-8000-00000000c1c1").unwrap(),
        }),
        line(VifList { node: n() }),
        line(VifAttach {
            node: n(),
            vif_id: "vif-1".into(),
            port_uuid: Some(port().uuid),
            portgroup_uuid: None,
        }),
        line(VifDetach {
            node: n(),
            vif_id: "vif-1".into(),
        }),
        line(CreateVolumeConnector {
            node: n(),
            connector: connector(),
        }),
        line(CreateVolumeTarget {
            node: n(),
            target: target(),
        }),
        line(UpdateVolumeConnector {
            node: n(),
            uuid: ConnectorUuid::parse("0c0c0c0c-0000-4000-8000-000000000c0c").unwrap(),
            patch: patch(),
        }),
        line(DestroyVolumeConnector {
            node: n(),
            uuid: ConnectorUuid::parse("0c0c0c0c-0000-4000-8000-000000000c0c").unwrap(),
        }),
        line(UpdateVolumeTarget {
            node: n(),
            uuid: TargetUuid::parse("07070707-0000-4000-8000-000000000707").unwrap(),
            patch: patch(),
        }),
        line(DestroyVolumeTarget {
            node: n(),
            uuid: TargetUuid::parse("07070707-0000-4000-8000-000000000707").unwrap(),
        }),
        line(GetConsoleInformation { node: n() }),
        line(SetConsoleMode {
            node: n(),
            enabled: true,
        }),
        line(GetBootDevice { node: n() }),
        line(SetBootDevice {
            node: n(),
            device: "pxe".into(),
            persistent: true,
        }),
        line(GetSupportedBootDevices { node: n() }),
        line(InjectNmi { node: n() }),
        line(SetTargetRaidConfig {
            node: n(),
            target_raid_config: json!({"logical_disks": [{"size_gb": 10, "raid_level": "1"}]}),
        }),
        line(GetSupportedIndicators { node: n() }),
        line(GetIndicatorState {
            node: n(),
            indicator: "led@system".into(),
        }),
        line(SetIndicatorState {
            node: n(),
            indicator: "led@system".into(),
            state: "BLINKING".into(),
        }),
        line(ChangeNodeBootMode {
            node: n(),
            target: "uefi".into(),
        }),
        line(ChangeNodeSecureBoot {
            node: n(),
            target: true,
        }),
        line(VendorPassthru {
            node: Some(n()),
            driver: "fake-hardware".into(),
            method: "first_method".into(),
            http_method: "POST".into(),
            info: json!({"x": [1, "y"]}),
        }),
        line(VendorPassthru {
            node: None,
            driver: "fake-hardware".into(),
            method: "second_method".into(),
            http_method: "GET".into(),
            info: json!("text"),
        }),
        line(GetNodeWithToken { node: n() }),
        line(Heartbeat {
            node: n(),
            callback_url: "https://192.0.2.1:9999".into(),
            agent_version: Some("10.1.0".into()),
            agent_token: Some("t".into()),
            agent_verify_ca: Some("/ca.pem".into()),
            agent_status: Some("start".into()),
            agent_status_message: Some("ok".into()),
        }),
        line(ContinueInspection {
            node: n(),
            inventory: obj(json!({"interfaces": [{"mac_address": "52:54:00:00:00:01"}]})),
            plugin_data: obj(json!({"p": 1})),
        }),
        line(AttachVirtualMedia {
            node: n(),
            device_type: "cdrom".into(),
            image_url: "http://192.0.2.1/boot.iso".into(),
            image_download_source: "local".into(),
        }),
        line(DetachVirtualMedia {
            node: n(),
            device_types: Some(vec!["cdrom".into()]),
        }),
        line(DetachVirtualMedia {
            node: n(),
            device_types: None,
        }),
        line(GetVirtualMedia { node: n() }),
    ]
}

#[test]
fn requests_encode_as_recorded() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wire.golden");
    let now = all().join("\n") + "\n";
    if std::env::var_os("IRONIC_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let recorded = std::fs::read_to_string(&path).unwrap();
    for (a, b) in recorded.lines().zip(now.lines()) {
        assert_eq!(a, b);
    }
    assert_eq!(recorded.lines().count(), now.lines().count());
}

/// Every method of the contract has a line.
#[test]
fn every_method_is_recorded() {
    let lines = all();
    for m in METHODS {
        assert!(
            lines.iter().any(|l| l.split(' ').next() == Some(*m)),
            "{m} has no request in tests/wire.rs"
        );
    }
}
