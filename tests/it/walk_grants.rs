//! Row-level walks (issue 36) of the grant, entitlement and rule-change paths: the spec's paths 1-4,
//! 6-11 and 47, "Start a waiting grant", "End a conferral" and "Materialize a pool". Each runs the
//! service function a member, an operator or a job reaches, paused after each lock it takes, and
//! asserts what it holds and that a probe waits on it for that very row or key
//! (`tests/it/common/locks.rs`); then what the path did.

use crate::common;

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use common::{
    TestDb,
    acts::{community_org, grant, grant_status, hosting, id_by_name, operator_grant, product_id},
    locks::{Expect, LockWalk, Step, rows_held, walk},
    pages::demo_db,
};
use member_console::{
    db::{keys::AdvisoryKey, trace},
    ids::{EntitlementSetId, GrantId, OrganizationId, PoolId, ProductId},
    services::{
        entitlements as ent,
        grants::{self, EmailDomain, IssueGrant, ManageGrant, Recipient},
        organizations::{self as orgs, OrgName},
        rule_changes as rc,
    },
    states::{GrantKind, GrantStatus},
    store::entitlements::NewGrant,
};

fn pool_row(p: PoolId) -> Expect {
    Expect::row("core.resource_pools", p.0)
}

fn grant_row(g: GrantId) -> Expect {
    Expect::row("core.grants", g.0)
}

/// An add-on product with a set of its own holding two rules (two sites, no priority support),
/// granted to `orgs` new Community organizations: the product, its set, their pools ascending.
async fn carried_set(t: &TestDb, name: &str, orgs: usize) -> (ProductId, EntitlementSetId, Vec<PoolId>) {
    let product = common::acts::new_product(t, name, 2).await;
    let set = EntitlementSetId(id_by_name(t, "entitlement_sets", "entitlement_set_id", name).await);
    t.run(
        sqlx::query(
            "INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, flag_value)
             VALUES ($1, 'support.priority', false)",
        )
        .bind(set),
    )
    .await;
    let mut pools = vec![];
    for i in 0..orgs {
        let org = community_org(t, &format!("{name} holder {i}")).await;
        grant(t, org.organization_id, product).await;
        pools.push(org.pool_id);
    }
    pools.sort();
    (product, set, pools)
}

/// Both rules of a `carried_set` changed: two acts, in resource-key order.
fn two_rule_changes() -> BTreeMap<member_console::ids::ResourceKey, member_console::services::catalog::RuleEntry> {
    crate::common::rules(&[("fedwiki.active_sites", "4"), ("support.priority", "yes")])
}

fn rule_row(set: EntitlementSetId, key: &str) -> Expect {
    Expect::row("core.entitlement_set_rules", format!("{},{key}", set.0))
}

async fn obligation_states(t: &TestDb, change: i64) -> Vec<(i64, i64, String, i32)> {
    t.all(
        sqlx::query_as(
            "SELECT o.pool_id, o.act_id, o.state, o.attempts FROM core.entitlement_set_change_obligations o
               JOIN core.entitlement_set_change_acts a USING (act_id) WHERE a.change_id = $1 ORDER BY o.pool_id, o.act_id",
        )
        .bind(change),
    )
    .await
}

async fn acts_of(t: &TestDb, change: i64) -> Vec<i64> {
    t.all(
        sqlx::query_scalar("SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1 ORDER BY act_id")
            .bind(change),
    )
    .await
}

// Path 1 --------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_rule_change_commit_walked_lock_by_lock_takes_the_exclusive_rendezvous_the_set_row_each_rule_row_in_key_order_then_each_pool_row_ascending()
 {
    let t = demo_db().await;
    let (_, set, pools) = carried_set(&t, "Walked rules", 2).await;
    let steps = [
        Step::Lock(Expect::rendezvous_exclusive()),
        // LockEntitlementSet once for the batch; core.commit_rule_change takes it again per delta
        // (the same lock, not noted again).
        Step::Lock(Expect::row("core.entitlement_sets", set.0)),
        Step::Lock(rule_row(set, "fedwiki.active_sites")),
        Step::Lock(rule_row(set, "support.priority")),
        // At or below the sync cap: settlePool per carrying pool, ascending. The obligation rows
        // are the ones core.commit_rule_change inserted in this transaction (invisible to the
        // administrator), one per act, in act order, after their pool's row.
        Step::Lock(pool_row(pools[0])),
        Step::Own("the first pool's obligation row of the first act"),
        Step::Own("the first pool's obligation row of the second act"),
        Step::Lock(pool_row(pools[1])),
        Step::Own("the second pool's obligation row of the first act"),
        Step::Own("the second pool's obligation row of the second act"),
    ];
    let c = walk(&t, &rc::RULE_CHANGE_COMMIT_LOCKS, &steps, move |db| async move {
        rc::commit_rule_change_batch(&db, set, &two_rule_changes(), None, &"walked".into(), rc::DEFAULT_SYNC_CAP).await
    })
    .await
    .unwrap();
    assert!(c.settled_inline);
    assert_eq!((c.acts, c.pools_owed), (2, 2));
    let states = obligation_states(&t, c.change_id.0).await;
    assert_eq!(states.len(), 4);
    assert!(states.iter().all(|s| s.2 == "settled" && s.3 == 1), "{states:?}");
    let state: String = t
        .one(
            sqlx::query_scalar("SELECT state FROM core.entitlement_set_changes WHERE change_id = $1").bind(c.change_id),
        )
        .await;
    assert_eq!(state, "settled");
}

