//! What the conductor asks of a hardware type: its power and management interfaces,
//! running its clean and deploy steps, and validation. Implementations see the node
//! through [`NodeInfo`] and never touch the database; the conductor saves what they
//! report. Calls may take time (an HTTP appliance), so they return futures.

use std::future::Future;
use std::pin::Pin;

use ironic_model::node::JsonObject;

use crate::HardwareType;
use crate::fake::{self, Outcome};
use crate::steps::Step;

/// The future of a driver call; `Err` is the reason, shown to users.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// What a driver sees of a node.
#[derive(Debug, Clone, Copy)]
pub struct NodeInfo<'a> {
    pub uuid: &'a str,
    pub driver_info: &'a JsonObject,
    pub instance_info: &'a JsonObject,
    pub power_state: Option<&'a str>,
}

impl<'a> From<&'a ironic_model::Node> for NodeInfo<'a> {
    fn from(n: &'a ironic_model::Node) -> Self {
        NodeInfo {
            uuid: n.uuid.as_str(),
            driver_info: &n.driver_info,
            instance_info: &n.instance_info,
            power_state: n.power_state.as_deref(),
        }
    }
}

/// Power states a client may ask for, and the state each ends in.
pub fn power_result(target: &str) -> Option<&'static str> {
    match target {
        "power on" | "rebooting" | "soft rebooting" => Some("power on"),
        "power off" | "soft power off" => Some("power off"),
        _ => None,
    }
}

pub trait PowerInterface: Send + Sync {
    /// The node's power state as the hardware reports it.
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String>;
    /// Applies `target` (a state of [`power_result`]); returns the state reached.
    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String>;
}

/// One hardware type's implementation, as the conductor uses it.
pub trait Driver: Send + Sync {
    fn hardware_type(&self) -> &'static HardwareType;
    fn power(&self) -> &dyn PowerInterface;
    /// Runs one clean or deploy step of any of its interfaces.
    fn execute_step<'a>(&'a self, node: NodeInfo<'a>, step: &'a Step) -> DriverFuture<'a, Outcome>;
    /// Checks an interface can work on the node: `Ok(())`, or the reason it cannot.
    fn validate_interface(&self, node: NodeInfo<'_>, interface: &str) -> Result<(), String>;
}

/// `fake-hardware` (and `fake-agent`): no hardware; power follows what it is told
/// (a node never powered reads as off), steps behave as `fake::execute` says.
pub struct Fake {
    pub hw: &'static HardwareType,
}

struct FakePower;

impl PowerInterface for FakePower {
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move { Ok(node.power_state.unwrap_or("power off").to_string()) })
    }

    fn set_power_state<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        target: &'a str,
        _timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String> {
        Box::pin(async move {
            power_result(target)
                .map(str::to_owned)
                .ok_or_else(|| format!("unknown power state {target:?}"))
        })
    }
}

static FAKE_POWER: FakePower = FakePower;

impl Driver for Fake {
    fn hardware_type(&self) -> &'static HardwareType {
        self.hw
    }

    fn power(&self) -> &dyn PowerInterface {
        &FAKE_POWER
    }

    fn execute_step<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        step: &'a Step,
    ) -> DriverFuture<'a, Outcome> {
        Box::pin(async move { fake::execute(step) })
    }

    fn validate_interface(&self, _node: NodeInfo<'_>, interface: &str) -> Result<(), String> {
        match self.hw.default_interface(interface) {
            Some(_) => Ok(()),
            None => Err(format!("{} has no {interface} interface", self.hw.name)),
        }
    }
}

pub static FAKE_HARDWARE_DRIVER: Fake = Fake {
    hw: &crate::FAKE_HARDWARE,
};
pub static FAKE_AGENT_DRIVER: Fake = Fake {
    hw: &crate::FAKE_AGENT,
};

/// The implementation of a hardware type of this build.
pub fn driver(name: &str) -> Option<&'static dyn Driver> {
    match name {
        "fake-hardware" => Some(&FAKE_HARDWARE_DRIVER),
        "fake-agent" => Some(&FAKE_AGENT_DRIVER),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_hardware_type_has_a_driver() {
        for hw in crate::KNOWN {
            let d = driver(hw.name).unwrap_or_else(|| panic!("{}", hw.name));
            assert_eq!(d.hardware_type().name, hw.name);
        }
        assert!(driver("ipmi").is_none());
    }

    #[tokio::test]
    async fn fake_power_follows_orders() {
        let info = JsonObject::new();
        let node = NodeInfo {
            uuid: "u",
            driver_info: &info,
            instance_info: &info,
            power_state: None,
        };
        let p = FAKE_HARDWARE_DRIVER.power();
        assert_eq!(p.get_power_state(node).await.unwrap(), "power off");
        assert_eq!(
            p.set_power_state(node, "rebooting", None).await.unwrap(),
            "power on"
        );
        assert!(p.set_power_state(node, "explode", None).await.is_err());
    }
}
