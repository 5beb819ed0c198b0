//! The reliability tool: a short run of every path at once (the grant paths and their jobs, the
//! rule changes and their drains, the plan acts and theirs, the billing paths against the Stripe
//! stand-in included) finds no deadlock, no error and no violated invariant; and the invariant
//! check does see a broken invariant.

use crate::common;

use common::{TestDb, pages::demo_db};
use member_console::{
    db,
    ids::{EntitlementSetId, LadderId, OrgTypeId, OrganizationId, PoolId, SubscriptionItemId},
    services::{
        billing::{self, Reconciled},
        entitlements as ent,
        grants::EmailDomain,
        organizations::{self as orgs, OrgName},
        plan_acts::{self as pa, Disposition},
        rule_changes as rc,
        topology::{self, RemoveTier},
    },
    store::entitlements as ent_store,
    stress::{self, StressOptions, StressPath},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_does_every_path_without_deadlock_error_or_violation() {
    let config = common::command_config(&common::root_admin_url(), "stress-test");
    // On a database that defaults to REPEATABLE READ: every path sets READ COMMITTED itself (a
    // session or a statement left to the default would fail its lock waits with 40001). A short
    // run need not meet every spec path's branch; it must keep the declared order.
    let opts = StressOptions {
        seconds: 8,
        orgs: 40,
        connections: 6,
        seed: None,
        keep: false,
        default_isolation: Some(stress::DefaultIsolation::RepeatableRead),
        require_every_spec_path: false,
    };
    let report = stress::run(&config, opts).await.unwrap();
    let summary = format!(
        "seed {}: {}\nerrors: {:#?}\nviolations: {:#?}",
        report.seed,
        report.json_line(),
        report.first_errors,
        report.first_violations
    );
    // The lock trace: no cycle and no key out of the spec's order. Undeclared edges are the full
    // run's failure (`member-console stress`, and `lock_order_is_clean`); while paths are still
    // being named (docs/database-locks.md, "The spec's 63 paths"), a short run shows them here.
    assert!(
        report.lock_cycle.is_none() && report.same_table_order_violations.is_empty(),
        "lock order: cycle {:?}, out of order {:#?}",
        report.lock_cycle,
        report.same_table_order_violations
    );
    if !report.undeclared_edges.is_empty() {
        eprintln!("undeclared lock edges (the full run fails on them): {:#?}", report.undeclared_edges);
    }
    assert!(!report.observed_edges.is_empty(), "the run traced its locks");
    // Every task starts with every path once, so each is tried however rare its weight.
    for p in StressPath::ALL {
        let count = report.paths.get(p.name()).copied().unwrap_or_default();
        // A drain pass and a Retry have work only when a pool is owed or failed (an act running,
        // a move failed) at that instant, which the workers' own quick drains make rare in a
        // short run; a tier add, delete, removal or reorder is refused or done depending on what
        // the others left on the ladder (a holder's collision, a holder, the last tier, fewer
        // than two tiers): they must be tried; the 30 s runs do them many times.
        let timing_dependent = [
            "Retry a rule change's failed pools",
            "DrainChange",
            "DrainPlanAct",
            "RetryPlanAct",
            "AddTier",
            "DeleteTier",
            "RemoveTier",
            "ReorderTiers (T0)",
            // The right password one time in two, and throttled after five failures.
            "Sign in",
            // A swap needs a parked and an active site of one organization as it starts (the
            // run seeds a pair in each), and meets the other site acts' requests in flight.
            "swapActiveSite",
            // The registry's member paths meet each other's refusals (a domain another holds, a
            // name served already, a domain still serving) in a short run.
            "Registry: claim a member's domain",
            "Registry: place a site under a member's domain",
            "Registry: stop serving a site at a member's host name",
            "Registry: release a member's domain",
            // Refused unless a grant displaced the subscription, or while a change is ahead.
            "ResumeSubscription",
            "Change a plan",
        ];
        if timing_dependent.contains(&p.name()) {
            assert!(count.done + count.refused >= 1, "{} was never tried; {summary}", p.name());
        } else {
            assert!(count.done >= 1, "{} was never done; {summary}", p.name());
        }
    }
    // Each grant path by its declaration's name, and the jobs the workers ran.
    for name in [
        "IssueGrant",
        "RevokeGrantTx",
        "ExpireGrantTx",
        "Start a waiting grant",
        "ManageGrantTx",
        "ExtendWaitingGrantTx",
        "ExpireGrantActivity",
        "StartGrantActivity",
    ] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done >= 1, "{name} was never done; {summary}");
    }
    // The rule-change paths by their declarations' names: a commit must be done; a drain beside
    // the jobs' own drains and a retry of failed pools must be tried (whether they find work
    // depends on timing in a 5 s run; the 30 s runs do them many times).
    let commit = report.paths.get("RuleChangeBatchCommit").copied().unwrap_or_default();
    assert!(commit.done >= 1, "RuleChangeBatchCommit was never done; {summary}");
    for name in ["DrainChange", "Retry a rule change's failed pools"] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done + count.refused >= 1, "{name} was never tried; {summary}");
    }
    // The plan acts by their declarations' names: a default change was done, and its drain's
    // parts (a listing, moves, a fragile pool's failed move, an act finished after its last
    // probe) with it; the tier acts, a drain beside the job's and a Retry were tried.
    for name in [
        "ChangeOrgTypeDefault (T0)",
        "ReorderPlanLadders",
        "ListPlanActBatch",
        "EnactObligation",
        "Record a failed move",
        "DrainPlanAct (last probe)",
    ] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done >= 1, "{name} was never done; {summary}");
    }
    for name in ["AddTier", "DeleteTier", "RemoveTier", "ReorderTiers (T0)", "DrainPlanAct", "RetryPlanAct"] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done + count.refused >= 1, "{name} was never tried; {summary}");
    }
    // The billing paths by their declarations' names, against the run's Stripe stand-in: a
    // subscription changed and reconciled, an invoice converged, a sync click, and an outbox pass
    // that claimed rows (the grant acts on the shared organizations ask for their subscriptions'
    // reconciles, and the sync clicks for syncs), and the billing page's read against its kept
    // list on sale.
    assert_eq!(
        StressPath::BILLING_PATHS.map(|p| p.name()),
        [
            "ReconcileSubscription",
            "invoiceReconcile.converge",
            "catalogsync.Sync",
            "Claim outbox rows",
            "Change a plan",
            "ResumeSubscription",
            "Read a member's billing"
        ]
    );
    for p in StressPath::BILLING_PATHS {
        let count = report.paths.get(p.name()).copied().unwrap_or_default();
        // A member's plan change is often refused (ending, paused, a switch already ahead).
        let tried = if matches!(p, StressPath::ChangePlan | StressPath::ResumePlan) {
            count.done + count.refused
        } else {
            count.done
        };
        assert!(tried >= 1, "{} was never done; {summary}", p.name());
    }
    // The FedWiki paths against the run's local farm: a create, a status change and the
    // workers' runs of the requests' jobs were done; a swap and a deletion were tried.
    for p in [StressPath::CreateSite, StressPath::ChangeSiteStatus, StressPath::RunSiteRequestActivity] {
        let count = report.paths.get(p.name()).copied().unwrap_or_default();
        assert!(count.done >= 1, "{} was never done; {summary}", p.name());
    }
    for p in [
        StressPath::SwapSites,
        StressPath::DeleteSite,
        StressPath::ClaimDomain,
        StressPath::PlaceSiteUnderDomain,
        StressPath::StopServing,
        StressPath::ReleaseDomain,
    ] {
        let count = report.paths.get(p.name()).copied().unwrap_or_default();
        assert!(count.done + count.refused >= 1, "{} was never tried; {summary}", p.name());
    }
    assert_eq!(report.deadlocks, 0, "{summary}");
    assert_eq!(report.errors, 0, "{summary}");
    assert_eq!(report.violations, 0, "{summary}");
    // The database is dropped after the run.
    let mut root = <sqlx::PgConnection as sqlx::Connection>::connect(&common::root_admin_url()).await.unwrap();
    let left: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(&report.database)
        .fetch_one(&mut root)
        .await
        .unwrap();
    assert!(!left, "{} was not dropped", report.database);
}

