//! A member's domain is proven by DNS before it holds (issue 40): a claim starts pending with a
//! token the member publishes as `_member-console-challenge.<domain> TXT "<token>"`. Every check
//! resolves the record with no lock held, then takes the registry's lock (Registry.WithLock) to
//! record what it found: a pending claim turns verified (the disjointness rules checked again
//! under the lock, the other organizations' pending claims on the name let go), and a verified
//! one that lost its record lapses after [`LAPSE_AFTER`] and is released [`RELEASE_AFTER_LAPSE`]
//! later. A lookup that could not be made ("could not check": a timeout, SERVFAIL) changes no
//! state: it is tried again.
//!
//! Every path takes `now` from its caller: the job passes the database's clock, a test its own.

use chrono::{DateTime, Duration, Utc};

use crate::{
    db::{
        Db, Tx,
        locks::{Lock, PathLocks},
    },
    ids::{AccountId, OrganizationId, SiteDomain},
    integrations::dns::Resolver,
    services::ServiceError,
    store::{
        domains::{self as registry_store, CheckOutcome, DueCheck},
        fedwiki as store,
    },
};

use super::{
    handlers::ensure_member,
    registry::{self, workspace_owner},
};

/// The label the record sits under, before the domain.
pub const RECORD_LABEL: &str = "_member-console-challenge";
/// How long a claim waits for its record before it is let go.
pub const PENDING_FOR: Duration = Duration::days(7);
/// How long a verified claim's record may be missing before the claim lapses.
pub const LAPSE_AFTER: Duration = Duration::hours(72);
/// How long a lapsed claim is kept (its record may come back) before it is released.
pub const RELEASE_AFTER_LAPSE: Duration = Duration::days(7);
/// How often a pending claim is checked.
pub const PENDING_CHECK_EVERY: Duration = Duration::minutes(5);
/// How often a verified claim is checked while its record is there.
pub const VERIFIED_CHECK_EVERY: Duration = Duration::days(1);
/// How often a verified claim whose record is missing is checked (a record put back restores it
/// within this).
pub const MISSING_CHECK_EVERY: Duration = Duration::hours(1);
/// When a check that could not be made is tried again.
pub const RETRY_AFTER: Duration = Duration::minutes(15);
/// How many domains one organization may wait on at once.
pub const MAX_PENDING: i64 = 20;

/// The name the record is looked up at.
pub fn record_name(domain: &SiteDomain) -> String {
    format!("{RECORD_LABEL}.{domain}")
}

