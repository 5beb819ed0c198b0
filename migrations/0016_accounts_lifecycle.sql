-- Issue 38, accounts and onboarding: verified, disabled and deleted accounts, single-use tokens
-- (email verification and password reset), invitations, the account's history, the send limits
-- of the mail a stranger can cause, and the organization type sign-up gives.
SET LOCAL ROLE core_owner;

-- An account is verified once it proved it reads its email; until then it may look around but
-- not buy, create sites or invite. Disabled: an operator stopped it (no sign-in, no session).
-- Deleted: anonymised in place, so every history row that names it as actor keeps its meaning.
ALTER TABLE core.accounts
    ADD COLUMN email_verified_at timestamptz,
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN deleted_at timestamptz;
-- Existing accounts (the demo's, create-operator's) count as verified.
UPDATE core.accounts SET email_verified_at = created_at;
GRANT UPDATE (email, email_verified_at, disabled_at, deleted_at) ON core.accounts TO console_runtime;
-- The operator's list: prefix search on the email in byte order, one index for search and order.
CREATE INDEX accounts_email_order ON core.accounts ((lower(email) COLLATE "C"), account_id);

-- A link's secret, mailed once. The token is an HMAC of a random 256-bit seed under a key only
-- the servers hold (src/services/tokens.rs); only its SHA-256 is kept here, so neither this
-- table nor the mail job's payload (which holds the seed) yields a usable link. `email` is the
-- address the token proves: for 'verify_email' the account's address when it was made, or the
-- new address of an email change; a verification whose address is no longer the account's nor
-- its requested one is refused. Used once (used_at, under this row's lock), and expires.
CREATE TABLE core.account_tokens (
    token_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint NOT NULL REFERENCES core.accounts,
    purpose text NOT NULL CHECK (purpose IN ('verify_email', 'change_email', 'reset_password')),
    email text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    token_hash bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at timestamptz
);
CREATE INDEX account_tokens_account ON core.account_tokens (account_id, purpose);
GRANT SELECT, INSERT ON core.account_tokens TO console_runtime;
GRANT UPDATE (used_at) ON core.account_tokens TO console_runtime;
GRANT DELETE ON core.account_tokens TO console_runtime;

-- An owner's (or an operator's) invitation of an email into an organization, as owner or member.
-- Pending while neither accepted nor revoked; one pending invitation per (organization, email),
-- which a resend renews (a new token, a new expiry). Its token is kept as account_tokens' are.
CREATE TABLE core.invitations (
    invitation_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES core.organizations ON DELETE CASCADE,
    email text NOT NULL CHECK (length(email) BETWEEN 3 AND 254 AND email = btrim(email)),
    role text NOT NULL CHECK (role IN ('owner', 'member')),
    invited_by bigint REFERENCES core.accounts,
    token_hash bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    accepted_at timestamptz,
    accepted_by bigint REFERENCES core.accounts,
    revoked_at timestamptz,
    CHECK (accepted_at IS NULL OR revoked_at IS NULL)
);
CREATE UNIQUE INDEX invitations_pending_key ON core.invitations (organization_id, lower(email))
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
CREATE INDEX invitations_email ON core.invitations (lower(email));
GRANT SELECT, INSERT ON core.invitations TO console_runtime;
GRANT UPDATE (token_hash, sent_at, expires_at, role, accepted_at, accepted_by, revoked_at)
    ON core.invitations TO console_runtime;

-- What happened to an account and who did it: sign-up, verification, password and email
-- changes, invitations accepted, roles changed, disable and enable, operator granted and
-- revoked, deletion. Shown on the operator's account page; never rewritten.
CREATE TABLE core.account_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint NOT NULL REFERENCES core.accounts,
    actor_account_id bigint REFERENCES core.accounts,
    kind text NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
    organization_id bigint REFERENCES core.organizations ON DELETE SET NULL,
    detail text NOT NULL DEFAULT '' CHECK (length(detail) <= 1000),
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX account_events_account ON core.account_events (account_id, at DESC, event_id DESC);
GRANT SELECT, INSERT ON core.account_events TO console_runtime;

-- The sends a stranger can cause (sign-up, resend, forgot password, invitations), counted per key
-- ('address:<ip>' and 'email:<lowered address>') over a fixed window. Taken in key byte order,
-- one statement (docs/database-locks.md, "Reserve a mail send").
CREATE TABLE core.mail_send_limits (
    limit_key text PRIMARY KEY CHECK (length(limit_key) <= 300),
    window_started_at timestamptz NOT NULL,
    sends integer NOT NULL CHECK (sends >= 0)
);
CREATE INDEX mail_send_limits_window ON core.mail_send_limits (window_started_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON core.mail_send_limits TO console_runtime;

-- The organization type a sign-up's new organization gets (and so its floor): one at most,
-- chosen by an operator on the topology page. None chosen: sign-up says it is not open yet.
CREATE TABLE core.signup_org_type (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    org_type_id bigint NOT NULL REFERENCES core.org_types ON DELETE CASCADE,
    chosen_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON core.signup_org_type TO console_runtime;

-- A session reads whether its account is verified (the banner, and the acts that wait for it),
-- and a disabled or deleted account has no live session, whatever rows are left. Inlined into the
-- page's statement as before: SQL, one SELECT, STABLE, not STRICT, no SET clause.
DROP FUNCTION core.live_session(bytea, interval);
CREATE FUNCTION core.live_session(p_token_hash bytea, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean, touch_due boolean, verified boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.account_id, a.email, a.is_operator, w.last_seen_at < now() - p_touch_every,
           a.email_verified_at IS NOT NULL
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = p_token_hash AND w.expires_at > now() AND w.ends_at > now()
      AND a.disabled_at IS NULL AND a.deleted_at IS NULL
$$;
REVOKE EXECUTE ON FUNCTION core.live_session(bytea, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.live_session(bytea, interval) TO console_runtime;

RESET ROLE;
