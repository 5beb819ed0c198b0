//! The paths the tasks pick: each by its declared name, its weight, and the generator that picks.

use super::*;

/// The paths the tasks run, each named as its `PathLocks` declaration names it (the two
/// conferral changes that have no declaration of their own by their function names, and a
/// plan act's drain, whose parts are declared, by its span's name), the grant jobs the workers
/// run (by their activity names; counted from `integration.jobs`), and the parts of the plan
/// acts' drains, wherever they ran (by their declarations' names; counted from the obligations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StressPath {
    CreateOrganization,
    ConferGrant,
    EndConferral,
    MaterializePool,
    RegisterProviders,
    UpdateProduct,
    /// Issue 39: an operator names a provided key (and a numeric key's unit), beside the
    /// provider stamps and the entitlement inserts of the same keys.
    RenameResourceKey,
    ChangeProductSet,
    RuleChangeBatchCommit,
    DrainChange,
    RetryRuleChange,
    SyncSourceStatus,
    UpdateConferralBounds,
    IssueGrant,
    RevokeGrant,
    ExpireGrant,
    StartWaitingGrant,
    ManageGrant,
    ExtendWaitingGrant,
    /// `expire_grant` jobs done by the workers.
    ExpireGrantActivity,
    /// `start_grant` jobs done by the workers.
    StartGrantActivity,
    AddTier,
    DeleteTier,
    RemoveTier,
    /// T0, then the listing and moves inside the request for 1-2 s (the drain job does the rest).
    ChangeOrgTypeDefault,
    /// T0, then, when rank 0 changed, the listing and moves as for a default change.
    ReorderTiers,
    /// `drain_plan_act` on a running act, beside its drain job: its parts are counted apart.
    DrainPlanAct,
    RetryPlanAct,
    ReorderPlanLadders,
    /// The parts of every plan act's drain (in a request, the job's, a task's, the settle's),
    /// counted from what they left in the database: the listings (one per act and type reached),
    /// the moves settled, the failures recorded, and the acts finished after their last probe.
    ListPlanActBatch,
    EnactObligation,
    RecordMoveFailure,
    LastProbe,
    /// A sign-in with the demo member's email, the right or a wrong password, from one of a few
    /// addresses: the reservation's rows, which no other path takes.
    SignIn,
    /// The organization counts' compaction, beside the inserts' appends.
    CompactCounts,
    /// A server's sample of the overview's minute, as one of a few servers, at a minute of the
    /// last few: the minute's shared rows meet the other "servers'" samples.
    SampleMinute,
    /// A billed organization's subscription changed in the stand-in at random (cancelled, its
    /// quantity or plan changed, its collection paused or resumed, or nothing), then reconciled.
    ReconcileSubscription,
    /// An invoice of a billed organization's subscription, converged.
    ConvergeInvoice,
    /// A catalog sync click, sometimes after a new price.
    SyncProduct,
    /// The outbox processor's pass: the reconcile requests the other paths wrote, and the syncs.
    ClaimOutbox,
    /// An owner switches a billed organization's plan (up now, down at the period's end), undoes
    /// a scheduled switch, cancels at the period's end or keeps the plan; each converges at once.
    ChangePlan,
    /// An owner resumes a billed organization's subscription that a grant displaced.
    ResumePlan,
    /// The owner's billing page read as a server reads it, against the run's list on sale, and
    /// the same list read afresh in the same snapshot: the two must be equal, whatever the
    /// catalog's writers are doing.
    ReadBilling,
    /// A member creates a site on a shared organization (a name from a few), then its request
    /// is carried through the slot gate, the farm and the record step.
    CreateSite,
    /// A member parks, activates (under a short cooldown) or archives a site, carried likewise.
    ChangeSiteStatus,
    /// A member swaps a parked site in for an active one, carried likewise.
    SwapSites,
    /// A member deletes a site, carried likewise.
    DeleteSite,
    /// The relay's pass (ClaimDesiredStateOutbox and the recomputes), beside the workers'.
    RelayPass,
    /// One shared organization's address recomputed.
    RecomputeAddress,
    /// A connection's dispatch (the stamp, the pushes, the answers), beside the workers'.
    DispatchConnection,
    /// A connection's read-back.
    ReadBack,
    /// An operator's act on a connection: its keys, Retry, Send a test.
    EditConnection,
    /// `fedwiki_request` jobs done by the workers (beside the acts' own runs of them).
    RunSiteRequestActivity,
    /// A member claims a domain of a shared organization's own (or a contested one).
    ClaimDomain,
    /// A member serves one of the organization's sites at a host name under its domain.
    PlaceSiteUnderDomain,
    /// A member stops serving a host name.
    StopServing,
    /// A member releases a domain (refused while a name under it serves).
    ReleaseDomain,
    /// A pending domain's check: its record published (or not, or another value) on the run's
    /// DNS server, then the verification (issue 40).
    VerifyDomain,
    /// A verified domain's check, its record kept or removed, at a clock hours or days ahead:
    /// missing, lapsed, restored or released.
    RecheckDomain,
    /// A pending domain let go after its seven days.
    ExpirePendingClaim,
    /// The maintenance's farm sync, beside the members' requests.
    SyncSites,
    /// The retention purge (a short retention), beside activations of archived sites.
    PurgeArchived,
    /// Quota reconciliation: parks above a pool's limit, reactivations when room returns.
    ReconcileQuota,
    /// A worker's start with a farm: settle the requests no job carries, recount, reconcile the
    /// domains, beside everything else.
    RepairAtStart,
    /// A mail send reserved against one of a few addresses and emails (the limits' rows).
    ReserveMailSend,
    // Issue 38, sign-up, verification and password reset (acts/on_signup.rs).
    /// An operator marks one of the first org types for sign-up, under the sign-ups.
    ChooseSignupType,
    /// One of a few dozen stress emails signs up (new, then existing: a notice).
    SignUp,
    /// A verification link of a stress account used, beside the others' uses and replacements.
    UseEmailToken,
    /// Forgot password for a stress email: its unused reset links retired, a new one made.
    MailAccountLink,
    /// A reset link of a stress account used: every session ends, one starts.
    ResetPassword,
    /// Issue 38, the account page and the operators' accounts: a stress account's password and
    /// email change, a fresh account's deletion, and the demo operator's disable, enable and
    /// operator changes on the stress accounts.
    ChangePassword,
    RequestEmailChange,
    DeleteAccount,
    DisableAccount,
    EnableAccount,
    ChangeOperator,
    /// Issue 38, members: owners of one organization change each other's roles, remove each
    /// other and leave, on the organization's row.
    ChangeMembers,
    /// Issue 38, members: one of them joins again by an invitation, at times accepted twice at once.
    AcceptInvitation,
}