/// A new claim's token: 128 random bits, in the record's value as `mc-<32 hex digits>`.
pub fn new_token() -> Result<String, ServiceError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| ServiceError::Refused(format!("no randomness for a token: {e}")))?;
    Ok(format!("mc-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// What a lookup found for a claim's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found,
    /// No TXT record at the name.
    Missing,
    /// TXT records at the name, none of them the token.
    OtherValue(Vec<String>),
    /// The lookup could not be made: the reason, for a person.
    CouldNotCheck(String),
}

impl Lookup {
    fn outcome(&self) -> CheckOutcome {
        match self {
            Lookup::Found => CheckOutcome::Found,
            Lookup::Missing => CheckOutcome::Missing,
            Lookup::OtherValue(_) => CheckOutcome::OtherValue,
            Lookup::CouldNotCheck(_) => CheckOutcome::CouldNotCheck,
        }
    }

    /// What the page shows beside the outcome.
    fn detail(&self) -> Option<String> {
        match self {
            Lookup::Found | Lookup::Missing => None,
            Lookup::OtherValue(values) => {
                let shown: Vec<String> = values.iter().take(3).map(|v| format!("“{}”", clip(v))).collect();
                Some(format!("found {}", shown.join(", ")))
            }
            Lookup::CouldNotCheck(why) => Some(clip(why)),
        }
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 120 { s.to_string() } else { format!("{}…", s.chars().take(120).collect::<String>()) }
}

/// Resolve the claim's record, with no lock held. A value matches when it equals the token once
/// surrounding spaces and quotes are dropped (as some DNS panels store them).
pub async fn look_up(dns: &Resolver, domain: &SiteDomain, token: &str) -> Lookup {
    match dns.txt(&record_name(domain)).await {
        Err(e) => Lookup::CouldNotCheck(e.0),
        Ok(values) if values.is_empty() => Lookup::Missing,
        Ok(values) if values.iter().any(|v| v.trim().trim_matches('"').trim() == token) => Lookup::Found,
        Ok(values) => Lookup::OtherValue(values),
    }
}

pub static VERIFY_DOMAIN_LOCKS: PathLocks = PathLocks {
    path: "Registry: verify a member's domain",
    function: "services::fedwiki::verification::verify_pending_claim",
    kind: "Registry",
    locks: &[Lock::Registry],
    why: "The TXT lookup first, with no lock held; then the registry lock, under which the pending claim is read \
          again, the disjointness rules are checked again against the verified claims (another organization may \
          have verified first), and the claim is written verified while every other owner's pending claim at, \
          under or above the name is let go with a notice: rules that span rows no constraint compares. A lookup \
          that did not find the token records the check alone, under the same lock.",
};

pub static EXPIRE_PENDING_CLAIM_LOCKS: PathLocks = PathLocks {
    path: "Registry: let an unverified domain go",
    function: "services::fedwiki::verification::expire_pending_claim",
    kind: "Registry",
    locks: &[Lock::Registry],
    why: "The registry lock, then the pending claim read again (still past its seven days) and deleted with a \
          notice: every write to the pending claims runs under the registry lock, so a verification letting \
          other owners' claims go sees each one.",
};

pub static RECHECK_DOMAIN_LOCKS: PathLocks = PathLocks {
    path: "Registry: re-check a member's verified domain",
    function: "services::fedwiki::verification::recheck_claim",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::PlacementRows],
    why: "The TXT lookup first, with no lock held; then the registry lock, under which the claim is read again and \
          its check recorded: missing since, lapsed (its placements leave the servable set, a view over the \
          claim, so no placement or site row is written), or restored. When a lapsed claim's seven days are over \
          it is released: its placements locked in host name order (the order the site trigger takes them in) \
          and deleted, then the claim. No site row is taken: no path holds a placement lock and then takes a \
          site lock.",
};

/// What a pending claim's check came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    Verified,
    /// Not verified yet: what the lookup found.
    NotYet(Lookup),
    /// Past its seven days: let go.
    Expired,
    /// Another organization verified the name (or one at or above it) first: let go.
    Lost {
        holder_name: SiteDomain,
    },
    /// There is no such pending claim (any more).
    Gone,
}

