-- ?description_contains= after writes (issue 19). Kept in step with
-- migrations/postgres/0020_trigram_no_pending_list.sql: PostgreSQL's trigram indexes
-- keep no pending list. Nothing changes here: SQLite searches descriptions with instr.
SELECT 1;
