//! Grants: lineage, waiting grants, the audit trail, and the outbox of reconcile requests.

use crate::db::locks::Lock;
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection};

use super::paging::{Page, Seek, page_of};
use crate::{
    ids::{AccountId, ConferralId, EmailDomain, GrantId, OrganizationId, ProductId},
    states::{GrantKind, GrantStatus},
};

#[derive(Debug, Clone)]
pub struct Grant {
    pub grant_id: GrantId,
    pub organization_id: Option<OrganizationId>,
    pub provision_domain: Option<String>,
    pub product_id: ProductId,
    pub quantity: i32,
    pub kind: GrantKind,
    pub status: GrantStatus,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub extends_grant_id: Option<GrantId>,
    /// The lineage's first grant.
    pub lineage_id: GrantId,
}

// The macros take a literal, so each query below spells out `Grant`'s columns.

pub async fn grant(conn: &mut PgConnection, id: GrantId) -> sqlx::Result<Option<Grant>> {
    sqlx::query_as!(
        Grant,
        r#"SELECT grant_id, organization_id AS "organization_id: OrganizationId", provision_domain, product_id, quantity,
                  kind AS "kind: GrantKind", status AS "status: GrantStatus", starts_at, ends_at, reason,
                  extends_grant_id AS "extends_grant_id: GrantId", lineage_id
         FROM core.grants WHERE grant_id = $1"#,
        id as GrantId
    )
    .fetch_optional(conn)
    .await
}

/// GetGrantLineageHeadForUpdate: the lineage's head (the grant no other extends), FOR UPDATE.
pub async fn lineage_head_for_update(conn: &mut PgConnection, lineage_id: GrantId) -> sqlx::Result<Option<Grant>> {
    let r = sqlx::query_as!(
        Grant,
        r#"SELECT grant_id, organization_id AS "organization_id: OrganizationId", provision_domain, product_id, quantity,
                  kind AS "kind: GrantKind", status AS "status: GrantStatus", starts_at, ends_at, reason,
                  extends_grant_id AS "extends_grant_id: GrantId", lineage_id
         FROM core.grants g
         WHERE g.lineage_id = $1 AND NOT EXISTS (SELECT 1 FROM core.grants n WHERE n.extends_grant_id = g.grant_id)
         FOR UPDATE OF g"#,
        lineage_id as GrantId
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(g) = &r {
        crate::db::trace::note(conn, Lock::GrantLineageHead, g.grant_id, None).await?;
    }
    Ok(r)
}

/// A grant's own row, FOR UPDATE (a waiting grant being attached or started).
pub async fn lock_grant(conn: &mut PgConnection, id: GrantId) -> sqlx::Result<Option<Grant>> {
    let r = sqlx::query_as!(
        Grant,
        r#"SELECT grant_id, organization_id AS "organization_id: OrganizationId", provision_domain, product_id, quantity,
                  kind AS "kind: GrantKind", status AS "status: GrantStatus", starts_at, ends_at, reason,
                  extends_grant_id AS "extends_grant_id: GrantId", lineage_id
         FROM core.grants WHERE grant_id = $1 FOR UPDATE"#,
        id as GrantId
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::GrantRow, id, None).await?;
    }
    Ok(r)
}

pub async fn lineage(conn: &mut PgConnection, lineage_id: GrantId) -> sqlx::Result<Vec<Grant>> {
    sqlx::query_as!(
        Grant,
        r#"SELECT grant_id, organization_id AS "organization_id: OrganizationId", provision_domain, product_id, quantity,
                  kind AS "kind: GrantKind", status AS "status: GrantStatus", starts_at, ends_at, reason,
                  extends_grant_id AS "extends_grant_id: GrantId", lineage_id
         FROM core.grants WHERE lineage_id = $1 ORDER BY grant_id"#,
        lineage_id as GrantId
    )
    .fetch_all(conn)
    .await
}

/// The grant's holding conferral, if it has one.
pub async fn holding_conferral_of(conn: &mut PgConnection, grant_id: GrantId) -> sqlx::Result<Option<ConferralId>> {
    sqlx::query_scalar!(
        r#"SELECT conferral_id AS "conferral_id: ConferralId" FROM core.conferrals WHERE grant_id = $1 AND state = 'holding'"#,
        grant_id as GrantId
    )
        .fetch_optional(conn)
        .await
}

