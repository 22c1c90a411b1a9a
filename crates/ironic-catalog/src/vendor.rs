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
        "redfish" => &[
            (
                "redfish_address",
                "The BMC's Redfish service: host[:port] (HTTPS) or http(s)://host[:port]. Required.",
            ),
            (
                "redfish_system_id",
                "The system's id or /redfish/v1/Systems/<id> path; needed only when the BMC manages several systems. Optional.",
            ),
            ("redfish_username", "User name for the BMC. Optional."),
            (
                "redfish_password",
                "Password for the BMC; shown masked. Optional.",
            ),
            (
                "redfish_verify_ca",
                "true (the default: verify against the web roots), false (no verification) or the path of a CA bundle. Optional.",
            ),
            (
                "redfish_auth_type",
                "basic or auto (basic authentication either way). Optional.",
            ),
            (
                "deploy_kernel",
                "The agent ramdisk's kernel: file:///path or http(s):// URL. Required (with deploy_ramdisk) to boot the agent unless deploy_iso is set.",
            ),
            (
                "deploy_ramdisk",
                "The agent's ramdisk (initramfs): file:///path or http(s):// URL. Required with deploy_kernel.",
            ),
            (
                "deploy_iso",
                "A ready boot ISO of the agent instead of deploy_kernel and deploy_ramdisk (nothing is added to it: the agent gets no token and no parameters). Optional.",
            ),
            (
                "kernel_append_params",
                "Kernel parameters of the agent's ramdisk; %default% is [redfish] kernel_append_params. Optional.",
            ),
            (
                "fast_track",
                "true or false: reuse a running ramdisk instead of rebooting (default: [deploy] fast_track). Optional.",
            ),
        ],
        "ipmi" => &[
            (
                "ipmi_address",
                "The BMC's host name or IP address. Required.",
            ),
            ("ipmi_port", "The BMC's UDP port; default 623. Optional."),
            ("ipmi_username", "User name for the BMC. Optional."),
            (
                "ipmi_password",
                "Password for the BMC; shown masked, passed to ipmitool in its environment. Optional.",
            ),
            (
                "ipmi_protocol_version",
                "2.0 (lanplus, the default) or 1.5 (lan). Optional.",
            ),
            (
                "ipmi_priv_level",
                "ADMINISTRATOR (the default), OPERATOR, USER or CALLBACK. Optional.",
            ),
            (
                "ipmi_cipher_suite",
                "IPMI 2.0 cipher suite, 0 to 17. Optional.",
            ),
            (
                "ipmi_bridging",
                "Only \"no\": bridging is not supported. Optional.",
            ),
        ],
        _ => &[],
    }
}
