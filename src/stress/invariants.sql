-- The invariants `member-console stress` checks after every run (and the tests check on the
-- databases they break on purpose): one query per invariant, each returning (pool_id or NULL,
-- message) per violating row; none returns a row when the invariant holds. Each starts with a
-- line `-- invariant: <name>`; src/stress/invariants.rs reads this file as it is.
-- The billing invariants (13) are checked after the run's final reconcile of every subscription,
-- so they compare the console's rows with Stripe's converged state.

-- invariant: (counts) the kept organization counts equal a count of the organizations
SELECT NULL::bigint, format('org type %s: kept %s, counted %s', coalesce(t::text, 'none'), sum(kept), sum(counted))
FROM (SELECT org_type_id AS t, delta AS kept, 0 AS counted FROM core.organization_counts
      UNION ALL
      SELECT org_type_id, 0, 1 FROM core.organizations) x
GROUP BY t HAVING sum(kept) <> sum(counted);

-- invariant: (2) one live position per (pool, ladder)
SELECT pool_id, format('pool %s holds %s live positions on ladder %s', pool_id, count(*), plan_ladder_id)
FROM core.positions GROUP BY pool_id, plan_ladder_id HAVING count(*) > 1;

-- invariant: (2) a holding conferral has its shape's positions
SELECT c.pool_id, format('holding conferral %s (product %s) has no position on ladder %s at rank %s in pool %s',
                         c.conferral_id, c.product_id, t.plan_ladder_id, t.rank, c.pool_id)
FROM core.conferrals c JOIN core.plan_ladder_tiers t ON t.product_id = c.product_id
WHERE c.state = 'holding'
  AND NOT EXISTS (SELECT 1 FROM core.positions p
                  WHERE p.conferral_id = c.conferral_id AND p.pool_id = c.pool_id
                    AND p.plan_ladder_id = t.plan_ladder_id AND p.rank = t.rank);

-- invariant: (2) positions only of holding conferrals, within their shape
SELECT p.pool_id, format('pool %s holds a position on ladder %s (rank %s) for conferral %s (%s, product %s), %s',
                         p.pool_id, p.plan_ladder_id, p.rank, c.conferral_id, c.state, c.product_id,
                         CASE WHEN c.state <> 'holding' THEN 'which has ended'
                              WHEN c.pool_id <> p.pool_id THEN 'which belongs to pool ' || c.pool_id
                              ELSE 'which is not a tier there' END)
FROM core.positions p JOIN core.conferrals c ON c.conferral_id = p.conferral_id
WHERE c.state <> 'holding' OR c.pool_id <> p.pool_id
   OR NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                  WHERE t.product_id = c.product_id AND t.plan_ladder_id = p.plan_ladder_id AND t.rank = p.rank);

-- invariant: (3) the default ladder is never vacant
SELECT rp.pool_id, format('organization %s (type %s) %s', o.organization_id, t.name,
                          CASE WHEN rp.pool_id IS NULL THEN 'has no default pool'
                               ELSE format('holds nothing on its default ladder %s in pool %s',
                                           t.default_plan_ladder_id, rp.pool_id) END)
FROM core.organizations o JOIN core.org_types t ON t.org_type_id = o.org_type_id
LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
WHERE EXISTS (SELECT 1 FROM core.plan_ladder_tiers pt
              WHERE pt.plan_ladder_id = t.default_plan_ladder_id AND pt.rank = 0)
  AND NOT EXISTS (SELECT 1 FROM core.positions ps
                  WHERE ps.pool_id = rp.pool_id AND ps.plan_ladder_id = t.default_plan_ladder_id)
  AND NOT EXISTS (SELECT 1 FROM core.grants lg
                  JOIN core.grants root ON root.grant_id = lg.lineage_id AND root.kind = 'legacy'
                  JOIN core.plan_acts pa ON pa.plan_act_id = root.plan_act_id
                       AND pa.kind = 'tier_removal' AND pa.disposition = 'grandfather'
                  JOIN core.plan_act_details pd ON pd.plan_act_id = pa.plan_act_id
                  WHERE lg.organization_id = o.organization_id AND lg.status = 'active'
                    AND pd.plan_ladder_id = t.default_plan_ladder_id);

