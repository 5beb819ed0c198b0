//! Demo data, loaded idempotently by `member-console demo` and `serve --demo`: the demo
//! accounts, a small catalog and topology, and a few organizations.

use crate::{
    db::{Db, TxKind, begin, begin_for},
    ids::{EntitlementSetId, OrgTypeId, ProductId},
    services::{
        auth::{Email, NewPassword, ensure_account},
        entitlements,
        organizations::{self, OrgName},
    },
    states::{GrantKind, GrantStatus},
    store::{accounts, catalog, entitlements::NewGrant},
};

pub const OPERATOR_EMAIL: &str = "operator@example.com";
pub const OPERATOR_PASSWORD: &str = "demo-operator";
pub const MEMBER_EMAIL: &str = "member@example.com";
pub const MEMBER_PASSWORD: &str = "demo-member";
pub const DEMO_ORGANIZATION: &str = "Acme Wikis";

/// A rule: (key, numeric, flag).
type Rule = (&'static str, Option<i64>, Option<bool>);

/// (set and product name, its rules).
const PLANS: &[(&str, &[Rule])] = &[
    ("Free", &[("fedwiki.active_sites", Some(1), None)]),
    ("Basic", &[("fedwiki.active_sites", Some(3), None), ("fedwiki.custom_domain", None, Some(true))]),
    ("Pro", &[("fedwiki.active_sites", Some(10), None), ("fedwiki.custom_domain", None, Some(true))]),
    ("Community support", &[("support.priority", None, Some(false))]),
    ("Priority support", &[("support.priority", None, Some(true))]),
];

/// (resource key, the name members read, its unit): what the demo's keys are called, set while a
/// key still has the name the catalog gives by default (an operator's rename is kept).
const KEY_NAMES: &[(&str, &str, Option<&str>)] = &[
    ("fedwiki.active_sites", "Active sites", None),
    ("fedwiki.custom_domain", "Custom domain", None),
    ("support.priority", "Priority support", None),
];

/// (ladder, display order, its products by rank).
const LADDERS: &[(&str, i32, &[&str])] =
    &[("Wiki hosting", 0, &["Free", "Basic", "Pro"]), ("Support", 1, &["Community support", "Priority support"])];

/// (org type, its default ladder).
const ORG_TYPES: &[(&str, &str)] = &[("Community", "Wiki hosting"), ("Business", "Support")];

/// (organization, its type).
const ORGANIZATIONS: &[(&str, &str)] = &[
    (DEMO_ORGANIZATION, "Community"),
    ("Globex", "Business"),
    ("Initech", "Community"),
    ("Umbrella Wikis", "Community"),
];

/// Create (or reset the passwords of) the demo accounts, and everything else when missing.
pub async fn load(db: &Db) -> anyhow::Result<()> {
    let parse = |e: &str, p: &str| -> anyhow::Result<(Email, NewPassword)> {
        Ok((Email::parse(e).map_err(anyhow::Error::msg)?, NewPassword::parse(p).map_err(anyhow::Error::msg)?))
    };
    let (op_email, op_pw) = parse(OPERATOR_EMAIL, OPERATOR_PASSWORD)?;
    let (m_email, m_pw) = parse(MEMBER_EMAIL, MEMBER_PASSWORD)?;
    let operator = ensure_account(db, &op_email, &op_pw, true).await?;
    let member = ensure_account(db, &m_email, &m_pw, false).await?;

    entitlements::register_providers(db).await?;
    // The seed's catalog and ladders go in on the plain handle, outside the rendezvous (no
    // organization exists that a conferral could be reading for).
    let mut tx = begin(db, TxKind::Plain).await?;
    for (key, name, unit) in KEY_NAMES {
        catalog::name_key_if_unnamed(tx.conn(), &crate::ids::ResourceKey::from(*key), name, *unit).await?;
    }
    for (name, rules) in PLANS {
        let set = match catalog::entitlement_set_id_by_name(tx.conn(), name).await? {
            Some(id) => id,
            None => catalog::insert_entitlement_set(tx.conn(), name).await?.unwrap_or(EntitlementSetId(0)),
        };
        if catalog::rules_of_set(tx.conn(), set).await?.is_empty() {
            for (key, n, f) in *rules {
                catalog::put_rule(tx.conn(), set, &crate::ids::ResourceKey::from(*key), *n, *f).await?;
            }
        }
        if catalog::product_id_by_name(tx.conn(), name).await?.is_none() {
            catalog::insert_product(tx.conn(), name, Some(set), true).await?;
        }
    }
    let mut ladder_ids = vec![];
    for (ladder, order, products) in LADDERS {
        let id = catalog::ensure_ladder(tx.conn(), ladder, *order).await?;
        for (rank, product) in products.iter().enumerate() {
            let p = catalog::product_id_by_name(tx.conn(), product).await?.unwrap_or(ProductId(0));
            catalog::ensure_tier(tx.conn(), id, rank as i32, p).await?;
        }
        ladder_ids.push((*ladder, id));
    }
    let mut type_ids = vec![];
    for (t, ladder) in ORG_TYPES {
        let l = ladder_ids.iter().find(|(n, _)| n == ladder).map(|(_, id)| *id);
        type_ids.push((*t, catalog::ensure_org_type(tx.conn(), t, l).await?));
    }
    tx.commit().await?;

    for (name, t) in ORGANIZATIONS {
        let mut tx = begin_for(db, TxKind::Materializing, &organizations::CREATE_ORGANIZATION_LOCKS).await?;
        let existing = accounts::organization_by_name(tx.conn(), name).await?;
        let org = match existing {
            Some(id) => id,
            None => {
                let type_id = type_ids.iter().find(|(n, _)| n == t).map(|(_, id)| *id);
                let created = organizations::create_organization_tx(
                    &mut tx,
                    &OrgName::parse(name).map_err(anyhow::Error::msg)?,
                    type_id,
                )
                .await?;
                if *name == "Initech" {
                    // An operator grant of Pro, displacing the floor.
                    let pro = catalog::product_id_by_name(tx.conn(), "Pro").await?.unwrap_or(ProductId(0));
                    let grant = NewGrant {
                        organization_id: Some(created.organization_id),
                        product_id: pro,
                        quantity: 1,
                        kind: GrantKind::Operator,
                        status: GrantStatus::Active,
                        starts_at: None,
                        ends_at: None,
                        reason: "Demo: a partner's complimentary plan".into(),
                        created_by: Some(operator),
                        plan_act_id: None,
                        provision_domain: None,
                    };
                    entitlements::confer_grant_tx(&mut tx, &grant).await?;
                }
                created.organization_id
            }
        };
        if *name == DEMO_ORGANIZATION {
            accounts::ensure_membership(tx.conn(), org, member, "owner").await?;
            demo_invitation(&mut tx, org, member).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// The demo owner's pending invitation (issue 38, members): a colleague invited as a member. No
/// mail goes with it and nobody holds its link (its token is random and only its hash is kept):
/// "Send again" on the members page mails a new one, as for any invitation.
pub const DEMO_INVITEE: &str = "colleague@example.com";

async fn demo_invitation(
    tx: &mut crate::db::Tx,
    org: crate::ids::OrganizationId,
    owner: crate::ids::AccountId,
) -> anyhow::Result<()> {
    let token = crate::services::tokens::Token::parse(&crate::config::random_hex(32)).map_err(anyhow::Error::msg)?;
    // Loading the demo again renews it rather than adding another (one pending per email).
    crate::store::invitations::upsert_pending(
        tx.conn(),
        org,
        DEMO_INVITEE,
        "member",
        Some(owner),
        &token.hash(),
        crate::services::invitations::VALID_FOR,
    )
    .await?;
    Ok(())
}

/// Everything `load` does, and the community wikis: what `member-console demo` and
/// `serve --demo` load (tests use `load`, which stays small).
pub async fn load_with_community(db: &Db) -> anyhow::Result<()> {
    load(db).await?;
    let community = {
        let mut conn = db.pool.acquire().await?;
        catalog::org_types(&mut conn).await?.into_iter().find(|t| t.name == "Community").map(|t| t.org_type_id)
    };
    // Sign-up (open in the demo) makes Community organizations, unless an operator chose another.
    if let Some(t) = community
        && crate::services::signup::signup_type(db).await?.is_none()
    {
        crate::services::signup::choose_signup_type(db, t).await?;
    }
    community_wikis(db, community).await
}

/// How many small community wikis the demo has: more than the rule-change sync cap, so a change
/// to the Free set drains in the background and its page shows the progress live.
pub const COMMUNITY_WIKIS: usize = 240;

async fn community_wikis(db: &Db, community: Option<OrgTypeId>) -> anyhow::Result<()> {
    let have = {
        let mut conn = db.pool.acquire().await?;
        accounts::organizations_named_like(&mut conn, "Community Wiki %").await?
    };
    for batch in (have as usize..COMMUNITY_WIKIS).collect::<Vec<_>>().chunks(40) {
        let mut tx = begin_for(db, TxKind::Materializing, &organizations::CREATE_ORGANIZATION_LOCKS).await?;
        for i in batch {
            let name = OrgName::parse(&format!("Community Wiki {:03}", i + 1)).map_err(anyhow::Error::msg)?;
            organizations::create_organization_tx(&mut tx, &name, community).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

pub fn describe() -> String {
    format!(
        "Demo accounts:\n  operator  {OPERATOR_EMAIL}  password {OPERATOR_PASSWORD}\n  member    {MEMBER_EMAIL}  password {MEMBER_PASSWORD}  ({DEMO_ORGANIZATION})"
    )
}

/// The demo's billing, against Stripe's test mode or the stand-in (never a live account): prices
/// for the paid tiers, synced; "Stark Wikis" paying for Pro; "Wayne Wikis" past due on Basic (its
/// card failed at the renewal, on a test clock a month ahead); and "Umbrella Wikis", whose Basic
/// subscription an operator grant of Pro displaces; the demo member owns all three. Idempotent: an
/// organization that already has a subscription is left as it is.
pub async fn load_billing(db: &Db, stripe: &crate::integrations::stripe::Stripe) -> anyhow::Result<()> {
    use crate::services::billing::{
        self,
        catalog_sync::{Amount, Currency, NewPrice},
    };
    let err = |e: crate::services::ServiceError| anyhow::anyhow!("{e}");
    let stripe_err = |e: crate::integrations::stripe::StripeFailure| anyhow::anyhow!("{e}");
    let mut prices = std::collections::HashMap::new();
    for (product, amount) in [("Basic", "12"), ("Pro", "30"), ("Priority support", "50")] {
        let id = {
            let mut conn = db.pool.acquire().await?;
            catalog::product_id_by_name(&mut conn, product).await?
        };
        let Some(id) = id else { continue };
        let existing = {
            let mut conn = db.pool.acquire().await?;
            crate::store::billing::prices_of(&mut conn, id).await?
        };
        if !existing.iter().any(|p| p.active) {
            let yearly = format!("{}", amount.parse::<i64>().unwrap_or(1) * 10);
            for (interval, amount) in [
                (crate::states::BillingInterval::Month, amount),
                (crate::states::BillingInterval::Year, yearly.as_str()),
            ] {
                let price = Amount::parse(amount)
                    .and_then(|a| NewPrice::new(interval, &a, Currency::parse("eur")?))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                billing::set_price(db, id, &price).await.map_err(err)?;
            }
        }
        billing::sync_product(db, id).await.map_err(err)?;
        billing::apply_product_sync(db, stripe, id, "demo").await.map_err(err)?;
        let monthly = {
            let mut conn = db.pool.acquire().await?;
            crate::store::billing::prices_of(&mut conn, id).await?
        }
        .into_iter()
        .find(|p| p.active && p.billing_interval == crate::states::BillingInterval::Month)
        .and_then(|p| p.stripe_price_id);
        if let Some(m) = monthly {
            prices.insert(product, m);
        }
    }
    let community = {
        let mut conn = db.pool.acquire().await?;
        catalog::org_types(&mut conn).await?.into_iter().find(|t| t.name == "Community").map(|t| t.org_type_id)
    };
    for (name, product, story) in
        [("Stark Wikis", "Pro", "paid"), ("Wayne Wikis", "Basic", "past_due"), ("Umbrella Wikis", "Basic", "displaced")]
    {
        let Some(price) = prices.get(product) else { continue };
        let org = {
            let mut tx = begin_for(db, TxKind::Materializing, &organizations::CREATE_ORGANIZATION_LOCKS).await?;
            let org = match accounts::organization_by_name(tx.conn(), name).await? {
                Some(o) => o,
                None => {
                    organizations::create_organization_tx(
                        &mut tx,
                        &OrgName::parse(name).map_err(anyhow::Error::msg)?,
                        community,
                    )
                    .await?
                    .organization_id
                }
            };
            // The demo member owns each, to walk every billing flow: switch and cancel the paid
            // plan, pay the past-due one, resume the displaced one.
            if let Some(member) = accounts::account_by_email(tx.conn(), MEMBER_EMAIL).await? {
                accounts::ensure_membership(tx.conn(), org, member.account_id, "owner").await?;
            }
            tx.commit().await?;
            org
        };
        let has_customer = {
            let mut conn = db.pool.acquire().await?;
            crate::store::billing::customer_of(&mut conn, org).await?.is_some()
        };
        if has_customer {
            continue;
        }
        let now = chrono::Utc::now();
        let clock = match story {
            "past_due" => Some(stripe.create_test_clock(now, "Demo: Wayne Wikis").await.map_err(stripe_err)?),
            _ => None,
        };
        let customer =
            stripe.create_test_customer(org.0, name, "pm_card_visa", clock.as_deref()).await.map_err(stripe_err)?;
        {
            let mut tx = begin(db, TxKind::Plain).await?;
            crate::store::billing::put_customer(tx.conn(), org, &customer).await?;
            tx.commit().await?;
        }
        let sub = stripe.create_subscription(&customer, price, org.0).await.map_err(stripe_err)?;
        billing::reconcile_subscription(db, stripe, &sub).await.map_err(err)?;
        if let Some(clock) = &clock {
            // A month on, the renewal fails: the paid tier stays on its ladder, suspended.
            stripe.set_default_payment_method(&customer, "pm_card_chargeCustomerFail").await.map_err(stripe_err)?;
            stripe.advance_test_clock(clock, now + chrono::Duration::days(32)).await.map_err(stripe_err)?;
            billing::reconcile_subscription(db, stripe, &sub).await.map_err(err)?;
        }
        if story == "displaced" {
            let pro = {
                let mut conn = db.pool.acquire().await?;
                catalog::product_id_by_name(&mut conn, "Pro").await?
            };
            if let Some(pro) = pro {
                let issue = crate::services::grants::IssueGrant {
                    recipient: crate::services::grants::Recipient::Organization(org),
                    product_id: pro,
                    quantity: 1,
                    starts_at: None,
                    ends_at: None,
                    reason: "Demo: a partner's complimentary plan over a paid subscription".into(),
                    actor: None,
                };
                crate::services::grants::issue_grant(db, &issue).await.map_err(err)?;
            }
        }
    }
    Ok(())
}

/// The demo organization's sites on the farm: `handbook`, active, and `notes`, created when
/// the only active slot of its plan (Free) is taken, so parked. Each request runs its workflow
/// here rather than waiting for a worker; a repeat finds the names placed and adds nothing.
pub async fn load_sites(
    db: &Db,
    farm: &crate::integrations::farm::Farm,
    settings: &crate::config::FarmSettings,
) -> anyhow::Result<()> {
    use crate::services::fedwiki::{self, names::SiteName};
    let (who, org) = {
        let mut conn = db.pool.acquire().await?;
        let who = crate::store::accounts::account_by_email(&mut conn, MEMBER_EMAIL).await?.map(|a| a.account_id);
        let org = crate::store::accounts::organization_by_name(&mut conn, DEMO_ORGANIZATION).await?;
        (who, org)
    };
    let (Some(who), Some(org)) = (who, org) else { return Ok(()) };
    for name in ["handbook", "notes"] {
        let name = SiteName::parse(name).map_err(|e| anyhow::anyhow!(e))?;
        match fedwiki::create_site(db, settings, who, org, &name).await {
            Ok(id) => {
                fedwiki::run_site_request(db, farm, id, true).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            // Loaded before: the name is the demo's already.
            Err(crate::services::ServiceError::Invalid(_)) => {}
            Err(e) => return Err(anyhow::anyhow!("{e}")),
        }
    }
    Ok(())
}

/// The demo's own domains (issue 40): "Stark Wikis" (on Pro, which includes custom domains)
/// holds `stark.example`, verified at load through the demo's DNS, and waits on
/// `starkindustries.example`, whose record the page asks for. Every domain a workspace of this
/// database holds has its record published again, so claims made in an earlier run (or before
/// verification existed) hold. Records are set through the local DNS's control endpoint
/// (`local_dns`, its URL), as the page tells a member to; without it (a `DNS_RESOLVER` of the
/// operator's) the demo's claims stay pending, with their records shown.
pub async fn load_domains(
    db: &Db,
    dns: &crate::integrations::dns::Resolver,
    local_dns: Option<&str>,
) -> anyhow::Result<()> {
    use crate::services::fedwiki::{domains, verification};
    let err = |e: crate::services::ServiceError| anyhow::anyhow!("{e}");
    let (who, org) = {
        let mut conn = db.pool.acquire().await?;
        let who = crate::store::accounts::account_by_email(&mut conn, MEMBER_EMAIL).await?.map(|a| a.account_id);
        (who, crate::store::accounts::organization_by_name(&mut conn, "Stark Wikis").await?)
    };
    let (Some(who), Some(org)) = (who, org) else { return Ok(()) };
    for name in ["stark.example", "starkindustries.example"] {
        let domain = crate::ids::SiteDomain::from(name);
        match domains::claim_domain(db, who, org, &domain).await {
            Ok(_) => {}
            // Verified in an earlier run: "already yours".
            Err(crate::services::ServiceError::Invalid(_)) => {}
            // Its plan's entitlements not there yet (billing not loaded): no domain for it.
            Err(crate::services::ServiceError::Refused(why)) => {
                tracing::warn!(reason = %why, "the demo's domains were not claimed");
                return Ok(());
            }
            Err(e) => return Err(err(e)),
        }
    }
    let Some(control) = local_dns else { return Ok(()) };
    let client = reqwest::Client::builder().no_proxy().timeout(std::time::Duration::from_secs(5)).build()?;
    let publish = async |name: &str, token: &str| -> anyhow::Result<()> {
        let url = format!("{}/_dns/records/{name}/txt", control.trim_end_matches('/'));
        let r = client.put(&url).json(&serde_json::json!({ "values": [token] })).send().await?;
        anyhow::ensure!(r.status().is_success(), "the local DNS answered {} to {url}", r.status());
        Ok(())
    };
    let owner = crate::services::fedwiki::registry::workspace_owner(&crate::store::fedwiki::workspace_of(org));
    let stark = crate::ids::SiteDomain::from("stark.example");
    let pending = {
        let mut conn = db.pool.acquire().await?;
        crate::store::domains::pending_claim(&mut conn, &stark, &owner).await?
    };
    if let Some(p) = pending {
        publish(&verification::record_name(&stark), &p.token).await?;
    }
    let held = {
        let mut conn = db.pool.acquire().await?;
        crate::store::domains::verified_tokens(&mut conn).await?
    };
    let now = crate::services::clock::now(db).await.map_err(err)?;
    for (domain, owner, token) in held {
        publish(&verification::record_name(&domain), &token).await?;
        verification::recheck_claim(db, dns, &domain, &owner, now).await.map_err(err)?;
    }
    verification::verify_pending_claim(db, dns, &stark, &owner, now).await.map_err(err)?;
    Ok(())
}

/// The demo connection's name.
pub const DEMO_CONNECTION: &str = "Demo receiver";

/// The demo's one connection, to the receiver the project ships (started by `serve --demo` on a
/// free port): created the first time, pointed at this start's receiver after. Returns the
/// secrets the receiver must accept (the current one, and the previous one while it signs).
pub async fn load_connection(db: &Db, push_url: &str) -> anyhow::Result<Vec<String>> {
    use crate::services::desired_state::connections::{self, NewConnection};
    let existing =
        crate::store::desired_state::live_connections(&db.pool).await?.into_iter().find(|c| c.name == DEMO_CONNECTION);
    let keys = ["fedwiki.active_sites", "fedwiki.custom_domain"].join(", ");
    let form = NewConnection::parse(DEMO_CONNECTION, push_url, &keys, true).map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = match existing {
        Some(c) => {
            connections::update_connection(db, c.connection_id, &form).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            c.connection_id
        }
        None => connections::create_connection(db, &form).await.map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    let c = crate::store::desired_state::connection(&db.pool, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the demo connection vanished"))?;
    let secrets = crate::services::desired_state::dispatch::signing_secrets(&c);
    Ok(secrets.into_iter().map(str::to_string).collect())
}
