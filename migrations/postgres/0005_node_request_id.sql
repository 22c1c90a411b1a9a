-- The request id of the last RPC call that wrote a node (internal, never shown): a call
-- repeated because the conductor of its first attempt died recognises that the first
-- attempt was applied. Kept in step with migrations/sqlite/0005_node_request_id.sql.

ALTER TABLE nodes ADD COLUMN last_request_id VARCHAR(64);
