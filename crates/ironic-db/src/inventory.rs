//! A node's inventory (1.81): the last inspection's findings, one row per node.

use ironic_model::Error;
use ironic_model::node::JsonObject;
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

impl Db {
    /// Stores what an inspection found, replacing the node's previous inventory.
    pub async fn inventory_save(
        &self,
        node_id: i64,
        inventory: &JsonObject,
        plugin_data: &JsonObject,
    ) -> Result<(), Error> {
        let sql = "INSERT INTO node_inventory (node_id, inventory_data, plugin_data, created_at) \
                   VALUES ($1, $2, $3, $4) ON CONFLICT (node_id) DO UPDATE SET \
                   inventory_data = excluded.inventory_data, plugin_data = excluded.plugin_data, \
                   updated_at = excluded.created_at";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(node_id)
            .bind(Json(inventory))
            .bind(Json(plugin_data))
            .bind(ironic_model::node::now())
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(|e| internal("writing a node inventory", e))
    }

    /// The node's inventory and plugin data, if an inspection stored them.
    pub async fn inventory_get(
        &self,
        node_id: i64,
    ) -> Result<Option<(JsonObject, JsonObject)>, Error> {
        let sql = "SELECT inventory_data, plugin_data FROM node_inventory WHERE node_id = $1";
        let row: Option<(Json<JsonObject>, Json<JsonObject>)> =
            with_pool!(self, |p| sqlx::query_as(sql)
                .bind(node_id)
                .fetch_optional(p)
                .await)
            .map_err(|e| internal("reading a node inventory", e))?;
        Ok(row.map(|(i, p)| (i.0, p.0)))
    }
}
