-- A node's history (API 1.78): errors and provision state changes, written by the
-- conductor that holds the node; pruned by count per node and by age. Kept in step with
-- migrations/sqlite/0011_node_history.sql. A node's go with it (ON DELETE CASCADE).

CREATE TABLE node_history (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    conductor VARCHAR(255),
    event_type VARCHAR(255),
    severity VARCHAR(255),
    event TEXT,
    user_id VARCHAR(255),
    project_id VARCHAR(255),
    state VARCHAR(15),
    target_provision_state VARCHAR(15),
    duration_seconds BIGINT,
    created_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT uniq_node_history_uuid UNIQUE (uuid)
);

-- A node's entries in order (the list and the pruning), and the marker's lookup.
CREATE INDEX node_history_node_id_idx ON node_history (node_id, created_at, id);
