//! The driver implementations the conductor calls ([`interfaces::Driver`]): the fake
//! hardware types, `redfish`, `ipmi` and `oneview`. What each hardware type declares (interfaces, steps)
//! is pure data in `ironic-catalog`, re-exported here.
//!
//! Architecture invariant: drivers never touch the database.

pub mod agent_client;
pub mod boot;
pub mod configdrive;
pub mod fake;
pub mod http_get;
pub mod interfaces;
pub mod ipmi;
pub mod iso;
pub mod oneview;
pub mod outbound;
pub mod redfish;
pub mod tls;

pub use ironic_catalog::{FAKE_AGENT, FAKE_HARDWARE, HardwareType, KNOWN, known, steps};

/// `[default] enabled_hardware_types` names hardware types this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown hardware types {}; this build knows {}", .unknown.join(", "), KNOWN.iter().map(|h| h.name).collect::<Vec<_>>().join(", "))]
pub struct UnknownHardwareTypes {
    pub unknown: Vec<String>,
}

/// The hardware types a process enables (`[default] enabled_hardware_types`), with
/// the implementations of those that need settings (`oneview`).
#[derive(Clone)]
pub struct Registry {
    enabled: Vec<HardwareType>,
    oneview: Option<std::sync::Arc<oneview::OneView>>,
    redfish: Option<std::sync::Arc<redfish::Redfish>>,
    ipmi: Option<std::sync::Arc<ipmi::Ipmi>>,
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
    pub fn new(names: &[String]) -> Result<Registry, UnknownHardwareTypes> {
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
            return Err(UnknownHardwareTypes { unknown });
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
        // Default `[redfish]` settings until `with_redfish`.
        let redfish = enabled
            .iter()
            .any(|h| h.name == redfish::REDFISH.name)
            .then(|| std::sync::Arc::new(redfish::Redfish::new(Default::default())));
        let ipmi = enabled
            .iter()
            .any(|h| h.name == ipmi::IPMI.name)
            .then(|| std::sync::Arc::new(ipmi::Ipmi::new(Default::default())));
        Ok(Registry {
            enabled,
            oneview,
            redfish,
            ipmi,
        })
    }

    /// Binds the `oneview` hardware type (if enabled) to an appliance.
    pub fn with_oneview(mut self, settings: oneview::client::Settings) -> Registry {
        if self.oneview.is_some() {
            self.oneview = Some(std::sync::Arc::new(oneview::OneView::new(settings)));
        }
        self
    }

    /// Gives the `redfish` hardware type (if enabled) its settings (`[redfish]`).
    pub fn with_redfish(mut self, settings: redfish::client::Settings) -> Registry {
        if self.redfish.is_some() {
            self.redfish = Some(std::sync::Arc::new(redfish::Redfish::new(settings)));
        }
        self
    }

    /// Gives the `ipmi` hardware type (if enabled) its settings (`[ipmi]`).
    pub fn with_ipmi(mut self, settings: ipmi::Settings) -> Registry {
        if self.ipmi.is_some() {
            self.ipmi = Some(std::sync::Arc::new(ipmi::Ipmi::new(settings)));
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&HardwareType> {
        self.enabled.iter().find(|h| h.name == name)
    }

    /// The implementation of an enabled hardware type.
    pub fn driver(&self, name: &str) -> Option<&dyn interfaces::Driver> {
        if name == redfish::REDFISH.name {
            return self
                .redfish
                .as_deref()
                .map(|d| d as &dyn interfaces::Driver);
        }
        if name == ipmi::IPMI.name {
            return self.ipmi.as_deref().map(|d| d as &dyn interfaces::Driver);
        }
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

    /// The OneView implementation, if enabled (the conductor's periodic ownership
    /// checks need more than the `Driver` trait offers).
    pub fn oneview(&self) -> Option<&oneview::OneView> {
        self.oneview.as_deref()
    }

    pub fn names(&self) -> Vec<String> {
        self.enabled.iter().map(|h| h.name.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn registry() {
        let r = Registry::new(&["fake-hardware".into()]).unwrap();
        let h = r.get("fake-hardware").unwrap();
        assert_eq!(h.default_interface("network"), Some("noop"));
        assert!(r.driver("fake-hardware").is_some());
        assert!(r.driver("oneview").is_none());
        assert!(
            Registry::new(&["idrac".into()])
                .unwrap_err()
                .to_string()
                .contains("idrac")
        );
    }
}
