//! The lock-order declarations. Each service path declares, next to its code, the locks it takes
//! in the order it takes them (a `PathLocks` const); `crate::lock_paths` lists them all. This
//! module joins declarations into one lock-order graph and finds cycles (a cycle is a possible deadlock), renders the per-path orders
//! for `docs/database-locks.md`, and says how each lock shows in `pg_locks`, so a test can compare
//! what a path really holds with what it declares.

use std::collections::{BTreeMap, BTreeSet};

/// Every lock the console takes, named as the spec names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lock {
    /// The materialization rendezvous, shared (Materializing kinds).
    RendezvousShared,
    /// The materialization rendezvous, exclusive (RuleChange kind).
    RendezvousExclusive,
    /// The domains registry's advisory lock (Registry kind).
    Registry,
    /// An email domain being provisioned (advisory, family 2): a domain grant's issue against the
    /// creation of an organization with that domain.
    ProvisionDomain,
    /// A client address's sign-in window row (`core.sign_in_addresses`), FOR UPDATE.
    SignInAddressRow,
    /// An (email, address) sign-in throttle row (`core.sign_in_throttle`), FOR UPDATE.
    SignInThrottleRow,
    /// Due job rows, FOR UPDATE SKIP LOCKED: each worker claims different jobs.
    JobRows,
    /// Due schedule rows, FOR UPDATE SKIP LOCKED: one worker fires a schedule at a time.
    ScheduleRows,
    /// A pool row (`core.resource_pools`), FOR UPDATE: everything that changes a pool's
    /// positions or entitlements. Several are taken in ascending pool_id order.
    PoolRow,
    /// An org type's row, FOR KEY SHARE, taken by an organization insert through its foreign key.
    OrgTypeRowKeyShare,
    /// A product row, FOR NO KEY UPDATE, taken by a product edit's UPDATE.
    ProductRow,
    /// An entitlement set row, FOR UPDATE.
    EntitlementSetRow,
    /// Resource-key rows, FOR UPDATE, in byte order: a provider stamp that changes the provider.
    ResourceKeyRows,
    /// One resource key's row, FOR NO KEY UPDATE, taken by the UPDATE of its name and unit.
    ResourceKeyRow,
    /// The grant lineage head (the `core.grants` row no other grant extends), FOR UPDATE OF g.
    GrantLineageHead,
    /// A grant's own row: the update of an expiry, or FOR UPDATE of a waiting grant starting.
    GrantRow,
    /// An entitlement set rule row, FOR UPDATE, inside core.commit_rule_change.
    RuleRow,
    /// A rule change's obligation row of one (act, pool), FOR UPDATE, inside core.settle_obligation.
    ChangeObligationRow,
    /// A product row, FOR SHARE, by the tier trigger (core.refuse_tier_product_without_set).
    ProductRowShare,
    /// Every core.plan_ladders row, FOR NO KEY UPDATE, ascending (LockPlanLadderOrder).
    PlanLadderRows,
    /// An org type's row, FOR NO KEY UPDATE (LockOrgType, the default change's T0).
    OrgTypeRow,
    /// A listing batch's pool rows, FOR KEY SHARE, ascending.
    PoolRowKeyShare,
    /// A plan act's obligation row of one (act, pool), FOR UPDATE.
    PlanActObligationRow,
    /// A rule change's row, FOR UPDATE, by its listing.
    RuleChangeRow,
    /// A plan act's row, FOR UPDATE: its finish against a Retry's requeue.
    PlanActRow,
    /// The organization counts' appended rows (`core.organization_counts`), deleted by a
    /// compaction. Appending takes no lock on existing rows.
    OrganizationCountRows,
    /// A Stripe subscription's advisory lock (family 3).
    SubscriptionAdvisory,
    /// A Stripe invoice's advisory lock (family 3).
    InvoiceAdvisory,
    /// A product's Stripe sync advisory lock (family 3).
    ProductSyncAdvisory,
    /// Due outbox rows, FOR UPDATE SKIP LOCKED: each processor claims different rows.
    OutboxRows,
    /// A FedWiki workspace's advisory lock (family 3): its rotations (swaps, activations under a
    /// cooldown).
    WorkspaceAdvisory,
    /// A lifecycle instance's advisory lock (family 2): one site's requests. Several are taken
    /// in the order their requests were recorded (rule 6).
    LifecycleInstance,
    /// A FedWiki site row (`fedwiki.sites`), FOR UPDATE (LockSiteStatusByID) or by its write.
    SiteRow,
    /// A FedWiki site row, FOR SHARE (GetSiteForPlacement): a placement creator's one site.
    SiteRowShare,
    /// Placement rows (`domains.placements`) of a site, by the site trigger's flag-only UPDATE.
    PlacementRows,
    /// The usage row of (pool, `fedwiki.active_sites`), FOR UPDATE (LockNumericUsage).
    UsageRow,
    /// Lifecycle request rows (`fedwiki.lifecycle_requests`), by their outcome's UPDATE.
    LifecycleRequestRows,
    /// A FedWiki workspace's swap policy row (`fedwiki.swap_policies`), its cooldown stamps: the
    /// intake's upsert, or a failed swap's record step giving its stamp back; always last.
    SwapPolicyRow,
    /// A desired-state address's advisory lock (family 2): every write to one (connection,
    /// recipient) address's record, an address with no record yet included.
    DesiredStateAddress,
    /// A desired-state record row (`core.desired_state_records`), FOR UPDATE: after the address
    /// lock in a recompute; several in id order by the dispatch stamp.
    DesiredStateRecord,
    /// Desired-state notices (`core.desired_state_outbox`), FOR UPDATE SKIP LOCKED.
    DesiredStateNotices,
    /// A connection's row (`core.desired_state_connections`), by an operator's edit or the
    /// relay's test request and answer.
    ConnectionRow,
    /// A minute's shared sample rows (`integration.metric_samples`, source 'db'), by the upsert
    /// of a server's sample: the first server's figures are kept.
    MetricSampleRows,
    /// A mailed link's token row (`core.account_tokens`), FOR UPDATE: its single use.
    AccountTokenRow,
    /// An invitation's row (`core.invitations`), FOR UPDATE: its accept, resend or revoke.
    InvitationRow,
    /// An account's row (`core.accounts`), FOR NO KEY UPDATE: its email, password, verification,
    /// disabled, operator and deleted marks. NO KEY, so a membership's insert (FOR KEY SHARE
    /// through its foreign key) does not wait on it.
    AccountRow,
    /// An organization's row (`core.organizations`), FOR NO KEY UPDATE: who its owners are. It
    /// does not block the inserts that reference the organization (memberships, invitations).
    /// Several are taken in ascending organization_id order.
    OrganizationRow,
    /// Membership rows (`core.organization_members`), by their role's UPDATE or their DELETE.
    MembershipRows,
    /// Mail send-limit rows (`core.mail_send_limits`), by one upsert, in key byte order.
    MailSendLimitRows,
    /// The sign-up type's row (`core.signup_org_type`), by its upsert.
    SignupTypeRow,
}

