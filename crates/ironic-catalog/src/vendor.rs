//! Vendor passthru methods and BIOS settings the fake interfaces declare: data, so
//! the API lists them without asking a conductor (a conductor runs them).

/// A vendor passthru method, as `GET …/vendor_passthru/methods` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorMethod {
    pub name: &'static str,
    pub http_methods: &'static [&'static str],
    pub is_async: bool,
    pub description: &'static str,
    pub attach: bool,
    pub require_exclusive_lock: bool,
}

/// The fake vendor interface's one method: it answers with what it was given.
pub const FAKE_ECHO: VendorMethod = VendorMethod {
    name: "echo",
    http_methods: &["POST", "GET"],
    is_async: false,
    description: "Answers with the arguments it was given (fake vendor interface).",
    attach: false,
    require_exclusive_lock: false,
};

/// The methods of a node's vendor interface implementation.
pub fn node_vendor_methods(vendor_interface: &str) -> &'static [VendorMethod] {
    match vendor_interface {
        "fake" => &[FAKE_ECHO],
        _ => &[],
    }
}

/// The driver-level methods of a hardware type (its default vendor interface's).
pub fn driver_vendor_methods(hardware_type: &crate::HardwareType) -> &'static [VendorMethod] {
    node_vendor_methods(
        hardware_type
            .default_interface("vendor")
            .unwrap_or("no-vendor"),
    )
}

/// The BIOS settings the fake BIOS interface reports: `(name, value)`.
pub fn bios_settings(bios_interface: &str) -> &'static [(&'static str, &'static str)] {
    match bios_interface {
        "fake" => &[
            ("BootMode", "Uefi"),
            ("LogicalProc", "Enabled"),
            ("VirtualizationTechnology", "Enabled"),
        ],
        _ => &[],
    }
}

/// The properties a hardware type documents (`GET /v1/drivers/{name}/properties`): what
/// its default interfaces read from a node's `driver_info`, by key, as upstream's
/// interfaces describe them (upstream's fake vendor interface documents two dummy keys).
pub fn driver_properties(
    hardware_type: &crate::HardwareType,
) -> &'static [(&'static str, &'static str)] {
    match hardware_type.name {
        "fake-hardware" | "fake-agent" => &[
            ("B1", "B1 description. Required."),
            ("B2", "B2 description. Required."),
        ],
        "oneview" => &[(
            "server_hardware_uri",
            "Server Hardware URI. Required in driver_info.",
        )],
        _ => &[],
    }
}
