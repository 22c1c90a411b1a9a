-- A node's firmware components (API 1.86, identity fields 1.114): what its firmware
-- interface last reported, one row per component (upstream's firmware_information).
-- Kept in step with migrations/postgres/0013_firmware_information.sql. A node's go with
-- it (ON DELETE CASCADE).

CREATE TABLE firmware_information (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    component TEXT NOT NULL,
    initial_version TEXT NOT NULL,
    current_version TEXT,
    last_version_flashed TEXT,
    vendor TEXT,
    model TEXT,
    serial_number TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_nodecomponent0node_id0component UNIQUE (node_id, component)
);
