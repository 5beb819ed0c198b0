//! Issue 40: a member's domain holds only once a real DNS server answers its TXT record. Each test
//! runs the project's local DNS (hickory-server on loopback) and the console's resolver against
//! it; the clock of the checks is the test's (`now` passed in), so 72 hours and 7 days pass at
//! once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use member_console::{
    ids::{OrganizationId, SiteDomain},
    integrations::dns::Resolver,
    services::{
        ServiceError,
        fedwiki::{
            self,
            verification::{self, Checked, Lookup, Recheck, Verification},
        },
    },
};

use crate::sites::{Sites, held, setup};

/// The sites fixture with a DNS server of its own and a resolver that asks it.
pub(crate) struct Domains {
    pub(crate) s: Sites,
    pub(crate) dns: local_dns::LocalDns,
    pub(crate) resolver: Resolver,
}

pub(crate) async fn domains(product: &str) -> Domains {
    let s = setup(product).await;
    let dns = local_dns::LocalDns::start(local_dns::Config::default()).await.expect("the local DNS");
    let resolver = Resolver::new(Some(dns.dns_addr()), Duration::from_millis(800)).expect("a resolver");
    Domains { s, dns, resolver }
}

pub(crate) fn owner_of(org: OrganizationId) -> String {
    format!("workspace:org-{org}")
}

impl Domains {
    pub(crate) fn publish(&self, domain: &str, values: &[&str]) {
        self.dns
            .set_txt(&format!("_member-console-challenge.{domain}"), values.iter().map(|v| v.to_string()).collect())
            .expect("the record is set");
    }

    pub(crate) fn unpublish(&self, domain: &str) {
        self.dns.remove_txt(&format!("_member-console-challenge.{domain}")).expect("the record is removed");
    }

    pub(crate) async fn verify(&self, org: OrganizationId, domain: &str, now: DateTime<Utc>) -> Verification {
        verification::verify_pending_claim(&self.s.t.db, &self.resolver, &held(domain), &owner_of(org), now)
            .await
            .unwrap()
    }

    pub(crate) async fn recheck(&self, org: OrganizationId, domain: &str, now: DateTime<Utc>) -> Recheck {
        verification::recheck_claim(&self.s.t.db, &self.resolver, &held(domain), &owner_of(org), now).await.unwrap()
    }

    /// Claim `domain` for `org`, publish its token and verify it.
    pub(crate) async fn claim_verified(&self, org: OrganizationId, domain: &str) {
        let pending = claim(&self.s, org, domain).await.unwrap();
        self.publish(domain, &[&pending.token]);
        assert_eq!(self.verify(org, domain, Utc::now()).await, Verification::Verified);
    }

    pub(crate) async fn servable(&self, hostname: &str) -> bool {
        self.s.count(&format!("SELECT count(*) FROM domains.servable_placements WHERE hostname = '{hostname}'")).await
            == 1
    }

    pub(crate) async fn notices(&self, org: OrganizationId) -> Vec<String> {
        self.s
            .t
            .all(
                sqlx::query_scalar("SELECT sentence FROM domains.claim_notices WHERE owner = $1 ORDER BY notice_id")
                    .bind(owner_of(org)),
            )
            .await
    }

    /// A second organization of the demo member's, granted `product`.
    pub(crate) async fn other_org(&self, name: &str, product: &str) -> OrganizationId {
        let t = &self.s.t;
        let org = crate::common::acts::community_org(t, name).await.organization_id;
        crate::common::acts::grant(t, org, crate::common::acts::product_id(t, product).await).await;
        t.run(
            sqlx::query(
                "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, 'owner')",
            )
            .bind(org)
            .bind(self.s.who),
        )
        .await;
        org
    }
}

async fn claim(s: &Sites, org: OrganizationId, typed: &str) -> Result<fedwiki::domains::PendingDomain, ServiceError> {
    let domain = fedwiki::domains::parse_domain(typed, &s.settings)?;
    fedwiki::domains::claim_domain(&s.t.db, s.who, org, &domain).await
}

