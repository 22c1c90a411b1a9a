-- ?associated=true|false by id (issue 19). Kept in step with
-- migrations/postgres/0018_associated_indexes.sql.
--
-- Claims take the lowest free ids, so associated nodes gather at the start of the id
-- order: walking the primary key for `instance_uuid IS NULL` passes all of them first,
-- and `instance_uuid IS NOT NULL` through the unique index reads every associated node
-- to sort them. One partial index per answer reads exactly the page in id order. Every
-- node is in exactly one of the two, so a node's write costs one index entry for both.
CREATE INDEX nodes_associated_idx ON nodes (id) WHERE instance_uuid IS NOT NULL;
CREATE INDEX nodes_unassociated_idx ON nodes (id) WHERE instance_uuid IS NULL;