/// Check `owner`'s pending claim on `domain` and, when its record is there, verify it.
#[tracing::instrument(name = "Verify a domain", skip(db, dns), fields(domain = %domain, owner = %owner))]
pub async fn verify_pending_claim(
    db: &Db,
    dns: &Resolver,
    domain: &SiteDomain,
    owner: &str,
    now: DateTime<Utc>,
) -> Result<Verification, ServiceError> {
    let pending = {
        let mut read = db.read().await?;
        registry_store::pending_claim(read.conn(), domain, owner).await?
    };
    let Some(pending) = pending else { return Ok(Verification::Gone) };
    if pending.expires_at <= now {
        return expire_pending_claim(db, domain, owner, now).await;
    }
    let found = look_up(dns, domain, &pending.token).await;
    let verification = registry::with_lock_for(db, &VERIFY_DOMAIN_LOCKS, async |tx: &mut Tx| {
        // Read again under the lock: released by another's verification, expired or withdrawn
        // meanwhile, or the same claim made again with a new token.
        match registry_store::pending_claim(tx.conn(), domain, owner).await? {
            Some(p) if p.token == pending.token => {}
            _ => return Ok(Verification::Gone),
        }
        if found != Lookup::Found {
            let next = now + if matches!(found, Lookup::CouldNotCheck(_)) { RETRY_AFTER } else { PENDING_CHECK_EVERY };
            registry_store::record_pending_check(
                tx.conn(),
                domain,
                owner,
                now,
                found.outcome(),
                found.detail().as_deref(),
                next,
            )
            .await?;
            return Ok(Verification::NotYet(found.clone()));
        }
        if let Some(holder_name) = held_by_another(tx, domain, owner).await? {
            registry_store::delete_pending_claim(tx.conn(), domain, owner).await?;
            let sentence = format!(
                "{domain} was verified, but another organization holds {holder_name} already, so this claim was let go."
            );
            registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
            return Ok(Verification::Lost { holder_name });
        }
        registry_store::delete_pending_claim(tx.conn(), domain, owner).await?;
        registry_store::insert_verified_claim(
            tx.conn(),
            domain,
            owner,
            &pending.token,
            now,
            now + VERIFIED_CHECK_EVERY,
        )
        .await?;
        for (name, other) in registry_store::release_conflicting_pending(tx.conn(), domain, owner).await? {
            let sentence = if name == *domain {
                format!("Another organization verified {domain} first, so your claim to it was let go.")
            } else {
                format!("Another organization verified {domain} first, so your claim to {name} was let go.")
            };
            registry_store::insert_notice(tx.conn(), &other, &name, &sentence, now).await?;
            tracing::info!(domain = %name, owner = %other, verified = %domain, "a pending domain claim was let go");
        }
        Ok(Verification::Verified)
    })
    .await?;
    match &verification {
        Verification::Verified => tracing::info!(domain = %domain, owner = %owner, "a domain was verified"),
        Verification::Lost { holder_name } => {
            tracing::info!(domain = %domain, owner = %owner, holder = %holder_name, "a verified domain was held by another")
        }
        _ => {}
    }
    Ok(verification)
}

/// The verified claim of another owner at or above `domain`, or one under it, by name.
async fn held_by_another(tx: &mut Tx, domain: &SiteDomain, owner: &str) -> Result<Option<SiteDomain>, ServiceError> {
    if let Some((name, o)) = registry_store::covering_claim(tx.conn(), domain).await?
        && o != owner
    {
        return Ok(Some(name));
    }
    if registry_store::other_claim_under(tx.conn(), domain, owner).await? {
        return Ok(Some(domain.clone()));
    }
    Ok(None)
}

/// Let go of `owner`'s pending claim on `domain` once its seven days are over, with a notice.
#[tracing::instrument(name = "Let an unverified domain go", skip(db), fields(domain = %domain, owner = %owner))]
pub async fn expire_pending_claim(
    db: &Db,
    domain: &SiteDomain,
    owner: &str,
    now: DateTime<Utc>,
) -> Result<Verification, ServiceError> {
    registry::with_lock_for(db, &EXPIRE_PENDING_CLAIM_LOCKS, async |tx: &mut Tx| {
        match registry_store::pending_claim(tx.conn(), domain, owner).await? {
            Some(p) if p.expires_at <= now => {}
            Some(_) => return Ok(Verification::NotYet(Lookup::Missing)),
            None => return Ok(Verification::Gone),
        }
        registry_store::delete_pending_claim(tx.conn(), domain, owner).await?;
        let sentence = format!(
            "{domain} was not verified within {} days, so the claim was let go. Add the domain again to get a new record.",
            PENDING_FOR.num_days()
        );
        registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
        tracing::info!(domain = %domain, owner = %owner, "an unverified domain claim expired");
        Ok(Verification::Expired)
    })
    .await
}

/// What a verified claim's check came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// The record is there (or the claim is one no check applies to).
    Holds,
    /// The record is there again: a lapsing or lapsed claim holds again.
    Restored,
    /// The record is missing; the claim lapses at this time unless it comes back.
    Missing { lapses_at: DateTime<Utc> },
    /// Lapsed: its placements are not servable; released at this time unless it comes back.
    Lapsed { releases_at: DateTime<Utc> },
    /// Lapsed for seven days: released, with its placements.
    Released { placements: Vec<SiteDomain> },
    /// The lookup could not be made: nothing changed.
    CouldNotCheck(String),
    /// There is no such claim (any more).
    Gone,
}

