-- Initial schema: conductors, nodes, node traits.
-- Kept in step with migrations/postgres/0001_initial.sql.

CREATE TABLE conductors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hostname VARCHAR(255) NOT NULL,
    conductor_group VARCHAR(255) NOT NULL DEFAULT '',
    drivers TEXT NOT NULL DEFAULT '[]',
    online INTEGER NOT NULL DEFAULT 1,
    version VARCHAR(32),
    created_at TEXT NOT NULL,
    updated_at TEXT,
    CONSTRAINT uniq_conductors_hostname UNIQUE (hostname)
);

CREATE TABLE nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid VARCHAR(36) NOT NULL,
    name VARCHAR(255),
    driver VARCHAR(255) NOT NULL,
    driver_info TEXT NOT NULL DEFAULT '{}',
    driver_internal_info TEXT NOT NULL DEFAULT '{}',
    properties TEXT NOT NULL DEFAULT '{}',
    instance_info TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    instance_uuid VARCHAR(36),
    chassis_uuid VARCHAR(36),
    provision_state VARCHAR(32) NOT NULL,
    target_provision_state VARCHAR(32),
    provision_updated_at TEXT,
    power_state VARCHAR(32),
    target_power_state VARCHAR(32),
    console_enabled INTEGER NOT NULL DEFAULT 0,
    maintenance INTEGER NOT NULL DEFAULT 0,
    maintenance_reason TEXT,
    fault VARCHAR(255),
    last_error TEXT,
    reservation VARCHAR(255),
    clean_step TEXT NOT NULL DEFAULT '{}',
    deploy_step TEXT NOT NULL DEFAULT '{}',
    raid_config TEXT NOT NULL DEFAULT '{}',
    target_raid_config TEXT NOT NULL DEFAULT '{}',
    inspection_started_at TEXT,
    inspection_finished_at TEXT,
    resource_class VARCHAR(80),
    conductor_group VARCHAR(255) NOT NULL DEFAULT '',
    automated_clean INTEGER,
    protected INTEGER NOT NULL DEFAULT 0,
    protected_reason TEXT,
    owner VARCHAR(255),
    lessee VARCHAR(255),
    description TEXT,
    -- References allocations(id); the constraint arrives with the allocations table.
    allocation_id INTEGER,
    retired INTEGER NOT NULL DEFAULT 0,
    retired_reason TEXT,
    conductor_affinity INTEGER REFERENCES conductors (id) ON DELETE SET NULL,
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
    created_at TEXT NOT NULL,
    updated_at TEXT,
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
    node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    trait VARCHAR(255) NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (node_id, trait)
);
