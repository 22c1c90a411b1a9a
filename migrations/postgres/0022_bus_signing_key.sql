-- The deployment's secret for signing messages on the message bus (docs/rpc.md,
-- "Signatures"). Kept in step with migrations/sqlite/0022_bus_signing_key.sql.
--
-- Every process of a deployment reads it at start, next to cluster_id, unless
-- [amqp] signing_key_file names a key of its own: the split deployment signs its
-- messages with no configuration, and a party that reaches only the broker cannot.
-- 64 hex digits from two random UUIDs (gen_random_uuid draws from the server's strong
-- random source; 244 random bits). Adding a column leaves older processes, which read
-- only cluster_id, working during an upgrade.
ALTER TABLE cluster ADD COLUMN bus_signing_key TEXT NOT NULL DEFAULT '';
UPDATE cluster SET bus_signing_key =
    replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
