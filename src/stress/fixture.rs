//! The fixture: the demo, the products, sets, ladders and organizations the paths act on.

use super::*;
use crate::bench::id_of;

pub(super) struct Fixture {
    /// (organization, default pool) the tasks share.
    pub(super) hot: Vec<(OrganizationId, PoolId)>,
    /// (product, name) an operator may grant.
    pub(super) grantable: Vec<(ProductId, String)>,
    /// The types a new organization gets: Community, Business, or none.
    pub(super) org_types: Vec<Option<OrgTypeId>>,
    /// A product that is no tier, renamed and (un)published by UpdateProduct.
    pub(super) addon: ProductId,
    /// A product no pool carries, whose set switches between the two sets below.
    pub(super) uncarried: ProductId,
    pub(super) uncarried_sets: [EntitlementSetId; 2],
    /// The shared organizations' first subscriptions (one item each), for suspension to act on.
    pub(super) subscriptions: Vec<SubscriptionId>,
    /// The organizations billed through the stand-in: the shared ones with a subscription, and
    /// one in ten of the rest (at least five in all when there are so many).
    pub(super) subscribers: Vec<Subscriber>,
    /// The products with prices in Stripe, whose prices and sync the catalog sync path changes;
    /// the add-on last (priced by the run, renamed by UpdateProduct).
    pub(super) priced: Vec<ProductId>,
    /// The sets the organizations carry, whose rules the rule changes edit.
    pub(super) carried_sets: Vec<CarriedSet>,
    /// The ladder the tier acts change: its tiers are stress products, in and out.
    pub(super) stress_ladder: LadderId,
    /// The ladder the stress type's default flips to and back (the stress ladder's other).
    pub(super) wiki_ladder: LadderId,
    /// The org type whose default the default changes flip, and which the reorders reach.
    pub(super) stress_type: OrgTypeId,
    /// The products the tier acts add, delete, remove and reorder on the stress ladder.
    pub(super) tier_products: Vec<(ProductId, &'static str)>,
}

/// A carried set and the values a rule change gives it: the site limit one of `sites` (empty:
/// no rule), the flag `flag` yes or no.
pub(super) struct CarriedSet {
    pub(super) id: EntitlementSetId,
    pub(super) name: &'static str,
    pub(super) sites: &'static [&'static str],
    pub(super) flag: &'static str,
}

/// An organization billed through the stand-in: its customer, the two products its subscription
/// switches between, and its current subscription.
pub(super) struct Subscriber {
    pub(super) org: OrganizationId,
    pub(super) pool: PoolId,
    pub(super) customer: crate::ids::StripeCustomerId,
    /// Basic and Pro; Priority support and the stress bundle for a Business organization (its
    /// default ladder is Support).
    pub(super) products: [ProductId; 2],
    /// Its Stripe subscription. Held while an act changes it in the stand-in, so that one act at
    /// a time decides to subscribe again after a cancellation (the reconciles run unheld).
    pub(super) current: tokio::sync::Mutex<crate::ids::StripeSubscriptionId>,
}

/// The monthly prices (EUR) the fixture sets and syncs: (product, amount).
pub(super) const PRICES: &[(&str, &str)] =
    &[("Basic", "10"), ("Pro", "30"), ("Priority support", "15"), ("Stress bundle", "50")];
/// One organization in this many (beyond the shared ones) is billed, and at least this many in all.
pub(super) const BILLED_ONE_IN: usize = 10;
pub(super) const MIN_SUBSCRIBERS: usize = 5;

/// The demo's sets: Free and Community support are the floors of nearly every organization
/// (their changes owe many pools, and drain when above the cap), Basic, Pro and Priority
/// support are held by the shared organizations (few pools).
pub(super) const CARRIED_SETS: &[(&str, &[&str], &str)] = &[
    ("Free", &["1", "2", "3"], "fedwiki.custom_domain"),
    ("Basic", &["3", "4", "6"], "fedwiki.custom_domain"),
    ("Pro", &["8", "10", "12"], "fedwiki.custom_domain"),
    ("Community support", &["", "1"], "support.priority"),
    ("Priority support", &["", "1", "2"], "support.priority"),
];

pub(super) const ADDON: &str = "Stress add-on";
pub(super) const ADDON_RENAMED: &str = "Stress add-on (renamed)";

