//! The entitlement core's and the catalog's paths, as acts.

use super::*;

pub(in crate::stress) async fn create_organization(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let n = ctx.org_seq.fetch_add(1, Ordering::Relaxed);
    let ty = *rng.pick(&ctx.fx.org_types);
    let name = OrgName::parse(&format!("Stress newcomer {n}")).map_err(Failure::Error)?;
    note.detail = format!("type {ty:?}");
    // Half with the next email domain, so that the grants waiting for it are provisioned.
    let domain = (rng.below(2) == 0).then(|| domain(ctx.domain_seq.fetch_add(1, Ordering::Relaxed)));
    if let Some(d) = &domain {
        note.detail.push_str(&format!(", domain {}", d.as_str()));
    }
    let r = org_svc::create_organization_with_domain(&ctx.db, &name, ty, domain.as_ref()).await;
    if let Ok((c, provisioned)) = &r {
        note.pool = Some(c.pool_id.0);
        if let Some(g) = c.floor_grant_id {
            note.detail.push_str(&format!(", floor grant {g}"));
        }
        if domain.is_some() {
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT grant_id FROM core.grant_events WHERE act = 'provisioned' AND organization_id = $1
                 ORDER BY grant_id",
            )
            .bind(c.organization_id)
            .fetch_all(&ctx.db.pool)
            .await?;
            let ids: Vec<String> = ids.iter().map(|g| format!("grant {g}")).collect();
            note.detail.push_str(&format!(", {provisioned} provisioned [{}]", ids.join(", ")));
        }
    }
    entitlement_outcome(r)
}

pub(in crate::stress) async fn confer_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, _) = hot_pool(ctx, rng, note);
    let (product, name) = rng.pick(&ctx.fx.grantable).clone();
    let quantity = 1 + rng.below(3) as i32;
    let grant = NewGrant {
        organization_id: Some(org),
        product_id: product,
        quantity,
        kind: GrantKind::Operator,
        status: GrantStatus::Active,
        starts_at: None,
        ends_at: None,
        reason: "stress".into(),
        created_by: None,
        plan_act_id: None,
        provision_domain: None,
    };
    let r = ent::confer_grant(&ctx.db, &grant).await;
    note.detail = match &r {
        Ok(g) => format!("{name} x{quantity} as grant {g}"),
        Err(_) => format!("{name} x{quantity}"),
    };
    entitlement_outcome(r)
}

pub(in crate::stress) async fn end_conferral(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    let Some(c) = holding_conferral(ctx, rng, pool).await? else { return Ok(Outcome::Skipped) };
    let r = ent::end_conferral(&ctx.db, c, "stress").await;
    note.detail = match &r {
        Ok(x) => format!(
            "conferral {c}: ended {}, {} grants resumed, {} subscriptions delivered{}",
            x.ended,
            x.resumed_grants,
            x.delivered_subscriptions,
            x.floor_grant_id.map(|g| format!(", floor grant {g}")).unwrap_or_default()
        ),
        Err(_) => format!("conferral {c}"),
    };
    entitlement_outcome(r)
}

pub(in crate::stress) async fn update_conferral_bounds(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    let Some(c) = holding_conferral(ctx, rng, pool).await? else { return Ok(Outcome::Skipped) };
    let quantity = 1 + rng.below(3) as i32;
    note.detail = format!("conferral {c} quantity {quantity}");
    entitlement_outcome(ent::update_conferral_bounds(&ctx.db, c, quantity, None).await)
}

pub(in crate::stress) async fn sync_source_status(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    if ctx.fx.subscriptions.is_empty() {
        return Ok(Outcome::Skipped);
    }
    let i = rng.below(ctx.fx.subscriptions.len());
    let (org, pool) = ctx.fx.hot[i];
    note.pool = Some(pool.0);
    // The organization's newest subscription: ReconcileSubscription replaces one it cancelled.
    let newest: Option<SubscriptionId> =
        sqlx::query_scalar("SELECT max(subscription_id) FROM core.subscriptions WHERE organization_id = $1")
            .bind(org)
            .fetch_one(&ctx.db.pool)
            .await?;
    let sub = newest.unwrap_or(ctx.fx.subscriptions[i]);
    let status = if rng.below(2) == 0 { "suspended" } else { "active" };
    let r = ent::sync_source_status(&ctx.db, sub, status).await;
    note.detail = match &r {
        Ok(n) => format!("subscription {sub} {status}: {n} changed"),
        Err(_) => format!("subscription {sub} {status}"),
    };
    entitlement_outcome(r)
}

