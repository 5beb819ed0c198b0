-- Three small functions every move, recompute or entitlement write calls were SQL-language
-- SECURITY DEFINER functions, which PostgreSQL never inlines and plans again on every call:
-- the rendezvous seal (seven calls a plan-act move, 21 µs each), whether any desired-state
-- connection is live (three calls a move, through the pool-entitlement triggers, 41 µs each) and
-- the notice insert (once per organization a live connection must hear of). As plpgsql their
-- plans are kept for the session: the seal costs 8 µs, the check 5 µs. Same bodies, same owners,
-- same grants; no lock changes.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.rendezvous_seal() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN (SELECT encode(sha256(convert_to(
        s.secret || ':' || pg_backend_pid()::text || ':' || transaction_timestamp()::text, 'UTF8')), 'hex')
    FROM core.rendezvous_secret s);
END
$$;

CREATE OR REPLACE FUNCTION core.desired_state_live() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM core.desired_state_connections WHERE deleted_at IS NULL);
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

RESET ROLE;
