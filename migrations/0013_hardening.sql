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

CREATE FUNCTION core.rendezvous_seal() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
    SELECT encode(sha256(convert_to(
        s.secret || ':' || pg_backend_pid()::text || ':' || transaction_timestamp()::text, 'UTF8')), 'hex')
    FROM core.rendezvous_secret s
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

-- Backstops for every session of the run-time role, above every legitimate hold (the retention
-- purge holds its locks through a 30 s farm call): a statement or an idle transaction past a
-- minute is ended. The transaction kinds set their own, shorter bounds on top.
ALTER ROLE console_runtime SET statement_timeout = '60s';
ALTER ROLE console_runtime SET idle_in_transaction_session_timeout = '60s';