#[tokio::test]
async fn a_rule_change_commit_above_the_sync_cap_walked_lock_by_lock_takes_the_exclusive_rendezvous_the_set_row_and_the_rule_rows_and_no_pool_row()
 {
    let t = demo_db().await;
    let (_, set, _) = carried_set(&t, "Deferred rules", 2).await;
    // Above the cap the commit lists nothing and settles nothing: the drain does, after it.
    let steps = [
        Step::Lock(Expect::rendezvous_exclusive()),
        Step::Lock(Expect::row("core.entitlement_sets", set.0)),
        Step::Lock(rule_row(set, "fedwiki.active_sites")),
        Step::Lock(rule_row(set, "support.priority")),
    ];
    let c = walk(&t, &rc::RULE_CHANGE_COMMIT_LOCKS, &steps, move |db| async move {
        rc::commit_rule_change_batch(&db, set, &two_rule_changes(), None, &"walked".into(), 1).await
    })
    .await
    .unwrap();
    assert!(!c.settled_inline);
    assert_eq!(c.pools_owed, 2);
    assert!(obligation_states(&t, c.change_id.0).await.is_empty(), "nothing listed yet");
    let drains: i64 = t
        .one(sqlx::query_scalar("SELECT count(*) FROM integration.jobs WHERE dedupe_key = $1").bind(format!(
            "{}:{}",
            rc::DRAIN_RULE_CHANGE,
            c.change_id.0
        )))
        .await;
    assert_eq!(drains, 1, "the drain is enqueued");
}

#[tokio::test]
async fn a_rule_change_commit_that_adds_a_rule_walked_lock_by_lock_notes_no_rule_row_for_the_key_the_set_has_no_rule_for()
 {
    let t = demo_db().await;
    let (_, set, pools) = carried_set(&t, "Added rules", 1).await;
    // The set has no support.priority rule: the delta adds one. core.commit_rule_change finds no
    // row to lock for it, so it holds none, and the trace must note none (a note is a pause here).
    t.run(
        sqlx::query("DELETE FROM core.entitlement_set_rules WHERE entitlement_set_id = $1 AND resource_key = 'support.priority'")
            .bind(set),
    )
    .await;
    let steps = [
        Step::Lock(Expect::rendezvous_exclusive()),
        Step::Lock(Expect::row("core.entitlement_sets", set.0)),
        Step::Lock(rule_row(set, "fedwiki.active_sites")),
        Step::Lock(pool_row(pools[0])),
        Step::Own("the pool's obligation row of the first act"),
        Step::Own("the pool's obligation row of the second act"),
    ];
    let c = walk(&t, &rc::RULE_CHANGE_COMMIT_LOCKS, &steps, move |db| async move {
        rc::commit_rule_change_batch(&db, set, &two_rule_changes(), None, &"walked".into(), rc::DEFAULT_SYNC_CAP).await
    })
    .await
    .unwrap();
    assert!(c.settled_inline);
    let added: Option<bool> = t
        .one(
            sqlx::query_scalar(
                "SELECT flag_value FROM core.entitlement_set_rules WHERE entitlement_set_id = $1 AND resource_key = 'support.priority'",
            )
            .bind(set),
        )
        .await;
    assert_eq!(added, Some(true));
}

// Paths 2 and 3 -------------------------------------------------------------------------------------

/// A change of both rules of a set one organization carries, committed above the sync cap (so
/// the drain lists and settles it): the change, its acts ascending, the pool.
async fn drained_change(t: &TestDb, name: &str) -> (i64, Vec<i64>, PoolId) {
    let (_, set, pools) = carried_set(t, name, 1).await;
    let c = rc::commit_rule_change_batch(&t.db, set, &two_rule_changes(), None, &"walked".into(), 0).await.unwrap();
    assert!(!c.settled_inline);
    (c.change_id.0, acts_of(t, c.change_id.0).await, pools[0])
}

