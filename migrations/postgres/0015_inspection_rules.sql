-- Inspection rules (API 1.96): conditions over what an inspection found and actions
-- that change the node when they hold. Conditions and actions are kept as JSON
-- documents in the row (a rule is read and written whole; rules are few). Kept in step
-- with migrations/sqlite/0015_inspection_rules.sql.

CREATE TABLE inspection_rules (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    description VARCHAR(255),
    priority INTEGER NOT NULL DEFAULT 0,
    sensitive BOOLEAN NOT NULL DEFAULT FALSE,
    phase VARCHAR(16) NOT NULL DEFAULT 'main',
    scope VARCHAR(255),
    conditions JSONB NOT NULL DEFAULT '[]',
    actions JSONB NOT NULL DEFAULT '[]',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_inspection_rules0uuid UNIQUE (uuid)
);

CREATE INDEX inspection_rules_phase_idx ON inspection_rules (phase, id);