/// The groups one after another, at compile time, so a path's group is the one place it is
/// listed; a count that does not add up to `N` fails the build.
const fn joined<const N: usize>(groups: &[&[StressPath]]) -> [StressPath; N] {
    let mut all = [StressPath::CreateOrganization; N];
    let mut n = 0;
    let mut g = 0;
    while g < groups.len() {
        let mut i = 0;
        while i < groups[g].len() {
            all[n] = groups[g][i];
            n += 1;
            i += 1;
        }
        g += 1;
    }
    assert!(n == N, "the groups do not add up to the paths' count");
    all
}

impl StressPath {
    /// Every path, each group listed once below and joined here in the order the tasks' weights
    /// and the report go through them.
    pub const ALL: [StressPath; 78] = joined(&[
        &[
            StressPath::CreateOrganization,
            StressPath::ConferGrant,
            StressPath::EndConferral,
            StressPath::MaterializePool,
            StressPath::RegisterProviders,
            StressPath::UpdateProduct,
            StressPath::RenameResourceKey,
            StressPath::ChangeProductSet,
            StressPath::RuleChangeBatchCommit,
            StressPath::DrainChange,
            StressPath::RetryRuleChange,
            StressPath::SyncSourceStatus,
            StressPath::UpdateConferralBounds,
        ],
        &StressPath::GRANT_PATHS,
        &StressPath::PLAN_ACT_PATHS,
        &StressPath::ACCOUNT_PATHS,
        &StressPath::ACCOUNT_PAGE_PATHS,
        &[StressPath::SignIn, StressPath::CompactCounts, StressPath::SampleMinute],
        &StressPath::BILLING_PATHS,
        &StressPath::SITE_PATHS,
        &StressPath::RELAY_PATHS,
        &StressPath::SIGNUP_PATHS,
    ]);