-- invariant: (3) an organization holds at most one active floor grant
SELECT min(rp.pool_id), format('organization %s (type %s) holds %s active floor grants: %s (pool %s)',
                               o.organization_id, coalesce(t.name, 'none'), count(*),
                               string_agg(format('grant %s (product %s)', g.grant_id, g.product_id), ', '
                                          ORDER BY g.grant_id),
                               coalesce(min(rp.pool_id)::text, 'none'))
FROM core.grants g JOIN core.organizations o ON o.organization_id = g.organization_id
LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
WHERE g.kind = 'floor' AND g.status = 'active'
GROUP BY o.organization_id, t.name HAVING count(*) > 1;

-- invariant: (4) at most one holding conferral per grant
SELECT min(pool_id), format('grant %s has %s holding conferrals', grant_id, count(*))
FROM core.conferrals WHERE state = 'holding' AND grant_id IS NOT NULL
GROUP BY grant_id HAVING count(*) > 1;

-- invariant: (4) an active grant holds
SELECT rp.pool_id, format('%s grant %s (product %s) is active but has no holding conferral (pool %s; %s)',
                          g.kind, g.grant_id, g.product_id, rp.pool_id,
                          coalesce((SELECT format('its last conferral %s ended: %s', c.conferral_id, c.ended_reason)
                                    FROM core.conferrals c WHERE c.grant_id = g.grant_id
                                    ORDER BY c.conferral_id DESC LIMIT 1), 'never conferred'))
FROM core.grants g
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status = 'active'
  AND NOT EXISTS (SELECT 1 FROM core.conferrals c WHERE c.grant_id = g.grant_id AND c.state = 'holding');

-- invariant: (4) a grant that is not active does not hold
SELECT c.pool_id, format('%s grant %s is %s but conferral %s holds for it in pool %s',
                         g.kind, g.grant_id, g.status, c.conferral_id, c.pool_id)
FROM core.grants g JOIN core.conferrals c ON c.grant_id = g.grant_id AND c.state = 'holding'
WHERE g.status <> 'active';

-- invariant: (5) a numeric entitlement has a usage row
SELECT e.pool_id, format('pool %s is entitled to %s but has no usage row', e.pool_id, e.resource_key)
FROM core.pool_entitlements e
JOIN core.resource_keys k ON k.resource_key = e.resource_key AND k.kind = 'numeric'
WHERE NOT EXISTS (SELECT 1 FROM core.numeric_entitlement_usage u
                  WHERE u.pool_id = e.pool_id AND u.resource_key = e.resource_key);

-- invariant: (5) usage is never negative
SELECT pool_id, format('pool %s counts %s used of %s', pool_id, used, resource_key)
FROM core.numeric_entitlement_usage WHERE used < 0;

-- invariant: (4) an active grant names an organization
SELECT NULL::bigint, format('%s grant %s is active but names no organization (domain %s)',
                            kind, grant_id, provision_domain)
FROM core.grants WHERE status = 'active' AND organization_id IS NULL;

-- invariant: (4) a grant holds in its organization's pool
SELECT c.pool_id, format('conferral %s holds for %s grant %s in pool %s, not a pool of its organization %s',
                         c.conferral_id, g.kind, g.grant_id, c.pool_id, g.organization_id)
FROM core.conferrals c JOIN core.grants g ON g.grant_id = c.grant_id
WHERE c.state = 'holding'
  AND NOT EXISTS (SELECT 1 FROM core.resource_pools rp
                  WHERE rp.pool_id = c.pool_id AND rp.organization_id = g.organization_id);

-- invariant: (6) no grant is live past its end
SELECT rp.pool_id, format('%s grant %s is %s past its end by %s (pool %s)',
                          g.kind, g.grant_id, g.status, date_trunc('milliseconds', now() - g.ends_at),
                          coalesce(rp.pool_id::text, 'none'))
