//! Row-level walks (issue 36) of the platform's own paths, declared in `src/lock_paths.rs` beside
//! the spec's 63: signing in, creating an organization (with an email domain and without),
//! claiming due jobs, firing due schedules, compacting the organization counts and sampling the
//! overview's figures. Each runs the service function a member, an operator, a worker or the
//! sampler reaches, paused after each lock it takes, and asserts what it holds and that a probe
//! waits on it for that very row or key (`tests/it/common/locks.rs`); then what the path did. The
//! SKIP LOCKED claims show a second claimer skips the rows the first holds, and never waits.

use crate::common;

use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use common::{
    TestDb,
    acts::{grant_status, operator_grant, product_id, type_id},
    locks::{Expect, LockWalk, RowMode, Step, walk},
    pages::demo_db,
};
use member_console::{
    demo,
    ids::OrganizationId,
    jobs::{
        queue::{self, NewJob},
        schedule,
    },
    services::{
        auth::{self, AuthError, Email},
        grants::{self, EmailDomain, IssueGrant, Recipient},
        observability,
        organizations::{self as orgs, OrgName},
    },
};

/// The ids the administrator reads for `sql`'s rows (one text column), in its order.
async fn ids(t: &TestDb, sql: &str) -> Vec<String> {
    t.all(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))).await
}

// Sign in ---------------------------------------------------------------------------------------------

const ADDRESS: &str = "192.0.2.7";

fn address_row() -> Expect {
    Expect::row("core.sign_in_addresses", ADDRESS)
}

fn pair_row() -> Expect {
    Expect::row("core.sign_in_throttle", format!("{},{ADDRESS}", demo::MEMBER_EMAIL))
}

/// A failed attempt from the address already: both rows exist before the walked attempt runs.
async fn one_failure(t: &TestDb) -> Email {
    let email = Email::parse(demo::MEMBER_EMAIL).unwrap();
    let e = auth::sign_in(&t.db, &email, "not the password", ADDRESS, None).await.unwrap_err();
    assert!(matches!(e, AuthError::InvalidCredentials), "{e:?}");
    email
}

#[tokio::test]
async fn a_sign_in_walked_lock_by_lock_takes_the_address_row_then_the_email_and_address_row() {
    let t = demo_db().await;
    let email = one_failure(&t).await;
    let out = LockWalk::run(&t, &auth::SIGN_IN_LOCKS, &[address_row(), pair_row()], |db| async move {
        auth::sign_in(&db, &email, "still not the password", ADDRESS, None).await
    })
    .await;
    assert!(matches!(out, Err(AuthError::InvalidCredentials)), "{out:?}");
    let failures: (i32, i32) = t
        .one(
            sqlx::query_as(
                "SELECT (SELECT failures FROM core.sign_in_addresses WHERE address = $1),
                        (SELECT failures FROM core.sign_in_throttle WHERE address = $1)",
            )
            .bind(ADDRESS),
        )
        .await;
    assert_eq!(failures, (2, 2), "the walked attempt was counted on both rows");
}

#[tokio::test]
async fn a_right_sign_in_walked_lock_by_lock_takes_the_address_row_then_the_email_and_address_row_then_clears_them() {
    let t = demo_db().await;
    let email = one_failure(&t).await;
    let out = LockWalk::run(&t, &auth::SIGN_IN_LOCKS, &[address_row(), pair_row()], |db| async move {
        auth::sign_in(&db, &email, demo::MEMBER_PASSWORD, ADDRESS, None).await
    })
    .await;
    let session = out.unwrap();
    assert_eq!(session.account.email, demo::MEMBER_EMAIL);
    // The verified attempt gave its count back and forgot the pair, in a transaction of its own.
    let (address_failures, pairs): (i32, i64) = t
        .one(
            sqlx::query_as(
                "SELECT (SELECT failures FROM core.sign_in_addresses WHERE address = $1),
                        (SELECT count(*) FROM core.sign_in_throttle WHERE address = $1)",
            )
            .bind(ADDRESS),
        )
        .await;
    assert_eq!((address_failures, pairs), (1, 0));
}