pub async fn set_status(conn: &mut PgConnection, grant_id: GrantId, status: GrantStatus) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.grants SET status = $2, ended_at = CASE WHEN $2 IN ('revoked', 'expired', 'ended') THEN now() END
         WHERE grant_id = $1",
        grant_id as GrantId,
        status as GrantStatus
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Mark a live grant expired when its end has come; false when it is not live or not due.
pub async fn expire_if_due(conn: &mut PgConnection, grant_id: GrantId) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "UPDATE core.grants SET status = 'expired', ended_at = now()
         WHERE grant_id = $1 AND status IN ('active', 'replaced', 'waiting') AND ends_at IS NOT NULL AND ends_at <= now()",
        grant_id as GrantId
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

pub async fn reschedule(
    conn: &mut PgConnection,
    grant_id: GrantId,
    starts_at: DateTime<Utc>,
    ends_at: Option<DateTime<Utc>>,
    quantity: i32,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.grants SET starts_at = $2, ends_at = $3, quantity = $4 WHERE grant_id = $1",
        grant_id as GrantId,
        starts_at,
        ends_at,
        quantity
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The extension of a lineage: a new grant extending `head`, with its product and recipient.
pub async fn insert_extension(
    conn: &mut PgConnection,
    head: &Grant,
    status: GrantStatus,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
    reason: &str,
    actor: Option<AccountId>,
) -> sqlx::Result<GrantId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.grants (organization_id, provision_domain, product_id, quantity, kind, status, starts_at, ends_at,
                                    reason, extends_grant_id, created_by, replaced_at)
           VALUES ($1, $2, $3, $4, $5, $6, now(), $7, $8, $9, $10, CASE WHEN $6 = 'replaced' THEN now() END)
           RETURNING grant_id AS "grant_id: GrantId""#,
        head.organization_id as Option<OrganizationId>,
        head.provision_domain,
        head.product_id as ProductId,
        quantity,
        head.kind as GrantKind,
        status as GrantStatus,
        ends_at,
        reason,
        head.grant_id as GrantId,
        actor as Option<AccountId>
    )
    .fetch_one(conn)
    .await
}

/// Waiting grants of an email domain get their organization; FOR UPDATE through the UPDATE.
pub async fn attach_domain_grants(
    conn: &mut PgConnection,
    domain: &EmailDomain,
    organization_id: OrganizationId,
) -> sqlx::Result<Vec<Grant>> {
    sqlx::query_as!(
        Grant,
        r#"UPDATE core.grants SET organization_id = $2
         WHERE grant_id IN (SELECT grant_id FROM core.grants WHERE organization_id IS NULL AND provision_domain = $1
                            AND status = 'waiting' ORDER BY grant_id FOR UPDATE)
         RETURNING grant_id, organization_id AS "organization_id: OrganizationId", provision_domain, product_id, quantity,
                   kind AS "kind: GrantKind", status AS "status: GrantStatus", starts_at, ends_at, reason,
                   extends_grant_id AS "extends_grant_id: GrantId", lineage_id"#,
        domain.as_str(),
        organization_id as OrganizationId
    )
    .fetch_all(conn)
    .await
}

