-- Accounts, organizations and membership, web sessions, and the sign-in throttle.
SET LOCAL ROLE core_owner;

CREATE TABLE core.accounts (
    account_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL CHECK (length(email) BETWEEN 3 AND 254 AND email = btrim(email)),
    password_hash text NOT NULL,
    is_operator boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_signed_in_at timestamptz
);
CREATE UNIQUE INDEX accounts_email_key ON core.accounts (lower(email));

CREATE TABLE core.organizations (
    organization_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE core.organization_members (
    organization_id bigint NOT NULL REFERENCES core.organizations ON DELETE CASCADE,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('owner', 'member')),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, account_id)
);
CREATE INDEX organization_members_account ON core.organization_members (account_id);

-- A signed-in browser. The cookie (encrypted) carries the token; only its SHA-256 is kept, so
-- a read of this table cannot sign anyone in. Sign-out deletes the row, which ends the session
-- on every copy of the cookie.
CREATE TABLE core.web_sessions (
    token_hash bytea PRIMARY KEY,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    address text NOT NULL
);
CREATE INDEX web_sessions_account ON core.web_sessions (account_id);
CREATE INDEX web_sessions_expiry ON core.web_sessions (expires_at);

-- Failed sign-ins, counted per account (email) and per client address over a window.
CREATE TABLE core.sign_in_failures (
    failure_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL,
    address text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_failures_email ON core.sign_in_failures (lower(email), failed_at);
CREATE INDEX sign_in_failures_address ON core.sign_in_failures (address, failed_at);

GRANT SELECT, INSERT ON core.accounts TO console_runtime;
GRANT UPDATE (password_hash, is_operator, last_signed_in_at) ON core.accounts TO console_runtime;
GRANT SELECT, INSERT ON core.organizations TO console_runtime;
GRANT UPDATE (name) ON core.organizations TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.organization_members TO console_runtime;
GRANT UPDATE (role) ON core.organization_members TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.web_sessions TO console_runtime;
GRANT UPDATE (last_seen_at, expires_at) ON core.web_sessions TO console_runtime;
GRANT SELECT, INSERT, DELETE ON core.sign_in_failures TO console_runtime;

-- Back to the migrating role, which records the migration in its ledger.
RESET ROLE;