#[tokio::test]
async fn a_drain_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_its_owed_obligation_rows_in_act_order()
{
    let t = demo_db().await;
    let (change, acts, pool) = drained_change(&t, "Drained rules").await;
    let obligation = |act: i64| Expect::row("core.entitlement_set_change_obligations", format!("{act},{}", pool.0));
    // The drain's listing (its own path, "List a rule change's carrying pools") commits first, so
    // the obligation rows the settle takes exist before it. core.settle_change_pool takes the
    // pool's owed rows in one statement, in act order (that they wait in that order is
    // lock_trace::a_drains_settle_and_a_retry_take_one_pools_obligation_rows_in_act_order_and_never_deadlock).
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(pool_row(pool)),
        Step::Rows(vec![obligation(acts[0]), obligation(acts[1])]),
    ];
    let change_id = member_console::ids::RuleChangeId(change);
    let drained =
        walk(&t, &rc::DRAIN_CHANGE_LOCKS, &steps, move |db| async move { rc::drain_change(&db, change_id, 1).await })
            .await
            .unwrap();
    assert_eq!((drained.settled, drained.failed, drained.finished), (1, 0, true));
    let states = obligation_states(&t, change).await;
    assert_eq!(states.iter().map(|s| s.2.as_str()).collect::<Vec<_>>(), ["settled", "settled"]);
}

#[tokio::test]
async fn a_failed_pools_record_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_each_owed_obligation_row_in_act_order()
 {
    let t = demo_db().await;
    let (change, acts, pool) = drained_change(&t, "Failing rules").await;
    // The pool's entitlements refuse every write: its settle fails and rolls back, and the drain
    // records the failure in a second transaction (the path walked; the settle is not paused).
    common::acts::break_pool(&t, pool).await;
    let obligation = |act: i64| Expect::row("core.entitlement_set_change_obligations", format!("{act},{}", pool.0));
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(pool_row(pool)),
        Step::Lock(obligation(acts[0])),
        Step::Lock(obligation(acts[1])),
    ];
    let change_id = member_console::ids::RuleChangeId(change);
    let drained =
        walk(&t, &rc::RECORD_FAILURE_LOCKS, &steps, move |db| async move { rc::drain_change(&db, change_id, 1).await })
            .await
            .unwrap();
    assert_eq!((drained.settled, drained.failed, drained.finished), (0, 1, false));
    let states = obligation_states(&t, change).await;
    assert_eq!(
        states.iter().map(|s| (s.2.as_str(), s.3)).collect::<Vec<_>>(),
        [("failed", 1), ("failed", 1)],
        "each owed act's attempt is recorded once"
    );
}

#[tokio::test]
async fn a_drains_listing_walked_lock_by_lock_takes_the_rendezvous_then_the_changes_row() {
    let t = demo_db().await;
    let (change, _, pool) = drained_change(&t, "Listed rules").await;
    // The obligation rows it writes are its own inserts; no pool row.
    let steps =
        [Step::Lock(Expect::rendezvous_shared()), Step::Lock(Expect::row("core.entitlement_set_changes", change))];
    let change_id = member_console::ids::RuleChangeId(change);
    let drained =
        walk(&t, &rc::LIST_CHANGE_LOCKS, &steps, move |db| async move { rc::drain_change(&db, change_id, 1).await })
            .await
            .unwrap();
    assert_eq!((drained.settled, drained.finished), (1, true));
    let states = obligation_states(&t, change).await;
    assert_eq!(
        states.iter().map(|s| (s.0, s.2.as_str())).collect::<Vec<_>>(),
        [(pool.0, "settled"), (pool.0, "settled")]
    );
}

#[tokio::test]
async fn a_retry_of_failed_pools_walked_lock_by_lock_takes_the_failed_obligation_rows_in_pool_and_act_order_and_nothing_else()
 {
    let t = demo_db().await;
    let (change, acts, pool) = drained_change(&t, "Retried rules").await;
    common::acts::break_pool(&t, pool).await;
    let change_id = member_console::ids::RuleChangeId(change);
    assert_eq!(rc::drain_change(&t.db, change_id, 1).await.unwrap().failed, 1);
    common::acts::mend_pools(&t).await;
    let obligation = |act: i64| Expect::row("core.entitlement_set_change_obligations", format!("{act},{}", pool.0));
    // One statement takes them, in (pool_id, act_id) order.
    let steps = [Step::Rows(vec![obligation(acts[0]), obligation(acts[1])])];
    let n =
        walk(&t, &rc::RETRY_RULE_CHANGE_LOCKS, &steps, move |db| async move { rc::retry_failed(&db, change_id).await })
            .await
            .unwrap();
    assert_eq!(n, 2);
    let due: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT count(*) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
                  WHERE a.change_id = $1 AND o.state = 'failed' AND o.next_attempt_at <= now()",
            )
            .bind(change),
        )
        .await;
    assert_eq!(due, 2, "both failed rows are due now");
    let jobs: i64 = t
        .one(
            sqlx::query_scalar("SELECT count(*) FROM integration.jobs WHERE dedupe_key = $1")
                .bind(format!("{}:{change}", rc::DRAIN_RULE_CHANGE)),
        )
        .await;
    assert!(jobs >= 1, "a drain is enqueued");
}