    /// Issue 38, sign-up, verification and password reset.
    pub const SIGNUP_PATHS: [StressPath; 5] = [
        StressPath::ChooseSignupType,
        StressPath::SignUp,
        StressPath::UseEmailToken,
        StressPath::MailAccountLink,
        StressPath::ResetPassword,
    ];

    /// The desired-state relay's paths.
    pub const RELAY_PATHS: [StressPath; 5] = [
        StressPath::RelayPass,
        StressPath::RecomputeAddress,
        StressPath::DispatchConnection,
        StressPath::ReadBack,
        StressPath::EditConnection,
    ];

    /// The FedWiki paths (the tasks' and the workers') and the registry's.
    pub const SITE_PATHS: [StressPath; 16] = [
        StressPath::CreateSite,
        StressPath::ChangeSiteStatus,
        StressPath::SwapSites,
        StressPath::DeleteSite,
        StressPath::RunSiteRequestActivity,
        StressPath::ClaimDomain,
        StressPath::PlaceSiteUnderDomain,
        StressPath::StopServing,
        StressPath::ReleaseDomain,
        StressPath::VerifyDomain,
        StressPath::RecheckDomain,
        StressPath::ExpirePendingClaim,
        StressPath::SyncSites,
        StressPath::PurgeArchived,
        StressPath::ReconcileQuota,
        StressPath::RepairAtStart,
    ];

    /// The billing paths (Stripe's stand-in, read or changed, and the console's side).
    pub const BILLING_PATHS: [StressPath; 7] = [
        StressPath::ReconcileSubscription,
        StressPath::ConvergeInvoice,
        StressPath::SyncProduct,
        StressPath::ClaimOutbox,
        StressPath::ChangePlan,
        StressPath::ResumePlan,
        StressPath::ReadBilling,
    ];

    /// The grant paths (the tasks' and the workers').
    /// The accounts' paths: the mail limits, and the account lifecycle's acts.
    pub const ACCOUNT_PATHS: [StressPath; 3] =
        [StressPath::ReserveMailSend, StressPath::ChangeMembers, StressPath::AcceptInvitation];
    /// Issue 38, the account page and the operators' accounts.
    pub const ACCOUNT_PAGE_PATHS: [StressPath; 6] = [
        StressPath::ChangePassword,
        StressPath::RequestEmailChange,
        StressPath::DeleteAccount,
        StressPath::DisableAccount,
        StressPath::EnableAccount,
        StressPath::ChangeOperator,
    ];

    pub const GRANT_PATHS: [StressPath; 8] = [
        StressPath::IssueGrant,
        StressPath::RevokeGrant,
        StressPath::ExpireGrant,
        StressPath::StartWaitingGrant,
        StressPath::ManageGrant,
        StressPath::ExtendWaitingGrant,
        StressPath::ExpireGrantActivity,
        StressPath::StartGrantActivity,
    ];

    /// The plan-act paths (the tasks' and the parts of the drains).
    pub const PLAN_ACT_PATHS: [StressPath; 12] = [
        StressPath::AddTier,
        StressPath::DeleteTier,
        StressPath::RemoveTier,
        StressPath::ChangeOrgTypeDefault,
        StressPath::ReorderTiers,
        StressPath::DrainPlanAct,
        StressPath::RetryPlanAct,
        StressPath::ReorderPlanLadders,
        StressPath::ListPlanActBatch,
        StressPath::EnactObligation,
        StressPath::RecordMoveFailure,
        StressPath::LastProbe,
    ];

    /// Run by the job workers, not picked by the tasks.
    pub fn is_job(self) -> bool {
        matches!(
            self,
            StressPath::ExpireGrantActivity | StressPath::StartGrantActivity | StressPath::RunSiteRequestActivity
        )
    }

