-- Runbooks (API 1.92; description and traits 1.112): named, owned lists of steps that
-- a node whose traits allow it runs in manual cleaning or servicing. Steps and traits
-- are kept as JSON documents in the row (a runbook is read and written whole). Kept in
-- step with migrations/postgres/0014_runbooks.sql.

CREATE TABLE runbooks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    steps TEXT NOT NULL DEFAULT '[]',
    traits TEXT NOT NULL DEFAULT '[]',
    disable_ramdisk BOOLEAN NOT NULL DEFAULT FALSE,
    public BOOLEAN NOT NULL DEFAULT FALSE,
    owner TEXT,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_runbooks0uuid UNIQUE (uuid),
    CONSTRAINT uniq_runbooks0name UNIQUE (name)
);
