//! Hardware types and their interfaces: what each hardware type enables and uses by
//! default per interface type, the clean and deploy steps it offers ([`steps`]), and
//! the implementation the conductor calls ([`interfaces::Driver`]).
//!
//! Architecture invariant: drivers never touch the database.

pub mod fake;
pub mod interfaces;
pub mod oneview;
pub mod steps;

use steps::{ArgInfo, StepDecl};

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
        ("deploy", "fake", &["fake"]),
        ("firmware", "fake", &["fake", "no-firmware"]),
        ("inspect", "fake", &["fake", "no-inspect"]),
        ("management", "fake", &["fake"]),
        ("network", "noop", &["noop"]),
        ("power", "fake", &["fake"]),
        ("raid", "fake", &["fake", "no-raid"]),
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
/// that run only when a deploy template asks for them (priority 0).
pub const FAKE_DEPLOY_STEPS: &[StepDecl] = &[
    step("deploy", "deploy", 100, false, &[]),
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
pub const KNOWN: &[HardwareType] = &[FAKE_HARDWARE, FAKE_AGENT, oneview::ONEVIEW];

/// The hardware types a process enables (`[default] enabled_hardware_types`), with
/// the implementations of those that need settings (`oneview`).
#[derive(Clone)]
pub struct Registry {
    enabled: Vec<HardwareType>,
    oneview: Option<std::sync::Arc<oneview::OneView>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("enabled", &self.names())
            .finish()
    }
}

impl Registry {
    /// Fails with the unknown names if any is not a hardware type of this build.
    /// `oneview` needs [`Registry::with_oneview`] to reach an appliance.
    pub fn new(names: &[String]) -> Result<Registry, String> {
        let mut enabled = Vec::new();
        let mut unknown = Vec::new();
        for n in names {
            match KNOWN.iter().find(|h| h.name == n) {
                Some(h) if !enabled.contains(h) => enabled.push(h.clone()),
                Some(_) => {}
                None => unknown.push(n.clone()),
            }
        }
        if !unknown.is_empty() {
            return Err(format!(
                "unknown hardware types {}; this build knows {}",
                unknown.join(", "),
                KNOWN.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
            ));
        }
        let oneview = enabled
            .iter()
            .any(|h| h.name == oneview::ONEVIEW.name)
            .then(|| {
                // Until configured: every call on a `oneview` node says what is missing.
                std::sync::Arc::new(oneview::OneView::new(oneview::client::Settings {
                    manager_url: String::new(),
                    username: String::new(),
                    password: String::new(),
                    task_timeout: std::time::Duration::from_secs(600),
                    poll_interval: std::time::Duration::from_millis(200),
                    request_timeout: std::time::Duration::from_secs(30),
                    max_retries: 12,
                    retry_pause: std::time::Duration::from_secs(10),
                    allow_insecure: false,
                    ca_file: None,
                }))
            });
        Ok(Registry { enabled, oneview })
    }

    /// Binds the `oneview` hardware type (if enabled) to an appliance.
    pub fn with_oneview(mut self, settings: oneview::client::Settings) -> Registry {
        if self.oneview.is_some() {
            self.oneview = Some(std::sync::Arc::new(oneview::OneView::new(settings)));
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&HardwareType> {
        self.enabled.iter().find(|h| h.name == name)
    }

    /// The implementation of an enabled hardware type.
    pub fn driver(&self, name: &str) -> Option<&dyn interfaces::Driver> {
        if name == oneview::ONEVIEW.name {
            return self
                .oneview
                .as_deref()
                .map(|d| d as &dyn interfaces::Driver);
        }
        self.get(name)
            .and_then(|h| interfaces::driver(h.name))
            .map(|d| d as &dyn interfaces::Driver)
    }

    pub fn names(&self) -> Vec<String> {
        self.enabled.iter().map(|h| h.name.to_string()).collect()
    }
}

/// Looks up any hardware type this build knows, enabled or not.
pub fn known(name: &str) -> Option<&'static HardwareType> {
    KNOWN.iter().find(|h| h.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry() {
        let r = Registry::new(&["fake-hardware".into()]).unwrap();
        let h = r.get("fake-hardware").unwrap();
        assert_eq!(h.default_interface("network"), Some("noop"));
        assert_eq!(h.enabled_interfaces("bios"), &["fake", "no-bios"]);
        assert!(
            Registry::new(&["ipmi".into()])
                .unwrap_err()
                .contains("ipmi")
        );
        assert_eq!(h.interfaces.len(), 13);
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