FROM core.grants g
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status IN ('active', 'replaced', 'waiting') AND g.ends_at <= now();

-- invariant: (6) no grant with an organization waits past its start
SELECT rp.pool_id, format('%s grant %s still waits %s after its start (pool %s)',
                          g.kind, g.grant_id, date_trunc('milliseconds', now() - g.starts_at), rp.pool_id)
FROM core.grants g
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status = 'waiting' AND g.organization_id IS NOT NULL AND g.starts_at <= now()
  AND (g.ends_at IS NULL OR g.ends_at > now());

-- invariant: (7) a lineage has exactly one head
SELECT NULL::bigint, format('the lineage of grant %s has %s heads', l.lineage_id, count(h.grant_id))
FROM (SELECT DISTINCT lineage_id FROM core.grants) l
LEFT JOIN core.grants h ON h.lineage_id = l.lineage_id
     AND NOT EXISTS (SELECT 1 FROM core.grants n WHERE n.extends_grant_id = h.grant_id)
GROUP BY l.lineage_id HAVING count(h.grant_id) <> 1;

-- invariant: (7) an extension is in the lineage of the grant it extends
SELECT NULL::bigint, format('grant %s extends grant %s but is in the lineage of grant %s, not of grant %s',
                            g.grant_id, p.grant_id, g.lineage_id, p.lineage_id)
FROM core.grants g JOIN core.grants p ON p.grant_id = g.extends_grant_id
WHERE g.lineage_id <> p.lineage_id;

-- invariant: (7) at most one live grant per lineage
SELECT min(rp.pool_id), format('the lineage of grant %s has %s live grants: %s', g.lineage_id, count(*),
                               string_agg(format('grant %s (%s)', g.grant_id, g.status), ', '
                                          ORDER BY g.grant_id))
FROM core.grants g
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status IN ('active', 'replaced', 'waiting')
GROUP BY g.lineage_id HAVING count(*) > 1;

-- invariant: (7) a live grant is its lineage's head
SELECT rp.pool_id, format('%s grant %s is %s but grant %s extends it', g.kind, g.grant_id, g.status, n.grant_id)
FROM core.grants g JOIN core.grants n ON n.extends_grant_id = g.grant_id
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status IN ('active', 'replaced', 'waiting');

-- invariant: (8) a domain grant is attached once its domain has an organization
SELECT rp.pool_id, format('grant %s still waits for %s, but organization %s has that domain (pool %s)',
                          g.grant_id, g.provision_domain, o.organization_id, rp.pool_id)
FROM core.grants g JOIN core.organizations o ON o.email_domain = g.provision_domain
LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
WHERE g.organization_id IS NULL AND g.status = 'waiting';

-- invariant: (8) a domain grant is attached to its domain's organization
SELECT rp.pool_id, format('grant %s for %s is attached to organization %s, whose domain is %s (pool %s)',
                          g.grant_id, g.provision_domain, o.organization_id,
                          coalesce(o.email_domain, 'none'), rp.pool_id)
FROM core.grants g JOIN core.organizations o ON o.organization_id = g.organization_id
LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
WHERE g.provision_domain IS NOT NULL AND o.email_domain IS DISTINCT FROM g.provision_domain;

-- invariant: (9) an expired grant has exactly one expired event
SELECT rp.pool_id, format('%s grant %s is %s and has %s expired events (pool %s)',
                          g.kind, g.grant_id, g.status, count(e.event_id), coalesce(rp.pool_id::text, 'none'))
FROM core.grants g
LEFT JOIN core.grant_events e ON e.grant_id = g.grant_id AND e.act = 'expired'
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status = 'expired' OR e.event_id IS NOT NULL
GROUP BY g.grant_id, g.kind, g.status, rp.pool_id
HAVING count(e.event_id) <> (g.status = 'expired')::int;

-- invariant: (9) a revoked grant has exactly one revoked event
SELECT rp.pool_id, format('%s grant %s is %s and has %s revoked events (pool %s)',
                          g.kind, g.grant_id, g.status, count(e.event_id), coalesce(rp.pool_id::text, 'none'))