/// Live grants whose end has come, and waiting grants whose start has, for the sweep.
pub async fn due_for_expiry(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<GrantId>> {
    sqlx::query_scalar!(
        r#"SELECT grant_id AS "grant_id: GrantId" FROM core.grants
           WHERE status IN ('active', 'replaced', 'waiting') AND ends_at <= now()
           ORDER BY ends_at, grant_id LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn due_to_start(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<GrantId>> {
    sqlx::query_scalar!(
        r#"SELECT grant_id AS "grant_id: GrantId" FROM core.grants
           WHERE status = 'waiting' AND organization_id IS NOT NULL AND starts_at <= now()
             AND (ends_at IS NULL OR ends_at > now())
           ORDER BY starts_at, grant_id LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn record_event(
    conn: &mut PgConnection,
    grant_id: GrantId,
    organization_id: Option<OrganizationId>,
    act: &str,
    actor: Option<AccountId>,
    reason: &str,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.grant_events (grant_id, organization_id, act, actor_account_id, reason, detail)
         VALUES ($1, $2, $3, $4, $5, $6)",
        grant_id as GrantId,
        organization_id as Option<OrganizationId>,
        act,
        actor as Option<AccountId>,
        reason,
        detail
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// RequestPoolSubscriptionReconciles: one reconcile_subscription row per live subscription of
/// the organization. An insert; it takes no lock.
pub async fn request_pool_subscription_reconciles(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    cause: &str,
) -> sqlx::Result<u64> {
    crate::db::trace::step(&mut *conn, crate::db::trace::steps::REQUEST_POOL_SUBSCRIPTION_RECONCILES).await?;
    Ok(sqlx::query!(
        "INSERT INTO core.outbox (kind, subscription_id, payload)
         SELECT 'reconcile_subscription', s.subscription_id,
                jsonb_build_object('stripe_subscription_id', s.stripe_subscription_id, 'cause', $2::text)
         FROM core.subscriptions s
         WHERE s.organization_id = $1 AND s.status NOT IN ('canceled', 'incomplete_expired')
         ORDER BY s.subscription_id",
        organization_id as OrganizationId,
        cause
    )
    .execute(conn)
    .await?
    .rows_affected())
}

pub async fn product_is_published(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!("SELECT published FROM core.products WHERE product_id = $1", product_id as ProductId)
        .fetch_optional(conn)
        .await
}

pub async fn organization_exists(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.organizations WHERE organization_id = $1) AS "exists!""#,
        organization_id as OrganizationId
    )
    .fetch_one(conn)
    .await
}

pub async fn organization_by_domain(
    conn: &mut PgConnection,
    domain: &EmailDomain,
) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "organization_id: OrganizationId" FROM core.organizations WHERE email_domain = $1"#,
        domain.as_str()
    )
        .fetch_optional(conn)
        .await
}

// Read models for the pages.

#[derive(Debug, Clone, FromRow)]
pub struct GrantRow {
    pub grant_id: GrantId,
    pub organization_id: Option<OrganizationId>,
    pub organization_name: Option<String>,
    pub provision_domain: Option<String>,
    pub product: String,
    pub quantity: i32,
    pub kind: GrantKind,
    pub status: GrantStatus,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub lineage_id: GrantId,
    pub extends_grant_id: Option<GrantId>,
}

/// `GrantRow`'s select for the list, whose filters and direction are built at run time.
const GRANT_ROW_SELECT: &str = "SELECT g.grant_id, g.organization_id, o.name AS organization_name, g.provision_domain,
        p.name AS product, g.quantity, g.kind, g.status, g.starts_at, g.ends_at, g.reason, g.lineage_id, g.extends_grant_id
     FROM core.grants g JOIN core.products p USING (product_id) LEFT JOIN core.organizations o ON o.organization_id = g.organization_id";

/// The WHERE clause for the list's filters; the status is `$1` and the organization `$2` when
/// given. Written per combination (not `$1 IS NULL OR ...`) so every plan can use an index.
fn grant_filter(status: Option<GrantStatus>, organization_id: Option<OrganizationId>) -> String {
    let mut f = vec!["true"];
    if status.is_some() {
        f.push("g.status = $1");
    }
    if organization_id.is_some() {
        f.push("g.organization_id = $2");
    }
    f.join(" AND ")
}

/// A page of grants, newest first (by id), filtered by status and organization; found by key
/// whichever page it is.
pub async fn grants_page(
    conn: &mut PgConnection,
    status: Option<GrantStatus>,
    organization_id: Option<OrganizationId>,
    limit: i64,
    seek: Seek,
) -> sqlx::Result<Page<GrantRow>> {
    // Newest first: "after" a row is older (a smaller id), "before" it newer; the first page
    // starts after the largest id, the last before the smallest.
    let (bound, descending) = match seek {
        Seek::First => (i64::MAX, true),
        Seek::After(id) => (id, true),
        Seek::Before(id) => (id, false),
        Seek::Last => (i64::MIN, false),
    };
    let (compare, order) = if descending { ("<", "DESC") } else { (">", "ASC") };
    // Runtime SQL: the filters and the direction of travel pick one of eight statements.
    let mut rows: Vec<GrantRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{GRANT_ROW_SELECT} WHERE {} AND g.grant_id {compare} $3 ORDER BY g.grant_id {order} LIMIT $4",
        grant_filter(status, organization_id)
    )))
    .bind(status)
    .bind(organization_id)
    .bind(bound)
    .bind(limit + 1)
    .fetch_all(conn)
    .await?;
    if !descending {
        rows.reverse();
    }
    Ok(page_of(rows, limit, seek))
}