    /// A part of the plan acts' drains, counted from the database after the run, not picked.
    pub fn is_drain_part(self) -> bool {
        matches!(
            self,
            StressPath::ListPlanActBatch
                | StressPath::EnactObligation
                | StressPath::RecordMoveFailure
                | StressPath::LastProbe
        )
    }

    /// Picked by the tasks (the rest are counted from what the workers and the drains did).
    pub fn is_picked(self) -> bool {
        !self.is_job() && !self.is_drain_part()
    }

    pub fn name(self) -> &'static str {
        match self {
            StressPath::CreateOrganization => org_svc::CREATE_ORGANIZATION_LOCKS.path,
            StressPath::ConferGrant => ent::CONFER_GRANT_LOCKS.path,
            StressPath::EndConferral => ent::END_CONFERRAL_LOCKS.path,
            StressPath::MaterializePool => ent::MATERIALIZE_POOL_LOCKS.path,
            StressPath::RegisterProviders => ent::REGISTER_PROVIDERS_LOCKS.path,
            StressPath::UpdateProduct => catalog_svc::UPDATE_PRODUCT_LOCKS.path,
            StressPath::RenameResourceKey => catalog_svc::RENAME_RESOURCE_KEY_LOCKS.path,
            StressPath::ChangeProductSet => catalog_svc::CHANGE_PRODUCT_SET_LOCKS.path,
            StressPath::RuleChangeBatchCommit => rc::RULE_CHANGE_COMMIT_LOCKS.path,
            StressPath::DrainChange => rc::DRAIN_CHANGE_LOCKS.path,
            StressPath::RetryRuleChange => rc::RETRY_RULE_CHANGE_LOCKS.path,
            StressPath::SyncSourceStatus => "sync_source_status",
            StressPath::UpdateConferralBounds => "update_conferral_bounds",
            StressPath::IssueGrant => grants::ISSUE_GRANT_LOCKS.path,
            StressPath::RevokeGrant => grants::REVOKE_GRANT_LOCKS.path,
            StressPath::ExpireGrant => grants::EXPIRE_GRANT_LOCKS.path,
            StressPath::StartWaitingGrant => grants::START_GRANT_LOCKS.path,
            StressPath::ManageGrant => grants::MANAGE_GRANT_LOCKS.path,
            StressPath::ExtendWaitingGrant => grants::EXTEND_WAITING_GRANT_LOCKS.path,
            StressPath::ExpireGrantActivity => "ExpireGrantActivity",
            StressPath::StartGrantActivity => "StartGrantActivity",
            StressPath::AddTier => topology::ADD_TIER_LOCKS.path,
            StressPath::DeleteTier => topology::DELETE_TIER_LOCKS.path,
            StressPath::RemoveTier => topology::REMOVE_TIER_LOCKS.path,
            StressPath::ChangeOrgTypeDefault => pa::CHANGE_DEFAULT_T0_LOCKS.path,
            StressPath::ReorderTiers => pa::REORDER_TIERS_T0_LOCKS.path,
            // The service's span: it runs the four parts below, each declared.
            StressPath::DrainPlanAct => "DrainPlanAct",
            StressPath::RetryPlanAct => pa::RETRY_PLAN_ACT_LOCKS.path,
            StressPath::ReorderPlanLadders => topology::REORDER_PLAN_LADDERS_LOCKS.path,
            StressPath::ListPlanActBatch => pa::LIST_BATCH_LOCKS.path,
            StressPath::EnactObligation => pa::ENACT_OBLIGATION_LOCKS.path,
            StressPath::RecordMoveFailure => pa::RECORD_MOVE_FAILURE_LOCKS.path,
            StressPath::LastProbe => pa::LAST_PROBE_LOCKS.path,
            StressPath::SignIn => auth::SIGN_IN_LOCKS.path,
            StressPath::ReserveMailSend => crate::services::mail_limits::RESERVE_MAIL_SEND_LOCKS.path,
            StressPath::ChooseSignupType => crate::services::signup::CHOOSE_SIGNUP_TYPE_LOCKS.path,
            StressPath::SignUp => crate::services::signup::SIGN_UP_LOCKS.path,
            StressPath::UseEmailToken => crate::services::signup::USE_EMAIL_TOKEN_LOCKS.path,
            StressPath::MailAccountLink => crate::services::signup::MAIL_ACCOUNT_LINK_LOCKS.path,
            StressPath::ResetPassword => crate::services::signup::RESET_PASSWORD_LOCKS.path,
            StressPath::ChangePassword => crate::services::account_settings::CHANGE_PASSWORD_LOCKS.path,
            StressPath::RequestEmailChange => crate::services::account_settings::REQUEST_EMAIL_CHANGE_LOCKS.path,
            StressPath::DeleteAccount => crate::services::account_settings::DELETE_ACCOUNT_LOCKS.path,
            StressPath::DisableAccount => crate::services::operator_accounts::DISABLE_ACCOUNT_LOCKS.path,
            StressPath::EnableAccount => crate::services::operator_accounts::ENABLE_ACCOUNT_LOCKS.path,
            StressPath::ChangeOperator => crate::services::operator_accounts::CHANGE_OPERATOR_LOCKS.path,
            StressPath::ChangeMembers => crate::services::members::CHANGE_MEMBERSHIP_LOCKS.path,
            StressPath::AcceptInvitation => crate::services::invitations::ACCEPT_INVITATION_LOCKS.path,
            StressPath::CompactCounts => org_svc::COMPACT_COUNTS_LOCKS.path,
            StressPath::SampleMinute => crate::services::observability::SAMPLE_LOCKS.path,
            StressPath::ReconcileSubscription => billing::reconcile::RECONCILE_SUBSCRIPTION_LOCKS.path,
            StressPath::ConvergeInvoice => billing::invoices::CONVERGE_INVOICE_LOCKS.path,
            StressPath::SyncProduct => billing::catalog_sync::SYNC_PRODUCT_LOCKS.path,
            StressPath::ClaimOutbox => billing::outbox::CLAIM_OUTBOX_LOCKS.path,
            // Only Stripe calls, then ReconcileSubscription (declared).
            StressPath::ChangePlan => "Change a plan",
            StressPath::ResumePlan => billing::resume::RESUME_SUBSCRIPTION_LOCKS.path,
            // A read: no lock.
            StressPath::ReadBilling => "Read a member's billing",
            // The handlers' spans: each records its request (declared) and carries it through
            // the gate and the record step (declared).
            StressPath::CreateSite => "Create a site",
            StressPath::ChangeSiteStatus => crate::services::fedwiki::handlers::CHANGE_STATUS_LOCKS.path,
            StressPath::SwapSites => crate::services::fedwiki::handlers::SWAP_ACTIVE_SITE_LOCKS.path,
            StressPath::DeleteSite => "Delete a site",
            StressPath::RunSiteRequestActivity => "RunSiteRequest",
            StressPath::ClaimDomain => crate::services::fedwiki::domains::CLAIM_DOMAIN_LOCKS.path,
            StressPath::PlaceSiteUnderDomain => crate::services::fedwiki::domains::PLACE_SITE_UNDER_DOMAIN_LOCKS.path,
            StressPath::StopServing => crate::services::fedwiki::domains::STOP_SERVING_LOCKS.path,
            StressPath::ReleaseDomain => crate::services::fedwiki::domains::RELEASE_DOMAIN_LOCKS.path,
            StressPath::VerifyDomain => crate::services::fedwiki::verification::VERIFY_DOMAIN_LOCKS.path,
            StressPath::RecheckDomain => crate::services::fedwiki::verification::RECHECK_DOMAIN_LOCKS.path,
            StressPath::ExpirePendingClaim => crate::services::fedwiki::verification::EXPIRE_PENDING_CLAIM_LOCKS.path,
            // A pass of many one-site transactions (each declared): counted under the run's name.
            StressPath::SyncSites => "SyncSitesToDBActivity",
            StressPath::PurgeArchived => crate::services::fedwiki::maintenance::PURGE_ARCHIVED_SITE_LOCKS.path,
            StressPath::ReconcileQuota => "Quota reconciliation",
            StressPath::RepairAtStart => "Repair the sites at start",
            StressPath::RelayPass => crate::services::desired_state::relay::CLAIM_NOTICES_LOCKS.path,
            StressPath::RecomputeAddress => crate::services::desired_state::relay::RECOMPUTE_ADDRESS_LOCKS.path,
            StressPath::DispatchConnection => crate::services::desired_state::dispatch::DISPATCH_LOCKS.path,
            StressPath::ReadBack => crate::services::desired_state::read_back::READ_BACK_ITEM_LOCKS.path,
            StressPath::EditConnection => crate::services::desired_state::connections::EDIT_CONNECTION_LOCKS.path,
        }
    }

    /// Relative frequency: the pool-changing paths most (they are where the collisions are), the
    /// exclusive-rendezvous paths least (each one stops every materialization while it runs).
    /// The grant paths about as often as the conferral changes; the jobs are not picked. The
    /// earlier paths' weights are 4× their relative frequencies, so that the tier acts (weight 1)
    /// come a quarter as often as a rule change: each takes the exclusive rendezvous, and a
    /// default change or a reorder keeps its task 1-2 s in its in-request drain.
    pub(super) fn weight(self) -> u64 {
        const X: u64 = 4;
        match self {
            StressPath::ConferGrant | StressPath::IssueGrant => 6 * X,
            StressPath::EndConferral => 5 * X,
            StressPath::UpdateConferralBounds | StressPath::SyncSourceStatus | StressPath::MaterializePool => 3 * X,
            StressPath::CreateOrganization
            | StressPath::UpdateProduct
            | StressPath::RenameResourceKey
            | StressPath::RegisterProviders => 2 * X,
            StressPath::RevokeGrant
            | StressPath::ExpireGrant
            | StressPath::StartWaitingGrant
            | StressPath::ManageGrant
            | StressPath::ExtendWaitingGrant => 2 * X,
            // A drain or a retry finds no draining change more often than not (then it does
            // nothing and is not counted), so they are picked more often, to meet the jobs' drains.
            StressPath::DrainChange => 3 * X,
            StressPath::RetryRuleChange => 2 * X,
            StressPath::ChangeProductSet | StressPath::RuleChangeBatchCommit => X,
            // An add is refused more often than not (a holder of the product holds a plan on the
            // ladder already): twice as often as a delete or a removal, so the ladder keeps tiers.
            StressPath::AddTier => 2,
            StressPath::DeleteTier
            | StressPath::RemoveTier
            | StressPath::ChangeOrgTypeDefault
            | StressPath::ReorderTiers => 1,
            // Not plan acts under the exclusive rendezvous; a drain and a retry find nothing to
            // do while no act runs (then skipped or refused), so they come more often.
            StressPath::ReorderPlanLadders | StressPath::DrainPlanAct | StressPath::RetryPlanAct => 2,
            // Disjoint from the rest (their own rows), and a sign-in's hashing costs CPU: seldom.
            StressPath::SignIn | StressPath::CompactCounts | StressPath::SampleMinute => 2,
            // Rows of their own; cheap.
            StressPath::ReserveMailSend => 2,
            // Rows of their own mostly (accounts, links); a sign-up creates an organization
            // under the shared rendezvous, as create-organization does.
            StressPath::ChooseSignupType => 1,
            StressPath::SignUp
            | StressPath::UseEmailToken
            | StressPath::MailAccountLink
            | StressPath::ResetPassword => 2,
            // Account rows of their own (a password's hashing costs CPU): seldom.
            StressPath::ChangePassword
            | StressPath::RequestEmailChange
            | StressPath::DeleteAccount
            | StressPath::DisableAccount
            | StressPath::EnableAccount
            | StressPath::ChangeOperator => 1,
            // One organization's row and its few members: they meet each other there.
            StressPath::ChangeMembers => X,
            StressPath::AcceptInvitation => 2,
            // A reconcile takes the rendezvous and a billed organization's pool row (the shared
            // ones' are the grant paths' and the conferral changes'), after one or two calls to
            // the stand-in: about as often as a conferral change's bounds.
            StressPath::ReconcileSubscription => 3 * X,
            // The outbox's claims meet the workers' own pass (every 5 s) and run the reconciles
            // the grant and conferral paths asked for.
            StressPath::ClaimOutbox => 2 * X,
            // A member's change, then its reconcile: as often as a reconcile of an outside change.
            StressPath::ChangePlan => 2 * X,
            // Refused unless a grant displaced the subscription: often enough to meet one.
            StressPath::ResumePlan => X,
            // As often as the catalog's writers it meets (a product's edit, a sync click).
            StressPath::ReadBilling => X,
            StressPath::CreateSite | StressPath::ChangeSiteStatus => 2 * X,
            StressPath::SwapSites | StressPath::DeleteSite => X,
            // The registry's lock meets the creates' and deletions' name placements; a placement
            // meets the record steps on its site's row.
            StressPath::ClaimDomain | StressPath::PlaceSiteUnderDomain => X,
            StressPath::StopServing | StressPath::ReleaseDomain => 2,
            // A claim is verified about as often as it is made (a placement needs one); the
            // re-checks and the expiry meet them, and the placements, on the registry's lock.
            StressPath::VerifyDomain => X,
            StressPath::RecheckDomain => 2,
            StressPath::ExpirePendingClaim => 1,
            // Each touches every site (a pass) or a few: seldom, as the schedule runs them.
            StressPath::SyncSites | StressPath::PurgeArchived | StressPath::ReconcileQuota => 2,
            StressPath::RepairAtStart => 1,
            // The recomputes meet the grant paths' notices and each other on the hot addresses;
            // the dispatches meet the workers' on the records; a pass and an edit are seldom.
            StressPath::RecomputeAddress | StressPath::DispatchConnection => 2 * X,
            StressPath::RelayPass | StressPath::ReadBack => X,
            StressPath::EditConnection => 2,
            // Their own rows (an invoice's, a product's sync lock): seldom.
            StressPath::ConvergeInvoice | StressPath::SyncProduct => X,
            StressPath::ExpireGrantActivity
            | StressPath::StartGrantActivity
            | StressPath::RunSiteRequestActivity
            | StressPath::ListPlanActBatch
            | StressPath::EnactObligation
            | StressPath::RecordMoveFailure
            | StressPath::LastProbe => 0,
        }
    }
}

