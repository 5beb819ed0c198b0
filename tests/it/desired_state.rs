//! The desired-state relay against a real receiver over HTTP: notices from the sources, records
//! under the address lock, signed pushes confirmed in order, the faults an endpoint can have, and
//! the lock tests of the spec's three pairs.

use std::time::Duration;

use desired_state_receiver::{Config as ReceiverConfig, Receiver};
use member_console::{
    db::keys::AdvisoryKey,
    ids::{ConnectionId, OrganizationId, ProductId},
    integrations::desired_state::Relay,
    services::{
        desired_state::{
            self as ds,
            connections::{self, ConnectionName, NewConnection},
            relay::Recomputed,
        },
        grants,
    },
    store::desired_state as store,
};
use serde_json::{Value, json};

use crate::common::{self, TestDb, acts, locks::Expect};

/// A database with two keys of a chat system, a product granting them, an organization, and a
/// receiver.
struct Setup {
    t: TestDb,
    org: OrganizationId,
    product: ProductId,
    receiver: Receiver,
    relay: Relay,
}

async fn setup() -> Setup {
    let t = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO core.resource_keys (resource_key, kind) VALUES ('chat.seats', 'numeric'), ('chat.video', 'flag')
           ON CONFLICT DO NOTHING;
         WITH s AS (INSERT INTO core.entitlement_sets (name) VALUES ('Chat') RETURNING entitlement_set_id)
         INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value, flag_value)
         SELECT entitlement_set_id, k, n, f FROM s,
                (VALUES ('chat.seats', 25::bigint, NULL::boolean), ('chat.video', NULL, true)) v(k, n, f);
         INSERT INTO core.products (name, entitlement_set_id, published)
         SELECT 'Chat', entitlement_set_id, true FROM core.entitlement_sets WHERE name = 'Chat';",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    let product = acts::product_id(&t, "Chat").await;
    let org = member_console::services::organizations::create_organization(
        &t.db,
        &member_console::services::organizations::OrgName::parse("Acme").unwrap(),
        None,
    )
    .await
    .unwrap()
    .organization_id;
    let receiver = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await.unwrap();
    let relay = Relay::new(Duration::from_secs(5)).unwrap();
    Setup { t, org, product, receiver, relay }
}

impl Setup {
    /// A connection to `receiver` for both chat keys, its secret handed to the receiver.
    async fn connect(&self, name: &str, receiver: &Receiver) -> ConnectionId {
        let form = NewConnection::parse(name, &receiver.push_url(), "chat.seats, chat.video", true).unwrap();
        let id = connections::create_connection(&self.t.db, &form).await.unwrap();
        let c = store::connection(&self.t.db.pool, id).await.unwrap().unwrap();
        receiver.set_secrets(&[c.secret]).unwrap();
        id
    }

    async fn pass(&self) -> ds::RelayPass {
        ds::process_desired_state_outbox(&self.t.db, Duration::from_secs(20)).await.unwrap()
    }

    async fn dispatch(&self, c: ConnectionId) -> ds::Dispatched {
        ds::dispatch_connection(&self.t.db, &self.relay, c, Duration::from_secs(20)).await.unwrap()
    }

    /// The relay's pass, then the connection's dispatch.
    async fn relay_and_push(&self, c: ConnectionId) -> ds::Dispatched {
        self.pass().await;
        self.dispatch(c).await
    }

    async fn record(&self, c: ConnectionId) -> store::RecordState {
        store::record_at(&self.t.db.pool, c, self.org).await.unwrap().expect("a record")
    }

    async fn notices(&self) -> i64 {
        acts::scalar(&self.t, "SELECT count(*) FROM core.desired_state_outbox").await
    }

    async fn sql(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&self.t.admin).await.unwrap();
    }
}

/// What the receiver holds for an organization: (generation, content).
fn held(r: &Receiver, org: OrganizationId) -> Option<(i64, Value)> {
    let s = r.snapshot();
    s["recipients"]
        .as_array()?
        .iter()
        .find(|x| x["id"] == json!(org.0.to_string()))
        .map(|x| (x["generation"].as_i64().unwrap_or(-1), x["content"].clone()))
}

fn counter(r: &Receiver, name: &str) -> i64 {
    r.snapshot()[name].as_i64().unwrap_or(-1)
}

