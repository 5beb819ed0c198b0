//! The catalog (resource keys, entitlement sets and rules, products), the topology (ladders,
//! tiers, org types), and the read models of organizations and pools.

use crate::db::locks::Lock;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::paging::{Page, Seek, page_of};
use crate::{
    ids::{
        ConferralId, EntitlementSetId, GrantId, LadderId, OrgTypeId, OrganizationId, PoolId, ProductId, ResourceKey,
    },
    states::{GrantKind, KeyKind},
};

/// A row of `core.resource_keys`.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub resource_key: ResourceKey,
    pub kind: KeyKind,
    pub provider: Option<String>,
    pub description: String,
    /// What members read in place of the key (migration 0021).
    pub display_name: String,
    /// Shown after a numeric key's number, when set.
    pub unit: Option<String>,
}

pub async fn resource_keys(conn: &mut PgConnection) -> sqlx::Result<Vec<KeyRow>> {
    sqlx::query_as!(
        KeyRow,
        r#"SELECT resource_key AS "resource_key: ResourceKey", kind AS "kind: KeyKind", provider, description,
                  display_name, unit
           FROM core.resource_keys
           ORDER BY resource_key COLLATE "C""#
    )
    .fetch_all(conn)
    .await
}

/// A resource key's name and unit, as member pages show the key (`core.member_home` carries
/// them per organization as `labels`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct KeyLabel {
    pub resource_key: String,
    pub name: String,
    pub unit: Option<String>,
}

/// Every key's name and unit (a handful of rows: the catalog's keys).
pub async fn key_labels(conn: &mut PgConnection) -> sqlx::Result<Vec<KeyLabel>> {
    sqlx::query_as!(
        KeyLabel,
        r#"SELECT resource_key, display_name AS name, unit FROM core.resource_keys ORDER BY resource_key COLLATE "C""#
    )
    .fetch_all(conn)
    .await
}

/// Rename a key and set its unit: one UPDATE of columns that are no key of the row, so it takes
/// the row FOR NO KEY UPDATE (noted for the trace). None: no such key; else the key's kind.
pub async fn set_key_label(
    conn: &mut PgConnection,
    key: &ResourceKey,
    name: &str,
    unit: Option<&str>,
) -> sqlx::Result<Option<KeyKind>> {
    let kind = sqlx::query_scalar!(
        r#"UPDATE core.resource_keys SET display_name = $2, unit = $3 WHERE resource_key = $1
           RETURNING kind AS "kind: KeyKind""#,
        key as &ResourceKey,
        name,
        unit
    )
    .fetch_optional(&mut *conn)
    .await?;
    if kind.is_some() {
        crate::db::trace::note(conn, Lock::ResourceKeyRow, key.as_str(), None).await?;
    }
    Ok(kind)
}

/// The demo's names: a key still named by default (and with no unit) gets `name` and `unit`.
pub async fn name_key_if_unnamed(
    conn: &mut PgConnection,
    key: &ResourceKey,
    name: &str,
    unit: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.resource_keys SET display_name = $2, unit = $3
         WHERE resource_key = $1 AND display_name = core.default_resource_key_name(resource_key) AND unit IS NULL
           AND (display_name, unit) IS DISTINCT FROM ($2, $3)",
        key as &ResourceKey,
        name,
        unit
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether another key than `key` is named `name` (any case): two keys one name would read alike.
pub async fn key_name_taken(conn: &mut PgConnection, key: &ResourceKey, name: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.resource_keys WHERE lower(display_name) = lower($2) AND resource_key <> $1) AS "taken!""#,
        key as &ResourceKey,
        name
    )
    .fetch_one(conn)
    .await
}

/// Inserted, or None when the key exists already.
pub async fn insert_resource_key(
    conn: &mut PgConnection,
    key: &ResourceKey,
    kind: KeyKind,
    description: &str,
) -> sqlx::Result<Option<ResourceKey>> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.resource_keys (resource_key, kind, description) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING RETURNING resource_key AS "resource_key: ResourceKey""#,
        key as &ResourceKey,
        kind as KeyKind,
        description
    )
    .fetch_optional(conn)
    .await
}

