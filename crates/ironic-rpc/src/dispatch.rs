//! Server side: decodes a request body, calls the conductor, encodes the reply. The
//! method names are the contract's (`docs/rpc.md`).

use ironic_model::Error;
use prost::Message;

use crate::convert::{
    allocation_from_pb, allocation_to_pb, error_to_pb, node_from_pb, node_ref_from_pb, node_to_pb,
    patch_from_pb, steps_from_pb,
};
use crate::{ConductorApi, Context, UpdateNode, pb};

/// Methods this conductor serves. Others in the schema answer `UNIMPLEMENTED` until
/// the features behind them land.
pub const SERVED: &[&str] = &[
    "ping",
    "create_node",
    "update_node",
    "set_maintenance",
    "destroy_node",
    "add_node_traits",
    "remove_node_traits",
    "do_provisioning_action",
    "do_node_clean",
    "do_node_deploy",
    "do_node_tear_down",
    "change_node_power_state",
    "validate_driver_interfaces",
    "get_clean_steps",
    "create_allocation",
    "destroy_allocation",
];

fn decode<M: Message + Default>(body: &[u8]) -> Result<M, Error> {
    M::decode(body).map_err(|e| Error::Invalid(format!("Malformed RPC request body: {e}")))
}

fn ok(m: impl Message) -> pb::Reply {
    pb::Reply {
        result: Some(pb::reply::Result::Ok(m.encode_to_vec())),
    }
}

pub fn error_reply(e: &Error) -> pb::Reply {
    pb::Reply {
        result: Some(pb::reply::Result::Error(error_to_pb(e))),
    }
}

/// Runs one call and returns the reply to send back.
pub async fn dispatch(
    api: &dyn ConductorApi,
    ctx: &Context,
    method: &str,
    body: &[u8],
) -> pb::Reply {
    match run(api, ctx, method, body).await {
        Ok(r) => r,
        Err(e) => error_reply(&e),
    }
}

