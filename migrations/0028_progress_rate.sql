-- A plan act's progress page polls its rate (moves settled in the last minute) every second or
-- two while it runs: this index reads that window alone (7 ms instead of 40 ms over 100,000
-- obligations). Settling an obligation was not a HOT update already (plan_act_obligations_open
-- covers its state), so the drain pays one index entry more per move, not a heap rewrite.
-- Rule changes get no such index: their settle is HOT today and the drain is the hot path, so
-- their rate query scans the first act's obligations (about 40 ms at 100,000, within the
-- operator pages' bound).
SET LOCAL ROLE core_owner;

CREATE INDEX plan_act_obligations_settled ON core.plan_act_obligations (plan_act_id, settled_at)
    WHERE settled_at IS NOT NULL;

RESET ROLE;
