-- Ports (API 1.1+) and port groups (1.23+). Kept in step with migrations/sqlite/0008_ports.sql.
-- Deleting a node deletes its ports and port groups (ON DELETE CASCADE); a port group
-- that still has ports cannot be deleted (checked by the delete statement itself).

CREATE TABLE portgroups (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255),
    address VARCHAR(18),
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    extra JSONB NOT NULL DEFAULT '{}',
    internal_info JSONB NOT NULL DEFAULT '{}',
    mode VARCHAR(255) NOT NULL,
    properties JSONB NOT NULL DEFAULT '{}',
    standalone_ports_supported BOOLEAN NOT NULL DEFAULT TRUE,
    physical_network VARCHAR(64),
    category VARCHAR(80),
    dynamic_portgroup BOOLEAN NOT NULL DEFAULT FALSE,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_portgroups_uuid UNIQUE (uuid),
    CONSTRAINT uniq_portgroups_name UNIQUE (name),
    CONSTRAINT uniq_portgroups_address UNIQUE (address)
);

CREATE TABLE ports (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    address VARCHAR(18) NOT NULL,
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    portgroup_id BIGINT REFERENCES portgroups (id) ON DELETE SET NULL,
    extra JSONB NOT NULL DEFAULT '{}',
    internal_info JSONB NOT NULL DEFAULT '{}',
    local_link_connection JSONB NOT NULL DEFAULT '{}',
    pxe_enabled BOOLEAN NOT NULL DEFAULT TRUE,
    physical_network VARCHAR(64),
    is_smartnic BOOLEAN NOT NULL DEFAULT FALSE,
    name VARCHAR(255),
    description VARCHAR(255),
    vendor VARCHAR(32),
    category VARCHAR(80),
    available_for_dynamic_portgroup BOOLEAN NOT NULL DEFAULT TRUE,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_ports_uuid UNIQUE (uuid),
    CONSTRAINT uniq_ports_address UNIQUE (address),
    CONSTRAINT uniq_ports_name UNIQUE (name)
);

-- A node's ports and port groups (?node=, /v1/nodes/{node}/ports, VIF attach, the
-- cascade on node delete); a port group's members.
CREATE INDEX ports_node_id_idx ON ports (node_id, id);
CREATE INDEX ports_portgroup_id_idx ON ports (portgroup_id, id);
CREATE INDEX portgroups_node_id_idx ON portgroups (node_id, id);