/// How the spec orders several locks of one kind (one table) taken by one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// No order the spec names.
    Unordered,
    /// Ascending by the trace's ordinal (pool_id, act, request, record, ladder); rows noted
    /// without one are not compared.
    AscendingOrdinal,
    /// Ascending by the key's bytes (resource keys, host names).
    AscendingKeyBytes,
}

/// How a lock appears in `pg_locks` while it is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgSignature {
    /// An advisory lock: the SQL expression of its key, and the mode.
    Advisory { key_sql: &'static str, mode: &'static str },
    /// A row lock shows only as the table-level lock it implies.
    Relation { table: &'static str, mode: &'static str },
}

impl Lock {
    /// The lock's name as the docs and the spec write it.
    pub fn name(self) -> &'static str {
        match self {
            Lock::RendezvousShared => "Materialization rendezvous (shared)",
            Lock::RendezvousExclusive => "Materialization rendezvous (exclusive)",
            Lock::Registry => "Domains registry",
            Lock::ProvisionDomain => "Provision domain",
            Lock::SignInAddressRow => "Sign-in address row",
            Lock::SignInThrottleRow => "Sign-in (email, address) row",
            Lock::AccountTokenRow => "Account token row",
            Lock::InvitationRow => "Invitation row",
            Lock::AccountRow => "Account row",
            Lock::OrganizationRow => "Organization row",
            Lock::MembershipRows => "Membership rows",
            Lock::MailSendLimitRows => "Mail send-limit rows",
            Lock::SignupTypeRow => "Sign-up type row",
            Lock::JobRows => "Job rows (SKIP LOCKED)",
            Lock::ScheduleRows => "Schedule rows (SKIP LOCKED)",
            Lock::PoolRow => "Pool row",
            Lock::OrgTypeRowKeyShare => "Org type row (FOR KEY SHARE, through the foreign key)",
            Lock::ProductRow => "Product row",
            Lock::EntitlementSetRow => "Entitlement set row",
            Lock::ResourceKeyRows => "Resource-key rows (byte order)",
            Lock::ResourceKeyRow => "Resource-key row (its name)",
            Lock::GrantLineageHead => "Grant lineage head",
            Lock::GrantRow => "Grant row",
            Lock::RuleRow => "Rule row",
            Lock::ChangeObligationRow => "Change obligation row",
            Lock::ProductRowShare => "Product row (FOR SHARE, by the tier trigger)",
            Lock::PlanLadderRows => "Plan ladder rows",
            Lock::OrgTypeRow => "Org type row (FOR NO KEY UPDATE)",
            Lock::PoolRowKeyShare => "Pool rows (FOR KEY SHARE, a listing batch)",
            Lock::PlanActObligationRow => "Plan act obligation row",
            Lock::RuleChangeRow => "Rule change row",
            Lock::PlanActRow => "Plan act row",
            Lock::OrganizationCountRows => "Organization count rows",
            Lock::SubscriptionAdvisory => "Subscription",
            Lock::InvoiceAdvisory => "Invoice",
            Lock::ProductSyncAdvisory => "Product sync",
            Lock::OutboxRows => "Outbox rows (SKIP LOCKED)",
            Lock::WorkspaceAdvisory => "FedWiki workspace",
            Lock::LifecycleInstance => "Lifecycle instance",
            Lock::SiteRow => "FedWiki site row",
            Lock::SiteRowShare => "FedWiki site row (FOR SHARE, GetSiteForPlacement)",
            Lock::PlacementRows => "FedWiki placement rows (through the site trigger)",
            Lock::UsageRow => "Usage row",
            Lock::LifecycleRequestRows => "Lifecycle request rows",
            Lock::SwapPolicyRow => "FedWiki swap policy row",
            Lock::DesiredStateAddress => "Desired-state address",
            Lock::DesiredStateRecord => "Desired-state record",
            Lock::DesiredStateNotices => "Desired-state notices (SKIP LOCKED)",
            Lock::MetricSampleRows => "Metric sample rows (the minute's shared ones)",
            Lock::ConnectionRow => "Connection row",
        }
    }

    /// The lock's name in the trace (`core.lock_trace.lock`): the variant's own name, which the
    /// SQL functions write as a literal.
    pub fn trace_name(self) -> &'static str {
        match self {
            Lock::RendezvousShared => "RendezvousShared",
            Lock::RendezvousExclusive => "RendezvousExclusive",
            Lock::Registry => "Registry",
            Lock::ProvisionDomain => "ProvisionDomain",
            Lock::SignInAddressRow => "SignInAddressRow",
            Lock::SignInThrottleRow => "SignInThrottleRow",
            Lock::AccountTokenRow => "AccountTokenRow",
            Lock::InvitationRow => "InvitationRow",
            Lock::AccountRow => "AccountRow",
            Lock::OrganizationRow => "OrganizationRow",
            Lock::MembershipRows => "MembershipRows",
            Lock::MailSendLimitRows => "MailSendLimitRows",
            Lock::SignupTypeRow => "SignupTypeRow",
            Lock::JobRows => "JobRows",
            Lock::ScheduleRows => "ScheduleRows",
            Lock::PoolRow => "PoolRow",
            Lock::OrgTypeRowKeyShare => "OrgTypeRowKeyShare",
            Lock::ProductRow => "ProductRow",
            Lock::EntitlementSetRow => "EntitlementSetRow",
            Lock::ResourceKeyRows => "ResourceKeyRows",
            Lock::ResourceKeyRow => "ResourceKeyRow",
            Lock::GrantLineageHead => "GrantLineageHead",
            Lock::GrantRow => "GrantRow",
            Lock::RuleRow => "RuleRow",
            Lock::ChangeObligationRow => "ChangeObligationRow",
            Lock::ProductRowShare => "ProductRowShare",
            Lock::PlanLadderRows => "PlanLadderRows",
            Lock::OrgTypeRow => "OrgTypeRow",
            Lock::PoolRowKeyShare => "PoolRowKeyShare",
            Lock::PlanActObligationRow => "PlanActObligationRow",
            Lock::RuleChangeRow => "RuleChangeRow",
            Lock::PlanActRow => "PlanActRow",
            Lock::OrganizationCountRows => "OrganizationCountRows",
            Lock::SubscriptionAdvisory => "SubscriptionAdvisory",
            Lock::InvoiceAdvisory => "InvoiceAdvisory",
            Lock::ProductSyncAdvisory => "ProductSyncAdvisory",
            Lock::OutboxRows => "OutboxRows",
            Lock::WorkspaceAdvisory => "WorkspaceAdvisory",
            Lock::LifecycleInstance => "LifecycleInstance",
            Lock::SiteRow => "SiteRow",
            Lock::SiteRowShare => "SiteRowShare",
            Lock::PlacementRows => "PlacementRows",
            Lock::UsageRow => "UsageRow",
            Lock::LifecycleRequestRows => "LifecycleRequestRows",
            Lock::SwapPolicyRow => "SwapPolicyRow",
            Lock::DesiredStateAddress => "DesiredStateAddress",
            Lock::DesiredStateRecord => "DesiredStateRecord",
            Lock::DesiredStateNotices => "DesiredStateNotices",
            Lock::ConnectionRow => "ConnectionRow",
            Lock::MetricSampleRows => "MetricSampleRows",
        }
    }

    /// The lock named `name` in the trace.
    pub fn from_trace_name(name: &str) -> Option<Lock> {
        ALL.iter().copied().find(|l| l.trace_name() == name)
    }

    /// The mode the lock is taken in, as the trace writes it.
    pub fn mode(self) -> &'static str {
        match self {
            Lock::RendezvousShared => "shared",
            Lock::RendezvousExclusive => "exclusive",
            Lock::Registry => "exclusive",
            Lock::ProvisionDomain => "exclusive",
            Lock::SignInAddressRow => "FOR UPDATE",
            Lock::SignInThrottleRow => "FOR UPDATE",
            Lock::AccountTokenRow => "FOR UPDATE",
            Lock::InvitationRow => "FOR UPDATE",
            Lock::AccountRow => "FOR NO KEY UPDATE",
            Lock::OrganizationRow => "FOR NO KEY UPDATE",
            Lock::MembershipRows => "FOR NO KEY UPDATE",
            Lock::MailSendLimitRows => "FOR NO KEY UPDATE",
            Lock::SignupTypeRow => "FOR UPDATE",
            Lock::JobRows => "FOR UPDATE",
            Lock::ScheduleRows => "FOR UPDATE",
            Lock::PoolRow => "FOR UPDATE",
            Lock::OrgTypeRowKeyShare => "FOR KEY SHARE",
            Lock::ProductRow => "FOR NO KEY UPDATE",
            Lock::EntitlementSetRow => "FOR UPDATE",
            Lock::ResourceKeyRows => "FOR UPDATE",
            Lock::ResourceKeyRow => "FOR NO KEY UPDATE",
            Lock::GrantLineageHead => "FOR UPDATE",
            Lock::GrantRow => "UPDATE",
            Lock::RuleRow => "FOR UPDATE",
            Lock::ChangeObligationRow => "FOR UPDATE",
            Lock::ProductRowShare => "FOR SHARE",
            Lock::PlanLadderRows => "FOR NO KEY UPDATE",
            Lock::OrgTypeRow => "FOR NO KEY UPDATE",
            Lock::PoolRowKeyShare => "FOR KEY SHARE",
            Lock::PlanActObligationRow => "FOR UPDATE",
            Lock::RuleChangeRow => "FOR UPDATE",
            Lock::PlanActRow => "FOR UPDATE",
            Lock::OrganizationCountRows => "UPDATE",
            Lock::SubscriptionAdvisory => "exclusive",
            Lock::InvoiceAdvisory => "exclusive",
            Lock::ProductSyncAdvisory => "exclusive",
            Lock::OutboxRows => "FOR UPDATE",
            Lock::WorkspaceAdvisory => "exclusive",
            Lock::LifecycleInstance => "exclusive",
            Lock::SiteRow => "FOR UPDATE",
            Lock::SiteRowShare => "FOR SHARE",
            Lock::PlacementRows => "FOR UPDATE",
            Lock::UsageRow => "FOR UPDATE",
            Lock::LifecycleRequestRows => "UPDATE",
            Lock::SwapPolicyRow => "UPDATE",
            Lock::DesiredStateAddress => "exclusive",
            Lock::DesiredStateRecord => "FOR UPDATE",
            Lock::DesiredStateNotices => "FOR UPDATE",
            Lock::ConnectionRow => "UPDATE",
            Lock::MetricSampleRows => "UPDATE",
        }
    }

    /// How the spec orders several of these in one transaction (checked on the trace).
    pub fn key_order(self) -> KeyOrder {
        match self {
            // Rule 3, and a listing batch's key-share in the same order; a batch's and a Retry's
            // obligation rows; the dispatch stamp's records; the reorder's ladder rows; the
            // rule change's obligation rows in (pool_id, act_id) order, as Retry takes them (the
            // trace's ordinal is pool_id * 10^9 + act_id).
            Lock::PoolRow
            | Lock::PoolRowKeyShare
            | Lock::PlanActObligationRow
            | Lock::DesiredStateRecord
            | Lock::PlanLadderRows
            | Lock::ChangeObligationRow => KeyOrder::AscendingOrdinal,
            // Rule 6: in the order the requests were recorded (the ordinal is the request id).
            Lock::LifecycleInstance => KeyOrder::AscendingOrdinal,
            // RegisterProviders and the materializer: byte order; a swap's two site rows carry
            // their place in the spec's order (parked 1, activated 2) as the ordinal.
            // A site's placement rows are taken in hostname order by one statement (the site
            // trigger, a release of its names): the row-level tests prove that; across a swap's
            // two sites they follow the sites' order, so the trace does not compare them.
            Lock::ResourceKeyRows | Lock::RuleRow | Lock::MailSendLimitRows => KeyOrder::AscendingKeyBytes,
            Lock::OrganizationRow | Lock::AccountRow => KeyOrder::AscendingOrdinal,
            Lock::SiteRow => KeyOrder::AscendingOrdinal,
            _ => KeyOrder::Unordered,
        }
    }

    /// The resource the lock is on: two modes of one lock are one node of the graph.
    pub fn resource(self) -> &'static str {
        match self {
            Lock::RendezvousShared | Lock::RendezvousExclusive => "rendezvous",
            Lock::Registry => "registry",
            Lock::ProvisionDomain => "provision-domain",
            Lock::SignInAddressRow => "core.sign_in_addresses",
            Lock::SignInThrottleRow => "core.sign_in_throttle",
            Lock::AccountTokenRow => "core.account_tokens",
            Lock::InvitationRow => "core.invitations",
            Lock::AccountRow => "core.accounts",
            Lock::OrganizationRow => "core.organizations",
            Lock::MembershipRows => "core.organization_members",
            Lock::MailSendLimitRows => "core.mail_send_limits",
            Lock::SignupTypeRow => "core.signup_org_type",
            Lock::JobRows => "integration.jobs",
            Lock::ScheduleRows => "integration.job_schedules",
            Lock::PoolRow => "core.resource_pools",
            Lock::OrgTypeRowKeyShare | Lock::OrgTypeRow => "core.org_types",
            Lock::PoolRowKeyShare => "core.resource_pools",
            Lock::PlanActObligationRow => "core.plan_act_obligations",
            Lock::RuleChangeRow => "core.entitlement_set_changes",
            Lock::PlanActRow => "core.plan_acts",
            Lock::OrganizationCountRows => "core.organization_counts",
            Lock::ProductRow | Lock::ProductRowShare => "core.products",
            Lock::PlanLadderRows => "core.plan_ladders",
            Lock::EntitlementSetRow => "core.entitlement_sets",
            Lock::ResourceKeyRows | Lock::ResourceKeyRow => "core.resource_keys",
            Lock::GrantLineageHead | Lock::GrantRow => "core.grants",
            Lock::RuleRow => "core.entitlement_set_rules",
            Lock::ChangeObligationRow => "core.entitlement_set_change_obligations",
            Lock::SubscriptionAdvisory => "subscription",
            Lock::InvoiceAdvisory => "invoice",
            Lock::ProductSyncAdvisory => "product-sync",
            Lock::OutboxRows => "core.outbox",
            Lock::WorkspaceAdvisory => "workspace",
            Lock::LifecycleInstance => "lifecycle-instance",
            Lock::SiteRow | Lock::SiteRowShare => "fedwiki.sites",
            Lock::PlacementRows => "domains.placements",
            Lock::UsageRow => "core.numeric_entitlement_usage",
            Lock::LifecycleRequestRows => "fedwiki.lifecycle_requests",
            Lock::SwapPolicyRow => "fedwiki.swap_policies",
            Lock::DesiredStateAddress => "desired-state-address",
            Lock::DesiredStateRecord => "core.desired_state_records",
            Lock::DesiredStateNotices => "core.desired_state_outbox",
            Lock::MetricSampleRows => "integration.metric_samples",
            Lock::ConnectionRow => "core.desired_state_connections",
        }
    }

    /// A lock taken with SKIP LOCKED never waits, so it adds no edge into the graph.
    pub fn never_waits(self) -> bool {
        matches!(self, Lock::JobRows | Lock::ScheduleRows | Lock::OutboxRows | Lock::DesiredStateNotices)
    }

    /// How the lock shows in `pg_locks`; a row lock, on the table its resource names.
    pub fn pg_signature(self) -> PgSignature {
        let relation = |mode| PgSignature::Relation { table: self.resource(), mode };
        match self {
            Lock::RendezvousShared => PgSignature::Advisory { key_sql: "core.rendezvous_key()", mode: "ShareLock" },
            Lock::RendezvousExclusive => {
                PgSignature::Advisory { key_sql: "core.rendezvous_key()", mode: "ExclusiveLock" }
            }
            Lock::Registry => PgSignature::Advisory { key_sql: "core.registry_key()", mode: "ExclusiveLock" },
            // Their keys depend on the domain, the object, the workspace, the instance or the
            // address: the test names it.
            Lock::ProvisionDomain
            | Lock::SubscriptionAdvisory
            | Lock::InvoiceAdvisory
            | Lock::ProductSyncAdvisory
            | Lock::WorkspaceAdvisory
            | Lock::LifecycleInstance
            | Lock::DesiredStateAddress => PgSignature::Advisory { key_sql: "NULL::bigint", mode: "ExclusiveLock" },
            // Rows the path writes: the write's table lock.
            Lock::ProductRow
            | Lock::ResourceKeyRow
            | Lock::GrantRow
            | Lock::OrganizationCountRows
            | Lock::PlacementRows
            | Lock::LifecycleRequestRows
            | Lock::SwapPolicyRow
            | Lock::ConnectionRow
            | Lock::MetricSampleRows
            | Lock::MembershipRows
            | Lock::MailSendLimitRows
            | Lock::SignupTypeRow => relation("RowExclusiveLock"),
            Lock::SignInAddressRow
            | Lock::SignInThrottleRow
            | Lock::JobRows
            | Lock::ScheduleRows
            | Lock::PoolRow
            | Lock::OrgTypeRowKeyShare
            | Lock::EntitlementSetRow
            | Lock::ResourceKeyRows
            | Lock::GrantLineageHead
            | Lock::RuleRow
            | Lock::ProductRowShare
            | Lock::PlanLadderRows
            | Lock::OrgTypeRow
            | Lock::PoolRowKeyShare
            | Lock::PlanActObligationRow
            | Lock::PlanActRow
            | Lock::RuleChangeRow
            | Lock::ChangeObligationRow
            | Lock::OutboxRows
            | Lock::SiteRow
            | Lock::SiteRowShare
            | Lock::UsageRow
            | Lock::DesiredStateRecord
            | Lock::DesiredStateNotices
            | Lock::AccountTokenRow
            | Lock::InvitationRow
            | Lock::AccountRow
            | Lock::OrganizationRow => relation("RowShareLock"),
        }
    }
}

