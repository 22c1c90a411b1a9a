//! The hardware catalogue, pure data: every hardware type this build knows, the
//! default and enabled implementation of each of its interface types, the clean and
//! deploy steps its interfaces declare ([`steps`]), and the deploy plan (the driver's
//! deploy steps merged with the deploy templates a node's instance traits select,
//! [`deploy_plan_for`]).
//!
//! The API reads it to answer `GET /v1/drivers` and to show a node's deploy steps; the
//! conductor reads it to fill in a node's interfaces and to choose steps. Neither
//! needs a driver implementation for that (those live in `ironic-drivers`).
//!
//! Architecture invariant: no IO, no implementation; only declarations and the pure
//! functions over them.

pub mod steps;
pub mod vendor;

use ironic_model::Node;
use ironic_model::deploy_template::DeployTemplate;
use steps::{ArgInfo, Step, StepDecl};

/// One hardware type: for each interface type, the default and the enabled
/// implementations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardwareType {
    pub name: &'static str,
    /// `(interface type, default, enabled)`, one entry per interface type.
    pub interfaces: &'static [(&'static str, &'static str, &'static [&'static str])],
    /// Every clean step its interfaces offer, enabled for automated cleaning (priority
    /// above zero) or not.
    pub clean_steps: &'static [StepDecl],
    /// Its deploy steps; `deploy.deploy` is the core one.
    pub deploy_steps: &'static [StepDecl],
    /// Its clean steps are known only once a ramdisk agent on the node has reported
    /// them (listing them first starts that agent); `false`: known at once.
    pub steps_from_agent: bool,
}

impl HardwareType {
    /// The default implementation of an interface type.
    pub fn default_interface(&self, interface_type: &str) -> Option<&'static str> {
        self.interfaces
            .iter()
            .find(|(t, _, _)| *t == interface_type)
            .map(|(_, d, _)| *d)
    }

    /// The enabled implementations of an interface type (empty if unknown).
    pub fn enabled_interfaces(&self, interface_type: &str) -> &'static [&'static str] {
        self.interfaces
            .iter()
            .find(|(t, _, _)| *t == interface_type)
            .map_or(&[], |(_, _, e)| e)
    }
}

/// `fake-hardware`: every interface succeeds without touching hardware.
pub const FAKE_HARDWARE: HardwareType = HardwareType {
    name: "fake-hardware",
    interfaces: &[
        ("bios", "fake", &["fake", "no-bios"]),
        ("boot", "fake", &["fake"]),
        ("console", "fake", &["fake", "no-console"]),
        ("deploy", "fake", &["fake", "direct"]),
        ("firmware", "fake", &["fake", "no-firmware"]),
        ("inspect", "fake", &["fake", "agent", "no-inspect"]),
        ("management", "fake", &["fake"]),
        ("network", "noop", &["flat", "noop"]),
        ("power", "fake", &["fake"]),
        ("raid", "fake", &["fake", "agent", "no-raid"]),
        ("rescue", "fake", &["fake", "no-rescue"]),
        ("storage", "noop", &["fake", "noop"]),
        ("vendor", "fake", &["fake", "no-vendor"]),
    ],
    clean_steps: FAKE_CLEAN_STEPS,
    deploy_steps: FAKE_DEPLOY_STEPS,
    steps_from_agent: false,
};

/// `fake-agent`: `fake-hardware` whose clean steps come from a (simulated) ramdisk
/// agent, so that listing them the first time answers "not yet, retry" (202).
pub const FAKE_AGENT: HardwareType = HardwareType {
    name: "fake-agent",
    steps_from_agent: true,
    ..FAKE_HARDWARE
};

const SETTINGS: &[ArgInfo] = &[ArgInfo {
    name: "settings",
    description: "A list of settings to apply.",
    required: true,
}];

const SECONDS: &[ArgInfo] = &[ArgInfo {
    name: "seconds",
    description: "How long the step runs, in seconds.",
    required: true,
}];

