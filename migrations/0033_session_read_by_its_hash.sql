-- The session is read by the hash of its token, which the console computes (SHA-256 of the
-- token's UTF-8 bytes, as before). core.live_session(text, ...) compared each row with
-- sha256(convert_to($1, 'UTF8')), an expression PostgreSQL cannot fold (convert_to is only
-- STABLE): where the sessions table is small enough to be scanned, it hashed the token once per
-- row, a sixth of the session's read. Given the hash, a scan compares bytes and an index lookup
-- is what it was.
-- core.live_session(text, interval) stays for consoles of the earlier build while replicas are
-- upgraded. Reads only, no lock changes.
SET LOCAL ROLE core_owner;

-- Inlined into the caller's statement, as the text form is: SQL, one SELECT, STABLE, not
-- STRICT, no SET clause, not SECURITY DEFINER.
CREATE FUNCTION core.live_session(p_token_hash bytea, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean, touch_due boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.account_id, a.email, a.is_operator, w.last_seen_at < now() - p_touch_every
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = p_token_hash AND w.expires_at > now() AND w.ends_at > now()
$$;
REVOKE EXECUTE ON FUNCTION core.live_session(bytea, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.live_session(bytea, interval) TO console_runtime;

RESET ROLE;