FROM core.grants g
LEFT JOIN core.grant_events e ON e.grant_id = g.grant_id AND e.act = 'revoked'
LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
WHERE g.status = 'revoked' OR e.event_id IS NOT NULL
GROUP BY g.grant_id, g.kind, g.status, rp.pool_id
HAVING count(e.event_id) <> (g.status = 'revoked')::int;

-- invariant: (10) no rule change is still draining
SELECT min(o.pool_id) FILTER (WHERE o.state <> 'settled'),
       format('change %s (set %s) is still draining: %s pools unsettled (%s failed), the first pool %s',
              ch.change_id, ch.entitlement_set_id,
              count(DISTINCT o.pool_id) FILTER (WHERE o.state <> 'settled'),
              count(DISTINCT o.pool_id) FILTER (WHERE o.state = 'failed'),
              coalesce((min(o.pool_id) FILTER (WHERE o.state <> 'settled'))::text, 'none'))
FROM core.entitlement_set_changes ch
LEFT JOIN core.entitlement_set_change_acts a ON a.change_id = ch.change_id
LEFT JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
WHERE ch.state = 'draining'
GROUP BY ch.change_id, ch.entitlement_set_id;

-- invariant: (10) every obligation of a settled change is settled
SELECT o.pool_id, format('change %s is settled but act %s (%s) is %s to pool %s after %s attempts',
                         ch.change_id, a.act_id, a.resource_key, o.state, o.pool_id, o.attempts)
FROM core.entitlement_set_changes ch
JOIN core.entitlement_set_change_acts a ON a.change_id = ch.change_id
JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
WHERE ch.state = 'settled' AND o.state <> 'settled';

-- invariant: (10) a change has settled_at exactly when it is settled
SELECT NULL::bigint, format('change %s (set %s) is %s but its settled_at is %s',
                            change_id, entitlement_set_id, state, coalesce(settled_at::text, 'empty'))
FROM core.entitlement_set_changes WHERE (state = 'settled') <> (settled_at IS NOT NULL);

-- invariant: (10) no obligation settled twice (attempts = failures + 1)
SELECT o.pool_id, format('act %s (%s) of change %s is settled to pool %s after %s attempts with %s',
                         a.act_id, a.resource_key, a.change_id, o.pool_id, o.attempts,
                         coalesce('the failure ' || quote_literal(o.last_error) || ' recorded',
                                  'no failure recorded'))
FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
WHERE o.state = 'settled'
  AND ((o.last_error IS NULL AND o.attempts <> 1) OR (o.last_error IS NOT NULL AND o.attempts < 2));

-- invariant: (11) every plan act is done
SELECT min(o.pool_id) FILTER (WHERE o.state IN ('pending', 'failed')),
       format('plan act %s (%s, %s) is still %s: %s organizations pending, %s failed, the first pool %s',
              a.plan_act_id, a.kind, coalesce(a.disposition, 'no disposition'), a.state,
              count(o.pool_id) FILTER (WHERE o.state = 'pending'),
              count(o.pool_id) FILTER (WHERE o.state = 'failed'),
              coalesce((min(o.pool_id) FILTER (WHERE o.state IN ('pending', 'failed')))::text, 'none'))
FROM core.plan_acts a LEFT JOIN core.plan_act_obligations o ON o.plan_act_id = a.plan_act_id
WHERE a.state <> 'done'
GROUP BY a.plan_act_id, a.kind, a.disposition, a.state;

-- invariant: (11) no move is left pending or failed
SELECT o.pool_id, format('plan act %s (%s) left organization %s %s in pool %s after %s attempts%s',
                         a.plan_act_id, a.kind, o.organization_id, o.state, o.pool_id, o.attempts,
                         coalesce(': ' || o.last_error, ''))
FROM core.plan_act_obligations o JOIN core.plan_acts a ON a.plan_act_id = o.plan_act_id
WHERE o.state IN ('pending', 'failed');