/// How many grants match the filters, counting no further than `cap`.
pub async fn grants_matching(
    conn: &mut PgConnection,
    status: Option<GrantStatus>,
    organization_id: Option<OrganizationId>,
    cap: i64,
) -> sqlx::Result<i64> {
    // Runtime SQL: the filters pick one of four statements.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM (SELECT 1 FROM core.grants g WHERE {} LIMIT $3) m",
        grant_filter(status, organization_id)
    )))
    .bind(status)
    .bind(organization_id)
    .bind(cap)
    .fetch_one(conn)
    .await
}

pub async fn grant_row(conn: &mut PgConnection, id: GrantId) -> sqlx::Result<Option<GrantRow>> {
    sqlx::query_as!(
        GrantRow,
        r#"SELECT g.grant_id, g.organization_id AS "organization_id: OrganizationId", o.name AS "organization_name?", g.provision_domain,
                  p.name AS product, g.quantity, g.kind AS "kind: GrantKind", g.status AS "status: GrantStatus", g.starts_at,
                  g.ends_at, g.reason, g.lineage_id, g.extends_grant_id AS "extends_grant_id: GrantId"
           FROM core.grants g JOIN core.products p USING (product_id) LEFT JOIN core.organizations o ON o.organization_id = g.organization_id
           WHERE g.grant_id = $1"#,
        id as GrantId
    )
    .fetch_optional(conn)
    .await
}

pub async fn lineage_rows(conn: &mut PgConnection, lineage_id: GrantId) -> sqlx::Result<Vec<GrantRow>> {
    sqlx::query_as!(
        GrantRow,
        r#"SELECT g.grant_id, g.organization_id AS "organization_id: OrganizationId", o.name AS "organization_name?", g.provision_domain,
                  p.name AS product, g.quantity, g.kind AS "kind: GrantKind", g.status AS "status: GrantStatus", g.starts_at,
                  g.ends_at, g.reason, g.lineage_id, g.extends_grant_id AS "extends_grant_id: GrantId"
           FROM core.grants g JOIN core.products p USING (product_id) LEFT JOIN core.organizations o ON o.organization_id = g.organization_id
           WHERE g.lineage_id = $1 ORDER BY g.grant_id"#,
        lineage_id as GrantId
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub grant_id: GrantId,
    pub act: String,
    pub actor: Option<String>,
    pub reason: String,
    pub at: DateTime<Utc>,
}

pub async fn events_of_lineage(conn: &mut PgConnection, lineage_id: GrantId) -> sqlx::Result<Vec<EventRow>> {
    sqlx::query_as!(
        EventRow,
        r#"SELECT e.grant_id, e.act, a.email AS "actor?", e.reason, e.at FROM core.grant_events e
           JOIN core.grants g USING (grant_id) LEFT JOIN core.accounts a ON a.account_id = e.actor_account_id
           WHERE g.lineage_id = $1 ORDER BY e.at DESC, e.event_id DESC"#,
        lineage_id as GrantId
    )
    .fetch_all(conn)
    .await
}

pub async fn events_of_organization(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    limit: i64,
) -> sqlx::Result<Vec<EventRow>> {
    sqlx::query_as!(
        EventRow,
        r#"SELECT e.grant_id, e.act, a.email AS "actor?", e.reason, e.at FROM core.grant_events e
           LEFT JOIN core.accounts a ON a.account_id = e.actor_account_id
           WHERE e.organization_id = $1 ORDER BY e.at DESC, e.event_id DESC LIMIT $2"#,
        organization_id as OrganizationId,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn published_products(conn: &mut PgConnection) -> sqlx::Result<Vec<(ProductId, String)>> {
    Ok(sqlx::query!("SELECT product_id, name FROM core.products WHERE published ORDER BY lower(name), product_id")
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(|r| (ProductId(r.product_id), r.name))
        .collect())
}