async fn faults(r: &Receiver, body: Value) {
    let c = reqwest::Client::new();
    let a = c.post(format!("{}/_receiver/faults", r.url())).json(&body).send().await.unwrap();
    assert!(a.status().is_success(), "faults set: {}", a.text().await.unwrap());
}

fn entitlements(seats: i64, video: bool) -> Value {
    json!({ "chat.seats": seats, "chat.video": video })
}

#[tokio::test]
async fn a_grant_reaches_the_connected_system_signed_and_confirmed_in_order() {
    let s = setup().await;
    let c = s.connect("Chat", &s.receiver).await;
    let d = s.relay_and_push(c).await;
    assert_eq!((d.pushed, d.confirmed), (1, 1), "the new connection's one recipient is pushed");
    let (g, content) = held(&s.receiver, s.org).unwrap();
    assert_eq!(g, 1);
    assert_eq!(content["entitlements"], entitlements(0, false), "nothing granted yet: zero and false");
    assert_eq!(content["organization"]["name"], "Acme");

    acts::grant(&s.t, s.org, s.product).await;
    assert!(s.notices().await >= 1, "the grant's materialization wrote a notice in its transaction");
    s.relay_and_push(c).await;
    let (g, content) = held(&s.receiver, s.org).unwrap();
    assert_eq!(g, 2);
    assert_eq!(content["entitlements"], entitlements(25, true));
    let r = s.record(c).await;
    assert_eq!((r.generation, r.confirmed_generation), (2, 2));
    assert_eq!(s.notices().await, 0, "the outbox drained");
    assert_eq!(counter(&s.receiver, "rejected"), 0, "every push was signed right");
}

#[tokio::test]
async fn notices_are_written_only_while_a_connection_is_live_and_the_same_content_makes_no_generation() {
    let s = setup().await;
    acts::grant(&s.t, s.org, s.product).await;
    assert_eq!(s.notices().await, 0, "no connection: the triggers write nothing");
    let c = s.connect("Chat", &s.receiver).await;
    assert_eq!(s.notices().await, 1, "the connection's own notice");
    s.pass().await;
    assert_eq!(s.record(c).await.generation, 1);
    for _ in 0..3 {
        assert_eq!(ds::recompute_address(&s.t.db, c, s.org.0, ds::Ask::Notice).await.unwrap(), Recomputed::Unchanged);
    }
    assert_eq!(s.record(c).await.generation, 1, "the same content is no new generation");
    s.sql(&format!("UPDATE core.organizations SET name = 'Acme Ltd' WHERE organization_id = {}", s.org)).await;
    assert_eq!(s.notices().await, 1, "a rename is a notice");
    s.pass().await;
    let r = s.record(c).await;
    assert_eq!((r.generation, r.content["organization"]["name"].as_str()), (2, Some("Acme Ltd")));
}

#[tokio::test]
async fn a_storm_of_changes_to_one_organization_ends_with_the_last_content_and_rising_generations() {
    let s = setup().await;
    let c = s.connect("Chat", &s.receiver).await;
    s.relay_and_push(c).await;
    // Grants issued and revoked while the relay and the dispatch run beside them.
    let (db, org, product) = (s.t.db.clone(), s.org, s.product);
    let storm = tokio::spawn(async move {
        for i in 0..12 {
            let g = grants::issue_grant(&db, &acts::operator_grant(org, product)).await.unwrap();
            if i % 3 != 2 {
                grants::revoke_grant(&db, g, None, &member_console::services::grants::Reason::parse("storm").unwrap())
                    .await
                    .unwrap();
            }
        }
    });
    while !storm.is_finished() {
        s.relay_and_push(c).await;
    }
    storm.await.unwrap();
    s.relay_and_push(c).await;
    s.relay_and_push(c).await;
    let r = s.record(c).await;
    let fresh: Value = s
        .t
        .one(sqlx::query_scalar("SELECT core.desired_state_content($1, 'organization', $2)").bind(c.0).bind(s.org.0))
        .await;
    assert_eq!(r.content, fresh, "the record is the last content");
    assert_eq!(r.confirmed_generation, r.generation);
    let (g, content) = held(&s.receiver, s.org).unwrap();
    assert_eq!((g, &content), (r.generation, &fresh), "the remote holds the last content at the last generation");
    assert_eq!(content["entitlements"]["chat.seats"], json!(25 * 4), "four grants stand");
    let snap = s.receiver.snapshot();
    let history = snap["recipients"][0]["history"].as_array().unwrap();
    let gens: Vec<i64> = history.iter().map(|h| h["generation"].as_i64().unwrap()).collect();
    assert!(gens.windows(2).all(|w| w[0] < w[1]), "generations rise strictly: {gens:?}");
    assert_eq!(counter(&s.receiver, "ignored_stale"), 0, "nothing older ever arrived after something newer");
}