#[tokio::test]
async fn a_claim_is_verified_through_the_real_dns_and_not_while_its_record_is_missing_or_holds_another_value() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let site = s.created("docs").await;
    let pending = claim(s, org, "Example.ORG.").await.unwrap();
    assert_eq!(pending.domain, "example.org");
    assert_eq!(pending.record_name, "_member-console-challenge.example.org");
    assert!(pending.token.starts_with("mc-") && pending.token.len() == 35, "{}", pending.token);
    assert!(!pending.already);
    // Claimed again: the same record, nothing new.
    let again = claim(s, org, "example.org").await.unwrap();
    assert!(again.already && again.token == pending.token);
    // A pending claim holds nothing: no claim row, and no site may be served under it.
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE name = 'example.org'").await, 0);
    let e = fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.example.org"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("example.org is not verified yet"), "{e}");

    let now = Utc::now();
    assert_eq!(d.verify(org, "example.org", now).await, Verification::NotYet(Lookup::Missing));
    d.publish("example.org", &["mc-00000000000000000000000000000000", "v=spf1 -all"]);
    match d.verify(org, "example.org", now).await {
        Verification::NotYet(Lookup::OtherValue(values)) => assert_eq!(values.len(), 2, "{values:?}"),
        other => panic!("{other:?}"),
    }
    let (outcome, detail): (String, Option<String>) =
        s.t.one(sqlx::query_as(
            "SELECT check_outcome, check_detail FROM domains.pending_claims WHERE name = 'example.org'",
        ))
        .await;
    assert_eq!(outcome, "other_value");
    assert!(detail.unwrap_or_default().contains("mc-0000"), "the page shows what was found");
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE name = 'example.org'").await, 0);

    // The token among other values, quoted as some DNS panels keep it: verified.
    d.publish("example.org", &["v=spf1 -all", &format!("\"{}\"", pending.token)]);
    assert_eq!(d.verify(org, "example.org", now).await, Verification::Verified);
    assert_eq!(s.count("SELECT count(*) FROM domains.pending_claims").await, 0);
    let (token, verified): (String, Option<DateTime<Utc>>) =
        s.t.one(sqlx::query_as("SELECT token, verified_at FROM domains.claims WHERE name = 'example.org'")).await;
    assert_eq!(token, pending.token);
    assert!(verified.is_some());
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.example.org"))
        .await
        .unwrap();
    assert!(d.servable("wiki.example.org").await);
    // A verified domain claimed again is already the organization's.
    let e = claim(s, org, "example.org").await.unwrap_err();
    assert!(e.to_string().contains("already yours"), "{e}");
}

#[tokio::test]
async fn two_organizations_wait_on_one_domain_and_the_first_to_verify_holds_it_while_the_other_is_told() {
    let d = domains("Basic").await;
    let a = d.s.org;
    let b = d.other_org("Rival Wikis", "Basic").await;
    let ta = claim(&d.s, a, "shared.example").await.unwrap().token;
    let tb = claim(&d.s, b, "shared.example").await.unwrap().token;
    // A pending claim blocks nobody: B also waits on a name under it.
    claim(&d.s, b, "wiki.shared.example").await.unwrap();
    assert_ne!(ta, tb);
    // Both tokens are in the record set; B checks first and holds it.
    d.publish("shared.example", &[&ta, &tb]);
    let now = Utc::now();
    assert_eq!(d.verify(b, "shared.example", now).await, Verification::Verified);
    assert_eq!(d.verify(a, "shared.example", now).await, Verification::Gone, "A's claim was let go");
    assert_eq!(
        d.s.count(&format!("SELECT count(*) FROM domains.pending_claims WHERE owner = '{}'", owner_of(a))).await,
        0
    );
    assert_eq!(
        d.notices(a).await,
        vec!["Another organization verified shared.example first, so your claim to it was let go.".to_string()]
    );
    // B's own pending claim under it stays B's.
    assert_eq!(
        d.s.count(&format!("SELECT count(*) FROM domains.pending_claims WHERE owner = '{}'", owner_of(b))).await,
        1
    );
    // A's "Check now" says so; a new claim by A is refused in words.
    let checked = verification::check_domain(&d.s.t.db, &d.resolver, d.s.who, a, &held("shared.example"), now).await;
    assert!(checked.unwrap_err().to_string().contains("not one of your domains"));
    let e = claim(&d.s, a, "shared.example").await.unwrap_err();
    assert!(e.to_string().contains("another owner holds"), "{e}");
    let e = claim(&d.s, a, "www.shared.example").await.unwrap_err();
    assert!(e.to_string().contains("another owner holds"), "{e}");
}