/// A small deterministic generator (xorshift64), so a task's choices follow from the seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: neighbouring seeds give unrelated streams, and never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Every picked path once, in a random order, so that a short run tries the rare ones too (a
/// tier act is picked about once in 200): the ones that act on what a plan act left (a running
/// act to drain, a failed move to retry) last, after the round's default change and reorder, and
/// DrainChange right after the round's rule change.
pub fn opening_round(rng: &mut Rng) -> Vec<StressPath> {
    let mut paths: Vec<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
    for i in (1..paths.len()).rev() {
        paths.swap(i, rng.below(i + 1));
    }
    let after = |p: &StressPath| matches!(p, StressPath::DrainPlanAct | StressPath::RetryPlanAct);
    paths.sort_by_key(after);
    // DrainChange right after the round's rule change, while that change may still be draining
    // (the workers' drain of a short run's few pools is quick, and with nothing draining the act
    // is skipped).
    if let Some(i) = paths.iter().position(|p| *p == StressPath::DrainChange) {
        paths.remove(i);
        let commit = paths.iter().position(|p| *p == StressPath::RuleChangeBatchCommit).map_or(0, |j| j + 1);
        paths.insert(commit, StressPath::DrainChange);
    }
    paths
}

/// The path picker: one path at random, by weight.
pub fn pick_path(rng: &mut Rng) -> StressPath {
    let total: u64 = StressPath::ALL.iter().map(|p| p.weight()).sum();
    let mut n = rng.next_u64() % total;
    for p in StressPath::ALL {
        if n < p.weight() {
            return p;
        }
        n -= p.weight();
    }
    unreachable!("the weights add up to total")
}
