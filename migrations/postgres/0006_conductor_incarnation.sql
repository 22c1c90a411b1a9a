-- How many times each conductor has started: a caller whose call was taken by one run
-- of a conductor knows that run is gone when a later one shows up, even if the host
-- restarted too quickly to be declared dead. Kept in step with
-- migrations/sqlite/0006_conductor_incarnation.sql.

ALTER TABLE conductors ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 0;