/// Pool counts on catalog pages stop past this many (`carried_by_pools` is then `CAP + 1`).
pub const CARRIED_COUNT_CAP: i64 = 1000;

#[derive(Debug, Clone)]
pub struct EntitlementSet {
    pub entitlement_set_id: EntitlementSetId,
    pub name: String,
    pub carried_by_pools: i64,
}

pub async fn entitlement_sets(conn: &mut PgConnection) -> sqlx::Result<Vec<EntitlementSet>> {
    sqlx::query_as!(
        EntitlementSet,
        r#"SELECT s.entitlement_set_id, s.name,
                  core.pools_carrying(ARRAY(SELECT p.product_id FROM core.products p
                                             WHERE p.entitlement_set_id = s.entitlement_set_id), $1) AS "carried_by_pools!"
           FROM core.entitlement_sets s ORDER BY lower(s.name), s.entitlement_set_id"#,
        CARRIED_COUNT_CAP
    )
    .fetch_all(conn)
    .await
}

pub async fn entitlement_set(conn: &mut PgConnection, id: EntitlementSetId) -> sqlx::Result<Option<EntitlementSet>> {
    sqlx::query_as!(
        EntitlementSet,
        r#"SELECT s.entitlement_set_id, s.name,
                  core.pools_carrying(ARRAY(SELECT p.product_id FROM core.products p
                                             WHERE p.entitlement_set_id = s.entitlement_set_id), $1) AS "carried_by_pools!"
           FROM core.entitlement_sets s WHERE s.entitlement_set_id = $2"#,
        CARRIED_COUNT_CAP,
        id as EntitlementSetId
    )
    .fetch_optional(conn)
    .await
}

/// The set row, FOR UPDATE.
pub async fn lock_entitlement_set(conn: &mut PgConnection, id: EntitlementSetId) -> sqlx::Result<bool> {
    let locked = sqlx::query_scalar!(
        "SELECT 1 AS locked FROM core.entitlement_sets WHERE entitlement_set_id = $1 FOR UPDATE",
        id as EntitlementSetId
    )
    .fetch_optional(&mut *conn)
    .await?
    .is_some();
    if locked {
        crate::db::trace::note(conn, Lock::EntitlementSetRow, id, Some(id.0)).await?;
    }
    Ok(locked)
}

pub async fn insert_entitlement_set(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<EntitlementSetId>> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.entitlement_sets (name) VALUES ($1) ON CONFLICT DO NOTHING
           RETURNING entitlement_set_id AS "entitlement_set_id: EntitlementSetId""#,
        name
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub entitlement_set_id: EntitlementSetId,
    pub resource_key: ResourceKey,
    pub numeric_value: Option<i64>,
    pub flag_value: Option<bool>,
}

pub async fn rules(conn: &mut PgConnection) -> sqlx::Result<Vec<Rule>> {
    sqlx::query_as!(
        Rule,
        r#"SELECT entitlement_set_id, resource_key AS "resource_key: ResourceKey", numeric_value, flag_value
           FROM core.entitlement_set_rules
           ORDER BY entitlement_set_id, resource_key COLLATE "C""#
    )
    .fetch_all(conn)
    .await
}

pub async fn rules_of_set(conn: &mut PgConnection, id: EntitlementSetId) -> sqlx::Result<Vec<Rule>> {
    sqlx::query_as!(
        Rule,
        r#"SELECT entitlement_set_id, resource_key AS "resource_key: ResourceKey", numeric_value, flag_value
           FROM core.entitlement_set_rules
           WHERE entitlement_set_id = $1 ORDER BY resource_key COLLATE "C""#,
        id as EntitlementSetId
    )
    .fetch_all(conn)
    .await
}