#[tokio::test]
async fn an_endpoint_answering_500_is_retried_later_and_delays_only_its_own_connection() {
    let s = setup().await;
    let other = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await.unwrap();
    let failing = s.connect("Failing", &s.receiver).await;
    let healthy = s.connect("Healthy", &other).await;
    faults(&s.receiver, json!({ "fail_next": 100, "status": 500 })).await;
    s.pass().await;
    let (a, b) = tokio::join!(s.dispatch(failing), s.dispatch(healthy));
    assert_eq!((a.failed, b.confirmed), (1, 1));
    assert_eq!(held(&other, s.org).map(|h| h.0), Some(1), "the healthy connection got its push");
    assert!(held(&s.receiver, s.org).is_none(), "the failing one holds nothing");
    let (failures, answer, later): (i32, String, bool) =
        s.t.one(
            sqlx::query_as(
                "SELECT failures, last_answer, due_at > now() FROM core.desired_state_records WHERE connection_id = $1",
            )
            .bind(failing.0),
        )
        .await;
    assert_eq!(failures, 1);
    assert!(answer.contains("500"), "the answer is kept: {answer}");
    assert!(later, "due again only after the backoff");
    assert_eq!(s.dispatch(failing).await.pushed, 0, "nothing is pushed before the backoff ends");
    // Retry makes it due now; the endpoint has recovered.
    faults(&s.receiver, json!({ "fail_next": 0 })).await;
    connections::retry_connection(&s.t.db, failing).await.unwrap();
    assert_eq!(s.relay_and_push(failing).await.confirmed, 1);
    let r = s.record(failing).await;
    assert_eq!(r.confirmed_generation, 1);
}

#[tokio::test]
async fn an_endpoint_slower_than_the_bound_is_a_failure_and_a_slow_one_within_it_is_confirmed() {
    let s = setup().await;
    let c = s.connect("Slow", &s.receiver).await;
    s.pass().await;
    let relay = Relay::new(Duration::from_millis(400)).unwrap();
    faults(&s.receiver, json!({ "delay_ms": 1500 })).await;
    let d = ds::dispatch_connection(&s.t.db, &relay, c, Duration::from_secs(5)).await.unwrap();
    assert_eq!(d.failed, 1);
    let answer: String = s.t.one(sqlx::query_scalar("SELECT last_answer FROM core.desired_state_records")).await;
    assert!(answer.contains("no answer within"), "{answer}");
    faults(&s.receiver, json!({ "delay_ms": 150 })).await;
    s.sql("UPDATE core.desired_state_records SET due_at = now()").await;
    let d = ds::dispatch_connection(&s.t.db, &relay, c, Duration::from_secs(5)).await.unwrap();
    assert_eq!(d.confirmed, 1, "slow but within the bound");
}

