//! Grant acts: issue, waiting grants, provisioning by domain, revoke, expire (job and sweep),
//! manage; their lock order; and bad input.

use crate::common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::{
    TestDb,
    acts::{community_org, grant, grant_status, grant_with, operator_grant, product_id, scalar, type_id},
    locks::Expect,
    pages::demo_db,
};
use member_console::{
    db::{TxKind, begin},
    ids::{GrantId, OrganizationId, ProductId, SubscriptionId},
    jobs::{self, Worker},
    services::{
        grants::{self, EmailDomain, IssueGrant, ManageGrant, Recipient},
        organizations::{self as orgs, OrgName},
        refusal::ServiceError,
    },
};

use common::acts::sites;

/// A live subscription of the organization, so reconcile requests have something to name.
async fn subscription(t: &TestDb, org: OrganizationId) -> SubscriptionId {
    t.one(sqlx::query_scalar(
        "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status) VALUES ($1, $2, 'active') RETURNING subscription_id",
    )
    .bind(org)
    .bind(format!("sub_{}", member_console::config::random_hex(4)))).await
}

/// How many `act` events the grant has.
async fn events_of(t: &TestDb, grant: GrantId, act: &str) -> i64 {
    scalar(t, &format!("SELECT count(*) FROM core.grant_events WHERE grant_id = {grant} AND act = '{act}'")).await
}

/// An operator grant of the named product to `org`, ending `after` from now.
async fn grant_ending(t: &TestDb, org: OrganizationId, product: &str, after: chrono::Duration) -> GrantId {
    grant_with(t, org, product_id(t, product).await, 1, Some(Utc::now() + after)).await
}

#[tokio::test]
async fn an_issued_grant_confers_now_requests_reconciles_and_schedules_its_expiry() {
    let t = demo_db().await;
    let org = community_org(&t, "Issued").await;
    let sub = subscription(&t, org.organization_id).await;
    let ends_at = Utc::now() + chrono::Duration::days(30);
    let id = grant_with(&t, org.organization_id, product_id(&t, "Basic").await, 1, Some(ends_at)).await;
    assert_eq!(grant_status(&t, id).await, "active");
    assert_eq!(sites(&t, org.pool_id).await, Some(3));
    let outbox: Vec<SubscriptionId> = t
        .all(sqlx::query_scalar("SELECT subscription_id FROM core.outbox WHERE kind = 'reconcile_subscription'"))
        .await;
    assert_eq!(outbox, vec![sub]);
    let job: (String, bool) = t.one(sqlx::query_as(
        "SELECT kind, abs(extract(epoch FROM run_at - $1)) < 1 FROM integration.jobs WHERE payload->>'grant_id' = $2::text",
    )
    .bind(ends_at)
    .bind(id.to_string())).await;
    assert_eq!(job, ("expire_grant".to_string(), true));
    assert_eq!(events_of(&t, id, "issued").await, 1);
}

#[tokio::test]
async fn a_grant_from_a_later_date_waits_then_starts() {
    let t = demo_db().await;
    let org = community_org(&t, "Later").await;
    let mut g = operator_grant(org.organization_id, product_id(&t, "Pro").await);
    g.starts_at = Some(Utc::now() + chrono::Duration::hours(1));
    let id = grants::issue_grant(&t.db, &g).await.unwrap();
    assert_eq!(grant_status(&t, id).await, "waiting");
    assert_eq!(sites(&t, org.pool_id).await, Some(1), "the floor still holds");
    assert!(!grants::start_waiting_grant(&t.db, id).await.unwrap(), "not before its start");
    t.run(sqlx::query("UPDATE core.grants SET starts_at = now() - interval '1 minute' WHERE grant_id = $1").bind(id))
        .await;
    assert!(grants::start_waiting_grant(&t.db, id).await.unwrap());
    assert_eq!(grant_status(&t, id).await, "active");
    assert_eq!(sites(&t, org.pool_id).await, Some(10));
    assert!(!grants::start_waiting_grant(&t.db, id).await.unwrap(), "starting twice changes nothing");
}