const fn step(
    interface: &'static str,
    step: &'static str,
    priority: u32,
    abortable: bool,
    args: &'static [ArgInfo],
) -> StepDecl {
    StepDecl {
        interface,
        step,
        priority,
        abortable,
        requires_ramdisk: false,
        args,
    }
}

/// `fake-hardware`'s clean steps: upstream's fake ones, plus steps that take time
/// (`deploy.sleep`, abortable; `deploy.burn_in`, not abortable) so that `clean wait`,
/// aborts and crashes mid-step can be observed, and RAID steps for deploy templates.
pub const FAKE_CLEAN_STEPS: &[StepDecl] = &[
    step("bios", "apply_configuration", 0, false, SETTINGS),
    step("bios", "factory_reset", 0, false, &[]),
    step("bios", "cache_bios_settings", 0, false, &[]),
    step("firmware", "update", 0, false, SETTINGS),
    step("vendor", "log_passthrough", 1, false, &[]),
    step("deploy", "sleep", 0, true, SECONDS),
    step("deploy", "burn_in", 0, false, SECONDS),
    step(
        "raid",
        "create_configuration",
        0,
        false,
        &[
            ArgInfo {
                name: "create_root_volume",
                description: "Whether to create the root volume.",
                required: false,
            },
            ArgInfo {
                name: "create_nonroot_volumes",
                description: "Whether to create the other volumes.",
                required: false,
            },
        ],
    ),
    step("raid", "delete_configuration", 0, false, &[]),
];

/// `fake-hardware`'s deploy steps: the core `deploy.deploy`, and RAID and BIOS steps
/// that run only when a deploy template asks for them (priority 0), and `deploy.sleep`
/// (a step that takes time, under the node lock, so that failures mid-deploy can be
/// observed).
pub const FAKE_DEPLOY_STEPS: &[StepDecl] = &[
    step("deploy", "deploy", 100, false, &[]),
    step("deploy", "sleep", 0, false, SECONDS),
    step(
        "raid",
        "apply_configuration",
        0,
        false,
        &[
            ArgInfo {
                name: "raid_config",
                description: "The RAID configuration to apply.",
                required: true,
            },
            ArgInfo {
                name: "delete_existing",
                description: "Whether to delete the existing RAID configuration first.",
                required: false,
            },
        ],
    ),
    step("bios", "apply_configuration", 0, false, SETTINGS),
    step("bios", "factory_reset", 0, false, &[]),
];

/// Every hardware type this build knows.
pub const KNOWN: &[HardwareType] = &[FAKE_HARDWARE, FAKE_AGENT, ONEVIEW, REDFISH, IPMI];

const RAMDISK_DEPLOY_STEPS: &[StepDecl] = &[StepDecl {
    interface: "deploy",
    step: "deploy",
    priority: 100,
    abortable: false,
    requires_ramdisk: false,
    args: &[],
}];

/// `redfish`'s BIOS steps (clean, service and deploy steps alike): run only when asked
/// for (priority 0).
const REDFISH_BIOS_STEPS: &[StepDecl] = &[
    step("bios", "apply_configuration", 0, false, SETTINGS),
    step("bios", "factory_reset", 0, false, &[]),
];

const REDFISH_DEPLOY_STEPS: &[StepDecl] = &[
    step("deploy", "deploy", 100, false, &[]),
    step("bios", "apply_configuration", 0, false, SETTINGS),
    step("bios", "factory_reset", 0, false, &[]),
];