#[tokio::test]
async fn the_first_failure_ends_the_run_and_the_records_it_did_not_push_stay_due_with_no_attempt_counted() {
    let s = setup().await;
    for n in 1..20 {
        let name = member_console::services::organizations::OrgName::parse(&format!("Org {n}")).unwrap();
        member_console::services::organizations::create_organization(&s.t.db, &name, None).await.unwrap();
    }
    let c = s.connect("Silent", &s.receiver).await;
    s.pass().await;
    // An endpoint that never answers within the bound: 20 records, one batch.
    faults(&s.receiver, json!({ "delay_ms": 3000 })).await;
    let relay = Relay::new(Duration::from_millis(300)).unwrap();
    let d = ds::dispatch_connection(&s.t.db, &relay, c, Duration::from_secs(20)).await.unwrap();
    let in_flight = ds::dispatch::PUSHES_IN_FLIGHT;
    assert_eq!((d.pushed, d.failed), (in_flight, in_flight), "only the pushes already in flight: {d:?}");
    let (failing, untouched): (i64, i64) =
        s.t.one(
            sqlx::query_as(
                "SELECT count(*) FILTER (WHERE failures = 1 AND due_at > now()),
                    count(*) FILTER (WHERE failures = 0 AND last_answer IS NULL AND due_at <= now()
                                       AND dispatched_generation = 0 AND dispatched_at IS NULL)
               FROM core.desired_state_records WHERE connection_id = $1",
            )
            .bind(c.0),
        )
        .await;
    assert_eq!(
        (failing, untouched),
        (in_flight as i64, 20 - in_flight as i64),
        "the unpushed are given back as they were"
    );

    // The endpoint recovers: the next run sends the records given back at once; the failed wait.
    faults(&s.receiver, json!({ "delay_ms": 0 })).await;
    let d = ds::dispatch_connection(&s.t.db, &relay, c, Duration::from_secs(20)).await.unwrap();
    assert_eq!((d.pushed, d.confirmed), (20 - in_flight, 20 - in_flight));
}

#[tokio::test]
async fn an_answer_with_a_stale_generation_is_not_a_confirmation() {
    let s = setup().await;
    let c = s.connect("Liar", &s.receiver).await;
    faults(&s.receiver, json!({ "stale_next": 1 })).await;
    let d = s.relay_and_push(c).await;
    assert_eq!(d.failed, 1);
    let r = s.record(c).await;
    assert_eq!(r.confirmed_generation, 0, "not confirmed");
    let answer: String = s.t.one(sqlx::query_scalar("SELECT last_answer FROM core.desired_state_records")).await;
    assert!(answer.contains("holds generation 0, not 1"), "{answer}");
}

#[tokio::test]
async fn a_secret_rotated_mid_flight_is_accepted_through_the_overlap_and_refused_after_it() {
    let s = setup().await;
    let c = s.connect("Rotating", &s.receiver).await;
    let old = store::connection(&s.t.db.pool, c).await.unwrap().unwrap().secret;
    s.relay_and_push(c).await;
    connections::rotate_secret(&s.t.db, c, Duration::from_secs(3600)).await.unwrap();
    let new = store::connection(&s.t.db.pool, c).await.unwrap().unwrap().secret;
    assert_ne!(old, new);
    // The remote still knows only the old secret: both signatures go out, the old one verifies.
    acts::grant(&s.t, s.org, s.product).await;
    assert_eq!(s.relay_and_push(c).await.confirmed, 1);
    // The remote switches to the new one.
    s.receiver.set_secrets(std::slice::from_ref(&new)).unwrap();
    s.sql(&format!("UPDATE core.organizations SET name = 'Acme 2' WHERE organization_id = {}", s.org)).await;
    assert_eq!(s.relay_and_push(c).await.confirmed, 1);
    // The overlap ends; a remote still on the old secret refuses.
    s.sql("UPDATE core.desired_state_connections SET previous_secret_until = now() - interval '1 second'").await;
    s.receiver.set_secrets(&[old]).unwrap();
    s.sql(&format!("UPDATE core.organizations SET name = 'Acme 3' WHERE organization_id = {}", s.org)).await;
    let d = s.relay_and_push(c).await;
    assert_eq!(d.failed, 1);
    assert!(counter(&s.receiver, "rejected") >= 1);
    assert_eq!(held(&s.receiver, s.org).unwrap().0, 3, "the refused push changed nothing");
}

