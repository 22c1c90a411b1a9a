-- Every list filter and sort key served from an index (issue 19). Kept in step with
-- migrations/sqlite/0017_list_indexes.sql.
--
-- A list is `WHERE <filters> ORDER BY <sort expression> <dir>, id <dir> LIMIT n`, the
-- sort expressions being those of `sort_expr` in crates/ironic-db/src/nodes.rs (and
-- ports.rs, allocations.rs, deploy_templates.rs): NULLs mapped to a value that sorts
-- first, so that keyset pagination can compare (key, id) rows. One `(expression, id)`
-- index per sort key serves the sort, an equality filter on that column (node filters
-- are written with the same expression) and both together with `id` order. The
-- single-column indexes these supersede are dropped. `crates/ironic-db/tests/plans.rs`
-- fails when a filter or sort key has no index.

DROP INDEX IF EXISTS nodes_provision_state_idx;
DROP INDEX IF EXISTS nodes_driver_idx;
DROP INDEX IF EXISTS nodes_resource_class_idx;
DROP INDEX IF EXISTS nodes_conductor_group_idx;
DROP INDEX IF EXISTS nodes_owner_idx;
DROP INDEX IF EXISTS nodes_lessee_idx;
DROP INDEX IF EXISTS nodes_instance_name_idx;

-- Nodes: one index per sort key. The free-text keys (TEXT columns) sort by their first
-- 255 characters: a btree entry may not exceed 2704 bytes, and a long last_error or
-- description must never make a node's write fail.
CREATE INDEX nodes_uuid_key_idx ON nodes (uuid, id);
CREATE INDEX nodes_name_key_idx ON nodes (COALESCE(name, ''), id);
CREATE INDEX nodes_driver_key_idx ON nodes (driver, id);
CREATE INDEX nodes_instance_uuid_key_idx ON nodes (COALESCE(instance_uuid, ''), id);
CREATE INDEX nodes_chassis_uuid_key_idx ON nodes (COALESCE(chassis_uuid, ''), id);
CREATE INDEX nodes_provision_state_key_idx ON nodes (provision_state, id);
CREATE INDEX nodes_target_provision_state_key_idx ON nodes (COALESCE(target_provision_state, ''), id);
CREATE INDEX nodes_provision_updated_at_key_idx ON nodes (COALESCE(provision_updated_at, '-infinity'::timestamptz), id);
CREATE INDEX nodes_power_state_key_idx ON nodes (COALESCE(power_state, ''), id);
CREATE INDEX nodes_target_power_state_key_idx ON nodes (COALESCE(target_power_state, ''), id);
CREATE INDEX nodes_console_enabled_key_idx ON nodes (console_enabled, id);
CREATE INDEX nodes_maintenance_key_idx ON nodes (maintenance, id);
CREATE INDEX nodes_maintenance_reason_key_idx ON nodes (COALESCE(left(maintenance_reason, 255), ''), id);
CREATE INDEX nodes_fault_key_idx ON nodes (COALESCE(fault, ''), id);
CREATE INDEX nodes_last_error_key_idx ON nodes (COALESCE(left(last_error, 255), ''), id);
CREATE INDEX nodes_reservation_key_idx ON nodes (COALESCE(reservation, ''), id);
CREATE INDEX nodes_inspection_started_at_key_idx ON nodes (COALESCE(inspection_started_at, '-infinity'::timestamptz), id);
CREATE INDEX nodes_inspection_finished_at_key_idx ON nodes (COALESCE(inspection_finished_at, '-infinity'::timestamptz), id);
CREATE INDEX nodes_resource_class_key_idx ON nodes (COALESCE(resource_class, ''), id);
CREATE INDEX nodes_conductor_group_key_idx ON nodes (conductor_group, id);
CREATE INDEX nodes_automated_clean_key_idx ON nodes (COALESCE(automated_clean::int, -1), id);
CREATE INDEX nodes_protected_key_idx ON nodes (protected, id);
CREATE INDEX nodes_protected_reason_key_idx ON nodes (COALESCE(left(protected_reason, 255), ''), id);
CREATE INDEX nodes_owner_key_idx ON nodes (COALESCE(owner, ''), id);
CREATE INDEX nodes_lessee_key_idx ON nodes (COALESCE(lessee, ''), id);
CREATE INDEX nodes_description_key_idx ON nodes (COALESCE(left(description, 255), ''), id);
CREATE INDEX nodes_retired_key_idx ON nodes (retired, id);
CREATE INDEX nodes_retired_reason_key_idx ON nodes (COALESCE(left(retired_reason, 255), ''), id);
CREATE INDEX nodes_boot_mode_key_idx ON nodes (COALESCE(boot_mode, ''), id);
CREATE INDEX nodes_secure_boot_key_idx ON nodes (COALESCE(secure_boot::int, -1), id);
CREATE INDEX nodes_shard_key_idx ON nodes (COALESCE(shard, ''), id);
CREATE INDEX nodes_parent_node_key_idx ON nodes (COALESCE(parent_node, ''), id);
CREATE INDEX nodes_disable_power_off_key_idx ON nodes (disable_power_off, id);
CREATE INDEX nodes_instance_name_key_idx ON nodes (COALESCE(instance_name, ''), id);
CREATE INDEX nodes_health_key_idx ON nodes (COALESCE(health, ''), id);
CREATE INDEX nodes_bios_interface_key_idx ON nodes (COALESCE(bios_interface, ''), id);
CREATE INDEX nodes_boot_interface_key_idx ON nodes (COALESCE(boot_interface, ''), id);
CREATE INDEX nodes_console_interface_key_idx ON nodes (COALESCE(console_interface, ''), id);
CREATE INDEX nodes_deploy_interface_key_idx ON nodes (COALESCE(deploy_interface, ''), id);
CREATE INDEX nodes_firmware_interface_key_idx ON nodes (COALESCE(firmware_interface, ''), id);
CREATE INDEX nodes_inspect_interface_key_idx ON nodes (COALESCE(inspect_interface, ''), id);
CREATE INDEX nodes_management_interface_key_idx ON nodes (COALESCE(management_interface, ''), id);
CREATE INDEX nodes_network_interface_key_idx ON nodes (COALESCE(network_interface, ''), id);
CREATE INDEX nodes_power_interface_key_idx ON nodes (COALESCE(power_interface, ''), id);
CREATE INDEX nodes_raid_interface_key_idx ON nodes (COALESCE(raid_interface, ''), id);
CREATE INDEX nodes_rescue_interface_key_idx ON nodes (COALESCE(rescue_interface, ''), id);
CREATE INDEX nodes_storage_interface_key_idx ON nodes (COALESCE(storage_interface, ''), id);
CREATE INDEX nodes_vendor_interface_key_idx ON nodes (COALESCE(vendor_interface, ''), id);
CREATE INDEX nodes_created_at_key_idx ON nodes (created_at, id);
CREATE INDEX nodes_updated_at_key_idx ON nodes (COALESCE(updated_at, '-infinity'::timestamptz), id);