#[tokio::test]
async fn a_record_gone_for_72_hours_lapses_the_claim_and_its_names_and_its_return_restores_them() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let site = s.created("docs").await;
    d.claim_verified(org, "lapse.example").await;
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.lapse.example"))
        .await
        .unwrap();
    assert!(d.servable("wiki.lapse.example").await);
    let t0 = Utc::now();
    assert_eq!(d.recheck(org, "lapse.example", t0).await, Recheck::Holds);

    d.unpublish("lapse.example");
    let missing = d.recheck(org, "lapse.example", t0 + chrono::Duration::hours(1)).await;
    assert_eq!(missing, Recheck::Missing { lapses_at: t0 + chrono::Duration::hours(73) });
    assert!(d.servable("wiki.lapse.example").await, "still served while lapsing");
    assert!(d.notices(org).await[0].contains("is missing. Put it back before"), "{:?}", d.notices(org).await);
    // 71 hours on: still lapsing; 72: lapsed.
    let early = d.recheck(org, "lapse.example", t0 + chrono::Duration::hours(72)).await;
    assert!(matches!(early, Recheck::Missing { .. }), "{early:?}");
    let lapsed = d.recheck(org, "lapse.example", t0 + chrono::Duration::hours(73)).await;
    assert!(matches!(lapsed, Recheck::Lapsed { .. }), "{lapsed:?}");
    assert!(!d.servable("wiki.lapse.example").await, "a lapsed claim's names are not servable");
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'wiki.lapse.example'").await, 1);
    assert!(d.notices(org).await.last().unwrap().contains("lapse.example lapsed"));
    // No site may be placed under it while it is lapsed.
    let other = s.created("more").await;
    let e = fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &other, &SiteDomain::from("docs.lapse.example"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("has lapsed"), "{e}");

    // The record back: restored, and its names served again.
    d.publish("lapse.example", &[&token_of(s, "lapse.example").await]);
    let back = d.recheck(org, "lapse.example", t0 + chrono::Duration::hours(80)).await;
    assert_eq!(back, Recheck::Restored);
    assert!(d.servable("wiki.lapse.example").await);

    // Gone again: lapsed 72 hours on, then released 7 days after that, with its names.
    d.unpublish("lapse.example");
    let t1 = t0 + chrono::Duration::hours(100);
    assert!(matches!(d.recheck(org, "lapse.example", t1).await, Recheck::Missing { .. }));
    assert!(matches!(d.recheck(org, "lapse.example", t1 + chrono::Duration::hours(72)).await, Recheck::Lapsed { .. }));
    let kept = d.recheck(org, "lapse.example", t1 + chrono::Duration::hours(72 + 24 * 7 - 1)).await;
    assert!(matches!(kept, Recheck::Lapsed { .. }), "{kept:?}");
    let released = d.recheck(org, "lapse.example", t1 + chrono::Duration::hours(72 + 24 * 7)).await;
    assert_eq!(released, Recheck::Released { placements: vec![SiteDomain::from("wiki.lapse.example")] });
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE name = 'lapse.example'").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'wiki.lapse.example'").await, 0);
    assert_eq!(s.status("docs").await, "active", "the site keeps its own address");
    assert!(d.notices(org).await.last().unwrap().contains("lapse.example was released"));
}

async fn token_of(s: &Sites, domain: &str) -> String {
    s.t.one(sqlx::query_scalar("SELECT token FROM domains.claims WHERE name = $1").bind(domain)).await
}

#[tokio::test]
async fn a_lapsed_domain_released_by_its_member_goes_with_its_names_and_a_pending_one_is_withdrawn() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let site = s.created("docs").await;
    d.claim_verified(org, "gone.example").await;
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("gone.example")).await.unwrap();
    d.unpublish("gone.example");
    let t0 = Utc::now();
    d.recheck(org, "gone.example", t0).await;
    assert!(matches!(d.recheck(org, "gone.example", t0 + chrono::Duration::hours(72)).await, Recheck::Lapsed { .. }));
    fedwiki::domains::release_domain(&s.t.db, s.who, org, &held("gone.example")).await.unwrap();
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE name = 'gone.example'").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'gone.example'").await, 0);
    // A pending claim is withdrawn by the same button.
    claim(s, org, "later.example").await.unwrap();
    fedwiki::domains::release_domain(&s.t.db, s.who, org, &held("later.example")).await.unwrap();
    assert_eq!(s.count("SELECT count(*) FROM domains.pending_claims").await, 0);
}