#[tokio::test]
async fn a_connection_deleted_with_notices_pending_sends_nothing_more_and_its_records_go() {
    let s = setup().await;
    let c = s.connect("Doomed", &s.receiver).await;
    s.relay_and_push(c).await;
    acts::grant(&s.t, s.org, s.product).await;
    assert!(s.notices().await >= 1, "a change is pending");
    connections::delete_connection(&s.t.db, c).await.unwrap();
    let pushes = counter(&s.receiver, "pushes");
    assert_eq!(s.dispatch(c).await.pushed, 0, "a deleted connection is sent nothing");
    s.pass().await;
    assert_eq!(s.dispatch(c).await.pushed, 0);
    assert_eq!(counter(&s.receiver, "pushes"), pushes, "nothing more reached the remote");
    assert_eq!(acts::scalar(&s.t, "SELECT count(*) FROM core.desired_state_records").await, 0, "its records are gone");
    assert_eq!(s.notices().await, 0);
    assert!(matches!(
        connections::retry_connection(&s.t.db, c).await,
        Err(member_console::services::ServiceError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_relay_that_dies_mid_batch_loses_nothing_and_sends_no_generation_twice() {
    let s = setup().await;
    let c = s.connect("Crashy", &s.receiver).await;
    // A pass claims the notices and dies before its work: the lease runs out, the next pass works.
    let mut conn = s.t.db.pool.acquire().await.unwrap();
    let claimed = store::claim_notices(&mut conn, 10, 60.0).await.unwrap();
    assert_eq!(claimed.len(), 1);
    drop(conn);
    assert_eq!(s.pass().await.notices, 0, "a leased notice is another pass's");
    s.sql("UPDATE core.desired_state_outbox SET claimed_until = now() - interval '1 second'").await;
    assert_eq!(s.pass().await.new_generations, 1);
    // A dispatcher stamps a batch and dies before pushing: the stamp's bound runs out, the next sends it once.
    let stamped = store::stamp_dispatched(&s.t.db.pool, c, 10, 60.0).await.unwrap();
    assert_eq!(stamped.len(), 1);
    assert_eq!(s.dispatch(c).await.pushed, 0, "a stamped record is another dispatcher's");
    s.sql("UPDATE core.desired_state_records SET due_at = now()").await;
    assert_eq!(s.dispatch(c).await.confirmed, 1);
    // A dispatcher that pushed and died before writing the answer: the remote gets the same id again.
    acts::grant(&s.t, s.org, s.product).await;
    s.pass().await;
    let stamped = store::stamp_dispatched(&s.t.db.pool, c, 10, 60.0).await.unwrap();
    let c_row = store::connection(&s.t.db.pool, c).await.unwrap().unwrap();
    let body = ds::dispatch::push_body(&c_row, &stamped[0]);
    let id = format!("ds_{}_{}", stamped[0].record_id, stamped[0].generation);
    s.relay.post(&c_row.url, &ds::dispatch::signing_secrets(&c_row), &id, body).await;
    s.sql("UPDATE core.desired_state_records SET due_at = now()").await;
    assert_eq!(s.dispatch(c).await.confirmed, 1);
    assert_eq!(counter(&s.receiver, "duplicates"), 1, "the repeat carried the same id and was dropped");
    let snap = s.receiver.snapshot();
    let gens: Vec<i64> = snap["recipients"][0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["generation"].as_i64().unwrap())
        .collect();
    assert_eq!(gens, vec![1, 2], "each generation applied once");
}

#[tokio::test]
async fn read_back_finds_drift_and_the_record_is_pushed_again() {
    let s = setup().await;
    let c = s.connect("Checked", &s.receiver).await;
    s.relay_and_push(c).await;
    let run = ds::read_back_connection(&s.t.db, &s.relay, c).await.unwrap();
    assert_eq!((run.checked, run.drifted), (1, 0));
    let client = reqwest::Client::new();
    let a = client
        .post(format!("{}/_receiver/tamper", s.receiver.url()))
        .json(&json!({ "kind": "organization", "id": s.org.0.to_string(), "content": { "forged": true } }))
        .send()
        .await
        .unwrap();
    assert!(a.status().is_success());
    let run = ds::read_back_connection(&s.t.db, &s.relay, c).await.unwrap();
    assert_eq!(run.drifted, 1);
    let r = s.record(c).await;
    assert!(r.confirmed_generation < r.generation, "drift makes the record due again");
    s.dispatch(c).await;
    assert_eq!(held(&s.receiver, s.org).unwrap().1, s.record(c).await.content, "the remote holds the content again");
}

#[tokio::test]
async fn a_new_url_receives_every_record_again_and_the_old_endpoint_nothing_more() {
    let s = setup().await;
    let c = s.connect("Moved", &s.receiver).await;
    acts::grant(&s.t, s.org, s.product).await;
    s.relay_and_push(c).await;
    let before = s.record(c).await;
    assert_eq!(before.confirmed_generation, before.generation);
    let old_pushes = counter(&s.receiver, "pushes");

    // The system moved: a fresh endpoint that holds nothing, with the same secret.
    let moved = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await.unwrap();
    let row = store::connection(&s.t.db.pool, c).await.unwrap().unwrap();
    moved.set_secrets(&[row.secret]).unwrap();
    let form = NewConnection::parse("Moved", &moved.push_url(), "chat.seats, chat.video", true).unwrap();
    connections::update_connection(&s.t.db, c, &form).await.unwrap();
    let pass = s.pass().await;
    assert_eq!(pass.new_generations, 0, "the same content: no new generation");
    let r = s.record(c).await;
    assert_eq!((r.generation, r.confirmed_generation), (before.generation, 0), "unconfirmed at the new endpoint");
    // A push to the old URL that was still in flight, answered now, confirms nothing for the new one.
    let old_url = s.receiver.push_url();
    let late = ds::dispatch::write_answer(&s.t.db, r.record_id, r.generation, true, "200", &old_url).await;
    assert!(late.unwrap());
    assert_eq!(s.record(c).await.confirmed_generation, 0, "an answer from the previous URL is no confirmation");
    let d = s.dispatch(c).await;
    assert_eq!(d.confirmed, 1);
    assert_eq!(held(&moved, s.org), Some((before.generation, before.content.clone())), "the new endpoint holds it");
    assert_eq!(s.record(c).await.confirmed_generation, before.generation);
    assert_eq!(counter(&s.receiver, "pushes"), old_pushes, "the old endpoint gets nothing more");

    // Editing the name alone sends nothing again.
    let form = NewConnection { name: ConnectionName::parse("Moved again").unwrap(), ..form };
    connections::update_connection(&s.t.db, c, &form).await.unwrap();
    assert_eq!(s.notices().await, 0);
}

#[tokio::test]
async fn a_test_asked_on_the_page_is_sent_signed_and_its_answer_kept() {
    let s = setup().await;
    let c = s.connect("Tested", &s.receiver).await;
    connections::send_test(&s.t.db, c).await.unwrap();
    let d = s.relay_and_push(c).await;
    assert!(d.tested);
    assert_eq!(counter(&s.receiver, "tests"), 1);
    let row = store::connection(&s.t.db.pool, c).await.unwrap().unwrap();
    assert_eq!(row.last_test_ok, Some(true), "{:?}", row.last_test_answer);
}

#[tokio::test]
async fn an_endpoint_that_redirects_confirms_nothing_and_the_answer_says_where_it_points() {
    let s = setup().await;
    let c = s.connect("Moved away", &s.receiver).await;
    // Every POST and GET at the push address answers 302 to the receiver's page, which answers
    // 200 HTML: followed, the push would become a GET of that page and count as confirmed.
    faults(&s.receiver, json!({ "redirect_to": "/" })).await;
    let d = s.relay_and_push(c).await;
    assert_eq!((d.confirmed, d.failed), (0, 1));
    let r = s.record(c).await;
    assert_eq!(r.confirmed_generation, 0, "a redirect is no confirmation");
    let answer: String = s.t.one(sqlx::query_scalar("SELECT last_answer FROM core.desired_state_records")).await;
    assert!(answer.contains("answered 302 (a redirect) to /"), "{answer}");
    assert!(held(&s.receiver, s.org).is_none(), "the receiver applied nothing");

    // "Send a test" takes the same client.
    connections::send_test(&s.t.db, c).await.unwrap();
    assert!(s.relay_and_push(c).await.tested);
    let row = store::connection(&s.t.db.pool, c).await.unwrap().unwrap();
    assert_eq!(row.last_test_ok, Some(false));
    assert!(row.last_test_answer.as_deref().is_some_and(|a| a.contains("redirect")), "{:?}", row.last_test_answer);
    assert_eq!(counter(&s.receiver, "tests"), 0);

    // Read-back of a confirmed record: the redirect stops the run with the same words.
    faults(&s.receiver, json!({ "redirect_to": "" })).await;
    connections::retry_connection(&s.t.db, c).await.unwrap();
    assert_eq!(s.relay_and_push(c).await.confirmed, 1);
    faults(&s.receiver, json!({ "redirect_to": "/" })).await;
    let run = ds::read_back_connection(&s.t.db, &s.relay, c).await.unwrap();
    assert!(run.stopped.as_deref().is_some_and(|w| w.contains("answered 302 (a redirect) to /")), "{run:?}");
}

// Lock tests ---------------------------------------------------------------------------------------

/// The address lock of the setup's organization at `c`, as the harness names it.
fn address(s: &Setup, c: ConnectionId) -> Expect {
    Expect::advisory(AdvisoryKey::DesiredStateAddress {
        connection: c.0.to_string(),
        recipient_kind: "organization".into(),
        recipient_id: s.org.0.to_string(),
    })
}

async fn address_key(s: &Setup, c: ConnectionId) -> String {
    format!("SELECT core.lock_desired_state_address({}, 'organization', {})", c.0, s.org.0)
}

#[tokio::test]
async fn a_second_recompute_of_one_address_waits_and_computes_after_the_first_commits() {
    let s = setup().await;
    let c = s.connect("Locked", &s.receiver).await;
    s.pass().await;
    // A: a recompute paused after its address lock.
    let (mut a, a_pid) = common::hold_open(&s.t, &address_key(&s, c).await).await;
    common::locks::assert_holds(&s.t.admin, a_pid, &[address(&s, c)]).await;
    let db = s.t.db.clone();
    let org = s.org;
    let b = tokio::spawn(async move { ds::recompute_address(&db, c, org.0, ds::Ask::Notice).await });
    let b_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, a_pid).await;
    assert!(b_pid > 0, "the second recompute waits on the address lock");
    // The source changes while B waits (a grant takes no address lock), and A finishes its recompute.
    acts::grant(&s.t, s.org, s.product).await;
    let did: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT core.recompute_desired_state_address({}, 'organization', {}, 'notice')",
        c.0, s.org.0
    )))
    .fetch_one(&mut *a)
    .await
    .unwrap();
    assert_eq!(did, "generation");
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    assert_eq!(b.await.unwrap().unwrap(), Recomputed::Unchanged, "B computed after A's commit: nothing new");
    assert_eq!(s.record(c).await.generation, 2, "one new generation, not two");
}

