-- The two statements every member page view runs, as plpgsql functions: a plpgsql function keeps
-- its statements' plans for the session, where the same SQL sent as text (the one-round-trip
-- batch carries no parameters) is planned again on every request, which cost several times the
-- execution. The caller's batch is then `SELECT ... core.fn(<numbers or hex>)`, trivial to plan.
-- They run as the caller (not SECURITY DEFINER) and name every object by schema, so they carry
-- no search_path of their own: a SET clause costs each call a fifth of its time.
SET LOCAL ROLE core_owner;

-- A live session's account (idle and absolute bounds); its last-seen time and idle end move only
-- when last seen longer ago than p_touch_every, so most page views write nothing.
CREATE FUNCTION core.resume_session(p_token text, p_idle interval, p_touch_every interval)
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
    RETURN QUERY SELECT s.id, s.mail, s.op;
END
$$;
REVOKE EXECUTE ON FUNCTION core.resume_session(text, interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.resume_session(text, interval, interval) TO console_runtime;

-- The member's home: each organization the account belongs to, with its default pool's held
-- conferrals, entitlements and usage, as one JSON array (text).
CREATE FUNCTION core.member_home(p_account bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT coalesce(json_agg(json_build_object(
            'membership', json_build_object('organization_id', o.organization_id, 'name', o.name, 'role', m.role),
            'held', coalesce((
                SELECT json_agg(h ORDER BY h.sort_order NULLS LAST, h.plan_ladder_id, h.conferral_id)
                FROM (SELECT c.conferral_id, l.name AS ladder, ps.rank, p.name AS product, c.grant_id,
                             g.kind AS grant_kind, s.stripe_subscription_id, i.stripe_item_id, c.suspended,
                             c.quantity, l.sort_order, l.plan_ladder_id
                      FROM core.conferrals c
                      JOIN core.products p ON p.product_id = c.product_id
                      LEFT JOIN core.positions ps ON ps.conferral_id = c.conferral_id
                      LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                      LEFT JOIN core.grants g ON g.grant_id = c.grant_id
                      LEFT JOIN core.subscription_items i ON i.subscription_item_id = c.subscription_item_id
                      LEFT JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
                      WHERE c.pool_id = rp.pool_id AND c.state = 'holding') h), '[]'),
            'entitlements', coalesce((
                SELECT json_agg(e ORDER BY e.resource_key COLLATE "C")
                FROM (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements
                      WHERE pool_id = rp.pool_id) e), '[]'),
            'usage', coalesce((
                SELECT json_agg(u ORDER BY u.resource_key COLLATE "C")
                FROM (SELECT resource_key, used, limit_value FROM core.pool_usage WHERE pool_id = rp.pool_id) u), '[]')
          ) ORDER BY o.name, o.organization_id), '[]')::text
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account);
END
$$;
REVOKE EXECUTE ON FUNCTION core.member_home(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_home(bigint) TO console_runtime;

RESET ROLE;
