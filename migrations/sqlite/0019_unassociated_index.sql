-- ?associated=false by id (issue 19). Kept in step with
-- migrations/postgres/0019_unassociated_index.sql.
--
-- PostgreSQL's index of unassociated nodes is rewritten there with a predicate its
-- planner has no statistics for. Nothing changes here: SQLite reads a page of
-- unassociated nodes by id from the unique index on instance_uuid, whose NULL entries
-- are kept in rowid (= id) order, and reads just the page.
SELECT 1;
