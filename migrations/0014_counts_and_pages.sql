-- Pages that cost the same at any size: counts kept, not scanned, and indexes for lists paged by key.
--
-- Organization counts that no page has to scan for. Every statement that inserts, deletes or
-- retypes organizations appends its net change per org type here (statement-level triggers, so a
-- bulk insert appends one row per type); a reader sums the rows; a scheduled compaction folds
-- them into one row per type. Appending takes no lock that waits: concurrent organization
-- creations never queue on a counter.
SET LOCAL ROLE core_owner;

CREATE TABLE core.organization_counts (
    count_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Null: organizations without a type.
    org_type_id bigint,
    delta bigint NOT NULL
);
CREATE INDEX organization_counts_type ON core.organization_counts (org_type_id);

CREATE FUNCTION core.count_organizations() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT org_type_id, count(*) FROM new_rows GROUP BY org_type_id;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT org_type_id, -count(*) FROM old_rows GROUP BY org_type_id;
    ELSE
        INSERT INTO core.organization_counts (org_type_id, delta)
        SELECT t, sum(d) FROM (
            SELECT n.org_type_id AS t, 1 AS d FROM new_rows n JOIN old_rows o USING (organization_id)
            WHERE n.org_type_id IS DISTINCT FROM o.org_type_id
            UNION ALL
            SELECT o.org_type_id, -1 FROM new_rows n JOIN old_rows o USING (organization_id)
            WHERE n.org_type_id IS DISTINCT FROM o.org_type_id) x
        GROUP BY t;
    END IF;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION core.count_organizations() FROM PUBLIC;

CREATE TRIGGER organizations_counted_insert AFTER INSERT ON core.organizations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();
CREATE TRIGGER organizations_counted_delete AFTER DELETE ON core.organizations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();
CREATE TRIGGER organizations_counted_update AFTER UPDATE ON core.organizations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core.count_organizations();

INSERT INTO core.organization_counts (org_type_id, delta)
SELECT org_type_id, count(*) FROM core.organizations GROUP BY org_type_id;

-- Fold the appended rows into one per type. Rows appended by transactions still open are not
-- seen, so stay; two compactions at once fold each row once (a row the other deleted is skipped).
CREATE FUNCTION core.compact_organization_counts() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
    WITH gone AS (DELETE FROM core.organization_counts RETURNING org_type_id, delta),
         kept AS (INSERT INTO core.organization_counts (org_type_id, delta)
                  SELECT org_type_id, sum(delta) FROM gone GROUP BY org_type_id HAVING sum(delta) <> 0
                  RETURNING 1)
    SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM kept)
$$;
REVOKE EXECUTE ON FUNCTION core.compact_organization_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.compact_organization_counts() TO console_runtime;

GRANT SELECT ON core.organization_counts TO console_runtime;

-- How many pools hold a conferral of any of these products, counting no further than cap + 1:
-- each product's pools are read in index order and stop at the cap, and only when every product
-- stays under it are the (then few) rows merged for an exact count. A catalog page shows
-- "more than 1,000 pools" rather than reading every conferral of a product everyone carries.
CREATE FUNCTION core.pools_carrying(products bigint[], cap bigint) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    p bigint;
    n bigint;
BEGIN
    FOREACH p IN ARRAY coalesce(products, '{}') LOOP
        SELECT count(*) INTO n FROM (
            SELECT DISTINCT c.pool_id FROM core.conferrals c
            WHERE c.product_id = p AND c.state = 'holding' LIMIT cap + 1) x;
        IF n > cap THEN
            RETURN cap + 1;
        END IF;
    END LOOP;
    SELECT count(DISTINCT c.pool_id) INTO n FROM core.conferrals c
    WHERE c.product_id = ANY (products) AND c.state = 'holding';
    RETURN least(n, cap + 1);
END
$$;
GRANT EXECUTE ON FUNCTION core.pools_carrying(bigint[], bigint) TO console_runtime;

-- The grant list pages by id, newest first, optionally for one status: a range scan either way.
CREATE INDEX grants_status_id ON core.grants (status, grant_id);

RESET ROLE;