/// Check `owner`'s verified claim on `domain` again.
#[tracing::instrument(name = "Re-check a domain", skip(db, dns), fields(domain = %domain, owner = %owner))]
pub async fn recheck_claim(
    db: &Db,
    dns: &Resolver,
    domain: &SiteDomain,
    owner: &str,
    now: DateTime<Utc>,
) -> Result<Recheck, ServiceError> {
    let claim = {
        let mut read = db.read().await?;
        registry_store::verified_claim(read.conn(), domain, owner).await?
    };
    let Some(claim) = claim else { return Ok(Recheck::Gone) };
    let Some(token) = claim.token else { return Ok(Recheck::Holds) };
    let found = look_up(dns, domain, &token).await;
    let recheck = registry::with_lock_for(db, &RECHECK_DOMAIN_LOCKS, async |tx: &mut Tx| {
        let Some(c) = registry_store::verified_claim(tx.conn(), domain, owner).await? else {
            return Ok(Recheck::Gone);
        };
        if c.token.as_deref() != Some(token.as_str()) {
            return Ok(Recheck::Gone);
        }
        let detail = found.detail();
        let record = async |tx: &mut Tx, missing: Option<DateTime<Utc>>, lapsed: Option<DateTime<Utc>>, next| {
            registry_store::record_claim_check(
                tx.conn(),
                domain,
                owner,
                now,
                found.outcome(),
                detail.as_deref(),
                missing,
                lapsed,
                next,
            )
            .await
        };
        match &found {
            Lookup::CouldNotCheck(why) => {
                record(tx, c.missing_since, c.lapsed_at, now + RETRY_AFTER).await?;
                Ok(Recheck::CouldNotCheck(why.clone()))
            }
            Lookup::Found => {
                record(tx, None, None, now + VERIFIED_CHECK_EVERY).await?;
                if c.missing_since.is_none() {
                    return Ok(Recheck::Holds);
                }
                let sentence = format!("The record of {domain} is back: the domain holds again.");
                registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
                Ok(Recheck::Restored)
            }
            Lookup::Missing | Lookup::OtherValue(_) => {
                let since = c.missing_since.unwrap_or(now);
                if let Some(lapsed) = c.lapsed_at {
                    if now >= lapsed + RELEASE_AFTER_LAPSE {
                        let placements = registry_store::delete_placements_under(tx.conn(), domain, owner).await?;
                        registry_store::delete_claim(tx.conn(), domain, owner).await?;
                        let sentence = format!(
                            "{domain} was released: its record was missing for {} days after it lapsed.",
                            RELEASE_AFTER_LAPSE.num_days()
                        );
                        registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
                        return Ok(Recheck::Released { placements });
                    }
                    record(tx, Some(since), Some(lapsed), now + MISSING_CHECK_EVERY).await?;
                    return Ok(Recheck::Lapsed { releases_at: lapsed + RELEASE_AFTER_LAPSE });
                }
                if now >= since + LAPSE_AFTER {
                    record(tx, Some(since), Some(now), now + MISSING_CHECK_EVERY).await?;
                    let sentence = format!(
                        "{domain} lapsed: its record {} was missing for {} hours, so the sites at it are no longer \
                         served. Put the record back to restore it, or release the domain; it is released on its \
                         own in {} days.",
                        record_name(domain),
                        LAPSE_AFTER.num_hours(),
                        RELEASE_AFTER_LAPSE.num_days()
                    );
                    registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
                    return Ok(Recheck::Lapsed { releases_at: now + RELEASE_AFTER_LAPSE });
                }
                if c.missing_since.is_none() {
                    let sentence = format!(
                        "The record {} of {domain} is missing. Put it back before {} or the domain lapses.",
                        record_name(domain),
                        (since + LAPSE_AFTER).format("%Y-%m-%d %H:%M UTC")
                    );
                    registry_store::insert_notice(tx.conn(), owner, domain, &sentence, now).await?;
                }
                record(tx, Some(since), None, now + MISSING_CHECK_EVERY).await?;
                Ok(Recheck::Missing { lapses_at: since + LAPSE_AFTER })
            }
        }
    })
    .await?;
    match &recheck {
        Recheck::Restored => tracing::info!(domain = %domain, owner = %owner, "a domain's record is back"),
        Recheck::Missing { lapses_at } => {
            tracing::warn!(domain = %domain, owner = %owner, %lapses_at, "a verified domain's record is missing")
        }
        Recheck::Lapsed { releases_at } => {
            tracing::warn!(domain = %domain, owner = %owner, %releases_at, "a verified domain has lapsed")
        }
        Recheck::Released { placements } => {
            tracing::warn!(domain = %domain, owner = %owner, placements = placements.len(), "a lapsed domain was released")
        }
        Recheck::CouldNotCheck(why) => {
            tracing::info!(domain = %domain, owner = %owner, reason = %why, "a domain could not be checked")
        }
        Recheck::Holds | Recheck::Gone => {}
    }
    Ok(recheck)
}

