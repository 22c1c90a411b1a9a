-- Node fields of microversions 1.66 to 1.109 (issue 17): network_data (1.66),
-- boot_mode and secure_boot (1.75, reported by the management interface), shard (1.82),
-- parent_node (1.83, a node uuid), service_step (1.87), disable_power_off (1.95),
-- instance_name (1.104) and health (1.109). Kept in step with
-- migrations/postgres/0010_node_fields_beyond_1_62.sql.

ALTER TABLE nodes ADD COLUMN network_data TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN boot_mode VARCHAR(16);
ALTER TABLE nodes ADD COLUMN secure_boot INTEGER;
ALTER TABLE nodes ADD COLUMN shard VARCHAR(255);
ALTER TABLE nodes ADD COLUMN parent_node VARCHAR(36);
ALTER TABLE nodes ADD COLUMN service_step TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN disable_power_off INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN instance_name VARCHAR(255);
ALTER TABLE nodes ADD COLUMN health VARCHAR(255);

CREATE INDEX nodes_shard_idx ON nodes (shard);
CREATE INDEX nodes_parent_node_idx ON nodes (parent_node);
CREATE INDEX nodes_instance_name_idx ON nodes (instance_name);