/// One documented path and the locks it takes, in order.
#[derive(Debug)]
pub struct PathLocks {
    /// The path's name as the spec names it (or, for paths the spec does not name, as the code does).
    pub path: &'static str,
    /// The Rust function that is the path.
    pub function: &'static str,
    /// The transaction kind it opens.
    pub kind: &'static str,
    pub locks: &'static [Lock],
    /// What the order protects, in a sentence.
    pub why: &'static str,
}

/// An edge of the lock-order graph: some path holds `from` and then may wait for `to`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: &'static str,
    pub to: &'static str,
    pub path: &'static str,
}

pub fn edges(paths: &[&PathLocks]) -> Vec<Edge> {
    let mut out = BTreeSet::new();
    for p in paths {
        for (i, a) in p.locks.iter().enumerate() {
            for b in &p.locks[i + 1..] {
                if a.resource() != b.resource() && !b.never_waits() {
                    out.insert(Edge { from: a.resource(), to: b.resource(), path: p.path });
                }
            }
        }
    }
    out.into_iter().collect()
}

/// A cycle in the joined lock-order graph, as the resources around it, or None. Only paths that
/// can run at once meet: those that take the exclusive rendezvous first never run beside each
/// other or beside those that take the shared one first, so their edges are checked against the
/// paths that take no rendezvous (as the stress checker counts an observed cycle).
pub fn find_cycle(paths: &[&PathLocks]) -> Option<Vec<&'static str>> {
    let mut sides: [BTreeSet<(&'static str, &'static str)>; 3] = Default::default();
    for p in paths {
        let side = match p.locks.first() {
            Some(Lock::RendezvousExclusive) => 0,
            Some(Lock::RendezvousShared) => 1,
            _ => 2,
        };
        sides[side].extend(edges(&[p]).into_iter().map(|e| (e.from, e.to)));
    }
    find_cycle_in(sides[1].iter().chain(&sides[2]).copied())
        .or_else(|| cycle_through_unrendezvoused(&sides[0], &sides[2]))
        .map(|c| c.into_iter().map(|s| resource_static(&s)).collect())
}

