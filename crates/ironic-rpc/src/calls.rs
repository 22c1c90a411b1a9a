//! The conductor calls: one request type per method of the proto's `Conductor`
//! service, with what the call needs (not whole rows), its reply type, its wire
//! message and its route, all generated from the proto by `build.rs`; the list of
//! calls, also generated, makes [`crate::Handlers`] and the dispatch tables. Written
//! here: how each reply message reads as a Rust value, and the one call whose fields
//! do not map one to one onto its message's.
//!
//! Adding a call: its request message and `rpc` line (with its `(call)` option) in
//! `proto/`, its handler in the conductor, its use in the API (`docs/architecture.md`,
//! "Adding a conductor call").

use ironic_catalog::steps::{OfferedStep, Requested};
use ironic_model::deploy_template::TemplateStep;
use ironic_model::node::JsonObject;
use ironic_model::patch::PatchOp;
use ironic_model::port::{Port, Portgroup};
use ironic_model::volume::{VolumeConnector, VolumeTarget};
use ironic_model::{
    Allocation, AllocationRef, ConnectorUuid, Error, NewAllocation, Node, PortUuid, PortgroupUuid,
    TargetUuid, Version,
};

use crate::contract::{Call, Reply, Route, WireReply, contract};
use crate::convert::{
    allocation_from_pb, bad, node_from_pb, node_to_pb, port_from_pb, port_to_pb, portgroup_from_pb,
    portgroup_to_pb, volume_connector_from_pb, volume_connector_to_pb, volume_target_from_pb,
    volume_target_to_pb,
};
use crate::pb::conductor_methods as m;
use crate::{NodeRef, pb};

// ---------------------------------------------------------------------------------------
// Replies: how each reply message reads as a Rust value. A generated call names its
// reply through [`WireReply`].

impl Reply for () {
    type Wire = pb::Empty;
    fn to_wire(self) -> pb::Empty {
        pb::Empty {}
    }
    fn from_wire(_: pb::Empty) -> Result<(), Error> {
        Ok(())
    }
}