#[tokio::test]
async fn a_resolver_that_times_out_or_fails_changes_nothing_and_is_told_as_could_not_check() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    d.claim_verified(org, "flaky.example").await;
    let pending = claim(s, org, "slow.example").await.unwrap();
    d.publish("slow.example", &[&pending.token]);
    let record = |domain: &str| format!("_member-console-challenge.{domain}");
    d.dns.set_fault(&record("slow.example"), local_dns::FaultMode::Timeout).unwrap();
    d.dns.set_fault(&record("flaky.example"), local_dns::FaultMode::Servfail).unwrap();
    let t0 = Utc::now();
    let started = std::time::Instant::now();
    match d.verify(org, "slow.example", t0).await {
        Verification::NotYet(Lookup::CouldNotCheck(why)) => assert!(!why.is_empty()),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "the lookup is bounded: {:?}", started.elapsed());
    assert_eq!(s.count("SELECT count(*) FROM domains.pending_claims WHERE name = 'slow.example'").await, 1);
    // A verified claim whose record cannot be read never lapses by that, however late.
    for hours in [0, 80, 24 * 30] {
        let r = d.recheck(org, "flaky.example", t0 + chrono::Duration::hours(hours)).await;
        assert!(matches!(r, Recheck::CouldNotCheck(_)), "{r:?}");
    }
    let (missing, lapsed, outcome): (Option<DateTime<Utc>>, Option<DateTime<Utc>>, String) =
        s.t.one(sqlx::query_as(
            "SELECT missing_since, lapsed_at, check_outcome FROM domains.claims WHERE name = 'flaky.example'",
        ))
        .await;
    assert_eq!((missing, lapsed, outcome.as_str()), (None, None, "could_not_check"));
    // The faults gone, both read normally.
    d.dns.clear_fault(&record("slow.example")).unwrap();
    d.dns.clear_fault(&record("flaky.example")).unwrap();
    assert_eq!(d.verify(org, "slow.example", t0).await, Verification::Verified);
    assert_eq!(d.recheck(org, "flaky.example", t0).await, Recheck::Holds);
}

#[tokio::test]
async fn the_checks_pass_verifies_what_is_due_and_lets_an_unverified_claim_go_after_seven_days() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let ready = claim(s, org, "ready.example").await.unwrap();
    claim(s, org, "never.example").await.unwrap();
    d.publish("ready.example", &[&ready.token]);
    let now = member_console::services::clock::now(&s.t.db).await.unwrap();
    let pass = verification::check_due_claims(&s.t.db, &d.resolver, now).await.unwrap();
    assert_eq!((pass.checked, pass.verified), (2, 1), "{pass:?}");
    // Checked a minute later: nothing is due (the next check is five minutes on).
    let pass = verification::check_due_claims(&s.t.db, &d.resolver, now + chrono::Duration::minutes(1)).await.unwrap();
    assert_eq!(pass.checked, 0, "{pass:?}");
    let pass = verification::check_due_claims(&s.t.db, &d.resolver, now + chrono::Duration::days(7)).await.unwrap();
    assert_eq!(pass.expired, 1, "{pass:?}");
    assert_eq!(s.count("SELECT count(*) FROM domains.pending_claims").await, 0);
    assert!(d.notices(org).await.iter().any(|n| n.contains("never.example was not verified within 7 days")));
    // The verified one is checked again a day on.
    let pass = verification::check_due_claims(&s.t.db, &d.resolver, now + chrono::Duration::days(8)).await.unwrap();
    assert_eq!(pass.checked, 1, "{pass:?}");
}

#[tokio::test]
async fn check_now_tells_the_member_what_it_found() {
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let pending = claim(s, org, "now.example").await.unwrap();
    let now = Utc::now();
    let check = async || verification::check_domain(&s.t.db, &d.resolver, s.who, org, &held("now.example"), now).await;
    let c = check().await.unwrap();
    assert_eq!(c, Checked::Pending(Verification::NotYet(Lookup::Missing)));
    assert!(
        c.sentence(&held("now.example")).contains("No TXT record was found at _member-console-challenge.now.example")
    );
    d.publish("now.example", &[&pending.token]);
    let c = check().await.unwrap();
    assert!(c.holds() && c.sentence(&held("now.example")).contains("is verified"), "{c:?}");
    assert_eq!(check().await.unwrap(), Checked::Verified(Recheck::Holds));
    // Another organization's member may not check it.
    let other = d.other_org("Other Wikis", "Basic").await;
    let e = verification::check_domain(&s.t.db, &d.resolver, s.who, other, &held("now.example"), now).await;
    assert!(e.unwrap_err().to_string().contains("not one of your domains"));
}

