//! Custom domains: a member claims a domain of the organization's own (when its plan's
//! `fedwiki.custom_domain` allows) and places a site under it. Both run in Registry.WithLock.
//! The placement is a creator in the spec's sense: its skip checks first, then exactly one site
//! FOR SHARE (GetSiteForPlacement) immediately before the placement's write, so a status write
//! or a deletion of that site and the placement come one after the other, and the site's trigger
//! sees the placement (or the placement sees the site's status).

use crate::{
    config::FarmSettings,
    db::{
        Db, Tx,
        locks::{Lock, PathLocks},
    },
    hostname,
    ids::{AccountId, OrganizationId, SiteDomain, SiteId},
    services::ServiceError,
    states::SiteStatus,
    store::{domains as registry_store, entitlements as ent, fedwiki as store},
};

use super::{
    handlers::ensure_member,
    names,
    registry::{self, workspace_owner},
    verification,
};

pub static CLAIM_DOMAIN_LOCKS: PathLocks = PathLocks {
    path: "Registry: claim a member's domain",
    function: "services::fedwiki::domains::claim_domain",
    kind: "Registry",
    locks: &[Lock::Registry],
    why: "The registry lock, then the checks that no other owner's verified claim covers the name or lies under \
          it, then the pending claim (and, on a first claim, the organization's workspace row, so a refusal writes \
          neither). A pending claim holds nothing, but it is written under the registry lock so that a \
          verification letting the other owners' pending claims go sees every one.",
};

pub static PLACE_SITE_UNDER_DOMAIN_LOCKS: PathLocks = PathLocks {
    path: "Registry: place a site under a member's domain",
    function: "services::fedwiki::domains::place_site_under_domain",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::SiteRowShare],
    why: "The registry lock and every skip check first; then exactly one site FOR SHARE (GetSiteForPlacement) \
          immediately before the placement's write. A missing site places nothing. One site only: a creator \
          holding two could deadlock with a swap.",
};

