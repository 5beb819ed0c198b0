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

-- The one way a notice is written: an insert, taking no lock beyond it.
CREATE FUNCTION core.insert_desired_state_notice(p_connection bigint, p_kind text, p_recipient bigint, p_reason text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
    INSERT INTO core.desired_state_outbox (connection_id, recipient_kind, recipient_id, reason)
    VALUES (p_connection, p_kind, p_recipient, p_reason);
$$;

-- Whether any connection is live: without one the triggers write nothing.
CREATE FUNCTION core.desired_state_live() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM core.desired_state_connections WHERE deleted_at IS NULL);
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