/// A cycle of exclusive-rendezvous and unrendezvoused edges that has at least one of the latter:
/// exclusive-rendezvous transactions never run at once, so a cycle of their edges alone is none.
pub fn cycle_through_unrendezvoused(
    excl: &BTreeSet<(&'static str, &'static str)>,
    none: &BTreeSet<(&'static str, &'static str)>,
) -> Option<Vec<String>> {
    let next = |n: &str| -> Vec<(&'static str, bool)> {
        excl.iter()
            .filter(|(f, _)| *f == n)
            .map(|(_, t)| (*t, false))
            .chain(none.iter().filter(|(f, _)| *f == n).map(|(_, t)| (*t, true)))
            .collect()
    };
    for &(a, b) in excl.iter().chain(none) {
        let start_none = none.contains(&(a, b));
        // Breadth first over (node, whether an unrendezvoused edge was used), back to `a`.
        let mut seen: BTreeSet<(&str, bool)> = BTreeSet::new();
        let mut queue = std::collections::VecDeque::from([(b, start_none, vec![a, b])]);
        while let Some((n, used, path)) = queue.pop_front() {
            if n == a && used {
                return Some(path.into_iter().map(str::to_string).collect());
            }
            if n == a || !seen.insert((n, used)) {
                continue;
            }
            for (m, is_none) in next(n) {
                let mut p = path.clone();
                p.push(m);
                queue.push_back((m, used || is_none, p));
            }
        }
    }
    None
}

