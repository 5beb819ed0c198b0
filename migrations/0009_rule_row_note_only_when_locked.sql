-- Issue 36: core.commit_rule_change notes the rule row in the lock trace only when it locked one.
-- A delta that adds a rule the set does not have yet finds no row to take FOR UPDATE, and the
-- note said it had taken one: the checker counted an edge that never was, and a walked commit
-- paused on a lock it did not hold (walk_grants::a_rule_change_commit_that_adds_a_rule_...).
-- The locks and their order are unchanged; only the note is now guarded, as
-- core.settle_obligation and core.list_rule_change_obligations guard theirs.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.commit_rule_change(
    p_change bigint, p_position integer, p_set bigint, p_key text, p_numeric bigint, p_flag boolean, p_list boolean
) RETURNS TABLE (act_id bigint, pools bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    old_n bigint;
    old_f boolean;
    a bigint;
    n bigint;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    PERFORM 1 FROM core.entitlement_sets WHERE entitlement_set_id = p_set FOR UPDATE;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('EntitlementSetRow', p_set::text, 'FOR UPDATE', p_set);
    END IF;
    SELECT r.numeric_value, r.flag_value INTO old_n, old_f
      FROM core.entitlement_set_rules r
     WHERE r.entitlement_set_id = p_set AND r.resource_key = p_key
       FOR UPDATE;
    IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('RuleRow', p_set::text || ',' || p_key, 'FOR UPDATE', NULL);
    END IF;
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

RESET ROLE;