/// What a member's "Check now" came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    Pending(Verification),
    Verified(Recheck),
}

impl Checked {
    /// The sentence the page shows.
    pub fn sentence(&self, domain: &SiteDomain) -> String {
        let record = record_name(domain);
        match self {
            Checked::Pending(Verification::Verified) => format!("{domain} is verified: serve a site at it."),
            Checked::Pending(Verification::NotYet(Lookup::Missing)) => format!(
                "No TXT record was found at {record} yet. A new record can take a while to be seen; the console \
                 checks again every few minutes."
            ),
            Checked::Pending(Verification::NotYet(Lookup::OtherValue(_))) => {
                format!("The TXT record at {record} holds another value: it must be exactly the token shown.")
            }
            Checked::Pending(Verification::NotYet(Lookup::CouldNotCheck(why)))
            | Checked::Verified(Recheck::CouldNotCheck(why)) => {
                format!("DNS could not be checked ({why}). Nothing changed; the console tries again.")
            }
            Checked::Pending(Verification::NotYet(Lookup::Found)) => format!("{domain} is verified."),
            Checked::Pending(Verification::Expired) => {
                format!("{domain} was not verified within {} days and was let go.", PENDING_FOR.num_days())
            }
            Checked::Pending(Verification::Lost { holder_name }) => {
                format!("Another organization holds {holder_name}: your claim to {domain} was let go.")
            }
            Checked::Pending(Verification::Gone) | Checked::Verified(Recheck::Gone) => {
                format!("{domain} is not one of your domains.")
            }
            Checked::Verified(Recheck::Holds) => format!("The record of {domain} is in place."),
            Checked::Verified(Recheck::Restored) => format!("The record of {domain} is back: the domain holds again."),
            Checked::Verified(Recheck::Missing { lapses_at }) => format!(
                "The record {record} is missing: put it back before {} or {domain} lapses.",
                lapses_at.format("%Y-%m-%d %H:%M UTC")
            ),
            Checked::Verified(Recheck::Lapsed { releases_at }) => format!(
                "{domain} has lapsed: put the record {record} back to restore it before {}.",
                releases_at.format("%Y-%m-%d %H:%M UTC")
            ),
            Checked::Verified(Recheck::Released { .. }) => format!("{domain} was released."),
        }
    }

    /// Whether the check ended in a state the member asked for (the page shows it as done, not
    /// as a problem).
    pub fn holds(&self) -> bool {
        matches!(self, Checked::Pending(Verification::Verified) | Checked::Verified(Recheck::Holds | Recheck::Restored))
    }
}