/// A cycle in a graph given by its edges (the declared one, or the one a lock trace observed).
pub fn find_cycle_in<'a>(edges: impl Iterator<Item = (&'a str, &'a str)>) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges {
        graph.entry(from).or_default().insert(to);
    }
    // Depth-first search with colours: reaching a node still on the stack closes a cycle.
    fn visit<'a>(
        n: &'a str,
        g: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        on_stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = on_stack.iter().position(|x| *x == n) {
            let mut c = on_stack[i..].to_vec();
            c.push(n);
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        on_stack.push(n);
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, on_stack, done) {
                return Some(c);
            }
        }
        on_stack.pop();
        done.insert(n);
        None
    }
    let mut done = BTreeSet::new();
    let nodes: Vec<&str> = graph.keys().copied().collect();
    for n in nodes {
        let mut stack = vec![];
        if let Some(c) = visit(n, &graph, &mut stack, &mut done) {
            return Some(c.into_iter().map(str::to_string).collect());
        }
    }
    None
}

fn resource_static(s: &str) -> &'static str {
    ALL.iter().map(|l| l.resource()).find(|r| *r == s).unwrap_or("?")
}

const ALL: &[Lock] = &[
    Lock::RendezvousShared,
    Lock::RendezvousExclusive,
    Lock::Registry,
    Lock::ProvisionDomain,
    Lock::SignInAddressRow,
    Lock::SignInThrottleRow,
    Lock::JobRows,
    Lock::ScheduleRows,
    Lock::PoolRow,
    Lock::OrgTypeRowKeyShare,
    Lock::ProductRow,
    Lock::EntitlementSetRow,
    Lock::ResourceKeyRows,
    Lock::ResourceKeyRow,
    Lock::GrantLineageHead,
    Lock::GrantRow,
    Lock::RuleRow,
    Lock::ChangeObligationRow,
    Lock::ProductRowShare,
    Lock::PlanLadderRows,
    Lock::OrgTypeRow,
    Lock::PoolRowKeyShare,
    Lock::PlanActObligationRow,
    Lock::RuleChangeRow,
    Lock::PlanActRow,
    Lock::OrganizationCountRows,
    Lock::SubscriptionAdvisory,
    Lock::InvoiceAdvisory,
    Lock::ProductSyncAdvisory,
    Lock::OutboxRows,
    Lock::WorkspaceAdvisory,
    Lock::LifecycleInstance,
    Lock::SiteRow,
    Lock::SiteRowShare,
    Lock::PlacementRows,
    Lock::UsageRow,
    Lock::LifecycleRequestRows,
    Lock::SwapPolicyRow,
    Lock::DesiredStateAddress,
    Lock::DesiredStateRecord,
    Lock::DesiredStateNotices,
    Lock::ConnectionRow,
    Lock::MetricSampleRows,
    Lock::AccountTokenRow,
    Lock::InvitationRow,
    Lock::AccountRow,
    Lock::OrganizationRow,
    Lock::MembershipRows,
    Lock::MailSendLimitRows,
    Lock::SignupTypeRow,
];

