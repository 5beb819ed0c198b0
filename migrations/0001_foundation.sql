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

-- Does this transaction hold the materialization rendezvous (shared or exclusive)?
CREATE FUNCTION core.holds_rendezvous() RETURNS boolean
LANGUAGE sql STABLE
RETURN EXISTS (
    SELECT 1
    FROM pg_locks
    WHERE locktype = 'advisory'
      AND pid = pg_backend_pid()
      AND granted
      AND objsubid = 1
      AND classid = ((core.rendezvous_key() >> 32) & 4294967295)::oid
      AND objid = (core.rendezvous_key() & 4294967295)::oid
);

-- Called first by every function that materializes or settles a pool (spec rule 1).
CREATE FUNCTION core.assert_rendezvous() RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT core.holds_rendezvous() THEN
        RAISE EXCEPTION 'materialization_rendezvous_missing'
            USING ERRCODE = 'MC001',
                  DETAIL = 'A function that materializes or settles a pool ran in a transaction that does not hold the materialization rendezvous.',
                  HINT = 'Open the transaction as Materializing or RuleChange.';
    END IF;
END
$$;

GRANT EXECUTE ON FUNCTION core.rendezvous_key(), core.lifecycle_instance_key(text),
    core.desired_state_address_key(text, text, text), core.bare_id_key(text), core.registry_key(),
    core.holds_rendezvous(), core.assert_rendezvous()
TO console_runtime;

-- Back to the migrating role, which records the migration in its ledger.
RESET ROLE;
