-- Deploy templates (API 1.55+). Kept in step with migrations/sqlite/0003_deploy_templates.sql.

CREATE TABLE deploy_templates (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255) NOT NULL,
    extra JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_deploy_templates_uuid UNIQUE (uuid),
    CONSTRAINT uniq_deploy_templates_name UNIQUE (name)
);

CREATE TABLE deploy_template_steps (
    id BIGSERIAL PRIMARY KEY,
    deploy_template_id BIGINT NOT NULL REFERENCES deploy_templates (id) ON DELETE CASCADE,
    interface VARCHAR(255) NOT NULL,
    step VARCHAR(255) NOT NULL,
    args JSONB NOT NULL DEFAULT '{}',
    priority BIGINT NOT NULL
);

CREATE INDEX deploy_template_steps_template_idx ON deploy_template_steps (deploy_template_id);
