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

-- Product-catalog invariant: a tier's product has an entitlement set. The product row is taken
-- FOR SHARE and held to commit, so a tier insert and a clear of the product's set cannot both
-- commit at READ COMMITTED. The writer holds UPDATE on core.products, so the lock is taken with
-- the caller's rights.
CREATE FUNCTION core.refuse_tier_product_without_set() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN
    SELECT entitlement_set_id INTO s FROM core.products WHERE product_id = NEW.product_id FOR SHARE;
    IF s IS NULL THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            DETAIL = format('product %s has no entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER plan_ladder_tiers_product_has_set BEFORE INSERT OR UPDATE OF product_id ON core.plan_ladder_tiers
    FOR EACH ROW EXECUTE FUNCTION core.refuse_tier_product_without_set();

-- And the other direction: a product that is a tier cannot lose its set.
CREATE FUNCTION core.refuse_clearing_tier_product_set() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.entitlement_set_id IS NULL AND OLD.entitlement_set_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers WHERE product_id = NEW.product_id) THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
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