#[tokio::test]
async fn a_sign_in_from_an_address_over_its_limit_walked_lock_by_lock_takes_only_the_address_row() {
    let t = demo_db().await;
    let email = one_failure(&t).await;
    t.run(
        sqlx::query("UPDATE core.sign_in_addresses SET failures = $2 WHERE address = $1")
            .bind(ADDRESS)
            .bind(auth::MAX_ADDRESS_FAILURES),
    )
    .await;
    let out = LockWalk::run(&t, &auth::SIGN_IN_LOCKS, &[address_row()], |db| async move {
        auth::sign_in(&db, &email, demo::MEMBER_PASSWORD, ADDRESS, None).await
    })
    .await;
    assert!(matches!(out, Err(AuthError::Throttled { .. })), "{out:?}");
    let pair_failures: i32 =
        t.one(sqlx::query_scalar("SELECT failures FROM core.sign_in_throttle WHERE address = $1").bind(ADDRESS)).await;
    assert_eq!(pair_failures, 1, "the refused attempt did not reach the pair's row");
}

// Create an organization ------------------------------------------------------------------------------

#[tokio::test]
async fn an_organization_created_without_an_email_domain_walked_lock_by_lock_takes_the_rendezvous_then_its_types_row_for_key_share_then_its_own_pool_row()
 {
    let t = demo_db().await;
    let ty = type_id(&t, "Community").await;
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(Expect::row_in("core.org_types", ty.0, RowMode::KeyShare)),
        // The pool row: the new organization's default pool, inserted by this transaction.
        Step::Own("the new pool's row"),
    ];
    let (created, received) = walk(&t, &orgs::CREATE_ORGANIZATION_LOCKS, &steps, |db| async move {
        orgs::create_organization_with_domain(&db, &OrgName::parse("Walked").unwrap(), Some(ty), None).await
    })
    .await
    .unwrap();
    assert_eq!(received, 0);
    assert!(created.floor_grant_id.is_some(), "the Community type's floor was conferred");
    let pool: i64 = t
        .one(
            sqlx::query_scalar("SELECT pool_id FROM core.resource_pools WHERE organization_id = $1 AND is_default")
                .bind(created.organization_id.0),
        )
        .await;
    assert_eq!(pool, created.pool_id.0);
}

#[tokio::test]
async fn an_organization_created_with_an_email_domain_walked_lock_by_lock_takes_the_rendezvous_then_the_domains_lock_then_its_types_row_then_its_own_pool_row_then_the_waiting_grants()
 {
    let t = demo_db().await;
    let ty = type_id(&t, "Community").await;
    let domain = EmailDomain::parse("walk.example.edu").unwrap();
    let basic = product_id(&t, "Basic").await;
    let mut waiting = vec![];
    for _ in 0..2 {
        let g = IssueGrant { recipient: Recipient::Domain(domain.clone()), ..operator_grant(OrganizationId(0), basic) };
        waiting.push(grants::issue_grant(&t.db, &g).await.unwrap());
    }
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(Expect::advisory(member_console::db::keys::AdvisoryKey::ProvisionDomain(
            domain.as_str().to_string(),
        ))),
        Step::Lock(Expect::row_in("core.org_types", ty.0, RowMode::KeyShare)),
        // The pool row: the new organization's default pool, inserted by this transaction.
        Step::Own("the new pool's row"),
        // The waiting grants, taken in grant order by one UPDATE (spec rule 4: after the pool row).
        Step::Rows(waiting.iter().map(|g| Expect::row("core.grants", g.0)).collect()),
    ];
    let d = domain.clone();
    let (created, received) = walk(&t, &orgs::CREATE_ORGANIZATION_LOCKS, &steps, |db| async move {
        orgs::create_organization_with_domain(&db, &OrgName::parse("Walked University").unwrap(), Some(ty), Some(&d))
            .await
    })
    .await
    .unwrap();
    assert_eq!(received, 2);
    // Both conferred, on one ladder: one holds the place, the other is replaced by it.
    let mut statuses = vec![];
    for &g in &waiting {
        statuses.push(grant_status(&t, g).await);
    }
    statuses.sort();
    assert_eq!(statuses, ["active", "replaced"]);
    for g in waiting {
        let owner: Option<i64> =
            t.one(sqlx::query_scalar("SELECT organization_id FROM core.grants WHERE grant_id = $1").bind(g.0)).await;
        assert_eq!(owner, Some(created.organization_id.0));
    }
}

