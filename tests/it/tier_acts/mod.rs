//! Tier removal (RemoveTier) and the tier reorder (ReorderTiers): migrate and grandfather
//! outcomes, every refusal (and that it writes nothing), the lock order of each path, a reorder
//! that supersedes an earlier default change, a Retry beside a listing batch, the benign deadlock
//! between listings, the previews, and the operator's forms over HTTP.

use crate::common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{TestDb, acts::*, pages, pages::demo_db};
use member_console::{
    db::{TxKind, begin},
    demo,
    ids::{GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId},
    services::{
        organizations as orgs,
        plan_acts::{self as pa, Disposition, ReorderTiers},
        refusal::ServiceError,
        topology::{self as topo, RemoveTier},
    },
    store::plan_acts as store,
};
use reqwest::StatusCode;

mod drains_and_forms;
mod removal;
mod reorder;

// ---------- Harness (the shared part is tests/common/acts.rs) ----------

/// The default pool of the organization named `name`.
async fn pool_named(t: &TestDb, name: &str) -> PoolId {
    t.one(
        sqlx::query_scalar(
            "SELECT rp.pool_id FROM core.resource_pools rp JOIN core.organizations o USING (organization_id)
         WHERE o.name = $1 AND rp.is_default",
        )
        .bind(name),
    )
    .await
}

fn removal(ladder: LadderId, rank: i32, d: Option<Disposition>) -> RemoveTier {
    RemoveTier { ladder_id: ladder, rank, disposition: d, reason: "test".into(), actor: None }
}

fn reorder(ladder: LadderId, order: &[ProductId], d: Option<Disposition>) -> ReorderTiers {
    ReorderTiers { ladder_id: ladder, order: order.to_vec(), disposition: d, reason: "test".into(), actor: None }
}

/// The pool's positions: (ladder, rank, product, grant kind), by ladder name.
async fn positions(t: &TestDb, pool: PoolId) -> Vec<(String, i32, String, String)> {
    positions_of(t, pool).await.into_iter().map(|p| (p.ladder, p.rank, p.product, p.kind)).collect()
}

fn pos(ladder: &str, rank: i32, product: &str, kind: &str) -> (String, i32, String, String) {
    (ladder.into(), rank, product.into(), kind.into())
}

/// Every holding conferral of the pool: (product, grant kind, grant status, the grant's act, how
/// many ladders it holds), by product name.
async fn held(t: &TestDb, pool: PoolId) -> Vec<(String, String, String, Option<PlanActId>, i64)> {
    t.all(
        sqlx::query_as(
            "SELECT pr.name, g.kind, g.status, g.plan_act_id,
                (SELECT count(*) FROM core.positions p WHERE p.conferral_id = c.conferral_id)
         FROM core.conferrals c JOIN core.products pr ON pr.product_id = c.product_id
         JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE c.pool_id = $1 AND c.state = 'holding' ORDER BY pr.name",
        )
        .bind(pool),
    )
    .await
}

fn hd(
    product: &str,
    kind: &str,
    act: Option<PlanActId>,
    ladders: i64,
) -> (String, String, String, Option<PlanActId>, i64) {
    (product.into(), kind.into(), "active".into(), act, ladders)
}

/// A grant's (status, kind, act).
async fn grant_row(t: &TestDb, grant_id: GrantId) -> (String, String, Option<PlanActId>) {
    t.one(sqlx::query_as("SELECT status, kind, plan_act_id FROM core.grants WHERE grant_id = $1").bind(grant_id)).await
}

/// The grant's latest conferral: (state, ended_reason).
async fn latest_conferral(t: &TestDb, grant_id: GrantId) -> (String, Option<String>) {
    t.one(
        sqlx::query_as(
            "SELECT state, ended_reason FROM core.conferrals WHERE grant_id = $1 ORDER BY conferral_id DESC LIMIT 1",
        )
        .bind(grant_id),
    )
    .await
}

