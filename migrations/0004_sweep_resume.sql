-- The sweep's walk through Stripe's events survives a pass cut short. Stripe lists events newest
-- first and a pass reads a bounded number of pages, so a walk over more events than that takes
-- several passes: `resume_after` is the id of the oldest event the unfinished walk has read (the
-- next pass continues with `starting_after` it), `walk_newest` the time of the newest event that
-- walk read first (the cursor moves there when the walk completes). Both NULL between walks. The
-- runtime's UPDATE on the table is granted table-wide (0001), so it covers these columns.
SET LOCAL ROLE core_owner;

ALTER TABLE billing.sweep_state
    ADD COLUMN resume_after text,
    ADD COLUMN walk_newest timestamptz,
    ADD CONSTRAINT sweep_state_walk CHECK ((resume_after IS NULL) = (walk_newest IS NULL));

RESET ROLE;
