//! The lock-order registry: every path's declaration, from the services and the job queue that
//! declare them next to their code. It sits above them (nothing below imports it), so `db` knows
//! the locks and the graph, and nothing of the paths.

use crate::db::locks::PathLocks;

/// Every path's declaration. A path that takes locks and is missing here is a bug.
pub fn declared() -> Vec<&'static PathLocks> {
    vec![
        &crate::services::auth::SIGN_IN_LOCKS,
        &crate::services::mail_limits::RESERVE_MAIL_SEND_LOCKS,
        // Issue 38, the account page and the operators' accounts.
        &crate::services::account_settings::CHANGE_PASSWORD_LOCKS,
        &crate::services::account_settings::REQUEST_EMAIL_CHANGE_LOCKS,
        &crate::services::account_settings::DELETE_ACCOUNT_LOCKS,
        &crate::services::operator_accounts::DISABLE_ACCOUNT_LOCKS,
        &crate::services::operator_accounts::ENABLE_ACCOUNT_LOCKS,
        &crate::services::operator_accounts::CHANGE_OPERATOR_LOCKS,
        &crate::jobs::queue::CLAIM_LOCKS,
        &crate::jobs::schedule::FIRE_SCHEDULES_LOCKS,
        &crate::services::organizations::CREATE_ORGANIZATION_LOCKS,
        &crate::services::entitlements::CONFER_GRANT_LOCKS,
        &crate::services::entitlements::END_CONFERRAL_LOCKS,
        &crate::services::entitlements::MATERIALIZE_POOL_LOCKS,
        &crate::services::entitlements::REGISTER_PROVIDERS_LOCKS,
        &crate::services::entitlements::SYNC_SOURCE_STATUS_LOCKS,
        &crate::services::entitlements::UPDATE_CONFERRAL_BOUNDS_LOCKS,
        &crate::services::catalog::UPDATE_PRODUCT_LOCKS,
        &crate::services::catalog::CHANGE_PRODUCT_SET_LOCKS,
        &crate::services::grants::ISSUE_GRANT_LOCKS,
        &crate::services::grants::REVOKE_GRANT_LOCKS,
        &crate::services::grants::EXPIRE_GRANT_LOCKS,
        &crate::services::grants::START_GRANT_LOCKS,
        &crate::services::grants::MANAGE_GRANT_LOCKS,
        &crate::services::grants::EXTEND_WAITING_GRANT_LOCKS,
        &crate::services::rule_changes::RULE_CHANGE_COMMIT_LOCKS,
        &crate::services::rule_changes::LIST_CHANGE_LOCKS,
        &crate::services::rule_changes::DRAIN_CHANGE_LOCKS,
        &crate::services::rule_changes::RECORD_FAILURE_LOCKS,
        &crate::services::rule_changes::RETRY_RULE_CHANGE_LOCKS,
        &crate::services::topology::ADD_TIER_LOCKS,
        &crate::services::topology::DELETE_TIER_LOCKS,
        &crate::services::topology::REMOVE_TIER_LOCKS,
        &crate::services::topology::REORDER_PLAN_LADDERS_LOCKS,
        &crate::services::plan_acts::CHANGE_DEFAULT_T0_LOCKS,
        &crate::services::plan_acts::REORDER_TIERS_T0_LOCKS,
        &crate::services::plan_acts::LIST_BATCH_LOCKS,
        &crate::services::plan_acts::ENACT_OBLIGATION_LOCKS,
        &crate::services::plan_acts::RECORD_MOVE_FAILURE_LOCKS,
        &crate::services::plan_acts::LAST_PROBE_LOCKS,
        &crate::services::plan_acts::RETRY_PLAN_ACT_LOCKS,
        &crate::services::organizations::COMPACT_COUNTS_LOCKS,
        &crate::services::billing::reconcile::RECONCILE_SUBSCRIPTION_LOCKS,
        &crate::services::billing::invoices::CONVERGE_INVOICE_LOCKS,
        &crate::services::billing::catalog_sync::SYNC_PRODUCT_LOCKS,
        &crate::services::billing::catalog_sync::SET_PRICE_LOCKS,
        &crate::services::billing::catalog_sync::RECORD_PRODUCT_SYNC_LOCKS,
        &crate::services::billing::outbox::CLAIM_OUTBOX_LOCKS,
        &crate::services::fedwiki::registry::PLACE_SITE_NAME_LOCKS,
        &crate::services::fedwiki::registry::RELEASE_SITE_NAME_LOCKS,
        // Issue 40, domains verified by DNS.
        &crate::services::fedwiki::verification::VERIFY_DOMAIN_LOCKS,
        &crate::services::fedwiki::verification::EXPIRE_PENDING_CLAIM_LOCKS,
        &crate::services::fedwiki::verification::RECHECK_DOMAIN_LOCKS,
        &crate::services::fedwiki::registry::ENSURE_FARM_ZONE_LOCKS,
        &crate::services::fedwiki::intake::RECORD_LIFECYCLE_REQUEST_LOCKS,
        &crate::services::fedwiki::intake::RECORD_FIRST_LIFECYCLE_REQUEST_LOCKS,
        &crate::services::fedwiki::intake::DELETE_UNSTARTED_LIFECYCLE_REQUEST_LOCKS,
        &crate::services::fedwiki::handlers::CHANGE_STATUS_LOCKS,
        &crate::services::fedwiki::handlers::CHANGE_STATUS_WITH_COOLDOWN_LOCKS,
        &crate::services::fedwiki::handlers::SWAP_ACTIVE_SITE_LOCKS,
        &crate::services::fedwiki::handlers::KEEP_ACTIVE_LOCKS,
        &crate::services::fedwiki::gate::HOLD_SITE_SLOT_LOCKS,
        &crate::services::fedwiki::record::RECORD_CREATED_SITE_LOCKS,
        &crate::services::fedwiki::record::RECORD_SITE_STATUS_LOCKS,
        &crate::services::fedwiki::record::RECORD_SWAP_LOCKS,
        &crate::services::fedwiki::record::FINISH_LIFECYCLE_REQUESTS_LOCKS,
        &crate::services::fedwiki::record::DELETE_FEDWIKI_SITE_LOCKS,
        &crate::services::fedwiki::callbacks::RECEIVE_FARM_CALLBACK_LOCKS,
        &crate::services::fedwiki::domains::CLAIM_DOMAIN_LOCKS,
        &crate::services::fedwiki::domains::PLACE_SITE_UNDER_DOMAIN_LOCKS,
        &crate::services::fedwiki::domains::RELEASE_DOMAIN_LOCKS,
        &crate::services::fedwiki::domains::STOP_SERVING_LOCKS,
        &crate::services::fedwiki::maintenance::SYNC_INSERT_SITE_LOCKS,
        &crate::services::fedwiki::maintenance::SYNC_OBSERVE_SITE_LOCKS,
        &crate::services::fedwiki::maintenance::SYNC_WRITE_STATUS_LOCKS,
        &crate::services::fedwiki::maintenance::SYNC_REMOVE_SYSTEM_SITE_LOCKS,
        &crate::services::fedwiki::maintenance::RECOUNT_ALL_LOCKS,
        &crate::services::fedwiki::maintenance::SYNC_PLACEMENT_LOCKS,
        &crate::services::fedwiki::maintenance::PURGE_ARCHIVED_SITE_LOCKS,
        &crate::services::fedwiki::maintenance::PARK_SITE_LOCKS,
        &crate::services::fedwiki::maintenance::REACTIVATE_SITE_LOCKS,
        &crate::services::fedwiki::repair::RECONCILE_DOMAINS_LOCKS,
        &crate::services::billing::reconcile::SUPERSEDE_RELEASED_DOWNGRADES_LOCKS,
        &crate::services::billing::resume::RESUME_SUBSCRIPTION_LOCKS,
        &crate::services::catalog::SET_PRODUCT_SEATS_LOCKS,
        // Issue 39, a resource key's name and unit.
        &crate::services::catalog::RENAME_RESOURCE_KEY_LOCKS,
        &crate::services::billing::plan_changes::PAUSED_SWITCH_BACKSTOP_LOCKS,
        &crate::services::desired_state::relay::CLAIM_NOTICES_LOCKS,
        &crate::services::desired_state::relay::RECOMPUTE_ADDRESS_LOCKS,
        &crate::services::desired_state::dispatch::DISPATCH_LOCKS,
        &crate::services::desired_state::dispatch::WRITE_PUSH_ANSWER_LOCKS,
        &crate::services::desired_state::read_back::READ_BACK_ITEM_LOCKS,
        &crate::services::desired_state::connections::EDIT_CONNECTION_LOCKS,
        &crate::services::observability::SAMPLE_LOCKS,
        // Issue 38, sign-up, verification and password reset.
        &crate::services::signup::CHOOSE_SIGNUP_TYPE_LOCKS,
        &crate::services::signup::SIGN_UP_LOCKS,
        &crate::services::signup::USE_EMAIL_TOKEN_LOCKS,
        &crate::services::signup::MAIL_ACCOUNT_LINK_LOCKS,
        &crate::services::signup::RESET_PASSWORD_LOCKS,
        // Issue 38, members: an organization's members and its invitations.
        &crate::services::members::CHANGE_MEMBERSHIP_LOCKS,
        &crate::services::invitations::INVITE_LOCKS,
        &crate::services::invitations::RESEND_INVITATION_LOCKS,
        &crate::services::invitations::REVOKE_INVITATION_LOCKS,
        &crate::services::invitations::ACCEPT_INVITATION_LOCKS,
    ]
}