-- invariant: (12) no move settled twice (1 <= attempts <= 1 + the act's retries)
SELECT o.pool_id, format('plan act %s (%s) has organization %s %s in pool %s after %s attempts, with %s retries of the act',
                         a.plan_act_id, a.kind, o.organization_id, o.state, o.pool_id, o.attempts, r.n)
FROM core.plan_act_obligations o JOIN core.plan_acts a ON a.plan_act_id = o.plan_act_id
CROSS JOIN LATERAL (SELECT count(*) AS n FROM core.plan_acts ra
                    JOIN core.plan_act_details d ON d.plan_act_id = ra.plan_act_id
                    WHERE ra.kind = 'retry' AND (d.detail->>'retry_of')::bigint = o.plan_act_id) r
WHERE o.attempts > 1 + r.n OR (o.state IN ('migrated', 'grandfathered', 'vacant') AND o.attempts < 1);

-- invariant: (13) a subscription item confers at most once
SELECT min(c.pool_id), format('subscription item %s (%s) has %s holding conferrals: %s (pool %s)',
                              c.subscription_item_id, min(i.stripe_item_id), count(*),
                              string_agg(format('conferral %s', c.conferral_id), ', ' ORDER BY c.conferral_id),
                              min(c.pool_id))
FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
WHERE c.state = 'holding'
GROUP BY c.subscription_item_id HAVING count(*) > 1;

-- invariant: (13) no two periods of a subscription overlap
SELECT NULL::bigint, format('subscription %s (%s) has the overlapping periods %s and %s',
                            a.subscription_id, s.stripe_subscription_id, a.period, b.period)
FROM core.subscription_periods a
JOIN core.subscription_periods b ON b.subscription_id = a.subscription_id AND a.ctid < b.ctid AND a.period && b.period
JOIN core.subscriptions s ON s.subscription_id = a.subscription_id;

-- invariant: (13) a holding provision's subscription is live and lists its item
SELECT c.pool_id, format('conferral %s holds for item %s of subscription %s (%s), which %s (pool %s)',
                         c.conferral_id, i.stripe_item_id, s.subscription_id, s.stripe_subscription_id,
                         CASE WHEN s.status IN ('canceled', 'incomplete_expired') THEN 'is ' || s.status
                              ELSE 'no longer lists it since ' || i.removed_at END,
                         c.pool_id)
FROM core.conferrals c
JOIN core.subscription_items i USING (subscription_item_id)
JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
WHERE c.state = 'holding' AND (s.status IN ('canceled', 'incomplete_expired') OR i.removed_at IS NOT NULL);

-- invariant: (13) a provision is suspended exactly when its subscription is past due, unpaid or paused
SELECT c.pool_id, format('conferral %s for item %s of subscription %s (%s) is %s, but the subscription is %s (pool %s)',
                         c.conferral_id, i.stripe_item_id, s.subscription_id, s.stripe_subscription_id,
                         CASE WHEN c.suspended THEN 'suspended' ELSE 'not suspended' END, s.status, c.pool_id)
FROM core.conferrals c
JOIN core.subscription_items i USING (subscription_item_id)
JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
WHERE c.state = 'holding'
  AND ((c.suspended AND s.status NOT IN ('past_due', 'unpaid', 'paused'))
       OR (NOT c.suspended AND s.status NOT IN ('active', 'trialing')));

-- invariant: (13) a live subscription another plan displaced on every ladder does not collect, once the outbox drained
SELECT NULL::bigint, format('subscription %s is displaced on every ladder but its collection is not paused',
                            s.stripe_subscription_id)
FROM core.subscriptions s
WHERE s.status IN ('active', 'trialing', 'past_due', 'unpaid') AND NOT s.collection_paused
  AND EXISTS (SELECT 1 FROM core.subscription_items i WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
                  WHERE i.subscription_id = s.subscription_id AND c.state = 'holding')
  AND NOT EXISTS (SELECT 1 FROM core.subscription_items i
                  WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                    AND NOT EXISTS (SELECT 1 FROM core.subscription_displacements sd
                                    JOIN core.conferrals d ON d.conferral_id = sd.displaced_by AND d.state = 'holding'
                                    WHERE sd.subscription_item_id = i.subscription_item_id AND sd.delivered_at IS NULL));

-- invariant: (13) the console's own collection pause lasts only while another plan displaces the subscription everywhere
SELECT NULL::bigint, format('subscription %s carries the console''s pause but confers %s of its items',
                            s.stripe_subscription_id,
                            (SELECT count(*) FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
                              WHERE i.subscription_id = s.subscription_id AND c.state = 'holding'))
FROM core.subscriptions s
WHERE s.console_paused AND s.status IN ('active', 'trialing', 'past_due', 'unpaid')
  AND EXISTS (SELECT 1 FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
              WHERE i.subscription_id = s.subscription_id AND c.state = 'holding');

-- invariant: (14) the usage of active sites is the active sites plus the open slot holds
SELECT u.pool_id, format('pool %s counts %s active sites in use, but has %s (active sites and open holds)',
                         u.pool_id, u.used, fedwiki.count_slots(u.pool_id))
FROM core.numeric_entitlement_usage u
WHERE u.resource_key = 'fedwiki.active_sites' AND u.used <> fedwiki.count_slots(u.pool_id);

-- invariant: (14) no claim equals or lies under another owner's claim
SELECT NULL::bigint, format('claim %s (%s) lies under claim %s (%s)', c.name, c.owner, o.name, o.owner)
FROM domains.claims c JOIN domains.claims o
  ON o.name <> c.name AND right(c.name, length(o.name) + 1) = '.' || o.name AND o.owner <> c.owner;

-- invariant: (14) a placement lies under a claim of its own owner or the farm's
SELECT NULL::bigint, format('placement %s (%s) lies under no claim of its owner or the farm', p.hostname, p.owner)
FROM domains.placements p
WHERE NOT EXISTS (SELECT 1 FROM domains.claims c
                  WHERE (p.hostname = c.name OR right(p.hostname, length(c.name) + 1) = '.' || c.name)
                    AND c.owner IN (p.owner, 'farm'));

-- invariant: (14) issue 40: no pending claim is at, under or above another owner's verified claim (claims refuse it, verifications let it go), nor at one of its own owner's
SELECT NULL::bigint, format('pending claim %s (%s) meets verified claim %s (%s)', p.name, p.owner, c.name, c.owner)
FROM domains.pending_claims p JOIN domains.claims c
  ON (p.name = c.name OR right(p.name, length(c.name) + 1) = '.' || c.name
      OR right(c.name, length(p.name) + 1) = '.' || p.name)
 AND (c.owner <> p.owner OR c.name = p.name);

-- invariant: (14) issue 40: a lapsed claim was missing first, and only a workspace's claim is checked
SELECT NULL::bigint, format('claim %s (%s): lapsed %s, missing since %s, token %s', name, owner, lapsed_at, missing_since, token IS NOT NULL)
FROM domains.claims
WHERE (lapsed_at IS NOT NULL AND missing_since IS NULL) OR ((owner = 'farm') = (token IS NOT NULL));

-- invariant: (14) every active site has a servable placement, and every servable placement an active site
SELECT NULL::bigint, format('site %s (%s) is active with no servable placement', s.site_id, s.domain)
FROM fedwiki.sites s
WHERE s.status = 'active'
  AND NOT EXISTS (SELECT 1 FROM domains.placements p WHERE p.provider = 'fedwiki' AND p.object_id = s.site_id AND p.servable)
UNION ALL
SELECT NULL::bigint, format('placement %s is servable but its site %s is not active', p.hostname, p.object_id)
FROM domains.placements p
WHERE p.servable AND NOT EXISTS (SELECT 1 FROM fedwiki.sites s WHERE s.site_id = p.object_id AND s.status = 'active');

-- invariant: (15) after the last maintenance run, no pool has more active sites than its plan allows (a pool with a request in flight is the request's to settle)
SELECT p.pool_id, format('pool %s has %s active sites; its plan allows %s', p.pool_id, count(*), coalesce(max(e.numeric_value), 0))
FROM fedwiki.sites s
JOIN fedwiki.workspaces w USING (workspace_id)
JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
WHERE s.status = 'active'
  AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r WHERE r.workspace_id = w.workspace_id AND r.state = 'accepted')
  AND EXISTS (SELECT 1 FROM fedwiki.maintenance_runs m WHERE m.outcome = 'ok')
GROUP BY p.pool_id
HAVING count(*) > coalesce(max(e.numeric_value), 0);

-- invariant: (15) no archived site outlives the retention (the stress run's: 2 seconds) at the last maintenance run
SELECT NULL::bigint, format('site %s (%s) was archived at %s, past retention at the last run', s.site_id, s.domain, s.status_changed_at)
FROM fedwiki.sites s
WHERE s.status = 'archived'
  AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r WHERE r.instance_id = s.site_id AND r.state = 'accepted')
  AND s.status_changed_at < (SELECT max(m.started_at) FROM fedwiki.maintenance_runs m WHERE m.outcome = 'ok') - interval '2 seconds';

-- invariant: (14) a slot hold belongs to an accepted create or activation
SELECT h.pool_id, format('hold of request %s (%s, %s) in pool %s', h.request_id, r.kind, r.state, h.pool_id)
FROM fedwiki.slot_holds h JOIN fedwiki.lifecycle_requests r USING (request_id)
WHERE r.state <> 'accepted' OR r.kind NOT IN ('create', 'activate');

-- invariant: (16) the desired-state outbox is empty once the relay settled
SELECT NULL::bigint, format('notice %s (%s, connection %s, recipient %s) is still pending: %s', notice_id, reason, connection_id, recipient_id, coalesce(last_error, 'no error'))
FROM core.desired_state_outbox;

-- invariant: (16) every record's content equals a fresh computation once the relay settled
SELECT NULL::bigint, format('connection %s recipient %s: the record (generation %s) holds %s, a fresh computation gives %s', r.connection_id, r.recipient_id, r.generation, r.content, core.desired_state_content(r.connection_id, r.recipient_kind, r.recipient_id))
FROM core.desired_state_records r
WHERE r.content IS DISTINCT FROM core.desired_state_content(r.connection_id, r.recipient_kind, r.recipient_id);

-- invariant: (16) every organization has a record at every live connection once the relay settled
SELECT NULL::bigint, format('organization %s has no record at connection %s', o.organization_id, c.connection_id)
FROM core.organizations o CROSS JOIN core.desired_state_connections c
WHERE c.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM core.desired_state_records r
                  WHERE r.connection_id = c.connection_id AND r.recipient_kind = 'organization' AND r.recipient_id = o.organization_id);