// Path 4 --------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_conferral_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_inside_core_confer() {
    let t = demo_db().await;
    let org = community_org(&t, "Conferred").await;
    let pro = product_id(&t, "Pro").await;
    let new = NewGrant {
        organization_id: Some(org.organization_id),
        product_id: pro,
        quantity: 1,
        kind: GrantKind::Operator,
        status: GrantStatus::Active,
        starts_at: None,
        ends_at: None,
        reason: "walked".into(),
        created_by: None,
        plan_act_id: None,
        provision_domain: None,
    };
    // The grant's insert comes between the two: a row of its own, no lock on an existing one.
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    let g = walk(&t, &ent::CONFER_GRANT_LOCKS, &steps, move |db| async move { ent::confer_grant(&db, &new).await })
        .await
        .unwrap();
    assert_eq!(grant_status(&t, g).await, "active");
    assert!(hosting(&t, org.pool_id).await.contains("Pro"), "{}", hosting(&t, org.pool_id).await);
}

#[tokio::test]
async fn an_issued_grant_to_an_organization_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Issued").await;
    let issue = operator_grant(org.organization_id, product_id(&t, "Pro").await);
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    let g =
        walk(&t, &grants::ISSUE_GRANT_LOCKS, &steps, move |db| async move { grants::issue_grant(&db, &issue).await })
            .await
            .unwrap();
    assert_eq!(grant_status(&t, g).await, "active");
    assert!(hosting(&t, org.pool_id).await.contains("Pro"));
}

#[tokio::test]
async fn an_issued_grant_to_a_domain_walked_lock_by_lock_takes_the_rendezvous_the_domains_lock_then_its_organizations_pool_row()
 {
    let t = demo_db().await;
    let domain = EmailDomain::parse("walked.example.org").unwrap();
    let community = common::acts::type_id(&t, "Community").await;
    let (org, _) = orgs::create_organization_with_domain(
        &t.db,
        &OrgName::parse("Walked domain").unwrap(),
        Some(community),
        Some(&domain),
    )
    .await
    .unwrap();
    let issue = IssueGrant {
        recipient: Recipient::Domain(domain.clone()),
        ..operator_grant(org.organization_id, product_id(&t, "Pro").await)
    };
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(Expect::advisory(AdvisoryKey::ProvisionDomain(domain.as_str().to_string()))),
        Step::Lock(pool_row(org.pool_id)),
    ];
    let g =
        walk(&t, &grants::ISSUE_GRANT_LOCKS, &steps, move |db| async move { grants::issue_grant(&db, &issue).await })
            .await
            .unwrap();
    assert_eq!(grant_status(&t, g).await, "active");
    assert!(hosting(&t, org.pool_id).await.contains("Pro"));
}

#[tokio::test]
async fn an_issued_grant_to_a_domain_no_organization_has_yet_walked_lock_by_lock_takes_the_rendezvous_then_the_domains_lock_and_no_pool_row()
 {
    let t = demo_db().await;
    let domain = EmailDomain::parse("waiting.example.org").unwrap();
    let issue = IssueGrant {
        recipient: Recipient::Domain(domain.clone()),
        ..operator_grant(OrganizationId(0), product_id(&t, "Pro").await)
    };
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(Expect::advisory(AdvisoryKey::ProvisionDomain(domain.as_str().to_string()))),
    ];
    let g =
        walk(&t, &grants::ISSUE_GRANT_LOCKS, &steps, move |db| async move { grants::issue_grant(&db, &issue).await })
            .await
            .unwrap();
    assert_eq!(grant_status(&t, g).await, "waiting");
}

// Path 6 --------------------------------------------------------------------------------------------

/// Make a grant's end come now (an expiry's job or the sweep finds it due).
async fn end_now(t: &TestDb, g: GrantId) {
    t.run(
        sqlx::query(
            "UPDATE core.grants SET starts_at = now() - interval '2 seconds', ends_at = now() - interval '1 second'
              WHERE grant_id = $1",
        )
        .bind(g),
    )
    .await;
}

/// An operator's Basic grant, then a Pro grant over it that replaces it: (Basic, Pro).
async fn replaced_by_pro(
    t: &TestDb,
    org: OrganizationId,
    pro_ends: Option<chrono::DateTime<Utc>>,
) -> (GrantId, GrantId) {
    let basic = grant(t, org, product_id(t, "Basic").await).await;
    let pro = common::acts::grant_with(t, org, product_id(t, "Pro").await, 1, pro_ends).await;
    assert_eq!(grant_status(t, basic).await, "replaced", "the Pro grant replaced the Basic one");
    (basic, pro)
}

