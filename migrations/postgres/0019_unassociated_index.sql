-- ?associated=false by id (issue 19). Kept in step with
-- migrations/sqlite/0019_unassociated_index.sql (which changes nothing).
--
-- The unassociated nodes' partial index of 0018, with its predicate written as
-- `num_nulls(instance_uuid) = 1` (the same rows as `instance_uuid IS NULL`). The
-- planner has statistics for `IS NULL` but none for this expression: a page of
-- unassociated nodes by id, written the same way (crates/ironic-db/src/nodes.rs,
-- `node_list_sql`), is always read from this index. Written `IS NULL`, walking the primary
-- key and filtering cost the planner the same as this index, and after a burst of claims
-- (which take the lowest free ids) that walk passed every associated node first.
DROP INDEX nodes_unassociated_idx;
CREATE INDEX nodes_unassociated_idx ON nodes (id) WHERE num_nulls(instance_uuid) = 1;
