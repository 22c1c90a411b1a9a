-- Allocations (API 1.52+). Kept in step with migrations/sqlite/0002_allocations.sql.

CREATE TABLE allocations (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255),
    node_id BIGINT,
    state VARCHAR(15) NOT NULL DEFAULT 'allocating',
    owner VARCHAR(255),
    last_error TEXT,
    resource_class VARCHAR(80),
    traits JSONB NOT NULL DEFAULT '[]',
    candidate_nodes JSONB NOT NULL DEFAULT '[]',
    extra JSONB NOT NULL DEFAULT '{}',
    -- The conductor working on an `allocating` allocation (conductors.id); every write
    -- of the allocation process is conditional on it.
    conductor_affinity BIGINT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_allocations_uuid UNIQUE (uuid),
    CONSTRAINT uniq_allocations_name UNIQUE (name)
);

CREATE INDEX allocations_node_id_idx ON allocations (node_id);
CREATE INDEX allocations_state_affinity_idx ON allocations (state, conductor_affinity);

ALTER TABLE nodes ADD CONSTRAINT nodes_allocation_id_fk
    FOREIGN KEY (allocation_id) REFERENCES allocations (id) ON DELETE SET NULL;

-- Candidate selection walks only the nodes an allocation could take: its cost does not
-- grow with the nodes already allocated or in other states.
CREATE INDEX nodes_allocatable_idx ON nodes (resource_class, id)
    WHERE provision_state = 'available' AND instance_uuid IS NULL
      AND maintenance = FALSE AND power_state IS NOT NULL;
