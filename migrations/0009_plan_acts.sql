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