/// The stress ladder's products, (name, rules): the first two its tiers at the start (its floor
/// and a step), the third added by AddTier; the third is also granted (so that a removal has
/// holders, and an add meets collisions). Every one can be added, deleted, removed, reordered.
pub(super) const TIER_PRODUCTS: &[(&str, &[(&str, &str)])] = &[
    ("Stress base", &[("fedwiki.active_sites", "1"), ("support.priority", "no")]),
    ("Stress step", &[("fedwiki.active_sites", "5")]),
    ("Stress tier", &[("fedwiki.active_sites", "7"), ("support.priority", "yes")]),
];
pub(super) const STRESS_LADDER: &str = "Stress ladder";
pub(super) const STRESS_TYPE: &str = "Stress type";

pub(super) async fn build_fixture(
    db: &Db,
    admin: &PgPool,
    stripe: &Stripe,
    orgs: usize,
    rng: &mut Rng,
) -> anyhow::Result<Fixture> {
    demo::load(db).await.context("loading the demo data")?;
    let mut grantable = vec![];
    for name in ["Free", "Basic", "Pro", "Community support", "Priority support"] {
        grantable.push((product_id(db, name).await?, name.to_string()));
    }
    // An add-on (no ladder: it stacks on the plan) and a bundle that is a tier of both ladders,
    // so that a conferral displaces whole holders and vacates ladders it does not take.
    let addon = product_with_rules(db, ADDON, &[("fedwiki.active_sites", "2")], true).await?;
    let bundle =
        product_with_rules(db, "Stress bundle", &[("fedwiki.active_sites", "20"), ("support.priority", "yes")], true)
            .await?;
    add_top_tier(db, admin, "Wiki hosting", bundle).await?;
    add_top_tier(db, admin, "Support", bundle).await?;
    grantable.push((bundle, "Stress bundle".into()));
    grantable.push((addon, ADDON.into()));

    let uncarried = product_with_rules(db, "Stress uncarried", &[("fedwiki.active_sites", "4")], false).await?;
    let set_a = set_of(db, uncarried).await?;
    let set_b = catalog_svc::create_entitlement_set(db, &set_name("Stress uncarried B")?).await?;
    put_rules(db, set_b, &[("fedwiki.active_sites", "5"), ("support.priority", "yes")]).await?;
    let mut carried_sets = vec![];
    for (name, sites, flag) in CARRIED_SETS {
        let mut c = db.pool.acquire().await?;
        let id = catalog_store::entitlement_set_id_by_name(&mut c, name)
            .await?
            .with_context(|| format!("the demo has no set {name}"))?;
        carried_sets.push(CarriedSet { id, name, sites, flag });
    }

    // The tier acts' catalog: a ladder of stress products, and an org type defaulting to it,
    // whose default flips between it and Wiki hosting. Set up on the plain handle, before any
    // organization, as the demo's seed does.
    let mut tier_products = vec![];
    for (name, r) in TIER_PRODUCTS {
        tier_products.push((product_with_rules(db, name, r, true).await?, *name));
    }
    let (stress_ladder, stress_type) = {
        let mut tx = begin(db, TxKind::Plain).await?;
        let ladder = catalog_store::ensure_ladder(tx.conn(), STRESS_LADDER, 2).await?;
        for (rank, (product, _)) in tier_products.iter().take(2).enumerate() {
            catalog_store::ensure_tier(tx.conn(), ladder, rank as i32, *product).await?;
        }
        let ty = catalog_store::ensure_org_type(tx.conn(), STRESS_TYPE, Some(ladder)).await?;
        tx.commit().await?;
        (ladder, ty)
    };
    let wiki_ladder =
        LadderId(id_of(admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Wiki hosting").await?);
    grantable.push((tier_products[2].0, tier_products[2].1.to_string()));

    let org_type = "SELECT org_type_id FROM core.org_types WHERE name = $1";
    let community = OrgTypeId(id_of(admin, org_type, "Community").await?);
    let business = OrgTypeId(id_of(admin, org_type, "Business").await?);
    // Two of the shared organizations (the 5th and 6th) are of the stress type.
    let org_types = vec![Some(community), Some(business), Some(community), None, Some(stress_type), Some(stress_type)];
    eprintln!("stress: creating {orgs} organizations");
    let mut hot = vec![];
    let mut fragile = vec![];
    // (organization, pool, is of the Business type) of those billed beyond the shared ones.
    let mut billed = vec![];
    for i in 0..orgs {
        let name = OrgName::parse(&format!("Stress organization {i}")).map_err(anyhow::Error::msg)?;
        let ty = org_types[i % org_types.len()];
        let created = org_svc::create_organization(db, &name, ty).await?;
        if hot.len() < HOT_ORGS {
            hot.push((created.organization_id, created.pool_id));
        } else if (i - HOT_ORGS).is_multiple_of(BILLED_ONE_IN) || SUBSCRIPTIONS + billed.len() < MIN_SUBSCRIBERS {
            billed.push((created.organization_id, created.pool_id, ty == Some(business)));
        }
        // The first two of the stress type past the first shared one: a shared pool, and not.
        if ty == Some(stress_type) && i > HOT_ORGS - 2 && fragile.len() < FRAGILE_POOLS {
            fragile.push(created.pool_id);
        }
    }
    make_moves_fragile(admin, &fragile).await?;
    // Monthly prices for the subscribed products, made in Stripe as the outbox would.
    let mut priced = vec![];
    for (name, amount) in PRICES {
        let product = product_id(db, name).await?;
        let price = Amount::parse(amount)
            .and_then(|a| NewPrice::new(crate::states::BillingInterval::Month, &a, Currency::parse("eur")?))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        billing::set_price(db, product, &price).await.map_err(|e| anyhow::anyhow!("a price for {name}: {e}"))?;
        billing::sync_product(db, product).await.map_err(|e| anyhow::anyhow!("syncing {name}: {e}"))?;
        billing::apply_product_sync(db, stripe, product, "stress-setup")
            .await
            .map_err(|e| anyhow::anyhow!("syncing {name} to the stand-in: {e}"))?;
        priced.push(product);
    }
    let [basic, pro, priority, bundle] = [priced[0], priced[1], priced[2], priced[3]];
    priced.push(addon);
    let mut subscriptions = vec![];
    let mut subscribers = vec![];
    eprintln!("stress: subscribing {} organizations in the stand-in", SUBSCRIPTIONS.min(hot.len()) + billed.len());
    for (i, (org, pool)) in hot.iter().take(SUBSCRIPTIONS).enumerate() {
        // Business organizations default to Support: a Priority support subscription sits on
        // their default ladder, as Basic does on a Community organization's.
        let business = org_types[i % org_types.len()] == Some(business);
        let products = if business { [priority, bundle] } else { [basic, pro] };
        let (s, id) = subscribe(db, admin, stripe, *org, *pool, products, products[0]).await?;
        subscriptions.push(id);
        subscribers.push(s);
    }
    for (org, pool, business) in billed {
        let products = if business { [priority, bundle] } else { [basic, pro] };
        let first = products[rng.below(2)];
        subscribers.push(subscribe(db, admin, stripe, org, pool, products, first).await?.0);
    }
    Ok(Fixture {
        hot,
        grantable,
        org_types,
        addon,
        uncarried,
        uncarried_sets: [set_a, set_b],
        subscriptions,
        subscribers,
        priced,
        carried_sets,
        stress_ladder,
        wiki_ladder,
        stress_type,
        tier_products,
    })
}

/// The moves of these pools fail on their first attempt, every act: a trigger of the stress
/// database raises `MOVE_FAILURE` when a move settles the obligation of one of them that has no
/// attempt yet, so the move rolls back, the drain records the failure (attempts 1), and once
/// RetryPlanAct has made it pending again the next move settles it (attempts 2). Only a move
/// settles an obligation (a listing's supersession and a failure's record are not settlings), so
/// no other path meets the trigger.
pub(super) async fn make_moves_fragile(admin: &PgPool, pools: &[PoolId]) -> anyhow::Result<()> {
    if pools.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = pools.iter().map(|p| p.to_string()).collect();
    eprintln!("stress: the moves of pools {} fail on their first attempt", list.join(", "));
    let sql = format!(
        "CREATE FUNCTION public.stress_fragile_move() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.pool_id IN ({}) AND OLD.attempts = 0 THEN
                 RAISE EXCEPTION '{MOVE_FAILURE}';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER stress_fragile_move BEFORE UPDATE OF state ON core.plan_act_obligations FOR EACH ROW
             WHEN (OLD.state = 'pending' AND NEW.state IN ('migrated', 'grandfathered', 'vacant'))
             EXECUTE FUNCTION public.stress_fragile_move();",
        list.join(", ")
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await.context("making the fragile pools' moves fail")?;
    Ok(())
}

pub(super) fn rules(pairs: &[(&str, &str)]) -> BTreeMap<crate::ids::ResourceKey, catalog_svc::RuleEntry> {
    pairs
        .iter()
        .map(|(k, v)| {
            (crate::ids::ResourceKey::from(*k), catalog_svc::RuleEntry::parse(v).unwrap_or_else(|e| panic!("{e}")))
        })
        .collect()
}

/// A product with a set of its own (named as the product) holding `rules`.
pub(super) async fn product_with_rules(
    db: &Db,
    name: &str,
    r: &[(&str, &str)],
    published: bool,
) -> anyhow::Result<ProductId> {
    let set = catalog_svc::create_entitlement_set(db, &set_name(name)?).await?;
    put_rules(db, set, r).await?;
    let name = catalog_svc::ProductName::parse(name).map_err(anyhow::Error::msg)?;
    Ok(catalog_svc::create_product(db, &name, Some(set), published).await?)
}

fn set_name(name: &str) -> anyhow::Result<catalog_svc::SetName> {
    catalog_svc::SetName::parse(name).map_err(anyhow::Error::msg)
}

/// A new set's rules, as every edit of rules is made: a rule change (no pool carries the set
/// yet, so it owes none and is settled in its commit).
pub(super) async fn put_rules(db: &Db, set: EntitlementSetId, r: &[(&str, &str)]) -> anyhow::Result<()> {
    rc::commit_rule_change_batch(db, set, &rules(r), None, &"stress setup".into(), rc::DEFAULT_SYNC_CAP).await?;
    Ok(())
}

pub(super) async fn product_id(db: &Db, name: &str) -> anyhow::Result<ProductId> {
    let mut c = db.pool.acquire().await?;
    catalog_store::product_id_by_name(&mut c, name).await?.with_context(|| format!("the demo has no product {name}"))
}

pub(super) async fn set_of(db: &Db, product: ProductId) -> anyhow::Result<EntitlementSetId> {
    let mut c = db.pool.acquire().await?;
    let p = catalog_store::product(&mut c, product).await?.context("the product just made")?;
    p.entitlement_set_id.context("the product just made has a set")
}

/// Make `product` the new top tier of `ladder` (setup, before any conferral of it).
pub(super) async fn add_top_tier(db: &Db, admin: &PgPool, ladder: &str, product: ProductId) -> anyhow::Result<()> {
    let (id, top): (LadderId, i32) = sqlx::query_as(
        "SELECT l.plan_ladder_id, coalesce(max(t.rank), -1) FROM core.plan_ladders l
         LEFT JOIN core.plan_ladder_tiers t USING (plan_ladder_id) WHERE l.name = $1 GROUP BY l.plan_ladder_id",
    )
    .bind(ladder)
    .fetch_one(admin)
    .await?;
    let mut tx = begin(db, TxKind::Plain).await?;
    catalog_store::ensure_tier(tx.conn(), id, top + 1, product).await?;
    tx.commit().await?;
    Ok(())
}

/// A customer paying with a card that works and a subscription to `product` made in the stand-in
/// (as a checkout would make them), and its first reconcile, which confers its provision.
pub(super) async fn subscribe(
    db: &Db,
    admin: &PgPool,
    stripe: &Stripe,
    org: OrganizationId,
    pool: PoolId,
    products: [ProductId; 2],
    product: ProductId,
) -> anyhow::Result<(Subscriber, SubscriptionId)> {
    let customer = stripe
        .create_test_customer(org.0, &format!("Stress organization {org}"), "pm_card_visa", None)
        .await
        .map_err(|e| anyhow::anyhow!("a customer for organization {org}: {e}"))?;
    let mut tx = begin(db, TxKind::Plain).await?;
    billing_store::put_customer(tx.conn(), org, &customer).await?;
    tx.commit().await?;
    let price = stripe_price_of(admin, product).await?.context("a synced price")?;
    let sub = stripe
        .create_subscription(&customer, &price, org.0)
        .await
        .map_err(|e| anyhow::anyhow!("a subscription for organization {org}: {e}"))?;
    let id = match billing::reconcile_subscription(db, stripe, &sub).await {
        Ok(billing::Reconciled::Converged { subscription_id, status: SubscriptionStatus::Active, .. }) => {
            subscription_id
        }
        other => anyhow::bail!("the first reconcile of {sub} (organization {org}) gave {other:?}"),
    };
    let s = Subscriber { org, pool, customer, products, current: tokio::sync::Mutex::new(sub) };
    Ok((s, id))
}

/// The Stripe id of the product's newest price that Stripe sells (archived in the console but
/// not yet in Stripe still sells; one archived in Stripe does not), if any.
pub(super) async fn stripe_price_of(
    db: &PgPool,
    product: ProductId,
) -> Result<Option<crate::ids::StripePriceId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT stripe_price_id FROM billing.prices
         WHERE product_id = $1 AND stripe_price_id IS NOT NULL AND stripe_active
         ORDER BY price_id DESC LIMIT 1",
    )
    .bind(product)
    .fetch_optional(db)
    .await
}
