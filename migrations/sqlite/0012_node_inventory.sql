-- A node's inventory (API 1.81): what its last inspection found, one row per node,
-- replaced by the next inspection. Kept in step with
-- migrations/postgres/0012_node_inventory.sql. A node's goes with it (ON DELETE CASCADE).

CREATE TABLE node_inventory (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    inventory_data TEXT NOT NULL DEFAULT '{}',
    plugin_data TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_node_inventory_node_id UNIQUE (node_id)
);