async fn run(
    api: &dyn ConductorApi,
    ctx: &Context,
    method: &str,
    body: &[u8],
) -> Result<pb::Reply, Error> {
    Ok(match method {
        "ping" => {
            let _: pb::PingRequest = decode(body)?;
            ok(pb::Empty {})
        }
        "create_node" => {
            let r: pb::CreateNodeRequest = decode(body)?;
            let node = node_from_pb(
                r.node
                    .ok_or_else(|| Error::invalid("create_node needs a node"))?,
            )?;
            let n = api.create_node(ctx, node).await?;
            ok(pb::NodeReply {
                node: Some(node_to_pb(&n)),
            })
        }
        "update_node" => {
            let r: pb::UpdateNodeRequest = decode(body)?;
            let minor =
                u16::try_from(r.api_minor).map_err(|_| Error::invalid("api_minor out of range"))?;
            let n = api
                .update_node(
                    ctx,
                    UpdateNode {
                        node: node_ref_from_pb(r.node)?,
                        ident: r.ident,
                        patch: patch_from_pb(r.patch)?,
                        version: ironic_model::Version::new(minor),
                        reset_interfaces: r.reset_interfaces,
                    },
                )
                .await?;
            ok(pb::NodeReply {
                node: Some(node_to_pb(&n)),
            })
        }
        "set_maintenance" => {
            let r: pb::SetMaintenanceRequest = decode(body)?;
            let n = api
                .set_maintenance(ctx, node_ref_from_pb(r.node)?, r.on, r.reason)
                .await?;
            ok(pb::NodeReply {
                node: Some(node_to_pb(&n)),
            })
        }
        "destroy_node" => {
            let r: pb::DestroyNodeRequest = decode(body)?;
            api.destroy_node(ctx, node_ref_from_pb(r.node)?).await?;
            ok(pb::Empty {})
        }
        "add_node_traits" => {
            let r: pb::AddNodeTraitsRequest = decode(body)?;
            let traits = api
                .add_node_traits(ctx, node_ref_from_pb(r.node)?, r.traits, r.replace)
                .await?;
            ok(pb::TraitsReply { traits })
        }
        "remove_node_traits" => {
            let r: pb::RemoveNodeTraitsRequest = decode(body)?;
            api.remove_node_traits(ctx, node_ref_from_pb(r.node)?, r.r#trait)
                .await?;
            ok(pb::Empty {})
        }
        "do_provisioning_action" => {
            let r: pb::DoProvisioningActionRequest = decode(body)?;
            api.do_provisioning_action(ctx, node_ref_from_pb(r.node)?, r.action)
                .await?;
            ok(pb::Empty {})
        }
        "do_node_clean" => {
            let r: pb::DoNodeCleanRequest = decode(body)?;
            api.do_node_clean(
                ctx,
                node_ref_from_pb(r.node)?,
                steps_from_pb(r.clean_steps)?,
                r.disable_ramdisk,
            )
            .await?;
            ok(pb::Empty {})
        }
        "do_node_deploy" => {
            let r: pb::DoNodeDeployRequest = decode(body)?;
            let configdrive = r
                .configdrive_json
                .map(|c| {
                    serde_json::from_str(&c)
                        .map_err(|_| Error::invalid("Malformed RPC request: invalid configdrive."))
                })
                .transpose()?;
            api.do_node_deploy(ctx, node_ref_from_pb(r.node)?, r.rebuild, configdrive)
                .await?;
            ok(pb::Empty {})
        }
        "do_node_tear_down" => {
            let r: pb::DoNodeTearDownRequest = decode(body)?;
            api.do_node_tear_down(ctx, node_ref_from_pb(r.node)?)
                .await?;
            ok(pb::Empty {})
        }
        "change_node_power_state" => {
            let r: pb::ChangeNodePowerStateRequest = decode(body)?;
            api.change_node_power_state(
                ctx,
                node_ref_from_pb(r.node)?,
                r.new_state,
                r.timeout_secs,
            )
            .await?;
            ok(pb::Empty {})
        }
        "create_allocation" => {
            let r: pb::CreateAllocationRequest = decode(body)?;
            let backfill = match r.backfill_node {
                Some(n) => Some(node_ref_from_pb(Some(n))?),
                None => None,
            };
            let a = api
                .create_allocation(ctx, allocation_from_pb(r.allocation)?, backfill)
                .await?;
            ok(pb::AllocationReply {
                allocation: Some(allocation_to_pb(&a)),
            })
        }
        "destroy_allocation" => {
            let r: pb::DestroyAllocationRequest = decode(body)?;
            api.destroy_allocation(ctx, allocation_from_pb(r.allocation)?)
                .await?;
            ok(pb::Empty {})
        }
        "get_clean_steps" => {
            let r: pb::GetCleanStepsRequest = decode(body)?;
            let steps = api
                .get_clean_steps(ctx, node_ref_from_pb(r.node)?, r.min_priority)
                .await?;
            ok(pb::StepsReply {
                pending: steps.is_none(),
                steps: steps
                    .unwrap_or_default()
                    .iter()
                    .map(|s| pb::StepSpec {
                        interface: s["interface"].as_str().unwrap_or("").into(),
                        step: s["step"].as_str().unwrap_or("").into(),
                        priority: s["priority"]
                            .as_i64()
                            .and_then(|p| i32::try_from(p).ok())
                            .unwrap_or(0),
                        abortable: s["abortable"].as_bool().unwrap_or(false),
                        argsinfo_json: s["argsinfo"].to_string(),
                    })
                    .collect(),
            })
        }
        "validate_driver_interfaces" => {
            let r: pb::ValidateDriverInterfacesRequest = decode(body)?;
            let list = api
                .validate_driver_interfaces(ctx, node_ref_from_pb(r.node)?)
                .await?;
            ok(pb::ValidateReply {
                interfaces: list
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
            })
        }
        other => pb::Reply {
            result: Some(pb::reply::Result::Error(pb::RpcError {
                kind: pb::ErrorKind::Unimplemented as i32,
                message: format!("Method {other:?} is not implemented by this conductor."),
            })),
        },
    })
}
