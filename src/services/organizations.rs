//! Organizations: creating one (with its default pool, its floor and its entitlements, and the
//! grants waiting for its email domain), and keeping their counts.

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
    },
    ids::{GrantId, OrgTypeId, OrganizationId, PoolId},
    services::{
        ServiceError,
        entitlements::reapply_defaults_if_vacant,
        grants::{self, EmailDomain},
    },
    store::{catalog, entitlements as store},
};

/// The constraints whose violation is the operator's input, by name: the field and what to say.
/// `domain` is the email domain the path was given.
fn violated(constraint: &str, domain: &str) -> Option<(&'static str, String)> {
    match constraint {
        "organizations_email_domain" => {
            Some(("email_domain", format!("Another organization has the email domain {domain} already.")))
        }
        "organizations_org_type_id_fkey" => Some(("org_type_id", "That organization type does not exist.".into())),
        _ => None,
    }
}

/// An organization's name, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgName(String);

impl OrgName {
    pub fn parse(s: &str) -> Result<OrgName, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("An organization needs a name.".into());
        }
        if s.chars().count() > 200 {
            return Err("An organization's name may have at most 200 characters.".into());
        }
        if s.chars().any(char::is_control) {
            return Err("An organization's name may not contain control characters.".into());
        }
        Ok(OrgName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub static CREATE_ORGANIZATION_LOCKS: PathLocks = PathLocks {
    path: "Create an organization",
    function: "services::organizations::create_organization",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::ProvisionDomain, Lock::OrgTypeRowKeyShare, Lock::PoolRow, Lock::GrantRow],
    why: "The insert takes its type's row FOR KEY SHARE through the foreign key (no conflict with the \
          default change's FOR NO KEY UPDATE), after the email domain's lock when it has one; the new pool's row is taken by the floor's core.confer and by \
          materialization, under the shared rendezvous; with an email domain, the grants waiting for it are \
          taken (their UPDATE) after the pool row, as spec rule 4 orders grant rows.",
};

#[derive(Debug, Clone, Copy)]
pub struct CreatedOrganization {
    pub organization_id: OrganizationId,
    pub pool_id: PoolId,
    /// The floor grant, when the type has a default ladder with a rank 0.
    pub floor_grant_id: Option<GrantId>,
}

/// Create an organization with its default pool, its floor and its entitlements.
pub async fn create_organization(
    db: &Db,
    name: &OrgName,
    org_type_id: Option<OrgTypeId>,
) -> Result<CreatedOrganization, ServiceError> {
    create_organization_with_domain(db, name, org_type_id, None).await.map(|(c, _)| c)
}

/// The same, for an organization with an email domain: it receives the grants waiting for that
/// domain (provisioning), after its floor, under its pool row. Returns how many it received.
#[tracing::instrument(name = "Create an organization", skip(db), fields(name = %name.as_str(), org_type_id, domain = ?email_domain.map(|d| d.as_str())))]
pub async fn create_organization_with_domain(
    db: &Db,
    name: &OrgName,
    org_type_id: Option<OrgTypeId>,
    email_domain: Option<&EmailDomain>,
) -> Result<(CreatedOrganization, usize), ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &CREATE_ORGANIZATION_LOCKS, async |tx: &mut Tx| {
        if let Some(d) = email_domain {
            // Before anything else: a grant issued to this domain meanwhile is seen, or sees us.
            tx.lock(&crate::db::keys::AdvisoryKey::ProvisionDomain(d.as_str().to_string())).await?;
        }
        let created = create_organization_tx(tx, name, org_type_id).await?;
        let mut provisioned = 0;
        if let Some(d) = email_domain {
            store::set_email_domain(tx.conn(), created.organization_id, d)
                .await
                .map_err(|e| ServiceError::from_constraint(e, |c| violated(c, d.as_str())))?;
            provisioned = grants::provision_domain_grants_tx(tx, created.organization_id, created.pool_id, d).await?;
        }
        Ok((created, provisioned))
    })
    .await
}

/// The same, inside a caller's Materializing transaction.
pub async fn create_organization_tx(
    tx: &mut Tx,
    name: &OrgName,
    org_type_id: Option<OrgTypeId>,
) -> Result<CreatedOrganization, ServiceError> {
    let organization_id = store::insert_organization(tx.conn(), name.as_str(), org_type_id)
        .await
        .map_err(|e| ServiceError::from_constraint(e, |c| violated(c, "")))?;
    if let Some(t) = org_type_id {
        // The insert's foreign key took the type's row FOR KEY SHARE.
        crate::db::trace::note(tx.conn(), Lock::OrgTypeRowKeyShare, t.0, None).await?;
    }
    let pool_id = store::insert_default_pool(tx.conn(), organization_id).await?;
    let floor_grant_id = reapply_defaults_if_vacant(tx, pool_id, None).await?;
    store::materialize_pool(tx.conn(), pool_id).await?;
    Ok(CreatedOrganization { organization_id, pool_id, floor_grant_id })
}

/// The schedule that folds the counts' appended rows (their readers sum what is appended since).
pub const COMPACT_COUNTS: &str = "compact_organization_counts";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompactCounts {}

impl crate::jobs::Job for CompactCounts {
    const KIND: &'static str = COMPACT_COUNTS;
    type Context = ();

    async fn run(&self, _: &(), job: &crate::jobs::JobContext) -> Result<(), crate::jobs::JobError> {
        compact_counts(&job.db).await?;
        Ok(())
    }
}

pub static COMPACT_COUNTS_LOCKS: PathLocks = PathLocks {
    path: "Compact the organization counts",
    function: "services::organizations::compact_counts",
    kind: "Plain",
    locks: &[Lock::OrganizationCountRows],
    why: "The job compact_organization_counts (every minute) deletes the appended rows it sees and \
          inserts their sum per type, in one statement. A second compaction at once waits on the \
          rows the first deletes, then skips them: each row is folded once. Organization inserts, \
          deletes and retypes only append (statement triggers) and never wait on it.",
};

/// Fold the organization counts' appended rows into one per type: how many rows went.
#[tracing::instrument(name = "Compact the organization counts", skip(db))]
pub async fn compact_counts(db: &Db) -> Result<i64, DbError> {
    crate::db::tx::within_for(db, crate::db::TxKind::Plain, &COMPACT_COUNTS_LOCKS, async |tx: &mut Tx| {
        let folded = catalog::compact_organization_counts(tx).await?;
        Ok(folded)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn organization_names_are_parsed() {
        assert_eq!(OrgName::parse("  Acme ").unwrap().as_str(), "Acme");
        assert!(OrgName::parse("   ").is_err());
        assert!(OrgName::parse(&"x".repeat(201)).is_err());
        assert!(OrgName::parse("a\u{0}b").is_err());
    }
}