#[tokio::test]
async fn the_invariant_check_reports_each_broken_invariant() {
    let t = demo_db().await;
    let community: OrgTypeId =
        t.one(sqlx::query_scalar("SELECT org_type_id FROM core.org_types WHERE name = 'Community'")).await;
    let mut orgs = vec![];
    for name in ["Broken entitlements", "Broken floor", "Broken usage"] {
        orgs.push(orgs::create_organization(&t.db, &OrgName::parse(name).unwrap(), Some(community)).await.unwrap());
    }
    let domain = EmailDomain::parse("broken.example.org").unwrap();
    let (with_domain, _) = orgs::create_organization_with_domain(
        &t.db,
        &OrgName::parse("Broken grants").unwrap(),
        Some(community),
        Some(&domain),
    )
    .await
    .unwrap();
    // A rule change to a carried set, settled in its commit.
    let support: EntitlementSetId = t
        .one(sqlx::query_scalar(
            "SELECT entitlement_set_id FROM core.entitlement_sets WHERE name = 'Community support'",
        ))
        .await;
    let submitted = crate::common::rules(&[("support.priority", "yes")]);
    let change = rc::commit_rule_change_batch(&t.db, support, &submitted, None, &"broken".into(), rc::DEFAULT_SYNC_CAP)
        .await
        .unwrap();
    assert!(change.settled_inline && change.pools_owed >= 1, "{change:?}");
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "a consistent database has no violation: {found:#?}");

    // (1) A materialized value that a fresh computation does not give.
    t.run(
        sqlx::query(
            "UPDATE core.pool_entitlements SET numeric_value = numeric_value + 1
         WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
        )
        .bind(orgs[0].pool_id),
    )
    .await;
    // (2) and (3): a floor's position goes, so its holding conferral lacks a position of its
    // shape and its organization's default ladder is vacant. (4) Another floor grant is marked
    // replaced while its conferral still holds.
    t.run(sqlx::query("DELETE FROM core.positions WHERE pool_id = $1").bind(orgs[1].pool_id)).await;
    t.run(
        sqlx::query("UPDATE core.grants SET status = 'replaced' WHERE grant_id = $1")
            .bind(orgs[2].floor_grant_id.unwrap()),
    )
    .await;
    // (5) A numeric entitlement without its usage row.
    t.run(sqlx::query("DELETE FROM core.numeric_entitlement_usage WHERE pool_id = $1").bind(orgs[2].pool_id)).await;
    // (6) and (4): a grant active past its end, with no conferral (its expiry never ran).
    let grant = |status: &str, org: Option<OrganizationId>, domain: Option<&str>| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO core.grants (organization_id, provision_domain, product_id, quantity, kind, status, starts_at,
                                      ends_at, reason)
             SELECT $1, $2, product_id, 1, CASE WHEN $2::text IS NULL THEN 'operator' ELSE 'provisioning' END, $3,
                    now() - interval '2 hours', now() - interval '1 hour', 'broken'
             FROM core.products WHERE name = 'Basic'
             RETURNING grant_id",
        )
        .bind(org)
        .bind(domain.map(str::to_string))
        .bind(status.to_string())
        .fetch_one(&t.admin)
    };
    let past_end = grant("active", Some(with_domain.organization_id), None).await.unwrap();
    // (9) An expired grant without its expired event.
    let silent = grant("expired", Some(with_domain.organization_id), None).await.unwrap();
    // (8) A grant still waiting for a domain whose organization exists: its provisioning was lost.
    let lost = grant("waiting", None, Some("broken.example.org")).await.unwrap();
    t.run(sqlx::query("UPDATE core.grants SET ends_at = NULL WHERE grant_id = $1").bind(lost)).await;

    // (10) An obligation of the change settled twice: two attempts and no failure recorded.
    let twice: PoolId = t
        .one(
            sqlx::query_scalar(
                "UPDATE core.entitlement_set_change_obligations o SET attempts = 2
         WHERE o.act_id IN (SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1)
           AND o.pool_id = (SELECT min(x.pool_id) FROM core.entitlement_set_change_obligations x
                            JOIN core.entitlement_set_change_acts a USING (act_id) WHERE a.change_id = $1)
         RETURNING o.pool_id",
            )
            .bind(change.change_id),
        )
        .await;

    // (counts) A kept count that lost an organization.
    t.run(sqlx::query("INSERT INTO core.organization_counts (org_type_id, delta) VALUES ($1, -1)").bind(community))
        .await;

    let found = stress::check_invariants(&t.admin).await.unwrap();
    let has =
        |needle: &str, pool: PoolId| found.iter().any(|m| m.contains(needle) && m.contains(&format!("pool {pool}")));
    let (p0, p1, p2, p3) = (orgs[0].pool_id, orgs[1].pool_id, orgs[2].pool_id, with_domain.pool_id);
    assert!(has("materialized [fedwiki.active_sites=2", p0), "(1) missing: {found:#?}");
    assert!(has("has no position on ladder", p1), "(2) missing: {found:#?}");
    assert!(has("holds nothing on its default ladder", p1), "(3) missing: {found:#?}");
    assert!(has(&format!("grant {} is replaced", orgs[2].floor_grant_id.unwrap()), p2), "(4) missing: {found:#?}");
    assert!(has("is entitled to fedwiki.active_sites but has no usage row", p2), "(5) missing: {found:#?}");
    assert!(has(&format!("grant {past_end} is active past its end"), p3), "(6) missing: {found:#?}");
    assert!(
        has(&format!("grant {past_end} (product"), p3) && found.iter().any(|m| m.contains("never conferred")),
        "(4) missing for the grant past its end: {found:#?}"
    );
    assert!(has(&format!("grant {silent} is expired and has 0 expired events"), p3), "(9) missing: {found:#?}");
    assert!(has(&format!("grant {lost} still waits for broken.example.org"), p3), "(8) missing: {found:#?}");
    assert!(
        has(
            &format!("of change {} is settled to pool {twice} after 2 attempts with no failure", change.change_id),
            twice
        ),
        "(10) missing: {found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|m| m.contains(&format!("org type {community}: kept")) && m.contains("kept organization counts")),
        "(counts) missing: {found:#?}"
    );
    assert_eq!(found.len(), 11, "one message per violating row: {found:#?}");
}

