-- Billing through Stripe (issue 12): prices and the catalog's Stripe mappings, customers,
-- checkout sessions, received events, invoices, the subscriptions' Stripe state and periods, and
-- the outbox's processing columns. The Stripe-side mirrors live in their own schema; what the
-- entitlement core reads (subscriptions, items, periods) stays in core.
-- btree_gist (trusted, shipped with PostgreSQL) lets the periods' exclusion constraint compare
-- ids with =; created by the migrating role, before the switch to core_owner.
CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA public;
CREATE SCHEMA billing AUTHORIZATION core_owner;

SET LOCAL ROLE core_owner;

-- Prices an operator sets on a product. Stripe prices are immutable in amount, so a changed
-- amount is a new row and the old one is archived (active = false), as Stripe does it.
-- sync_state: pending (the outbox has work for it), synced, failed (last_error says why).
CREATE TABLE billing.prices (
    price_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_id bigint NOT NULL REFERENCES core.products,
    billing_interval text NOT NULL CONSTRAINT prices_interval_known CHECK (billing_interval IN ('month', 'year')),
    amount_minor bigint NOT NULL CONSTRAINT prices_amount_positive CHECK (amount_minor > 0 AND amount_minor <= 99999999),
    currency text NOT NULL CONSTRAINT prices_currency_code CHECK (currency ~ '^[a-z]{3}$'),
    active boolean NOT NULL DEFAULT true,
    stripe_price_id text UNIQUE,
    -- Whether Stripe's price is archived too (an archived row whose Stripe price is still active
    -- is work for the next sync).
    stripe_active boolean,
    sync_state text NOT NULL DEFAULT 'unsynced'
        CHECK (sync_state IN ('unsynced', 'pending', 'synced', 'failed')),
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    synced_at timestamptz
);
-- One active price per (product, interval, currency): the one a member buys.
CREATE UNIQUE INDEX prices_one_active ON billing.prices (product_id, billing_interval, currency) WHERE active;
CREATE INDEX prices_product ON billing.prices (product_id, created_at DESC);

-- A product's Stripe product. synced_name is the name Stripe has, so a renamed product is work.
CREATE TABLE billing.product_mappings (
    product_id bigint PRIMARY KEY REFERENCES core.products,
    stripe_product_id text UNIQUE,
    synced_name text,
    sync_state text NOT NULL DEFAULT 'unsynced'
        CHECK (sync_state IN ('unsynced', 'pending', 'synced', 'failed')),
    last_error text,
    synced_at timestamptz
);

