//! Pure domain types of the bare metal service: nodes, states, names, microversions,
//! the hash ring and the one error type. Nothing here does IO.
//!
//! Architecture invariant: this crate never touches the network, the database or the
//! file system; everything is a plain function over plain types.

pub mod addr;
pub mod agent;
pub mod allocation;
pub mod boot_params;
pub mod chassis;
pub mod cluster;
pub mod context;
pub mod deploy_template;
pub mod error;
pub mod firmware;
pub mod fsm;
pub mod history;
pub mod ids;
pub mod inspection_rule;
pub mod json_size;
pub mod names;
pub mod network_data;
pub mod node;
pub mod node_ref;
pub mod patch;
pub mod percent;
pub mod port;
pub mod raid;
pub mod ring;
pub mod runbook;
pub mod secrets;
pub mod states;
pub mod version;
pub mod volume;

pub use allocation::{Allocation, AllocationRef, AllocationState, NewAllocation};
pub use context::Context;
pub use error::{Error, Result};
pub use ids::{
    AllocationId, AllocationUuid, ChassisUuid, ConductorId, ConnectorUuid, NodeId, NodeUuid,
    PortUuid, PortgroupUuid, RuleUuid, RunbookUuid, TargetUuid, TemplateId, TemplateUuid,
};
pub use node::Node;
pub use node_ref::NodeRef;
pub use version::Version;