async fn id_of(t: &TestDb, sql: &str, name: &str) -> i64 {
    t.one(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string())).bind(name)).await
}

/// The plan-act invariants: an act still draining, a move left failed, and the vacancy a
/// grandfathered tier removal leaves are told apart from a settled catalog; each broken one is
/// reported.
#[tokio::test]
async fn the_invariant_check_sees_plan_acts_that_did_not_settle() {
    let t = demo_db().await;
    let business = OrgTypeId(id_of(&t, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Business").await);
    let wiki =
        LadderId(id_of(&t, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Wiki hosting").await);
    let mut orgs = vec![];
    for i in 0..4 {
        let name = OrgName::parse(&format!("Moved {i}")).unwrap();
        orgs.push(orgs::create_organization(&t.db, &name, Some(business)).await.unwrap());
    }
    // The first organization's move fails on its first attempt, as the stress run's fragile
    // pools' moves do.
    let fragile = orgs[0].pool_id;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION public.fail_first_move() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.pool_id = {fragile} AND OLD.attempts = 0 THEN RAISE EXCEPTION 'move broken'; END IF;
               RETURN NEW; END $$;
         CREATE TRIGGER fail_first_move BEFORE UPDATE OF state ON core.plan_act_obligations FOR EACH ROW
             WHEN (OLD.state = 'pending' AND NEW.state IN ('migrated', 'grandfathered', 'vacant'))
             EXECUTE FUNCTION public.fail_first_move();"
    )))
    .execute(&t.admin)
    .await
    .unwrap();

    // The default change's T0, its drain not run yet: the act is running.
    let act = pa::change_org_type_default(&t.db, business, wiki, Some(Disposition::Migrate), None, "test", None)
        .await
        .unwrap();
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(
        found.iter().any(|m| m.contains(&format!("plan act {act} (default_change, migrate) is still running"))),
        "(11) missing: {found:#?}"
    );
    // Drained: done, with the fragile organization's move failed and left so.
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.failed, d.finished), (1, true), "{d:?}");
    let found = stress::check_invariants(&t.admin).await.unwrap();
    let has = |found: &[String], needle: &str, pool: PoolId| {
        found.iter().any(|m| m.contains(needle) && m.contains(&format!("pool {pool}")))
    };
    assert!(
        has(
            &found,
            &format!("plan act {act} (default_change) left organization {} failed", orgs[0].organization_id),
            fragile
        ),
        "(11) missing: {found:#?}"
    );
    // Its organization holds its old floor on Support, nothing on Wiki hosting.
    assert!(has(&found, "holds nothing on its default ladder", fragile), "(3) missing: {found:#?}");
    assert_eq!(found.len(), 2, "{found:#?}");
    // Retried and drained: settled after two attempts, which the act's Retry explains.
    pa::retry_plan_act(&t.db, act, None).await.unwrap();
    assert!(pa::drain_plan_act(&t.db, act, None).await.unwrap().finished);
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "a settled act leaves no violation: {found:#?}");

    // A grandfathered removal of Wiki hosting's floor: its holders keep Free as a legacy grant
    // off the ladder and get no floor, so they hold nothing on their default ladder, by design.
    let removal = RemoveTier {
        ladder_id: wiki,
        rank: 0,
        disposition: Some(Disposition::Grandfather),
        reason: "test".into(),
        actor: None,
    };
    let (_, reach) = topology::remove_tier(&t.db, &removal, topology::DEFAULT_HOLDER_CAP).await.unwrap();
    assert!(reach.holders >= 4, "{reach:?}");
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "a grandfathered tier removal leaves no violation: {found:#?}");

    // Broken: one of those legacy grants ends without its pool being restored, so the vacancy is
    // no longer the removal's (3) (and the grant still holds (4)).
    let legacy: i64 = t.one(sqlx::query_scalar(
        "UPDATE core.grants SET status = 'ended' WHERE organization_id = $1 AND kind = 'legacy' AND status = 'active'
         RETURNING grant_id",
    )
    .bind(orgs[1].organization_id)).await;
    // A second active floor for a newcomer (its floor is Wiki hosting's new rank 0); the grant is
    // never conferred (4).
    let newcomer =
        orgs::create_organization(&t.db, &OrgName::parse("Two floors").unwrap(), Some(business)).await.unwrap();
    let second: i64 = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason)
         SELECT $1, product_id, 1, 'floor', 'active', 'broken' FROM core.grants WHERE grant_id = $2
         RETURNING grant_id",
            )
            .bind(newcomer.organization_id)
            .bind(newcomer.floor_grant_id.unwrap()),
        )
        .await;
    // The fragile organization's move counted a third attempt (one Retry allows two) (12); the
    // next organization's move pending again on an act left running (11, twice).
    t.run(
        sqlx::query("UPDATE core.plan_act_obligations SET attempts = 3 WHERE plan_act_id = $1 AND pool_id = $2")
            .bind(act)
            .bind(fragile),
    )
    .await;
    t.run(
        sqlx::query("UPDATE core.plan_act_obligations SET state = 'pending' WHERE plan_act_id = $1 AND pool_id = $2")
            .bind(act)
            .bind(orgs[2].pool_id),
    )
    .await;
    t.run(sqlx::query("UPDATE core.plan_acts SET state = 'running' WHERE plan_act_id = $1").bind(act)).await;

    let found = stress::check_invariants(&t.admin).await.unwrap();
    let (p1, p2) = (orgs[1].pool_id, orgs[2].pool_id);
    assert!(has(&found, "holds nothing on its default ladder", p1), "(3) missing: {found:#?}");
    assert!(has(&found, &format!("grant {legacy} is ended but conferral"), p1), "(4) missing: {found:#?}");
    assert!(
        has(
            &found,
            &format!("holds 2 active floor grants: grant {}", newcomer.floor_grant_id.unwrap()),
            newcomer.pool_id
        ),
        "(3) missing: {found:#?}"
    );
    assert!(has(&found, &format!("grant {second} (product"), newcomer.pool_id), "(4) missing: {found:#?}");
    assert!(
        has(
            &found,
            &format!("plan act {act} (default_change) has organization {} migrated", orgs[0].organization_id),
            fragile
        ) && found.iter().any(|m| m.contains("after 3 attempts, with 1 retries of the act")),
        "(12) missing: {found:#?}"
    );
    assert!(
        has(&found, &format!("plan act {act} (default_change, migrate) is still running: 1 organizations pending"), p2),
        "(11) missing: {found:#?}"
    );
    assert!(
        has(
            &found,
            &format!("plan act {act} (default_change) left organization {} pending", orgs[2].organization_id),
            p2
        ),
        "(11) missing: {found:#?}"
    );
    assert_eq!(found.len(), 7, "one message per violating row: {found:#?}");
}

