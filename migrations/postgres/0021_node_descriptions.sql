-- ?description_contains= searches a table of its own (issue 19). Kept in step with
-- migrations/sqlite/0021_node_descriptions.sql.
--
-- The trigram index on nodes.description took an entry for every new row version of a
-- described node, and most node writes make one that is not a HOT update (a claim, a
-- provision state change: they touch indexed columns). After 100,000 nodes were made
-- available through the API, the index's posting trees held about three times the
-- pages they held fresh, vacuums did not give them back, and the same search ran at a
-- third of its speed until a REINDEX. Planning the search against nodes also opened
-- every one of its indexes, each time: the plan depends on the needle.
--
-- node_descriptions holds one row per described node, written only when a description
-- changes (the triggers below), so other node writes never touch its trigram index.
-- crates/ironic-db/src/nodes.rs (`DescriptionSearch`) gathers the matching ids here and
-- pages nodes by them, with a plan that does not depend on the needle.
--
-- Nodes are locked until this migration commits, first in the strongest mode that its
-- steps need (the index drop's): services still running during the upgrade cannot
-- change a description the copy below has missed, and no lock is raised midway, which
-- could deadlock with a writer that holds a weaker one. Reads of nodes wait too.
LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE;
CREATE TABLE node_descriptions (
    node_id BIGINT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    description TEXT NOT NULL
);
INSERT INTO node_descriptions (node_id, description)
    SELECT id, description FROM nodes WHERE description IS NOT NULL;
-- Without a pending list, as 0020 set for the others.
CREATE INDEX node_descriptions_trgm_idx ON node_descriptions
    USING gin (description gin_trgm_ops) WITH (fastupdate = off);

CREATE FUNCTION node_descriptions_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.description IS NULL THEN
        DELETE FROM node_descriptions WHERE node_id = NEW.id;
    ELSE
        INSERT INTO node_descriptions (node_id, description)
            VALUES (NEW.id, NEW.description)
            ON CONFLICT (node_id) DO UPDATE SET description = EXCLUDED.description;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER node_descriptions_on_insert AFTER INSERT ON nodes FOR EACH ROW
    WHEN (NEW.description IS NOT NULL)
    EXECUTE FUNCTION node_descriptions_sync();
CREATE TRIGGER node_descriptions_on_update AFTER UPDATE OF description ON nodes FOR EACH ROW
    WHEN (OLD.description IS DISTINCT FROM NEW.description)
    EXECUTE FUNCTION node_descriptions_sync();

DROP INDEX nodes_description_trgm_idx;
