-- The job queue and its schedules (DESIGN.md §2, "Background work"): our own tables rather
-- than a queue library, so a job is enqueued in the caller's own transaction, operators can read
-- and repair jobs with plain SQL, and the locks are ours to document.
SET LOCAL ROLE core_owner;

-- One row per job run request. A worker claims due rows FOR UPDATE SKIP LOCKED and holds a lease
-- (locked_by, locked_until) while it runs one; a lease that expires (the worker crashed) makes
-- the row claimable again. Done rows are purged after 7 days; failed rows stay for operators.
CREATE TABLE integration.jobs (
    job_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    payload jsonb NOT NULL DEFAULT '{}',
    run_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- src/jobs/queue.rs DEFAULT_MAX_ATTEMPTS repeats this default.
    max_attempts integer NOT NULL DEFAULT 10 CHECK (max_attempts >= 1),
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done', 'failed')),
    -- The worker holding (or that last held) the lease; kept after the run for operators.
    locked_by text,
    -- Set only while running: past it, another worker may re-claim the job.
    locked_until timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    dedupe_key text,
    CONSTRAINT jobs_lease_only_while_running CHECK (
        CASE WHEN state = 'running' THEN locked_by IS NOT NULL AND locked_until IS NOT NULL
             ELSE locked_until IS NULL END
    ),
    CONSTRAINT jobs_finished_when_final CHECK ((state IN ('done', 'failed')) = (finished_at IS NOT NULL))
);

-- A keyed job is never queued twice while one is open; once it is done or failed the key is
-- free again (schedules rely on this: a run still open blocks the next one).
CREATE UNIQUE INDEX jobs_open_dedupe_key ON integration.jobs (dedupe_key)
    WHERE state IN ('pending', 'running');

-- The claim: due rows in (run_at, job_id) order. Expired leases are included (a running row's
-- run_at is always past), and the running rows are few (workers x concurrency), so one index
-- serves both.
CREATE INDEX jobs_claimable ON integration.jobs (run_at, job_id)
    WHERE state IN ('pending', 'running');

-- The purge of old done jobs.
CREATE INDEX jobs_done_finished ON integration.jobs (finished_at) WHERE state = 'done';

-- Wake the workers when a job that is already due is inserted. NOTIFY is delivered at commit,
-- so a rolled-back enqueue wakes nobody; identical notifications in one transaction collapse
-- into one. Future jobs are found by the workers' poll.
CREATE FUNCTION integration.notify_job_inserted() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    PERFORM pg_notify('member_console_jobs', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON integration.jobs
    FOR EACH ROW
    WHEN (NEW.run_at <= now())
    EXECUTE FUNCTION integration.notify_job_inserted();

-- Recurring jobs. The schedule's name is the job kind it enqueues; each run is enqueued with the
-- dedupe key 'schedule:<name>', so runs never overlap. Intervals are fixed lengths (no months or
-- years), so "the next multiple after now" is well defined.
CREATE TABLE integration.job_schedules (
    name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    every interval NOT NULL
        CHECK (every >= interval '1 second' AND date_part('month', every) = 0 AND date_part('year', every) = 0),
    next_run_at timestamptz NOT NULL DEFAULT now(),
    last_enqueued_at timestamptz
);
CREATE INDEX job_schedules_due ON integration.job_schedules (next_run_at);

-- The run-time role: enqueue (insert the caller's columns only), claim/complete/fail (update the
-- lease and outcome columns), purge old done jobs (delete). SELECT is needed by every WHERE and
-- RETURNING, and FOR UPDATE needs UPDATE on some column as well.
GRANT SELECT, DELETE ON integration.jobs TO console_runtime;
GRANT INSERT (kind, payload, run_at, max_attempts, dedupe_key) ON integration.jobs TO console_runtime;
GRANT UPDATE (state, run_at, attempts, locked_by, locked_until, last_error, finished_at)
    ON integration.jobs TO console_runtime;
-- Schedules: registered at start-up (insert, or update the interval), advanced when fired.
GRANT SELECT ON integration.job_schedules TO console_runtime;
GRANT INSERT (name, every, next_run_at) ON integration.job_schedules TO console_runtime;
GRANT UPDATE (every, next_run_at, last_enqueued_at) ON integration.job_schedules TO console_runtime;

-- Back to the migrating role, which records the migration in its ledger.
RESET ROLE;
