//! Several replicas on one database, as operators run them: two `serve --no-worker` processes and
//! two `worker` processes of the real binary.

use std::time::{Duration, Instant};

use member_console::{demo, ids::PlanActId, services::plan_acts::DRAIN_PLAN_ACT};
use reqwest::StatusCode;

use crate::common::{
    self, TestDb,
    acts::{act_state, counts, floored_type, ladder_id, scalar},
    worker::{ServerProcess, WorkerProcess},
};

/// A browser-like client: keeps cookies (for every port of 127.0.0.1, as browsers do), follows
/// no redirect.
fn browser() -> reqwest::Client {
    reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn csrf(c: &reqwest::Client, url: &str) -> String {
    let html = c.get(url).send().await.unwrap().text().await.unwrap();
    common::csrf_from(&html).unwrap_or_else(|| panic!("no csrf token at {url}: {html}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_and_two_workers_share_sessions_fire_each_schedule_once_and_hand_a_killed_drain_over() {
    const ORGS: i64 = 12_000;
    let lease = Duration::from_secs(2);
    let t: TestDb = common::pages::demo_db().await;
    let dir = std::env::temp_dir().join(format!("mc-replicas-{}", t.name));
    // What replicas share: the session key. A farm that is configured (nothing here calls it) keeps
    // each server from starting a local farm of its own; with no Stripe key, each asks for the
    // Stripe stand-in (and the mail catcher) explicitly, as `serve` without --demo must.
    let key = member_console::config::random_hex(64);
    let env = [
        ("CONSOLE_SESSION_KEY", key.as_str()),
        ("CONSOLE_STAND_INS", "1"),
        ("FARM_URL", "http://127.0.0.1:9"),
        ("FARM_TOKEN", "replicas-farm-token"),
        ("FARM_CALLBACK_SECRET", "replicas-farm-callback-secret"),
        // The request that makes the act drains for as long as its deadline allows; a short one
        // leaves most of the drain to the workers (a fast machine drained it all in the request).
        ("CONSOLE_REQUEST_TIMEOUT_MS", "2000"),
    ];
    let mut a = ServerProcess::start(&t, &dir, "server-a", &env);
    let mut b = ServerProcess::start(&t, &dir, "server-b", &env);
    a.ready().await;
    b.ready().await;

    // A session made on one server works on the other, its CSRF token included.
    let c = browser();
    let token = csrf(&c, &a.url("/login")).await;
    let r = common::post_sign_in(&c, &a.url("/login"), demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD, &token).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{}", a.log());
    let r = c.get(b.url("/operator")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "signed in on A, at home on B");
    assert!(r.text().await.unwrap().contains("Health"));
    let token = csrf(&c, &a.url("/operator/organizations")).await;
    let r = c
        .post(b.url("/operator/organizations"))
        .form(&[("name", "Made on B"), ("csrf_token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.organizations WHERE name = 'Made on B'").await, 1);

    // Two workers; a default change over ORGS organizations, asked of server A.
    let (wiki, support) = (ladder_id(&t, "Wiki hosting").await, ladder_id(&t, "Support").await);
    let ty = floored_type(&t, "Replicas", wiki, ORGS).await;
    let mut w1 = WorkerProcess::start(&t, &dir, lease, "worker-1");
    let mut w2 = WorkerProcess::start(&t, &dir, lease, "worker-2");
    // Both up before the act (replicas booting together once collided on a catalog row, and a
    // worker that never started cannot take the drain over).
    w1.running().await;
    w2.running().await;
    let token = csrf(&c, &a.url("/operator/topology")).await;
    let path = views::paths::ORG_TYPE_DEFAULT.replace("{id}", &ty.to_string());
    let r = c
        .post(a.url(&path))
        .form(&[
            ("plan_ladder_id", support.0.to_string().as_str()),
            ("disposition", "migrate"),
            ("reason", "replicas"),
            ("csrf_token", token.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().is_redirection(), "{}: {}", r.status(), r.text().await.unwrap());
    let act = PlanActId(
        t.one(sqlx::query_scalar("SELECT max(plan_act_id) FROM core.plan_acts WHERE kind = 'default_change'")).await,
    );
    let moved_sql =
        format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {} AND state = 'migrated'", act.0);

    // Whichever worker took the drain is killed midway; the other finishes it.
    // The holder is read with the count, so a drain quick to finish is seen still running.
    let running = async || -> Option<String> {
        t.optional(
            sqlx::query_scalar("SELECT locked_by FROM integration.jobs WHERE kind = $1 AND state = 'running'")
                .bind(DRAIN_PLAN_ACT),
        )
        .await
    };
    let started = Instant::now();
    let holder = loop {
        let holder = running().await;
        let moved = scalar(&t, &moved_sql).await;
        assert!(moved < ORGS, "the drain ended before the kill; give it more organizations");
        if let Some(holder) = holder.filter(|_| moved >= ORGS / 20) {
            break holder;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the drain did not get going ({moved} moved)");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (mut dying, surviving) = if holder.starts_with(&w1.worker_id_prefix()) { (w1, w2) } else { (w2, w1) };
    assert!(holder.starts_with(&dying.worker_id_prefix()), "{holder}");
    let moved_at_kill = scalar(&t, &moved_sql).await;
    assert!(moved_at_kill < ORGS, "the drain ended before the kill; give it more organizations");
    dying.kill();
    common::wait_until(
        "the act and its drain job are done",
        Duration::from_secs(180),
        || surviving.log(),
        // The act is done a moment before the worker marks its job done.
        async || {
            act_state(&t, act).await == "done"
                && scalar(
                    &t,
                    &format!(
                        "SELECT count(*) FROM integration.jobs WHERE kind = '{DRAIN_PLAN_ACT}' AND state = 'done'"
                    ),
                )
                .await
                    == 1
        },
    )
    .await;
    let (state, attempts, by): (String, i32, String) = t
        .one(
            sqlx::query_as("SELECT state, attempts, locked_by FROM integration.jobs WHERE kind = $1")
                .bind(DRAIN_PLAN_ACT),
        )
        .await;
    assert_eq!((state.as_str(), attempts), ("done", 2), "the killed attempt and the other worker's");
    assert!(by.starts_with(&surviving.worker_id_prefix()), "{by}\n{}", surviving.log());
    // Every organization moved, each once.
    assert_eq!(counts(&t, act).await, (0, ORGS, 0, 0, 0, 0));
    let not_once = scalar(
        &t,
        &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {} AND attempts <> 1", act.0),
    )
    .await;
    assert_eq!(not_once, 0);

    // Both workers fired the schedules all along: each slot of each schedule made one job.
    let twice = scalar(
        &t,
        "SELECT count(*) FROM (SELECT 1 FROM integration.jobs WHERE payload ? 'schedule'
                                GROUP BY payload->>'schedule', payload->>'due_at' HAVING count(*) > 1) d",
    )
    .await;
    assert_eq!(twice, 0, "a schedule's slot fired twice");
    let slots = scalar(&t, "SELECT count(*) FROM integration.jobs WHERE payload ? 'schedule'").await;
    assert!(slots >= 5, "the schedules fired: {slots} runs");
    drop((surviving, a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