// Claim due jobs --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_job_claim_walked_lock_by_lock_takes_its_due_jobs_in_one_skip_locked_statement_and_a_second_claimer_skips_them()
 {
    let t = TestDb::new().await;
    let mut c = t.db.pool.acquire().await.unwrap();
    for _ in 0..2 {
        queue::enqueue(&mut c, NewJob::new("walk.claimed", serde_json::json!({}))).await.unwrap();
    }
    drop(c);
    let due = ids(
        &t,
        "SELECT job_id::text FROM integration.jobs WHERE state = 'pending' AND run_at <= now() ORDER BY run_at, job_id",
    )
    .await;
    assert_eq!(due.len(), 2, "{due:?}");
    let rows: Vec<Expect> = due.iter().map(|id| Expect::row("integration.jobs", id)).collect();
    // The first worker, paused after its claim (one statement locks every due job).
    let mut w = LockWalk::start(&t, &queue::CLAIM_LOCKS, rows.len(), |db| async move {
        queue::claim(&db, "first-worker", 10, Duration::from_secs(60)).await
    })
    .await;
    w.assert_holds_exactly(&rows).await;
    w.assert_probe_waits(&t, &rows[0]).await;
    // A job enqueued while the first holds its claim.
    let mut c = t.db.pool.acquire().await.unwrap();
    let later = queue::enqueue(&mut c, NewJob::new("walk.claimed", serde_json::json!({}))).await.unwrap().unwrap();
    drop(c);
    // A second worker claims only that one: it skips the rows the first holds, and never waits.
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        queue::claim(&t.db, "second-worker", 10, Duration::from_secs(60)),
    )
    .await
    .expect("the second claimer does not wait on the first")
    .unwrap();
    assert_eq!(second.iter().map(|j| j.job_id).collect::<Vec<_>>(), vec![later]);
    // The first's remaining pauses (the statement's other rows), then its end.
    for (k, row) in rows.iter().enumerate() {
        if k > 0 {
            w.assert_holds_exactly(&rows).await;
            w.assert_probe_waits(&t, row).await;
        }
        assert_eq!(w.step().await, k + 1 < rows.len());
    }
    let first = w.finish().await.unwrap();
    assert_eq!(first.iter().map(|j| j.job_id.0.to_string()).collect::<Vec<_>>(), due);
    let by_worker: Vec<(String, i64)> = t
        .all(sqlx::query_as(
            "SELECT locked_by, count(*) FROM integration.jobs WHERE state = 'running' GROUP BY 1 ORDER BY 1",
        ))
        .await;
    assert_eq!(by_worker, vec![("first-worker".to_string(), 2), ("second-worker".to_string(), 1)]);
}

// Fire due schedules ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_schedule_firing_walked_lock_by_lock_takes_its_due_schedules_in_one_skip_locked_statement_and_a_second_firer_skips_them()
 {
    let t = TestDb::new().await;
    for name in ["walk_b", "walk_a"] {
        schedule::ensure_schedule(&t.db, name, Duration::from_secs(3600)).await.unwrap();
    }
    t.run(sqlx::query(
        "UPDATE integration.job_schedules SET next_run_at = CASE WHEN name LIKE 'walk_%' THEN now() - interval '1 second'
                                                            ELSE now() + interval '1 hour' END",
    ))
    .await;
    let due = ids(&t, "SELECT name FROM integration.job_schedules WHERE next_run_at <= now() ORDER BY name").await;
    assert_eq!(due, ["walk_a", "walk_b"]);
    let rows: Vec<Expect> = due.iter().map(|n| Expect::row("integration.job_schedules", n)).collect();
    // The first worker, paused after its statement took every due schedule, in name order.
    let mut w = LockWalk::start(&t, &schedule::FIRE_SCHEDULES_LOCKS, rows.len(), |db| async move {
        schedule::fire_due_schedules(&db).await
    })
    .await;
    w.assert_holds_exactly(&rows).await;
    w.assert_probe_waits(&t, &rows[0]).await;
    // A second worker firing meanwhile skips both, without waiting, and fires nothing.
    let second = tokio::time::timeout(Duration::from_secs(10), schedule::fire_due_schedules(&t.db))
        .await
        .expect("the second firer does not wait on the first")
        .unwrap();
    assert_eq!(second, 0);
    for (k, row) in rows.iter().enumerate() {
        if k > 0 {
            w.assert_holds_exactly(&rows).await;
            w.assert_probe_waits(&t, row).await;
        }
        assert_eq!(w.step().await, k + 1 < rows.len());
    }
    assert_eq!(w.finish().await.unwrap(), 2);
    let runs = ids(&t, "SELECT kind FROM integration.jobs WHERE kind LIKE 'walk_%' ORDER BY kind").await;
    assert_eq!(runs, ["walk_a", "walk_b"], "one run each");
    let advanced: bool = t
        .one(sqlx::query_scalar(
            "SELECT bool_and(next_run_at > now()) FROM integration.job_schedules WHERE name LIKE 'walk_%'",
        ))
        .await;
    assert!(advanced);
}

