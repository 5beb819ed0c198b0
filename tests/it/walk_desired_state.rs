//! Row-level lock walks (issue 36) of the desired-state relay's paths, the spec's 58 to 60: the
//! relay's claim (SKIP LOCKED: a second claimer skips what the first holds), one recompute and
//! the two writes that lock as it does (readBackItem, writePushAnswer), and the dispatch stamp.

use std::time::Duration;

use desired_state_receiver::{Config as ReceiverConfig, Receiver};
use member_console::{
    db::keys::AdvisoryKey,
    ids::{ConnectionId, OrganizationId, ProductId},
    integrations::desired_state::Relay,
    services::{
        desired_state::{
            self as ds,
            connections::{self, NewConnection},
            relay::Recomputed,
        },
        organizations::{self as orgs, OrgName},
    },
    store::desired_state as store,
};

use crate::{
    common::{
        TestDb, acts,
        locks::{Expect, LockWalk},
    },
    walk_topology::walk_one_statement,
};

/// A database with a chat product, an organization, and a receiver (as tests/it/desired_state.rs).
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
    let org = new_org(&t, "Acme").await;
    let receiver = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await.unwrap();
    let relay = Relay::new(Duration::from_secs(5)).unwrap();
    Setup { t, org, product, receiver, relay }
}

async fn new_org(t: &TestDb, name: &str) -> OrganizationId {
    orgs::create_organization(&t.db, &OrgName::parse(name).unwrap(), None).await.unwrap().organization_id
}

impl Setup {
    /// A connection to the receiver for both chat keys, its secret handed to the receiver.
    async fn connect(&self, name: &str) -> ConnectionId {
        let form = NewConnection::parse(name, &self.receiver.push_url(), "chat.seats, chat.video", true).unwrap();
        let id = connections::create_connection(&self.t.db, &form).await.unwrap();
        let c = store::connection(&self.t.db.pool, id).await.unwrap().unwrap();
        self.receiver.set_secrets(&[c.secret]).unwrap();
        id
    }

    async fn pass(&self) -> ds::RelayPass {
        ds::process_desired_state_outbox(&self.t.db, Duration::from_secs(20)).await.unwrap()
    }

    async fn record(&self, c: ConnectionId, org: OrganizationId) -> store::RecordState {
        store::record_at(&self.t.db.pool, c, org).await.unwrap().expect("a record")
    }

    fn address(&self, c: ConnectionId, org: OrganizationId) -> Expect {
        Expect::advisory(AdvisoryKey::DesiredStateAddress {
            connection: c.0.to_string(),
            recipient_kind: "organization".into(),
            recipient_id: org.0.to_string(),
        })
    }

    async fn notice_ids(&self) -> Vec<i64> {
        self.t.all(sqlx::query_scalar("SELECT notice_id FROM core.desired_state_outbox ORDER BY notice_id")).await
    }
}

fn record_row(r: &store::RecordState) -> Expect {
    Expect::row("core.desired_state_records", r.record_id.0)
}

// ---------- 58. Relay claim ----------

#[tokio::test]
async fn a_relay_claim_walked_lock_by_lock_takes_its_notices_in_one_skip_locked_statement_and_a_second_claimer_skips_them()
 {
    let s = setup().await;
    let c = s.connect("Claimed").await;
    acts::grant(&s.t, s.org, s.product).await;
    let ids = s.notice_ids().await;
    assert!(ids.len() >= 2, "the connection's walk and the grant's notice: {ids:?}");
    let rows: Vec<Expect> = ids.iter().map(|id| Expect::row("core.desired_state_outbox", id)).collect();
    // The first pass, paused after its claim (one statement locks every due notice).
    let mut w = LockWalk::start(&s.t, &ds::CLAIM_NOTICES_LOCKS, rows.len(), |db| async move {
        ds::process_desired_state_outbox(&db, Duration::from_secs(20)).await
    })
    .await;
    w.assert_holds_exactly(&rows).await;
    w.assert_probe_waits(&s.t, &rows[0]).await;
    // A notice written while the first pass holds its claim.
    let later = new_org(&s.t, "Later").await;
    let new: Vec<i64> = s.notice_ids().await.into_iter().filter(|id| !ids.contains(id)).collect();
    assert_eq!(new.len(), 1, "the new organization's notice");
    // A second pass claims only that one: it skips the rows the first holds, and never waits.
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        ds::process_desired_state_outbox(&s.t.db, Duration::from_secs(20)),
    )
    .await
    .expect("the second claimer does not wait on the first")
    .unwrap();
    assert_eq!(second.notices, 1, "the second claimer took the one notice the first does not hold");
    assert_eq!(s.notice_ids().await, ids, "the first's notices are still there, still its own");
    // The first pass's remaining pauses (the statement's other rows), then its end.
    for (k, row) in rows.iter().enumerate() {
        if k > 0 {
            w.assert_holds_exactly(&rows).await;
            w.assert_probe_waits(&s.t, row).await;
        }
        assert_eq!(w.step().await, k + 1 < rows.len());
    }
    let first = w.finish().await.unwrap();
    assert_eq!(first.notices, ids.len());
    assert!(s.notice_ids().await.is_empty(), "every notice done");
    assert!(store::record_at(&s.t.db.pool, c, later).await.unwrap().is_some());
    assert_eq!(s.record(c, s.org).await.generation, 1);
}

