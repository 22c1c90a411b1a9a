-- The deployment's identity. Kept in step with migrations/sqlite/0004_cluster.sql.
-- One row, written once by the migration (`ironic-dbsync upgrade`); every process of
-- the deployment reads it at start and carries it in its queue names and messages, so
-- two deployments sharing one RabbitMQ vhost never take each other's calls.

CREATE TABLE cluster (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    cluster_id VARCHAR(36) NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
);

INSERT INTO cluster (cluster_id) VALUES (gen_random_uuid()::text);
