-- The scheduled-change ledger: a plan change a Stripe subscription schedule will make at a phase
-- boundary (a downgrade at period end, in Billing II's words), as convergeScheduledChanges
-- reads it under the subscription's advisory lock. scheduled → applied (the subscription now
-- carries it), superseded (the schedule no longer holds it), released (its schedule was
-- released with it still ahead, Billing II).
SET LOCAL ROLE core_owner;

CREATE TABLE core.scheduled_changes (
    scheduled_change_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id bigint NOT NULL REFERENCES core.subscriptions,
    stripe_schedule_id text NOT NULL,
    plan_ladder_id bigint NOT NULL REFERENCES core.plan_ladders,
    from_product_id bigint NOT NULL REFERENCES core.products,
    to_product_id bigint NOT NULL REFERENCES core.products,
    effective_at timestamptz NOT NULL,
    state text NOT NULL DEFAULT 'scheduled' CHECK (state IN ('scheduled', 'applied', 'superseded', 'released')),
    created_at timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz,
    CONSTRAINT scheduled_changes_settled_when_final CHECK ((state = 'scheduled') = (settled_at IS NULL))
);
-- At most one change ahead per (subscription, ladder).
CREATE UNIQUE INDEX scheduled_changes_one_ahead ON core.scheduled_changes (subscription_id, plan_ladder_id)
    WHERE state = 'scheduled';

GRANT SELECT, INSERT ON core.scheduled_changes TO console_runtime;
GRANT UPDATE (state, settled_at) ON core.scheduled_changes TO console_runtime;

RESET ROLE;