-- ?description_contains= (a substring anywhere): trigrams. pg_trgm ships with
-- PostgreSQL (Debian: postgresql-contrib is part of the server package) and is a
-- trusted extension: the database's owner may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX nodes_description_trgm_idx ON nodes USING gin (description gin_trgm_ops);
CREATE INDEX ports_description_trgm_idx ON ports USING gin (description gin_trgm_ops);

-- Allocations: sorted with NULLs first (NULLS FIRST on nullable keys); last_error by
-- its first 255 characters, as the nodes' free-text keys.
DROP INDEX IF EXISTS allocations_node_id_idx;
CREATE INDEX allocations_uuid_key_idx ON allocations (uuid, id);
CREATE INDEX allocations_name_key_idx ON allocations (name NULLS FIRST, id);
CREATE INDEX allocations_node_id_key_idx ON allocations (node_id NULLS FIRST, id);
CREATE INDEX allocations_state_key_idx ON allocations (state, id);
CREATE INDEX allocations_owner_key_idx ON allocations (owner NULLS FIRST, id);
CREATE INDEX allocations_last_error_key_idx ON allocations (left(last_error, 255) NULLS FIRST, id);
CREATE INDEX allocations_resource_class_key_idx ON allocations (resource_class NULLS FIRST, id);
CREATE INDEX allocations_conductor_affinity_key_idx ON allocations (conductor_affinity NULLS FIRST, id);
CREATE INDEX allocations_created_at_key_idx ON allocations (created_at, id);
CREATE INDEX allocations_updated_at_key_idx ON allocations (updated_at NULLS FIRST, id);

-- Ports and port groups (node_uuid sorts by node_id: the existing (node_id, id)
-- indexes serve it).
CREATE INDEX ports_uuid_key_idx ON ports (uuid, id);
CREATE INDEX ports_address_key_idx ON ports (COALESCE(address, ''), id);
CREATE INDEX ports_portgroup_uuid_key_idx ON ports (COALESCE(portgroup_id, -1), id);
CREATE INDEX ports_pxe_enabled_key_idx ON ports (pxe_enabled, id);
CREATE INDEX ports_physical_network_key_idx ON ports (COALESCE(physical_network, ''), id);
CREATE INDEX ports_is_smartnic_key_idx ON ports (is_smartnic, id);
CREATE INDEX ports_name_key_idx ON ports (COALESCE(name, ''), id);
CREATE INDEX ports_description_key_idx ON ports (COALESCE(description, ''), id);
CREATE INDEX ports_vendor_key_idx ON ports (COALESCE(vendor, ''), id);
CREATE INDEX ports_category_key_idx ON ports (COALESCE(category, ''), id);
CREATE INDEX ports_available_for_dynamic_portgroup_key_idx ON ports (available_for_dynamic_portgroup, id);
CREATE INDEX ports_created_at_key_idx ON ports (created_at, id);
CREATE INDEX ports_updated_at_key_idx ON ports (COALESCE(updated_at, '-infinity'::timestamptz), id);
CREATE INDEX portgroups_uuid_key_idx ON portgroups (uuid, id);
CREATE INDEX portgroups_name_key_idx ON portgroups (COALESCE(name, ''), id);
CREATE INDEX portgroups_address_key_idx ON portgroups (COALESCE(address, ''), id);
CREATE INDEX portgroups_mode_key_idx ON portgroups (mode, id);
CREATE INDEX portgroups_standalone_ports_supported_key_idx ON portgroups (standalone_ports_supported, id);
CREATE INDEX portgroups_physical_network_key_idx ON portgroups (COALESCE(physical_network, ''), id);
CREATE INDEX portgroups_category_key_idx ON portgroups (COALESCE(category, ''), id);
CREATE INDEX portgroups_dynamic_portgroup_key_idx ON portgroups (dynamic_portgroup, id);
CREATE INDEX portgroups_created_at_key_idx ON portgroups (created_at, id);
CREATE INDEX portgroups_updated_at_key_idx ON portgroups (COALESCE(updated_at, '-infinity'::timestamptz), id);

-- Deploy templates.
CREATE INDEX deploy_templates_uuid_key_idx ON deploy_templates (uuid, id);
CREATE INDEX deploy_templates_name_key_idx ON deploy_templates (name, id);
CREATE INDEX deploy_templates_created_at_key_idx ON deploy_templates (created_at, id);
CREATE INDEX deploy_templates_updated_at_key_idx ON deploy_templates (COALESCE(updated_at, '-infinity'::timestamptz), id);
