//! The pages' reads: the operator's catalog, topology, organizations, grants, rule changes and
//! plan acts, and the member's home. Nothing here writes.

use crate::{
    db::{Db, DbError},
    ids::{
        AccountId, EntitlementSetId, GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, ProductId, RuleChangeId,
    },
    states::{GrantStatus, RuleChangeState},
    store::{
        accounts,
        catalog::{self as store, HeldConferral},
        entitlements::{self, EntitlementValue},
        grants,
        paging::{Page, Seek},
        plan_acts, rule_changes, topology,
    },
};

pub use crate::store::catalog::CARRIED_COUNT_CAP;

pub struct CatalogOverview {
    pub keys: Vec<store::KeyRow>,
    pub sets: Vec<store::EntitlementSet>,
    pub rules: Vec<store::Rule>,
    pub products: Vec<store::Product>,
    pub tiers: Vec<store::Tier>,
}

#[tracing::instrument(name = "Read catalog", skip_all)]
pub async fn catalog(db: &Db) -> Result<CatalogOverview, DbError> {
    let mut c = db.read().await?;
    Ok(CatalogOverview {
        keys: store::resource_keys(&mut c).await?,
        sets: store::entitlement_sets(&mut c).await?,
        rules: store::rules(&mut c).await?,
        products: store::products(&mut c).await?,
        tiers: store::tiers(&mut c).await?,
    })
}

pub struct SetDetail {
    pub set: store::EntitlementSet,
    pub rules: Vec<store::Rule>,
    pub keys: Vec<store::KeyRow>,
}

#[tracing::instrument(name = "Read entitlement set", skip_all, fields(id = id.0))]
pub async fn entitlement_set(db: &Db, id: EntitlementSetId) -> Result<Option<SetDetail>, DbError> {
    let mut c = db.read().await?;
    let Some(set) = store::entitlement_set(&mut c, id).await? else { return Ok(None) };
    Ok(Some(SetDetail {
        set,
        rules: store::rules_of_set(&mut c, id).await?,
        keys: store::resource_keys(&mut c).await?,
    }))
}

pub struct ProductDetail {
    pub product: store::Product,
    pub sets: Vec<store::EntitlementSet>,
    pub tiers: Vec<store::Tier>,
}

#[tracing::instrument(name = "Read product", skip_all, fields(id = id.0))]
pub async fn product(db: &Db, id: ProductId) -> Result<Option<ProductDetail>, DbError> {
    let mut c = db.read().await?;
    let Some(product) = store::product(&mut c, id).await? else { return Ok(None) };
    let tiers = store::tiers(&mut c).await?.into_iter().filter(|t| t.product_id == id).collect();
    Ok(Some(ProductDetail { product, sets: store::entitlement_sets(&mut c).await?, tiers }))
}

pub struct Topology {
    pub ladders: Vec<store::Ladder>,
    pub tiers: Vec<store::Tier>,
    pub org_types: Vec<store::OrgType>,
    /// Organizations on each tier, each count stopping past [`CARRIED_COUNT_CAP`].
    pub tier_counts: Vec<topology::TierCount>,
}

#[tracing::instrument(name = "Read topology", skip_all)]
pub async fn topology(db: &Db) -> Result<Topology, DbError> {
    let mut c = db.read().await?;
    Ok(Topology {
        ladders: store::ladders(&mut c).await?,
        tiers: store::tiers(&mut c).await?,
        org_types: store::org_types(&mut c).await?,
        tier_counts: topology::tier_organization_counts(&mut c, CARRIED_COUNT_CAP).await?,
    })
}

pub const ORGANIZATIONS_PER_PAGE: i64 = 50;
/// A search or a filtered list counts its matches up to this many, then says "more than".
pub const SEARCH_COUNT_CAP: i64 = 1000;

/// One page of the organization list and how many organizations match.
pub struct OrganizationList {
    pub page: Page<store::OrgListRow>,
    /// Exactly (`false`), or at least (`true`: the count stopped at the cap).
    pub total: (u64, bool),
}

/// A page of organizations by name, found by key whichever page it is, and the count: for the
/// whole list, from the kept counts; for a search, counted up to a cap. A search that is an
/// organization's id shows that organization first.
#[tracing::instrument(name = "Read organizations", skip_all)]
pub async fn organizations(db: &Db, query: &str, seek: Seek) -> Result<OrganizationList, DbError> {
    let mut c = db.read().await?;
    let q = query.trim();
    let mut page = store::organizations_page(&mut c, q, ORGANIZATIONS_PER_PAGE, seek).await?;
    let mut total = if q.is_empty() {
        (accounts::organization_count(&mut c).await?.max(0) as u64, false)
    } else {
        let n = store::organizations_matching(&mut c, q, SEARCH_COUNT_CAP + 1).await?;
        (n.min(SEARCH_COUNT_CAP) as u64, n > SEARCH_COUNT_CAP)
    };
    if let (Seek::First, Ok(id)) = (seek, q.parse::<i64>().map(OrganizationId))
        && !page.rows.iter().any(|r| r.organization_id == id)
        && let Some(row) = store::organization_row(&mut c, id).await?
    {
        page.rows.insert(0, row);
        total.0 += 1;
    }
    Ok(OrganizationList { page, total })
}