-- invariant: (16) every record is confirmed at its generation once the relay settled
SELECT NULL::bigint, format('connection %s recipient %s: generation %s, confirmed %s, %s failures, last answer %s', connection_id, recipient_id, generation, confirmed_generation, failures, coalesce(last_answer, 'none'))
FROM core.desired_state_records
WHERE confirmed_generation < generation;

-- invariant: (16) a deleted connection keeps no record
SELECT NULL::bigint, format('connection %s was deleted but keeps the record of recipient %s', r.connection_id, r.recipient_id)
FROM core.desired_state_records r JOIN core.desired_state_connections c USING (connection_id)
WHERE c.deleted_at IS NOT NULL;

-- invariant: (issue 38) an organization whose members were changed keeps an owner who can act
SELECT NULL::bigint, format('organization %s has no owner whose account is neither disabled nor deleted', o.organization_id)
FROM core.organizations o
WHERE EXISTS (SELECT 1 FROM core.account_events e
              WHERE e.organization_id = o.organization_id
                AND e.kind IN ('role_changed', 'removed_from_organization', 'left_organization'))
  AND NOT EXISTS (SELECT 1 FROM core.organization_members m JOIN core.accounts a USING (account_id)
                  WHERE m.organization_id = o.organization_id AND m.role = 'owner'
                    AND a.disabled_at IS NULL AND a.deleted_at IS NULL);
