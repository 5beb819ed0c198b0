-- Issue 39, following a request: a job enqueued while a request is served keeps that request's
-- id, and the worker runs it under the same id, so the calls it makes to the farm, the connected
-- systems and Stripe carry the member's request id (src/trace_context.rs). Null for a job no
-- request enqueued (schedules, other jobs' follow-ups outside a request).
SET LOCAL ROLE core_owner;

ALTER TABLE integration.jobs
    ADD COLUMN request_id text CHECK (request_id IS NULL OR length(request_id) BETWEEN 1 AND 64);
GRANT INSERT (request_id) ON integration.jobs TO console_runtime;

RESET ROLE;