/// One of the 63 paths of the spec (`shared/spec/database-locks.md`), numbered in the order the
/// spec describes them: the declarations that are it, and the trace markers of a sub-step or
/// branch that has none. Stress counts it as observed when its trace shows any of their names.
#[derive(Debug)]
pub struct SpecPath {
    pub number: u8,
    pub name: &'static str,
    pub declarations: &'static [&'static PathLocks],
    pub markers: &'static [&'static str],
}

impl SpecPath {
    /// The names the trace shows it by: its declarations' paths and its markers.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.declarations.iter().map(|d| d.path).chain(self.markers.iter().copied())
    }
}

use crate::{db::trace::steps, services as S};

/// The spec's 63 paths, in its order (docs/database-locks.md numbers them the same way).
pub static SPEC_PATHS: &[SpecPath] = &[
    SpecPath {
        number: 1,
        name: "Rule change commit (RuleChangeBatchCommit)",
        declarations: &[&S::rule_changes::RULE_CHANGE_COMMIT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 2,
        name: "Drain (DrainChange)",
        declarations: &[&S::rule_changes::DRAIN_CHANGE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 3,
        name: "recordObligationFailure",
        declarations: &[&S::rule_changes::RECORD_FAILURE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 4,
        name: "Issue or confer a grant (ConferGrantTx; IssueGrant)",
        declarations: &[&S::entitlements::CONFER_GRANT_LOCKS, &S::grants::ISSUE_GRANT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 5,
        name: "Revoke (RevokeGrantTx)",
        declarations: &[&S::grants::REVOKE_GRANT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 6,
        name: "Expire (ExpireGrantTx)",
        declarations: &[&S::grants::EXPIRE_GRANT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 7,
        name: "Extend a waiting grant (ExtendWaitingGrantTx)",
        declarations: &[&S::grants::EXTEND_WAITING_GRANT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 8,
        name: "Manage (ManageGrantTx)",
        declarations: &[&S::grants::MANAGE_GRANT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 9,
        name: "The reconcile requests (RequestPoolSubscriptionReconciles)",
        declarations: &[],
        markers: &[steps::REQUEST_POOL_SUBSCRIPTION_RECONCILES],
    },
    SpecPath {
        number: 10,
        name: "Deliver displaced subscriptions (DeliverDisplacedSubscriptionsTx)",
        declarations: &[],
        markers: &[steps::DELIVER_DISPLACED_SUBSCRIPTIONS],
    },
    SpecPath {
        number: 11,
        name: "Resume replaced grants (ResumeReplacedGrantsTx)",
        declarations: &[],
        markers: &[steps::RESUME_REPLACED_GRANTS],
    },
    SpecPath {
        number: 12,
        name: "Subscription reconcile, active branch (reconcileItems)",
        declarations: &[],
        markers: &[steps::RECONCILE_ACTIVE],
    },
    SpecPath {
        number: 13,
        name: "supersedeReleasedDowngrades",
        declarations: &[&S::billing::reconcile::SUPERSEDE_RELEASED_DOWNGRADES_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 14,
        name: "Subscription reconcile, ended branch",
        declarations: &[],
        markers: &[steps::RECONCILE_ENDED],
    },
    SpecPath {
        number: 15,
        name: "Subscription reconcile, suspended branch (reconcileSuspended)",
        declarations: &[],
        markers: &[steps::RECONCILE_SUSPENDED],
    },
    SpecPath {
        number: 16,
        name: "The collection pause (ApplySubscriptionCollection)",
        declarations: &[],
        markers: &[steps::APPLY_SUBSCRIPTION_COLLECTION],
    },
    SpecPath {
        number: 17,
        name: "The paused switch's backstop (upgradeNow)",
        declarations: &[&S::billing::plan_changes::PAUSED_SWITCH_BACKSTOP_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 18,
        name: "Resume plan (ResumeSubscription)",
        declarations: &[&S::billing::resume::RESUME_SUBSCRIPTION_LOCKS],
        markers: &[],
    },
    SpecPath { number: 19, name: "Tier add", declarations: &[&S::topology::ADD_TIER_LOCKS], markers: &[] },
    SpecPath { number: 20, name: "Tier removal", declarations: &[&S::topology::REMOVE_TIER_LOCKS], markers: &[] },
    SpecPath { number: 21, name: "Tier delete", declarations: &[&S::topology::DELETE_TIER_LOCKS], markers: &[] },
    SpecPath {
        number: 22,
        name: "Default change T0",
        declarations: &[&S::plan_acts::CHANGE_DEFAULT_T0_LOCKS],
        markers: &[],
    },
    SpecPath { number: 23, name: "Reorder T0", declarations: &[&S::plan_acts::REORDER_TIERS_T0_LOCKS], markers: &[] },
    SpecPath {
        number: 24,
        name: "The listing (ListPlanActBatch)",
        declarations: &[&S::plan_acts::LIST_BATCH_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 25,
        name: "One organization's move (EnactObligation)",
        declarations: &[&S::plan_acts::ENACT_OBLIGATION_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 26,
        name: "Recording a failed move",
        declarations: &[&S::plan_acts::RECORD_MOVE_FAILURE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 27,
        name: "The act's last probe (DrainPlanAct)",
        declarations: &[&S::plan_acts::LAST_PROBE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 28,
        name: "Retry (RetryPlanAct)",
        declarations: &[&S::plan_acts::RETRY_PLAN_ACT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 29,
        name: "ReorderPlanLadders",
        declarations: &[&S::topology::REORDER_PLAN_LADDERS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 30,
        name: "Invoice reconcile (invoiceReconcile.converge)",
        declarations: &[&S::billing::invoices::CONVERGE_INVOICE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 31,
        name: "Product sync (catalogsync.Sync)",
        declarations: &[
            &S::billing::catalog_sync::SYNC_PRODUCT_LOCKS,
            &S::billing::catalog_sync::RECORD_PRODUCT_SYNC_LOCKS,
        ],
        markers: &[],
    },
    SpecPath {
        number: 32,
        name: "Swap (withWorkspaceTx, swapActiveSite)",
        declarations: &[&S::fedwiki::handlers::SWAP_ACTIVE_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 33,
        name: "changeStatus with a cooldown",
        declarations: &[&S::fedwiki::handlers::CHANGE_STATUS_WITH_COOLDOWN_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 34,
        name: "changeStatus without a cooldown",
        declarations: &[&S::fedwiki::handlers::CHANGE_STATUS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 35,
        name: "The slot gate (HoldSiteSlotActivity)",
        declarations: &[&S::fedwiki::gate::HOLD_SITE_SLOT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 36,
        name: "finishAllWith (the record step's frame)",
        declarations: &[],
        markers: &[steps::FINISH_ALL_WITH],
    },
    SpecPath {
        number: 37,
        name: "RecordCreatedSiteActivity",
        declarations: &[&S::fedwiki::record::RECORD_CREATED_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 38,
        name: "RecordSiteStatusActivity",
        declarations: &[&S::fedwiki::record::RECORD_SITE_STATUS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 39,
        name: "RecordSwapActivity",
        declarations: &[&S::fedwiki::record::RECORD_SWAP_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 40,
        name: "RecordSiteDeletedActivity / FinishLifecycleRequestsActivity",
        declarations: &[&S::fedwiki::record::FINISH_LIFECYCLE_REQUESTS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 41,
        name: "DeleteFedWikiSiteActivity",
        declarations: &[&S::fedwiki::record::DELETE_FEDWIKI_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 42,
        name: "Park (parkSite, sweepLocally)",
        declarations: &[&S::fedwiki::maintenance::PARK_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 43,
        name: "Reactivate (reactivateSite)",
        declarations: &[&S::fedwiki::maintenance::REACTIVATE_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 44,
        name: "Recount at boot (usage.RecountAll from the domains reconciliation)",
        declarations: &[],
        markers: &[steps::RECOUNT_AT_BOOT],
    },
    SpecPath {
        number: 45,
        name: "Settle (SettleOpenRequests)",
        declarations: &[],
        markers: &[steps::SETTLE_OPEN_REQUESTS],
    },
    SpecPath {
        number: 46,
        name: "Status reconcile (ReconcileFedWikiSiteStatusWorkflow)",
        declarations: &[],
        markers: &[steps::STATUS_RECONCILE],
    },
    SpecPath {
        number: 47,
        name: "Provider registration (RegisterProviders)",
        declarations: &[&S::entitlements::REGISTER_PROVIDERS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 48,
        name: "Domains reconciliation at boot",
        declarations: &[&S::fedwiki::repair::RECONCILE_DOMAINS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 49,
        name: "Retention purge (purgeArchivedSite)",
        declarations: &[&S::fedwiki::maintenance::PURGE_ARCHIVED_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 50,
        name: "Sync: a farm site with no row",
        declarations: &[&S::fedwiki::maintenance::SYNC_INSERT_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 51,
        name: "Sync: listed status equals the row's",
        declarations: &[&S::fedwiki::maintenance::SYNC_OBSERVE_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 52,
        name: "Sync: writeStatus",
        declarations: &[&S::fedwiki::maintenance::SYNC_WRITE_STATUS_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 53,
        name: "Sync: a farm-absent System row",
        declarations: &[&S::fedwiki::maintenance::SYNC_REMOVE_SYSTEM_SITE_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 54,
        name: "Sync: the end of the pass (usage.RecountAll)",
        declarations: &[],
        markers: &[steps::SYNC_END_OF_PASS],
    },
    SpecPath {
        number: 55,
        name: "RecordLifecycleRequest",
        declarations: &[&S::fedwiki::intake::RECORD_LIFECYCLE_REQUEST_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 56,
        name: "RecordFirstLifecycleRequest",
        declarations: &[&S::fedwiki::intake::RECORD_FIRST_LIFECYCLE_REQUEST_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 57,
        name: "DeleteUnstartedLifecycleRequest",
        declarations: &[&S::fedwiki::intake::DELETE_UNSTARTED_LIFECYCLE_REQUEST_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 58,
        name: "Relay claim (ClaimDesiredStateOutbox)",
        declarations: &[&S::desired_state::relay::CLAIM_NOTICES_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 59,
        name: "One recompute (recomputeAddress; readBackItem, writePushAnswer)",
        declarations: &[
            &S::desired_state::relay::RECOMPUTE_ADDRESS_LOCKS,
            &S::desired_state::read_back::READ_BACK_ITEM_LOCKS,
            &S::desired_state::dispatch::WRITE_PUSH_ANSWER_LOCKS,
        ],
        markers: &[],
    },
    SpecPath {
        number: 60,
        name: "Dispatch stamp (StampDesiredStateRecordsDispatched)",
        declarations: &[&S::desired_state::dispatch::DISPATCH_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 61,
        name: "Registry: flag-only corrections by the site trigger",
        declarations: &[],
        markers: &[steps::FLAG_ONLY_CORRECTIONS],
    },
    SpecPath {
        number: 62,
        name: "Registry: boot and sync placement creators (GetSiteForPlacement)",
        declarations: &[&S::fedwiki::maintenance::SYNC_PLACEMENT_LOCKS],
        markers: &[],
    },
    SpecPath {
        number: 63,
        name: "Registry.WithLock (every mutating allocation)",
        declarations: &[
            &S::fedwiki::registry::PLACE_SITE_NAME_LOCKS,
            &S::fedwiki::registry::RELEASE_SITE_NAME_LOCKS,
            &S::fedwiki::registry::ENSURE_FARM_ZONE_LOCKS,
            &S::fedwiki::domains::CLAIM_DOMAIN_LOCKS,
            &S::fedwiki::domains::PLACE_SITE_UNDER_DOMAIN_LOCKS,
            &S::fedwiki::domains::RELEASE_DOMAIN_LOCKS,
            &S::fedwiki::domains::STOP_SERVING_LOCKS,
        ],
        markers: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::locks::find_cycle;

    #[test]
    fn the_spec_has_63_paths_each_with_a_name_the_trace_can_show() {
        assert_eq!(SPEC_PATHS.len(), 63);
        for (i, p) in SPEC_PATHS.iter().enumerate() {
            assert_eq!(p.number as usize, i + 1);
            assert!(p.names().next().is_some(), "path {} has neither a declaration nor a marker", p.number);
        }
        // Every declaration a spec path names is in the registry.
        let declared: Vec<&str> = declared().iter().map(|d| d.path).collect();
        for p in SPEC_PATHS {
            for d in p.declarations {
                assert!(declared.contains(&d.path), "{} is not in lock_paths::declared()", d.path);
            }
        }
    }

    #[test]
    fn the_declared_paths_have_no_cycle() {
        let paths = declared();
        assert!(find_cycle(&paths).is_none(), "possible deadlock: {:?}", find_cycle(&paths));
    }
}
