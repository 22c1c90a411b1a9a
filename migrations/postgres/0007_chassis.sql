-- Chassis (API 1.1+). Kept in step with migrations/sqlite/0007_chassis.sql.

CREATE TABLE chassis (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    description VARCHAR(255),
    extra JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_chassis_uuid UNIQUE (uuid)
);

-- GET /v1/chassis/{uuid}/nodes, ?chassis_uuid= and the check before a chassis is deleted.
CREATE INDEX nodes_chassis_uuid_idx ON nodes (chassis_uuid, id);
