-- A job about a Stripe object (a webhook's, the sweep's) wakes no worker: NOTIFY takes one
-- cluster-wide lock at every commit that sends it, which serializes the webhook's intake (a
-- commit per event) at Stripe's delivery rates. The workers' poll (every second) claims these
-- jobs; the checkout's return reconciles at once on its own, so no person waits on the poll.
SET LOCAL ROLE core_owner;

DROP TRIGGER jobs_notify_inserted ON integration.jobs;
CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON integration.jobs
    FOR EACH ROW
    WHEN (NEW.run_at <= now() AND NOT (NEW.payload ? 'object_key'))
    EXECUTE FUNCTION integration.notify_job_inserted();

RESET ROLE;