#[tokio::test]
async fn an_expiry_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_the_grants_own_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Expiring").await;
    let (basic, g) = replaced_by_pro(&t, org.organization_id, Some(Utc::now() + Duration::days(1))).await;
    end_now(&t, g).await;
    // The grant's row FOR UPDATE, then its update; no lineage head (spec: ExpireGrantTx).
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id)), Step::Lock(grant_row(g))];
    let expired =
        walk(&t, &grants::EXPIRE_GRANT_LOCKS, &steps, move |db| async move { grants::expire_grant(&db, g).await })
            .await
            .unwrap();
    assert!(expired);
    assert_eq!(grant_status(&t, g).await, "expired");
    assert_eq!(grant_status(&t, basic).await, "active", "the grant it replaced resumed");
}

#[tokio::test]
async fn an_expiry_of_a_grant_that_names_no_organization_walked_lock_by_lock_takes_the_rendezvous_then_the_grants_row_and_no_pool_row()
 {
    let t = demo_db().await;
    let issue = IssueGrant {
        recipient: Recipient::Domain(EmailDomain::parse("never.example.org").unwrap()),
        ends_at: Some(Utc::now() + Duration::days(1)),
        ..operator_grant(OrganizationId(0), product_id(&t, "Pro").await)
    };
    let g = grants::issue_grant(&t.db, &issue).await.unwrap();
    end_now(&t, g).await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(grant_row(g))];
    let expired =
        walk(&t, &grants::EXPIRE_GRANT_LOCKS, &steps, move |db| async move { grants::expire_grant(&db, g).await })
            .await
            .unwrap();
    assert!(expired);
    assert_eq!(grant_status(&t, g).await, "expired");
}

// Start a waiting grant -----------------------------------------------------------------------------

#[tokio::test]
async fn a_waiting_grants_start_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_the_grants_own_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Starting").await;
    let issue = IssueGrant {
        starts_at: Some(Utc::now() + Duration::days(1)),
        ..operator_grant(org.organization_id, product_id(&t, "Pro").await)
    };
    let g = grants::issue_grant(&t.db, &issue).await.unwrap();
    assert_eq!(grant_status(&t, g).await, "waiting");
    t.run(sqlx::query("UPDATE core.grants SET starts_at = now() - interval '1 second' WHERE grant_id = $1").bind(g))
        .await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id)), Step::Lock(grant_row(g))];
    let started =
        walk(
            &t,
            &grants::START_GRANT_LOCKS,
            &steps,
            move |db| async move { grants::start_waiting_grant(&db, g).await },
        )
        .await
        .unwrap();
    assert!(started);
    assert_eq!(grant_status(&t, g).await, "active");
    assert!(hosting(&t, org.pool_id).await.contains("Pro"));
}

// Paths 7 and 8 -------------------------------------------------------------------------------------

fn manage(ends_in_days: i64, quantity: i32) -> ManageGrant {
    ManageGrant {
        starts_at: None,
        ends_at: Some(Utc::now() + Duration::days(ends_in_days)),
        quantity,
        reason: "walked".into(),
        actor: None,
    }
}

#[tokio::test]
async fn a_waiting_grants_extension_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_the_lineage_head() {
    let t = demo_db().await;
    let org = community_org(&t, "Rescheduled").await;
    let issue = IssueGrant {
        starts_at: Some(Utc::now() + Duration::days(1)),
        ..operator_grant(org.organization_id, product_id(&t, "Pro").await)
    };
    let g = grants::issue_grant(&t.db, &issue).await.unwrap();
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id)), Step::Lock(grant_row(g))];
    let m = manage(3, 2);
    let head = walk(&t, &grants::EXTEND_WAITING_GRANT_LOCKS, &steps, move |db| async move {
        grants::manage_grant(&db, g, &m).await
    })
    .await
    .unwrap();
    assert_eq!(head, g, "a waiting grant is rescheduled in place");
    let (status, quantity): (String, i32) =
        t.one(sqlx::query_as("SELECT status, quantity FROM core.grants WHERE grant_id = $1").bind(g)).await;
    assert_eq!((status.as_str(), quantity), ("waiting", 2));
}

#[tokio::test]
async fn a_live_grants_management_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_the_lineage_head() {
    let t = demo_db().await;
    let org = community_org(&t, "Managed").await;
    let g = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    // ExtendGrantTx: the extension is a row of its own; core.end_conferral and core.confer take
    // the pool row the act holds.
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id)), Step::Lock(grant_row(g))];
    let m = manage(3, 2);
    let new =
        walk(&t, &grants::MANAGE_GRANT_LOCKS, &steps, move |db| async move { grants::manage_grant(&db, g, &m).await })
            .await
            .unwrap();
    assert_ne!(new, g, "a live grant is extended as a new grant of its lineage");
    assert_eq!(grant_status(&t, g).await, "ended");
    assert_eq!(grant_status(&t, new).await, "active");
    assert!(hosting(&t, org.pool_id).await.contains("Pro"));
}

