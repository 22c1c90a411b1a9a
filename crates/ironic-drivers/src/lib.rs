//! Hardware types and their interfaces. For now: what each hardware type enables and
//! uses by default per interface type; the interface implementations (power, deploy,
//! steps, ...) arrive with the state machine.
//!
//! Architecture invariant: drivers never touch the database.

/// One hardware type: for each interface type, the default and the enabled
/// implementations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardwareType {
    pub name: &'static str,
    /// `(interface type, default, enabled)`, one entry per interface type.
    pub interfaces: &'static [(&'static str, &'static str, &'static [&'static str])],
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
};

/// Every hardware type this build knows.
pub const KNOWN: &[HardwareType] = &[FAKE_HARDWARE];

/// The hardware types a process enables (`[default] enabled_hardware_types`).
#[derive(Debug, Clone)]
pub struct Registry {
    enabled: Vec<HardwareType>,
}

impl Registry {
    /// Fails with the unknown names if any is not a hardware type of this build.
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
        if unknown.is_empty() {
            Ok(Registry { enabled })
        } else {
            Err(format!(
                "unknown hardware types {}; this build knows {}",
                unknown.join(", "),
                KNOWN.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
            ))
        }
    }

    pub fn get(&self, name: &str) -> Option<&HardwareType> {
        self.enabled.iter().find(|h| h.name == name)
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
}
