//! Issue 40's lock paths at row level: the verification, the re-check (lapse, restore, release),
//! the expiry of a pending claim and a lapsed domain's release, each walked lock by lock; and the
//! verification and the lapse paused under the registry lock while a member's claim, placement or
//! release on the same domain waits on that very key, then sees what the first one committed.

use std::time::Duration;

use chrono::Utc;
use member_console::{
    db::keys::AdvisoryKey,
    ids::SiteDomain,
    integrations::dns::Resolver,
    services::fedwiki::{
        self,
        verification::{self, Recheck, Verification},
    },
};

use crate::common::{
    self,
    locks::{Expect, LockWalk, assert_waits_on_key, key_value},
};
use crate::domain_verification::{Domains, domains, owner_of};
use crate::sites::held;

fn registry_lock() -> Expect {
    Expect::advisory(AdvisoryKey::Registry)
}

fn placement(hostname: &str) -> Expect {
    Expect::row("domains.placements", hostname)
}

fn resolver(d: &Domains) -> Resolver {
    Resolver::new(Some(d.dns.dns_addr()), Duration::from_millis(800)).unwrap()
}

async fn pending_token(d: &Domains, org: member_console::ids::OrganizationId, domain: &str) -> String {
    let p = fedwiki::domains::claim_domain(&d.s.t.db, d.s.who, org, &held(domain)).await.unwrap();
    p.token
}

#[tokio::test]
async fn each_verification_path_takes_the_registry_lock_and_a_release_its_placements_in_order() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let owner = owner_of(org);
    // Verify: the registry lock alone (the claim's row and the pending one's deletion are its own).
    let token = pending_token(&d, org, "walk.example").await;
    d.publish("walk.example", &[&token]);
    let (r, o) = (resolver(&d), owner.clone());
    let out = LockWalk::run(&s.t, &verification::VERIFY_DOMAIN_LOCKS, &[registry_lock()], |db| async move {
        verification::verify_pending_claim(&db, &r, &held("walk.example"), &o, Utc::now()).await
    })
    .await
    .unwrap();
    assert_eq!(out, Verification::Verified);

    // Expire: the registry lock alone.
    pending_token(&d, org, "stale.example").await;
    let o = owner.clone();
    let later = Utc::now() + chrono::Duration::days(8);
    let out = LockWalk::run(&s.t, &verification::EXPIRE_PENDING_CLAIM_LOCKS, &[registry_lock()], |db| async move {
        verification::expire_pending_claim(&db, &held("stale.example"), &o, later).await
    })
    .await
    .unwrap();
    assert_eq!(out, Verification::Expired);

    // Re-check, the record gone: a lapse writes the claim's row alone, under the registry lock.
    let site = s.created("docs").await;
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.walk.example"))
        .await
        .unwrap();
    d.unpublish("walk.example");
    let t0 = Utc::now();
    assert!(matches!(d.recheck(org, "walk.example", t0).await, Recheck::Missing { .. }));
    let (r, o) = (resolver(&d), owner.clone());
    let out = LockWalk::run(&s.t, &verification::RECHECK_DOMAIN_LOCKS, &[registry_lock()], |db| async move {
        verification::recheck_claim(&db, &r, &held("walk.example"), &o, t0 + chrono::Duration::hours(72)).await
    })
    .await
    .unwrap();
    assert!(matches!(out, Recheck::Lapsed { .. }), "{out:?}");
    // Its release seven days on: the registry lock, then the placement rows in host name order.
    let (r, o) = (resolver(&d), owner.clone());
    let expected = [registry_lock(), placement("wiki.walk.example")];
    let out = LockWalk::run(&s.t, &verification::RECHECK_DOMAIN_LOCKS, &expected, |db| async move {
        verification::recheck_claim(&db, &r, &held("walk.example"), &o, t0 + chrono::Duration::days(11)).await
    })
    .await
    .unwrap();
    assert_eq!(out, Recheck::Released { placements: vec![SiteDomain::from("wiki.walk.example")] });

    // A member's release of a lapsed domain: the registry lock, then its placements.
    d.claim_verified(org, "left.example").await;
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("left.example")).await.unwrap();
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("a.left.example"))
        .await
        .unwrap();
    d.unpublish("left.example");
    d.recheck(org, "left.example", t0).await;
    assert!(matches!(d.recheck(org, "left.example", t0 + chrono::Duration::hours(72)).await, Recheck::Lapsed { .. }));
    let who = s.who;
    let expected = [registry_lock(), placement("a.left.example"), placement("left.example")];
    LockWalk::run(&s.t, &fedwiki::domains::RELEASE_DOMAIN_LOCKS, &expected, |db| async move {
        fedwiki::domains::release_domain(&db, who, org, &held("left.example")).await
    })
    .await
    .unwrap();
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname LIKE '%left.example'").await, 0);
}

