-- Initial schema: conductors, nodes, node traits.
-- Kept in step with migrations/sqlite/0001_initial.sql.

CREATE TABLE conductors (
    id BIGSERIAL PRIMARY KEY,
    hostname VARCHAR(255) NOT NULL,
    conductor_group VARCHAR(255) NOT NULL DEFAULT '',
    drivers JSONB NOT NULL DEFAULT '[]',
    online BOOLEAN NOT NULL DEFAULT TRUE,
    version VARCHAR(32),
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_conductors_hostname UNIQUE (hostname)
);

CREATE TABLE nodes (
    id BIGSERIAL PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255),
    driver VARCHAR(255) NOT NULL,
    driver_info JSONB NOT NULL DEFAULT '{}',
    driver_internal_info JSONB NOT NULL DEFAULT '{}',
    properties JSONB NOT NULL DEFAULT '{}',
    instance_info JSONB NOT NULL DEFAULT '{}',
    extra JSONB NOT NULL DEFAULT '{}',
    instance_uuid VARCHAR(36),
    chassis_uuid VARCHAR(36),
    provision_state VARCHAR(32) NOT NULL,
    target_provision_state VARCHAR(32),
    provision_updated_at TIMESTAMPTZ,
    power_state VARCHAR(32),
    target_power_state VARCHAR(32),
    console_enabled BOOLEAN NOT NULL DEFAULT FALSE,
    maintenance BOOLEAN NOT NULL DEFAULT FALSE,
    maintenance_reason TEXT,
    fault VARCHAR(255),
    last_error TEXT,
    reservation VARCHAR(255),
    clean_step JSONB NOT NULL DEFAULT '{}',
    deploy_step JSONB NOT NULL DEFAULT '{}',
    raid_config JSONB NOT NULL DEFAULT '{}',
    target_raid_config JSONB NOT NULL DEFAULT '{}',
    inspection_started_at TIMESTAMPTZ,
    inspection_finished_at TIMESTAMPTZ,
    resource_class VARCHAR(80),
    conductor_group VARCHAR(255) NOT NULL DEFAULT '',
    automated_clean BOOLEAN,
    protected BOOLEAN NOT NULL DEFAULT FALSE,
    protected_reason TEXT,
    owner VARCHAR(255),
    lessee VARCHAR(255),
    description TEXT,
    -- References allocations(id); the constraint arrives with the allocations table.
    allocation_id BIGINT,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    retired_reason TEXT,
    conductor_affinity BIGINT REFERENCES conductors (id) ON DELETE SET NULL,
    bios_interface VARCHAR(255),
    boot_interface VARCHAR(255),
    console_interface VARCHAR(255),
    deploy_interface VARCHAR(255),
    firmware_interface VARCHAR(255),
    inspect_interface VARCHAR(255),
    management_interface VARCHAR(255),
    network_interface VARCHAR(255),
    power_interface VARCHAR(255),
    raid_interface VARCHAR(255),
    rescue_interface VARCHAR(255),
    storage_interface VARCHAR(255),
    vendor_interface VARCHAR(255),
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_nodes_uuid UNIQUE (uuid),
    CONSTRAINT uniq_nodes_name UNIQUE (name),
    CONSTRAINT uniq_nodes_instance_uuid UNIQUE (instance_uuid)
);

CREATE INDEX nodes_provision_state_idx ON nodes (provision_state);
CREATE INDEX nodes_driver_idx ON nodes (driver);
CREATE INDEX nodes_resource_class_idx ON nodes (resource_class);
CREATE INDEX nodes_conductor_group_idx ON nodes (conductor_group);
CREATE INDEX nodes_owner_idx ON nodes (owner);
CREATE INDEX nodes_lessee_idx ON nodes (lessee);
CREATE INDEX nodes_reservation_idx ON nodes (reservation);
CREATE INDEX nodes_allocation_id_idx ON nodes (allocation_id);

CREATE TABLE node_traits (
    node_id BIGINT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    trait VARCHAR(255) NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (node_id, trait)
);
