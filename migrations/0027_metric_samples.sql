-- The operator overview's charts (issue 17): a sample per minute of what the last hour looked
-- like, kept for two hours. Each server writes its own request count for the minute (source: its
-- instance) and, first come first kept, the database's figures (source 'db'), so replicas add up
-- their requests and agree on the rest. No lock of the spec's: plain inserts on this table alone.
SET LOCAL ROLE core_owner;

CREATE TABLE integration.metric_samples (
    name text NOT NULL CHECK (name IN ('requests', 'queue_depth', 'drain_remaining')),
    minute timestamptz NOT NULL CHECK (date_trunc('minute', minute) = minute),
    source text NOT NULL CHECK (length(source) BETWEEN 1 AND 100),
    value double precision NOT NULL CHECK (value >= 0),
    PRIMARY KEY (name, minute, source)
);

GRANT SELECT, INSERT, DELETE ON integration.metric_samples TO console_runtime;
-- A server's second sample in one minute adds to its own request row (ON CONFLICT DO UPDATE).
GRANT UPDATE (value) ON integration.metric_samples TO console_runtime;

-- /metrics reads failed jobs by kind at every scrape; without this it would read every done job.
CREATE INDEX jobs_failed_kind ON integration.jobs (kind) WHERE state = 'failed';

RESET ROLE;
