//! The lock-order registry: every path's declaration, from the services and the job queue that
//! declare them next to their code. It sits above them (nothing below imports it), so `db` knows
//! the locks and the graph, and nothing of the paths.

use crate::db::locks::PathLocks;

/// Every path's declaration. A path that takes locks and is missing here is a bug.
pub fn declared() -> Vec<&'static PathLocks> {
    vec![
        &crate::services::auth::SIGN_IN_LOCKS,
        &crate::jobs::queue::CLAIM_LOCKS,
        &crate::jobs::schedule::FIRE_SCHEDULES_LOCKS,
        &crate::services::organizations::CREATE_ORGANIZATION_LOCKS,
        &crate::services::entitlements::CONFER_GRANT_LOCKS,
        &crate::services::entitlements::END_CONFERRAL_LOCKS,
        &crate::services::entitlements::MATERIALIZE_POOL_LOCKS,
        &crate::services::entitlements::REGISTER_PROVIDERS_LOCKS,
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
        &crate::services::billing::plan_changes::PAUSED_SWITCH_BACKSTOP_LOCKS,
        &crate::services::desired_state::relay::CLAIM_NOTICES_LOCKS,
        &crate::services::desired_state::relay::RECOMPUTE_ADDRESS_LOCKS,
        &crate::services::desired_state::dispatch::DISPATCH_LOCKS,
        &crate::services::desired_state::dispatch::WRITE_PUSH_ANSWER_LOCKS,
        &crate::services::desired_state::read_back::READ_BACK_ITEM_LOCKS,
        &crate::services::desired_state::connections::EDIT_CONNECTION_LOCKS,
        &crate::services::observability::SAMPLE_LOCKS,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::locks::find_cycle;

    #[test]
    fn the_declared_paths_have_no_cycle() {
        let paths = declared();
        assert!(find_cycle(&paths).is_none(), "possible deadlock: {:?}", find_cycle(&paths));
    }
}