#[tokio::test]
async fn a_recompute_waits_on_the_record_a_dispatch_stamp_holds_and_the_stamp_takes_no_address_lock() {
    let s = setup().await;
    let c = s.connect("Stamped", &s.receiver).await;
    s.pass().await;
    // A: the stamp's statement in a transaction left open.
    let mut a = s.t.db.pool.acquire().await.unwrap();
    let a_pid = common::backend_pid(&mut a).await;
    sqlx::query("BEGIN").execute(&mut *a).await.unwrap();
    let stamped = store::stamp_dispatched(&mut *a, c, 10, 60.0).await.unwrap();
    assert_eq!(stamped.len(), 1);
    let record = Expect::row("core.desired_state_records", stamped[0].record_id.0);
    common::locks::assert_holds(&s.t.admin, a_pid, &[record]).await;
    let advisory = common::granted_locks(&s.t.admin, a_pid).await.into_iter().filter(|l| l.0 == "advisory").count();
    assert_eq!(advisory, 0, "the stamp takes no address lock");
    acts::grant(&s.t, s.org, s.product).await;
    let db = s.t.db.clone();
    let org = s.org;
    let b = tokio::spawn(async move { ds::recompute_address(&db, c, org.0, ds::Ask::Notice).await });
    common::wait_for_waiter(&s.t.admin, &s.t.name, a_pid).await;
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    assert_eq!(b.await.unwrap().unwrap(), Recomputed::Generation);
    let (generation, dispatched, due_now): (i64, i64, bool) =
        s.t.one(sqlx::query_as(
            "SELECT generation, dispatched_generation, due_at <= now() FROM core.desired_state_records",
        ))
        .await;
    assert_eq!((generation, dispatched), (2, 1), "the stamp's write stands beside the new generation");
    assert!(!due_now, "the new generation waits for the push in flight: two pushes of one record never overlap");
    let r = s.record(c).await;
    ds::dispatch::write_answer(&s.t.db, r.record_id, 1, true, "200", &s.receiver.push_url()).await.unwrap();
    let d = s.dispatch(c).await;
    assert_eq!(d.confirmed, 1, "the first push's answer makes the new generation due at once");
    assert_eq!(s.record(c).await.confirmed_generation, 2);
}