-- An organization's Stripe customer: at most one.
CREATE TABLE billing.customers (
    organization_id bigint PRIMARY KEY REFERENCES core.organizations,
    stripe_customer_id text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Checkout sessions the console started, so the return handler knows whose a session is.
CREATE TABLE billing.checkout_sessions (
    stripe_session_id text PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES core.organizations,
    price_id bigint NOT NULL REFERENCES billing.prices,
    started_by bigint REFERENCES core.accounts,
    created_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    stripe_subscription_id text
);
CREATE INDEX checkout_sessions_organization ON billing.checkout_sessions (organization_id, created_at DESC);

-- Every Stripe event received, once by its id: a duplicate delivery finds its row and does nothing.
CREATE TABLE billing.stripe_events (
    event_id text PRIMARY KEY,
    event_type text NOT NULL,
    object_id text,
    stripe_created timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_events_received ON billing.stripe_events (received_at DESC);

-- Invoices as Stripe last showed them, with their lines and payments; written only under the
-- invoice's advisory lock (invoiceReconcile.converge). observed_at: when the written state was
-- read from Stripe, so an older read never overwrites a newer one.
CREATE TABLE billing.invoices (
    stripe_invoice_id text PRIMARY KEY,
    organization_id bigint REFERENCES core.organizations,
    stripe_subscription_id text,
    stripe_customer_id text NOT NULL,
    number text,
    status text NOT NULL CHECK (status IN ('draft', 'open', 'paid', 'uncollectible', 'void')),
    currency text NOT NULL,
    amount_due bigint NOT NULL,
    amount_paid bigint NOT NULL,
    amount_remaining bigint NOT NULL,
    hosted_invoice_url text,
    period_start timestamptz,
    period_end timestamptz,
    stripe_created timestamptz NOT NULL,
    observed_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX invoices_organization ON billing.invoices (organization_id, stripe_created DESC);

CREATE TABLE billing.invoice_lines (
    stripe_line_id text PRIMARY KEY,
    stripe_invoice_id text NOT NULL REFERENCES billing.invoices ON DELETE CASCADE,
    description text,
    amount bigint NOT NULL,
    quantity bigint,
    stripe_price_id text,
    period_start timestamptz,
    period_end timestamptz
);
CREATE INDEX invoice_lines_invoice ON billing.invoice_lines (stripe_invoice_id);

CREATE TABLE billing.invoice_payments (
    stripe_payment_id text PRIMARY KEY,
    stripe_invoice_id text NOT NULL REFERENCES billing.invoices ON DELETE CASCADE,
    status text NOT NULL,
    amount bigint NOT NULL,
    paid_at timestamptz
);
CREATE INDEX invoice_payments_invoice ON billing.invoice_payments (stripe_invoice_id);

-- The sweep's cursor: the newest event it has looked at.
CREATE TABLE billing.sweep_state (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    events_seen_until timestamptz,
    last_run_at timestamptz
);
INSERT INTO billing.sweep_state DEFAULT VALUES;

-- The subscription's Stripe state beside its status. observed_at: when the written state was
-- read from Stripe (the reconcile under the subscription lock skips an older read).
ALTER TABLE core.subscriptions
    ADD COLUMN stripe_customer_id text,
    ADD COLUMN cancel_at_period_end boolean NOT NULL DEFAULT false,
    ADD COLUMN current_period_start timestamptz,
    ADD COLUMN current_period_end timestamptz,
    ADD COLUMN collection_paused boolean NOT NULL DEFAULT false,
    ADD COLUMN ended_at timestamptz,
    ADD COLUMN observed_at timestamptz;

-- An item Stripe no longer lists keeps its row (its provisions and displacements name it) and
-- is marked removed; the price it was bought at.
ALTER TABLE core.subscription_items
    ADD COLUMN stripe_price_id text,
    ADD COLUMN removed_at timestamptz;

-- A subscription's billing periods: no two of one subscription overlap. Two reconciles of one
-- subscription converge on them under its advisory lock instead of racing.
CREATE TABLE core.subscription_periods (
    subscription_id bigint NOT NULL REFERENCES core.subscriptions,
    period tstzrange NOT NULL CHECK (NOT isempty(period)),
    CONSTRAINT subscription_periods_no_overlap EXCLUDE USING gist (subscription_id WITH =, period WITH &&)
);
CREATE INDEX subscription_periods_subscription ON core.subscription_periods (subscription_id, lower(period) DESC);

-- The outbox: a second kind (a product's Stripe sync), and processing with attempts, backoff
-- and a lease, so a processor that dies mid-row gives it back and an operator sees stuck rows.
ALTER TABLE core.outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE core.outbox ADD CONSTRAINT outbox_kind_check CHECK (kind IN ('reconcile_subscription', 'sync_product'));
ALTER TABLE core.outbox
    ADD COLUMN product_id bigint REFERENCES core.products,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN last_error text,
    ADD COLUMN claimed_until timestamptz;
ALTER TABLE core.outbox ADD CONSTRAINT outbox_names_its_object CHECK (
    (kind = 'reconcile_subscription' AND subscription_id IS NOT NULL)
    OR (kind = 'sync_product' AND product_id IS NOT NULL));
-- One pending sync per product: two sync clicks enqueue once.
CREATE UNIQUE INDEX outbox_one_pending_sync ON core.outbox (product_id) WHERE kind = 'sync_product' AND processed_at IS NULL;

-- A job about one Stripe object is queued at most once while pending (a running one may be
-- joined by one more, which reads Stripe after it and so sees what the running one missed).
CREATE UNIQUE INDEX jobs_pending_object ON integration.jobs ((payload->>'object_key'))
    WHERE state = 'pending' AND payload ? 'object_key';

-- Delivery of displaced subscriptions skips items Stripe no longer lists: a removed item has
-- nothing to give back.
CREATE OR REPLACE FUNCTION core.deliver_displaced_subscriptions(p_pool bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    d record;
    c bigint;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    FOR d IN
        SELECT sd.conferral_id, i.subscription_item_id, i.product_id, i.quantity, s.status
        FROM core.subscription_displacements sd
        JOIN core.conferrals old ON old.conferral_id = sd.conferral_id AND old.pool_id = p_pool
        JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
        JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
        WHERE sd.delivered_at IS NULL AND i.removed_at IS NULL
          AND s.status NOT IN ('canceled', 'incomplete_expired', 'incomplete')
        ORDER BY sd.displaced_at DESC, sd.conferral_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, d.product_id) THEN
            c := core.confer(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
            IF d.status IN ('past_due', 'unpaid', 'paused') THEN
                UPDATE core.conferrals SET suspended = true WHERE conferral_id = c;
            END IF;
            UPDATE core.subscription_displacements SET delivered_at = now() WHERE conferral_id = d.conferral_id;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Grants to the run-time role --------------------------------------------------------------------

GRANT USAGE ON SCHEMA billing TO console_runtime;
GRANT SELECT, INSERT ON billing.prices, billing.product_mappings, billing.customers, billing.checkout_sessions,
    billing.stripe_events, billing.invoices, billing.invoice_lines, billing.invoice_payments, core.subscription_periods
TO console_runtime;
GRANT SELECT, UPDATE ON billing.sweep_state TO console_runtime;
GRANT UPDATE (active, stripe_price_id, stripe_active, sync_state, last_error, synced_at) ON billing.prices TO console_runtime;
GRANT UPDATE (stripe_product_id, synced_name, sync_state, last_error, synced_at) ON billing.product_mappings TO console_runtime;
GRANT UPDATE (completed_at, stripe_subscription_id) ON billing.checkout_sessions TO console_runtime;
GRANT UPDATE, DELETE ON billing.invoices, billing.invoice_lines, billing.invoice_payments TO console_runtime;
GRANT UPDATE (period) ON core.subscription_periods TO console_runtime;
GRANT UPDATE (stripe_customer_id, cancel_at_period_end, current_period_start, current_period_end,
    collection_paused, ended_at, observed_at) ON core.subscriptions TO console_runtime;
GRANT UPDATE (stripe_price_id, removed_at) ON core.subscription_items TO console_runtime;
GRANT UPDATE (attempts, last_error, claimed_until, due_at) ON core.outbox TO console_runtime;

RESET ROLE;
