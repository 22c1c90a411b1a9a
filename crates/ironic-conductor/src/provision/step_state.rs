//! The state of a step flow, typed: the step list and the index of the running (or
//! held) step ([`Steps`]), and the wait of a step ([`Wait`], with the agent's
//! [`AgentWait`]), read and written here only, at the `driver_internal_info` keys
//! upstream's API shows (`…_steps`, `…_step_index`, `…_step_runner`,
//! `…_step_resume_at`, `agent_wait`, `agent_command_id`, and our `…_step_recheck`).

use ironic_catalog::steps::{Step, StoredStepError};
use ironic_model::Node;
use serde_json::{Value, json};

use super::Flow;

/// A flow's steps as the node stores them: the list, in the order they run, and the
/// index of the step running (or held at, or waiting).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Steps {
    pub list: Vec<Step>,
    pub index: Option<usize>,
}

impl Steps {
    /// The node's steps in `flow` (an empty list when it has none); `Err`: the stored
    /// list cannot be read.
    pub(crate) fn of(flow: Flow, node: &Node) -> Result<Steps, StoredStepError> {
        let dii = &node.driver_internal_info;
        Ok(Steps {
            list: Step::list_from_json(dii.get(steps_key(flow)))?,
            index: dii
                .get(index_key(flow))
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok()),
        })
    }

    /// Stores `list` as the flow's steps (the index left as it is).
    pub(crate) fn set_list(flow: Flow, node: &mut Node, list: &[Step]) {
        node.driver_internal_info.insert(
            steps_key(flow).into(),
            Value::Array(list.iter().map(Step::to_json).collect()),
        );
    }

    /// Stores the index of the running step (`None`: no step runs).
    pub(crate) fn set_index(flow: Flow, node: &mut Node, index: Option<usize>) {
        let dii = &mut node.driver_internal_info;
        match index {
            Some(i) => dii.insert(index_key(flow).into(), json!(i)),
            None => dii.remove(index_key(flow)),
        };
    }

    /// Forgets the flow's steps, list and index.
    pub(crate) fn forget(flow: Flow, node: &mut Node) {
        for k in [steps_key(flow), index_key(flow)] {
            node.driver_internal_info.remove(k);
        }
    }
}

/// The `driver_internal_info` key of the flow's step list (upstream's).
fn steps_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Clean => "clean_steps",
        Flow::Deploy => "deploy_steps",
        Flow::Service => "service_steps",
    }
}

/// The `driver_internal_info` key of the index of the running step (upstream's).
fn index_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Clean => "clean_step_index",
        Flow::Deploy => "deploy_step_index",
        Flow::Service => "service_step_index",
    }
}

/// `driver_internal_info`: what a flow waiting on the agent waits for.
const AGENT_WAIT: &str = "agent_wait";
/// The id of the in-band command waited for.
const AGENT_COMMAND: &str = "agent_command_id";

/// What a step waiting on the node's agent waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentWait {
    /// The ramdisk to boot and its agent to heartbeat.
    Boot,
    /// The in-band command the agent runs (its id; `None`: its last command, as
    /// versions before the id was kept wrote it).
    Command(Option<String>),
    /// The agent was busy when the step was sent: sent again at its next heartbeat.
    Busy,
}

impl AgentWait {
    /// The agent wait the node records, if any.
    pub(crate) fn of(node: &Node) -> Option<AgentWait> {
        let dii = &node.driver_internal_info;
        match dii.get(AGENT_WAIT).and_then(Value::as_str)? {
            "boot" => Some(AgentWait::Boot),
            "busy" => Some(AgentWait::Busy),
            "command" => Some(AgentWait::Command(
                dii.get(AGENT_COMMAND)
                    .and_then(Value::as_str)
                    .map(str::to_string),
            )),
            _ => None,
        }
    }

    /// Records the wait in the node (replacing any other).
    pub(crate) fn set(self, node: &mut Node) {
        let dii = &mut node.driver_internal_info;
        let (name, command) = match self {
            AgentWait::Boot => ("boot", None),
            AgentWait::Busy => ("busy", None),
            AgentWait::Command(id) => ("command", id),
        };
        dii.insert(AGENT_WAIT.into(), json!(name));
        match command {
            Some(id) => dii.insert(AGENT_COMMAND.into(), json!(id)),
            None => dii.remove(AGENT_COMMAND),
        };
    }

    /// Forgets it.
    pub(crate) fn clear(node: &mut Node) {
        for k in [AGENT_WAIT, AGENT_COMMAND] {
            node.driver_internal_info.remove(k);
        }
    }
}

/// A step flow's wait: who may continue it, when, how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wait {
    /// `<host>/<process run>/<this wait>`: a continuation goes on only if the node
    /// still waits with it, so exactly one wins.
    pub token: String,
    /// When a timed wait continues (Unix ms); `None`: it waits for an event.
    pub resume_at: Option<i64>,
    /// The waiting step runs again when the wait ends (`Outcome::Recheck`), rather
    /// than the next one.
    pub recheck: bool,
    /// What the agent is waited for, when it is.
    pub agent: Option<AgentWait>,
}

impl Wait {
    /// The node's wait in `flow`, if it has one.
    pub(crate) fn of(flow: Flow, node: &Node) -> Option<Wait> {
        let dii = &node.driver_internal_info;
        Some(Wait {
            token: dii.get(runner_key(flow))?.as_str()?.to_string(),
            resume_at: dii.get(resume_key(flow)).and_then(Value::as_i64),
            recheck: dii.get(recheck_key(flow)) == Some(&json!(true)),
            agent: AgentWait::of(node),
        })
    }