/// The grant's events other than its issue: (act, the plan act its detail names).
async fn events(t: &TestDb, grant_id: GrantId) -> Vec<(String, Option<PlanActId>)> {
    t.all(
        sqlx::query_as(
            "SELECT act, (detail->>'plan_act_id')::bigint FROM core.grant_events
         WHERE grant_id = $1 AND act <> 'issued' ORDER BY event_id",
        )
        .bind(grant_id),
    )
    .await
}

/// The pool's materialized entitlements: (key, number, flag), by key.
async fn ents(t: &TestDb, pool: PoolId) -> Vec<(String, Option<i64>, Option<bool>)> {
    t.all(
        sqlx::query_as(
            "SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements WHERE pool_id = $1
         ORDER BY resource_key COLLATE \"C\"",
        )
        .bind(pool),
    )
    .await
}

fn sites(n: i64) -> (String, Option<i64>, Option<bool>) {
    ("fedwiki.active_sites".into(), Some(n), None)
}

fn custom_domain() -> (String, Option<i64>, Option<bool>) {
    ("fedwiki.custom_domain".into(), None, Some(true))
}

fn support_flag(on: bool) -> (String, Option<i64>, Option<bool>) {
    ("support.priority".into(), None, Some(on))
}

/// Obligations of the act settled more than once, or never attempted although settled.
async fn not_once(t: &TestDb, act: PlanActId) -> i64 {
    scalar(
        t,
        &format!(
            "SELECT count(*) FROM core.plan_act_obligations
             WHERE plan_act_id = {act} AND state <> 'superseded' AND attempts <> 1"
        ),
    )
    .await
}

