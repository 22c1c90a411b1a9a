-- Volume connectors and targets (API 1.32). Kept in step with
-- migrations/postgres/0009_volume.sql. A node's go with it (ON DELETE CASCADE).

CREATE TABLE volume_connectors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    connector_type VARCHAR(32) NOT NULL,
    connector_id VARCHAR(255) NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_volume_connectors_uuid UNIQUE (uuid),
    CONSTRAINT uniq_volume_connectors_type_connector_id UNIQUE (connector_type, connector_id)
);

CREATE TABLE volume_targets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    volume_type VARCHAR(64) NOT NULL,
    volume_id VARCHAR(36) NOT NULL,
    boot_index INTEGER NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_volume_targets_uuid UNIQUE (uuid),
    CONSTRAINT uniq_volume_targets_node_id_boot_index UNIQUE (node_id, boot_index)
);

-- ?node= and /v1/nodes/{node}/volume/...
CREATE INDEX volume_connectors_node_id_idx ON volume_connectors (node_id, id);
CREATE INDEX volume_targets_node_id_idx ON volume_targets (node_id, id);