/// A name as the registry keeps it, whatever the member typed around it: trimmed, no final
/// dot, lower case.
fn registry_form(input: &str) -> String {
    input.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// A domain or a host name under one, as a member types it: in the registry's form, a host
/// name whose labels follow a site name's rules (names.rs), less the reserved names
/// (www.example.org is the member's own) and with IDNA's `xn--` allowed where it decodes: a
/// member's domain may be internationalized. Whether it lies outside the farm's zone is
/// [`DomainName::outside_zone`]'s, which needs the farm's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainName(SiteDomain);

impl DomainName {
    pub fn parse(input: &str) -> Result<DomainName, String> {
        let d = registry_form(input);
        if !hostname::is_hostname(&d) {
            let idn = if d.is_ascii() { "" } else { " Write an internationalized name in its xn-- form." };
            return Err(format!("“{}” is not a domain name such as wiki.example.org.{idn}", input.trim()));
        }
        for label in d.split('.').filter(|l| names::has_reserved_hyphens(l)) {
            if !label.starts_with("xn--") {
                return Err(format!(
                    "{d} cannot be used: two hyphens in the third and fourth places of “{label}” mark an encoded \
                     name (such as xn--) in DNS."
                ));
            }
            // The strict form decodes the label and encodes it again: a valid one comes back as it is.
            if idna::domain_to_ascii_strict(label).ok().as_deref() != Some(label) {
                return Err(format!("{d} cannot be used: “{label}” is not a valid internationalized (xn--) name."));
            }
        }
        Ok(DomainName(SiteDomain::from(d)))
    }

    /// The name, when it is not the farm's zone, under it, or above it.
    pub fn outside_zone(self, farm: &FarmSettings) -> Result<SiteDomain, String> {
        let d = self.0;
        let zone = farm.domain.as_str();
        if hostname::is_at_or_under(d.as_str(), zone) || hostname::is_at_or_under(zone, d.as_str()) {
            return Err(format!("{d} is the farm's own zone: choose a domain of yours."));
        }
        Ok(d)
    }
}

/// A domain as a member types it, to claim: a [`DomainName`] outside the farm's zone, refused
/// beside the form's `domain`.
pub fn parse_domain(input: &str, farm: &FarmSettings) -> Result<SiteDomain, ServiceError> {
    DomainName::parse(input).and_then(|d| d.outside_zone(farm)).map_err(|m| ServiceError::invalid("domain", m))
}

/// A name a member lets go of (a domain to release, a host name to stop serving): the registry's
/// form of what was typed. Nothing to refuse: whether the member holds it is the path's to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldName(SiteDomain);

impl HeldName {
    pub fn parse(input: &str) -> HeldName {
        HeldName(SiteDomain::from(registry_form(input)))
    }

    pub fn into_domain(self) -> SiteDomain {
        self.0
    }
}

/// A domain a member may claim: not a public suffix (the Public Suffix List's, its ICANN and
/// private sections both), under which anyone registers names. A claim of co.uk or github.io
/// would refuse every other organization each name under it.
fn refuse_public_suffix(domain: &SiteDomain) -> Result<(), ServiceError> {
    if psl::suffix_str(domain.as_str()) == Some(domain.as_str()) {
        return Err(ServiceError::invalid(
            "domain",
            format!("{domain} is a public suffix: claim a domain you register under it, such as example.{domain}."),
        ));
    }
    Ok(())
}

async fn member_org_pool(db: &Db, who: AccountId, organization_id: OrganizationId) -> Result<(), ServiceError> {
    let mut read = db.read().await?;
    ensure_member(read.conn(), who, organization_id).await?;
    let pool =
        ent::default_pool_of(read.conn(), organization_id).await?.ok_or(ServiceError::NotFound("organization"))?;
    if !store::custom_domain_allowed(read.conn(), pool).await? {
        return Err(ServiceError::Refused(
            "The plan does not include custom domains: upgrade it to serve a site at a domain of your own.".into(),
        ));
    }
    Ok(())
}

/// A claim as the member is shown it: the record to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDomain {
    pub domain: SiteDomain,
    pub record_name: String,
    pub token: String,
    /// The organization was already waiting on this domain: nothing new was written.
    pub already: bool,
}

/// Claim `domain` (outside the farm's zone: [`parse_domain`]) for the organization's workspace:
/// a pending claim, verified when its DNS record is found (`verification`).
#[tracing::instrument(name = "Claim a domain", skip(db), fields(organization_id = %organization_id, domain = %domain))]
pub async fn claim_domain(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    domain: &SiteDomain,
) -> Result<PendingDomain, ServiceError> {
    refuse_public_suffix(domain)?;
    member_org_pool(db, who, organization_id).await?;
    let owner = workspace_owner(&store::workspace_of(organization_id));
    let token = verification::new_token()?;
    registry::with_lock_for(db, &CLAIM_DOMAIN_LOCKS, async |tx: &mut Tx| {
        match registry_store::covering_claim(tx.conn(), domain).await? {
            Some((name, o)) if o == owner && name == *domain => {
                return Err(ServiceError::invalid("domain", format!("{domain} is already yours.")));
            }
            Some((name, o)) if o != owner => {
                return Err(ServiceError::invalid(
                    "domain",
                    format!("{domain} lies under {name}, which another owner holds."),
                ));
            }
            _ => {}
        }
        if registry_store::other_claim_under(tx.conn(), domain, &owner).await? {
            return Err(ServiceError::invalid("domain", format!("Another owner holds a name under {domain}.")));
        }
        if let Some(p) = registry_store::pending_claim(tx.conn(), domain, &owner).await? {
            return Ok(PendingDomain {
                domain: domain.clone(),
                record_name: verification::record_name(domain),
                token: p.token,
                already: true,
            });
        }
        if registry_store::pending_count(tx.conn(), &owner).await? >= verification::MAX_PENDING {
            return Err(ServiceError::invalid(
                "domain",
                format!(
                    "{} domains are already waiting for their records: verify or release one first.",
                    verification::MAX_PENDING
                ),
            ));
        }
        let now = crate::store::billing::clock(tx.conn()).await?;
        registry_store::insert_pending_claim(tx.conn(), domain, &owner, &token, now, now + verification::PENDING_FOR)
            .await?;
        // A first claim makes the organization's workspace here, after every check: a refused
        // claim writes nothing.
        store::ensure_workspace(tx.conn(), organization_id).await?;
        Ok(PendingDomain {
            domain: domain.clone(),
            record_name: verification::record_name(domain),
            token: token.clone(),
            already: false,
        })
    })
    .await
}