#[tokio::test]
async fn a_domain_grant_waits_for_its_organization_and_confers_when_it_is_created() {
    let t = demo_db().await;
    let g = IssueGrant {
        recipient: Recipient::Domain(EmailDomain::parse("uni.example.edu").unwrap()),
        ..operator_grant(OrganizationId(0), product_id(&t, "Basic").await)
    };
    let id = grants::issue_grant(&t.db, &g).await.unwrap();
    assert_eq!(grant_status(&t, id).await, "waiting");
    let ty = type_id(&t, "Community").await;
    let domain = EmailDomain::parse("uni.example.edu").unwrap();
    let (org, received) =
        orgs::create_organization_with_domain(&t.db, &OrgName::parse("University").unwrap(), Some(ty), Some(&domain))
            .await
            .unwrap();
    assert_eq!(received, 1);
    assert_eq!(grant_status(&t, id).await, "active");
    assert_eq!(sites(&t, org.pool_id).await, Some(3));
    // A second organization cannot claim the same domain.
    let again =
        orgs::create_organization_with_domain(&t.db, &OrgName::parse("Impostor").unwrap(), Some(ty), Some(&domain))
            .await;
    assert!(again.is_err());
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.organizations WHERE name = 'Impostor'").await, 0);
}

#[tokio::test]
async fn revoking_brings_back_what_the_grant_displaced_and_cannot_be_done_twice() {
    let t = demo_db().await;
    let org = community_org(&t, "Revoked").await;
    let basic = grant(&t, org.organization_id, product_id(&t, "Basic").await).await;
    let pro = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    assert_eq!(grant_status(&t, basic).await, "replaced");
    assert_eq!(
        grants::revoke_grant(
            &t.db,
            pro,
            None,
            &member_console::services::grants::Reason::parse("no longer a partner").unwrap()
        )
        .await
        .unwrap(),
        pro
    );
    assert_eq!(grant_status(&t, pro).await, "revoked");
    assert_eq!(grant_status(&t, basic).await, "active");
    assert_eq!(sites(&t, org.pool_id).await, Some(3));
    let e = grants::revoke_grant(&t.db, pro, None, &member_console::services::grants::Reason::parse("again").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Refused(ref m) if m.contains("revoked already")), "{e:?}");
    // Revoking the last one brings the floor back.
    grants::revoke_grant(&t.db, basic, None, &member_console::services::grants::Reason::parse("done").unwrap())
        .await
        .unwrap();
    assert_eq!(sites(&t, org.pool_id).await, Some(1));
    // A floor is not revoked by hand.
    let floor: GrantId = t
        .one(
            sqlx::query_scalar(
                "SELECT grant_id FROM core.grants WHERE organization_id = $1 AND kind = 'floor' AND status = 'active'",
            )
            .bind(org.organization_id),
        )
        .await;
    assert!(matches!(
        grants::revoke_grant(&t.db, floor, None, &member_console::services::grants::Reason::parse("x").unwrap()).await,
        Err(ServiceError::Refused(_))
    ));
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.grant_events WHERE act = 'revoked'").await, 2);
}

async fn make_due(t: &TestDb, grant: GrantId) {
    t.run(sqlx::query(
        "UPDATE core.grants SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 second' WHERE grant_id = $1",
    )
    .bind(grant)).await;
}

#[tokio::test]
async fn an_expired_grant_ends_once_and_the_floor_returns() {
    let t = demo_db().await;
    let org = community_org(&t, "Expiring").await;
    let id = grant_ending(&t, org.organization_id, "Pro", chrono::Duration::days(1)).await;
    assert!(!grants::expire_grant(&t.db, id).await.unwrap(), "not before its end");
    make_due(&t, id).await;
    assert!(grants::expire_grant(&t.db, id).await.unwrap());
    assert!(!grants::expire_grant(&t.db, id).await.unwrap(), "a second expiry changes nothing");
    assert_eq!(grant_status(&t, id).await, "expired");
    assert_eq!(sites(&t, org.pool_id).await, Some(1));
    assert_eq!(events_of(&t, id, "expired").await, 1);
}

