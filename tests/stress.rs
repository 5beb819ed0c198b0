//! The reliability tool: a short run of every path at once (the grant paths and their jobs, the
//! rule changes and their drains included) finds no deadlock, no error and no violated
//! invariant; and the invariant check does see a broken invariant.

mod common;

use common::TestDb;
use member_console::{
    config::Config,
    demo,
    services::{
        entitlements::{self as svc, OrgName},
        grants::EmailDomain,
        rule_changes as rc,
    },
    stress::{self, StressOptions, StressPath},
};

/// The configuration the command would read, on the test server. The harness's runtime password:
/// the role is cluster-wide, and another password would be set on it under the other tests' feet.
fn config_for(root: &str) -> Config {
    let dir = std::env::temp_dir().join(format!("mc-stress-test-{}", member_console::config::random_hex(6)));
    Config::from_lookup(|k| match k {
        "DATABASE_URL" => Some(root.to_string()),
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(common::TEST_RUNTIME_PASSWORD.into()),
        _ => None,
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_does_every_path_without_deadlock_error_or_violation() {
    let config = config_for(&common::root_admin_url());
    let opts = StressOptions { seconds: 5, orgs: 40, connections: 6, seed: None, keep: false };
    let report = stress::run(&config, opts).await.unwrap();
    let summary = format!(
        "seed {}: {}\nerrors: {:#?}\nviolations: {:#?}",
        report.seed,
        report.json_line(),
        report.first_errors,
        report.first_violations
    );
    for p in StressPath::ALL {
        let count = report.paths.get(p.name()).copied().unwrap_or_default();
        // A drain pass and a Retry have work only when a pool is owed or failed at that instant,
        // which the workers' own quick drains make rare in a short run: they must be tried; the
        // 30 s runs do them many times.
        if matches!(p.name(), "Retry a rule change's failed pools" | "DrainChange") {
            assert!(count.done + count.refused >= 1, "{} was never tried; {summary}", p.name());
        } else {
            assert!(count.done >= 1, "{} was never done; {summary}", p.name());
        }
    }
    // Each grant path by its declaration's name, and the jobs the workers ran.
    for name in [
        "IssueGrant",
        "RevokeGrantTx",
        "ExpireGrantTx",
        "Start a waiting grant",
        "ManageGrantTx",
        "ExtendWaitingGrantTx",
        "ExpireGrantActivity",
        "StartGrantActivity",
    ] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done >= 1, "{name} was never done; {summary}");
    }
    // The rule-change paths by their declarations' names: a commit must be done; a drain beside
    // the jobs' own drains and a retry of failed pools must be tried (whether they find work
    // depends on timing in a 5 s run; the 30 s runs do them many times).
    let commit = report.paths.get("RuleChangeBatchCommit").copied().unwrap_or_default();
    assert!(commit.done >= 1, "RuleChangeBatchCommit was never done; {summary}");
    for name in ["DrainChange", "Retry a rule change's failed pools"] {
        let count = report.paths.get(name).copied().unwrap_or_default();
        assert!(count.done + count.refused >= 1, "{name} was never tried; {summary}");
    }
    assert_eq!(report.deadlocks, 0, "{summary}");
    assert_eq!(report.errors, 0, "{summary}");
    assert_eq!(report.violations, 0, "{summary}");
    // The database is dropped after the run.
    let mut root = <sqlx::PgConnection as sqlx::Connection>::connect(&common::root_admin_url()).await.unwrap();
    let left: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(&report.database)
        .fetch_one(&mut root)
        .await
        .unwrap();
    assert!(!left, "{} was not dropped", report.database);
}

#[tokio::test]
async fn the_invariant_check_reports_each_broken_invariant() {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    let community: i64 = sqlx::query_scalar("SELECT org_type_id FROM core.org_types WHERE name = 'Community'")
        .fetch_one(&t.admin)
        .await
        .unwrap();
    let mut orgs = vec![];
    for name in ["Broken entitlements", "Broken floor", "Broken usage"] {
        orgs.push(svc::create_organization(&t.db, &OrgName::parse(name).unwrap(), Some(community)).await.unwrap());
    }
    let domain = EmailDomain::parse("broken.example.org").unwrap();
    let (with_domain, _) = svc::create_organization_with_domain(
        &t.db,
        &OrgName::parse("Broken grants").unwrap(),
        Some(community),
        Some(&domain),
    )
    .await
    .unwrap();
    // A rule change to a carried set, settled in its commit.
    let support: i64 =
        sqlx::query_scalar("SELECT entitlement_set_id FROM core.entitlement_sets WHERE name = 'Community support'")
            .fetch_one(&t.admin)
            .await
            .unwrap();
    let submitted = [("support.priority".to_string(), "yes".to_string())].into_iter().collect();
    let change =
        rc::commit_rule_change_batch(&t.db, support, &submitted, None, "broken", rc::DEFAULT_SYNC_CAP).await.unwrap();
    assert!(change.settled_inline && change.pools_owed >= 1, "{change:?}");
    let found = stress::check_invariants(&t.admin).await.unwrap();
    assert!(found.is_empty(), "a consistent database has no violation: {found:#?}");

    // (1) A materialized value that a fresh computation does not give.
    sqlx::query(
        "UPDATE core.pool_entitlements SET numeric_value = numeric_value + 1
         WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
    )
    .bind(orgs[0].pool_id)
    .execute(&t.admin)
    .await
    .unwrap();
    // (2) and (3): a floor's position goes, so its holding conferral lacks a position of its
    // shape and its organization's default ladder is vacant. (4) Another floor grant is marked
    // replaced while its conferral still holds.
    sqlx::query("DELETE FROM core.positions WHERE pool_id = $1").bind(orgs[1].pool_id).execute(&t.admin).await.unwrap();
    sqlx::query("UPDATE core.grants SET status = 'replaced' WHERE grant_id = $1")
        .bind(orgs[2].floor_grant_id.unwrap())
        .execute(&t.admin)
        .await
        .unwrap();
    // (5) A numeric entitlement without its usage row.
    sqlx::query("DELETE FROM core.numeric_entitlement_usage WHERE pool_id = $1")
        .bind(orgs[2].pool_id)
        .execute(&t.admin)
        .await
        .unwrap();
    // (6) and (4): a grant active past its end, with no conferral (its expiry never ran).
    let grant = |status: &str, org: Option<i64>, domain: Option<&str>| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO core.grants (organization_id, provision_domain, product_id, quantity, kind, status, starts_at,
                                      ends_at, reason)
             SELECT $1, $2, product_id, 1, CASE WHEN $2::text IS NULL THEN 'operator' ELSE 'provisioning' END, $3,
                    now() - interval '2 hours', now() - interval '1 hour', 'broken'
             FROM core.products WHERE name = 'Basic'
             RETURNING grant_id",
        )
        .bind(org)
        .bind(domain.map(str::to_string))
        .bind(status.to_string())
        .fetch_one(&t.admin)
    };
    let past_end = grant("active", Some(with_domain.organization_id), None).await.unwrap();
    // (9) An expired grant without its expired event.
    let silent = grant("expired", Some(with_domain.organization_id), None).await.unwrap();
    // (8) A grant still waiting for a domain whose organization exists: its provisioning was lost.
    let lost = grant("waiting", None, Some("broken.example.org")).await.unwrap();
    sqlx::query("UPDATE core.grants SET ends_at = NULL WHERE grant_id = $1")
        .bind(lost)
        .execute(&t.admin)
        .await
        .unwrap();

    // (10) An obligation of the change settled twice: two attempts and no failure recorded.
    let twice: i64 = sqlx::query_scalar(
        "UPDATE core.entitlement_set_change_obligations o SET attempts = 2
         WHERE o.act_id IN (SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1)
           AND o.pool_id = (SELECT min(x.pool_id) FROM core.entitlement_set_change_obligations x
                            JOIN core.entitlement_set_change_acts a USING (act_id) WHERE a.change_id = $1)
         RETURNING o.pool_id",
    )
    .bind(change.change_id)
    .fetch_one(&t.admin)
    .await
    .unwrap();

    let found = stress::check_invariants(&t.admin).await.unwrap();
    let has = |needle: &str, pool: i64| found.iter().any(|m| m.contains(needle) && m.contains(&format!("pool {pool}")));
    let (p0, p1, p2, p3) = (orgs[0].pool_id, orgs[1].pool_id, orgs[2].pool_id, with_domain.pool_id);
    assert!(has("materialized [fedwiki.active_sites=2", p0), "(1) missing: {found:#?}");
    assert!(has("has no position on ladder", p1), "(2) missing: {found:#?}");
    assert!(has("holds nothing on its default ladder", p1), "(3) missing: {found:#?}");
    assert!(has(&format!("grant {} is replaced", orgs[2].floor_grant_id.unwrap()), p2), "(4) missing: {found:#?}");
    assert!(has("is entitled to fedwiki.active_sites but has no usage row", p2), "(5) missing: {found:#?}");
    assert!(has(&format!("grant {past_end} is active past its end"), p3), "(6) missing: {found:#?}");
    assert!(
        has(&format!("grant {past_end} (product"), p3) && found.iter().any(|m| m.contains("never conferred")),
        "(4) missing for the grant past its end: {found:#?}"
    );
    assert!(has(&format!("grant {silent} is expired and has 0 expired events"), p3), "(9) missing: {found:#?}");
    assert!(has(&format!("grant {lost} still waits for broken.example.org"), p3), "(8) missing: {found:#?}");
    assert!(
        has(
            &format!("of change {} is settled to pool {twice} after 2 attempts with no failure", change.change_id),
            twice
        ),
        "(10) missing: {found:#?}"
    );
    assert_eq!(found.len(), 10, "one message per violating row: {found:#?}");
}