// Compact the organization counts ---------------------------------------------------------------------

#[tokio::test]
async fn a_counts_compaction_walked_lock_by_lock_takes_every_appended_count_row_in_one_statement() {
    let t = TestDb::new().await;
    for i in 0..3 {
        t.run(sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO core.organizations (name) VALUES ('Counted {i}')"
        ))))
        .await;
    }
    let appended = ids(&t, "SELECT count_id::text FROM core.organization_counts ORDER BY count_id").await;
    assert_eq!(appended.len(), 3, "one appended row per insert: {appended:?}");
    // The one DELETE takes them all; the row of their sum it inserts is its own.
    let rows: Vec<Expect> = appended.iter().map(|id| Expect::row("core.organization_counts", id)).collect();
    let folded =
        walk(&t, &orgs::COMPACT_COUNTS_LOCKS, &[Step::Rows(rows)], |db| async move { orgs::compact_counts(&db).await })
            .await
            .unwrap();
    assert_eq!(folded, 2, "three rows became one");
    let kept: Vec<(Option<i64>, i64)> =
        t.all(sqlx::query_as("SELECT org_type_id, delta FROM core.organization_counts")).await;
    assert_eq!(kept, vec![(None, 3)]);
}

// Sample the overview's figures -----------------------------------------------------------------------

#[tokio::test]
async fn a_sample_walked_lock_by_lock_takes_its_own_request_row_then_the_minutes_shared_rows_in_one_statement() {
    let t = TestDb::new().await;
    let minute = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap();
    // Another server sampled the minute (the shared rows), and this one earlier in it (its own
    // request row): every row the walked sample meets exists before it runs.
    observability::sample_minute(&t.db, "server-a", 5, minute).await.unwrap();
    observability::sample_minute(&t.db, "server-b", 2, minute + TimeDelta::seconds(5)).await.unwrap();
    let t = &t;
    let key = |name: &str, source: &str| {
        let name = name.to_string();
        let source = source.to_string();
        async move {
            let id: String = t
                .one(
                    sqlx::query_scalar(
                        "SELECT concat_ws(',', name, minute::text, source) FROM integration.metric_samples
                          WHERE name = $1 AND source = $2 AND minute = $3",
                    )
                    .bind(&name)
                    .bind(&source)
                    .bind(minute),
                )
                .await;
            // Its ON CONFLICT update changes no key: the rows it updates, and the shared ones it
            // only locks (their update's WHERE refuses), are taken FOR NO KEY UPDATE.
            Expect::row_in("integration.metric_samples", id, RowMode::NoKeyUpdate)
        }
    };
    let rows =
        vec![key("requests", "server-b").await, key("queue_depth", "db").await, key("drain_remaining", "db").await];
    let figures = async || -> Vec<(String, String, f64)> {
        t.all(
            sqlx::query_as(
                "SELECT name, source, value FROM integration.metric_samples WHERE minute = $1 ORDER BY name, source",
            )
            .bind(minute),
        )
        .await
    };
    let before = figures().await;
    walk(t, &observability::SAMPLE_LOCKS, &[Step::Rows(rows)], |db| async move {
        observability::sample_minute(&db, "server-b", 3, minute + TimeDelta::seconds(30)).await
    })
    .await
    .unwrap();
    // The walked sample added to its own request row and kept the first server's shared figures.
    let want: Vec<(String, String, f64)> = before
        .into_iter()
        .map(|(n, s, v)| {
            let v = if n == "requests" && s == "server-b" { v + 3.0 } else { v };
            (n, s, v)
        })
        .collect();
    assert_eq!(want.len(), 4, "{want:?}");
    assert_eq!(figures().await, want);
}