#[tokio::test]
async fn managing_an_active_grant_extends_its_lineage_and_a_waiting_one_is_rescheduled() {
    let t = demo_db().await;
    let org = community_org(&t, "Managed").await;
    let first = grant_ending(&t, org.organization_id, "Basic", chrono::Duration::days(10)).await;
    let m = ManageGrant {
        starts_at: None,
        ends_at: Some(grants::GrantTime::parse("2999-01-01T00:00").unwrap().get()),
        quantity: 2,
        reason: "renewed".into(),
        actor: None,
    };
    let second = grants::manage_grant(&t.db, first, &m).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(grant_status(&t, first).await, "ended");
    assert_eq!(grant_status(&t, second).await, "active");
    assert_eq!(sites(&t, org.pool_id).await, Some(6), "the extension's quantity");
    let lineage: Vec<GrantId> = t
        .all(sqlx::query_scalar("SELECT grant_id FROM core.grants WHERE lineage_id = $1 ORDER BY grant_id").bind(first))
        .await;
    assert_eq!(lineage, vec![first, second]);
    // Acting on the old grant acts on the lineage's head.
    let third = grants::manage_grant(
        &t.db,
        first,
        &ManageGrant { starts_at: None, ends_at: None, quantity: 1, reason: "open-ended".into(), actor: None },
    )
    .await
    .unwrap();
    assert_eq!(grant_status(&t, second).await, "ended");
    assert_eq!(grant_status(&t, third).await, "active");

    let mut w = operator_grant(org.organization_id, product_id(&t, "Priority support").await);
    w.starts_at = Some(Utc::now() + chrono::Duration::days(1));
    let waiting = grants::issue_grant(&t.db, &w).await.unwrap();
    let r = ManageGrant {
        starts_at: Some(grants::GrantTime::parse("2999-01-01T00:00").unwrap().get()),
        ends_at: Some(grants::GrantTime::parse("2999-02-01T00:00").unwrap().get()),
        quantity: 3,
        reason: "moved".into(),
        actor: None,
    };
    assert_eq!(grants::manage_grant(&t.db, waiting, &r).await.unwrap(), waiting, "in place");
    let (starts, qty): (chrono::DateTime<Utc>, i32) =
        t.one(sqlx::query_as("SELECT starts_at, quantity FROM core.grants WHERE grant_id = $1").bind(waiting)).await;
    assert_eq!((starts.format("%Y").to_string(), qty), ("2999".into(), 3));
    assert_eq!(grant_status(&t, waiting).await, "waiting");
}