/// A member's "Check now" on a domain of the organization's: a pending claim is verified when
/// its record is there, a verified one checked again.
#[tracing::instrument(name = "Check a domain", skip(db, dns), fields(organization_id = %organization_id, domain = %domain))]
pub async fn check_domain(
    db: &Db,
    dns: &Resolver,
    who: AccountId,
    organization_id: OrganizationId,
    domain: &SiteDomain,
    now: DateTime<Utc>,
) -> Result<Checked, ServiceError> {
    let owner = {
        let mut read = db.read().await?;
        ensure_member(read.conn(), who, organization_id).await?;
        workspace_owner(&store::workspace_of(organization_id))
    };
    let pending = {
        let mut read = db.read().await?;
        registry_store::pending_claim(read.conn(), domain, &owner).await?.is_some()
    };
    if pending {
        return Ok(Checked::Pending(verify_pending_claim(db, dns, domain, &owner, now).await?));
    }
    match recheck_claim(db, dns, domain, &owner, now).await? {
        Recheck::Gone => Err(ServiceError::invalid("domain", format!("{domain} is not one of your domains."))),
        r => Ok(Checked::Verified(r)),
    }
}

/// How many checks one pass makes at most (a pass runs every few minutes; what it leaves is due
/// at the next).
pub const CHECKS_PER_PASS: i64 = 200;

/// What one pass of the checks did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckPass {
    pub checked: usize,
    pub verified: usize,
    pub lapsed: usize,
    pub released: usize,
    pub expired: usize,
    pub could_not_check: usize,
}

/// Check every claim due at `now`: pending ones (verified when their record is there, let go
/// after seven days) and verified ones (daily, hourly while their record is missing).
pub async fn check_due_claims(db: &Db, dns: &Resolver, now: DateTime<Utc>) -> Result<CheckPass, ServiceError> {
    let due: Vec<DueCheck> = {
        let mut read = db.read().await?;
        registry_store::due_checks(read.conn(), now, CHECKS_PER_PASS).await?
    };
    let mut pass = CheckPass::default();
    for d in due {
        pass.checked += 1;
        if d.pending {
            match verify_pending_claim(db, dns, &d.name, &d.owner, now).await? {
                Verification::Verified => pass.verified += 1,
                Verification::Expired => pass.expired += 1,
                Verification::NotYet(Lookup::CouldNotCheck(_)) => pass.could_not_check += 1,
                _ => {}
            }
        } else {
            match recheck_claim(db, dns, &d.name, &d.owner, now).await? {
                Recheck::Lapsed { .. } => pass.lapsed += 1,
                Recheck::Released { .. } => pass.released += 1,
                Recheck::CouldNotCheck(_) => pass.could_not_check += 1,
                _ => {}
            }
        }
    }
    Ok(pass)
}

/// The recurring pass of the domains' checks ([`check_due_claims`] at the database's clock).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckDomainClaims {}

/// How often the pass runs: a pending claim is checked within this of its due time.
pub const CHECK_DOMAIN_CLAIMS_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl crate::jobs::Job for CheckDomainClaims {
    const KIND: &'static str = "check_domain_claims";
    type Context = std::sync::Arc<Resolver>;

    async fn run(&self, dns: &Self::Context, job: &crate::jobs::JobContext) -> Result<(), crate::jobs::JobError> {
        let now = {
            let mut read = job.db.read().await.map_err(crate::jobs::JobError::Db)?;
            crate::store::billing::clock(read.conn()).await.map_err(|e| crate::jobs::JobError::Db(e.into()))?
        };
        let pass = check_due_claims(&job.db, dns, now).await.map_err(crate::jobs::remote_failure)?;
        if pass.checked > 0 {
            tracing::info!(?pass, "the domains' checks ran");
        }
        Ok(())
    }
}

/// A member dismisses a notice about the organization's domains.
#[tracing::instrument(name = "Dismiss a domain notice", skip(db), fields(organization_id = %organization_id))]
pub async fn dismiss_notice(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    notice_id: i64,
) -> Result<(), ServiceError> {
    let owner = workspace_owner(&store::workspace_of(organization_id));
    crate::db::tx::within(db, crate::db::TxKind::Plain, async |tx: &mut Tx| {
        ensure_member(tx.conn(), who, organization_id).await?;
        if !registry_store::delete_notice(tx.conn(), notice_id, &owner).await? {
            return Err(ServiceError::NotFound("notice"));
        }
        Ok(())
    })
    .await
}