/// (kind, disposition, state) of an act.
async fn act_row(t: &TestDb, act: PlanActId) -> (String, Option<String>, String) {
    t.one(sqlx::query_as("SELECT kind, disposition, state FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await
}

/// (product, rank, detail) of an act's detail row.
async fn act_detail(t: &TestDb, act: PlanActId) -> (Option<ProductId>, Option<i32>, serde_json::Value) {
    t.one(sqlx::query_as("SELECT product_id, rank, detail FROM core.plan_act_details WHERE plan_act_id = $1").bind(act))
        .await
}

async fn reached(t: &TestDb, act: PlanActId) -> Vec<(OrgTypeId, Option<LadderId>, Option<ProductId>)> {
    t.all(
        sqlx::query_as(
            "SELECT org_type_id, from_ladder_id, from_product_id FROM core.plan_act_reached_types
         WHERE plan_act_id = $1 ORDER BY org_type_id",
        )
        .bind(act),
    )
    .await
}

fn refused(e: ServiceError) -> String {
    match e {
        ServiceError::Refused(m) => m,
        other => panic!("expected Refused, got {other:?}"),
    }
}

/// Everything a refused act or a preview must leave alone, row by row.
async fn world(t: &TestDb) -> Vec<String> {
    let queries = [
        "SELECT format('tier %s %s %s', plan_ladder_id, rank, product_id) FROM core.plan_ladder_tiers",
        "SELECT format('position %s %s %s %s', pool_id, plan_ladder_id, conferral_id, rank) FROM core.positions",
        "SELECT format('grant %s %s %s %s', grant_id, status, kind, plan_act_id) FROM core.grants",
        "SELECT format('conferral %s %s %s', conferral_id, state, ended_reason) FROM core.conferrals",
        "SELECT format('act %s %s', plan_act_id, state) FROM core.plan_acts",
        "SELECT format('detail %s', plan_act_id) FROM core.plan_act_details",
        "SELECT format('reached %s %s', plan_act_id, org_type_id) FROM core.plan_act_reached_types",
        "SELECT format('obligation %s %s %s', plan_act_id, pool_id, state) FROM core.plan_act_obligations",
        "SELECT format('event %s', event_id) FROM core.grant_events",
        "SELECT format('outbox %s', outbox_id) FROM core.outbox",
        "SELECT format('job %s %s', kind, dedupe_key) FROM integration.jobs",
        "SELECT format('type %s %s %s', org_type_id, default_plan_ladder_id, default_owner_act_id) FROM core.org_types",
        "SELECT format('ent %s %s %s %s', pool_id, resource_key, numeric_value, flag_value) FROM core.pool_entitlements",
    ];
    let mut out = vec![];
    for q in queries {
        let rows: Vec<String> = t.all(sqlx::query_scalar(sqlx::AssertSqlSafe(q.to_string()))).await;
        out.extend(rows);
    }
    out.sort();
    out
}

/// A live and a canceled subscription of the organization (billing rows, set up directly).
async fn subscriptions(t: &TestDb, org: OrganizationId, prefix: &str) {
    t.run(
        sqlx::query(
            "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status)
         VALUES ($1, $2 || '_live', 'active'), ($1, $2 || '_gone', 'canceled')",
        )
        .bind(org)
        .bind(prefix),
    )
    .await;
}

/// The reconcile requests in the outbox: (stripe subscription, cause), by subscription.
async fn reconciles(t: &TestDb) -> Vec<(String, Option<String>)> {
    t.all(sqlx::query_as(
        "SELECT s.stripe_subscription_id, o.payload->>'cause' FROM core.outbox o
         JOIN core.subscriptions s USING (subscription_id)
         WHERE o.kind = 'reconcile_subscription' ORDER BY s.stripe_subscription_id",
    ))
    .await
}

/// The demo, and three organizations holding Basic (rank 1 of Wiki hosting): a Community one
/// (its Free floor displaced), a Business one (its floor is on Support), and a Community one whose
/// Pro grant Basic replaced.
struct BasicHolders {
    t: TestDb,
    wiki: LadderId,
    community: orgs::CreatedOrganization,
    business: orgs::CreatedOrganization,
    both: orgs::CreatedOrganization,
    /// The Basic grants of the three, and the replaced Pro grant.
    community_basic: GrantId,
    business_basic: GrantId,
    both_basic: GrantId,
    both_pro: GrantId,
}

async fn basic_holders(quantity: i32, ends_at: Option<DateTime<Utc>>) -> BasicHolders {
    let Demo { t, community: community_t, business: business_t, wiki, basic, pro, .. } = demo().await;
    let community = org_of_type(&t, "Basic community", community_t).await;
    let business = org_of_type(&t, "Basic business", business_t).await;
    let both = org_of_type(&t, "Pro then Basic", community_t).await;
    let community_basic = grant_with(&t, community.organization_id, basic, quantity, ends_at).await;
    let business_basic = grant(&t, business.organization_id, basic).await;
    let both_pro = grant(&t, both.organization_id, pro).await;
    let both_basic = grant(&t, both.organization_id, basic).await;
    // The preconditions the outcomes rest on.
    assert_eq!(grant_row(&t, both_pro).await.0, "replaced", "Basic replaced the Pro grant");
    assert_eq!(positions(&t, community.pool_id).await, vec![pos("Wiki hosting", 1, "Basic", "operator")]);
    assert_eq!(
        positions(&t, business.pool_id).await,
        vec![pos("Support", 0, "Community support", "floor"), pos("Wiki hosting", 1, "Basic", "operator")]
    );
    assert_eq!(positions(&t, both.pool_id).await, vec![pos("Wiki hosting", 1, "Basic", "operator")]);
    BasicHolders { t, wiki, community, business, both, community_basic, business_basic, both_basic, both_pro }
}

impl BasicHolders {
    /// Each of the three Basic grants ended by `act`: the grant, its conferral (ended for `why`)
    /// and its event.
    async fn assert_basic_grants_ended(&self, act: PlanActId, why: &str) {
        let t = &self.t;
        for g in [self.community_basic, self.business_basic, self.both_basic] {
            assert_eq!(grant_row(t, g).await, ("ended".into(), "operator".into(), None), "grant {g}");
            assert_eq!(latest_conferral(t, g).await, ("ended".into(), Some(why.into())), "grant {g}");
            assert_eq!(events(t, g).await, vec![("ended".into(), Some(act))], "grant {g}");
        }
    }
}