// Paths 9, 10 and 11 --------------------------------------------------------------------------------

#[tokio::test]
async fn a_revocations_sub_steps_run_under_its_pool_row_resumption_writing_the_replaced_grants_row_and_delivery_and_the_reconcile_requests_taking_no_lock()
 {
    let t = demo_db().await;
    let org = community_org(&t, "Resumed").await;
    let (replaced, g) = replaced_by_pro(&t, org.organization_id, None).await;
    // A reader holds the replaced grant's row FOR SHARE: the resumption's write of it must wait.
    let (mut reader, reader_pid) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.grants WHERE grant_id = {replaced} FOR SHARE")).await;
    let expected = [Expect::rendezvous_shared(), pool_row(org.pool_id), grant_row(g)];
    let mut w = LockWalk::start(&t, &grants::REVOKE_GRANT_LOCKS, expected.len(), move |db| async move {
        grants::revoke_grant(&db, g, None, &member_console::services::grants::Reason::parse("walked").unwrap()).await
    })
    .await;
    for k in 1..=expected.len() {
        w.assert_holds_exactly(&expected[..k]).await;
        w.assert_probe_waits(&t, &expected[k - 1]).await;
        if k < expected.len() {
            assert!(w.step().await, "paused after lock {}", k + 1);
        }
    }
    // Past the lineage head: resumption (path 11) confers the replaced grant again under the pool
    // row the act holds: its conferral's insert takes the grant's row FOR KEY SHARE (the foreign
    // key), then the grant's status is written, which waits on the reader. (PostgreSQL waits on
    // the row's lockers without a tuple lock when the waiter holds a weaker lock on the row
    // already, so the wait is shown by the blocker and the rows held, not by `assert_waits`.)
    w.release().await;
    let revoker = w.paused_pid();
    let started = std::time::Instant::now();
    loop {
        let blockers: Vec<i32> =
            sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))").bind(revoker).fetch_all(&t.admin).await.unwrap();
        if blockers.contains(&reader_pid) {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "the resumption never waited on the reader");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    common::locks::assert_holds(&t.admin, revoker, &expected).await;
    let ids: Vec<String> = rows_held(&t.admin, revoker, "core.grants")
        .await
        .into_iter()
        .map(|r| match r {
            common::locks::Seen::Row { id, .. } => id,
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(ids.len(), 2, "the head and the resumed grant, no other grant: {ids:?}");
    assert!(ids.contains(&g.0.to_string()) && ids.contains(&replaced.0.to_string()), "{ids:?}");
    // The resumed grant's row is shared by the reader and the revocation (a multixact, whose
    // members pgrowlocks names without "For": `RowMode::parse` would read "Key Share" as Update).
    let (modes, pids): (Vec<String>, Vec<i32>) = t
        .one(
            sqlx::query_as(
                "SELECT l.modes, l.pids FROM pgrowlocks('core.grants') l
                   JOIN core.grants t ON t.ctid = l.locked_row WHERE t.grant_id = $1",
            )
            .bind(replaced),
        )
        .await;
    let mode_of = |pid: i32| pids.iter().position(|p| *p == pid).map(|i| modes[i].as_str());
    assert_eq!(mode_of(revoker), Some("Key Share"), "the conferral's foreign key: {modes:?} {pids:?}");
    assert_eq!(mode_of(reader_pid), Some("Share"), "{modes:?} {pids:?}");
    sqlx::query("ROLLBACK").execute(&mut *reader).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), g);
    assert_eq!(grant_status(&t, g).await, "revoked");
    assert_eq!(grant_status(&t, replaced).await, "active", "the replaced grant resumed");
    // The transaction's trace: no lock after the lineage head; the sub-steps ran in the spec's
    // order (resumption, delivery, the reconcile requests), under the revocation's path.
    let rows: Vec<(String, Option<String>)> = t
        .all(
            sqlx::query_as(
                "SELECT lock, key FROM core.lock_trace
                  WHERE xact = (SELECT xact FROM core.lock_trace WHERE lock = 'GrantLineageHead' AND key = $1)
                  ORDER BY seq",
            )
            .bind(g.0.to_string()),
        )
        .await;
    let locks: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(locks, ["path", "RendezvousShared", "PoolRow", "GrantLineageHead", "step", "step", "step"], "{rows:?}");
    let steps: Vec<&str> = rows[4..].iter().filter_map(|r| r.1.as_deref()).collect();
    assert_eq!(
        steps,
        [
            trace::steps::RESUME_REPLACED_GRANTS,
            trace::steps::DELIVER_DISPLACED_SUBSCRIPTIONS,
            trace::steps::REQUEST_POOL_SUBSCRIPTION_RECONCILES
        ]
    );
    trace::disable();
}