/// The per-path orders as `docs/database-locks.md` shows them, between its markers.
pub fn render_orders(paths: &[&PathLocks]) -> String {
    render_orders_observed(paths, None)
}

/// The same, with each declared edge's count from a stress run's observed edges ((from, to,
/// path) -> transactions): `member-console lock-orders --observed <stress-json>`. Without counts
/// each shows `×–`; `strip_counts` makes the two comparable.
pub fn render_orders_observed(
    paths: &[&PathLocks],
    counts: Option<&BTreeMap<(String, String, String), u64>>,
) -> String {
    let mut s = String::new();
    for p in paths {
        s.push_str(&format!("### {}\n\n`{}`, a {} transaction. {}\n\n", p.path, p.function, p.kind, p.why));
        if p.locks.is_empty() {
            s.push_str("No lock.\n\n");
        }
        for (i, l) in p.locks.iter().enumerate() {
            s.push_str(&format!("{}. {}\n", i + 1, l.name()));
        }
        if !p.locks.is_empty() {
            s.push('\n');
        }
        let declared = edges(&[p]);
        if !declared.is_empty() {
            let shown: Vec<String> = declared
                .iter()
                .map(|e| {
                    let n = counts.map(|c| {
                        c.get(&(e.from.to_string(), e.to.to_string(), p.path.to_string())).copied().unwrap_or(0)
                    });
                    format!("{} → {} ×{}", e.from, e.to, n.map_or("–".to_string(), |n| n.to_string()))
                })
                .collect();
            s.push_str(&format!("Observed in stress: {}.\n\n", shown.join("; ")));
        }
    }
    s
}