/// Serve site `site_id` at `hostname` (outside the farm's zone: [`DomainName`]), at or under a
/// domain the workspace claimed.
#[tracing::instrument(name = "Place a site under a domain", skip(db), fields(site_id = %site_id, hostname = %hostname))]
pub async fn place_site_under_domain(
    db: &Db,
    who: AccountId,
    site_id: &SiteId,
    hostname: &SiteDomain,
) -> Result<(), ServiceError> {
    let (workspace, organization) = {
        let mut read = db.read().await?;
        let site = store::site(read.conn(), site_id).await?.ok_or(ServiceError::NotFound("site"))?;
        let org = store::member_workspace_org(read.conn(), who, &site.workspace_id)
            .await?
            .ok_or(ServiceError::NotFound("site"))?;
        (site.workspace_id, org)
    };
    member_org_pool(db, who, organization).await?;
    let owner = workspace_owner(&workspace);
    registry::with_lock_for(db, &PLACE_SITE_UNDER_DOMAIN_LOCKS, async |tx: &mut Tx| {
        // Every skip check first.
        match registry_store::covering_claim(tx.conn(), hostname).await? {
            Some((_, o)) if o == owner => {}
            _ => {
                return Err(match registry_store::pending_covering(tx.conn(), hostname, &owner).await? {
                    Some(name) => ServiceError::invalid(
                        "hostname",
                        format!(
                            "{name} is not verified yet: add its TXT record at {} and check it, then serve a site \
                             there.",
                            verification::record_name(&name)
                        ),
                    ),
                    None => ServiceError::invalid(
                        "hostname",
                        format!("{hostname} lies under no domain of yours: add the domain first."),
                    ),
                });
            }
        }
        if registry_store::covering_claim_lapsed(tx.conn(), hostname, &owner).await? {
            return Err(ServiceError::invalid(
                "hostname",
                format!("The domain {hostname} lies under has lapsed: put its TXT record back first."),
            ));
        }
        if registry_store::placement(tx.conn(), hostname).await?.is_some() {
            return Err(ServiceError::invalid("hostname", format!("{hostname} already serves a site.")));
        }
        // GetSiteForPlacement: the one site, FOR SHARE, right before the write.
        let Some(status) = store::get_site_for_placement(tx.conn(), site_id).await? else {
            return Err(ServiceError::NotFound("site"));
        };
        registry_store::insert_site_placement(tx.conn(), hostname, &owner, site_id, status == SiteStatus::Active)
            .await?;
        Ok(())
    })
    .await
}

pub static RELEASE_DOMAIN_LOCKS: PathLocks = PathLocks {
    path: "Registry: release a member's domain",
    function: "services::fedwiki::domains::release_domain",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::PlacementRows],
    why: "The registry lock, then the check that no placement lies at or under the claim, then the claim's deletion: \
          a placement must always lie under a claim of its owner, a rule that spans rows. A lapsed claim is let go \
          with its placements, which the member confirmed: their rows locked in host name order (the site \
          trigger's) and deleted, then the claim; no site row is taken. A pending claim is withdrawn: its row \
          alone.",
};

pub static STOP_SERVING_LOCKS: PathLocks = PathLocks {
    path: "Registry: stop serving a site at a member's host name",
    function: "services::fedwiki::domains::stop_serving",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::PlacementRows],
    why: "The registry lock, then the one placement row deleted. No site row is taken: no path holds a placement \
          lock and then takes a site lock, and a site trigger holding the placement (a status write) is waited for.",
};

