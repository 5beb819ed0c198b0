-- The schema as the first 34 migrations left it, in one file.
--
-- Each section below is one of those migrations (0001_foundation to
-- 0034_on_sale_read_once_per_catalog_change), in the order they applied, with its own comments.
-- A function a later migration created again is written once, in the form in force, where it was
-- first created; the later migrations' restatements are gone. Everything else is as it landed:
-- a database made by this file and one made by the 34 compare equal under `pg_dump` (schema and
-- the migrations' own rows), which is how this file was checked when it was cut. The 34 files are
-- in the repository's history (`git log --follow -- migrations/0005_conferral_functions.sql`).
--
-- A database that applied exactly those 34 (by their checksums) is adopted, not migrated again:
-- `db::migrate` rewrites its ledger to this one version before the migrator runs
-- (docs/operations.md, "Migrations"). New migrations follow from 0002.
--
-- Function bodies are not checked while this file runs (as `pg_dump` does): a function's form in
-- force may call one created further down.
SET LOCAL check_function_bodies = off;
-- ==============================================================================================
-- foundation (was migration 0001)
-- ==============================================================================================
-- Foundation: roles, schemas, advisory key functions, the rendezvous assertion.
--
-- core_owner owns every schema, table and function; console_runtime is what the program
-- connects as at run time and holds only the grants each later migration gives it.
-- Roles are cluster-wide, so they are created only when missing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'core_owner') THEN
        CREATE ROLE core_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'console_runtime') THEN
        CREATE ROLE console_runtime NOLOGIN;
    END IF;
END
$$;

CREATE SCHEMA core AUTHORIZATION core_owner;
CREATE SCHEMA fedwiki AUTHORIZATION core_owner;
CREATE SCHEMA domains AUTHORIZATION core_owner;
CREATE SCHEMA integration AUTHORIZATION core_owner;
REVOKE ALL ON SCHEMA core, fedwiki, domains, integration FROM PUBLIC;
GRANT USAGE ON SCHEMA core, fedwiki, domains, integration TO console_runtime;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- Everything below is owned by core_owner.
SET LOCAL ROLE core_owner;

