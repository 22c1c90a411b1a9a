-- Inspection rules (API 1.96): conditions over what an inspection found and actions
-- that change the node when they hold. Conditions and actions are kept as JSON
-- documents in the row (a rule is read and written whole; rules are few). Kept in step
-- with migrations/postgres/0015_inspection_rules.sql.

CREATE TABLE inspection_rules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    description TEXT,
    priority INTEGER NOT NULL DEFAULT 0,
    sensitive BOOLEAN NOT NULL DEFAULT FALSE,
    phase TEXT NOT NULL DEFAULT 'main',
    scope TEXT,
    conditions TEXT NOT NULL DEFAULT '[]',
    actions TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_inspection_rules0uuid UNIQUE (uuid)
);

CREATE INDEX inspection_rules_phase_idx ON inspection_rules (phase, id);
