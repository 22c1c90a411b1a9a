-- A node's inventory (API 1.81): what its last inspection found, one row per node,
-- replaced by the next inspection. Kept in step with
-- migrations/sqlite/0012_node_inventory.sql. A node's goes with it (ON DELETE CASCADE).

CREATE TABLE node_inventory (
    id BIGSERIAL PRIMARY KEY,
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    inventory_data JSONB NOT NULL DEFAULT '{}',
    plugin_data JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_node_inventory_node_id UNIQUE (node_id)
);
