-- ?description_contains= stays as fast after writes as after a vacuum (issue 19). Kept
-- in step with migrations/sqlite/0020_trigram_no_pending_list.sql (which changes
-- nothing: SQLite has no trigram index).
--
-- A GIN index keeps the entries of new row versions in a pending list, merged into the
-- index by a vacuum or when the list outgrows gin_pending_list_limit (4 MB), and every
-- search reads the whole list. A node's every write that is not a HOT update (a claim,
-- a provision state change: most of them touch an indexed column) added one entry, so
-- the same search took 1 ms after a vacuum and 6 ms after 30,000 writes (100,000
-- nodes, 103 matches). Without the list each write adds its entries to the index itself:
-- 30,000 such updates took 11% longer. The entries already pending are merged now;
-- setting the option locks each index until this migration commits, so queries that
-- plan against nodes or ports wait for the merge (a pending list is 4 MB at most).
ALTER INDEX nodes_description_trgm_idx SET (fastupdate = off);
ALTER INDEX ports_description_trgm_idx SET (fastupdate = off);
SELECT gin_clean_pending_list('nodes_description_trgm_idx');
SELECT gin_clean_pending_list('ports_description_trgm_idx');