pub struct OrganizationDetail {
    pub facts: store::OrgFacts,
    pub grants: Vec<grants::GrantRow>,
    pub events: Vec<grants::EventRow>,
    pub held: Vec<HeldConferral>,
    pub displaced: Vec<store::Displaced>,
    pub entitlements: Vec<EntitlementValue>,
    pub usage: Vec<store::Usage>,
    /// The names and units of the keys, which the page shows beside them.
    pub labels: Vec<store::KeyLabel>,
    pub members: Vec<store::Member>,
}

#[tracing::instrument(name = "Read organization", skip_all, fields(id = id.0))]
pub async fn organization(db: &Db, id: OrganizationId) -> Result<Option<OrganizationDetail>, DbError> {
    let mut c = db.read().await?;
    let Some(facts) = store::organization(&mut c, id).await? else { return Ok(None) };
    let (held, entitlements, usage) = match facts.pool_id {
        Some(p) => (
            store::held_conferrals(&mut c, p).await?,
            entitlements::pool_entitlements(&mut c, p).await?,
            store::usage(&mut c, p).await?,
        ),
        None => (vec![], vec![], vec![]),
    };
    Ok(Some(OrganizationDetail {
        grants: grants::grants_page(&mut c, None, Some(id), 100, Seek::First).await?.rows,
        events: grants::events_of_organization(&mut c, id, 100).await?,
        displaced: store::displaced_sources(&mut c, id).await?,
        members: store::members(&mut c, id).await?,
        labels: store::key_labels(&mut c).await?,
        facts,
        held,
        entitlements,
        usage,
    }))
}

/// The member's organizations, as their home shows them: one prepared statement, bounded by
/// the request's deadline.
#[tracing::instrument(name = "Read member home", skip_all, fields(account_id = account_id.0))]
pub async fn member_home(db: &Db, account_id: AccountId) -> Result<Vec<accounts::MemberHome>, DbError> {
    crate::db::tx::on_prepared(db, async |c| accounts::member_home(c, account_id).await).await
}

pub const GRANTS_PER_PAGE: i64 = 50;

/// One page of the grant list, how many grants match (counted up to [`SEARCH_COUNT_CAP`]: a
/// `true` says "at least"), and the filtered organization's name.
pub struct GrantList {
    pub page: Page<grants::GrantRow>,
    pub total: (u64, bool),
    pub organization_name: Option<String>,
}

#[tracing::instrument(name = "Read grants", skip_all)]
pub async fn grants(
    db: &Db,
    status: Option<GrantStatus>,
    organization_id: Option<OrganizationId>,
    seek: Seek,
) -> Result<GrantList, DbError> {
    let mut c = db.read().await?;
    let page = grants::grants_page(&mut c, status, organization_id, GRANTS_PER_PAGE, seek).await?;
    let n = grants::grants_matching(&mut c, status, organization_id, SEARCH_COUNT_CAP + 1).await?;
    let organization_name = match organization_id {
        Some(id) => store::organization(&mut c, id).await?.map(|o| o.name),
        None => None,
    };
    Ok(GrantList { page, total: (n.clamp(0, SEARCH_COUNT_CAP) as u64, n > SEARCH_COUNT_CAP), organization_name })
}

pub struct GrantDetail {
    pub grant: grants::GrantRow,
    pub lineage: Vec<grants::GrantRow>,
    pub events: Vec<grants::EventRow>,
}

#[tracing::instrument(name = "Read grant", skip_all, fields(id = id.0))]
pub async fn grant(db: &Db, id: GrantId) -> Result<Option<GrantDetail>, DbError> {
    let mut c = db.read().await?;
    let Some(grant) = grants::grant_row(&mut c, id).await? else { return Ok(None) };
    Ok(Some(GrantDetail {
        lineage: grants::lineage_rows(&mut c, grant.lineage_id).await?,
        events: grants::events_of_lineage(&mut c, grant.lineage_id).await?,
        grant,
    }))
}

