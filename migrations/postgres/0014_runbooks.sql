-- Runbooks (API 1.92; description and traits 1.112): named, owned lists of steps that
-- a node whose traits allow it runs in manual cleaning or servicing. Steps and traits
-- are kept as JSON documents in the row (a runbook is read and written whole). Kept in
-- step with migrations/sqlite/0014_runbooks.sql.

CREATE TABLE runbooks (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255) NOT NULL,
    description VARCHAR(255),
    steps JSONB NOT NULL DEFAULT '[]',
    traits JSONB NOT NULL DEFAULT '[]',
    disable_ramdisk BOOLEAN NOT NULL DEFAULT FALSE,
    public BOOLEAN NOT NULL DEFAULT FALSE,
    owner VARCHAR(255),
    extra JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_runbooks0uuid UNIQUE (uuid),
    CONSTRAINT uniq_runbooks0name UNIQUE (name)
);
