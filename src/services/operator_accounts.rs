//! The operators' accounts: the list (search and pages), one account's page, disable and enable,
//! and who is an operator. Every act is recorded as an account event naming the operator.

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace,
        tx::within_for,
    },
    ids::AccountId,
    services::ServiceError,
    store::{
        account_admin::{self as store, AccountListRow, SessionRow},
        account_events::{self, AccountEvent, AccountEventKind},
        accounts::{self, Membership},
        paging::{Page, Seek},
    },
};

/// Accounts per page of the operators' list.
pub const ACCOUNTS_PER_PAGE: i64 = 50;
/// A search counts its matches no further than this.
pub const SEARCH_COUNT_CAP: i64 = 1000;
/// Events shown on an account's page.
pub const EVENTS_SHOWN: i64 = 100;

/// One page of the list and how many accounts match: exactly, or at least (`true`: the count
/// stopped at the cap).
pub struct AccountList {
    pub page: Page<AccountListRow>,
    pub total: (u64, bool),
}

#[tracing::instrument(name = "Read accounts", skip_all)]
pub async fn accounts(db: &Db, prefix: &str, seek: Seek) -> Result<AccountList, ServiceError> {
    let mut c = db.read().await?;
    let q = prefix.trim();
    let page = store::accounts_page(c.conn(), q, ACCOUNTS_PER_PAGE, seek).await?;
    let n = store::accounts_matching(c.conn(), q, SEARCH_COUNT_CAP + 1).await?;
    Ok(AccountList { page, total: (n.min(SEARCH_COUNT_CAP) as u64, n > SEARCH_COUNT_CAP) })
}

/// One account as its operator's page shows it.
pub struct AccountDetail {
    pub facts: AccountListRow,
    pub memberships: Vec<Membership>,
    pub sessions: Vec<SessionRow>,
    pub events: Vec<AccountEvent>,
}

#[tracing::instrument(name = "Read an account", skip_all, fields(account_id = %id))]
pub async fn account(db: &Db, id: AccountId) -> Result<Option<AccountDetail>, ServiceError> {
    let mut c = db.read().await?;
    let Some(facts) = store::account_facts(c.conn(), id).await? else { return Ok(None) };
    Ok(Some(AccountDetail {
        facts,
        memberships: accounts::memberships(c.conn(), id).await?,
        sessions: store::sessions_of(c.conn(), id, None).await?,
        events: account_events::events_of(c.conn(), id, EVENTS_SHOWN).await?,
    }))
}

pub static DISABLE_ACCOUNT_LOCKS: PathLocks = PathLocks {
    path: "Disable an account",
    function: "services::operator_accounts::disable_account",
    kind: "Plain",
    locks: &[Lock::AccountRow, Lock::OrganizationRow],
    why: "The account row FOR NO KEY UPDATE, then the rows of the organizations it owns, ascending, FOR NO \
          KEY UPDATE (the members part's lock, as \"Delete an account\" takes them), under which the other \
          owners not disabled are counted: an organization keeps one, whoever disables or demotes at once. \
          Its sessions are deleted and the event inserted after.",
};

/// Disable an account: it cannot sign in, and its sessions end. Refused for the operator's own
/// account, and while it is the last owner not disabled of an organization (naming them).
#[tracing::instrument(name = "Disable an account", skip_all, fields(account_id = %id, by = %by))]
pub async fn disable_account(db: &Db, by: AccountId, id: AccountId) -> Result<(), ServiceError> {
    if by == id {
        return Err(ServiceError::Refused(
            "You cannot disable your own account; another operator can, if it must be.".into(),
        ));
    }
    within_for(db, TxKind::Plain, &DISABLE_ACCOUNT_LOCKS, async |tx: &mut Tx| {
        let a = store::lock_account(tx.conn(), id).await?;
        trace::note(tx.conn(), Lock::AccountRow, id.0, Some(id.0)).await?;
        let a = a.filter(|a| !a.deleted).ok_or(ServiceError::NotFound("account"))?;
        if a.disabled {
            return Ok(());
        }
        let owned = store::lock_owned_organizations(tx.conn(), id).await?;
        trace::note_rows(tx.conn(), Lock::OrganizationRow, owned.iter().map(|o| (o.0, Some(o.0)))).await?;
        let sole = store::sole_owned(tx.conn(), id, &owned).await?;
        if !sole.is_empty() {
            let names: Vec<String> = sole.iter().map(|(_, n)| format!("“{n}”")).collect();
            return Err(ServiceError::Refused(format!(
                "{} was not disabled: it is the last owner not disabled of {}. Make another member an owner there \
                 first; then disable it.",
                a.email,
                names.join(", ")
            )));
        }
        store::set_disabled(tx.conn(), id, true).await?;
        accounts::delete_sessions_of(tx.conn(), id).await?;
        account_events::record(tx.conn(), id, Some(by), AccountEventKind::Disabled, None, "").await?;
        Ok(())
    })
    .await
}