/// The billing invariants, which the run checks after its final reconcile of every subscription:
/// converged subscriptions leave no violation; a provision of a subscription the console thinks
/// cancelled, a suspension no reconcile undid, an item conferred in two pools and two overlapping
/// periods are each reported.
#[tokio::test]
async fn the_invariant_check_sees_billing_state_that_did_not_converge() {
    let (t, s) = common::stripe::demo_with_stripe().await;
    let community = common::acts::type_id(&t, "Community").await;
    let mut orgs = vec![];
    for name in ["Billed cancelled", "Billed suspended", "Billed twice", "Not billed"] {
        orgs.push(common::acts::org_of_type(&t, name, community).await);
    }
    let mut stripe_prices = vec![];
    for (product, amount) in [("Basic", "12"), ("Pro", "30")] {
        let price = s.price(&t.db, common::acts::product_id(&t, product).await, amount).await;
        stripe_prices.push(s.stripe_price(&t.admin, price).await);
    }
    let mut subs = vec![];
    for (o, price) in orgs.iter().take(3).zip([&stripe_prices[0], &stripe_prices[1], &stripe_prices[0]]) {
        let customer = s.customer(&t.db, o.organization_id, "pm_card_visa", None).await;
        let sub = s.subscribe(&customer, price, o.organization_id).await;
        match billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap() {
            Reconciled::Converged { subscription_id, .. } => subs.push(subscription_id),
            other => panic!("{other:?}"),
        }
    }
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "converged subscriptions leave no violation: {found:#?}");

    // The first subscription cancelled in the console's rows while its provision still holds
    // (a reconcile that never ran its ended branch): not live, and not suspended though not active.
    t.run(sqlx::query("UPDATE core.subscriptions SET status = 'canceled' WHERE subscription_id = $1").bind(subs[0]))
        .await;
    // The second one's provision suspended while Stripe has it active (no reconcile since).
    assert_eq!(ent::sync_source_status(&t.db, subs[1], "suspended").await.unwrap(), 1);
    // The third one's item conferred a second time, in another organization's pool.
    let item: SubscriptionItemId = t
        .one(
            sqlx::query_scalar("SELECT subscription_item_id FROM core.subscription_items WHERE subscription_id = $1")
                .bind(subs[2]),
        )
        .await;
    let basic = common::acts::product_id(&t, "Basic").await;
    let mut tx = db::begin(&t.db, db::TxKind::Materializing).await.unwrap();
    ent_store::confer(tx.conn(), orgs[3].pool_id, basic, None, Some(item), 1).await.unwrap();
    ent_store::materialize_pool(tx.conn(), orgs[3].pool_id).await.unwrap();
    tx.commit().await.unwrap();
    // And a period overlapping its current one (the table's constraint dropped to let it in).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE core.subscription_periods DROP CONSTRAINT subscription_periods_no_overlap;
         INSERT INTO core.subscription_periods (subscription_id, period)
         SELECT subscription_id, tstzrange(lower(period) + interval '1 day', upper(period) + interval '1 day')
         FROM core.subscription_periods WHERE subscription_id = {}",
        subs[2]
    )))
    .execute(&t.admin)
    .await
    .unwrap();

    let found = stress::check_invariants(&t.admin).await.unwrap();
    let has =
        |needle: &str, pool: PoolId| found.iter().any(|m| m.contains(needle) && m.contains(&format!("pool {pool}")));
    let (p0, p1, p2) = (orgs[0].pool_id, orgs[1].pool_id, orgs[2].pool_id);
    assert!(
        has(&format!("of subscription {} (", subs[0]), p0) && has("which is canceled", p0),
        "(13) live: {found:#?}"
    );
    assert!(has("is not suspended, but the subscription is canceled", p0), "(13) suspended: {found:#?}");
    assert!(has("is suspended, but the subscription is active", p1), "(13) suspended: {found:#?}");
    assert!(has(&format!("subscription item {item} ("), p2.min(orgs[3].pool_id)), "(13) once: {found:#?}");
    assert!(
        found.iter().any(|m| m.contains(&format!("subscription {} (", subs[2])) && m.contains("overlapping periods")),
        "(13) periods: {found:#?}"
    );
    assert_eq!(found.len(), 5, "one message per violating row: {found:#?}");
}

