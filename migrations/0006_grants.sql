-- Grants: lineage, waiting grants (by date, or by the email domain of an organization not yet
-- created), revocation, expiry, the audit trail, and the outbox of reconcile requests.
SET LOCAL ROLE core_owner;

-- The lineage a grant belongs to: the first grant's id. An extension is a new grant that extends
-- the head (the grant no other extends); at most one grant extends another (the unique index on
-- extends_grant_id from 0004).
ALTER TABLE core.grants ADD COLUMN lineage_id bigint;
UPDATE core.grants SET lineage_id = grant_id;
ALTER TABLE core.grants ALTER COLUMN lineage_id SET NOT NULL;
CREATE INDEX grants_lineage ON core.grants (lineage_id);

-- A grant that names no organization names the email domain whose organization it waits for.
ALTER TABLE core.grants ADD COLUMN provision_domain text
    CHECK (provision_domain IS NULL OR provision_domain ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$');
ALTER TABLE core.grants ADD CONSTRAINT grants_names_a_recipient
    CHECK (organization_id IS NOT NULL OR provision_domain IS NOT NULL);
CREATE INDEX grants_waiting_domain ON core.grants (provision_domain) WHERE organization_id IS NULL AND status = 'waiting';
-- The sweep: live grants by end, waiting grants by start.
CREATE INDEX grants_live_end ON core.grants (ends_at) WHERE status IN ('active', 'replaced', 'waiting') AND ends_at IS NOT NULL;
CREATE INDEX grants_waiting_start ON core.grants (starts_at) WHERE status = 'waiting' AND organization_id IS NOT NULL;

-- The organization's email domain, which domain grants wait for.
ALTER TABLE core.organizations ADD COLUMN email_domain text
    CHECK (email_domain IS NULL OR email_domain ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$');
CREATE UNIQUE INDEX organizations_email_domain ON core.organizations (email_domain) WHERE email_domain IS NOT NULL;

-- Family 2 (a prefixed string): an email domain being provisioned. A domain grant's issue and
-- the creation of an organization with that domain take it, so one always sees the other.
CREATE FUNCTION core.provision_domain_key(domain text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('provision-domain:' || domain, 0);
GRANT EXECUTE ON FUNCTION core.provision_domain_key(text) TO console_runtime;

-- Who did what to a grant, when and why.
CREATE TABLE core.grant_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    grant_id bigint NOT NULL REFERENCES core.grants,
    organization_id bigint REFERENCES core.organizations,
    act text NOT NULL CHECK (act IN ('issued', 'started', 'revoked', 'expired', 'extended', 'rescheduled', 'provisioned')),
    actor_account_id bigint REFERENCES core.accounts,
    reason text NOT NULL DEFAULT '',
    detail jsonb NOT NULL DEFAULT '{}',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX grant_events_grant ON core.grant_events (grant_id, at);
CREATE INDEX grant_events_organization ON core.grant_events (organization_id, at DESC);

-- Requests for work another transaction does after this one commits (the billing issue's
-- processor claims them); an insert in the act's transaction, taking no lock.
CREATE TABLE core.outbox (
    outbox_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('reconcile_subscription')),
    subscription_id bigint REFERENCES core.subscriptions,
    payload jsonb NOT NULL DEFAULT '{}',
    due_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);
CREATE INDEX outbox_pending ON core.outbox (due_at) WHERE processed_at IS NULL;

-- The grant row's new columns for the run-time role.
GRANT INSERT ON core.grant_events, core.outbox TO console_runtime;
GRANT SELECT ON core.grant_events, core.outbox TO console_runtime;
GRANT UPDATE (processed_at) ON core.outbox TO console_runtime;
GRANT UPDATE (email_domain) ON core.organizations TO console_runtime;
GRANT UPDATE (reason, provision_domain) ON core.grants TO console_runtime;

-- Every new grant belongs to a lineage: an extension joins the lineage of the grant it extends,
-- any other grant (floors included) starts its own.
CREATE OR REPLACE FUNCTION core.set_grant_lineage() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lineage_id IS NULL THEN
        IF NEW.extends_grant_id IS NOT NULL THEN
            SELECT lineage_id INTO NEW.lineage_id FROM core.grants WHERE grant_id = NEW.extends_grant_id;
        ELSE
            NEW.lineage_id := NEW.grant_id;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER grants_lineage BEFORE INSERT ON core.grants FOR EACH ROW EXECUTE FUNCTION core.set_grant_lineage();

-- Ending a grant's holding conferral ends the grant when nothing else did (revocation and
-- expiry set their own status first; an extension marks the old grant ended itself), so no
-- grant stays active with nothing conferred.
CREATE OR REPLACE FUNCTION core.end_conferral(p_conferral bigint, p_reason text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    p bigint;
    g bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id, grant_id INTO p, g FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.lock_pool(p);
    DELETE FROM core.positions WHERE conferral_id = p_conferral;
    UPDATE core.conferrals SET state = 'ended', ended_reason = p_reason, ended_at = now()
     WHERE conferral_id = p_conferral AND state = 'holding';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF g IS NOT NULL THEN
        UPDATE core.grants SET status = 'ended', ended_at = now() WHERE grant_id = g AND status = 'active';
    END IF;
    RETURN true;
END
$$;

RESET ROLE;
