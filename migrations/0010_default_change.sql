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

-- The move's lock on its obligation (after the pool row): FOR UPDATE, with whether it is still
-- pending and whether its act still owns the type's default, read in the same statement.
CREATE FUNCTION core.lock_plan_act_obligation(p_act bigint, p_pool bigint)
RETURNS TABLE (state text, owns boolean, org_type_id bigint, from_ladder_id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT o.state, t.default_owner_act_id = p_act, o.org_type_id, r.from_ladder_id
      FROM core.plan_act_obligations o
      JOIN core.org_types t ON t.org_type_id = o.org_type_id
      JOIN core.plan_act_reached_types r ON r.plan_act_id = o.plan_act_id AND r.org_type_id = o.org_type_id
     WHERE o.plan_act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE OF o
$$;

CREATE FUNCTION core.settle_plan_act_obligation(p_act bigint, p_pool bigint, p_state text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    UPDATE core.plan_act_obligations SET state = p_state, settled_at = now(), attempts = attempts + 1
     WHERE plan_act_id = p_act AND pool_id = p_pool AND state = 'pending';
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
-- The move's floor: a floor grant of the pool on any ladder that is not the type's default now
-- (the outgoing default's, or an older act's the later act took over).
CREATE FUNCTION core.floor_off_default(p_pool bigint, p_type bigint) RETURNS TABLE (conferral_id bigint, grant_id bigint, product_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT c.conferral_id, g.grant_id, g.product_id
      FROM core.positions p
      JOIN core.conferrals c ON c.conferral_id = p.conferral_id
      JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
      JOIN core.org_types t ON t.org_type_id = p_type
     WHERE p.pool_id = p_pool AND p.plan_ladder_id IS DISTINCT FROM t.default_plan_ladder_id
     ORDER BY c.conferral_id
     LIMIT 1
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