pub static ENABLE_ACCOUNT_LOCKS: PathLocks = PathLocks {
    path: "Enable an account",
    function: "services::operator_accounts::enable_account",
    kind: "Plain",
    locks: &[Lock::AccountRow],
    why: "The account row FOR NO KEY UPDATE, its disabled mark cleared; the event inserted after.",
};

/// Enable a disabled account: it may sign in again.
#[tracing::instrument(name = "Enable an account", skip_all, fields(account_id = %id, by = %by))]
pub async fn enable_account(db: &Db, by: AccountId, id: AccountId) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &ENABLE_ACCOUNT_LOCKS, async |tx: &mut Tx| {
        let a = store::lock_account(tx.conn(), id).await?;
        trace::note(tx.conn(), Lock::AccountRow, id.0, Some(id.0)).await?;
        let a = a.filter(|a| !a.deleted).ok_or(ServiceError::NotFound("account"))?;
        if !a.disabled {
            return Ok(());
        }
        store::set_disabled(tx.conn(), id, false).await?;
        account_events::record(tx.conn(), id, Some(by), AccountEventKind::Enabled, None, "").await?;
        Ok(())
    })
    .await
}

pub static CHANGE_OPERATOR_LOCKS: PathLocks = PathLocks {
    path: "Change who is an operator",
    function: "services::operator_accounts::set_operator",
    kind: "Plain",
    locks: &[Lock::AccountRow],
    why: "Every operator's account row and the target's, FOR NO KEY UPDATE in ascending account_id order, in \
          one statement; then the operators are counted. Two operators demoting each other at once: the \
          second waits for the first, and once it has the rows the first's demotion is seen (the acting \
          operator is no longer one), so one operator is always left.",
};

/// Make `id` an operator, or not. Nobody demotes themselves, the last operator cannot be demoted,
/// and an operator demoted meanwhile cannot act.
#[tracing::instrument(name = "Change who is an operator", skip_all, fields(account_id = %id, by = %by, operator))]
pub async fn set_operator(db: &Db, by: AccountId, id: AccountId, operator: bool) -> Result<(), ServiceError> {
    if by == id && !operator {
        return Err(ServiceError::Refused(
            "You cannot take away your own operator role; another operator can, if it must be.".into(),
        ));
    }
    within_for(db, TxKind::Plain, &CHANGE_OPERATOR_LOCKS, async |tx: &mut Tx| {
        let locked = store::lock_operators_and(tx.conn(), id).await?;
        trace::note_rows(tx.conn(), Lock::AccountRow, locked.iter().map(|a| (a.account_id.0, Some(a.account_id.0))))
            .await?;
        let live = |a: &&store::LockedAccount| a.is_operator && !a.disabled && !a.deleted;
        if !locked.iter().filter(live).any(|a| a.account_id == by) {
            return Err(ServiceError::Refused(
                "You are no longer an operator (another operator changed that meanwhile), so nothing was changed."
                    .into(),
            ));
        }
        let target = locked.iter().find(|a| a.account_id == id).filter(|a| !a.deleted);
        let target = target.ok_or(ServiceError::NotFound("account"))?;
        if target.is_operator == operator {
            return Ok(());
        }
        if operator && target.disabled {
            return Err(ServiceError::Refused(format!(
                "{} is disabled; enable it first, then make it an operator.",
                target.email
            )));
        }
        if !operator && !locked.iter().filter(live).any(|a| a.account_id != id) {
            return Err(ServiceError::Refused(format!(
                "{} is the console's last operator, so it stays one. Make another account an operator first.",
                target.email
            )));
        }
        store::set_operator(tx.conn(), id, operator).await?;
        let kind = if operator { AccountEventKind::OperatorGranted } else { AccountEventKind::OperatorRevoked };
        account_events::record(tx.conn(), id, Some(by), kind, None, "").await?;
        Ok(())
    })
    .await
}
