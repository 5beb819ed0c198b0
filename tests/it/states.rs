//! The states and kinds the code matches on (`member_console::states`) are exactly the values the
//! migrated database's CHECK constraints allow: a value the code does not know would fail to
//! decode, one the database does not allow would fail to write.

use crate::common;

use common::TestDb;
use member_console::states::{
    BillingInterval, GrantKind, GrantStatus, InvoiceStatus, JobState, KeyKind, PlanActKind, PlanActState,
    RuleChangeState, SubscriptionStatus, SyncState,
};

/// The values of the column's `CHECK (column = ANY (ARRAY[...]))` constraint, sorted.
async fn allowed(t: &TestDb, table: &str, column: &str) -> Vec<String> {
    let defs: Vec<String> = t
        .all(
            sqlx::query_scalar(
                "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
         JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
         WHERE c.contype = 'c' AND c.conrelid = $1::regclass AND a.attname = $2",
            )
            .bind(table)
            .bind(column),
        )
        .await;
    let prefix = format!("CHECK (({column} = ANY (ARRAY[");
    let def = defs
        .iter()
        .find(|d| d.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{table}.{column} has no list of values: {defs:?}"));
    let mut values: Vec<String> = def.split('\'').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>();
    values.sort();
    values
}

fn texts(all: impl IntoIterator<Item = &'static str>) -> Vec<String> {
    let mut v: Vec<String> = all.into_iter().map(str::to_string).collect();
    v.sort();
    v
}

#[tokio::test]
async fn every_state_enum_names_exactly_the_values_its_column_allows() {
    let t = TestDb::new().await;
    let cases = [
        ("core.grants", "status", texts(GrantStatus::ALL.iter().map(|s| s.as_str()))),
        ("core.grants", "kind", texts(GrantKind::ALL.iter().map(|s| s.as_str()))),
        ("core.resource_keys", "kind", texts(KeyKind::ALL.iter().map(|s| s.as_str()))),
        ("core.entitlement_set_changes", "state", texts(RuleChangeState::ALL.iter().map(|s| s.as_str()))),
        ("core.plan_acts", "kind", texts(PlanActKind::ALL.iter().map(|s| s.as_str()))),
        ("core.plan_acts", "state", texts(PlanActState::ALL.iter().map(|s| s.as_str()))),
        ("integration.jobs", "state", texts(JobState::ALL.iter().map(|s| s.as_str()))),
        ("core.subscriptions", "status", texts(SubscriptionStatus::ALL.iter().map(|s| s.as_str()))),
        ("billing.prices", "sync_state", texts(SyncState::ALL.iter().map(|s| s.as_str()))),
        ("billing.product_mappings", "sync_state", texts(SyncState::ALL.iter().map(|s| s.as_str()))),
        ("billing.prices", "billing_interval", texts(BillingInterval::ALL.iter().map(|s| s.as_str()))),
        ("billing.invoices", "status", texts(InvoiceStatus::ALL.iter().map(|s| s.as_str()))),
    ];
    for (table, column, code) in cases {
        assert_eq!(allowed(&t, table, column).await, code, "{table}.{column}");
    }
}