impl Reply for Node {
    type Wire = pb::NodeReply;
    fn to_wire(self) -> pb::NodeReply {
        pb::NodeReply {
            node: Some(node_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::NodeReply) -> Result<Node, Error> {
        node_from_pb(w.node.ok_or_else(|| bad("node reply"))?)
    }
}

impl Reply for Vec<String> {
    type Wire = pb::TraitsReply;
    fn to_wire(self) -> pb::TraitsReply {
        pb::TraitsReply { traits: self }
    }
    fn from_wire(w: pb::TraitsReply) -> Result<Vec<String>, Error> {
        Ok(w.traits)
    }
}

impl Reply for Allocation {
    type Wire = pb::AllocationReply;
    fn to_wire(self) -> pb::AllocationReply {
        pb::AllocationReply {
            allocation: Some(crate::convert::allocation_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::AllocationReply) -> Result<Allocation, Error> {
        allocation_from_pb(w.allocation)
    }
}

impl Reply for Port {
    type Wire = pb::PortReply;
    fn to_wire(self) -> pb::PortReply {
        pb::PortReply {
            port: Some(port_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::PortReply) -> Result<Port, Error> {
        port_from_pb(w.port)
    }
}

impl Reply for Portgroup {
    type Wire = pb::PortgroupReply;
    fn to_wire(self) -> pb::PortgroupReply {
        pb::PortgroupReply {
            portgroup: Some(portgroup_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::PortgroupReply) -> Result<Portgroup, Error> {
        portgroup_from_pb(w.portgroup)
    }
}

impl Reply for VolumeConnector {
    type Wire = pb::VolumeConnectorReply;
    fn to_wire(self) -> pb::VolumeConnectorReply {
        pb::VolumeConnectorReply {
            connector: Some(volume_connector_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::VolumeConnectorReply) -> Result<Self, Error> {
        volume_connector_from_pb(w.connector)
    }
}

impl Reply for VolumeTarget {
    type Wire = pb::VolumeTargetReply;
    fn to_wire(self) -> pb::VolumeTargetReply {
        pb::VolumeTargetReply {
            target: Some(volume_target_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::VolumeTargetReply) -> Result<Self, Error> {
        volume_target_from_pb(w.target)
    }
}

/// A JSON document a conductor answers with (management reads, vendor passthru).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonDoc(pub serde_json::Value);

impl Reply for JsonDoc {
    type Wire = pb::JsonReply;
    fn to_wire(self) -> pb::JsonReply {
        pb::JsonReply {
            json: self.0.to_string(),
        }
    }
    fn from_wire(w: pb::JsonReply) -> Result<JsonDoc, Error> {
        serde_json::from_str(&w.json)
            .map(JsonDoc)
            .map_err(|_| bad("json reply"))
    }
}

/// The VIFs attached to a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Vifs(pub Vec<String>);

impl Reply for Vifs {
    type Wire = pb::VifsReply;
    fn to_wire(self) -> pb::VifsReply {
        pb::VifsReply { vifs: self.0 }
    }
    fn from_wire(w: pb::VifsReply) -> Result<Vifs, Error> {
        Ok(Vifs(w.vifs))
    }
}

/// `None`: the driver cannot list its steps yet (its agent is starting).
impl Reply for Option<Vec<OfferedStep>> {
    type Wire = pb::StepsReply;
    fn to_wire(self) -> pb::StepsReply {
        pb::StepsReply {
            pending: self.is_none(),
            steps: self
                .unwrap_or_default()
                .into_iter()
                .map(|s| pb::StepSpec {
                    interface: s.interface,
                    step: s.step,
                    priority: i32::try_from(s.priority).unwrap_or(i32::MAX),
                    abortable: s.abortable,
                    argsinfo_json: s.argsinfo.to_string(),
                    requires_ramdisk: s.requires_ramdisk,
                })
                .collect(),
        }
    }
    fn from_wire(w: pb::StepsReply) -> Result<Self, Error> {
        if w.pending {
            return Ok(None);
        }
        w.steps
            .into_iter()
            .map(|s| {
                Ok(OfferedStep {
                    interface: s.interface,
                    step: s.step,
                    priority: u32::try_from(s.priority).map_err(|_| bad("step priority"))?,
                    abortable: s.abortable,
                    argsinfo: serde_json::from_str(&s.argsinfo_json)
                        .map_err(|_| bad("step argsinfo"))?,
                    requires_ramdisk: s.requires_ramdisk,
                })
            })
            .collect::<Result<Vec<_>, Error>>()
            .map(Some)
    }
}

/// One interface's validation (`GET /v1/nodes/{node}/validate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCheck {
    pub interface: String,
    /// `None`: the implementation does not support the interface.
    pub result: Option<bool>,
    pub reason: Option<String>,
}

impl Reply for Vec<InterfaceCheck> {
    type Wire = pb::ValidateReply;
    fn to_wire(self) -> pb::ValidateReply {
        pb::ValidateReply {
            interfaces: self
                .into_iter()
                .map(|c| {
                    (
                        c.interface,
                        pb::InterfaceValidation {
                            result: c.result.unwrap_or(false),
                            supported: c.result.is_some(),
                            reason: c.reason,
                        },
                    )
                })
                .collect(),
        }
    }
    fn from_wire(w: pb::ValidateReply) -> Result<Self, Error> {
        Ok(w.interfaces
            .into_iter()
            .map(|(interface, v)| InterfaceCheck {
                interface,
                result: v.supported.then_some(v.result),
                reason: v.reason,
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------
// Requests

// Every request type and its `impl Call` are generated from the proto (`build.rs`):
// the struct named after the method, its fields after the request message's, routing
// and retry safety from the method's `(call)` option; and the `contract!` list that
// makes `Handlers` and the dispatch tables.
include!(concat!(env!("OUT_DIR"), "/calls.rs"));

/// Reply messages and their Rust replies.
impl WireReply for pb::Empty {
    type Reply = ();
}

impl WireReply for pb::NodeReply {
    type Reply = Node;
}

impl WireReply for pb::TraitsReply {
    type Reply = Vec<String>;
}

impl WireReply for pb::AllocationReply {
    type Reply = Allocation;
}

impl WireReply for pb::PortReply {
    type Reply = Port;
}

impl WireReply for pb::PortgroupReply {
    type Reply = Portgroup;
}

impl WireReply for pb::VolumeConnectorReply {
    type Reply = VolumeConnector;
}

impl WireReply for pb::VolumeTargetReply {
    type Reply = VolumeTarget;
}

impl WireReply for pb::JsonReply {
    type Reply = JsonDoc;
}

impl WireReply for pb::VifsReply {
    type Reply = Vifs;
}

impl WireReply for pb::StepsReply {
    type Reply = Option<Vec<OfferedStep>>;
}

impl WireReply for pb::ValidateReply {
    type Reply = Vec<InterfaceCheck>;
}

// Written by hand (`manual` in the proto): two fields of the message are one here.

/// Ejects virtual media (1.89), those of `device_types` or (`None`) every one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachVirtualMedia {
    pub node: NodeRef,
    pub device_types: Option<Vec<String>>,
}

impl Call for DetachVirtualMedia {
    const METHOD: &'static str = m::DETACH_VIRTUAL_MEDIA;
    type Reply = ();
    type Wire = pb::DetachVirtualMediaRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DetachVirtualMediaRequest {
        pb::DetachVirtualMediaRequest {
            all: self.device_types.is_none(),
            node: crate::convert::Field::to_wire(self.node),
            device_types: self.device_types.unwrap_or_default(),
        }
    }
    fn from_wire(w: pb::DetachVirtualMediaRequest) -> Result<Self, Error> {
        Ok(DetachVirtualMedia {
            node: crate::convert::Field::from_wire(w.node, "node")?,
            device_types: (!w.all).then_some(w.device_types),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The Rust calls and the proto's `Conductor` service name the same methods with
    /// the same request and reply messages.
    #[test]
    fn calls_match_the_proto_service() {
        let mut rust = signatures();
        let mut proto: Vec<_> = m::ALL.to_vec();
        rust.sort_unstable();
        proto.sort_unstable();
        assert_eq!(rust, proto);
        assert_eq!(METHODS.len(), m::ALL.len());
    }

    /// Metric labels name only methods of the contract.
    #[test]
    fn metric_labels_come_from_the_contract() {
        use crate::contract::method_label;
        for m in METHODS {
            assert_eq!(method_label(m), *m);
        }
        for other in [
            "",
            "fly",
            "create_node ",
            "CREATE_NODE",
            &"x".repeat(10_000),
        ] {
            assert_eq!(method_label(other), "unknown");
        }
    }

    /// Which calls may be sent again after their conductor died.
    #[test]
    fn only_calls_with_one_outcome_are_repeated() {
        let node = NodeRef {
            id: ironic_model::NodeId(1),
            uuid: ironic_model::NodeUuid::parse("6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a").unwrap(),
            driver: "fake-hardware".into(),
            conductor_group: String::new(),
        };
        let power = |s: &str| ChangeNodePowerState {
            node: node.clone(),
            new_state: s.into(),
            timeout_secs: None,
        };
        assert!(power("power off").retry_safe());
        assert!(power("power on").retry_safe());
        assert!(!power("rebooting").retry_safe());
        assert!(!power("soft rebooting").retry_safe());
        assert!(Ping.retry_safe());
        assert!(DestroyNode { node: node.clone() }.retry_safe());
        let verb = DoProvisioningAction {
            node: node.clone(),
            action: "provide".into(),
        };
        assert!(verb.retry_safe());
        assert!(verb.lost_hint().contains("provision_state"));
        assert!(!GetNodeWithToken { node: node.clone() }.retry_safe());
    }

    /// The calls written by hand route and repeat as their `(call)` option says.
    #[test]
    fn manual_calls_follow_their_options() {
        let node = NodeRef {
            id: ironic_model::NodeId(1),
            uuid: ironic_model::NodeUuid::parse("6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a").unwrap(),
            driver: "fake-hardware".into(),
            conductor_group: String::new(),
        };
        let detach = DetachVirtualMedia {
            node: node.clone(),
            device_types: None,
        };
        assert_eq!(
            MANUAL,
            &[(DetachVirtualMedia::METHOD, "node", detach.retry_safe())]
        );
        assert_eq!(detach.route(), Route::Owner(node));
    }

    fn round_trip<C: Call + Clone + PartialEq + std::fmt::Debug>(c: C) {
        let back = C::from_wire(c.clone().to_wire()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn requests_round_trip() {
        let node = NodeRef {
            id: ironic_model::NodeId(3),
            uuid: ironic_model::NodeUuid::parse("1be26c0b-03f2-4d2e-ae87-c02d7f33c123").unwrap(),
            driver: "fake-hardware".into(),
            conductor_group: "g".into(),
        };
        round_trip(DetachVirtualMedia {
            node: node.clone(),
            device_types: None,
        });
        round_trip(DetachVirtualMedia {
            node: node.clone(),
            device_types: Some(vec![]),
        });
        round_trip(AttachVirtualMedia {
            node: node.clone(),
            device_type: "cdrom".into(),
            image_url: "http://192.0.2.1/boot.iso".into(),
            image_download_source: "local".into(),
        });
        round_trip(DoNodeService {
            node: node.clone(),
            steps: vec![Requested {
                interface: "vendor".into(),
                step: "log_passthrough".into(),
                args: Default::default(),
            }],
            disable_ramdisk: None,
        });
        round_trip(DoNodeClean {
            node: node.clone(),
            steps: vec![Requested {
                interface: "deploy".into(),
                step: "sleep".into(),
                args: serde_json::json!({"seconds": 1})
                    .as_object()
                    .unwrap()
                    .clone(),
            }],
            disable_ramdisk: Some(true),
        });
        let mut extra = ironic_model::node::JsonObject::new();
        extra.insert("k".into(), serde_json::json!([1]));
        round_trip(CreateAllocation {
            allocation: NewAllocation {
                uuid: ironic_model::AllocationUuid::parse("5b3f0c2a-8d4e-4f6b-9a1c-2e7d3f4a5b6c")
                    .unwrap(),
                name: Some("a".into()),
                resource_class: Some("rc".into()),
                candidate_nodes: vec![ironic_model::NodeUuid::new_v4()],
                traits: vec!["CUSTOM_X".into()],
                owner: None,
                extra,
            },
            backfill: Some(node.clone()),
        });
        round_trip(DestroyAllocation {
            allocation: AllocationRef {
                id: ironic_model::AllocationId(9),
                uuid: ironic_model::AllocationUuid::parse("5b3f0c2a-8d4e-4f6b-9a1c-2e7d3f4a5b6c")
                    .unwrap(),
            },
        });
        round_trip(VifAttach {
            node: node.clone(),
            vif_id: "v".into(),
            port_uuid: None,
            portgroup_uuid: Some(PortgroupUuid::new_v4()),
        });
        round_trip(Heartbeat {
            node: node.clone(),
            callback_url: "https://192.0.2.1:9999".into(),
            agent_version: Some("10.1.0".into()),
            agent_token: Some("t".into()),
            agent_verify_ca: None,
            agent_status: Some("start".into()),
            agent_status_message: None,
        });
        round_trip(DestroyPort {
            node: node.clone(),
            port_uuid: PortUuid::new_v4(),
        });
        let mut inventory = JsonObject::new();
        inventory.insert(
            "interfaces".into(),
            serde_json::json!([{"mac_address": "52:54:00:00:00:01"}]),
        );
        round_trip(ContinueInspection {
            node: node.clone(),
            inventory,
            plugin_data: JsonObject::new(),
        });
        round_trip(DoNodeDeploy {
            node,
            rebuild: true,
            configdrive: Some(serde_json::json!({"meta_data": {}})),
            deploy_steps: vec![ironic_model::deploy_template::TemplateStep {
                interface: "deploy".into(),
                step: "deploy".into(),
                args: serde_json::Map::new(),
                priority: 0,
            }],
        });
    }

    #[test]
    fn replies_round_trip() {
        let steps = Some(vec![OfferedStep {
            interface: "deploy".into(),
            step: "sleep".into(),
            priority: 0,
            abortable: true,
            argsinfo: serde_json::json!({"seconds": {"description": "d", "required": true}}),
            requires_ramdisk: true,
        }]);
        assert_eq!(Reply::from_wire(steps.clone().to_wire()).ok(), Some(steps));
        let none: Option<Vec<OfferedStep>> = None;
        assert_eq!(
            <Option<Vec<OfferedStep>> as Reply>::from_wire(none.to_wire()).ok(),
            Some(None)
        );
    }

    #[test]
    fn malformed_requests_are_invalid() {
        assert!(matches!(
            CreateAllocation::from_wire(pb::CreateAllocationRequest::default()),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            UpdateNode::from_wire(pb::UpdateNodeRequest::default()),
            Err(Error::Invalid(_))
        ));
    }
}
