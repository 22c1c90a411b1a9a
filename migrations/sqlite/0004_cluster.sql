-- The deployment's identity. Kept in step with migrations/postgres/0004_cluster.sql.

CREATE TABLE cluster (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    cluster_id VARCHAR(36) NOT NULL,
    created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- A random version-4 UUID in canonical text form.
INSERT INTO cluster (cluster_id) VALUES (
    lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
    substr(lower(hex(randomblob(2))), 2) || '-' ||
    substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
    lower(hex(randomblob(6)))
);
