-- ?description_contains= searches a table of its own (issue 19). Kept in step with
-- migrations/postgres/0021_node_descriptions.sql, which says why. SQLite has no
-- trigram index: a search reads this table whole, which holds only the described
-- nodes and only their descriptions.
CREATE TABLE node_descriptions (
    node_id INTEGER PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    description TEXT NOT NULL
);
INSERT INTO node_descriptions (node_id, description)
    SELECT id, description FROM nodes WHERE description IS NOT NULL;

CREATE TRIGGER node_descriptions_on_insert AFTER INSERT ON nodes
    WHEN NEW.description IS NOT NULL
BEGIN
    INSERT INTO node_descriptions (node_id, description) VALUES (NEW.id, NEW.description);
END;
CREATE TRIGGER node_descriptions_on_set AFTER UPDATE OF description ON nodes
    WHEN NEW.description IS NOT NULL AND OLD.description IS NOT NEW.description
BEGIN
    INSERT INTO node_descriptions (node_id, description) VALUES (NEW.id, NEW.description)
        ON CONFLICT (node_id) DO UPDATE SET description = excluded.description;
END;
CREATE TRIGGER node_descriptions_on_clear AFTER UPDATE OF description ON nodes
    WHEN NEW.description IS NULL AND OLD.description IS NOT NULL
BEGIN
    DELETE FROM node_descriptions WHERE node_id = NEW.id;
END;