-- Advisory keys: the one place in SQL where a key is built (spec, "How advisory keys are
-- built"); src/db/keys.rs is the one place in Rust, and it calls these.
-- Family 1: hashtextextended of a fixed name.
CREATE FUNCTION core.rendezvous_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('entitlement_materialization', 0);

-- Family 2: hashtextextended of a prefixed string; the prefix keeps families apart.
CREATE FUNCTION core.lifecycle_instance_key(instance_id text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('lifecycle:' || instance_id, 0);

CREATE FUNCTION core.desired_state_address_key(connection_id text, recipient_kind text, recipient_id text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('desired-state:' || connection_id || ':' || recipient_kind || ':' || recipient_id, 0);

-- Family 3: hashtext of a bare id, widened to bigint (subscription, invoice, product sync,
-- FedWiki workspace). 32 bits of key space shared by the four; a collision serializes two
-- unrelated objects briefly and cannot lose a write.
CREATE FUNCTION core.bare_id_key(id text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtext(id)::bigint;

-- Family 4: a literal constant, the ASCII bytes of "domains"; larger than any 32-bit hash.
CREATE FUNCTION core.registry_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN x'646f6d61696e73'::bigint;

CREATE OR REPLACE FUNCTION core.holds_rendezvous() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_locks
                    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1
                      AND classid = ((core.rendezvous_key() >> 32) & 4294967295)::oid
                      AND objid = (core.rendezvous_key() & 4294967295)::oid);
END
$$;

-- The mark is checked first; a transaction without one (an administrator's session, a test
-- taking the lock by hand) is checked against pg_locks, and a right answer there is sealed.
CREATE OR REPLACE FUNCTION core.assert_rendezvous() RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    seal text := core.rendezvous_seal();
BEGIN
    IF current_setting('core.rendezvous_mark', true) = seal THEN
        RETURN;
    END IF;
    IF NOT core.holds_rendezvous() THEN
        RAISE EXCEPTION 'materialization_rendezvous_missing'
            USING ERRCODE = 'MC001',
                  DETAIL = 'A function that materializes or settles a pool ran in a transaction that does not hold the materialization rendezvous.',
                  HINT = 'Open the transaction as Materializing or RuleChange.';
    END IF;
    PERFORM set_config('core.rendezvous_mark', seal, true);
END
$$;

GRANT EXECUTE ON FUNCTION core.rendezvous_key(), core.lifecycle_instance_key(text),
    core.desired_state_address_key(text, text, text), core.bare_id_key(text), core.registry_key(),
    core.holds_rendezvous(), core.assert_rendezvous()
TO console_runtime;

-- Back to the migrating role, which records the migration in its ledger.
RESET ROLE;
-- ==============================================================================================
-- accounts (was migration 0002)
-- ==============================================================================================
-- Accounts, organizations and membership, web sessions, and the sign-in throttle.
SET LOCAL ROLE core_owner;

CREATE TABLE core.accounts (
    account_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL CHECK (length(email) BETWEEN 3 AND 254 AND email = btrim(email)),
    password_hash text NOT NULL,
    is_operator boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_signed_in_at timestamptz
);
CREATE UNIQUE INDEX accounts_email_key ON core.accounts (lower(email));

CREATE TABLE core.organizations (
    organization_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE core.organization_members (
    organization_id bigint NOT NULL REFERENCES core.organizations ON DELETE CASCADE,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('owner', 'member')),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, account_id)
);
CREATE INDEX organization_members_account ON core.organization_members (account_id);

-- A signed-in browser. The cookie (encrypted) carries the token; only its SHA-256 is kept, so
-- a read of this table cannot sign anyone in. Sign-out deletes the row, which ends the session
-- on every copy of the cookie.
CREATE TABLE core.web_sessions (
    token_hash bytea PRIMARY KEY,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    address text NOT NULL
);
CREATE INDEX web_sessions_account ON core.web_sessions (account_id);
CREATE INDEX web_sessions_expiry ON core.web_sessions (expires_at);

-- Failed sign-ins, counted per account (email) and per client address over a window.
CREATE TABLE core.sign_in_failures (
    failure_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL,
    address text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_failures_email ON core.sign_in_failures (lower(email), failed_at);
CREATE INDEX sign_in_failures_address ON core.sign_in_failures (address, failed_at);

GRANT SELECT, INSERT ON core.accounts TO console_runtime;
GRANT UPDATE (password_hash, is_operator, last_signed_in_at) ON core.accounts TO console_runtime;
GRANT SELECT, INSERT ON core.organizations TO console_runtime;
GRANT UPDATE (name) ON core.organizations TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.organization_members TO console_runtime;
GRANT UPDATE (role) ON core.organization_members TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.web_sessions TO console_runtime;
GRANT UPDATE (last_seen_at, expires_at) ON core.web_sessions TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.sign_in_failures TO console_runtime;

-- Back to the migrating role, which records the migration in its ledger.
RESET ROLE;
-- ==============================================================================================
-- jobs (was migration 0003)
-- ==============================================================================================
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
-- ==============================================================================================
-- entitlement core (was migration 0004)
-- ==============================================================================================
-- The entitlement core: the catalog, the tier topology, organizations' pools, grants and
-- subscriptions as sources, conferrals and their positions, materialized entitlements, usage.
SET LOCAL ROLE core_owner;

-- Catalog ---------------------------------------------------------------------------------------

CREATE TABLE core.resource_keys (
    resource_key text PRIMARY KEY CHECK (resource_key ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$' AND length(resource_key) <= 100),
    kind text NOT NULL CHECK (kind IN ('numeric', 'flag')),
    -- The integration that enforces the key, stamped at boot by RegisterProviders.
    provider text,
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE core.entitlement_sets (
    entitlement_set_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One value per (set, key): a numeric limit per unit of quantity, or a flag.
CREATE TABLE core.entitlement_set_rules (
    entitlement_set_id bigint NOT NULL REFERENCES core.entitlement_sets ON DELETE CASCADE,
    resource_key text NOT NULL REFERENCES core.resource_keys,
    numeric_value bigint CHECK (numeric_value >= 0),
    flag_value boolean,
    PRIMARY KEY (entitlement_set_id, resource_key),
    CHECK ((numeric_value IS NULL) <> (flag_value IS NULL))
);

-- A rule's value must be of its key's kind.
CREATE FUNCTION core.check_rule_kind() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE k text;
BEGIN
    SELECT kind INTO k FROM core.resource_keys WHERE resource_key = NEW.resource_key;
    IF (k = 'numeric') <> (NEW.numeric_value IS NOT NULL) THEN
        RAISE EXCEPTION 'rule_kind_mismatch' USING ERRCODE = 'MC002',
            DETAIL = format('%s is a %s key', NEW.resource_key, k);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER entitlement_set_rules_kind BEFORE INSERT OR UPDATE ON core.entitlement_set_rules
    FOR EACH ROW EXECUTE FUNCTION core.check_rule_kind();

CREATE TABLE core.products (
    product_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    entitlement_set_id bigint REFERENCES core.entitlement_sets,
    published boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Topology --------------------------------------------------------------------------------------

CREATE TABLE core.plan_ladders (
    plan_ladder_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    sort_order integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A ladder's tiers, ranked 0..n; rank 0 is the floor. A product is a tier at most once per
-- ladder; its shape is the set of (ladder, rank) places where it is one.
CREATE TABLE core.plan_ladder_tiers (
    plan_ladder_id bigint NOT NULL REFERENCES core.plan_ladders,
    rank integer NOT NULL CHECK (rank >= 0),
    product_id bigint NOT NULL REFERENCES core.products,
    PRIMARY KEY (plan_ladder_id, rank) DEFERRABLE INITIALLY IMMEDIATE,
    UNIQUE (plan_ladder_id, product_id)
);
CREATE INDEX plan_ladder_tiers_product ON core.plan_ladder_tiers (product_id);

CREATE OR REPLACE FUNCTION core.refuse_tier_product_without_set() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN
    SELECT entitlement_set_id INTO s FROM core.products WHERE product_id = NEW.product_id FOR SHARE;
    IF s IS NULL THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            CONSTRAINT = 'plan_ladder_tiers_product_has_set',
            DETAIL = format('product %s has no entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER plan_ladder_tiers_product_has_set BEFORE INSERT OR UPDATE OF product_id ON core.plan_ladder_tiers
    FOR EACH ROW EXECUTE FUNCTION core.refuse_tier_product_without_set();

CREATE OR REPLACE FUNCTION core.refuse_clearing_tier_product_set() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.entitlement_set_id IS NULL AND OLD.entitlement_set_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers WHERE product_id = NEW.product_id) THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            CONSTRAINT = 'products_keep_set_while_tier',
            DETAIL = format('product %s is a tier and must keep an entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER products_keep_set_while_tier BEFORE UPDATE OF entitlement_set_id ON core.products
    FOR EACH ROW EXECUTE FUNCTION core.refuse_clearing_tier_product_set();

CREATE TABLE core.org_types (
    org_type_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    default_plan_ladder_id bigint REFERENCES core.plan_ladders,
    -- The plan act that currently owns the type's default transition (plan acts come later).
    default_owner_act_id bigint,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Organizations and pools -----------------------------------------------------------------------

-- An organization insert takes FOR KEY SHARE on its type's row through this key.
ALTER TABLE core.organizations ADD COLUMN org_type_id bigint REFERENCES core.org_types;
CREATE INDEX organizations_type ON core.organizations (org_type_id, organization_id);
-- The operator's list: prefix search and order by name, in byte order so one index serves both.
CREATE INDEX organizations_name ON core.organizations ((lower(name) COLLATE "C"), organization_id);

CREATE TABLE core.resource_pools (
    pool_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES core.organizations ON DELETE CASCADE,
    is_default boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX resource_pools_default ON core.resource_pools (organization_id) WHERE is_default;

-- Sources ---------------------------------------------------------------------------------------

CREATE TABLE core.grants (
    grant_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Null while the grant names no organization yet (provisioning).
    organization_id bigint REFERENCES core.organizations,
    product_id bigint NOT NULL REFERENCES core.products,
    quantity integer NOT NULL DEFAULT 1 CHECK (quantity >= 1),
    kind text NOT NULL CHECK (kind IN ('operator', 'floor', 'legacy', 'provisioning')),
    status text NOT NULL CHECK (status IN ('waiting', 'active', 'replaced', 'expired', 'revoked', 'ended')),
    starts_at timestamptz NOT NULL DEFAULT now(),
    ends_at timestamptz,
    reason text NOT NULL DEFAULT '',
    -- Lineage: an extension is a new grant that extends the head.
    extends_grant_id bigint REFERENCES core.grants,
    plan_act_id bigint,
    replaced_at timestamptz,
    ended_at timestamptz,
    created_by bigint REFERENCES core.accounts,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at IS NULL OR ends_at > starts_at)
);
CREATE INDEX grants_organization ON core.grants (organization_id, status);
CREATE UNIQUE INDEX grants_lineage_next ON core.grants (extends_grant_id) WHERE extends_grant_id IS NOT NULL;

CREATE TABLE core.subscriptions (
    subscription_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES core.organizations,
    stripe_subscription_id text NOT NULL UNIQUE,
    status text NOT NULL CHECK (status IN ('incomplete', 'incomplete_expired', 'trialing', 'active', 'past_due', 'unpaid', 'paused', 'canceled')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_organization ON core.subscriptions (organization_id);

CREATE TABLE core.subscription_items (
    subscription_item_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id bigint NOT NULL REFERENCES core.subscriptions ON DELETE CASCADE,
    stripe_item_id text NOT NULL UNIQUE,
    product_id bigint NOT NULL REFERENCES core.products,
    quantity integer NOT NULL CHECK (quantity >= 1)
);

-- Conferrals and positions ----------------------------------------------------------------------

-- One source conferring one product, with a quantity and bounds, to a pool. `state`: holding
-- (it has its positions) or ended. A displaced conferral ends (reason 'displaced'); its source
-- remembers the displacement (the grant becomes replaced; a subscription item gets a
-- displacement record), and coming back is a new conferral. A suspended conferral keeps its
-- positions but confers nothing.
CREATE TABLE core.conferrals (
    conferral_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pool_id bigint NOT NULL REFERENCES core.resource_pools,
    product_id bigint NOT NULL REFERENCES core.products,
    grant_id bigint REFERENCES core.grants,
    subscription_item_id bigint REFERENCES core.subscription_items,
    quantity integer NOT NULL CHECK (quantity >= 1),
    starts_at timestamptz NOT NULL DEFAULT now(),
    ends_at timestamptz,
    state text NOT NULL DEFAULT 'holding' CHECK (state IN ('holding', 'ended')),
    suspended boolean NOT NULL DEFAULT false,
    displaced_by bigint REFERENCES core.conferrals,
    ended_reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    CHECK ((grant_id IS NULL) <> (subscription_item_id IS NULL))
);
CREATE INDEX conferrals_pool_live ON core.conferrals (pool_id) WHERE state <> 'ended';
CREATE UNIQUE INDEX conferrals_grant_live ON core.conferrals (grant_id) WHERE state <> 'ended' AND grant_id IS NOT NULL;
CREATE INDEX conferrals_product_holding ON core.conferrals (product_id) WHERE state = 'holding';
CREATE INDEX conferrals_item_live ON core.conferrals (subscription_item_id) WHERE state <> 'ended' AND subscription_item_id IS NOT NULL;

-- A holding conferral's place on each ladder of its product's shape. A pool holds at most one
-- live position per ladder.
CREATE TABLE core.positions (
    pool_id bigint NOT NULL REFERENCES core.resource_pools,
    plan_ladder_id bigint NOT NULL REFERENCES core.plan_ladders,
    conferral_id bigint NOT NULL REFERENCES core.conferrals,
    rank integer NOT NULL,
    PRIMARY KEY (pool_id, plan_ladder_id)
);
CREATE INDEX positions_conferral ON core.positions (conferral_id);
CREATE INDEX positions_ladder_rank ON core.positions (plan_ladder_id, rank);

-- A subscription provision displaced by another plan; open until it is delivered back.
CREATE TABLE core.subscription_displacements (
    conferral_id bigint PRIMARY KEY REFERENCES core.conferrals,
    subscription_item_id bigint NOT NULL REFERENCES core.subscription_items,
    displaced_by bigint NOT NULL REFERENCES core.conferrals,
    displaced_at timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz
);
CREATE UNIQUE INDEX subscription_displacements_open ON core.subscription_displacements (subscription_item_id)
    WHERE delivered_at IS NULL;

-- Entitlements and usage ------------------------------------------------------------------------

CREATE TABLE core.pool_entitlements (
    pool_id bigint NOT NULL REFERENCES core.resource_pools,
    resource_key text NOT NULL REFERENCES core.resource_keys,
    numeric_value bigint,
    flag_value boolean,
    PRIMARY KEY (pool_id, resource_key)
);

-- The counted use of a numeric key in a pool; `used` is written only under this row's lock.
CREATE TABLE core.numeric_entitlement_usage (
    pool_id bigint NOT NULL REFERENCES core.resource_pools,
    resource_key text NOT NULL REFERENCES core.resource_keys,
    used bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    counted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, resource_key)
);

-- The limit readable next to the count.
CREATE VIEW core.pool_usage AS
SELECT u.pool_id, u.resource_key, u.used, coalesce(e.numeric_value, 0) AS limit_value, u.counted_at
FROM core.numeric_entitlement_usage u
LEFT JOIN core.pool_entitlements e USING (pool_id, resource_key);

RESET ROLE;
-- ==============================================================================================
-- conferral functions (was migration 0005)
-- ==============================================================================================
-- The conferral functions the spec names. Each asserts the rendezvous and locks the pool row
-- itself (spec rules 1 and 2), so a caller that goes straight to one still holds it. They are
-- SECURITY DEFINER, owned by core_owner: console_runtime writes conferrals, positions and
-- entitlements only through them (spec rule 9).
SET LOCAL ROLE core_owner;

-- The pool row, FOR UPDATE, taken once per transaction: every conferral function takes it again
-- (spec rule 2), and the pool a transaction locked last needs no second statement. The mark is
-- transaction-local and set only once the lock is granted; a row lock is held to the end of the
-- transaction, and a rolled-back subtransaction reverts both together.
CREATE OR REPLACE FUNCTION core.lock_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    IF current_setting('core.locked_pool', true) = p_pool::text THEN
        RETURN;
    END IF;
    PERFORM 1 FROM core.resource_pools WHERE pool_id = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool_not_found' USING ERRCODE = 'MC004', DETAIL = format('pool %s', p_pool);
    END IF;
    PERFORM set_config('core.locked_pool', p_pool::text, true);
END
$$;

CREATE OR REPLACE FUNCTION core.lock_pools(p_pools bigint[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM 1 FROM core.resource_pools WHERE pool_id = ANY (p_pools) ORDER BY pool_id FOR UPDATE;
END
$$;

-- Take a holder off all its ladders, as a whole: a floor simply ends, a grant becomes replaced,
-- a subscription provision gets a displacement record. Internal: the caller holds the pool row.
CREATE FUNCTION core.displace_conferral(p_holder bigint, p_by bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    h core.conferrals%ROWTYPE;
    g_kind text;
BEGIN
    SELECT * INTO h FROM core.conferrals WHERE conferral_id = p_holder;
    DELETE FROM core.positions WHERE conferral_id = p_holder;
    UPDATE core.conferrals
       SET state = 'ended', ended_reason = 'displaced', ended_at = now(), displaced_by = p_by
     WHERE conferral_id = p_holder;
    IF h.grant_id IS NOT NULL THEN
        SELECT kind INTO g_kind FROM core.grants WHERE grant_id = h.grant_id;
        IF g_kind = 'floor' THEN
            UPDATE core.grants SET status = 'ended', ended_at = now() WHERE grant_id = h.grant_id;
        ELSE
            UPDATE core.grants SET status = 'replaced', replaced_at = now() WHERE grant_id = h.grant_id;
        END IF;
    ELSE
        -- One open displacement per item: a later one replaces it.
        INSERT INTO core.subscription_displacements (conferral_id, subscription_item_id, displaced_by)
        VALUES (p_holder, h.subscription_item_id, p_by)
        ON CONFLICT (subscription_item_id) WHERE delivered_at IS NULL
        DO UPDATE SET conferral_id = EXCLUDED.conferral_id, displaced_by = EXCLUDED.displaced_by, displaced_at = now();
    END IF;
END
$$;

-- Confer a product to a pool from a grant or a subscription item. The newcomer takes every
-- ladder of its product's shape; what held any of them is displaced as a whole.
CREATE FUNCTION core.confer(
    p_pool bigint, p_product bigint, p_grant bigint, p_item bigint, p_quantity integer,
    p_starts timestamptz DEFAULT now(), p_ends timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    c bigint;
    h bigint;
    vacated boolean := false;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    INSERT INTO core.conferrals (pool_id, product_id, grant_id, subscription_item_id, quantity, starts_at, ends_at)
    VALUES (p_pool, p_product, p_grant, p_item, p_quantity, p_starts, p_ends)
    RETURNING conferral_id INTO c;
    FOR h IN
        SELECT DISTINCT p.conferral_id
        FROM core.positions p
        JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = p.plan_ladder_id AND t.product_id = p_product
        WHERE p.pool_id = p_pool
        ORDER BY p.conferral_id
    LOOP
        -- A holder with a ladder the newcomer does not take leaves that ladder vacant.
        vacated := vacated OR EXISTS (
            SELECT 1 FROM core.positions hp
            WHERE hp.conferral_id = h
              AND NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                              WHERE t.product_id = p_product AND t.plan_ladder_id = hp.plan_ladder_id));
        PERFORM core.displace_conferral(h, c);
    END LOOP;
    INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
    SELECT p_pool, t.plan_ladder_id, c, t.rank FROM core.plan_ladder_tiers t WHERE t.product_id = p_product;
    IF vacated THEN
        -- The ladders the displaced holder leaves behind fill as when a holder ends. What comes
        -- back takes only free or floor-held ladders, so it displaces nothing that vacates more.
        PERFORM core.resume_replaced_grants(p_pool);
        PERFORM core.deliver_displaced_subscriptions(p_pool);
        PERFORM core.reapply_defaults_if_vacant(p_pool);
    END IF;
    RETURN c;
END
$$;

-- Ending a grant's holding conferral ends the grant when nothing else did (revocation and
-- expiry set their own status first; an extension marks the old grant ended itself), so no
-- grant stays active with nothing conferred.
CREATE OR REPLACE FUNCTION core.end_conferral(p_conferral bigint, p_reason text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    p bigint;
    g bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id, grant_id INTO p, g FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.lock_pool(p);
    DELETE FROM core.positions WHERE conferral_id = p_conferral;
    UPDATE core.conferrals SET state = 'ended', ended_reason = p_reason, ended_at = now()
     WHERE conferral_id = p_conferral AND state = 'holding';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF g IS NOT NULL THEN
        UPDATE core.grants SET status = 'ended', ended_at = now() WHERE grant_id = g AND status = 'active';
    END IF;
    RETURN true;
END
$$;

-- Bring a holding conferral's positions in line with its product's shape now (after a tier
-- add, removal or renumbering): leave ladders no longer in the shape, take new ones (displacing
-- what holds them), and carry the current ranks.
CREATE FUNCTION core.align_conferral_shape(p_conferral bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    c core.conferrals%ROWTYPE;
    h bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO c FROM core.conferrals WHERE conferral_id = p_conferral;
    IF c.conferral_id IS NULL OR c.state <> 'holding' THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool(c.pool_id);
    DELETE FROM core.positions p
     WHERE p.conferral_id = p_conferral
       AND NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                        WHERE t.product_id = c.product_id AND t.plan_ladder_id = p.plan_ladder_id);
    UPDATE core.positions p SET rank = t.rank
      FROM core.plan_ladder_tiers t
     WHERE p.conferral_id = p_conferral AND t.product_id = c.product_id
       AND t.plan_ladder_id = p.plan_ladder_id AND p.rank <> t.rank;
    FOR h IN
        SELECT DISTINCT p.conferral_id
        FROM core.positions p
        JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = p.plan_ladder_id AND t.product_id = c.product_id
        WHERE p.pool_id = c.pool_id AND p.conferral_id <> p_conferral
        ORDER BY p.conferral_id
    LOOP
        PERFORM core.displace_conferral(h, p_conferral);
    END LOOP;
    INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
    SELECT c.pool_id, t.plan_ladder_id, p_conferral, t.rank
      FROM core.plan_ladder_tiers t
     WHERE t.product_id = c.product_id
    ON CONFLICT (pool_id, plan_ladder_id) DO NOTHING;
END
$$;

-- Change a conferral's quantity and end bound.
CREATE FUNCTION core.update_conferral_bounds(p_conferral bigint, p_quantity integer, p_ends timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    p bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id INTO p FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool(p);
    UPDATE core.conferrals SET quantity = p_quantity, ends_at = p_ends
     WHERE conferral_id = p_conferral AND state = 'holding';
END
$$;

-- Suspend ('suspended') or reinstate ('active') the holding provisions of one subscription:
-- they keep their ladders either way. Returns how many changed.
CREATE FUNCTION core.sync_source_status(p_subscription bigint, p_status text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    IF p_status NOT IN ('active', 'suspended') THEN
        RAISE EXCEPTION 'unknown source status %', p_status USING ERRCODE = '22023';
    END IF;
    PERFORM core.lock_pools(ARRAY(
        SELECT DISTINCT c.pool_id FROM core.conferrals c
        JOIN core.subscription_items i USING (subscription_item_id)
        WHERE i.subscription_id = p_subscription AND c.state = 'holding'));
    UPDATE core.conferrals c SET suspended = (p_status = 'suspended')
      FROM core.subscription_items i
     WHERE i.subscription_item_id = c.subscription_item_id AND i.subscription_id = p_subscription
       AND c.state = 'holding' AND c.suspended <> (p_status = 'suspended');
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION core.compute_entitlements(p_pool bigint)
RETURNS TABLE (resource_key text, numeric_value bigint, flag_value boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    RETURN QUERY
    SELECT r.resource_key,
           CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END,
           CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END
    FROM core.conferrals c
    JOIN core.products p ON p.product_id = c.product_id
    JOIN core.entitlement_set_rules r ON r.entitlement_set_id = p.entitlement_set_id
    JOIN core.resource_keys k ON k.resource_key = r.resource_key
    WHERE c.pool_id = p_pool AND c.state = 'holding' AND NOT c.suspended
    GROUP BY r.resource_key, k.kind;
END
$$;

CREATE OR REPLACE FUNCTION core.materialize_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    -- One statement: its parts see one snapshot, and the upsert writes per key in byte order.
    WITH m AS MATERIALIZED (
        SELECT r.resource_key,
               CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END AS numeric_value,
               CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END AS flag_value
        FROM core.conferrals c
        JOIN core.products p ON p.product_id = c.product_id
        JOIN core.entitlement_set_rules r ON r.entitlement_set_id = p.entitlement_set_id
        JOIN core.resource_keys k ON k.resource_key = r.resource_key
        WHERE c.pool_id = p_pool AND c.state = 'holding' AND NOT c.suspended
        GROUP BY r.resource_key, k.kind
    ),
    gone AS (
        DELETE FROM core.pool_entitlements e
         WHERE e.pool_id = p_pool AND NOT EXISTS (SELECT 1 FROM m WHERE m.resource_key = e.resource_key)
    ),
    written AS (
        INSERT INTO core.pool_entitlements (pool_id, resource_key, numeric_value, flag_value)
        SELECT p_pool, m.resource_key, m.numeric_value, m.flag_value FROM m
        ORDER BY m.resource_key COLLATE "C"
        ON CONFLICT (pool_id, resource_key) DO UPDATE
           SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value
         WHERE (core.pool_entitlements.numeric_value, core.pool_entitlements.flag_value)
               IS DISTINCT FROM (EXCLUDED.numeric_value, EXCLUDED.flag_value)
    )
    INSERT INTO core.numeric_entitlement_usage (pool_id, resource_key)
    SELECT p_pool, m.resource_key FROM m WHERE m.numeric_value IS NOT NULL
    ORDER BY m.resource_key COLLATE "C"
    ON CONFLICT DO NOTHING;
END
$$;

CREATE OR REPLACE FUNCTION core.ladders_free_for(p_pool bigint, p_product bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1
        FROM core.plan_ladder_tiers t
        JOIN core.positions p ON p.pool_id = p_pool AND p.plan_ladder_id = t.plan_ladder_id
        JOIN core.conferrals c ON c.conferral_id = p.conferral_id
        LEFT JOIN core.grants g ON g.grant_id = c.grant_id
        WHERE t.product_id = p_product AND g.kind IS DISTINCT FROM 'floor'
    );
END
$$;

-- A grant inserted active is not written a second time when it is conferred.
CREATE OR REPLACE FUNCTION core.confer_grant(p_grant bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    g core.grants%ROWTYPE;
    p bigint;
    c bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO g FROM core.grants WHERE grant_id = p_grant;
    SELECT pool_id INTO p FROM core.resource_pools WHERE organization_id = g.organization_id AND is_default;
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    c := core.confer(p, g.product_id, g.grant_id, NULL, g.quantity, g.starts_at, g.ends_at);
    IF g.status <> 'active' OR g.replaced_at IS NOT NULL THEN
        UPDATE core.grants SET status = 'active', replaced_at = NULL WHERE grant_id = p_grant;
    END IF;
    RETURN c;
END
$$;

-- Resume replaced grants (ResumeReplacedGrantsTx's SQL): under the pool row, most recently
-- replaced first, each grant whose ladders are all vacant (or held by a floor) and that has not
-- run out confers again. Returns how many resumed.
CREATE FUNCTION core.resume_replaced_grants(p_pool bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    org bigint;
    g record;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
    FOR g IN
        SELECT grant_id, product_id FROM core.grants
        WHERE organization_id = org AND status = 'replaced' AND (ends_at IS NULL OR ends_at > now())
        ORDER BY replaced_at DESC, grant_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, g.product_id) THEN
            PERFORM core.confer_grant(g.grant_id);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

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

-- The floor (ReapplyDefaultsIfVacant's SQL): when the organization's type has a default ladder
-- with a rank 0 and the pool holds nothing on that ladder, confer rank 0 as a floor grant.
-- Returns the floor grant, or NULL when none was needed.
CREATE FUNCTION core.reapply_defaults_if_vacant(p_pool bigint, p_plan_act bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    org bigint;
    ladder bigint;
    floor_product bigint;
    g bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT o.organization_id, t.default_plan_ladder_id INTO org, ladder
      FROM core.resource_pools rp
      JOIN core.organizations o USING (organization_id)
      LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
     WHERE rp.pool_id = p_pool;
    IF ladder IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT product_id INTO floor_product FROM core.plan_ladder_tiers WHERE plan_ladder_id = ladder AND rank = 0;
    IF floor_product IS NULL
       OR EXISTS (SELECT 1 FROM core.positions WHERE pool_id = p_pool AND plan_ladder_id = ladder) THEN
        RETURN NULL;
    END IF;
    INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason, plan_act_id)
    VALUES (org, floor_product, 1, 'floor', 'active', 'the organization type''s default', p_plan_act)
    RETURNING grant_id INTO g;
    PERFORM core.confer_grant(g);
    RETURN g;
END
$$;

-- Grants to the run-time role ------------------------------------------------------------------

GRANT SELECT ON core.resource_keys, core.entitlement_sets, core.entitlement_set_rules, core.products,
    core.plan_ladders, core.plan_ladder_tiers, core.org_types, core.resource_pools, core.grants,
    core.subscriptions, core.subscription_items, core.conferrals, core.positions,
    core.subscription_displacements, core.pool_entitlements, core.numeric_entitlement_usage, core.pool_usage
TO console_runtime;
GRANT INSERT ON core.resource_keys, core.entitlement_sets, core.entitlement_set_rules, core.products,
    core.plan_ladders, core.plan_ladder_tiers, core.org_types, core.resource_pools, core.grants,
    core.subscriptions, core.subscription_items
TO console_runtime;
GRANT UPDATE (provider, description) ON core.resource_keys TO console_runtime;
GRANT UPDATE (name) ON core.entitlement_sets TO console_runtime;
GRANT UPDATE (numeric_value, flag_value), DELETE ON core.entitlement_set_rules TO console_runtime;
GRANT UPDATE (name, entitlement_set_id, published) ON core.products TO console_runtime;
GRANT UPDATE (name, sort_order) ON core.plan_ladders TO console_runtime;
GRANT UPDATE (rank, product_id), DELETE ON core.plan_ladder_tiers TO console_runtime;
GRANT UPDATE (name, default_plan_ladder_id, default_owner_act_id) ON core.org_types TO console_runtime;
GRANT UPDATE (org_type_id) ON core.organizations TO console_runtime;
GRANT UPDATE (status, ends_at, replaced_at, ended_at, organization_id, quantity, starts_at) ON core.grants TO console_runtime;
GRANT UPDATE (status, updated_at) ON core.subscriptions TO console_runtime;
GRANT UPDATE (quantity, product_id) ON core.subscription_items TO console_runtime;
GRANT UPDATE (used, counted_at) ON core.numeric_entitlement_usage TO console_runtime;

GRANT EXECUTE ON FUNCTION core.lock_pool(bigint), core.lock_pools(bigint[]),
    core.confer(bigint, bigint, bigint, bigint, integer, timestamptz, timestamptz),
    core.end_conferral(bigint, text), core.align_conferral_shape(bigint),
    core.update_conferral_bounds(bigint, integer, timestamptz), core.sync_source_status(bigint, text),
    core.compute_entitlements(bigint), core.materialize_pool(bigint), core.ladders_free_for(bigint, bigint),
    core.confer_grant(bigint), core.resume_replaced_grants(bigint), core.deliver_displaced_subscriptions(bigint),
    core.reapply_defaults_if_vacant(bigint, bigint)
TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.displace_conferral(bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION core.lock_pool(bigint), core.lock_pools(bigint[]),
    core.confer(bigint, bigint, bigint, bigint, integer, timestamptz, timestamptz),
    core.end_conferral(bigint, text), core.align_conferral_shape(bigint),
    core.update_conferral_bounds(bigint, integer, timestamptz), core.sync_source_status(bigint, text),
    core.compute_entitlements(bigint), core.materialize_pool(bigint), core.ladders_free_for(bigint, bigint),
    core.confer_grant(bigint), core.resume_replaced_grants(bigint), core.deliver_displaced_subscriptions(bigint),
    core.reapply_defaults_if_vacant(bigint, bigint)
FROM PUBLIC;

RESET ROLE;
-- ==============================================================================================
-- grants (was migration 0006)
-- ==============================================================================================
-- Grants: lineage, waiting grants (by date, or by the email domain of an organization not yet
-- created), revocation, expiry, the audit trail, and the outbox of reconcile requests.
SET LOCAL ROLE core_owner;

-- The lineage a grant belongs to: the first grant's id. An extension is a new grant that extends
-- the head (the grant no other extends); at most one grant extends another (the unique index on
-- extends_grant_id from 0004).
ALTER TABLE core.grants ADD COLUMN lineage_id bigint;
UPDATE core.grants SET lineage_id = grant_id;
ALTER TABLE core.grants ALTER COLUMN lineage_id SET NOT NULL;
CREATE INDEX grants_lineage ON core.grants (lineage_id);

-- A grant that names no organization names the email domain whose organization it waits for.
ALTER TABLE core.grants ADD COLUMN provision_domain text
    CHECK (provision_domain IS NULL OR provision_domain ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$');
ALTER TABLE core.grants ADD CONSTRAINT grants_names_a_recipient
    CHECK (organization_id IS NOT NULL OR provision_domain IS NOT NULL);
CREATE INDEX grants_waiting_domain ON core.grants (provision_domain) WHERE organization_id IS NULL AND status = 'waiting';
-- The sweep: live grants by end, waiting grants by start.
CREATE INDEX grants_live_end ON core.grants (ends_at) WHERE status IN ('active', 'replaced', 'waiting') AND ends_at IS NOT NULL;
CREATE INDEX grants_waiting_start ON core.grants (starts_at) WHERE status = 'waiting' AND organization_id IS NOT NULL;

-- The organization's email domain, which domain grants wait for.
ALTER TABLE core.organizations ADD COLUMN email_domain text
    CHECK (email_domain IS NULL OR email_domain ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$');
CREATE UNIQUE INDEX organizations_email_domain ON core.organizations (email_domain) WHERE email_domain IS NOT NULL;

-- Family 2 (a prefixed string): an email domain being provisioned. A domain grant's issue and
-- the creation of an organization with that domain take it, so one always sees the other.
CREATE FUNCTION core.provision_domain_key(domain text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('provision-domain:' || domain, 0);
GRANT EXECUTE ON FUNCTION core.provision_domain_key(text) TO console_runtime;

-- Who did what to a grant, when and why.
CREATE TABLE core.grant_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    grant_id bigint NOT NULL REFERENCES core.grants,
    organization_id bigint REFERENCES core.organizations,
    act text NOT NULL CHECK (act IN ('issued', 'started', 'revoked', 'expired', 'extended', 'rescheduled', 'provisioned')),
    actor_account_id bigint REFERENCES core.accounts,
    reason text NOT NULL DEFAULT '',
    detail jsonb NOT NULL DEFAULT '{}',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX grant_events_grant ON core.grant_events (grant_id, at);
CREATE INDEX grant_events_organization ON core.grant_events (organization_id, at DESC);

-- Requests for work another transaction does after this one commits (the billing issue's
-- processor claims them); an insert in the act's transaction, taking no lock.
CREATE TABLE core.outbox (
    outbox_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('reconcile_subscription')),
    subscription_id bigint REFERENCES core.subscriptions,
    payload jsonb NOT NULL DEFAULT '{}',
    due_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);
CREATE INDEX outbox_pending ON core.outbox (due_at) WHERE processed_at IS NULL;

-- The grant row's new columns for the run-time role.
GRANT INSERT ON core.grant_events, core.outbox TO console_runtime;
GRANT SELECT ON core.grant_events, core.outbox TO console_runtime;
GRANT UPDATE (processed_at) ON core.outbox TO console_runtime;
GRANT UPDATE (email_domain) ON core.organizations TO console_runtime;
GRANT UPDATE (reason, provision_domain) ON core.grants TO console_runtime;

-- Every new grant belongs to a lineage: an extension joins the lineage of the grant it extends,
-- any other grant (floors included) starts its own.
CREATE OR REPLACE FUNCTION core.set_grant_lineage() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lineage_id IS NULL THEN
        IF NEW.extends_grant_id IS NOT NULL THEN
            SELECT lineage_id INTO NEW.lineage_id FROM core.grants WHERE grant_id = NEW.extends_grant_id;
        ELSE
            NEW.lineage_id := NEW.grant_id;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER grants_lineage BEFORE INSERT ON core.grants FOR EACH ROW EXECUTE FUNCTION core.set_grant_lineage();

RESET ROLE;
-- ==============================================================================================
-- rule changes (was migration 0007)
-- ==============================================================================================
-- Rule changes: an operator's batch of deltas to one set's rules. Each delta is an act with an
-- obligation per pool that carried the set when it committed; the commit settles them inline at
-- or below the sync cap, above it the drain settles one pool per short transaction.
SET LOCAL ROLE core_owner;

CREATE TABLE core.entitlement_set_changes (
    change_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entitlement_set_id bigint NOT NULL REFERENCES core.entitlement_sets,
    created_by bigint REFERENCES core.accounts,
    reason text NOT NULL DEFAULT '',
    -- 'draining' until every obligation settled; 'settled' after.
    state text NOT NULL DEFAULT 'draining' CHECK (state IN ('draining', 'settled')),
    -- Settled inside the commit (at or below the sync cap).
    settled_inline boolean NOT NULL DEFAULT false,
    -- Whether every carrying pool has its obligations written. At or below the sync cap the
    -- commit writes them; above it the drain lists them in batches after the commit, so the
    -- exclusive hold does not grow with the number of pools (see docs/domain.md).
    listed boolean NOT NULL DEFAULT true,
    listed_through bigint NOT NULL DEFAULT 0,
    pools_owed integer NOT NULL DEFAULT 0,
    committed_at timestamptz NOT NULL DEFAULT now(),
    -- How long the commit held the exclusive rendezvous, as the service measured it.
    hold_ms double precision,
    settled_at timestamptz
);
CREATE INDEX entitlement_set_changes_draining ON core.entitlement_set_changes (change_id) WHERE state = 'draining';

-- One delta: a rule's value before and after (NULL both sides of a kind: no rule).
CREATE TABLE core.entitlement_set_change_acts (
    act_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    change_id bigint NOT NULL REFERENCES core.entitlement_set_changes,
    position integer NOT NULL,
    resource_key text NOT NULL REFERENCES core.resource_keys,
    old_numeric bigint,
    old_flag boolean,
    new_numeric bigint,
    new_flag boolean,
    UNIQUE (change_id, position)
);

-- What an act owes one pool: a materialization under the new rule. Kept lean (no foreign key to
-- the pool, a small state) because a change to a widely carried set writes one per pool inside
-- the exclusive hold.
CREATE TABLE core.entitlement_set_change_obligations (
    act_id bigint NOT NULL REFERENCES core.entitlement_set_change_acts,
    pool_id bigint NOT NULL,
    state text NOT NULL DEFAULT 'owed' CHECK (state IN ('owed', 'settled', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error text,
    settled_at timestamptz,
    PRIMARY KEY (act_id, pool_id)
);
-- Every act of a batch owes the same pools (one set, one moment) and a pool's acts settle
-- together, so the drain walks the first act's rows in pool_id order on the primary key; no
-- second index slows the commit's inserts.

-- Holds the exclusive rendezvous? (A rule change must.)
CREATE FUNCTION core.assert_exclusive_rendezvous() RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1 AND mode = 'ExclusiveLock'
          AND classid = ((core.rendezvous_key() >> 32) & 4294967295)::oid
          AND objid = (core.rendezvous_key() & 4294967295)::oid) THEN
        RAISE EXCEPTION 'materialization_rendezvous_missing' USING ERRCODE = 'MC001',
            DETAIL = 'A rule change ran without the exclusive materialization rendezvous.',
            HINT = 'Open the transaction as RuleChange.';
    END IF;
END
$$;

-- The drain lists a set's carrying pools in pool_id order, by product.
CREATE INDEX conferrals_product_pool_holding ON core.conferrals (product_id, pool_id) WHERE state = 'holding';

-- One delta of a batch: under the exclusive rendezvous, the set row (again; the batch took it
-- first), then the rule row; record the act, write the rule, and, when `p_list`, owe every pool
-- that carries the set now. Returns the act and how many pools it owes.
CREATE FUNCTION core.commit_rule_change(
    p_change bigint, p_position integer, p_set bigint, p_key text, p_numeric bigint, p_flag boolean, p_list boolean
) RETURNS TABLE (act_id bigint, pools bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    old_n bigint;
    old_f boolean;
    a bigint;
    n bigint;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    PERFORM 1 FROM core.entitlement_sets WHERE entitlement_set_id = p_set FOR UPDATE;
    SELECT r.numeric_value, r.flag_value INTO old_n, old_f
      FROM core.entitlement_set_rules r
     WHERE r.entitlement_set_id = p_set AND r.resource_key = p_key
       FOR UPDATE;
    INSERT INTO core.entitlement_set_change_acts (change_id, position, resource_key, old_numeric, old_flag, new_numeric, new_flag)
    VALUES (p_change, p_position, p_key, old_n, old_f, p_numeric, p_flag)
    RETURNING entitlement_set_change_acts.act_id INTO a;
    IF p_numeric IS NULL AND p_flag IS NULL THEN
        DELETE FROM core.entitlement_set_rules WHERE entitlement_set_id = p_set AND resource_key = p_key;
    ELSE
        INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value, flag_value)
        VALUES (p_set, p_key, p_numeric, p_flag)
        ON CONFLICT (entitlement_set_id, resource_key)
        DO UPDATE SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value;
    END IF;
    n := 0;
    IF p_list THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT DISTINCT a, c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding'
         WHERE p.entitlement_set_id = p_set;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT a, n;
END
$$;

-- Settle one act's obligation to one pool: the pool row, then the obligation row. With no
-- error, an owed (or failed) obligation is marked settled (the caller materialized the pool
-- under the same pool row); with an error, the attempt is recorded and the next one scheduled
-- with backoff. Returns whether it changed the obligation (a second pass changes nothing).
CREATE FUNCTION core.settle_obligation(p_act bigint, p_pool bigint, p_error text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    st text;
    tries integer;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT o.state, o.attempts INTO st, tries
      FROM core.entitlement_set_change_obligations o
     WHERE o.act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE;
    IF st IS NULL OR st = 'settled' THEN
        RETURN false;
    END IF;
    IF p_error IS NULL THEN
        UPDATE core.entitlement_set_change_obligations
           SET state = 'settled', settled_at = now(), attempts = tries + 1, next_attempt_at = NULL
         WHERE act_id = p_act AND pool_id = p_pool;
    ELSE
        -- 2 s, 4 s, 8 s ... capped at 10 minutes.
        UPDATE core.entitlement_set_change_obligations
           SET state = 'failed', attempts = tries + 1, last_error = left(p_error, 2000),
               next_attempt_at = now() + least(interval '10 minutes', interval '2 seconds' * power(2, least(tries, 12)))
         WHERE act_id = p_act AND pool_id = p_pool;
    END IF;
    RETURN true;
END
$$;

-- The drain's listing, above the sync cap: the next pools (after the change's mark, in pool_id
-- order) that carry the set now, owed by every act of the change. Under the shared rendezvous.
-- A pool that stopped carrying since the commit was materialized then, under the new rules; one
-- that started since was materialized under them too; so listing after the commit owes exactly
-- the pools that still need it. Returns how many it listed; done when a batch comes back short.
CREATE FUNCTION core.list_rule_change_obligations(p_change bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    ch core.entitlement_set_changes%ROWTYPE;
    pools bigint[];
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO ch FROM core.entitlement_set_changes WHERE change_id = p_change AND NOT listed FOR UPDATE;
    IF ch.change_id IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(pool_id ORDER BY pool_id) INTO pools FROM (
        SELECT DISTINCT c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding' AND c.pool_id > ch.listed_through
         WHERE p.entitlement_set_id = ch.entitlement_set_id
         ORDER BY c.pool_id LIMIT p_limit) x;
    n := coalesce(array_length(pools, 1), 0);
    IF n > 0 THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT a.act_id, p.pool_id FROM core.entitlement_set_change_acts a CROSS JOIN unnest(pools) AS p(pool_id)
         WHERE a.change_id = p_change
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE core.entitlement_set_changes
       SET listed_through = coalesce(pools[n], listed_through), listed = (n < p_limit),
           pools_owed = pools_owed + n
     WHERE change_id = p_change;
    RETURN n;
END
$$;

-- A change is settled when it is listed and none of its obligations is unsettled.
CREATE FUNCTION core.finish_rule_change_if_settled(p_change bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    UPDATE core.entitlement_set_changes ch SET state = 'settled', settled_at = now()
     WHERE ch.change_id = p_change AND ch.state = 'draining' AND ch.listed
       AND NOT EXISTS (
           SELECT 1 FROM core.entitlement_set_change_acts a
           JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
           WHERE a.change_id = p_change AND o.state <> 'settled');
    RETURN FOUND;
END
$$;

GRANT SELECT ON core.entitlement_set_changes, core.entitlement_set_change_acts, core.entitlement_set_change_obligations
TO console_runtime;
GRANT INSERT ON core.entitlement_set_changes TO console_runtime;
GRANT UPDATE (pools_owed, settled_inline, hold_ms, listed) ON core.entitlement_set_changes TO console_runtime;
-- The operator's Retry brings failed obligations forward.
GRANT UPDATE (next_attempt_at) ON core.entitlement_set_change_obligations TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.commit_rule_change(bigint, integer, bigint, text, bigint, boolean, boolean),
    core.list_rule_change_obligations(bigint, integer),
    core.settle_obligation(bigint, bigint, text), core.finish_rule_change_if_settled(bigint),
    core.assert_exclusive_rendezvous() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.commit_rule_change(bigint, integer, bigint, text, bigint, boolean, boolean),
    core.list_rule_change_obligations(bigint, integer),
    core.settle_obligation(bigint, bigint, text), core.finish_rule_change_if_settled(bigint),
    core.assert_exclusive_rendezvous()
TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- materialize without temp tables (was migration 0008)
-- ==============================================================================================
-- Materialization in one statement, with plans the session caches: the first version built a
-- temporary table per call and computed through a SQL function that is planned on every call,
-- which made a drain settle a few hundred pools a second.
SET LOCAL ROLE core_owner;

-- settlePool in one call: the pool row, the acts of the change the pool still owes (read under
-- the row), one materialization, then the obligation rows of those acts settled (after the pool
-- row, as core.settle_obligation takes them). False when nothing was owed any more.
CREATE FUNCTION core.settle_change_pool(p_change bigint, p_pool bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    owed bigint[];
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT array_agg(o.act_id ORDER BY x.position) INTO owed
      FROM core.entitlement_set_change_obligations o
      JOIN core.entitlement_set_change_acts x ON x.act_id = o.act_id
     WHERE x.change_id = p_change AND o.pool_id = p_pool AND o.state <> 'settled';
    IF owed IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.materialize_pool(p_pool);
    -- Every owed act of the pool settles in one statement (what core.settle_obligation does per
    -- act, without a round of statements each): the pool row is held, so no other pass can be
    -- settling or failing these rows, and they are all this one pool's.
    UPDATE core.entitlement_set_change_obligations
       SET state = 'settled', settled_at = now(), attempts = attempts + 1, next_attempt_at = NULL
     WHERE act_id = ANY (owed) AND pool_id = p_pool AND state <> 'settled';
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION core.settle_change_pool(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.settle_change_pool(bigint, bigint) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- plan acts (was migration 0009)
-- ==============================================================================================
-- Plan acts: operators' changes to the tier topology that reach existing organizations. This
-- migration records acts and their detail; the default change's obligations come with it.
SET LOCAL ROLE core_owner;

CREATE TABLE core.plan_acts (
    plan_act_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('tier_add', 'tier_removal', 'tier_delete', 'default_change', 'tier_reorder', 'retry')),
    disposition text CHECK (disposition IN ('migrate', 'grandfather')),
    created_by bigint REFERENCES core.accounts,
    reason text NOT NULL DEFAULT '',
    -- 'done' once every organization it reaches is settled; acts that reach none are done at once.
    state text NOT NULL DEFAULT 'done' CHECK (state IN ('running', 'done')),
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- What the act did, in the words of the topology when it was done.
CREATE TABLE core.plan_act_details (
    plan_act_id bigint PRIMARY KEY REFERENCES core.plan_acts,
    plan_ladder_id bigint REFERENCES core.plan_ladders,
    ladder_name text NOT NULL DEFAULT '',
    product_id bigint REFERENCES core.products,
    product_name text NOT NULL DEFAULT '',
    rank integer,
    org_type_id bigint REFERENCES core.org_types,
    detail jsonb NOT NULL DEFAULT '{}'
);

-- core.record_plan_act: the act and its detail row, in the act's transaction.
CREATE FUNCTION core.record_plan_act(
    p_kind text, p_disposition text, p_actor bigint, p_reason text, p_ladder bigint, p_product bigint,
    p_rank integer, p_org_type bigint, p_detail jsonb
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    a bigint;
BEGIN
    INSERT INTO core.plan_acts (kind, disposition, created_by, reason, finished_at)
    VALUES (p_kind, p_disposition, p_actor, coalesce(p_reason, ''), now())
    RETURNING plan_act_id INTO a;
    INSERT INTO core.plan_act_details (plan_act_id, plan_ladder_id, ladder_name, product_id, product_name, rank, org_type_id, detail)
    VALUES (a, p_ladder, coalesce((SELECT name FROM core.plan_ladders WHERE plan_ladder_id = p_ladder), ''),
            p_product, coalesce((SELECT name FROM core.products WHERE product_id = p_product), ''),
            p_rank, p_org_type, coalesce(p_detail, '{}'));
    RETURN a;
END
$$;

GRANT SELECT ON core.plan_acts, core.plan_act_details TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.record_plan_act(text, text, bigint, text, bigint, bigint, integer, bigint, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.record_plan_act(text, text, bigint, text, bigint, bigint, integer, bigint, jsonb) TO console_runtime;
-- After a ladder's tiers are renumbered, its positions carry the new ranks. Only under the
-- exclusive rendezvous (a tier change), so no conferral function runs meanwhile.
CREATE FUNCTION core.sync_position_ranks(p_ladder bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    UPDATE core.positions p SET rank = t.rank
      FROM core.conferrals c, core.plan_ladder_tiers t
     WHERE p.plan_ladder_id = p_ladder AND c.conferral_id = p.conferral_id
       AND t.plan_ladder_id = p_ladder AND t.product_id = c.product_id AND p.rank <> t.rank;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION core.sync_position_ranks(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.sync_position_ranks(bigint) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- default change (was migration 0010)
-- ==============================================================================================
-- The default change: T0 moves an org type's default to another ladder; listing batches write
-- one obligation per organization of the type; one move per organization settles it.
SET LOCAL ROLE core_owner;

ALTER TABLE core.org_types ADD CONSTRAINT org_types_default_owner
    FOREIGN KEY (default_owner_act_id) REFERENCES core.plan_acts;

-- The types an act reaches, with how far its listing has come.
CREATE TABLE core.plan_act_reached_types (
    plan_act_id bigint NOT NULL REFERENCES core.plan_acts,
    org_type_id bigint NOT NULL REFERENCES core.org_types,
    -- The default the type had before the act: the floor the moves take away.
    from_ladder_id bigint REFERENCES core.plan_ladders,
    listed_through bigint NOT NULL DEFAULT 0,
    listing_done boolean NOT NULL DEFAULT false,
    PRIMARY KEY (plan_act_id, org_type_id)
);

CREATE TABLE core.plan_act_obligations (
    plan_act_id bigint NOT NULL REFERENCES core.plan_acts,
    pool_id bigint NOT NULL,
    organization_id bigint NOT NULL,
    org_type_id bigint NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'migrated', 'grandfathered', 'vacant', 'failed', 'superseded')),
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    settled_at timestamptz,
    PRIMARY KEY (plan_act_id, pool_id)
);
-- A batch supersedes the open obligations of earlier acts on its pools.
CREATE INDEX plan_act_obligations_open ON core.plan_act_obligations (pool_id) WHERE state IN ('pending', 'failed');

-- core.outgoing_default_exists: does any organization of the type still hold a floor grant of
-- the given ladder? (Index probes: grants by organization, positions by pool.)
CREATE FUNCTION core.outgoing_default_exists(p_type bigint, p_ladder bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT EXISTS (
        SELECT 1 FROM core.organizations o
        JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        JOIN core.positions ps ON ps.pool_id = rp.pool_id AND ps.plan_ladder_id = p_ladder
        JOIN core.conferrals c ON c.conferral_id = ps.conferral_id
        JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
        WHERE o.org_type_id = p_type)
$$;

-- One listing batch (ListPlanActBatch): the next organizations of the type after the listing's
-- mark, their pool rows FOR KEY SHARE in ascending pool_id, the open obligations of earlier acts
-- on those pools FOR UPDATE in the same order (superseded), then the inserts in organization
-- order. Returns how many it listed; the listing is done when a batch comes back short.
CREATE FUNCTION core.write_plan_act_obligations(p_act bigint, p_type bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    mark bigint;
    orgs bigint[];
    pools bigint[];
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT listed_through INTO mark FROM core.plan_act_reached_types
     WHERE plan_act_id = p_act AND org_type_id = p_type AND NOT listing_done;
    IF mark IS NULL THEN
        RETURN 0;
    END IF;
    -- A later act took the type's default over: it lists the type itself; this listing stops.
    IF NOT EXISTS (SELECT 1 FROM core.org_types WHERE org_type_id = p_type AND default_owner_act_id = p_act) THEN
        UPDATE core.plan_act_reached_types SET listing_done = true WHERE plan_act_id = p_act AND org_type_id = p_type;
        RETURN 0;
    END IF;
    SELECT array_agg(o.organization_id ORDER BY o.organization_id), array_agg(rp.pool_id ORDER BY o.organization_id)
      INTO orgs, pools
      FROM (SELECT organization_id FROM core.organizations
             WHERE org_type_id = p_type AND organization_id > mark ORDER BY organization_id LIMIT p_limit) o
      JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default;
    n := coalesce(array_length(orgs, 1), 0);
    IF n > 0 THEN
        PERFORM 1 FROM core.resource_pools WHERE pool_id = ANY (pools) ORDER BY pool_id FOR KEY SHARE;
        PERFORM 1 FROM core.plan_act_obligations
          WHERE pool_id = ANY (pools) AND plan_act_id < p_act AND org_type_id = p_type AND state IN ('pending', 'failed')
          ORDER BY pool_id, plan_act_id FOR UPDATE;
        UPDATE core.plan_act_obligations SET state = 'superseded', settled_at = now()
         WHERE pool_id = ANY (pools) AND plan_act_id < p_act AND org_type_id = p_type AND state IN ('pending', 'failed');
        INSERT INTO core.plan_act_obligations (plan_act_id, pool_id, organization_id, org_type_id)
        SELECT p_act, p.pool_id, p.organization_id, p_type
          FROM unnest(orgs, pools) AS p(organization_id, pool_id)
         ORDER BY p.organization_id
        ON CONFLICT DO NOTHING;
        UPDATE core.plan_act_reached_types SET listed_through = orgs[n]
         WHERE plan_act_id = p_act AND org_type_id = p_type;
    END IF;
    IF n < p_limit THEN
        UPDATE core.plan_act_reached_types SET listing_done = true WHERE plan_act_id = p_act AND org_type_id = p_type;
    END IF;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION core.lock_plan_act_obligation(p_act bigint, p_pool bigint)
RETURNS TABLE (state text, owns boolean, org_type_id bigint, from_ladder_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT o.state, t.default_owner_act_id = p_act, o.org_type_id, r.from_ladder_id
      FROM core.plan_act_obligations o
      JOIN core.org_types t ON t.org_type_id = o.org_type_id
      JOIN core.plan_act_reached_types r ON r.plan_act_id = o.plan_act_id AND r.org_type_id = o.org_type_id
     WHERE o.plan_act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE OF o;
END
$$;

CREATE OR REPLACE FUNCTION core.settle_plan_act_obligation(p_act bigint, p_pool bigint, p_state text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    UPDATE core.plan_act_obligations SET state = p_state, settled_at = now(), attempts = attempts + 1
     WHERE plan_act_id = p_act AND pool_id = p_pool AND state = 'pending';
END
$$;

-- A failed move, recorded in a plain transaction of its own, only while still pending.
CREATE FUNCTION core.record_plan_act_obligation_failure(p_act bigint, p_pool bigint, p_error text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    UPDATE core.plan_act_obligations SET state = 'failed', attempts = attempts + 1, last_error = left(p_error, 2000)
     WHERE plan_act_id = p_act AND pool_id = p_pool AND state = 'pending';
$$;

-- Retry: the act's failed obligations of the types it still owns, FOR UPDATE in ascending
-- pool_id, pending again. Returns how many.
CREATE FUNCTION core.requeue_plan_act_obligations(p_act bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    -- The act's row first: the drain's last probe takes it too, so a Retry and the act's finish
    -- cannot cross (a requeue the finish did not see would be left pending on a done act).
    PERFORM 1 FROM core.plan_acts WHERE plan_act_id = p_act FOR UPDATE;
    PERFORM 1 FROM core.plan_act_obligations o JOIN core.org_types t ON t.org_type_id = o.org_type_id
      WHERE o.plan_act_id = p_act AND o.state = 'failed' AND t.default_owner_act_id = p_act
      ORDER BY o.pool_id FOR UPDATE OF o;
    UPDATE core.plan_act_obligations o SET state = 'pending', last_error = NULL
      FROM core.org_types t
     WHERE t.org_type_id = o.org_type_id AND o.plan_act_id = p_act AND o.state = 'failed' AND t.default_owner_act_id = p_act;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE core.plan_acts SET state = 'running', finished_at = NULL WHERE plan_act_id = p_act;
    END IF;
    RETURN n;
END
$$;

GRANT SELECT ON core.plan_act_reached_types, core.plan_act_obligations TO console_runtime;
GRANT INSERT ON core.plan_act_reached_types TO console_runtime;
GRANT UPDATE (state, finished_at) ON core.plan_acts TO console_runtime;

-- The move's floor: a floor grant of the pool on a ladder that is not the type's default now,
-- or on the default ladder but of a product that is not its rank 0 now (a reorder moved it).
CREATE OR REPLACE FUNCTION core.floor_off_default(p_pool bigint, p_type bigint)
RETURNS TABLE (conferral_id bigint, grant_id bigint, product_id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.conferral_id, g.grant_id, g.product_id
      FROM core.positions p
      JOIN core.conferrals c ON c.conferral_id = p.conferral_id
      JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
      JOIN core.org_types t ON t.org_type_id = p_type
     WHERE p.pool_id = p_pool
       AND (p.plan_ladder_id IS DISTINCT FROM t.default_plan_ladder_id OR p.rank <> 0)
     ORDER BY c.conferral_id
     LIMIT 1;
END
$$;
REVOKE EXECUTE ON FUNCTION core.floor_off_default(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.floor_off_default(bigint, bigint) TO console_runtime;
GRANT INSERT ON core.plan_acts, core.plan_act_details TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint), core.write_plan_act_obligations(bigint, bigint, integer),
    core.lock_plan_act_obligation(bigint, bigint), core.settle_plan_act_obligation(bigint, bigint, text),
    core.record_plan_act_obligation_failure(bigint, bigint, text), core.requeue_plan_act_obligations(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint), core.write_plan_act_obligations(bigint, bigint, integer),
    core.lock_plan_act_obligation(bigint, bigint), core.settle_plan_act_obligation(bigint, bigint, text),
    core.record_plan_act_obligation_failure(bigint, bigint, text), core.requeue_plan_act_obligations(bigint)
TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- tier removal and reorder (was migration 0011)
-- ==============================================================================================
-- Tier removal and the tier reorder. A reorder that changes a ladder's rank 0 reaches the types
-- defaulting to the ladder without changing their default ladder: the floor that moves is the
-- old rank-0 product, so an act remembers it next to the ladder.
SET LOCAL ROLE core_owner;

-- A tier removal ends its incumbents' grants; a grandfathered incumbent's legacy grant says why.
ALTER TABLE core.grant_events DROP CONSTRAINT grant_events_act_check,
    ADD CONSTRAINT grant_events_act_check
    CHECK (act IN ('issued', 'started', 'revoked', 'expired', 'extended', 'rescheduled', 'provisioned', 'ended', 'grandfathered'));

ALTER TABLE core.plan_act_reached_types ADD COLUMN from_product_id bigint REFERENCES core.products;

-- core.outgoing_default_exists takes the floor's product too (a reorder's old floor is one product
-- of a ladder that stays the default); a null product is any product of the ladder, which is what
-- the two-argument form it replaces asked.
DROP FUNCTION core.outgoing_default_exists(bigint, bigint);
CREATE FUNCTION core.outgoing_default_exists(p_type bigint, p_ladder bigint, p_product bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT EXISTS (
        SELECT 1 FROM core.organizations o
        JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        JOIN core.positions ps ON ps.pool_id = rp.pool_id AND ps.plan_ladder_id = p_ladder
        JOIN core.conferrals c ON c.conferral_id = ps.conferral_id
        JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
        WHERE o.org_type_id = p_type AND (p_product IS NULL OR c.product_id = p_product))
$$;

-- RenumberTiers: a ladder's tiers take the given ranks (products in rank order, from 0), with the
-- rank key deferred to the commit. Only under the exclusive rendezvous.
CREATE FUNCTION core.renumber_tiers(p_ladder bigint, p_products bigint[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    SET CONSTRAINTS core.plan_ladder_tiers_pkey DEFERRED;
    UPDATE core.plan_ladder_tiers t SET rank = o.ord - 1
      FROM unnest(p_products) WITH ORDINALITY AS o(product_id, ord)
     WHERE t.plan_ladder_id = p_ladder AND t.product_id = o.product_id AND t.rank <> o.ord - 1;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint, bigint), core.renumber_tiers(bigint, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint, bigint), core.renumber_tiers(bigint, bigint[])
TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- one call per move (was migration 0012)
-- ==============================================================================================
-- A plan act's move in one SQL call, and the functions on its path in plpgsql: a SQL-language
-- function that is not inlined (every SECURITY DEFINER one) is planned again on each call, while
-- plpgsql keeps its plans for the session.
SET LOCAL ROLE core_owner;

-- EnactObligation: one organization's move, in the spec's order: the pool row, then the
-- obligation row (core.lock_plan_act_obligation, with the type's owner read in the same
-- statement), then the bucket's work under the pool row, then the settlement. Returns the state
-- it settled, or NULL when there was nothing to do (settled already, or not pending).
CREATE FUNCTION core.enact_plan_act_obligation(p_act bigint, p_pool bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    ob record;
    fl record;
    disp text;
    org bigint;
    legacy bigint;
    why text;
    settled text;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT * INTO ob FROM core.lock_plan_act_obligation(p_act, p_pool);
    IF NOT FOUND OR ob.state <> 'pending' THEN
        RETURN NULL;
    END IF;
    IF NOT ob.owns THEN
        -- A later act owns the type's default now: this one no longer moves it.
        settled := 'superseded';
    ELSE
        SELECT disposition INTO disp FROM core.plan_acts WHERE plan_act_id = p_act;
        SELECT * INTO fl FROM core.floor_off_default(p_pool, ob.org_type_id);
        IF fl.conferral_id IS NULL THEN
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'vacant';
        ELSIF disp = 'grandfather' THEN
            -- The incumbent keeps its old floor, as a legacy grant of the same product.
            PERFORM core.end_conferral(fl.conferral_id, 'grandfathered');
            SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
            why := format('grandfathered by plan act #%s (was floor grant #%s)', p_act, fl.grant_id);
            INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason, plan_act_id)
            VALUES (org, fl.product_id, 1, 'legacy', 'active', why, p_act)
            RETURNING grant_id INTO legacy;
            INSERT INTO core.grant_events (grant_id, organization_id, act, reason, detail)
            VALUES (legacy, org, 'grandfathered', why, jsonb_build_object('plan_act_id', p_act));
            PERFORM core.confer_grant(legacy);
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'grandfathered';
        ELSE
            -- No resumption: a floor displaces nothing, and what a floor held was free for any
            -- replaced grant or displaced subscription all along (core.ladders_free_for).
            PERFORM core.end_conferral(fl.conferral_id, 'migrated');
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'migrated';
        END IF;
        PERFORM core.materialize_pool(p_pool);
        IF settled = 'grandfathered' THEN
            -- RequestPoolSubscriptionReconciles: inserts, no lock.
            INSERT INTO core.outbox (kind, subscription_id, payload)
            SELECT 'reconcile_subscription', s.subscription_id,
                   jsonb_build_object('stripe_subscription_id', s.stripe_subscription_id, 'cause', 'grandfathered')
              FROM core.subscriptions s
             WHERE s.organization_id = org AND s.status NOT IN ('canceled', 'incomplete_expired')
             ORDER BY s.subscription_id;
        END IF;
    END IF;
    PERFORM core.settle_plan_act_obligation(p_act, p_pool, settled);
    -- The move commits without waiting for its WAL to reach the disk: it is work the drain can
    -- redo. A crash that loses it loses it whole (the settlement with the effects), so the
    -- obligation is pending again and the next drain moves the organization once; any later
    -- synchronous commit (the act's finish, a grant act) flushes it first.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN settled;
END
$$;

REVOKE EXECUTE ON FUNCTION core.enact_plan_act_obligation(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.enact_plan_act_obligation(bigint, bigint) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- hardening (was migration 0013)
-- ==============================================================================================
-- Hardening: a sign-in throttle that counts exactly and cannot lock a person out for good;
-- sessions with an absolute end; backstop timeouts for the run-time role; a rendezvous mark the
-- run-time role cannot forge; every SECURITY DEFINER function with its search_path pinned.
SET LOCAL ROLE core_owner;

-- Sign-in throttle (docs/operations.md, "Sign-in limits").
-- Per (email, address): failures in a row, and when the next attempt may come. An attempt is
-- counted before its password is verified (a reservation), so parallel guesses cannot outrun
-- the count; a success clears the row. Keyed by the email as typed (lowered), so unknown
-- addresses are throttled like known ones and the answer reveals nothing.
CREATE TABLE core.sign_in_throttle (
    email_key text NOT NULL CHECK (email_key = lower(email_key)),
    address text NOT NULL,
    failures integer NOT NULL CHECK (failures >= 0),
    last_failure_at timestamptz NOT NULL DEFAULT now(),
    not_before timestamptz,
    PRIMARY KEY (email_key, address)
);
CREATE INDEX sign_in_throttle_last_failure ON core.sign_in_throttle (last_failure_at);

-- Per address, over a fixed window: failures against any account (password spraying).
CREATE TABLE core.sign_in_addresses (
    address text PRIMARY KEY,
    window_started_at timestamptz NOT NULL,
    failures integer NOT NULL CHECK (failures >= 0)
);

DROP TABLE core.sign_in_failures;

GRANT SELECT, INSERT, UPDATE, DELETE ON core.sign_in_throttle, core.sign_in_addresses TO console_runtime;

-- One sign-in attempt's reservation, in one statement's worth of work: the address's window
-- row, then the (email, address) row, each locked in that order (docs/database-locks.md, "Sign
-- in"). Answers whether the attempt may go on, and if not, how many seconds until it may.
-- The delay after the `p_free`-th failure in a row doubles from `p_first_delay` up to `p_cap`.
CREATE FUNCTION core.reserve_sign_in(
    p_email text, p_address text,
    p_address_window interval, p_address_max integer,
    p_free integer, p_first_delay interval, p_cap interval, p_forget interval
) RETURNS TABLE (allowed boolean, retry_after_s integer)
LANGUAGE plpgsql AS $$
DECLARE
    w core.sign_in_addresses;
    t core.sign_in_throttle;
    n integer;
BEGIN
    -- Counters, not money: a crash may lose the last instant's counts, and the attempt's
    -- commit need not wait for the disk (a burst of sign-ins stays cheap).
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO core.sign_in_addresses (address, window_started_at, failures)
    VALUES (p_address, now(), 0) ON CONFLICT (address) DO NOTHING;
    SELECT * INTO w FROM core.sign_in_addresses WHERE address = p_address FOR UPDATE;
    IF w.window_started_at <= now() - p_address_window THEN
        w.window_started_at := now();
        w.failures := 0;
    END IF;
    IF w.failures >= p_address_max THEN
        RETURN QUERY SELECT false, ceil(extract(epoch FROM w.window_started_at + p_address_window - now()))::integer;
        RETURN;
    END IF;

    INSERT INTO core.sign_in_throttle (email_key, address, failures)
    VALUES (lower(p_email), p_address, 0) ON CONFLICT (email_key, address) DO NOTHING;
    SELECT * INTO t FROM core.sign_in_throttle WHERE email_key = lower(p_email) AND address = p_address FOR UPDATE;
    IF t.last_failure_at <= now() - p_forget THEN
        t.failures := 0;
        t.not_before := NULL;
    END IF;
    IF t.not_before > now() THEN
        RETURN QUERY SELECT false, ceil(extract(epoch FROM t.not_before - now()))::integer;
        RETURN;
    END IF;

    n := t.failures + 1;
    UPDATE core.sign_in_throttle
    SET failures = n,
        last_failure_at = now(),
        not_before = CASE WHEN n >= p_free
                          THEN now() + least(p_cap, p_first_delay * power(2, least(n - p_free, 20)))
                          END
    WHERE email_key = lower(p_email) AND address = p_address;
    UPDATE core.sign_in_addresses
    SET window_started_at = w.window_started_at, failures = w.failures + 1
    WHERE address = p_address;
    RETURN QUERY SELECT true, 0;
END
$$;

-- A verified password: the reservation was not a failure. The pair's row goes, and the
-- address's window gives the attempt back.
CREATE FUNCTION core.clear_sign_in(p_email text, p_address text) RETURNS void
LANGUAGE sql AS $$
    UPDATE core.sign_in_addresses SET failures = greatest(failures - 1, 0) WHERE address = p_address;
    DELETE FROM core.sign_in_throttle WHERE email_key = lower(p_email) AND address = p_address;
$$;

REVOKE EXECUTE ON FUNCTION core.reserve_sign_in(text, text, interval, integer, integer, interval, interval, interval),
    core.clear_sign_in(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.reserve_sign_in(text, text, interval, integer, integer, interval, interval, interval),
    core.clear_sign_in(text, text) TO console_runtime;

-- Sessions end at the latest `ends_at` (absolute), besides `expires_at` (idle).
ALTER TABLE core.web_sessions ADD COLUMN ends_at timestamptz;
UPDATE core.web_sessions SET ends_at = created_at + interval '7 days';
ALTER TABLE core.web_sessions ALTER COLUMN ends_at SET NOT NULL;

-- The rendezvous mark. core.assert_rendezvous used to trust a setting any role can set. Now the
-- opening statement of a Materializing or RuleChange transaction is core.take_rendezvous_*,
-- which takes the advisory lock itself and then sets the mark to a seal: a SHA-256 over a secret
-- only core_owner can read, this backend's pid and this transaction's start. The run-time role
-- can neither read the secret nor call the seal, so it cannot make a mark, and a mark copied
-- from an earlier transaction names another transaction's start.
CREATE TABLE core.rendezvous_secret (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    secret text NOT NULL
);
INSERT INTO core.rendezvous_secret (secret)
VALUES (md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text));
REVOKE ALL ON core.rendezvous_secret FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.rendezvous_seal() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN (SELECT encode(sha256(convert_to(
        s.secret || ':' || pg_backend_pid()::text || ':' || transaction_timestamp()::text, 'UTF8')), 'hex')
    FROM core.rendezvous_secret s);
END
$$;
REVOKE EXECUTE ON FUNCTION core.rendezvous_seal() FROM PUBLIC;

CREATE FUNCTION core.take_rendezvous_shared() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(core.rendezvous_key());
    PERFORM set_config('core.rendezvous_mark', core.rendezvous_seal(), true);
END
$$;

CREATE FUNCTION core.take_rendezvous_exclusive() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(core.rendezvous_key());
    PERFORM set_config('core.rendezvous_mark', core.rendezvous_seal(), true);
END
$$;
REVOKE EXECUTE ON FUNCTION core.take_rendezvous_shared(), core.take_rendezvous_exclusive() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.take_rendezvous_shared(), core.take_rendezvous_exclusive() TO console_runtime;

-- Every SECURITY DEFINER function of the console's schemas resolves names only in pg_catalog
-- and core, with pg_temp last, so no object a caller creates can stand in for one it uses.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE p.prosecdef AND n.nspname IN ('core', 'fedwiki', 'domains', 'integration')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, core, pg_temp', f);
    END LOOP;
END
$$;

RESET ROLE;

-- (The run-time role's backstop bounds, `ALTER ROLE console_runtime SET ...`, were set here; a
-- role's settings are the server's, not a database's, so `db::migrate::role_backstops` sets them
-- at every start instead, outside any database's migration.)
-- ==============================================================================================
-- counts and pages (was migration 0014)
-- ==============================================================================================
-- Pages that cost the same at any size: counts kept, not scanned, and indexes for lists paged by key.
--
-- Organization counts that no page has to scan for. Every statement that inserts, deletes or
-- retypes organizations appends its net change per org type here (statement-level triggers, so a
-- bulk insert appends one row per type); a reader sums the rows; a scheduled compaction folds
-- them into one row per type. Appending takes no lock that waits: concurrent organization
-- creations never queue on a counter.
SET LOCAL ROLE core_owner;

CREATE TABLE core.organization_counts (
    count_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Null: organizations without a type.
    org_type_id bigint,
    delta bigint NOT NULL
);
CREATE INDEX organization_counts_type ON core.organization_counts (org_type_id);

CREATE FUNCTION core.count_organizations() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT org_type_id, count(*) FROM new_rows GROUP BY org_type_id;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT org_type_id, -count(*) FROM old_rows GROUP BY org_type_id;
    ELSE
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT t, sum(d) FROM (
            SELECT n.org_type_id AS t, 1 AS d FROM new_rows n JOIN old_rows o USING (organization_id)
            WHERE n.org_type_id IS DISTINCT FROM o.org_type_id
            UNION ALL
            SELECT o.org_type_id, -1 FROM new_rows n JOIN old_rows o USING (organization_id)
            WHERE n.org_type_id IS DISTINCT FROM o.org_type_id) x
        GROUP BY t;
    END IF;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION core.count_organizations() FROM PUBLIC;

CREATE TRIGGER organizations_counted_insert AFTER INSERT ON core.organizations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();
CREATE TRIGGER organizations_counted_delete AFTER DELETE ON core.organizations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();
CREATE TRIGGER organizations_counted_update AFTER UPDATE ON core.organizations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();

INSERT INTO core.organization_counts (org_type_id, delta)
SELECT org_type_id, count(*) FROM core.organizations GROUP BY org_type_id;

-- Fold the appended rows into one per type. Rows appended by transactions still open are not
-- seen, so stay; two compactions at once fold each row once (a row the other deleted is skipped).
CREATE FUNCTION core.compact_organization_counts() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
    WITH gone AS (DELETE FROM core.organization_counts RETURNING org_type_id, delta),
         kept AS (INSERT INTO core.organization_counts (org_type_id, delta)
                  SELECT org_type_id, sum(delta) FROM gone GROUP BY org_type_id HAVING sum(delta) <> 0
                  RETURNING 1)
    SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM kept)
$$;
REVOKE EXECUTE ON FUNCTION core.compact_organization_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.compact_organization_counts() TO console_runtime;

GRANT SELECT ON core.organization_counts TO console_runtime;

-- How many pools hold a conferral of any of these products, counting no further than cap + 1:
-- each product's pools are read in index order and stop at the cap, and only when every product
-- stays under it are the (then few) rows merged for an exact count. A catalog page shows
-- "more than 1,000 pools" rather than reading every conferral of a product everyone carries.
CREATE FUNCTION core.pools_carrying(products bigint[], cap bigint) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    p bigint;
    n bigint;
BEGIN
    FOREACH p IN ARRAY coalesce(products, '{}') LOOP
        SELECT count(*) INTO n FROM (
            SELECT DISTINCT c.pool_id FROM core.conferrals c
            WHERE c.product_id = p AND c.state = 'holding' LIMIT cap + 1) x;
        IF n > cap THEN
            RETURN cap + 1;
        END IF;
    END LOOP;
    SELECT count(DISTINCT c.pool_id) INTO n FROM core.conferrals c
    WHERE c.product_id = ANY (products) AND c.state = 'holding';
    RETURN least(n, cap + 1);
END
$$;
GRANT EXECUTE ON FUNCTION core.pools_carrying(bigint[], bigint) TO console_runtime;

-- The grant list pages by id, newest first, optionally for one status: a range scan either way.
CREATE INDEX grants_status_id ON core.grants (status, grant_id);

RESET ROLE;
-- ==============================================================================================
-- member reads (was migration 0015)
-- ==============================================================================================
-- The two statements every member page view runs, as plpgsql functions: a plpgsql function keeps
-- its statements' plans for the session, where the same SQL sent as text (the one-round-trip
-- batch carries no parameters) is planned again on every request, which cost several times the
-- execution. The caller's batch is then `SELECT ... core.fn(<numbers or hex>)`, trivial to plan.
-- They run as the caller (not SECURITY DEFINER) and name every object by schema, so they carry
-- no search_path of their own: a SET clause costs each call a fifth of its time.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.resume_session(p_token text, p_idle interval, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s record;
BEGIN
    SELECT w.token_hash, w.last_seen_at, w.ends_at, a.account_id AS id, a.email AS mail, a.is_operator AS op
    INTO s
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = sha256(convert_to(p_token, 'UTF8')) AND w.expires_at > now() AND w.ends_at > now();
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF s.last_seen_at < now() - p_touch_every THEN
        UPDATE core.web_sessions w
        SET last_seen_at = now(), expires_at = least(now() + p_idle, s.ends_at)
        WHERE w.token_hash = s.token_hash;
    END IF;
    account_id := s.id;
    email := s.mail;
    is_operator := s.op;
    RETURN NEXT;
END
$$;
REVOKE EXECUTE ON FUNCTION core.resume_session(text, interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.resume_session(text, interval, interval) TO console_runtime;

CREATE OR REPLACE FUNCTION core.member_home(p_account bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_displaced jsonb := '{}';
BEGIN
    -- Live subscriptions another plan displaced (Resume plan brings them back), with what
    -- displaced them, per organization: read only when one of the member's organizations has a
    -- live subscription.
    IF EXISTS (SELECT 1 FROM core.organization_members m
               JOIN core.subscriptions s ON s.organization_id = m.organization_id
               WHERE m.account_id = p_account AND s.status IN ('active', 'trialing')) THEN
        v_displaced := (
            SELECT coalesce(jsonb_object_agg(x.organization_id::text, x.lines), '{}')
            FROM (
                SELECT s.organization_id, json_agg(json_build_object(
                    'subscription_id', s.subscription_id, 'product', ip.name, 'by', bp.name,
                    'granted', by_c.grant_id IS NOT NULL, 'until', coalesce(g.ends_at, by_c.ends_at)) ORDER BY s.subscription_id, i.subscription_item_id) AS lines
                FROM core.subscriptions s
                JOIN core.subscription_items i ON i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                JOIN core.subscription_displacements sd
                  ON sd.subscription_item_id = i.subscription_item_id AND sd.delivered_at IS NULL
                JOIN core.conferrals by_c ON by_c.conferral_id = sd.displaced_by AND by_c.state = 'holding'
                JOIN core.products ip ON ip.product_id = i.product_id
                JOIN core.products bp ON bp.product_id = by_c.product_id
                LEFT JOIN core.grants g ON g.grant_id = by_c.grant_id
                JOIN core.organization_members m ON m.organization_id = s.organization_id
                WHERE m.account_id = p_account AND s.status IN ('active', 'trialing')
                GROUP BY s.organization_id) x);
    END IF;
    RETURN array_to_json(ARRAY(
        SELECT json_build_object(
            'membership', json_build_object('organization_id', o.organization_id, 'name', o.name, 'role', m.role),
            'held', array_to_json(ARRAY(
                SELECT h
                -- The grant's kind and the Stripe ids by primary key, as scalar sub-selects: a
                -- nested loop apiece less to start than the LEFT JOINs they replace.
                FROM (SELECT c.conferral_id, l.name AS ladder, ps.rank, p.name AS product, c.grant_id,
                             (SELECT g.kind FROM core.grants g WHERE g.grant_id = c.grant_id) AS grant_kind,
                             (SELECT s.stripe_subscription_id FROM core.subscription_items i
                                JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
                               WHERE i.subscription_item_id = c.subscription_item_id) AS stripe_subscription_id,
                             (SELECT i.stripe_item_id FROM core.subscription_items i
                               WHERE i.subscription_item_id = c.subscription_item_id) AS stripe_item_id,
                             c.suspended, c.quantity, l.sort_order, l.plan_ladder_id
                      FROM core.conferrals c
                      JOIN core.products p ON p.product_id = c.product_id
                      LEFT JOIN core.positions ps ON ps.conferral_id = c.conferral_id
                      LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                      WHERE c.pool_id = rp.pool_id AND c.state = 'holding') h
                ORDER BY h.sort_order NULLS LAST, h.plan_ladder_id, h.conferral_id)),
            'entitlements', array_to_json(ARRAY(
                SELECT e
                FROM (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements
                      WHERE pool_id = rp.pool_id) e
                ORDER BY e.resource_key COLLATE "C")),
            'usage', array_to_json(ARRAY(
                SELECT u
                FROM (SELECT resource_key, used, limit_value FROM core.pool_usage WHERE pool_id = rp.pool_id) u
                ORDER BY u.resource_key COLLATE "C")),
            'displaced', coalesce(v_displaced -> o.organization_id::text, '[]'::jsonb))
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;
REVOKE EXECUTE ON FUNCTION core.member_home(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_home(bigint) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- refusals by constraint name (was migration 0016)
-- ==============================================================================================
-- The two triggers that keep a tier's product on an entitlement set raise under a constraint name
-- (their trigger's), so the console tells the operator which field is wrong by the name
-- PostgreSQL reports, as it does for a unique or foreign key, and never by SQLSTATE. The
-- SQLSTATE (MC003), the message and the locks are unchanged.
-- What it changed is written above, where each function it created again was first created.
-- ==============================================================================================
-- billing (was migration 0017)
-- ==============================================================================================
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
-- ==============================================================================================
-- scheduled changes (was migration 0018)
-- ==============================================================================================
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
-- ==============================================================================================
-- quiet object jobs (was migration 0019)
-- ==============================================================================================
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
-- ==============================================================================================
-- member billing (was migration 0020)
-- ==============================================================================================
-- The member's billing page in one statement, as the home is (0015): the home's document and each
-- organization's subscriptions, newest invoices and the tiers on sale, as one JSON document. A
-- plpgsql function keeps its statements' plans for the connection; called as a prepared
-- statement, a page view is one round trip after its session's.
SET LOCAL ROLE core_owner;

-- The earlier build's call: the list always read.
CREATE OR REPLACE FUNCTION core.member_billing(p_account bigint, p_invoices integer) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT core.member_billing(p_account, p_invoices, NULL)
$$;
REVOKE EXECUTE ON FUNCTION core.member_billing(bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_billing(bigint, integer) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- fedwiki sites (was migration 0021)
-- ==============================================================================================
-- FedWiki sites (issue 13): workspaces, sites, lifecycle requests and their slot holds, the swap
-- policy, the farm's callbacks, and the domains registry (claims and placements) with the site
-- trigger that keeps a placement's servable flag. The locks and their order are the spec's
-- ("FedWiki at the handler", "At the slot gate", "When recording an outcome", "Registry").

SET LOCAL ROLE core_owner;

-- The domains registry ---------------------------------------------------------------------------

-- A name a workspace (owner `workspace:<id>`) or the farm's own zone (owner `farm`) holds. No
-- claim equals or lies under another owner's claim: the rule spans rows, so every mutation runs
-- under the registry's advisory lock (the Registry transaction kind), which is the check's guard.
CREATE TABLE domains.claims (
    name text PRIMARY KEY CONSTRAINT claims_name_is_hostname CHECK (
        name ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' AND length(name) <= 253),
    owner text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

-- A hostname served by a provider's object (a FedWiki site). It lies under a claim of its own
-- owner or the farm's zone; one placement per hostname. `servable` is the site trigger's: true
-- while the site is active.
CREATE TABLE domains.placements (
    hostname text PRIMARY KEY CONSTRAINT placements_hostname_is_hostname CHECK (
        hostname ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'
        AND length(hostname) <= 253),
    owner text NOT NULL,
    provider text NOT NULL CONSTRAINT placements_provider_known CHECK (provider IN ('fedwiki')),
    object_id text NOT NULL,
    servable boolean NOT NULL DEFAULT false,
    placed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX placements_object ON domains.placements (provider, object_id);

-- Workspaces, sites, requests --------------------------------------------------------------------

-- One per organization (made on its first site), plus the System workspace: farm sites no
-- organization owns, adopted at sync.
CREATE TABLE fedwiki.workspaces (
    workspace_id text PRIMARY KEY,
    organization_id bigint UNIQUE REFERENCES core.organizations ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workspaces_system_or_organization CHECK ((organization_id IS NULL) = (workspace_id = 'system'))
);
INSERT INTO fedwiki.workspaces (workspace_id) VALUES ('system');

-- A site: its id is its lifecycle instance's id. `modified_at` and `storage_bytes` are what the
-- farm last reported; `parked_by_sweep` marks a site the quota reconciliation parked.
CREATE TABLE fedwiki.sites (
    site_id text PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    domain text NOT NULL CONSTRAINT sites_domain_unique UNIQUE,
    status text NOT NULL CONSTRAINT sites_status_known CHECK (status IN ('active', 'parked', 'archived')),
    keep_active boolean NOT NULL DEFAULT false,
    parked_by_sweep boolean NOT NULL DEFAULT false,
    storage_bytes bigint,
    modified_at timestamptz,
    observed_at timestamptz,
    status_changed_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sites_workspace ON fedwiki.sites (workspace_id, status);

-- A member's act on one instance (a site, or a site still to be created), recorded under the
-- instance's advisory lock; carried to its outcome by a durable job. Both requests of a swap
-- carry the activation's id in swap_of (the activation's own row too).
CREATE TABLE fedwiki.lifecycle_requests (
    request_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id text NOT NULL,
    generation integer NOT NULL CHECK (generation >= 1),
    workspace_id text NOT NULL REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    domain text NOT NULL,
    kind text NOT NULL CONSTRAINT lifecycle_requests_kind_known
        CHECK (kind IN ('create', 'activate', 'park', 'archive', 'delete')),
    swap_of bigint REFERENCES fedwiki.lifecycle_requests,
    state text NOT NULL DEFAULT 'accepted'
        CONSTRAINT lifecycle_requests_state_known CHECK (state IN ('accepted', 'done', 'declined', 'failed')),
    outcome text,
    -- The status a create starts in, decided at the slot gate.
    starts_as text CHECK (starts_as IN ('active', 'parked')),
    requested_by bigint REFERENCES core.accounts ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT lifecycle_requests_generation_unique UNIQUE (instance_id, generation)
);
CREATE INDEX lifecycle_requests_open ON fedwiki.lifecycle_requests (instance_id) WHERE state = 'accepted';
CREATE INDEX lifecycle_requests_workspace ON fedwiki.lifecycle_requests (workspace_id, request_id DESC);

-- A slot an accepted create or activation holds in its pool between the gate and the record
-- step; written and deleted only under its request's instance lock.
CREATE TABLE fedwiki.slot_holds (
    request_id bigint PRIMARY KEY REFERENCES fedwiki.lifecycle_requests ON DELETE CASCADE,
    pool_id bigint NOT NULL REFERENCES core.resource_pools ON DELETE CASCADE,
    held_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX slot_holds_pool ON fedwiki.slot_holds (pool_id);

-- A workspace's last swap (and last activation, when activations have a cooldown), upserted
-- last under the workspace's advisory lock.
CREATE TABLE fedwiki.swap_policies (
    workspace_id text PRIMARY KEY REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    last_swap_at timestamptz,
    last_activation_at timestamptz
);

-- The farm's callbacks received, by their id: a duplicate does nothing.
CREATE TABLE fedwiki.farm_callbacks (
    event_id text PRIMARY KEY,
    kind text NOT NULL,
    domain text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION fedwiki.count_slots(p_pool bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM fedwiki.sites s
              JOIN fedwiki.workspaces w USING (workspace_id)
              JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
             WHERE p.pool_id = p_pool AND s.status = 'active')
         + (SELECT count(*) FROM fedwiki.slot_holds h WHERE h.pool_id = p_pool);
END
$$;

-- HoldSiteSlotActivity in one call (one round trip with its implicit transaction), in the spec's
-- order: the request's instance lock, for an activation the site row, the pool's limit read
-- without a lock, the usage row, the count (a statement of its own: in a volatile function at
-- READ COMMITTED each statement takes a new snapshot, so it reads every commit before the lock's
-- grant), the hold, the recount. `p_instance` is the request's instance (the caller read it with
-- the request; it never changes). Answers '<outcome> <used> <limit>', the outcome one of held,
-- full, already_active, gone.
CREATE FUNCTION fedwiki.hold_site_slot(p_request bigint, p_instance text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r fedwiki.lifecycle_requests%ROWTYPE;
    v_status text;
    v_pool bigint;
    v_limit bigint := 0;
    v_used bigint := 0;
    v_outcome text;
BEGIN
    PERFORM pg_advisory_xact_lock(core.lifecycle_instance_key(p_instance));
    -- Under the lock: an outcome recorded before it was granted is seen.
    SELECT * INTO r FROM fedwiki.lifecycle_requests WHERE request_id = p_request AND instance_id = p_instance;
    IF NOT FOUND OR r.state <> 'accepted' THEN
        RETURN 'gone 0 0';
    END IF;
    IF EXISTS (SELECT 1 FROM fedwiki.slot_holds h WHERE h.request_id = p_request) THEN
        RETURN 'held 0 0';
    END IF;
    IF r.kind = 'activate' THEN
        SELECT s.status INTO v_status FROM fedwiki.sites s WHERE s.site_id = r.instance_id FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 'gone 0 0';
        ELSIF v_status = 'active' THEN
            RETURN 'already_active 0 0';
        END IF;
    END IF;
    SELECT p.pool_id, coalesce(e.numeric_value, 0) INTO v_pool, v_limit
      FROM fedwiki.workspaces w
      JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
      LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
     WHERE w.workspace_id = r.workspace_id;
    v_outcome := 'full';
    IF v_pool IS NOT NULL THEN
        PERFORM 1 FROM core.numeric_entitlement_usage u
         WHERE u.pool_id = v_pool AND u.resource_key = 'fedwiki.active_sites' FOR UPDATE;
        IF FOUND THEN
            v_used := fedwiki.count_slots(v_pool);
            IF v_used < v_limit THEN
                INSERT INTO fedwiki.slot_holds (request_id, pool_id) VALUES (p_request, v_pool);
                UPDATE core.numeric_entitlement_usage SET used = fedwiki.count_slots(v_pool), counted_at = now()
                 WHERE pool_id = v_pool AND resource_key = 'fedwiki.active_sites';
                v_outcome := 'held';
            END IF;
        ELSE
            v_limit := 0;
        END IF;
    ELSE
        v_limit := 0;
    END IF;
    IF r.kind = 'create' THEN
        UPDATE fedwiki.lifecycle_requests
           SET starts_as = CASE v_outcome WHEN 'held' THEN 'active' ELSE 'parked' END, updated_at = clock_timestamp()
         WHERE request_id = p_request;
    END IF;
    RETURN format('%s %s %s', v_outcome, v_used, v_limit);
END
$$;

CREATE OR REPLACE FUNCTION fedwiki.member_sites(p_account bigint, p_requests integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN array_to_json(ARRAY(
        SELECT json_build_object(
            'organization_id', o.organization_id,
            'name', o.name,
            'sites', array_to_json(ARRAY(
                SELECT json_build_object(
                    'site_id', s.site_id, 'workspace_id', s.workspace_id, 'domain', s.domain, 'status', s.status,
                    'keep_active', s.keep_active, 'storage_bytes', s.storage_bytes, 'modified_at', s.modified_at,
                    'created_at', s.created_at, 'parked_by_sweep', s.parked_by_sweep,
                    'status_changed_at', s.status_changed_at)
                FROM fedwiki.sites s WHERE s.workspace_id = 'org-' || o.organization_id
                ORDER BY s.domain)),
            'requests', array_to_json(ARRAY(
                SELECT json_build_object(
                    'request_id', r.request_id, 'instance_id', r.instance_id, 'generation', r.generation,
                    'workspace_id', r.workspace_id, 'domain', r.domain, 'kind', r.kind, 'swap_of', r.swap_of,
                    'state', r.state, 'outcome', r.outcome, 'starts_as', r.starts_as, 'created_at', r.created_at,
                    'updated_at', r.updated_at)
                FROM fedwiki.lifecycle_requests r
                WHERE r.workspace_id = 'org-' || o.organization_id
                ORDER BY r.request_id DESC LIMIT p_requests)),
            'used', coalesce(u.used, 0),
            'limit', coalesce(e.numeric_value, 0),
            'custom_domain', coalesce(d.flag_value, false),
            'domains', array_to_json(ARRAY(
                SELECT c.name FROM domains.claims c
                 WHERE c.owner = 'workspace:org-' || o.organization_id ORDER BY c.name)),
            'placements', array_to_json(ARRAY(
                SELECT json_build_array(pl.hostname, pl.object_id) FROM domains.placements pl
                 WHERE pl.owner = 'workspace:org-' || o.organization_id ORDER BY pl.hostname)),
            'last_swap_at', (SELECT sp.last_swap_at FROM fedwiki.swap_policies sp
                              WHERE sp.workspace_id = 'org-' || o.organization_id))
        FROM core.organization_members m
        JOIN core.organizations o USING (organization_id)
        LEFT JOIN core.resource_pools p ON p.organization_id = o.organization_id AND p.is_default
        LEFT JOIN core.numeric_entitlement_usage u ON u.pool_id = p.pool_id AND u.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements d ON d.pool_id = p.pool_id AND d.resource_key = 'fedwiki.custom_domain'
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;

-- The site trigger ---------------------------------------------------------------------------------

-- After a site row's write: its placements' servable flag follows its status, locking only the
-- placement rows whose flag changes (after the site row, before usage: rule 5). Flag-only, so it
-- runs outside the registry lock. Snapshot isolation would let it miss a placement a creator
-- committed after the snapshot, so it refuses it.
CREATE FUNCTION fedwiki.set_site_placement_servability() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_site text;
    v_servable boolean;
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'a FedWiki site is written at READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'P0001', CONSTRAINT = 'site_write_isolation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        v_site := OLD.site_id;
        v_servable := false;
    ELSE
        v_site := NEW.site_id;
        v_servable := NEW.status = 'active';
    END IF;
    UPDATE domains.placements SET servable = v_servable
     WHERE provider = 'fedwiki' AND object_id = v_site AND servable IS DISTINCT FROM v_servable;
    RETURN NULL;
END
$$;
CREATE TRIGGER sites_set_placement_servability
    AFTER INSERT OR DELETE OR UPDATE OF status ON fedwiki.sites
    FOR EACH ROW EXECUTE FUNCTION fedwiki.set_site_placement_servability();

-- The farm's zone is the farm's claim; a member's site is a placement under it.
INSERT INTO domains.claims (name, owner) VALUES ('wiki.localhost', 'farm');

GRANT SELECT, INSERT, DELETE ON domains.claims, domains.placements TO console_runtime;
GRANT SELECT, INSERT ON fedwiki.workspaces TO console_runtime;
GRANT SELECT, INSERT, DELETE ON fedwiki.sites, fedwiki.slot_holds TO console_runtime;
GRANT UPDATE (status, keep_active, parked_by_sweep, storage_bytes, modified_at, observed_at, status_changed_at)
    ON fedwiki.sites TO console_runtime;
GRANT SELECT, INSERT, DELETE ON fedwiki.lifecycle_requests TO console_runtime;
GRANT UPDATE (state, outcome, starts_as, updated_at) ON fedwiki.lifecycle_requests TO console_runtime;
GRANT SELECT, INSERT, UPDATE ON fedwiki.swap_policies TO console_runtime;
GRANT SELECT, INSERT ON fedwiki.farm_callbacks TO console_runtime;
REVOKE EXECUTE ON FUNCTION fedwiki.count_slots(bigint), fedwiki.hold_site_slot(bigint, text),
    fedwiki.member_sites(bigint, integer), fedwiki.set_site_placement_servability() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fedwiki.count_slots(bigint), fedwiki.hold_site_slot(bigint, text),
    fedwiki.member_sites(bigint, integer) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- plan changes (was migration 0022)
-- ==============================================================================================
-- Billing II's member page: each subscription's items (ladder, tier, the price's interval and
-- currency, which a switch keeps) and the changes scheduled ahead ("Pro until 31 Dec, then
-- Basic"), in the same one statement as before (0020); each organization's displaced subscriptions
-- in the home's document; ResumeSubscription's function. And the switch quotes: what a member was
-- shown before confirming a switch (the moment an upgrade prorates for, the amount), kept by the
-- console so the confirmation carries only the quote's id and cannot name another moment.
SET LOCAL ROLE core_owner;

-- Whether the subscription's collection pause is the console's own (displaced on every ladder),
-- as its last reconcile read it; a pause made in Stripe's dashboard is not.
ALTER TABLE core.subscriptions ADD COLUMN console_paused boolean NOT NULL DEFAULT false;
GRANT UPDATE (console_paused) ON core.subscriptions TO console_runtime;

CREATE TABLE billing.switch_quotes (
    operation text PRIMARY KEY CHECK (operation ~ '^[0-9a-f]{32}$'),
    subscription_id bigint NOT NULL REFERENCES core.subscriptions ON DELETE CASCADE,
    price_id bigint NOT NULL REFERENCES billing.prices,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    -- The moment an upgrade's proration is computed for, as Stripe's preview chose it.
    proration_date timestamptz,
    amount_due bigint,
    currency text,
    quoted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX switch_quotes_subscription ON billing.switch_quotes (subscription_id, quoted_at);
GRANT SELECT, INSERT, DELETE ON billing.switch_quotes TO console_runtime;

-- ResumeSubscription's writes under the pool row the caller holds: each item of the subscription
-- that another plan displaced (and still holds) is delivered back, conferred over that plan (which
-- is displaced in turn: a grant becomes replaced and resumes when the subscription ends). The
-- caller refuses a subscription that is not active. How many items came back.
CREATE FUNCTION core.resume_subscription(p_pool bigint, p_subscription bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    d record;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    FOR d IN
        SELECT sd.conferral_id, i.subscription_item_id, i.product_id, i.quantity
        FROM core.subscription_displacements sd
        JOIN core.conferrals old ON old.conferral_id = sd.conferral_id AND old.pool_id = p_pool
        JOIN core.conferrals by_c ON by_c.conferral_id = sd.displaced_by AND by_c.state = 'holding'
        JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
        WHERE i.subscription_id = p_subscription AND sd.delivered_at IS NULL AND i.removed_at IS NULL
        ORDER BY sd.conferral_id
    LOOP
        UPDATE core.subscription_displacements SET delivered_at = now() WHERE conferral_id = d.conferral_id;
        PERFORM core.confer(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION core.resume_subscription(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.resume_subscription(bigint, bigint) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- fedwiki maintenance (was migration 0023)
-- ==============================================================================================
-- FedWiki maintenance (issue 15): one schedule runs the farm sync, the retention purge and the
-- quota reconciliation, never two at once (the job queue's uniqueness); each run is recorded for
-- the operators. A member's page also reads which sites the quota parked and when an archived
-- site was archived (it is deleted after the retention period).
SET LOCAL ROLE core_owner;

CREATE TABLE fedwiki.maintenance_runs (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    -- ok, or failed with the reason (the farm down: nothing half-written, the next run repairs).
    outcome text CHECK (outcome IN ('ok', 'failed')),
    error text,
    farm_sites integer,
    adopted integer NOT NULL DEFAULT 0,
    observed integer NOT NULL DEFAULT 0,
    statuses_written integer NOT NULL DEFAULT 0,
    statuses_left integer NOT NULL DEFAULT 0,
    removed integer NOT NULL DEFAULT 0,
    missing_on_farm integer NOT NULL DEFAULT 0,
    purged integer NOT NULL DEFAULT 0,
    parked integer NOT NULL DEFAULT 0,
    reactivated integer NOT NULL DEFAULT 0
);
CREATE INDEX maintenance_runs_recent ON fedwiki.maintenance_runs (run_id DESC);
GRANT SELECT, INSERT, DELETE ON fedwiki.maintenance_runs TO console_runtime;
GRANT UPDATE (finished_at, outcome, error, farm_sites, adopted, observed, statuses_written, statuses_left, removed,
              missing_on_farm, purged, parked, reactivated) ON fedwiki.maintenance_runs TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- seats (was migration 0024)
-- ==============================================================================================
-- Seats: a product may be sold in more than one unit ("seats"), up to the number an operator sets
-- on it; a member buys a number of them and changes it later. The member's billing page reads
-- each item's seats and price, and each tier's most seats (0022's function, again); a switch
-- quote keeps the seats it was quoted for.
SET LOCAL ROLE core_owner;

ALTER TABLE core.products ADD COLUMN max_quantity integer NOT NULL DEFAULT 1
    CONSTRAINT products_max_quantity_range CHECK (max_quantity BETWEEN 1 AND 1000);
GRANT UPDATE (max_quantity) ON core.products TO console_runtime;

ALTER TABLE billing.switch_quotes ADD COLUMN quantity integer NOT NULL DEFAULT 1 CHECK (quantity >= 1);

RESET ROLE;
-- ==============================================================================================
-- desired state (was migration 0025)
-- ==============================================================================================
-- The desired-state relay (issue 16; docs/desired-state.md): connections to outside systems, the
-- notices triggers write when a source changes, and per (connection, recipient) address the
-- record of what that system should hold. Records are written only by the functions below, each
-- of which takes the address lock first (spec rule 7); the dispatch stamp is the one statement
-- the run-time role runs on them itself, and it writes only the dispatch columns.
SET LOCAL ROLE core_owner;

CREATE TABLE core.desired_state_connections (
    connection_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL CONSTRAINT desired_state_connections_name_check CHECK (length(btrim(name)) BETWEEN 1 AND 100),
    url text NOT NULL CONSTRAINT desired_state_connections_url_check CHECK (url ~ '^https?://[^\s]+$' AND length(url) <= 2000),
    -- Standard Webhooks secrets ("whsec_" and base64). The previous one signs too until its end.
    secret text NOT NULL,
    previous_secret text,
    previous_secret_until timestamptz,
    resource_keys text[] NOT NULL DEFAULT '{}',
    read_back boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Set by Delete; the relay then removes the records and the row.
    deleted_at timestamptz,
    -- "Send a test": asked, and the last answer.
    test_requested_at timestamptz,
    last_test_at timestamptz,
    last_test_ok boolean,
    last_test_answer text,
    last_read_back_at timestamptz,
    last_read_back_answer text
);
CREATE UNIQUE INDEX desired_state_connections_name ON core.desired_state_connections (lower(name))
    WHERE deleted_at IS NULL;

-- Notices: which addresses to recompute. A null connection means every live connection; a null
-- recipient means every recipient of the connection, walked in keyset pages from
-- after_recipient_id (the walk's place, kept so a crash resumes there).
CREATE TABLE core.desired_state_outbox (
    notice_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    connection_id bigint,
    recipient_kind text CHECK (recipient_kind IN ('organization')),
    recipient_id bigint,
    reason text NOT NULL CHECK (reason IN ('source', 'connection', 'retry', 'resend', 'deleted', 'test')),
    after_recipient_id bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    CHECK ((recipient_kind IS NULL) = (recipient_id IS NULL)),
    CHECK (connection_id IS NOT NULL OR recipient_id IS NOT NULL)
);

CREATE TABLE core.desired_state_records (
    record_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    connection_id bigint NOT NULL REFERENCES core.desired_state_connections,
    recipient_kind text NOT NULL CHECK (recipient_kind IN ('organization')),
    recipient_id bigint NOT NULL,
    content jsonb NOT NULL,
    -- Goes up by one when the content changes, or when read-back found the remote drifted (a
    -- repair: the same content under a generation the remote will take).
    generation bigint NOT NULL CHECK (generation >= 1),
    changed_at timestamptz NOT NULL DEFAULT now(),
    dispatched_generation bigint NOT NULL DEFAULT 0,
    dispatched_at timestamptz,
    confirmed_generation bigint NOT NULL DEFAULT 0,
    confirmed_at timestamptz,
    -- When the record may be pushed next: now, after a stamp's bound, or after a failure's backoff.
    due_at timestamptz NOT NULL DEFAULT now(),
    failures integer NOT NULL DEFAULT 0,
    last_answer text,
    last_answer_at timestamptz,
    -- The projection: what read-back last found the remote holding.
    observed_generation bigint,
    observed_content jsonb,
    observed_at timestamptz,
    drift boolean NOT NULL DEFAULT false,
    UNIQUE (connection_id, recipient_kind, recipient_id),
    CHECK (confirmed_generation <= generation AND dispatched_generation <= generation)
);
-- Records still behind: which connections have one due (by due_at), and a stamp's walk in id order.
CREATE INDEX desired_state_records_due ON core.desired_state_records (connection_id, due_at)
    WHERE confirmed_generation < generation;
CREATE INDEX desired_state_records_behind ON core.desired_state_records (connection_id, record_id)
    WHERE confirmed_generation < generation;
CREATE INDEX desired_state_records_failing ON core.desired_state_records (connection_id, recipient_id)
    WHERE failures > 0;

-- The desired-state address lock (family 2, core.desired_state_address_key), exclusive.
-- plpgsql, as the other functions here: a SQL-language SECURITY DEFINER function is planned again
-- on every call, and the relay calls these once per address.
CREATE FUNCTION core.lock_desired_state_address(p_connection bigint, p_kind text, p_recipient bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(core.desired_state_address_key(p_connection::text, p_kind, p_recipient::text));
END
$$;

-- What the connection should hold for one recipient, or null when the connection is gone or
-- deleted or the recipient does not exist. Each of the connection's keys: a numeric key's limit in
-- the organization's default pool (0 without one), a flag's value (false without one).
CREATE FUNCTION core.desired_state_content(p_connection bigint, p_kind text, p_recipient bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN (SELECT jsonb_build_object(
        'organization', jsonb_build_object('id', o.organization_id::text, 'name', o.name, 'type', t.name),
        'entitlements', coalesce((
            SELECT jsonb_object_agg(k.resource_key, CASE WHEN k.kind = 'numeric'
                                                         THEN to_jsonb(coalesce(e.numeric_value, 0))
                                                         ELSE to_jsonb(coalesce(e.flag_value, false)) END)
              FROM core.resource_keys k
              LEFT JOIN core.pool_entitlements e
                ON e.resource_key = k.resource_key
               AND e.pool_id = (SELECT p.pool_id FROM core.resource_pools p
                                 WHERE p.organization_id = o.organization_id AND p.is_default)
             WHERE k.resource_key = ANY (c.resource_keys)), '{}'::jsonb))
      FROM core.desired_state_connections c
      JOIN core.organizations o ON o.organization_id = p_recipient
      LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
     WHERE c.connection_id = p_connection AND c.deleted_at IS NULL AND p_kind = 'organization');
END
$$;

-- recomputeAddress: the address lock, then the record row (LockDesiredStateRecord), then the
-- content in a statement of its own (this function is VOLATILE, so at READ COMMITTED it sees
-- every commit that preceded the lock's grant), then the record written: a new generation only
-- when the content changed; deleted when the connection is deleted. p_ask says who asked: a
-- notice about a source or the connection's keys ('notice'); Retry ('retry'), which makes a record
-- still behind due at once; the connection's URL changed ('resend'), which makes every record
-- due at once and unconfirmed, since the new endpoint confirmed nothing yet (the same generation
-- goes again: an endpoint that holds it takes it as a replay). Returns what it did.
CREATE FUNCTION core.recompute_desired_state_address(p_connection bigint, p_kind text, p_recipient bigint,
                                                     p_ask text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    r core.desired_state_records;
    fresh jsonb;
BEGIN
    -- A record is derived: a crash that loses this commit loses nothing, because the notice that
    -- asked for it is deleted by a later, synchronous commit, which flushes this one first.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM core.lock_desired_state_address(p_connection, p_kind, p_recipient);
    SELECT * INTO r FROM core.desired_state_records
     WHERE connection_id = p_connection AND recipient_kind = p_kind AND recipient_id = p_recipient
     FOR UPDATE;
    fresh := core.desired_state_content(p_connection, p_kind, p_recipient);
    IF fresh IS NULL THEN
        IF r.record_id IS NULL THEN
            RETURN 'none';
        END IF;
        DELETE FROM core.desired_state_records WHERE record_id = r.record_id;
        RETURN 'deleted';
    END IF;
    IF r.record_id IS NULL THEN
        INSERT INTO core.desired_state_records (connection_id, recipient_kind, recipient_id, content, generation)
        VALUES (p_connection, p_kind, p_recipient, fresh, 1);
        RETURN 'created';
    END IF;
    IF p_ask = 'resend' THEN
        UPDATE core.desired_state_records
           SET content = fresh, generation = r.generation + (r.content IS DISTINCT FROM fresh)::int,
               changed_at = CASE WHEN r.content IS DISTINCT FROM fresh THEN now() ELSE r.changed_at END,
               confirmed_generation = 0, dispatched_generation = 0, failures = 0, due_at = now()
         WHERE record_id = r.record_id;
        RETURN CASE WHEN r.content IS DISTINCT FROM fresh THEN 'generation' ELSE 'due' END;
    END IF;
    IF r.content = fresh THEN
        IF p_ask = 'retry' AND r.confirmed_generation < r.generation THEN
            UPDATE core.desired_state_records SET due_at = now() WHERE record_id = r.record_id;
            RETURN 'due';
        END IF;
        RETURN 'unchanged';
    END IF;
    UPDATE core.desired_state_records
       SET content = fresh, generation = r.generation + 1, changed_at = now(),
           -- Due when it was (an idle record's due_at is past): a push in flight keeps the new
           -- generation waiting for its answer, so two pushes of one record never overlap and
           -- cannot arrive out of order; a failing endpoint's backoff keeps running.
           due_at = CASE WHEN p_ask = 'retry' THEN least(r.due_at, now()) ELSE r.due_at END
     WHERE record_id = r.record_id;
    RETURN 'generation';
END
$$;

-- writePushAnswer: the address lock, then the record row, then the answer. A confirmation moves
-- the confirmed generation forward (never back) and clears the failures; a failure counts and
-- makes the record due after a backoff that doubles from p_base_secs up to p_cap_secs (with
-- jitter, so many records failing together spread out). Returns false when the record is gone.
CREATE FUNCTION core.write_desired_state_push_answer(p_record bigint, p_generation bigint, p_ok boolean,
                                                     p_answer text, p_base_secs double precision,
                                                     p_cap_secs double precision, p_url text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    a record;
    r core.desired_state_records;
BEGIN
    -- The address columns never change, so reading them before the lock is safe.
    SELECT connection_id, recipient_kind, recipient_id INTO a FROM core.desired_state_records WHERE record_id = p_record;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM core.lock_desired_state_address(a.connection_id, a.recipient_kind, a.recipient_id);
    SELECT * INTO r FROM core.desired_state_records WHERE record_id = p_record FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- p_url is where the push went. An answer from a URL the connection no longer has confirms
    -- nothing for the new one: the record is due again. (A URL changed after this check is
    -- followed by its resend notice, whose recompute unconfirms the record under this lock.)
    IF p_url IS DISTINCT FROM (SELECT url FROM core.desired_state_connections WHERE connection_id = a.connection_id) THEN
        UPDATE core.desired_state_records
           SET last_answer = 'answered by the connection''s previous URL; sent again to the new one',
               last_answer_at = now(), due_at = now()
         WHERE record_id = p_record;
        RETURN true;
    END IF;
    IF p_ok THEN
        UPDATE core.desired_state_records
           SET confirmed_generation = greatest(r.confirmed_generation, least(p_generation, r.generation)),
               confirmed_at = now(), failures = 0, last_answer = p_answer, last_answer_at = now(),
               drift = false, due_at = now()
         WHERE record_id = p_record;
    ELSE
        UPDATE core.desired_state_records
           SET failures = r.failures + 1, last_answer = p_answer, last_answer_at = now(),
               due_at = now() + make_interval(secs => least(p_cap_secs, p_base_secs * 2 ^ least(r.failures, 30))
                                                         * (0.5 + random() / 2))
         WHERE record_id = p_record;
    END IF;
    RETURN true;
END
$$;

-- readBackItem: the address lock, then the record row, then the projection. A remote that holds
-- another content, or not this generation, is drift: the record is pushed again, under a new
-- generation of the same content, due now.
CREATE FUNCTION core.write_desired_state_read_back(p_record bigint, p_found boolean, p_generation bigint,
                                                   p_content jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    a record;
    r core.desired_state_records;
    drifted boolean;
BEGIN
    SELECT connection_id, recipient_kind, recipient_id INTO a FROM core.desired_state_records WHERE record_id = p_record;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM core.lock_desired_state_address(a.connection_id, a.recipient_kind, a.recipient_id);
    SELECT * INTO r FROM core.desired_state_records WHERE record_id = p_record FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Only a record the remote confirmed at its current generation can drift; one still behind is
    -- on its way anyway. Drift is repaired with a new generation of the same content: a remote
    -- keeps the newest generation it holds, so the generation it already claims would be refused
    -- as stale, and no generation is ever sent with two contents.
    drifted := r.confirmed_generation = r.generation
               AND NOT (p_found AND p_generation = r.generation AND p_content = r.content);
    UPDATE core.desired_state_records
       SET observed_generation = CASE WHEN p_found THEN p_generation END,
           observed_content = CASE WHEN p_found THEN p_content END,
           observed_at = now(), drift = drifted,
           generation = CASE WHEN drifted THEN r.generation + 1 ELSE r.generation END,
           changed_at = CASE WHEN drifted THEN now() ELSE r.changed_at END,
           due_at = CASE WHEN drifted THEN now() ELSE r.due_at END
     WHERE record_id = p_record;
    RETURN drifted;
END
$$;

CREATE OR REPLACE FUNCTION core.insert_desired_state_notice(p_connection bigint, p_kind text, p_recipient bigint,
                                                            p_reason text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    INSERT INTO core.desired_state_outbox (connection_id, recipient_kind, recipient_id, reason)
    VALUES (p_connection, p_kind, p_recipient, p_reason);
END
$$;

CREATE OR REPLACE FUNCTION core.desired_state_live() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM core.desired_state_connections WHERE deleted_at IS NULL);
END
$$;

-- A pool's entitlements changed: one notice per organization the statement touched.
CREATE FUNCTION core.notice_pool_entitlements() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF NOT core.desired_state_live() THEN
        RETURN NULL;
    END IF;
    -- `changed` is the statement's new rows (insert, update) or old rows (delete).
    PERFORM core.insert_desired_state_notice(NULL, 'organization', o.organization_id, 'source')
       FROM (SELECT DISTINCT p.organization_id FROM changed c JOIN core.resource_pools p USING (pool_id)
              ORDER BY 1) o;
    RETURN NULL;
END
$$;
CREATE TRIGGER pool_entitlements_desired_state_insert AFTER INSERT ON core.pool_entitlements
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION core.notice_pool_entitlements();
CREATE TRIGGER pool_entitlements_desired_state_update AFTER UPDATE ON core.pool_entitlements
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION core.notice_pool_entitlements();
CREATE TRIGGER pool_entitlements_desired_state_delete AFTER DELETE ON core.pool_entitlements
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION core.notice_pool_entitlements();

-- An organization added, or its name or type changed.
CREATE FUNCTION core.notice_organizations_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF core.desired_state_live() THEN
        PERFORM core.insert_desired_state_notice(NULL, 'organization', n.organization_id, 'source')
           FROM (SELECT organization_id FROM added ORDER BY 1) n;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER organizations_desired_state_insert AFTER INSERT ON core.organizations
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION core.notice_organizations_inserted();

CREATE FUNCTION core.notice_organizations_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF core.desired_state_live() THEN
        PERFORM core.insert_desired_state_notice(NULL, 'organization', n.organization_id, 'source')
           FROM (SELECT n.organization_id FROM after_rows n JOIN before_rows b USING (organization_id)
                  WHERE (n.name, n.org_type_id) IS DISTINCT FROM (b.name, b.org_type_id)
                  ORDER BY 1) n;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER organizations_desired_state_update AFTER UPDATE ON core.organizations
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core.notice_organizations_updated();

-- An org type renamed: its organizations' content names it.
CREATE FUNCTION core.notice_org_type_renamed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF core.desired_state_live() THEN
        PERFORM core.insert_desired_state_notice(NULL, 'organization', o.organization_id, 'source')
           FROM core.organizations o WHERE o.org_type_id = NEW.org_type_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER org_types_desired_state_rename AFTER UPDATE OF name ON core.org_types
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name) EXECUTE FUNCTION core.notice_org_type_renamed();

-- A connection added, its keys changed, or deleted: a notice about its every recipient.
CREATE FUNCTION core.notice_connection_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM core.insert_desired_state_notice(NEW.connection_id, NULL, NULL, 'connection');
    ELSIF NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL THEN
        PERFORM core.insert_desired_state_notice(NEW.connection_id, NULL, NULL, 'deleted');
    ELSIF NEW.deleted_at IS NULL THEN
        IF NEW.resource_keys IS DISTINCT FROM OLD.resource_keys THEN
            PERFORM core.insert_desired_state_notice(NEW.connection_id, NULL, NULL, 'connection');
        END IF;
        -- Another endpoint: it confirmed nothing yet, so every record goes to it again.
        IF NEW.url IS DISTINCT FROM OLD.url THEN
            PERFORM core.insert_desired_state_notice(NEW.connection_id, NULL, NULL, 'resend');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER desired_state_connections_changed AFTER INSERT OR UPDATE OF resource_keys, deleted_at, url
    ON core.desired_state_connections FOR EACH ROW EXECUTE FUNCTION core.notice_connection_changed();

REVOKE EXECUTE ON FUNCTION core.lock_desired_state_address(bigint, text, bigint),
    core.desired_state_content(bigint, text, bigint), core.recompute_desired_state_address(bigint, text, bigint, text),
    core.write_desired_state_push_answer(bigint, bigint, boolean, text, double precision, double precision, text),
    core.write_desired_state_read_back(bigint, boolean, bigint, jsonb),
    core.insert_desired_state_notice(bigint, text, bigint, text), core.desired_state_live(),
    core.notice_pool_entitlements(), core.notice_organizations_inserted(), core.notice_organizations_updated(),
    core.notice_org_type_renamed(), core.notice_connection_changed() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.lock_desired_state_address(bigint, text, bigint),
    core.desired_state_content(bigint, text, bigint), core.recompute_desired_state_address(bigint, text, bigint, text),
    core.write_desired_state_push_answer(bigint, bigint, boolean, text, double precision, double precision, text),
    core.write_desired_state_read_back(bigint, boolean, bigint, jsonb),
    core.insert_desired_state_notice(bigint, text, bigint, text), core.desired_state_live() TO console_runtime;

GRANT SELECT, INSERT ON core.desired_state_connections TO console_runtime;
GRANT UPDATE (name, url, secret, previous_secret, previous_secret_until, resource_keys, read_back, deleted_at,
              test_requested_at, last_test_at, last_test_ok, last_test_answer, last_read_back_at, last_read_back_answer)
    ON core.desired_state_connections TO console_runtime;
GRANT DELETE ON core.desired_state_connections TO console_runtime;
-- The claim leases notices (FOR UPDATE needs an updatable column) and a pass deletes done ones.
GRANT SELECT, DELETE ON core.desired_state_outbox TO console_runtime;
GRANT UPDATE (claimed_until, attempts, last_error, after_recipient_id) ON core.desired_state_outbox TO console_runtime;
-- The dispatch stamp's columns only; content, generation and answers go through the functions.
GRANT SELECT ON core.desired_state_records TO console_runtime;
GRANT UPDATE (dispatched_generation, dispatched_at, due_at) ON core.desired_state_records TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- one call farm sync (was migration 0026)
-- ==============================================================================================
-- The farm sync's writes in one round trip each (issue 15's benchmark): writeStatus and the
-- pass's closing recount were eight and four statements, each a round trip, per site and per
-- pool. The locks and their order are the same as before (docs/database-locks.md): the site row,
-- the placements through the site trigger, then the usage row; each later statement of these
-- VOLATILE functions takes a new snapshot, so it sees every commit that preceded the lock before
-- it.
SET LOCAL ROLE core_owner;

-- usage.Recount: the pool's usage row of active sites FOR UPDATE, the count in a statement of its
-- own, the write. Null, with no lock taken and nothing written, when the pool has no usage row.
CREATE FUNCTION fedwiki.recount_site_usage(p_pool bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM 1 FROM core.numeric_entitlement_usage
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_used := fedwiki.count_slots(p_pool);
    UPDATE core.numeric_entitlement_usage SET used = v_used, counted_at = now()
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites';
    RETURN v_used;
END
$$;

-- SyncSitesToDB's writeStatus: LockSiteStatusByDomain; then, in a statement of its own, whether a
-- request on the site is still accepted or changed at or after the listing (then nothing is
-- written: the request's record step writes the status); otherwise the farm's status and what it
-- measured (the site trigger moves the placements), then the pool's recount. True when written.
CREATE FUNCTION fedwiki.write_farm_status(p_domain text, p_status text, p_storage_bytes bigint,
                                          p_modified_at timestamptz, p_listed_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_pool bigint;
BEGIN
    SELECT site_id, workspace_id, status INTO s FROM fedwiki.sites WHERE domain = p_domain FOR UPDATE;
    IF NOT FOUND OR s.status = p_status THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests
                WHERE instance_id = s.site_id AND (state = 'accepted' OR updated_at >= p_listed_at)) THEN
        RETURN false;
    END IF;
    UPDATE fedwiki.sites
       SET status = p_status, status_changed_at = now(), parked_by_sweep = false,
           storage_bytes = p_storage_bytes, modified_at = coalesce(p_modified_at, modified_at), observed_at = now()
     WHERE site_id = s.site_id;
    SELECT p.pool_id INTO v_pool FROM fedwiki.workspaces w
      JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
     WHERE w.workspace_id = s.workspace_id;
    IF v_pool IS NOT NULL THEN
        PERFORM fedwiki.recount_site_usage(v_pool);
    END IF;
    RETURN true;
END
$$;

REVOKE EXECUTE ON FUNCTION fedwiki.recount_site_usage(bigint),
    fedwiki.write_farm_status(text, text, bigint, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fedwiki.recount_site_usage(bigint),
    fedwiki.write_farm_status(text, text, bigint, timestamptz, timestamptz) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- metric samples (was migration 0027)
-- ==============================================================================================
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
-- ==============================================================================================
-- progress rate (was migration 0028)
-- ==============================================================================================
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
-- ==============================================================================================
-- planned once per session (was migration 0029)
-- ==============================================================================================
-- Three small functions every move, recompute or entitlement write calls were SQL-language
-- SECURITY DEFINER functions, which PostgreSQL never inlines and plans again on every call:
-- the rendezvous seal (seven calls a plan-act move, 21 µs each), whether any desired-state
-- connection is live (three calls a move, through the pool-entitlement triggers, 41 µs each) and
-- the notice insert (once per organization a live connection must hear of). As plpgsql their
-- plans are kept for the session: the seal costs 8 µs, the check 5 µs. Same bodies, same owners,
-- same grants; no lock changes.
-- What it changed is written above, where each function it created again was first created.
-- ==============================================================================================
-- plpgsql counts and checks (was migration 0030)
-- ==============================================================================================
-- Three more SQL-language functions that plpgsql callers evaluate once per transaction, and that
-- PostgreSQL therefore plans again in every transaction (a SQL function whose body holds a
-- sub-select is never inlined, and a plpgsql expression's cache of it lasts one transaction):
-- the active-site count every usage recount and slot gate runs (`fedwiki.count_slots`: 150 µs
-- of planning around a 5 µs count, once per farm-sync status write, recount and gate), the
-- rendezvous check every materializing or settling transaction makes once
-- (`core.holds_rendezvous`: 85 µs of planning), and the free-ladders check that resuming a
-- replaced grant or delivering a displaced subscription makes per candidate
-- (`core.ladders_free_for`). As plpgsql their plans are kept for the session. Same bodies,
-- volatility, owners and grants; no lock changes.
-- What it changed is written above, where each function it created again was first created.
-- ==============================================================================================
-- member page statements (was migration 0031)
-- ==============================================================================================
-- The member pages' statements, started with less: most of a member page's time in PostgreSQL
-- was spent starting the plans of queries that read nothing (a profile of the home under load:
-- a third of the backend's time in ExecutorStart, for one organization with one plan line).
-- - The session's resume returns its row with RETURN NEXT instead of a RETURN QUERY statement.
-- - The home reads displaced subscriptions (a seven-table query) only when one of the member's
--   organizations has a live subscription, into a map the organizations' lines read from.
-- - The billing page reads subscriptions and invoices only when the member's organizations have
--   any, and what is on sale only for a member of an organization.
-- Same documents, same owners and grants; reads only, no lock changes.
-- What it changed is written above, where each function it created again was first created.
-- ==============================================================================================
-- member page statements started with less (was migration 0032)
-- ==============================================================================================
-- The member pages' statements, started with less again.
-- - The documents are built without aggregate nodes. A profile of PostgreSQL under the home
--   page's load put a sixth of the backend's time in ExecInitAgg: every json_agg(... ORDER BY
--   ...) is an Aggregate node whose start (its transition expressions, its sort) costs more than
--   the one to five rows it gathers, and each page started four to nine of them. An
--   ARRAY(SELECT ... ORDER BY ...) sub-select gathers the same rows in the same order without
--   one, and array_to_json writes them as json_agg did (an empty ARRAY gives [], so no coalesce).
--   Same documents (as JSON values), volatility, owners and grants.
-- - The session is read by core.live_session, a SQL function PostgreSQL inlines into the page's
--   statement (a set-returning plpgsql function runs as a call of its own, with its own
--   statement, for a fifth of a page's time); it says whether the last-seen time is due to
--   move, and the console moves it with a statement of its own when it is, once a minute at
--   most. core.resume_session stays for consoles of the earlier build while replicas are
--   upgraded.
-- Reads only, no lock changes.
SET LOCAL ROLE core_owner;

-- Inlined into the caller's statement: SQL, one SELECT, STABLE, not STRICT, no SET clause, not
-- SECURITY DEFINER (the caller's own grants on the two tables apply, as they did to
-- resume_session).
CREATE FUNCTION core.live_session(p_token text, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean, touch_due boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.account_id, a.email, a.is_operator, w.last_seen_at < now() - p_touch_every
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = sha256(convert_to(p_token, 'UTF8')) AND w.expires_at > now() AND w.ends_at > now()
$$;
REVOKE EXECUTE ON FUNCTION core.live_session(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.live_session(text, interval) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- session read by its hash (was migration 0033)
-- ==============================================================================================
-- The session is read by the hash of its token, which the console computes (SHA-256 of the
-- token's UTF-8 bytes, as before). core.live_session(text, ...) compared each row with
-- sha256(convert_to($1, 'UTF8')), an expression PostgreSQL cannot fold (convert_to is only
-- STABLE): where the sessions table is small enough to be scanned, it hashed the token once per
-- row, a sixth of the session's read. Given the hash, a scan compares bytes and an index lookup
-- is what it was.
-- core.live_session(text, interval) stays for consoles of the earlier build while replicas are
-- upgraded. Reads only, no lock changes.
SET LOCAL ROLE core_owner;

-- Inlined into the caller's statement, as the text form is: SQL, one SELECT, STABLE, not
-- STRICT, no SET clause, not SECURITY DEFINER.
CREATE FUNCTION core.live_session(p_token_hash bytea, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean, touch_due boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.account_id, a.email, a.is_operator, w.last_seen_at < now() - p_touch_every
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = p_token_hash AND w.expires_at > now() AND w.ends_at > now()
$$;
REVOKE EXECUTE ON FUNCTION core.live_session(bytea, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.live_session(bytea, interval) TO console_runtime;

RESET ROLE;
-- ==============================================================================================
-- on sale read once per catalog change (was migration 0034)
-- ==============================================================================================
-- What is on sale is read once per change of the catalog, not on every view of /billing.
-- The list is the same for every member and changes only when an operator or the price sync
-- writes the catalog, yet it was read on every view: a four-table join that cost a seventh of
-- the page in PostgreSQL, more with a real catalog. Now:
-- - core.catalog_changes holds the id of every transaction that wrote one of the tables the list
--   reads (tiers, ladders, products, prices), written by statement triggers inside that
--   transaction. The insert conflicts with nothing another transaction writes (the id is the
--   writer's own), so it takes no lock beyond the insert's and changes no lock order.
-- - core.member_billing(account, invoices, snapshot) is given the snapshot the console read its
--   list in, and reads the list again only when a catalog writer is visible now that was not
--   visible then; it returns the snapshot it read the list in. Exact under MVCC: a writer that
--   had not committed when the list was read is not visible in that snapshot, so its commit
--   is seen by the next view.
-- - core.member_billing(account, invoices) stays for consoles of the earlier build while
--   replicas are upgraded: the same document, the list always read.
SET LOCAL ROLE core_owner;

-- Rows are never deleted: a deleted row could be a change a cached list has not yet seen. One
-- row per transaction that wrote the catalog, which operators and the price sync do rarely.
CREATE TABLE core.catalog_changes (
    xid xid8 PRIMARY KEY
);
GRANT SELECT ON core.catalog_changes TO console_runtime;

CREATE FUNCTION core.note_catalog_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    INSERT INTO core.catalog_changes (xid) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION core.note_catalog_change() FROM PUBLIC;

CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.plan_ladder_tiers
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.plan_ladders
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.products
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON billing.prices
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();

CREATE FUNCTION core.member_billing(p_account bigint, p_invoices integer, p_on_sale_as_of pg_snapshot)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    orgs bigint[];
    v_subscriptions json := '[]';
    v_invoices json := '[]';
    v_on_sale json := '[]';
    v_on_sale_as_of pg_snapshot;
BEGIN
    orgs := ARRAY(SELECT organization_id FROM core.organization_members WHERE account_id = p_account);
    -- Each part's query only when it has something to read: most members have no subscription
    -- or invoice, and starting these queries' plans costs more than running them.
    IF EXISTS (SELECT 1 FROM core.subscriptions WHERE organization_id = ANY (orgs)) THEN
        v_subscriptions := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT s.subscription_id, s.organization_id, s.stripe_subscription_id, s.status,
                         s.current_period_end, s.cancel_at_period_end, s.collection_paused, s.ended_at,
                         (s.status IN ('canceled', 'incomplete_expired')) AS ended_rank,
                         ARRAY(SELECT p.name FROM core.subscription_items i JOIN core.products p USING (product_id)
                                WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                                ORDER BY i.subscription_item_id) AS products,
                         ARRAY(SELECT DISTINCT l.name FROM core.subscription_items i
                                 JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                                 JOIN core.plan_ladders l USING (plan_ladder_id)
                                WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL) AS ladders,
                         array_to_json(ARRAY(
                             SELECT json_build_object(
                                        'ladder_id', l.plan_ladder_id, 'ladder', l.name, 'product', p.name,
                                        'rank', t.rank, 'interval', pr.billing_interval, 'currency', pr.currency,
                                        'price_id', pr.price_id, 'quantity', i.quantity,
                                        'max_quantity', p.max_quantity)
                             FROM core.subscription_items i
                             JOIN core.products p USING (product_id)
                             JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                             JOIN core.plan_ladders l ON l.plan_ladder_id = t.plan_ladder_id
                             LEFT JOIN billing.prices pr ON pr.stripe_price_id = i.stripe_price_id
                             WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                             ORDER BY l.sort_order, l.plan_ladder_id)) AS items,
                         array_to_json(ARRAY(
                             SELECT json_build_object(
                                        'ladder_id', c.plan_ladder_id, 'from', f.name, 'to', tp.name,
                                        'effective_at', c.effective_at)
                             FROM core.scheduled_changes c
                             JOIN core.products f ON f.product_id = c.from_product_id
                             JOIN core.products tp ON tp.product_id = c.to_product_id
                             WHERE c.subscription_id = s.subscription_id AND c.state = 'scheduled'
                             ORDER BY c.plan_ladder_id)) AS scheduled
                  FROM core.subscriptions s WHERE s.organization_id = ANY (orgs)) x
            ORDER BY x.organization_id, x.ended_rank, x.subscription_id DESC));
    END IF;
    IF EXISTS (SELECT 1 FROM billing.invoices WHERE organization_id = ANY (orgs)) THEN
        v_invoices := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT i.organization_id, i.stripe_invoice_id, i.number, i.status, i.currency, i.amount_due,
                         i.amount_remaining, i.hosted_invoice_url, i.stripe_created
                  FROM unnest(orgs) AS o(id)
                  CROSS JOIN LATERAL (
                      SELECT * FROM billing.invoices WHERE organization_id = o.id
                      ORDER BY stripe_created DESC, stripe_invoice_id DESC LIMIT p_invoices) i) x
            ORDER BY x.organization_id, x.stripe_created DESC, x.stripe_invoice_id DESC));
    END IF;
    -- What is on sale is the same for every member: read it only when the catalog changed since
    -- the snapshot the caller read it in, that is when a transaction that wrote the catalog is
    -- visible now and was not then (core.catalog_changes; one whose id is below that snapshot's
    -- xmin had ended by then). Unchanged, 'on_sale' is null and the caller keeps its list.
    IF cardinality(orgs) = 0 THEN
        NULL;
    ELSIF p_on_sale_as_of IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM core.catalog_changes c
                          WHERE c.xid >= pg_snapshot_xmin(p_on_sale_as_of)
                            AND NOT pg_visible_in_snapshot(c.xid, p_on_sale_as_of)) THEN
        v_on_sale := NULL;
    ELSE
        v_on_sale_as_of := pg_current_snapshot();
        v_on_sale := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT l.name AS ladder, t.rank, t.product_id, p.name AS product, pr.price_id, pr.billing_interval,
                         pr.amount_minor, pr.currency, l.sort_order, l.plan_ladder_id, p.max_quantity
                  FROM core.plan_ladder_tiers t
                  JOIN core.plan_ladders l USING (plan_ladder_id)
                  JOIN core.products p ON p.product_id = t.product_id
                  JOIN billing.prices pr ON pr.product_id = t.product_id
                  WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
                    AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false) x
            ORDER BY x.sort_order, x.plan_ladder_id, x.rank, x.billing_interval, x.currency, x.price_id));
    END IF;
    RETURN json_build_object('home', core.member_home(p_account)::json, 'subscriptions', v_subscriptions,
                             'invoices', v_invoices, 'on_sale', v_on_sale,
                             'on_sale_as_of', v_on_sale_as_of::text)::text;
END
$$;

REVOKE EXECUTE ON FUNCTION core.member_billing(bigint, integer, pg_snapshot) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_billing(bigint, integer, pg_snapshot) TO console_runtime;

RESET ROLE;
