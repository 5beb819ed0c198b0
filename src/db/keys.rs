//! Advisory lock keys: the one place in Rust where a key is built (spec: "How advisory keys are
//! built"). Each variant names its family; the SQL side is the `core.*_key` functions in
//! `migrations/0001_foundation.sql`, the one place in SQL. Rust never hashes: it names the SQL
//! function, so both sides always agree.

use crate::ids::{SiteId, WorkspaceId};

/// One advisory lock's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdvisoryKey {
    /// Family 1, `hashtextextended` of a fixed name: the materialization rendezvous.
    Rendezvous,
    /// Family 2, `hashtextextended` of a prefixed string: `lifecycle:` and the instance id.
    LifecycleInstance(SiteId),
    /// Family 2: `desired-state:`, the connection, the recipient kind and the recipient id.
    DesiredStateAddress { connection: String, recipient_kind: String, recipient_id: String },
    /// Family 2: `provision-domain:` and an email domain whose grants wait for its organization.
    ProvisionDomain(String),
    /// Family 3, `hashtext` of a bare id widened to bigint: a Stripe subscription.
    Subscription(String),
    /// Family 3: a Stripe invoice.
    Invoice(String),
    /// Family 3: a product's Stripe sync.
    ProductSync(String),
    /// Family 3: a FedWiki workspace.
    Workspace(WorkspaceId),
    /// Family 4, a literal constant: the domains registry (the ASCII bytes of "domains").
    Registry,
    /// Family 2: `lock-trace-pause:`, a test's tag and a lock's place in its transaction. Test
    /// only: a traced transaction with `member_console.lock_pause` set waits on it (shared) after
    /// that lock while a test holds it (exclusive). See `crate::db::trace`.
    TracePause { tag: String, n: i32 },
}

impl AdvisoryKey {
    /// The SQL expression that yields the key, and the text parameters it binds in order
    /// (`$1`, `$2`, ... counted from `first_param`).
    pub fn expression(&self, first_param: usize) -> (String, Vec<String>) {
        let p = |i: usize| format!("${}", first_param + i);
        match self {
            AdvisoryKey::Rendezvous => ("core.rendezvous_key()".into(), vec![]),
            AdvisoryKey::Registry => ("core.registry_key()".into(), vec![]),
            AdvisoryKey::LifecycleInstance(id) => {
                (format!("core.lifecycle_instance_key({})", p(0)), vec![id.as_str().to_string()])
            }
            AdvisoryKey::ProvisionDomain(d) => (format!("core.provision_domain_key({})", p(0)), vec![d.clone()]),
            AdvisoryKey::DesiredStateAddress { connection, recipient_kind, recipient_id } => (
                format!("core.desired_state_address_key({}, {}, {})", p(0), p(1), p(2)),
                vec![connection.clone(), recipient_kind.clone(), recipient_id.clone()],
            ),
            AdvisoryKey::TracePause { tag, n } => {
                (format!("core.trace_pause_key({}, {}::integer)", p(0), p(1)), vec![tag.clone(), n.to_string()])
            }
            AdvisoryKey::Subscription(id) | AdvisoryKey::Invoice(id) | AdvisoryKey::ProductSync(id) => {
                (format!("core.bare_id_key({})", p(0)), vec![id.clone()])
            }
            // The same family and function as the Stripe ids': only the Rust type differs.
            AdvisoryKey::Workspace(id) => (format!("core.bare_id_key({})", p(0)), vec![id.as_str().to_string()]),
        }
    }

    /// The lock it is, as the declarations name it (None for the test-only pause key).
    pub fn lock(&self) -> Option<super::locks::Lock> {
        use super::locks::Lock;
        Some(match self {
            AdvisoryKey::Rendezvous => Lock::RendezvousExclusive,
            AdvisoryKey::LifecycleInstance(_) => Lock::LifecycleInstance,
            AdvisoryKey::DesiredStateAddress { .. } => Lock::DesiredStateAddress,
            AdvisoryKey::ProvisionDomain(_) => Lock::ProvisionDomain,
            AdvisoryKey::Subscription(_) => Lock::SubscriptionAdvisory,
            AdvisoryKey::Invoice(_) => Lock::InvoiceAdvisory,
            AdvisoryKey::ProductSync(_) => Lock::ProductSyncAdvisory,
            AdvisoryKey::Workspace(_) => Lock::WorkspaceAdvisory,
            AdvisoryKey::Registry => Lock::Registry,
            AdvisoryKey::TracePause { .. } => return None,
        })
    }
}
