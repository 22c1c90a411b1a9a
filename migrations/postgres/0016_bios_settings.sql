-- A node's BIOS settings (API 1.40): what its bios interface last read from the
-- hardware, one row per setting (upstream's bios_settings; the registry fields of 1.74
-- are not stored: the BMCs we drive do not report them through the settings). Kept in
-- step with migrations/sqlite/0016_bios_settings.sql. A node's go with it (ON DELETE
-- CASCADE).

CREATE TABLE bios_settings (
    id BIGSERIAL PRIMARY KEY,
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    name VARCHAR(255) NOT NULL,
    value TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_bios_settings0node_id0name UNIQUE (node_id, name)
);