    /// Whether the node waits in `flow` with `token`.
    pub(crate) fn is(flow: Flow, node: &Node, token: &str) -> bool {
        node.driver_internal_info
            .get(runner_key(flow))
            .and_then(Value::as_str)
            == Some(token)
    }

    /// Writes the wait into the node.
    pub(crate) fn store(self, flow: Flow, node: &mut Node) {
        let dii = &mut node.driver_internal_info;
        dii.insert(runner_key(flow).into(), json!(self.token));
        match self.resume_at {
            Some(at) => dii.insert(resume_key(flow).into(), json!(at)),
            None => dii.remove(resume_key(flow)),
        };
        match self.recheck {
            true => dii.insert(recheck_key(flow).into(), json!(true)),
            false => dii.remove(recheck_key(flow)),
        };
        match self.agent {
            Some(a) => a.set(node),
            None => AgentWait::clear(node),
        }
    }

    /// Forgets the node's wait in `flow` (the step it continues is done, or the flow
    /// ended), the agent's with it.
    pub(crate) fn forget(flow: Flow, node: &mut Node) {
        for k in [runner_key(flow), resume_key(flow), recheck_key(flow)] {
            node.driver_internal_info.remove(k);
        }
        AgentWait::clear(node);
    }
}

/// Who may continue a wait: `<host>/<process run>/<this wait>`.
fn runner_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Clean => "clean_step_runner",
        Flow::Deploy => "deploy_step_runner",
        Flow::Service => "service_step_runner",
    }
}

/// When a timed wait continues (Unix ms).
fn resume_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Clean => "clean_step_resume_at",
        Flow::Deploy => "deploy_step_resume_at",
        Flow::Service => "service_step_resume_at",
    }
}

/// Set when the waiting step runs again when its wait ends (`Outcome::Recheck`).
fn recheck_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Clean => "clean_step_recheck",
        Flow::Deploy => "deploy_step_recheck",
        Flow::Service => "service_step_recheck",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node::blank(
            ironic_model::NodeUuid::new_v4(),
            "fake-hardware".into(),
            ironic_model::Version::MAX,
        )
    }

    /// A wait goes into the node at upstream's keys and comes back the same; forgetting
    /// it leaves nothing of it.
    #[test]
    fn a_wait_round_trips_through_the_node() {
        let mut n = node();
        assert_eq!(Wait::of(Flow::Deploy, &n), None);
        let w = Wait {
            token: "h/run/w".into(),
            resume_at: None,
            recheck: false,
            agent: Some(AgentWait::Command(Some("cmd-1".into()))),
        };
        w.clone().store(Flow::Deploy, &mut n);
        let dii = &n.driver_internal_info;
        assert_eq!(dii["deploy_step_runner"], json!("h/run/w"));
        assert_eq!(dii["agent_wait"], json!("command"));
        assert_eq!(dii["agent_command_id"], json!("cmd-1"));
        assert_eq!(Wait::of(Flow::Deploy, &n), Some(w));
        assert!(Wait::is(Flow::Deploy, &n, "h/run/w"));
        assert!(!Wait::is(Flow::Clean, &n, "h/run/w"), "another flow's keys");

        let timed = Wait {
            token: "h/run/x".into(),
            resume_at: Some(1_700_000_000_000),
            recheck: true,
            agent: None,
        };
        timed.clone().store(Flow::Clean, &mut n);
        assert_eq!(Wait::of(Flow::Clean, &n), Some(timed));
        assert_eq!(n.driver_internal_info.get("agent_wait"), None);

        Wait::forget(Flow::Clean, &mut n);
        Wait::forget(Flow::Deploy, &mut n);
        assert!(
            n.driver_internal_info.is_empty(),
            "{:?}",
            n.driver_internal_info
        );
    }

    /// The list and the index at upstream's keys, each flow its own; forgetting them
    /// leaves nothing; a list that is not one is refused, not read as empty.
    #[test]
    fn steps_round_trip_through_the_node() {
        let mut n = node();
        assert_eq!(
            Steps::of(Flow::Clean, &n),
            Ok(Steps {
                list: vec![],
                index: None
            })
        );
        let list = vec![Step {
            interface: "deploy".into(),
            step: "erase_devices".into(),
            args: Default::default(),
            priority: 10,
            abortable: true,
        }];
        Steps::set_list(Flow::Clean, &mut n, &list);
        Steps::set_index(Flow::Clean, &mut n, Some(0));
        assert_eq!(n.driver_internal_info["clean_step_index"], json!(0));
        assert_eq!(
            n.driver_internal_info["clean_steps"][0]["step"],
            json!("erase_devices")
        );
        assert_eq!(
            Steps::of(Flow::Clean, &n),
            Ok(Steps {
                list: list.clone(),
                index: Some(0)
            })
        );
        assert_eq!(Steps::of(Flow::Deploy, &n).map(|s| s.list.len()), Ok(0));
        Steps::set_index(Flow::Clean, &mut n, None);
        assert_eq!(Steps::of(Flow::Clean, &n).map(|s| s.index), Ok(None));
        Steps::forget(Flow::Clean, &mut n);
        assert!(n.driver_internal_info.is_empty());
        n.driver_internal_info
            .insert("service_steps".into(), json!("not a list"));
        assert!(Steps::of(Flow::Service, &n).is_err());
    }

    #[test]
    fn agent_waits_read_what_earlier_versions_wrote() {
        let mut n = node();
        n.driver_internal_info
            .insert("agent_wait".into(), json!("command"));
        assert_eq!(AgentWait::of(&n), Some(AgentWait::Command(None)));
        n.driver_internal_info
            .insert("agent_wait".into(), json!("something else"));
        assert_eq!(AgentWait::of(&n), None);
        AgentWait::Busy.set(&mut n);
        assert_eq!(AgentWait::of(&n), Some(AgentWait::Busy));
    }
}