/// `redfish`: a BMC speaking DMTF Redfish (`ironic-drivers` `redfish/`): power,
/// management (boot device, boot mode, virtual media), out-of-band inspection and the
/// ramdisk deploy from virtual media, BIOS settings and steps.
pub const REDFISH: HardwareType = HardwareType {
    name: "redfish",
    interfaces: &[
        ("bios", "redfish", &["redfish", "no-bios"]),
        (
            "boot",
            "redfish-virtual-media",
            &["redfish-virtual-media", "ipxe", "pxe"],
        ),
        ("console", "no-console", &["no-console"]),
        ("deploy", "direct", &["direct", "ramdisk"]),
        ("firmware", "no-firmware", &["no-firmware"]),
        ("inspect", "redfish", &["redfish", "agent", "no-inspect"]),
        ("management", "redfish", &["redfish"]),
        ("network", "noop", &["flat", "noop"]),
        ("power", "redfish", &["redfish"]),
        ("raid", "no-raid", &["agent", "no-raid"]),
        ("rescue", "no-rescue", &["no-rescue"]),
        ("storage", "noop", &["noop"]),
        ("vendor", "no-vendor", &["no-vendor"]),
    ],
    clean_steps: REDFISH_BIOS_STEPS,
    deploy_steps: REDFISH_DEPLOY_STEPS,
    steps_from_agent: false,
};

/// `ipmi`: a BMC speaking IPMI over LAN, through `ipmitool` (`ironic-drivers`
/// `ipmi.rs`): power, boot device, NMI, and the ramdisk deploy booted from the
/// operator's network boot (`pxe` sets the next boot to PXE).
pub const IPMI: HardwareType = HardwareType {
    name: "ipmi",
    interfaces: &[
        ("bios", "no-bios", &["no-bios"]),
        ("boot", "ipxe", &["ipxe", "pxe"]),
        ("console", "no-console", &["no-console"]),
        ("deploy", "direct", &["direct", "ramdisk"]),
        ("firmware", "no-firmware", &["no-firmware"]),
        ("inspect", "no-inspect", &["agent", "no-inspect"]),
        ("management", "ipmitool", &["ipmitool"]),
        ("network", "noop", &["flat", "noop"]),
        ("power", "ipmitool", &["ipmitool"]),
        ("raid", "no-raid", &["agent", "no-raid"]),
        ("rescue", "no-rescue", &["no-rescue"]),
        ("storage", "noop", &["noop"]),
        ("vendor", "no-vendor", &["no-vendor"]),
    ],
    clean_steps: &[],
    deploy_steps: RAMDISK_DEPLOY_STEPS,
    steps_from_agent: false,
};

const ONEVIEW_DEPLOY_STEPS: &[StepDecl] = &[StepDecl {
    interface: "deploy",
    step: "deploy",
    priority: 100,
    abortable: false,
    requires_ramdisk: false,
    args: &[],
}];

/// `oneview`: power, management and deploy through the appliance.
pub const ONEVIEW: HardwareType = HardwareType {
    name: "oneview",
    interfaces: &[
        ("bios", "no-bios", &["no-bios"]),
        ("boot", "oneview", &["oneview"]),
        ("console", "no-console", &["no-console"]),
        ("deploy", "oneview", &["oneview"]),
        ("firmware", "no-firmware", &["no-firmware"]),
        ("inspect", "no-inspect", &["no-inspect"]),
        ("management", "oneview", &["oneview"]),
        ("network", "noop", &["flat", "noop"]),
        ("power", "oneview", &["oneview"]),
        ("raid", "no-raid", &["no-raid"]),
        ("rescue", "no-rescue", &["no-rescue"]),
        ("storage", "noop", &["noop"]),
        ("vendor", "no-vendor", &["no-vendor"]),
    ],
    clean_steps: &[],
    deploy_steps: ONEVIEW_DEPLOY_STEPS,
    steps_from_agent: false,
};

/// The deploy interface that writes an image through the ramdisk agent
/// (ironic-python-agent): its steps are [`DIRECT_DEPLOY_STEPS`], and the agent's own
/// in-band steps join the node's clean and deploy steps once it reported them.
pub const DIRECT_DEPLOY: &str = "direct";