/// The page's text with every observed count replaced by `–`, so a page holding a run's counts
/// compares equal to the declarations rendered without them.
pub fn strip_counts(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut chars = page.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '×' {
            let mut digits = false;
            while chars.peek().is_some_and(|d| d.is_ascii_digit() || *d == '–') {
                chars.next();
                digits = true;
            }
            if digits {
                out.push('–');
            }
        }
    }
    out
}

pub const ORDERS_BEGIN: &str = "<!-- lock-orders:begin (generated by `member-console lock-orders`) -->";
pub const ORDERS_END: &str = "<!-- lock-orders:end -->";

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that takes `locks` in order, for the graph's tests.
    const fn path(name: &'static str, locks: &'static [Lock]) -> PathLocks {
        PathLocks { path: name, function: name, kind: "Plain", locks, why: "" }
    }

    #[test]
    fn a_reversed_pair_is_a_cycle() {
        static A: PathLocks = path("A", &[Lock::RendezvousShared, Lock::SignInAddressRow]);
        static B: PathLocks = path("B", &[Lock::SignInAddressRow, Lock::RendezvousExclusive]);
        let c = find_cycle(&[&A, &B]).expect("a cycle");
        assert!(c.contains(&"rendezvous") && c.contains(&"core.sign_in_addresses"), "{c:?}");
        assert!(find_cycle(&[&A]).is_none());
    }

    #[test]
    fn skip_locked_adds_no_wait() {
        static A: PathLocks = path("A", &[Lock::SignInAddressRow, Lock::JobRows]);
        static B: PathLocks = path("B", &[Lock::JobRows, Lock::SignInAddressRow]);
        assert!(find_cycle(&[&A, &B]).is_none());
    }

    #[test]
    fn every_lock_is_listed() {
        assert_eq!(ALL.len(), 50, "add a new lock to ALL too");
    }
}