/// The organization's workspace owner, when the member belongs to it (a member whose plan no
/// longer allows custom domains may still let go of the ones it holds).
async fn member_workspace_owner(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<String, ServiceError> {
    let mut read = db.read().await?;
    ensure_member(read.conn(), who, organization_id).await?;
    Ok(workspace_owner(&store::workspace_of(organization_id)))
}

/// Release a domain the organization claimed (in the registry's form: [`HeldName`]). Refused while a host name at or under it still
/// serves a site: the member stops serving it there first. A lapsed domain goes with the names
/// under it (the member confirms it on the page); a pending one is withdrawn.
#[tracing::instrument(name = "Release a domain", skip(db), fields(organization_id = %organization_id))]
pub async fn release_domain(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    domain: &SiteDomain,
) -> Result<SiteDomain, ServiceError> {
    let not_yours = || ServiceError::invalid("release", format!("{domain} is not one of your domains."));
    let owner = member_workspace_owner(db, who, organization_id).await?;
    registry::with_lock_for(db, &RELEASE_DOMAIN_LOCKS, async |tx: &mut Tx| {
        let Some(claim) = registry_store::verified_claim(tx.conn(), domain, &owner).await? else {
            if registry_store::delete_pending_claim(tx.conn(), domain, &owner).await? {
                return Ok(());
            }
            return Err(not_yours());
        };
        if claim.lapsed_at.is_some() {
            registry_store::delete_placements_under(tx.conn(), domain, &owner).await?;
        } else if registry_store::placements_under(tx.conn(), domain).await? {
            return Err(ServiceError::invalid(
                "release",
                format!("{domain} still serves a site: stop serving it there first."),
            ));
        }
        registry_store::delete_claim(tx.conn(), domain, &owner).await?;
        Ok(())
    })
    .await?;
    Ok(domain.clone())
}

/// Stop serving a site at a host name (in the registry's form: [`HeldName`]) under one of the
/// organization's domains. A site's own
/// address under the farm's zone goes only with the site.
#[tracing::instrument(name = "Stop serving a host name", skip(db), fields(organization_id = %organization_id))]
pub async fn stop_serving(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    hostname: &SiteDomain,
) -> Result<SiteDomain, ServiceError> {
    let not_yours = || ServiceError::invalid("stop", format!("{hostname} serves no site of yours."));
    let owner = member_workspace_owner(db, who, organization_id).await?;
    registry::with_lock_for(db, &STOP_SERVING_LOCKS, async |tx: &mut Tx| {
        if !registry_store::delete_placement(tx.conn(), hostname, &owner).await? {
            return Err(not_yours());
        }
        Ok(())
    })
    .await?;
    Ok(hostname.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domains_labels_follow_a_site_names_rules_and_an_xn_label_must_decode() {
        let farm = FarmSettings::default();
        for good in ["www.example.org", "xn--bcher-kva.example", "a--b.example.org", "acme.example"] {
            assert_eq!(parse_domain(good, &farm).unwrap(), good);
            assert_eq!(DomainName::parse(good).unwrap().outside_zone(&farm).unwrap(), good);
        }
        for (bad, why) in [
            ("ab--cd.example.org", "third and fourth places of “ab--cd”"),
            ("xn--abc.example", "not a valid internationalized"),
            ("bücher.example", "in its xn-- form"),
        ] {
            let e = parse_domain(bad, &farm).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_public_suffix_is_refused_and_a_name_registered_under_one_is_not() {
        for suffix in ["co.uk", "github.io", "com", "blogspot.com"] {
            let e = refuse_public_suffix(&SiteDomain::from(suffix)).unwrap_err();
            assert!(e.to_string().contains(&format!("{suffix} is a public suffix")), "{suffix}: {e}");
        }
        for mine in ["bbc.co.uk", "me.github.io", "example.org", "acme.example", "wiki.example.org"] {
            assert!(refuse_public_suffix(&SiteDomain::from(mine)).is_ok(), "{mine}");
        }
    }
}
