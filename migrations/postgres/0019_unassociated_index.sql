-- ?associated=false by id (issue 19). Kept in step with
-- migrations/sqlite/0019_unassociated_index.sql (which changes nothing).
--
-- The unassociated nodes' partial index of 0018, with its predicate written as
-- `num_nulls(instance_uuid) > 0` (the same rows as `instance_uuid IS NULL`). The planner
-- has statistics for `IS NULL` but none for this expression, which it takes to hold for
-- a third of the table. A page of unassociated nodes by id is written the same way
-- (crates/ironic-db/src/nodes.rs, `node_list_sql`), so that walking the primary key and
-- filtering looks three times dearer to it than this index. Written `IS NULL`, the two
-- cost the same, and after a burst of claims (which take the lowest free ids) the walk
-- it took passed every associated node first.
--
-- Pages by any other sort key filter `instance_uuid IS NULL` on that key's index: no
-- index on id could give their order.
DROP INDEX nodes_unassociated_idx;
CREATE INDEX nodes_unassociated_idx ON nodes (id) WHERE num_nulls(instance_uuid) > 0;