/// Write one rule (or remove it, with neither value).
pub async fn put_rule(
    conn: &mut PgConnection,
    set_id: EntitlementSetId,
    key: &ResourceKey,
    numeric: Option<i64>,
    flag: Option<bool>,
) -> sqlx::Result<()> {
    if numeric.is_none() && flag.is_none() {
        sqlx::query!(
            "DELETE FROM core.entitlement_set_rules WHERE entitlement_set_id = $1 AND resource_key = $2",
            set_id as EntitlementSetId,
            key as &ResourceKey
        )
        .execute(conn)
        .await?;
    } else {
        sqlx::query!(
            "INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value, flag_value)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (entitlement_set_id, resource_key) DO UPDATE
             SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value",
            set_id as EntitlementSetId,
            key as &ResourceKey,
            numeric,
            flag
        )
        .execute(conn)
        .await?;
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Product {
    pub product_id: ProductId,
    pub name: String,
    pub entitlement_set_id: Option<EntitlementSetId>,
    pub set_name: Option<String>,
    pub published: bool,
    pub carried_by_pools: i64,
    /// The most seats a member may buy of it (1: not sold in seats).
    pub max_quantity: i32,
}

pub async fn products(conn: &mut PgConnection) -> sqlx::Result<Vec<Product>> {
    sqlx::query_as!(
        Product,
        r#"SELECT p.product_id, p.name, p.entitlement_set_id AS "entitlement_set_id: EntitlementSetId", s.name AS "set_name?",
                  p.published,
                  core.pools_carrying(ARRAY[p.product_id], $1) AS "carried_by_pools!", p.max_quantity
           FROM core.products p LEFT JOIN core.entitlement_sets s USING (entitlement_set_id)
           ORDER BY lower(p.name), p.product_id"#,
        CARRIED_COUNT_CAP
    )
    .fetch_all(conn)
    .await
}

/// Published products with an entitlement set, by name: the ones a tier may be (no counts).
pub async fn tier_product_options(conn: &mut PgConnection) -> sqlx::Result<Vec<(ProductId, String)>> {
    Ok(sqlx::query!(
        "SELECT product_id, name FROM core.products
         WHERE published AND entitlement_set_id IS NOT NULL ORDER BY lower(name), product_id"
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (ProductId(r.product_id), r.name))
    .collect())
}

pub async fn product(conn: &mut PgConnection, id: ProductId) -> sqlx::Result<Option<Product>> {
    sqlx::query_as!(
        Product,
        r#"SELECT p.product_id, p.name, p.entitlement_set_id AS "entitlement_set_id: EntitlementSetId", s.name AS "set_name?",
                  p.published,
                  core.pools_carrying(ARRAY[p.product_id], $1) AS "carried_by_pools!", p.max_quantity
           FROM core.products p LEFT JOIN core.entitlement_sets s USING (entitlement_set_id)
           WHERE p.product_id = $2"#,
        CARRIED_COUNT_CAP,
        id as ProductId
    )
    .fetch_optional(conn)
    .await
}

pub async fn insert_product(
    conn: &mut PgConnection,
    name: &str,
    set_id: Option<EntitlementSetId>,
    published: bool,
) -> sqlx::Result<Option<ProductId>> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.products (name, entitlement_set_id, published) VALUES ($1, $2, $3)
           ON CONFLICT DO NOTHING RETURNING product_id AS "product_id: ProductId""#,
        name,
        set_id as Option<EntitlementSetId>,
        published
    )
    .fetch_optional(conn)
    .await
}

/// UpdateProduct with a change of set: the product row FOR NO KEY UPDATE (a rename too: the name's
/// uniqueness is an expression index, no key of the row; migration 0015).
pub async fn update_product(
    conn: &mut PgConnection,
    id: ProductId,
    name: &str,
    set_id: Option<EntitlementSetId>,
    published: bool,
) -> sqlx::Result<bool> {
    let written = sqlx::query!(
        "UPDATE core.products SET name = $2, entitlement_set_id = $3, published = $4 WHERE product_id = $1",
        id as ProductId,
        name,
        set_id as Option<EntitlementSetId>,
        published
    )
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if written {
        crate::db::trace::note(conn, Lock::ProductRow, id.0, Some(id.0)).await?;
    }
    Ok(written)
}