#[tokio::test]
async fn giving_back_unpushed_records_waits_on_the_record_row_not_the_address_and_spares_a_retried_record() {
    let s = setup().await;
    let c = s.connect("Given back", &s.receiver).await;
    s.pass().await;
    let stamped = store::stamp_dispatched(&s.t.db.pool, c, 10, 60.0).await.unwrap();
    assert_eq!(stamped.len(), 1);
    // A recompute holding the address lock alone does not hold the give-back up: it takes none.
    let (mut addr, _) = common::hold_open(&s.t, &address_key(&s, c).await).await;
    let undone = tokio::time::timeout(Duration::from_secs(5), store::unstamp_unsent(&s.t.db.pool, &stamped))
        .await
        .expect("the give-back takes no address lock")
        .unwrap();
    assert_eq!(undone, 1);
    sqlx::query("ROLLBACK").execute(&mut *addr).await.unwrap();
    let (dispatched, due_now): (i64, bool) =
        s.t.one(sqlx::query_as("SELECT dispatched_generation, due_at <= now() FROM core.desired_state_records")).await;
    assert_eq!((dispatched, due_now), (0, true), "given back as it was before the stamp");

    // A: Retry's recompute, paused after it locked the record (and made it due). B: the give-back
    // of a stamp taken before; it waits on the record row, then leaves Retry's write standing.
    let stamped = store::stamp_dispatched(&s.t.db.pool, c, 10, 60.0).await.unwrap();
    let retry = format!("SELECT core.recompute_desired_state_address({}, 'organization', {}, 'retry')", c.0, s.org.0);
    let (mut a, a_pid) = common::hold_open(&s.t, &retry).await;
    let record = Expect::row("core.desired_state_records", stamped[0].record_id.0);
    common::locks::assert_holds(&s.t.admin, a_pid, &[address(&s, c), record]).await;
    let pool = s.t.db.pool.clone();
    let b = tokio::spawn(async move { store::unstamp_unsent(&pool, &stamped).await });
    common::wait_for_waiter(&s.t.admin, &s.t.name, a_pid).await;
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    assert_eq!(b.await.unwrap().unwrap(), 0, "a record Retry made due is not the run's to give back");
    let (dispatched, due_now): (i64, bool) =
        s.t.one(sqlx::query_as("SELECT dispatched_generation, due_at <= now() FROM core.desired_state_records")).await;
    assert_eq!((dispatched, due_now), (1, true), "Retry's write stands");
}

