//! A chassis: a group of nodes (a rack, an enclosure) with a description and free-form
//! `extra` data; nodes name theirs in `chassis_uuid`.

use chrono::{DateTime, Utc};

use crate::node::JsonObject;
use crate::{ChassisUuid, Error};

#[derive(Debug, Clone, PartialEq)]
pub struct Chassis {
    pub id: i64,
    pub uuid: ChassisUuid,
    pub description: Option<String>,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// The longest description (the column's width).
pub const DESCRIPTION_MAX: usize = 255;

/// Fields in upstream's order, and those a list shows by default.
pub const FIELDS: &[&str] = &["uuid", "created_at", "updated_at", "description", "extra"];
pub const DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "description"];

/// Sort keys of `GET /v1/chassis` (not `extra`).
pub const SORT_KEYS: &[&str] = &["id", "uuid", "description", "created_at", "updated_at"];

pub fn not_found(ident: &str) -> Error {
    Error::NotFound(format!("Chassis {ident} could not be found."))
}