#[tokio::test]
async fn bad_input_is_refused_and_nothing_is_written() {
    let t = demo_db().await;
    let org = community_org(&t, "Careful").await;
    let before = scalar(&t, "SELECT count(*) FROM core.grants WHERE kind <> 'floor'").await;
    let events = scalar(&t, "SELECT count(*) FROM core.grant_events").await;
    let unpublished: ProductId = t
        .one(sqlx::query_scalar(
            "INSERT INTO core.products (name, published) VALUES ('Hidden', false) RETURNING product_id",
        ))
        .await;
    let field = |e: ServiceError| match e {
        ServiceError::Invalid(p) => p[0].0.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        field({
            // The end before the start: the form's cross-field check, before the path.
            let mut p = member_console::services::refusal::Problems::default();
            let at = |t| Some(grants::GrantTime::parse(t).unwrap().get());
            grants::check_bounds(at("2999-02-01T00:00"), at("2999-01-01T00:00"), &mut p);
            p.or(Some(())).unwrap_err()
        }),
        "ends_at"
    );
    assert_eq!(
        field(grants::issue_grant(&t.db, &operator_grant(org.organization_id, ProductId(999_999))).await.unwrap_err()),
        "product_id"
    );
    let e = grants::issue_grant(&t.db, &operator_grant(org.organization_id, unpublished)).await.unwrap_err();
    assert!(e.to_string().contains("not published"), "{e}");
    assert_eq!(
        field(
            grants::issue_grant(&t.db, &operator_grant(OrganizationId(999_999), product_id(&t, "Basic").await))
                .await
                .unwrap_err()
        ),
        "organization_id"
    );
    let g = grant(&t, org.organization_id, product_id(&t, "Basic").await).await;
    grants::revoke_grant(&t.db, g, None, &member_console::services::grants::Reason::parse("once").unwrap())
        .await
        .unwrap();
    let after_valid = scalar(&t, "SELECT count(*) FROM core.grant_events").await;
    assert!(matches!(
        grants::revoke_grant(&t.db, g, None, &member_console::services::grants::Reason::parse("twice").unwrap()).await,
        Err(ServiceError::Refused(_))
    ));
    // A blank reason is refused before the path: it cannot be made.
    assert!(member_console::services::grants::Reason::parse("  ").is_err());
    assert!(matches!(
        grants::revoke_grant(
            &t.db,
            GrantId(999_999),
            None,
            &member_console::services::grants::Reason::parse("who").unwrap()
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
    assert_eq!(
        scalar(&t, "SELECT count(*) FROM core.grants WHERE kind <> 'floor'").await,
        before + 1,
        "only the valid grant was written"
    );
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.grant_events").await, after_valid);
    assert!(after_valid > events);
}

/// Pause a grant act after its locks: its audit insert waits on a table lock the test holds.
async fn pause_audit(t: &TestDb) -> (sqlx::pool::PoolConnection<sqlx::Postgres>, i32) {
    common::pause_on(t, "core.grant_events").await
}

#[tokio::test]
async fn an_expiry_waits_for_a_revocation_of_the_same_grant_and_then_finds_it_revoked() {
    let t = demo_db().await;
    let org = community_org(&t, "Raced").await;
    let id = grant_ending(&t, org.organization_id, "Pro", chrono::Duration::days(1)).await;
    make_due(&t, id).await;
    let (mut pause, pause_pid) = pause_audit(&t).await;
    let db = t.db.clone();
    let revoke = tokio::spawn(async move {
        grants::revoke_grant(&db, id, None, &member_console::services::grants::Reason::parse("first").unwrap()).await
    });
    let revoker = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    let revoking = [
        Expect::rendezvous_shared(),
        Expect::row("core.resource_pools", org.pool_id.0),
        Expect::row("core.grants", id.0),
    ];
    common::locks::assert_holds(&t.admin, revoker, &revoking).await;
    let db = t.db.clone();
    let expire = tokio::spawn(async move { grants::expire_grant(&db, id).await });
    let expirer = common::wait_for_waiter(&t.admin, &t.name, revoker).await;
    // The expiry waits on the revocation for that pool's row.
    common::locks::assert_waits(&t.admin, expirer, revoker, &revoking[1]).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    revoke.await.unwrap().unwrap();
    assert!(!expire.await.unwrap().unwrap(), "the expiry sees the revocation and does nothing");
    assert_eq!(grant_status(&t, id).await, "revoked");
    assert_eq!(events_of(&t, id, "expired").await, 0);
}

#[tokio::test]
async fn a_revocation_waiting_on_a_manage_sees_the_extension_it_committed() {
    let t = demo_db().await;
    let org = community_org(&t, "Extended").await;
    let first = grant(&t, org.organization_id, product_id(&t, "Basic").await).await;
    let (mut pause, pause_pid) = pause_audit(&t).await;
    let db = t.db.clone();
    let manage = tokio::spawn(async move {
        grants::manage_grant(
            &db,
            first,
            &ManageGrant {
                starts_at: None,
                ends_at: Some(grants::GrantTime::parse("2999-01-01T00:00").unwrap().get()),
                quantity: 1,
                reason: "renew".into(),
                actor: None,
            },
        )
        .await
    });
    let manager = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    let managing = [
        Expect::rendezvous_shared(),
        Expect::row("core.resource_pools", org.pool_id.0),
        Expect::row("core.grants", first.0),
    ];
    common::locks::assert_holds(&t.admin, manager, &managing).await;
    let db = t.db.clone();
    let revoke = tokio::spawn(async move {
        grants::revoke_grant(&db, first, None, &member_console::services::grants::Reason::parse("stop").unwrap()).await
    });
    common::wait_for_waiter(&t.admin, &t.name, manager).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    let extension = manage.await.unwrap().unwrap();
    let revoked = revoke.await.unwrap().unwrap();
    assert_eq!(revoked, extension, "the revocation acted on the head the extension made");
    assert_eq!(grant_status(&t, extension).await, "revoked");
    assert_eq!(grant_status(&t, first).await, "ended");
    assert_eq!(sites(&t, org.pool_id).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grants_expiry_job_runs_once_with_two_workers_and_after_a_crashed_worker() {
    let t = demo_db().await;
    let org = community_org(&t, "Jobbed").await;
    let id = grant_ending(&t, org.organization_id, "Pro", chrono::Duration::seconds(2)).await;
    // A worker claims the job when due and dies: its lease must run out before another takes it.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let claimed = jobs::queue::claim(&t.db, "crashed-worker", 10, Duration::from_secs(2)).await.unwrap();
    assert!(claimed.iter().any(|j| j.kind == "expire_grant"), "{claimed:?}");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = vec![];
    for _ in 0..2 {
        let w = Worker::new(t.db.clone(), member_console::job_registry::standard_handlers(), 2);
        workers.push(tokio::spawn(w.run(stop_rx.clone())));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while grant_status(&t, id).await != "expired" {
        assert!(Instant::now() < deadline, "the grant did not expire");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop_tx.send(true);
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(events_of(&t, id, "expired").await, 1);
    assert_eq!(sites(&t, org.pool_id).await, Some(1));
}

#[tokio::test]
async fn the_sweep_expires_a_grant_whose_job_was_lost() {
    let t = demo_db().await;
    let org = community_org(&t, "Swept").await;
    let id = grant_ending(&t, org.organization_id, "Basic", chrono::Duration::days(1)).await;
    t.run(sqlx::query("DELETE FROM integration.jobs")).await;
    make_due(&t, id).await;
    let (expired, _) = grants::sweep_grants(&t.db).await.unwrap();
    assert_eq!(expired, 1);
    assert_eq!(grant_status(&t, id).await, "expired");
}

#[tokio::test]
async fn an_organization_created_while_a_grant_of_its_domain_is_issued_gets_it_once() {
    let t = demo_db().await;
    let ty = type_id(&t, "Community").await;
    // Race the two many times; the grant must end conferred exactly once.
    for i in 0..5 {
        let domain = format!("race{i}.example.org");
        let g = IssueGrant {
            recipient: Recipient::Domain(EmailDomain::parse(&domain).unwrap()),
            ..operator_grant(OrganizationId(0), product_id(&t, "Basic").await)
        };
        let db = t.db.clone();
        let d = EmailDomain::parse(&domain).unwrap();
        let name = format!("Race {i}");
        let (a, b) = tokio::join!(grants::issue_grant(&t.db, &g), async move {
            orgs::create_organization_with_domain(&db, &OrgName::parse(&name).unwrap(), Some(ty), Some(&d)).await
        });
        let id = a.unwrap();
        let (org, _) = b.unwrap();
        // Whichever took the domain first, the other saw it: the grant is conferred exactly once.
        let holding: i64 = t
            .one(
                sqlx::query_scalar("SELECT count(*) FROM core.conferrals WHERE grant_id = $1 AND state = 'holding'")
                    .bind(id),
            )
            .await;
        let (st, owner): (String, Option<OrganizationId>) =
            t.one(sqlx::query_as("SELECT status, organization_id FROM core.grants WHERE grant_id = $1").bind(id)).await;
        assert_eq!((st.as_str(), owner, holding), ("active", Some(org.organization_id), 1), "round {i}");
    }
}

#[tokio::test]
async fn materializing_transactions_see_grants_in_one_rendezvous() {
    // The grant paths open Materializing transactions: a held exclusive rendezvous refuses them.
    let t = demo_db().await;
    let org = community_org(&t, "Refused").await;
    let mut short = t.db.clone();
    short.lock_timeout = Duration::from_millis(200);
    let _hold = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let e = grants::issue_grant(&short, &operator_grant(org.organization_id, product_id(&t, "Basic").await))
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Db(member_console::db::DbError::LockNotAvailable)), "{e:?}");
}
