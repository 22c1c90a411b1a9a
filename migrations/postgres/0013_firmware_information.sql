-- A node's firmware components (API 1.86, identity fields 1.114): what its firmware
-- interface last reported, one row per component (upstream's firmware_information).
-- Kept in step with migrations/sqlite/0013_firmware_information.sql. A node's go with
-- it (ON DELETE CASCADE).

CREATE TABLE firmware_information (
    id BIGSERIAL PRIMARY KEY,
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    component VARCHAR(255) NOT NULL,
    initial_version VARCHAR(255) NOT NULL,
    current_version VARCHAR(255),
    last_version_flashed VARCHAR(255),
    vendor VARCHAR(255),
    model VARCHAR(255),
    serial_number VARCHAR(255),
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_nodecomponent0node_id0component UNIQUE (node_id, component)
);