/// UpdateProduct without a change of set: the name and publication only, the row FOR NO KEY
/// UPDATE (see `update_product`).
pub async fn update_product_name(
    conn: &mut PgConnection,
    id: ProductId,
    name: &str,
    published: bool,
) -> sqlx::Result<bool> {
    let written = sqlx::query!(
        "UPDATE core.products SET name = $2, published = $3 WHERE product_id = $1",
        id as ProductId,
        name,
        published
    )
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if written {
        crate::db::trace::note(conn, Lock::ProductRow, id.0, Some(id.0)).await?;
    }
    Ok(written)
}

pub async fn name_taken_by_other_product(conn: &mut PgConnection, id: ProductId, name: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.products WHERE name = $2 AND product_id <> $1) AS "taken!""#,
        id as ProductId,
        name
    )
    .fetch_one(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Tier {
    pub plan_ladder_id: LadderId,
    pub ladder_name: String,
    pub rank: i32,
    pub product_id: ProductId,
    pub product_name: String,
    pub set_name: Option<String>,
}

pub async fn tiers(conn: &mut PgConnection) -> sqlx::Result<Vec<Tier>> {
    sqlx::query_as!(
        Tier,
        r#"SELECT t.plan_ladder_id, l.name AS ladder_name, t.rank, t.product_id, p.name AS product_name,
                  s.name AS "set_name?"
           FROM core.plan_ladder_tiers t JOIN core.plan_ladders l USING (plan_ladder_id)
           JOIN core.products p USING (product_id) LEFT JOIN core.entitlement_sets s ON s.entitlement_set_id = p.entitlement_set_id
           ORDER BY l.sort_order, l.plan_ladder_id, t.rank"#
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Ladder {
    pub plan_ladder_id: LadderId,
    pub name: String,
    pub sort_order: i32,
}

pub async fn ladders(conn: &mut PgConnection) -> sqlx::Result<Vec<Ladder>> {
    sqlx::query_as!(
        Ladder,
        "SELECT plan_ladder_id, name, sort_order FROM core.plan_ladders ORDER BY sort_order, plan_ladder_id"
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct OrgType {
    pub org_type_id: OrgTypeId,
    pub name: String,
    pub default_plan_ladder_id: Option<LadderId>,
    pub default_ladder: Option<String>,
    pub floor_product: Option<String>,
    pub organizations: i64,
}

pub async fn org_types(conn: &mut PgConnection) -> sqlx::Result<Vec<OrgType>> {
    sqlx::query_as!(
        OrgType,
        r#"SELECT t.org_type_id, t.name, t.default_plan_ladder_id AS "default_plan_ladder_id: LadderId",
                  l.name AS "default_ladder?",
                  (SELECT p.name FROM core.plan_ladder_tiers pt JOIN core.products p USING (product_id)
                   WHERE pt.plan_ladder_id = t.default_plan_ladder_id AND pt.rank = 0) AS "floor_product?",
                  coalesce((SELECT sum(c.delta) FROM core.organization_counts c WHERE c.org_type_id = t.org_type_id), 0)::bigint
                      AS "organizations!"
           FROM core.org_types t LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = t.default_plan_ladder_id
           ORDER BY lower(t.name), t.org_type_id"#
    )
    .fetch_all(conn)
    .await
}

// Setup used by the demo seed: the topology's own writers (plan acts) come later.

pub async fn ensure_ladder(conn: &mut PgConnection, name: &str, sort_order: i32) -> sqlx::Result<LadderId> {
    if let Some(id) =
        sqlx::query_scalar!(r#"SELECT plan_ladder_id AS "id: LadderId" FROM core.plan_ladders WHERE name = $1"#, name)
            .fetch_optional(&mut *conn)
            .await?
    {
        return Ok(id);
    }
    sqlx::query_scalar!(
        r#"INSERT INTO core.plan_ladders (name, sort_order) VALUES ($1, $2) RETURNING plan_ladder_id AS "id: LadderId""#,
        name,
        sort_order
    )
    .fetch_one(conn)
    .await
}

pub async fn ensure_tier(conn: &mut PgConnection, ladder: LadderId, rank: i32, product: ProductId) -> sqlx::Result<()> {
    // The rank key is deferrable (renumbering), which ON CONFLICT cannot arbitrate.
    sqlx::query!(
        "INSERT INTO core.plan_ladder_tiers (plan_ladder_id, rank, product_id) SELECT $1, $2, $3
         WHERE NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 AND (rank = $2 OR product_id = $3))",
        ladder as LadderId,
        rank,
        product as ProductId
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn ensure_org_type(
    conn: &mut PgConnection,
    name: &str,
    default_ladder: Option<LadderId>,
) -> sqlx::Result<OrgTypeId> {
    if let Some(id) =
        sqlx::query_scalar!(r#"SELECT org_type_id AS "id: OrgTypeId" FROM core.org_types WHERE name = $1"#, name)
            .fetch_optional(&mut *conn)
            .await?
    {
        return Ok(id);
    }
    sqlx::query_scalar!(
        r#"INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ($1, $2) RETURNING org_type_id AS "id: OrgTypeId""#,
        name,
        default_ladder as Option<LadderId>
    )
    .fetch_one(conn)
    .await
}

pub async fn entitlement_set_id_by_name(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<EntitlementSetId>> {
    sqlx::query_scalar!(
        r#"SELECT entitlement_set_id AS "id: EntitlementSetId" FROM core.entitlement_sets WHERE name = $1"#,
        name
    )
    .fetch_optional(conn)
    .await
}

pub async fn product_id_by_name(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<ProductId>> {
    sqlx::query_scalar!(r#"SELECT product_id AS "id: ProductId" FROM core.products WHERE name = $1"#, name)
        .fetch_optional(conn)
        .await
}

// Organizations and pools, read models.

#[derive(Debug, Clone)]
pub struct OrgListRow {
    pub organization_id: OrganizationId,
    pub name: String,
    pub org_type: Option<String>,
    pub plan: Option<String>,
}

/// The LIKE pattern of names whose lowered form starts with `prefix` (any case): the prefix
/// lowered, its wildcards and escape character taken literally.
fn lowered_prefix_pattern(prefix: &str) -> String {
    format!("{}%", prefix.to_lowercase().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

/// One page of organizations, by name (byte order of the lowered name, then id), whose name
/// starts with `prefix` (any case). An index range scan whichever page it is.
pub async fn organizations_page(
    conn: &mut PgConnection,
    prefix: &str,
    limit: i64,
    seek: Seek,
) -> sqlx::Result<Page<OrgListRow>> {
    let pattern = lowered_prefix_pattern(prefix);
    let (cursor, direction) = match seek {
        Seek::First => (None, "forward"),
        Seek::After(id) => (Some(id), "forward"),
        Seek::Before(id) => (Some(id), "backward"),
        Seek::Last => (None, "backward"),
    };
    let rows = sqlx::query_as!(
        OrgListRow,
        r#"WITH c AS (SELECT lower(name) COLLATE "C" AS k, organization_id AS id FROM core.organizations WHERE organization_id = $2),
           page AS (
               (SELECT o.organization_id, o.name, o.org_type_id FROM core.organizations o
                WHERE $4 = 'forward' AND lower(o.name) COLLATE "C" LIKE $1
                  AND ($2::bigint IS NULL OR (lower(o.name) COLLATE "C", o.organization_id) > (SELECT k, id FROM c))
                ORDER BY lower(o.name) COLLATE "C", o.organization_id LIMIT $3)
               UNION ALL
               (SELECT o.organization_id, o.name, o.org_type_id FROM core.organizations o
                WHERE $4 = 'backward' AND lower(o.name) COLLATE "C" LIKE $1
                  AND ($2::bigint IS NULL OR (lower(o.name) COLLATE "C", o.organization_id) < (SELECT k, id FROM c))
                ORDER BY lower(o.name) COLLATE "C" DESC, o.organization_id DESC LIMIT $3))
           SELECT p.organization_id AS "organization_id!", p.name AS "name!", t.name AS "org_type?",
                  (SELECT string_agg(l.name || ': ' || pr.name, ' · ' ORDER BY l.sort_order, l.plan_ladder_id)
                   FROM core.resource_pools rp JOIN core.positions ps ON ps.pool_id = rp.pool_id
                   JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                   JOIN core.conferrals cf ON cf.conferral_id = ps.conferral_id JOIN core.products pr ON pr.product_id = cf.product_id
                   WHERE rp.organization_id = p.organization_id AND rp.is_default) AS "plan?"
           FROM page p LEFT JOIN core.org_types t ON t.org_type_id = p.org_type_id
           ORDER BY lower(p.name) COLLATE "C", p.organization_id"#,
        pattern,
        cursor,
        limit + 1,
        direction
    )
    .fetch_all(conn)
    .await?;
    Ok(page_of(rows, limit, seek))
}

/// How many organizations' names start with `prefix`, counting no further than `cap` (a search
/// that matches most of a large list says "more than", rather than counting them all).
pub async fn organizations_matching(conn: &mut PgConnection, prefix: &str, cap: i64) -> sqlx::Result<i64> {
    let pattern = lowered_prefix_pattern(prefix);
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM (SELECT 1 FROM core.organizations WHERE lower(name) COLLATE "C" LIKE $1 LIMIT $2) m"#,
        pattern,
        cap
    )
    .fetch_one(conn)
    .await
}

/// The organization with this id, as a list row (a search for an id).
pub async fn organization_row(conn: &mut PgConnection, id: OrganizationId) -> sqlx::Result<Option<OrgListRow>> {
    sqlx::query_as!(
        OrgListRow,
        r#"SELECT o.organization_id, o.name, t.name AS "org_type?",
                  (SELECT string_agg(l.name || ': ' || pr.name, ' · ' ORDER BY l.sort_order, l.plan_ladder_id)
                   FROM core.resource_pools rp JOIN core.positions ps ON ps.pool_id = rp.pool_id
                   JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                   JOIN core.conferrals cf ON cf.conferral_id = ps.conferral_id JOIN core.products pr ON pr.product_id = cf.product_id
                   WHERE rp.organization_id = o.organization_id AND rp.is_default) AS "plan?"
           FROM core.organizations o LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
           WHERE o.organization_id = $1"#,
        id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// Fold the counts' appended rows (core.compact_organization_counts): how many rows went.
pub async fn compact_organization_counts(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT core.compact_organization_counts() AS "compacted!""#).fetch_one(conn).await
}

/// How many organizations there are, per org type (None: without a type), from the counts the
/// organizations' triggers keep (migration 0014): no organization is read.
pub async fn organization_counts(conn: &mut PgConnection) -> sqlx::Result<Vec<(Option<OrgTypeId>, i64)>> {
    Ok(sqlx::query!(
        r#"SELECT org_type_id AS "org_type_id: OrgTypeId", sum(delta)::bigint AS "organizations!"
           FROM core.organization_counts GROUP BY org_type_id HAVING sum(delta) <> 0"#
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.org_type_id, r.organizations))
    .collect())
}

#[derive(Debug, Clone)]
pub struct OrgFacts {
    pub organization_id: OrganizationId,
    pub name: String,
    pub org_type: Option<String>,
    pub pool_id: Option<PoolId>,
    pub created_at: DateTime<Utc>,
}

pub async fn organization(conn: &mut PgConnection, id: OrganizationId) -> sqlx::Result<Option<OrgFacts>> {
    sqlx::query_as!(
        OrgFacts,
        r#"SELECT o.organization_id, o.name, t.name AS "org_type?", rp.pool_id AS "pool_id?: PoolId", o.created_at
           FROM core.organizations o LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
           LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
           WHERE o.organization_id = $1"#,
        id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// A holding conferral of a pool, with its ladder place when it has one.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct HeldConferral {
    pub conferral_id: ConferralId,
    pub ladder: Option<String>,
    pub rank: Option<i32>,
    pub product: String,
    pub grant_id: Option<GrantId>,
    pub grant_kind: Option<GrantKind>,
    pub stripe_subscription_id: Option<String>,
    pub stripe_item_id: Option<String>,
    pub suspended: bool,
    pub quantity: i32,
}

pub async fn held_conferrals(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<Vec<HeldConferral>> {
    sqlx::query_as!(
        HeldConferral,
        r#"SELECT c.conferral_id, l.name AS "ladder?", ps.rank AS "rank?", p.name AS product,
                c.grant_id AS "grant_id: GrantId", g.kind AS "grant_kind?: GrantKind", s.stripe_subscription_id AS "stripe_subscription_id?",
                i.stripe_item_id AS "stripe_item_id?", c.suspended, c.quantity
         FROM core.conferrals c
         JOIN core.products p ON p.product_id = c.product_id
         LEFT JOIN core.positions ps ON ps.conferral_id = c.conferral_id
         LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
         LEFT JOIN core.grants g ON g.grant_id = c.grant_id
         LEFT JOIN core.subscription_items i ON i.subscription_item_id = c.subscription_item_id
         LEFT JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
         WHERE c.pool_id = $1 AND c.state = 'holding'
         ORDER BY l.sort_order NULLS LAST, l.plan_ladder_id, c.conferral_id"#,
        pool_id as PoolId
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Displaced {
    pub kind: String,
    pub source: String,
    pub product: String,
    pub since: DateTime<Utc>,
}

pub async fn displaced_sources(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
) -> sqlx::Result<Vec<Displaced>> {
    // A UNION's columns come from no table: the first branch's names say they are never null.
    sqlx::query_as!(
        Displaced,
        r#"SELECT 'replaced grant' AS "kind!", 'grant #' || g.grant_id AS "source!", p.name AS "product!",
                g.replaced_at AS "since!"
         FROM core.grants g JOIN core.products p USING (product_id)
         WHERE g.organization_id = $1 AND g.status = 'replaced'
         UNION ALL
         SELECT 'displaced subscription', 'subscription ' || s.stripe_subscription_id || ' item ' || i.stripe_item_id,
                p.name, d.displaced_at
         FROM core.subscription_displacements d
         JOIN core.subscription_items i USING (subscription_item_id)
         JOIN core.subscriptions s USING (subscription_id)
         JOIN core.products p ON p.product_id = i.product_id
         WHERE s.organization_id = $1 AND d.delivered_at IS NULL
         ORDER BY "since!" DESC"#,
        organization_id as OrganizationId
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Usage {
    pub resource_key: ResourceKey,
    pub used: i64,
    pub limit_value: i64,
}

pub async fn usage(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<Vec<Usage>> {
    // A view's columns carry no NOT NULL (these are the usage table's and a coalesce).
    sqlx::query_as!(
        Usage,
        r#"SELECT resource_key AS "resource_key!: ResourceKey", used AS "used!", limit_value AS "limit_value!"
           FROM core.pool_usage WHERE pool_id = $1 ORDER BY resource_key COLLATE "C""#,
        pool_id as PoolId
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Member {
    pub email: String,
    pub role: String,
}

pub async fn members(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<Vec<Member>> {
    sqlx::query_as!(
        Member,
        "SELECT a.email, m.role FROM core.organization_members m JOIN core.accounts a USING (account_id)
         WHERE m.organization_id = $1 ORDER BY m.role DESC, lower(a.email)",
        organization_id as OrganizationId
    )
    .fetch_all(conn)
    .await
}

/// The most seats a member may buy of the product: its row's UPDATE takes the row alone.
pub async fn set_max_quantity(conn: &mut PgConnection, id: ProductId, max_quantity: i32) -> sqlx::Result<bool> {
    let written =
        sqlx::query!("UPDATE core.products SET max_quantity = $2 WHERE product_id = $1", id as ProductId, max_quantity)
            .execute(&mut *conn)
            .await?
            .rows_affected()
            == 1;
    if written {
        crate::db::trace::note(conn, Lock::ProductRow, id.0, Some(id.0)).await?;
    }
    Ok(written)
}

/// The most seats of a product (None: no such product).
pub async fn max_quantity(conn: &mut PgConnection, id: ProductId) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar!("SELECT max_quantity FROM core.products WHERE product_id = $1", id as ProductId)
        .fetch_optional(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_prefix_matches_its_wildcards_and_escape_literally_in_any_case() {
        assert_eq!(lowered_prefix_pattern("Acme"), "acme%");
        assert_eq!(lowered_prefix_pattern(r"50%_Off\"), r"50\%\_off\\%");
    }
}
