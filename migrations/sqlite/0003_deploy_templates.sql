-- Deploy templates (API 1.55+). Kept in step with migrations/postgres/0003_deploy_templates.sql.

CREATE TABLE deploy_templates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255) NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_deploy_templates_uuid UNIQUE (uuid),
    CONSTRAINT uniq_deploy_templates_name UNIQUE (name)
);

CREATE TABLE deploy_template_steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    deploy_template_id INTEGER NOT NULL REFERENCES deploy_templates (id) ON DELETE CASCADE,
    interface VARCHAR(255) NOT NULL,
    step VARCHAR(255) NOT NULL,
    args TEXT NOT NULL DEFAULT '{}',
    priority INTEGER NOT NULL
);

CREATE INDEX deploy_template_steps_template_idx ON deploy_template_steps (deploy_template_id);
