-- Chassis (API 1.1+). Kept in step with migrations/postgres/0007_chassis.sql.

CREATE TABLE chassis (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    description VARCHAR(255),
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_chassis_uuid UNIQUE (uuid)
);

-- GET /v1/chassis/{uuid}/nodes, ?chassis_uuid= and the check before a chassis is deleted.
CREATE INDEX nodes_chassis_uuid_idx ON nodes (chassis_uuid, id);
