//! A node's firmware components (1.86; `vendor`, `model`, `serial_number` 1.114): what
//! its firmware interface last reported, kept per component with the version first
//! seen (`initial_version`) and the last one flashed through the service.

use chrono::{DateTime, Utc};

/// One component as the hardware reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub component: String,
    pub current_version: Option<String>,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
}

/// One component as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareComponent {
    pub component: String,
    pub initial_version: String,
    pub current_version: Option<String>,
    pub last_version_flashed: Option<String>,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// The fields of `GET /v1/nodes/{node}/firmware` after `created_at` and `updated_at`
/// (always shown), in upstream's order, with the microversion that shows them.
pub const FIELDS: &[(&str, u16)] = &[
    ("component", 86),
    ("initial_version", 86),
    ("current_version", 86),
    ("last_version_flashed", 86),
    ("vendor", 114),
    ("model", 114),
    ("serial_number", 114),
];