#[tracing::instrument(name = "Read published products", skip_all)]
pub async fn published_products(db: &Db) -> Result<Vec<(ProductId, String)>, DbError> {
    let mut c = db.read().await?;
    Ok(grants::published_products(&mut c).await?)
}

#[tracing::instrument(name = "Read org type options", skip_all)]
pub async fn org_type_options(db: &Db) -> Result<Vec<(OrgTypeId, String)>, DbError> {
    let mut c = db.read().await?;
    Ok(store::org_types(&mut c).await?.into_iter().map(|t| (t.org_type_id, t.name)).collect())
}

#[tracing::instrument(name = "Read rule changes", skip_all)]
pub async fn rule_changes(db: &Db) -> Result<(Vec<rule_changes::ChangeRow>, Vec<rule_changes::ActRow>), DbError> {
    let mut c = db.read().await?;
    let changes = rule_changes::changes(&mut c, 200).await?;
    let ids: Vec<RuleChangeId> = changes.iter().map(|x| x.change_id).collect();
    let acts = rule_changes::acts(&mut c, &ids).await?;
    Ok((changes, acts))
}

pub struct RuleChangeDetail {
    pub change: rule_changes::ChangeRow,
    pub acts: Vec<rule_changes::ActRow>,
    pub failures: Vec<rule_changes::FailureRow>,
    /// The pools settled in about the last minute; read only while the change drains.
    pub recent: Option<plan_acts::Recent>,
}

#[tracing::instrument(name = "Read rule change", skip_all, fields(id = id.0))]
pub async fn rule_change(db: &Db, id: RuleChangeId) -> Result<Option<RuleChangeDetail>, DbError> {
    let mut c = db.read().await?;
    let Some(change) = rule_changes::change(&mut c, id).await? else { return Ok(None) };
    let recent = match change.state {
        RuleChangeState::Draining => rule_changes::recent_pools(&mut c, id).await?,
        RuleChangeState::Settled => None,
    };
    Ok(Some(RuleChangeDetail {
        acts: rule_changes::acts(&mut c, &[id]).await?,
        failures: rule_changes::failures(&mut c, id, 200).await?,
        change,
        recent,
    }))
}

/// Published products with an entitlement set: the ones a tier may be.
#[tracing::instrument(name = "Read tier product options", skip_all)]
pub async fn tier_product_options(db: &Db) -> Result<Vec<(ProductId, String)>, DbError> {
    let mut c = db.read().await?;
    Ok(store::tier_product_options(&mut c).await?)
}

/// The names of a ladder and a product, for a preview's sentence.
#[tracing::instrument(name = "Read tier names", skip_all, fields(ladder_id = ladder_id.0, product_id = product_id.0))]
pub async fn tier_names(db: &Db, ladder_id: LadderId, product_id: ProductId) -> Result<(String, String), DbError> {
    let mut c = db.read().await?;
    let ladder = store::ladders(&mut c).await?.into_iter().find(|l| l.plan_ladder_id == ladder_id).map(|l| l.name);
    let product = store::product(&mut c, product_id).await?.map(|p| p.name);
    Ok((ladder.unwrap_or_default(), product.unwrap_or_default()))
}

#[tracing::instrument(name = "Read plan acts", skip_all)]
pub async fn plan_acts(db: &Db) -> Result<Vec<topology::PlanActRow>, DbError> {
    let mut c = db.read().await?;
    Ok(topology::plan_acts(&mut c, 200).await?)
}

#[tracing::instrument(name = "Read plan act", skip_all, fields(id = id.0))]
pub async fn plan_act(db: &Db, id: PlanActId) -> Result<Option<topology::PlanActRow>, DbError> {
    let mut c = db.read().await?;
    Ok(topology::plan_act(&mut c, id).await?)
}

pub struct PlanActProgress {
    /// The act reaches organizations (a default change).
    pub reaches: bool,
    pub listed_all: bool,
    pub counts: plan_acts::Counts,
    pub failures: Vec<plan_acts::Failure>,
    /// The moves of about the last minute; read only while organizations are pending.
    pub recent: Option<plan_acts::Recent>,
}

#[tracing::instrument(name = "Read plan act progress", skip_all, fields(id = id.0))]
pub async fn plan_act_progress(db: &Db, id: PlanActId) -> Result<PlanActProgress, DbError> {
    let mut c = db.read().await?;
    let (reaches, listed_all) = plan_acts::listing_state(&mut c, id).await?;
    let counts = plan_acts::counts(&mut c, id).await?;
    let recent = if counts.pending > 0 { plan_acts::recent_moves(&mut c, id).await? } else { None };
    Ok(PlanActProgress { reaches, listed_all, counts, failures: plan_acts::failures(&mut c, id, 200).await?, recent })
}