/// The `direct` deploy's steps (upstream's priorities): the ramdisk booted (100), the
/// image written by the agent (80), the instance's boot prepared (60), the agent
/// powered off (40), the tenant network (30), the instance booted (20).
pub const DIRECT_DEPLOY_STEPS: &[StepDecl] = &[
    step("deploy", "deploy", 100, false, &[]),
    step("deploy", "write_image", 80, false, &[]),
    step("deploy", "prepare_instance_boot", 60, false, &[]),
    step("deploy", "tear_down_agent", 40, false, &[]),
    step("deploy", "switch_to_tenant_network", 30, false, &[]),
    step("deploy", "boot_instance", 20, false, &[]),
];

/// `driver_internal_info` keys of the steps a node's agent last reported, as upstream
/// keeps them: `{interface: [step, …]}`.
pub const AGENT_CACHED_CLEAN_STEPS: &str = "agent_cached_clean_steps";
pub const AGENT_CACHED_DEPLOY_STEPS: &str = "agent_cached_deploy_steps";

/// Whether the node deploys (and cleans) through the ramdisk agent.
pub fn agent_based(node: &Node) -> bool {
    node.interfaces.get("deploy") == Some(DIRECT_DEPLOY)
}

/// The steps a node's agent reported under `key` ([`AGENT_CACHED_CLEAN_STEPS`],
/// [`AGENT_CACHED_DEPLOY_STEPS`]) that its interfaces run through the agent: the
/// deploy interface's, and the RAID interface's with `raid_interface = agent`
/// (upstream's); `None` before it reported any.
pub fn agent_steps(node: &Node, key: &str) -> Option<Vec<steps::OfferedStep>> {
    let by_interface = node.driver_internal_info.get(key)?.as_object()?;
    let through_agent = |iface: &str| match iface {
        "deploy" => true,
        "raid" => node.interfaces.get("raid") == Some("agent"),
        _ => false,
    };
    Some(
        by_interface
            .iter()
            .filter(|(iface, _)| through_agent(iface))
            .filter_map(|(_, steps)| steps.as_array())
            .flatten()
            .filter_map(steps::OfferedStep::from_agent)
            .collect(),
    )
}

/// Joins the out-of-band steps with the agent's: an out-of-band step hides an
/// agent step of the same interface and name (the `direct` deploy's `write_image`
/// sends the agent's).
fn with_agent(
    out_of_band: &[StepDecl],
    agent: Option<Vec<steps::OfferedStep>>,
) -> Vec<steps::OfferedStep> {
    let mut all: Vec<steps::OfferedStep> =
        out_of_band.iter().map(steps::OfferedStep::from).collect();
    for a in agent.unwrap_or_default() {
        if !all
            .iter()
            .any(|o| o.interface == a.interface && o.step == a.step)
        {
            all.push(a);
        }
    }
    all
}

/// The deploy steps a node's interfaces offer: its hardware type's (the `direct`
/// deploy's in place of its core step when it deploys through the agent), then the
/// agent's, once reported.
pub fn offered_deploy_steps(node: &Node) -> Vec<steps::OfferedStep> {
    let hw = known(&node.driver).map(|h| h.deploy_steps).unwrap_or(&[]);
    if !agent_based(node) {
        return hw.iter().map(steps::OfferedStep::from).collect();
    }
    let mut oob: Vec<StepDecl> = DIRECT_DEPLOY_STEPS.to_vec();
    oob.extend(
        hw.iter()
            .filter(|d| out_of_band_with_agent(node, d))
            .copied(),
    );
    with_agent(&oob, agent_steps(node, AGENT_CACHED_DEPLOY_STEPS))
}

/// Whether a hardware type's step stays on offer beside the agent's: not the deploy
/// interface's (the `direct` deploy replaces it), nor the RAID interface's when the
/// agent does RAID.
fn out_of_band_with_agent(node: &Node, d: &StepDecl) -> bool {
    match d.interface {
        "deploy" => false,
        "raid" => node.interfaces.get("raid") != Some("agent"),
        _ => true,
    }
}