#[tokio::test]
async fn a_revocation_that_delivers_a_displaced_subscription_writes_its_displacement_row_then_takes_the_subscriptions_key_share_for_its_reconcile_request()
 {
    let t = demo_db().await;
    let org = community_org(&t, "Delivered").await;
    let basic = product_id(&t, "Basic").await;
    // A live subscription of Basic, provisioned; then an operator's Pro grant displaces it.
    let (sub, _) = subscribed(&t, org.organization_id, org.pool_id, basic).await;
    let g = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    let displaced: i64 = t
        .one(sqlx::query_scalar("SELECT conferral_id FROM core.subscription_displacements WHERE delivered_at IS NULL"))
        .await;
    // Two readers: one holds the displacement row FOR SHARE (delivery writes it), the other the
    // subscription's row FOR UPDATE (the reconcile request's foreign key takes it FOR KEY SHARE).
    let (mut a, a_pid) = common::hold_open(
        &t,
        &format!("SELECT 1 FROM core.subscription_displacements WHERE conferral_id = {displaced} FOR SHARE"),
    )
    .await;
    let (mut b, b_pid) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.subscriptions WHERE subscription_id = {sub} FOR UPDATE"))
            .await;
    let expected = [Expect::rendezvous_shared(), pool_row(org.pool_id), grant_row(g)];
    let mut w = LockWalk::start(&t, &grants::REVOKE_GRANT_LOCKS, expected.len(), move |db| async move {
        grants::revoke_grant(&db, g, None, &member_console::services::grants::Reason::parse("walked").unwrap()).await
    })
    .await;
    for k in 1..=expected.len() {
        w.assert_holds_exactly(&expected[..k]).await;
        w.assert_probe_waits(&t, &expected[k - 1]).await;
        if k < expected.len() {
            assert!(w.step().await, "paused after lock {}", k + 1);
        }
    }
    w.release().await;
    let revoker = w.paused_pid();
    // Delivery (path 10), under the pool row: it confers the subscription's Basic again and marks
    // the displacement delivered, waiting on the first reader for that row.
    common::locks::assert_waits(&t.admin, revoker, a_pid, &Expect::row("core.subscription_displacements", displaced))
        .await;
    common::locks::assert_holds(&t.admin, revoker, &expected).await;
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
    // The reconcile requests (path 9): the outbox insert's foreign key takes the subscription's
    // row FOR KEY SHARE, which waits on the second reader's FOR UPDATE, after everything else.
    common::locks::assert_waits(&t.admin, revoker, b_pid, &Expect::row("core.subscriptions", sub)).await;
    common::locks::assert_holds(&t.admin, revoker, &expected).await;
    sqlx::query("ROLLBACK").execute(&mut *b).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), g);
    assert_eq!(grant_status(&t, g).await, "revoked");
    assert!(hosting(&t, org.pool_id).await.contains("Basic"), "{}", hosting(&t, org.pool_id).await);
    let delivered: bool = t
        .one(
            sqlx::query_scalar(
                "SELECT delivered_at IS NOT NULL FROM core.subscription_displacements WHERE conferral_id = $1",
            )
            .bind(displaced),
        )
        .await;
    assert!(delivered);
    let requests: i64 = t
        .one(
            sqlx::query_scalar("SELECT count(*) FROM core.outbox WHERE subscription_id = $1 AND processed_at IS NULL")
                .bind(sub),
        )
        .await;
    assert!(requests >= 1, "a reconcile of the subscription is requested");
    trace::disable();
}

/// A live subscription of `product` for the organization, its item provisioned in the pool (as
/// a reconcile's active branch leaves it): the subscription and the item.
async fn subscribed(
    t: &TestDb,
    org: OrganizationId,
    pool: PoolId,
    product: ProductId,
) -> (i64, member_console::ids::SubscriptionItemId) {
    let n = member_console::config::random_hex(4);
    let sub: i64 = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status)
                 VALUES ($1, $2, 'active') RETURNING subscription_id",
            )
            .bind(org)
            .bind(format!("sub_{n}")),
        )
        .await;
    let item: member_console::ids::SubscriptionItemId = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, quantity)
                 VALUES ($1, $2, $3, 1) RETURNING subscription_item_id",
            )
            .bind(sub)
            .bind(format!("si_{n}"))
            .bind(product),
        )
        .await;
    let mut tx = member_console::db::begin(&t.db, member_console::db::TxKind::Materializing).await.unwrap();
    member_console::store::entitlements::confer(tx.conn(), pool, product, None, Some(item), 1).await.unwrap();
    member_console::store::entitlements::materialize_pool(tx.conn(), pool).await.unwrap();
    tx.commit().await.unwrap();
    (sub, item)
}