#[tokio::test]
async fn a_member_checks_a_domain_and_dismisses_a_notice_on_the_page_and_an_operator_sees_what_waits_on_dns() {
    use crate::common::{TestApp, pages::Session};
    use member_console::demo;
    let d = domains("Basic").await;
    let (s, org) = (&d.s, d.s.org);
    let addr = d.dns.dns_addr();
    let app = TestApp::spawn_with(&s.t, |c| c.dns_resolver = Some(addr)).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let o = org.to_string();
    let added = member.post("/sites/domains", &[("organization_id", &o), ("domain", "page.example")], false).await;
    assert_eq!(added.header("location"), Some("/sites?asked=domain"), "{}", added.body);
    let page = member.get("/sites?asked=domain").await;
    assert!(page.body.contains("Now prove the domain is yours"), "{}", page.body);
    let token: String =
        s.t.one(sqlx::query_scalar("SELECT token FROM domains.pending_claims WHERE name = 'page.example'")).await;
    assert!(page.body.contains("_member-console-challenge.page.example") && page.body.contains(&token));
    assert!(page.body.contains(&format!(r#"data-copy="{token}""#)), "a copy button carries the value");

    let check = [("organization_id", o.as_str()), ("domain", "page.example")];
    let not_yet = member.post("/sites/domains/check", &check, false).await;
    assert_eq!(not_yet.header("location"), Some("/sites?asked=unverified"), "{}", not_yet.body);
    let page = member.get("/sites?asked=unverified").await;
    assert!(page.body.contains("The record was not found") && page.body.contains("no TXT record found"));
    // The operator's farm page lists it as waiting on DNS.
    let operator = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let farm = operator.get("/operator/farm").await;
    assert!(farm.body.contains("Domains waiting on DNS") && farm.body.contains("page.example"), "{}", farm.body);

    d.publish("page.example", &[&token]);
    let verified = member.post("/sites/domains/check", &check, false).await;
    assert_eq!(verified.header("location"), Some("/sites?asked=verified"), "{}", verified.body);
    let page = member.get("/sites?asked=verified").await;
    assert!(page.body.contains("the domain is verified") && page.body.contains(">verified<"), "{}", page.body);
    let farm = operator.get("/operator/farm").await;
    assert!(!farm.body.contains("page.example"), "no longer waiting: {}", farm.body);

    // A notice (a claim let go after seven days) is shown until dismissed, by its organization only.
    claim(s, org, "old.example").await.unwrap();
    let later = member_console::services::clock::now(&s.t.db).await.unwrap() + chrono::Duration::days(8);
    verification::check_due_claims(&s.t.db, &d.resolver, later).await.unwrap();
    let page = member.get("/sites").await;
    assert!(page.body.contains("old.example was not verified within 7 days"), "{}", page.body);
    let notice: i64 = s.t.one(sqlx::query_scalar("SELECT notice_id FROM domains.claim_notices")).await;
    let other = d.other_org("Other Wikis", "Basic").await.to_string();
    let foreign = member
        .post(
            "/sites/domains/notices/dismiss",
            &[("organization_id", &other), ("notice_id", &notice.to_string())],
            false,
        )
        .await;
    assert_eq!(foreign.status, 404, "another organization's notice: {}", foreign.body);
    let bad =
        member.post("/sites/domains/notices/dismiss", &[("organization_id", &o), ("notice_id", "x")], false).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let dismissed = member
        .post("/sites/domains/notices/dismiss", &[("organization_id", &o), ("notice_id", &notice.to_string())], false)
        .await;
    assert_eq!(dismissed.header("location"), Some("/sites?asked=dismissed"), "{}", dismissed.body);
    assert!(!member.get("/sites").await.body.contains("old.example was not verified"));
    // A check of a domain that is not the organization's is refused in words, nothing written.
    let foreign =
        member.post("/sites/domains/check", &[("organization_id", &o), ("domain", "nope.example")], false).await;
    assert_eq!(foreign.status, 422, "{}", foreign.body);
    assert!(foreign.body.contains("nope.example is not one of your domains"), "{}", foreign.body);
}