/// The clean steps a node's interfaces offer: its hardware type's, then, when it
/// cleans through the agent, the agent's, once reported.
pub fn offered_clean_steps(node: &Node) -> Vec<steps::OfferedStep> {
    let hw = known(&node.driver).map(|h| h.clean_steps).unwrap_or(&[]);
    if !agent_based(node) {
        return hw.iter().map(steps::OfferedStep::from).collect();
    }
    let oob: Vec<StepDecl> = hw
        .iter()
        .filter(|d| out_of_band_with_agent(node, d))
        .copied()
        .collect();
    with_agent(&oob, agent_steps(node, AGENT_CACHED_CLEAN_STEPS))
}

/// Looks up any hardware type this build knows, enabled or not.
pub fn known(name: &str) -> Option<&'static HardwareType> {
    KNOWN.iter().find(|h| h.name == name)
}

/// The deploy steps `node` runs: its hardware type's, merged with `templates` (the
/// deploy templates named by its instance traits, as read from the database; see
/// `ironic_model::deploy_template::instance_traits`) by [`steps::deploy_plan`]. The one place the plan is computed:
/// the API shows it (`GET /v1/nodes/{node}/deployment/steps`), the conductor runs it.
/// `Err` is the reason the steps are invalid, in upstream's words
/// ([`steps::DeployPlanError`]), as whatever error the caller carries it in (the API's
/// domain error, a 400; the conductor's text until its plan is typed).
///
/// A node deploying through the agent before the agent reported its steps keeps the
/// steps nothing offers yet: they are checked when the plan is made again with the
/// agent's steps (upstream's order too).
pub fn deploy_plan_for(
    node: &Node,
    templates: Vec<DeployTemplate>,
    user: &[ironic_model::deploy_template::TemplateStep],
) -> Result<Vec<Step>, steps::DeployPlanError> {
    let offered = offered_deploy_steps(node);
    let templates: Vec<_> = templates.into_iter().map(|t| (t.name, t.steps)).collect();
    if agent_based(node) && agent_steps(node, AGENT_CACHED_DEPLOY_STEPS).is_none() {
        steps::deploy_plan_before_agent(&offered, &templates, user)
    } else {
        steps::deploy_plan(&offered, &templates, user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_types() {
        let h = known("fake-hardware").unwrap();
        assert_eq!(h.default_interface("network"), Some("noop"));
        assert_eq!(h.enabled_interfaces("bios"), &["fake", "no-bios"]);
        assert!(known("ipmi").is_some());
        assert!(known("idrac").is_none());
        for h in KNOWN {
            assert_eq!(h.interfaces.len(), 13, "{}", h.name);
        }
    }

    #[test]
    fn fake_steps() {
        // One step runs in automated cleaning; the rest only when asked for.
        let auto = steps::automated(FAKE_HARDWARE.clean_steps);
        assert_eq!(auto.len(), 1);
        assert_eq!(auto[0].name(), "vendor.log_passthrough");
        // There are abortable and non-abortable steps with a required argument.
        let with_seconds: Vec<&StepDecl> = FAKE_HARDWARE
            .clean_steps
            .iter()
            .filter(|d| d.args.iter().any(|a| a.name == "seconds" && a.required))
            .collect();
        assert!(with_seconds.iter().any(|d| d.abortable));
        assert!(with_seconds.iter().any(|d| !d.abortable));
        // Every step belongs to an interface type the hardware type has.
        for d in FAKE_HARDWARE
            .clean_steps
            .iter()
            .chain(FAKE_HARDWARE.deploy_steps)
        {
            assert!(
                FAKE_HARDWARE.default_interface(d.interface).is_some(),
                "{}",
                d.step
            );
        }
    }
}