#[tokio::test]
async fn a_subscriptions_suspension_walked_lock_by_lock_takes_the_rendezvous_then_its_pool_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Suspended").await;
    let (sub, _) = subscribed(&t, org.organization_id, org.pool_id, product_id(&t, "Basic").await).await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    let sub_id = member_console::ids::SubscriptionId(sub);
    let changed = walk(&t, &ent::SYNC_SOURCE_STATUS_LOCKS, &steps, move |db| async move {
        ent::sync_source_status(&db, sub_id, "suspended").await
    })
    .await
    .unwrap();
    assert_eq!(changed, 1);
    assert_eq!(common::acts::sites(&t, org.pool_id).await, None, "a suspended provision confers nothing");
}

#[tokio::test]
async fn a_conferrals_quantity_change_walked_lock_by_lock_takes_the_rendezvous_then_its_pool_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Bounded").await;
    let g = grant(&t, org.organization_id, product_id(&t, "Basic").await).await;
    let conferral: member_console::ids::ConferralId = t
        .one(
            sqlx::query_scalar("SELECT conferral_id FROM core.conferrals WHERE grant_id = $1 AND state = 'holding'")
                .bind(g),
        )
        .await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    walk(&t, &ent::UPDATE_CONFERRAL_BOUNDS_LOCKS, &steps, move |db| async move {
        ent::update_conferral_bounds(&db, conferral, 2, None).await
    })
    .await
    .unwrap();
    let quantity: i32 =
        t.one(sqlx::query_scalar("SELECT quantity FROM core.conferrals WHERE conferral_id = $1").bind(conferral)).await;
    assert_eq!(quantity, 2);
    assert_eq!(common::acts::sites(&t, org.pool_id).await, Some(6), "two of Basic's three sites");
}

// Path 47 -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_provider_registration_walked_lock_by_lock_takes_each_moved_keys_row_in_byte_order() {
    let t = demo_db().await;
    // Two keys name another provider (as after a deploy that moved them); the third is unchanged
    // and takes no lock.
    t.run(sqlx::query(
        "UPDATE core.resource_keys SET provider = 'elsewhere' WHERE resource_key IN ('support.priority', 'fedwiki.active_sites')",
    ))
    .await;
    let steps = [
        Step::Lock(Expect::row("core.resource_keys", "fedwiki.active_sites")),
        Step::Lock(Expect::row("core.resource_keys", "support.priority")),
    ];
    let n = walk(&t, &ent::REGISTER_PROVIDERS_LOCKS, &steps, |db| async move { ent::register_providers(&db).await })
        .await
        .unwrap();
    assert_eq!(n, 3);
    let providers: Vec<(String, Option<String>)> = t
        .all(sqlx::query_as(
            "SELECT resource_key, provider FROM core.resource_keys ORDER BY resource_key COLLATE \"C\"",
        ))
        .await;
    for (key, provider) in providers.iter().filter(|(k, _)| k != "fedwiki.custom_domain") {
        let want = key.split('.').next().unwrap();
        assert_eq!(provider.as_deref(), Some(want), "{key}");
    }
}

// End a conferral, Materialize a pool ---------------------------------------------------------------

#[tokio::test]
async fn an_ended_conferral_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Ended").await;
    let (basic, g) = replaced_by_pro(&t, org.organization_id, None).await;
    let conferral: member_console::ids::ConferralId = t
        .one(
            sqlx::query_scalar("SELECT conferral_id FROM core.conferrals WHERE grant_id = $1 AND state = 'holding'")
                .bind(g),
        )
        .await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    let restored = walk(&t, &ent::END_CONFERRAL_LOCKS, &steps, move |db| async move {
        ent::end_conferral(&db, conferral, "walked").await
    })
    .await
    .unwrap();
    assert!(restored.ended);
    assert_eq!(restored.resumed_grants, 1, "the grant it replaced resumed");
    assert_eq!(grant_status(&t, basic).await, "active");
}

#[tokio::test]
async fn a_pools_materialization_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row() {
    let t = demo_db().await;
    let org = community_org(&t, "Materialized").await;
    t.run(sqlx::query("DELETE FROM core.pool_entitlements WHERE pool_id = $1").bind(org.pool_id)).await;
    let steps = [Step::Lock(Expect::rendezvous_shared()), Step::Lock(pool_row(org.pool_id))];
    let pool = org.pool_id;
    walk(&t, &ent::MATERIALIZE_POOL_LOCKS, &steps, move |db| async move { ent::materialize_pool(&db, pool).await })
        .await
        .unwrap();
    assert_eq!(common::acts::sites(&t, org.pool_id).await, Some(1), "the Free floor's one site, written again");
}
