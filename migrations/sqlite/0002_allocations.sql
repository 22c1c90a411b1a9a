-- Allocations (API 1.52+). Kept in step with migrations/postgres/0002_allocations.sql
-- (SQLite cannot add the foreign key from nodes.allocation_id; the store keeps it
-- consistent itself).

CREATE TABLE allocations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255),
    node_id INTEGER,
    state VARCHAR(15) NOT NULL DEFAULT 'allocating',
    owner VARCHAR(255),
    last_error TEXT,
    resource_class VARCHAR(80),
    traits TEXT NOT NULL DEFAULT '[]',
    candidate_nodes TEXT NOT NULL DEFAULT '[]',
    extra TEXT NOT NULL DEFAULT '{}',
    conductor_affinity INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_allocations_uuid UNIQUE (uuid),
    CONSTRAINT uniq_allocations_name UNIQUE (name)
);

CREATE INDEX allocations_node_id_idx ON allocations (node_id);
CREATE INDEX allocations_state_affinity_idx ON allocations (state, conductor_affinity);

CREATE INDEX nodes_allocatable_idx ON nodes (resource_class, id)
    WHERE provision_state = 'available' AND instance_uuid IS NULL
      AND maintenance = FALSE AND power_state IS NOT NULL;
