-- Issue 36, the platform's own paths walked row by row (tests/it/walk_platform.rs): two SQL
-- functions took their row locks without noting them, so the trace and the row-level walks could
-- not show them (stress saw "Sign in" take no lock, and the compaction none).
--
-- core.reserve_sign_in: the address's row, then the (email, address) row, each FOR UPDATE (SIGN_IN_LOCKS),
-- now noted right after each. The function is the one migration 0001 wrote, the two notes added.
--
-- core.compact_organization_counts: the DELETE of every appended count row it sees (their
-- strongest lock, through commit: Lock::OrganizationCountRows in COMPACT_COUNTS_LOCKS), now noted row
-- by row after the statement, in the order the DELETE returned them. The same statement, in
-- PL/pgSQL so it can note them.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.reserve_sign_in(
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
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('SignInAddressRow', p_address, 'FOR UPDATE', NULL);
    END IF;
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
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('SignInThrottleRow', lower(p_email) || ',' || p_address, 'FOR UPDATE', NULL);
    END IF;
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

CREATE OR REPLACE FUNCTION core.compact_organization_counts() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_gone bigint[];
    v_folded bigint;
    v bigint;
BEGIN
    WITH gone AS (DELETE FROM core.organization_counts RETURNING count_id, org_type_id, delta),
         kept AS (INSERT INTO core.organization_counts (org_type_id, delta)
                  SELECT org_type_id, sum(delta) FROM gone GROUP BY org_type_id HAVING sum(delta) <> 0
                  RETURNING 1)
    SELECT coalesce((SELECT array_agg(count_id) FROM gone), '{}'),
           (SELECT count(*) FROM gone) - (SELECT count(*) FROM kept)
      INTO v_gone, v_folded;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOREACH v IN ARRAY v_gone LOOP
            PERFORM core.note_lock('OrganizationCountRows', v::text, 'UPDATE', NULL);
        END LOOP;
    END IF;
    RETURN v_folded;
END
$$;

RESET ROLE;