/// The collection pause's invariants: a subscription displaced on every ladder that still
/// collects, and a console's pause on one that confers again, are each reported; the outbox's
/// reconcile makes them agree.
#[tokio::test]
async fn the_invariant_check_sees_a_collection_pause_out_of_step_with_the_displacement() {
    let (t, s) = common::stripe::demo_with_stripe().await;
    let o = common::acts::community_org(&t, "Paused").await;
    let price = s.price(&t.db, common::acts::product_id(&t, "Basic").await, "12").await;
    let customer = s.customer(&t.db, o.organization_id, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &s.stripe_price(&t.admin, price).await, o.organization_id).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    let grant = common::acts::grant(&t, o.organization_id, common::acts::product_id(&t, "Pro").await).await;
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(
        found.len() == 1 && found[0].contains("displaced on every ladder but its collection is not paused"),
        "{found:#?}"
    );
    billing::process_outbox(&t.db, &s.stripe, 20, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "paused in Stripe and read back: {found:#?}");
    // The grant ends: the subscription confers again while the console's pause is still read.
    member_console::services::grants::revoke_grant(
        &t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("over").unwrap(),
    )
    .await
    .unwrap();
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.len() == 1 && found[0].contains("carries the console's pause but confers 1"), "{found:#?}");
    billing::process_outbox(&t.db, &s.stripe, 20, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    assert!(stress::check_invariants(&t.admin).await.unwrap().is_empty());
}
