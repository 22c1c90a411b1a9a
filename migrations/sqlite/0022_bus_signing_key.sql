-- The deployment's secret for signing messages on the message bus. Kept in step with
-- migrations/postgres/0022_bus_signing_key.sql (which says why): 64 hex digits, 256
-- random bits.
ALTER TABLE cluster ADD COLUMN bus_signing_key TEXT NOT NULL DEFAULT '';
UPDATE cluster SET bus_signing_key = lower(hex(randomblob(32)));