// ---------- 59. One recompute ----------

#[tokio::test]
async fn a_recompute_walked_lock_by_lock_takes_the_address_lock_then_the_record_row() {
    let s = setup().await;
    let c = s.connect("Recomputed").await;
    s.pass().await;
    let r = s.record(c, s.org).await;
    // The source changes: a grant (no address lock).
    acts::grant(&s.t, s.org, s.product).await;
    let expected = [s.address(c, s.org), record_row(&r)];
    let org = s.org;
    let did = LockWalk::run(&s.t, &ds::RECOMPUTE_ADDRESS_LOCKS, &expected, |db| async move {
        ds::recompute_address(&db, c, org.0, ds::Ask::Notice).await
    })
    .await
    .unwrap();
    assert_eq!(did, Recomputed::Generation);
    assert_eq!(s.record(c, s.org).await.generation, r.generation + 1);
}

#[tokio::test]
async fn a_recompute_of_an_address_with_no_record_walked_lock_by_lock_takes_the_address_lock_alone() {
    let s = setup().await;
    let c = s.connect("First record").await;
    s.pass().await;
    let fresh = new_org(&s.t, "Fresh").await;
    acts::grant(&s.t, fresh, s.product).await;
    assert!(store::record_at(&s.t.db.pool, c, fresh).await.unwrap().is_none());
    // The record it inserts is its own, invisible to the walk: the address lock is what it holds.
    let did = LockWalk::run(&s.t, &ds::RECOMPUTE_ADDRESS_LOCKS, &[s.address(c, fresh)], |db| async move {
        ds::recompute_address(&db, c, fresh.0, ds::Ask::Notice).await
    })
    .await
    .unwrap();
    assert_eq!(did, Recomputed::Created);
    assert_eq!(s.record(c, fresh).await.generation, 1);
}

#[tokio::test]
async fn a_push_answer_walked_lock_by_lock_takes_the_address_lock_then_the_record_row() {
    let s = setup().await;
    let c = s.connect("Answered").await;
    s.pass().await;
    let stamped = ds::dispatch::stamp_dispatched(&s.t.db, c, 10, 60.0).await.unwrap();
    assert_eq!(stamped.len(), 1);
    let r = s.record(c, s.org).await;
    let expected = [s.address(c, s.org), record_row(&r)];
    let (id, generation, url) = (r.record_id, r.generation, s.receiver.push_url());
    let written = LockWalk::run(&s.t, &ds::WRITE_PUSH_ANSWER_LOCKS, &expected, |db| async move {
        ds::dispatch::write_answer(&db, id, generation, true, "200", &url).await
    })
    .await
    .unwrap();
    assert!(written);
    assert_eq!(s.record(c, s.org).await.confirmed_generation, generation);
}

#[tokio::test]
async fn a_read_back_item_walked_lock_by_lock_takes_the_address_lock_then_the_record_row() {
    let s = setup().await;
    let c = s.connect("Read back").await;
    s.pass().await;
    let d = ds::dispatch_connection(&s.t.db, &s.relay, c, Duration::from_secs(20)).await.unwrap();
    assert_eq!(d.confirmed, 1);
    let r = s.record(c, s.org).await;
    assert_eq!(r.confirmed_generation, r.generation);
    let expected = [s.address(c, s.org), record_row(&r)];
    // The remote holds nothing for a record it confirmed: drift.
    let id = r.record_id;
    let drifted = LockWalk::run(&s.t, &ds::READ_BACK_ITEM_LOCKS, &expected, |db| async move {
        ds::read_back::read_back_item(&db, id, false, None, None).await
    })
    .await
    .unwrap();
    assert!(drifted);
    let after = s.record(c, s.org).await;
    assert!(after.generation > after.confirmed_generation, "the drifted record is to be pushed again");
}

// ---------- 60. Dispatch stamp ----------

#[tokio::test]
async fn a_dispatch_stamp_walked_lock_by_lock_takes_the_due_records_in_id_order_in_one_statement_and_no_address_lock() {
    let s = setup().await;
    let second = new_org(&s.t, "Second").await;
    let c = s.connect("Stamped").await;
    s.pass().await;
    let mut records = vec![s.record(c, s.org).await, s.record(c, second).await];
    records.sort_by_key(|r| r.record_id);
    let rows: Vec<Expect> = records.iter().map(record_row).collect();
    let relay = s.relay.clone();
    let d = walk_one_statement(&s.t, &ds::DISPATCH_LOCKS, &rows, |db| async move {
        ds::dispatch_connection(&db, &relay, c, Duration::from_secs(20)).await
    })
    .await
    .unwrap();
    assert_eq!((d.pushed, d.confirmed), (2, 2));
    for r in &records {
        let now = store::record_at(&s.t.db.pool, c, OrganizationId(r.recipient_id)).await.unwrap().unwrap();
        assert_eq!(now.confirmed_generation, now.generation);
    }
}