/// Run `competitor` while `walk` is paused under the registry lock: it waits on that very key,
/// held by the walk's backend; the walk then finishes, and the competitor's outcome comes back.
async fn waits_behind<T: Send + 'static, U: Send + 'static>(
    d: &Domains,
    walk: LockWalk<T>,
    competitor: impl Future<Output = U> + Send + 'static,
) -> (T, U) {
    let t = &d.s.t;
    let holder = walk.paused_pid();
    let task = tokio::spawn(competitor);
    let waiter = common::wait_for_waiter(&t.admin, &t.name, holder).await;
    assert_waits_on_key(&t.admin, waiter, holder, key_value(&t.admin, &AdvisoryKey::Registry).await).await;
    let first = walk.finish().await;
    let second = tokio::time::timeout(Duration::from_secs(30), task).await.expect("the competitor finished").unwrap();
    (first, second)
}

#[tokio::test]
async fn a_verification_under_the_registry_lock_holds_back_a_claim_a_placement_and_a_release_of_its_domain() {
    let d = domains("Basic").await;
    let (s, a) = (&d.s, d.s.org);
    let b = d.other_org("Rival Wikis", "Basic").await;
    let site = s.created("docs").await;
    let owner = owner_of(a);
    for (i, competitor) in ["claim", "place", "release"].into_iter().enumerate() {
        let domain = format!("race{i}.example");
        let token = pending_token(&d, a, &domain).await;
        d.publish(&domain, &[&token]);
        let (r, o, name) = (resolver(&d), owner.clone(), domain.clone());
        let walk = LockWalk::start(&s.t, &verification::VERIFY_DOMAIN_LOCKS, 1, |db| async move {
            verification::verify_pending_claim(&db, &r, &held(&name), &o, Utc::now()).await
        })
        .await;
        let (db, who, site) = (s.t.db.clone(), s.who, site.clone());
        let name = domain.clone();
        let (verified, after) = match competitor {
            // Another organization's claim of the same name: refused once the first is verified.
            "claim" => {
                waits_behind(&d, walk, async move {
                    fedwiki::domains::claim_domain(&db, who, b, &held(&name))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .await
            }
            // The verifying organization's placement under it: accepted once it is verified.
            "place" => {
                waits_behind(&d, walk, async move {
                    let host = SiteDomain::from(format!("wiki.{name}"));
                    fedwiki::domains::place_site_under_domain(&db, who, &site, &host).await.map_err(|e| e.to_string())
                })
                .await
            }
            // Its release: of the verified claim, after the verification committed.
            _ => {
                waits_behind(&d, walk, async move {
                    fedwiki::domains::release_domain(&db, who, a, &held(&name))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .await
            }
        };
        assert_eq!(verified.unwrap(), Verification::Verified, "{competitor}");
        match competitor {
            "claim" => assert!(after.unwrap_err().contains("another owner holds"), "{competitor}"),
            "place" => {
                after.unwrap();
                assert!(d.servable(&format!("wiki.{domain}")).await);
            }
            _ => {
                after.unwrap();
                let n = s.count(&format!("SELECT count(*) FROM domains.claims WHERE name = '{domain}'")).await;
                assert_eq!(n, 0, "released after it was verified");
            }
        }
    }
}

#[tokio::test]
async fn a_lapse_under_the_registry_lock_holds_back_a_placement_under_its_domain_which_is_then_refused() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let site = s.created("docs").await;
    d.claim_verified(org, "fading.example").await;
    d.unpublish("fading.example");
    let t0 = Utc::now();
    assert!(matches!(d.recheck(org, "fading.example", t0).await, Recheck::Missing { .. }));
    let (r, o) = (resolver(&d), owner_of(org));
    let walk = LockWalk::start(&s.t, &verification::RECHECK_DOMAIN_LOCKS, 1, |db| async move {
        verification::recheck_claim(&db, &r, &held("fading.example"), &o, t0 + chrono::Duration::hours(72)).await
    })
    .await;
    let (db, who) = (s.t.db.clone(), s.who);
    let (lapsed, placed) = waits_behind(&d, walk, async move {
        let host = SiteDomain::from("wiki.fading.example");
        fedwiki::domains::place_site_under_domain(&db, who, &site, &host).await.map_err(|e| e.to_string())
    })
    .await;
    assert!(matches!(lapsed.unwrap(), Recheck::Lapsed { .. }));
    assert!(placed.unwrap_err().contains("has lapsed"));
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'wiki.fading.example'").await, 0);
}