pub(in crate::stress) async fn materialize_pool(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    entitlement_outcome(ent::materialize_pool(&ctx.db, pool).await)
}

pub(in crate::stress) async fn register_providers(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    // As a deploy that moves a key to another provider would: half the time a key names someone
    // else first, so the stamp really takes its FOR UPDATE against open entitlement inserts.
    if rng.below(2) == 0 {
        let (_, keys) = rng.pick(ent::PROVIDERS);
        let key = rng.pick(keys).key;
        sqlx::query("UPDATE core.resource_keys SET provider = 'stress-elsewhere' WHERE resource_key = $1")
            .bind(key)
            .execute(&ctx.admin)
            .await?;
        note.detail = format!("after moving {key} away");
    }
    entitlement_outcome(ent::register_providers(&ctx.db).await)
}

/// A provided key renamed back and forth (a numeric key's unit set and cleared with it), so the
/// rename's row lock meets the provider stamps and the entitlement inserts of the same key.
pub(in crate::stress) async fn rename_resource_key(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let (_, keys) = rng.pick(ent::PROVIDERS);
    let k = rng.pick(keys);
    let key = crate::ids::ResourceKey::from(k.key);
    let current = {
        let mut c = ctx.db.pool.acquire().await?;
        catalog_store::key_labels(&mut c).await?.into_iter().find(|l| l.resource_key == k.key)
    };
    let Some(current) = current else { return Err(Failure::Error(format!("the key {} is gone", k.key))) };
    let renamed = current.name.ends_with(" (renamed)");
    let base = current.name.trim_end_matches(" (renamed)").to_string();
    let name = if renamed { base } else { format!("{base} (renamed)") };
    let unit = (k.kind == crate::states::KeyKind::Numeric && !renamed).then_some("units");
    note.detail = format!("{} → {name:?}, unit {unit:?}", k.key);
    let name = catalog_svc::KeyDisplayName::parse(&name).map_err(Failure::Error)?;
    let unit = catalog_svc::KeyUnit::parse(unit.unwrap_or_default()).map_err(Failure::Error)?;
    catalog_outcome(catalog_svc::rename_resource_key(&ctx.db, &key, &name, &unit).await)
}

pub(in crate::stress) async fn update_product(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let current = {
        let mut c = ctx.db.pool.acquire().await?;
        catalog_store::product(&mut c, ctx.fx.addon).await?
    };
    let Some(p) = current else { return Err(Failure::Error("the add-on product is gone".into())) };
    let name = if p.name == ADDON { ADDON_RENAMED } else { ADDON };
    note.detail = format!("product {} → {name:?}, published {}", p.product_id, !p.published);
    let name = catalog_svc::ProductName::parse(name).map_err(Failure::Error)?;
    catalog_outcome(catalog_svc::update_product(&ctx.db, p.product_id, &name, p.entitlement_set_id, !p.published).await)
}

pub(in crate::stress) async fn change_product_set(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let current = {
        let mut c = ctx.db.pool.acquire().await?;
        catalog_store::product(&mut c, ctx.fx.uncarried).await?
    };
    let Some(p) = current else { return Err(Failure::Error("the uncarried product is gone".into())) };
    let [a, b] = ctx.fx.uncarried_sets;
    let to = if p.entitlement_set_id == Some(a) { b } else { a };
    note.detail = format!("product {} set {:?} → {to}", p.product_id, p.entitlement_set_id);
    let name = catalog_svc::ProductName::parse(&p.name).map_err(Failure::Error)?;
    catalog_outcome(catalog_svc::update_product(&ctx.db, p.product_id, &name, Some(to), p.published).await)
}