#[tokio::test]
async fn a_read_back_waits_on_the_address_a_push_answer_holds_and_judges_what_it_wrote() {
    let s = setup().await;
    let c = s.connect("Answered", &s.receiver).await;
    s.relay_and_push(c).await;
    acts::grant(&s.t, s.org, s.product).await;
    s.pass().await;
    let r = s.record(c).await;
    assert_eq!((r.generation, r.confirmed_generation), (2, 1));
    // A: the push answer confirming generation 2, paused before its commit.
    let (mut a, a_pid) = common::hold_open(
        &s.t,
        &format!(
            "SELECT core.write_desired_state_push_answer({}, 2, true, '200', 5, 3600, '{}')",
            r.record_id.0,
            s.receiver.push_url()
        ),
    )
    .await;
    let record = Expect::row("core.desired_state_records", r.record_id.0);
    common::locks::assert_holds(&s.t.admin, a_pid, &[address(&s, c), record]).await;
    // B: a read-back that found the remote still at generation 1.
    let db = s.t.db.clone();
    let (id, old) = (r.record_id, json!({ "old": true }));
    let b = tokio::spawn(async move { store::write_read_back(&db.pool, id, true, Some(1), Some(&old)).await });
    common::wait_for_waiter(&s.t.admin, &s.t.name, a_pid).await;
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    assert!(b.await.unwrap().unwrap(), "B judged the record A confirmed: the remote drifted");
    let r = s.record(c).await;
    assert_eq!(
        (r.generation, r.confirmed_generation),
        (3, 2),
        "the repair is a new generation of the same content, pushed again"
    );
}
